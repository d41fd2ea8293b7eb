"""The Gemini API's wire format, for the fake model server (``agentlat.demo.fake_llm``, which routes here).

Owns: reading a request as the google-genai client sends it, ``POST /{version}/models/{model}:generateContent``
(JSON) or ``:streamGenerateContent?alt=sse`` (server-sent events), Vertex AI's
``.../publishers/google/models/{model}:...`` alike, and writing the answer: a ``GenerateContentResponse``,
whole or one per content chunk, with usage (``cachedContentTokenCount`` among the prompt tokens,
``thoughtsTokenCount`` apart from ``candidatesTokenCount``), function calls in parts, and errors in
Google's shape. The fake's ``Scenario`` and ``x-fake-*`` headers apply as to the other providers. Gemini
sends each function call whole, in one chunk: here a tool call is one content chunk, with its id.

    with FakeLLM(Scenario(ttft_ms=120, itl_ms=15, chunks=10)) as llm:
        client = genai.Client(api_key="fake", http_options=types.HttpOptions(base_url=llm.url))

Stdlib only. It does not import ``fake_llm``: an answer is read through the attributes of fake_llm's
``_Answer`` (``scenario``, ``pieces``, ``model``, ``ident``, ``last``, ``output_tokens``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

PATH = re.compile(r"/models/(?P<model>[^/:?]+):(?P<method>generateContent|streamGenerateContent)(?:\?|$)")
STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}
STATUSES |= {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def serves(path: str) -> bool:
    """A Gemini generate-content path."""
    return PATH.search(path) is not None


def asked(path: str, body: Mapping[str, Any]) -> tuple[str, bool, bool]:
    """(model, streamed, tools wanted) of a request: the model and the method are in the path; tools are
    wanted when offered and no function's answer (a ``functionResponse`` part) is in the conversation yet,
    as a real model answers in text then."""
    match = PATH.search(path)
    assert match is not None, path
    answered = any(
        isinstance(part, Mapping) and "functionResponse" in part
        for content in body.get("contents") or []
        if isinstance(content, Mapping)
        for part in content.get("parts") or []
    )
    return match["model"], match["method"] == "streamGenerateContent", bool(body.get("tools")) and not answered


def _part(piece: Any) -> dict[str, Any]:
    if piece.kind == "tool":
        call = {"id": f"call_{piece.tool}", "name": piece.text, "args": {"query": f"input of tool call {piece.tool}"}}
        return {"functionCall": call}
    return {"text": piece.text}


def _usage(a: Any, final: bool) -> dict[str, Any]:
    """Gemini's counts, zeros left out as its JSON does; a stream's chunks before the last give the
    prompt's only."""
    s = a.scenario
    usage: dict[str, Any] = {"promptTokenCount": s.input_tokens, "totalTokenCount": s.input_tokens}
    if s.cached_tokens:
        usage["cachedContentTokenCount"] = s.cached_tokens
    usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": s.input_tokens}]
    if final:
        usage["candidatesTokenCount"] = a.output_tokens - s.reasoning_tokens
        usage["totalTokenCount"] += a.output_tokens
        if s.reasoning_tokens:
            usage["thoughtsTokenCount"] = s.reasoning_tokens
    return usage


def _response(a: Any, parts: list[dict[str, Any]], final: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if final:
        candidate["finishReason"] = "STOP"
    usage = _usage(a, final)
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": a.model, "responseId": a.ident}


def body(a: Any) -> dict[str, Any]:
    """The whole answer: its text in one part, or its function calls."""
    text = "".join(p.text for p in a.pieces if p.kind == "text")
    return _response(a, [{"text": text}] if text else [_part(p) for p in a.pieces], final=True)


def stream(a: Any) -> list[tuple[int | None, bytes]]:
    """One chunk per content chunk, the last with the finish reason and the whole usage."""
    events = []
    for i, piece in enumerate(a.pieces):
        data = json.dumps(_response(a, [_part(piece)], final=i == a.last), separators=(",", ":"))
        events.append((i, f"data: {data}\r\n\r\n".encode()))
    return events


def error(status: int) -> dict[str, Any]:
    return {"error": {"code": status, "message": f"fake {status} answer", "status": STATUSES.get(status, "UNKNOWN")}}
