"""What every OTLP receiver does with a request, whatever the protocol: turn it into a
batch, log it durably, and count what happened.

Decoding is most of the CPU an ingested span costs and holds the GIL, so with
``decode_workers`` it runs in that many worker processes, which take the raw body and send
back the Arrow batch.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentlat.collector.metrics import CollectorMetrics
from agentlat.collector.otlp import DecodedBatch, Limits, parse_json, parse_protobuf, to_batch
from agentlat.collector.pipeline import Backpressure, IngestPipeline

log = logging.getLogger("agentlat.collector")


class LogUnavailable(Exception):
    """The write-ahead log could not be written (disk full, read-only); retry later."""


def decode(body: bytes, protobuf: bool, project: str, received_ns: int, limits: Limits) -> DecodedBatch:
    """A request body to a batch; raise OtlpDecodeError or TooManySpans. Runs in a worker."""
    request = parse_protobuf(body) if protobuf else parse_json(body)
    return to_batch(request, project, received_ns, limits)


class Ingestor:
    def __init__(
        self, pipeline: IngestPipeline, limits: Limits, metrics: CollectorMetrics, decode_workers: int = 0
    ) -> None:
        self.pipeline, self.limits, self.metrics = pipeline, limits, metrics
        self.decode_workers = decode_workers
        self._pool: ProcessPoolExecutor | None = None

    async def decode(self, body: bytes, protobuf: bool, project: str) -> DecodedBatch:
        """Decode off the event loop: in a worker process when there are any, else a thread."""
        args = (body, protobuf, project, time.time_ns(), self.limits)
        return await asyncio.get_running_loop().run_in_executor(self._executor(), decode, *args)

    def _executor(self) -> ProcessPoolExecutor | None:
        if self.decode_workers and self._pool is None:
            # spawn, not fork: the store's threads (chDB) must not be forked mid-flight
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(self.decode_workers, mp_context=context)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def accept(self, request: ExportTraceServiceRequest, project: str, protocol: str) -> DecodedBatch:
        """Decode and log; raise TooManySpans, Backpressure or LogUnavailable when nothing was kept."""
        return self.record(to_batch(request, project, time.time_ns(), self.limits), protocol)

    def record(self, decoded: DecodedBatch, protocol: str) -> DecodedBatch:
        """Count and log a decoded batch; raise Backpressure or LogUnavailable when nothing was kept."""
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
