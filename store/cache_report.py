"""The prompt cache per group (route, model, ...) over a window: hit rate, misses by reason and by changed part
(with the byte offsets), TTFT and input cost of hits and misses. Exact from the spans, or from the rollups with
the same metrics (store/cache_misses.py), so a 30-day answer costs its minutes, not its spans.

``cache_report_sql`` gives rows of (group..., metric, count, sum, mean, q); ``report_from_rows`` turns them into
one dict per group, the API's ``CacheGroup``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentlat.store import cache_misses
from agentlat.store.backends import Params
from agentlat.store.queries import (
    DIMENSIONS,
    SpanFilter,
    largest_tier,
    rollup_percentiles_sql,
    rollup_spans,
    timeseries_rows,
)
from agentlat.store.rollup_sql import (
    ADVICE_SPAN_METRICS,
    CACHE_METRICS,
    CLIENT_MODEL,
    COUNTER_METRICS,
    FINAL_SETTINGS,
    MISS_PAIRS,
    ROLLUP_LEVELS,
    metric_pairs,
)

_BORROWED = ("advice_cache_reported", "advice_uncached", "advice_ttft_cached", "advice_ttft_uncached")
_FIXED: dict[str, str] = {
    **{m: ADVICE_SPAN_METRICS[m] for m in _BORROWED},
    **{m: COUNTER_METRICS[m] for m in ("tokens_cache_read", "tokens_cache_input")},
    **CACHE_METRICS,
}
REPORT_METRICS = (*_FIXED, *cache_misses.MISS_METRICS)


def cache_report_sql(group_by: Sequence[str], where: SpanFilter, from_rollups: bool) -> tuple[str, Params]:
    """Per group and metric of ``REPORT_METRICS``: count, sum, mean and p50/p95/p99."""
    if from_rollups:
        return rollup_percentiles_sql(REPORT_METRICS, group_by, where, limit=None)
    columns = "".join(f"{DIMENSIONS[d]} AS {d}, " for d in group_by)
    condition = " AND ".join([where.window_clause(), *where.equality_tests(), CLIENT_MODEL])
    sql = f"""
        SELECT {columns}m.1 AS metric, count() AS count, sum(m.2) AS sum, sum / count AS mean,
               quantilesExactInclusive({ROLLUP_LEVELS})(assumeNotNull(m.2)) AS q
        FROM otel_traces FINAL
        ARRAY JOIN arrayFilter(x -> isNotNull(x.2), [{metric_pairs(_FIXED)}, {MISS_PAIRS}]) AS m
        WHERE {condition}
        GROUP BY {", ".join([*group_by, "metric"])}
        {FINAL_SETTINGS}
    """
    return sql, where.params()


def report_from_rows(rows: Sequence[dict[str, Any]], group_by: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per group that has calls reporting cache tokens, the most calls first."""
    by_group: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_group.setdefault(tuple(row[d] for d in group_by), {})[row["metric"]] = row
    groups = [_group(dict(zip(group_by, key, strict=True)), found) for key, found in by_group.items()]
    return sorted((g for g in groups if g["calls"]), key=lambda g: (-g["calls"], *g["group"].values()))


def _group(group: dict[str, str], found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def count(metric: str) -> int:
        return int(found[metric]["count"]) if metric in found else 0

    def total(metric: str) -> float:
        return float(found[metric]["sum"]) if metric in found else 0.0

    def mean(metric: str) -> float | None:
        return found[metric]["mean"] if count(metric) else None

    calls, misses = count("advice_cache_reported"), count("advice_uncached")
    parts = {
        p: {
            "misses": count(f"cache_miss_changed_{p}"),
            "offset_p50": _level(found, f"cache_offset_{p}", 0),
            "offset_p95": _level(found, f"cache_offset_{p}", 1),
        }
        for p in cache_misses.PARTS
        if count(f"cache_miss_changed_{p}")
    }
    input_tokens = total("tokens_cache_input")
    return {
        "group": group,
        "calls": calls,
        "hits": calls - misses,
        "misses": misses,
        "hit_rate": total("tokens_cache_read") / input_tokens if input_tokens else None,
        "ttft_hit_ms": mean("advice_ttft_cached"),
        "ttft_miss_ms": mean("advice_ttft_uncached"),
        "misses_by_reason": misses_by_reason(count),
        "changed_parts": parts,
        "input_tokens_hit": mean("cache_input_hit"),
        "input_tokens_miss": mean("cache_input_miss"),
        "input_cost_hit": mean("cache_cost_hit"),
        "input_cost_miss": mean("cache_cost_miss"),
        "cache_write_tokens": int(total("tokens_cache_write")),
    }


def misses_by_reason(count: Callable[[str], int]) -> dict[str, int]:
    """The misses of each reason, a changed prefix's summed over its parts; ``count(metric)``: its count."""
    reasons = {r: count(f"cache_miss_{r}") for r in cache_misses.REASONS}
    reasons["prefix_changed"] = sum(count(f"cache_miss_changed_{p}") for p in cache_misses.PARTS)
    return {r: n for r, n in reasons.items() if n}


def _level(found: dict[str, dict[str, Any]], metric: str, index: int) -> float | None:
    row = found.get(metric)
    return row["q"][index] if row and row["count"] and row.get("q") else None


HIT_RATE_SERIES = ("tokens_cache_read", "tokens_cache_input", "advice_cache_reported", "advice_uncached")


def hit_rate_series_sql(group_by: Sequence[str], where: SpanFilter, step_seconds: int) -> tuple[str, Params]:
    """Per interval of ``step_seconds`` (and group): the sums behind the hit rate, calls and misses, from the
    rollups; misses by reason beside them."""
    counters = [m for m in cache_misses.MISS_METRICS if m not in cache_misses.DIGESTED]
    sql, params = timeseries_rows([*HIT_RATE_SERIES, *counters], group_by, where, step_seconds)
    return sql, params | rollup_spans(where, largest=largest_tier(step_seconds))


def series_from_rows(rows: Sequence[dict[str, Any]], group_by: Sequence[str]) -> list[dict[str, Any]]:
    """One point per interval and group: hit rate, calls, misses, and misses by reason (prefix_changed summed)."""
    points: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = (row["t"], *(row[d] for d in group_by))
        point = points.setdefault(
            key, {"t": row["t"], **({"group": {d: row[d] for d in group_by}} if group_by else {}), "sums": {}}
        )
        point["sums"][row["metric"]] = (row["count"], row["sum"])
    return [_point(p) for _, p in sorted(points.items())]


def _point(point: dict[str, Any]) -> dict[str, Any]:
    sums = point.pop("sums")
    read, tokens = sums.get("tokens_cache_read", (0, 0.0))[1], sums.get("tokens_cache_input", (0, 0.0))[1]
    return {
        **point,
        "calls": sums.get("advice_cache_reported", (0, 0))[0],
        "misses": sums.get("advice_uncached", (0, 0))[0],
        "hit_rate": read / tokens if tokens else None,
        "misses_by_reason": misses_by_reason(lambda metric: sums.get(metric, (0, 0))[0]),
    }
