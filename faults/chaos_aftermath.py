"""What the chaos run checks once the load has stopped: the state nothing may keep.

leases_left()     KV leases in Redis (`sy:pool:{pool}:owned|borrowed`, quota/lease_scripts.py)
kv_held()         servers whose engine still holds KV blocks (free != capacity)
orphans()         processes of this run's stack still alive after it stopped (their
                  environment names its configuration file)
shm_left()        /dev/shm regions of this run's servers (`switchyard-{server}-...`)
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import redis

from contracts.engine_metrics import parse_kv_cache


def leases_left(client: redis.Redis) -> list[str]:
    """Every team's tokens still leased, per pool (empty when all were released or lapsed)."""
    left = []
    for key in client.scan_iter(match="sy:pool:*", count=1000):
        name = key.decode() if isinstance(key, bytes) else str(key)
        if not name.endswith((":owned", ":borrowed")):
            continue
        for team, tokens in client.hgetall(name).items():  # type: ignore[union-attr]
            if int(tokens) != 0:
                left.append(f"{name} {team!r}={int(tokens)}")
    return left


def kv_held(metrics_urls: dict[str, str]) -> list[str]:
    held = []
    for server_id, url in metrics_urls.items():
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                kv = parse_kv_cache(reply.read().decode())
        except OSError as exc:
            held.append(f"{server_id}: metrics unreadable ({exc})")
            continue
        if kv.free_tokens != kv.capacity_tokens:
            held.append(f"{server_id}: {kv.capacity_tokens - kv.free_tokens} KV tokens held")
    return held


def orphans(var_dir: Path, proc: Path = Path("/proc")) -> list[str]:
    """Live processes whose SWITCHYARD_CONFIG lies under `var_dir` (every part of the stack's does)."""
    marker = f"SWITCHYARD_CONFIG={var_dir.resolve()}/".encode()
    found = []
    for entry in proc.glob("[0-9]*"):
        try:
            if not any(item.startswith(marker) for item in (entry / "environ").read_bytes().split(b"\0")):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if state != "Z":
            found.append(f"pid {entry.name}: {cmdline[:120]}")
    return found


def shm_left(server_ids: list[str], shm: Path = Path("/dev/shm")) -> list[str]:
    return sorted(str(p) for sid in server_ids for p in shm.glob(f"switchyard-{sid}-*"))
