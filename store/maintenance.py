"""Rollup maintenance: what the collector's trace assembler and rollup loop ask of the store, to
analyse traces and keep the minute, hour and day rollups current. Part of ``Store``
(store/__init__.py); the SQL is in analysis.py."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from agentlat.store import analysis
from agentlat.store.backends import Backend


class RollupMaintenance:
    """Inputs of the per-trace analysis, and recomputing the rollups of changed minutes."""

    backend: Backend

    def analysis_input(self, project: str, trace_ids: Sequence[str]) -> pa.Table:
        """The spans of these traces, one row each, columns named after the analysis's SpanRecord fields."""
        sql, params = analysis.analysis_input_sql(project, trace_ids)
        return self.backend.query_arrow(sql, params)

    def stored_spans(self, project: str, trace_ids: Sequence[str]) -> dict[str, int]:
        """How many span rows the store holds for each of these traces (a span stored twice counts twice)."""
        sql, params = analysis.stored_spans_sql(project, trace_ids)
        found = self.backend.query_arrow(sql, params)
        return dict(zip(found.column("trace_id").to_pylist(), found.column("spans").to_pylist(), strict=True))

    def unanalysed_traces(self, since_seconds: int) -> list[tuple[str, str]]:
        sql, params = analysis.unanalysed_sql(since_seconds)
        return [(r["project"], r["trace_id"]) for r in self.backend.query_arrow(sql, params).to_pylist()]

    def rollup(self, minutes: Sequence[int], version: int) -> None:
        """Recompute the rollups of these minutes (unix seconds) from the raw tables, then their hours and days."""
        if minutes:
            for sql, params in (*analysis.rollup_sql(minutes, version), *analysis.coarser_rollup_sql(minutes)):
                self.backend.execute(sql, params)
