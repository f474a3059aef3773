"""generation_args: an EngineRequest as the arguments of `LLM.generate_async`."""

from __future__ import annotations

from typing import Any

import pytest

from engine.request import CLASS_ORDER, EngineRequest, RequestClass, SamplingParams
from trtllm.generation_args import PRIORITY_OF_CLASS, GenerationArgs, generation_args

END_ID = 2
BASE = {"end_id": END_ID, "max_tokens": 8, "ignore_eos": False, "detokenize": False}


def request(
    request_class: RequestClass = RequestClass.INTERACTIVE,
    resume: tuple[int, ...] = (),
    namespace: str = "",
    **sampling: Any,
) -> EngineRequest:
    params = SamplingParams(**{"max_tokens": 8, **sampling})
    return EngineRequest("r", (5, 6, 7), params, request_class, resume, namespace)


def test_greedy_is_top_k_1_without_temperature() -> None:
    assert generation_args(request(top_p=0.5, top_k=40), END_ID, with_priority=False) == GenerationArgs(
        [5, 6, 7], {**BASE, "top_k": 1}, {}
    )


def test_sampling_passes_temperature_and_the_filters_that_are_on() -> None:
    args = generation_args(request(temperature=0.8, top_p=0.9, top_k=50), END_ID, with_priority=False)
    assert args.sampling == {**BASE, "temperature": 0.8, "top_p": 0.9, "top_k": 50}
    args = generation_args(request(temperature=0.8, top_p=1.0, top_k=0), END_ID, with_priority=False)
    assert args.sampling == {**BASE, "temperature": 0.8}  # both filters off


def test_seed_stop_token_ids_and_ignore_eos_are_passed() -> None:
    args = generation_args(request(seed=0, stop_token_ids=(9, 10), ignore_eos=True), END_ID, with_priority=False)
    assert args.sampling == {**BASE, "top_k": 1, "seed": 0, "stop_token_ids": [9, 10], "ignore_eos": True}


def test_stop_token_sequences_stay_with_the_engine_loop() -> None:
    args = generation_args(request(stop_token_sequences=((3, 4),)), END_ID, with_priority=False)
    assert args.sampling == {**BASE, "top_k": 1}


def test_a_resumed_reply_is_context_and_counts_towards_max_tokens() -> None:
    args = generation_args(request(resume=(8, 9, 10)), END_ID, with_priority=False)
    assert args.inputs == [5, 6, 7, 8, 9, 10]
    assert args.sampling["max_tokens"] == 5


@pytest.mark.parametrize(
    ("request_class", "priority"),
    list(zip(RequestClass, (1.0, 0.75, 0.25, 0.0), strict=True)),
)
def test_the_class_is_a_priority_only_where_the_release_takes_one(request_class: RequestClass, priority: float) -> None:
    assert generation_args(request(request_class), END_ID, with_priority=True).extra == {"priority": priority}
    assert generation_args(request(request_class), END_ID, with_priority=False).extra == {}


def test_priorities_follow_the_class_order_around_the_executors_default() -> None:
    """Highest class, highest priority; people's classes above TensorRT-LLM's default 0.5
    (a request sent without one), flex and bulk below it."""
    priorities = [PRIORITY_OF_CLASS[cls] for cls in CLASS_ORDER]
    assert priorities == sorted(priorities, reverse=True) and len(set(priorities)) == len(priorities)
    assert all(0.0 <= p <= 1.0 for p in priorities)
    people = {cls for cls in CLASS_ORDER if PRIORITY_OF_CLASS[cls] > 0.5}
    assert people == {RequestClass.PRIORITY, RequestClass.INTERACTIVE}


def test_the_cache_namespace_is_the_cache_salt() -> None:
    args = generation_args(request(namespace="team-a"), END_ID, with_priority=True)
    assert args.extra == {"priority": 0.75, "cache_salt": "team-a"}
