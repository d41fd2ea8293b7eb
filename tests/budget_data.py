"""Known spans for the budget tests, with their exact percentiles, and budgets files over them.

Route /chat (agent "support"): 20 traces, E2E 100..2000 ms, one model call each with TTFT
10..200 ms and ITL 1..20 ms. Route /search (agent "finder"): 10 traces of 3000 ms whose
model calls have TTFT 1000 ms. Percentiles interpolate linearly, as the query API does.

Prompt cache: /chat's first 10 calls read 800 of 1,000 input tokens from the cache, the other 10 read
900 of 3,000, so its hit rate is 17,000 / 40,000 = 0.425 (weighted by tokens: the mean of the calls'
own rates would be 0.55). /search's calls report input tokens but no cache-read tokens: no hit rate.
"""

from __future__ import annotations

import time

import httpx

from agentlat.stream_stats import percentile
from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id, otlp_protobuf
from tests.servers import ServerProcess, wait_for

SERVICE = "budget-svc"
PROTOBUF = {"Content-Type": "application/x-protobuf"}

CHAT_TTFT = [10.0 * (i + 1) for i in range(20)]
CHAT_ITL = [1.0 * (i + 1) for i in range(20)]
CHAT_E2E = [100.0 * (i + 1) for i in range(20)]
CHAT_CACHE = [(1000, 800) if i < 10 else (3000, 900) for i in range(20)]  # (input tokens, cache-read tokens)
CHAT_HIT_RATE = 17_000 / 40_000


def pct(values: list[float], p: str) -> float:
    return percentile(sorted(values), {"p50": 0.5, "p95": 0.95, "p99": 0.99}[p])


def _trace(
    base: int, route: str, agent: str, e2e_ms: float, ttft_ms: float, itl_ms: float | None,
    tokens: tuple[int, int | None] = (500, None),
) -> list[SpanSpec]:  # fmt: skip
    trace_id, root_id = new_trace_id(), new_span_id()
    route_attr = {"agentlat.route": route}
    model = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "small",
        "gen_ai.response.time_to_first_chunk": ttft_ms / 1000,
        "gen_ai.usage.input_tokens": tokens[0],
        "gen_ai.agent.name": agent,  # the agent the call is made for, so its hit rate is the agent's too
        **route_attr,
    }
    if tokens[1] is not None:
        model["gen_ai.usage.cache_read.input_tokens"] = tokens[1]
    if itl_ms is not None:
        model["agentlat.itl.mean"] = itl_ms / 1000
    return [
        SpanSpec(
            f"invoke_agent {agent}", trace_id=trace_id, span_id=root_id, start_ns=base,
            duration_ns=int(e2e_ms * MS), service=SERVICE,
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, **route_attr},
        ),
        SpanSpec(
            "chat small", trace_id=trace_id, parent_span_id=root_id, start_ns=base + MS,
            duration_ns=int(e2e_ms * MS) // 2, service=SERVICE, kind=3, attributes=model,
        ),
    ]  # fmt: skip


def known_spans() -> list[SpanSpec]:
    base = time.time_ns() - 30 * 60 * 1_000_000_000
    spans: list[SpanSpec] = []
    for i in range(20):
        spans += _trace(base + i * MS, "/chat", "support", CHAT_E2E[i], CHAT_TTFT[i], CHAT_ITL[i], CHAT_CACHE[i])
    for i in range(10):
        spans += _trace(base + i * MS, "/search", "finder", 3000.0, 1000.0, None)
    return spans


def ingest_known_spans(server: ServerProcess) -> None:
    """Post the spans and wait until the query API counts all of them."""
    body = otlp_protobuf(known_spans())
    response = httpx.post(f"{server.url}/v1/traces", content=body, headers=PROTOBUF, timeout=30)
    assert response.status_code == 200, response.text

    def ready() -> bool:
        params = {"metric": "ttft", "service": SERVICE, "window": "2h", "group_by": "route"}
        rows = server.get("/api/v1/percentiles", **params).json()["rows"]
        return sum(r["count"] for r in rows) == 30

    wait_for(ready)


HEADER = f"""\
version: 1
type: chat
service: {SERVICE}
min_samples: {{p50: 10, p95: 20, p99: 50}}
"""

# Every budget met: /chat's own, agent support's, and the default on the unlisted /search.
PASSING = (
    HEADER
    + """\
default:
  ttft: {p50: 1500}
routes:
  /chat:
    ttft: {p50: 150, p95: 250}
    itl: {p95: 30}
agents:
  support:
    e2e: {p50: 2s}
"""
)

# As PASSING, plus an E2E p99 on /chat that 20 traces cannot judge (50 needed).
INSUFFICIENT = PASSING.replace("    itl: {p95: 30}\n", "    itl: {p95: 30}\n    e2e: {p99: 5s}\n")

# As INSUFFICIENT, with a default TTFT p50 that /search (1000 ms) breaks.
BREACHING = INSUFFICIENT.replace("ttft: {p50: 1500}", "ttft: {p50: 500}")

# Prompt-cache hit rates: /chat's 0.425 (20 calls reporting cache tokens) under its own 50 % floor; /search,
# listed, without cache reports (no data: insufficient, never 0 %); agent support's default-free floor met.
HIT_RATES = f"""\
version: 1
service: {SERVICE}
default:
  cache_hit_rate: {{min: 0.3}}
routes:
  /chat:
    cache_hit_rate: {{min: 50%}}
  /search:
    cache_hit_rate: {{min: 0.5}}
agents:
  support:
    cache_hit_rate: {{min: 0.4}}
"""
