"""How `llm` talks to its engine model: the tensors of one engine contract ("dialect").

`llm` always thinks in `EngineRequest` and `RequestOutput`; a dialect turns them into the
engine model's tensors and back. Two exist:

    switchyard       cpu_engine, and tensorrt_llm on the LLM API (bls/engine_tensors.py)
    tensorrtllm_cpp  TensorRT-LLM's C++ `tensorrtllm` backend (bls/cpp_backend_tensors.py)

`TritonStages` asks the dialect for a request's tensors and for a parser that reads that
request's responses. The parser is per request because some engines answer with less than a
`RequestOutput` holds (no running counts, no finish reason) and the parser must remember what
it has seen to fill the rest in.

A Python BLS response carries no FINAL flag: the caller learns that a stream ended when its
iterator does. So `finish()` is the parser's last word, called once the stream has ended: an
engine that names its finish reason has already said it (and `finish()` returns None); one
that does not gets an empty last output whose reason the parser inferred.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bls.engine_tensors import ENGINE_OUTPUT_NAMES, cancel_request_tensors, engine_request_tensors, parse_engine_output
from bls.tensors import Outputs, TensorSource
from engine.request import EngineRequest, RequestOutput


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """The control request that stops a running engine request.

    `request_id` is the Triton request id to send it under ("" for none): the C++ backend
    finds its target by that id, `cpu_engine` by a tensor.
    """

    inputs: Outputs
    request_id: str
    output_names: tuple[str, ...]


class EngineResponseParser(Protocol):
    """Reads the responses of one engine request, in order."""

    def parse(self, src: TensorSource) -> RequestOutput:
        """One response as a `RequestOutput` delta; InputError when it is malformed."""
        ...

    def cancel_requested(self) -> None:
        """`llm` has sent this request's cancel: the engine will end it early."""
        ...

    def finish(self) -> RequestOutput | None:
        """The stream has ended: a last (empty) output with the finish reason, or None when
        the responses already carried one."""
        ...


class EngineDialect(Protocol):
    """One engine model's tensor contract, as `TritonStages` needs it."""

    @property
    def output_names(self) -> tuple[str, ...]:
        """The outputs to request for a generation request."""
        ...

    @property
    def engine_publishes_switchyard_metrics(self) -> bool:
        """Whether the engine model sets `switchyard_engine_heartbeat` and
        `switchyard_engine_requests` itself; when not, `llm` must (bls/llm_engine_gauges.py)."""
        ...

    def request_tensors(self, request: EngineRequest) -> Outputs:
        """The inputs that ask the engine for `request`; InputError when it cannot be served."""
        ...

    def response_parser(self, request: EngineRequest) -> EngineResponseParser: ...

    def cancel_request(self, target_request_id: str) -> CancelRequest: ...


class _SwitchyardParser:
    """Switchyard engines send deltas with running counts and the finish reason themselves."""

    def __init__(self, request: EngineRequest) -> None:
        self._request = request

    def parse(self, src: TensorSource) -> RequestOutput:
        return parse_engine_output(self._request.request_id, src, final=False, sampling=self._request.sampling)

    def cancel_requested(self) -> None:
        """Nothing to remember: the engine answers `cancelled` itself."""

    def finish(self) -> RequestOutput | None:
        return None  # a stream that ended without a finish reason is the pipeline's `aborted`


class SwitchyardDialect:
    """The `cpu_engine` contract (docs/tensors.md), spoken by cpu_engine and tensorrt_llm."""

    @property
    def output_names(self) -> tuple[str, ...]:
        return ENGINE_OUTPUT_NAMES

    @property
    def engine_publishes_switchyard_metrics(self) -> bool:
        return True

    def request_tensors(self, request: EngineRequest) -> Outputs:
        return engine_request_tensors(request)

    def response_parser(self, request: EngineRequest) -> EngineResponseParser:
        return _SwitchyardParser(request)

    def cancel_request(self, target_request_id: str) -> CancelRequest:
        return CancelRequest(cancel_request_tensors(target_request_id), "", ENGINE_OUTPUT_NAMES)
