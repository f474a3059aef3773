"""The web console at /console: teams see their usage and batches; operators keys and fleet.

Server-rendered Jinja2 pages over the API's own stores and route functions, a session cookie
instead of a key (sessions.py), a small script for live parts and upload progress, SVG charts
drawn on the server. Nothing is built or fetched from outside. docs/console.md has the tour.

    create_app:  install_console(app)                  routes, and how refusals are answered
    lifespan:    open_console(app, config, client, key_cache, capacity)
"""

from __future__ import annotations

import redis.asyncio
from fastapi import APIRouter, FastAPI

from config.settings import SwitchyardConfig
from fleet_state.load_board import LoadBoard
from fleet_state.pool_targets import PoolTargetStore
from gateway.console import batch_routes, fleet_routes, key_routes, signin_routes, usage_routes
from gateway.console.access import CONSOLE_STATE, ConsoleRefusal, ConsoleState, on_console_refusal
from gateway.console.pages import ConsolePages
from gateway.console.sessions import SessionStore
from gateway.edge_keys import KeyCache
from quota.capacity import CapacitySource


def console_router() -> APIRouter:
    router = APIRouter()
    for part in (signin_routes, usage_routes, batch_routes, key_routes, fleet_routes):
        router.include_router(part.router)
    return router


def install_console(app: FastAPI) -> None:
    """Add the console's routes and its refusal handler to `app` (from `create_app`)."""
    app.include_router(console_router())
    app.add_exception_handler(ConsoleRefusal, on_console_refusal)


def open_console(
    app: FastAPI,
    config: SwitchyardConfig,
    client: redis.asyncio.Redis,
    keys: KeyCache,
    capacity: CapacitySource,
) -> ConsoleState:
    """Build what the console reads from, over the lifespan's Redis client (from the lifespan)."""
    state = ConsoleState(
        config=config,
        pages=ConsolePages(),
        sessions=SessionStore(client, keys.store),
        keys=keys.store,
        key_cache=keys,
        load_board=LoadBoard(client),
        targets=PoolTargetStore(client),
        capacity=capacity,
    )
    setattr(app.state, CONSOLE_STATE, state)
    return state


__all__ = ["console_router", "install_console", "open_console"]
