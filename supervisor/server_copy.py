"""One server a supervisor runs: its place in the pool (copy index, ports), the process of its
current life, and what the supervisor knows of it (state, liveness, restarts, drain)."""

from __future__ import annotations

from dataclasses import dataclass, field

from config.settings import Ports
from fleet_state.server_health import Liveness
from fleet_state.server_state import ServerState
from server_host.process import ManagedProcess


@dataclass(slots=True)
class ServerCopy:
    """One supervised server: the process of its current life and what is known of it."""

    pool_id: str
    copy: int
    ports: Ports
    dead_after_s: float
    state: ServerState = ServerState.STARTING
    process: ManagedProcess | None = None  # None: dead awaiting its relaunch, or pending its first start
    started_at: float = 0.0  # when its process was launched (what the registry says)
    # When this supervisor began waiting for it to be ready: its launch, or its takeover from
    # an earlier supervisor's life (the startup timeout counts from here, not from started_at).
    watched_since: float = 0.0
    liveness: Liveness = field(init=False)
    failed_starts: int = 0  # in a row, for the relaunch backoff
    relaunch_at: float | None = None
    drain_started_at: float | None = None
    last_failure: str = ""  # why it last died, with its log tail
    epoch: int | None = None  # its current registration's (fleet_state/epochs.py); None: none yet

    def __post_init__(self) -> None:
        self.liveness = Liveness(self.dead_after_s)

    @property
    def server_id(self) -> str:
        return f"{self.pool_id}-{self.copy}"

    @property
    def pending(self) -> bool:
        """Added by a target and not launched yet (waiting out the start delay)."""
        return self.process is None and self.state is ServerState.STARTING

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None
