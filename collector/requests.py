"""What every OTLP receiver does with a request, whatever the protocol: check it, log it durably,
and count what happened.

A protobuf trace request is only checked here (which spans it keeps: ``otlp.check_request``, about
a microsecond a span) and logged as it came; the writer decodes many of them at once with the
engine when it stores them (``otlp_engine``). Parsing OTLP/JSON, and decoding logs and metrics,
costs far more CPU and holds the GIL, so those run in ``decode_workers`` worker processes (by
default as many as requests are decoded at once, on a machine with two cores or more, started at
the first such request), which take the raw body and send back what is logged (``decode.py``,
which spares them the store and everything else they do not use). A worker that dies (killed,
out of memory) costs the requests it held a 503 and is replaced.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from google.protobuf.message import Message

from agentlat.collector.ingest.decode import SIGNALS, decode, start_worker
from agentlat.collector.ingest.otlp import DecodedBatch, Limits
from agentlat.collector.ingest.pipeline import Backpressure, IngestPipeline
from agentlat.collector.metrics import CollectorMetrics
from agentlat.errors import AgentlatError

log = logging.getLogger("agentlat.collector")


DECODE_CONCURRENCY = 2  # requests decoded at once: a decoded request takes ~10x its body in memory


class LogUnavailable(AgentlatError):
    """The write-ahead log could not be written (disk full, read-only); retry later."""


class DecoderUnavailable(AgentlatError):
    """A decode worker died while it held the request; a new one takes the next request."""


def default_decode_workers() -> int:
    """One worker per request decoded at once, when there is a second core for them to use."""
    # the cores this process may run on (Linux); macOS has no affinity call, so all of them there
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, DECODE_CONCURRENCY) if cores >= 2 else 0


class Ingestor:
    def __init__(
        self, pipeline: IngestPipeline, limits: Limits, metrics: CollectorMetrics, decode_workers: int = 0
    ) -> None:
        self.pipeline, self.limits, self.metrics = pipeline, limits, metrics
        self.decode_workers = decode_workers
        self._pool: ProcessPoolExecutor | None = None

    async def decode(self, body: bytes, protobuf: bool, project: str, signal: str = "traces") -> DecodedBatch:
        """Decode off the event loop: protobuf traces in a thread, the rest in a worker process when there
        are any, else a thread. Raise DecoderUnavailable when the worker died on the way."""
        args = (body, protobuf, project, time.time_ns(), self.limits, signal)
        pool = None if protobuf and signal == "traces" else self._executor()
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, decode, *args)
        except BrokenProcessPool:
            self._replace(pool)
            raise DecoderUnavailable("a decode worker died while decoding this request; retry it") from None

    def _executor(self) -> ProcessPoolExecutor | None:
        if self.decode_workers and self._pool is None:
            # spawn, not fork: the store's threads (chDB) must not be forked mid-flight. A spawned
            # worker imports only what unpickling decode() and start_worker() needs (decode.py).
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                self.decode_workers, mp_context=context, initializer=start_worker, initargs=(os.getpid(),)
            )
        return self._pool

    def _replace(self, broken: ProcessPoolExecutor | None) -> None:
        """Drop a broken pool (once, however many requests saw it break); the next request starts a new one."""
        if broken is not None and broken is self._pool:
            log.error("a decode worker process died; starting new workers")
            self._pool = None
            broken.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def accept(self, request: Message, project: str, protocol: str, signal: str = "traces") -> DecodedBatch:
        """Check (traces) or decode, and log; raise TooManySpans, Backpressure or LogUnavailable when nothing
        was kept."""
        return self.record(SIGNALS[signal].to_batch(request, project, time.time_ns(), self.limits), protocol)

    def record(self, decoded: DecodedBatch, protocol: str) -> DecodedBatch:
        """Count and log a decoded batch; raise Backpressure or LogUnavailable when nothing was kept."""
        received, rejected, dropped = self.metrics.counters(decoded.signal)
        kind = SIGNALS[decoded.signal]
        received.labels(protocol).inc(decoded.accepted + decoded.rejected + sum(decoded.dropped.values()))
        if decoded.rejected:
            if decoded.rejected > decoded.expired:
                rejected.labels(kind.invalid_reason).inc(decoded.rejected - decoded.expired)
            if decoded.expired:  # spans older than the store's retention
                rejected.labels("expired").inc(decoded.expired)
            log.info("rejected %d %s: %s", decoded.rejected, kind.noun, decoded.error_message())
        if decoded.accepted:
            self._submit(decoded, rejected)
        if dropped is not None:  # counted once the request is answered 200, not again on its retries
            for reason, count in decoded.dropped.items():
                dropped.labels(reason).inc(count)
        return decoded

    def _submit(self, decoded: DecodedBatch, rejected: Any) -> None:
        try:
            self.pipeline.submit(decoded.batch)
        except Backpressure:
            rejected.labels("backpressure").inc(decoded.accepted)
            raise
        except OSError as exc:
            rejected.labels("log_unavailable").inc(decoded.accepted)
            log.error("cannot write the write-ahead log: %s", exc)
            raise LogUnavailable(str(exc)) from None
