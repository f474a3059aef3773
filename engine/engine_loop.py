"""`EngineLoop`: an `LLMEngine` stepping on its own thread, with thread-safe streams per request.

    any thread                          step thread (the only one touching the engine)
    ──────────                          ───────────────────────────────────────────────
    submit(req) ─▶ inbox ──────────────▶ add_request ─▶ step() ─▶ outputs ─▶ stream.push ─▶ notify(), once a step
    cancel(id)  ─▶ inbox ──────────────▶ engine.cancel                         │
    stream.drain() / wait() ◀── merged pending output ◀────────────────────────┘

A slow reader never slows the engine: each push merges into the stream's pending output, so a
reader that falls behind gets one larger delta instead of many small ones.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.llm_engine import LLMEngine
from engine.request import EngineRequest, FinishReason, RequestOutput, TokenLogprobs
from engine.stats import EngineStats

logger = logging.getLogger(__name__)

# With requests in hand but nothing schedulable (should not happen, but must not spin hot),
# the step thread naps this long before trying again.
_BACKOFF_S = 0.005
_PR_SET_NAME = 15  # prctl(2): the calling thread's name, as the OS shows it


def merge_outputs(older: RequestOutput, newer: RequestOutput) -> RequestOutput:
    """One output equivalent to `older` then `newer`: deltas concatenated, latest totals."""
    return RequestOutput(
        request_id=newer.request_id,
        new_token_ids=older.new_token_ids + newer.new_token_ids,
        finished=newer.finished,
        finish_reason=newer.finish_reason,
        prompt_tokens=newer.prompt_tokens,
        cached_tokens=newer.cached_tokens,
        completion_tokens=newer.completion_tokens,
        logprobs=_joined(older.logprobs, newer.logprobs),
        prompt_logprobs=_joined(older.prompt_logprobs, newer.prompt_logprobs),
    )


def _joined(older: TokenLogprobs | None, newer: TokenLogprobs | None) -> TokenLogprobs | None:
    if older is None or newer is None:
        return older if newer is None else newer
    return older + newer


@dataclass(slots=True)
class RequestTimes:
    """When one request passed the loop's stages, in wall-clock seconds (`time.time()`, so the
    other processes of a server can line their own stamps up with these: docs/latency.md).

    Set once each, on the step thread (`submitted` by the submitting thread, before the step
    thread sees the request): a few clock reads per request, none per token.
    """

    submitted: float = field(default_factory=time.time)
    added: float | None = None  # the step thread took it from the inbox into the engine
    first_step_started: float | None = None  # the step that produced its first token began
    first_token: float | None = None  # ... and ended
    finished: float | None = None  # the step that produced its final output ended


class RequestStream:
    """The outputs of one request, as the step thread pushes them and a reader takes them."""

    def __init__(self, request_id: str, notify: Callable[[], None] | None = None) -> None:
        self.request_id = request_id
        self.times = RequestTimes()
        self._notify = notify
        self._cond = threading.Condition()
        self._pending: RequestOutput | None = None
        self._finished = False

    @property
    def finished(self) -> bool:
        """True once the final output has been pushed (it may still be pending)."""
        with self._cond:
            return self._finished

    def drain(self) -> RequestOutput | None:
        """Everything pushed since the last drain, merged; None if nothing. Never blocks."""
        with self._cond:
            pending, self._pending = self._pending, None
            return pending

    def wait(self, timeout: float | None = None) -> RequestOutput | None:
        """Block until something is pending (or `timeout` passes), then drain."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending is not None, timeout)
            pending, self._pending = self._pending, None
            return pending

    @property
    def notify(self) -> Callable[[], None] | None:
        """The callback `push` calls (the loop calls it once per step instead: `push_quietly`)."""
        return self._notify

    def push(self, output: RequestOutput) -> None:
        """Called on the step thread. Merges into what is pending, wakes readers, notifies."""
        if self.push_quietly(output) and self._notify is not None:
            notify_once(self._notify, self.request_id)

    def push_quietly(self, output: RequestOutput) -> bool:
        """`push` without the notify callback; False when the request had already ended."""
        with self._cond:
            if self._finished:
                return False  # a request reports its end once
            self._pending = output if self._pending is None else merge_outputs(self._pending, output)
            self._finished = output.finished
            self._cond.notify_all()
        return True


def notify_once(notify: Callable[[], None], request_id: str) -> None:
    """Call a stream's notify callback; its failure is logged, never raised into the step."""
    try:
        notify()
    except Exception:
        logger.exception("notify callback of request %r failed", request_id)


@dataclass(frozen=True, slots=True)
class _Submit:
    request: EngineRequest
    stream: RequestStream


@dataclass(frozen=True, slots=True)
class _Cancel:
    request_id: str


class EngineLoop:
    """Runs `engine.step()` on a daemon thread; any thread may submit, cancel and read stats."""

    def __init__(self, engine: LLMEngine) -> None:
        self._engine = engine
        self._cond = threading.Condition()
        # Guarded by _cond: commands for the step thread, open streams, lifecycle flags.
        self._inbox: list[_Submit | _Cancel] = []
        self._streams: dict[str, RequestStream] = {}
        self._stopping = False
        self._started = False
        self._thread = threading.Thread(target=self._run, name="engine-step", daemon=True)
        self._stats = engine.stats()  # replaced (never mutated) by the step thread

    def start(self) -> None:
        with self._cond:
            if self._started or self._stopping:
                raise RuntimeError("an EngineLoop starts once, and not after stop()")
            self._started = True
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop stepping; every unfinished request ends ABORTED. Waits up to `timeout`."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            started = self._started
        if started:
            self._thread.join(timeout)
        else:
            self._shutdown()

    def submit(self, request: EngineRequest, notify: Callable[[], None] | None = None) -> RequestStream:
        """Hand a request to the step thread. Raises ValueError for a request it cannot serve."""
        self._engine.validate_request(request)
        stream = RequestStream(request.request_id, notify)
        with self._cond:
            if self._stopping:
                raise RuntimeError("the engine loop is stopped")
            if request.request_id in self._streams:
                raise ValueError(f"request {request.request_id!r} is already running; use a new request_id")
            self._streams[request.request_id] = stream
            self._inbox.append(_Submit(request, stream))
            self._cond.notify_all()
        return stream

    def cancel(self, request_id: str) -> None:
        """Cancel a request; it ends CANCELLED at the engine's next step. Unknown ids: no-op."""
        with self._cond:
            self._inbox.append(_Cancel(request_id))
            self._cond.notify_all()

    def stats(self) -> EngineStats:
        """The engine's stats as of its last step."""
        return self._stats

    # -- the step thread --------------------------------------------------------------------

    def _run(self) -> None:
        name_os_thread(self._thread.name)
        try:
            while self._take_commands():
                if not self._engine.has_unfinished():
                    continue
                step_started = time.time()
                try:
                    outputs = self._engine.step()
                except Exception:  # a bug, not a model error (those abort inside step)
                    logger.exception("engine step failed; aborting every request in flight")
                    outputs = self._engine.abort_all()
                self._stats = self._engine.stats()
                self._deliver(outputs, step_started)
                # Hand the GIL over between steps: the host's threads (the sender, Triton's
                # execute taking new requests) would otherwise wait for the interpreter's
                # 5 ms switch interval while the engine steps back to back.
                time.sleep(0)
                if self._stats.scheduled_requests == 0 and self._engine.has_unfinished():
                    with self._cond:
                        self._cond.wait(_BACKOFF_S)
        finally:
            self._shutdown()

    def _take_commands(self) -> bool:
        """Apply queued submits and cancels; sleep while idle. False once stopping."""
        with self._cond:
            while not self._stopping and not self._inbox and not self._engine.has_unfinished():
                self._cond.wait()
            if self._stopping:
                return False
            commands, self._inbox = self._inbox, []
        rejected = []
        for command in commands:
            if isinstance(command, _Cancel):
                self._engine.cancel(command.request_id)
                continue
            try:
                self._engine.add_request(command.request)
                command.stream.times.added = time.time()
            except ValueError:
                logger.exception("request %r rejected by the engine", command.request.request_id)
                rejected.append(_aborted_output(command.request))
        self._deliver(rejected)
        self._stats = self._engine.stats()
        return True

    def _deliver(self, outputs: list[RequestOutput], step_started: float | None = None) -> None:
        """Push outputs to their streams, stamping a request's first token and its end.

        Each distinct notify callback is called once, after the step's last push: a host that
        serves every stream (bls/engine_host.py) wakes once per step, and finds all of the
        step's outputs there, instead of once per output, part of them still to come."""
        now = time.time() if outputs else 0.0
        to_notify: dict[Callable[[], None], str] = {}
        for output in outputs:
            with self._cond:
                stream = self._streams.get(output.request_id)
                if stream is not None and output.finished:
                    del self._streams[output.request_id]
            if stream is None:
                continue
            times = stream.times
            if times.first_token is None and output.new_token_ids:
                times.first_step_started, times.first_token = step_started, now
            if output.finished:
                times.finished = now
            if stream.push_quietly(output) and stream.notify is not None:
                to_notify.setdefault(stream.notify, output.request_id)
        for notify, request_id in to_notify.items():
            notify_once(notify, request_id)

    def _shutdown(self) -> None:
        """Abort whatever is left: engine requests, and submits the engine never saw."""
        with self._cond:
            never_added = [c.request for c in self._inbox if isinstance(c, _Submit)]
            self._inbox = []
        outputs = self._engine.abort_all()
        outputs.extend(_aborted_output(request) for request in never_added)
        self._stats = self._engine.stats()
        self._deliver(outputs)


def _aborted_output(request: EngineRequest) -> RequestOutput:
    return RequestOutput(
        request_id=request.request_id,
        new_token_ids=(),
        finished=True,
        finish_reason=FinishReason.ABORTED,
        prompt_tokens=len(request.prompt_token_ids),
        cached_tokens=0,
        completion_tokens=0,
    )


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the OS too (Linux: `/proc/<pid>/task/<tid>/comm`, what
    `top -H` and py-spy show; at most 15 bytes), so its CPU can be told apart from outside the
    process: the engine stub's step thread against its sender (`bench serving_overhead`).
    Python 3.11 names threads for Python only. Elsewhere than Linux it does nothing."""
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):  # no prctl: not Linux
        return
    prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
