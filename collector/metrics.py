"""The collector's own metrics, in Prometheus text format on ``/metrics``.

Counters are kept where things happen (the receivers); state (log depth, spans written,
traces waiting) is read from the pipeline, assembler and rollup scheduler at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, GCCollector, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentlat.collector.analysis.assembler import TraceAssembler
from agentlat.collector.analysis.rollups import RollupScheduler
from agentlat.collector.ingest.pipeline import IngestPipeline

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class CollectorMetrics:
    def __init__(self, pipeline: IngestPipeline, assembler: TraceAssembler, rollups: RollupScheduler) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "agentlat_otlp_requests", "OTLP export requests by protocol and answer", ["protocol", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.spans_received = Counter(
            "agentlat_spans_received", "Spans decoded from OTLP requests", ["protocol"], registry=self.registry
        )
        self.spans_rejected = Counter(
            "agentlat_spans_rejected", "Spans not accepted, by reason", ["reason"], registry=self.registry
        )
        # OTLP logs and metrics: records received, rejected (partial_success, refused) and dropped
        # (accepted but not kept: not a GenAI event or gen_ai.* metric)
        self.log_records_received = Counter(
            "agentlat_log_records_received", "Log records decoded from OTLP requests", ["protocol"],
            registry=self.registry,
        )  # fmt: skip
        self.log_records_rejected = Counter(
            "agentlat_log_records_rejected", "Log records not accepted, by reason", ["reason"], registry=self.registry
        )
        self.log_records_dropped = Counter(
            "agentlat_log_records_dropped", "Log records accepted but not kept, by reason", ["reason"],
            registry=self.registry,
        )  # fmt: skip
        self.metric_points_received = Counter(
            "agentlat_metric_points_received", "Metric data points decoded from OTLP requests", ["protocol"],
            registry=self.registry,
        )  # fmt: skip
        self.metric_points_rejected = Counter(
            "agentlat_metric_points_rejected", "Metric data points not accepted, by reason", ["reason"],
            registry=self.registry,
        )  # fmt: skip
        self.metric_points_dropped = Counter(
            "agentlat_metric_points_dropped", "Metric data points accepted but not kept, by reason", ["reason"],
            registry=self.registry,
        )  # fmt: skip
        self.store_write_seconds = Histogram(
            "agentlat_store_write_seconds", "Time to write one batch to the store",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=self.registry,
        )  # fmt: skip
        self.inflight_bytes = Gauge(
            "agentlat_inflight_body_bytes", "OTLP/HTTP request body bytes held (admission control)",
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(_StateCollector(pipeline, assembler, rollups))
        GCCollector(registry=self.registry)  # python_gc_*: the server's garbage collections (gc_tuning.py)
        pipeline.on_insert_timing(self.store_write_seconds.observe)

    def counters(self, signal: str) -> tuple[Counter, Counter, Counter | None]:
        """The received, rejected and dropped counters of ``signal`` (traces, logs or metrics)."""
        if signal == "logs":
            return self.log_records_received, self.log_records_rejected, self.log_records_dropped
        if signal == "metrics":
            return self.metric_points_received, self.metric_points_rejected, self.metric_points_dropped
        return self.spans_received, self.spans_rejected, None

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    def __init__(self, pipeline: IngestPipeline, assembler: TraceAssembler, rollups: RollupScheduler) -> None:
        self.pipeline, self.assembler, self.rollups = pipeline, assembler, rollups

    def collect(self) -> Iterator[Metric]:
        stats = self.pipeline.stats
        yield CounterMetricFamily("agentlat_spans_written", "Spans written to the store", value=stats.spans_written)
        yield GaugeMetricFamily(
            "agentlat_spans_written_timestamp_seconds", "Unix time of the last spans write (0: none yet)",
            value=stats.spans_written_at,
        )  # fmt: skip
        yield CounterMetricFamily(
            "agentlat_events_written", "GenAI events (from OTLP logs) written to the store", value=stats.events_written
        )
        yield CounterMetricFamily(
            "agentlat_metric_points_written", "gen_ai.* metric data points written to the store",
            value=stats.metric_points_written,
        )  # fmt: skip
        yield CounterMetricFamily(
            "agentlat_store_write_errors", "Failed store writes (retried)", value=stats.store_errors
        )
        yield GaugeMetricFamily(
            "agentlat_wal_pending_bytes", "Logged bytes not yet in the store", value=self.pipeline.pending_bytes
        )
        yield GaugeMetricFamily(
            "agentlat_store_available", "1 while the store accepts writes", value=int(self.pipeline.store_available)
        )
        yield GaugeMetricFamily(
            "agentlat_writer_running", "1 while the writer thread runs and its last step succeeded",
            value=int(self.pipeline.writer_state() == "running"),
        )  # fmt: skip
        yield CounterMetricFamily(
            "agentlat_writer_errors", "Writer steps that failed (retried)", value=stats.writer_errors
        )
        yield CounterMetricFamily(
            "agentlat_writer_restarts", "Times the writer thread was found ended and restarted",
            value=stats.writer_restarts,
        )  # fmt: skip
        yield CounterMetricFamily(
            "agentlat_wal_checkpoint_errors", "Checkpoint saves that failed (retried)", value=stats.checkpoint_errors
        )
        if self.pipeline.disk is not None:
            free = GaugeMetricFamily("agentlat_disk_free_bytes", "Free bytes where data lands", labels=["path"])
            for path, value in self.pipeline.disk.free_bytes().items():
                free.add_metric([str(path)], value)
            yield free
        yield GaugeMetricFamily(
            "agentlat_traces_pending", "Traces waiting for analysis", value=self.assembler.pending()
        )
        yield CounterMetricFamily("agentlat_traces_analysed", "Trace analyses written", value=self.assembler.analysed)
        yield GaugeMetricFamily(
            "agentlat_traces_analysed_timestamp_seconds", "Unix time of the last trace analyses written (0: none yet)",
            value=self.assembler.analysed_at,
        )  # fmt: skip
        yield CounterMetricFamily(
            "agentlat_traces_read_back", "Traces read back from the store to be analysed (the rest: from memory)",
            value=self.assembler.read_back,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "agentlat_analysis_held_bytes", "Stored spans' analysis input held in memory until their traces are due",
            value=self.assembler.held_bytes_now(),
        )  # fmt: skip
        yield CounterMetricFamily("agentlat_rollup_minutes", "Minutes (re)rolled up", value=self.rollups.rolled)
