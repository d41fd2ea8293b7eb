"""A prompt's structure, never its content (issue 39): what a prompt-cache miss is explained by.

A provider's prompt cache serves a request's longest prefix that an earlier request sent byte for byte,
in the order the provider reads a request: its tool definitions, its system prompt, then its messages
(Anthropic documents that order; OpenAI and Gemini cache the prefix of the request as it arrives, and
agentlat uses the same order for them). ``parts_of_*`` cut a request's parameters into those parts, each
as the bytes of its JSON in the caller's own key order (what the client sends); ``PromptHistory`` keeps the
previous request of each provider and route in this process and says where the new one first differs
from it. Only hashes, sizes, part names and an offset become attributes: no text leaves the process.
Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentlat import semconv as sc

TOOLS, SYSTEM = "tools", "system"
_SYSTEM_ROLES = frozenset({"system", "developer"})
HISTORY_KEYS = 256  # provider and route pairs remembered, least recently used first out
HISTORY_BYTES = 1 << 20  # a prompt longer than this (in all) is not remembered: its next call is compared to nothing


@dataclass(frozen=True, slots=True)
class PromptPart:
    name: str  # "tools", "system", or "message {index in the request's messages}"
    data: bytes  # the part's JSON, in the caller's key order


@dataclass(frozen=True, slots=True)
class _Sent:
    parts: tuple[PromptPart, ...]
    at: float  # time.monotonic() when it was sent


def parts_of_openai_chat(params: Mapping[str, Any]) -> list[PromptPart]:
    """Chat Completions: ``tools``, then the leading system and developer messages, then every other message."""
    messages = _list(params.get("messages"))
    lead = 0
    while lead < len(messages) and isinstance(messages[lead], Mapping) and messages[lead].get("role") in _SYSTEM_ROLES:
        lead += 1
    system = messages[:lead] if lead else None
    return _parts(params.get("tools"), system, messages, first_message=lead)


def parts_of_openai_responses(params: Mapping[str, Any]) -> list[PromptPart]:
    """Responses: ``tools``, ``instructions``, then ``input`` (one message when it is text)."""
    given = params.get("input")
    items = _list(given) if not isinstance(given, str) else [given]
    return _parts(params.get("tools"), params.get("instructions"), items)


def parts_of_anthropic(params: Mapping[str, Any]) -> list[PromptPart]:
    """Messages: ``tools``, ``system``, ``messages``: the order Anthropic's cache reads them in."""
    return _parts(params.get("tools"), params.get("system"), _list(params.get("messages")))


def parts_of_gemini(params: Mapping[str, Any]) -> list[PromptPart]:
    """generate_content: the config's ``tools`` and ``system_instruction``, then ``contents``."""
    config = _plain(params.get("config"))
    config = config if isinstance(config, Mapping) else {}
    contents = params.get("contents")
    items = _list(contents) if isinstance(contents, list | tuple) else [contents] if contents is not None else []
    return _parts(config.get("tools"), config.get("system_instruction"), items)


_ANTHROPIC_TTL_S = {"5m": 300.0, "1h": 3600.0}
_OPENAI_TTL_S = {"30m": 1800.0, "12h": 43200.0, "24h": 86400.0}


def cache_settings_of_anthropic(params: Mapping[str, Any]) -> dict[str, Any]:
    """How many cache breakpoints (``cache_control`` markers) the request sets, on its tools, system blocks,
    message content blocks or at its top level, and the longest lifetime they state (none stated: the
    provider's default): Anthropic caches only a prefix that ends at a breakpoint."""
    markers = [params.get("cache_control")]
    markers += [field_of(tool, "cache_control") for tool in _list(params.get("tools"))]
    markers += [field_of(block, "cache_control") for block in _list(params.get("system"))]
    for message in _list(params.get("messages")):
        markers += [field_of(block, "cache_control") for block in _list(field_of(message, "content"))]
    marked = [m for m in markers if m]
    ttls = [_ANTHROPIC_TTL_S[ttl] for m in marked if (ttl := field_of(m, "ttl")) in _ANTHROPIC_TTL_S]
    return {sc.CACHE_BREAKPOINTS: len(marked), **({sc.CACHE_TTL_S: max(ttls)} if ttls else {})}


def cache_settings_of_openai(params: Mapping[str, Any]) -> dict[str, Any]:
    """The lifetime a request asks for: ``prompt_cache_options.ttl``, else ``prompt_cache_retention``."""
    ttl = field_of(params.get("prompt_cache_options"), "ttl") or params.get("prompt_cache_retention")
    return {sc.CACHE_TTL_S: _OPENAI_TTL_S[ttl]} if isinstance(ttl, str) and ttl in _OPENAI_TTL_S else {}


def field_of(value: Any, name: str) -> Any:
    """A field of a mapping or of an object (a client's response model, which keeps undeclared fields too)."""
    return value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)


def _parts(tools: Any, system: Any, messages: Sequence[Any], first_message: int = 0) -> list[PromptPart]:
    parts = []
    if tools:
        parts.append(PromptPart(TOOLS, _json(tools)))
    if system:
        parts.append(PromptPart(SYSTEM, _json(system)))
    for index in range(first_message, len(messages)):
        parts.append(PromptPart(f"message {index}", _json(messages[index])))
    return parts


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_plain).encode("utf-8", "replace")


def _plain(value: Any) -> Any:
    """What a client object (a pydantic model, google-genai's types) serialises as: its fields without unset ones."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(exclude_none=True, mode="json")
        except Exception:
            return str(value)
    return value if isinstance(value, Mapping | list | str | int | float | bool) or value is None else str(value)


def hashes(parts: Sequence[PromptPart]) -> list[str]:
    """The hash of the prompt up to each part's end (sha256, first 16 hex): equal up to a part, equal prefix."""
    running, out = hashlib.sha256(), []
    for part in parts:
        running.update(part.name.encode() + b"\0" + len(part.data).to_bytes(8, "big") + part.data)
        out.append(running.copy().hexdigest()[:16])
    return out


_MIN_TOKENS = tuple((provider, re.compile(model), tokens) for provider, model, tokens in sc.CACHE_MIN_TOKENS_BY_MODEL)


def min_cacheable_tokens(provider: str, model: str) -> int | None:
    """The provider's minimum cacheable prompt for ``model`` in tokens, or None where agentlat knows none."""
    return next((tokens for p, pattern, tokens in _MIN_TOKENS if p == provider and pattern.search(model)), None)


def common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of two byte strings (a binary search of C-speed comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PromptHistory:
    """The previous request of each provider, route and model in this process (a provider caches per model), and
    when each provider and route last sent one, bounded in keys and bytes; thread-safe."""

    def __init__(self, keys: int = HISTORY_KEYS, max_bytes: int = HISTORY_BYTES) -> None:
        self._sent: OrderedDict[tuple[str, str, str], _Sent] = OrderedDict()
        # provider, route -> the model and time of its last request
        self._last: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
        self._keys, self._max_bytes = keys, max_bytes
        self._lock = threading.Lock()
        # the prompt-cache lifetime of each provider where the account's differs from the provider's default
        # (an OpenAI organisation with extended retention: {"openai": 86400}); a request's own setting wins
        self.ttl_s: dict[str, float] = {}

    def attributes(self, provider: str, route: str, model: str, parts: Sequence[PromptPart]) -> dict[str, Any]:
        """The prompt's shape as span attributes, and where it first differs from the previous request of the same
        provider, route and model: a part (tools, system, an earlier message) and the byte offset in it; ``model``
        when the route sent requests before, but none to this model. None of that on the route's first request,
        or when the previous one is a prefix of this one (a conversation that grew). The seconds since that
        previous request (or the route's last one, for a new model), when there is one."""
        cumulative = hashes(parts)
        shape: dict[str, Any] = {
            sc.PROMPT_PARTS: [p.name for p in parts],
            sc.PROMPT_PART_HASHES: cumulative,
            sc.PROMPT_BYTES: sum(len(p.data) for p in parts),
        }
        stable = [h for p, h in zip(parts, cumulative, strict=True) if p.name in (TOOLS, SYSTEM)]
        if stable:
            shape[sc.PROMPT_PREFIX_HASH] = stable[-1]
        if provider in self.ttl_s:
            shape[sc.CACHE_TTL_S] = self.ttl_s[provider]
        if (minimum := min_cacheable_tokens(provider, model)) is not None:
            shape[sc.CACHE_MIN_TOKENS] = minimum
        sent = _Sent(tuple(parts), time.monotonic())
        with self._lock:
            previous = self._sent.pop((provider, route, model), None)
            last = self._last.pop((provider, route), None)
            if sum(len(p.data) for p in parts) <= self._max_bytes:
                self._sent[(provider, route, model)] = sent
            self._last[(provider, route)] = (model, sent.at)
            for kept in (self._sent, self._last):
                while len(kept) > self._keys:
                    kept.popitem(last=False)
        if previous is not None:
            shape[sc.PROMPT_SINCE_PREVIOUS_S] = round(sent.at - previous.at, 3)
            shape.update(_difference(previous, sent))
        elif last is not None:  # a new model for the route, or this model's last prompt was too long to keep
            shape[sc.PROMPT_SINCE_PREVIOUS_S] = round(sent.at - last[1], 3)
            if last[0] != model:
                shape[sc.PROMPT_CHANGED_PART] = "model"
        return shape


def _difference(previous: _Sent, now: _Sent) -> dict[str, Any]:
    for old, new in zip(previous.parts, now.parts, strict=False):
        if old.name != new.name:  # a part appeared or went (tools added, a system prompt dropped): the earlier
            return {sc.PROMPT_CHANGED_PART: next((n for n in (TOOLS, SYSTEM) if n in (old.name, new.name)), new.name)}
        if old.data != new.data:
            return {sc.PROMPT_CHANGED_PART: new.name, sc.PROMPT_CHANGED_OFFSET: common_prefix(old.data, new.data)}
    if len(now.parts) < len(previous.parts):  # the conversation was cut: its next message is not the old one's
        return {sc.PROMPT_CHANGED_PART: previous.parts[len(now.parts)].name}
    return {}
