"""Every HTTP route of the gateway, one router per resource, aggregated here.

The OpenAPI document (`/openapi.json`) says what each route can answer: the bearer key on
every route that needs one, and the error object (contracts/schemas.ErrorBody) for each error
status a route can give. Those every keyed route shares are declared here, a route's own
(404, 409, 502, ...) on the route:

    400  a parameter or body the route refuses (the key is checked first)
    401  no key, or not a valid one
    403  the key may not do this (the admin key without a team, a model not the team's)
    503  the key store is unreachable; retry
    default: any other status (405, 500, ...), still the error object

A generation route adds 404, 409, 413 (a body over the limit), 429 (over the team's share),
502; an upload adds 413.

FastAPI's own 422 never happens (validation errors are 400s), so it is not declared.
"""

from fastapi import APIRouter, Depends

from contracts.schemas import ErrorBody, error_responses
from gateway.auth import get_principal
from gateway.routes import (
    batches,
    files,
    generate,
    health,
    metrics,
    models,
    openai_chat,
    openai_completions,
    servers,
    usage,
)

ResponsesDoc = dict[int | str, dict[str, object]]


def keyed_errors() -> ResponsesDoc:
    """The error responses of every route behind the key, besides its own: 400, 401, 403, 503,
    and the error object for any other status."""
    other = {"model": ErrorBody, "description": "Any other error: the same error object"}
    return {**error_responses(400, 401, 403, 503), "default": other}


api_router = APIRouter()
# Every /v1 route needs a team's (or the admin's) API key; health and metrics stay open.
_authenticated = [Depends(get_principal)]
api_router.include_router(generate.router, dependencies=_authenticated, responses=keyed_errors())
api_router.include_router(openai_completions.router, dependencies=_authenticated, responses=keyed_errors())
api_router.include_router(openai_chat.router, dependencies=_authenticated, responses=keyed_errors())
api_router.include_router(models.router, dependencies=_authenticated, responses=keyed_errors())
api_router.include_router(batches.router, dependencies=_authenticated, responses=keyed_errors())
api_router.include_router(files.router, dependencies=_authenticated, responses=keyed_errors())
api_router.include_router(usage.router, responses=keyed_errors())
api_router.include_router(servers.router, responses=keyed_errors())
api_router.include_router(health.router)
api_router.include_router(metrics.router)

__all__ = ["api_router", "keyed_errors"]
