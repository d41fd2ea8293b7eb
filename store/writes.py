"""What ingest writes: spans, GenAI events and metric points decoded from OTLP, and the rows of
the per-trace analysis. Part of ``Store`` (store/__init__.py)."""

from __future__ import annotations

import pyarrow as pa

from agentlat.store.backends import Backend
from agentlat.store.schema import EVENTS_TABLE, METRIC_POINTS_TABLE, SPANS_TABLE, at_stored_resolution


class Writes:
    """Inserts of Arrow batches into the ingest tables."""

    backend: Backend

    def insert_spans(self, batch: pa.Table) -> None:
        self.backend.insert_arrow(SPANS_TABLE, at_stored_resolution(batch))

    def insert_events(self, batch: pa.Table) -> None:
        """GenAI events decoded from OTLP logs (``schema.EVENT_ARROW_SCHEMA``)."""
        self.backend.insert_arrow(EVENTS_TABLE, batch)

    def insert_metric_points(self, batch: pa.Table) -> None:
        """gen_ai.* metric data points decoded from OTLP metrics (``schema.METRIC_POINT_ARROW_SCHEMA``)."""
        self.backend.insert_arrow(METRIC_POINTS_TABLE, batch)

    def write_traces(self, rows: pa.Table) -> None:
        """Rows of the per-trace analysis (``analysis.TRACE_ROW_SCHEMA``); a re-analysis replaces a row."""
        self.backend.insert_arrow("agentlat_traces", rows)
