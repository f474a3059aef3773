"""Rendering the console: Jinja2 templates from this package, the headers every page carries,
and the two static files (CSS and the small live-update script) served from the package.

Nothing is fetched from outside: the Content-Security-Policy allows only this origin, no inline
script, no framing; pages are `no-store` (they show a team's private numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from gateway.console.sessions import ConsoleSession

_HERE = Path(__file__).parent
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
STATIC_FILES = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
MAX_PAGE_BYTES = 300 * 1024  # the console's budget for one page (tests hold every page to it)


@dataclass(frozen=True, slots=True)
class NavLink:
    href: str
    label: str


def nav_links(session: ConsoleSession | None) -> list[NavLink]:
    """What the header links to: a team's pages, or the operator's."""
    if session is None:
        return []
    if session.is_admin:
        return [
            NavLink("/console/usage", "Usage"),
            NavLink("/console/keys", "Keys"),
            NavLink("/console/fleet", "Fleet"),
        ]
    return [NavLink("/console/usage", "Usage"), NavLink("/console/batches", "Batches")]


class ConsolePages:
    """The template environment (made once per app, in its lifespan)."""

    def __init__(self) -> None:
        self._env = Environment(
            loader=FileSystemLoader(_HERE / "templates"),
            autoescape=select_autoescape(["html", "svg"], default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters["when"] = format_time
        self._env.filters["age"] = format_age
        self._env.filters["number"] = format_number

    def render(
        self,
        request: Request,
        template: str,
        session: ConsoleSession | None,
        status_code: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        html = self._env.get_template(template).render(
            request_path=request.url.path, session=session, nav=nav_links(session), **context
        )
        return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)

    def fragment(self, template: str, **context: Any) -> HTMLResponse:
        """A piece of a page (what the live-update script swaps in)."""
        return HTMLResponse(self._env.get_template(template).render(**context), headers=SECURITY_HEADERS)


def static_file(name: str) -> Response | None:
    """One of the console's two static files; None for any other name."""
    media_type = STATIC_FILES.get(name)
    if media_type is None:
        return None
    body = (_HERE / "static" / name).read_bytes()
    return Response(body, media_type=media_type, headers={"Cache-Control": "max-age=300", **_STATIC_HEADERS})


_STATIC_HEADERS = {"X-Content-Type-Options": "nosniff"}


def format_time(epoch_s: float | int | None) -> str:
    if epoch_s is None:
        return "—"
    return datetime.fromtimestamp(float(epoch_s), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_age(seconds: float | None) -> str:
    """A duration as people read it: 42 s, 7 min, 3.5 h."""
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def format_number(value: float | int) -> str:
    """Thousands separated; floats to one decimal."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"
