"""End to end through the official `openai` SDK: a real gateway process in front of the real
Triton server of `triton_pool`, one streamed chat completion rendered with the model's own
chat template, whose prompt reaches the engine with exactly one BOS."""

from __future__ import annotations

import openai
import pytest
from tokenizers import Tokenizer

pytestmark = pytest.mark.integration


def test_streamed_chat_completion_through_the_sdk(live_gateway, triton_pool) -> None:  # type: ignore[no-untyped-def]
    client = openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=live_gateway.api_key, max_retries=0, timeout=60)
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "The quick brown fox"},
    ]
    stream = client.chat.completions.create(
        model=triton_pool.model_id,
        messages=messages,
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
        extra_headers={"X-Request-Id": "e2e-chat-1"},
    )
    chunks = list(stream)
    assert {chunk.id for chunk in chunks} == {"chatcmpl-e2e-chat-1"}
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "length"
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 12
    # The server counted the prompt as HF's apply_chat_template encodes it: one BOS, not two.
    tokenizer = Tokenizer.from_file(str(triton_pool.model_dir / "tokenizer.json"))
    rendered = "<s>[INST] <<SYS>>\nAnswer briefly.\n<</SYS>>\n\nThe quick brown fox [/INST]"
    assert usage.prompt_tokens == len(tokenizer.encode(rendered, add_special_tokens=False).ids)

    # Greedy, whole: the same text.
    whole = client.chat.completions.create(
        model=triton_pool.model_id, messages=messages, max_tokens=12, extra_body={"ignore_eos": True}
    )
    assert whole.choices[0].message.content == text
