"""The advisor: each rule's expected saving from known evidence, and the ranked findings
through a real collector, the API and the CLI."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from agentlat.collector.analysis.advisor import RouteEvidence, advise
from agentlat.store import SpanFilter, Store
from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id
from tests.servers import AGENTLAT, ServerProcess, wait_for
from tests.span_tables import span_batch
from tests.test_trace_analysis_e2e import FAST, ingest

CASES = [
    pytest.param(
        RouteEvidence("/c", traces=50, model_calls_per_trace=2, calls={
            "calls": 100, "cache_reported_calls": 100, "cache_input_tokens": 100_000, "cache_read_tokens": 50_000,
            "uncached_calls": 50, "ttft_cached_ms": 200.0, "ttft_uncached_ms": 600.0}, prefix={"prefix_misses": 7}),
        "prompt_cache", 400.0, 20.0, id="prompt-cache",
    ),
    pytest.param(
        RouteEvidence("/p", traces=40, trace={"traces": 40, "parallel_saving_ms": 150.0, "parallel_traces": 30}),
        "parallel_tools", 150.0, 6.0, id="parallel-tools",
    ),
    pytest.param(
        RouteEvidence("/d", traces=30, trace={"traces": 30, "dispatch_saving_ms": 120.0, "dispatch_traces": 25,
                                              "dispatch_calls": 60, "dispatch_streamed_calls": 15,
                                              "dispatch_delay_p50_ms": 240.0}),
        "tool_dispatch", 120.0, 3.6, id="tool-dispatch",
    ),
    pytest.param(
        RouteEvidence("/s", traces=60, model_calls_per_trace=1, calls={
            "calls": 60, "long_plain_calls": 30, "long_plain_decode_ms": 3000.0, "long_plain_tokens": 900.0}),
        "speculative_decoding", 500.0, 30.0, id="speculative",
    ),
    pytest.param(
        RouteEvidence("/w", traces=10, trace={"traces": 10, "prefetch_wasted_ms": 5000.0, "prefetch_saved_ms": 1000.0,
                                              "prefetch_hits": 2, "prefetch_misses": 8}),
        "wasteful_prefetch", 400.0, 4.0, id="prefetch",
    ),
    pytest.param(
        RouteEvidence("/q", traces=10, model_calls_per_trace=2,
                      server={"server_calls": 20, "queue_ms": 300.0, "server_ttft_ms": 400.0}),
        "queueing", 600.0, 6.0, id="queueing",
    ),
    pytest.param(
        RouteEvidence("/rag", traces=30, model_calls_per_trace=1,
                      calls={"calls": 30, "input_tokens_p50": 12_000.0, "ttft_p50_ms": 2500.0}),
        "long_prefill", 2000.0, 60.0, id="rag-prefill",
    ),
    pytest.param(
        RouteEvidence("/i", traces=100, model_calls_per_trace=1,
                      calls={"calls": 100, "streamed_calls": 100, "stalled_calls": 10, "stall_excess_ms": 800.0}),
        "itl_stalls", 80.0, 8.0, id="stalls",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("evidence", "kind", "per_request_ms", "total_s"), CASES)
def test_each_rule_estimates_its_saving(evidence: RouteEvidence, kind: str, per_request_ms: float, total_s: float):
    [finding] = advise([evidence])
    assert finding.kind == kind and finding.route == evidence.route
    assert finding.saving_ms_per_request == pytest.approx(per_request_ms)
    assert finding.total_saving_s == pytest.approx(total_s)


BASES = {  # each case's saving in words: the requests it is averaged over, and how many the lever applies to
    "prompt-cache": "400 ms per request, averaged over all 50 requests of the route; 50 of 100 model calls missed the"
    " cache",
    "parallel-tools": "150 ms per request, averaged over all 40 requests of the route; 30 ran independent tools one"
    " after another",
    "tool-dispatch": "120 ms per request, averaged over all 30 requests of the route; 25 would end sooner with each"
    " tool started as its call streamed",
    "speculative": "500 ms per request, averaged over all 60 requests of the route; 30 of 60 model calls had long"
    " outputs without speculation",
    "prefetch": "400 ms per request, averaged over all 10 requests of the route; 10 prefetches were made, 8 unused",
    "queueing": "600 ms per request, averaged over all 10 requests of the route; 20 model calls timed by the server,"
    " their mean queueing counted for every call",
    "rag-prefill": "2000 ms per request, averaged over all 30 requests of the route; all 30 model calls, each counted"
    " at the median prefill",
    "stalls": "80 ms per request, averaged over all 100 requests of the route; 10 of 100 streamed model calls stalled",
}
CALLS, REQUESTS = "model calls", "requests"
APPLIES_TO = {"prompt-cache": (50, CALLS), "parallel-tools": (30, REQUESTS), "tool-dispatch": (25, REQUESTS),
              "speculative": (30, CALLS), "prefetch": (10, "prefetches"), "queueing": (20, CALLS),
              "rag-prefill": (30, CALLS), "stalls": (10, CALLS)}  # fmt: skip


@pytest.mark.parametrize("case", [case.id for case in CASES])
def test_each_saving_names_its_denominator(case: str) -> None:
    [finding] = advise([next(c.values[0] for c in CASES if c.id == case)])
    answer = finding.as_dict()
    assert answer["saving_basis"] == BASES[case]
    assert (answer["applies_to"], answer["applies_to_unit"]) == APPLIES_TO[case]


def test_a_route_without_analysed_traces_averages_over_its_model_calls() -> None:
    evidence = RouteEvidence("/untraced", calls={"calls": 100, "streamed_calls": 100, "stalled_calls": 10,
                                                 "stall_excess_ms": 800.0})  # fmt: skip
    [finding] = advise([evidence])
    assert finding.as_dict()["saving_basis"] == (
        "80 ms per model call, averaged over all 100 model calls of the route (no analysed traces to count"
        " requests); 10 of 100 streamed model calls stalled"
    )


def test_identical_prefix_misses_are_named() -> None:
    [finding] = advise([CASES[0].values[0]])
    assert "7 calls missed the cache on a prefix already sent" in finding.lever


@pytest.mark.parametrize(
    "evidence",
    [
        RouteEvidence("/ok", traces=50, calls={"calls": 100, "cache_reported_calls": 100, "cache_input_tokens": 1000,
                                               "cache_read_tokens": 850, "uncached_calls": 5, "ttft_cached_ms": 100.0,
                                               "ttft_uncached_ms": 500.0}),
        RouteEvidence("/few", traces=5, calls={"calls": 5, "cache_reported_calls": 5, "cache_input_tokens": 1000,
                                               "cache_read_tokens": 0, "uncached_calls": 5, "ttft_cached_ms": 100.0,
                                               "ttft_uncached_ms": 500.0}),
        RouteEvidence("/fewtraces", traces=5, trace={"traces": 5, "parallel_saving_ms": 100.0, "parallel_traces": 5}),
        RouteEvidence("/fewdispatch", traces=5, trace={"traces": 5, "dispatch_saving_ms": 100.0, "dispatch_calls": 5,
                                                       "dispatch_traces": 5}),
        RouteEvidence("/nodelay", traces=50, trace={"traces": 50, "dispatch_saving_ms": 0.0, "dispatch_calls": 100,
                                                    "dispatch_traces": 0, "dispatch_delay_p50_ms": 1.0}),
        RouteEvidence("/netgain", traces=10, trace={"traces": 10, "prefetch_wasted_ms": 100.0,
                                                    "prefetch_saved_ms": 900.0}),
        RouteEvidence("/q", traces=10, server={"server_calls": 20, "queue_ms": 100.0, "server_ttft_ms": 400.0}),
    ],
    ids=["cache-above-target", "too-few-calls", "too-few-traces", "too-few-dispatch-traces", "tools-start-when-ready",
         "prefetch-pays-off", "queue-minor"],
)  # fmt: skip
def test_no_finding_without_enough_evidence(evidence: RouteEvidence) -> None:
    assert advise([evidence]) == []


def test_findings_are_ranked_by_total_saving() -> None:
    findings = advise([case.values[0] for case in CASES])
    totals = [f.total_saving_s for f in findings]
    assert totals == sorted(totals, reverse=True)
    assert findings[0].kind == "long_prefill"


@pytest.fixture(scope="module")
def advised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """20 traces on /cache: half miss the prompt cache on one prefix; the model streams two tool calls (their
    arguments complete at 300 and 650 ms of 700), whose tools then run serially after the message."""
    server = ServerProcess(tmp_path_factory.mktemp("advice"), extra_env=FAST).start()
    base = time.time_ns() - 600 * 1000 * MS
    spans: list[SpanSpec] = []
    for i in range(20):
        trace_id, root, start = new_trace_id(), new_span_id(), base + i * 2000 * MS
        cached = i % 2 == 0

        def child(name: str, begin: int, end: int, attrs: dict, events=(), trace_id=trace_id, root=root, start=start):
            return SpanSpec(
                name,
                trace_id=trace_id,
                parent_span_id=root,
                start_ns=start + begin * MS,
                duration_ns=(end - begin) * MS,
                service="advice-svc",
                attributes={"agentlat.route": "/cache", **attrs},
                events=list(events),
            )

        streamed = [
            ("agentlat.tool_call", start + ready * MS,
             {"gen_ai.tool.call.id": call_id, "gen_ai.tool.name": name, "agentlat.tool_call.ready_at": ready / 1000})
            for call_id, name, ready in (("A", "a", 300), ("B", "b", 650))
        ]  # fmt: skip

        spans += [
            SpanSpec("invoke_agent helper", trace_id=trace_id, span_id=root, start_ns=start, duration_ns=1000 * MS,
                     service="advice-svc", attributes={"gen_ai.operation.name": "invoke_agent",
                                                       "agentlat.route": "/cache"}),
            child("chat m", 0, 700, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                     "gen_ai.response.time_to_first_chunk": 0.2 if cached else 0.6,
                                     "gen_ai.usage.input_tokens": 1000,
                                     "gen_ai.usage.cache_read.input_tokens": 900 if cached else 0,
                                     "agentlat.prompt.prefix_hash": "abc123"}, streamed),
            child("execute_tool a", 700, 800, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "a",
                                               "gen_ai.tool.call.id": "A"}),
            child("execute_tool b", 800, 900, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "b",
                                               "gen_ai.tool.call.id": "B"}),
        ]  # fmt: skip
    ingest(server, spans)
    yield server
    server.stop()


def _findings(server: ServerProcess) -> list[dict] | None:
    findings = server.get("/api/v1/advice", window="1h").json()["findings"]
    return findings if len(findings) >= 3 else None


def test_advice_through_the_api(advised: ServerProcess) -> None:
    findings = wait_for(lambda: _findings(advised))
    kinds = ["prompt_cache", "tool_dispatch", "parallel_tools"]  # 4.0, 3.0 and 2.0 s over the window
    assert [(f["kind"], f["route"]) for f in findings] == [(kind, "/cache") for kind in kinds]
    cache, dispatch, parallel = findings
    assert cache["evidence"]["hit_rate"] == pytest.approx(0.45)
    assert cache["evidence"]["identical_prefix_misses"] == 9
    assert cache["saving_ms_per_request"] == pytest.approx(200.0) and cache["requests"] == 20
    assert parallel["saving_ms_per_request"] == pytest.approx(100.0)
    assert parallel["total_saving_s"] == pytest.approx(2.0)
    # Started when ready, a would run 300-400 and b 650-750: done at 750 instead of 900. Delays: 400 and 150 ms.
    assert dispatch["evidence"] == {"streamed_tool_calls": 40, "dispatch_delay_p50_ms": 275.0,
                                    "dispatched_while_streaming": 0.0, "traces_that_would_gain": 20,
                                    "mean_saving_ms": 150.0}  # fmt: skip
    assert (dispatch["saving_ms_per_request"], dispatch["total_saving_s"]) == (150.0, 3.0)
    assert [f["saving_basis"] for f in findings] == [
        "200 ms per request, averaged over all 20 requests of the route; 10 of 20 model calls missed the cache, 10 of"
        " them avoidably",
        "150 ms per request, averaged over all 20 requests of the route; 20 would end sooner with each tool started"
        " as its call streamed",
        "100 ms per request, averaged over all 20 requests of the route; 20 ran independent tools one after another",
    ]
    assert [(f["applies_to"], f["applies_to_unit"]) for f in findings] == [
        (10, "model calls"),
        (20, "requests"),
        (20, "requests"),
    ]
    assert dispatch["title"] == (
        "Tools start a median 275 ms after the model streamed their arguments (40 of 40 calls only once the message"
        " ended)"
    )


def test_advice_from_rollups_matches_the_exact_advice(advised: ServerProcess) -> None:
    exact = wait_for(lambda: _findings(advised))

    def same_as_exact(body: dict) -> bool:
        found = body["findings"]
        return len(found) == len(exact) and all(
            {**got, "evidence": None} == {**want, "evidence": None}
            and _numbers(got["evidence"]) == pytest.approx(_numbers(want["evidence"]))
            and _nested(got["evidence"]) == _nested(want["evidence"])  # counts by reason and part: exact
            for got, want in zip(found, exact, strict=True)
        )

    def from_rollups(window: str, **params: str) -> dict | None:
        body = advised.get("/api/v1/advice", window=window, **params).json()
        return body if same_as_exact(body) else None

    # Rollups follow the data by a few seconds: wait until every minute is in.
    for window, params in (("1h", {"source": "rollups"}), ("24h", {})):  # 24h: auto reads rollups
        assert wait_for(lambda window=window, params=params: from_rollups(window, **params))["source"] == "rollups"
    assert advised.get("/api/v1/advice", window="1h").json()["source"] == "spans"


def _numbers(evidence: dict) -> dict:
    return {k: v for k, v in evidence.items() if not isinstance(v, dict)}


def _nested(evidence: dict) -> dict:
    return {k: v for k, v in evidence.items() if isinstance(v, dict)}


def test_advise_command_prints_the_same_findings(advised: ServerProcess) -> None:
    expected = wait_for(lambda: _findings(advised))
    result = subprocess.run([AGENTLAT, "advise", "--api", advised.url, "--window", "1h", "--json"],
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert json.loads(result.stdout)["findings"] == expected
    table = subprocess.run([AGENTLAT, "advise", "--api", advised.url, "--window", "1h"], capture_output=True,
                           text=True, timeout=60, check=True, env={"COLUMNS": "500", "PATH": ""})  # fmt: skip
    assert "Prompt-cache hit rate 45% is under the 80% target" in table.stdout
    assert "Dispatch tool calls as they stream" in table.stdout
    assert "200 ms per request, averaged over all 20 requests of the route; 10 of 20 model calls missed the cache" in (
        table.stdout
    )  # a row per line at this width: the sentence is whole


def test_advise_command_explains_an_unreachable_server() -> None:
    result = subprocess.run([AGENTLAT, "advise", "--api", "http://127.0.0.1:9"], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert "cannot reach agentlat at http://127.0.0.1:9" in result.stderr


def test_server_phases_take_the_route_of_their_trace(embedded_store: Store) -> None:
    """vLLM/SGLang spans carry no route; the advisor attributes them to the route their trace's client
    spans carry, and leaves out server spans of traces without one."""
    now = time.time_ns()
    rows = [  # trace, role, is server span, route, queue ms, prefill ms, ttft ms
        ("t1", "model", 0, "/srv", None, None, 900.0),
        ("t1", "model", 1, "", 100.0, 50.0, 200.0),
        ("t1", "model", 1, "", 300.0, 70.0, 400.0),
        ("t2", "model", 1, "", 5000.0, 5000.0, 5000.0),  # no client span with a route
    ]
    trace, role, server, route, queue, prefill, ttft = (list(column) for column in zip(*rows, strict=True))
    n = len(rows)
    embedded_store.insert_spans(
        span_batch(
            {
                "Timestamp": pa.array([now - 60 * 10**9] * n, pa.timestamp("ns", tz="UTC")),
                "TraceId": pa.array([f"server-phases-{t}" for t in trace]),
                "SpanId": pa.array([f"s{i}" for i in range(n)]),
                "ParentSpanId": pa.array(["p"] * n),
                "ProjectId": pa.array(["server-phases"] * n),
                "Role": pa.array(role),
                "IsServerSpan": pa.array(server, pa.uint8()),
                "Route": pa.array(route),
                "QueueMs": pa.array(queue, pa.float64()),
                "PrefillMs": pa.array(prefill, pa.float64()),
                "TtftMs": pa.array(ttft, pa.float64()),
            },
            n,
        )
    )
    evidence = embedded_store.advice_evidence(SpanFilter("server-phases", now - 3600 * 10**9, now))
    assert evidence == {
        "/srv": {
            "calls": evidence["/srv"]["calls"],
            "server": {
                "route": "/srv",
                "queue_ms": 200.0,
                "prefill_ms": 60.0,
                "server_ttft_ms": 300.0,
                "server_calls": 2,
            },
        }
    }
    assert evidence["/srv"]["calls"]["calls"] == 1 and evidence["/srv"]["calls"]["ttft_ms"] == 900.0


def test_the_prompt_cache_finding_names_the_cause_and_the_lever() -> None:
    """100 calls, 96 misses: 90 on a system prompt changed within its first 40 bytes, 4 cold, 2 expired."""
    evidence = RouteEvidence("/chat", traces=100, model_calls_per_trace=1, calls={
        "calls": 100, "cache_reported_calls": 100, "cache_input_tokens": 400_000, "cache_read_tokens": 12_000,
        "uncached_calls": 96, "ttft_cached_ms": 290.0, "ttft_uncached_ms": 470.0},
        cache={"misses_by_reason": {"prefix_changed": 90, "cold": 4, "expired": 2},
               "changed_parts": {"system": {"misses": 90, "offset_p50": 30.0, "offset_p95": 39.0}}})  # fmt: skip
    [finding] = advise([evidence])
    per_call = (470 - 290) * 92 / 100  # the cold misses no lever avoids
    assert finding.lever == (
        f"the system prompt differs from the previous call's within its first 40 bytes on 90% of calls: move the"
        f" dynamic part after it; saves {per_call:.0f} ms TTFT per call; 2% of calls came after the route was idle"
        " longer than the cache lives: ask for a longer lifetime (Anthropic cache_control ttl 1h, OpenAI"
        " prompt_cache_options ttl 12h) or keep it warm"
    )
    assert finding.saving_ms_per_request == pytest.approx(per_call)
    assert finding.evidence["avoidable_misses"] == 92
    assert finding.as_dict()["saving_basis"].endswith("96 of 100 model calls missed the cache, 92 of them avoidably")
