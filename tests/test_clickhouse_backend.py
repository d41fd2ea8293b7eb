"""The ClickHouse-server backend end to end: ``agentlat serve --clickhouse URL``, same SQL as chDB.

The server is the one AGENTLAT_CLICKHOUSE_URL names, or else the chDB-backed test double of
ClickHouse's HTTP interface (``tests/clickhouse_shim.py``), so clickhouse-connect, the HTTP
protocol and the ClickHouse backend's code all run for real on every test run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import clickhouse_connect
import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentlat.collector.ingest.otlp import Limits, parse_protobuf, to_batch
from agentlat.store import SpanFilter, Store, StoreError, StoreUnavailable, open_store
from agentlat.store.backends import ClickHouseBackend
from agentlat.store.migrations import MIGRATIONS, SPANS_REBUILD_MARK
from tests.clickhouse_shim import ClickHouseShim
from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id, otlp_protobuf
from tests.servers import ServerProcess, free_port, wait_for

PROTOBUF = {"Content-Type": "application/x-protobuf"}
FAST = {"AGENTLAT_TRACE_GRACE": "0.3", "AGENTLAT_PARTIAL_TRACE_TIMEOUT": "2", "AGENTLAT_ROLLUP_SETTLE": "0.3"}
NS = 1_000_000_000


@pytest.fixture(scope="module")
def clickhouse_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if url := os.environ.get("AGENTLAT_CLICKHOUSE_URL"):
        yield url
        return
    workdir = tmp_path_factory.mktemp("clickhouse")
    shim = ClickHouseShim(workdir / "chdb", free_port(), workdir / "shim.log").start()
    yield shim.url
    shim.kill()


@pytest.fixture(scope="module")
def ch_server(tmp_path_factory: pytest.TempPathFactory, clickhouse_url: str) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("ch-server"), extra_env={**FAST, "AGENTLAT_CLICKHOUSE_URL": clickhouse_url}
    )
    assert proc.store_args()[0] == "--clickhouse"
    proc.start()
    yield proc
    proc.stop()


def database_url(server: ServerProcess) -> str:
    return server.store_args()[1]


def ingest(server: ServerProcess, spans: list[SpanSpec]) -> None:
    response = httpx.post(f"{server.url}/v1/traces", content=otlp_protobuf(spans), headers=PROTOBUF, timeout=30)
    assert response.status_code == 200, response.text


def agent_trace(base: int, route: str, service: str) -> list[SpanSpec]:
    """model 0-300 ms (TTFT 100), tools a 300-500 and b 500-700 (serial, independent), model 700-1000."""
    trace_id, root = new_trace_id(), new_span_id()
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m1", "agentlat.route": route}

    def child(name: str, start: int, end: int, attrs: dict) -> SpanSpec:
        return SpanSpec(name, trace_id=trace_id, parent_span_id=root, start_ns=base + start * MS,
                        duration_ns=(end - start) * MS, service=service, attributes=attrs)  # fmt: skip

    return [
        SpanSpec("invoke_agent support", trace_id=trace_id, span_id=root, start_ns=base, duration_ns=1000 * MS,
                 service=service, attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                                              "agentlat.route": route}),
        child("chat m1", 0, 300, {**chat, "gen_ai.response.time_to_first_chunk": 0.1}),
        child("execute_tool a", 300, 500, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "a",
                                           "agentlat.route": route}),
        child("execute_tool b", 500, 700, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "b",
                                           "agentlat.route": route}),
        child("chat m1", 700, 1000, chat),
    ]  # fmt: skip


def test_migrations_are_applied_on_the_server(ch_server: ServerProcess) -> None:
    wait_for(lambda: "store      ClickHouse server" in ch_server.log(), timeout=15)  # the banner, once it answers
    client = clickhouse_connect.get_client(dsn=database_url(ch_server), autogenerate_session_id=False)
    try:
        versions = client.query("SELECT Version FROM agentlat_migrations ORDER BY Version").result_columns[0]
        assert versions == [*(m.version for m in MIGRATIONS), SPANS_REBUILD_MARK]  # the mark: when 9's copy began
        tables = set(client.query("SHOW TABLES").result_columns[0])
        assert {"otel_traces", "agentlat_traces", "agentlat_rollup_1m", "agentlat_migrations"} <= tables
        engine = client.command(
            "SELECT engine FROM system.tables WHERE database = currentDatabase() AND name = {t:String}",
            parameters={"t": "otel_traces"},
        )
        assert engine == "ReplacingMergeTree"
    finally:
        client.close()
    assert ch_server.get("/readyz").json() == {"status": "ok", "problems": [], "pending_bytes": 0, "writer": "running"}


def test_real_otlp_exporter_spans_land(ch_server: ServerProcess) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "ch-exporter-svc"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{ch_server.url}/v1/traces")))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("ch-test", "1.0")
    with (
        tracer.start_as_current_span("invoke_agent planner", attributes={"gen_ai.operation.name": "invoke_agent"}),
        tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.time_to_first_chunk": 0.004,
                "gen_ai.usage.input_tokens": 1200,
                "tags": ["a", "b"],
            },
        ) as chat,
    ):
        chat.add_event("first chunk", {"n": 1})
    provider.shutdown()
    sent = {format(s.context.span_id, "016x"): s for s in memory.get_finished_spans()}
    trace_id = format(next(iter(sent.values())).context.trace_id, "032x")

    def spans() -> list[dict] | None:
        response = ch_server.get(f"/api/v1/traces/{trace_id}")
        found = response.json()["spans"] if response.status_code == 200 else []
        return found if len(found) == 2 else None

    stored = {s["span_id"]: s for s in wait_for(spans)}
    assert stored.keys() == sent.keys()
    for span_id, original in sent.items():
        assert stored[span_id]["start_ns"] == original.start_time  # DateTime64(9) keeps nanoseconds
        assert stored[span_id]["duration_ns"] == original.end_time - original.start_time
        assert stored[span_id]["service"] == "ch-exporter-svc"
    chat_span = next(s for s in stored.values() if s["name"] == "chat gpt-4o")
    assert chat_span["attributes"]["tags"] == '["a","b"]'
    assert chat_span["events"][0]["name"] == "first chunk" and chat_span["events"][0]["attributes"] == {"n": "1"}
    assert chat_span["derived"]["TtftMs"] == pytest.approx(4.0) and chat_span["derived"]["InputTokens"] == 1200


def test_exact_percentiles_and_duplicates_count_once(ch_server: ServerProcess) -> None:
    base = time.time_ns() - 30 * 60 * NS
    spans = [
        SpanSpec(f"execute_tool t{i % 2}", start_ns=base + i * MS, duration_ns=(i + 1) * MS, service="ch-pct-svc",
                 parent_span_id="f" * 16, attributes={"gen_ai.operation.name": "execute_tool",
                                                      "gen_ai.tool.name": f"t{i % 2}"})
        for i in range(100)
    ]  # fmt: skip
    ingest(ch_server, spans)
    ingest(ch_server, spans[:10])  # an OTLP retry: the same spans again

    def rows() -> list[dict] | None:
        body = ch_server.get("/api/v1/percentiles", metric="tool", service="ch-pct-svc", window="2h").json()
        return body["rows"] if sum(r["count"] for r in body["rows"]) >= 100 else None

    [row] = wait_for(rows)
    assert row["count"] == 100
    assert (row["p50"], row["p95"], row["p99"], row["mean"]) == (
        pytest.approx(50.5),
        pytest.approx(95.05),
        pytest.approx(99.01),
        pytest.approx(50.5),
    )
    by_tool = ch_server.get("/api/v1/percentiles", metric="tool", service="ch-pct-svc", group_by="tool", window="2h")
    assert {r["group"]["tool"]: (r["count"], r["p50"]) for r in by_tool.json()["rows"]} == {
        "t0": (50, pytest.approx(50.0)),
        "t1": (50, pytest.approx(51.0)),
    }
    hostile = ch_server.get("/api/v1/percentiles", metric="tool", service="x' OR 1=1 --", window="2h").json()
    assert hostile["rows"] == []


def test_trace_list_analysis_breakdown_and_timeseries(ch_server: ServerProcess) -> None:
    base = (time.time_ns() // (60 * NS) - 3) * 60 * NS  # a whole minute, three minutes ago
    traces = [agent_trace(base + i * 1000 * MS, "/ch-route", "ch-split-svc") for i in range(4)]
    for spans in traces:
        ingest(ch_server, spans[::-1])  # children before their root
    trace_id = traces[0][0].trace_id

    def analysis() -> dict | None:
        response = ch_server.get(f"/api/v1/traces/{trace_id}")
        return response.json().get("analysis") if response.status_code == 200 else None

    a = wait_for(analysis)
    assert (a["e2e_ms"], a["model_ms"], a["tool_ms"], a["orchestration_ms"]) == (1000.0, 600.0, 400.0, 0.0)
    assert a["critical_path"] == [s.span_id for s in traces[0]]
    assert a["parallelisable"][0]["tools"] == ["a", "b"] and a["parallel_saving_ms"] == 200.0
    listed = ch_server.get("/api/v1/traces", service="ch-split-svc", sort="slowest", window="1h").json()["traces"]
    assert {t["trace_id"] for t in listed} == {spans[0].trace_id for spans in traces}
    assert {t["duration_ms"] for t in listed} == {1000.0}

    def breakdown() -> list[dict] | None:
        body = ch_server.get("/api/v1/breakdown", group_by="route", service="ch-split-svc", window="1h").json()
        return body["rows"] if body["rows"] and body["rows"][0]["traces"] == 4 else None

    [row] = wait_for(breakdown)
    assert row["group"] == {"route": "/ch-route"}
    assert row["e2e"]["mean"] == pytest.approx(1000.0) and row["tool"]["p50"] == pytest.approx(400.0)
    assert row["share"] == pytest.approx({"model": 0.6, "tool": 0.4, "orchestration": 0.0})
    series = ch_server.get("/api/v1/timeseries", metric="ttft", step="1m", service="ch-split-svc", window="1h").json()
    assert [(p["count"], p["p50"]) for p in series["series"][0]["points"]] == [(4, pytest.approx(100.0))]
    for path in ("/api/v1/dimensions", "/api/v1/advice"):
        assert ch_server.get(path, window="1h").status_code == 200, path


def test_same_sql_same_answers_as_chdb(embedded_store: Store, clickhouse_url: str, tmp_path: Path) -> None:
    """One batch into the embedded store and into the server: every read gives the same rows."""
    ch_url = ServerProcess(tmp_path, extra_env={"AGENTLAT_CLICKHOUSE_URL": clickhouse_url}).store_args()[1]
    server_store = open_store(clickhouse_url=ch_url)
    assert open_store(clickhouse_url=ch_url).migrate() == []  # a second start applies nothing
    base = time.time_ns() - 10 * 60 * NS
    spans = agent_trace(base, "/same", "same-sql-svc") + agent_trace(base + 5 * NS, "/same", "same-sql-svc")
    batch = to_batch(parse_protobuf(otlp_protobuf(spans)), "same-sql", time.time_ns(), Limits()).batch
    where = SpanFilter("same-sql", base - NS, base + 60 * NS)
    try:
        for store in (embedded_store, server_store):
            store.insert_spans(batch)
        for read in (
            lambda s: s.trace_spans("same-sql", spans[0].trace_id),
            lambda s: s.percentiles("model", ["route", "model"], where),
            lambda s: s.traces(where, sort="slowest"),
            lambda s: s.analysis_input("same-sql", [spans[0].trace_id, spans[5].trace_id]).to_pylist(),
            lambda s: s.count_spans("same-sql"),
        ):
            answer = read(server_store)
            assert answer and answer == read(embedded_store)
        assert len(server_store.trace_spans("same-sql", spans[0].trace_id)) == 5
    finally:
        server_store.close()


def test_backend_errors_are_translated(clickhouse_url: str, tmp_path: Path) -> None:
    backend = ClickHouseBackend(
        ServerProcess(tmp_path, extra_env={"AGENTLAT_CLICKHOUSE_URL": clickhouse_url}).store_args()[1]
    )
    try:
        with pytest.raises(StoreError, match="UNKNOWN_TABLE") as bad:
            backend.query_arrow("SELECT * FROM no_such_table")
        assert not isinstance(bad.value, StoreUnavailable)
        assert backend.query_arrow("SELECT {x:Array(String)} AS x", {"x": ["a'b", "c"]}).to_pylist() == [
            {"x": ["a'b", "c"]}
        ]
    finally:
        backend.close()
    with pytest.raises(StoreUnavailable, match="cannot reach ClickHouse") as down:
        ClickHouseBackend(f"http://user:secret@127.0.0.1:{free_port()}/db")
    assert "secret" not in str(down.value) and "user:***@" in str(down.value)
