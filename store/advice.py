"""Evidence the advisor reads: per-route aggregates over a window, exact from the spans and analysed
traces, or from the rollups, whose cost grows with the window's minutes instead of its spans.

Both forms give each route the same facts under the same keys: ``calls`` (client model calls),
``prefix`` (cache misses on a repeated prompt prefix), ``cache`` (the prompt cache's misses by reason,
store/cache_report.py), ``server`` (server-side phases, always read from
the spans: few traces carry them) and ``trace`` (per-trace aggregates). From rollups, medians are
exact for up to EXACT_MAX values and t-digest estimates beyond; counts and sums are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentlat.store import queries
from agentlat.store.backends import Params
from agentlat.store.queries import FINAL_SETTINGS, MINUTE_S, TRACE_WINDOW_SETTINGS, SpanFilter, rollup_spans
from agentlat.store.rollup_sql import (
    ADVICE_CALL_METRICS,
    ADVICE_SPAN_METRICS,
    ADVICE_TRACE_METRICS,
    CLIENT_MODEL,
    LONG_PLAIN,
    PREFIX_HASH,
)

Evidence = dict[str, dict[str, dict[str, Any]]]  # route -> kind of fact -> the facts


def model_calls_sql(where: SpanFilter) -> tuple[str, Params]:
    """Client model calls per route: prompt cache, speculative decoding, prefill and stalls."""
    sql = f"""
        SELECT Route AS route,
            count() AS calls,
            sumIf(CacheReadTokens, InputTokens > 0) AS cache_read_tokens,
            sumIf(InputTokens, CacheReadTokens IS NOT NULL) AS cache_input_tokens,
            countIf(CacheReadTokens IS NOT NULL) AS cache_reported_calls,
            countIf(CacheReadTokens = 0) AS uncached_calls,
            avgIf(TtftMs, CacheReadTokens > 0) AS ttft_cached_ms,
            avgIf(TtftMs, CacheReadTokens = 0) AS ttft_uncached_ms,
            avg(TtftMs) AS ttft_ms,
            quantileExactInclusive(0.5)(InputTokens) AS input_tokens_p50,
            quantileExactInclusive(0.5)(TtftMs) AS ttft_p50_ms,
            countIf({LONG_PLAIN}) AS long_plain_calls,
            avgIf(DecodeMs, {LONG_PLAIN}) AS long_plain_decode_ms,
            avgIf(OutputTokens, {LONG_PLAIN}) AS long_plain_tokens,
            countIf(DecodeMs IS NOT NULL) AS streamed_calls,
            countIf(StallCount > 0) AS stalled_calls,
            avgIf(ItlMaxMs - ItlP50Ms, StallCount > 0) AS stall_excess_ms
        FROM otel_traces FINAL
        WHERE {where.window_clause()} AND {CLIENT_MODEL} AND Route != ''
        GROUP BY Route
        {FINAL_SETTINGS}
    """
    return sql, where.params()


def prefix_misses_sql(where: SpanFilter) -> tuple[str, Params]:
    """Cache misses on a prompt prefix the same route and model already sent in the window."""
    sql = f"""
        SELECT route, sum(misses) AS prefix_misses, count() AS prefixes
        FROM (
            SELECT Route AS route, greatest(countIf(CacheReadTokens = 0) - 1, 0) AS misses
            FROM otel_traces FINAL
            WHERE {where.window_clause()} AND {CLIENT_MODEL} AND Route != ''
              AND {PREFIX_HASH} != ''
            GROUP BY Route, Model, {PREFIX_HASH}
            HAVING count() >= 2
        )
        GROUP BY route
        {FINAL_SETTINGS}
    """
    return sql, where.params()


def server_phases_sql(where: SpanFilter) -> tuple[str, Params]:
    """Server-side queue and prefill (vLLM/SGLang spans), attributed to the route their trace's
    client spans carry. Only traces with server spans are read beyond the first pass."""
    server = f"SELECT TraceId FROM otel_traces WHERE {where.window_clause()} AND IsServerSpan = 1"
    sql = f"""
        SELECT r.route AS route, avg(s.QueueMs) AS queue_ms, avg(s.PrefillMs) AS prefill_ms,
               avg(s.TtftMs) AS server_ttft_ms, count() AS server_calls
        FROM otel_traces AS s FINAL
        INNER JOIN (
            SELECT TraceId, any(Route) AS route FROM otel_traces
            WHERE {where.window_clause()} AND Route != '' AND TraceId IN ({server})
            GROUP BY TraceId
        ) AS r ON s.TraceId = r.TraceId
        WHERE {where.window_clause()} AND s.IsServerSpan = 1
        GROUP BY r.route
        {FINAL_SETTINGS}
    """
    return sql, where.params()


def traces_sql(where: SpanFilter) -> tuple[str, Params]:
    """Per-route trace aggregates: parallelisable tools, streamed tool-call dispatch and prefetch outcomes.
    Read as ``TRACE_WINDOW_SETTINGS`` says, so a day's read does not merge the whole table."""
    sql = f"""
        SELECT Route AS route, count() AS traces, avg(E2eMs) AS e2e_ms, avg(ModelCalls) AS model_calls,
               avg(ParallelSavingMs) AS parallel_saving_ms, countIf(ParallelSavingMs > 0) AS parallel_traces,
               sum(PrefetchHits) AS prefetch_hits, sum(PrefetchMisses) AS prefetch_misses,
               sum(PrefetchSavedMs) AS prefetch_saved_ms, sum(PrefetchWastedMs) AS prefetch_wasted_ms,
               avg(DispatchSavingMs) AS dispatch_saving_ms, countIf(DispatchSavingMs > 0) AS dispatch_traces,
               sum(length(DispatchDelaysMs)) AS dispatch_calls, sum(DispatchStreamedCalls) AS dispatch_streamed_calls,
               if(dispatch_calls > 0, quantileExactInclusiveArray(0.5)(DispatchDelaysMs), NULL) AS dispatch_delay_p50_ms
        FROM agentlat_traces FINAL
        WHERE {where.window_clause("Start")} AND Route != ''
        GROUP BY Route
        {TRACE_WINDOW_SETTINGS}
    """
    return sql, where.params()


# --- from rollups -----------------------------------------------------------------------
ROLLUP_TOTALS = (
    *("model", "ttft", "decode", "tokens_cache_read", "tokens_cache_input", "e2e"),
    *ADVICE_SPAN_METRICS,
    *ADVICE_TRACE_METRICS,
    *ADVICE_CALL_METRICS,
)
ROLLUP_MEDIANS = ("ttft", "advice_input_tokens", "advice_dispatch_delay")


def rollup_totals_sql(where: SpanFilter) -> tuple[str, Params]:
    """Per route and metric of ``ROLLUP_TOTALS``: count, sum and mean."""
    return queries.rollup_totals_sql(ROLLUP_TOTALS, ["route"], window_only(where))


def rollup_medians_sql(where: SpanFilter) -> tuple[str, Params]:
    """Per route and metric of ``ROLLUP_MEDIANS``: digest quantiles (merging digests only where needed)."""
    return queries.rollup_percentiles_sql(ROLLUP_MEDIANS, ["route"], window_only(where), limit=None)


def rollup_prefix_misses_sql(where: SpanFilter) -> tuple[str, Params]:
    """``prefix_misses_sql`` from the per-minute prefix counts of the window's minutes."""
    sql = f"""
        SELECT route, sum(misses) AS prefix_misses, count() AS prefixes
        FROM (
            SELECT Route AS route, greatest(sum(Misses) - 1, 0) AS misses
            FROM agentlat_prefix_1m FINAL
            WHERE ProjectId = {{project:String}} AND Route != ''
              AND Minute >= toDateTime({{minute_first:UInt32}}) AND Minute < toDateTime({{minute_last:UInt32}})
            GROUP BY Route, Model, PrefixHash
            HAVING sum(Calls) >= 2
        )
        GROUP BY route
        {FINAL_SETTINGS}
    """
    return sql, {**where.params(), **rollup_spans(where, largest=MINUTE_S)}


def evidence_from_rollups(totals: Sequence[dict[str, Any]], medians: Sequence[dict[str, Any]]) -> Evidence:
    """The ``calls`` and ``trace`` facts per route, from ``rollup_totals_sql`` and ``rollup_medians_sql`` rows."""
    by_route: dict[str, dict[str, dict[str, Any]]] = {}
    for row in totals:
        if row["route"]:
            by_route.setdefault(row["route"], {})[row["metric"]] = row
    for row in medians:  # read concurrently: a minute rolled up in between may add a row the totals lack
        if (total := by_route.get(row["route"], {}).get(row["metric"])) is not None:
            total["q"] = row["q"]
    evidence: Evidence = {}
    for route, found in by_route.items():
        facts = _RollupFacts(found)
        evidence[route] = {}
        if "model" in found:
            evidence[route]["calls"] = facts.calls(route)
        if "e2e" in found:
            evidence[route]["trace"] = facts.trace(route)
    return evidence


class _RollupFacts:
    """One route's rollup rows by metric, read as the exact queries' columns."""

    def __init__(self, found: dict[str, dict[str, Any]]) -> None:
        self.found = found

    def count(self, metric: str) -> int:
        return int(self.found[metric]["count"]) if metric in self.found else 0

    def total(self, metric: str) -> float:
        return self.found[metric]["sum"] if metric in self.found else 0.0

    def mean(self, metric: str) -> float | None:
        return self.found[metric]["mean"] if metric in self.found else None

    def median(self, metric: str) -> float | None:
        return self.found[metric]["q"][0] if "q" in self.found.get(metric, {}) else None

    def calls(self, route: str) -> dict[str, Any]:
        """The columns of ``model_calls_sql``."""
        return {
            "route": route,
            "calls": self.count("model"),
            "cache_read_tokens": self.total("tokens_cache_read"),
            "cache_input_tokens": self.total("tokens_cache_input"),
            "cache_reported_calls": self.count("advice_cache_reported"),
            "uncached_calls": self.count("advice_uncached"),
            "ttft_cached_ms": self.mean("advice_ttft_cached"),
            "ttft_uncached_ms": self.mean("advice_ttft_uncached"),
            "ttft_ms": self.mean("ttft"),
            "input_tokens_p50": self.median("advice_input_tokens"),
            "ttft_p50_ms": self.median("ttft"),
            "long_plain_calls": self.count("advice_long_plain_tokens"),
            "long_plain_decode_ms": self.mean("advice_long_plain_decode"),
            "long_plain_tokens": self.mean("advice_long_plain_tokens"),
            "streamed_calls": self.count("decode"),
            "stalled_calls": self.count("advice_stalled"),
            "stall_excess_ms": self.mean("advice_stall_excess"),
        }

    def trace(self, route: str) -> dict[str, Any]:
        """The columns of ``traces_sql``."""
        return {
            "route": route,
            "traces": self.count("e2e"),
            "e2e_ms": self.mean("e2e"),
            "model_calls": self.mean("advice_model_calls"),
            "parallel_saving_ms": self.mean("advice_parallel_saving"),
            "parallel_traces": self.count("advice_parallel_traces"),
            "prefetch_hits": int(self.total("advice_prefetch_hits")),
            "prefetch_misses": int(self.total("advice_prefetch_misses")),
            "prefetch_saved_ms": self.total("advice_prefetch_saved"),
            "prefetch_wasted_ms": self.total("advice_prefetch_wasted"),
            "dispatch_saving_ms": self.mean("advice_dispatch_saving"),
            "dispatch_traces": self.count("advice_dispatch_traces"),
            "dispatch_calls": self.count("advice_dispatch_delay"),
            "dispatch_streamed_calls": int(self.total("advice_dispatch_streamed")),
            "dispatch_delay_p50_ms": self.median("advice_dispatch_delay"),
        }


def window_only(where: SpanFilter) -> SpanFilter:
    """Advice covers a project's whole window, as the exact queries do: no equality filters."""
    return SpanFilter(where.project, where.start_ns, where.end_ns)
