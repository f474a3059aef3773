"""`python -m faults.chaos_supervisor`: the supervisor as a process of its own, for the chaos
run (`faults.chaos_stack`), with the configuration in `SWITCHYARD_CONFIG`.

Each pool runs under a target of its `target_copies`, so a drained copy is replaced, as a
Deployment replaces a pod; SIGTERM or SIGINT stops the servers and exits."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from config.settings import load_config
from server_host.ports import ConfiguredPorts
from server_host.signals import stop_on_signals
from supervisor.supervisor_thread import SupervisorThread


def main() -> int:
    path = Path(os.environ["SWITCHYARD_CONFIG"])
    config = load_config(path)
    pool_ids = [pid for pid, pool in config.pools.items() if pool.target_copies > 0]
    supervisor = SupervisorThread(config, ConfiguredPorts(config), pool_ids=pool_ids, config_path=path)
    with stop_on_signals() as stop:
        supervisor.start()
        for pool_id in pool_ids:
            supervisor.set_target(pool_id, config.pools[pool_id].target_copies)
        while not stop.wait(1.0):
            if not supervisor.alive():
                return 1
        supervisor.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
