"""Fencing: each registration of a server id gets a new epoch, and a write of an older one is
refused, so a server that was only unreachable cannot act as the server after it was replaced.

    sy:epoch:{id}   STRING  the newest epoch given to server id `id` (never deleted)

    supervisor / pod ── register ──▶ epoch 7 ───────── heartbeats, load, state carry 7
    (host cut off; its server judged dead and replaced elsewhere, same id)
    replacement ──── register ──▶ epoch 8
    the old server, back ── heartbeat / load / state with 7 ──▶ refused: Fenced

A replacement always registers (a new epoch) before it serves, and the registry record then
names the replacement's address: gateways route to that and never to the old one, which has
dropped out of the directory the moment the record was replaced (router/server_directory.py
reads the record, not the server). The old one, told `Fenced` by its next write, stops: its
supervisor kills it and forgets it, a self-registered server exits. A write with a *newer*
epoch than the counter (a counter a Redis failover lost) is taken, and moves the counter up.
"""

from __future__ import annotations


def epoch_key(server_id: str) -> str:
    return f"sy:epoch:{server_id}"


class Fenced(Exception):
    """A newer registration holds this server id: the writer is a replaced copy and must stop."""

    def __init__(self, server_id: str, epoch: int) -> None:
        super().__init__(f"server {server_id} epoch {epoch} is fenced: a newer registration holds the id")
        self.server_id = server_id
        self.epoch = epoch


# The Lua prelude of every fenced write: KEYS[n] the epoch counter, `mine` the writer's epoch
# ('' for an unfenced write: an operator's drain). Returns -1 from the script when fenced.
FENCE_CHECK = """
local function fenced(counter_key, mine)
  if mine == '' then return false end
  return tonumber(redis.call('GET', counter_key) or '0') > tonumber(mine)
end
"""
