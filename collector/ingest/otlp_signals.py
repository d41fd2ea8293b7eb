"""OTLP logs and metrics (protobuf or JSON) to Arrow batches: keep what serves latency, count the rest.

- Logs: a log record is kept when it is a GenAI event, i.e. its name (the LogRecord's
  ``event_name``, else its ``event.name`` attribute) starts with ``gen_ai.``; it becomes a row
  of ``agentlat_events``. Every other record is accepted and dropped, counted under
  ``not_genai``: an exporter sending all of an application's logs gets success, not an error.
- Metrics: every data point of a metric named ``gen_ai.*`` of type Histogram, Sum, Gauge or
  ExponentialHistogram (stored as explicit buckets) becomes a row of ``agentlat_metric_points``.
  Other metrics' points are dropped (``not_genai``), as are gen_ai.* Summary points
  (``unsupported_type``). Exemplars are not kept.

Records that cannot be stored as they are (an id of the wrong length, a time past 2262, a
histogram whose bucket counts do not fit its bounds) are rejected one by one and reported in
partial_success, as invalid spans are. Each row carries a hash of the whole record, its scope
and resource (``RecordId``, ``PointId``), so a delivery repeated by a retry or a log replay
replaces the first copy.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from agentlat.collector.ingest.otlp import (
    MAX_REPORTED_ERRORS,
    MAX_TIME_NS,
    DecodedBatch,
    Limits,
    TooManySpans,
    _attributes,
    _list,
    _Map,
    any_value,
    decode_json,
    decode_protobuf,
)
from agentlat.shared.columns import EVENT_ARROW_SCHEMA, METRIC_POINT_ARROW_SCHEMA

GENAI_PREFIX = "gen_ai."
NOT_GENAI = "not_genai"
UNSUPPORTED_TYPE = "unsupported_type"
POINT_TYPES = {
    "histogram": "Histogram",
    "exponential_histogram": "ExponentialHistogram",
    "sum": "Sum",
    "gauge": "Gauge",
}


# --- parsing ---------------------------------------------------------------------------
def _dicts(container: Any, *keys: str) -> Iterator[dict[str, Any]]:
    return (item for item in _list(container, *keys) if isinstance(item, dict))


def _log_records(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for resource_logs in _dicts(document, "resourceLogs", "resource_logs"):
        for scope_logs in _dicts(resource_logs, "scopeLogs", "scope_logs"):
            yield from _dicts(scope_logs, "logRecords", "log_records")


def _exemplars(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for resource_metrics in _dicts(document, "resourceMetrics", "resource_metrics"):
        for scope_metrics in _dicts(resource_metrics, "scopeMetrics", "scope_metrics"):
            for metric in _dicts(scope_metrics, "metrics"):
                for kind in ("gauge", "sum", "histogram", "exponentialHistogram", "exponential_histogram"):
                    for point in _dicts(metric.get(kind), "dataPoints", "data_points"):
                        yield from _dicts(point, "exemplars")


def parse_logs_protobuf(body: bytes) -> ExportLogsServiceRequest:
    return decode_protobuf(body, ExportLogsServiceRequest())  # type: ignore[return-value]


def parse_logs_json(body: bytes) -> ExportLogsServiceRequest:
    return decode_json(body, ExportLogsServiceRequest(), "resourceLogs", "logs", _log_records)  # type: ignore[return-value]


def parse_metrics_protobuf(body: bytes) -> ExportMetricsServiceRequest:
    return decode_protobuf(body, ExportMetricsServiceRequest())  # type: ignore[return-value]


def parse_metrics_json(body: bytes) -> ExportMetricsServiceRequest:
    return decode_json(body, ExportMetricsServiceRequest(), "resourceMetrics", "metrics", _exemplars)  # type: ignore[return-value]


def count_log_records(request: ExportLogsServiceRequest) -> int:
    return sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)


def count_data_points(request: ExportMetricsServiceRequest) -> int:
    total = 0
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                total += len(getattr(metric, kind).data_points) if kind else 0
    return total


# --- building batches ------------------------------------------------------------------
class _Rows:
    """A batch being built: one tuple per row for the plain columns, the maps as flat lists."""

    def __init__(self, schema: pa.Schema, maps: tuple[str, ...]) -> None:
        self.schema = schema
        self.maps = {name: _Map() for name in maps}
        self.names = [name for name in schema.names if name not in self.maps]
        self.rows: list[tuple[Any, ...]] = []
        self.rejected = 0
        self.errors: list[str] = []
        self.dropped: Counter[str] = Counter()

    def reject(self, what: str, problem: str) -> None:
        self.rejected += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(f"{what}: {problem}")

    def add_resource(self, resource: _Map) -> None:
        out = self.maps["ResourceAttributes"]
        out.keys.extend(resource.keys)
        out.values.extend(resource.values)
        out.close_row()

    def decoded(self, signal: str) -> DecodedBatch:
        columns = {name: values.array() for name, values in self.maps.items()}
        values = zip(*self.rows, strict=True) if self.rows else ([] for _ in self.names)
        for name, column in zip(self.names, values, strict=True):
            columns[name] = pa.array(column, self.schema.field(name).type)
        batch = pa.Table.from_arrays([columns[name] for name in self.schema.names], schema=self.schema)
        return DecodedBatch(
            batch, accepted=batch.num_rows, rejected=self.rejected, errors=self.errors, signal=signal,
            dropped=dict(self.dropped),
        )  # fmt: skip


def _resource(resource: Any, limits: Limits) -> tuple[_Map, str, bytes]:
    """A resource's attributes as text, its service name, and a digest of it for the rows' ids."""
    attributes = _Map()
    typed = _attributes(resource.attributes, limits, [], attributes)
    service = str(typed.get("service.name") or "unknown_service")
    digest = hashlib.blake2b(resource.SerializeToString(deterministic=True), digest_size=16).digest()
    return attributes, service, digest


def _row_id(*parts: bytes) -> str:
    return hashlib.blake2b(b"\0".join(parts), digest_size=16).hexdigest()


def _time_flags(time_ns: int, received_ns: int, limits: Limits) -> list[str]:
    if time_ns > received_ns + limits.future_skew_ns:
        return ["clock_skew_future"]
    if time_ns < received_ns - limits.past_skew_ns:
        return ["clock_skew_past"]
    return []


def _optional_id(value: bytes, size: int, name: str) -> tuple[str, str | None]:
    """An optional trace or span id as hex ('' when absent or all zero), or a problem."""
    if not value or not any(value):
        return "", None
    if len(value) != size:
        return "", f"{name} must be empty or {size} bytes ({2 * size} hex characters)"
    return value.hex(), None


# --- logs ------------------------------------------------------------------------------
def event_name(record: Any) -> str:
    """A log record's event name: the LogRecord field, else its ``event.name`` attribute."""
    if record.event_name:
        return record.event_name
    for kv in record.attributes:
        if kv.key == "event.name":
            return kv.value.string_value
    return ""


def _refuse_over(count: int, limits: Limits, what: str, advice: str) -> None:
    """A request with more items than the collector takes at once is refused whole."""
    if count > limits.max_spans:
        raise TooManySpans(f"{count} {what} in one request; the limit is {limits.max_spans}: {advice}")


def logs_to_batch(request: ExportLogsServiceRequest, project: str, received_ns: int, limits: Limits) -> DecodedBatch:
    _refuse_over(count_log_records(request), limits, "log records", "lower OTEL_BLRP_MAX_EXPORT_BATCH_SIZE")
    rows = _Rows(EVENT_ARROW_SCHEMA, ("ResourceAttributes", "LogAttributes"))
    for resource_logs in request.resource_logs:
        resource, service, resource_digest = _resource(resource_logs.resource, limits)
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope
            scope_bytes = scope.SerializeToString(deterministic=True)
            for record in scope_logs.log_records:
                name = event_name(record)
                if not name.startswith(GENAI_PREFIX):
                    rows.dropped[NOT_GENAI] += 1
                    continue
                _append_event(rows, record, name, (service, scope.name, scope.version, project), resource,
                              (resource_digest, scope_bytes), received_ns, limits)  # fmt: skip
    return rows.decoded("logs")


def _append_event(
    rows: _Rows, record: Any, name: str, context: tuple[str, str, str, str], resource: _Map,
    digests: tuple[bytes, bytes], received_ns: int, limits: Limits,
) -> None:  # fmt: skip
    """One GenAI event into the rows, or rejected. ``context`` is (service, scope name, scope version, project)."""
    service, scope_name, scope_version, project = context
    trace_id, problem = _optional_id(record.trace_id, 16, "trace_id")
    span_id, span_problem = _optional_id(record.span_id, 8, "span_id")
    problem = problem or span_problem
    if not problem and max(record.time_unix_nano, record.observed_time_unix_nano) > MAX_TIME_NS:
        problem = "time is past the year 2262 (more than 2**63-1 ns)"
    if problem:
        rows.reject(f"log record {name!r}", problem)
        return
    flags: list[str] = []
    time_ns = record.time_unix_nano or record.observed_time_unix_nano
    if not time_ns:
        time_ns = received_ns
        flags.append("missing_timestamp")
    else:
        flags.extend(_time_flags(time_ns, received_ns, limits))
    body = ""
    if record.HasField("body"):
        body = json.dumps(any_value(record.body), ensure_ascii=False, separators=(",", ":"), default=str)
        if len(body) > limits.max_body_chars:
            body = body[: limits.max_body_chars]
            flags.append("truncated:body")
    _attributes(record.attributes, limits, flags, rows.maps["LogAttributes"])
    rows.add_resource(resource)
    severity = record.severity_number if 0 <= record.severity_number <= 255 else 0
    record_id = _row_id(*digests, record.SerializeToString(deterministic=True))
    rows.rows.append(
        (time_ns, record.observed_time_unix_nano or time_ns, trace_id, span_id, record.flags & 0xFF,
         record.severity_text, severity, service, body, scope_name, scope_version, name, project, record_id, flags)
    )  # fmt: skip


# --- metrics ---------------------------------------------------------------------------
class _BadPoint(ValueError):
    pass


def exponential_buckets(point: Any) -> tuple[list[float], list[int]]:
    """An exponential histogram point's buckets as explicit bounds and counts.

    Positive bucket ``offset + k`` holds values in (base**(offset+k), base**(offset+k+1)] with
    base = 2**(2**-scale), so the bounds are those powers of ``base``; the first bucket (up to
    the lowest bound) holds the zero bucket and every negative value, the last (past the highest
    bound) nothing. For positive values, which latencies and token counts are, nothing is lost.
    """
    counts = list(point.positive.bucket_counts)
    if not counts:
        return [], ([point.count] if point.count else [])
    step = 2.0**-point.scale
    try:
        bounds = [2.0 ** ((point.positive.offset + k) * step) for k in range(len(counts) + 1)]
    except OverflowError:
        raise _BadPoint("exponential histogram bucket bounds are beyond the range of a double") from None
    below = point.zero_count + sum(point.negative.bucket_counts)
    return bounds, [below, *counts, 0]


def _point_values(kind: str, point: Any) -> tuple[Any, ...]:
    """(Count, Sum, Min, Max, Value, ExplicitBounds, BucketCounts) of a data point."""
    if kind in ("sum", "gauge"):
        which = point.WhichOneof("value")
        value = float(getattr(point, which)) if which else None
        return 0, None, None, None, value, [], []
    optional = [getattr(point, f) if point.HasField(f) else None for f in ("sum", "min", "max")]
    if kind == "histogram":
        bounds, buckets = list(point.explicit_bounds), list(point.bucket_counts)
        if buckets and len(buckets) != len(bounds) + 1:
            raise _BadPoint(
                f"{len(buckets)} bucket_counts for {len(bounds)} explicit_bounds; there must be one more count"
            )
    else:
        bounds, buckets = exponential_buckets(point)
    return (point.count, *optional, None, bounds, buckets)


def metrics_to_batch(
    request: ExportMetricsServiceRequest, project: str, received_ns: int, limits: Limits
) -> DecodedBatch:
    _refuse_over(count_data_points(request), limits, "data points", "export more often or with fewer attributes")
    rows = _Rows(METRIC_POINT_ARROW_SCHEMA, ("ResourceAttributes", "Attributes"))
    for resource_metrics in request.resource_metrics:
        resource, service, resource_digest = _resource(resource_metrics.resource, limits)
        for scope_metrics in resource_metrics.scope_metrics:
            scope = scope_metrics.scope
            scope_bytes = scope.SerializeToString(deterministic=True)
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind is None:
                    continue
                data = getattr(metric, kind)
                reason = NOT_GENAI if not metric.name.startswith(GENAI_PREFIX) else None
                reason = reason or (UNSUPPORTED_TYPE if kind not in POINT_TYPES else None)
                if reason:
                    rows.dropped[reason] += len(data.data_points)
                    continue
                temporality = data.aggregation_temporality if kind != "gauge" else 0
                monotonic = int(data.is_monotonic) if kind == "sum" else 0
                head = (metric.name, metric.description, metric.unit, POINT_TYPES[kind], temporality, monotonic,
                        service, scope.name, scope.version)  # fmt: skip
                digest = _row_id(resource_digest, scope_bytes, metric.name.encode(), metric.unit.encode(),
                                 kind.encode(), str(temporality).encode()).encode()  # fmt: skip
                for point in data.data_points:
                    _append_point(rows, kind, point, head, (resource, digest, project), received_ns, limits)
    return rows.decoded("metrics")


def _append_point(
    rows: _Rows, kind: str, point: Any, head: tuple[Any, ...], where: tuple[_Map, bytes, str], received_ns: int,
    limits: Limits,
) -> None:  # fmt: skip
    """One data point into the rows, or rejected. ``head`` holds the metric's columns, ``where``
    the resource's attributes, a digest of metric, scope and resource, and the project."""
    resource, digest, project = where
    name = head[0]
    try:
        if max(point.time_unix_nano, point.start_time_unix_nano) > MAX_TIME_NS:
            raise _BadPoint("time is past the year 2262 (more than 2**63-1 ns)")
        values = _point_values(kind, point)
    except _BadPoint as exc:
        rows.reject(f"data point of {name!r}", str(exc))
        return
    flags: list[str] = []
    time_ns = point.time_unix_nano
    if not time_ns:
        time_ns = received_ns
        flags.append("missing_timestamp")
    else:
        flags.extend(_time_flags(time_ns, received_ns, limits))
    _attributes(point.attributes, limits, flags, rows.maps["Attributes"])
    rows.add_resource(resource)
    point_id = _row_id(digest, point.SerializeToString(deterministic=True))
    rows.rows.append((time_ns, point.start_time_unix_nano, *head, *values, project, point_id, flags))
