"""Every HTTP route of the gateway, one router per resource, aggregated here."""

from fastapi import APIRouter, Depends

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

api_router = APIRouter()
# Every /v1 route needs a team's (or the admin's) API key; health and metrics stay open.
_authenticated = [Depends(get_principal)]
api_router.include_router(generate.router, dependencies=_authenticated)
api_router.include_router(openai_completions.router, dependencies=_authenticated)
api_router.include_router(openai_chat.router, dependencies=_authenticated)
api_router.include_router(models.router, dependencies=_authenticated)
api_router.include_router(batches.router, dependencies=_authenticated)
api_router.include_router(files.router, dependencies=_authenticated)
api_router.include_router(usage.router)
api_router.include_router(servers.router)
api_router.include_router(health.router)
api_router.include_router(metrics.router)

__all__ = ["api_router"]
