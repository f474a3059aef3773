"""A bench-only OpenAI-compatible upstream: replies at a fixed token pace, computes nothing.

    python -m bench.paced_upstream --port P [--first-ms 0] [--gap-ms 40]

What `bench peers` puts behind every gateway it compares (LiteLLM proxy, smg, vllm-router; the
project's own gateway runs the same pace through its paced backend instead). It answers

    POST /v1/completions, /v1/completions   stream or whole: `max_tokens` tokens ("x "),
                                                 the first `first_ms` after the request, then
                                                 one every `gap_ms` (25 a second at 40 ms)
    GET  /v1/models, /health (and /health_generate, /get_model_info, /get_server_info: what the
         Rust routers may ask a worker)
    GET  /bench/in-flight   {"in_flight": replies begun and not yet ended, "replies": all begun}:
                            how the bench sees that a gateway cancelled the streams its
                            clients dropped

It must never be what limits a run, so it is a raw asyncio protocol rather than a framework:
HTTP/1.1 keep-alive (chunked SSE) or HTTP/1.0 (the reply ends with the connection); each
stream's events are rendered once at the start (every middle event is the same bytes) and each
one costs a timer and a socket write. Its own CPU is what `bench peers` reads from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from config.process_limits import raise_open_files_limit

TOKEN_TEXT = "x "
MODEL = "paced"
HEAD_LIMIT = 64 * 1024
DEFAULT_MAX_TOKENS = 16
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


@dataclass(frozen=True, slots=True)
class UpstreamPace:
    """The first token `first_s` after the request, then one every `gap_s`."""

    first_s: float = 0.0
    gap_s: float = 0.04

    def __post_init__(self) -> None:
        if self.first_s < 0 or self.gap_s <= 0:
            raise ValueError(f"need first_s ≥ 0 and gap_s > 0, got {self.first_s}, {self.gap_s}")

    def token_at(self, index: int) -> float:
        """Seconds from the request to token `index` (0 first)."""
        return self.first_s + index * self.gap_s


@dataclass(frozen=True, slots=True)
class Completion:
    """What a generation request asks: which route (chat or text), how many tokens, streamed
    or whole, and whether the stream ends with a usage chunk."""

    chat: bool
    model: str
    max_tokens: int
    stream: bool
    include_usage: bool
    prompt_tokens: int


def completion_of(path: str, body: dict[str, Any]) -> Completion:
    """The request a body asks for (ValueError where it asks for none)."""
    chat = path == "/v1/chat/completions"
    if chat and not isinstance(body.get("messages"), list):
        raise ValueError("messages must be a list")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens")) or DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError("max_tokens must be a positive integer")
    options = body.get("stream_options") or {}
    prompt = json.dumps(body.get("messages") if chat else body.get("prompt", ""))
    return Completion(
        chat=chat,
        model=str(body.get("model") or MODEL),
        max_tokens=max_tokens,
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        prompt_tokens=max(1, len(prompt) // 4),
    )


def _usage(completion: Completion) -> dict[str, int]:
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.max_tokens,
        "total_tokens": completion.prompt_tokens + completion.max_tokens,
    }


def _choice(completion: Completion, text: str, first: bool, finish: str | None) -> dict[str, Any]:
    if not completion.chat:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    delta = {"role": "assistant", "content": text} if first else {"content": text}
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def stream_events(completion: Completion, reply_id: str, created: int) -> tuple[bytes, bytes, bytes]:
    """A stream's SSE events, rendered once: the first token's, every middle token's (the same
    bytes each time) and the last one's (its finish reason, the usage chunk if asked, [DONE])."""
    kind = "chat.completion.chunk" if completion.chat else "text_completion"
    head = {"id": reply_id, "object": kind, "created": created, "model": completion.model}

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + json.dumps({**head, "choices": choices, **extra}, separators=(",", ":")).encode() + b"\n\n"

    last_reason = "length"
    first = event([_choice(completion, TOKEN_TEXT, True, last_reason if completion.max_tokens == 1 else None)])
    middle = event([_choice(completion, TOKEN_TEXT, False, None)])
    last = event([_choice(completion, TOKEN_TEXT, completion.max_tokens == 1, last_reason)])
    if completion.include_usage:
        last += event([], usage=_usage(completion))
    return first, middle, last + b"data: [DONE]\n\n"


def whole_reply(completion: Completion, reply_id: str, created: int) -> dict[str, Any]:
    """The non-streamed reply: every token's text at once, with its usage."""
    text = TOKEN_TEXT * completion.max_tokens
    if completion.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": "length",
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
    return {
        "id": reply_id,
        "object": "chat.completion" if completion.chat else "text_completion",
        "created": created,
        "model": completion.model,
        "choices": [choice],
        "usage": _usage(completion),
    }


@dataclass(slots=True)
class ReplyTally:
    """The server's generation replies: all begun (each one's id) and those not yet ended."""

    begun: int = 0
    in_flight: int = 0


class UpstreamConnection(asyncio.Protocol):
    """One client connection: requests one after another (keep-alive), each answered at the pace."""

    def __init__(self, pace: UpstreamPace, tally: ReplyTally) -> None:
        self.pace = pace
        self.tally = tally
        self._replying = False  # a generation reply is begun and not ended
        self.transport: asyncio.Transport | None = None
        self._buffer = b""
        self._busy = False  # a reply is being sent: later requests wait in the buffer
        self._keep_alive = True
        self._chunked = True
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self._busy:
            self._next_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_reply()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.transport = None

    def _next_request(self) -> None:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > HEAD_LIMIT and self.transport is not None:
                self.transport.close()
            return
        lines = self._buffer[:end].decode("latin-1").split("\r\n")
        method, target, version = [*lines[0].split(" "), "", ""][:3]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        if len(self._buffer) < end + 4 + length:
            return  # the body is still coming
        body, self._buffer = self._buffer[end + 4 : end + 4 + length], self._buffer[end + 4 + length :]
        connection = headers.get("connection", "").lower()
        self._chunked = version == "HTTP/1.1"
        self._keep_alive = (self._chunked and connection != "close") or connection == "keep-alive"
        self._busy = True
        self._dispatch(method, target.split("?", 1)[0], body)

    def _dispatch(self, method: str, path: str, body: bytes) -> None:
        if method == "GET":
            info = {"model_path": MODEL, "tokenizer_path": MODEL, "is_generation": True}
            replies: dict[str, Any] = {
                "/health": {},
                "/health_generate": {},
                "/v1/models": {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]},
                "/get_model_info": info,
                "/get_server_info": {**info, "max_total_num_tokens": 10**9},
                "/bench/in-flight": {"in_flight": self.tally.in_flight, "replies": self.tally.begun},
            }
            if path in replies:
                self._send_whole(200, replies[path])
            else:
                self._send_whole(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            self._send_whole(405 if path.startswith("/v1/") else 404, {"error": {"message": path, "type": "bad_route"}})
            return
        try:
            parsed = json.loads(body)
            completion = completion_of(path, parsed if isinstance(parsed, dict) else {})
        except ValueError as exc:
            self._send_whole(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return
        self.tally.begun += 1
        self.tally.in_flight += 1
        self._replying = True
        reply_id, created = f"cmpl-{self.tally.begun}", int(time.time())
        loop = asyncio.get_running_loop()
        if completion.stream:
            self._start_stream(loop, completion, reply_id, created)
        else:
            reply = whole_reply(completion, reply_id, created)
            when = loop.time() + self.pace.token_at(completion.max_tokens - 1)
            self._timer = loop.call_at(when, self._send_whole, 200, reply)

    def _send_whole(self, status: int, payload: dict[str, Any]) -> None:
        self._timer = None
        if self.transport is None:
            return
        body = json.dumps(payload, separators=(",", ":")).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{'' if self._keep_alive else 'connection: close' + chr(13) + chr(10)}\r\n"
        )
        self.transport.write(head.encode() + body)
        self._finish()

    def _start_stream(
        self, loop: asyncio.AbstractEventLoop, completion: Completion, reply_id: str, created: int
    ) -> None:
        assert self.transport is not None
        head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        head += "transfer-encoding: chunked\r\n" if self._chunked else ""
        head += "" if self._keep_alive else "connection: close\r\n"
        self.transport.write((head + "\r\n").encode())
        first, middle, last = (self._framed(event) for event in stream_events(completion, reply_id, created))
        began = loop.time()
        total = completion.max_tokens

        def send(index: int) -> None:
            if self.transport is None:
                return
            if index == total - 1:
                self.transport.write(last + (b"0\r\n\r\n" if self._chunked else b""))
                self._timer = None
                self._finish()
                return
            self.transport.write(first if index == 0 else middle)
            self._timer = loop.call_at(began + self.pace.token_at(index + 1), send, index + 1)

        self._timer = loop.call_at(began + self.pace.first_s, send, 0)

    def _framed(self, data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data

    def _end_reply(self) -> None:
        if self._replying:
            self._replying = False
            self.tally.in_flight -= 1

    def _finish(self) -> None:
        self._end_reply()
        self._busy = False
        if self.transport is None:
            return
        if not self._keep_alive:
            self.transport.close()
        elif self._buffer:
            self._next_request()


async def serve(host: str, port: int, pace: UpstreamPace) -> asyncio.Server:
    """The upstream listening on host:port (port 0: a free one, `server.sockets[0]` says which)."""
    loop = asyncio.get_running_loop()
    tally = ReplyTally()
    return await loop.create_server(lambda: UpstreamConnection(pace, tally), host, port, backlog=8192)


async def _serve_forever(host: str, port: int, pace: UpstreamPace) -> None:
    server = await serve(host, port, pace)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.paced_upstream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--first-ms", type=float, default=0.0, help="the first token's delay (default 0)")
    parser.add_argument("--gap-ms", type=float, default=40.0, help="the gap between tokens (default 40: 25 a second)")
    args = parser.parse_args(argv)
    raise_open_files_limit()
    asyncio.run(_serve_forever(args.host, args.port, UpstreamPace(args.first_ms / 1000, args.gap_ms / 1000)))


if __name__ == "__main__":
    main(sys.argv[1:])
