"""Every HTTP route of the gateway, one router per resource, aggregated here."""

from fastapi import APIRouter

from gateway.routes import generate, health, metrics, models, openai_chat, openai_completions, usage

api_router = APIRouter()
api_router.include_router(generate.router)
api_router.include_router(openai_completions.router)
api_router.include_router(openai_chat.router)
api_router.include_router(models.router)
api_router.include_router(usage.router)
api_router.include_router(health.router)
api_router.include_router(metrics.router)

__all__ = ["api_router"]
