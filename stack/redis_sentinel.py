"""Redis that survives losing its primary: a primary, replicas and Sentinel (docs/redis.md).

    RedisReplicaSet(ports=[p0, p1], sentinel_ports=[s0, s1, s2])
      redis-server :p0  primary ─── async replication ───▶ redis-server :p1  replica
            ▲  ▲                     (user `replication`)           ▲
            │  └──────────── INFO, PING, hello channel ─────────────┤ (user `sentinel`)
      redis-sentinel :s0   redis-sentinel :s1   redis-sentinel :s2   quorum 2
            ▲
      clients ask "where is the primary of `switchyard`?" (config/redis_client.py)

When a majority of sentinels stop hearing from the primary for `down_after_ms`, they elect a
leader, which promotes the replica (`REPLICAOF NO ONE`) and tells the others; a client's next
connection goes to the new primary, and a connection to the demoted one gets READONLY, which
makes it reconnect. A restarted old primary is turned into a replica of the new one.

Every node runs as RedisServer does (ACL file, append-only), with `min-replicas-to-write 1`:
a primary that has not heard from its replica for `min_replicas_max_lag_s` refuses writes
(NOREPLICAS), so a primary cut off from the replica and the sentinels cannot go on taking
writes that the promoted replica will not have (docs/redis.md). Each sentinel gets a config of its
own (0600, written once: the sentinel rewrites it with what it learns, such as the current
primary, so a restarted sentinel does not point clients at the old one).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from server_host.process import ManagedProcess, wait_until
from stack.redis_server import RedisServer
from stack.secret_files import SENTINEL_USER, SecretFiles, ensure_secret_files, sentinel_user_lines

DEFAULT_MASTER_NAME = "switchyard"
# A primary refuses writes once its replica's last acknowledgement (sent every second) is older
# than this: well inside the sentinels' down-after (5 s in the chaos runs), so a primary cut off
# from its replica stops writing before the replica can be promoted over it.
MIN_REPLICAS_MAX_LAG_S = 3
# How often a sentinel pings each node, and asks the other sentinels about a primary it sees
# down (`SENTINEL DEBUG`, Redis >= 7.0; 1000 ms each by default, and not settable in the config
# file). A primary that went silent is seen down `down-after` + up to one ping period after its
# last reply, and objectively down (quorum) up to one ask period later: at 200 ms a failover
# starts within ~0.4 s of `down-after` rather than ~2 s. A sentinel then sends ~15 PINGs a
# second; the failover's own steps wait on INFO every second, which no setting changes.
PING_PERIOD_MS = 200
ASK_PERIOD_MS = 200
# How often a sentinel publishes its hello (its view of the primary, with the config epoch) on
# every node and to the other sentinels: 2000 ms by default. From the promotion on, the leader
# of a failover advertises the promoted replica in its hellos, and every other sentinel
# switches to it on the first one it hears; the leader itself switches only when the last
# replica is reconfigured, ~1 s later on INFO. Clients ask any sentinel (redis-py takes the
# first that names a primary up). The leader says hello at the promotion; when the others miss
# it (one split brain in three in `bench partitions`) the next comes a period later: at 200 ms
# clients follow within ~0.2 s of the promotion, not at the leader's last step (1.45 s after
# it). 25 hellos a second per sentinel to our five peers.
PUBLISH_PERIOD_MS = 200


@dataclass(frozen=True)
class Placement:
    """Where one node or sentinel runs: the address it binds, and a prefix for its command line
    (`ip netns exec NAME`: a host of its own in a partition test; empty: this host)."""

    host: str
    launcher: tuple[str, ...] = ()


class RedisSentinel:
    """One `redis-sentinel` watching `primary` under `master_name`."""

    def __init__(
        self,
        port: int,
        data_dir: Path,
        log_path: Path,
        *,
        secrets_dir: Path,
        primary: tuple[str, int],
        master_name: str = DEFAULT_MASTER_NAME,
        quorum: int = 2,
        down_after_ms: int = 5000,
        failover_timeout_ms: int = 60000,
        host: str = "127.0.0.1",
        launcher: Sequence[str] = (),
    ) -> None:
        binary = shutil.which("redis-sentinel")
        server = shutil.which("redis-server")
        if binary is None and server is None:
            raise RuntimeError("redis-sentinel is not installed: run `make up` (installs it with apt)")
        command = [binary] if binary is not None else [str(server), "--sentinel"]
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
        self.host = host
        self.port = port
        self.master_name = master_name
        self.secrets: SecretFiles = ensure_secret_files(secrets_dir)
        config_path = data_dir / "sentinel.conf"
        if not config_path.exists():
            settings = sentinel_config(
                self.secrets,
                host=host,
                port=port,
                data_dir=data_dir.resolve(),
                primary=primary,
                master_name=master_name,
                quorum=quorum,
                down_after_ms=down_after_ms,
                failover_timeout_ms=failover_timeout_ms,
            )
            fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(settings)
        self._process = ManagedProcess("redis-sentinel", [*launcher, *command, str(config_path.resolve())], log_path)

    def _client(self) -> redis.Redis:
        return redis.Redis(
            host=self.host,
            port=self.port,
            username="admin",
            password=self.secrets.redis_passwords["admin"],
            socket_timeout=0.5,
        )

    def ping(self) -> bool:
        try:
            with self._client() as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def primary(self) -> tuple[str, int] | None:
        """Where this sentinel says the primary is now (None: it does not answer)."""
        try:
            with self._client() as client:
                address: Any = client.sentinel_get_master_addr_by_name(self.master_name)
        except redis.RedisError:
            return None
        if not address:
            return None
        host, port = address
        return (host.decode() if isinstance(host, bytes) else str(host)), int(port)

    def start(self, timeout_s: float = 15.0) -> None:
        self._process.start()
        if not wait_until(lambda: self.ping() or not self._process.alive(), timeout_s) or not self.ping():
            tail = self._process.log_tail()
            self._process.stop()
            raise RuntimeError(f"redis-sentinel did not become ready on port {self.port}:\n{tail}")
        with self._client() as client:  # kept in memory only: set again at every start
            client.execute_command(
                "SENTINEL", "DEBUG", "ping-period", PING_PERIOD_MS, "ask-period", ASK_PERIOD_MS,
                "publish-period", PUBLISH_PERIOD_MS,
            )  # fmt: skip

    def timings(self) -> dict[str, int]:
        """The sentinel's timing parameters (`SENTINEL DEBUG`), in ms, by lower-case name."""
        with self._client() as client:
            reply: Any = client.execute_command("SENTINEL", "DEBUG")
        items = list(reply.items()) if isinstance(reply, dict) else list(zip(reply[::2], reply[1::2], strict=True))
        return {(k.decode() if isinstance(k, bytes) else str(k)).lower(): int(v) for k, v in items}

    def stop(self) -> None:
        self._process.stop()


def sentinel_config(
    secrets: SecretFiles,
    *,
    host: str,
    port: int,
    data_dir: Path,
    primary: tuple[str, int],
    master_name: str,
    quorum: int,
    down_after_ms: int,
    failover_timeout_ms: int,
) -> str:
    """A sentinel's config: what it watches, how it logs in to the data nodes and its peers
    (user `sentinel`), and its own users (stack/secret_files.py)."""
    name = master_name
    lines = [
        f"bind {host}",
        f"port {port}",
        f"dir {data_dir}",
        f"sentinel monitor {name} {primary[0]} {primary[1]} {quorum}",
        f"sentinel down-after-milliseconds {name} {down_after_ms}",
        f"sentinel failover-timeout {name} {failover_timeout_ms}",
        f"sentinel parallel-syncs {name} 1",
        f"sentinel auth-user {name} {SENTINEL_USER}",
        f"sentinel auth-pass {name} {secrets.sentinel_password}",
        f"sentinel sentinel-user {SENTINEL_USER}",
        f"sentinel sentinel-pass {secrets.sentinel_password}",
        *sentinel_user_lines(secrets),
    ]
    return "\n".join(lines) + "\n"


class RedisReplicaSet:
    """A primary, its replicas and sentinels on this machine, all on `host` (tests, `make up`
    with `redis.sentinels`: its `redis.host`), or each where `nodes_at` / `sentinels_at` place
    it (one placement per port). `nodes[0]` starts as the primary."""

    def __init__(
        self,
        ports: list[int],
        sentinel_ports: list[int],
        root: Path,
        *,
        secrets_dir: Path,
        master_name: str = DEFAULT_MASTER_NAME,
        down_after_ms: int = 5000,
        failover_timeout_ms: int = 60000,
        host: str,
        min_replicas_to_write: int = 1,
        min_replicas_max_lag_s: int = MIN_REPLICAS_MAX_LAG_S,
        nodes_at: Sequence[Placement] | None = None,
        sentinels_at: Sequence[Placement] | None = None,
    ) -> None:
        if len(ports) < 2 or not sentinel_ports:
            raise ValueError("a replica set needs a primary, a replica and at least one sentinel")
        nodes_at = list(nodes_at) if nodes_at is not None else [Placement(host)] * len(ports)
        sentinels_at = list(sentinels_at) if sentinels_at is not None else [Placement(host)] * len(sentinel_ports)
        if len(nodes_at) != len(ports) or len(sentinels_at) != len(sentinel_ports):
            raise ValueError("give one placement per node and per sentinel")
        self._placements = dict(zip(ports, nodes_at, strict=True))
        primary = (nodes_at[0].host, ports[0])
        self._root = root
        self._secrets_dir = secrets_dir
        self._min_replicas = (min_replicas_to_write, min_replicas_max_lag_s)
        self.nodes = [self._node(port, None if i == 0 else primary) for i, port in enumerate(ports)]
        self.sentinels = [
            RedisSentinel(
                port,
                root / f"sentinel-{port}",
                root / f"sentinel-{port}.log",
                secrets_dir=secrets_dir,
                primary=primary,
                master_name=master_name,
                quorum=len(sentinel_ports) // 2 + 1,
                down_after_ms=down_after_ms,
                failover_timeout_ms=failover_timeout_ms,
                host=placement.host,
                launcher=placement.launcher,
            )
            for port, placement in zip(sentinel_ports, sentinels_at, strict=True)
        ]
        self.master_name = master_name

    def _node(self, port: int, replica_of: tuple[str, int] | None) -> RedisServer:
        root = self._root
        placement = self._placements[port]
        return RedisServer(
            port,
            root / f"redis-{port}",
            root / f"redis-{port}.log",
            secrets_dir=self._secrets_dir,
            host=placement.host,
            replica_of=replica_of,
            min_replicas_to_write=self._min_replicas[0],
            min_replicas_max_lag_s=self._min_replicas[1],
            launcher=placement.launcher,
        )

    def rejoin(self, node: RedisServer, timeout_s: float = 60.0) -> RedisServer:
        """Start `node` (killed or stopped) again as a replica of the primary the sentinels
        name now, as a restarted pod asks them on boot, and wait until it has synced; returns
        the node as it runs now (it replaces `node` in `nodes`). When they still name `node`
        itself (a restart quicker than their `down_after`), it starts as the primary again.

        Started plainly, an old primary comes back a primary of its own, holding what it had
        when it died, until the sentinels demote it; a failover in between may promote it and
        drop every write since (seen in the chaos run: a second failover two seconds after
        the first promoted the returning node)."""
        primary = self.primary()
        if primary is None:
            raise RuntimeError("the sentinels agree on no primary: nothing to rejoin")
        own = (node.host, node.port)
        again = self._node(node.port, None if primary == own else primary)
        again.start()
        self.nodes[self.nodes.index(node)] = again
        if primary != own and not wait_until(lambda: replica_in_sync(again), timeout_s):
            raise RuntimeError(f"redis :{node.port} did not sync with the primary {primary} within {timeout_s:.0f} s")
        return again

    def redis_settings(self) -> dict[str, Any]:
        """The `redis:` settings that reach this set through its sentinels."""
        first = self.nodes[0]
        return {
            "host": first.host,
            "port": first.port,
            "sentinels": [{"host": s.host, "port": s.port} for s in self.sentinels],
            "master_name": self.master_name,
        }

    def primary(self) -> tuple[str, int] | None:
        """The primary a majority of the sentinels agree on (None: no majority answers)."""
        answers = [s.primary() for s in self.sentinels]
        for answer in set(answers):
            if answer is not None and answers.count(answer) > len(self.sentinels) // 2:
                return answer
        return None

    def start(self, timeout_s: float = 30.0) -> None:
        for node in self.nodes:
            node.start()
        # The replicas are in sync before anyone relies on them.
        for replica in self.nodes[1:]:
            if not wait_until(lambda r=replica: replica_in_sync(r), timeout_s):  # type: ignore[misc]
                raise RuntimeError(f"replica on port {replica.port} did not sync with the primary")
        for sentinel in self.sentinels:
            sentinel.start()

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for node in self.nodes:
            node.stop()


def replica_in_sync(replica: RedisServer) -> bool:
    """The replica's link to its primary is up (it has synced and follows the stream)."""
    try:
        with redis.Redis.from_url(replica.url, socket_timeout=0.5) as client:
            info: dict[str, Any] = client.info("replication")
    except redis.RedisError:
        return False
    return info.get("master_link_status") == "up"
