"""SQL for the per-trace analysis and the per-minute and hourly rollups built on it and on the spans.

The collector reads a trace's spans with ``analysis_input_sql``, analyses them in Python,
writes one row per trace into ``agentlat_traces`` and asks for the minutes that changed
to be rolled up again with ``rollup_sql``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from agentlat.store.backends import Params
from agentlat.store.queries import DAY_S, FINAL_SETTINGS, HOUR_S
from agentlat.store.rollup_sql import days_from_hours, hours_from_minutes, minutes_from_raw, prefixes_from_raw

# Named as the fields of agentlat.collector.analysis.SpanRecord, plus trace_id. A model span's streamed tool
# calls are read from its stored events (the attributes of each agentlat.tool_call event; the collector turns
# them into StreamedToolCall values), not from a derived column: no ingest work, no second copy on disk, and
# a few tenths of a µs per span read back (docs/trace-analysis.md measures it).
ANALYSIS_INPUT_COLUMNS = """
    TraceId AS trace_id, SpanId AS span_id, ParentSpanId AS parent_span_id, SpanName AS name,
    ServiceName AS service, toUnixTimestamp64Nano(Timestamp) AS start_ns,
    toUnixTimestamp64Nano(Timestamp) + toInt64(Duration) AS end_ns, Role AS role,
    toBool(IsServerSpan) AS is_server_span, toBool(StatusCode = 'Error') AS error,
    Route AS route, Agent AS agent, Model AS model, Tool AS tool, ToolCallId AS tool_call_id,
    SpanAttributes['agentlat.tool.depends_on'] AS depends_on, SpanAttributes['agentlat.phase'] AS phase,
    TtftMs AS ttft_ms, QueueMs AS queue_ms, PrefillMs AS prefill_ms, DecodeMs AS decode_ms,
    InputTokens AS input_tokens, OutputTokens AS output_tokens, CacheReadTokens AS cache_read_tokens,
    CacheCreationTokens AS cache_creation_tokens, SpecProposedTokens AS spec_proposed_tokens,
    SpecAcceptedTokens AS spec_accepted_tokens, PrefetchOutcome AS prefetch_outcome,
    PrefetchSavedMs AS prefetch_saved_ms, PrefetchWastedMs AS prefetch_wasted_ms,
    if(Role = 'model', SpanAttributes['gen_ai.response.id'], '') AS response_id,
    if(Role = 'model', arrayFilter((a, n) -> n = 'agentlat.tool_call', Events.Attributes, Events.Name), [])
        AS tool_calls,
    if(Role = 'tool', toInt64OrNull(SpanAttributes['agentlat.tool.args_ready_time']), NULL) AS args_ready_ns
"""


def analysis_input_sql(project: str, trace_ids: Sequence[str]) -> tuple[str, Params]:
    sql = f"""
        SELECT {ANALYSIS_INPUT_COLUMNS}
        FROM otel_traces FINAL
        WHERE ProjectId = {{project:String}} AND TraceId IN {{ids:Array(String)}}
        {FINAL_SETTINGS}
    """
    return sql, {"project": project, "ids": list(trace_ids)}


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
