"""The environment variables a switchyard process reads, as typed settings read in one place.

A process reads its environment once, where it starts (a CLI command, `python -m bulk`), and
passes the values down as arguments: nothing below an entry point reads `os.environ`, so a
test or a bench sets a value by passing it, and a typo in a variable is a validation error at
start rather than a default taken in silence deep inside.

    SWITCHYARD_CONFIG        switchyard.yaml to load (`python -m bulk`; the gateway's own
                             settings, gateway/settings.py, read it for `python -m gateway`)
    SWITCHYARD_ADMIN_KEY     the admin key, over var/admin-api-key (the dispatcher, the gateway)
    SWITCHYARD_API_KEY       a team's key for the CLI's client commands (`batches`, `load`)
    SWITCHYARD_GATEWAY_URL   where the dispatcher submits (default: the file's gateway address)
    SWITCHYARD_WORKERS       the gateway's worker processes under `switchyard up`
    SWITCHYARD_TRITON_ROOT   a full Triton install to run (NGC's /opt/tritonserver) instead of
                             the wheel's (`switchyard triton`, so every server a supervisor starts)

A variable set to blanks counts as unset, as an empty `SWITCHYARD_ADMIN_KEY=` in a manifest
means "no key here, read the file".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SwitchyardEnvironment(BaseSettings):
    """The `SWITCHYARD_*` variables above (unset: None, each reader's default applies)."""

    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_", frozen=True, extra="ignore")

    config: Path | None = None
    admin_key: str | None = None
    api_key: str | None = None
    gateway_url: str | None = None
    workers: Annotated[int, Field(ge=1, le=64)] | None = None
    triton_root: Path | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value


def variable_name(settings: type[BaseSettings], field: str) -> str:
    """The environment variable `settings` reads `field` from: its alias when it has one (as
    prometheus-client's PROMETHEUS_MULTIPROC_DIR), else the class's prefix and the name."""
    alias = settings.model_fields[field].validation_alias
    if isinstance(alias, str):
        return alias
    return f"{settings.model_config.get('env_prefix', '')}{field}".upper()


def environment_variables(settings: BaseSettings) -> dict[str, str]:
    """`settings` written back as the variables its class reads, so that a child process that
    reads its settings from the environment (uvicorn's workers) gets these same values. Unset
    (None) fields are left out: the child takes the default, as the parent did."""
    variables = {}
    for field in type(settings).model_fields:
        value = getattr(settings, field)
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, dict, tuple, set)):
            text = json.dumps(value if not isinstance(value, (tuple, set)) else list(value))
        else:
            text = str(value)
        variables[variable_name(type(settings), field)] = text
    return variables
