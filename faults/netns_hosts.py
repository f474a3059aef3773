"""Hosts on one switch: Linux network namespaces bridged in the root one. The partition run's
nine hosts, and the integration tests' hosts of their own (a Redis replica's, a server's).

    root namespace: bridge syp<pid>br 10.232.0.1/24 (the run's clients live here: `root_address`)
        ├─veth─ syp<pid>a  10.232.0.10   (host "gw1")
        ├─veth─ syp<pid>b  10.232.0.11   (host "gw2")
        └─ ...  one namespace per host, each with lo up and one leg on the bridge

Two ways to cut, neither sends a FIN or an RST:

    host.cut()              the host's leg down: it reaches nothing and nothing reaches it
                            (a host powered off, its switch port dead); `host.restore()`
    cut_between(as_, bs)    a blackhole route for each other side in every namespace of both
                            sides (a partition between two groups of hosts, the rest of the
                            switch still working). No packet filter exists here (no nft,
                            iptables, ebtables, and no tc classifiers in this kernel), so a
                            route does it: established connections go quiet, as on a real
                            partition, but a new connect() fails at once (EINVAL) instead of
                            timing out.

Each run of hosts takes a /24 of its own (`subnet`): the partition run 10.232.0, a test one
`process_subnet()` picks by its process id, so runs side by side on one machine do not share a
route. Everything is removed when `bridged_hosts` ends, however it ends; namespaces and bridges
an earlier run left behind (its process gone) are removed at the next start, by this module's
name prefix only. Needs root and `ip netns`: raises `NamespacesUnavailable` otherwise.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

PREFIX = "syp"  # every namespace, veth and bridge made here starts with it (15-character names)
_NAME = re.compile(rf"^{PREFIX}(\d+)(br|[a-z])")
SUBNET = "10.232.0"  # the partition run's private range (/24): the bridge .1, host k .10+k
FIRST_HOST = 10
TEST_RANGE = "10.231"  # the tests' /24s: 10.231.1.0 to 10.231.250.0, one by process id


class NamespacesUnavailable(RuntimeError):
    """This machine or user cannot make network namespaces (not root, no `ip`, no CAP_NET_ADMIN)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=10)
    if check and done.returncode != 0:
        raise NamespacesUnavailable(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done


def process_subnet(range16: str = TEST_RANGE) -> str:
    """A /24 of `range16`.0.0/16 picked by this process's id (its first three octets), for a test
    whose run may share the machine with another's."""
    return f"{range16}.{os.getpid() % 250 + 1}"


@dataclass(frozen=True)
class BridgedHost:
    """One namespace on the bridge: a host with one address and one link."""

    role: str  # what runs there: "gw1", "srv1", "redis0", ...
    name: str  # the namespace
    address: str
    link: str  # the namespace's end of its veth

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run on this host (in its namespace)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """The host's link down: silence both ways, no FIN, no RST."""
        _ip("netns", "exec", self.name, "ip", "link", "set", self.link, "down")

    def restore(self) -> None:
        """The host's link up again."""
        _ip("netns", "exec", self.name, "ip", "link", "set", self.link, "up")


@dataclass
class BridgedNetwork:
    """The hosts of one run, by role, and the cuts made between them."""

    bridge: str
    root_address: str  # the root namespace's address on the bridge: where a host reaches it
    hosts: dict[str, BridgedHost]
    _blackholes: set[tuple[str, str]] = field(default_factory=set)  # (namespace, address)

    def __getitem__(self, role: str) -> BridgedHost:
        return self.hosts[role]

    def cut_between(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """No packet between any host of `side_a` and any of `side_b`, both ways."""
        for a, b in self._pairs(side_a, side_b):
            for here, there in ((a, b), (b, a)):
                if (here.name, there.address) not in self._blackholes:
                    _ip("netns", "exec", here.name, "ip", "route", "add", "blackhole", f"{there.address}/32")
                    self._blackholes.add((here.name, there.address))

    def heal_between(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        for a, b in self._pairs(side_a, side_b):
            for here, there in ((a, b), (b, a)):
                if (here.name, there.address) in self._blackholes:
                    _ip("netns", "exec", here.name, "ip", "route", "del", "blackhole", f"{there.address}/32")
                    self._blackholes.discard((here.name, there.address))

    def heal_all(self) -> None:
        """Every link up and every blackhole gone (the end of a run, or of a failed fault)."""
        for namespace, address in list(self._blackholes):
            _ip("netns", "exec", namespace, "ip", "route", "del", "blackhole", f"{address}/32", check=False)
        self._blackholes.clear()
        for host in self.hosts.values():
            with contextlib.suppress(NamespacesUnavailable):  # the others come up all the same
                host.restore()

    def _pairs(self, side_a: Iterable[str], side_b: Iterable[str]) -> list[tuple[BridgedHost, BridgedHost]]:
        return [(self.hosts[a], self.hosts[b]) for a in side_a for b in side_b if a != b]


def _remove_namespace(name: str) -> None:
    """Kill what runs in namespace `name`, then delete it (its veth goes with it)."""
    for pid in _ip("netns", "pids", name, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", name, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers() -> list[str]:
    """Delete the namespaces, veths and bridges of earlier runs whose process is gone."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split(" ", 1)[0]
        match = _NAME.match(name)
        if match is not None and not _alive(int(match.group(1))):
            _remove_namespace(name)
            removed.append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(": ")
        link = parts[1].split("@", 1)[0] if len(parts) > 1 else ""
        match = _NAME.match(link)
        if match is not None and not _alive(int(match.group(1))):
            _ip("link", "del", link, check=False)
            removed.append(link)
    return removed


@contextlib.contextmanager
def bridged_hosts(roles: Sequence[str], subnet: str = SUBNET) -> Iterator[BridgedNetwork]:
    """One namespace per role on one bridge, addresses in `subnet` (its first three octets);
    all removed at the end."""
    if os.geteuid() != 0:
        raise NamespacesUnavailable("network namespaces need root (CI runs as root)")
    if len(roles) > 26:
        raise ValueError("at most 26 hosts")
    try:
        remove_leftovers()
    except (OSError, subprocess.SubprocessError) as exc:
        raise NamespacesUnavailable(f"`ip netns` is not available: {exc}") from exc
    pid = os.getpid()
    bridge = f"{PREFIX}{pid}br"
    made: list[str] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        hosts = {}
        for index, role in enumerate(roles):
            name = f"{PREFIX}{pid}{chr(ord('a') + index)}"
            outer, inner, address = f"{name}0", f"{name}1", f"{subnet}.{FIRST_HOST + index}"
            _ip("netns", "add", name)
            made.append(name)
            for step in (
                ("link", "add", outer, "type", "veth", "peer", "name", inner),
                ("link", "set", inner, "netns", name),
                ("link", "set", outer, "master", bridge, "up"),
                ("netns", "exec", name, "ip", "addr", "add", f"{address}/24", "dev", inner),
                ("netns", "exec", name, "ip", "link", "set", inner, "up"),
                ("netns", "exec", name, "ip", "link", "set", "lo", "up"),
            ):
                _ip(*step)
            hosts[role] = BridgedHost(role, name, address, inner)
        yield BridgedNetwork(bridge, f"{subnet}.1", hosts)
    finally:
        for name in made:
            _remove_namespace(name)
            _ip("link", "del", f"{name}0", check=False)  # gone with the namespace; in case it is not
        _ip("link", "del", bridge, check=False)
