"""The "tensorrtllm_cpp" dialect: `llm` over TensorRT-LLM's C++ `tensorrtllm` Triton backend.

The legacy GPU path (prebuilt TensorRT engines, only while the pinned TensorRT-LLM release has
them: build_engines/trtllm_pin.py; upstream removed them in July 2026) serves the model with
NVIDIA's backend, whose tensors are not Switchyard's (`triton_backend/all_models/
inflight_batcher_llm/tensorrt_llm/config.pbtxt` of the pinned release, whose seed input is
`seed`, not the older `random_seed`). Its `max_batch_size` is above 0, so every tensor carries
a leading batch dimension of 1:

    input_ids           INT32  [1, n]   prompt + resumed completion tokens (read as context)
    input_lengths       INT32  [1, 1]   n
    request_output_len  INT32  [1, 1]   max_tokens - resumed tokens
    end_id, pad_id      INT32  [1, 1]   the model's EOS (end_id -1 when ignore_eos)
    streaming           BOOL   [1, 1]   always true: responses carry the new tokens only (the
                                        model's `exclude_input_in_output` parameter must be
                                        true, as model_repository/tensorrt_llm_cpp sets it)
    runtime_top_k       INT32  [1, 1]   1 when temperature is 0 (greedy), else top_k (0: off)
    temperature, runtime_top_p  FP32 [1, 1]   sampled requests only
    seed                UINT64 [1, 1]   when set (negative seeds wrap modulo 2**64)
    stop_words_list     INT32  [1, 2, m]   stop sequences and stop ids, see below

    stop sequences (8, 9), (10,) and stop_token_ids (7,):
        row 0:  8  9  10   7     every sequence's ids, flattened (StopTokenSequences.flat_ids)
        row 1:  2  3   4  -1     end offsets, padded with -1 (StopTokenSequences.offsets)

    outputs: output_ids INT32 [1, beam=1, k] (this response's new tokens), sequence_length [1, 1]

What the backend cannot take or tell, and what `llm` does instead:

- `request_class`: there is no priority input; bulk and interactive requests are scheduled
  alike by the engine (the router still keeps bulk off busy servers).
- `cache_namespace`: KV-cache reuse is global across requests; there is no tenant isolation.
- `seed`: seeds the request's RNG, so a resumed sampled reply does not redraw the tokens the
  first server would have (Switchyard's engines key every draw by (seed, token index)).
- finish reason: inferred when the stream ends: `cancelled` if `llm` cancelled the request,
  else `length` if it wrote `request_output_len` tokens, else `stop` (EOS, a stop id or a
  stop sequence; a model whose context filled up also reads as `stop`).
- `cached_tokens`: not reported per request; always 0 (the backend's KV block gauges count
  reused blocks server-wide).
- a cancel is a request sent under the target's Triton request id with `stop` true; it is
  answered by one empty FINAL. A cancel that overtakes its request is lost (cpu_engine
  remembers such cancels for 5 s), which costs at most the tokens of one unwanted reply.
- the heartbeat and per-class request gauges are published by `llm` itself
  (bls/llm_engine_gauges.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bls.engine_dialect import CancelRequest, EngineResponseParser
from bls.tensors import Array, InputError, Outputs, TensorSource, read_int
from bls.tokenizer import StopTokenSequences
from engine.request import EngineRequest, FinishReason, RequestOutput

CPP_OUTPUT_NAMES = ("output_ids", "sequence_length")
_UINT64_RANGE = 2**64


def _row(values: Sequence[int], dtype: npt.DTypeLike) -> Array:
    """A [1, n] tensor: one request of a batch."""
    return np.asarray([list(values)], dtype=dtype)


def _cell(value: float | bool, dtype: npt.DTypeLike) -> Array:
    """A [1, 1] tensor: one scalar of one request."""
    return np.asarray([[value]], dtype=dtype)


def stop_words_list(sequences: Sequence[Sequence[int]]) -> Array | None:
    """`sequences` in the backend's stop_words_list layout [1, 2, m]; None when there are none."""
    if any(not seq for seq in sequences):
        raise InputError("stop token sequences must not be empty")
    stops = StopTokenSequences.from_sequences(sequences)
    if not stops.flat_ids:
        return None
    width = len(stops.flat_ids)  # >= len(offsets): every sequence holds at least one id
    offsets = (*stops.offsets, *([-1] * (width - len(stops.offsets))))
    return np.asarray([[stops.flat_ids, offsets]], dtype=np.int32)


class CppBackendResponseParser:
    """Reads one request's streamed responses; keeps what the backend does not report.

    `completion_tokens` is the running count of tokens this server generated (resumed ones
    not counted), as in Switchyard's contract; `prompt_tokens` is the prompt without them.
    """

    def __init__(self, request: EngineRequest, request_output_len: int) -> None:
        self._request_id = request.request_id
        self._prompt_tokens = len(request.prompt_token_ids)
        self._request_output_len = request_output_len
        self._completion_tokens = 0
        self._cancel_requested = False

    def parse(self, src: TensorSource) -> RequestOutput:
        ids = src.get("output_ids")
        if ids is None:
            raise InputError("tensorrtllm response has no output_ids")
        if ids.ndim < 1 or any(dim != 1 for dim in ids.shape[:-1]):
            raise InputError(f"tensorrtllm output_ids must hold one beam of one request, got shape {list(ids.shape)}")
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise InputError(f"tensorrtllm output_ids must be integers, got dtype {ids.dtype}")
        row = ids.reshape(-1)
        length = read_int(src, "sequence_length")
        if not 0 <= length <= row.size:
            raise InputError(f"tensorrtllm sequence_length {length} does not fit {row.size} output_ids")
        new_token_ids = tuple(int(t) for t in row[:length])
        self._completion_tokens += len(new_token_ids)
        return self._output(new_token_ids, None)

    def cancel_requested(self) -> None:
        self._cancel_requested = True

    def finish(self) -> RequestOutput:
        if self._cancel_requested:
            reason = FinishReason.CANCELLED
        elif self._completion_tokens >= self._request_output_len:
            reason = FinishReason.LENGTH
        else:
            reason = FinishReason.STOP
        return self._output((), reason)

    def _output(self, new_token_ids: tuple[int, ...], reason: FinishReason | None) -> RequestOutput:
        return RequestOutput(
            request_id=self._request_id,
            new_token_ids=new_token_ids,
            finished=reason is not None,
            finish_reason=reason,
            prompt_tokens=self._prompt_tokens,
            cached_tokens=0,
            completion_tokens=self._completion_tokens,
        )


class CppBackendDialect:
    """The C++ backend's contract (module docstring) for one model.

    `eos_token_ids` are the model's end-of-sequence ids: the first is the backend's `end_id`,
    the others (instruction models often have several, e.g. end-of-turn) become single-token
    stop words, so a reply ends on any of them unless the request sets `ignore_eos`.
    `pad_id` defaults to the first EOS id.
    """

    def __init__(self, eos_token_ids: Sequence[int], pad_id: int | None = None) -> None:
        if not eos_token_ids:
            raise ValueError("the tensorrtllm_cpp dialect needs the model's EOS token id")
        if any(i < 0 for i in eos_token_ids) or (pad_id is not None and pad_id < 0):
            raise ValueError(f"token ids must be >= 0, got eos {list(eos_token_ids)}, pad {pad_id}")
        self._end_id = eos_token_ids[0]
        self._extra_eos_ids = tuple(i for i in eos_token_ids[1:] if i != eos_token_ids[0])
        self._pad_id = self._end_id if pad_id is None else pad_id

    @property
    def output_names(self) -> tuple[str, ...]:
        return CPP_OUTPUT_NAMES

    @property
    def engine_publishes_switchyard_metrics(self) -> bool:
        return False

    def request_tensors(self, request: EngineRequest) -> Outputs:
        sampling = request.sampling
        prompt = (*request.prompt_token_ids, *request.resume_token_ids)
        if not request.prompt_token_ids:
            raise InputError("the prompt is empty; send at least one token")
        tensors: Outputs = {
            "input_ids": _row(prompt, np.int32),
            "input_lengths": _cell(len(prompt), np.int32),
            "request_output_len": _cell(self._request_output_len(request), np.int32),
            "end_id": _cell(-1 if sampling.ignore_eos else self._end_id, np.int32),
            "pad_id": _cell(self._pad_id, np.int32),
            "streaming": _cell(True, np.bool_),
        }
        if sampling.temperature == 0:
            tensors["runtime_top_k"] = _cell(1, np.int32)  # greedy: the most likely token
        else:
            tensors["temperature"] = _cell(sampling.temperature, np.float32)
            tensors["runtime_top_p"] = _cell(sampling.top_p, np.float32)
            tensors["runtime_top_k"] = _cell(sampling.top_k, np.int32)
        if sampling.seed is not None:
            tensors["seed"] = _cell(sampling.seed % _UINT64_RANGE, np.uint64)
        stop_ids = (*sampling.stop_token_ids, *(() if sampling.ignore_eos else self._extra_eos_ids))
        stops = stop_words_list([*sampling.stop_token_sequences, *((i,) for i in stop_ids)])
        if stops is not None:
            tensors["stop_words_list"] = stops
        return tensors

    def response_parser(self, request: EngineRequest) -> EngineResponseParser:
        return CppBackendResponseParser(request, self._request_output_len(request))

    def cancel_request(self, target_request_id: str) -> CancelRequest:
        """`stop` under the target's request id. Triton checks the backend's required inputs
        before the backend sees `stop`, so placeholders ride along (as in NVIDIA's own BLS)."""
        if not target_request_id:
            raise ValueError("the tensorrtllm backend cancels by request id; got an empty one")
        inputs: Outputs = {
            "input_ids": _cell(0, np.int32),
            "input_lengths": _cell(0, np.int32),
            "request_output_len": _cell(0, np.int32),
            "stop": _cell(True, np.bool_),
        }
        return CancelRequest(inputs, target_request_id, ())

    @staticmethod
    def _request_output_len(request: EngineRequest) -> int:
        left = request.sampling.max_tokens - len(request.resume_token_ids)
        if left < 1:
            raise InputError(
                f"{len(request.resume_token_ids)} resumed tokens leave nothing to generate "
                f"under max_tokens={request.sampling.max_tokens}"
            )
        return left
