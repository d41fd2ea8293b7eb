"""What ingest writes: spans, GenAI events and metric points decoded from OTLP, and the rows of
the per-trace analysis. Part of ``Store`` (store/__init__.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from agentlat.store.backends import Backend, Settings
from agentlat.store.otlp_parse import OtlpParser, ParsedRequests
from agentlat.store.schema import EVENTS_TABLE, METRIC_POINTS_TABLE, SPANS_TABLE, at_stored_resolution, stored_once

# Ingest leaves duplicates for the reads to drop: each of these tables is a ReplacingMergeTree read with FINAL,
# since retries and replays write a row again in a later insert anyway. Dropping them inside each insert too cost
# 4.5 of the spans insert's 10.7 CPU µs a span (bench/stages.py, 100k spans in 50,000-row inserts).
INGEST_INSERT: Settings = {"optimize_on_insert": 0}


class Writes:
    """Inserts of Arrow batches into the ingest tables."""

    backend: Backend

    def parse_trace_requests(self, bodies: Sequence[bytes]) -> ParsedRequests:
        """OTLP trace request bodies parsed by the engine: a row a span, a row a resource (store/otlp_parse.py)."""
        return OtlpParser(self.backend.run_local).parse(bodies)

    def insert_spans(self, batch: pa.Table) -> None:
        self.backend.insert_arrow(SPANS_TABLE, stored_once(at_stored_resolution(batch)), INGEST_INSERT)

    def insert_events(self, batch: pa.Table) -> None:
        """GenAI events decoded from OTLP logs (``schema.EVENT_ARROW_SCHEMA``)."""
        self.backend.insert_arrow(EVENTS_TABLE, batch, INGEST_INSERT)

    def insert_metric_points(self, batch: pa.Table) -> None:
        """gen_ai.* metric data points decoded from OTLP metrics (``schema.METRIC_POINT_ARROW_SCHEMA``)."""
        self.backend.insert_arrow(METRIC_POINTS_TABLE, batch, INGEST_INSERT)

    def write_traces(self, rows: pa.Table) -> None:
        """Rows of the per-trace analysis (``analysis.TRACE_ROW_SCHEMA``); a re-analysis replaces a row."""
        self.backend.insert_arrow("agentlat_traces", rows, INGEST_INSERT)
