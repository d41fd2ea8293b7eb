"""OTLP/gRPC receiver (port 4317): TraceService, LogsService and MetricsService Export, on the
same pipeline and rules as OTLP/HTTP (what logs and metrics keep: ``otlp_signals``).

Throttling answers UNAVAILABLE with a google.rpc.RetryInfo detail, which OpenTelemetry
exporters honour; keys travel as ``authorization: Bearer <key>`` or ``x-agentlat-key``
metadata.

Connection hygiene (``GrpcLimits``): a message larger than the HTTP body limit, or an RPC
beyond ``max_concurrent_rpcs`` in flight, gets RESOURCE_EXHAUSTED (which OpenTelemetry's
Python exporter retries); idle connections are closed and every connection is recycled after
a while, which also ends an RPC whose message trickles in without a deadline; a batch whose
caller's deadline has passed, or who cancelled, is answered DEADLINE_EXCEEDED or CANCELLED
without being logged.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from agentlat.collector.ingest.otlp import TooManySpans
from agentlat.collector.ingest.pipeline import Backpressure
from agentlat.collector.requests import SIGNALS, Ingestor, LogUnavailable
from agentlat.server.auth import Authenticator, AuthError

log = logging.getLogger("agentlat.collector")

_AUTH_CODES = {401: code_pb2.UNAUTHENTICATED, 403: code_pb2.PERMISSION_DENIED, 429: code_pb2.UNAVAILABLE}


class _ExportService:
    """What every Export RPC does, whatever the signal. The services of one server share their
    ``decoding`` semaphore: batches decoded and logged at once."""

    signal = "traces"

    def __init__(
        self,
        ingestor: Ingestor,
        authenticator: Authenticator,
        decode_slots: int = 8,
        decoding: threading.BoundedSemaphore | None = None,
    ) -> None:
        self.ingestor, self.authenticator = ingestor, authenticator
        self.decoding = decoding or threading.BoundedSemaphore(decode_slots)

    def _export(self, request: Message, context: grpc.ServicerContext) -> Message:
        signal, code = self.signal, "OK"
        try:
            metadata = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
            project = self._project(metadata)
            with self.decoding:
                _check_caller_waits(context)
                decoded = self.ingestor.accept(request, project, "grpc", signal)
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
        return SIGNALS[signal].respond(decoded)

    def _project(self, metadata: dict[str, str]) -> str:
        try:
            return self.authenticator.caller(metadata, metadata.get("x-agentlat-project")).project
        except AuthError as exc:
            raise _Refusal(_status(_AUTH_CODES[exc.status], exc.message, exc.retry_after)) from None


class TraceService(_ExportService, trace_service_pb2_grpc.TraceServiceServicer):
    signal = "traces"

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        return self._export(request, context)  # type: ignore[return-value]


class LogsService(_ExportService, logs_service_pb2_grpc.LogsServiceServicer):
    signal = "logs"

    def Export(
        self, request: logs_service_pb2.ExportLogsServiceRequest, context: grpc.ServicerContext
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        return self._export(request, context)  # type: ignore[return-value]


class MetricsService(_ExportService, metrics_service_pb2_grpc.MetricsServiceServicer):
    signal = "metrics"

    def Export(
        self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: grpc.ServicerContext
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        return self._export(request, context)  # type: ignore[return-value]


def _check_caller_waits(context: grpc.ServicerContext) -> None:
    """Refuse before logging anything when nobody waits for the answer: the caller would retry a batch kept."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        raise _Refusal(_status(code_pb2.DEADLINE_EXCEEDED, "the deadline passed before the batch was taken"))
    if not context.is_active():
        raise _Refusal(_status(code_pb2.CANCELLED, "the call was cancelled before the batch was taken"))


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


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    # Each RPC in flight has a thread of its own, so one whose message trickles in holds no other
    # back; TraceService still decodes only a few batches at once.
    max_concurrent_rpcs: int = 32
    max_streams_per_connection: int = 16
    idle_seconds: int = 300  # a connection without RPCs is closed after this
    max_age_seconds: int = 600  # every connection is recycled (GOAWAY) after this...
    age_grace_seconds: int = 30  # ...its RPCs given this long to finish before it is cut
    keepalive_seconds: int = 60  # ping a connection that has RPCs in flight, to find a dead peer
    keepalive_timeout_seconds: int = 20
    decode_slots: int = 8  # batches decoded and logged at once, over all three services

    def options(self, max_message_bytes: int) -> list[tuple[str, int]]:
        return [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", 4 * 1024 * 1024),
            ("grpc.max_concurrent_streams", self.max_streams_per_connection),
            ("grpc.max_connection_idle_ms", self.idle_seconds * 1000),
            ("grpc.max_connection_age_ms", self.max_age_seconds * 1000),
            ("grpc.max_connection_age_grace_ms", self.age_grace_seconds * 1000),
            ("grpc.keepalive_time_ms", self.keepalive_seconds * 1000),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_seconds * 1000),
        ]


def start_grpc_server(
    host: str,
    port: int,
    ingestor: Ingestor,
    authenticator: Authenticator,
    max_message_bytes: int,
    limits: GrpcLimits = GrpcLimits(),
) -> grpc.Server:
    server = grpc.server(
        ThreadPoolExecutor(max_workers=limits.max_concurrent_rpcs, thread_name_prefix="agentlat-grpc"),
        options=limits.options(max_message_bytes),
        maximum_concurrent_rpcs=limits.max_concurrent_rpcs,
    )
    decoding = threading.BoundedSemaphore(limits.decode_slots)
    services = [
        service(ingestor, authenticator, decoding=decoding) for service in (TraceService, LogsService, MetricsService)
    ]
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(services[0], server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(services[1], server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(services[2], server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind OTLP/gRPC to {host}:{port}; pass --grpc-port with a free port, or 0 to turn it off")
    server.start()
    log.info("OTLP/gRPC on %s:%d", host, bound)
    return server
