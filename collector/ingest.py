"""What every OTLP receiver does with a decoded request, whatever the protocol: turn it
into a batch, log it durably, and count what happened."""

from __future__ import annotations

import logging
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentlat.collector.metrics import CollectorMetrics
from agentlat.collector.otlp import DecodedBatch, Limits, to_batch
from agentlat.collector.pipeline import Backpressure, IngestPipeline

log = logging.getLogger("agentlat.collector")


class LogUnavailable(Exception):
    """The write-ahead log could not be written (disk full, read-only); retry later."""


class Ingestor:
    def __init__(self, pipeline: IngestPipeline, limits: Limits, metrics: CollectorMetrics) -> None:
        self.pipeline, self.limits, self.metrics = pipeline, limits, metrics

    def accept(self, request: ExportTraceServiceRequest, project: str, protocol: str) -> DecodedBatch:
        """Decode and log; raise TooManySpans, Backpressure or LogUnavailable when nothing was kept."""
        decoded = to_batch(request, project, time.time_ns(), self.limits)
        self.metrics.spans_received.labels(protocol).inc(decoded.accepted + decoded.rejected)
        if decoded.rejected:
            self.metrics.spans_rejected.labels("invalid_span").inc(decoded.rejected)
            log.info("rejected %d spans: %s", decoded.rejected, decoded.error_message())
        if decoded.accepted:
            self._submit(decoded)
        return decoded

    def _submit(self, decoded: DecodedBatch) -> None:
        try:
            self.pipeline.submit(decoded.batch)
        except Backpressure:
            self.metrics.spans_rejected.labels("backpressure").inc(decoded.accepted)
            raise
        except OSError as exc:
            self.metrics.spans_rejected.labels("log_unavailable").inc(decoded.accepted)
            log.error("cannot write the write-ahead log: %s", exc)
            raise LogUnavailable(str(exc)) from None
