"""Row reads of the query API: lists of traces, one trace's spans, events and analysis, metric
points, span counts. Part of ``Store`` (store/__init__.py); the SQL is in queries.py and signals.py."""

from __future__ import annotations

from typing import Any

from agentlat.store import queries, signals
from agentlat.store.backends import Backend, Params
from agentlat.store.queries import SpanFilter
from agentlat.store.schema import DERIVED_NAMES, SPANS_TABLE


class TraceReads:
    """Reads that return stored rows (spans, traces, events, points), not aggregates."""

    backend: Backend

    def _rows(self, sql: str, params: Params | None = None) -> list[dict[str, Any]]:
        return self.backend.query_arrow(sql, params).to_pylist()

    def traces(self, where: SpanFilter, sort: str = "recent", limit: int = 50) -> list[dict[str, Any]]:
        return self._rows(*queries.traces_sql(where, sort, limit))

    def trace_spans(self, project: str, trace_id: str) -> list[dict[str, Any]]:
        return self._rows(*queries.trace_sql(project, trace_id, DERIVED_NAMES))

    def trace_analysis(self, project: str, trace_id: str) -> dict[str, Any] | None:
        rows = self._rows(*queries.trace_analysis_sql(project, trace_id))
        return rows[0] if rows else None

    def trace_events(self, project: str, trace_id: str) -> list[dict[str, Any]]:
        """The GenAI events of one trace, in time order (at most ``signals.MAX_TRACE_EVENTS``)."""
        return self._rows(*signals.trace_events_sql(project, trace_id))

    def metric_points(
        self, project: str, start_ns: int, end_ns: int, name: str | None = None, service: str | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """gen_ai.* metric points whose time is in [start_ns, end_ns), oldest first."""
        return self._rows(*signals.metric_points_sql(project, start_ns, end_ns, name, service, limit))

    def count_spans(self, project: str | None = None) -> int:
        if project is None:
            rows = self._rows(f"SELECT count() AS n FROM {SPANS_TABLE} FINAL")
        else:
            rows = self._rows(
                f"SELECT count() AS n FROM {SPANS_TABLE} FINAL WHERE ProjectId = {{p:String}}", {"p": project}
            )
        return int(rows[0]["n"])
