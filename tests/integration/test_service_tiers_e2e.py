"""Levels of service end to end (docs/tiers.md), through the official `openai` SDK and
tritonclient against a real gateway, Redis and Triton: the tier that served is echoed whole and
streamed, a tier the team is not granted is a 403, and the gRPC door's `service_tier`
parameter runs the request at that tier."""

from __future__ import annotations

import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient

from .conftest import MODEL_ID, LiveGateway

pytestmark = pytest.mark.integration


def sdk(gateway: LiveGateway, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=api_key, max_retries=0, timeout=60)


def test_the_sdk_sees_the_tier_that_served_whole_and_streamed(live_gateway: LiveGateway) -> None:
    client = sdk(live_gateway, live_gateway.api_key)
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    whole = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=4, service_tier="priority")
    assert whole.service_tier == "priority"
    stream = client.chat.completions.create(
        model=MODEL_ID, messages=messages, max_tokens=4, stream=True, service_tier="flex"
    )
    assert {chunk.service_tier for chunk in stream} == {"flex"}
    # The SDK's completions take no `service_tier` of their own: it goes in the body.
    auto = client.completions.create(model=MODEL_ID, prompt="hello", max_tokens=2, extra_body={"service_tier": "auto"})
    assert (auto.model_extra or {})["service_tier"] == "default"  # the team's default class


def test_a_tier_not_granted_is_a_403_naming_the_teams_tiers(live_gateway: LiveGateway) -> None:
    other = sdk(live_gateway, live_gateway.other_key)  # e2e-other: default, flex and batch
    with pytest.raises(openai.PermissionDeniedError) as refused:
        other.completions.create(model=MODEL_ID, prompt="hello", max_tokens=2, extra_body={"service_tier": "priority"})
    assert "'priority' tier" in refused.value.message and "default, flex, batch" in refused.value.message
    flex = other.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "hi"}], max_tokens=2, service_tier="flex"
    )
    assert flex.service_tier == "flex"


def test_the_door_takes_a_service_tier_parameter(live_gateway: LiveGateway) -> None:
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"hello"], dtype=np.object_))
    max_tokens = grpcclient.InferInput("max_tokens", [1], "INT32")
    max_tokens.set_data_from_numpy(np.array([3], dtype=np.int32))
    stream = grpcclient.InferInput("stream", [1], "BOOL")
    stream.set_data_from_numpy(np.array([False]))
    with grpcclient.InferenceServerClient(live_gateway.grpc_url) as client:
        result = client.infer(
            MODEL_ID, [text, max_tokens, stream], headers=live_gateway.headers, parameters={"service_tier": "priority"}
        )
        assert result.as_numpy("finish_reason") is not None
        with pytest.raises(grpcclient.InferenceServerException) as refused:
            client.infer(
                MODEL_ID, [text, max_tokens, stream], headers=live_gateway.headers, parameters={"service_tier": "gold"}
            )
        assert "service_tier" in str(refused.value)
