"""Known traces for the dashboard tests, the numbers the pages must show for them, and a
fast real server holding them.

Service ``shop``, all in the last hour unless said otherwise:

* ``/checkout``: 20 traces ``i = 0..19`` of E2E 1000 + 10 i ms: model call 0-300 ms (TTFT
  100 + 5 i, ITL 10 + i, 1000 input tokens of which 250 cached when i is even; the misses' reasons in
  ``CHECKOUT_SHAPES``), tools
  ``inventory`` 300-500 and ``payment`` 500-700 (serial and independent: 200 ms to save),
  model call 700-1000 ms; the rest is orchestration.
* ``/search``: 10 traces of E2E 500 ms, the first one failed: a streamed model call 0-200 ms
  (TTFT 50, ITL 5, 2000 input tokens with 1800 cached, 70 of 100 draft tokens accepted)
  with prefill and decode phase spans and a vLLM server span (queue 10, prefill 30, decode
  140 ms), then tool ``web_search`` 200-450 ms (failed in 2 of 10 traces).
* the previous hour (90 minutes ago): 10 ``/checkout`` traces of 900 ms, TTFT 80, ITL 8.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from agentlat.api.models import BreakdownResponse, TimeseriesResponse
from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id, otlp_protobuf
from tests.servers import ServerProcess, wait_for

SERVICE = "shop"
FAST = {"AGENTLAT_TRACE_GRACE": "0.3", "AGENTLAT_PARTIAL_TRACE_TIMEOUT": "2", "AGENTLAT_ROLLUP_SETTLE": "0.3"}
MINUTE_NS = 60_000 * MS
SERVER_KIND, ERROR = 2, 2
CHECKOUT, SEARCH = 20, 10
TOOL_NAME = "gen_ai.tool.name"
BUDGETS_YAML = """\
version: 1
service: shop
min_samples: {p50: 5, p95: 10, p99: 10, cache_hit_rate: 5}
default:
  e2e: {p50: 2s, p95: 3s}
routes:
  /checkout:
    e2e: {p50: 1000, p95: 1500}
    ttft: {p95: 150}
  /search:
    cache_hit_rate: {min: 95%}
"""


def exact(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, the API's exact percentiles)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


CHECKOUT_E2E = [1000.0 + 10 * i for i in range(CHECKOUT)]
CHECKOUT_TTFT = [100.0 + 5 * i for i in range(CHECKOUT)]
CHECKOUT_ITL = [10.0 + i for i in range(CHECKOUT)]
ALL_E2E = CHECKOUT_E2E + [500.0] * SEARCH
ALL_TTFT = CHECKOUT_TTFT + [50.0] * SEARCH
ALL_ITL = CHECKOUT_ITL + [5.0] * SEARCH


def _span(name: str, trace_id: str, parent: str, base: int, start: float, end: float, **kw: object) -> SpanSpec:
    return SpanSpec(
        name,
        trace_id=trace_id,
        parent_span_id=parent,
        start_ns=base + int(start * MS),
        duration_ns=int((end - start) * MS),
        service=SERVICE,
        **kw,  # type: ignore[arg-type]
    )


def checkout_trace(
    base: int, e2e_ms: float, ttft_ms: float, itl_ms: float, cached: int | None, shape: dict | None = None
) -> list[SpanSpec]:
    trace_id, root = new_trace_id(), new_span_id()
    route = {"agentlat.route": "/checkout"}
    chat = {**route, "gen_ai.operation.name": "chat", "gen_ai.request.model": "m1"}
    first = {**chat, "gen_ai.response.time_to_first_chunk": ttft_ms / 1000, "agentlat.itl.mean": itl_ms / 1000,
             "gen_ai.usage.input_tokens": 1000}  # fmt: skip
    if cached is not None:
        first["gen_ai.usage.cache_read.input_tokens"] = cached
    first.update(shape or {})
    tool = {**route, "gen_ai.operation.name": "execute_tool"}
    agent = {**route, "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "checkout"}
    last_model_end = min(1000.0, e2e_ms)
    return [
        _span("invoke_agent checkout", trace_id, "", base, 0, e2e_ms, span_id=root, attributes=agent),
        _span("chat m1", trace_id, root, base, 0, 300, attributes=first),
        _span("execute_tool inventory", trace_id, root, base, 300, 500, attributes={**tool, TOOL_NAME: "inventory"}),
        _span("execute_tool payment", trace_id, root, base, 500, 700, attributes={**tool, TOOL_NAME: "payment"}),
        _span("chat m1", trace_id, root, base, 700, last_model_end, attributes=chat),
    ]  # fmt: skip


def search_trace(base: int, failed: bool, tool_failed: bool) -> list[SpanSpec]:
    trace_id, root, call = new_trace_id(), new_span_id(), new_span_id()
    route = {"agentlat.route": "/search"}
    chat = {**route, "gen_ai.operation.name": "chat", "gen_ai.request.model": "m2", "gen_ai.request.stream": True,
            "gen_ai.response.time_to_first_chunk": 0.05, "agentlat.itl.mean": 0.005, "agentlat.decode.duration": 0.15,
            "gen_ai.usage.input_tokens": 2000, "gen_ai.usage.cache_read.input_tokens": 1800,
            "agentlat.speculative.proposed_tokens": 100, "agentlat.speculative.accepted_tokens": 70}  # fmt: skip
    server = {"gen_ai.request.model": "m2", "gen_ai.latency.time_in_queue": 0.01,
              "gen_ai.latency.time_in_model_prefill": 0.03, "gen_ai.latency.time_in_model_decode": 0.14}  # fmt: skip
    agent = {**route, "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "search"}
    tool = {**route, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search"}
    return [
        _span("invoke_agent search", trace_id, "", base, 0, 500, span_id=root, attributes=agent,
              status_code=ERROR if failed else 0),
        _span("chat m2", trace_id, root, base, 0, 200, span_id=call, attributes=chat),
        _span("prefill", trace_id, call, base, 0, 50, attributes={"agentlat.phase": "prefill"}),
        _span("decode", trace_id, call, base, 50, 200, attributes={"agentlat.phase": "decode"}),
        _span("llm_request", trace_id, call, base, 10, 190, kind=SERVER_KIND, attributes=server),
        _span("execute_tool web_search", trace_id, root, base, 200, 450, attributes=tool,
              status_code=ERROR if tool_failed else 0),
    ]  # fmt: skip


# The prompt's shape as agentlat's SDK records it, on each /checkout trace's first model call: the odd ones miss
# the cache, i = 1 the route's first call (cold), 3, 7, 11 and 15 with the system prompt changed at byte 29,
# 5 and 9 with the tools changed at byte 12, 13 and 17 after 400 s idle (expired), 19 from another instrumentation.
SHAPE = {"agentlat.prompt.part_hashes": ["a1", "b2"], "agentlat.prompt.since_previous_s": 2.0}
CHANGED_SYSTEM = {**SHAPE, "agentlat.prompt.changed_part": "system", "agentlat.prompt.changed_offset": 29}
CHANGED_TOOLS = {**SHAPE, "agentlat.prompt.changed_part": "tools", "agentlat.prompt.changed_offset": 12}
IDLE = {**SHAPE, "agentlat.prompt.since_previous_s": 400.0}
CHECKOUT_SHAPES: dict[int, dict] = {
    1: {"agentlat.prompt.part_hashes": ["a1", "b2"]},
    **dict.fromkeys((3, 7, 11, 15), CHANGED_SYSTEM),
    **dict.fromkeys((5, 9), CHANGED_TOOLS),
    **dict.fromkeys((13, 17), IDLE),
    19: {},
}
CHECKOUT_MISSES = {"cold": 1, "prefix_changed": 6, "expired": 2, "unknown": 1}


def known_traces(now_ns: int) -> tuple[list[SpanSpec], list[str]]:
    """All spans, and the root span ids of the /checkout traces in the current hour."""
    base = (now_ns // MINUTE_NS - 6) * MINUTE_NS  # a whole minute, six minutes ago
    spans: list[SpanSpec] = []
    checkout_ids = []
    for i in range(CHECKOUT):
        trace = checkout_trace(base + i * 2000 * MS, CHECKOUT_E2E[i], CHECKOUT_TTFT[i], CHECKOUT_ITL[i],
                               250 if i % 2 == 0 else 0, CHECKOUT_SHAPES.get(i, SHAPE))  # fmt: skip
        checkout_ids.append(trace[0].trace_id)
        spans += trace
    for j in range(SEARCH):
        spans += search_trace(base + 60_000 * MS + j * 2000 * MS, failed=j == 0, tool_failed=j in (1, 2))
    before = base - 90 * MINUTE_NS
    for k in range(10):
        spans += checkout_trace(before + k * 2000 * MS, 900.0, 80.0, 8.0, None)
    return spans, checkout_ids


def ingest(server: ServerProcess, spans: list[SpanSpec]) -> None:
    headers = {"Content-Type": "application/x-protobuf"}
    response = httpx.post(f"{server.url}/v1/traces", content=otlp_protobuf(spans), headers=headers, timeout=30)
    assert response.status_code == 200, response.text


def _settled(server: ServerProcess) -> bool:
    """Every trace analysed and rolled up: the breakdown counts all 30, the percentiles all 30."""
    now = BreakdownResponse.model_validate(server.get("/api/v1/breakdown", group_by="route", window="1h").json())
    ttft = TimeseriesResponse.model_validate(
        server.get("/api/v1/timeseries", metric="ttft", step="1h", window="1h").json()
    )
    previous = BreakdownResponse.model_validate(server.get("/api/v1/breakdown", group_by="route", window="3h").json())
    return (
        {r.group["route"]: r.traces for r in now.rows} == {"/checkout": CHECKOUT, "/search": SEARCH}
        and sum(p.count for s in ttft.series for p in s.points) == CHECKOUT + SEARCH
        and sum(r.traces for r in previous.rows) == CHECKOUT + SEARCH + 10
    )


def start_known_server(workdir: Path) -> Iterator[ServerProcess]:
    """A fast real server with the budgets file above and the known traces, analysed and rolled up."""
    budgets = workdir / "budgets.yaml"
    budgets.write_text(BUDGETS_YAML)
    server = ServerProcess(workdir, extra_env={**FAST, "AGENTLAT_BUDGETS": str(budgets)}).start()
    try:
        spans, _ = known_traces(time.time_ns())
        ingest(server, spans)
        wait_for(lambda: _settled(server), timeout=60, interval=0.2)
        yield server
    finally:
        server.stop()
