"""Every HTTP route of the gateway, one router per resource, aggregated here."""

from fastapi import APIRouter

from gateway.routes import generate, health, metrics, models

api_router = APIRouter()
api_router.include_router(generate.router)
api_router.include_router(models.router)
api_router.include_router(health.router)
api_router.include_router(metrics.router)

__all__ = ["api_router"]
