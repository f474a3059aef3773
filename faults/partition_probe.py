"""`python -m faults.partition_probe OUT`: acknowledged writes, counted (the partition run).

Run on a gateway's host, as the gateway writes its claims, final records and usage: one
durable write every PERIOD_S through `ReplicaAcks` (the script, then WAIT for the replicas
`redis:` asks for) to the primary the sentinels name, following failovers as the gateway's
client does. Each write the client was told is done is appended to OUT (one id a line,
flushed) before the next starts; refusals (NotReplicated, NOREPLICAS, READONLY, a timeout)
are not. After the run every id in OUT must be on the final primary: the acknowledged writes
a partition lost are the ones missing (faults.partition_run).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import redis

from config.redis_client import redis_client
from config.replica_acks import ReplicaAcks
from config.settings import load_config
from server_host.signals import stop_on_signals

ACKED_KEY = "sy:bench:partition-acked"
PERIOD_S = 0.1
_RECORD = "redis.call('SADD', KEYS[1], ARGV[1]) return 1"


async def _write_until(stop: threading.Event, out: Path) -> None:
    config = load_config(Path(os.environ["SWITCHYARD_CONFIG"]))
    client = redis_client(config, "gateway", socket_timeout=2.0)
    acks = ReplicaAcks.from_settings(config.redis)
    script = client.register_script(_RECORD)
    n = 0
    with out.open("a") as acked:
        while not stop.is_set():
            n += 1
            write_id = f"{os.getpid()}-{n}"
            try:
                await acks.run(client, script, [ACKED_KEY], [write_id])
            except (redis.RedisError, OSError):
                pass  # refused or unreachable: not acknowledged, so not owed
            else:
                acked.write(write_id + "\n")
                acked.flush()
            await asyncio.sleep(PERIOD_S)
    await client.aclose()


def main() -> int:
    out = Path(sys.argv[1])
    with stop_on_signals() as stop:
        asyncio.run(_write_until(stop, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
