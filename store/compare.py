"""Two sides of one dimension compared on the same spans (issue 40): release A against release B, model X
against model Y, prompt version 3 against 4, or before an instant against after it.

Exact, from the spans of the window (the same ``SpanFilter`` every read takes, so the comparison is on the
same route, service or agent). Each side's values of a metric are read whole; the percentiles are exact
(``quantileExactInclusive``, numpy's linear interpolation), and how sure a difference is comes from the data:
a bootstrap over each side's values (``RESAMPLES`` resamples, a fixed seed, so one store gives one answer),
its 2.5th and 97.5th percentiles the 95 % interval. A side with fewer values than a percentile needs
(``shared.measures.DEFAULT_MIN_SAMPLES``) gives the point difference but no interval: too few samples.

Which spans a side holds: TTFT and ITL from the model calls that are on the side themselves; E2E from the
root spans of traces with a span on the side (a trace is in release A when its spans are; a model's or a
prompt version's traces are those that called it), or, before and after an instant, from the root spans
starting on that side of it. The split (model, tool and orchestration time along the critical path) from
the analysed traces the same way, and each tool's call duration per side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentlat import semconv as sc
from agentlat.shared.measures import DEFAULT_MIN_SAMPLES, PERCENTILES
from agentlat.store.backends import Params
from agentlat.store.queries import METRICS, TRACE_DIMENSIONS, SpanFilter
from agentlat.store.rollup_sql import FINAL_SETTINGS, TOOL_CALL

# What a side is, by dimension: a span's column or attribute equal to the side's value.
SIDE_COLUMNS = {
    "release": "ResourceAttributes['service.version']",
    "model": "Model",
    "prompt": f"SpanAttributes['{sc.PROMPT_VERSION}']",
}
DIMENSIONS = (*SIDE_COLUMNS, "time")  # "time": before an instant against from it on
COMPARED = ("ttft", "itl", "e2e")
SPLIT_PARTS = {"model": "ModelMs", "tool": "ToolMs", "orchestration": "OrchestrationMs"}
LEVELS = {"p50": 50.0, "p95": 95.0, "p99": 99.0}
RESAMPLES = 500
BOOTSTRAP_CAP = 10_000  # values a side's bootstrap draws from at most (a random subset beyond: a wider interval)
SEED = 40


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
    split, starting in the window."""
    trace_filters = {d: v for d, v in where.equals.items() if d in TRACE_DIMENSIONS}
    traces = SpanFilter(where.project, where.start_ns, where.end_ns, trace_filters)
    condition = " AND ".join([traces.window_clause("Start"), *traces.equality_tests(), "SplitComplete = 1"])
    side, source = _by_trace(sides, where, "agentlat_traces", "Start")
    columns = ", ".join(f"groupArray({column}) AS {part}" for part, column in SPLIT_PARTS.items())
    sql = f"""
        SELECT {side} AS side, {columns} FROM {source}
        WHERE {condition} AND side != ''
        GROUP BY side
        {FINAL_SETTINGS}
    """
    return sql, {**traces.params(), **sides.params()}


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


# --- the statistics (pure) ----------------------------------------------------------------


def _stats(values: np.ndarray) -> dict[str, Any]:
    found = {"count": int(values.size), "mean": float(values.mean()) if values.size else None}
    for name, level in LEVELS.items():
        found[name] = float(np.percentile(values, level)) if values.size else None
    return found


def _measure(values: np.ndarray, statistic: str, axis: int | None = None) -> Any:
    return values.mean(axis=axis) if statistic == "mean" else np.percentile(values, LEVELS[statistic], axis=axis)


def _bootstrap(values: np.ndarray, statistics: Sequence[str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Each statistic over ``RESAMPLES`` resamples of ``values`` (drawn once for them all; from a random
    ``BOOTSTRAP_CAP`` of the values beyond that many, which widens the interval rather than narrowing it)."""
    if values.size > BOOTSTRAP_CAP:
        values = rng.choice(values, BOOTSTRAP_CAP, replace=False)
    drawn = values[rng.integers(0, values.size, size=(RESAMPLES, values.size))]
    return {s: _measure(drawn, s, axis=1) for s in statistics}


def compare_values(
    a: Sequence[float], b: Sequence[float], statistics: Sequence[str], minimums: Mapping[str, int]
) -> dict[str, Any]:
    """Both sides' count, mean and percentiles, and per statistic the difference B - A, its 95 % interval
    and what it says: slower or faster when the interval leaves out 0, too few samples below the statistic's
    minimum on either side (the difference without an interval), no data when a side has no values."""
    rng = np.random.default_rng(SEED)
    left, right = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    judged = [s for s in statistics if min(left.size, right.size) >= minimums[s]]
    spreads = {}
    if judged:
        drawn_a, drawn_b = _bootstrap(left, judged, rng), _bootstrap(right, judged, rng)
        spreads = {s: drawn_b[s] - drawn_a[s] for s in judged}
    return {"a": _stats(left), "b": _stats(right), "differences": [
        _difference(left, right, s, spreads.get(s)) for s in statistics
    ]}  # fmt: skip


def _difference(a: np.ndarray, b: np.ndarray, statistic: str, spread: np.ndarray | None) -> dict[str, Any]:
    found: dict[str, Any] = {"statistic": statistic, "difference": None, "low": None, "high": None}
    if not a.size or not b.size:
        return {**found, "status": "no_data"}
    found["difference"] = float(_measure(b, statistic) - _measure(a, statistic))
    if spread is None:
        return {**found, "status": "too_few_samples"}
    low, high = (float(x) for x in np.percentile(spread, (2.5, 97.5)))
    status = "slower" if low > 0 else "faster" if high < 0 else "no_clear_change"
    return {**found, "low": low, "high": high, "status": status}


def percentile_comparison(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """``compare_values`` at p50, p95 and p99, each needing its ``DEFAULT_MIN_SAMPLES`` on both sides."""
    return compare_values(a, b, PERCENTILES, DEFAULT_MIN_SAMPLES)


MEAN_MIN_SAMPLES = DEFAULT_MIN_SAMPLES["p50"]  # a mean's interval needs as many samples as a median's


def mean_comparison(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    return compare_values(a, b, ("mean",), {"mean": MEAN_MIN_SAMPLES})
