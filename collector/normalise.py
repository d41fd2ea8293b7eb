"""Derive a span's normalised columns from whichever instrumentation dialect wrote it.

Owns: recognising the dialect of one span (OTel GenAI + ``agentlat.*``, OpenInference,
OpenLLMetry, Langfuse, Vercel AI SDK, vLLM, SGLang, Logfire), giving it a role, and
turning its latency, token and prefetch facts into the ``DERIVED_NAMES`` columns, with
every duration in milliseconds. Each dialect is one declarative ``Dialect`` table; adding
a dialect is adding a table. A span the SDK marks as the inner layer of one of its model calls
(``INNER_OF_MODEL_CALL``) is derived as its dialect says, but with Role "other".

The tables are compiled once, at import, into the form the hot path wants (``derive`` runs
once per ingested span): marker attributes into one rank map, so detection is a set
intersection; source lists into per-attribute dispatch (attribute -> its reads, each with
a priority and a ready converter), so a span's attributes are visited once instead of
every attribute any table names being looked up.

Pure: no I/O, no logging, and ``derive`` never raises. An attribute of the wrong type is
skipped and reported as a flag (``bad_attribute:<name>``); the span is still stored.
Imports nothing from agentlat but ``semconv`` and ``store.schema``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from agentlat import semconv as sc
from agentlat.store.schema import DERIVED_DEFAULTS, DERIVED_NAMES
from agentlat.stream_stats import gap_stats

__all__ = ["DIALECTS", "INNER_OF_MODEL_CALL", "NO_EVENTS", "Dialect", "EventTimes", "derive"]

Event = tuple[str, int, Mapping[str, object]]


class EventTimes(NamedTuple):
    """A span's events as parallel sequences of names and unix-ns times, every entry well
    formed: the form the OTLP decoder hands over, so ``derive`` need not check each event."""

    names: Sequence[str]
    times: Sequence[int]


NO_EVENTS = EventTimes((), ())
Converter = Callable[[object], object]
Sources = Mapping[str, str | tuple[str, ...]]  # column -> attribute(s), preferred first

_BAD = object()  # converter verdict: present but unusable
_INF = math.inf
_NS_PER_MS = 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SPAN_NAME = "@span.name"  # virtual attribute: the span name, for name fallbacks
_NAME = "@name"  # kind key meaning "look the role up by span name"
_ENTITY = "@entity"  # virtual column: Tool on tool spans, Agent on agent spans
_DEFAULTS = {column: DERIVED_DEFAULTS[column] for column in DERIVED_NAMES}  # in column order
_FIRST = -1  # priority of a column written before any source is read
_OTHER = sc.ROLE_OTHER
INNER_OF_MODEL_CALL = sc.INNER_OF_MODEL_CALL  # another instrumentation's view of an agentlat model call


# --- converters: value -> converted | None (absent) | _BAD ------------------------------
# Durations and counts first try the exact type instrumentations send (same verdict).


def _number(value: object) -> float | None:
    """A finite, non-negative number, or None; numeric strings count (SDKs stringify)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _scaled(factor: float) -> Converter:
    def convert(value: object) -> object:
        number = value if type(value) is float and 0 <= value < _INF else _number(value)
        if number is None:
            return _BAD
        scaled = number * factor  # finite and non-negative, unless it overflowed
        return scaled if scaled < _INF else _BAD

    return convert


def _counter(limit: int) -> Converter:
    def convert(value: object) -> object:
        if type(value) is int:
            return value if 0 <= value <= limit else _BAD
        if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 20:
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value if 0 <= value <= limit else _BAD
        number = _number(value)
        ok = number is not None and number.is_integer() and number <= limit
        return int(number) if ok and number is not None else _BAD

    return convert


def _text(value: object) -> object:
    """A string; empty means "not reported", so a later fallback may fill the column."""
    return (value or None) if isinstance(value, str) else _BAD


_TRUTH = {"true": 1, "false": 0, "1": 1, "0": 0}


def _flag(value: object) -> object:
    """0/1 from a bool, 0/1, or "true"/"false"."""
    if isinstance(value, int):  # bools included
        return int(value) if value in (0, 1) else _BAD
    return _TRUTH.get(value.strip().lower(), _BAD) if isinstance(value, str) else _BAD


def _prefetch(value: object) -> object:
    outcome = value.strip().lower() if isinstance(value, str) else None
    return outcome if outcome in sc.PREFETCH_OUTCOMES else _BAD


_DURATIONS = {"s": _scaled(1e3), "ms": _scaled(1.0), "ns": _scaled(1e-6)}
_COUNT = _counter(2**64 - 1)
_BY_COLUMN = {"StallCount": _counter(2**32 - 1), "Streaming": _flag, "PrefetchOutcome": _prefetch}


def _iso_ns(value: object) -> int | None:
    """Unix ns of an ISO-8601 time (Z or offset, any fraction, maybe JSON-quoted)."""
    text = value.strip() if isinstance(value, str) else None
    if text and text.startswith('"'):
        try:
            text = json.loads(text)
        except ValueError:
            return None
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)  # 3.11+: Z, offsets, any fraction
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1_000


def _converter(column: str, unit: str) -> Converter:
    """Columns fix the type; the dialect fixes the unit its durations are written in."""
    if column.endswith("Ms"):
        return _DURATIONS[unit]
    return _COUNT if column.endswith("Tokens") else _BY_COLUMN.get(column, _text)


# --- the span as seen by the tables, and the result being built -------------------------


@dataclass(slots=True)
class _Span:
    name: str
    kind: str
    start: int | None  # unix ns, None when unusable
    end: int | None
    attrs: Mapping[str, object]  # string keys only; JSON members joined in once the dialect is known
    events: EventTimes  # malformed entries dropped
    keys: str  # "\n" + the attribute keys joined by "\n", for namespace tests

    @property
    def duration_ms(self) -> float | None:
        if self.start is None or self.end is None or self.end < self.start:
            return None
        return (self.end - self.start) / _NS_PER_MS

    def in_namespace(self, prefix: str) -> bool:
        """Whether any attribute key starts with ``prefix``. One substring search of the joined
        keys rules most spans out; a hit is confirmed key by key (a key may hold a newline)."""
        return "\n" + prefix in self.keys and any(key.startswith(prefix) for key in self.attrs)


class _Out:
    """The row being built. ``taken`` maps each written column to the priority of the source
    read that wrote it (``_FIRST`` for anything written otherwise); "" is always taken, so
    reads into it only validate."""

    __slots__ = ("flags", "role", "taken", "values")

    def __init__(self) -> None:
        self.values: dict[str, object] = dict(_DEFAULTS)
        self.role: str = _OTHER
        self.taken: dict[str, int] = {"": _FIRST}
        self.flags: dict[str, None] = {}  # ordered, deduplicated

    def put(self, column: str, value: object) -> None:
        """First writer wins: tables list preferred sources first."""
        if column not in self.taken:
            self.values[column] = value
            self.taken[column] = _FIRST

    def put_ms(self, column: str, ms: float) -> None:
        """A duration computed here (not read): negative means skew or a bad event."""
        if ms < 0 and column not in self.taken:
            self.flag(f"negative_timing:{column}")
        elif ms >= 0:
            self.put(column, ms)

    def flag(self, text: str) -> None:
        self.flags[text] = None

    def read(self, attrs: Mapping[str, object], attr: str, convert: Converter) -> object:
        """The converted attribute, or None when absent or unusable (then flagged)."""
        value = convert(attrs[attr]) if attr in attrs else None
        if value is _BAD:
            self.flag(f"bad_attribute:{attr}")
            return None
        return value


# --- dialect tables ----------------------------------------------------------------------

Extra = Callable[[_Span, _Out], None]
RoleRule = Callable[[_Span, tuple[str, str]], tuple[str, str]]  # what the role table cannot say


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one instrumentation writes a span, as data; ``extra`` holds what data cannot.

    Detected when any ``markers`` attribute is present, any attribute key starts with
    ``key_prefix``, the span name starts with one of ``name_prefixes``, or ``detect`` says so;
    the first dialect in ``DIALECTS`` order that matches wins."""

    name: str
    markers: tuple[str, ...] = ()
    key_prefix: str = ""
    name_prefixes: tuple[str, ...] = ()
    detect: Callable[[_Span], bool] | None = None  # what the three rules above cannot say
    kind_keys: tuple[str, ...] = ()  # attributes (or _NAME) whose value selects the role
    roles: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # "x*" is a prefix
    sources: Sources = field(default_factory=dict)
    unit: str = "s"  # how this dialect writes durations: "s" | "ms" | "ns"
    json_attrs: tuple[str, ...] = ()  # JSON-object attributes, read as "<attr>.<key>"
    fixed: Mapping[str, object] = field(default_factory=dict)  # always set
    defaults: Mapping[str, object] = field(default_factory=dict)  # set when still empty
    extra: Extra | None = None  # events, ISO times, differences of two attributes
    role_rule: RoleRule | None = None  # (role, operation) the table gave -> the span's, before any read

    def __post_init__(self) -> None:  # role values are matched case-insensitively
        object.__setattr__(self, "roles", {k.lower(): r for k, r in self.roles.items()})


def _is_vllm(span: _Span) -> bool:
    """A Server span named llm_request, or one with vLLM phases and no GenAI operation."""
    if span.kind != "Server":
        return False
    return span.name == "llm_request" or (
        sc.GEN_AI_OPERATION_NAME not in span.attrs and span.in_namespace("gen_ai.latency.")
    )


def _within(prefix: str, *keys: str) -> tuple[str, ...]:
    return tuple(f"{prefix}.{key}" for key in keys)


# Read for every span after its dialect's own table: OpenLLMetry, Vercel, Logfire emit these.
GENERIC_SOURCES: Sources = {
    "Model": (sc.GEN_AI_RESPONSE_MODEL, sc.GEN_AI_REQUEST_MODEL),
    "Provider": (sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM),
    "Operation": sc.GEN_AI_OPERATION_NAME,
    "InputTokens": (sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_PROMPT_TOKENS),
    "OutputTokens": (sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.GEN_AI_USAGE_COMPLETION_TOKENS),
    "CacheReadTokens": (
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS_LEGACY,
    ),
    "CacheCreationTokens": (
        sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,  # the anthropic SDK's own spans
        sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS_LEGACY,
    ),
    "ReasoningTokens": sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    # GenAI's TTFT (s): the span attribute, and the metric's name, which pydantic-ai writes on spans
    "TtftMs": (sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, sc.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK),
    "Tool": sc.GEN_AI_TOOL_NAME,
    "ToolCallId": sc.GEN_AI_TOOL_CALL_ID,
    "Agent": sc.GEN_AI_AGENT_NAME,
    "ConversationId": sc.GEN_AI_CONVERSATION_ID,
    "Route": sc.ROUTE,
}
_SERVER_SOURCES: Sources = {
    "QueueMs": sc.GEN_AI_LATENCY_TIME_IN_QUEUE,
    "PrefillMs": sc.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    "DecodeMs": sc.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE,
    "TtftMs": sc.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
    "CacheReadTokens": sc.GEN_AI_USAGE_CACHED_TOKENS,
}

_MODEL, _TOOL, _AGENT, _STREAM = sc.ROLE_MODEL, sc.ROLE_TOOL, sc.ROLE_AGENT, sc.ROLE_STREAM
_CHAT, _EMBED = (_MODEL, sc.OP_CHAT), (_MODEL, sc.OP_EMBEDDINGS)
_COMPLETION = (_MODEL, sc.OP_TEXT_COMPLETION)
_RUN_TOOL, _RUN_AGENT = (_TOOL, sc.OP_EXECUTE_TOOL), (_AGENT, sc.OP_INVOKE_AGENT)
_GENAI_ROLES = {
    **{op: (_MODEL, op) for op in sc.MODEL_OPERATIONS},
    **{op: (_AGENT, op) for op in sc.AGENT_OPERATIONS},
    sc.OP_EXECUTE_TOOL: _RUN_TOOL,
}
_USAGE = "langfuse.observation.usage_details"
# Vercel's top-level calls run a whole multi-step loop (model and tool calls): the agent.
_VERCEL_TOP = ("generateText", "streamText", "generateObject", "streamObject", "embed", "embedMany")


def _first_token_event(span: _Span, out: _Out) -> None:
    """OpenInference: TTFT is the "First Token Stream Event" relative to span start. Its stream
    wrapper ends the span when the stream is consumed, so decode time runs from that event to the
    span's end (a stream the caller abandons ends when it is closed: the decode time then holds
    the reading the caller did)."""
    times = [at for name, at in zip(*span.events, strict=True) if name == "First Token Stream Event"]
    if times and span.start is not None:
        out.put("Streaming", 1)
        out.put_ms("TtftMs", (min(times) - span.start) / _NS_PER_MS)
        if span.end is not None and span.start <= min(times) <= span.end:
            out.put_ms("DecodeMs", (span.end - min(times)) / _NS_PER_MS)


# OpenInference writes what the framework it instruments hands it; the rules below fix what its
# span kind and attributes get wrong for agent frameworks (docs/attributes.md, "OpenInference").
_JSON_LIMIT = 64 * 1024  # a JSON attribute longer than this is not parsed
# What frameworks call a run nobody named: the OpenAI Agents SDK's default workflow_name, LangGraph's
# default graph name. A span named so, with no agent.name, names no agent.
UNNAMED_RUNS = frozenset({"Agent workflow", "LangGraph"})
_USAGE_KEY = re.compile(r'"usage"\s*:\s*')
_JSON = json.JSONDecoder()


def _json_object(raw: object) -> Mapping[str, object] | None:
    """A JSON-object attribute (or a map the decoder made of one), parsed only when under
    ``_JSON_LIMIT``; None for anything else, bad JSON included."""
    if isinstance(raw, Mapping):
        return raw
    if not isinstance(raw, str) or len(raw) > _JSON_LIMIT or not raw.startswith("{"):
        return None
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _openinference_role(span: _Span, role: tuple[str, str]) -> tuple[str, str]:
    """The role OpenInference's span kind gives, but for runs of agent frameworks it misnames:

    - LangChain's tracer gives kind AGENT to every run whose name contains "agent", and LangGraph
      names each run of a graph node after the node (``metadata.langgraph_node``; create_react_agent's
      model node is called "agent"). A graph node is a step of an agent, not one: AGENT on a node
      counts as CHAIN, unless the run is an agent that langchain's create_agent named
      (``metadata.lc_agent_name`` is the run's own name).
    - The run of a LangGraph graph itself (``metadata.ls_integration`` "langgraph", no node) is the
      agent, named by the graph's name (``create_react_agent(name=...)``), whatever its kind.
    - A run that only carries a framework's name for an unnamed one (``UNNAMED_RUNS``) and no
      ``agent.name`` is no agent: the OpenAI Agents SDK's trace root "Agent workflow" (the
      instrumentor gives it kind AGENT), whose agent span inside carries the agent's name.
    """
    if role[0] not in (_AGENT, _OTHER):
        return role
    raw = span.attrs.get("metadata")
    if isinstance(raw, Mapping) or (isinstance(raw, str) and '"langgraph' in raw):
        metadata = _json_object(raw) or {}
        if "langgraph_node" in metadata:
            if role[0] == _AGENT and span.name != metadata.get("lc_agent_name"):
                return _OTHER, ""
        elif metadata.get("ls_integration") == "langgraph" and role[0] == _OTHER:
            role = _RUN_AGENT
    if role[0] == _AGENT and span.name in UNNAMED_RUNS and "agent.name" not in span.attrs:
        return _OTHER, ""
    return role


def _cached_tokens(raw: object) -> int | None:
    """Cache-read tokens in the ``usage`` object of a JSON response (OpenAI's Responses shape,
    ``input_tokens_details.cached_tokens``, or Chat Completions', ``prompt_tokens_details``). Only
    that object is parsed: the last ``"usage"`` key (inside a string its quotes are escaped, so
    a match is a key or a string value, which no colon follows), so a long response costs a
    search, not a parse; bad or truncated JSON gives None."""
    if not isinstance(raw, str) or "cached_tokens" not in raw:
        return None
    found, at = None, len(raw)
    while found is None and (at := raw.rfind('"usage"', 0, at)) >= 0:
        found = _USAGE_KEY.match(raw, at)
    try:
        usage = _JSON.raw_decode(raw, found.end())[0] if found else None
    except (ValueError, RecursionError):
        return None
    for details in ("input_tokens_details", "prompt_tokens_details"):
        part = usage.get(details) if isinstance(usage, dict) else None
        cached = part.get("cached_tokens") if isinstance(part, dict) else None
        if type(cached) is int and 0 <= cached < 2**64:
            return cached
    return None


def _openinference_extra(span: _Span, out: _Out) -> None:
    """TTFT from the first-token event; on model calls, the stream flag from the invocation
    parameters' ``stream`` and, when no attribute gave them, cache-read tokens from the usage in
    ``output.value`` (the OpenAI Agents instrumentor leaves them there on Chat Completions streams)."""
    _first_token_event(span, out)
    if out.role != _MODEL:
        return
    if "Streaming" not in out.taken:
        params = _json_object(span.attrs.get("llm.invocation_parameters"))
        stream = params.get("stream") if params is not None else None
        if isinstance(stream, bool):
            out.put("Streaming", int(stream))
    if out.values["CacheReadTokens"] is None:
        cached = _cached_tokens(span.attrs.get("output.value"))
        if cached is not None:
            out.put("CacheReadTokens", cached)


_CHUNK_EVENTS = frozenset({"gen_ai.content.completion.chunk", "llm.content.completion.chunk"})


def _content_chunks(times: list[int], out: _Out) -> list[int]:
    """The chunk events (sorted times) of the chunks that carry content: text or tool-call deltas.
    OpenLLMetry adds one event per chunk of an OpenAI-style stream and marks none as content or
    not (the events have no attributes), so the stream's own shape says which: a Chat Completions
    stream opens with a chunk that carries only the role (``delta.content`` ""), closes with one
    that carries only the finish reason, and, when the caller asked for usage
    (``stream_options.include_usage``), ends with a usage chunk (no choices). OpenLLMetry 0.62
    reports a stream's tokens from that chunk alone, so tokens on the span mean it came. The
    role chunk is dropped on chat calls only; none is left of a stream without content."""
    if not times:
        return times
    lead = 1 if out.values["Operation"] == sc.OP_CHAT else 0
    usage = out.values["InputTokens"] is not None or out.values["OutputTokens"] is not None
    return times[lead : len(times) - 1 - usage]


def _chunk_events(span: _Span, out: _Out) -> None:
    """OpenLLMetry: TTFT, decode time and inter-token latency from completion chunk events, of the
    chunks that carry content only (``_content_chunks``)."""
    names, times = span.events
    if not _CHUNK_EVENTS.issuperset(names):
        times = [at for name, at in zip(names, times, strict=True) if name in _CHUNK_EVENTS]
    times = sorted(times)
    if times:
        out.put("Streaming", 1)
    times = _content_chunks(times, out)
    if times and span.start is not None:
        out.put_ms("TtftMs", (times[0] - span.start) / _NS_PER_MS)
    stats = gap_stats(times)
    if stats is None:
        return
    put = out.put  # gaps between sorted times are never negative
    put("DecodeMs", stats.decode_ns / _NS_PER_MS)
    put("ItlMeanMs", stats.mean_ns / _NS_PER_MS)
    put("ItlP50Ms", stats.p50_ns / _NS_PER_MS)
    put("ItlP95Ms", stats.p95_ns / _NS_PER_MS)
    put("ItlMaxMs", stats.max_ns / _NS_PER_MS)


def _langfuse_ttft(span: _Span, out: _Out) -> None:
    key = "langfuse.observation.completion_start_time"
    at = _iso_ns(span.attrs[key]) if key in span.attrs else None
    if key in span.attrs and at is None:
        out.flag(f"bad_attribute:{key}")
    elif at is not None and span.start is not None:
        out.put_ms("TtftMs", (at - span.start) / _NS_PER_MS)


def _vercel_stream(span: _Span, out: _Out) -> None:
    operation = span.attrs.get("ai.operationId", span.name)
    if isinstance(operation, str) and operation.endswith(".doStream"):
        out.put("Streaming", 1)
    first = out.read(span.attrs, "ai.response.msToFirstChunk", _DURATIONS["ms"])
    finish = out.read(span.attrs, "ai.response.msToFinish", _DURATIONS["ms"])
    if isinstance(first, float) and isinstance(finish, float):
        out.put_ms("DecodeMs", finish - first)


def _logfire_stream(span: _Span, out: _Out) -> None:
    """A streamed request span ends when the response headers arrive, not at the first chunk, so its
    duration is no TTFT. The stream is timed by a record of its own (role stream): a zero-length log
    emitted when the stream ends, whose ``duration`` (s) runs from when the client began reading the
    stream; it goes to DecodeMs, which the trace analysis reads as the interval the record states."""
    if out.role == _STREAM:
        out.put("Streaming", 1)
        stream = out.read(span.attrs, "duration", _DURATIONS["s"])
        if isinstance(stream, float):
            out.put("DecodeMs", stream)


def _ttft_means_streamed(span: _Span, out: _Out) -> None:
    """Only a stream has a first chunk: a call with a TTFT and no stream flag was streamed (pydantic-ai)."""
    if out.values["TtftMs"] is not None:
        out.put("Streaming", 1)


DIALECTS: tuple[Dialect, ...] = (
    Dialect(
        name="openinference",
        markers=("openinference.span.kind",),
        kind_keys=("openinference.span.kind",),
        roles={"llm": _CHAT, "embedding": _EMBED, "tool": _RUN_TOOL, "agent": _RUN_AGENT},
        sources={
            "Model": ("llm.model_name", "embedding.model_name"),
            "Provider": ("llm.provider", "llm.system"),
            "InputTokens": "llm.token_count.prompt",
            "OutputTokens": "llm.token_count.completion",
            "CacheReadTokens": "llm.token_count.prompt_details.cache_read",
            "CacheCreationTokens": "llm.token_count.prompt_details.cache_write",
            "ReasoningTokens": "llm.token_count.completion_details.reasoning",
            "Tool": "tool.name",
            "ToolCallId": "tool_call.id",
            "Agent": "agent.name",
            "ConversationId": "session.id",
            _ENTITY: _SPAN_NAME,
        },
        extra=_openinference_extra,
        role_rule=_openinference_role,
    ),
    Dialect(
        name="openllmetry",
        # 0.62+ writes GenAI names only, with no llm.request.type nor traceloop.span.kind: it is
        # known by Traceloop's own attributes, which no GenAI convention or other dialect writes.
        # gen_ai.is_streaming (llm.is_streaming before) is on every request span, True or False;
        # gen_ai.openai.api_base on those of its openai instrumentation.
        markers=(
            "traceloop.span.kind",
            "llm.request.type",
            "gen_ai.is_streaming",
            "llm.is_streaming",
            "gen_ai.openai.api_base",
        ),
        kind_keys=("llm.request.type", "traceloop.span.kind", sc.GEN_AI_OPERATION_NAME),
        roles={
            **_GENAI_ROLES,
            **{"chat": _CHAT, "completion": _COMPLETION, "embedding": _EMBED, "tool": _RUN_TOOL},
            **{"workflow": (_AGENT, sc.OP_INVOKE_WORKFLOW), "agent": _RUN_AGENT, "task": (_OTHER, "")},
        },
        sources={
            "DecodeMs": "llm.chat_completions.streaming_time_to_generate",
            "Streaming": ("gen_ai.is_streaming", "llm.is_streaming"),
            "ReasoningTokens": ("gen_ai.usage.reasoning_tokens", "llm.usage.reasoning_tokens"),
            _ENTITY: "traceloop.entity.name",
        },
        extra=_chunk_events,
    ),
    Dialect(
        name="langfuse",
        markers=("langfuse.observation.type",),
        kind_keys=("langfuse.observation.type",),
        roles={"generation": _CHAT, "embedding": _EMBED, "tool": _RUN_TOOL, "agent": _RUN_AGENT},
        json_attrs=(_USAGE,),
        sources={
            "Model": "langfuse.observation.model.name",
            "InputTokens": _within(_USAGE, "input", "input_tokens"),
            "OutputTokens": _within(_USAGE, "output", "output_tokens"),
            "CacheReadTokens": _within(_USAGE, "cache_read_input_tokens", "input_cached_tokens"),
            "CacheCreationTokens": _within(_USAGE, "cache_creation_input_tokens"),
            "ReasoningTokens": _within(_USAGE, "output_reasoning_tokens", "reasoning_tokens"),
            "ConversationId": ("session.id", "langfuse.session.id"),
            _ENTITY: _SPAN_NAME,
        },
        extra=_langfuse_ttft,
    ),
    Dialect(
        name="vercel",
        markers=("ai.operationId",),
        name_prefixes=("ai.",),
        kind_keys=("ai.operationId", _NAME),
        roles={
            **dict.fromkeys(_within("ai", "generateText.doGenerate", "streamText.doStream"), _CHAT),
            **dict.fromkeys(_within("ai", "generateObject.doGenerate", "streamObject.doStream"), _CHAT),
            **dict.fromkeys(_within("ai", "embed.doEmbed", "embedMany.doEmbed"), _EMBED),
            "ai.toolCall": _RUN_TOOL,
            **dict.fromkeys(_within("ai", *_VERCEL_TOP), _RUN_AGENT),
        },
        unit="ms",
        sources={
            "Model": ("ai.response.model", "ai.model.id"),
            "Provider": "ai.model.provider",
            "TtftMs": "ai.response.msToFirstChunk",
            "InputTokens": ("ai.usage.promptTokens", "ai.usage.inputTokens", "ai.usage.tokens"),
            "OutputTokens": ("ai.usage.completionTokens", "ai.usage.outputTokens"),
            "CacheReadTokens": "ai.usage.cachedInputTokens",
            "ReasoningTokens": "ai.usage.reasoningTokens",
            "Tool": "ai.toolCall.name",
            "ToolCallId": "ai.toolCall.id",
            _ENTITY: "ai.telemetry.functionId",
        },
        extra=_vercel_stream,
    ),
    Dialect(
        name="logfire",
        markers=("logfire.msg_template",),
        name_prefixes=("Chat Completion with ", "Message with ", "streaming response from "),
        # the user's own logfire.span()s say what they are with gen_ai.operation.name, if at all
        kind_keys=("logfire.msg_template", _NAME, sc.GEN_AI_OPERATION_NAME),
        roles={"chat completion with *": _CHAT, "message with *": _CHAT, "completion with *": _COMPLETION}
        | {"embedding creation with *": _EMBED, "streaming response from *": (_STREAM, sc.OP_CHAT)}
        | _GENAI_ROLES,
        json_attrs=("request_data",),
        sources={
            "Model": (sc.GEN_AI_RESPONSE_MODEL, sc.GEN_AI_REQUEST_MODEL, "request_data.model"),
            "Streaming": (sc.GEN_AI_REQUEST_STREAM, "request_data.stream"),
        },
        extra=_logfire_stream,
    ),
    Dialect(
        name="sglang",
        key_prefix="sglang.",
        fixed={"Role": _MODEL, "IsServerSpan": 1},
        defaults={"Provider": "sglang"},
        sources={
            **_SERVER_SOURCES,
            "CacheReadTokens": ("sglang.kv_cache.hit_tokens", sc.GEN_AI_USAGE_CACHED_TOKENS),
            "SpecProposedTokens": "sglang.speculative.proposed_drafts",
            "SpecAcceptedTokens": "sglang.speculative.accepted_drafts",
        },
    ),
    Dialect(
        name="vllm",
        detect=_is_vllm,
        fixed={"Role": _MODEL, "IsServerSpan": 1},
        defaults={"Provider": "vllm"},
        sources=_SERVER_SOURCES,
    ),
    Dialect(
        name="genai",
        markers=(sc.GEN_AI_OPERATION_NAME,),
        kind_keys=(sc.GEN_AI_OPERATION_NAME,),
        roles=_GENAI_ROLES,
        sources={
            "Streaming": sc.GEN_AI_REQUEST_STREAM,
            "QueueMs": sc.GEN_AI_LATENCY_TIME_IN_QUEUE,
            "PrefillMs": sc.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
            # the server's own decode time beats our first-to-last-chunk measurement
            "DecodeMs": (sc.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE, sc.DECODE_DURATION),
            "ItlMeanMs": sc.ITL_MEAN,
            "ItlP50Ms": sc.ITL_P50,
            "ItlP95Ms": sc.ITL_P95,
            "ItlMaxMs": sc.ITL_MAX,
            "StallCount": sc.ITL_STALLS,
            "SpecProposedTokens": sc.SPECULATIVE_PROPOSED_TOKENS,
            "SpecAcceptedTokens": sc.SPECULATIVE_ACCEPTED_TOKENS,
            "PrefetchOutcome": sc.PREFETCH_OUTCOME,
            "PrefetchSavedMs": sc.PREFETCH_SAVED,
            "PrefetchWastedMs": sc.PREFETCH_WASTED,
        },
        extra=_ttft_means_streamed,
    ),
)


# --- the tables compiled for the hot path ------------------------------------------------
# A read is (priority, column, converter); priority is the source's position in the dialect's
# sources then GENERIC_SOURCES, lower first. An @entity read on a span that is neither tool
# nor agent gets column "", which is always taken: the value is still checked, never stored.
_Read = tuple[int, str, Converter]
_UNTAKEN = 1 << 30  # priority of a column nothing has written yet
_ENTITY_COLUMN = {_TOOL: "Tool", _AGENT: "Agent"}


@dataclass(frozen=True, slots=True)
class _Compiled:
    dialect: Dialect
    reads: Mapping[str, Mapping[str, tuple[_Read, ...]]]  # @entity's column -> attribute -> reads
    wildcards: tuple[tuple[str, tuple[str, str]], ...]  # (prefix, role) of "x*" roles, in order


def _compile(dialect: Dialect) -> _Compiled:
    """The dialect's sources, then GENERIC_SOURCES, as reads by attribute, once for each
    column @entity can mean; an attribute listed twice gets two reads."""
    tables = ((dialect.sources, dialect.unit), (GENERIC_SOURCES, "s"))
    listed = [
        (column, attr, _converter(column, unit))
        for sources, unit in tables
        for column, attrs in sources.items()
        for attr in ((attrs,) if isinstance(attrs, str) else attrs)
    ]
    reads: dict[str, dict[str, tuple[_Read, ...]]] = {"Tool": {}, "Agent": {}, "": {}}
    for entity, by_attr in reads.items():
        for priority, (column, attr, convert) in enumerate(listed):
            column = entity if column == _ENTITY else column
            by_attr[attr] = (*by_attr.get(attr, ()), (priority, column, convert))
    wildcards = tuple((key[:-1], role) for key, role in dialect.roles.items() if key[-1:] == "*")
    return _Compiled(dialect, reads, wildcards)


_COMPILED = tuple(_compile(dialect) for dialect in DIALECTS)
_UNKNOWN = _compile(Dialect(name=""))
_MARKER_RANK: dict[str, int] = {}  # marker attribute -> rank (index in DIALECTS) of its dialect
for _rank, _dialect in reversed(tuple(enumerate(DIALECTS))):
    _MARKER_RANK |= dict.fromkeys(_dialect.markers, _rank)
# The dialects other rules can identify: (rank, name prefixes, key prefix, detect, compiled).
_RULED = tuple(
    (rank, c.dialect.name_prefixes, c.dialect.key_prefix, c.dialect.detect, c)
    for rank, c in enumerate(_COMPILED)
    if c.dialect.name_prefixes or c.dialect.key_prefix or c.dialect.detect
)


def _detect(span: _Span) -> _Compiled:
    """The first dialect in ``DIALECTS`` order that matches. Markers are found with one set
    intersection; only dialects ranked before the best marker hit try their other rules."""
    first = len(_COMPILED)
    for marker in _MARKER_RANK.keys() & span.attrs.keys():  # usually none or one
        first = min(first, _MARKER_RANK[marker])
    for rank, name_prefixes, key_prefix, detect, compiled in _RULED:
        if rank >= first:
            break
        if (
            span.name.startswith(name_prefixes)
            or (key_prefix and span.in_namespace(key_prefix))
            or (detect is not None and detect(span))
        ):
            return compiled
    return _COMPILED[first] if first < len(_COMPILED) else _UNKNOWN


# --- the derivation ----------------------------------------------------------------------


def derive(
    name: str,
    kind: str,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, object],
    events: Sequence[Event] | EventTimes,
) -> tuple[dict[str, object], list[str]]:
    """Return (derived, flags): derived has exactly the keys of DERIVED_NAMES; flags are
    short machine-readable strings such as 'bad_attribute:gen_ai.usage.input_tokens'.
    ``events`` are (name, unix ns, attributes) tuples, each checked, or ``EventTimes``."""
    out = _Out()
    try:
        _derive(_span(name, kind, start_ns, end_ns, attributes, events, out), out)
    except Exception as exc:  # last resort: one odd span must never stop ingest
        out = _Out()
        out.flag(f"normalise_error:{type(exc).__name__}")
    return out.values, list(out.flags)  # only known columns are ever written: the shape holds


def _span(name: object, kind: object, start: object, end: object, attrs: object, events: object, out: _Out) -> _Span:
    """Validate the raw inputs; anything malformed is dropped and flagged."""
    start_ns, end_ns = _unix_ns(start), _unix_ns(end)
    if start_ns is None or end_ns is None or end_ns < start_ns:
        out.flag("bad_span_times")
    if type(attrs) is not dict and not isinstance(attrs, Mapping):
        out.flag("bad_attributes")
        attrs = {}
    attrs, keys = _str_keyed(attrs)
    return _Span(
        name=name if isinstance(name, str) else "",
        kind=kind if isinstance(kind, str) else "",
        start=start_ns,
        end=end_ns,
        attrs=attrs,
        events=events if type(events) is EventTimes else _events(events, out),
        keys=keys,
    )


def _str_keyed(attrs: Mapping[object, object]) -> tuple[Mapping[str, object], str]:
    """The attributes with string keys only, and the keys joined for ``_Span.in_namespace``.
    A dict (the decoder's output) is used as is, never copied or changed, when joining its
    keys succeeds, which proves they are all strings."""
    if type(attrs) is dict:
        try:
            return attrs, "\n" + "\n".join(attrs)  # type: ignore[arg-type]
        except TypeError:
            pass
    clean = {key: value for key, value in attrs.items() if isinstance(key, str)}
    return clean, "\n" + "\n".join(clean)


def _unix_ns(value: object) -> int | None:
    """A timestamp as OTLP carries it (fixed64 unix ns), else None."""
    return value if type(value) is int and 0 <= value < 2**64 else None


def _events(events: object, out: _Out) -> EventTimes:
    if type(events) is not list and (not isinstance(events, Sequence) or isinstance(events, str | bytes)):
        out.flag("bad_event")
        return NO_EVENTS
    names: list[str] = []
    times: list[int] = []
    for event in events:
        ok = type(event) is tuple or (isinstance(event, Sequence) and not isinstance(event, str | bytes))
        if ok and len(event) >= 2 and isinstance(event[0], str) and _unix_ns(event[1]) is not None:
            names.append(event[0])
            times.append(event[1])
        else:
            out.flag("bad_event")
    return EventTimes(names, times)


def _derive(span: _Span, out: _Out) -> None:
    compiled = _detect(span)
    dialect = compiled.dialect
    flat = _flatten(dialect.json_attrs, span.attrs, out) if dialect.json_attrs else {}
    if flat or _SPAN_NAME in compiled.reads[""]:  # the attributes as the tables see them
        span.attrs = {**span.attrs, **flat, _SPAN_NAME: span.name}
    for column, value in dialect.fixed.items() if dialect.fixed else ():
        out.put(column, value)
    role = _role(compiled, span, out)
    out.role, operation = dialect.role_rule(span, role) if dialect.role_rule is not None else role
    out.put("Role", out.role)
    if INNER_OF_MODEL_CALL in span.attrs and out.read(span.attrs, INNER_OF_MODEL_CALL, _flag):
        # an inner layer of one of our model calls: not another call. Only the Role column
        # changes; out.role stays the dialect's, so everything else is derived as usual.
        out.values["Role"] = _OTHER
    out.put("Dialect", dialect.name)
    if operation:
        out.put("Operation", operation)
    _read_sources(compiled.reads[_ENTITY_COLUMN.get(out.role, "")], span, out)
    if dialect.extra is not None:
        dialect.extra(span, out)
    if out.values["Streaming"] == 1 or out.values["IsServerSpan"] == 1:
        _server_timing(span, out)
    for column, value in dialect.defaults.items() if dialect.defaults else ():
        out.put(column, value)
    ttft, duration = out.values["TtftMs"], span.duration_ms
    if isinstance(ttft, float) and duration is not None and ttft > duration + 1e-6:
        out.flag("ttft_exceeds_duration")


def _server_timing(span: _Span, out: _Out) -> None:
    """GenAI's server timing metrics written on a span, for every dialect, when nothing else gave
    the column. TTFT from time_to_first_token on streamed calls and server spans (OpenLIT writes
    it on the client's call too; on a call that is not streamed it writes the whole call there).
    The time per output token is the mean inter-token latency on server spans only: on a client's
    call (OpenLIT) it is the mean gap between every chunk of the stream, the role, finish and usage
    chunks included, a third short on an 8-chunk stream: a plausible wrong ITL, so not read."""
    reads = [("TtftMs", sc.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN)]
    if out.values["IsServerSpan"] == 1:
        reads.append(("ItlMeanMs", sc.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN))
    for column, attr in reads:
        if attr in span.attrs and column not in out.taken:
            value = out.read(span.attrs, attr, _DURATIONS["s"])
            if value is not None:
                out.put(column, value)


def _read_sources(reads: Mapping[str, tuple[_Read, ...]], span: _Span, out: _Out) -> None:
    """Visit each attribute once and convert it for every read of it. As if every source
    were read in priority order: each bad value is flagged, in that order, and each column
    takes its best good value unless something else wrote it first."""
    values, taken, bad = out.values, out.taken, []
    for attr, value in span.attrs.items():
        for priority, column, convert in reads.get(attr, ()):
            converted = convert(value)
            if converted is _BAD:
                bad.append((priority, attr))
            elif converted is not None and taken.get(column, _UNTAKEN) > priority:
                values[column] = converted
                taken[column] = priority
    for _, attr in sorted(bad) if bad else ():
        out.flag(f"bad_attribute:{attr}")


def _role(compiled: _Compiled, span: _Span, out: _Out) -> tuple[str, str]:
    """The first kind key whose value the dialect's role table knows decides."""
    dialect, roles = compiled.dialect, compiled.dialect.roles
    if "Role" in dialect.fixed:
        return str(dialect.fixed["Role"]), ""
    for key in dialect.kind_keys:
        raw = span.name if key == _NAME else span.attrs.get(key)
        if raw is not None and not isinstance(raw, str):
            out.flag(f"bad_attribute:{key}")
            continue
        value = (raw or "").strip().lower()
        hit = roles.get(value) or next((r for prefix, r in compiled.wildcards if value.startswith(prefix)), None)
        if value and hit:
            return hit
    return _OTHER, ""


def _flatten(names: Sequence[str], attrs: Mapping[str, object], out: _Out) -> dict[str, object]:
    """Scalar members of JSON-object attributes as virtual attributes "<attr>.<key>"."""
    flat: dict[str, object] = {}
    for name in (n for n in names if n in attrs):
        raw = attrs[name]
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, Mapping):
            out.flag(f"bad_attribute:{name}")
            continue
        scalars = {k: v for k, v in parsed.items() if isinstance(v, str | int | float | bool)}
        flat |= {f"{name}.{key}": value for key, value in scalars.items()}
    return flat
