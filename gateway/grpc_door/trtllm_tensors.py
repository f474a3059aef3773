"""TensorRT-LLM's own Triton names at the door, where users of NVIDIA's ensemble (the
`tensorrt_llm` model of triton-inference-server/tensorrtllm_backend) look for guided decoding
and log-probabilities, mapped onto the machinery the HTTP routes use:

    guided_decoding_guide_type  BYTES [1]  json | json_schema | regex | ebnf_grammar
    guided_decoding_guide       BYTES [1]  the schema, regex or grammar (none for `json`)
        ──▶ Guide.grammar(): a grammar of contracts/guided_grammar.py, compile-checked by
            GenerationService as `response_format`'s is (its problem: INVALID_ARGUMENT)
    return_log_probs            BOOL  [1]  ──▶ `logprobs` 0: each token's, no alternatives
    output_log_probs            FP32 [1, n]  (beam, token) each of the response's
                                             `output_token_ids`, as chat's `logprobs` has them
    cum_log_probs               FP32 [1]     (beam) the reply's sum so far

The guide types are TensorRT-LLM's `GuidedDecodingParams.GuideType`, read as its `llguidance`
backend reads them: `json` any JSON object, `json_schema` a schema every keyword of which is
enforced (llguidance refuses one it cannot enforce, as `strict: true` does on HTTP), `regex` a
whole reply matching it, `ebnf_grammar` llguidance's Lark, or the GBNF of NVIDIA's xgrammar
examples (`root ::= [0-9]+`), which llguidance's own converter turns into Lark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
from llguidance.gbnf_to_lark import any_to_lark

from contracts.errors import invalid_request
from contracts.generation import Logprobs
from contracts.guided_grammar import json_object_grammar, json_schema_grammar, regex_grammar
from contracts.openai_wire.logprobs import token_logprobs

GUIDE_TYPES = ("json", "json_schema", "regex", "ebnf_grammar")
# A guide's bound, in UTF-8 bytes. llguidance's own limits refuse far smaller grammars in
# practice (a schema of 10,000 properties, 259 KB, compiles past the 2 s bound), so a larger
# guide is refused unread instead of holding a compile thread for seconds first.
MAX_GUIDE_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class DoorTensor:
    """One of TensorRT-LLM's tensors the door takes or sends: its name, its datatype and the
    shape it declares (without a batch dimension: every request is its own batch)."""

    name: str
    datatype: str
    dims: tuple[int, ...]

    @property
    def is_list(self) -> bool:
        return self.dims != (1,)


GUIDE_TYPE = DoorTensor("guided_decoding_guide_type", "BYTES", (1,))
GUIDE = DoorTensor("guided_decoding_guide", "BYTES", (1,))
RETURN_LOG_PROBS = DoorTensor("return_log_probs", "BOOL", (1,))
OUTPUT_LOG_PROBS = DoorTensor("output_log_probs", "FP32", (-1, -1))
CUM_LOG_PROBS = DoorTensor("cum_log_probs", "FP32", (-1,))
TRTLLM_INPUTS: dict[str, DoorTensor] = {spec.name: spec for spec in (GUIDE_TYPE, GUIDE, RETURN_LOG_PROBS)}
TRTLLM_OUTPUTS: tuple[DoorTensor, ...] = (OUTPUT_LOG_PROBS, CUM_LOG_PROBS)


@dataclass(frozen=True, slots=True)
class Guide:
    """A request's guided decoding: TensorRT-LLM's guide type and its guide ("" for `json`)."""

    guide_type: str
    guide: str

    def grammar(self) -> str:
        """The grammar the reply follows; `ApiError` 400 naming `guided_decoding_guide` when the
        guide is not one of its type. Whether the grammar compiles is GenerationService's check.
        Converting GBNF is Python over the whole text: call it off the event loop."""
        if self.guide_type == "json":
            return json_object_grammar()
        if self.guide_type == "json_schema":
            return json_schema_grammar(_schema(self.guide))
        if self.guide_type == "regex":
            return regex_grammar(self.guide)
        try:
            return any_to_lark(self.guide)
        except RecursionError:
            _refuse(f"input {GUIDE.name!r}: the grammar nests too deeply")
        except Exception as exc:  # GbnfToLarkError, and bare Exceptions (an undefined rule, no `root`)
            _refuse(f"input {GUIDE.name!r} is neither Lark nor GBNF: {_first_line(str(exc))}")


def guide_from(guide_type: str | None, guide: str | None) -> Guide | None:
    """The request's guide from its two inputs (None: neither given); `ApiError` 400 naming
    the input for a type TensorRT-LLM does not have, a guide without a type, a type that
    needs a guide without one (or `json` with one: it takes none), a guide over the bound."""
    if guide_type is None:
        if guide is not None:
            raise invalid_request(
                f"input {GUIDE.name!r} needs {GUIDE_TYPE.name!r}: one of {', '.join(GUIDE_TYPES)}", GUIDE.name
            )
        return None
    if guide_type not in GUIDE_TYPES:
        raise invalid_request(f"input {GUIDE_TYPE.name!r} must be one of: {', '.join(GUIDE_TYPES)}", GUIDE_TYPE.name)
    text = guide or ""
    if guide_type == "json":
        if text:
            _refuse(f"guide type 'json' (any JSON object) takes no {GUIDE.name!r}; send a schema as 'json_schema'")
        return Guide(guide_type, "")
    if not text:
        _refuse(f"guide type {guide_type!r} needs input {GUIDE.name!r}")
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_GUIDE_BYTES:
        _refuse(f"input {GUIDE.name!r} is {size:,} bytes; the most it may be is {MAX_GUIDE_BYTES:,}")
    return Guide(guide_type, text)


def output_log_probs(token_ids: Sequence[int], logprobs: Logprobs | None) -> list[float]:
    """One log-probability per token of a response, from the same source as the OpenAI
    routes' (`contracts.openai_wire.logprobs`); NaN for a token whose was not kept (a reply read
    back from another gateway's record), so the list always lines up with the token ids."""
    known = [entry.logprob for entry in token_logprobs(token_ids, logprobs)]
    return known + [math.nan] * (len(token_ids) - len(known))


def log_prob_arrays(
    values: Sequence[float], cumulative: float
) -> tuple[tuple[DoorTensor, npt.NDArray[np.float32]], ...]:
    """The two outputs in TensorRT-LLM's shapes for one beam: [1, n] and [1]."""
    return (
        (OUTPUT_LOG_PROBS, np.asarray(values, dtype=np.float32).reshape(1, len(values))),
        (CUM_LOG_PROBS, np.asarray([cumulative], dtype=np.float32)),
    )


def _schema(text: str) -> dict[str, Any]:
    """The guide of a `json_schema` as a schema object (JSON's own numbers only: no NaN)."""
    try:
        schema = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        _refuse(f"input {GUIDE.name!r} is not JSON: {exc}")
    except RecursionError:
        _refuse(f"input {GUIDE.name!r}: the schema nests too deeply")
    if not isinstance(schema, dict):
        _refuse(f"input {GUIDE.name!r} must be a JSON schema object, got {type(schema).__name__}")
    return schema


def _first_line(message: str) -> str:
    """The converter's complaint without the text it quotes after it, at most 200 characters."""
    line = message.strip().splitlines()[0] if message.strip() else "it does not parse"
    return line if len(line) <= 200 else line[:197] + "..."


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _refuse(message: str) -> NoReturn:
    raise invalid_request(message, GUIDE.name)
