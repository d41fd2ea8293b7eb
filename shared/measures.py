"""What budgets and alert rules judge, named once: latencies at percentiles, and ratios against a floor.

A percentile from too few samples says too little to pass or fail (REFERENCE.md §5: about 30 for p50,
200 for p95, 1,000 for p99). A ratio, the prompt cache's hit rate (cache-read input tokens over input
tokens), is counted in model calls that reported cache tokens; none is no hit rate, never 0 %.
"""

LATENCIES = ("ttft", "itl", "e2e", "model", "tool")  # what budgets may hold under a ceiling (query API names)
PERCENTILES = ("p50", "p95", "p99")
DEFAULT_MIN_SAMPLES = {"p50": 30, "p95": 200, "p99": 1000}
RATIO_METRICS = ("cache_hit_rate",)  # judged against a floor (at or above it passes), not a ceiling
RATIO_MIN_SAMPLES = 20  # model calls reporting cache tokens a hit rate needs by default
RATIO_SAMPLES = "model calls reporting cache tokens"  # what a ratio's count counts (a latency's: samples)
METRIC_NAMES = {
    "e2e": "E2E",
    "ttft": "TTFT",
    "itl": "ITL",
    "decode": "decode time",
    "model": "model time",
    "tool": "tool time",
    "agent": "agent run time",
    "cache_hit_rate": "cache hit rate",
}


def percent(value: float | None, against: float | None = None) -> str:
    """A share to 0.1 % without a trailing .0 (0.8 -> '80%', 0.4567 -> '45.7%', None -> '—'), to more
    digits where 0.1 % would print it as ``against``, a different share it is compared with (0.79996
    against 0.8 -> '79.996%', never '80%')."""
    if value is None:
        return "—"
    for digits in (1, 2, 3, 4):
        text = f"{value * 100:.{digits}f}".rstrip("0").rstrip(".") + "%"
        if against is None or value == against or text != percent(against):
            break
    return text


def ms(value: float | None) -> str:
    """To 0.1 ms without a trailing .0: 800 -> '800 ms', 1234.56 -> '1,234.6 ms', None -> '—'."""
    if value is None:
        return "—"
    return f"{f'{value:,.1f}'.removesuffix('.0')} ms"


def signed_ms(value: float | None) -> str:
    """A difference with its sign: '+300 ms', '-12.5 ms', '±0 ms', None -> '—'."""
    if value is None:
        return "—"
    return ("+" if value > 0 else "-" if value < 0 else "±") + ms(abs(value))


def over_budget(actual_ms: float, budget_ms: float) -> bool:
    """A latency's breach: over its budget (at or under it passes)."""
    return actual_ms > budget_ms


def misses(metric: str, actual: float, limit: float) -> bool:
    """A breach of ``metric``'s budget: a latency over it, a ratio (the hit rate) under its minimum."""
    return actual < limit if metric in RATIO_METRICS else over_budget(actual, limit)
