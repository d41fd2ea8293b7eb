"""What the rollup tables hold, and the SQL that fills them: shared by the migrations' backfills and by
the collector's recomputation of the minutes that received data (store/analysis.py).

Each rollup row is one metric of one group (project, service, route, agent, model, tool) in one minute
or hour: a count, a sum and a t-digest of the values.
"""

from __future__ import annotations

ROLLUP_LEVELS = "0.5, 0.95, 0.99"

_CLIENT_MODEL = "Role = 'model' AND IsServerSpan = 0"
_SERVER_MODEL = "Role = 'model' AND IsServerSpan = 1"

# Latencies (ms) of spans, and of analysed traces from agentlat_traces.
SPAN_ROLLUP_METRICS = {
    "ttft": f"if({_CLIENT_MODEL}, TtftMs, NULL)",
    "itl": f"if({_CLIENT_MODEL}, ItlMeanMs, NULL)",
    "decode": f"if({_CLIENT_MODEL}, DecodeMs, NULL)",
    "model": f"if({_CLIENT_MODEL}, Duration / 1e6, NULL)",
    "tool": "if(Role = 'tool', Duration / 1e6, NULL)",
    "agent": "if(Role = 'agent', Duration / 1e6, NULL)",
}
TRACE_ROLLUP_METRICS = {
    "e2e": "E2eMs",
    "split_model": "ModelMs",
    "split_tool": "ToolMs",
    "split_orchestration": "OrchestrationMs",
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
    "n_error_model": f"if({_CLIENT_MODEL} AND StatusCode = 'Error', 0, NULL)",
    "n_error_tool": "if(Role = 'tool' AND StatusCode = 'Error', 0, NULL)",
    **{
        f"tokens_{name}{suffix}": _tokens(value, base, calls)
        for suffix, calls in (("", _CLIENT_MODEL), ("_server", _SERVER_MODEL))
        for name, value, base in (
            ("cache_read", "CacheReadTokens", "InputTokens"),
            ("cache_input", "InputTokens", "CacheReadTokens IS NOT NULL AND InputTokens"),
            ("spec_accepted", "SpecAcceptedTokens", "SpecProposedTokens"),
            ("spec_proposed", "SpecProposedTokens", "SpecAcceptedTokens IS NOT NULL AND SpecProposedTokens"),
        )
    },
}


def _pairs(metrics: dict[str, str]) -> str:
    return ", ".join(f"('{name}', toNullable(toFloat64({expr})))" for name, expr in metrics.items())


def minutes_from_raw(spans_where: str, traces_where: str, version: str) -> str:
    """INSERT of the minute rollups of the spans and analysed traces matching the two conditions."""
    span_metrics = _pairs({**SPAN_ROLLUP_METRICS, **COUNTER_METRICS})
    counters = ", ".join(f"'{name}'" for name in COUNTER_METRICS)
    return f"""
INSERT INTO agentlat_rollup_1m
SELECT ProjectId, metric, minute, ServiceName, Route, Agent, Model, Tool, count(), sum(value),
       quantilesTDigestState({ROLLUP_LEVELS})(if(metric IN ({counters}), 0, value)), {version}
FROM (
    SELECT ProjectId, m.1 AS metric, toStartOfMinute(Timestamp) AS minute,
           ServiceName, Route, Agent, Model, Tool, assumeNotNull(m.2) AS value
    FROM otel_traces FINAL
    ARRAY JOIN arrayFilter(x -> isNotNull(x.2), [{span_metrics}]) AS m
    WHERE {spans_where}
    UNION ALL
    SELECT ProjectId, m.1 AS metric, toStartOfMinute(Start) AS minute,
           ServiceName, Route, Agent, '' AS Model, '' AS Tool, assumeNotNull(m.2) AS value
    FROM agentlat_traces FINAL
    ARRAY JOIN [{_pairs(TRACE_ROLLUP_METRICS)}] AS m
    WHERE {traces_where}
)
GROUP BY ProjectId, metric, minute, ServiceName, Route, Agent, Model, Tool
"""


def hours_from_minutes(where: str) -> str:
    """INSERT of the hourly rollups merged from the minute rows matching ``where``."""
    return f"""
INSERT INTO agentlat_rollup_1h
SELECT ProjectId, Metric, toStartOfHour(Minute) AS Hour, ServiceName, Route, Agent, Model, Tool,
       sum(Count), sum(Sum), quantilesTDigestMergeState({ROLLUP_LEVELS})(Digest), max(Version)
FROM agentlat_rollup_1m FINAL
WHERE {where}
GROUP BY ProjectId, Metric, Hour, ServiceName, Route, Agent, Model, Tool
"""
