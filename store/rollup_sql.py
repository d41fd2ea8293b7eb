"""What the rollup tables hold, and the SQL that fills them: shared by the migrations' backfills and by
the collector's recomputation of the minutes that received data (store/analysis.py).

Each rollup row is one metric of one group (project, service, route, agent, model, tool, release and prompt
version) in one minute,
hour or (UTC) day: a count, a sum, and either the values themselves (``Exact``, sorted, when there are at
most ``EXACT_MAX``) or a t-digest of them (``Digest``, else). Hours merge minutes, days merge hours.

One percentile rule everywhere: linear interpolation between closest ranks (``quantilesExactInclusive``,
numpy's default), as the raw-span queries compute it. A group read from rollups (merged over minutes,
hours, days and groups) whose count is at most ``EXACT_MAX`` has every value at hand and gets exactly
that; a larger one gets the t-digest estimate (``MERGED_QUANTILES``).
"""

from __future__ import annotations

from agentlat import semconv as sc
from agentlat.store import cache_misses

ROLLUP_LEVELS = "0.5, 0.95, 0.99"

# A group of at most this many values keeps them, sorted, and no digest (a digest of them would take as
# much); percentiles of a group of at most this many, merged at any level, are exact. bench/rollup_storage.py
# measures the cost.
EXACT_MAX = 128
NO_DIGEST = f"arrayReduce('quantilesTDigestState({ROLLUP_LEVELS})', emptyArrayFloat64())"
NO_VALUES = "CAST([], 'Array(Float64)')"
# Over the rollup rows of a group (aggregates): whether they hold all its values (each row does) ...
ALL_EXACT = f"(sum(Count) <= {EXACT_MAX} AND sum(length(Exact)) = sum(Count))"
# ... those values, sorted (when ALL_EXACT) ...
ALL_VALUES = f"arraySort(groupArrayArray({EXACT_MAX})(Exact))"
# ... and a t-digest (state) of the group: the rows' digests merged with one of the values kept exactly.
MERGED_DIGEST = (
    f"arrayReduce('quantilesTDigestMergeState({ROLLUP_LEVELS})',"
    f" [quantilesTDigestMergeState({ROLLUP_LEVELS})(Digest), quantilesTDigestArrayState({ROLLUP_LEVELS})(Exact)])"
)
# p50/p95/p99 of a group of rollup rows (an aggregate): exact when ALL_EXACT, else by t-digest.
MERGED_QUANTILES = (
    f"if({ALL_EXACT}, arrayReduce('quantilesExactInclusive({ROLLUP_LEVELS})', {ALL_VALUES}),"
    f" finalizeAggregation({MERGED_DIGEST}))"
)

# How spans and rollup rows are read with FINAL. A row's duplicates (a span delivered twice, a
# recomputed rollup row) share its partition (the day of its timestamp, its minute or hour) and
# every column a query filters on, so each partition is deduplicated on its own, and only after
# the filters. Not for agentlat_traces, whose month partition and columns follow a start that a
# late root can move.
FINAL_SETTINGS = "SETTINGS do_not_merge_across_partitions_select_final = 1, optimize_move_to_prewhere_if_final = 1"
# How a window of agentlat_traces is read with FINAL: the window filters rows first, then each trace's
# newest analysis among them is kept, and only granules whose starts meet the window are read (the
# exact mode's default would read every granule sharing a key range with them: all of them, since
# trace ids are random; 6x the time of a day's traces at 10M spans). Approximate for re-analysed
# traces only: one whose start moved out of the window, or whose filtered column (its route, say)
# changed, leaves its older row counted where it was until a merge drops it.
TRACE_WINDOW_SETTINGS = "SETTINGS optimize_move_to_prewhere_if_final = 1, use_skip_indexes_if_final_exact_mode = 0"

# A span that its trace's analysis found to be a counted call seen again (an inner view of one model request, an
# MCP server's span of the client's tool call): per-span figures leave it out, so each call counts once.
# Co-sharded with the spans by trace id in cluster mode, so the set is each shard's own.
SEEN_AGAIN = (
    "(ProjectId, TraceId, SpanId) IN (SELECT ProjectId, TraceId, arrayJoin(SeenAgainSpanIds)"
    " FROM agentlat_traces WHERE notEmpty(SeenAgainSpanIds))"
)
CLIENT_MODEL = f"Role = 'model' AND IsServerSpan = 0 AND NOT {SEEN_AGAIN}"
TOOL_CALL = f"Role = 'tool' AND NOT {SEEN_AGAIN}"
_SERVER_MODEL = "Role = 'model' AND IsServerSpan = 1"
LONG_OUTPUT_TOKENS = 400  # an output long enough for speculative decoding to pay off
LONG_PLAIN = f"OutputTokens >= {LONG_OUTPUT_TOKENS} AND SpecProposedTokens IS NULL"
PREFIX_HASH = "SpanAttributes['agentlat.prompt.prefix_hash']"
# A span's release (its service's version, as deployed) and prompt version (the SDK's, else its stable prefix's
# hash): rollup dimensions (Release, PromptVersion) read from the span's attributes. A trace's release is its
# root's (agentlat_traces.Release, from the analysis); a trace has no one prompt version, so its rows have none.
SPAN_RELEASE = "ResourceAttributes['service.version']"
SPAN_PROMPT_VERSION = f"SpanAttributes['{sc.PROMPT_VERSION}']"
GROUP_COLUMNS = "ServiceName, Route, Agent, Model, Tool, Release, PromptVersion"  # a rollup row's group
# The columns a rollup INSERT fills, named: a column a later migration adds elsewhere leaves it valid.
_ROW_COLUMNS = f"(ProjectId, Metric, {{time}}, {GROUP_COLUMNS}, Count, Sum, Digest, Exact, Version)"

# Latencies (ms) of spans, and of analysed traces from agentlat_traces.
SPAN_ROLLUP_METRICS = {
    "ttft": f"if({CLIENT_MODEL}, TtftMs, NULL)",
    "itl": f"if({CLIENT_MODEL}, ItlMeanMs, NULL)",
    "decode": f"if({CLIENT_MODEL}, DecodeMs, NULL)",
    "model": f"if({CLIENT_MODEL}, Duration / 1e6, NULL)",
    "tool": f"if({TOOL_CALL}, Duration / 1e6, NULL)",
    "agent": "if(Role = 'agent', Duration / 1e6, NULL)",
}
# A trace whose model calls are in other traces (SplitComplete = 0) counts in E2E and not in the split.
TRACE_ROLLUP_METRICS = {
    "e2e": "E2eMs",
    "split_model": "if(SplitComplete = 1, ModelMs, NULL)",
    "split_tool": "if(SplitComplete = 1, ToolMs, NULL)",
    "split_orchestration": "if(SplitComplete = 1, OrchestrationMs, NULL)",
}
ROLLUP_METRICS = (*SPAN_ROLLUP_METRICS, *TRACE_ROLLUP_METRICS)


def _tokens(value: str, base: str, calls: str) -> str:
    """``value`` of the calls that report both it and a positive ``base`` (a token ratio's terms)."""
    return f"if({calls} AND isNotNull({value}) AND {base} > 0, {value}, NULL)"


# Counters beside the latencies, so per-dimension summaries read rollups too: Count holds the root
# spans and the errors of each kind of unit, Sum the token totals behind the cache-hit and
# speculative-acceptance ratios. Their digests stay empty.
COUNTER_METRICS = {
    "n_root": "if(ParentSpanId = '', 0, NULL)",
    "n_error_root": "if(ParentSpanId = '' AND StatusCode = 'Error', 0, NULL)",
    "n_error_agent": "if(Role = 'agent' AND StatusCode = 'Error', 0, NULL)",
    "n_error_model": f"if({CLIENT_MODEL} AND StatusCode = 'Error', 0, NULL)",
    "n_error_tool": f"if({TOOL_CALL} AND StatusCode = 'Error', 0, NULL)",
    **{
        f"tokens_{name}{suffix}": _tokens(value, base, calls)
        for suffix, calls in (("", CLIENT_MODEL), ("_server", _SERVER_MODEL))
        for name, value, base in (
            ("cache_read", "CacheReadTokens", "InputTokens"),
            ("cache_input", "InputTokens", "CacheReadTokens IS NOT NULL AND InputTokens"),
            ("spec_accepted", "SpecAcceptedTokens", "SpecProposedTokens"),
            ("spec_proposed", "SpecProposedTokens", "SpecAcceptedTokens IS NOT NULL AND SpecProposedTokens"),
        )
    },
}

# What the advisor reads (store/advice.py), so a long window's advice costs minutes, not spans: counts
# and sums over client model calls and over analysed traces. Only the input tokens keep a digest
# (for their median); the others' digests stay empty, like the counters'.
_STALLED = f"{CLIENT_MODEL} AND StallCount > 0"
ADVICE_SPAN_METRICS = {
    "advice_input_tokens": f"if({CLIENT_MODEL}, InputTokens, NULL)",
    "advice_cache_reported": f"if({CLIENT_MODEL} AND CacheReadTokens IS NOT NULL, 0, NULL)",
    "advice_uncached": f"if({CLIENT_MODEL} AND CacheReadTokens = 0, 0, NULL)",
    "advice_ttft_cached": f"if({CLIENT_MODEL} AND CacheReadTokens > 0, TtftMs, NULL)",
    "advice_ttft_uncached": f"if({CLIENT_MODEL} AND CacheReadTokens = 0, TtftMs, NULL)",
    "advice_long_plain_tokens": f"if({CLIENT_MODEL} AND {LONG_PLAIN}, OutputTokens, NULL)",
    "advice_long_plain_decode": f"if({CLIENT_MODEL} AND {LONG_PLAIN}, DecodeMs, NULL)",
    "advice_stalled": f"if({_STALLED}, 0, NULL)",
    "advice_stall_excess": f"if({_STALLED}, ItlMaxMs - ItlP50Ms, NULL)",
}
ADVICE_TRACE_METRICS = {
    "advice_model_calls": "ModelCalls",
    "advice_parallel_saving": "ParallelSavingMs",
    "advice_parallel_traces": "if(ParallelSavingMs > 0, 0, NULL)",
    "advice_prefetch_hits": "PrefetchHits",
    "advice_prefetch_misses": "PrefetchMisses",
    "advice_prefetch_saved": "PrefetchSavedMs",
    "advice_prefetch_wasted": "PrefetchWastedMs",
    "advice_dispatch_saving": "DispatchSavingMs",
    "advice_dispatch_traces": "if(DispatchSavingMs > 0, 0, NULL)",
    "advice_dispatch_streamed": "DispatchStreamedCalls",
}
# The prompt cache's input tokens and cost of hits and misses; its misses by reason and part, and the offsets of
# changed parts, are pairs whose names the spans' reasons give (MISS_PAIRS, MISS_METRICS).
CACHE_METRICS = cache_misses.cache_metrics(CLIENT_MODEL)
MISS_PAIRS = cache_misses.miss_pairs(CLIENT_MODEL)

# Per analysed trace, an array column: one value per element (each linked tool call's dispatch delay), with
# the values or a digest kept for their median.
ADVICE_CALL_METRICS = {"advice_dispatch_delay": "DispatchDelaysMs"}
_UNDIGESTED = (
    *COUNTER_METRICS,
    *(m for m in ADVICE_SPAN_METRICS if m != "advice_input_tokens"),
    *ADVICE_TRACE_METRICS,
    *CACHE_METRICS,
    *(m for m in cache_misses.MISS_METRICS if m not in cache_misses.DIGESTED),
)


def metric_pairs(metrics: dict[str, str]) -> str:
    return ", ".join(f"('{name}', toNullable(toFloat64({expr})))" for name, expr in metrics.items())


def minutes_from_raw(spans_where: str, traces_where: str, minutes_where: str, version: str) -> str:
    """INSERT of the minute rollups of the spans and analysed traces matching the first two conditions:
    the values of a group of at most EXACT_MAX, else their t-digest (counters keep neither, only a
    digest of zeros, as ever).

    Every group the minutes (``minutes_where``, a test of Minute) already hold gets a row too: one
    with a count of 0 when it has no data any more (a re-analysis moved a trace to another minute or
    route), which replaces its stale row. Readers leave out groups whose count is 0."""
    span_metrics = metric_pairs({**SPAN_ROLLUP_METRICS, **COUNTER_METRICS, **ADVICE_SPAN_METRICS, **CACHE_METRICS})
    span_metrics += f", {MISS_PAIRS}"
    trace_metrics = metric_pairs({**TRACE_ROLLUP_METRICS, **ADVICE_TRACE_METRICS})
    call_metrics = "".join(
        f", arrayMap(v -> ('{name}', toNullable(toFloat64(v))), {column})"
        for name, column in ADVICE_CALL_METRICS.items()
    )
    undigested = ", ".join(f"'{name}'" for name in _UNDIGESTED)
    exact = f"(count(value) <= {EXACT_MAX} AND metric NOT IN ({undigested}))"
    traces = latest_traces(
        traces_where,
        f"ProjectId, Start, ServiceName, Route, Agent, Release,"
        f" arrayConcat([{trace_metrics}]{call_metrics}) AS metrics",
    )
    return f"""
INSERT INTO agentlat_rollup_1m {_ROW_COLUMNS.format(time="Minute")}
SELECT ProjectId, metric, minute, {GROUP_COLUMNS}, count(value), coalesce(sum(value), 0),
       if({exact}, {NO_DIGEST},
          quantilesTDigestStateIf({ROLLUP_LEVELS})(if(metric IN ({undigested}), 0, assumeNotNull(value)),
                                                    isNotNull(value))),
       if({exact}, arraySort(groupArrayIf({EXACT_MAX})(assumeNotNull(value), isNotNull(value))), {NO_VALUES}),
       {version}
FROM (
    SELECT ProjectId, m.1 AS metric, toStartOfMinute(Timestamp) AS minute, ServiceName, Route, Agent, Model, Tool,
           {SPAN_RELEASE} AS Release, {SPAN_PROMPT_VERSION} AS PromptVersion, m.2 AS value
    FROM otel_traces FINAL
    ARRAY JOIN arrayFilter(x -> isNotNull(x.2), [{span_metrics}]) AS m
    WHERE {spans_where}
    {FINAL_SETTINGS}
    UNION ALL
    SELECT ProjectId, m.1 AS metric, toStartOfMinute(Start) AS minute,
           ServiceName, Route, Agent, '' AS Model, '' AS Tool, Release, '' AS PromptVersion, m.2 AS value
    FROM {traces}
    ARRAY JOIN arrayFilter(x -> isNotNull(x.2), metrics) AS m
    WHERE {traces_where}
    UNION ALL
    SELECT ProjectId, Metric, Minute, {GROUP_COLUMNS}, CAST(NULL, 'Nullable(Float64)')
    FROM agentlat_rollup_1m
    WHERE {minutes_where}
)
GROUP BY ProjectId, metric, minute, {GROUP_COLUMNS}
"""


def latest_traces(condition: str, columns: str) -> str:
    """A subquery: ``columns`` of the newest analysis of each trace having some row that matches
    ``condition`` (a test of Start, say), found by key. The caller applies ``condition`` again, to the
    newest rows. FINAL cannot filter first (a re-analysis can move a trace's start to another minute or
    month partition), and filtering after FINAL merges every part of the partition."""
    return f"""(
        SELECT {columns} FROM agentlat_traces
        WHERE (ProjectId, TraceId) IN (SELECT ProjectId, TraceId FROM agentlat_traces WHERE {condition})
        ORDER BY AnalysedAt DESC
        LIMIT 1 BY ProjectId, TraceId
    )"""


def hours_from_minutes(where: str) -> str:
    """INSERT of the hourly rollups merged from the minute rows matching ``where``."""
    return _merged("agentlat_rollup_1h", "toStartOfHour(Minute) AS Hour", "agentlat_rollup_1m", where)


def days_from_hours(where: str) -> str:
    """INSERT of the daily (UTC) rollups merged from the hourly rows matching ``where``."""
    return _merged("agentlat_rollup_1d", "toStartOfDay(Hour) AS Day", "agentlat_rollup_1h", where)


def _merged(target: str, period: str, source: str, where: str) -> str:
    """The rows of a coarser period: all the values when they are at most EXACT_MAX, else one t-digest."""
    name = period.rsplit(" ", 1)[1]
    return f"""
INSERT INTO {target} {_ROW_COLUMNS.format(time=name)}
SELECT ProjectId, Metric, {period}, {GROUP_COLUMNS}, sum(Count), sum(Sum),
       if({ALL_EXACT}, {NO_DIGEST}, {MERGED_DIGEST}), if({ALL_EXACT}, {ALL_VALUES}, {NO_VALUES}), max(Version)
FROM {source} FINAL
WHERE {where}
GROUP BY ProjectId, Metric, {name}, {GROUP_COLUMNS}
{FINAL_SETTINGS}
"""


def prefixes_from_raw(spans_where: str, version: str) -> str:
    """INSERT of the per-minute prompt-prefix counts (client model calls and their cache misses per
    route, model and prefix hash) of the spans matching the condition."""
    return f"""
INSERT INTO agentlat_prefix_1m
SELECT ProjectId, toStartOfMinute(Timestamp) AS minute, ServiceName, Route, Model, {PREFIX_HASH} AS prefix,
       count(), countIf(CacheReadTokens = 0), {version}
FROM otel_traces FINAL
WHERE {spans_where} AND {CLIENT_MODEL} AND prefix != ''
GROUP BY ProjectId, minute, ServiceName, Route, Model, prefix
{FINAL_SETTINGS}
"""
