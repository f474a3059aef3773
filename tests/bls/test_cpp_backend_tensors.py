"""The engine dialects: exact C++-backend tensors, response parsing, and the switchyard round trip."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bls.cpp_backend_tensors import CppBackendDialect, stop_words_list
from bls.engine_dialect import EngineDialect, SwitchyardDialect
from bls.engine_tensors import ENGINE_OUTPUT_NAMES, engine_output_tensors, parse_engine_request, read_cancel_target
from bls.model_config import ModelConfigError, engine_dialect_from_parameters
from bls.tensors import Array, DictTensorSource, InputError, Outputs
from bls.tokenizer import GenerationTokenIds
from engine.request import EngineRequest, FinishReason, RequestClass, RequestOutput, SamplingParams

EOS = 2
PAD = 0


def request(*, max_tokens: int = 4, resume: tuple[int, ...] = (), **sampling: Any) -> EngineRequest:
    return EngineRequest(
        request_id="r1",
        prompt_token_ids=(1, 5, 6),
        sampling=SamplingParams(max_tokens=max_tokens, **sampling),
        resume_token_ids=resume,
    )


def assert_tensors(actual: Outputs, expected: dict[str, tuple[list[object], type]]) -> None:
    """Same names; each tensor with exactly these nested values (hence shape) and dtype."""
    assert sorted(actual) == sorted(expected)
    for name, (values, dtype) in expected.items():
        want = np.asarray(values, dtype=dtype)
        assert actual[name].dtype == want.dtype, name
        assert actual[name].shape == want.shape, name
        assert np.array_equal(actual[name], want), name


def response(ids: list[int], length: int | None = None) -> DictTensorSource:
    return DictTensorSource(
        {
            "output_ids": np.asarray([[ids]], dtype=np.int32),
            "sequence_length": np.asarray([[len(ids) if length is None else length]], dtype=np.int32),
        }
    )


# --- request tensors ---------------------------------------------------------------------


def test_greedy_request_asks_for_top_k_1_only() -> None:
    tensors = CppBackendDialect([EOS], PAD).request_tensors(request())
    assert_tensors(
        tensors,
        {
            "input_ids": ([[1, 5, 6]], np.int32),
            "input_lengths": ([[3]], np.int32),
            "request_output_len": ([[4]], np.int32),
            "end_id": ([[EOS]], np.int32),
            "pad_id": ([[PAD]], np.int32),
            "streaming": ([[True]], np.bool_),
            "runtime_top_k": ([[1]], np.int32),
        },
    )


def test_sampled_request_carries_temperature_top_p_top_k() -> None:
    tensors = CppBackendDialect([EOS]).request_tensors(request(temperature=0.7, top_p=0.9, top_k=40))
    assert tensors["temperature"].dtype == np.float32 and tensors["temperature"].shape == (1, 1)
    assert tensors["temperature"][0, 0] == np.float32(0.7)
    assert tensors["runtime_top_p"].dtype == np.float32 and tensors["runtime_top_p"][0, 0] == np.float32(0.9)
    assert_tensors({"runtime_top_k": tensors["runtime_top_k"]}, {"runtime_top_k": ([[40]], np.int32)})
    assert_tensors({"pad_id": tensors["pad_id"]}, {"pad_id": ([[EOS]], np.int32)})  # pad defaults to EOS
    assert "seed" not in tensors and "stop_words_list" not in tensors


def test_seed_is_uint64_and_negative_seeds_wrap() -> None:
    dialect = CppBackendDialect([EOS])
    seeded = dialect.request_tensors(request(temperature=1.0, seed=123))
    assert_tensors({"seed": seeded["seed"]}, {"seed": ([[123]], np.uint64)})
    wrapped = dialect.request_tensors(request(temperature=1.0, seed=-1))
    assert wrapped["seed"][0, 0] == np.uint64(2**64 - 1)


def test_resumed_request_reads_resumed_tokens_as_prompt_and_asks_for_the_rest() -> None:
    tensors = CppBackendDialect([EOS]).request_tensors(request(max_tokens=5, resume=(8, 9)))
    assert tensors["input_ids"].tolist() == [[1, 5, 6, 8, 9]]
    assert tensors["input_lengths"].tolist() == [[5]]
    assert tensors["request_output_len"].tolist() == [[3]]


def test_resumed_tokens_that_leave_nothing_to_generate_are_refused() -> None:
    with pytest.raises(InputError, match="2 resumed tokens leave nothing to generate under max_tokens=2"):
        CppBackendDialect([EOS]).request_tensors(request(max_tokens=2, resume=(8, 9)))


def test_stop_sequences_and_stop_ids_share_stop_words_list() -> None:
    tensors = CppBackendDialect([EOS]).request_tensors(
        request(stop_token_sequences=((8, 9), (10,)), stop_token_ids=(7,))
    )
    assert_tensors(
        {"stop_words_list": tensors["stop_words_list"]},
        {"stop_words_list": ([[[8, 9, 10, 7], [2, 3, 4, -1]]], np.int32)},
    )


def test_extra_eos_ids_stop_the_reply_unless_ignore_eos() -> None:
    dialect = CppBackendDialect([EOS, 50, EOS])
    tensors = dialect.request_tensors(request(stop_token_ids=(7,)))
    assert tensors["end_id"].tolist() == [[EOS]]
    assert tensors["stop_words_list"].tolist() == [[[7, 50], [1, 2]]]
    ignoring = dialect.request_tensors(request(stop_token_ids=(7,), ignore_eos=True))
    assert ignoring["end_id"].tolist() == [[-1]]  # the backend's "no end id"
    assert ignoring["stop_words_list"].tolist() == [[[7], [1]]]  # explicit stop ids still apply


def test_bad_requests_and_bad_dialects_are_refused() -> None:
    with pytest.raises(InputError, match="must not be empty"):
        stop_words_list([(8,), ()])
    assert stop_words_list([]) is None
    with pytest.raises(InputError, match="prompt is empty"):
        CppBackendDialect([EOS]).request_tensors(replace(request(), prompt_token_ids=()))
    with pytest.raises(ValueError, match="EOS"):
        CppBackendDialect([])
    with pytest.raises(ValueError, match=">= 0"):
        CppBackendDialect([EOS], pad_id=-1)


def test_cancel_is_stop_under_the_target_request_id() -> None:
    cancel = CppBackendDialect([EOS]).cancel_request("r1")
    assert cancel.request_id == "r1" and cancel.output_names == ()
    assert_tensors(
        cancel.inputs,
        {
            "input_ids": ([[0]], np.int32),
            "input_lengths": ([[0]], np.int32),
            "request_output_len": ([[0]], np.int32),
            "stop": ([[True]], np.bool_),
        },
    )
    with pytest.raises(ValueError, match="request id"):
        CppBackendDialect([EOS]).cancel_request("")


# --- response parsing --------------------------------------------------------------------


def test_streamed_responses_become_deltas_with_running_counts_then_length() -> None:
    parser = CppBackendDialect([EOS]).response_parser(request(max_tokens=5, resume=(8,)))
    outputs = [parser.parse(response([11, 12])), parser.parse(response([])), parser.parse(response([13, 14]))]
    outputs.append(parser.finish())
    assert outputs == [
        RequestOutput("r1", (11, 12), False, None, 3, 0, 2),
        RequestOutput("r1", (), False, None, 3, 0, 2),
        RequestOutput("r1", (13, 14), False, None, 3, 0, 4),
        RequestOutput("r1", (), True, FinishReason.LENGTH, 3, 0, 4),  # 4 == max_tokens - resumed
    ]


def test_a_stream_that_ends_early_stopped_and_one_we_cancelled_was_cancelled() -> None:
    dialect = CppBackendDialect([EOS])
    stopped = dialect.response_parser(request(max_tokens=4))
    stopped.parse(response([11, 12]))
    assert stopped.finish() == RequestOutput("r1", (), True, FinishReason.STOP, 3, 0, 2)
    cancelled = dialect.response_parser(request(max_tokens=4))
    cancelled.parse(response([11]))
    cancelled.cancel_requested()
    cancelled.parse(response([12, 13, 14]))  # even a full reply: we asked for the stop
    assert cancelled.finish() == RequestOutput("r1", (), True, FinishReason.CANCELLED, 3, 0, 4)


def test_sequence_length_bounds_the_tokens_read() -> None:
    parser = CppBackendDialect([EOS]).response_parser(request())
    assert parser.parse(response([11, 12, -1], length=2)).new_token_ids == (11, 12)


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"sequence_length": np.asarray([[1]], dtype=np.int32)}, "no output_ids"),
        (
            {"output_ids": np.zeros((1, 2, 3), np.int32), "sequence_length": np.asarray([[3, 3]], np.int32)},
            "one beam of one request",
        ),
        ({"output_ids": np.zeros((1, 1, 2), np.int32), "sequence_length": np.asarray([[3]], np.int32)}, "fit"),
        ({"output_ids": np.zeros((1, 1, 2), np.float32), "sequence_length": np.asarray([[2]], np.int32)}, "integers"),
        ({"output_ids": np.zeros((1, 1, 2), np.int32)}, "sequence_length"),
    ],
)
def test_malformed_responses_are_errors(tensors: dict[str, Array], message: str) -> None:
    parser = CppBackendDialect([EOS]).response_parser(request())
    with pytest.raises(InputError, match=message):
        parser.parse(DictTensorSource(tensors))


# --- the switchyard dialect through the same interface ------------------------------------


def test_switchyard_dialect_round_trip_keeps_the_existing_contract() -> None:
    dialect: EngineDialect = SwitchyardDialect()
    sent = EngineRequest(
        request_id="r1",
        prompt_token_ids=(1, 5, 6),
        sampling=SamplingParams(max_tokens=9, temperature=0.5, seed=3, stop_token_ids=(7,)),
        request_class=RequestClass.BULK,
        resume_token_ids=(11,),
        cache_namespace="team-a",
    )
    assert parse_engine_request("r1", DictTensorSource(dialect.request_tensors(sent))) == sent
    assert dialect.output_names == ENGINE_OUTPUT_NAMES
    parser = dialect.response_parser(sent)
    outputs = [
        RequestOutput("r1", (20, 21), False, None, 3, 2, 2),
        RequestOutput("r1", (22,), True, FinishReason.STOP, 3, 2, 3),
    ]
    assert [parser.parse(DictTensorSource(engine_output_tensors(o))) for o in outputs] == outputs
    parser.cancel_requested()  # the engine reports its own reason: nothing to infer
    assert parser.finish() is None
    cancel = dialect.cancel_request("r1")
    assert cancel.request_id == ""
    assert read_cancel_target(DictTensorSource(cancel.inputs)) == "r1"
    assert dialect.engine_publishes_switchyard_metrics
    assert not CppBackendDialect([EOS]).engine_publishes_switchyard_metrics


# --- choosing the dialect from config.pbtxt ----------------------------------------------


def write_json(path: Path, payload: dict[str, object]) -> None:
    path.write_text(json.dumps(payload))


def test_dialect_from_parameters(tmp_path: Path) -> None:
    assert isinstance(engine_dialect_from_parameters({"engine_dialect": "switchyard"}), SwitchyardDialect)
    write_json(tmp_path / "config.json", {"eos_token_id": 2, "pad_token_id": 0})
    write_json(tmp_path / "generation_config.json", {"eos_token_id": [2, 9], "pad_token_id": None})
    params = {"engine_dialect": "tensorrtllm_cpp", "model_dir": str(tmp_path)}
    dialect = engine_dialect_from_parameters(params)
    tensors = dialect.request_tensors(request())
    assert (tensors["end_id"].tolist(), tensors["pad_id"].tolist()) == ([[2]], [[0]])
    assert tensors["stop_words_list"].tolist() == [[[9], [1]]]


def test_generation_token_ids_prefer_generation_config(tmp_path: Path) -> None:
    write_json(tmp_path / "config.json", {"eos_token_id": 2})
    assert GenerationTokenIds.from_model_dir(tmp_path) == GenerationTokenIds((2,), None)
    write_json(tmp_path / "generation_config.json", {"eos_token_id": 7, "pad_token_id": 3})
    assert GenerationTokenIds.from_model_dir(tmp_path) == GenerationTokenIds((7,), 3)
    write_json(tmp_path / "generation_config.json", {"eos_token_id": "</s>"})
    with pytest.raises(ValueError, match="token ids must be integers"):
        GenerationTokenIds.from_model_dir(tmp_path)


def test_bad_dialect_parameters_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="must be one of switchyard, tensorrtllm_cpp, got 'tensorrtllm'"):
        engine_dialect_from_parameters({"engine_dialect": "tensorrtllm"})
    with pytest.raises(ModelConfigError, match="'engine_dialect' is missing"):
        engine_dialect_from_parameters({})
    write_json(tmp_path / "config.json", {"vocab_size": 10})
    with pytest.raises(ModelConfigError, match="eos_token_id"):
        engine_dialect_from_parameters({"engine_dialect": "tensorrtllm_cpp", "model_dir": str(tmp_path)})
