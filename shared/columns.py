"""Column layout of the tables ingest writes (spans, GenAI events, metric points): the names and
Arrow types of the batches the collector's decoder builds and the store inserts.

The spans block keeps the names and types of the OpenTelemetry Collector's ClickHouse exporter
(``otel_traces``), so tools that read that schema read ours. The derived block is what the
collector's normaliser fills from whatever dialect a span was written in.

It lives beside the shared vocabulary, not in ``agentlat.store``, so the OTLP decode worker
processes build batches without importing the store (``collector/ingest/decode.py``); the store
re-exports every name here that other rooms use. Imports pyarrow only.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

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
    # On a model span: the ids of the tool calls its answer asked for, in order, separated by spaces
    Column("AnswerToolCallIds", pa.string()),
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
