"""The launcher's pieces that need no running server."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from config.network_settings import NetworkSpec, ServerAddresses
from config.settings import Ports
from server_host.triton_install import TritonInstall, prepare_backend_dir, server_env
from server_host.triton_server import TritonServer, TritonStartError

NETWORK = NetworkSpec()
LOCAL = {"host": NETWORK.servers.bind_host, "keepalive": NETWORK.triton_grpc}


def test_the_wheel_ships_what_the_launcher_needs() -> None:
    install = TritonInstall.find()
    assert install.server_bin.is_file()
    assert install.stub.parent.name == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_backend_dir_holds_the_stub_next_to_the_backend(tmp_path: Path) -> None:
    install = TritonInstall.find()
    backends = prepare_backend_dir(tmp_path, install)
    python_dir = backends / "python"
    assert sorted(p.name for p in python_dir.iterdir()) == [
        "libtriton_python.so",
        "triton_python_backend_stub",
        "triton_python_backend_utils.py",
    ]
    assert (python_dir / "triton_python_backend_stub").read_bytes() == install.stub.read_bytes()
    prepare_backend_dir(tmp_path, install)  # idempotent


def test_env_puts_this_venv_first(tmp_path: Path) -> None:
    install = TritonInstall.find()
    env = server_env(install, {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib"})
    assert env["PATH"].split(":")[0] == str(Path(sys.prefix) / "bin")
    assert env["LD_LIBRARY_PATH"].split(":") == [str(install.libs_dir), "/opt/lib"]
    assert (Path(env["PYTHONPATH"].split(":")[0]) / "bls").is_dir()


def test_env_gives_each_model_process_one_blas_thread_unless_told_otherwise() -> None:
    install = TritonInstall.find()
    assert server_env(install, {})["OPENBLAS_NUM_THREADS"] == "1"
    assert server_env(install, {"OPENBLAS_NUM_THREADS": "4"})["OPENBLAS_NUM_THREADS"] == "4"


def test_command_names_ports_and_a_unique_shm_prefix(tmp_path: Path) -> None:
    server = TritonServer(
        tmp_path / "repo", Ports(http=1, grpc=2, metrics=3), var_dir=tmp_path, name="p", inference_key="k", **LOCAL
    )
    install = TritonInstall.find()
    first, second = server.command(tmp_path, install), server.command(tmp_path, install)
    assert "--http-port=1" in first and "--grpc-port=2" in first and "--metrics-port=3" in first
    shm = [a for a in first if "shm-region-prefix-name" in a]
    assert shm and shm != [a for a in second if "shm-region-prefix-name" in a]
    assert server.grpc_url == "127.0.0.1:2"
    assert server.metrics_url == "http://127.0.0.1:3/metrics"


def test_inference_and_control_need_the_key_health_and_metadata_do_not(tmp_path: Path) -> None:
    install = TritonInstall.find()
    server = TritonServer(
        tmp_path / "repo", Ports(http=1, grpc=2, metrics=3), var_dir=tmp_path, name="p", inference_key="s3cret", **LOCAL
    )
    command = server.command(tmp_path, install)
    guard = "inference,model-repository,shared-memory,statistics,trace,logging:switchyard-inference-key=s3cret"
    assert f"--grpc-restricted-protocol={guard}" in command
    assert f"--http-restricted-api={guard}" in command
    open_server = TritonServer(
        tmp_path / "repo", Ports(http=1, grpc=2, metrics=3), var_dir=tmp_path, name="p", inference_key=None, **LOCAL
    )
    assert not [a for a in open_server.command(tmp_path, install) if "restricted" in a]


def test_unfilled_repository_is_refused(tmp_path: Path) -> None:
    server = TritonServer(
        tmp_path / "repo", Ports(http=1, grpc=2, metrics=3), var_dir=tmp_path, name="p", inference_key="k", **LOCAL
    )
    with pytest.raises(TritonStartError, match="switchyard build"):
        server.start()


def test_taken_port_is_refused(tmp_path: Path) -> None:
    (tmp_path / "repo" / "llm").mkdir(parents=True)
    (tmp_path / "repo" / "llm" / "config.pbtxt").write_text("")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = TritonServer(
            tmp_path / "repo",
            Ports(http=port, grpc=port + 1, metrics=port + 2),
            var_dir=tmp_path,
            name="p",
            inference_key="k",
            **LOCAL,
        )
        with pytest.raises(TritonStartError, match=f"http port {port}"):
            server.start()
    assert server.poll() is None and server.pid is None


def test_server_binds_the_configured_address_and_accepts_the_gateways_pings(tmp_path: Path) -> None:
    keepalive = NETWORK.triton_grpc
    server = TritonServer(
        tmp_path / "repo", Ports(http=1, grpc=2, metrics=3), var_dir=tmp_path, name="p", inference_key=None,
        host="10.231.7.2", keepalive=keepalive,
    )  # fmt: skip
    command = server.command(tmp_path, TritonInstall.find())
    for flag in ("--http-address", "--grpc-address", "--metrics-address"):
        assert f"{flag}=10.231.7.2" in command
    assert server.grpc_url == "10.231.7.2:2"
    # A client PING every time_ms is within what the server accepts: no GOAWAY too_many_pings.
    accepted = [a for a in command if a.startswith("--grpc-http2-min-recv-ping-interval-without-data=")]
    assert accepted and int(accepted[0].split("=")[1]) <= keepalive.time_ms
    assert "--grpc-keepalive-permit-without-calls=1" in command
    assert f"--grpc-keepalive-time={keepalive.server_time_ms}" in command


def test_a_wildcard_bind_is_reached_over_loopback_on_its_own_host(tmp_path: Path) -> None:
    server = TritonServer(
        tmp_path / "repo", Ports(http=1, grpc=2, metrics=3), var_dir=tmp_path, name="p", inference_key=None,
        host="0.0.0.0", keepalive=NETWORK.triton_grpc,
    )  # fmt: skip
    assert "--grpc-address=0.0.0.0" in server.command(tmp_path, TritonInstall.find())
    assert server.metrics_url == "http://127.0.0.1:3/metrics"
    assert ServerAddresses(bind_host="0.0.0.0", advertise_host="10.0.3.17").advertised == "10.0.3.17"
