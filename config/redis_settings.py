"""`redis:` in switchyard.yaml: where shared state lives and how each component logs in.

Every Redis client of ours is made by `config.redis_client` from these settings, never from a
URL built by hand: it carries the component's ACL user and password, and TLS with the CA and
client certificate when `tls` is on. With `sentinels` (docs/redis.md) a client asks them where
the primary is and follows a failover; without, it connects to `host:port`.

    redis:
      host: redis.example.internal
      port: 6380
      tls: true                       # rediss://
      ca_file: /etc/ssl/redis-ca.pem  # verify the server against this CA
      cert_file: /etc/ssl/client.pem  # a client certificate, when the server asks for one
      key_file: /etc/ssl/client.key
      users:                          # a managed Redis's own users, instead of ours
        gateway: {username: sy-gw, password_file: /run/secrets/redis-gw}
      sentinels:                      # sentinel mode: host/port above are then unused
        - {host: sentinel-0.example.internal, port: 26379}
        - {host: sentinel-1.example.internal, port: 26379}
      master_name: switchyard
      replica_acks: 1                 # sentinel mode's default: WAIT for one replica
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from pydantic import BaseModel, ConfigDict, Field

from config.internal_secrets import RedisComponent, read_secret, redis_password_file


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RedisUser(_Strict):
    """One component's login when it is not ours (`<component>`, password in secrets_dir)."""

    username: str
    password_file: str  # relative to the config's folder, or absolute


class SentinelAddress(_Strict):
    """One sentinel's address."""

    host: str
    port: Annotated[int, Field(ge=1, le=65535)] = 26379


class RedisSpec(_Strict):
    """Where shared state lives. `make up` starts a local redis-server on this port, on
    127.0.0.1 only, with one ACL user per component and the `default` user off."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 6390
    db: Annotated[int, Field(ge=0)] = 0
    # False: connect without credentials (a Redis that is protected some other way).
    auth: bool = True
    users: dict[RedisComponent, RedisUser] = {}
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    # Sentinel mode (docs/redis.md): the sentinels that watch the primary `master_name` and its
    # replicas. Each component logs in to them as its own user, with its own password.
    sentinels: tuple[SentinelAddress, ...] = ()
    master_name: str = "switchyard"
    # How often each client asks the sentinels whether its connections still go to the
    # primary (config/sentinel_primary.py): a client that only reads learns of a primary
    # replaced behind a partition within this. 0: only when a write is refused.
    primary_check_s: Annotated[float, Field(ge=0, le=60)] = 1.0
    # The writes a failover must not lose (a request id's claim and end, usage) wait until
    # this many replicas hold them (WAIT), for at most `replica_ack_timeout_ms` each
    # (config/replica_acks.py). None: 1 in sentinel mode, 0 with one address. A replica on a
    # saturated host answered later than 200 ms in `bench partitions` (a spurious 503 "not
    # durable"); 500 ms is what a cut-off replica costs each durable write before NOREPLICAS.
    replica_acks: Annotated[int, Field(ge=0, le=16)] | None = None
    replica_ack_timeout_ms: Annotated[int, Field(ge=1, le=10_000)] = 500
    # Connections per client (config/redis_client.py): a bounded pool that waits up to
    # `pool_timeout_s` for a free connection instead of opening more, so a process's
    # connections never grow with its requests in flight (docs/capacity.md sizes maxclients).
    max_connections: Annotated[int, Field(ge=2, le=1024)] = 32
    pool_timeout_s: Annotated[float, Field(gt=0, le=60)] = 2.0
    # A silent peer is noticed in seconds: TCP keepalive probes after this idle time, and
    # a pooled connection idle longer than `health_check_s` is PINGed before it is reused.
    keepalive_idle_s: Annotated[int, Field(ge=1, le=600)] = 5
    health_check_s: Annotated[float, Field(ge=0, le=600)] = 10.0
    # A command whose reply is this late fails (keepalive probes do not run while a sent
    # command waits for its ACK: without this, a host gone dark holds it for TCP's ~15 min of
    # retransmissions), and a connection not made within `connect_timeout_s` fails (an
    # unanswered SYN would wait ~2 min). A call site may pass its own (`socket_timeout=`).
    socket_timeout_s: Annotated[float, Field(gt=0, le=600)] = 5.0
    connect_timeout_s: Annotated[float, Field(gt=0, le=600)] = 2.0
    # The redis-server that `make up` starts: at most this many clients (the arithmetic:
    # docs/capacity.md).
    maxclients: Annotated[int, Field(ge=64, le=1_000_000)] = 4096

    @property
    def acks_required(self) -> int:
        """How many replicas must hold a durable write (`replica_acks`, or its default)."""
        if self.replica_acks is not None:
            return self.replica_acks
        return 1 if self.sentinels else 0

    @property
    def address(self) -> str:
        """Where Redis is, for messages: never a credential."""
        if self.sentinels:
            hosts = ",".join(f"{s.host}:{s.port}" for s in self.sentinels)
            return f"sentinel://{hosts}/{self.master_name}/{self.db}"
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/{self.db}"

    def login_for(self, component: RedisComponent, *, root: Path, secrets_path: Path) -> tuple[str, str] | None:
        """`component`'s user and password (None when `auth` is off)."""
        if not self.auth:
            return None
        user = self.users.get(component)
        if user is None:
            return component, read_secret(secrets_path / redis_password_file(component))
        return user.username, read_secret(root / user.password_file)

    def _tls_files(self, root: Path) -> dict[str, str]:
        """redis-py's SSL connection arguments for the configured files (none without TLS)."""
        return {
            name: str(root / value)
            for name, value in (
                ("ssl_ca_certs", self.ca_file),
                ("ssl_certfile", self.cert_file),
                ("ssl_keyfile", self.key_file),
            )
            if self.tls and value is not None
        }

    def connection_options(self, component: RedisComponent, *, root: Path, secrets_path: Path) -> dict[str, Any]:
        """redis-py connection arguments for `component` (login, db, TLS): what a Sentinel
        client connects to the primary and to the sentinels with."""
        options: dict[str, Any] = {"db": self.db}
        login = self.login_for(component, root=root, secrets_path=secrets_path)
        if login is not None:
            options["username"], options["password"] = login
        if self.tls:
            options["ssl"] = True
            options.update(self._tls_files(root))
        return options

    def url_for(self, component: RedisComponent, *, root: Path, secrets_path: Path) -> str:
        """The URL `component` connects with (single-address mode): its user and password, TLS
        files as query parameters (redis-py's `from_url` passes them to the SSL connection)."""
        scheme = "rediss" if self.tls else "redis"
        login = ""
        credentials = self.login_for(component, root=root, secrets_path=secrets_path)
        if credentials is not None:
            username, password = credentials
            login = f"{quote(username, safe='')}:{quote(password, safe='')}@"
        query = self._tls_files(root)
        suffix = f"?{urlencode(query)}" if query else ""
        return f"{scheme}://{login}{self.host}:{self.port}/{self.db}{suffix}"

    def with_absolute_paths(self, root: Path) -> RedisSpec:
        """The same settings with every file path absolute (for a config written elsewhere)."""

        def absolute(value: str | None) -> str | None:
            return None if value is None else str((root / value).resolve())

        users = {
            component: user.model_copy(update={"password_file": absolute(user.password_file)})
            for component, user in self.users.items()
        }
        return self.model_copy(
            update={
                "users": users,
                "ca_file": absolute(self.ca_file),
                "cert_file": absolute(self.cert_file),
                "key_file": absolute(self.key_file),
            }
        )
