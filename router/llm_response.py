"""One `llm` response (a Triton `ModelInferResponse`) as a `GenerationDelta`, read straight from
its raw contents.

The gateway reads one for every streamed response of every reply, so this is per-token work:
tritonclient's `InferResult.as_numpy` walks the outputs for each name and builds a numpy
array for each (a BYTES one element by element), ~0.1 ms for a response's seven outputs on
the development machine; reading the contents by index with `struct` takes a tenth of that
(`python -m bench serving_overhead`, docs/capacity.md).

Missing outputs read as empty (a model may leave out what did not change); contents that do
not parse are the server's fault (ValueError).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from contracts.generation import GenerationDelta, Logprobs, Usage
from contracts.llm_tensors import (
    CACHED_TOKENS,
    COMPLETION_TOKENS,
    DISCARDED_TOKENS,
    FINISH_REASON,
    OUTPUT_LOGPROB_TENSORS,
    OUTPUT_TOKEN_IDS,
    PROMPT_LOGPROB_TENSORS,
    PROMPT_TOKENS,
    TEXT_OUTPUT,
    LlmTensor,
)
from contracts.triton_wire import first_bytes, raw_numbers


class OutputTensor(Protocol):
    name: str
    datatype: str


class InferResponse(Protocol):
    """What is read of tritonclient's `service_pb2.ModelInferResponse`."""

    @property
    def outputs(self) -> Sequence[OutputTensor]: ...

    @property
    def raw_output_contents(self) -> Sequence[bytes]: ...


def parse_response(response: InferResponse) -> GenerationDelta:
    """The delta one response carries (ValueError: contents the server should not send)."""
    outputs = _Outputs(response)
    text = outputs.first_bytes(TEXT_OUTPUT).decode("utf-8", errors="replace")
    finish = outputs.first_bytes(FINISH_REASON).decode() or None
    prompt = outputs.first_int(PROMPT_TOKENS)
    usage = None
    if prompt is not None:
        usage = Usage(
            prompt_tokens=prompt,
            cached_tokens=outputs.first_int(CACHED_TOKENS) or 0,
            completion_tokens=outputs.first_int(COMPLETION_TOKENS) or 0,
            discarded_tokens=outputs.first_int(DISCARDED_TOKENS) or 0,
        )
    return GenerationDelta(
        text=text,
        token_ids=outputs.numbers(OUTPUT_TOKEN_IDS) or (),
        finish_reason=finish,
        usage=usage,
        logprobs=outputs.logprobs(OUTPUT_LOGPROB_TENSORS),
        prompt_logprobs=outputs.logprobs(PROMPT_LOGPROB_TENSORS),
    )


class _Outputs:
    """A response's outputs by name: (datatype, raw contents)."""

    def __init__(self, response: InferResponse) -> None:
        raw = response.raw_output_contents
        if len(raw) != len(response.outputs):
            raise ValueError(f"{len(response.outputs)} outputs but {len(raw)} raw contents")
        self._by_name = {o.name: (o.datatype, raw[i]) for i, o in enumerate(response.outputs)}

    def first_bytes(self, spec: LlmTensor) -> bytes:
        found = self._by_name.get(spec.name)
        if found is None:
            return b""
        value = first_bytes(found[1])
        if value is None:
            raise ValueError(f"output {spec.name!r}: its BYTES contents do not parse")
        return value

    def numbers(self, spec: LlmTensor) -> tuple[Any, ...] | None:
        found = self._by_name.get(spec.name)
        if found is None:
            return None
        values = raw_numbers(found[1], found[0])
        if values is None:
            raise ValueError(f"output {spec.name!r}: {len(found[1])} bytes are not whole {found[0]} elements")
        return values

    def first_int(self, spec: LlmTensor) -> int | None:
        values = self.numbers(spec)
        return int(values[0]) if values else None

    def logprobs(self, specs: Sequence[LlmTensor]) -> Logprobs | None:
        """A run of log-probabilities (contracts/llm_tensors.py), or None when the response has none."""
        values_spec, ids_spec, top_spec = specs
        values = self.numbers(values_spec)
        if values is None:
            return None
        return Logprobs(tuple(values), self.numbers(ids_spec) or (), self.numbers(top_spec) or ())
