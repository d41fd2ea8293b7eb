"""OTLP/gRPC: the real gRPC exporter lands spans; throttling and keys answer as OTLP says."""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import ServerProcess, free_port, wait_for
from tests.test_auth import create_key


def grpc_server(tmp_path: Path, **env: str) -> ServerProcess:
    port = free_port()
    return ServerProcess(tmp_path, extra_env={"AGENTLAT_GRPC_PORT": str(port), **env}).start()


def export(port: int, spans: list[SpanSpec], metadata: tuple = ()) -> trace_service_pb2.ExportTraceServiceResponse:
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(otlp_protobuf(spans))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, metadata=metadata, timeout=30)


def test_real_grpc_exporter_lands_spans(tmp_path: Path) -> None:
    server = grpc_server(tmp_path)
    try:
        port = int(server.env["AGENTLAT_GRPC_PORT"])
        provider = TracerProvider(resource=Resource.create({"service.name": "grpc-svc"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True)))
        with provider.get_tracer("t").start_as_current_span(
            "chat m", attributes={"gen_ai.operation.name": "chat"}
        ) as s:
            trace_id = format(s.get_span_context().trace_id, "032x")
        provider.shutdown()
        spans = wait_for(lambda: server.get(f"/api/v1/traces/{trace_id}").json().get("spans"))
        assert [(s["name"], s["service"], s["derived"]["Role"]) for s in spans] == [("chat m", "grpc-svc", "model")]
        bad = SpanSpec("bad", span_id="00" * 8)
        response = export(port, [SpanSpec("good"), bad])
        assert response.partial_success.rejected_spans == 1
        assert "span_id" in response.partial_success.error_message
        metrics = server.get("/metrics").text
        assert 'agentlat_otlp_requests_total{protocol="grpc",status="OK"}' in metrics
    finally:
        server.stop()


def test_backpressure_is_unavailable_with_retry_info(tmp_path: Path) -> None:
    # The writer holds the first batch (long flush interval), so the log stays over its 1-byte
    # allowance and the next request must be told to retry.
    server = grpc_server(tmp_path, AGENTLAT_MAX_PENDING_BYTES="1", AGENTLAT_FLUSH_INTERVAL="60")
    try:
        port = int(server.env["AGENTLAT_GRPC_PORT"])
        assert export(port, [SpanSpec("logged")]).ByteSize() == 0
        with pytest.raises(grpc.RpcError) as raised:
            export(port, [SpanSpec("refused")])
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        status = rpc_status.from_call(raised.value)
        retry = error_details_pb2.RetryInfo()
        assert status.details[0].Unpack(retry) and retry.retry_delay.seconds == 5
    finally:
        server.stop()


def test_grpc_requires_keys_when_the_server_does(tmp_path: Path) -> None:
    key = create_key(tmp_path, "--project", "grpc-proj")
    server = grpc_server(tmp_path, AGENTLAT_REQUIRE_KEYS="1")
    try:
        port = int(server.env["AGENTLAT_GRPC_PORT"])
        with pytest.raises(grpc.RpcError) as raised:
            export(port, [SpanSpec("anonymous")])
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
        spec = SpanSpec("keyed")
        assert export(port, [spec], metadata=(("authorization", f"Bearer {key}"),)).ByteSize() == 0
        url, headers = f"{server.url}/api/v1/traces/{spec.trace_id}", {"Authorization": f"Bearer {key}"}
        spans = wait_for(lambda: httpx.get(url, headers=headers, timeout=30).json().get("spans"))
        assert [s["name"] for s in spans] == ["keyed"]
        assert httpx.get(url, timeout=30).status_code == 401
    finally:
        server.stop()
