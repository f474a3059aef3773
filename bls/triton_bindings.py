"""The one place that touches `triton_python_backend_utils` objects.

`pb_utils` only imports inside Triton's Python stub, so it is passed in rather than imported;
everything else in `bls/` works on `TensorSource`, `Outputs` and `ResponseSink`. Exercised by
the integration tests against a real `tritonserver`.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from bls.tensors import Array, InputError, Outputs, TensorSource
from contracts.llm_tensors import invalid_input_message, refused_input

logger = logging.getLogger(__name__)


class PbTensorSource:
    """A `TensorSource` over a pb_utils request (its inputs) or response (its outputs)."""

    def __init__(self, lookup: Any, holder: Any) -> None:
        self._lookup = lookup
        self._holder = holder

    @classmethod
    def of_request(cls, pb_utils: Any, request: Any) -> PbTensorSource:
        return cls(pb_utils.get_input_tensor_by_name, request)

    @classmethod
    def of_response(cls, pb_utils: Any, response: Any) -> PbTensorSource:
        return cls(pb_utils.get_output_tensor_by_name, response)

    def get(self, name: str) -> Array | None:
        tensor = self._lookup(self._holder, name)
        if tensor is None:
            return None
        array: Array = tensor.as_numpy()
        return array


def pb_tensors(pb_utils: Any, outputs: Mapping[str, Array]) -> list[Any]:
    return [pb_utils.Tensor(name, array) for name, array in outputs.items()]


def pb_response(pb_utils: Any, outputs: Outputs | None, error: str | None = None) -> Any:
    """An InferenceResponse with `outputs`, or a Triton error response."""
    if error is not None:
        code = pb_utils.TritonError.INVALID_ARG if refused_input(error) is not None else pb_utils.TritonError.INTERNAL
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(error, code))
    return pb_utils.InferenceResponse(output_tensors=pb_tensors(pb_utils, outputs or {}))


class PbResponseSink:
    """A `ResponseSink` over a decoupled model's response sender.

    Once FINAL is sent the request is gone on the server side: asking `is_cancelled()` then
    reads a freed response factory and crashes tritonserver (seen: SIGSEGV in
    TRITONBACKEND_ResponseFactoryIsCancelled). So this sink remembers it is closed, answers
    False without asking, and refuses to send again.
    """

    def __init__(self, pb_utils: Any, request: Any) -> None:
        self._pb = pb_utils
        self._sender = request.get_response_sender()
        self._closed = False

    def send(self, outputs: Outputs | None, *, final: bool, error: str | None = None) -> None:
        if self._closed:
            raise RuntimeError("response sent after FINAL")
        flags = self._pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        self._closed = final
        if outputs is None and error is None:
            self._sender.send(flags=flags)
        else:
            self._sender.send(pb_response(self._pb, outputs, error), flags=flags)

    def is_cancelled(self) -> bool:
        return not self._closed and bool(self._sender.is_cancelled())


class RequestIds:
    """The id a model passes down for a request: the caller's, or a server-unique one."""

    def __init__(self, prefix: str) -> None:
        self._prefix = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self._counter = itertools.count()

    def for_request(self, caller_id: str) -> str:
        return caller_id or f"{self._prefix}-{next(self._counter)}"


def execute_stateless(
    pb_utils: Any, requests: list[Any], run: Callable[[TensorSource], Outputs], name: str
) -> list[Any]:
    """`execute` of a non-decoupled model: one response per request, errors as Triton errors."""
    responses = []
    for request in requests:
        try:
            responses.append(pb_response(pb_utils, run(PbTensorSource.of_request(pb_utils, request))))
        except InputError as exc:
            responses.append(pb_response(pb_utils, None, invalid_input_message(str(exc))))
        except Exception as exc:
            logger.exception("%s failed", name)
            responses.append(pb_response(pb_utils, None, f"{name} failed: {type(exc).__name__}: {exc}"))
    return responses
