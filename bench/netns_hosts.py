"""Hosts on one switch for the partition run: Linux network namespaces bridged in the root one.

    root namespace: bridge syp<pid>br 10.232.0.1/24 (the bench's clients live here)
        ├─veth─ syp<pid>a  10.232.0.10   (host "gw1")
        ├─veth─ syp<pid>b  10.232.0.11   (host "gw2")
        └─ ...  one namespace per host, each with lo up and one leg on the bridge

Two ways to cut, neither sends a FIN or an RST:

    cut_link(host)          the host's leg down: it reaches nothing and nothing reaches it
                            (a host powered off, its switch port dead)
    cut_between(as_, bs)    a blackhole route for each other side in every namespace of both
                            sides (a partition between two groups of hosts, the rest of the
                            switch still working). No packet filter exists here (no nft,
                            iptables, ebtables, and no tc classifiers in this kernel), so a
                            route does it: established connections go quiet, as on a real
                            partition, but a new connect() fails at once (EINVAL) instead of
                            timing out.

Everything is removed when `bridged_hosts` ends, however it ends; namespaces and bridges an
earlier run left behind (its process gone) are removed at the next start, by this module's
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
SUBNET = "10.232.0"  # a private test range (/24): the bridge .1, host k .10+k
FIRST_HOST = 10


class NamespacesUnavailable(RuntimeError):
    """This machine or user cannot make network namespaces (not root, no `ip`, no CAP_NET_ADMIN)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=10)
    if check and done.returncode != 0:
        raise NamespacesUnavailable(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done


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


@dataclass
class BridgedNetwork:
    """The hosts of one run, by role, and the cuts made between them."""

    bridge: str
    gateway_address: str  # the root namespace's address on the bridge
    hosts: dict[str, BridgedHost]
    _blackholes: set[tuple[str, str]] = field(default_factory=set)  # (namespace, address)

    def __getitem__(self, role: str) -> BridgedHost:
        return self.hosts[role]

    def cut_link(self, role: str) -> None:
        host = self.hosts[role]
        _ip("netns", "exec", host.name, "ip", "link", "set", host.link, "down")

    def restore_link(self, role: str) -> None:
        host = self.hosts[role]
        _ip("netns", "exec", host.name, "ip", "link", "set", host.link, "up")

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
            _ip("netns", "exec", host.name, "ip", "link", "set", host.link, "up", check=False)

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
