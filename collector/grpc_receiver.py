"""OTLP/gRPC trace receiver (port 4317) on the same pipeline and rules as OTLP/HTTP.

Throttling answers UNAVAILABLE with a google.rpc.RetryInfo detail, which OpenTelemetry
exporters honour; keys travel as ``authorization: Bearer <key>`` or ``x-agentlat-key``
metadata.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from agentlat.collector.auth import Authenticator, AuthError
from agentlat.collector.ingest import Ingestor, LogUnavailable
from agentlat.collector.otlp import TooManySpans
from agentlat.collector.pipeline import Backpressure

log = logging.getLogger("agentlat.collector")

_AUTH_CODES = {401: code_pb2.UNAUTHENTICATED, 403: code_pb2.PERMISSION_DENIED, 429: code_pb2.UNAVAILABLE}


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, ingestor: Ingestor, authenticator: Authenticator) -> None:
        self.ingestor, self.authenticator = ingestor, authenticator

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        code = "OK"
        try:
            metadata = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
            project = self._project(metadata)
            decoded = self.ingestor.accept(request, project, "grpc")
        except _Refusal as refusal:
            code = code_pb2.Code.Name(refusal.status.code)
            self.ingestor.metrics.requests.labels("grpc", code).inc()
            context.abort_with_status(rpc_status.to_status(refusal.status))
        except TooManySpans as exc:
            self.ingestor.metrics.requests.labels("grpc", "RESOURCE_EXHAUSTED").inc()
            context.abort_with_status(rpc_status.to_status(_status(code_pb2.RESOURCE_EXHAUSTED, str(exc))))
        except (Backpressure, LogUnavailable) as exc:
            retry = exc.retry_after if isinstance(exc, Backpressure) else 10
            self.ingestor.metrics.requests.labels("grpc", "UNAVAILABLE").inc()
            context.abort_with_status(rpc_status.to_status(_status(code_pb2.UNAVAILABLE, str(exc), retry)))
        self.ingestor.metrics.requests.labels("grpc", code).inc()
        response = trace_service_pb2.ExportTraceServiceResponse()
        if decoded.rejected:
            response.partial_success.rejected_spans = decoded.rejected
            response.partial_success.error_message = decoded.error_message()
        return response

    def _project(self, metadata: dict[str, str]) -> str:
        try:
            return self.authenticator.caller(metadata, metadata.get("x-agentlat-project")).project
        except AuthError as exc:
            raise _Refusal(_status(_AUTH_CODES[exc.status], exc.message, exc.retry_after)) from None


class _Refusal(Exception):
    def __init__(self, status: status_pb2.Status) -> None:
        super().__init__(status.message)
        self.status = status


def _status(code: int, message: str, retry_after: int | None = None) -> status_pb2.Status:
    status = status_pb2.Status(code=code, message=message)
    if retry_after:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=retry_after)))
        status.details.append(detail)
    return status


def start_grpc_server(
    host: str, port: int, ingestor: Ingestor, authenticator: Authenticator, max_message_bytes: int
) -> grpc.Server:
    server = grpc.server(
        ThreadPoolExecutor(max_workers=8, thread_name_prefix="agentlat-grpc"),
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", 4 * 1024 * 1024),
        ],
    )
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(ingestor, authenticator), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind OTLP/gRPC to {host}:{port}; pass --grpc-port with a free port, or 0 to turn it off")
    server.start()
    log.info("OTLP/gRPC on %s:%d", host, bound)
    return server
