"""/metrics counts what the collector received, rejected and wrote."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.ingest import build_requests
from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import ServerProcess, wait_for

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def scrape(server: ServerProcess) -> dict[tuple[str, tuple], float]:
    samples = {}
    for family in text_string_to_metric_families(server.get("/metrics").text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_count_received_rejected_and_written(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path).start()
    try:
        good = [SpanSpec(f"s{i}") for i in range(7)]
        assert scrape(server)[("agentlat_spans_written_timestamp_seconds", ())] == 0  # nothing written yet
        posted_at = time.time()
        bad = [SpanSpec("bad", trace_id="00" * 16), SpanSpec("bad2", span_id="00" * 8)]
        post = lambda body, headers=PROTOBUF: httpx.post(f"{server.url}/v1/traces", content=body, headers=headers)  # noqa: E731
        assert post(otlp_protobuf(good + bad)).status_code == 200
        assert post(b"\xff garbage").status_code == 400
        assert post(b"x", {"Content-Type": "text/plain"}).status_code == 415

        # Written first, then the log's pending bytes are released: wait for both.
        def settled() -> dict | None:
            s = scrape(server)
            done = s[("agentlat_spans_written_total", ())] >= 7 and s[("agentlat_wal_pending_bytes", ())] == 0
            return s if done else None

        m = wait_for(settled)
        assert m[("agentlat_spans_received_total", (("protocol", "http"),))] == 9
        assert m[("agentlat_spans_rejected_total", (("reason", "invalid_span"),))] == 2
        assert m[("agentlat_spans_written_total", ())] == 7
        assert posted_at < m[("agentlat_spans_written_timestamp_seconds", ())] < time.time()
        assert m[("agentlat_otlp_requests_total", (("protocol", "http"), ("status", "200")))] == 1
        assert m[("agentlat_otlp_requests_total", (("protocol", "http"), ("status", "400")))] == 1
        assert m[("agentlat_otlp_requests_total", (("protocol", "http"), ("status", "415")))] == 1
        assert m[("agentlat_store_write_seconds_count", ())] >= 1
        assert m[("agentlat_wal_pending_bytes", ())] == 0
        assert m[("agentlat_store_available", ())] == 1
    finally:
        server.stop()


def test_traces_are_analysed_from_memory_and_a_late_span_is_read_back(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, extra_env={"AGENTLAT_TRACE_GRACE": "0.2"}).start()
    try:
        roots = [SpanSpec("invoke_agent a"), SpanSpec("invoke_agent b")]
        children = [SpanSpec("execute_tool t", trace_id=r.trace_id, parent_span_id=r.span_id) for r in roots]
        post = lambda spans: httpx.post(f"{server.url}/v1/traces", content=otlp_protobuf(spans), headers=PROTOBUF)  # noqa: E731

        def analysed(count: int) -> dict | None:
            s = scrape(server)
            return s if s[("agentlat_traces_analysed_total", ())] >= count else None

        posted_at = time.time()
        assert post(roots + children).status_code == 200
        first = wait_for(lambda: analysed(2))
        written_at = first[("agentlat_spans_written_timestamp_seconds", ())]
        assert posted_at < written_at < first[("agentlat_traces_analysed_timestamp_seconds", ())] < time.time()
        assert first[("agentlat_traces_read_back_total", ())] == 0  # both traces' spans were held
        assert first[("agentlat_analysis_held_bytes", ())] == 0  # and let go once analysed

        late = SpanSpec("execute_tool late", trace_id=roots[0].trace_id, parent_span_id=roots[0].span_id)
        assert post([late]).status_code == 200
        second = wait_for(lambda: analysed(3))
        assert second[("agentlat_traces_read_back_total", ())] == 1  # its earlier spans were let go: read back
    finally:
        server.stop()


def test_the_server_collects_young_garbage_a_few_times_for_20k_spans_ingested_and_analysed(tmp_path: Path) -> None:
    """At CPython's default threshold (700) storing and analysing these 20,000 spans took 205 young
    collections; at agentlat's (shared/gc_tuning.py) a pass's objects are freed before one runs."""
    server = ServerProcess(tmp_path, extra_env={"AGENTLAT_TRACE_GRACE": "0.5"}).start()
    try:
        young = ("python_gc_collections_total", (("generation", "0"),))
        before = scrape(server)[young]
        for body in build_requests(20):
            response = httpx.post(f"{server.url}/v1/traces", content=body, headers=PROTOBUF, timeout=60)
            assert response.status_code == 200, response.text
        wait_for(lambda: scrape(server)[("agentlat_traces_analysed_total", ())] >= 2000, timeout=120)
        assert scrape(server)[young] - before <= 10
    finally:
        server.stop()
