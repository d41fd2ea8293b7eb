"""OTLP logs and metrics: the real OpenTelemetry exporters (HTTP and gRPC) pointed at a real server get
success; GenAI events and gen_ai.* metric points are stored exactly, everything else is counted and
dropped; limits, keys and the write-ahead log hold as they do for traces."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.rpc import code_pb2, error_details_pb2
from grpc_status import rpc_status
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.metrics.v1.metrics_pb2 import ExponentialHistogramDataPoint
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, LogRecordExportResult, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentlat.collector.ingest.otlp import Limits, TooManySpans
from agentlat.collector.ingest.otlp_signals import (
    exponential_buckets,
    logs_to_batch,
    parse_logs_json,
    parse_logs_protobuf,
)
from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id, otlp_protobuf
from tests.servers import ServerProcess, free_port, wait_for
from tests.test_auth import bearer, create_key
from tests.test_ingest_http import BOMB, MIB, _status
from tests.test_metrics import scrape

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
T0 = time.time_ns() - 120_000 * MS  # two minutes ago: inside every window the tests read
DETAILS = "gen_ai.client.inference.operation.details"


def otel_server(workdir: Path, **env: str) -> ServerProcess:
    return ServerProcess(workdir, extra_env={"AGENTLAT_GRPC_PORT": str(free_port()), **env})


@pytest.fixture(scope="module")
def otel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One collector with OTLP/gRPC for the module; tests use services and traces of their own."""
    server = otel_server(tmp_path_factory.mktemp("otel")).start()
    yield server
    server.stop()


def grpc_target(server: ServerProcess) -> str:
    return f"127.0.0.1:{server.env['AGENTLAT_GRPC_PORT']}"


def log_exporter(server: ServerProcess, protocol: str, key: str | None = None) -> Any:
    if protocol == "http":
        return HttpLogExporter(endpoint=f"{server.url}/v1/logs", headers=bearer(key) if key else None, timeout=10)
    headers = (("authorization", f"Bearer {key}"),) if key else None
    return GrpcLogExporter(endpoint=grpc_target(server), insecure=True, headers=headers, timeout=10)


def metric_exporter(server: ServerProcess, protocol: str, key: str | None = None) -> Any:
    if protocol == "http":
        return HttpMetricExporter(endpoint=f"{server.url}/v1/metrics", headers=bearer(key) if key else None, timeout=10)
    headers = (("authorization", f"Bearer {key}"),) if key else None
    return GrpcMetricExporter(endpoint=grpc_target(server), insecure=True, headers=headers, timeout=10)


class Emitted:
    """A span and the log records emitted inside it: two GenAI events and two other records."""

    def __init__(self, service: str) -> None:
        resource = Resource.create({"service.name": service})
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        logs = InMemoryLogRecordExporter()
        logger_provider = LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
        logger = logger_provider.get_logger("genai-events", "2.0")
        with tracer_provider.get_tracer("t").start_as_current_span("chat m1") as span:
            context = span.get_span_context()
            self.trace_id, self.span_id = format(context.trace_id, "032x"), format(context.span_id, "016x")
            logger.emit(
                timestamp=T0 + 1 * MS, event_name=DETAILS, severity_number=SeverityNumber.INFO, severity_text="INFO",
                body={"output": [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}], "n": 2},
                attributes={"gen_ai.request.model": "m1", "gen_ai.usage.output_tokens": 7},
            )  # fmt: skip
            logger.emit(timestamp=T0 + 2 * MS, body="debug line", attributes={"code.lineno": 12})
            logger.emit(timestamp=T0 + 3 * MS, event_name="app.cache.miss", body="not GenAI")
            # the older convention: the name in the event.name attribute
            logger.emit(timestamp=T0 + 4 * MS, body="legacy", attributes={"event.name": "gen_ai.choice", "index": 0})
        self.records = logs.get_finished_logs()
        assert len(self.records) == 4

    def expected(self, service: str) -> list[tuple]:
        body = {"output": [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}], "n": 2}
        return [
            (DETAILS, self.span_id, T0 + 1 * MS, 9, "INFO", body,
             {"gen_ai.request.model": "m1", "gen_ai.usage.output_tokens": "7"}, service, "genai-events", []),
            ("gen_ai.choice", self.span_id, T0 + 4 * MS, 0, "", "legacy",
             {"event.name": "gen_ai.choice", "index": "0"}, service, "genai-events", []),
        ]  # fmt: skip

    def export_span(self, server: ServerProcess, key: str | None = None) -> None:
        exporter = OTLPSpanExporter(endpoint=f"{server.url}/v1/traces", headers=bearer(key) if key else None)
        assert exporter.export(self.spans.get_finished_spans()).name == "SUCCESS"


def trace_events(server: ServerProcess, trace_id: str, count: int, key: str | None = None) -> list[dict]:
    def fetch() -> list[dict] | None:
        response = httpx.get(f"{server.url}/api/v1/traces/{trace_id}", headers=bearer(key) if key else {}, timeout=30)
        events = response.json().get("events", []) if response.status_code == 200 else []
        return events if len(events) >= count else None

    events = wait_for(fetch)
    assert len(events) == count
    return events


def event_rows(events: list[dict]) -> list[tuple]:
    return [
        (e["name"], e["span_id"], e["time_ns"], e["severity_number"], e["severity_text"], e["body"], e["attributes"],
         e["service"], e["scope_name"], e["ingest_flags"])
        for e in events
    ]  # fmt: skip


def metric_points(server: ServerProcess, service: str, count: int, key: str | None = None, **params: str) -> list:
    def fetch() -> list[dict] | None:
        response = httpx.get(f"{server.url}/api/v1/metric_points", params={"service": service, **params},
                             headers=bearer(key) if key else {}, timeout=30)  # fmt: skip
        points = response.json()["points"] if response.status_code == 200 else []
        return points if len(points) >= count else None

    points = wait_for(fetch)
    assert len(points) == count
    return sorted(points, key=lambda p: (p["name"], sorted(p["attributes"].items())))


def counter(server: ServerProcess, name: str, **labels: str) -> float:
    return scrape(server).get((name, tuple(sorted(labels.items()))), 0.0)


def written(server: ServerProcess, name: str) -> float:
    """A written-rows counter once the writer has stored everything logged (it counts, then releases)."""
    wait_for(lambda: counter(server, "agentlat_wal_pending_bytes") == 0)
    return counter(server, name)


# --- logs --------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_log_exporter_gets_success_and_exactly_the_genai_events_are_stored(otel: ServerProcess, protocol: str) -> None:
    service = f"logs-{protocol}"
    emitted = Emitted(service)
    emitted.export_span(otel)
    dropped = counter(otel, "agentlat_log_records_dropped_total", reason="not_genai")
    received = counter(otel, "agentlat_log_records_received_total", protocol=protocol)
    assert log_exporter(otel, protocol).export(emitted.records) == LogRecordExportResult.SUCCESS
    events = trace_events(otel, emitted.trace_id, 2)
    assert event_rows(events) == emitted.expected(service)
    assert {e["trace_id"] for e in events} == {emitted.trace_id}
    assert counter(otel, "agentlat_log_records_dropped_total", reason="not_genai") == dropped + 2
    assert counter(otel, "agentlat_log_records_received_total", protocol=protocol) == received + 4
    # Delivered again (an exporter's retry, the other protocol): still stored once.
    before = written(otel, "agentlat_events_written_total")
    other = log_exporter(otel, "grpc" if protocol == "http" else "http")
    assert other.export(emitted.records) == LogRecordExportResult.SUCCESS
    assert written(otel, "agentlat_events_written_total") == before + 2
    assert event_rows(trace_events(otel, emitted.trace_id, 2)) == emitted.expected(service)


def _json_logs(trace_id: str, span_id: str, records: list[dict]) -> dict:
    return {
        "resourceLogs": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-logs"}}]},
                "scopeLogs": [{"scope": {"name": "hand", "version": "1"}, "logRecords": records}],
            }
        ]
    }


def test_hand_written_json_logs_gzipped_with_partial_success(otel: ServerProcess) -> None:
    trace_id, span_id = new_trace_id(), new_span_id()
    post = httpx.post(f"{otel.url}/v1/traces", content=otlp_protobuf([SpanSpec("chat", trace_id=trace_id,
                      span_id=span_id, service="json-logs")]), headers=PROTOBUF, timeout=30)  # fmt: skip
    assert post.status_code == 200
    event = {
        "timeUnixNano": str(T0),
        "observedTimeUnixNano": str(T0 + 5 * MS),
        "severityNumber": 13,
        "severityText": "WARN",
        "eventName": "gen_ai.evaluation.result",
        "traceId": trace_id,
        "spanId": span_id,
        "body": {"kvlistValue": {"values": [{"key": "score", "value": {"doubleValue": 0.5}}]}},
        "attributes": [{"key": "gen_ai.evaluation.name", "value": {"stringValue": "relevance"}}],
        "unknownField": "ignored",
    }
    bad_id = {**event, "traceId": "abcd", "timeUnixNano": str(T0 + 1)}
    plain = {"timeUnixNano": str(T0), "body": {"stringValue": "GET /health 200"}}
    body = gzip.compress(json.dumps(_json_logs(trace_id, span_id, [event, bad_id, plain])).encode())
    response = httpx.post(f"{otel.url}/v1/logs", content=body, headers={**JSON, "Content-Encoding": "gzip"},
                          timeout=30)  # fmt: skip
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedLogRecords"]) == 1 and "trace_id must be empty or 16 bytes" in partial["errorMessage"]
    (stored,) = trace_events(otel, trace_id, 1)
    assert (stored["name"], stored["span_id"], stored["time_ns"], stored["observed_time_ns"]) == (
        "gen_ai.evaluation.result", span_id, T0, T0 + 5 * MS,
    )  # fmt: skip
    assert (stored["severity_number"], stored["severity_text"], stored["body"]) == (13, "WARN", {"score": 0.5})
    assert (stored["attributes"], stored["service"], stored["scope_version"]) == (
        {"gen_ai.evaluation.name": "relevance"}, "json-logs", "1",
    )  # fmt: skip


# --- metrics -----------------------------------------------------------------------------
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m1"}


def _record_metrics(service: str) -> Any:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": service}))
    meter = provider.get_meter("genai-metrics", "1.0")
    duration = meter.create_histogram(
        "gen_ai.client.operation.duration", unit="s", explicit_bucket_boundaries_advisory=[0.01, 0.1, 1, 10]
    )
    for value in (0.05, 0.2, 0.3, 2.5):
        duration.record(value, CHAT)
    tokens = meter.create_histogram(
        "gen_ai.client.token.usage", unit="{token}", explicit_bucket_boundaries_advisory=[1, 4, 16, 64, 256]
    )
    tokens.record(100, {**CHAT, "gen_ai.token.type": "input"})
    tokens.record(20, {**CHAT, "gen_ai.token.type": "output"})
    tokens.record(3, {**CHAT, "gen_ai.token.type": "output"})
    ttft = meter.create_histogram(
        "gen_ai.server.time_to_first_token", unit="s", explicit_bucket_boundaries_advisory=[0.001, 0.01, 0.1, 1]
    )
    ttft.record(0.02, {"gen_ai.request.model": "m1"})
    # semantic-conventions-genai 0.1.0's name of the client's TTFT metric
    first_chunk = meter.create_histogram(
        "gen_ai.client.inference.time_to_first_chunk", unit="s", explicit_bucket_boundaries_advisory=[0.1, 1]
    )
    first_chunk.record(0.3, CHAT)
    first_chunk.record(1.5, CHAT)
    meter.create_counter("gen_ai.client.requests").add(3, CHAT)
    meter.create_gauge("gen_ai.server.requests.running").set(5, {"gen_ai.request.model": "m1"})
    # not gen_ai.*: dropped, counted (3 points)
    meter.create_histogram("http.client.request.duration", unit="s").record(0.1)
    requests = meter.create_counter("app.requests")
    requests.add(1, {"route": "a"})
    requests.add(1, {"route": "b"})
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def _point_row(p: dict) -> tuple:
    return (p["name"], p["type"], p["unit"], p["temporality"], p["monotonic"], p["attributes"], p["count"],
            p["min"], p["max"], p["value"], p["explicit_bounds"], p["bucket_counts"], p["ingest_flags"])  # fmt: skip


EXPECTED_POINTS = [
    ("gen_ai.client.inference.time_to_first_chunk", "Histogram", "s", 2, False, CHAT, 2, 0.3, 1.5, None,
     [0.1, 1.0], [0, 1, 1], []),
    ("gen_ai.client.operation.duration", "Histogram", "s", 2, False, CHAT, 4, 0.05, 2.5, None,
     [0.01, 0.1, 1.0, 10.0], [0, 1, 2, 1, 0], []),
    ("gen_ai.client.requests", "Sum", "", 2, True, CHAT, 0, None, None, 3.0, [], [], []),
    ("gen_ai.client.token.usage", "Histogram", "{token}", 2, False, {**CHAT, "gen_ai.token.type": "input"}, 1,
     100.0, 100.0, None, [1.0, 4.0, 16.0, 64.0, 256.0], [0, 0, 0, 0, 1, 0], []),
    ("gen_ai.client.token.usage", "Histogram", "{token}", 2, False, {**CHAT, "gen_ai.token.type": "output"}, 2,
     3.0, 20.0, None, [1.0, 4.0, 16.0, 64.0, 256.0], [0, 1, 0, 1, 0, 0], []),
    ("gen_ai.server.requests.running", "Gauge", "", 0, False, {"gen_ai.request.model": "m1"}, 0, None, None, 5.0,
     [], [], []),
    ("gen_ai.server.time_to_first_token", "Histogram", "s", 2, False, {"gen_ai.request.model": "m1"}, 1, 0.02, 0.02,
     None, [0.001, 0.01, 0.1, 1.0], [0, 0, 1, 0, 0], []),
]  # fmt: skip
EXPECTED_SUMS = [1.8, 3.05, None, 100.0, 23.0, None, 0.02]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_metric_exporter_gets_success_and_exactly_the_genai_points_are_stored(
    otel: ServerProcess, protocol: str
) -> None:
    service = f"metrics-{protocol}"
    data = _record_metrics(service)
    dropped = counter(otel, "agentlat_metric_points_dropped_total", reason="not_genai")
    assert metric_exporter(otel, protocol).export(data) == MetricExportResult.SUCCESS
    points = metric_points(otel, service, len(EXPECTED_POINTS))
    assert [_point_row(p) for p in points] == EXPECTED_POINTS
    assert [p["sum"] for p in points] == pytest.approx(EXPECTED_SUMS)
    assert {p["service"] for p in points} == {service}
    assert counter(otel, "agentlat_metric_points_dropped_total", reason="not_genai") == dropped + 3
    # the same export again (a retry): written twice, stored once
    before = written(otel, "agentlat_metric_points_written_total")
    assert metric_exporter(otel, protocol).export(data) == MetricExportResult.SUCCESS
    assert written(otel, "agentlat_metric_points_written_total") == before + len(EXPECTED_POINTS)
    assert len(metric_points(otel, service, len(EXPECTED_POINTS))) == len(EXPECTED_POINTS)
    assert len(metric_points(otel, service, 1, name="gen_ai.client.token.usage", limit="1")) == 1


def test_hand_written_json_metrics_with_a_rejected_point(otel: ServerProcess) -> None:
    now = str(time.time_ns() - 1000 * MS)
    attributes = [{"key": "gen_ai.request.model", "value": {"stringValue": "m2"}}]
    histogram = {
        "name": "gen_ai.client.operation.time_to_first_chunk",
        "unit": "s",
        "histogram": {
            "aggregationTemporality": 1,
            "dataPoints": [
                {"timeUnixNano": now, "startTimeUnixNano": now, "count": "2", "sum": 0.3, "attributes": attributes,
                 "explicitBounds": [0.1, 1], "bucketCounts": ["0", "2", "0"]},
                {"timeUnixNano": now, "count": "1", "explicitBounds": [0.1, 1], "bucketCounts": ["1"],
                 "attributes": [{"key": "bad", "value": {"boolValue": True}}]},
            ],
        },
    }  # fmt: skip
    exponential = {
        "name": "gen_ai.server.time_per_output_token",
        "unit": "s",
        "exponentialHistogram": {
            "aggregationTemporality": 2,
            "dataPoints": [{"timeUnixNano": now, "count": "3", "sum": 3.5, "scale": 0, "zeroCount": "1",
                            "positive": {"offset": 0, "bucketCounts": ["1", "1"]}, "attributes": attributes}],
        },
    }  # fmt: skip
    gauge = {"name": "system.cpu.utilization", "gauge": {"dataPoints": [{"timeUnixNano": now, "asDouble": 0.5}]}}
    document = {
        "resourceMetrics": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-metrics"}}]},
                "scopeMetrics": [{"scope": {"name": "hand"}, "metrics": [histogram, exponential, gauge]}],
            }
        ]
    }
    response = httpx.post(f"{otel.url}/v1/metrics", content=json.dumps(document), headers=JSON, timeout=30)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedDataPoints"]) == 1
    assert "1 bucket_counts for 2 explicit_bounds" in partial["errorMessage"]
    points = metric_points(otel, "json-metrics", 2)
    assert [(p["name"], p["type"], p["temporality"], p["count"], p["sum"], p["explicit_bounds"], p["bucket_counts"],
             p["start_time_ns"]) for p in points] == [
        ("gen_ai.client.operation.time_to_first_chunk", "Histogram", 1, 2, 0.3, [0.1, 1.0], [0, 2, 0], int(now)),
        ("gen_ai.server.time_per_output_token", "ExponentialHistogram", 2, 3, 3.5, [1.0, 2.0, 4.0], [1, 1, 1, 0], 0),
    ]  # fmt: skip


# --- bad input -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "code", "message"),
    [
        ("/v1/logs", b"\xff\xfe not protobuf", PROTOBUF, 400, code_pb2.INVALID_ARGUMENT,
         "not an OTLP ExportLogsServiceRequest protobuf"),
        ("/v1/metrics", b"\xff\xfe not protobuf", PROTOBUF, 400, code_pb2.INVALID_ARGUMENT,
         "not an OTLP ExportMetricsServiceRequest protobuf"),
        ("/v1/logs", b"{not json", JSON, 400, code_pb2.INVALID_ARGUMENT, "not valid JSON"),
        ("/v1/logs", b'{"resourceLogs": "x"}', JSON, 400, code_pb2.INVALID_ARGUMENT, "OTLP logs schema"),
        ("/v1/metrics", b"[1]", JSON, 400, code_pb2.INVALID_ARGUMENT, "JSON object with a resourceMetrics array"),
        ("/v1/metrics", b'{"resourceMetrics": [{"scopeMetrics": 3}]}', JSON, 400, code_pb2.INVALID_ARGUMENT,
         "OTLP metrics schema"),
        ("/v1/logs", b"\0" * (21 * MIB), PROTOBUF, 413, code_pb2.RESOURCE_EXHAUSTED, "larger than"),
        ("/v1/metrics", BOMB, {**PROTOBUF, "Content-Encoding": "gzip"}, 413, code_pb2.RESOURCE_EXHAUSTED,
         "after decompression"),
        ("/v1/metrics", b"x", {"Content-Type": "text/plain"}, 415, code_pb2.INVALID_ARGUMENT, "text/plain"),
    ],
)  # fmt: skip
def test_bad_input_gets_the_documented_status(
    otel: ServerProcess, path: str, body: bytes, headers: dict, status: int, code: int, message: str
) -> None:
    response = httpx.post(f"{otel.url}{path}", content=body, headers=headers, timeout=60)
    assert response.status_code == status
    error = _status(response)
    assert error.code == code and message in error.message


@pytest.mark.parametrize("path", ["/v1/logs", "/v1/metrics"])
@pytest.mark.parametrize(("body", "headers"), [(b"", PROTOBUF), (b"{}", JSON)])
def test_empty_request_is_success(otel: ServerProcess, path: str, body: bytes, headers: dict) -> None:
    response = httpx.post(f"{otel.url}{path}", content=body, headers=headers, timeout=30)
    assert response.status_code == 200
    if headers == JSON:
        assert response.json() == {}
    else:
        kind = ExportLogsServiceResponse if path == "/v1/logs" else ExportMetricsServiceResponse
        assert not kind.FromString(response.content).HasField("partial_success")


def test_a_malformed_request_loses_nothing_else(otel: ServerProcess) -> None:
    emitted = Emitted("malformed-neighbour")
    emitted.export_span(otel)
    assert log_exporter(otel, "http").export(emitted.records[:1]) == LogRecordExportResult.SUCCESS
    trace_events(otel, emitted.trace_id, 1)
    bad = httpx.post(f"{otel.url}/v1/logs", content=b"\x0a\x05broken", headers=PROTOBUF, timeout=30)
    assert bad.status_code == 400 and "ExportLogsServiceRequest" in _status(bad).message
    assert log_exporter(otel, "http").export(emitted.records) == LogRecordExportResult.SUCCESS
    assert event_rows(trace_events(otel, emitted.trace_id, 2)) == emitted.expected("malformed-neighbour")


# --- keys --------------------------------------------------------------------------------
def test_keys_are_required_and_a_projects_key_stores_under_its_project(tmp_path: Path) -> None:
    alpha = create_key(tmp_path, "--project", "alpha")
    admin = create_key(tmp_path, "--admin")
    server = otel_server(tmp_path, AGENTLAT_REQUIRE_KEYS="1").start()
    try:
        for path in ("/v1/logs", "/v1/metrics"):
            assert httpx.post(f"{server.url}{path}", content=b"", headers=PROTOBUF).status_code == 401
            wrong = {**PROTOBUF, **bearer(alpha[:-4] + "xxxx")}
            response = httpx.post(f"{server.url}{path}", content=b"", headers=wrong)
            assert response.status_code == 401 and _status(response).code == code_pb2.UNAUTHENTICATED
        emitted = Emitted("keyed-svc")
        assert log_exporter(server, "grpc", key=admin[:-4] + "xxxx").export(emitted.records).name == "FAILURE"
        with grpc.insecure_channel(grpc_target(server)) as channel, pytest.raises(grpc.RpcError) as refused:
            logs_service_pb2_grpc.LogsServiceStub(channel).Export(logs_service_pb2.ExportLogsServiceRequest(),
                                                                  timeout=10)  # fmt: skip
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

        emitted.export_span(server, key=alpha)
        assert log_exporter(server, "http", key=alpha).export(emitted.records) == LogRecordExportResult.SUCCESS
        data = _record_metrics("keyed-svc")
        assert metric_exporter(server, "grpc", key=alpha).export(data) == MetricExportResult.SUCCESS
        assert event_rows(trace_events(server, emitted.trace_id, 2, key=alpha)) == emitted.expected("keyed-svc")
        assert len(metric_points(server, "keyed-svc", len(EXPECTED_POINTS), key=alpha)) == len(EXPECTED_POINTS)
        # the admin key reads the default project unless it names another: nothing of alpha's there
        url = f"{server.url}/api/v1/traces/{emitted.trace_id}"
        assert httpx.get(url, headers=bearer(admin), timeout=30).status_code == 404
        listed = httpx.get(f"{server.url}/api/v1/metric_points", headers=bearer(admin), timeout=30).json()
        assert listed["points"] == []
        as_alpha = {**bearer(admin), "x-agentlat-project": "alpha"}
        assert len(httpx.get(url, headers=as_alpha, timeout=30).json()["events"]) == 2
    finally:
        server.stop()


# --- durability and backpressure ---------------------------------------------------------
def test_acknowledged_events_and_points_survive_kill_9(tmp_path: Path) -> None:
    # A long flush interval keeps acknowledged batches in the log only, so a restart must replay them.
    server = otel_server(tmp_path, AGENTLAT_FLUSH_INTERVAL="60", AGENTLAT_MAX_PENDING_BYTES="1")
    try:
        server.start()
        emitted = Emitted("durable-svc")
        assert log_exporter(server, "http").export(emitted.records) == LogRecordExportResult.SUCCESS
        # The log now holds more than its 1-byte allowance: the next export must be told to retry.
        refused = httpx.post(f"{server.url}/v1/metrics", content=b"", headers=PROTOBUF, timeout=30)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
        one_event = _log_request(LogRecord(event_name="gen_ai.choice", time_unix_nano=T0))
        with grpc.insecure_channel(grpc_target(server)) as channel, pytest.raises(grpc.RpcError) as raised:
            logs_service_pb2_grpc.LogsServiceStub(channel).Export(one_event, timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        retry = error_details_pb2.RetryInfo()
        assert rpc_status.from_call(raised.value).details[0].Unpack(retry) and retry.retry_delay.seconds == 5
        server.kill()

        server.env["AGENTLAT_MAX_PENDING_BYTES"] = str(64 * MIB)
        server.start()
        assert "replaying 1 logged" in server.log()
        data = _record_metrics("durable-svc")
        assert metric_exporter(server, "grpc").export(data) == MetricExportResult.SUCCESS
        emitted.export_span(server)
        server.kill()

        server.env["AGENTLAT_FLUSH_INTERVAL"] = "0.1"
        server.start()
        assert "replaying 3 logged" in server.log()
        assert event_rows(trace_events(server, emitted.trace_id, 2)) == emitted.expected("durable-svc")
        points = metric_points(server, "durable-svc", len(EXPECTED_POINTS))
        assert [_point_row(p) for p in points] == EXPECTED_POINTS
    finally:
        server.kill()


# --- the decoder on its own --------------------------------------------------------------
def _log_request(*records: LogRecord) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.extend(records)
    return request


def test_event_name_field_wins_and_ids_are_the_same_from_json_and_protobuf() -> None:
    named = LogRecord(event_name="gen_ai.user.message", time_unix_nano=T0, trace_id=b"\x01" * 16, span_id=b"\x02" * 8,
                      attributes=[KeyValue(key="event.name", value=AnyValue(string_value="other"))])  # fmt: skip
    unnamed = LogRecord(event_name="", attributes=[KeyValue(key="event.name", value=AnyValue(int_value=3))])
    request = _log_request(named, unnamed)
    decoded = logs_to_batch(parse_logs_protobuf(request.SerializeToString()), "p", T0, Limits())
    assert (decoded.accepted, decoded.rejected, decoded.dropped) == (1, 0, {"not_genai": 1})
    from_json = logs_to_batch(parse_logs_json(_hex_json(request)), "p", T0, Limits())
    assert from_json.batch.column("RecordId").to_pylist() == decoded.batch.column("RecordId").to_pylist()
    assert decoded.batch.column("TraceId").to_pylist() == ["01" * 16]


def _hex_json(request: ExportLogsServiceRequest) -> bytes:
    from google.protobuf import json_format

    document = json_format.MessageToDict(request)
    for record in document["resourceLogs"][0]["scopeLogs"][0]["logRecords"]:
        for key, size in (("traceId", 16), ("spanId", 8)):
            if key in record:
                record[key] = (b"\x01" * 16 if size == 16 else b"\x02" * 8).hex()
    return json.dumps(document).encode()


def test_long_bodies_are_cut_and_flagged_and_too_many_records_refused() -> None:
    record = LogRecord(event_name="gen_ai.choice", time_unix_nano=T0, body=AnyValue(string_value="x" * 100))
    decoded = logs_to_batch(_log_request(record), "p", T0, Limits(max_body_chars=10))
    assert decoded.batch.column("Body").to_pylist() == ['"xxxxxxxxx']
    assert decoded.batch.column("IngestFlags").to_pylist() == [["truncated:body"]]
    with pytest.raises(TooManySpans, match="3 log records in one request; the limit is 2"):
        logs_to_batch(_log_request(record, record, record), "p", T0, Limits(max_spans=2))


def test_exponential_buckets_become_explicit_bounds() -> None:
    point = ExponentialHistogramDataPoint(count=6, scale=1, zero_count=1)
    point.positive.offset, point.negative.offset = -1, 0
    point.positive.bucket_counts.extend([1, 2, 1])
    point.negative.bucket_counts.extend([1])
    bounds, counts = exponential_buckets(point)
    assert bounds == pytest.approx([2**-0.5, 1.0, 2**0.5, 2.0])
    assert counts == [2, 1, 2, 1, 0]
    assert exponential_buckets(ExponentialHistogramDataPoint(count=2, zero_count=2)) == ([], [2])
