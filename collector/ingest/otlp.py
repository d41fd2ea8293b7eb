"""OTLP trace payloads (protobuf or JSON) to one columnar Arrow batch of the spans table.

Decoding walks the protobuf messages once, appending one tuple per span (transposed into
columns at the end) and attributes to flat key/value lists that become Map columns; no
per-span record objects are built. Spans with invalid ids are rejected one by one
(reported as partial success); everything else about a span that is odd is kept and
flagged in ``IngestFlags``.
"""

from __future__ import annotations

import base64
import json
import operator
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from agentlat.api.windows import iso
from agentlat.collector.normalise import NO_EVENTS, EventTimes, derive
from agentlat.errors import AgentlatError
from agentlat.shared.columns import DERIVED_NAMES, SPAN_ARROW_SCHEMA

SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUS_CODES = ("Unset", "Ok", "Error")
NS_PER_MINUTE = 60 * 1_000_000_000
DAY_NS = 24 * 60 * NS_PER_MINUTE
MAX_REPORTED_ERRORS = 5
MAX_TIME_NS = 2**63 - 1  # nanosecond timestamps in Arrow and ClickHouse are signed 64-bit
_MAP = SPAN_ARROW_SCHEMA.field("SpanAttributes").type


_RECORD_MAGIC = b"agentlat:otlp-traces:1\n"
_RECORD_HEADER = struct.Struct("<qqII")  # received ns, expiry ns, spans, project length


class OtlpDecodeError(AgentlatError, ValueError):
    """The payload is not a decodable ExportTraceServiceRequest."""


class TooManySpans(AgentlatError, ValueError):
    """A request carries more spans (log records, data points) than the collector takes at once."""


def count_spans(request: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-span limits. Values past them are kept truncated and flagged, not rejected."""

    max_spans: int = 100_000  # per request
    max_attributes: int = 256
    max_value_chars: int = 16_384
    max_body_chars: int = 65_536  # a GenAI event's body, as JSON
    max_events: int = 1_024
    future_skew_ns: int = 10 * NS_PER_MINUTE
    past_skew_ns: int = 30 * 24 * 60 * NS_PER_MINUTE
    retention_days: int = 0  # spans that ended longer ago are rejected: the store would drop them (0: none)


@dataclass(slots=True)
class DecodedBatch:
    batch: Any  # pa.Table, or a TraceRequest (otlp_engine) to be decoded when it is stored
    accepted: int  # rows in ``batch``
    rejected: int = 0  # reported in partial_success
    errors: list[str] = field(default_factory=list)
    signal: str = "traces"  # traces | logs | metrics
    dropped: dict[str, int] = field(default_factory=dict)  # accepted but not kept, by reason (logs, metrics)
    expired: int = 0  # of ``rejected``: spans older than the store's retention, all told in ``expired_message``
    expired_message: str = ""

    def error_message(self) -> str:
        more = self.rejected - self.expired - len(self.errors)
        suffix = f"; and {more} more" if more > 0 else ""
        return "; ".join(m for m in (self.expired_message, "; ".join(self.errors) + suffix) if m)


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    return decode_protobuf(body, ExportTraceServiceRequest())  # type: ignore[return-value]


def decode_protobuf(body: bytes, request: Message) -> Message:
    """An OTLP export request of any signal from protobuf."""
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise OtlpDecodeError(f"body is not an OTLP {type(request).__name__} protobuf: {exc}") from None
    return request


_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
_INVALID_ID = base64.b64encode(b"\xff").decode()  # wrong length on purpose: the span is rejected


def parse_json(body: bytes) -> ExportTraceServiceRequest:
    return decode_json(body, ExportTraceServiceRequest(), "resourceSpans", "trace", _spans_and_links)  # type: ignore[return-value]


def decode_json(
    body: bytes, request: Message, top: str, what: str, holders: Callable[[dict[str, Any]], Iterator[dict[str, Any]]]
) -> Message:
    """An OTLP export request of any signal from OTLP/JSON. Its ids are hex (not protobuf-JSON base64),
    so those of every object ``holders`` yields are converted first."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OtlpDecodeError(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise OtlpDecodeError("body is JSON nested too deeply to be an OTLP request") from None
    if not isinstance(document, dict):
        raise OtlpDecodeError(f"body must be a JSON object with a {top} array")
    for holder in holders(document):
        for key in _ID_FIELDS:
            if key in holder:
                holder[key] = _hex_to_base64(holder[key])
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        raise OtlpDecodeError(f"JSON does not match the OTLP {what} schema: {exc}") from None
    return request


def _spans_and_links(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for resource_spans in _list(document, "resourceSpans", "resource_spans"):
        for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
            for span in _list(scope_spans, "spans"):
                if isinstance(span, dict):
                    yield span
                    yield from (link for link in _list(span, "links") if isinstance(link, dict))


def _list(container: Any, *keys: str) -> list[Any]:
    if not isinstance(container, dict):
        return []
    for key in keys:
        value = container.get(key)
        if isinstance(value, list):
            return value
    return []


def _hex_to_base64(value: Any) -> Any:
    if not isinstance(value, str):
        return value  # ParseDict reports the wrong type
    if value == "":
        return ""
    try:
        return base64.b64encode(bytes.fromhex(value)).decode()
    except ValueError:
        return _INVALID_ID


def any_value(value: AnyValue) -> Any:
    """OTLP AnyValue to a plain Python value (str, int, float, bool, bytes-as-base64, list, dict)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind)


def as_text(value: Any) -> str:
    """How a typed attribute is stored in the exporter schema's Map(String, String)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # also "nan", "inf" and "-inf"
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), default=str)


class _Map:
    """A Map(String, String) column as flat key and value lists with offsets."""

    __slots__ = ("keys", "offsets", "values")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.values: list[str] = []
        self.offsets: list[int] = [0]

    def close_row(self) -> None:
        self.offsets.append(len(self.keys))

    def array(self) -> pa.Array:
        offsets = pa.array(self.offsets, pa.int32())
        return pa.MapArray.from_arrays(
            offsets, pa.array(self.keys, pa.string()), pa.array(self.values, pa.string()), type=_MAP
        )


def _attributes(pairs: Any, limits: Limits, flags: list[str], out: _Map) -> dict[str, Any]:
    """Append the pairs as text to ``out`` (one row) and return their typed values by key."""
    if len(pairs) > limits.max_attributes:
        flags.append("attributes_dropped")
        pairs = pairs[: limits.max_attributes]
    typed: dict[str, Any] = {}
    keys, values, max_chars = out.keys, out.values, limits.max_value_chars
    for kv in pairs:
        key, any_ = kv.key, kv.value
        kind = any_.WhichOneof("value")
        # The scalar kinds are nearly every attribute: render them inline (hot path).
        if kind == "string_value":
            value = text = any_.string_value
        elif kind == "int_value":
            value = any_.int_value
            text = str(value)
        elif kind == "double_value":
            value = any_.double_value
            text = repr(value)
        elif kind == "bool_value":
            value = any_.bool_value
            text = "true" if value else "false"
        else:
            value = any_value(any_)
            text = as_text(value)
        if len(text) > max_chars:
            text = text[:max_chars]
            flags.append(f"truncated:{key}")
            if isinstance(value, str):
                value = text
        typed[key] = value
        keys.append(key)
        values.append(text)
    out.close_row()
    return typed


def _enum_name(names: tuple[str, ...], value: int) -> str:
    """Unknown enum values (protobuf keeps them, even negative ones) read as the first name."""
    return names[value] if 0 <= value < len(names) else names[0]


_ZERO_TRACE_ID, _ZERO_SPAN_ID = bytes(16), bytes(8)


def _id_error(span: Any) -> str | None:
    trace_id, span_id, parent_span_id = span.trace_id, span.span_id, span.parent_span_id  # each read copies
    if len(trace_id) != 16 or trace_id == _ZERO_TRACE_ID:
        return "trace_id must be 16 non-zero bytes (32 hex characters)"
    if len(span_id) != 8 or span_id == _ZERO_SPAN_ID:
        return "span_id must be 8 non-zero bytes (16 hex characters)"
    if parent_span_id and len(parent_span_id) != 8:
        return "parent_span_id must be empty or 8 bytes (16 hex characters)"
    if span.start_time_unix_nano > MAX_TIME_NS or span.end_time_unix_nano > MAX_TIME_NS:
        return "start/end time is past the year 2262 (more than 2**63-1 ns)"
    return None


def _time_flags(start: int, end: int, received_ns: int, limits: Limits) -> list[str]:
    flags = []
    if start == 0:
        flags.append("missing_start_time")
    elif start > received_ns + limits.future_skew_ns:
        flags.append("clock_skew_future")
    elif start < received_ns - limits.past_skew_ns:
        flags.append("clock_skew_past")
    if end < start:
        flags.append("end_before_start")
    return flags


_SCALAR_COLUMNS = (
    "Timestamp", "TraceId", "SpanId", "ParentSpanId", "TraceState", "SpanName", "SpanKind", "ServiceName",
    "ScopeName", "ScopeVersion", "Duration", "StatusCode", "StatusMessage", "ProjectId",
)  # fmt: skip
_NESTED_COLUMNS = (
    "Events.Timestamp", "Events.Name", "Events.Attributes",
    "Links.TraceId", "Links.SpanId", "Links.TraceState", "Links.Attributes", "IngestFlags",
)  # fmt: skip
_SpanEvents = tuple[EventTimes, list[list[tuple[str, str]]]]  # names and times, and each event's attributes as text
_NO_SPAN_EVENTS: _SpanEvents = (NO_EVENTS, [])
_NO_NESTED = ([], [], [], [], [], [], [], [])  # a span without events, links or flags (the usual case)
_derived_values = operator.itemgetter(*DERIVED_NAMES)


class _Columns:
    """The batch being built: one tuple per span for scalar, nested and derived columns
    (transposed once at the end), and the two attribute maps as flat lists."""

    def __init__(self) -> None:
        self.scalars: list[tuple[Any, ...]] = []
        self.nested: list[tuple[list[Any], ...]] = []
        self.derived: list[tuple[Any, ...]] = []
        self.resource = _Map()
        self.attributes = _Map()

    def table(self) -> pa.Table:
        columns: dict[str, pa.Array] = {"ResourceAttributes": self.resource.array()}
        columns["SpanAttributes"] = self.attributes.array()
        for names, rows in (
            (_SCALAR_COLUMNS, self.scalars),
            (_NESTED_COLUMNS, self.nested),
            (DERIVED_NAMES, self.derived),
        ):
            values = zip(*rows, strict=True) if rows else ([] for _ in names)
            for name, column in zip(names, values, strict=True):
                columns[name] = pa.array(column, SPAN_ARROW_SCHEMA.field(name).type)
        return pa.Table.from_arrays([columns[name] for name in SPAN_ARROW_SCHEMA.names], schema=SPAN_ARROW_SCHEMA)


def to_batch(request: ExportTraceServiceRequest, project: str, received_ns: int, limits: Limits) -> DecodedBatch:
    """The reference decoder: a request to one batch of the spans table, span by span in Python. The
    collector decodes what it stores with ``otlp_engine.decode_requests``, which gives the same batch."""
    _checked_count(request, limits)
    return decode_spans(request, project, received_ns, limits, expiry_ns(received_ns, limits))


def decode_spans(
    request: ExportTraceServiceRequest, project: str, received_ns: int, limits: Limits, expiry: int
) -> DecodedBatch:
    """``to_batch`` of a request already counted, dropping spans that ended before ``expiry`` (-1: none)."""
    cols = _Columns()
    verdicts = _Verdicts(expiry)
    for resource_spans in request.resource_spans:
        resource = _Map()
        resource_typed = _attributes(resource_spans.resource.attributes, limits, [], resource)
        service = str(resource_typed.get("service.name") or "unknown_service")
        for scope_spans in resource_spans.scope_spans:
            scope = (scope_spans.scope.name, scope_spans.scope.version)
            for span in scope_spans.spans:
                if verdicts.keep(span):
                    _append_span(cols, span, (service, *scope, project), resource, received_ns, limits)
    batch = cols.table()
    return verdicts.decoded(batch, batch.num_rows, limits)


def check_request(request: ExportTraceServiceRequest, received_ns: int, limits: Limits) -> DecodedBatch:
    """What ``to_batch`` would accept and reject of a request, without decoding it (``batch`` stays None):
    the request is logged as it came and decoded when it is stored (``otlp_engine.decode_requests``)."""
    count = _checked_count(request, limits)
    verdicts = _Verdicts(expiry_ns(received_ns, limits))
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                verdicts.keep(span)
    return verdicts.decoded(None, count - verdicts.rejected - verdicts.expired, limits)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """An accepted OTLP trace request, logged as it came and decoded when it is stored."""

    body: bytes  # a serialized ExportTraceServiceRequest
    project: str
    received_ns: int
    expiry_ns: int  # spans that ended before this are dropped (-1: none), as they were when checked
    spans: int  # the spans it was accepted with: the rows it decodes to

    def to_record(self) -> bytes:
        project = self.project.encode()
        header = _RECORD_HEADER.pack(self.received_ns, self.expiry_ns, self.spans, len(project))
        return _RECORD_MAGIC + header + project + self.body

    @staticmethod
    def is_record(payload: bytes) -> bool:
        return payload.startswith(_RECORD_MAGIC)

    @classmethod
    def from_record(cls, payload: bytes) -> TraceRequest:
        at = len(_RECORD_MAGIC)
        received, expiry, spans, length = _RECORD_HEADER.unpack_from(payload, at)
        at += _RECORD_HEADER.size
        return cls(payload[at + length :], payload[at : at + length].decode(), received, expiry, spans)


def logged_form(
    request: ExportTraceServiceRequest, project: str, received_ns: int, limits: Limits, body: bytes | None = None
) -> DecodedBatch:
    """A request checked as ``to_batch`` would decode it, its batch the ``TraceRequest`` to log: ``body`` (the
    request as received, when it came as protobuf) or the request serialized."""
    decoded = check_request(request, received_ns, limits)
    payload = request.SerializeToString() if body is None else body
    decoded.batch = TraceRequest(payload, project, received_ns, expiry_ns(received_ns, limits), decoded.accepted)
    return decoded


def expiry_ns(received_ns: int, limits: Limits) -> int:
    """Spans that ended before this are rejected (-1: none is): the spans table's TTL drops a span whose start
    day is ``retention_days`` old, which this span's is however long it ran and in whatever timezone."""
    return received_ns - limits.retention_days * DAY_NS if limits.retention_days else -1


class _Verdicts:
    """Keeps or rejects a request's spans one by one, counting and describing what it rejects."""

    __slots__ = ("errors", "expired", "expiry", "rejected")

    def __init__(self, expiry: int) -> None:
        self.expiry = expiry
        self.rejected = self.expired = 0
        self.errors: list[str] = []

    def keep(self, span: Any) -> bool:
        problem = _id_error(span)
        if problem:
            self.rejected += 1
            if len(self.errors) < MAX_REPORTED_ERRORS:
                self.errors.append(f"span {span.name!r}: {problem}")
            return False
        if max(span.start_time_unix_nano, span.end_time_unix_nano) < self.expiry:
            self.expired += 1
            return False
        return True

    def decoded(self, batch: pa.Table | None, accepted: int, limits: Limits) -> DecodedBatch:
        decoded = DecodedBatch(
            batch, accepted=accepted, rejected=self.rejected + self.expired, errors=self.errors, expired=self.expired
        )
        if self.expired:
            decoded.expired_message = _expired_message(self.expired, limits.retention_days, self.expiry)
        return decoded


def _checked_count(request: ExportTraceServiceRequest, limits: Limits) -> int:
    """The request's span count; raise TooManySpans past the limit."""
    spans = count_spans(request)
    if spans > limits.max_spans:
        raise TooManySpans(
            f"{spans} spans in one request; the limit is {limits.max_spans}: lower OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
        )
    return spans


def _expired_message(spans: int, days: int, expiry_ns: int) -> str:
    many = spans != 1
    return (
        f"{spans} {'spans' if many else 'span'} older than the store's retention of {days} days (AGENTLAT_TTL_DAYS)"
        f" {'were' if many else 'was'} dropped: {'their' if many else 'its'} end time is before {iso(expiry_ns)}"
    )


def _append_span(
    cols: _Columns, span: Any, context: tuple[str, str, str, str], resource: _Map, received_ns: int, limits: Limits
) -> None:
    """One valid span into the columns. ``context`` is (service, scope name, scope version, project)."""
    service, scope_name, scope_version, project = context
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    flags = _time_flags(start, end, received_ns, limits)
    typed = _attributes(span.attributes, limits, flags, cols.attributes)
    events = _events(span.events, limits, flags) if span.events else _NO_SPAN_EVENTS
    name, kind, status = span.name, _enum_name(SPAN_KINDS, span.kind), span.status
    derived, derive_flags = derive(name, kind, start, max(end, start), typed, events[0])
    flags.extend(derive_flags)
    cols.resource.keys.extend(resource.keys)
    cols.resource.values.extend(resource.values)
    cols.resource.close_row()
    cols.scalars.append(
        (start, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), span.trace_state, name, kind,
         service, scope_name, scope_version, max(end - start, 0), _enum_name(STATUS_CODES, status.code),
         status.message, project)
    )  # fmt: skip
    cols.derived.append(_derived_values(derived))
    links = span.links
    if events is not _NO_SPAN_EVENTS or links or flags:
        cols.nested.append(_nested(events, links, limits, flags))
    else:
        cols.nested.append(_NO_NESTED)


def _events(events: Any, limits: Limits, flags: list[str]) -> _SpanEvents:
    if len(events) > limits.max_events:
        flags.append("events_dropped")
    names, times, texts = [], [], []
    for event in events[: limits.max_events]:
        if event.attributes:
            text = _Map()
            _attributes(event.attributes, limits, flags, text)
            texts.append(list(zip(text.keys, text.values, strict=True)))
        else:
            texts.append([])
        time_ns = event.time_unix_nano
        if time_ns > MAX_TIME_NS:
            flags.append("bad_event_time")
            time_ns = 0
        names.append(event.name)
        times.append(time_ns)
    return EventTimes(names, times), texts


def _nested(events: _SpanEvents, links: Any, limits: Limits, flags: list[str]) -> tuple[list[Any], ...]:
    """The Events, Links and IngestFlags columns of one span, in ``_NESTED_COLUMNS`` order."""
    link_attributes = []
    for link in links:
        text = _Map()
        _attributes(link.attributes, limits, flags, text)
        link_attributes.append(list(zip(text.keys, text.values, strict=True)))
    (names, times), texts = events
    return (
        times,
        names,
        texts,
        [link.trace_id.hex() for link in links],
        [link.span_id.hex() for link in links],
        [link.trace_state for link in links],
        link_attributes,
        flags,
    )
