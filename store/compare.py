"""Two sides of one dimension compared on the same spans (issue 40): release A against release B, model X
against model Y, prompt version 3 against 4, or before an instant against after it.

Exact, from the spans of the window (the same ``SpanFilter`` every read takes, so the comparison is on the
same route, service or agent). Each side's values of a metric are read whole; the percentiles are exact
(``quantileExactInclusive``, numpy's linear interpolation), and how sure a difference is comes from the data:
a bootstrap over each side's values (``shared/difference.py``, which the checks against a baseline share).

Which spans a side holds: TTFT and ITL from the model calls that are on the side themselves; E2E from the
root spans of traces with a span on the side (a trace is in release A when its spans are; a model's or a
prompt version's traces are those that called it), or, before and after an instant, from the root spans
starting on that side of it. The split (model, tool and orchestration time along the critical path) from
the analysed traces the same way, and each tool's call duration per side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentlat.shared.difference import GRID
from agentlat.store.backends import Params
from agentlat.store.queries import (
    DAY_S,
    HOUR_S,
    METRICS,
    TRACE_COLUMNS,
    TRACE_DIMENSIONS,
    SpanFilter,
    rollup_rows,
    rollup_spans,
)
from agentlat.store.queries import DIMENSIONS as SPAN_DIMENSIONS
from agentlat.store.rollup_sql import ALL_EXACT, ALL_VALUES, CLIENT_MODEL, FINAL_SETTINGS, MERGED_DIGEST, TOOL_CALL

# What a side is, by dimension: a span's column or attribute equal to the side's value.
SIDE_COLUMNS = {dimension: SPAN_DIMENSIONS[dimension] for dimension in ("release", "model", "prompt")}
DIMENSIONS = (*SIDE_COLUMNS, "time")  # "time": before an instant against from it on
COMPARED = ("ttft", "itl", "e2e")
SPLIT_PARTS = {"model": "ModelMs", "tool": "ToolMs", "orchestration": "OrchestrationMs"}
# The levers that move with latency, compared beside it: name -> (unit, read from the model calls or the traces).
# Ratios of token sums over the calls, output tokens a call, ms a trace (serial independent tools) and a streamed
# tool call (dispatch delay).
LEVERS = {"cache_hit_rate": ("ratio", "calls"), "spec_acceptance": ("ratio", "calls"),
          "output_tokens": ("tokens", "calls"), "serial_tools_ms": ("ms", "traces"),
          "dispatch_delay_ms": ("ms", "traces")}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sides:
    """The two sides: ``a`` and ``b`` values of ``dimension`` (for ``time``, ``at_ns`` splits the window)."""

    dimension: str
    a: str = ""
    b: str = ""
    at_ns: int = 0

    def params(self) -> Params:
        return {"side_a": self.a, "side_b": self.b, "at_ns": self.at_ns}

    def of_span(self) -> str:
        """'a', 'b' or '' for a span, by its own column."""
        if self.dimension == "time":
            return "if(Timestamp < fromUnixTimestamp64Nano({at_ns:Int64}), 'a', 'b')"
        column = SIDE_COLUMNS[self.dimension]
        return f"multiIf({column} = {{side_a:String}}, 'a', {column} = {{side_b:String}}, 'b', '')"


def _trace_sides(sides: Sides, where: SpanFilter) -> str:
    """``TraceId, side`` of every trace with a span on a side (a trace on both sides is on neither)."""
    condition = " AND ".join([where.window_clause(), *where.equality_tests()])
    return f"""
        SELECT TraceId, any(span_side) AS side FROM (
            SELECT DISTINCT TraceId, {sides.of_span()} AS span_side FROM otel_traces
            WHERE {condition} AND span_side != ''
        ) GROUP BY TraceId HAVING uniqExact(span_side) = 1
    """


def _by_trace(sides: Sides, where: SpanFilter, table: str, start: str = "Timestamp") -> tuple[str, str]:
    """The side of each row of ``table`` by its trace's (``_trace_sides``), or, before and after an instant, by
    when the row starts; and the FROM clause that gives it."""
    if sides.dimension == "time":
        return f"if({start} < fromUnixTimestamp64Nano({{at_ns:Int64}}), 'a', 'b')", f"{table} FINAL"
    return "t.side", f"{table} AS r FINAL INNER JOIN ({_trace_sides(sides, where)}) AS t USING TraceId"


def side_values_sql(dimension: str, where: SpanFilter) -> tuple[str, Params]:
    """The values ``dimension`` (not ``time``) took in the window, each with its spans and when it was first and
    last seen in the window, the first seen first: the sides there are to compare, and when each release began."""
    column = SIDE_COLUMNS[dimension]
    condition = " AND ".join([where.window_clause(), *where.equality_tests(), f"{column} != ''"])
    sql = f"""
        SELECT {column} AS value, count() AS spans,
               toUnixTimestamp64Nano(min(Timestamp)) AS first_ns, toUnixTimestamp64Nano(max(Timestamp)) AS last_ns
        FROM otel_traces
        WHERE {condition}
        GROUP BY value
        ORDER BY first_ns, value
        LIMIT 1000
    """
    return sql, where.params()


VERSION_DIMENSIONS = ("release", "prompt", "model")  # kept in agentlat_versions, with when each was first seen
VERSION_FILTERS = ("service", "route")  # the columns agentlat_versions keeps them by


def versions_sql(dimensions: Sequence[str], where: SpanFilter) -> tuple[str, Params]:
    """Each release, prompt version or model of ``dimensions`` seen in the window, per service, with when it was
    first and last seen at all (``agentlat_versions``), the first seen first. The service and route filters apply
    (a route's first span of a release is when the release began serving it); the others do not."""
    kept = SpanFilter(where.project, where.start_ns, where.end_ns, {
        d: v for d, v in where.equals.items() if d in VERSION_FILTERS
    })  # fmt: skip
    tests = ["ProjectId = {project:String}", "Dimension IN {dimensions:Array(String)}", *kept.equality_tests()]
    sql = f"""
        SELECT Dimension AS dimension, ServiceName AS service, Value AS value,
               toUnixTimestamp64Nano(min(FirstSeen)) AS first_ns, toUnixTimestamp64Nano(max(LastSeen)) AS last_ns
        FROM agentlat_versions
        WHERE {" AND ".join(tests)}
        GROUP BY dimension, service, value
        HAVING last_ns >= {{start_ns:Int64}} AND first_ns < {{end_ns:Int64}}
        ORDER BY first_ns, dimension, service, value
        LIMIT 1000
    """
    return sql, {**kept.params(), "dimensions": list(dimensions)}


def metric_values_sql(sides: Sides, where: SpanFilter) -> tuple[str, Params]:
    """Per side and metric of ``COMPARED``: every value (ms) on the side."""
    condition = " AND ".join([where.window_clause(), *where.equality_tests()])
    parts = []
    for name in COMPARED:
        spec = METRICS[name]
        own = (sides.of_span(), "otel_traces FINAL")  # TTFT and ITL: the model calls on the side themselves
        side, source = _by_trace(sides, where, "otel_traces") if name == "e2e" else own
        parts.append(f"""
            SELECT '{name}' AS metric, {side} AS side, {spec.expression} AS value FROM {source}
            WHERE {condition} AND ({spec.condition}) AND value IS NOT NULL AND side != ''
        """)
    sql = f"""
        SELECT metric, side, groupArray(value) AS values FROM ({" UNION ALL ".join(parts)})
        GROUP BY metric, side
        {FINAL_SETTINGS}
    """
    return sql, {**where.params(), **sides.params()}


def split_values_sql(sides: Sides, where: SpanFilter) -> tuple[str, Params]:
    """Per side: the critical path's model, tool and orchestration ms of each analysed trace with a complete
    split, starting in the window; and two of its levers: what running its independent tools in parallel would
    save (ms a trace) and each streamed tool call's dispatch delay."""
    trace_filters = {d: v for d, v in where.equals.items() if d in TRACE_DIMENSIONS}
    traces = SpanFilter(where.project, where.start_ns, where.end_ns, trace_filters)
    tests = traces.equality_tests(TRACE_COLUMNS)
    condition = " AND ".join([traces.window_clause("Start"), *tests, "SplitComplete = 1"])
    side, source = _by_trace(sides, where, "agentlat_traces", "Start")
    columns = ", ".join(f"groupArray({column}) AS {part}" for part, column in SPLIT_PARTS.items())
    columns += (
        ", groupArray(ParallelSavingMs) AS serial_tools_ms, groupArrayArray(DispatchDelaysMs) AS dispatch_delay_ms"
    )
    sql = f"""
        SELECT {side} AS side, {columns} FROM {source}
        WHERE {condition} AND side != ''
        GROUP BY side
        {FINAL_SETTINGS}
    """
    return sql, {**traces.params(), **sides.params()}


def call_lever_values_sql(sides: Sides, where: SpanFilter) -> tuple[str, Params]:
    """Per side, of the model calls on the side: output tokens, and the (cache-read, input) and (accepted,
    proposed) token pairs of the calls reporting both: the levers whose ratios and means move with TTFT and ITL."""
    condition = " AND ".join([where.window_clause(), *where.equality_tests(), CLIENT_MODEL])
    pair = "[toFloat64(assumeNotNull({0})), toFloat64(assumeNotNull({1}))]"
    sql = f"""
        SELECT {sides.of_span()} AS side,
               groupArrayIf(toFloat64(assumeNotNull(OutputTokens)), isNotNull(OutputTokens)) AS output_tokens,
               groupArrayIf({pair.format("CacheReadTokens", "InputTokens")},
                            isNotNull(CacheReadTokens) AND InputTokens > 0) AS cache_hit_rate,
               groupArrayIf({pair.format("SpecAcceptedTokens", "SpecProposedTokens")},
                            isNotNull(SpecAcceptedTokens) AND SpecProposedTokens > 0) AS spec_acceptance
        FROM otel_traces FINAL
        WHERE {condition} AND side != ''
        GROUP BY side
        {FINAL_SETTINGS}
    """
    return sql, {**where.params(), **sides.params()}


def tool_values_sql(sides: Sides, where: SpanFilter) -> tuple[str, Params]:
    """Per side and tool: every tool call's duration (ms)."""
    condition = " AND ".join([where.window_clause(), *where.equality_tests(), TOOL_CALL])
    side, source = _by_trace(sides, where, "otel_traces")
    sql = f"""
        SELECT Tool AS tool, {side} AS side, groupArray(Duration / 1e6) AS values FROM {source}
        WHERE {condition} AND side != ''
        GROUP BY tool, side
        {FINAL_SETTINGS}
    """
    return sql, {**where.params(), **sides.params()}


# --- beyond the exact reads: from the rollups -------------------------------------------------------------------
# A side of the rollup rows: those of its release, prompt version or model, or those before and after the instant
# (a whole minute: the rollups' finest grain). The trace rows (E2E, the split, serial tools and dispatch delay) and
# the tool calls keep a release, not a prompt version or model; no rollup keeps output tokens a call.
ROLLUP_SIDE_COLUMNS = {"release": "Release", "prompt": "PromptVersion", "model": "Model"}
_BY_TRACE = ("e2e", "split", "tools", "serial_tools_ms", "dispatch_delay_ms")
NOT_IN_ROLLUPS = {"release": ("output_tokens",), "time": ("output_tokens",),
                  "prompt": (*_BY_TRACE, "output_tokens"), "model": (*_BY_TRACE, "output_tokens")}  # fmt: skip
ROLLUP_SPLIT_METRICS = {part: f"split_{part}" for part in SPLIT_PARTS}
_DISTRIBUTION_METRICS = (*COMPARED, *ROLLUP_SPLIT_METRICS.values(), "tool")
# The levers as sums over the rollup rows: numerator and denominator metric (each one's Sum), or a metric whose Sum
# over its Count is a mean. Resampled by the hour: an hour's calls or traces are one cluster.
ROLLUP_LEVERS = {
    "cache_hit_rate": ("tokens_cache_read", "tokens_cache_input"),
    "spec_acceptance": ("tokens_spec_accepted", "tokens_spec_proposed"),
    "serial_tools_ms": ("advice_parallel_saving", ""),
    "dispatch_delay_ms": ("advice_dispatch_delay", ""),
}
_LEVER_METRICS = tuple(m for pair in ROLLUP_LEVERS.values() for m in pair if m)


MINUTE_NS = 60 * 10**9


def rollup_at(at_ns: int) -> int:
    """The instant a comparison from the rollups splits at: the start of the minute holding ``at_ns``."""
    return at_ns // MINUTE_NS * MINUTE_NS


def _rollup_sides(
    sides: Sides, where: SpanFilter, metrics: Sequence[str], values: str, largest: int
) -> tuple[str, Params]:
    """The rollup rows of ``metrics`` on a side, with ``side`` and ``Tool``; and the parameters of their ranges."""
    test = "Metric IN {metrics:Array(String)}"
    if sides.dimension == "time":
        at = rollup_at(sides.at_ns)
        halves = {"a_": SpanFilter(where.project, where.start_ns, at, where.equals),
                  "b_": SpanFilter(where.project, at, where.end_ns, where.equals)}  # fmt: skip
        sql = " UNION ALL ".join(
            rollup_rows(half, test, f"'{prefix[0]}' AS side, Tool", values, prefix) for prefix, half in halves.items()
        )
        params = {k: v for prefix, half in halves.items() for k, v in rollup_spans(half, largest, prefix).items()}
    else:
        column = ROLLUP_SIDE_COLUMNS[sides.dimension]
        side = f"multiIf({column} = {{side_a:String}}, 'a', {column} = {{side_b:String}}, 'b', '') AS side"
        sql, params = rollup_rows(where, test, f"{side}, Tool", values), rollup_spans(where, largest)
    return sql, {**where.params(), **sides.params(), **params, "metrics": list(metrics)}


def rollup_distributions_sql(sides: Sides, where: SpanFilter) -> tuple[str, Params]:
    """Per metric, side and tool (the tool metric's; '' for the others): count and sum, and the values when the
    rollups keep them all (``exact``), else the merged t-digest's quantiles at ``difference.GRID``."""
    rows, params = _rollup_sides(sides, where, _DISTRIBUTION_METRICS, "Count, Sum, Digest, Exact", DAY_S)
    grid = ", ".join(repr(level) for level in GRID)
    sql = f"""
        SELECT Metric AS metric, side, if(Metric = 'tool', Tool, '') AS tool, sum(Count) AS count,
               sum(Sum) AS total, {ALL_EXACT} AS exact,
               if(exact, {ALL_VALUES}, arrayReduce('quantilesTDigestMerge({grid})', [{MERGED_DIGEST}])) AS values
        FROM ({rows})
        WHERE side != ''
        GROUP BY metric, side, tool
        HAVING count > 0
        {FINAL_SETTINGS}
    """
    return sql, params


def rollup_lever_sums_sql(sides: Sides, where: SpanFilter) -> tuple[str, Params]:
    """Per side, lever metric and hour: count and sum (hours whole from the hourly table, the ragged ends from
    the minutes)."""
    rows, params = _rollup_sides(sides, where, _LEVER_METRICS, "Count, Sum", HOUR_S)
    sql = f"""
        SELECT side, Metric AS metric, toStartOfHour(T) AS hour, sum(Count) AS count, sum(Sum) AS total
        FROM ({rows})
        WHERE side != ''
        GROUP BY side, metric, hour
        HAVING count > 0
        {FINAL_SETTINGS}
    """
    return sql, params
