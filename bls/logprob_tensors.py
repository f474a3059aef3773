"""Log-probabilities as tensors, both directions: three per run of tokens (contracts/llm_tensors.py).

    TokenLogprobs(token_logprobs, top_token_ids, top_logprobs, k)
        ─▶ {output_token_logprobs: FP32 [n], output_top_logprob_ids: INT32 [n*k], output_top_logprobs: FP32 [n*k]}

The same names in `cpu_engine`'s responses and in `llm`'s, so `llm` passes a run on as it got it
(cut where a stop string ends the reply). Only a request that asked gets them: a response of one
that did not carries none of the six tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bls.tensors import InputError, Outputs, TensorSource
from contracts.llm_tensors import OUTPUT_LOGPROB_TENSORS, PROMPT_LOGPROB_TENSORS, LlmTensor
from engine.request import TokenLogprobs

OUTPUT_LOGPROB_NAMES = tuple(spec.name for spec in OUTPUT_LOGPROB_TENSORS)
PROMPT_LOGPROB_NAMES = tuple(spec.name for spec in PROMPT_LOGPROB_TENSORS)


def logprob_tensors(run: TokenLogprobs, specs: Sequence[LlmTensor]) -> Outputs:
    """`run` as the three tensors `specs` name (values, alternatives' ids, alternatives' values)."""
    values, ids, top = specs
    return {
        values.name: np.asarray(run.token_logprobs, dtype=np.float32),
        ids.name: np.asarray(run.top_token_ids, dtype=np.int32),
        top.name: np.asarray(run.top_logprobs, dtype=np.float32),
    }


def read_logprobs(src: TensorSource, specs: Sequence[LlmTensor], num_top: int) -> TokenLogprobs | None:
    """The run in `src`'s three tensors, of `num_top` alternatives a token; None when absent."""
    values, ids, top = (src.get(spec.name) for spec in specs)
    if values is None:
        return None
    run = TokenLogprobs(
        tuple(values.reshape(-1).astype(np.float64).tolist()),
        () if ids is None else tuple(ids.reshape(-1).tolist()),
        () if top is None else tuple(top.reshape(-1).astype(np.float64).tolist()),
        num_top,
    )
    expected = len(run) * num_top
    if len(run.top_token_ids) != expected or len(run.top_logprobs) != expected:
        raise InputError(
            f"{specs[0].name}: {len(run)} tokens need {expected} alternatives, got {len(run.top_token_ids)}"
        )
    return run
