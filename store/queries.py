"""Every read query agentlat runs, as parameterised SQL.

User input reaches SQL only as ``{name:Type}`` parameters. The few identifiers that vary
(group-by columns, metric expressions) come from the whitelists below, never from a request.
Raw-span reads use FINAL so spans delivered twice (OTLP retries, log replay) count once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentlat.store.backends import Params
from agentlat.store.rollup_sql import (
    ALL_EXACT,
    ALL_VALUES,
    CLIENT_MODEL,
    FINAL_SETTINGS,
    GROUP_COLUMNS,
    MERGED_DIGEST,
    MERGED_QUANTILES,
    SPAN_PROMPT_VERSION,
    SPAN_RELEASE,
    TOOL_CALL,
    TRACE_WINDOW_SETTINGS,
)
from agentlat.store.schema import derived_sql

# Query-API dimension name -> column.
DIMENSIONS: dict[str, str] = {
    "service": "ServiceName",
    "route": "Route",
    "agent": "Agent",
    "model": "Model",
    "provider": "Provider",
    "tool": "Tool",
    "role": "Role",
    "span_name": "SpanName",
    "release": SPAN_RELEASE,  # the service's version: a release, as deployed
    "prompt": SPAN_PROMPT_VERSION,  # the SDK's prompt version (else its stable prefix's hash)
}
# Where the rollup tables and agentlat_traces keep the dimensions they keep: the spans' columns, and their own
# columns for what the spans hold as attributes.
ROLLUP_COLUMNS: dict[str, str] = {
    **{d: DIMENSIONS[d] for d in ("service", "route", "agent", "model", "tool")},
    "release": "Release",
    "prompt": "PromptVersion",
}
TRACE_COLUMNS: dict[str, str] = {**{d: DIMENSIONS[d] for d in ("service", "route", "agent")}, "release": "Release"}


@dataclass(frozen=True, slots=True)
class Metric:
    expression: str  # value in ms
    condition: str  # which spans carry the metric
    description: str


METRICS: dict[str, Metric] = {
    "e2e": Metric("Duration / 1e6", "ParentSpanId = ''", "root span duration (end-to-end)"),
    "ttft": Metric("TtftMs", CLIENT_MODEL, "time to first token/chunk of a model call"),
    "itl": Metric("ItlMeanMs", CLIENT_MODEL, "mean inter-token latency of a model call"),
    "decode": Metric("DecodeMs", CLIENT_MODEL, "first to last chunk of a model call"),
    "model": Metric("Duration / 1e6", CLIENT_MODEL, "duration of a model call"),
    "tool": Metric("Duration / 1e6", TOOL_CALL, "duration of a tool call"),
    "agent": Metric("Duration / 1e6", "Role = 'agent'", "duration of an agent run"),
    "queue": Metric("QueueMs", "Role = 'model'", "server-side queueing of a model call"),
    "prefill": Metric("PrefillMs", "Role = 'model'", "prefill time of a model call"),
    "span": Metric("Duration / 1e6", "1", "duration of any span (filter with role=)"),
}

QUANTILES = (0.5, 0.95, 0.99)


RAW_WINDOW_LIMIT_NS = 6 * 3600 * 1_000_000_000


@dataclass(frozen=True, slots=True)
class SpanFilter:
    """Which spans a query reads: a project, a time window and equality filters."""

    project: str
    start_ns: int
    end_ns: int
    equals: dict[str, str] = field(default_factory=dict)  # dimension name -> value

    @property
    def reads_rollups(self) -> bool:
        """Windows longer than ``RAW_WINDOW_LIMIT_NS`` read the per-minute rollups, not the raw spans."""
        return self.end_ns - self.start_ns > RAW_WINDOW_LIMIT_NS

    def params(self) -> Params:
        params: Params = {"project": self.project, "start_ns": self.start_ns, "end_ns": self.end_ns}
        params.update({f"f{i}": value for i, (_, value) in enumerate(self._equals())})
        return params

    def window_clause(self, time_column: str = "Timestamp") -> str:
        return (
            "ProjectId = {project:String}"
            f" AND {time_column} >= fromUnixTimestamp64Nano({{start_ns:Int64}})"
            f" AND {time_column} < fromUnixTimestamp64Nano({{end_ns:Int64}})"
        )

    def equality_tests(self, columns: Mapping[str, str] = DIMENSIONS) -> list[str]:
        """One ``Column = {fN:String}`` test per filter, matching ``params()``, the columns of the spans or those
        of a table keeping fewer (``ROLLUP_COLUMNS``, ``TRACE_COLUMNS``)."""
        return [f"{columns[d]} = {{f{i}:String}}" for i, (d, _) in enumerate(self._equals())]

    def _equals(self) -> list[tuple[str, str]]:
        return sorted(self.equals.items())


def percentiles_sql(metric: str, group_by: Sequence[str], where: SpanFilter) -> tuple[str, Params]:
    levels = ", ".join(str(q) for q in QUANTILES)
    aggregates = ["count() AS count", f"quantilesExactInclusive({levels})(value) AS q", "avg(value) AS mean"]
    return _grouped_values_sql(metric, group_by, where, aggregates)


SAMPLES_CAP = 10_000  # values a group's sample holds at most (drawn at random, with SAMPLES_SEED, beyond)
SAMPLES_SEED = 40


def samples_sql(metric: str, group_by: Sequence[str], where: SpanFilter) -> tuple[str, Params]:
    """Per group: the count and the values (sorted), every one up to ``SAMPLES_CAP``, a random ``SAMPLES_CAP``
    beyond (the same ones for the same spans): what a bootstrap needs to compare the group with another."""
    aggregates = ["count() AS count", f"arraySort(groupArraySample({SAMPLES_CAP}, {SAMPLES_SEED})(value)) AS values"]
    return _grouped_values_sql(metric, group_by, where, aggregates)


def _grouped_values_sql(
    metric: str, group_by: Sequence[str], where: SpanFilter, aggregates: Sequence[str]
) -> tuple[str, Params]:
    """``aggregates`` of ``metric``'s values (ms, as ``value``) per group, the most counted groups first."""
    spec = METRICS[metric]
    columns = [f"{DIMENSIONS[d]} AS {d}" for d in group_by]
    condition = " AND ".join([where.window_clause(), *where.equality_tests()])
    group = f"GROUP BY {', '.join(group_by)}" if group_by else ""
    sql = f"""
        SELECT {", ".join([*columns, *aggregates])}
        FROM (
            SELECT *, {spec.expression} AS value FROM otel_traces FINAL
            WHERE {condition} AND ({spec.condition}) AND value IS NOT NULL
        )
        {group}
        HAVING count() > 0
        ORDER BY count DESC
        LIMIT 1000
        {FINAL_SETTINGS}
    """
    return sql, where.params()


TRACE_SORTS = {"recent": "start_ns DESC", "slowest": "duration_ns DESC"}
_CANDIDATE_SORTS = {"recent": "start DESC", "slowest": "duration_ms DESC"}
UNANALYSED_HORIZON_S = 3600  # far beyond the collector's analysis delay (its partial-trace timeout)


def _trace_candidates(where: SpanFilter, sort: str) -> str:
    """The ids of the ``limit`` traces that head the list, found without grouping the window's spans:
    analysed traces starting in the window (rootless ones too) and traces whose root span does and
    arrived too recently to be sure of an analysis. Each filter keeps traces having some span that
    matches it."""
    having = "".join(
        f" AND TraceId IN (SELECT TraceId FROM otel_traces WHERE {where.window_clause()} AND {test})"
        for test in where.equality_tests()
    )
    return f"""
        SELECT TraceId FROM (
            SELECT TraceId, Start AS start, E2eMs AS duration_ms FROM agentlat_traces
            WHERE {where.window_clause("Start")}
            UNION ALL
            SELECT TraceId, Timestamp AS start, Duration / 1e6 AS duration_ms FROM otel_traces
            WHERE {where.window_clause()} AND ParentSpanId = ''
              AND IngestedAt >= now64(3) - toIntervalSecond({UNANALYSED_HORIZON_S})
        )
        WHERE 1{having}
        ORDER BY {_CANDIDATE_SORTS[sort]}
        LIMIT 1 BY TraceId
        LIMIT {{limit:UInt32}}
    """


def traces_sql(where: SpanFilter, sort: str, limit: int) -> tuple[str, Params]:
    """One row a trace: its root (or the whole span range when the root is missing)."""
    # Equality filters select traces having any such span, so they test in HAVING.
    having = ["1", *(f"countIf({test}) > 0" for test in where.equality_tests())]
    params = {**where.params(), "limit": limit}
    sql = f"""
        SELECT
            TraceId AS trace_id,
            toUnixTimestamp64Nano(min(Timestamp)) AS start_ns,
            countIf(ParentSpanId = '') > 0 AS has_root,
            if(has_root, anyIf(Duration, ParentSpanId = ''),
               toUInt64(max(toUnixTimestamp64Nano(Timestamp) + Duration)
                        - min(toUnixTimestamp64Nano(Timestamp)))) AS duration_ns,
            if(has_root, anyIf(SpanName, ParentSpanId = ''), '') AS root_name,
            if(has_root, anyIf(ServiceName, ParentSpanId = ''), any(ServiceName)) AS service,
            anyIf(Route, Route != '') AS route,
            anyIf(Agent, Agent != '') AS agent,
            count() AS span_count,
            countIf({CLIENT_MODEL}) AS model_calls,
            countIf({TOOL_CALL}) AS tool_calls,
            countIf(StatusCode = 'Error') AS errors
        FROM otel_traces FINAL
        WHERE {where.window_clause()} AND TraceId IN ({_trace_candidates(where, sort)})
        GROUP BY TraceId
        HAVING {" AND ".join(having)}
        ORDER BY {TRACE_SORTS[sort]}
        LIMIT {{limit:UInt32}}
        {FINAL_SETTINGS}
    """
    return sql, params


TRACE_SPAN_COLUMNS = (
    "TraceId AS trace_id, SpanId AS span_id, ParentSpanId AS parent_span_id, "
    "SpanName AS name, SpanKind AS kind, ServiceName AS service, "
    "toUnixTimestamp64Nano(Timestamp) AS start_ns, Duration AS duration_ns, "
    "StatusCode AS status_code, StatusMessage AS status_message, "
    "SpanAttributes AS attributes, ResourceAttributes AS resource, "
    "ScopeName AS scope_name, ScopeVersion AS scope_version, "
    "arrayMap(t -> toUnixTimestamp64Nano(t), `Events.Timestamp`) AS event_times_ns, "
    "`Events.Name` AS event_names, `Events.Attributes` AS event_attributes, "
    "IngestFlags AS flags"
)


def trace_sql(project: str, trace_id: str, derived: Sequence[str]) -> tuple[str, Params]:
    derived_columns = ", ".join(f"{derived_sql(column)} AS {column}" for column in derived)
    sql = f"""
        WITH (
            SELECT (min(Start) - INTERVAL 1 SECOND, max(End) + INTERVAL 1 SECOND) FROM otel_traces_trace_id_ts
            WHERE ProjectId = {{project:String}} AND TraceId = {{trace_id:String}}
        ) AS bounds
        SELECT {TRACE_SPAN_COLUMNS}, {derived_columns}
        FROM otel_traces FINAL
        WHERE ProjectId = {{project:String}} AND TraceId = {{trace_id:String}}
          AND Timestamp >= bounds.1 AND Timestamp <= bounds.2
        ORDER BY Timestamp, SpanId
        {FINAL_SETTINGS}
    """
    return sql, {"project": project, "trace_id": trace_id}


# --- reads of the rollups ---------------------------------------------------------------
ROLLUP_DIMENSIONS = tuple(ROLLUP_COLUMNS)
MINUTE_S, HOUR_S, DAY_S = 60, 3600, 86_400


def rollup_spans(where: SpanFilter, largest: int = DAY_S, prefix: str = "") -> Params:
    """The minutes a window covers, ``[minute_first, minute_last)`` (from the minute its start falls
    in up to its end); the whole hours among them that the hourly table answers for,
    ``[hour_first, hour_last)``; and the whole (UTC) days among those that the daily table answers
    for, ``[day_first, day_last)``. Tiers longer than ``largest`` seconds are not used; an unused or
    empty range is empty at the end of the range it would be cut from. Each name starts with ``prefix``, as
    ``rollup_rows`` reads them, so one query can read two windows."""
    minute_first = where.start_ns // 60_000_000_000 * MINUTE_S
    minute_last = -(-where.end_ns // 60_000_000_000) * MINUTE_S
    hour_first, hour_last = _whole(minute_first, minute_last, HOUR_S if largest >= HOUR_S else 0)
    day_first, day_last = _whole(hour_first, hour_last, DAY_S if largest >= DAY_S else 0)
    spans = {"minute_first": minute_first, "minute_last": minute_last, "hour_first": hour_first,
             "hour_last": hour_last, "day_first": day_first, "day_last": day_last}  # fmt: skip
    return {prefix + name: value for name, value in spans.items()}


def _whole(first: int, last: int, period: int) -> tuple[int, int]:
    """The whole periods inside ``[first, last)``, or the empty range at ``last``."""
    if period:
        whole_first, whole_last = -(-first // period) * period, last // period * period
        if whole_first < whole_last:
            return whole_first, whole_last
    return last, last


def rollup_rows(
    where: SpanFilter, metric_test: str, columns: str, values: str = "Count, Sum, Digest, Exact", prefix: str = ""
) -> str:
    """Matching rollup rows of the window, whole days from the daily table, the other whole hours from
    the hourly one and the rest from minutes, each with its start as ``T``, in the ranges of ``rollup_spans``
    (with the same ``prefix``). A group that a re-analysis emptied keeps rows with a count of 0
    (rollup_sql.minutes_from_raw), so callers keep only groups whose count adds up to more than 0."""
    tests = " AND ".join(["ProjectId = {project:String}", *where.equality_tests(ROLLUP_COLUMNS), metric_test])

    def tier(table: str, column: str, first: str, cut_first: str, cut_last: str, last: str) -> str:
        """The rows of ``[first, last)`` outside ``[cut_first, cut_last)``."""
        first, cut_first, cut_last, last = (prefix + name for name in (first, cut_first, cut_last, last))
        return f"""
        SELECT {columns}, Metric, {values}, {column} AS T FROM {table} FINAL
        WHERE {tests}
          AND ({column} >= toDateTime({{{first}:UInt32}}) AND {column} < toDateTime({{{cut_first}:UInt32}})
               OR {column} >= toDateTime({{{cut_last}:UInt32}}) AND {column} < toDateTime({{{last}:UInt32}}))"""

    day_first, day_last = f"{prefix}day_first", f"{prefix}day_last"
    return f"""
        {tier("agentlat_rollup_1m", "Minute", "minute_first", "hour_first", "hour_last", "minute_last")}
        UNION ALL
        {tier("agentlat_rollup_1h", "Hour", "hour_first", "day_first", "day_last", "hour_last")}
        UNION ALL
        SELECT {columns}, Metric, {values}, Day AS T FROM agentlat_rollup_1d FINAL
        WHERE {tests} AND Day >= toDateTime({{{day_first}:UInt32}}) AND Day < toDateTime({{{day_last}:UInt32}})
    """


def rollup_percentiles_sql(
    metrics: Sequence[str], group_by: Sequence[str], where: SpanFilter, limit: int | None = 10_000
) -> tuple[str, Params]:
    """Count, mean and p50/p95/p99 per group and metric, merged from the rollups: exact for a group of at
    most EXACT_MAX values, else by t-digest (rollup_sql.MERGED_QUANTILES); at most ``limit`` rows, the
    most counted first (all of them with None)."""
    columns = "".join(f"{ROLLUP_COLUMNS[d]} AS {d}, " for d in group_by)
    rows = rollup_rows(where, "Metric IN {metrics:Array(String)}", GROUP_COLUMNS)
    sql = f"""
        SELECT {columns}Metric AS metric, sum(Count) AS count, sum(Sum) AS sum, sum(Sum) / sum(Count) AS mean,
               {MERGED_QUANTILES} AS q
        FROM ({rows})
        GROUP BY {", ".join([*group_by, "metric"])}
        HAVING count > 0
        ORDER BY count DESC
        {"LIMIT {limit:UInt32}" if limit is not None else ""}
        {FINAL_SETTINGS}
    """
    params = {**where.params(), **rollup_spans(where), "metrics": list(metrics)}
    return sql, params if limit is None else {**params, "limit": limit}


def rollup_totals_sql(metrics: Sequence[str], group_by: Sequence[str], where: SpanFilter) -> tuple[str, Params]:
    """Count, sum and mean per group and metric, without merging digests (which is most of the cost
    of ``rollup_percentiles_sql``)."""
    columns = "".join(f"{ROLLUP_COLUMNS[d]} AS {d}, " for d in group_by)
    rows = rollup_rows(where, "Metric IN {metrics:Array(String)}", GROUP_COLUMNS, values="Count, Sum")
    sql = f"""
        SELECT {columns}Metric AS metric, sum(Count) AS count, sum(Sum) AS sum, sum(Sum) / sum(Count) AS mean
        FROM ({rows})
        GROUP BY {", ".join([*group_by, "metric"])}
        HAVING count > 0
        {FINAL_SETTINGS}
    """
    return sql, {**where.params(), **rollup_spans(where), "metrics": list(metrics)}


def rollup_groups_sql(group_by: Sequence[str], where: SpanFilter) -> tuple[str, Params]:
    """The groups that served requests in the window, with their request counts: rollup counts only,
    no digest to merge."""
    columns = ", ".join(f"{ROLLUP_COLUMNS[d]} AS {d}" for d in group_by)
    rows = rollup_rows(where, "Metric = 'e2e'", GROUP_COLUMNS, values="Count")
    sql = f"""
        SELECT {columns}, sum(Count) AS count
        FROM ({rows})
        GROUP BY {", ".join(group_by)}
        HAVING count > 0
        ORDER BY count DESC
        LIMIT 10000
        {FINAL_SETTINGS}
    """
    return sql, {**where.params(), **rollup_spans(where)}


def timeseries_sql(metric: str, group_by: Sequence[str], where: SpanFilter, step_seconds: int) -> tuple[str, Params]:
    columns = "".join(f", {ROLLUP_COLUMNS[d]} AS {d}" for d in group_by)
    rows = rollup_rows(where, "Metric = {metric:String}", GROUP_COLUMNS)
    sql = f"""
        SELECT toUnixTimestamp(toStartOfInterval(T, toIntervalSecond({{step:UInt32}}))) AS t{columns},
               sum(Count) AS count, {MERGED_QUANTILES} AS q
        FROM ({rows})
        GROUP BY {", ".join(["t", *group_by])}
        HAVING count > 0
        ORDER BY t
        LIMIT 100000
        {FINAL_SETTINGS}
    """
    spans = rollup_spans(where, largest=largest_tier(step_seconds))
    return sql, {**where.params(), **spans, "metric": metric, "step": step_seconds}


def largest_tier(step_seconds: int) -> int:
    """The longest rollup period (day, hour, minute) a series of ``step_seconds`` intervals may read whole."""
    return next(t for t in (DAY_S, HOUR_S, MINUTE_S) if step_seconds % t == 0)


def timeseries_rows(
    metrics: Sequence[str], group_by: Sequence[str], where: SpanFilter, step_seconds: int
) -> tuple[str, Params]:
    """Count and sum of rollup metrics per interval of ``step_seconds``, group and metric (no digest merged). The
    caller adds the tiers (``rollup_spans``) its step allows."""
    columns = "".join(f", {ROLLUP_COLUMNS[d]} AS {d}" for d in group_by)
    rows = rollup_rows(where, "Metric IN {metrics:Array(String)}", GROUP_COLUMNS, values="Count, Sum")
    sql = f"""
        SELECT toUnixTimestamp(toStartOfInterval(T, toIntervalSecond({{step:UInt32}}))) AS t{columns},
               Metric AS metric, sum(Count) AS count, sum(Sum) AS sum
        FROM ({rows})
        GROUP BY {", ".join(["t", *group_by, "metric"])}
        HAVING count > 0
        ORDER BY t
        LIMIT 100000
        {FINAL_SETTINGS}
    """
    return sql, {**where.params(), "metrics": list(metrics), "step": step_seconds}


# --- latency distribution over time (the Overview's heatmap) --------------------------------
# Levels at which a column holding a t-digest is read: the midpoints of 100 equal slices of its requests.
HEATMAP_LEVELS = tuple((i + 0.5) / 100 for i in range(100))


def heatmap_sql(metric: str, where: SpanFilter, step_seconds: int) -> tuple[str, Params]:
    """Per interval of ``step_seconds``: the count of a rollup metric, whether the rollups hold all its
    values (``exact``, at most EXACT_MAX of them) and then those values, sorted; else the values at
    ``HEATMAP_LEVELS`` of its merged t-digest, each standing for a hundredth of the count."""
    rows = rollup_rows(where, "Metric = {metric:String}", GROUP_COLUMNS)
    levels = ", ".join(repr(level) for level in HEATMAP_LEVELS)
    sql = f"""
        SELECT toUnixTimestamp(toStartOfInterval(T, toIntervalSecond({{step:UInt32}}))) AS t,
               sum(Count) AS count, {ALL_EXACT} AS exact,
               if(exact, {ALL_VALUES}, arrayReduce('quantilesTDigestMerge({levels})', [{MERGED_DIGEST}])) AS sample
        FROM ({rows})
        GROUP BY t
        HAVING count > 0
        ORDER BY t
        LIMIT 100000
        {FINAL_SETTINGS}
    """
    spans = rollup_spans(where, largest=largest_tier(step_seconds))
    return sql, {**where.params(), **spans, "metric": metric, "step": step_seconds}


# --- the split of the requests at p50, p95 and p99 (the Overview's "where E2E goes") ----------
TRACE_DIMENSIONS = tuple(TRACE_COLUMNS)  # the dimensions agentlat_traces keeps
TAIL_LEVELS = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
TAIL_BAND = 0.005  # half-width of the rank band around each percentile


def tail_split_sql(group_by: Sequence[str], where: SpanFilter) -> tuple[str, Params]:
    """Per group and per percentile P of E2E (``TAIL_LEVELS``): the mean E2E, model, tool and orchestration time
    of the analysed traces starting in the window that hold their model calls (SplitComplete) whose E2E ranks
    within ``TAIL_BAND`` of P (ranks floor((P - band)(n - 1)) to ceil((P + band)(n - 1)) in order of E2E then
    trace id, so at least one trace).
    Each trace's parts add up to its E2E, so the means add up to the band's mean E2E. One row per trace: no
    span is read. A group's traces are ranked by sorting them as one array (a window function sorting
    every row took 1.4x as long at 140,000 traces)."""
    keys = "".join(f"{TRACE_COLUMNS[d]} AS {d}, " for d in group_by)
    grouping = f"GROUP BY {', '.join(group_by)}" if group_by else ""
    condition = " AND ".join([where.window_clause("Start"), *where.equality_tests(TRACE_COLUMNS), "SplitComplete = 1"])
    sql = f"""
        SELECT {"".join(f"{d}, " for d in group_by)}level, toFloat64(length(ranked) - 1) AS last,
               toUInt64(greatest(floor((level - {{band:Float64}}) * last), 0)) AS first_rank,
               toUInt64(least(ceil((level + {{band:Float64}}) * last), last)) AS last_rank,
               arraySlice(ranked, first_rank + 1, last_rank - first_rank + 1) AS band,
               length(band) AS traces, arrayAvg(t -> t.1, band) AS e2e, arrayAvg(t -> t.3, band) AS model,
               arrayAvg(t -> t.4, band) AS tool, arrayAvg(t -> t.5, band) AS orchestration
        FROM (
            SELECT {keys}arraySort(groupArray((E2eMs, TraceId, ModelMs, ToolMs, OrchestrationMs))) AS ranked
            FROM agentlat_traces FINAL
            WHERE {condition}
            {grouping}
        )
        ARRAY JOIN {{levels:Array(Float64)}} AS level
        WHERE notEmpty(ranked)
        {TRACE_WINDOW_SETTINGS}
    """
    return sql, {**where.params(), "levels": list(TAIL_LEVELS.values()), "band": TAIL_BAND}


def trace_analysis_sql(project: str, trace_id: str) -> tuple[str, Params]:
    sql = """
        SELECT * EXCEPT (ProjectId, Start, AnalysedAt, ModelMs, OrchestrationMs),
               toUnixTimestamp64Nano(Start) AS StartNs, toString(AnalysedAt) AS AnalysedAt,
               if(SplitComplete = 1, ModelMs, NULL) AS ModelMs,
               if(SplitComplete = 1, OrchestrationMs, NULL) AS OrchestrationMs
        FROM agentlat_traces FINAL
        WHERE ProjectId = {project:String} AND TraceId = {trace_id:String}
    """
    return sql, {"project": project, "trace_id": trace_id}


# --- per-dimension summary (the dashboard's routes & models table) ---------------------
# What one row of each dimension counts, and the metrics reported for it.
DIMENSION_ROWS = 1000  # values of a dimension a summary lists, the most counted first
DIMENSION_UNITS: dict[str, str] = {
    "route": "ParentSpanId = ''",  # requests: root spans
    "agent": "Role = 'agent'",  # agent runs
    "model": CLIENT_MODEL,  # client model calls
    "tool": TOOL_CALL,  # tool calls
    "release": "ParentSpanId = ''",  # requests its service served
    "prompt": CLIENT_MODEL,  # model calls with the prompt version
}
DIMENSION_METRICS: dict[str, tuple[str, ...]] = {
    "route": ("e2e", "ttft", "itl", "model", "tool"),
    "agent": ("agent", "ttft", "itl", "model", "tool"),
    "model": ("model", "ttft", "itl", "decode"),
    "tool": ("tool",),
    "release": ("e2e", "ttft", "itl", "model", "tool"),
    "prompt": ("ttft", "itl", "model", "decode"),
}


def _token_ratio(numerator: str, denominator: str, condition: str) -> str:
    """sum(numerator) / sum(denominator) over spans meeting ``condition``; NULL without any."""
    test = f"{condition} AND isNotNull({numerator}) AND {denominator} > 0"
    return f"sumIf({numerator}, {test}) / nullIf(sumIf({denominator}, {test}), 0)"


def _client_else_server(numerator: str, denominator: str) -> str:
    """A token ratio from client model calls, else from server spans (vLLM/SGLang) when clients lack it."""
    client = _token_ratio(numerator, denominator, CLIENT_MODEL)
    server = _token_ratio(numerator, denominator, "Role = 'model' AND IsServerSpan = 1")
    return f"coalesce({client}, {server})"


def dimensions_sql(dimension: str, where: SpanFilter, by_service: bool = False) -> tuple[str, Params]:
    """Per value of a dimension (per service and value with ``by_service``): unit count and errors, then count
    and exact p50/p95/p99 of each of its metrics, token-weighted prompt-cache hit rate and speculative
    acceptance."""
    unit = DIMENSION_UNITS[dimension]
    levels = ", ".join(str(q) for q in QUANTILES)
    select = [
        *(["ServiceName AS service"] if by_service else []),
        f"{DIMENSIONS[dimension]} AS name",
        f"countIf({unit}) AS count",
        f"countIf(({unit}) AND StatusCode = 'Error') AS errors",
    ]
    for name in DIMENSION_METRICS[dimension]:
        spec = METRICS[name]
        present = f"({spec.condition}) AND isNotNull({spec.expression})"
        value = f"toFloat64(assumeNotNull({spec.expression}))"
        select.append(f"countIf({present}) AS {name}_count")
        select.append(f"quantilesExactInclusiveIf({levels})({value}, {present}) AS {name}_q")
    select.append(f"{_client_else_server('CacheReadTokens', 'InputTokens')} AS cache_hit_rate")
    select.append(f"{_client_else_server('SpecAcceptedTokens', 'SpecProposedTokens')} AS spec_acceptance")
    condition = " AND ".join([where.window_clause(), *where.equality_tests(), f"{DIMENSIONS[dimension]} != ''"])
    sql = f"""
        SELECT {", ".join(select)}
        FROM otel_traces FINAL
        WHERE {condition}
        GROUP BY {"service, " if by_service else ""}name
        ORDER BY count DESC, name{", service" if by_service else ""}
        LIMIT {DIMENSION_ROWS}
        {FINAL_SETTINGS}
    """
    return sql, where.params()


# The rollup metrics that hold each dimension's unit count and error count.
DIMENSION_UNIT_ROLLUPS = {
    "route": "n_root",
    "agent": "agent",
    "model": "model",
    "tool": "tool",
    "release": "n_root",
    "prompt": "model",
}
DIMENSION_ERROR_ROLLUPS = {
    "route": "n_error_root", "agent": "n_error_agent", "model": "n_error_model", "tool": "n_error_tool",
    "release": "n_error_root", "prompt": "n_error_model",
}  # fmt: skip
_TOKEN_RATIOS = {  # row key: (numerator, denominator) token counters, client calls first, then server spans
    "cache_hit_rate": ("cache_read", "cache_input"),
    "spec_acceptance": ("spec_accepted", "spec_proposed"),
}


def dimension_rollup_metrics(dimension: str) -> list[str]:
    """Every rollup metric a per-dimension summary from rollups reads."""
    tokens = [f"tokens_{t}{s}" for pair in _TOKEN_RATIOS.values() for t in pair for s in ("", "_server")]
    unit_and_errors = [DIMENSION_UNIT_ROLLUPS[dimension], DIMENSION_ERROR_ROLLUPS[dimension]]
    return list(dict.fromkeys([*unit_and_errors, *DIMENSION_METRICS[dimension], *tokens]))


def dimension_summary_from_rollups(dimension: str, rows: Sequence[dict], by_service: bool = False) -> list[dict]:
    """The rows ``dimensions_sql`` returns (with percentiles), built from rollup rows of
    ``dimension_rollup_metrics`` grouped by the dimension (and by service with ``by_service``)."""
    by_name: dict[tuple[str, str], dict[str, dict]] = {}
    for row in rows:
        if row[dimension]:
            key = (row["service"] if by_service else "", row[dimension])
            by_name.setdefault(key, {})[row["metric"]] = row

    def count(found: dict[str, dict], metric: str) -> int:
        return found[metric]["count"] if metric in found else 0

    def ratio(found: dict[str, dict], numerator: str, denominator: str) -> float | None:
        for suffix in ("", "_server"):
            below = found.get(f"tokens_{denominator}{suffix}", {}).get("sum") or 0
            if below:
                return found[f"tokens_{numerator}{suffix}"]["sum"] / below
        return None

    summary = []
    for (service, name), found in by_name.items():
        row = {"name": name, "count": count(found, DIMENSION_UNIT_ROLLUPS[dimension])}
        if by_service:
            row["service"] = service
        row["errors"] = count(found, DIMENSION_ERROR_ROLLUPS[dimension])
        for metric in DIMENSION_METRICS[dimension]:
            row[f"{metric}_count"] = count(found, metric)
            row[f"{metric}_q"] = found[metric]["q"] if metric in found else None
        row.update({key: ratio(found, *pair) for key, pair in _TOKEN_RATIOS.items()})
        summary.append(row)
    summary.sort(key=lambda r: (-r["count"], r["name"], r.get("service", "")))
    return summary[:DIMENSION_ROWS]
