"""Why a client model call missed the prompt cache (issue 39), as SQL over the stored spans, and the cache
figures the API, the dashboard and the advisor read: exact from the spans or from the rollups, the same
metrics either way (``cache_metrics`` and ``miss_pairs`` are rollup metrics too, store/rollup_sql.py).

A call missed when it reports cache-read tokens and they are 0. Its reason, first that applies:

1. ``prefix_changed`` (with its part: model, tools, system, messages): the provider's own diagnosis says
   which part differs from the request it was compared with (Anthropic ``cache_miss_reason``, OpenAI
   ``prompt_cache_diagnostics``);
2. ``settings_changed``: the provider says a request setting changed (OpenAI: prompt_cache_key, text
   format, reasoning effort, verbosity, service tier; context compaction);
3. ``not_requested``: an Anthropic request with no cache breakpoint (Anthropic caches only what a request marks);
4. ``below_minimum``: fewer input tokens than the provider's minimum cacheable prompt for the model (as the
   SDK recorded it, else from ``semconv.CACHE_MIN_TOKENS_BY_MODEL``: known for Anthropic, OpenAI and Gemini only);
5. ``unknown``: no prompt shape from agentlat's SDK (another instrumentation): nothing to judge by;
6. ``cold``: the first request of its route this process sent (nothing to read from);
7. ``expired``: the route's previous request to the model was sent longer ago than the cache lives (the
   request's stated lifetime, else the provider's default below);
8. ``prefix_changed``: the SDK found where the prompt first differs from the route's previous request to the
   model (the tools, the system prompt or an earlier message, and the byte offset in that part as sent), or
   that the route's earlier requests all went to other models;
9. ``unknown``: the same prefix as a recent request, missed anyway (evicted, or served by another cache).
"""

from __future__ import annotations

from agentlat import semconv as sc

# How long a cache entry lives after its last use when the request does not say (seconds): Anthropic's 5 minutes;
# OpenAI's in-memory retention, at least 5 minutes (an organisation with 24 h retention says so through the SDK's
# ``Options.prompt_cache_ttl_s``); Gemini's implicit cache, undocumented, taken as the same.
DEFAULT_TTL_S = 300
# What an input token costs read from the cache and written to it, as a share of an uncached one (list prices,
# 2026-12): the input cost of hits and misses in full-price input tokens.
COST_WEIGHTS: dict[str, tuple[float, float]] = {"anthropic": (0.1, 1.25), "openai": (0.1, 1.0)}
DEFAULT_COST_WEIGHTS = (0.25, 1.0)  # Gemini's implicit cache, and any other provider

REASONS = ("cold", "expired", "below_minimum", "not_requested", "settings_changed", "unknown")
PARTS = ("model", "tools", "system", "messages")
OFFSET_PARTS = ("tools", "system", "messages")  # the parts the SDK gives a byte offset in


def _attr(key: str) -> str:
    return f"SpanAttributes['{key}']"


def _sql_strings(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


MISS = "CacheReadTokens = 0"
HIT = "CacheReadTokens > 0"
_PROVIDER = _attr(sc.CACHE_PROVIDER_REASON)
_SDK_PART = f"multiIf({_attr(sc.PROMPT_CHANGED_PART)} LIKE 'message %', 'messages', {_attr(sc.PROMPT_CHANGED_PART)})"
# The part the provider's diagnosis names (OpenAI's ``input_changed`` covers instructions and input: the SDK's part
# when it names one of those, else the messages).
_PROVIDER_PART = (
    f"multiIf({_PROVIDER} = 'model_changed', 'model', {_PROVIDER} = 'tools_changed', 'tools',"
    f" {_PROVIDER} = 'system_changed', 'system', {_PROVIDER} = 'messages_changed', 'messages',"
    f" {_PROVIDER} = 'input_changed', if({_SDK_PART} IN ('system', 'messages'), {_SDK_PART}, 'messages'), '')"
)
_SETTINGS = (
    "prompt_cache_key_changed",
    "text_format_changed",
    "reasoning_effort_changed",
    "verbosity_changed",
    "context_compacted",
    "service_tier_changed",
)


def _min_tokens() -> str:
    """The minimum the SDK recorded on the span, else the same table by the span's provider and model."""
    cases = [
        f"Provider = '{provider}'" + (f" AND match(Model, '{model}')" if model else "") + f", {tokens}"
        for provider, model, tokens in sc.CACHE_MIN_TOKENS_BY_MODEL
    ]
    return f"coalesce(toUInt32OrNull({_attr(sc.CACHE_MIN_TOKENS)}), multiIf({', '.join(cases)}, NULL))"


_TTL_S = f"coalesce(toFloat64OrNull({_attr(sc.CACHE_TTL_S)}), {DEFAULT_TTL_S})"
_SINCE_PREVIOUS = _attr(sc.PROMPT_SINCE_PREVIOUS_S)

REASON = (
    f"multiIf({_PROVIDER_PART} != '', 'prefix_changed',"
    f" {_PROVIDER} IN {_sql_strings(_SETTINGS)}, 'settings_changed',"
    f" Provider = 'anthropic' AND {_attr(sc.CACHE_BREAKPOINTS)} = '0', 'not_requested',"
    f" InputTokens < {_min_tokens()}, 'below_minimum',"
    f" {_attr(sc.PROMPT_PART_HASHES)} = '', 'unknown',"
    f" {_SINCE_PREVIOUS} = '', 'cold',"
    f" toFloat64OrZero({_SINCE_PREVIOUS}) > {_TTL_S}, 'expired',"
    f" {_attr(sc.PROMPT_CHANGED_PART)} != '', 'prefix_changed',"
    " 'unknown')"
)
# The part a prefix_changed miss differs in, and the byte offset in it where the SDK found one.
PART = f"if({REASON} = 'prefix_changed', if({_PROVIDER_PART} != '', {_PROVIDER_PART}, {_SDK_PART}), '')"
OFFSET = f"if({PART} = {_SDK_PART} AND {PART} != 'model', toUInt32OrNull({_attr(sc.PROMPT_CHANGED_OFFSET)}), NULL)"


def _weights(index: int) -> str:
    cases = ", ".join(f"Provider = '{p}', {w[index]}" for p, w in COST_WEIGHTS.items())
    return f"multiIf({cases}, {DEFAULT_COST_WEIGHTS[index]})"


_READ, _WRITTEN = "ifNull(CacheReadTokens, 0)", "ifNull(CacheCreationTokens, 0)"
# A call's input cost in full-price input tokens: uncached ones at 1, read ones and written ones at their weights.
INPUT_COST = (
    f"(greatest(toFloat64(InputTokens) - {_READ} - {_WRITTEN}, 0)"
    f" + {_READ} * {_weights(0)} + {_WRITTEN} * {_weights(1)})"
)


def cache_metrics(client_model: str) -> dict[str, str]:
    """The prompt cache's rollup metrics with a fixed name, over client model calls (``client_model``,
    rollup_sql.CLIENT_MODEL) that report cache-read tokens: the input tokens and input cost of hits and misses, and
    the tokens written."""
    reported = f"{client_model} AND CacheReadTokens IS NOT NULL"
    metrics = {}
    for outcome, test in (("hit", HIT), ("miss", MISS)):
        metrics[f"cache_input_{outcome}"] = f"if({reported} AND {test}, InputTokens, NULL)"
        metrics[f"cache_cost_{outcome}"] = f"if({reported} AND {test} AND InputTokens IS NOT NULL, {INPUT_COST}, NULL)"
    metrics["tokens_cache_write"] = f"if({reported}, CacheCreationTokens, NULL)"
    return metrics


# The metrics a miss counts in, named after its reason (a changed prefix after its part: cache_miss_changed_system),
# and the byte offset of a changed part (cache_offset_system).
MISS_METRICS = (
    *(f"cache_miss_{r}" for r in REASONS),
    *(f"cache_miss_changed_{p}" for p in PARTS),
    *(f"cache_offset_{p}" for p in OFFSET_PARTS),
)
DIGESTED = tuple(f"cache_offset_{p}" for p in OFFSET_PARTS)  # the others are counters and sums


def miss_pairs(client_model: str) -> str:
    """SQL of two (metric, value) pairs per span for ``MISS_METRICS``, each named by the span's own reason, so the
    reason is worked out once a span however many reasons there are: the miss's counter (value 0) and its part's
    offset (NULL where there is none, as on every span that did not miss)."""
    miss = f"{client_model} AND CacheReadTokens IS NOT NULL AND {MISS}"
    # the attributes are read only for a model span that read nothing from the cache (if() evaluates lazily)
    maybe = f"Role = 'model' AND {MISS}"
    counter = f"if({maybe}, if({REASON} = 'prefix_changed', concat('changed_', {PART}), {REASON}), '')"
    return (
        f"(concat('cache_miss_', {counter}), if({miss}, toNullable(toFloat64(0)), NULL)),"
        f" (if({maybe}, concat('cache_offset_', {PART}), ''), if({miss}, toNullable(toFloat64({OFFSET})), NULL))"
    )
