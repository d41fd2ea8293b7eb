"""The advisor: which latency lever each route should pull, ranked by expected saving.

Pure rules over per-route evidence (``RouteEvidence``, gathered by the store). Each finding
names the route, the evidence, the lever and the expected gain per request and over the
window (per-request saving x requests), which is what findings are ranked by. Where a gain
rests on an assumption (the speed-up speculative decoding typically brings), the finding
says so.

Each saving per request is a mean over all the route's requests in the window, including those
the lever does nothing for; its ``Basis`` says so in words ("602 ms per request, averaged over
all 50 requests of the route; 26 of 50 model calls had long outputs decoded without
speculation"): the requests it is averaged over and how many requests, model calls or
prefetches the lever applies to. Where the route has no analysed traces, its model calls stand
in for its requests, and the basis says that too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CACHE_TARGET = 0.80
SPECULATIVE_SPEEDUP = 1.5  # conservative: reported speed-ups are 1.5x to 3x on long outputs
QUEUE_SHARE = 0.5
RAG_INPUT_TOKENS = 8_000
RAG_TTFT_MS = 1_000.0
STALL_SHARE = 0.05
MIN_CALLS = 20
MIN_TRACES = 10


@dataclass(frozen=True, slots=True)
class Basis:
    """What a finding's saving per request is averaged over, and how many of those the lever applies to."""

    requests: int  # the route's requests in the window (its model calls when it has no analysed traces)
    applies_to: int
    unit: str  # what ``applies_to`` counts: "requests", "model calls" or "prefetches"
    clause: str  # ``applies_to`` in words, e.g. "26 of 50 model calls had long outputs"
    calls_for_requests: bool = False  # no analysed traces: ``requests`` counts model calls

    def text(self, saving_ms: float) -> str:
        if self.calls_for_requests:
            over = f"{saving_ms:.0f} ms per model call, averaged over all {self.requests} model calls of the route"
            return f"{over} (no analysed traces to count requests); {self.clause}"
        return f"{saving_ms:.0f} ms per request, averaged over all {self.requests} requests of the route; {self.clause}"


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    route: str
    title: str
    lever: str
    evidence: dict[str, Any]
    saving_ms_per_request: float
    basis: Basis

    @property
    def requests(self) -> int:
        return self.basis.requests

    @property
    def total_saving_s(self) -> float:
        return self.saving_ms_per_request * self.requests / 1000

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "route": self.route,
            "title": self.title,
            "lever": self.lever,
            "evidence": self.evidence,
            "saving_ms_per_request": self.saving_ms_per_request,
            "requests": self.requests,
            "total_saving_s": self.total_saving_s,
            "applies_to": self.basis.applies_to,
            "applies_to_unit": self.basis.unit,
            "saving_basis": self.basis.text(self.saving_ms_per_request),
        }


@dataclass(slots=True)
class RouteEvidence:
    """What the store knows about one route in the window; missing facts are None."""

    route: str
    traces: int = 0
    model_calls_per_trace: float = 0.0
    calls: dict[str, Any] = field(default_factory=dict)  # store.advice.model_calls_sql row
    prefix: dict[str, Any] = field(default_factory=dict)  # prefix_misses_sql row
    cache: dict[str, Any] = field(default_factory=dict)  # store.cache_report group: misses by reason and part
    server: dict[str, Any] = field(default_factory=dict)  # server_phases_sql row
    trace: dict[str, Any] = field(default_factory=dict)  # traces_sql row


def route_evidence(route: str, facts: dict[str, dict[str, Any]]) -> RouteEvidence:
    """RouteEvidence from ``Store.advice_evidence`` output for one route."""
    trace = facts.get("trace", {})
    return RouteEvidence(
        route=route,
        traces=int(trace.get("traces") or 0),
        model_calls_per_trace=float(trace.get("model_calls") or 0.0),
        calls=facts.get("calls", {}),
        prefix=facts.get("prefix", {}),
        cache=facts.get("cache", {}),
        server=facts.get("server", {}),
        trace=trace,
    )


def advise(routes: list[RouteEvidence]) -> list[Finding]:
    """Every finding for every route, the largest total saving first."""
    findings = [f for r in routes for rule in RULES if (f := rule(r)) is not None and f.saving_ms_per_request > 0]
    return sorted(findings, key=lambda f: (-f.total_saving_s, f.route, f.kind))


def _calls_per_request(r: RouteEvidence) -> float:
    return r.model_calls_per_trace or 1.0


def _basis(r: RouteEvidence, applies_to: int, unit: str, clause: str) -> Basis:
    """The route's requests (its model calls when it has no analysed traces) and what the lever applies to."""
    requests = r.traces or int(r.calls.get("calls") or 0)
    return Basis(requests, int(applies_to), unit, clause, calls_for_requests=not r.traces)


# Misses no lever avoids: the first call of a prefix, and a prompt under the provider's minimum.
_UNAVOIDABLE = ("cold", "below_minimum")


def prompt_cache(r: RouteEvidence) -> Finding | None:
    c = r.calls
    if (c.get("cache_reported_calls") or 0) < MIN_CALLS or not c.get("cache_input_tokens"):
        return None
    hit_rate = c["cache_read_tokens"] / c["cache_input_tokens"]
    cached, uncached = c.get("ttft_cached_ms"), c.get("ttft_uncached_ms")
    if hit_rate >= CACHE_TARGET or cached is None or uncached is None or uncached <= cached:
        return None
    calls, misses = c["cache_reported_calls"], c["uncached_calls"]
    by_reason = r.cache.get("misses_by_reason") or {}
    avoidable = misses - sum(by_reason.get(reason, 0) for reason in _UNAVOIDABLE)
    per_call = (uncached - cached) * avoidable / calls
    causes = _cache_causes(r.cache, calls, per_call, avoidable)
    stable = "Keep the prompt prefix stable (system prompt and tool definitions first, byte-identical)"
    lever = "; ".join(causes) or stable
    same_prefix = int(r.prefix.get("prefix_misses") or 0)
    if same_prefix:
        lever += f"; {same_prefix} calls missed the cache on a prefix already sent"
    return Finding(
        "prompt_cache", r.route, f"Prompt-cache hit rate {hit_rate:.0%} is under the {CACHE_TARGET:.0%} target",
        lever,
        {"hit_rate": hit_rate, "ttft_cached_ms": cached, "ttft_uncached_ms": uncached,
         "uncached_calls": misses, "identical_prefix_misses": same_prefix, "avoidable_misses": avoidable,
         "misses_by_reason": by_reason, "changed_parts": r.cache.get("changed_parts") or {}},
        per_call * _calls_per_request(r),
        _basis(r, avoidable, "model calls", f"{misses} of {calls} model calls missed the cache"
               + (f", {avoidable} of them avoidably" if by_reason else "")),
    )  # fmt: skip


def _cache_causes(cache: dict[str, Any], calls: int, per_call_ms: float, avoidable: int) -> list[str]:
    """Each avoidable cause of misses in words with its lever, the most frequent first; the first says what
    fixing all avoidable misses saves per call."""
    found = [
        (n, _cause_of_part(part, facts))
        for part, facts in (cache.get("changed_parts") or {}).items()
        if (n := facts["misses"])
    ]
    found += [(n, _CAUSES[reason]) for reason, n in (cache.get("misses_by_reason") or {}).items() if reason in _CAUSES]
    found.sort(key=lambda item: -item[0])
    texts = [text.format(share=f"{n / calls:.0%}") for n, text in found]
    if texts and avoidable:
        texts[0] += f"; saves {per_call_ms:.0f} ms TTFT per call"
    return texts


def _cause_of_part(part: str, facts: dict[str, Any]) -> str:
    offset = facts.get("offset_p95")
    within = f" within its first {offset + 1:.0f} bytes" if offset is not None else ""
    return {
        "system": f"the system prompt differs from the previous call's{within} on {{share}} of calls:"
        " move the dynamic part after it",
        "tools": f"the tool definitions differ from the previous call's{within} on {{share}} of calls"
        " (added, removed or reordered): send the same tools in the same order",
        "messages": f"an earlier message differs from the previous call's{within} on {{share}} of calls:"
        " append to the conversation instead of rewriting it",
        "model": "{share} of calls go to a model the route's previous calls did not: the cache is per model;"
        " keep a route's model fixed",
    }[part]


_CAUSES = {
    "expired": "{share} of calls came after the route was idle longer than the cache lives: ask for a longer"
    " lifetime (Anthropic cache_control ttl 1h, OpenAI prompt_cache_options ttl 12h) or keep it warm",
    "not_requested": "{share} of calls mark no cache breakpoint, and Anthropic caches only what a request marks:"
    " put cache_control on the last stable block",
    "settings_changed": "a setting the cache is keyed on (prompt_cache_key, reasoning effort, text format, service"
    " tier) changed on {share} of calls: keep it fixed per route",
}


def parallel_tools(r: RouteEvidence) -> Finding | None:
    t = r.trace
    if (t.get("traces") or 0) < MIN_TRACES or not t.get("parallel_saving_ms"):
        return None
    return Finding(
        "parallel_tools", r.route,
        f"Independent tool calls run one after another in {t['parallel_traces']} of {t['traces']} traces",
        "Run independent tool calls concurrently (asyncio.gather / parallel tool calls)",
        {"traces_with_serial_tools": t["parallel_traces"], "mean_saving_ms": t["parallel_saving_ms"]},
        t["parallel_saving_ms"],
        _basis(r, t["parallel_traces"], "requests", f"{t['parallel_traces']} ran independent tools one after another"),
    )  # fmt: skip


def tool_dispatch(r: RouteEvidence) -> Finding | None:
    t = r.trace
    if (t.get("traces") or 0) < MIN_TRACES or not t.get("dispatch_saving_ms") or not t.get("dispatch_calls"):
        return None
    calls, streamed, delay = t["dispatch_calls"], t.get("dispatch_streamed_calls") or 0, t.get("dispatch_delay_p50_ms")
    late = f"a median {delay:.0f} ms" if delay is not None else "late"
    return Finding(
        "tool_dispatch", r.route,
        f"Tools start {late} after the model streamed their arguments"
        f" ({calls - streamed} of {calls} calls only once the message ended)",
        "Dispatch tool calls as they stream: start each tool the moment its call's arguments are complete",
        {"streamed_tool_calls": calls, "dispatch_delay_p50_ms": delay,
         "dispatched_while_streaming": streamed / calls, "traces_that_would_gain": t["dispatch_traces"],
         "mean_saving_ms": t["dispatch_saving_ms"]},
        t["dispatch_saving_ms"],
        _basis(r, t["dispatch_traces"], "requests",
               f"{t['dispatch_traces']} would end sooner with each tool started as its call streamed"),
    )  # fmt: skip


def speculative_decoding(r: RouteEvidence) -> Finding | None:
    c = r.calls
    if (c.get("long_plain_calls") or 0) < MIN_CALLS or not c.get("long_plain_decode_ms"):
        return None
    per_call = c["long_plain_decode_ms"] * (1 - 1 / SPECULATIVE_SPEEDUP)
    share = c["long_plain_calls"] / c["calls"]
    count, tokens = c["long_plain_calls"], c["long_plain_tokens"]
    return Finding(
        "speculative_decoding", r.route,
        f"{count} long outputs (≥400 tokens, mean {tokens:.0f}) decode without speculation",
        f"Enable speculative decoding (estimate assumes a {SPECULATIVE_SPEEDUP}x decode speed-up)",
        {"long_calls": count, "decode_ms": c["long_plain_decode_ms"], "assumed_speedup": SPECULATIVE_SPEEDUP},
        per_call * share * _calls_per_request(r),
        _basis(r, count, "model calls", f"{count} of {c['calls']} model calls had long outputs without speculation"),
    )  # fmt: skip


def wasteful_prefetch(r: RouteEvidence) -> Finding | None:
    t = r.trace
    wasted, saved = t.get("prefetch_wasted_ms") or 0.0, t.get("prefetch_saved_ms") or 0.0
    if not t.get("traces") or wasted <= saved:
        return None
    prefetches = t["prefetch_hits"] + t["prefetch_misses"]
    return Finding(
        "wasteful_prefetch", r.route,
        f"Speculative prefetch wastes {wasted / 1000:.1f} s for {saved / 1000:.1f} s saved",
        "Prefetch only tools the model picks most of the time, or cancel prefetches sooner",
        {"hits": t["prefetch_hits"], "misses": t["prefetch_misses"], "wasted_ms": wasted, "saved_ms": saved},
        (wasted - saved) / t["traces"],
        _basis(r, prefetches, "prefetches", f"{prefetches} prefetches were made, {t['prefetch_misses']} unused"),
    )  # fmt: skip


def queueing(r: RouteEvidence) -> Finding | None:
    s = r.server
    queue, ttft = s.get("queue_ms"), s.get("server_ttft_ms") or r.calls.get("ttft_ms")
    if not s.get("server_calls") or queue is None or not ttft or queue / ttft < QUEUE_SHARE:
        return None
    return Finding(
        "queueing", r.route, f"Queueing is {queue / ttft:.0%} of time to first token",
        "Add serving capacity, or give this route priority in the server's scheduler",
        {"queue_ms": queue, "ttft_ms": ttft, "server_calls": s["server_calls"]},
        queue * _calls_per_request(r),
        _basis(r, s["server_calls"], "model calls",
               f"{s['server_calls']} model calls timed by the server, their mean queueing counted for every call"),
    )  # fmt: skip


def long_prefill(r: RouteEvidence) -> Finding | None:
    c = r.calls
    tokens, ttft = c.get("input_tokens_p50"), c.get("ttft_p50_ms")
    if (c.get("calls") or 0) < MIN_CALLS or tokens is None or ttft is None:
        return None
    if tokens < RAG_INPUT_TOKENS or ttft < RAG_TTFT_MS:
        return None
    prefill = r.server.get("prefill_ms") or ttft
    return Finding(
        "long_prefill", r.route, f"Long prefill: median input {tokens:.0f} tokens, median TTFT {ttft:.0f} ms",
        "Cache the shared context, trim retrieved chunks, or serve with prefill/decode disaggregation",
        {"input_tokens_p50": tokens, "ttft_p50_ms": ttft, "prefill_ms": prefill},
        (prefill - RAG_TTFT_MS / 2) * _calls_per_request(r),
        _basis(r, c["calls"], "model calls", f"all {c['calls']} model calls, each counted at the median prefill"),
    )  # fmt: skip


def itl_stalls(r: RouteEvidence) -> Finding | None:
    c = r.calls
    streamed, stalled = c.get("streamed_calls") or 0, c.get("stalled_calls") or 0
    if streamed < MIN_CALLS or stalled / streamed < STALL_SHARE or not c.get("stall_excess_ms"):
        return None
    return Finding(
        "itl_stalls", r.route, f"{stalled / streamed:.0%} of streams stall (a gap over the stall threshold)",
        "Look for server preemption or batching pauses; stream through fewer proxies",
        {"stalled_calls": stalled, "streamed_calls": streamed, "stall_excess_ms": c["stall_excess_ms"]},
        c["stall_excess_ms"] * stalled / streamed * _calls_per_request(r),
        _basis(r, stalled, "model calls", f"{stalled} of {streamed} streamed model calls stalled"),
    )  # fmt: skip


RULES = (
    prompt_cache,
    parallel_tools,
    tool_dispatch,
    speculative_decoding,
    wasteful_prefetch,
    queueing,
    long_prefill,
    itl_stalls,
)
