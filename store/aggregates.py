"""Aggregate reads of the query API and the advisor: percentiles, time series, per-dimension
summaries and the advisor's evidence, exact from the spans or from the rollups. Part of ``Store``
(store/__init__.py); the SQL is in queries.py and advice.py."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentlat.shared.difference import (
    MEAN_MIN_SAMPLES,
    Summary,
    compare_summaries,
    mean_change,
    mean_comparison,
    percentile_comparison,
    ratio_change,
)
from agentlat.shared.measures import DEFAULT_MIN_SAMPLES, PERCENTILES, RATIO_MIN_SAMPLES
from agentlat.store import advice, cache_report, compare, queries
from agentlat.store.backends import Backend, Params
from agentlat.store.queries import SpanFilter

_Build = Callable[[SpanFilter], tuple[str, Params]]
# The advisor's queries by the key its evidence files their rows under, from the rollups or exact.
_ADVICE_FROM_ROLLUPS: dict[str, _Build] = {
    "totals": advice.rollup_totals_sql,
    "medians": advice.rollup_medians_sql,
    "prefix": advice.rollup_prefix_misses_sql,
    "server": advice.server_phases_sql,
}
_ADVICE_EXACT: dict[str, _Build] = {
    "calls": advice.model_calls_sql,
    "prefix": advice.prefix_misses_sql,
    "server": advice.server_phases_sql,
    "trace": advice.traces_sql,
}


# The heatmap's latency buckets (ms): ten per decade from 1 ms to 1,000 s (the R10 preferred numbers, so
# every edge reads as a round number), below them [0, 1) and above them [1,000 s, infinity). Fixed, so
# every interval and every page shares one grid.
_R10 = (1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0)
LATENCY_EDGES_MS = (0.0, *(round(m * 10**d, 6) for d in range(6) for m in _R10), 1e6)


@dataclass(frozen=True, slots=True)
class HeatmapColumn:
    """One interval of a latency distribution: ``counts[i]`` values fell in bucket i (``LATENCY_EDGES_MS[i]``
    up to the next edge, the last one unbounded). Exact when the rollups held every value; else the
    t-digest's estimate, still adding up to ``count``."""

    t: int  # the interval's start, Unix seconds
    count: int
    exact: bool
    counts: list[int]


def bucket_counts(sample: Sequence[float], count: int, exact: bool) -> list[int]:
    """How many of ``count`` values fall in each bucket of ``LATENCY_EDGES_MS``: the values themselves when
    ``exact``, else equally weighted quantiles shared out by largest remainder so the counts add up."""
    buckets = [0.0] * len(LATENCY_EDGES_MS)
    weight = 1.0 if exact or not sample else count / len(sample)
    for value in sample:
        buckets[max(0, bisect.bisect_right(LATENCY_EDGES_MS, value) - 1)] += weight
    whole = [math.floor(b) for b in buckets]
    by_remainder = sorted(range(len(buckets)), key=lambda i: whole[i] - buckets[i])
    for i in by_remainder[: count - sum(whole)]:
        whole[i] += 1
    return whole


@dataclass(frozen=True, slots=True)
class PercentileRow:
    group: dict[str, str]
    count: int
    p50: float
    p95: float
    p99: float
    mean: float


def _levers(calls: dict[str, dict[str, Any]], traces: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each of ``compare.LEVERS`` compared between the sides: ratios over the model calls' token pairs (as many
    calls a side as a hit rate needs), means of the rest, each with its unit."""
    found = {}
    for lever, (unit, source) in compare.LEVERS.items():
        rows = calls if source == "calls" else traces
        a, b = (rows.get(side, {}).get(lever) or [] for side in ("a", "b"))
        change = ratio_change(a, b, RATIO_MIN_SAMPLES) if unit == "ratio" else mean_change(a, b)
        found[lever] = {"unit": unit, **change}
    return found


def _rollup_levers(rows: Sequence[dict[str, Any]], left_out: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each lever the rollups keep, as ``_levers`` compares it, from per-hour sums (``compare.rollup_lever_sums_sql``'s
    rows): a ratio's numerator and denominator, or a mean's sum and count, each hour one cluster the interval
    resamples."""
    hours: dict[tuple[str, str], dict[int, tuple[int, float]]] = {}
    for row in rows:
        hours.setdefault((row["side"], row["metric"]), {})[row["hour"]] = (row["count"], row["total"])
    found = {}
    for lever, (numerator, denominator) in compare.ROLLUP_LEVERS.items():
        if lever in left_out:
            continue
        unit, _ = compare.LEVERS[lever]
        pairs, counts = {}, {}
        for side in ("a", "b"):
            top = hours.get((side, numerator), {})
            below = hours.get((side, denominator), {}) if denominator else {}
            pairs[side] = [(total, below[h][1] if denominator else count) for h, (count, total) in top.items()
                           if not denominator or h in below]  # fmt: skip
            counts[side] = sum(count for count, _ in top.values())
        change = ratio_change(pairs["a"], pairs["b"], RATIO_MIN_SAMPLES)
        for side in ("a", "b"):
            change[side]["count"] = counts[side]
        found[lever] = {"unit": unit, **change, "statistic": "ratio" if unit == "ratio" else "mean"}
    return found


class AggregateReads:
    """Reads that aggregate a window of spans, traces or rollups."""

    backend: Backend

    def _rows_at_once(self, queries: dict[str, tuple[str, Params]]) -> dict[str, list[dict[str, Any]]]:
        """Each query's rows, under its key: the queries run concurrently (the engine runs each on its threads)."""
        with ThreadPoolExecutor(len(queries), thread_name_prefix="agentlat-reads") as pool:
            found = {key: pool.submit(self.backend.query_arrow, *query) for key, query in queries.items()}
            return {key: future.result().to_pylist() for key, future in found.items()}

    def _rows(self, sql: str, params: Params | None = None) -> list[dict[str, Any]]:
        return self.backend.query_arrow(sql, params).to_pylist()

    def percentiles(self, metric: str, group_by: Sequence[str], where: SpanFilter) -> list[PercentileRow]:
        rows = self._rows(*queries.percentiles_sql(metric, group_by, where))
        return [
            PercentileRow(
                group={d: row[d] for d in group_by},
                count=row["count"],
                p50=row["q"][0],
                p95=row["q"][1],
                p99=row["q"][2],
                mean=row["mean"],
            )
            for row in rows
        ]

    def samples(self, metric: str, group_by: Sequence[str], where: SpanFilter) -> list[dict[str, Any]]:
        """Per group: the count of ``metric``'s values and the values (ms, sorted; a fixed random
        ``queries.SAMPLES_CAP`` of them beyond that many), exact from the spans."""
        rows = self._rows(*queries.samples_sql(metric, group_by, where))
        return [
            {"group": {d: row[d] for d in group_by}, "count": row["count"], "values": row["values"]} for row in rows
        ]

    def rollup_percentiles(
        self, metrics: Sequence[str], group_by: Sequence[str], where: SpanFilter
    ) -> list[dict[str, Any]]:
        return self._rows(*queries.rollup_percentiles_sql(metrics, group_by, where))

    def rollup_groups(self, group_by: Sequence[str], where: SpanFilter) -> list[dict[str, Any]]:
        """Each group (of rollup dimensions) that served requests in the window, with its request count."""
        return self._rows(*queries.rollup_groups_sql(group_by, where))

    def timeseries(
        self, metric: str, group_by: Sequence[str], where: SpanFilter, step_seconds: int
    ) -> list[dict[str, Any]]:
        return self._rows(*queries.timeseries_sql(metric, group_by, where, step_seconds))

    def latency_heatmap(self, metric: str, where: SpanFilter, step_seconds: int) -> list[HeatmapColumn]:
        """The distribution of a rollup metric per interval of ``step_seconds`` (``queries.heatmap_sql``)."""
        columns = []
        for row in self._rows(*queries.heatmap_sql(metric, where, step_seconds)):
            exact, count = bool(row["exact"]), row["count"]
            columns.append(HeatmapColumn(row["t"], count, exact, bucket_counts(row["sample"], count, exact)))
        return columns

    def tail_split(self, group_by: Sequence[str], where: SpanFilter) -> dict[tuple, dict[str, dict[str, float]]]:
        """Per group (its values in ``group_by`` order): per percentile name, the traces counted and the mean E2E,
        model, tool and orchestration time of the requests at that percentile of E2E (``queries.tail_split_sql``)."""
        names = {level: name for name, level in queries.TAIL_LEVELS.items()}
        found: dict[tuple, dict[str, dict[str, float]]] = {}
        for row in self._rows(*queries.tail_split_sql(group_by, where)):
            parts = {k: row[k] for k in ("traces", "e2e", "model", "tool", "orchestration")}
            found.setdefault(tuple(row[d] for d in group_by), {})[names[row["level"]]] = parts
        return found

    def dimension_summary(
        self, dimension: str, where: SpanFilter, from_rollups: bool, by_service: bool = False
    ) -> list[dict[str, Any]]:
        """Per value of route, agent, model, tool, release or prompt version (per service and value with
        ``by_service``): counts, errors, rates and percentiles, exact from the spans, or from the rollups
        (percentiles exact up to EXACT_MAX values, t-digest beyond; cost grows with minutes, not spans)."""
        if not from_rollups:
            return self._rows(*queries.dimensions_sql(dimension, where, by_service))
        # All rows: a row limit could drop some metrics of a value the summary lists.
        metrics = queries.dimension_rollup_metrics(dimension)
        keys = ["service", dimension] if by_service else [dimension]
        rows = self._rows(*queries.rollup_percentiles_sql(metrics, keys, where, limit=None))
        return queries.dimension_summary_from_rollups(dimension, rows, by_service)

    def advice_evidence(self, where: SpanFilter, from_rollups: bool = False) -> advice.Evidence:
        """Per route: the aggregates the advisor reads, under keys calls, prefix, server, trace; exact
        from the spans and traces, or from the rollups. The queries run concurrently."""
        builds = _ADVICE_FROM_ROLLUPS if from_rollups else _ADVICE_EXACT
        cache = cache_report.cache_report_sql(["route"], advice.window_only(where), from_rollups)
        rows = self._rows_at_once({**{key: build(where) for key, build in builds.items()}, "cache": cache})
        evidence = advice.evidence_from_rollups(rows.pop("totals"), rows.pop("medians")) if from_rollups else {}
        for report in cache_report.report_from_rows(rows.pop("cache"), ["route"]):
            if report["group"]["route"]:
                evidence.setdefault(report["group"]["route"], {})["cache"] = report
        for key, key_rows in rows.items():
            for row in key_rows:
                evidence.setdefault(row["route"], {})[key] = row
        return evidence

    def cache_report(self, group_by: Sequence[str], where: SpanFilter, from_rollups: bool) -> list[dict[str, Any]]:
        """The prompt cache per group: hit rate, misses by reason and changed part, TTFT and input cost of hits and
        misses (store/cache_report.py); exact from the spans, or from the rollups."""
        rows = self._rows(*cache_report.cache_report_sql(group_by, where, from_rollups))
        return cache_report.report_from_rows(rows, group_by)

    def cache_series(self, group_by: Sequence[str], where: SpanFilter, step_seconds: int) -> list[dict[str, Any]]:
        """The hit rate and misses by reason per interval of ``step_seconds`` (and group), from the rollups."""
        rows = self._rows(*cache_report.hit_rate_series_sql(group_by, where, step_seconds))
        return cache_report.series_from_rows(rows, group_by)

    def side_values(self, dimension: str, where: SpanFilter) -> list[dict[str, Any]]:
        """The releases, models or prompt versions seen in the window, the first seen first (store/compare.py)."""
        return self._rows(*compare.side_values_sql(dimension, where))

    def versions(self, dimensions: Sequence[str], where: SpanFilter) -> list[dict[str, Any]]:
        """Releases, prompt versions or models seen in the window, per service, with when each was first seen
        at all: a value first seen inside the window is a deploy marker (store/compare.py)."""
        return self._rows(*compare.versions_sql(dimensions, where))

    def compare(self, sides: compare.Sides, where: SpanFilter, from_rollups: bool = False) -> dict[str, Any]:
        """Two sides of one dimension (store/compare.py): TTFT, ITL and E2E at p50/p95/p99, the split's parts and
        each tool's duration, each side's figures and the difference B - A with its bootstrap interval; and the
        levers that moved with them. Exact from the spans, or from the rollups (``compare_from_rollups``)."""
        if from_rollups:
            return self.compare_from_rollups(sides, where)
        builds = {"values": compare.metric_values_sql, "split": compare.split_values_sql,
                  "tools": compare.tool_values_sql, "calls": compare.call_lever_values_sql}  # fmt: skip
        rows = self._rows_at_once({key: build(sides, where) for key, build in builds.items()})
        values = {(row["metric"], row["side"]): row["values"] for row in rows["values"]}
        split = {row["side"]: row for row in rows["split"]}
        tools: dict[str, dict[str, list[float]]] = {}
        for row in rows["tools"]:
            tools.setdefault(row["tool"], {})[row["side"]] = row["values"]
        calls = {row["side"]: row for row in rows["calls"]}
        return {
            "metrics": {
                m: percentile_comparison(values.get((m, "a"), []), values.get((m, "b"), [])) for m in compare.COMPARED
            },
            "split": {
                part: mean_comparison(split.get("a", {}).get(part, []), split.get("b", {}).get(part, []))
                for part in compare.SPLIT_PARTS
            },
            "tools": {
                tool: percentile_comparison(by_side.get("a", []), by_side.get("b", []))
                for tool, by_side in sorted(tools.items())
            },
            "levers": _levers(calls, split),
        }

    def compare_from_rollups(self, sides: compare.Sides, where: SpanFilter) -> dict[str, Any]:
        """``compare`` from what the rollups keep (store/compare.py): both sides' values where they keep every one
        (bootstrapped, as from the spans), else their digests' quantiles (``difference.compare_summaries``); the
        levers from hourly sums, resampled by the hour. What the rollups do not keep for this dimension is left
        out (``compare.NOT_IN_ROLLUPS``)."""
        rows = self._rows_at_once({"distributions": compare.rollup_distributions_sql(sides, where),
                                   "levers": compare.rollup_lever_sums_sql(sides, where)})  # fmt: skip
        found: dict[tuple[str, str, str], Summary] = {}
        for row in rows["distributions"]:
            found[(row["metric"], row["tool"], row["side"])] = Summary(
                row["count"], row["total"], bool(row["exact"]), row["values"]
            )
        left_out = compare.NOT_IN_ROLLUPS[sides.dimension]

        def of(metric: str, statistics: Sequence[str], tool: str = "") -> dict[str, Any]:
            a, b = found.get((metric, tool, "a")), found.get((metric, tool, "b"))
            return compare_summaries(a, b, statistics, {**DEFAULT_MIN_SAMPLES, "mean": MEAN_MIN_SAMPLES})

        tools = sorted({tool for metric, tool, _ in found if metric == "tool"})
        return {
            "metrics": {m: of(m, PERCENTILES) for m in compare.COMPARED if m not in left_out},
            "split": {} if "split" in left_out else {
                part: of(metric, ("mean",)) for part, metric in compare.ROLLUP_SPLIT_METRICS.items()
            },
            "tools": {} if "tools" in left_out else {tool: of("tool", PERCENTILES, tool) for tool in tools},
            "levers": _rollup_levers(rows["levers"], left_out),
            "not_in_rollups": list(left_out),
        }  # fmt: skip
