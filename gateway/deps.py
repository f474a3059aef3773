"""FastAPI dependencies as `Annotated` aliases: routes declare `registry: RegistryDep` and
never reach into `app.state` themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from bulk.intake import BatchIntake
from config.settings import SwitchyardConfig
from contracts.catalog import ModelCatalog
from contracts.generation import GenerationBackend
from fleet_state.registry import ServerRegistry
from gateway.generation import GenerationService
from gateway.metrics import GatewayMetrics
from gateway.requests_registry import RequestRegistry
from gateway.settings import GatewaySettings
from quota.admission import Admission


@dataclass(frozen=True, slots=True)
class Services:
    """What the lifespan builds: live for as long as the app serves."""

    config: SwitchyardConfig
    catalog: ModelCatalog
    backend: GenerationBackend
    registry: RequestRegistry
    generation: GenerationService
    admission: Admission
    intake: BatchIntake
    servers: ServerRegistry


def get_settings(request: Request) -> GatewaySettings:
    settings = request.app.state.settings
    assert isinstance(settings, GatewaySettings)
    return settings


def get_metrics(request: Request) -> GatewayMetrics:
    metrics = request.app.state.metrics
    assert isinstance(metrics, GatewayMetrics)
    return metrics


def get_services(request: Request) -> Services:
    services = getattr(request.app.state, "services", None)
    if not isinstance(services, Services):
        raise RuntimeError("the gateway's lifespan has not run: serve the app with lifespan enabled")
    return services


def get_catalog(request: Request) -> ModelCatalog:
    return get_services(request).catalog


def get_backend(request: Request) -> GenerationBackend:
    return get_services(request).backend


def get_registry(request: Request) -> RequestRegistry:
    return get_services(request).registry


def get_generation(request: Request) -> GenerationService:
    return get_services(request).generation


def get_admission(request: Request) -> Admission:
    return get_services(request).admission


def get_intake(request: Request) -> BatchIntake:
    return get_services(request).intake


def get_server_registry(request: Request) -> ServerRegistry:
    return get_services(request).servers


SettingsDep = Annotated[GatewaySettings, Depends(get_settings)]
MetricsDep = Annotated[GatewayMetrics, Depends(get_metrics)]
CatalogDep = Annotated[ModelCatalog, Depends(get_catalog)]
BackendDep = Annotated[GenerationBackend, Depends(get_backend)]
RegistryDep = Annotated[RequestRegistry, Depends(get_registry)]
GenerationDep = Annotated[GenerationService, Depends(get_generation)]
AdmissionDep = Annotated[Admission, Depends(get_admission)]
IntakeDep = Annotated[BatchIntake, Depends(get_intake)]
ServerRegistryDep = Annotated[ServerRegistry, Depends(get_server_registry)]
