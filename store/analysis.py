"""SQL for the per-trace analysis and the per-minute and hourly rollups built on it and on the spans.

The collector takes a trace's spans from the batches it holds (``analysis_input_of``, when
``stored_spans_sql`` shows the store has no others) or reads them back (``analysis_input_sql``),
analyses them in Python, writes one row per trace into ``agentlat_traces`` and asks for the
minutes that changed to be rolled up again with ``rollup_sql``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from agentlat import semconv as sc
from agentlat.store.backends import Params
from agentlat.store.queries import DAY_S, FINAL_SETTINGS, HOUR_S
from agentlat.store.rollup_sql import days_from_hours, hours_from_minutes, minutes_from_raw, prefixes_from_raw
from agentlat.store.schema import derived_sql

# The analysis's input, one row a span, in two forms from one spec: SQL over the stored spans
# (``analysis_input_sql``: traces read back) and Arrow over a batch the writer has just stored
# (``analysis_input_of``: traces analysed from memory). Stored columns under the names of the
# collector's SpanRecord fields, start and end in unix ns, a few span attributes and its release
# (service.version) as text ('' when absent), and the attributes of the span's agentlat.tool_call events.
# The collector reads both forms alike: which role each value counts for, ids, times
# (collector/analysis/assembler.py).
INPUT_COLUMNS = {
    "trace_id": "TraceId", "span_id": "SpanId", "parent_span_id": "ParentSpanId", "name": "SpanName",
    "service": "ServiceName", "role": "Role", "is_server_span": "IsServerSpan", "status": "StatusCode",
    "route": "Route", "agent": "Agent", "model": "Model", "tool": "Tool", "tool_call_id": "ToolCallId",
    "answer_tool_calls": "AnswerToolCallIds",
    "ttft_ms": "TtftMs", "queue_ms": "QueueMs", "prefill_ms": "PrefillMs", "decode_ms": "DecodeMs",
    "input_tokens": "InputTokens", "output_tokens": "OutputTokens", "cache_read_tokens": "CacheReadTokens",
    "cache_creation_tokens": "CacheCreationTokens", "spec_proposed_tokens": "SpecProposedTokens",
    "spec_accepted_tokens": "SpecAcceptedTokens", "prefetch_outcome": "PrefetchOutcome",
    "prefetch_saved_ms": "PrefetchSavedMs", "prefetch_wasted_ms": "PrefetchWastedMs",
}  # fmt: skip
INPUT_ATTRIBUTES = {
    "depends_on": sc.TOOL_DEPENDS_ON,
    "phase": sc.PHASE,
    "response_id": "gen_ai.response.id",
    "args_ready": sc.TOOL_ARGS_READY_TIME,
}
INPUT_RESOURCE_ATTRIBUTES = {"release": "service.version"}
# A model span's streamed tool calls come from its stored events, not from a derived column: no ingest
# work, no second copy on disk (docs/trace-analysis.md).
_TOOL_CALLS = f"arrayFilter((a, n) -> n = '{sc.TOOL_CALL_EVENT}', Events.Attributes, Events.Name) AS tool_calls"
ANALYSIS_INPUT_COLUMNS = ", ".join(
    [
        *(f"{derived_sql(column)} AS {name}" for name, column in INPUT_COLUMNS.items()),
        "toUnixTimestamp64Nano(Timestamp) AS start_ns",
        "toUnixTimestamp64Nano(Timestamp) + toInt64(Duration) AS end_ns",
        *(f"SpanAttributes['{key}'] AS {name}" for name, key in INPUT_ATTRIBUTES.items()),
        *(f"ResourceAttributes['{key}'] AS {name}" for name, key in INPUT_RESOURCE_ATTRIBUTES.items()),
        _TOOL_CALLS,
    ]
)


def analysis_input_sql(project: str, trace_ids: Sequence[str]) -> tuple[str, Params]:
    sql = f"""
        SELECT {ANALYSIS_INPUT_COLUMNS}
        FROM otel_traces FINAL
        WHERE ProjectId = {{project:String}} AND TraceId IN {{ids:Array(String)}}
        {FINAL_SETTINGS}
    """
    return sql, {"project": project, "ids": list(trace_ids)}


def stored_spans_sql(project: str, trace_ids: Sequence[str]) -> tuple[str, Params]:
    """Span rows stored per trace (every copy counted), from the trace time index: a lookup by key."""
    sql = """
        SELECT TraceId AS trace_id, sum(Spans) AS spans
        FROM otel_traces_trace_id_ts
        WHERE ProjectId = {project:String} AND TraceId IN {ids:Array(String)}
        GROUP BY TraceId
    """
    return sql, {"project": project, "ids": list(trace_ids)}


def analysis_input_of(batch: pa.Table) -> pa.Table:
    """``analysis_input_sql``'s columns, computed from a batch of spans as ingest writes them."""
    start = batch.column("Timestamp").cast(pa.int64())
    columns = {name: batch.column(column) for name, column in INPUT_COLUMNS.items()}
    columns["start_ns"] = start
    columns["end_ns"] = pc.add(start, batch.column("Duration").cast(pa.int64()))
    for source, keys in (("SpanAttributes", INPUT_ATTRIBUTES), ("ResourceAttributes", INPUT_RESOURCE_ATTRIBUTES)):
        attributes = batch.column(source)
        for name, key in keys.items():
            columns[name] = pc.fill_null(pc.map_lookup(attributes, key, "first"), "")  # as map[key]: the first
    columns["tool_calls"] = _tool_call_events(batch.column("Events.Name"), batch.column("Events.Attributes"))
    return pa.table(columns)


def _tool_call_events(names: pa.ChunkedArray, attributes: pa.ChunkedArray) -> pa.Array:
    """Per span, the attributes of its events named agentlat.tool_call (a list of maps)."""
    names, attributes = names.combine_chunks(), attributes.combine_chunks()
    keep = pc.fill_null(pc.equal(pc.list_flatten(names), sc.TOOL_CALL_EVENT), False)
    # kept[k]: events kept among the first k; a span's events start at its list offset
    kept = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(keep.cast(pa.int64()))])
    offsets = pc.take(kept, pc.subtract(names.offsets, names.offsets[0])).cast(pa.int32())
    return pa.ListArray.from_arrays(offsets, pc.list_flatten(attributes).filter(keep))


def unanalysed_sql(since_seconds: int) -> tuple[str, Params]:
    """Traces that received spans after their last analysis (or never had one): what a
    restart must analyse, since the assembler's schedule lives in memory."""
    sql = """
        SELECT s.ProjectId AS project, s.TraceId AS trace_id
        FROM (
            SELECT ProjectId, TraceId, max(IngestedAt) AS ingested
            FROM otel_traces
            WHERE IngestedAt >= now64(3) - toIntervalSecond({since:UInt32})
            GROUP BY ProjectId, TraceId
        ) AS s
        LEFT JOIN (
            SELECT ProjectId, TraceId, max(AnalysedAt) AS analysed
            FROM agentlat_traces
            GROUP BY ProjectId, TraceId
        ) AS t ON s.ProjectId = t.ProjectId AND s.TraceId = t.TraceId
        WHERE t.analysed IS NULL OR toDateTime64(t.analysed, 3) < s.ingested
    """
    return sql, {"since": since_seconds}


TRACE_ROW_SCHEMA = pa.schema(
    [
        ("ProjectId", pa.string()),
        ("TraceId", pa.string()),
        ("Start", pa.timestamp("ns", tz="UTC")),
        ("ServiceName", pa.string()),
        ("Route", pa.string()),
        ("Agent", pa.string()),
        ("Release", pa.string()),
        ("RootSpanId", pa.string()),
        ("RootName", pa.string()),
        ("Partial", pa.uint8()),
        *(
            (name, pa.float64())
            for name in (
                "E2eMs",
                "ModelMs",
                "ToolMs",
                "OrchestrationMs",
                "QueueMs",
                "PrefillMs",
                "DecodeMs",
                "ModelSumMs",
                "ToolSumMs",
                "Parallelism",
            )
        ),
        *((name, pa.uint32()) for name in ("ModelCalls", "ToolCalls", "Errors", "SpanCount")),
        ("FirstTtftMs", pa.float64()),
        ("CacheHitRatio", pa.float64()),
        ("SpecAcceptance", pa.float64()),
        ("PrefetchHits", pa.uint32()),
        ("PrefetchMisses", pa.uint32()),
        *(
            (name, pa.float64())
            for name in (
                "PrefetchSavedMs",
                "PrefetchWastedMs",
                "ServerMs",
                "ClientWaitMs",
                "ParallelSavingMs",
                "DispatchSavingMs",
            )
        ),
        ("DispatchDelaysMs", pa.list_(pa.float64())),
        ("DispatchStreamedCalls", pa.uint32()),
        ("SplitComplete", pa.uint8()),
        ("SeenAgainSpanIds", pa.list_(pa.string())),
        ("CriticalPath", pa.list_(pa.string())),
        ("Details", pa.string()),
        ("AnalysedAt", pa.timestamp("us", tz="UTC")),
    ]
)


def rollup_sql(minutes: Sequence[int], version: int) -> list[tuple[str, Params]]:
    """Recompute whole minutes (unix seconds of their start) for every project: the metric rollups,
    then the prompt-prefix counts."""

    def where(column: str) -> str:
        return (
            f"{column} >= toDateTime64({{first:UInt32}}, 9) AND {column} < toDateTime64({{last:UInt32}}, 9)"
            f" AND toUnixTimestamp(toStartOfMinute({column})) IN {{minutes:Array(UInt32)}}"
        )

    params = {"minutes": sorted(minutes), "first": min(minutes), "last": max(minutes) + 60, "version": version}
    return [
        (minutes_from_raw(where("Timestamp"), where("Start"), where("Minute"), "{version:UInt64}"), params),
        (prefixes_from_raw(where("Timestamp"), "{version:UInt64}"), params),
    ]


def coarser_rollup_sql(minutes: Sequence[int]) -> list[tuple[str, Params]]:
    """Recompute the hours holding these minutes (unix seconds) from their minute rows, then the days
    holding them from their hours."""
    return [
        _merge_sql(minutes, HOUR_S, "Minute", "toStartOfHour", hours_from_minutes),
        _merge_sql(minutes, DAY_S, "Hour", "toStartOfDay", days_from_hours),
    ]


def _merge_sql(
    minutes: Sequence[int], period_s: int, column: str, start_of: str, build: Callable[[str], str]
) -> tuple[str, Params]:
    periods = sorted({minute // period_s * period_s for minute in minutes})
    where = (
        f"{column} >= toDateTime({{first:UInt32}}) AND {column} < toDateTime({{last:UInt32}})"
        f" AND toUnixTimestamp({start_of}({column})) IN {{periods:Array(UInt32)}}"
    )
    return build(where), {"periods": periods, "first": periods[0], "last": periods[-1] + period_s}
