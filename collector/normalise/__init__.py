"""Derive a span's normalised columns from whichever instrumentation dialect wrote it.

Owns: recognising the dialect of one span (OTel GenAI + ``agentlat.*``, OpenInference,
OpenLLMetry, Langfuse, Vercel AI SDK, vLLM, SGLang, Logfire), giving it a role, and
turning its latency, token and prefetch facts into the ``DERIVED_NAMES`` columns, with
every duration in milliseconds. A span the SDK marks as the inner layer of one of its model calls
(``INNER_OF_MODEL_CALL``) is derived as its dialect says, but with Role "other".

In four parts: each dialect is one declarative ``Dialect`` table in ``dialects.py`` (adding a
dialect is adding a table), with what data cannot say in ``dialect_hooks.py``; the converters of
attribute values are in ``normalise_convert.py``; the span as the tables see it and the row being
built are in ``normalise_span.py``. This module compiles the tables and applies them.

The tables are compiled once, at import, into the form the hot path wants (``derive`` runs
once per ingested span): marker attributes into one rank map, so detection is a set
intersection; source lists into per-attribute dispatch (attribute -> its reads, each with
a priority and a ready converter), so a span's attributes are visited once instead of
every attribute any table names being looked up.

Pure: no I/O, no logging, and ``derive`` never raises. An attribute of the wrong type is
skipped and reported as a flag (``bad_attribute:<name>``); the span is still stored.
The four parts import nothing from agentlat but ``semconv``, ``stream_stats`` and the store's
column names (``agentlat.store``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentlat import semconv as sc
from agentlat.collector.normalise.convert import BAD, DURATIONS, Converter, as_flag, converter
from agentlat.collector.normalise.dialects import DIALECTS, ENTITY, GENERIC_SOURCES, NAME, SPAN_NAME, Dialect
from agentlat.collector.normalise.span import NO_EVENTS, Event, EventTimes, Out, Span, span_of

__all__ = ["DIALECTS", "INNER_OF_MODEL_CALL", "NO_EVENTS", "Dialect", "EventTimes", "derive"]

INNER_OF_MODEL_CALL = sc.INNER_OF_MODEL_CALL  # another instrumentation's view of an agentlat model call
_OTHER = sc.ROLE_OTHER


# --- the tables compiled for the hot path ------------------------------------------------
# A read is (priority, column, converter); priority is the source's position in the dialect's
# sources then GENERIC_SOURCES, lower first. An @entity read on a span that is neither tool
# nor agent gets column "", which is always taken: the value is still checked, never stored.
_Read = tuple[int, str, Converter]
_UNTAKEN = 1 << 30  # priority of a column nothing has written yet
_ENTITY_COLUMN = {sc.ROLE_TOOL: "Tool", sc.ROLE_AGENT: "Agent"}


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
        (column, attr, converter(column, unit))
        for sources, unit in tables
        for column, attrs in sources.items()
        for attr in ((attrs,) if isinstance(attrs, str) else attrs)
    ]
    reads: dict[str, dict[str, tuple[_Read, ...]]] = {"Tool": {}, "Agent": {}, "": {}}
    for entity, by_attr in reads.items():
        for priority, (column, attr, convert) in enumerate(listed):
            column = entity if column == ENTITY else column
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


def _detect(span: Span) -> _Compiled:
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
    out = Out()
    try:
        _derive(span_of(name, kind, start_ns, end_ns, attributes, events, out), out)
    except Exception as exc:  # last resort: one odd span must never stop ingest
        out = Out()
        out.flag(f"normalise_error:{type(exc).__name__}")
    return out.values, list(out.flags)  # only known columns are ever written: the shape holds


def _derive(span: Span, out: Out) -> None:
    compiled = _detect(span)
    dialect = compiled.dialect
    flat = _flatten(dialect.json_attrs, span.attrs, out) if dialect.json_attrs else {}
    if flat or SPAN_NAME in compiled.reads[""]:  # the attributes as the tables see them
        span.attrs = {**span.attrs, **flat, SPAN_NAME: span.name}
    for column, value in dialect.fixed.items() if dialect.fixed else ():
        out.put(column, value)
    role = _role(compiled, span, out)
    out.role, operation = dialect.role_rule(span, role) if dialect.role_rule is not None else role
    out.put("Role", out.role)
    if INNER_OF_MODEL_CALL in span.attrs and out.read(span.attrs, INNER_OF_MODEL_CALL, as_flag):
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


def _server_timing(span: Span, out: Out) -> None:
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
            value = out.read(span.attrs, attr, DURATIONS["s"])
            if value is not None:
                out.put(column, value)


def _read_sources(reads: Mapping[str, tuple[_Read, ...]], span: Span, out: Out) -> None:
    """Visit each attribute once and convert it for every read of it. As if every source
    were read in priority order: each bad value is flagged, in that order, and each column
    takes its best good value unless something else wrote it first."""
    values, taken, bad = out.values, out.taken, []
    for attr, value in span.attrs.items():
        for priority, column, convert in reads.get(attr, ()):
            converted = convert(value)
            if converted is BAD:
                bad.append((priority, attr))
            elif converted is not None and taken.get(column, _UNTAKEN) > priority:
                values[column] = converted
                taken[column] = priority
    for _, attr in sorted(bad) if bad else ():
        out.flag(f"bad_attribute:{attr}")


def _role(compiled: _Compiled, span: Span, out: Out) -> tuple[str, str]:
    """The first kind key whose value the dialect's role table knows decides."""
    dialect, roles = compiled.dialect, compiled.dialect.roles
    if "Role" in dialect.fixed:
        return str(dialect.fixed["Role"]), ""
    for key in dialect.kind_keys:
        raw = span.name if key == NAME else span.attrs.get(key)
        if raw is not None and not isinstance(raw, str):
            out.flag(f"bad_attribute:{key}")
            continue
        value = (raw or "").strip().lower()
        hit = roles.get(value) or next((r for prefix, r in compiled.wildcards if value.startswith(prefix)), None)
        if value and hit:
            return hit
    return _OTHER, ""


def _flatten(names: Sequence[str], attrs: Mapping[str, object], out: Out) -> dict[str, object]:
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
