"""`create_app()`: the gateway's FastAPI application.

Nothing happens at import time. `create_app` wires routes, error handlers and a Prometheus
registry; the lifespan loads `switchyard.yaml`, the models' tokenizers and the backend (one
Triton gRPC client per pool), and tears them down at shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gateway.backend import BackendFactory, GenerationBackend
from gateway.catalog import ModelCatalog
from gateway.deps import Services
from gateway.errors import install_error_handlers
from gateway.generation import GenerationService
from gateway.metrics import GatewayMetrics
from gateway.requests_registry import RequestRegistry
from gateway.routes import api_router
from gateway.settings import GatewaySettings
from switchyard.config import SwitchyardConfig, load_config


def triton_backend_factory(config: SwitchyardConfig, settings: GatewaySettings) -> GenerationBackend:
    """The production backend: Triton's `llm` model over gRPC, one client per pool."""
    from gateway.triton_backend import TritonBackend  # tritonclient is heavy; load it only here

    return TritonBackend.from_config(config, host=settings.triton_host, retry_after_s=settings.retry_after_s)


def create_app(
    settings: GatewaySettings | None = None,
    backend_factory: BackendFactory | None = None,
    config: SwitchyardConfig | None = None,
) -> FastAPI:
    """Build the gateway app.

    `settings` default to the environment (`SWITCHYARD_*`); `backend_factory` to Triton;
    `config`, when given, is used instead of loading `settings.config` (the CLI has loaded it).
    """
    settings = settings if settings is not None else GatewaySettings()
    make_backend = backend_factory if backend_factory is not None else triton_backend_factory

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loaded = config if config is not None else load_config(settings.config)
        catalog = ModelCatalog.load(loaded)
        backend = make_backend(loaded, settings)
        registry = RequestRegistry(backend, app.state.metrics, cancel_grace_s=settings.cancel_grace_s)
        app.state.services = Services(loaded, catalog, backend, registry, GenerationService(catalog, registry))
        try:
            yield
        finally:
            del app.state.services
            await registry.close()
            await backend.close()

    app = FastAPI(title="Switchyard gateway", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.metrics = GatewayMetrics()
    install_error_handlers(app)
    app.include_router(api_router)
    return app
