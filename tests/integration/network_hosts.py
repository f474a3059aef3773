"""Hosts of their own for tests: Linux network namespaces joined to this one by veth pairs.

    root namespace (the gateway's host)         namespace syq<pid><letter> (a server's host)
      syq<pid><letter>0  10.231.N.1/24  ◀─veth─▶  syq<pid><letter>1  10.231.N.2/24, lo up

`Host.cut()` sets the namespace's end of its link down: its packets go nowhere and neither side
gets a FIN or an RST, as when a host powers off or its switch port dies. Everything is removed
when the `network_hosts` block ends, however it ends; namespaces an earlier run left behind
(its process gone: killed before its cleanup ran) are removed at the next start, by this
module's name prefix only. Needs root and `ip netns`: `network_hosts` raises
`NamespacesUnavailable` with the reason where the kernel or the user may not make them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

PREFIX = "syq"  # every namespace and link this module makes starts with it (15-character names)
_NAME = re.compile(rf"^{PREFIX}(\d+)([a-z])$")
SUBNET = "10.231"  # private test range: host k of this run gets 10.231.N.2, N from the pid and k


class NamespacesUnavailable(RuntimeError):
    """This machine or user cannot make network namespaces (not root, no `ip`, a container
    without CAP_NET_ADMIN)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


@dataclass(frozen=True)
class Host:
    """One namespace: a host whose only link is its veth to the root namespace."""

    name: str
    address: str  # the host's own address (what a server on it binds and advertises)
    peer_address: str  # the root namespace's end: where the host reaches services in the root
    link: str  # the namespace's end of the veth pair

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run on this host (in its namespace)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """Take the link down: silence, no RST."""
        _ip("netns", "exec", self.name, "ip", "link", "set", self.link, "down")

    def restore(self) -> None:
        _ip("netns", "exec", self.name, "ip", "link", "set", self.link, "up")


def _remove(name: str) -> None:
    """Kill what runs in namespace `name`, then delete it (its veth pair goes with it)."""
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", name, check=False)


def remove_leftovers() -> list[str]:
    """Delete namespaces of this module's earlier runs whose process is gone; their names."""
    listed = _ip("netns", "list", check=False).stdout.splitlines()
    removed = []
    for line in listed:
        name = line.split(" ", 1)[0]
        match = _NAME.match(name)
        if match is None or _alive(int(match.group(1))):
            continue
        _remove(name)
        removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _subnet(pid: int, index: int) -> int:
    return (pid * 7 + index) % 250 + 1


@contextlib.contextmanager
def network_hosts(count: int) -> Iterator[list[Host]]:
    """`count` hosts (namespaces), each linked to the root namespace; all removed at the end."""
    if os.geteuid() != 0:
        raise NamespacesUnavailable("network namespaces need root (CI runs as root)")
    try:
        remove_leftovers()
    except (OSError, subprocess.SubprocessError) as exc:
        raise NamespacesUnavailable(f"`ip netns` is not available: {exc}") from exc
    pid = os.getpid()
    made: list[str] = []
    hosts: list[Host] = []
    try:
        for index in range(count):
            letter = chr(ord("a") + index)
            name, outer, inner = f"{PREFIX}{pid}{letter}", f"{PREFIX}{pid}{letter}0", f"{PREFIX}{pid}{letter}1"
            net = f"{SUBNET}.{_subnet(pid, index)}"
            added = _ip("netns", "add", name, check=False)
            if added.returncode != 0:
                raise NamespacesUnavailable(f"`ip netns add` refused: {added.stderr.strip()}")
            made.append(name)
            steps = [
                ("link", "add", outer, "type", "veth", "peer", "name", inner),
                ("link", "set", inner, "netns", name),
                ("addr", "add", f"{net}.1/24", "dev", outer),
                ("link", "set", outer, "up"),
                ("netns", "exec", name, "ip", "addr", "add", f"{net}.2/24", "dev", inner),
                ("netns", "exec", name, "ip", "link", "set", inner, "up"),
                ("netns", "exec", name, "ip", "link", "set", "lo", "up"),
            ]
            for step in steps:
                done = _ip(*step, check=False)
                if done.returncode != 0:
                    raise NamespacesUnavailable(f"`ip {' '.join(step)}` failed: {done.stderr.strip()}")
            hosts.append(Host(name, f"{net}.2", f"{net}.1", inner))
        yield hosts
    finally:
        for name in made:
            _remove(name)
            _ip("link", "del", f"{name}0", check=False)  # gone with the namespace; in case it is not
