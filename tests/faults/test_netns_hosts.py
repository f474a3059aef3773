"""Hosts on one switch (faults/netns_hosts.py), the partition run's and the integration tests':
three namespaces on a bridge, an HTTP server on one, and each kind of cut seen from the others;
nothing left behind afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from faults.netns_hosts import PREFIX, BridgedNetwork, NamespacesUnavailable, bridged_hosts, process_subnet
from server_host.process import ManagedProcess, wait_until

pytestmark = pytest.mark.integration

PORT = 18080
_FETCH = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1.5); print('ok')"


@pytest.fixture
def net(tmp_path: Path) -> Iterator[BridgedNetwork]:
    try:
        with bridged_hosts(["web", "near", "far"], subnet=process_subnet()) as made:
            web = made["web"]
            argv = web.command([sys.executable, "-m", "http.server", str(PORT), "--bind", web.address])
            server = ManagedProcess("http.server", argv, tmp_path / "web.log")
            server.start()
            try:
                assert wait_until(lambda: _reaches(made, None), 10), server.log_tail()
                yield made
            finally:
                server.stop(timeout_s=2.0)
    except NamespacesUnavailable as exc:
        pytest.skip(f"no network namespaces here: {exc}")


def _reaches(net: BridgedNetwork, role: str | None) -> bool:
    """Whether `role`'s host (None: the root namespace) gets an answer from the web host."""
    argv = [sys.executable, "-c", _FETCH, f"http://{net['web'].address}:{PORT}/"]
    done = subprocess.run(net[role].command(argv) if role else argv, capture_output=True, text=True, timeout=10)
    return done.stdout.strip() == "ok"


def test_cuts_and_heals(net: BridgedNetwork) -> None:
    assert _reaches(net, "near") and _reaches(net, "far")

    net.cut_between(["web"], ["far"])  # a partition: far alone loses web
    assert not _reaches(net, "far")
    assert _reaches(net, "near") and _reaches(net, None)
    net.heal_between(["web"], ["far"])
    assert _reaches(net, "far")

    net["web"].cut()  # the host's link down: nobody reaches it
    assert not _reaches(net, "near") and not _reaches(net, None)
    net["web"].restore()
    assert wait_until(lambda: _reaches(net, "near"), 5)

    net.cut_between(["web"], ["near", "far"])
    net.heal_all()
    assert _reaches(net, "near") and _reaches(net, "far")


def test_nothing_left_behind() -> None:
    try:
        with bridged_hosts(["a", "b"], subnet=process_subnet()) as made:
            made.cut_between(["a"], ["b"])
            ours = f"{PREFIX}{os.getpid()}"
            assert ours in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    except NamespacesUnavailable as exc:
        pytest.skip(f"no network namespaces here: {exc}")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert ours not in listed and ours not in links


def test_a_host_reaches_the_root_namespace_until_its_link_is_cut(tmp_path: Path) -> None:
    """What a test's own host relies on (a Redis replica there, its primary in the root
    namespace): `root_address` is reachable from the host, and `cut()` silences it."""
    try:
        with bridged_hosts(["replica"], subnet=process_subnet()) as made:
            argv = [sys.executable, "-m", "http.server", str(PORT), "--bind", made.root_address]
            server = ManagedProcess("http.server in the root namespace", argv, tmp_path / "root.log")
            server.start()
            try:
                host = made["replica"]
                url = f"http://{made.root_address}:{PORT}/"
                fetch = host.command([sys.executable, "-c", _FETCH, url])

                def reached() -> bool:
                    done = subprocess.run(fetch, capture_output=True, text=True, timeout=10)
                    return done.stdout.strip() == "ok"

                assert wait_until(reached, 10), server.log_tail()
                host.cut()
                assert not reached()
                host.restore()
                assert wait_until(reached, 5)
            finally:
                server.stop(timeout_s=2.0)
    except NamespacesUnavailable as exc:
        pytest.skip(f"no network namespaces here: {exc}")
