"""Column layout of the spans table, shared by the DDL and the Arrow batches written to it.

The first block keeps the names and types of the OpenTelemetry Collector's ClickHouse
exporter (``otel_traces``), so tools that read that schema read ours. The derived block is
what the collector's normaliser fills from whatever dialect a span was written in.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

_MAP = pa.map_(pa.string(), pa.string())
_TS = pa.timestamp("ns", tz="UTC")


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    arrow_type: pa.DataType
    nullable: bool = False


EXPORTER_COLUMNS: tuple[Column, ...] = (
    Column("Timestamp", _TS),
    Column("TraceId", pa.string()),
    Column("SpanId", pa.string()),
    Column("ParentSpanId", pa.string()),
    Column("TraceState", pa.string()),
    Column("SpanName", pa.string()),
    Column("SpanKind", pa.string()),
    Column("ServiceName", pa.string()),
    Column("ResourceAttributes", _MAP),
    Column("ScopeName", pa.string()),
    Column("ScopeVersion", pa.string()),
    Column("SpanAttributes", _MAP),
    Column("Duration", pa.uint64()),
    Column("StatusCode", pa.string()),
    Column("StatusMessage", pa.string()),
    Column("Events.Timestamp", pa.list_(_TS)),
    Column("Events.Name", pa.list_(pa.string())),
    Column("Events.Attributes", pa.list_(_MAP)),
    Column("Links.TraceId", pa.list_(pa.string())),
    Column("Links.SpanId", pa.list_(pa.string())),
    Column("Links.TraceState", pa.list_(pa.string())),
    Column("Links.Attributes", pa.list_(_MAP)),
)

# Derived columns: filled by agentlat.collector.normalise.derive(), keyed by these names.
# Nullable numbers mean "not reported"; 0 is a real measurement.
DERIVED_COLUMNS: tuple[Column, ...] = (
    Column("Role", pa.string()),  # model | tool | agent | other | stream
    Column("Dialect", pa.string()),  # genai | openinference | openllmetry | langfuse | ...
    Column("Operation", pa.string()),
    Column("Provider", pa.string()),
    Column("Model", pa.string()),
    Column("Tool", pa.string()),
    Column("ToolCallId", pa.string()),
    Column("Agent", pa.string()),
    Column("Route", pa.string()),
    Column("ConversationId", pa.string()),
    Column("IsServerSpan", pa.uint8()),
    Column("Streaming", pa.uint8()),
    Column("TtftMs", pa.float64(), nullable=True),
    Column("QueueMs", pa.float64(), nullable=True),
    Column("PrefillMs", pa.float64(), nullable=True),
    Column("DecodeMs", pa.float64(), nullable=True),
    Column("ItlMeanMs", pa.float64(), nullable=True),
    Column("ItlP50Ms", pa.float64(), nullable=True),
    Column("ItlP95Ms", pa.float64(), nullable=True),
    Column("ItlMaxMs", pa.float64(), nullable=True),
    Column("StallCount", pa.uint32(), nullable=True),
    Column("InputTokens", pa.uint64(), nullable=True),
    Column("OutputTokens", pa.uint64(), nullable=True),
    Column("CacheReadTokens", pa.uint64(), nullable=True),
    Column("CacheCreationTokens", pa.uint64(), nullable=True),
    Column("ReasoningTokens", pa.uint64(), nullable=True),
    Column("SpecProposedTokens", pa.uint64(), nullable=True),
    Column("SpecAcceptedTokens", pa.uint64(), nullable=True),
    Column("PrefetchOutcome", pa.string()),  # '' | hit | miss | cancelled
    Column("PrefetchSavedMs", pa.float64(), nullable=True),
    Column("PrefetchWastedMs", pa.float64(), nullable=True),
)

# Written by the ingest path itself, not derived from attributes.
INGEST_COLUMNS: tuple[Column, ...] = (
    Column("ProjectId", pa.string()),
    Column("IngestFlags", pa.list_(pa.string())),
)

SPAN_COLUMNS: tuple[Column, ...] = EXPORTER_COLUMNS + DERIVED_COLUMNS + INGEST_COLUMNS
DERIVED_NAMES: tuple[str, ...] = tuple(c.name for c in DERIVED_COLUMNS)

SPAN_ARROW_SCHEMA = pa.schema(
    [pa.field(c.name, c.arrow_type, nullable=c.nullable or c.name != "Timestamp") for c in SPAN_COLUMNS]
)

# Defaults for derived columns a dialect does not fill.
DERIVED_DEFAULTS: dict[str, object] = {
    c.name: (None if c.nullable else (0 if pa.types.is_integer(c.arrow_type) else "")) for c in DERIVED_COLUMNS
}

_NULLABLE_NAMES = frozenset(c.name for c in SPAN_COLUMNS if c.nullable)


def empty_column(field: pa.Field, rows: int) -> pa.Array:
    """``rows`` empty values of a spans-table column, for bulk writers that fill only some columns:
    empty maps, lists and strings, NULL for numbers that mean "not reported", zero otherwise."""
    kind = field.type
    if pa.types.is_map(kind) or pa.types.is_list(kind):
        offsets = pa.array([0] * (rows + 1), pa.int32())
        if pa.types.is_map(kind):
            return pa.MapArray.from_arrays(offsets, pa.array([], kind.key_type), pa.array([], kind.item_type))
        return pa.ListArray.from_arrays(offsets, pa.array([], kind.value_type))
    if pa.types.is_string(kind):
        return pa.repeat("", rows)
    if field.name in _NULLABLE_NAMES:
        return pa.nulls(rows, kind)
    return pa.repeat(pa.scalar(0, kind), rows)


# Stored latencies are rounded to 1/1024 ms (under a microsecond, far finer than any latency
# anyone acts on). A measured duration in ms has a random 52-bit mantissa; rounded, its low bits
# are zero and compress: 7.5 -> 3.1 bytes a value for TTFT-like values.
LATENCY_STEPS_PER_MS = 1024.0
LATENCY_COLUMNS: tuple[str, ...] = tuple(c.name for c in DERIVED_COLUMNS if c.name.endswith("Ms"))
_FINER_THAN_STEP = 2.0**52 / LATENCY_STEPS_PER_MS  # from here on a float's own spacing is a step or more


def at_stored_resolution(batch: pa.Table) -> pa.Table:
    """``batch`` with its latency columns rounded to the stored resolution."""
    for name in LATENCY_COLUMNS:
        index = batch.schema.get_field_index(name)
        if index < 0:
            continue
        values = batch.column(index)
        rounded = pc.divide(pc.round(pc.multiply(values, LATENCY_STEPS_PER_MS)), LATENCY_STEPS_PER_MS)
        batch = batch.set_column(
            index, batch.schema.field(index), pc.if_else(pc.less(values, _FINER_THAN_STEP), rounded, values)
        )
    return batch


# --- OTLP logs and metrics (issue 16) ------------------------------------------------
# GenAI events (log records named gen_ai.*) and gen_ai.* metric data points get tables of
# their own. A batch says which table it is for in its schema's metadata, so one write-ahead
# log carries all three; a batch without it (every record logged before these tables
# existed) is spans.
TABLE_KEY = b"agentlat.table"
SPANS_TABLE = "otel_traces"
EVENTS_TABLE = "agentlat_events"
METRIC_POINTS_TABLE = "agentlat_metric_points"

# Column names follow the OpenTelemetry Collector's ClickHouse exporter (otel_logs, otel_metrics_*)
# where it has them.
EVENT_COLUMNS: tuple[Column, ...] = (
    Column("Timestamp", _TS),
    Column("ObservedTimestamp", _TS),
    Column("TraceId", pa.string()),
    Column("SpanId", pa.string()),
    Column("TraceFlags", pa.uint8()),
    Column("SeverityText", pa.string()),
    Column("SeverityNumber", pa.uint8()),
    Column("ServiceName", pa.string()),
    Column("Body", pa.string()),  # the log record's body as JSON
    Column("ResourceAttributes", _MAP),
    Column("ScopeName", pa.string()),
    Column("ScopeVersion", pa.string()),
    Column("LogAttributes", _MAP),
    Column("EventName", pa.string()),
    Column("ProjectId", pa.string()),
    Column("RecordId", pa.string()),  # a hash of the record, its scope and resource: a retry replaces it
    Column("IngestFlags", pa.list_(pa.string())),
)

METRIC_POINT_COLUMNS: tuple[Column, ...] = (
    Column("TimeUnix", _TS),
    Column("StartTimeUnix", _TS),
    Column("MetricName", pa.string()),
    Column("MetricDescription", pa.string()),
    Column("MetricUnit", pa.string()),
    Column("MetricType", pa.string()),  # Histogram | ExponentialHistogram | Sum | Gauge
    Column("AggregationTemporality", pa.int32()),  # 0 unspecified, 1 delta, 2 cumulative (OTLP's enum)
    Column("IsMonotonic", pa.uint8()),
    Column("ServiceName", pa.string()),
    Column("ResourceAttributes", _MAP),
    Column("ScopeName", pa.string()),
    Column("ScopeVersion", pa.string()),
    Column("Attributes", _MAP),
    Column("Count", pa.uint64()),
    Column("Sum", pa.float64(), nullable=True),
    Column("Min", pa.float64(), nullable=True),
    Column("Max", pa.float64(), nullable=True),
    Column("Value", pa.float64(), nullable=True),  # a Sum's or Gauge's value
    Column("ExplicitBounds", pa.list_(pa.float64())),
    Column("BucketCounts", pa.list_(pa.uint64())),
    Column("ProjectId", pa.string()),
    Column("PointId", pa.string()),  # a hash of the point, its metric, scope and resource: a retry replaces it
    Column("IngestFlags", pa.list_(pa.string())),
)


def _tagged_schema(columns: tuple[Column, ...], table: str) -> pa.Schema:
    fields = [pa.field(c.name, c.arrow_type, nullable=c.nullable or c.arrow_type != _TS) for c in columns]
    return pa.schema(fields, metadata={TABLE_KEY: table.encode()})


EVENT_ARROW_SCHEMA = _tagged_schema(EVENT_COLUMNS, EVENTS_TABLE)
METRIC_POINT_ARROW_SCHEMA = _tagged_schema(METRIC_POINT_COLUMNS, METRIC_POINTS_TABLE)


def table_of(batch: pa.Table) -> str:
    """The table a batch is written to: named in its schema's metadata, else the spans table."""
    metadata = batch.schema.metadata or {}
    return metadata.get(TABLE_KEY, SPANS_TABLE.encode()).decode()
