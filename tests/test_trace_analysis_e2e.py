"""Trace assembly, the E2E split, what-ifs and rollups through a real collector."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id, otlp_protobuf
from tests.servers import ServerProcess, wait_for

PROTOBUF = {"Content-Type": "application/x-protobuf"}
FAST = {"AGENTLAT_TRACE_GRACE": "0.3", "AGENTLAT_PARTIAL_TRACE_TIMEOUT": "2", "AGENTLAT_ROLLUP_SETTLE": "0.3"}


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("analysis"), extra_env=FAST).start()
    yield proc
    proc.stop()


def ingest(server: ServerProcess, spans: list[SpanSpec]) -> None:
    response = httpx.post(f"{server.url}/v1/traces", content=otlp_protobuf(spans), headers=PROTOBUF, timeout=30)
    assert response.status_code == 200, response.text


def analysis(server: ServerProcess, trace_id: str, **expect: object) -> dict:
    def fetch() -> dict | None:
        response = server.get(f"/api/v1/traces/{trace_id}")
        found = response.json().get("analysis") if response.status_code == 200 else None
        return found if found and all(found[k] == v for k, v in expect.items()) else None

    return wait_for(fetch)


def agent_trace(base: int, route: str, service: str = "split-svc") -> list[SpanSpec]:
    """model 0-300 ms (TTFT 100), tools A 300-500 and B 500-700 (serial, independent), model 700-1000."""
    trace_id, root = new_trace_id(), new_span_id()

    def child(name: str, start: int, end: int, attrs: dict) -> SpanSpec:
        return SpanSpec(
            name,
            trace_id=trace_id,
            parent_span_id=root,
            start_ns=base + start * MS,
            duration_ns=(end - start) * MS,
            service=service,
            attributes={"agentlat.route": route, **attrs},
        )

    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m1"}
    return [
        SpanSpec("invoke_agent support", trace_id=trace_id, span_id=root, start_ns=base, duration_ns=1000 * MS,
                 service=service, attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                                              "agentlat.route": route}),
        child("chat m1", 0, 300, {**chat, "gen_ai.response.time_to_first_chunk": 0.1,
                                  "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_read.input_tokens": 250}),
        child("execute_tool a", 300, 500, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "a"}),
        child("execute_tool b", 500, 700, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "b"}),
        child("chat m1", 700, 1000, chat),
    ]  # fmt: skip


def test_split_critical_path_and_what_if(fast: ServerProcess) -> None:
    spans = agent_trace(time.time_ns() - 120 * 1000 * MS, "/support")
    ingest(fast, spans[::-1])  # children before their root: order must not matter
    a = analysis(fast, spans[0].trace_id)
    assert (a["e2e_ms"], a["model_ms"], a["tool_ms"], a["orchestration_ms"]) == (1000.0, 600.0, 400.0, 0.0)
    assert a["critical_path"] == [s.span_id for s in spans]
    assert a["model_calls"] == 2 and a["tool_calls"] == 2 and a["partial"] is False
    assert a["first_ttft_ms"] == pytest.approx(100.0)
    assert a["cache_hit_ratio"] == pytest.approx(0.25)
    assert a["route"] == "/support" and a["agent"] == "support" and a["root_name"] == "invoke_agent support"
    [group] = a["parallelisable"]
    assert group["tools"] == ["a", "b"] and group["saving_ms"] == 200.0
    assert a["parallel_saving_ms"] == 200.0
    assert sum(s["end_ns"] - s["start_ns"] for s in a["segments"]) == 1000 * MS


def planner_trace(base: int, route: str, service: str = "dispatch-svc") -> list[SpanSpec]:
    """The model call (0-1000 ms) streams tool calls A (arguments complete at 300 ms) and B (at 600 ms), as
    the SDK records them; tools a 1010-1410 and b 1010-1210 start only after the message; model 1420-2000."""
    trace_id, root = new_trace_id(), new_span_id()

    def child(name: str, start: int, end: int, attrs: dict, events: list | None = None) -> SpanSpec:
        return SpanSpec(name, trace_id=trace_id, parent_span_id=root, start_ns=base + start * MS,
                        duration_ns=(end - start) * MS, service=service, attributes={"agentlat.route": route, **attrs},
                        events=events or [])  # fmt: skip

    def streamed(call_id: str, name: str, named: float, ready: float) -> tuple[str, int, dict]:
        attrs = {"gen_ai.tool.call.id": call_id, "gen_ai.tool.name": name,
                 "agentlat.tool_call.named_at": named, "agentlat.tool_call.ready_at": ready}  # fmt: skip
        return ("agentlat.tool_call", base + round(ready * 1000) * MS, attrs)

    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m1"}
    return [
        SpanSpec("invoke_agent planner", trace_id=trace_id, span_id=root, start_ns=base, duration_ns=2000 * MS,
                 service=service, attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner",
                                              "agentlat.route": route}),
        child("chat m1", 0, 1000, chat, [streamed("A", "a", 0.1, 0.3), streamed("B", "b", 0.4, 0.6)]),
        child("execute_tool a", 1010, 1410, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "a",
                                             "gen_ai.tool.call.id": "A"}),
        child("execute_tool b", 1010, 1210, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "b",
                                             "gen_ai.tool.call.id": "B"}),
        child("chat m1", 1420, 2000, chat),
    ]  # fmt: skip


def test_streamed_tool_calls_dispatch_delays_and_what_if(fast: ServerProcess) -> None:
    spans = planner_trace(time.time_ns() - 120 * 1000 * MS, "/planner")
    ingest(fast, spans)
    a = analysis(fast, spans[0].trace_id)
    model, tool_a, tool_b = (s.span_id for s in spans[1:4])
    # started when ready, a would run 300-700 and b 600-800: both done as the message ends, 410 ms sooner
    assert (a["dispatch_saving_ms"], a["dispatch_delays_ms"], a["dispatch_streamed_calls"]) == (
        410.0,
        [710.0, 410.0],
        0,
    )
    base = spans[0].start_ns
    assert a["dispatched"] == [
        {"span_id": tool_a, "tool": "a", "call_id": "A", "model_span_id": model, "ready_ns": base + 300 * MS,
         "delay_ms": 710.0, "while_streaming": False, "on_critical_path": True},
        {"span_id": tool_b, "tool": "b", "call_id": "B", "model_span_id": model, "ready_ns": base + 600 * MS,
         "delay_ms": 410.0, "while_streaming": False, "on_critical_path": False},
    ]  # fmt: skip
    assert a["dispatch_groups"] == [{"model_span_id": model, "span_ids": [tool_a, tool_b], "tools": ["a", "b"],
                                     "saving_ms": 410.0, "on_critical_path": True}]  # fmt: skip
    assert (a["parallel_saving_ms"], a["e2e_ms"]) == (0.0, 2000.0)  # the tools overlap: nothing to parallelise


def test_late_span_re_analyses(fast: ServerProcess) -> None:
    spans = agent_trace(time.time_ns() - 120 * 1000 * MS, "/late")
    ingest(fast, spans[:3])
    first = analysis(fast, spans[0].trace_id, span_count=3)
    assert first["tool_ms"] == 200.0
    ingest(fast, spans[3:])
    again = analysis(fast, spans[0].trace_id, span_count=5)
    assert again["tool_ms"] == 400.0 and again["model_ms"] == 600.0


def test_missing_root_is_analysed_as_partial(fast: ServerProcess) -> None:
    spans = agent_trace(time.time_ns() - 120 * 1000 * MS, "/orphans")
    ingest(fast, spans[1:])
    a = analysis(fast, spans[0].trace_id, partial=True)
    assert a["e2e_ms"] == 1000.0 and a["span_count"] == 4
    ingest(fast, spans[:1])  # the root turns up after all
    assert analysis(fast, spans[0].trace_id, partial=False)["span_count"] == 5


def test_breakdown_and_timeseries_from_rollups(fast: ServerProcess) -> None:
    base = (time.time_ns() // (60_000 * MS) - 3) * 60_000 * MS  # a whole minute, three minutes ago
    for i in range(4):
        ingest(fast, agent_trace(base + i * 1000 * MS, "/rolled", service="rollup-svc"))

    def rolled() -> dict | None:
        body = fast.get("/api/v1/breakdown", group_by="route", service="rollup-svc", window="1h").json()
        rows = body["rows"]
        return body if rows and rows[0]["traces"] == 4 else None

    [row] = wait_for(rolled)["rows"]
    assert row["group"] == {"route": "/rolled"}
    assert row["e2e"]["mean"] == pytest.approx(1000.0) and row["e2e"]["p95"] == pytest.approx(1000.0)
    assert row["model"]["mean"] == pytest.approx(600.0) and row["tool"]["p50"] == pytest.approx(400.0)
    assert row["share"] == pytest.approx({"model": 0.6, "tool": 0.4, "orchestration": 0.0})
    series = fast.get("/api/v1/timeseries", metric="ttft", step="1m", service="rollup-svc", window="1h").json()
    [line] = series["series"]
    assert [(p["count"], p["p50"]) for p in line["points"]] == [(4, pytest.approx(100.0))]
    assert line["points"][0]["t"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base // 10**9))
    long = fast.get("/api/v1/percentiles", metric="tool", service="rollup-svc", window="24h").json()
    assert long["source"] == "rollups" and long["rows"][0]["count"] == 8
    assert long["rows"][0]["p50"] == pytest.approx(200.0)
    groups = fast.get("/api/v1/groups", group_by="service,route", service="rollup-svc", window="24h").json()
    assert groups["rows"] == [{"group": {"service": "rollup-svc", "route": "/rolled"}, "count": 4}]


def test_an_agent_run_whose_model_calls_went_elsewhere_has_no_model_time(fast: ServerProcess) -> None:
    """LiteLLM's callback roots each call in a trace of its own: the agent's trace holds the agent and its tool only.
    Its split says unknown, not "model 0 ms", and the split's rollups and tail bands leave it out; E2E counts it."""
    base = (time.time_ns() // (60_000 * MS) - 3) * 60_000 * MS
    complete = agent_trace(base, "/elsewhere", service="elsewhere-svc")
    lone = [s for s in agent_trace(base + 2000 * MS, "/elsewhere", service="elsewhere-svc") if "chat" not in s.name]
    ingest(fast, complete + lone)
    a = analysis(fast, lone[0].trace_id, span_count=3)
    assert (a["split_complete"], a["model_ms"], a["orchestration_ms"]) == (False, None, None)
    assert (a["e2e_ms"], a["tool_ms"], a["model_calls"], a["tool_calls"]) == (1000.0, 400.0, 0, 2)
    assert analysis(fast, complete[0].trace_id)["split_complete"] is True

    def rolled() -> dict | None:
        body = fast.get("/api/v1/breakdown", group_by="route", service="elsewhere-svc", window="1h").json()
        return body if body["rows"] and body["rows"][0]["traces"] == 2 else None

    [row] = wait_for(rolled)["rows"]
    assert (row["e2e"]["count"], row["model"]["count"], row["tool"]["count"]) == (2, 1, 1)
    assert row["model"]["mean"] == pytest.approx(600.0) and row["tool"]["mean"] == pytest.approx(400.0)
    assert row["share"] == pytest.approx({"model": 0.6, "tool": 0.4, "orchestration": 0.0})
    assert [(band["traces"], band["model"]) for band in row["at"].values()] == [(1, 600.0)] * 3


def inside(outer: SpanSpec, **changes: object) -> SpanSpec:
    """Another view of ``outer``'s call: its child, a millisecond inside it at either end."""
    return replace(outer, span_id=new_span_id(), parent_span_id=outer.span_id, start_ns=outer.start_ns + MS,
                   duration_ns=outer.duration_ns - 2 * MS, **changes)  # fmt: skip


def test_a_call_seen_by_two_spans_counts_once_in_span_figures(fast: ServerProcess) -> None:
    """A framework's wrapper around the client's own span of one request, and an MCP server's span inside the
    client's tool span: per-span percentiles, counts and rollups see one call each, the one stating most."""
    base = (time.time_ns() // (60_000 * MS) - 3) * 60_000 * MS
    spans = agent_trace(base, "/twice", service="twice-svc")
    wrapper, tool_a = spans[1], spans[2]
    stated = {"gen_ai.response.time_to_first_chunk": 0.098, "gen_ai.usage.output_tokens": 20}
    inner = inside(wrapper, attributes={**wrapper.attributes, **stated})
    server_side = inside(tool_a, service="mcp-server")
    ingest(fast, [*spans, inner, server_side])
    a = analysis(fast, spans[0].trace_id, span_count=7)
    assert (a["model_calls"], a["tool_calls"], a["model_ms"], a["tool_ms"]) == (2, 2, 600.0, 400.0)

    def figures(source: str) -> dict | None:
        body = fast.get(
            "/api/v1/percentiles", metric="ttft,model,tool", service="twice-svc", window="24h", source=source
        ).json()
        found = {row["metric"]: row for row in body["rows"]}
        return found if body["source"] == source and found.get("tool", {}).get("count") == 2 else None

    for source in ("spans", "rollups"):
        found = wait_for(lambda source=source: figures(source))
        assert (found["ttft"]["count"], found["ttft"]["p50"]) == (1, pytest.approx(98.0)), source
        assert (found["model"]["count"], found["model"]["p50"]) == (2, pytest.approx(299.0)), source  # 298 and 300
        assert (found["tool"]["count"], found["tool"]["p50"]) == (2, pytest.approx(200.0)), source
    [model] = fast.get(
        "/api/v1/dimensions", dimension="model", service="twice-svc", window="1h", source="spans"
    ).json()["rows"]
    assert model["count"] == 2


@pytest.mark.parametrize(
    ("path", "params", "fragment"),
    [
        ("/api/v1/breakdown", {"group_by": "provider"}, "group_by ['provider']"),
        ("/api/v1/breakdown", {"role": "tool"}, "not kept in rollups"),
        ("/api/v1/groups", {"group_by": ""}, "group_by: give one or more"),
        ("/api/v1/groups", {"group_by": "span_name"}, "group_by ['span_name']"),
        ("/api/v1/timeseries", {"metric": "queue"}, "metric='queue'"),
        ("/api/v1/timeseries", {"step": "30s"}, "whole minutes"),
        ("/api/v1/percentiles", {"metric": "queue", "source": "rollups"}, "use source=spans"),
    ],
)
def test_rollup_query_errors(fast: ServerProcess, path: str, params: dict, fragment: str) -> None:
    response = fast.get(path, **params)
    assert response.status_code == 400 and fragment in response.json()["error"]["message"]


def test_restart_analyses_what_the_last_run_left(tmp_path: Path) -> None:
    slow = ServerProcess(tmp_path, extra_env={**FAST, "AGENTLAT_TRACE_GRACE": "3600"}).start()
    try:
        spans = agent_trace(time.time_ns() - 120 * 1000 * MS, "/restart")
        ingest(slow, spans)
        wait_for(lambda: len(slow.get(f"/api/v1/traces/{spans[0].trace_id}").json().get("spans", [])) == 5)
        assert slow.get(f"/api/v1/traces/{spans[0].trace_id}").json()["analysis"] is None
    finally:
        slow.kill()
    quick = ServerProcess(tmp_path, port=slow.port, extra_env=FAST).start()
    try:
        assert analysis(quick, spans[0].trace_id)["tool_ms"] == 400.0
    finally:
        quick.stop()


def test_trace_list_holds_rooted_rootless_and_unanalysed_traces(fast: ServerProcess) -> None:
    """The list finds its traces from analysed rows and from root spans: a trace whose parent never
    arrives is listed (once analysed), with its exact span count and range."""
    base = time.time_ns() - 60 * 1000 * MS
    rooted = agent_trace(base, "/listed", service="list-svc")
    earlier = agent_trace(base + 5000 * MS, "/listed", "list-svc")[1:4]  # model 0-300, tools 300-700
    rootless = [replace(span, parent_span_id=new_span_id()) for span in earlier]
    ingest(fast, rootless)
    analysis(fast, rootless[0].trace_id, partial=True)
    ingest(fast, rooted)

    def both_listed() -> list[dict] | None:
        found = fast.get("/api/v1/traces", sort="recent", service="list-svc", window="1h").json()["traces"]
        return found if len(found) == 2 else None

    listed = wait_for(both_listed)
    assert [(t["trace_id"], t["has_root"], t["span_count"]) for t in listed] == [
        (rootless[0].trace_id, False, 3),
        (rooted[0].trace_id, True, 5),
    ]
    slowest = fast.get("/api/v1/traces", sort="slowest", service="list-svc", window="1h", limit=1).json()["traces"]
    assert [(t["trace_id"], t["duration_ms"]) for t in slowest] == [(rooted[0].trace_id, 1000.0)]  # rootless: 700
    by_tool = fast.get("/api/v1/traces", tool="a", route="/listed", window="1h").json()["traces"]
    assert {t["trace_id"] for t in by_tool} == {rooted[0].trace_id, rootless[0].trace_id}
    assert fast.get("/api/v1/traces", tool="nope", route="/listed", window="1h").json()["traces"] == []


def vercel_step_trace(base: int) -> list[SpanSpec]:
    """Vercel AI SDK 6, a streamed step that asked for a tool: doStream 0-650 (first chunk at 300, msToFinish 648: it
    held its finish until the tool returned), ai.toolCall 450-650 beside it, the next step 652-1000."""
    trace_id, root = new_trace_id(), new_span_id()
    vercel = {"ai.telemetry.functionId": "weather_agent", "ai.model.id": "m1"}

    def step(start: int, end: int, first: float, finish: float, **more: str) -> SpanSpec:
        attrs = {**vercel, "ai.operationId": "ai.streamText.doStream", "ai.response.msToFirstChunk": first,
                 "ai.response.msToFinish": finish, **more}  # fmt: skip
        return SpanSpec("ai.streamText.doStream", trace_id=trace_id, parent_span_id=root, start_ns=base + start * MS,
                        duration_ns=(end - start) * MS, attributes=attrs)  # fmt: skip

    return [
        SpanSpec(
            "ai.streamText",
            trace_id=trace_id,
            span_id=root,
            start_ns=base,
            duration_ns=1000 * MS,
            attributes={**vercel, "ai.operationId": "ai.streamText"},
        ),
        step(0, 650, 300.0, 648.0, **{"ai.response.toolCalls": '[{"toolCallId": "call_0", "toolName": "get"}]'}),
        SpanSpec(
            "ai.toolCall",
            trace_id=trace_id,
            parent_span_id=root,
            start_ns=base + 450 * MS,
            duration_ns=200 * MS,
            attributes={
                **vercel,
                "ai.operationId": "ai.toolCall",
                "ai.toolCall.name": "get",
                "ai.toolCall.id": "call_0",
            },
        ),
        step(652, 1000, 300.0, 340.0),
    ]


def test_a_streamed_step_held_open_for_its_tool_ends_its_model_time_where_the_tool_began(fast: ServerProcess) -> None:
    """The tool its answer asked for (ai.response.toolCalls, ai.toolCall.id) ran inside the step's span: the step's
    stream had ended when the tool began, so the tool's time is tool time and the step states no decode."""
    spans = vercel_step_trace(time.time_ns() - 60_000 * MS)
    ingest(fast, spans)
    a = analysis(fast, spans[0].trace_id, span_count=4)
    assert (a["e2e_ms"], a["model_ms"], a["tool_ms"], a["orchestration_ms"]) == (1000.0, 790.0, 200.0, 10.0)
    assert (a["model_sum_ms"], a["first_ttft_ms"], a["model_calls"], a["tool_calls"]) == (790.0, 300.0, 2, 1)
    stored = {s["span_id"]: s["derived"] for s in fast.get(f"/api/v1/traces/{spans[0].trace_id}").json()["spans"]}
    first, last = stored[spans[1].span_id], stored[spans[3].span_id]
    assert (first["AnswerToolCallIds"], first["DecodeMs"], last["DecodeMs"]) == ("call_0", None, 40.0)


def test_a_stream_read_after_its_span_ended_leaves_the_split_unknown(fast: ServerProcess) -> None:
    """LlamaIndex: astream_chat returns its stream at 2 ms (an outer and an inner span of one request, the inner one
    with the first-token event at 300 ms); the agent's step reads the rest and records nothing of it."""
    base, trace_id, root, step, outer = time.time_ns() - 60_000 * MS, new_trace_id(), *(new_span_id() for _ in "abc")
    llm = {"openinference.span.kind": "LLM", "llm.model_name": "m1"}
    spans = [
        SpanSpec("FunctionAgent.run", trace_id=trace_id, span_id=root, start_ns=base, duration_ns=900 * MS,
                 attributes={"openinference.span.kind": "CHAIN"}),
        SpanSpec("BaseWorkflowAgent.run_agent_step", trace_id=trace_id, span_id=step, parent_span_id=root,
                 start_ns=base, duration_ns=460 * MS, attributes={"openinference.span.kind": "CHAIN"}),
        SpanSpec("OpenAILike.astream_chat", trace_id=trace_id, span_id=outer, parent_span_id=step,
                 start_ns=base + 1 * MS, duration_ns=2 * MS, attributes=llm),
        SpanSpec("OpenAILike.astream_chat", trace_id=trace_id, parent_span_id=outer, start_ns=base + 1 * MS,
                 duration_ns=1 * MS, attributes=llm, events=[("First Token Stream Event", base + 301 * MS, {})]),
        SpanSpec("FunctionTool.acall", trace_id=trace_id, parent_span_id=root, start_ns=base + 470 * MS,
                 duration_ns=200 * MS, attributes={"openinference.span.kind": "TOOL", "tool.name": "get"}),
    ]  # fmt: skip
    ingest(fast, spans)
    a = analysis(fast, trace_id, span_count=5)
    assert (a["split_complete"], a["model_ms"], a["orchestration_ms"], a["tool_ms"]) == (False, None, None, 200.0)
    assert (a["model_calls"], a["first_ttft_ms"]) == (1, 300.0)
