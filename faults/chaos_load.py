"""The chaos run's interactive load: per team one closed-loop client that sends, in a seeded
mix, every kind of call a team makes, each recorded in the history from start to end.

    stream       POST /v1/generate, streamed (SSE)
    whole        POST /v1/generate, one JSON body
    stream-id    streamed with a request_id; half of them repeated at once with the same body
                 (the repeat attaches to the one generation: recorded, not billed)
    cancel       streamed with a request_id, DELETE after its first delta
    disconnect   streamed, the client hangs up after two deltas
    openai       the official SDK: /v1/completions or /v1/chat/completions, whole
    long         (`run_long`, the partition run) streamed replies of LONG_TOKENS back to back, so
                 a fault always finds replies mid-stream

Every call is greedy (temperature 0) with a short `max_tokens`, so the CPU engine keeps up on
two cores; a client pauses `think_s` between calls (a long-reply client only after one that
failed: it streams back to back).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass

import httpx
import openai

from faults.chaos_history import CallRecord, History, Outcome, retryable_error

KINDS = ("stream", "whole", "stream-id", "cancel", "disconnect", "openai")
LONG_TOKENS = 240
WEIGHTS = (3, 2, 3, 1, 1, 2)


@dataclass(frozen=True, slots=True)
class TeamClient:
    """One team's side of the load: its key and the models it sends to."""

    team: str
    headers: dict[str, str]
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LoadShape:
    think_s: float = 0.5
    max_tokens: tuple[int, int] = (8, 48)  # long enough that a kill lands mid-reply
    call_timeout_s: float = 120.0


class InteractiveLoad:
    """Runs the teams' clients until `stop` is set."""

    def __init__(self, url: str, history: History, seed: int, shape: LoadShape | None = None) -> None:
        self._url = url
        self._history = history
        self._seed = seed
        self._shape = shape or LoadShape()

    async def run(self, teams: list[TeamClient], stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=self._url, timeout=self._shape.call_timeout_s) as http:
            await asyncio.gather(*(self._client(http, team, i, stop) for i, team in enumerate(teams)))

    async def run_long(self, team: TeamClient, stop: asyncio.Event) -> None:
        """One client per model of `team` streaming LONG_TOKENS-token replies back to back until
        `stop`: whatever a fault hits, some reply is mid-stream (the failover time a client sees)."""

        async def one_model(http: httpx.AsyncClient, model: str) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                body: dict[str, object] = {
                    "model": model, "prompt": f"{team.team} long {n}: the {WORDS[n % len(WORDS)]} and the sea",
                    "max_tokens": LONG_TOKENS, "temperature": 0.0,
                }  # fmt: skip
                call = self._history.start_call(team.team, "long", body)
                try:
                    await self.stream(http, team.headers, body, call)
                except Exception as exc:  # a harness bug must not stop the load: it shows in the history
                    self._history.end_call(call, Outcome.ERROR, error=f"client bug: {exc!r}")
                if call.outcome is not Outcome.OK:
                    # A refused or failed reply is tried again after a pause, as a client that
                    # reads Retry-After would: sent again at once, each long client sent ~50 calls
                    # a second through an outage, and that storm on two cores slowed the recovery
                    # it was there to measure.
                    await asyncio.sleep(self._shape.think_s)

        async with httpx.AsyncClient(base_url=self._url, timeout=self._shape.call_timeout_s) as http:
            await asyncio.gather(*(one_model(http, model) for model in team.models))

    async def _client(self, http: httpx.AsyncClient, team: TeamClient, index: int, stop: asyncio.Event) -> None:
        rng = random.Random(self._seed * 1000 + index)
        sdk = openai.AsyncOpenAI(
            base_url=f"{self._url}/v1",
            api_key=team.headers["Authorization"].removeprefix("Bearer "),
            max_retries=0,
            timeout=self._shape.call_timeout_s,
        )
        n = 0
        while not stop.is_set():
            n += 1
            kind = rng.choices(KINDS, WEIGHTS)[0]
            body: dict[str, object] = {
                "model": rng.choice(team.models),
                "prompt": f"{team.team} call {n}: the {rng.choice(WORDS)} of the {rng.choice(WORDS)}",
                "max_tokens": rng.randint(*self._shape.max_tokens),
                "temperature": 0.0,
            }
            if kind in ("stream-id", "cancel"):
                body["request_id"] = f"{team.team}-{self._seed}-{n}"
            try:
                await self._call(http, sdk, team, kind, body, rng)
            except Exception as exc:  # a harness bug must not stop the load: it shows in the history
                call = self._history.start_call(team.team, kind, body, billed=False)
                self._history.end_call(call, Outcome.ERROR, error=f"client bug: {exc!r}")
            await asyncio.sleep(self._shape.think_s * rng.uniform(0.5, 1.5))
        await sdk.close()

    async def _call(
        self,
        http: httpx.AsyncClient,
        sdk: openai.AsyncOpenAI,
        team: TeamClient,
        kind: str,
        body: dict[str, object],
        rng: random.Random,
    ) -> None:
        request_id = body.get("request_id")
        call = self._history.start_call(team.team, kind, body, request_id if isinstance(request_id, str) else None)
        if kind == "whole":
            await self.whole(http, team.headers, body, call)
        elif kind == "openai":
            await self._openai(sdk, body, call, chat=rng.random() < 0.5)
        elif kind == "stream-id" and rng.random() < 0.5:
            repeat = self._history.start_call(team.team, "repeat", body, call.request_id, billed=False)
            await asyncio.gather(
                self.stream(http, team.headers, body, call), self.stream(http, team.headers, body, repeat)
            )
        else:
            stop_after = 2 if kind == "disconnect" else None
            cancel_after = 1 if kind == "cancel" else None
            await self.stream(http, team.headers, body, call, hang_up_after=stop_after, cancel_after=cancel_after)

    async def stream(
        self,
        http: httpx.AsyncClient,
        headers: dict[str, str],
        body: dict[str, object],
        call: CallRecord,
        *,
        hang_up_after: int | None = None,
        cancel_after: int | None = None,
    ) -> None:
        """One streamed call, every delta recorded; hangs up after `hang_up_after` deltas, or
        sends DELETE after `cancel_after` deltas (and reads on to the end)."""
        history, deltas, status = self._history, 0, None
        try:
            async with http.stream("POST", "/v1/generate", json={**body, "stream": True}, headers=headers) as reply:
                status = reply.status_code
                if status != 200:
                    text = (await reply.aread()).decode(errors="replace")
                    history.end_call(call, Outcome.ERROR, status=status, error=text[:300],
                                     retryable=retryable_error(status, text))  # fmt: skip
                    return
                event = ""
                async for line in reply.aiter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                        continue
                    payload = json.loads(line[5:])
                    if event == "error":
                        text = json.dumps(payload)
                        history.end_call(call, Outcome.ERROR, status=200, error=text[:300],
                                         retryable=retryable_error(200, text))  # fmt: skip
                        return
                    call.public_id = call.public_id or payload.get("request_id")
                    tokens = len(payload.get("token_ids") or [])
                    if tokens:
                        history.delta(call, tokens, payload.get("text", ""))
                        deltas += 1
                    if payload.get("stop_reason") is not None and "usage" in payload:
                        reason = payload["stop_reason"]
                        outcome = Outcome.CANCELLED if reason == "cancelled" else Outcome.OK
                        history.end_call(call, outcome, status=200, stop_reason=reason)
                        return
                    if hang_up_after is not None and deltas >= hang_up_after:
                        history.end_call(call, Outcome.DISCONNECTED, status=200)
                        return
                    if cancel_after is not None and deltas == cancel_after and call.request_id is not None:
                        await http.delete(f"/v1/generate/{call.request_id}", headers=headers)
            history.end_call(call, Outcome.ERROR, status=status, error="stream ended without a final event",
                             retryable=True)  # fmt: skip
        except (httpx.TransportError, httpx.StreamError) as exc:
            history.end_call(call, Outcome.ERROR, status=None, error=f"transport: {exc!r}"[:300], retryable=True)

    async def whole(self, http: httpx.AsyncClient, headers: dict[str, str], body: dict[str, object],
                    call: CallRecord) -> None:  # fmt: skip
        """One non-streamed call: the client receives every token at once, or none."""
        try:
            reply = await http.post("/v1/generate", json=body, headers=headers)
        except httpx.TransportError as exc:
            self._history.end_call(call, Outcome.ERROR, error=f"transport: {exc!r}"[:300], retryable=True)
            return
        if reply.status_code != 200:
            self._history.end_call(call, Outcome.ERROR, status=reply.status_code, error=reply.text[:300],
                                   retryable=retryable_error(reply.status_code, reply.text))  # fmt: skip
            return
        data = reply.json()
        call.public_id = data["request_id"]
        self._history.delta(call, int(data["usage"]["completion_tokens"]), data["text"])
        self._history.end_call(call, Outcome.OK, status=200, stop_reason=data["stop_reason"])

    async def _openai(self, sdk: openai.AsyncOpenAI, body: dict[str, object], call: CallRecord, *, chat: bool) -> None:
        model, prompt, max_tokens = str(body["model"]), str(body["prompt"]), int(str(body["max_tokens"]))
        call.kind = "openai-chat" if chat else "openai-completion"
        try:
            if chat:
                reply = await sdk.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0
                )
                choice = reply.choices[0]
                text, reason, usage = choice.message.content or "", choice.finish_reason, reply.usage
            else:
                done = await sdk.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0)
                text, reason, usage = done.choices[0].text, done.choices[0].finish_reason, done.usage
        except openai.APIStatusError as exc:
            self._history.end_call(call, Outcome.ERROR, status=exc.status_code, error=str(exc)[:300],
                                   retryable=retryable_error(exc.status_code, str(exc)))  # fmt: skip
            return
        except openai.APIConnectionError as exc:
            self._history.end_call(call, Outcome.ERROR, error=f"transport: {exc!r}"[:300], retryable=True)
            return
        self._history.delta(call, usage.completion_tokens if usage is not None else 0, text)
        self._history.end_call(call, Outcome.OK, status=200, stop_reason=reason)


WORDS = ("river", "signal", "lantern", "copper", "meadow", "orbit", "harbor", "ember", "willow", "falcon")
