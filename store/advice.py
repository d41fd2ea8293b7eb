"""Evidence the advisor reads: per-route aggregates over a window, from spans and traces."""

from __future__ import annotations

from agentlat.store.backends import Params
from agentlat.store.queries import FINAL_SETTINGS, SpanFilter

_CLIENT_MODEL = "Role = 'model' AND IsServerSpan = 0"
LONG_OUTPUT_TOKENS = 400
_LONG_PLAIN = f"OutputTokens >= {LONG_OUTPUT_TOKENS} AND SpecProposedTokens IS NULL"


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
            countIf({_LONG_PLAIN}) AS long_plain_calls,
            avgIf(DecodeMs, {_LONG_PLAIN}) AS long_plain_decode_ms,
            avgIf(OutputTokens, {_LONG_PLAIN}) AS long_plain_tokens,
            countIf(DecodeMs IS NOT NULL) AS streamed_calls,
            countIf(StallCount > 0) AS stalled_calls,
            avgIf(ItlMaxMs - ItlP50Ms, StallCount > 0) AS stall_excess_ms
        FROM otel_traces FINAL
        WHERE {where.window_clause()} AND {_CLIENT_MODEL} AND Route != ''
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
            WHERE {where.window_clause()} AND {_CLIENT_MODEL} AND Route != ''
              AND SpanAttributes['agentlat.prompt.prefix_hash'] != ''
            GROUP BY Route, Model, SpanAttributes['agentlat.prompt.prefix_hash']
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
    """Per-route trace aggregates: parallelisable tools and prefetch outcomes. The window filters rows
    before FINAL picks each trace's newest analysis, so reading a day does not merge the whole table
    (a re-analysis that moved a trace's start out of the window can leave its older row counted)."""
    sql = f"""
        SELECT Route AS route, count() AS traces, avg(E2eMs) AS e2e_ms, avg(ModelCalls) AS model_calls,
               avg(ParallelSavingMs) AS parallel_saving_ms, countIf(ParallelSavingMs > 0) AS parallel_traces,
               sum(PrefetchHits) AS prefetch_hits, sum(PrefetchMisses) AS prefetch_misses,
               sum(PrefetchSavedMs) AS prefetch_saved_ms, sum(PrefetchWastedMs) AS prefetch_wasted_ms
        FROM agentlat_traces FINAL
        WHERE {where.window_clause("Start")} AND Route != ''
        GROUP BY Route
        SETTINGS optimize_move_to_prewhere_if_final = 1
    """
    return sql, where.params()
