"""OTLP trace requests decoded many at a time: the engine parses them, numpy and Arrow build the batch.

Ingest checks a request (``otlp.check_request``: which spans it keeps, the answer's partial success)
and logs it as it came, as a ``TraceRequest``; the writer decodes what it gathered in one call,
``decode_requests``, just before the insert. That call gives exactly the batch the reference decoder
(``otlp.to_batch``, span by span in Python) gives for the same requests, for a fraction of its CPU
(``python -m bench.stages``):

- the store's engine parses the bodies (``Store.parse_trace_requests``): one row per span, attributes
  as typed values;
- the spans are kept or rejected by the reference's rule, their attribute values rendered as text as
  ``otlp.as_text`` renders them (each double, array and key-value list in Python, the rest in Arrow),
  cut to the same limits with the same flags, in the same order;
- the derived columns come from ``normalise_vector.derive_batch`` (the dialect tables, column-wise);
- a request the engine does not represent (a ``bytes`` value, an array or key-value list inside
  another) is decoded by the reference decoder, and so is each request of a call the engine fails on.
  A request neither can decode is reported back (``Decoded.undecodable``), never dropped silently.

``tests/test_otlp_engine.py`` holds the two decoders to the same batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agentlat.collector.ingest.otlp import (
    MAX_TIME_NS,
    SPAN_KINDS,
    STATUS_CODES,
    Limits,
    TraceRequest,
    as_text,
    decode_spans,
    parse_protobuf,
)
from agentlat.collector.normalise import vector as nv
from agentlat.shared.columns import DERIVED_NAMES, SPAN_ARROW_SCHEMA
from agentlat.store import ParsedRequests

log = logging.getLogger("agentlat.collector")

_MAP = SPAN_ARROW_SCHEMA.field("SpanAttributes").type
_TIMESTAMP = SPAN_ARROW_SCHEMA.field("Timestamp").type
_NO_TRACE, _NO_SPAN = "0" * 32, "0" * 16
NONE, STRING, BOOL, INT, DOUBLE, ARRAY, KVLIST, BYTES = range(8)


@dataclass(slots=True)
class Decoded:
    """The spans batch of a call, and the requests that could not be decoded, each with the reason."""

    batch: pa.Table
    undecodable: list[tuple[TraceRequest, str]] = field(default_factory=list)


def decode_requests(
    requests: Sequence[TraceRequest], limits: Limits, parse: Callable[[Sequence[bytes]], ParsedRequests]
) -> Decoded:
    """The spans of ``requests`` as one batch of the spans table, in the order of the requests."""
    if not requests:
        return Decoded(SPAN_ARROW_SCHEMA.empty_table())
    try:
        parsed = parse([request.body for request in requests])
    except Exception as exc:  # the engine refused the call: find the request it cannot read
        if len(requests) == 1:
            log.warning("the engine cannot parse a logged trace request (%s); decoding it in Python", exc)
            return _by_reference(requests, [0], limits)
        return _joined([decode_requests([request], limits, parse) for request in requests])
    try:
        outside = _outside_engine(parsed)
        spans = parsed.spans
        kept = _kept_spans(spans, requests) & ~np.isin(_seq(spans), outside)
        kept_spans = spans if kept.all() else spans.filter(pa.array(kept))
        engine = Decoded(_Batch(kept_spans, parsed.resources, requests, limits).table())
    except Exception:  # a bug here must cost speed, not spans
        log.exception("decoding %d trace requests at once failed; decoding them one by one in Python", len(requests))
        return _by_reference(requests, range(len(requests)), limits)
    if len(outside) == 0:
        return engine
    by_reference = [_by_reference(requests, [seq], limits) for seq in outside.tolist()]
    order = np.concatenate(
        [_seq(spans)[kept], *(np.full(p.batch.num_rows, s) for p, s in zip(by_reference, outside, strict=True))]
    )
    joined = _joined([engine, *by_reference])
    joined.batch = joined.batch.take(pa.array(np.argsort(order, kind="stable")))
    return joined


def _joined(parts: Sequence[Decoded]) -> Decoded:
    return Decoded(
        pa.concat_tables([part.batch for part in parts]), [bad for part in parts for bad in part.undecodable]
    )


def _by_reference(requests: Sequence[TraceRequest], seqs: Sequence[int], limits: Limits) -> Decoded:
    """The requests at ``seqs`` through the reference decoder, spans dropped as when they were checked."""
    decoded = Decoded(SPAN_ARROW_SCHEMA.empty_table())
    for seq in seqs:
        request = requests[seq]
        try:
            message = parse_protobuf(request.body)
            batch = decode_spans(message, request.project, request.received_ns, limits, request.expiry_ns).batch
        except Exception as exc:
            log.error("a logged trace request cannot be decoded: %s", exc)
            decoded.undecodable.append((request, f"{type(exc).__name__}: {exc}"))
            continue
        decoded.batch = pa.concat_tables([decoded.batch, batch])
    return decoded


# --- which spans and requests -------------------------------------------------------------------------
def _kept_spans(parsed: pa.Table, requests: Sequence[TraceRequest]) -> np.ndarray:
    """otlp._Verdicts.keep, column-wise: well-formed ids, times within int64, not expired."""
    trace, span, parent = (parsed.column(c) for c in ("trace_id", "span_id", "parent_span_id"))
    ok = np.asarray(pc.and_(pc.equal(pc.binary_length(trace), 32), pc.not_equal(trace, _NO_TRACE)), dtype=bool)
    ok &= np.asarray(pc.and_(pc.equal(pc.binary_length(span), 16), pc.not_equal(span, _NO_SPAN)), dtype=bool)
    parent_length = np.asarray(pc.binary_length(parent), dtype=np.int64)
    ok &= (parent_length == 0) | (parent_length == 16)
    start, end = _uint64(parsed, "start"), _uint64(parsed, "end")
    ok &= (start <= MAX_TIME_NS) & (end <= MAX_TIME_NS)
    expiry = np.asarray([request.expiry_ns for request in requests], dtype=np.int64)[_seq(parsed)]
    latest = np.maximum(start, end)
    ok &= (expiry < 0) | (latest >= np.maximum(expiry, 0).astype(np.uint64))
    return ok


def _outside_engine(parsed: ParsedRequests) -> np.ndarray:
    """The requests holding a value the engine reports by kind only: bytes, or arrays and key-value lists
    inside an array or key-value list."""
    spans, resources = parsed.spans, parsed.resources
    seq = _seq(spans)
    outside = _holders_outside(_combined(spans.column("attributes")), len(seq))
    for column in ("event_attributes", "link_attributes"):
        per_span = _combined(spans.column(column))  # a list of attribute lists a span
        per_item = _holders_outside(per_span.flatten(), len(per_span.flatten()))
        outside[np.asarray(pc.list_parent_indices(per_span), dtype=np.int64)[per_item]] = True
    in_resources = _holders_outside(_combined(resources.column("attributes")), resources.num_rows)
    return np.unique(np.concatenate([seq[outside], _seq(resources)[in_resources]]))


def _holders_outside(lists: pa.ListArray, holders: int) -> np.ndarray:
    flat = lists.flatten()
    parent = np.asarray(pc.list_parent_indices(lists), dtype=np.int64)
    value = flat.field("value")
    bad = np.asarray(value.field("value"), dtype=np.int8) == BYTES
    for nested, member in (("array_value", None), ("kvlist_value", "value")):
        items = value.field(nested).field("values")
        kinds = items.flatten() if member is None else items.flatten().field(member)
        inner = np.isin(np.asarray(kinds.field("value"), dtype=np.int8), (ARRAY, KVLIST, BYTES))
        bad[np.asarray(pc.list_parent_indices(items), dtype=np.int64)[inner]] = True
    out = np.zeros(holders, dtype=bool)
    out[parent[bad]] = True
    return out


# --- column helpers -----------------------------------------------------------------------------------
def _combined(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One array (ChunkedArray.combine_chunks copies even a single chunk)."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _seq(parsed: pa.Table) -> np.ndarray:
    return np.asarray(_combined(parsed.column("seq")), dtype=np.int64)


def _uint64(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(_combined(table.column(name)), dtype=np.uint64)


def _lengths(lists: pa.ListArray) -> np.ndarray:
    return np.asarray(pc.list_value_length(lists), dtype=np.int64)


def _offsets(counts: np.ndarray) -> pa.Array:
    return pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))


def _list_array(counts: np.ndarray, values: pa.Array) -> pa.ListArray:
    return pa.ListArray.from_arrays(_offsets(counts), values)


class _Flags:
    """Flags of the batch's spans, each with its place in the reference decoder's order:
    (stage, item, position) then as added."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int, int, str]] = []

    def add(
        self, spans: np.ndarray, stage: int, items: np.ndarray | int, positions: np.ndarray | int, text: str | list[str]
    ) -> None:
        count = len(spans)
        items_ = np.broadcast_to(items, count).tolist()
        positions_ = np.broadcast_to(positions, count).tolist()
        texts = [text] * count if isinstance(text, str) else list(text)
        start = len(self.rows)
        for i, (span, item, position, flag) in enumerate(zip(spans.tolist(), items_, positions_, texts, strict=True)):
            self.rows.append((span, stage, item, position, start + i, flag))

    def column(self, spans: int) -> pa.Array:
        self.rows.sort()
        counts = np.bincount(np.asarray([row[0] for row in self.rows], dtype=np.int64), minlength=spans)
        return _list_array(counts, pa.array([row[5] for row in self.rows], pa.string()))


# Stages of a span's flags, in the reference decoder's order.
_TIMES, _ATTRIBUTES, _EVENTS_DROPPED, _EVENTS, _DERIVED, _LINKS = range(6)
_DROPPED_FIRST, _TIME_LAST = -1, 1 << 30


# --- typed attributes ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Attributes:
    """The attributes of many holders (spans, events, links, resources), flattened and cut to the limits:
    the first ``max_attributes`` of each, values rendered as text and cut to ``max_value_chars``."""

    holder: np.ndarray  # int64, per kept value
    position: np.ndarray  # int64, its index among its holder's attributes
    keys: pa.StringArray
    kinds: np.ndarray  # int8
    values: pa.StructArray  # the AnyValue members
    texts: pa.StringArray  # as stored; for a STRING value also its typed value
    truncated: np.ndarray  # bool, per kept value
    counts: np.ndarray  # per holder: values kept
    dropped: np.ndarray  # per holder: had more than the limit

    def map_array(self) -> pa.MapArray:
        return pa.MapArray.from_arrays(_offsets(self.counts), self.keys, self.texts, type=_MAP)

    def flag(self, flags: _Flags, spans: np.ndarray, stage: int, items: np.ndarray | int) -> None:
        """Their flags, as ``otlp._attributes`` appends them: attributes_dropped, then each truncated key.
        ``spans`` (and ``items``, the holder's index within its span) are per holder."""
        items = np.broadcast_to(items, len(spans))
        dropped = np.flatnonzero(self.dropped)
        flags.add(spans[dropped], stage, items[dropped], _DROPPED_FIRST, "attributes_dropped")
        cut = np.flatnonzero(self.truncated)
        if len(cut):
            keys = self.keys.take(pa.array(cut)).to_pylist()
            holders = self.holder[cut]
            flags.add(spans[holders], stage, items[holders], self.position[cut], [f"truncated:{k}" for k in keys])

    def python_values(self, at: np.ndarray) -> list[object]:
        """The typed values at ``at`` as ``otlp._attributes`` keeps them (a cut string as cut)."""
        kinds = self.kinds[at].tolist()
        values = self.values.take(pa.array(at))
        texts = self.texts.take(pa.array(at)).to_pylist()
        ints, doubles = values.field("int_value").to_pylist(), values.field("double_value").to_pylist()
        bools = values.field("bool_value").to_pylist()
        out: list[object] = []
        for i, kind in enumerate(kinds):
            if kind in (ARRAY, KVLIST):
                out.append(_nested_value(kind, values[i].as_py()))
            else:
                out.append((None, texts[i], bools[i], ints[i], doubles[i])[kind])
        return out


def _typed(lists: pa.ListArray, limits: Limits) -> _Attributes:
    """``lists`` (one list of attributes per holder) flattened, cut and rendered."""
    lengths = _lengths(lists)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    flat = lists.flatten()
    holder = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    position = np.arange(len(flat), dtype=np.int64) - starts[holder]
    keep = position < limits.max_attributes
    if not keep.all():
        flat, holder, position = flat.filter(pa.array(keep)), holder[keep], position[keep]
    values = flat.field("value")
    kinds = np.asarray(values.field("value"), dtype=np.int8)
    texts, truncated = _texts(values, kinds, limits.max_value_chars)
    counts = np.minimum(lengths, limits.max_attributes)
    return _Attributes(
        holder, position, flat.field("key"), kinds, values, texts, truncated, counts, lengths > limits.max_attributes
    )


def _texts(values: pa.StructArray, kinds: np.ndarray, max_chars: int) -> tuple[pa.StringArray, np.ndarray]:
    """Each value as ``otlp.as_text`` renders it, cut to ``max_chars``; and which were cut."""
    text = values.field("string_value")
    is_int, is_bool = kinds == INT, kinds == BOOL
    if is_int.any():
        text = pc.if_else(pa.array(is_int), pc.cast(values.field("int_value"), pa.string()), text)
    if is_bool.any():
        text = pc.if_else(pa.array(is_bool), pc.if_else(values.field("bool_value"), "true", "false"), text)
    for kinds_here, render in (((DOUBLE,), _repr_doubles), ((ARRAY, KVLIST), _json_nested)):
        where = np.isin(kinds, kinds_here)
        if where.any():
            text = pc.replace_with_mask(text, pa.array(where), render(values, kinds, where))
    lengths = np.asarray(pc.utf8_length(text), dtype=np.int64)
    truncated = lengths > max_chars
    if truncated.any():
        text = pc.if_else(pa.array(truncated), pc.utf8_slice_codeunits(text, 0, max_chars), text)
    return text, truncated


def _repr_doubles(values: pa.StructArray, kinds: np.ndarray, where: np.ndarray) -> pa.StringArray:
    """``repr`` of each double. Arrow's cast writes the same shortest round-trip digits but picks fixed or
    exponent notation by other rules, and leaves a whole number without ".0". Where both write fixed
    notation (``repr`` does for 1e-4 <= |x| < 1e16 and for zero) its text is taken, with the ".0";
    ``repr`` itself renders the rest (exponents, NaN, infinities)."""
    doubles = np.asarray(values.field("double_value"))[where]
    text = pc.cast(pa.array(doubles), pa.string())
    magnitude = np.abs(doubles)
    fixed = ((magnitude >= 1e-4) & (magnitude < 1e16)) | (magnitude == 0)
    fixed &= ~np.asarray(pc.match_substring(text, "e"), dtype=bool)
    whole = np.asarray(pc.invert(pc.match_substring(text, ".")), dtype=bool)
    text = pc.if_else(pa.array(fixed & whole), pc.binary_join_element_wise(text, ".0", ""), text)
    if fixed.all():
        return text
    rest = np.flatnonzero(~fixed)
    return pc.replace_with_mask(
        text, pa.array(~fixed), pa.array([repr(d) for d in doubles[rest].tolist()], pa.string())
    )


def _json_nested(values: pa.StructArray, kinds: np.ndarray, where: np.ndarray) -> pa.StringArray:
    at = np.flatnonzero(where)
    picked = values.take(pa.array(at)).to_pylist()
    texts = [as_text(_nested_value(int(kinds[i]), value)) for i, value in zip(at, picked, strict=True)]
    return pa.array(texts, pa.string())


def _nested_value(kind: int, value: dict) -> object:
    """An array or key-value list as ``otlp.any_value`` gives it (its members are scalars here)."""
    if kind == ARRAY:
        return [_scalar(item) for item in value["array_value"]["values"]]
    return {item["key"]: _scalar(item["value"]) for item in value["kvlist_value"]["values"]}


def _scalar(member: dict) -> object:
    kind = member["value"]
    return None if kind == NONE else member[("", "string_value", "bool_value", "int_value", "double_value")[kind]]


# --- the batch ----------------------------------------------------------------------------------------
class _Batch:
    """The spans-table batch of the engine's rows (kept spans of requests it represents)."""

    def __init__(self, parsed: pa.Table, resources: pa.Table, requests: Sequence[TraceRequest], limits: Limits) -> None:
        self.parsed, self.resources, self.requests, self.limits = parsed, resources, requests, limits
        self.count = parsed.num_rows
        self.seq = _seq(parsed)
        self.flags = _Flags()
        self.starts, self.ends = _uint64(parsed, "start"), _uint64(parsed, "end")

    def table(self) -> pa.Table:
        if self.count == 0:
            return SPAN_ARROW_SCHEMA.empty_table()
        columns = self._span_columns()
        self._time_flags()
        attributes = _typed(_combined(self.parsed.column("attributes")), self.limits)
        attributes.flag(self.flags, np.arange(self.count), _ATTRIBUTES, 0)
        columns["SpanAttributes"] = attributes.map_array()
        columns |= self._resource_columns()
        events = self._events(columns)
        columns |= self._derived(columns, attributes, events)
        columns |= self._links()
        columns["IngestFlags"] = self.flags.column(self.count)
        return pa.Table.from_arrays([columns[name] for name in SPAN_ARROW_SCHEMA.names], schema=SPAN_ARROW_SCHEMA)

    def column(self, name: str) -> pa.Array:
        return _combined(self.parsed.column(name))

    def _span_columns(self) -> dict[str, pa.Array]:
        kinds = np.asarray(self.column("kind"), dtype=np.int64)
        codes = np.asarray(self.column("status_code"), dtype=np.int64)
        durations = np.where(self.ends > self.starts, self.ends - self.starts, 0).astype(np.uint64)
        projects = pa.array([request.project for request in self.requests], pa.string())
        return {
            "Timestamp": pa.array(self.starts.astype(np.int64)).cast(_TIMESTAMP),
            "TraceId": self.column("trace_id"),
            "SpanId": self.column("span_id"),
            "ParentSpanId": self.column("parent_span_id"),
            "TraceState": self.column("trace_state"),
            "SpanName": self.column("name"),
            "SpanKind": _names(SPAN_KINDS, kinds),
            "ScopeName": self.column("scope_name"),
            "ScopeVersion": self.column("scope_version"),
            "Duration": pa.array(durations),
            "StatusCode": _names(STATUS_CODES, codes),
            "StatusMessage": self.column("status_message"),
            "ProjectId": projects.take(pa.array(self.seq)),
        }

    def _time_flags(self) -> None:
        """otlp._time_flags, column-wise."""
        received = [r.received_ns for r in self.requests]
        fits = max(received) + self.limits.future_skew_ns < 2**63 and min(received) - self.limits.past_skew_ns >= 0
        kind = np.int64 if fits else object  # else Python ints: received +/- skew passes int64
        at = np.asarray(received, dtype=kind)[self.seq]
        start = self.starts.astype(kind)
        future = start > at + self.limits.future_skew_ns
        past = start < at - self.limits.past_skew_ns
        missing = self.starts == 0
        rows = np.arange(self.count)
        self.flags.add(rows[missing], _TIMES, 0, 0, "missing_start_time")
        self.flags.add(rows[~missing & future], _TIMES, 0, 0, "clock_skew_future")
        self.flags.add(rows[~missing & ~future & past], _TIMES, 0, 0, "clock_skew_past")
        self.flags.add(rows[self.ends < self.starts], _TIMES, 1, 0, "end_before_start")

    def _resource_columns(self) -> dict[str, pa.Array]:
        """ResourceAttributes and ServiceName, worked out once per resource."""
        attributes = _typed(_combined(self.resources.column("attributes")), self.limits)
        typed = _dicts(attributes, self.resources.num_rows)
        services = [str(values.get("service.name") or "unknown_service") for values in typed]
        which = self.column("resource")
        return {
            "ResourceAttributes": attributes.map_array().take(which),
            "ServiceName": pa.array(services, pa.string()).take(which),
        }

    def _events(self, columns: dict[str, pa.Array]) -> tuple[pa.ListArray, pa.ListArray]:
        """The Events columns: the first max_events of each span, bad times read as 0; returns the kept
        events' names and times (unix ns) per span, for the normaliser."""
        names = self.column("event_names")
        lengths = _lengths(names)
        kept = np.minimum(lengths, self.limits.max_events)
        rows = np.arange(self.count)
        self.flags.add(rows[lengths > self.limits.max_events], _EVENTS_DROPPED, 0, 0, "events_dropped")
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        span = np.repeat(rows, lengths)
        index = np.arange(int(lengths.sum()), dtype=np.int64) - starts[span]
        keep = pa.array(index < self.limits.max_events)
        span, index = span[index < self.limits.max_events], index[index < self.limits.max_events]
        times = np.asarray(self.column("event_times").flatten().filter(keep), dtype=np.uint64)
        event_attributes = _typed(self.column("event_attributes").flatten().filter(keep), self.limits)
        event_attributes.flag(self.flags, span, _EVENTS, index)
        bad_time = times > MAX_TIME_NS
        self.flags.add(span[bad_time], _EVENTS, index[bad_time], _TIME_LAST, "bad_event_time")
        times = np.where(bad_time, 0, times)
        event_names = _list_array(kept, names.flatten().filter(keep))
        event_times = _list_array(kept, pa.array(times))
        columns["Events.Timestamp"] = _list_array(kept, pa.array(times.astype(np.int64)).cast(_TIMESTAMP))
        columns["Events.Name"] = event_names
        columns["Events.Attributes"] = _list_array(kept, event_attributes.map_array())
        return event_names, event_times

    def _derived(
        self, columns: dict[str, pa.Array], attributes: _Attributes, events: tuple[pa.ListArray, pa.ListArray]
    ) -> dict[str, pa.Array]:
        spans = nv.Spans(
            names=columns["SpanName"],
            kinds=columns["SpanKind"],
            starts=self.starts,
            ends=np.maximum(self.ends, self.starts),
            keys=attributes.keys,
            key_spans=attributes.holder,
            values=_table_values(attributes),
            event_names=events[0],
            event_times=events[1],
            typed_attributes=lambda rows: _dicts(attributes, self.count, rows),
        )
        derived = nv.derive_batch(spans)
        for row, order, text in derived.flags:
            self.flags.rows.append((row, _DERIVED, order, 0, len(self.flags.rows), text))
        return {name: derived.columns[name] for name in DERIVED_NAMES}

    def _links(self) -> dict[str, pa.Array]:
        trace_ids = self.column("link_trace_ids")
        lengths = _lengths(trace_ids)
        span = np.repeat(np.arange(self.count), lengths)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        index = np.arange(int(lengths.sum()), dtype=np.int64) - starts[span]
        link_attributes = _typed(self.column("link_attributes").flatten(), self.limits)
        link_attributes.flag(self.flags, span, _LINKS, index)
        return {
            "Links.TraceId": trace_ids,
            "Links.SpanId": self.column("link_span_ids"),
            "Links.TraceState": self.column("link_trace_states"),
            "Links.Attributes": _list_array(lengths, link_attributes.map_array()),
        }


def _names(names: tuple[str, ...], values: np.ndarray) -> pa.Array:
    """Enum names; values out of range read as the first (otlp._enum_name)."""
    known = (values >= 0) & (values < len(names))
    return pa.array(names, pa.string()).take(pa.array(np.where(known, values, 0)))


def _table_values(attributes: _Attributes) -> nv.TableValues:
    """The values of the keys the dialect tables read: the last of each key per span."""
    key_ids = np.asarray(pc.index_in(attributes.keys, pa.array(nv.TABLE_KEYS)).fill_null(-1), dtype=np.int64)
    at = np.flatnonzero(key_ids >= 0)
    composite = attributes.holder[at] * len(nv.TABLE_KEYS) + key_ids[at]
    reversed_first = np.unique(composite[::-1], return_index=True)[1]
    at = np.sort(at[len(at) - 1 - reversed_first])
    values = attributes.values.take(pa.array(at))
    return nv.TableValues(
        span=attributes.holder[at],
        key=key_ids[at],
        kind=attributes.kinds[at],
        strings=attributes.texts.take(pa.array(at)),
        ints=np.asarray(values.field("int_value"), dtype=np.int64),
        doubles=np.asarray(values.field("double_value"), dtype=np.float64),
        bools=np.asarray(values.field("bool_value"), dtype=bool),
    )


def _dicts(attributes: _Attributes, holders: int, rows: np.ndarray | None = None) -> list[dict[str, object]]:
    """The typed attribute dicts of the holders at ``rows`` (all by default), as ``otlp._attributes`` returns them."""
    rows = np.arange(holders) if rows is None else rows
    ends = np.cumsum(attributes.counts)
    begins = ends - attributes.counts
    at = np.concatenate([np.arange(begins[r], ends[r]) for r in rows]) if len(rows) else np.zeros(0, np.int64)
    keys = attributes.keys.take(pa.array(at, pa.int64())).to_pylist()
    values = attributes.python_values(at.astype(np.int64))
    out, i = [], 0
    for row in rows:
        count = int(attributes.counts[row])
        out.append(dict(zip(keys[i : i + count], values[i : i + count], strict=True)))
        i += count
    return out
