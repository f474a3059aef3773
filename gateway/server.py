"""Run the gateway under uvicorn: what `switchyard gateway` and `python -m gateway` call."""

from __future__ import annotations

import uvicorn

from gateway.app import create_app
from gateway.settings import GatewaySettings
from switchyard.config import SwitchyardConfig, load_config


def serve(
    config: SwitchyardConfig,
    host: str | None = None,
    port: int | None = None,
    settings: GatewaySettings | None = None,
) -> None:
    """Serve until interrupted. Address: the arguments, else `SWITCHYARD_HOST`/`_PORT`, else
    the file's `gateway:` section."""
    settings = settings if settings is not None else GatewaySettings()
    app = create_app(settings, config=config)
    uvicorn.run(
        app,
        host=host or settings.host or config.gateway.host,
        port=port or settings.port or config.gateway.port,
        log_level="info",
        # SSE replies carry their own keep-alive comments; don't cut slow clients short.
        timeout_keep_alive=30,
    )


def main() -> None:
    settings = GatewaySettings()
    serve(load_config(settings.config), settings=settings)
