"""Shared fixtures for the engine's scheduling tests: a tiny fake model that checks the KV.

`EchoModel` favours token (last + 1) % vocab, so replies are predictable (with `digest=True` it
favours a digest of the whole context instead, so any KV mix-up changes the reply), and it keeps its own
paged "KV cache" (which token at which position sits in each slot). Every chunk must find the
positions before it already written in the slots its block table names, and the context it
reads is recorded, so a test can check that prefix-cache hits and recomputes saw exactly the
sequence's tokens.

Tests run with `--import-mode=importlib`, where a conftest is not importable, so the helpers
reach tests as fixtures (`make_model`, `make_request`, `make_sequence`, `invariants`, ...).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from engine.config import EngineConfig
from engine.forward_batch import SequenceChunk
from engine.request import EngineRequest, RequestClass, SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import RequestStatus, Sequence


class EchoModel:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        vocab_size: int = 1000,
        eos_token_id: int | None = None,
        digest: bool = False,
    ) -> None:
        self.num_blocks = num_blocks
        self.digest = digest
        self.block_size = block_size
        self._vocab_size = vocab_size
        self._eos_token_id = eos_token_id
        # slot -> (position, token) written there; a slot is block_id * block_size + offset.
        self.slots: dict[int, tuple[int, int]] = {}
        self.steps: list[list[SequenceChunk]] = []
        # For every chunk that produced logits: the full context it attended to.
        self.contexts: list[tuple[int, ...]] = []
        self.fail_next = False

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def eos_token_id(self) -> int | None:
        return self._eos_token_id

    def forward(self, chunks: list[SequenceChunk]) -> npt.NDArray[np.float32]:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("injected model failure")
        self.steps.append(list(chunks))
        rows = []
        for chunk in chunks:
            context = self._read_and_write(chunk)
            if chunk.need_logits:
                self.contexts.append(context)
                row = np.zeros(self._vocab_size, np.float32)
                row[self.next_token(context)] = 1.0
                rows.append(row)
        return np.stack(rows) if rows else np.zeros((0, self._vocab_size), np.float32)

    def next_token(self, context: tuple[int, ...] | list[int]) -> int:
        if self.digest:
            return context_digest(context, self._vocab_size)
        return (context[-1] + 1) % self._vocab_size

    def reply(self, prompt: tuple[int, ...] | list[int], num_tokens: int) -> list[int]:
        """The greedy reply an engine must produce (ignoring eos), computed without any KV."""
        tokens = list(prompt)
        for _ in range(num_tokens):
            tokens.append(self.next_token(tokens))
        return tokens[len(prompt) :]

    def _slot(self, chunk: SequenceChunk, position: int) -> int:
        block_id = chunk.block_table[position // self.block_size]
        assert 0 <= block_id < self.num_blocks
        return block_id * self.block_size + position % self.block_size

    def _read_and_write(self, chunk: SequenceChunk) -> tuple[int, ...]:
        end = chunk.start_position + len(chunk.token_ids)
        assert len(chunk.block_table) * self.block_size >= end, "block table too short for the chunk"
        context = []
        for position in range(chunk.start_position):
            written = self.slots.get(self._slot(chunk, position))
            assert written is not None and written[0] == position, f"KV for position {position} missing"
            context.append(written[1])
        for position, token in enumerate(chunk.token_ids, start=chunk.start_position):
            self.slots[self._slot(chunk, position)] = (position, token)
        return (*context, *chunk.token_ids)


def context_digest(context: tuple[int, ...] | list[int], vocab_size: int) -> int:
    return sum((i + 1) * token for i, token in enumerate(context)) % vocab_size


def build_request(
    request_id: str,
    prompt: list[int] | tuple[int, ...] | range,
    max_tokens: int = 4,
    request_class: RequestClass = RequestClass.INTERACTIVE,
    resume: tuple[int, ...] = (),
    namespace: str = "",
    slo_ttft_ms: int | None = None,
    **sampling: object,
) -> EngineRequest:
    return EngineRequest(
        request_id=request_id,
        prompt_token_ids=tuple(prompt),
        sampling=SamplingParams(max_tokens=max_tokens, **sampling),  # type: ignore[arg-type]
        request_class=request_class,
        resume_token_ids=resume,
        cache_namespace=namespace,
        slo_ttft_ms=slo_ttft_ms,
    )


def check_block_invariants(scheduler: Scheduler) -> None:
    """Block accounting holds: refs match tables, nothing past capacity, shared blocks are cached."""
    bm = scheduler.block_manager
    assert 0 <= bm.num_used_blocks <= bm.num_blocks
    running = [seq for seq in scheduler.unfinished() if seq.status is RequestStatus.RUNNING]
    refs: dict[int, int] = {}
    for seq in running:
        assert len(seq.block_table) * bm.block_size >= seq.num_computed_tokens
        for block_id in seq.block_table:
            refs[block_id] = refs.get(block_id, 0) + 1
    for seq in scheduler.unfinished():
        if seq.status is not RequestStatus.RUNNING:
            assert not seq.block_table
    free = set(bm.free_queue())
    assert len(free) == bm.num_free_blocks
    for block_id in range(bm.num_blocks):
        assert bm.block(block_id).ref_cnt == refs.get(block_id, 0)
        assert (block_id in free) == (refs.get(block_id, 0) == 0)
        if refs.get(block_id, 0) > 1:
            assert bm.block(block_id).block_hash is not None, "only cached full blocks are shared"


@pytest.fixture
def make_config() -> Callable[..., EngineConfig]:
    def build(**overrides: object) -> EngineConfig:
        fields: dict[str, object] = {"kv_capacity_tokens": 64, "block_size": 4}
        fields.update(overrides)
        return EngineConfig(**fields)  # type: ignore[arg-type]

    return build


def build_sequence(
    request_id: str,
    prompt: list[int] | tuple[int, ...],
    arrival: int,
    max_tokens: int = 4,
    request_class: RequestClass = RequestClass.INTERACTIVE,
    namespace: str = "",
) -> Sequence:
    request = EngineRequest(
        request_id=request_id,
        prompt_token_ids=tuple(prompt),
        sampling=SamplingParams(max_tokens=max_tokens),
        request_class=request_class,
        cache_namespace=namespace,
    )
    return Sequence.from_request(request, arrival)


@pytest.fixture
def make_model() -> Callable[..., EchoModel]:
    return EchoModel


@pytest.fixture
def make_request() -> Callable[..., EngineRequest]:
    return build_request


@pytest.fixture
def make_sequence() -> Callable[..., Sequence]:
    return build_sequence


@pytest.fixture
def invariants() -> Callable[[Scheduler], None]:
    return check_block_invariants
