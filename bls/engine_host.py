"""Hosts one EngineLoop inside a Triton model: the `cpu_engine` model, or `llm` itself when
the engine runs in `llm`'s process (bls/in_process_engine.py: `submit` instead of `handle`,
outputs handed over in memory instead of as response tensors).

    execute() ──handle()──▶ parse ──▶ EngineLoop.submit(request, notify=wake)
                                            │ engine thread steps, outputs pile up per request
    sender thread ◀──────── wake ───────────┘
       for each active request:   is_cancelled()? ──▶ EngineLoop.cancel(id)
                                  stream.drain()  ──▶ one response (merged deltas), FINAL at the end
                                  (not sooner than the stream interval after its previous one,
                                   except the first token and the end)
       first, every pass:         EngineLoop.stats() ──▶ publisher (only changed gauges)
                                  heartbeat (Unix time, at most every heartbeat_interval_s)

One sender thread serves every request: `drain()` merges whatever the engine wrote since the
last pass, so a slow reader gets fewer, larger responses and the engine never waits for it.
Triton's `is_cancelled()` is polled here too, because a cancelled client sends nothing we
could wait on. Control requests (`cancel_request_id`) cancel a running request by id; an id
that is not running yet is remembered for a while, so a cancel that overtakes its request
still wins.

The sender wakes at least every `cancel_poll_s` (0.2 s) even when nothing runs, so the
heartbeat gauge advances while the stub lives: a supervisor tells a crashed stub (Triton's
health endpoint still green) from an idle one by that gauge standing still.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from bls.engine_tensors import engine_output_tensors, parse_engine_request, read_cancel_target
from bls.metrics import MetricsPublisher
from bls.tensors import InputError, ResponseSink, TensorSource
from contracts.latency_log import LatencyLog
from contracts.llm_tensors import invalid_input_message
from engine.engine_loop import RequestTimes
from engine.request import EngineRequest, FinishReason, RequestOutput
from engine.stats import EngineStats

logger = logging.getLogger(__name__)
_V = TypeVar("_V")

_IDS_KEPT = 4096  # recently finished ids, and cancels that arrived before their request
_EARLY_CANCEL_TTL_S = 5.0  # a cancel overtakes its request by milliseconds, never by seconds


class RequestStreamLike(Protocol):
    times: RequestTimes

    def drain(self) -> RequestOutput | None: ...

    @property
    def finished(self) -> bool: ...


class EngineLoopLike(Protocol):
    """What the host needs from `engine.engine_loop.EngineLoop`."""

    def start(self) -> None: ...

    def stop(self, timeout: float) -> None: ...

    def submit(self, request: EngineRequest, notify: Callable[[], None] | None = None) -> RequestStreamLike: ...

    def cancel(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...


class OutputSink(Protocol):
    """Where one request's outputs go: Triton's response sender, as the engine model's
    tensors (`handle`), or the `llm` pipeline of the same process when the engine runs
    inside `llm` (`submit`, bls/in_process_engine.py)."""

    def deliver(self, output: RequestOutput) -> None:
        """One output (merged deltas; the last has `finished`). Called on the sender thread."""
        ...

    def is_cancelled(self) -> bool:
        """Whether the request's client has gone (polled every `cancel_poll_s`)."""
        ...


class _TensorSink:
    """Outputs as the engine model's response tensors on a Triton response sender."""

    def __init__(self, sink: ResponseSink) -> None:
        self._sink = sink

    def deliver(self, output: RequestOutput) -> None:
        self._sink.send(engine_output_tensors(output), final=output.finished)

    def is_cancelled(self) -> bool:
        return self._sink.is_cancelled()


@dataclass(slots=True)
class _Active:
    request: EngineRequest
    stream: RequestStreamLike
    sink: OutputSink
    cancel_sent: bool = False
    last_sent_at: float | None = None  # None until the first response went out
    first_sent: float | None = None  # wall clock of the first token's response (latency log)


class EngineHost:
    """Runs an engine loop and one sender thread that streams its outputs to Triton."""

    def __init__(
        self,
        loop: EngineLoopLike,
        publisher: MetricsPublisher | None = None,
        *,
        cancel_poll_s: float = 0.2,
        stream_interval_s: float = 0.0,
        max_responses_per_s: float | None = None,
        heartbeat_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        latency_log: LatencyLog | None = None,
        name: str = "cpu_engine",
    ) -> None:
        self._loop = loop
        self._publisher = publisher
        self._latency_log = latency_log  # None: no per-request stamp lines (the default)
        self._name = name
        self._cancel_poll_s = cancel_poll_s
        self._stream_interval_s = stream_interval_s
        self._max_responses_per_s = max_responses_per_s
        self._interval_s = stream_interval_s  # this pass's interval (grows with active replies)
        self._next_send_due: float | None = None  # earliest held-back response, for the sender's sleep
        self._clock = clock
        self._wall_clock = wall_clock
        # Setting a gauge is a round trip to the server: a busy sender beats at most this often.
        self._heartbeat_interval_s = heartbeat_interval_s
        self._next_heartbeat_at = float("-inf")
        self._lock = threading.Lock()
        self._active: dict[str, _Active] = {}
        self._early_cancels: OrderedDict[str, float] = OrderedDict()  # id -> when it came
        self._recently_finished: OrderedDict[str, None] = OrderedDict()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_cancel_poll_at = 0.0
        self._anonymous_ids = itertools.count()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._loop.start()
        self._thread = threading.Thread(target=self._run, name="engine-host-sender", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the engine; every request still open gets a FINAL response (aborted)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._loop.stop(timeout)
        self.pump()  # deliver whatever the engine finished while stopping
        with self._lock:
            leftovers = list(self._active.values())
            self._active.clear()
        for entry in leftovers:
            aborted = RequestOutput(
                entry.request.request_id,
                (),
                True,
                FinishReason.ABORTED,
                len(entry.request.prompt_token_ids),
                0,
                0,
            )
            self._send(entry, aborted)
        # Last, drop the publisher: Triton's metric families must be freed while the stub can
        # still tell the server. One still alive when the stub tears down is freed after the
        # stub's shared memory and crashes it (SIGSEGV in Metric::SaveToSharedMemory: every
        # stop of a server, docs/tensors.md). A sender thread that outlived `timeout` keeps
        # its own reference until its pass ends.
        self._publisher = None

    # --- called from Triton's execute --------------------------------------------------------

    def handle(self, request_id: str, src: TensorSource, sink: ResponseSink) -> None:
        """Take one `cpu_engine` request: a control request, or a generation to stream."""
        try:
            target = read_cancel_target(src)
            if target is not None:
                self.cancel(target)
                sink.send(None, final=True)
                return
            request = parse_engine_request(request_id or self._anonymous_id(), src)
            self.submit(request, _TensorSink(sink))
        except (InputError, ValueError) as exc:  # ValueError: the engine cannot serve it
            sink.send(None, final=True, error=invalid_input_message(str(exc)))
        except Exception as exc:  # the request must never hang: answer with the error
            logger.exception("cpu_engine failed to take request %r", request_id)
            sink.send(None, final=True, error=f"engine error: {exc}")

    def cancel(self, request_id: str) -> bool:
        """Cancel a running request; True when it was running.

        A cancel for an id never seen is remembered for a few seconds (it may have overtaken
        its request); one for an id that just finished is a late cancel and is dropped, so a
        later request that reuses the id is not hit by it.
        """
        with self._lock:
            entry = self._active.get(request_id)
            if entry is None:
                if request_id not in self._recently_finished:
                    self._early_cancels[request_id] = self._clock()
                    _trim(self._early_cancels)
                return False
            if entry.cancel_sent:
                return True
            entry.cancel_sent = True
        self._loop.cancel(request_id)
        return True

    @property
    def active_request_ids(self) -> list[str]:
        with self._lock:
            return list(self._active)

    # --- the sender --------------------------------------------------------------------------

    def pump(self) -> None:
        """One pass: publish metrics (and the heartbeat), forward client cancellations, send
        pending outputs.

        Metrics go first: the stats already cover the step whose outputs are sent next, so a
        client that scrapes right after its first token sees the blocks that token holds.
        """
        publisher = self._publisher  # once: stop() drops it
        if publisher is not None:
            publisher.publish(self._loop.stats())
        now = self._clock()
        if publisher is not None and now >= self._next_heartbeat_at:
            self._next_heartbeat_at = now + self._heartbeat_interval_s
            publisher.heartbeat(self._wall_clock())
        # is_cancelled() is a round trip to the Triton server: ask at most every cancel_poll_s.
        poll_cancels = now >= self._next_cancel_poll_at
        if poll_cancels:
            self._next_cancel_poll_at = now + self._cancel_poll_s
        with self._lock:
            entries = list(self._active.values())
        self._interval_s = self._stream_interval_s
        if self._max_responses_per_s is not None:
            # n replies at one response per interval each stay within the server's budget.
            self._interval_s = max(self._interval_s, len(entries) / self._max_responses_per_s)
        next_due: float | None = None
        for entry in entries:
            if poll_cancels and not entry.cancel_sent and entry.sink.is_cancelled():
                entry.cancel_sent = True
                self._loop.cancel(entry.request.request_id)
            due = self._send_due(entry)
            if due > now and not entry.stream.finished:
                next_due = due if next_due is None else min(next_due, due)
                continue  # hold it back: the deltas keep merging in the stream
            output = entry.stream.drain()
            if output is None:
                continue
            if output.finished:
                self._forget(entry.request.request_id)
            if output.new_token_ids:
                entry.last_sent_at = now
            self._send(entry, output)
        self._next_send_due = next_due

    def _send_due(self, entry: _Active) -> float:
        """When this request's next non-final response may go out."""
        if entry.last_sent_at is None:
            return float("-inf")  # the first token goes out at once
        return entry.last_sent_at + self._interval_s

    def _run(self) -> None:
        while not self._stopping.is_set():
            timeout = self._cancel_poll_s
            if self._next_send_due is not None:
                timeout = max(0.0, min(timeout, self._next_send_due - self._clock()))
            self._wake.wait(timeout)
            self._wake.clear()
            try:
                self.pump()
            except Exception:  # keep serving the other requests
                logger.exception("engine host sender pass failed")

    def submit(self, request: EngineRequest, sink: OutputSink) -> None:
        """Run `request`, its outputs to `sink` as the engine writes them (paced as every
        reply is). InputError when its id is already running here."""
        with self._lock:
            if request.request_id in self._active:
                raise InputError(f"request id {request.request_id!r} is already running on this engine")
            cancelled_at = self._early_cancels.pop(request.request_id, None)
            cancelled_early = cancelled_at is not None and self._clock() - cancelled_at < _EARLY_CANCEL_TTL_S
            if not cancelled_early:
                stream = self._loop.submit(request, notify=self._wake.set)
                self._active[request.request_id] = _Active(request, stream, sink)
        if cancelled_early:
            prompt = len(request.prompt_token_ids)
            sink.deliver(RequestOutput(request.request_id, (), True, FinishReason.CANCELLED, prompt, 0, 0))
        self._wake.set()

    def _send(self, entry: _Active, output: RequestOutput) -> None:
        try:
            entry.sink.deliver(output)
            if self._latency_log is not None:
                self._log_latency(entry, output)
        except Exception:
            # The client is gone (or the response is broken): stop spending engine time on it.
            logger.exception("sending a response for %r failed", entry.request.request_id)
            gone = self._forget(entry.request.request_id)
            if gone and not output.finished:
                self._loop.cancel(entry.request.request_id)

    def _log_latency(self, entry: _Active, output: RequestOutput) -> None:
        """Stamp the first token's response; at the end, write the request's line."""
        assert self._latency_log is not None
        now = self._wall_clock()
        if entry.first_sent is None and output.new_token_ids:
            entry.first_sent = now
        if output.finished:
            times = entry.stream.times
            marks = {
                "max_tokens": entry.request.sampling.max_tokens,
                "submitted": times.submitted,
                "added": times.added,
                "first_step_started": times.first_step_started,
                "first_token": times.first_token,
                "first_sent": entry.first_sent,
                "finished": times.finished,
                "final_sent": now,
            }
            self._latency_log.write(self._name, entry.request.request_id, marks)

    def _forget(self, request_id: str) -> bool:
        """Drop a request from the active set; True when it was there."""
        with self._lock:
            gone = self._active.pop(request_id, None)
            self._recently_finished[request_id] = None
            _trim(self._recently_finished)
        return gone is not None

    def _anonymous_id(self) -> str:
        return f"cpu-engine-{next(self._anonymous_ids)}"


def _trim(ids: OrderedDict[str, _V]) -> None:
    while len(ids) > _IDS_KEPT:
        ids.popitem(last=False)
