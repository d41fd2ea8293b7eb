"""Spans older than the store's retention are rejected in partial_success and never stored.

The spans table's TTL (``toDate(Timestamp) + AGENTLAT_TTL_DAYS``) would drop such a span at once, so a
plain 200 would claim a span kept that can never be queried. A span counts as older than the retention
when it ended (so also started) more than the retention before the collector received it: then its
start day is past the TTL in any timezone. Decoding is checked in-process; then real collectors with a
30-day retention answer raw OTLP/HTTP (protobuf and JSON) and OTLP/gRPC requests, and the real OTLP
exporter's spans, with the exact count and message, keeping the fresh spans of the same request.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import grpc
import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from agentlat.api.windows import iso
from agentlat.collector.ingest.otlp import Limits, parse_protobuf, to_batch
from tests.otlp_payloads import SpanSpec, new_trace_id, otlp_json, otlp_protobuf
from tests.servers import ServerProcess, free_port, wait_for

DAY_NS = 86_400 * 10**9
MS = 10**6
RETENTION_DAYS = 30
MESSAGE = re.compile(
    r"^(\d+) spans? older than the store's retention of 30 days \(AGENTLAT_TTL_DAYS\) (?:were|was) dropped: "
    r"(?:their|its) end time is before (\S+)$"
)


def _decode(spans: list[SpanSpec], received_ns: int, retention_days: int = RETENTION_DAYS):
    request = parse_protobuf(otlp_protobuf(spans))
    return to_batch(request, "p", received_ns, Limits(retention_days=retention_days))


def test_decoding_rejects_spans_that_ended_before_the_retention() -> None:
    now = 1_800_000_000 * 10**9
    cutoff = now - RETENTION_DAYS * DAY_NS
    spans = [
        SpanSpec("fresh", start_ns=now - MS, duration_ns=MS),
        SpanSpec("old", start_ns=cutoff - 2 * MS, duration_ns=MS),
        SpanSpec("ends at the cutoff", start_ns=cutoff - MS, duration_ns=MS),  # not before it: kept
        SpanSpec("ends after the cutoff", start_ns=cutoff - DAY_NS, duration_ns=DAY_NS + MS),  # kept
        SpanSpec("old, ends before it starts", start_ns=cutoff - MS, duration_ns=-MS),  # the start decides
        SpanSpec("old, bad id", start_ns=cutoff - 2 * MS, duration_ns=MS, span_id="00" * 8),  # counted once
    ]
    decoded = _decode(spans, now)
    assert decoded.batch.column("SpanName").to_pylist() == ["fresh", "ends at the cutoff", "ends after the cutoff"]
    assert (decoded.accepted, decoded.rejected, decoded.expired) == (3, 3, 2)
    assert decoded.error_message() == (
        f"2 spans older than the store's retention of 30 days (AGENTLAT_TTL_DAYS) were dropped: their end time is "
        f"before {iso(cutoff)}; span 'old, bad id': span_id must be 8 non-zero bytes (16 hex characters)"
    )
    assert _decode(spans[1:2], now).error_message().startswith("1 span older than the store's retention of 30 days")
    unlimited = _decode(spans, now, retention_days=0)  # a decoder without a retention keeps them all
    assert (unlimited.accepted, unlimited.rejected) == (5, 1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A collector whose store keeps spans for 30 days, with OTLP/gRPC on."""
    env = {"AGENTLAT_TTL_DAYS": str(RETENTION_DAYS), "AGENTLAT_GRPC_PORT": str(free_port())}
    proc = ServerProcess(tmp_path_factory.mktemp("retention"), extra_env=env).start()
    yield proc
    proc.stop()


def _mixed(tag: str) -> tuple[list[SpanSpec], str, str]:
    """3 spans that ended 31 days ago and 2 fresh ones, each kind in a trace of its own."""
    old_trace, fresh_trace = new_trace_id(), new_trace_id()
    old_start = time.time_ns() - (RETENTION_DAYS + 1) * DAY_NS
    fresh_start = time.time_ns() - 60 * 10**9
    spans = [SpanSpec(f"{tag} old {i}", trace_id=old_trace, start_ns=old_start + i * MS) for i in range(3)]
    spans += [SpanSpec(f"{tag} fresh {i}", trace_id=fresh_trace, start_ns=fresh_start + i * MS) for i in range(2)]
    for span in spans:
        span.service = "retention-svc"
    return spans, old_trace, fresh_trace


def _check_message(message: str, sent_before: int, sent_after: int) -> None:
    """3 spans; the cutoff is the retention before the moment the collector received them."""
    found = MESSAGE.match(message)
    assert found, message
    cutoff = datetime.fromisoformat(found[2].replace("Z", "+00:00"))
    cutoff_ns = int(cutoff.timestamp()) * 10**9 + cutoff.microsecond * 1000
    days = RETENTION_DAYS * DAY_NS
    assert (int(found[1]), sent_before - days - 1000 <= cutoff_ns <= sent_after - days) == (3, True), message


def _check_stored(server: ServerProcess, old_trace: str, fresh_trace: str) -> None:
    """The fresh spans are queryable, the old ones are not stored: the request is logged as it came, with the
    cutoff it was answered with, and the writer drops them when it decodes it (tests/test_otlp_engine.py)."""
    stored = wait_for(lambda: server.get(f"/api/v1/traces/{fresh_trace}").json().get("spans"))
    assert len(stored) == 2
    assert server.get(f"/api/v1/traces/{old_trace}").status_code == 404


@pytest.mark.parametrize("media", ["protobuf", "json"])
def test_http_answers_the_old_spans_as_rejected(server: ServerProcess, media: str) -> None:
    spans, old_trace, fresh_trace = _mixed(f"http-{media}")
    body = otlp_protobuf(spans) if media == "protobuf" else json.dumps(otlp_json(spans)).encode()
    content_type = "application/x-protobuf" if media == "protobuf" else "application/json"
    before = time.time_ns()
    response = httpx.post(f"{server.url}/v1/traces", content=body, headers={"Content-Type": content_type}, timeout=30)
    after = time.time_ns()
    assert response.status_code == 200, response.text
    if media == "protobuf":
        answer = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content).partial_success
        rejected, message = answer.rejected_spans, answer.error_message
    else:
        answer = response.json()["partialSuccess"]
        rejected, message = int(answer["rejectedSpans"]), answer["errorMessage"]
    assert rejected == 3
    _check_message(message, before, after)
    _check_stored(server, old_trace, fresh_trace)


def test_grpc_answers_the_old_spans_as_rejected(server: ServerProcess) -> None:
    spans, old_trace, fresh_trace = _mixed("grpc")
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(otlp_protobuf(spans))
    before = time.time_ns()
    with grpc.insecure_channel(f"127.0.0.1:{server.env['AGENTLAT_GRPC_PORT']}") as channel:
        response = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=30)
    after = time.time_ns()
    assert response.partial_success.rejected_spans == 3
    _check_message(response.partial_success.error_message, before, after)
    _check_stored(server, old_trace, fresh_trace)


def test_the_real_exporter_keeps_fresh_spans_and_the_old_ones_are_counted(server: ServerProcess) -> None:
    def expired() -> float:
        line = next((m for m in server.get("/metrics").text.splitlines() if 'reason="expired"' in m), "x 0")
        return float(line.split()[-1])

    counted = expired()
    provider = TracerProvider(resource=Resource.create({"service.name": "retention-sdk"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{server.url}/v1/traces")))
    tracer = provider.get_tracer("t")
    old_start = time.time_ns() - (RETENTION_DAYS + 2) * DAY_NS
    old = tracer.start_span("old replayed call", start_time=old_start)
    old.end(end_time=old_start + 5 * MS)
    with tracer.start_as_current_span("fresh call") as fresh:
        pass
    provider.shutdown()
    old_trace = format(old.get_span_context().trace_id, "032x")
    fresh_trace = format(fresh.get_span_context().trace_id, "032x")
    assert wait_for(lambda: server.get(f"/api/v1/traces/{fresh_trace}").json().get("spans"))
    assert server.get(f"/api/v1/traces/{old_trace}").status_code == 404
    assert expired() == counted + 1


def test_the_retention_is_read_from_the_spans_table(tmp_path: Path) -> None:
    """Not from AGENTLAT_TTL_DAYS: the table keeps the TTL it was created with (or was altered to)."""
    script = (
        "import sys; from pathlib import Path; from agentlat.store import open_store\n"
        "store = open_store(Path(sys.argv[1]), ttl_days=30); print(store.spans_retention_days())\n"
        "store.backend.execute('ALTER TABLE otel_traces MODIFY TTL toDate(Timestamp) + INTERVAL 12 DAY')\n"
        "print(store.spans_retention_days())\n"
        "store.backend.execute('ALTER TABLE otel_traces REMOVE TTL'); print(store.spans_retention_days())\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "data")], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["30", "12", "None"]
