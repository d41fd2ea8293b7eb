"""A local fake model server that speaks the OpenAI, Anthropic and Gemini wire formats, with exact timing.

Owns: answering ``POST /v1/chat/completions``, ``POST /v1/responses`` and ``POST /v1/messages`` (and
Gemini's ``:generateContent``, whose wire format is ``agentlat.demo.fake_gemini``'s) as the
official SDKs expect them (JSON, or server-sent events flushed one by one), with a controlled time to
first token, gap between chunks, chunk count, usage (cached tokens included), tool calls and errors,
and recording the headers of every request it received. Stdlib only; binds 127.0.0.1 by default.

A ``ProviderCache`` given at construction (``agentlat.demo.fake_prompt_cache``) plays the provider's prompt
cache: it then counts the prompt's tokens, answers cached and written tokens by prefix, and the providers' cache
diagnostics. A ``Scenario`` given at construction sets the defaults; a request overrides any field with a header
``x-fake-<field, dashes for underscores>`` (``x-fake-ttft-ms: 120``, ``x-fake-tool-calls: a,b``), which
the SDKs let callers send through ``extra_headers``.

    with FakeLLM(Scenario(ttft_ms=120, itl_ms=15, chunks=10)) as llm:
        client = openai.OpenAI(base_url=f"{llm.url}/v1", api_key="fake")
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import accumulate
from typing import Any, Literal

from agentlat.demo import fake_gemini
from agentlat.demo.fake_prompt_cache import ProviderCache

__all__ = ["FakeLLM", "Piece", "Received", "Scenario"]

CREATED = 1_735_689_600  # a fixed timestamp: the same request gets a byte-identical answer
HEADER_PREFIX = "x-fake-"


@dataclass(frozen=True, slots=True)
class Scenario:
    """How the fake answers; times in milliseconds."""

    ttft_ms: float = 50.0  # request received -> first content chunk
    itl_ms: float = 10.0  # gap between content chunks
    itl_jitter_ms: float = 0.0  # standard deviation of a seeded normal jitter on each gap (demo)
    chunks: int = 8  # content chunks; with tool calls each call takes at least two
    input_tokens: int = 24  # prompt tokens, cached ones included (as OpenAI counts)
    output_tokens: int = 0  # 0: one per content chunk, plus reasoning tokens
    cached_tokens: int = 0  # prompt tokens read from the prompt cache
    cache_creation_tokens: int = 0  # prompt tokens written to the cache (reported by Anthropic only)
    reasoning_tokens: int = 0
    tool_calls: tuple[str, ...] = ()  # tools to call, when the request offers tools
    status: int = 200  # anything else answers with the provider's error JSON
    abort_after_chunks: int = 0  # cut the connection after this many content chunks (0: never)
    model: str = ""  # the response's model; "" echoes the request's
    seed: int = 0

    def override(self, headers: Mapping[str, str]) -> Scenario:
        """This scenario with the fields that ``x-fake-*`` headers set."""
        changes: dict[str, Any] = {}
        for spec in fields(self):
            raw = headers.get(HEADER_PREFIX + spec.name.replace("_", "-"))
            if raw is not None:
                changes[spec.name] = _parse(raw, getattr(self, spec.name))
        return replace(self, **changes)

    def total_output(self, pieces: int) -> int:
        return self.output_tokens or pieces + self.reasoning_tokens


def _parse(raw: str, default: object) -> object:
    if isinstance(default, tuple):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return type(default)(raw.strip()) if not isinstance(default, str) else raw


@dataclass(frozen=True, slots=True)
class Received:
    """One request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]  # names in lowercase
    body: dict[str, Any]
    at_ns: int  # wall clock (time.time_ns) on arrival: the controlled delays count from here
    planned_ns: list[int] = field(default_factory=list)  # when each content chunk is due (wall clock)
    sent_ns: list[int] = field(default_factory=list)  # when each content chunk went out (wall clock)
    # when the answer's last write began (one entry): stamped before it, so a client that has read the whole answer
    # finds it here (stamped after, a client could read to the end before this server's thread was scheduled again)
    finished_ns: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Piece:
    """One content chunk: a text delta, the start of a tool call (its name), or part of its arguments."""

    kind: Literal["text", "tool", "args"]
    text: str
    tool: int = 0  # which tool call, for "tool" and "args"


def plan(scenario: Scenario, tools_offered: bool, whole_calls: bool = False) -> list[Piece]:
    """The content chunks of one answer: text, or tool calls when asked for and offered (each call one
    chunk with ``whole_calls``, as Gemini sends them)."""
    if not (scenario.tool_calls and tools_offered):
        return [Piece("text", f"tok{i} ") for i in range(max(scenario.chunks, 1))]
    names = scenario.tool_calls
    if whole_calls:
        return [Piece("tool", name, k) for k, name in enumerate(names)]
    spare = max(scenario.chunks - 2 * len(names), 0)
    pieces: list[Piece] = []
    for k, name in enumerate(names):
        parts = 1 + spare // len(names) + (1 if k < spare % len(names) else 0)
        pieces.append(Piece("tool", name, k))
        pieces.extend(Piece("args", part, k) for part in _split(_arguments(k), parts))
    return pieces


def has_tool_result(request: Mapping[str, Any]) -> bool:
    """The conversation already holds a tool's answer (Chat ``role: tool``, a Responses
    ``function_call_output`` item, an Anthropic ``tool_result`` block): the model answers in text then,
    as a real one would, so an agent loop ends."""
    items = [*request.get("messages", []), *(request.get("input") if isinstance(request.get("input"), list) else [])]
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("role") == "tool" or item.get("type") == "function_call_output":
            return True
        content = item.get("content")
        if isinstance(content, list) and any(
            isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content
        ):
            return True
    return False


def _arguments(k: int) -> str:
    return json.dumps({"query": f"input of tool call {k}"})


def _split(text: str, parts: int) -> list[str]:
    size = -(-len(text) // parts)
    return [text[i * size : (i + 1) * size] for i in range(parts)]


def tool_calls(pieces: list[Piece]) -> list[tuple[str, str]]:
    """(name, arguments JSON) of each tool call in the pieces."""
    calls: dict[int, list[str]] = {}
    for piece in pieces:
        if piece.kind == "tool":
            calls[piece.tool] = [piece.text, ""]
        elif piece.kind == "args":
            calls[piece.tool][1] += piece.text
    return [(name, args) for name, args in calls.values()]


def text_of(pieces: list[Piece]) -> str:
    return "".join(p.text for p in pieces if p.kind == "text")


def offsets(scenario: Scenario, number: int) -> list[float]:
    """Seconds from request ``number`` to each of its content chunks (more than it needs)."""
    rng = random.Random(f"{scenario.seed}:{number}")
    count = max(scenario.chunks, 2 * len(scenario.tool_calls))
    gaps = [max(0.0, rng.gauss(scenario.itl_ms, scenario.itl_jitter_ms)) for _ in range(count - 1)]
    return [ms / 1000 for ms in accumulate(gaps, initial=scenario.ttft_ms)]


# --- wire formats ------------------------------------------------------------------------
# A stream is a list of (piece index to wait for, or None for at once; SSE event bytes).

Event = tuple[int | None, bytes]


def _sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


@dataclass(frozen=True, slots=True)
class _Answer:
    """What one request is answered with, before it is put in a wire format."""

    request: dict[str, Any]
    scenario: Scenario
    pieces: list[Piece]
    model: str
    ident: str
    fields: dict[str, Any] = field(default_factory=dict)  # what the prompt cache adds to the body (its diagnosis)

    @property
    def last(self) -> int:
        return len(self.pieces) - 1

    @property
    def output_tokens(self) -> int:
        return self.scenario.total_output(len(self.pieces))


class _Chat:
    """OpenAI Chat Completions."""

    @staticmethod
    def usage(a: _Answer) -> dict[str, Any]:
        s = a.scenario
        return {
            "prompt_tokens": s.input_tokens,
            "completion_tokens": a.output_tokens,
            "total_tokens": s.input_tokens + a.output_tokens,
            "prompt_tokens_details": {"cached_tokens": s.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": s.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    @staticmethod
    def finish_reason(a: _Answer) -> str:
        return "tool_calls" if tool_calls(a.pieces) else "stop"

    @classmethod
    def body(cls, a: _Answer) -> dict[str, Any]:
        calls = [
            {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": args}}
            for k, (name, args) in enumerate(tool_calls(a.pieces))
        ]
        message: dict[str, Any] = {"role": "assistant", "content": text_of(a.pieces) or None, "refusal": None}
        message |= {"annotations": [], **({"tool_calls": calls} if calls else {})}
        return {
            "id": f"chatcmpl-{a.ident}",
            "object": "chat.completion",
            "created": CREATED,
            "model": a.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": cls.finish_reason(a)}],
            "usage": cls.usage(a),
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

    @classmethod
    def stream(cls, a: _Answer) -> list[Event]:
        with_usage = bool((a.request.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: Any = None) -> bytes:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
            body = {
                "id": f"chatcmpl-{a.ident}",
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": a.model,
                "service_tier": "default",
                "system_fingerprint": "fp_fake",
                "choices": choices,
            }
            return _sse(body | ({"usage": usage} if with_usage else {}))

        # The role arrives with the first token, as OpenAI sends it.
        events: list[Event] = [(0, chunk({"role": "assistant", "content": "", "refusal": None}))]
        events += [(i, chunk(cls.delta(p))) for i, p in enumerate(a.pieces)]
        events.append((a.last, chunk({}, cls.finish_reason(a))))
        if with_usage:
            events.append((a.last, chunk(None, usage=cls.usage(a))))
        return [*events, (a.last, _sse("[DONE]"))]

    @staticmethod
    def delta(piece: Piece) -> dict[str, Any]:
        if piece.kind == "text":
            return {"content": piece.text}
        if piece.kind == "tool":
            call = {"id": f"call_{piece.tool}", "type": "function", "function": {"name": piece.text, "arguments": ""}}
            return {"tool_calls": [{"index": piece.tool, **call}]}
        return {"tool_calls": [{"index": piece.tool, "function": {"arguments": piece.text}}]}


class _Responses:
    """OpenAI Responses."""

    @staticmethod
    def usage(a: _Answer) -> dict[str, Any]:
        s = a.scenario
        return {
            "input_tokens": s.input_tokens,
            "input_tokens_details": {"cached_tokens": s.cached_tokens},
            "output_tokens": a.output_tokens,
            "output_tokens_details": {"reasoning_tokens": s.reasoning_tokens},
            "total_tokens": s.input_tokens + a.output_tokens,
        }

    @staticmethod
    def message(a: _Answer, status: str) -> dict[str, Any]:
        part = {"type": "output_text", "text": text_of(a.pieces), "annotations": [], "logprobs": []}
        content = [part] if status == "completed" else []
        return {"id": f"msg_{a.ident}", "type": "message", "status": status, "role": "assistant", "content": content}

    @staticmethod
    def function_call(k: int, name: str, args: str, status: str) -> dict[str, Any]:
        return {
            "id": f"fc_{k}",
            "type": "function_call",
            "status": status,
            "call_id": f"call_{k}",
            "name": name,
            "arguments": args,
        }

    @classmethod
    def output(cls, a: _Answer) -> list[dict[str, Any]]:
        calls = tool_calls(a.pieces)
        if not calls:
            return [cls.message(a, "completed")]
        return [cls.function_call(k, name, args, "completed") for k, (name, args) in enumerate(calls)]

    @classmethod
    def body(cls, a: _Answer, status: str = "completed") -> dict[str, Any]:
        done = status == "completed"
        return {
            "id": f"resp_{a.ident}",
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "model": a.model,
            "output": cls.output(a) if done else [],
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "store": True,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": cls.usage(a) if done else None,
            "user": None,
            "metadata": {},
            **a.fields,
        }

    @classmethod
    def stream(cls, a: _Answer) -> list[Event]:
        events: list[tuple[int | None, dict[str, Any]]] = [
            (None, {"type": "response.created", "response": cls.body(a, "in_progress")}),
            (None, {"type": "response.in_progress", "response": cls.body(a, "in_progress")}),
        ]
        for i, piece in enumerate(a.pieces):
            events += [(i, e) for e in cls.piece_events(a, i, piece)]
        events.append((a.last, {"type": "response.completed", "response": cls.body(a)}))
        return [(at, _sse(e | {"sequence_number": n}, e["type"])) for n, (at, e) in enumerate(events)]

    @classmethod
    def piece_events(cls, a: _Answer, i: int, piece: Piece) -> list[dict[str, Any]]:
        if piece.kind == "text":
            where = {"item_id": f"msg_{a.ident}", "output_index": 0, "content_index": 0}
            opening = [] if i else cls.opening(a, where)
            delta = {"type": "response.output_text.delta", **where, "delta": piece.text, "logprobs": []}
            return [*opening, delta, *(cls.closing(a, where) if i == a.last else [])]
        name, args = tool_calls(a.pieces)[piece.tool]
        if piece.kind == "tool":
            item = cls.function_call(piece.tool, name, "", "in_progress")
            return [{"type": "response.output_item.added", "output_index": piece.tool, "item": item}]
        where = {"item_id": f"fc_{piece.tool}", "output_index": piece.tool}
        delta = {"type": "response.function_call_arguments.delta", **where, "delta": piece.text}
        if i < a.last and a.pieces[i + 1].kind == "args":
            return [delta]
        done = {"type": "response.function_call_arguments.done", **where, "name": name, "arguments": args}
        item = cls.function_call(piece.tool, name, args, "completed")
        return [delta, done, {"type": "response.output_item.done", "output_index": piece.tool, "item": item}]

    @classmethod
    def opening(cls, a: _Answer, where: dict[str, Any]) -> list[dict[str, Any]]:
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            {"type": "response.output_item.added", "output_index": 0, "item": cls.message(a, "in_progress")},
            {"type": "response.content_part.added", **where, "part": part},
        ]

    @classmethod
    def closing(cls, a: _Answer, where: dict[str, Any]) -> list[dict[str, Any]]:
        text = text_of(a.pieces)
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        return [
            {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **where, "part": part},
            {"type": "response.output_item.done", "output_index": 0, "item": cls.message(a, "completed")},
        ]


class _Messages:
    """Anthropic Messages. Its ``input_tokens`` excludes cache reads and writes."""

    @staticmethod
    def usage(a: _Answer, output_tokens: int) -> dict[str, Any]:
        s = a.scenario
        return {
            "input_tokens": s.input_tokens - s.cached_tokens - s.cache_creation_tokens,
            "cache_creation_input_tokens": s.cache_creation_tokens,
            "cache_read_input_tokens": s.cached_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": s.cache_creation_tokens, "ephemeral_1h_input_tokens": 0},
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    @staticmethod
    def blocks(a: _Answer) -> list[dict[str, Any]]:
        calls = tool_calls(a.pieces)
        if not calls:
            return [{"type": "text", "text": text_of(a.pieces)}]
        return [
            {"type": "tool_use", "id": f"toolu_{k}", "name": name, "input": json.loads(args)}
            for k, (name, args) in enumerate(calls)
        ]

    @classmethod
    def body(cls, a: _Answer, final: bool = True) -> dict[str, Any]:
        return {
            "id": f"msg_{a.ident}",
            "type": "message",
            "role": "assistant",
            "model": a.model,
            "content": cls.blocks(a) if final else [],
            "stop_reason": ("tool_use" if tool_calls(a.pieces) else "end_turn") if final else None,
            "stop_sequence": None,
            "usage": cls.usage(a, a.output_tokens if final else 1),
            **a.fields,
        }

    @classmethod
    def stream(cls, a: _Answer) -> list[Event]:
        events: list[tuple[int | None, dict[str, Any]]] = [
            (None, {"type": "message_start", "message": cls.body(a, final=False)}),
            (None, {"type": "ping"}),
        ]
        for i, piece in enumerate(a.pieces):
            block = 0 if piece.kind == "text" else piece.tool
            if piece.kind == "tool":
                tool = {"type": "tool_use", "id": f"toolu_{block}", "name": piece.text, "input": {}}
                events.append((i, {"type": "content_block_start", "index": block, "content_block": tool}))
                continue
            if i == 0:
                text = {"type": "text", "text": ""}
                events.append((i, {"type": "content_block_start", "index": 0, "content_block": text}))
            delta = {"type": "text_delta", "text": piece.text}
            if piece.kind == "args":
                delta = {"type": "input_json_delta", "partial_json": piece.text}
            events.append((i, {"type": "content_block_delta", "index": block, "delta": delta}))
            if i == a.last or a.pieces[i + 1].kind == "tool":
                events.append((i, {"type": "content_block_stop", "index": block}))
        final = cls.body(a)
        stop = {"stop_reason": final["stop_reason"], "stop_sequence": None}
        usage = {k: v for k, v in final["usage"].items() if k != "service_tier"}
        events.append((a.last, {"type": "message_delta", "delta": stop, "usage": usage}))
        events.append((a.last, {"type": "message_stop"}))
        return [(at, _sse(e, e["type"])) for at, e in events]


_OPENAI_ERRORS = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error"}
_OPENAI_ERRORS[429] = "rate_limit_exceeded"
_ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error"}
_ANTHROPIC_ERRORS |= {404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error"}
_ANTHROPIC_ERRORS[529] = "overloaded_error"


def _openai_error(status: int) -> dict[str, Any]:
    kind = _OPENAI_ERRORS.get(status, "server_error")
    code = "rate_limit_exceeded" if status == 429 else None
    return {"error": {"message": f"fake {status} answer", "type": kind, "param": None, "code": code}}


def _anthropic_error(status: int) -> dict[str, Any]:
    kind = _ANTHROPIC_ERRORS.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": f"fake {status} answer"}, "request_id": "req_fake"}


def asked(path: str, body: Mapping[str, Any]) -> tuple[str, bool, bool]:
    """(model, streamed, tools wanted) of an OpenAI or Anthropic request: all in its body."""
    return body.get("model", ""), bool(body.get("stream")), bool(body.get("tools")) and not has_tool_result(body)


@dataclass(frozen=True, slots=True)
class _Route:
    body: Callable[[_Answer], dict[str, Any]]
    stream: Callable[[_Answer], list[Event]]
    error: Callable[[int], dict[str, Any]]
    request_id_header: str
    asked: Callable[[str, dict[str, Any]], tuple[str, bool, bool]] = asked  # from the request's path and body
    whole_calls: bool = False  # each tool call in one content chunk


# At every path fake_gemini serves (the model is in the path).
GEMINI = _Route(fake_gemini.body, fake_gemini.stream, fake_gemini.error, "x-goog-request-id", fake_gemini.asked, True)
ROUTES: dict[str, _Route] = {
    "/v1/chat/completions": _Route(_Chat.body, _Chat.stream, _openai_error, "x-request-id"),
    "/v1/responses": _Route(_Responses.body, _Responses.stream, _openai_error, "x-request-id"),
    "/v1/messages": _Route(_Messages.body, _Messages.stream, _anthropic_error, "request-id"),
}


# --- the server --------------------------------------------------------------------------


class _Disconnected(Exception):
    """The client went away, or the fake is stopping."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Each SSE event leaves at once: no Nagle delay between small writes.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests and demos read ``FakeLLM.requests`` instead."""

    def do_POST(self) -> None:
        start, at_ns = time.monotonic(), time.time_ns()
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        received = Received("POST", self.path, headers, json.loads(raw or b"{}"), at_ns)
        number = self.server.fake.record(received)
        route = ROUTES.get(self.path.split("?")[0]) or (GEMINI if fake_gemini.serves(self.path) else None)
        scenario = self.server.fake.scenario.override(headers)
        try:
            if route is None:
                self._json(404, _openai_error(404), "x-request-id")
            elif scenario.status != 200:
                self._json(scenario.status, route.error(scenario.status), route.request_id_header)
            else:
                ident = hashlib.sha1(raw).hexdigest()[:16]  # the same request gets the same ids
                scenario, fields = self._cached(route, scenario, received, ident)
                self._answer(route, scenario, received, ident, start, offsets(scenario, number), fields)
        except _Disconnected:
            self.close_connection = True

    def _cached(
        self, route: _Route, scenario: Scenario, received: Received, ident: str
    ) -> tuple[Scenario, dict[str, Any]]:
        """The scenario as the fake's prompt cache answers the request (its tokens, a sooner first token on a hit),
        and what the cache adds to the answer; unchanged without a prompt cache."""
        cache = self.server.fake.prompt_cache
        if cache is None:
            return scenario, {}
        model = route.asked(received.path, received.body)[0]
        got = cache.answer(received.path.split("?")[0], received.body, model, ident)
        ttft_ms = max(scenario.ttft_ms / 4, scenario.ttft_ms - got.ttft_saving_ms)
        tokens = {"input_tokens": got.input_tokens, "cached_tokens": got.cached_tokens}
        return replace(scenario, ttft_ms=ttft_ms, cache_creation_tokens=got.written_tokens, **tokens), got.fields

    def _answer(
        self,
        route: _Route,
        scenario: Scenario,
        received: Received,
        ident: str,
        start: float,
        times: list[float],
        fields: dict[str, Any],
    ) -> None:
        """Answer a request that succeeds; ``times`` are seconds from its arrival at ``start``."""
        body = received.body
        model, streamed, tools = route.asked(received.path, body)
        pieces = plan(scenario, tools, route.whole_calls)
        answer = _Answer(body, scenario, pieces, scenario.model or model, ident, fields)
        times = times[: len(pieces)]
        received.planned_ns.extend(received.at_ns + round(t * 1e9) for t in times)
        deadlines = [start + t for t in times]
        if not streamed:
            self._wait_until(deadlines[-1])
            received.sent_ns.append(time.time_ns())
            self._json(200, route.body(answer), route.request_id_header, received.finished_ns)
            return
        events = route.stream(answer)
        if scenario.abort_after_chunks:  # the stream breaks off without its end
            events = [(at, e) for at, e in events if at is None or at < scenario.abort_after_chunks]
        self._stream(events, deadlines, received, route.request_id_header, not scenario.abort_after_chunks)

    def _json(
        self, status: int, body: dict[str, Any], request_id_header: str, finished_ns: list[int] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header(request_id_header, "req_fake")
        self.end_headers()
        if finished_ns is not None:
            finished_ns.append(time.time_ns())
        self.wfile.write(data)

    def _stream(
        self, events: list[Event], deadlines: list[float], received: Received, request_id_header: str, complete: bool
    ) -> None:
        sent_ns = received.sent_ns
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header(request_id_header, "req_fake")
        self.end_headers()
        for at, payload in events:
            if at is not None and at == len(sent_ns):  # the first event of the next content chunk
                self._wait_until(deadlines[at])
                sent_ns.append(time.time_ns())
            self._write_chunk(payload)
        if not complete:
            raise _Disconnected
        received.finished_ns.append(time.time_ns())
        self._write_chunk(b"")

    def _write_chunk(self, payload: bytes) -> None:
        try:
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        except OSError as exc:  # the client closed the stream half-way
            raise _Disconnected from exc

    def _wait_until(self, deadline: float) -> None:
        if self.server.fake.stopping.wait(max(0.0, deadline - time.monotonic())):
            raise _Disconnected


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeLLM

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a dropped stream, a closed keep-alive connection) is no error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass(eq=False)
class FakeLLM:
    """The fake model server: ``start()``/``stop()`` or a ``with`` block; ``url`` is its base URL."""

    scenario: Scenario = field(default_factory=Scenario)
    prompt_cache: ProviderCache | None = None  # None: the cached tokens are the scenario's, as it says
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port
    stopping: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _requests: list[Received] = field(default_factory=list, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _server: _Server | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[Received]:
        """Every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def record(self, request: Received) -> int:
        """Keep one request; return its number (0 for the first)."""
        with self._lock:
            self._requests.append(request)
            return len(self._requests) - 1

    def start(self) -> FakeLLM:
        self.stopping.clear()
        self._server = _Server((self.host, self.port), _Handler)
        self._server.fake = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self.stopping.set()  # ends streams still being written
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Run the fake until Ctrl-C: ``python -m agentlat.demo.fake_llm --port 8089 --itl-jitter-ms 4``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8089)
    for spec in fields(Scenario):
        default = getattr(Scenario(), spec.name)
        if not isinstance(default, tuple):
            parser.add_argument(f"--{spec.name.replace('_', '-')}", type=type(default), default=default)
    args = vars(parser.parse_args(argv))
    port = args.pop("port")
    with FakeLLM(Scenario(**args), port=port) as fake:
        urls = f"OpenAI base_url {fake.url}/v1, Anthropic and Gemini base_url {fake.url}"
        print(f"fake LLM on {fake.url} ({urls})", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
