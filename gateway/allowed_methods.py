"""The methods a path really serves, for the `Allow` header of a 405.

Starlette answers a method a route does not serve with 405 and `Allow` naming that one route's
methods. A path served by several routes (`GET /v1/files` and `POST /v1/files` are two) then
got an `Allow` that left out the others, which tells a client (and RFC 9110) that they are not
served either. The 405's handler asks here instead: each method, tried against every route as
the router would try it (`BaseRoute.matches`, which sees through included routers too).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.routing import BaseRoute, Match
from starlette.types import Scope

# RFC 9110's methods (CONNECT aside: no route here could serve it).
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")


def allowed_methods(routes: Iterable[BaseRoute], scope: Scope) -> list[str]:
    """Every method some route serves at the scope's path, in HTTP_METHODS order (HEAD with
    GET, as Starlette serves it); empty when no route has that path."""
    candidates = list(routes)
    return [method for method in HTTP_METHODS if any(_serves(route, scope, method) for route in candidates)]


def _serves(route: BaseRoute, scope: Scope, method: str) -> bool:
    # A fresh scope per try: matching may note what it found in the scope it is given.
    probe: Scope = {"type": "http", "path": scope["path"], "root_path": scope.get("root_path", ""), "method": method}
    match, _ = route.matches(probe)
    return match is Match.FULL
