"""Who a request is for, once its door has resolved the caller's key: a team (with its
settings), or the admin; and the one rule every door applies before a model runs for it
(`require_model_access`). Protocol-free: the HTTP edge (gateway/auth.py) and the gRPC door
resolve keys their own way and hand the serving core a `Principal`."""

from __future__ import annotations

from dataclasses import dataclass

from config.settings import TeamSpec
from contracts.errors import ApiError


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request: a team (with its settings), or the admin (no team)."""

    team_id: str | None
    is_admin: bool = False
    team: TeamSpec | None = None


def forbidden(message: str, param: str | None = None) -> ApiError:
    return ApiError(403, "permission_error", message, param)


def require_model_access(principal: Principal, team_spec: TeamSpec | None, model_id: str) -> str:
    """The team to bill for using `model_id`; 403 when the caller may not use it.

    Pass `principal.team` as `team_spec`. Check that the model exists first (404), so a team
    learns of a typo before it learns of a permission. The admin key has no team, so it cannot
    generate: usage must belong to some team."""
    if principal.team_id is None:
        raise forbidden("the admin key belongs to no team; send a team's API key to use models")
    if team_spec is None:
        raise forbidden(f"team {principal.team_id!r} is not configured in switchyard.yaml")
    if not team_spec.may_use(model_id):
        allowed = ", ".join(team_spec.models) or "none"
        raise forbidden(
            f"team {principal.team_id!r} may not use model {model_id!r}; its models: {allowed} "
            "(an operator lists them under teams.<team>.models in switchyard.yaml)",
            "model",
        )
    return principal.team_id
