"""Reads of the GenAI events and gen_ai.* metric points kept from OTLP logs and metrics.

Parameterised like every query of the store; FINAL, so a record delivered twice (an exporter's
retry, a replay of the write-ahead log) counts once.
"""

from __future__ import annotations

from agentlat.store.backends import Params
from agentlat.store.rollup_sql import FINAL_SETTINGS

MAX_TRACE_EVENTS = 10_000

EVENT_COLUMNS = (
    "toUnixTimestamp64Nano(Timestamp) AS time_ns, toUnixTimestamp64Nano(ObservedTimestamp) AS observed_time_ns, "
    "EventName AS name, TraceId AS trace_id, SpanId AS span_id, SeverityNumber AS severity_number, "
    "SeverityText AS severity_text, ServiceName AS service, Body AS body, LogAttributes AS attributes, "
    "ScopeName AS scope_name, ScopeVersion AS scope_version, IngestFlags AS ingest_flags"
)


def trace_events_sql(project: str, trace_id: str) -> tuple[str, Params]:
    """The events of one trace in time order (the bloom filter on TraceId finds their granules)."""
    sql = f"""
        SELECT {EVENT_COLUMNS}
        FROM agentlat_events FINAL
        WHERE ProjectId = {{project:String}} AND TraceId = {{trace_id:String}}
        ORDER BY Timestamp, SpanId, RecordId
        LIMIT {MAX_TRACE_EVENTS}
        {FINAL_SETTINGS}
    """
    return sql, {"project": project, "trace_id": trace_id}


def metric_points_sql(
    project: str, start_ns: int, end_ns: int, name: str | None, service: str | None, limit: int
) -> tuple[str, Params]:
    """Metric points of a window (by point time), optionally of one metric and one service."""
    tests = [
        "ProjectId = {project:String}",
        "TimeUnix >= fromUnixTimestamp64Nano({start_ns:Int64})",
        "TimeUnix < fromUnixTimestamp64Nano({end_ns:Int64})",
    ]
    params: Params = {"project": project, "start_ns": start_ns, "end_ns": end_ns, "limit": limit}
    if name:
        tests.append("MetricName = {name:String}")
        params["name"] = name
    if service:
        tests.append("ServiceName = {service:String}")
        params["service"] = service
    sql = f"""
        SELECT toUnixTimestamp64Nano(TimeUnix) AS time_ns, toUnixTimestamp64Nano(StartTimeUnix) AS start_time_ns,
               MetricName AS name, MetricUnit AS unit, MetricType AS type,
               AggregationTemporality AS temporality, IsMonotonic AS monotonic, ServiceName AS service,
               Attributes AS attributes, Count AS count, Sum AS sum, Min AS min, Max AS max, Value AS value,
               ExplicitBounds AS explicit_bounds, BucketCounts AS bucket_counts, IngestFlags AS ingest_flags
        FROM agentlat_metric_points FINAL
        WHERE {" AND ".join(tests)}
        ORDER BY TimeUnix, MetricName, PointId
        LIMIT {{limit:UInt32}}
        {FINAL_SETTINGS}
    """
    return sql, params
