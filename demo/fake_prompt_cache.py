"""The provider's prompt cache, played by the fake model server (``FakeLLM(prompt_cache=ProviderCache())``), and
the providers' own diagnosis of a miss, as the real APIs answer them.

A request's prompt is cut, from the body the server received, into the parts a provider caches in order: its
tools, its system prompt (Chat: the leading system and developer messages; Responses: ``instructions``;
Anthropic: ``system``; Gemini: ``systemInstruction``), then each message (``messages``, ``input`` items,
``contents``). A part's size in tokens is its JSON's bytes / 4, rounded up (the fake's tokenizer), and the
prompt's input tokens are the sum (they replace the scenario's).

A request reads the longest prefix, ending at a cacheable point, that an earlier request to the same model (and
OpenAI ``prompt_cache_key``) stored and used no longer ago than its lifetime, if it has at least ``min_tokens``;
then it stores (or refreshes) every cacheable prefix of at least ``min_tokens``. OpenAI and Gemini cache at every
part's end. Anthropic stores only at a part holding a ``cache_control`` marker (and at the last part with a
top-level one), and reads at any part up to 20 before such a breakpoint, so a marker moved to the newest turn
still reads the earlier turns; a request without one caches nothing. Markers are not content: a part is hashed
without them. Anthropic reports the tokens it wrote (``cache_creation_input_tokens``). Lifetime: ``ttl_s``, or
what the request asks (Anthropic ``cache_control.ttl``, OpenAI ``prompt_cache_options.ttl`` or
``prompt_cache_retention``). A hit's first token comes ``prefill_ms_per_token`` sooner per cached token, never
sooner than a quarter of the scenario's TTFT.

Diagnostics: Anthropic answers ``diagnostics`` when the request names ``diagnostics.previous_message_id``,
OpenAI Responses ``prompt_cache_diagnostics`` when it names ``prompt_cache_options.comparison_response_id``,
each comparing the request with the named earlier one, part by part. Stdlib only; thread-safe.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_ANTHROPIC_TTL_S = {"5m": 300.0, "1h": 3600.0}
_OPENAI_TTL_S = {"30m": 1800.0, "12h": 43200.0, "24h": 86400.0}
_SYSTEM_ROLES = ("system", "developer")
LOOKBACK_PARTS = 20  # how far before a breakpoint Anthropic looks for an earlier entry
_ID_PREFIXES = {"/v1/messages": "msg_", "/v1/responses": "resp_", "/v1/chat/completions": "chatcmpl-"}


@dataclass(frozen=True, slots=True)
class _Part:
    kind: str  # "tools", "system", "message"
    data: bytes
    tokens: int
    marked: bool  # holds a cache_control marker (Anthropic)


@dataclass(frozen=True, slots=True)
class _Prompt:
    provider: str  # "openai", "anthropic", "gemini"
    model: str
    parts: tuple[_Part, ...]
    hashes: tuple[str, ...]  # of the prompt up to each part's end
    cacheable: tuple[int, ...]  # indexes of the parts a stored prefix ends at
    readable: tuple[int, ...]  # indexes of the parts a read prefix may end at (Anthropic: up to 20 before a breakpoint)
    response_id: str  # the id of its answer, as the provider writes it
    ttl_s: float
    cache_key: str  # OpenAI's prompt_cache_key

    def tokens_to(self, index: int) -> int:
        return sum(p.tokens for p in self.parts[: index + 1])


@dataclass(frozen=True, slots=True)
class CacheAnswer:
    """What a request got from the cache, and the diagnosis to put in its answer."""

    input_tokens: int
    cached_tokens: int
    written_tokens: int
    ttft_saving_ms: float
    fields: dict[str, Any]  # added to the response body (diagnostics, prompt_cache_diagnostics, ...)


class ProviderCache:
    def __init__(
        self,
        ttl_s: float = 300.0,
        min_tokens: int = 1024,
        prefill_ms_per_token: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        remembered: int = 10_000,
    ) -> None:
        self.ttl_s, self.min_tokens, self.prefill_ms_per_token = ttl_s, min_tokens, prefill_ms_per_token
        self._clock, self._remembered = clock, remembered
        # (model, prompt_cache_key, prefix hash) -> (last use, lifetime): OpenAI routes requests by their key
        self._entries: OrderedDict[tuple[str, str, str], tuple[float, float]] = OrderedDict()
        self._answered: OrderedDict[str, _Prompt] = OrderedDict()  # response id -> its prompt
        self._lock = threading.Lock()

    def answer(self, path: str, body: Mapping[str, Any], model: str, ident: str) -> CacheAnswer:
        """Read and fill the cache for one request (``ident``: its response id without the provider's prefix)."""
        prompt = _prompt(path, body, model, ident, self.ttl_s)
        with self._lock:
            now = self._clock()
            cached = self._read(prompt, now)
            written = self._write(prompt, now, cached)
            fields = self._diagnosis(prompt, body, cached)
            self._answered[prompt.response_id] = prompt
            while len(self._answered) > self._remembered:
                self._answered.popitem(last=False)
        saving = cached * self.prefill_ms_per_token
        total = sum(p.tokens for p in prompt.parts)
        return CacheAnswer(total, cached, written if prompt.provider == "anthropic" else 0, saving, fields)

    def _read(self, prompt: _Prompt, now: float) -> int:
        for index in reversed(prompt.readable):
            tokens = prompt.tokens_to(index)
            entry = self._entries.get((prompt.model, prompt.cache_key, prompt.hashes[index]))
            if tokens >= self.min_tokens and entry is not None and now - entry[0] <= entry[1]:
                return tokens
        return 0

    def _write(self, prompt: _Prompt, now: float, cached: int) -> int:
        """Store every cacheable prefix long enough; the tokens written beyond what was read."""
        longest = 0
        for index in prompt.cacheable:
            tokens = prompt.tokens_to(index)
            if tokens >= self.min_tokens:
                key = (prompt.model, prompt.cache_key, prompt.hashes[index])
                self._entries.pop(key, None)
                self._entries[key] = (now, prompt.ttl_s)
                longest = max(longest, tokens)
        while len(self._entries) > 100_000:
            self._entries.popitem(last=False)
        return max(longest - cached, 0)

    def _diagnosis(self, prompt: _Prompt, body: Mapping[str, Any], cached: int) -> dict[str, Any]:
        if prompt.provider == "anthropic" and isinstance(body.get("diagnostics"), Mapping):
            return {"diagnostics": self._anthropic(prompt, body["diagnostics"].get("previous_message_id"))}
        options = body.get("prompt_cache_options")
        if prompt.provider == "openai" and isinstance(options, Mapping) and "comparison_response_id" in options:
            compared = options["comparison_response_id"]
            shown = {"mode": options.get("mode", "implicit"), "ttl": options.get("ttl", "30m")}
            return {
                "prompt_cache_options": {**shown, "comparison_response_id": compared},
                "prompt_cache_diagnostics": self._openai(prompt, compared, cached),
            }
        return {}

    def _earlier(self, response_id: Any, provider: str) -> _Prompt | None:
        """The prompt of an earlier answer of the same provider with this id."""
        earlier = self._answered.get(response_id) if isinstance(response_id, str) else None
        return earlier if earlier is not None and earlier.provider == provider else None

    def _anthropic(self, prompt: _Prompt, previous_id: Any) -> dict[str, Any] | None:
        if previous_id is None:
            return None
        earlier = self._earlier(previous_id, prompt.provider)
        if earlier is None:
            return {"cache_miss_reason": {"type": "previous_message_not_found"}}
        changed = _first_change(earlier, prompt)
        if changed is None:
            return None
        kind, shared = changed
        return {"cache_miss_reason": {"type": f"{kind}_changed", "cache_missed_input_tokens": shared}}

    def _openai(self, prompt: _Prompt, compared: Any, cached: int) -> dict[str, Any]:
        if cached:
            return {"type": "cache_hit"}
        earlier = self._earlier(compared, prompt.provider)
        if earlier is None:
            return {"type": "comparison_response_not_found"}
        changed = _first_change(earlier, prompt)
        if earlier.cache_key != prompt.cache_key:
            reason, shared = "prompt_cache_key_changed", 0
        elif changed is None:
            return {"type": "unavailable"}
        else:
            kind, shared = changed
            reason = {"model": "model_changed", "tools": "tools_changed"}.get(kind, "input_changed")
        return {"type": "cache_miss", "reason": reason, "cache_missed_tokens": shared,
                "comparison_reusable_tokens": shared}  # fmt: skip


def _first_change(earlier: _Prompt, now: _Prompt) -> tuple[str, int] | None:
    """The first of model, tools, system, messages that differs (messages: not only entries appended), with the
    tokens of the parts the two share before it; None when nothing differs."""
    if earlier.model != now.model:
        return "model", 0
    shared = 0
    for kind in ("tools", "system", "message"):
        old = [p.data for p in earlier.parts if p.kind == kind]
        new = [p.data for p in now.parts if p.kind == kind]
        if kind == "message" and old == new[: len(old)]:
            return None
        if old != new:
            return ("messages" if kind == "message" else kind), shared
        shared += sum(p.tokens for p in now.parts if p.kind == kind)
    return None


def _prompt(path: str, body: Mapping[str, Any], model: str, ident: str, default_ttl_s: float) -> _Prompt:
    provider, tools, system, messages = _cut(path, body)
    parts = [
        _part(kind, value)
        for kind, value in (("tools", tools), ("system", system), *(("message", m) for m in messages))
        if value
    ]
    running, hashes = hashlib.sha256(model.encode()), []
    for part in parts:
        running.update(part.kind.encode() + len(part.data).to_bytes(8, "big") + part.data)
        hashes.append(running.copy().hexdigest())
    if provider == "anthropic":
        cacheable = [i for i, p in enumerate(parts) if p.marked]
        if body.get("cache_control") and parts:
            cacheable.append(len(parts) - 1)
        cacheable = sorted(set(cacheable))
        readable = sorted({i for end in cacheable for i in range(max(0, end - LOOKBACK_PARTS), end + 1)})
    else:
        cacheable = readable = list(range(len(parts)))
    cache_key = str(body.get("prompt_cache_key") or "")
    return _Prompt(provider, model, tuple(parts), tuple(hashes), tuple(cacheable), tuple(readable),
                   f"{_ID_PREFIXES.get(path.split('?')[0], '')}{ident}", _ttl(provider, body, default_ttl_s),
                   cache_key)  # fmt: skip


def _cut(path: str, body: Mapping[str, Any]) -> tuple[str, Any, Any, list[Any]]:
    """(provider, tools, system, messages) of a request body."""
    if path.startswith("/v1/messages"):
        return "anthropic", body.get("tools"), body.get("system"), list(body.get("messages") or [])
    if path.startswith("/v1/responses"):
        given = body.get("input")
        items = [given] if isinstance(given, str) else list(given or [])
        return "openai", body.get("tools"), body.get("instructions"), items
    if path.startswith("/v1/chat/completions"):
        messages = list(body.get("messages") or [])
        lead = 0
        while (
            lead < len(messages) and isinstance(messages[lead], Mapping) and messages[lead].get("role") in _SYSTEM_ROLES
        ):
            lead += 1
        return "openai", body.get("tools"), messages[:lead], messages[lead:]
    return "gemini", body.get("tools"), body.get("systemInstruction"), list(body.get("contents") or [])


def _part(kind: str, value: Any) -> _Part:
    """A part's bytes without its cache markers: a marker says where a prefix may end, it is not content."""
    data = json.dumps(_unmarked(value), separators=(",", ":"), ensure_ascii=False).encode()
    return _Part(kind, data, -(-len(data) // 4), _marked(value))


def _unmarked(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _marked(value: Any) -> bool:
    if isinstance(value, Mapping):
        return bool(value.get("cache_control")) or any(_marked(v) for v in value.values())
    if isinstance(value, list):
        return any(_marked(v) for v in value)
    return False


def _ttl(provider: str, body: Mapping[str, Any], default_s: float) -> float:
    if provider == "anthropic":
        stated = [_ANTHROPIC_TTL_S[t] for t in _ttls(body) if t in _ANTHROPIC_TTL_S]
        return max(stated) if stated else default_s
    options = body.get("prompt_cache_options")
    ttl = (options.get("ttl") if isinstance(options, Mapping) else None) or body.get("prompt_cache_retention")
    return _OPENAI_TTL_S.get(ttl, default_s) if isinstance(ttl, str) else default_s


def _ttls(value: Any) -> list[str]:
    """Every ``cache_control.ttl`` in a request."""
    if isinstance(value, Mapping):
        control = value.get("cache_control")
        own = [control["ttl"]] if isinstance(control, Mapping) and isinstance(control.get("ttl"), str) else []
        return own + [t for v in value.values() for t in _ttls(v)]
    if isinstance(value, list):
        return [t for v in value for t in _ttls(v)]
    return []
