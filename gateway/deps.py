"""FastAPI dependencies as `Annotated` aliases: routes declare `registry: RegistryDep` and
never reach into `app.state` themselves.

Every dependency and route in the gateway is `async def`: FastAPI runs a plain `def` one on
its thread pool, a hop to a worker thread and back for each request and dependency (~10 % of
a short request's CPU when the getters here were plain functions; tests/gateway/test_deps.py
walks the app for any that is not)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import redis.asyncio as aioredis
from fastapi import Depends, FastAPI, Request
from prometheus_client import CollectorRegistry

from bulk.intake import BatchIntake
from config.settings import SwitchyardConfig
from contracts.catalog import ModelCatalog
from contracts.generation import GenerationBackend
from fleet_state.registry import ServerRegistry
from gateway.settings import GatewaySettings
from quota.admission import Admission
from quota.usage import UsageMeter
from quota.usage_counters import UsageCounters
from serving.generation import GenerationService
from serving.metering import DoorCounters, Metering
from serving.metrics import GatewayMetrics
from serving.requests_registry import RequestRegistry

METERING_STATE = "metering"  # app.state.metering: the Metering of this app
_COUNTERS_STATE = "usage_counters"  # made once per app: a registry refuses a second copy
_DOOR_COUNTERS_STATE = "usage_door_counters"


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
    redis: aioredis.Redis  # the worker's short-command client (readiness pings it)


async def get_settings(request: Request) -> GatewaySettings:
    settings = request.app.state.settings
    assert isinstance(settings, GatewaySettings)
    return settings


async def get_metrics(request: Request) -> GatewayMetrics:
    metrics = request.app.state.metrics
    assert isinstance(metrics, GatewayMetrics)
    return metrics


def services_of(request: Request) -> Services:
    services = getattr(request.app.state, "services", None)
    if not isinstance(services, Services):
        raise RuntimeError("the gateway's lifespan has not run: serve the app with lifespan enabled")
    return services


async def get_catalog(request: Request) -> ModelCatalog:
    return services_of(request).catalog


async def get_backend(request: Request) -> GenerationBackend:
    return services_of(request).backend


async def get_registry(request: Request) -> RequestRegistry:
    return services_of(request).registry


async def get_generation(request: Request) -> GenerationService:
    return services_of(request).generation


async def get_admission(request: Request) -> Admission:
    return services_of(request).admission


async def get_intake(request: Request) -> BatchIntake:
    return services_of(request).intake


async def get_server_registry(request: Request) -> ServerRegistry:
    return services_of(request).servers


def install_metering(app: FastAPI, meter: UsageMeter) -> Metering:
    """Put a `Metering` over `meter` in `app.state.metering` (call from the lifespan). The
    counters go in the registry of `app.state.metrics` and are made once per app, so a
    lifespan that runs twice (tests) does not register them twice."""
    counters = getattr(app.state, _COUNTERS_STATE, None)
    if not isinstance(counters, UsageCounters):
        registry = getattr(getattr(app.state, "metrics", None), "registry", None)
        if not isinstance(registry, CollectorRegistry):
            raise RuntimeError("install_metering needs app.state.metrics (a GatewayMetrics) first")
        counters = UsageCounters(registry)
        setattr(app.state, _COUNTERS_STATE, counters)
        setattr(app.state, _DOOR_COUNTERS_STATE, DoorCounters(registry))
    metering = Metering(meter, counters, getattr(app.state, _DOOR_COUNTERS_STATE, None))
    setattr(app.state, METERING_STATE, metering)
    return metering


async def get_metering(request: Request) -> Metering:
    metering = getattr(request.app.state, METERING_STATE, None)
    if not isinstance(metering, Metering):
        raise RuntimeError("no metering: call serving.metering.install_metering(app, meter) in the lifespan")
    return metering


SettingsDep = Annotated[GatewaySettings, Depends(get_settings)]
MetricsDep = Annotated[GatewayMetrics, Depends(get_metrics)]
CatalogDep = Annotated[ModelCatalog, Depends(get_catalog)]
BackendDep = Annotated[GenerationBackend, Depends(get_backend)]
RegistryDep = Annotated[RequestRegistry, Depends(get_registry)]
GenerationDep = Annotated[GenerationService, Depends(get_generation)]
AdmissionDep = Annotated[Admission, Depends(get_admission)]
IntakeDep = Annotated[BatchIntake, Depends(get_intake)]
ServerRegistryDep = Annotated[ServerRegistry, Depends(get_server_registry)]
MeteringDep = Annotated[Metering, Depends(get_metering)]
