"""A real tritonserver stops without a crashing Python stub.

Every stop used to end with the `cpu_engine` stub's SIGSEGV (the kernel's "segfault at 60 ...
in triton_python_backend_stub"; a core dump's stack: `~Stub` → `~MetricFamily` →
`Metric::Clear` → `Metric::SaveToSharedMemory` on the stub's already freed shared memory).
The engine host kept Triton's metric families alive past `finalize`; it now lets go of them
in `stop()`. Each stub runs `faulthandler` (bls/stub_faults.py), so a crash writes
"Fatal Python error: ..." into the server's log, which this test reads.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import np_to_triton_dtype

from bls.stub_faults import FATAL_SIGNAL_LINE
from build_engines.repository import fill_repository
from config.settings import Ports
from server_host.ports import free_ports
from server_host.triton_server import TritonServer

if TYPE_CHECKING:  # conftest modules are not importable under --import-mode=importlib
    from conftest import TinyModel

pytestmark = pytest.mark.integration


def _inputs(prompt: str, max_tokens: int) -> list[grpcclient.InferInput]:
    inputs = []
    for name, array in (
        ("text_input", np.array([prompt.encode()], dtype=np.object_)),
        ("max_tokens", np.array([max_tokens], dtype=np.int32)),
    ):
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


async def _serve_a_few(server: TritonServer, count: int) -> int:
    """Stream `count` requests on one stream; the number of responses without an error."""

    async def requests():  # type: ignore[no-untyped-def]
        for i in range(count):
            yield {"model_name": "llm", "inputs": _inputs(f"prompt {i}", 6), "request_id": f"teardown-{i}"}

    client = grpcclient.InferenceServerClient(server.grpc_url)
    answered = 0
    try:
        async for result, error in client.stream_infer(requests()):
            assert error is None, error
            answered += result is not None
    finally:
        await client.close()
    return answered


@pytest.mark.parametrize("engine_in_process", [True, False], ids=["engine-in-llm", "engine-model"])
def test_a_server_that_served_requests_stops_without_a_stub_crash(
    tiny_model: TinyModel, engine_in_process: bool
) -> None:
    """Whichever stub hosts the engine (`llm`'s own, or `cpu_engine`'s) frees what it holds
    of the server's before the server is gone."""
    config = tiny_model.config
    pools = config.pools.items()
    config = config.model_copy(
        update={"pools": {pid: pool.model_copy(update={"engine_in_process": engine_in_process}) for pid, pool in pools}}
    )
    repository = fill_repository(config, "tiny")
    models = sorted(path.name for path in repository.iterdir())
    assert ("cpu_engine" in models) is not engine_in_process
    http, grpc, metrics = free_ports(3)
    server = TritonServer(
        repository,
        Ports(http=http, grpc=grpc, metrics=metrics),
        var_dir=config.var_path,
        name="teardown",
        inference_key=None,
        host=config.network.servers.bind_host,
        keepalive=config.network.triton_grpc,
    )
    server.start()
    try:
        assert asyncio.run(_serve_a_few(server, 4)) >= 4
    finally:
        server.stop()
    log = server.log_path.read_text()
    for model in models:  # every stub ran its finalize and is gone
        assert f"successfully unloaded '{model}'" in log
    crashes = [line for line in log.splitlines() if FATAL_SIGNAL_LINE in line]
    assert crashes == [], f"a stub crashed while the server stopped:\n{log[-3000:]}"
