"""The query API against known span timings: exact percentiles, filters, sorting, errors."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from fastapi.routing import APIRoute

from agentlat.api.client import ApiClient
from agentlat.api.models import ANSWERS
from agentlat.server.routes import ROUTERS
from tests.otlp_payloads import MS, SpanSpec, otlp_protobuf
from tests.servers import ServerProcess, wait_for

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def ingest(server: ServerProcess, spans: list[SpanSpec]) -> None:
    response = httpx.post(f"{server.url}/v1/traces", content=otlp_protobuf(spans), headers=PROTOBUF, timeout=30)
    assert response.status_code == 200, response.text


def percentiles(server: ServerProcess, expected_count: int, **params: str) -> dict:
    def fetch() -> dict | None:
        body = server.get("/api/v1/percentiles", **params).json()
        total = sum(row["count"] for row in body["rows"])
        return body if total >= expected_count else None

    return wait_for(fetch)


@pytest.fixture(scope="module")
def known_data(server: ServerProcess) -> float:
    """100 tool calls of 1..100 ms; model calls of two models with known TTFT and ITL; 4 agent runs."""
    base = time.time_ns() - 30 * 60 * 1_000_000_000
    child = {"parent_span_id": "f" * 16}  # only the agent runs are roots (E2E)
    spans = [
        SpanSpec(
            f"execute_tool t{i % 2}",
            start_ns=base + i * MS,
            duration_ns=(i + 1) * MS,
            service="pct-svc",
            **child,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": f"t{i % 2}",
                "agentlat.route": "/search",
            },
        )
        for i in range(100)
    ]
    for i, ttft in enumerate([100.0, 200.0, 300.0, 400.0]):
        spans.append(
            SpanSpec(
                "chat small",
                start_ns=base + i * MS,
                duration_ns=1000 * MS,
                service="pct-svc",
                **child,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "small",
                    "gen_ai.response.time_to_first_chunk": ttft / 1000,
                    "agentlat.itl.mean": 0.010 * (i + 1),
                    "agentlat.route": "/chat",
                },
            )
        )
    for i in range(3):
        spans.append(
            SpanSpec(
                "chat large",
                start_ns=base + i * MS,
                duration_ns=2000 * MS,
                service="pct-svc",
                **child,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "large",
                    "gen_ai.response.time_to_first_chunk": 1.0 + i,
                    "agentlat.route": "/chat",
                },
            )
        )
    # A vLLM server span must not count as a client model call.
    spans.append(
        SpanSpec(
            "llm_request",
            kind=2,
            service="pct-svc",
            **child,
            start_ns=base,
            duration_ns=5 * MS,
            attributes={"gen_ai.latency.time_to_first_token": 9.0, "gen_ai.request.model": "small"},
        )
    )
    for i, seconds in enumerate([1, 2, 3, 10]):
        spans.append(
            SpanSpec(
                "invoke_agent a",
                start_ns=base + i * MS,
                duration_ns=seconds * 1000 * MS,
                service="pct-svc",
                attributes={"gen_ai.operation.name": "invoke_agent", "agentlat.route": "/chat" if i < 2 else "/search"},
            )
        )
    ingest(server, spans)
    return base


def test_tool_percentiles_are_exact(server: ServerProcess, known_data: float) -> None:
    body = percentiles(server, 100, metric="tool", service="pct-svc", window="2h")
    assert body["unit"] == "ms"
    [row] = body["rows"]
    assert row["count"] == 100
    # Linear interpolation between closest ranks (numpy's default) over 1..100 ms.
    assert row["p50"] == pytest.approx(50.5, abs=1e-9)
    assert row["p95"] == pytest.approx(95.05, abs=1e-9)
    assert row["p99"] == pytest.approx(99.01, abs=1e-9)
    assert row["mean"] == pytest.approx(50.5, abs=1e-9)


def test_grouping_by_tool_splits_the_calls(server: ServerProcess, known_data: float) -> None:
    body = percentiles(server, 100, metric="tool", service="pct-svc", group_by="tool", window="2h")
    rows = {r["group"]["tool"]: r for r in body["rows"]}
    assert rows["t0"]["count"] == 50 and rows["t1"]["count"] == 50
    assert rows["t0"]["p50"] == pytest.approx(50.0)  # 1, 3, ..., 99
    assert rows["t1"]["p50"] == pytest.approx(51.0)  # 2, 4, ..., 100


def test_ttft_by_model_ignores_server_spans(server: ServerProcess, known_data: float) -> None:
    body = percentiles(server, 7, metric="ttft", service="pct-svc", group_by="model", window="2h")
    rows = {r["group"]["model"]: r for r in body["rows"]}
    assert rows["small"]["count"] == 4
    assert rows["small"]["p50"] == pytest.approx(250.0)
    assert rows["small"]["p95"] == pytest.approx(385.0)
    assert rows["large"]["count"] == 3
    assert rows["large"]["p99"] == pytest.approx(2980.0)


def test_itl_and_e2e_by_route(server: ServerProcess, known_data: float) -> None:
    itl = percentiles(server, 4, metric="itl", service="pct-svc", window="2h")["rows"][0]
    assert itl["count"] == 4 and itl["p50"] == pytest.approx(25.0)
    body = percentiles(server, 4, metric="e2e", service="pct-svc", group_by="route", window="2h")
    rows = {r["group"]["route"]: r for r in body["rows"]}
    assert rows["/chat"]["count"] == 2 and rows["/chat"]["p50"] == pytest.approx(1500.0)
    assert rows["/search"]["p99"] == pytest.approx(9930.0)


def test_several_metrics_in_one_read_give_each_ones_rows(server: ServerProcess, known_data: float) -> None:
    """One read for several metrics answers each metric's rows, in the order asked, as its own read would."""
    alone = {m: percentiles(server, 4, metric=m, service="pct-svc", window="2h") for m in ("itl", "e2e")}
    both = server.get("/api/v1/percentiles", metric="itl,e2e", service="pct-svc", window="2h").json()
    assert both["metric"] == "itl,e2e" and both["source"] == "spans"
    assert both["rows"] == alone["itl"]["rows"] + alone["e2e"]["rows"]
    assert [r["metric"] for r in both["rows"]] == ["itl", "e2e"] and both["rows"][0]["p50"] == pytest.approx(25.0)
    assert both["description"].startswith("itl: ") and "; e2e: " in both["description"]
    again = server.get("/api/v1/percentiles", metric="itl, e2e,itl", service="pct-svc", window="2h").json()
    assert again["metric"] == "itl,e2e" and again["rows"] == both["rows"]  # a metric asked twice answers once


def test_filters_and_window_exclude_data(server: ServerProcess, known_data: float) -> None:
    percentiles(server, 100, metric="tool", service="pct-svc", window="2h")
    assert server.get("/api/v1/percentiles", metric="tool", service="pct-svc", window="1m").json()["rows"] == []
    only = server.get("/api/v1/percentiles", metric="tool", service="pct-svc", tool="t1", window="2h").json()
    assert [r["count"] for r in only["rows"]] == [50]


def test_slowest_traces_come_first(server: ServerProcess, known_data: float) -> None:
    percentiles(server, 100, metric="tool", service="pct-svc", window="2h")
    traces = server.get("/api/v1/traces", sort="slowest", service="pct-svc", limit=3, window="2h").json()["traces"]
    assert [t["duration_ms"] for t in traces] == [10000.0, 3000.0, 2000.0]
    assert traces[0]["root_name"] == "invoke_agent a" and traces[0]["has_root"] is True


@pytest.mark.parametrize(
    ("path", "params", "status", "fragment"),
    [
        ("/api/v1/percentiles", {"metric": "nope"}, 400, "metric='nope'"),
        ("/api/v1/percentiles", {"metric": "e2e,nope"}, 400, "metric='e2e,nope'"),
        ("/api/v1/percentiles", {"metric": "e2e", "source": "rollups", "group_by": "role"}, 400, "not kept"),
        ("/api/v1/percentiles", {"group_by": "colour"}, 400, "group_by ['colour']"),
        ("/api/v1/percentiles", {"window": "soon"}, 400, "window='soon'"),
        ("/api/v1/percentiles", {"start": "yesterday"}, 400, "start='yesterday'"),
        ("/api/v1/percentiles", {"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, 400, "before"),
        ("/api/v1/traces", {"sort": "random"}, 400, "sort"),
        ("/api/v1/traces", {"limit": "0"}, 400, "limit"),
        ("/api/v1/traces/xyz", {}, 400, "32 hex"),
        ("/api/v1/traces/" + "ab" * 16, {}, 404, "no spans"),
        ("/api/v1/nothing-here", {}, 404, "Not Found"),
    ],
)
def test_query_errors_have_one_shape(
    server: ServerProcess, path: str, params: dict, status: int, fragment: str
) -> None:
    response = server.get(path, **params)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["status"] == status
    assert fragment in error["message"]


def test_injection_attempts_are_plain_values(server: ServerProcess, known_data: float) -> None:
    hostile = "x' OR 1=1 --"
    body = server.get("/api/v1/percentiles", metric="tool", service=hostile, window="2h").json()
    assert body["rows"] == []
    assert body["filters"] == {"service": hostile}


def test_openapi_docs_and_health(server: ServerProcess) -> None:
    spec = server.get("/openapi.json").json()
    assert {"/v1/traces", "/api/v1/percentiles", "/api/v1/traces", "/api/v1/traces/{trace_id}"} <= set(spec["paths"])
    assert server.get("/docs").status_code == 200
    assert server.get("/healthz").json() == {"status": "ok"}
    ready = server.get("/readyz").json()
    assert ready["status"] == "ok" and ready["problems"] == []


def test_the_client_reads_each_route_into_the_model_its_router_declares() -> None:
    """``ANSWERS``, what the client reads answers into, is the routers' ``response_model``, route for route."""
    declared = {
        f"{method} {route.path}": route.response_model
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute) and route.path.startswith("/api/v1/")
        for method in route.methods
    }
    assert declared == ANSWERS


def test_the_client_reads_answers_back_to_the_same_json(server: ServerProcess, known_data: float) -> None:
    """A model dumped by alias (what the CLI prints) is the JSON the server sent: keys, their order, nulls."""
    percentiles(server, 100, metric="tool", service="pct-svc", window="2h")
    [trace] = server.get("/api/v1/traces", service="pct-svc", limit=1, window="2h").json()["traces"]
    reads = [
        ("/api/v1/percentiles", {"metric": "ttft", "group_by": "model", "service": "pct-svc", "window": "2h"}),
        ("/api/v1/traces", {"service": "pct-svc", "sort": "slowest", "window": "2h"}),
        (f"/api/v1/traces/{trace['trace_id']}", {}),
        ("/api/v1/advice", {"window": "2h"}),
    ]
    sent: list[httpx.Response] = []

    def keep(response: httpx.Response) -> None:
        response.read()
        sent.append(response)

    with ApiClient(server.url) as client:
        client._client.event_hooks = {"response": [keep]}  # the very answer the client read
        for path, params in reads:
            dumped = client.get(path, **params).model_dump(mode="json", by_alias=True)
            assert json.dumps(dumped) == json.dumps(sent.pop().json()), path
