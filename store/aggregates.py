"""Aggregate reads of the query API and the advisor: percentiles, time series, per-dimension
summaries and the advisor's evidence, exact from the spans or from the rollups. Part of ``Store``
(store/__init__.py); the SQL is in queries.py and advice.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentlat.store import advice, queries
from agentlat.store.backends import Backend, Params
from agentlat.store.queries import SpanFilter

_Build = Callable[[SpanFilter], tuple[str, Params]]
# The advisor's queries by the key its evidence files their rows under, from the rollups or exact.
_ADVICE_FROM_ROLLUPS: dict[str, _Build] = {
    "totals": advice.rollup_totals_sql,
    "medians": advice.rollup_medians_sql,
    "prefix": advice.rollup_prefix_misses_sql,
    "server": advice.server_phases_sql,
}
_ADVICE_EXACT: dict[str, _Build] = {
    "calls": advice.model_calls_sql,
    "prefix": advice.prefix_misses_sql,
    "server": advice.server_phases_sql,
    "trace": advice.traces_sql,
}


@dataclass(frozen=True, slots=True)
class PercentileRow:
    group: dict[str, str]
    count: int
    p50: float
    p95: float
    p99: float
    mean: float


class AggregateReads:
    """Reads that aggregate a window of spans, traces or rollups."""

    backend: Backend

    def _rows(self, sql: str, params: Params | None = None) -> list[dict[str, Any]]:
        return self.backend.query_arrow(sql, params).to_pylist()

    def percentiles(self, metric: str, group_by: Sequence[str], where: SpanFilter) -> list[PercentileRow]:
        rows = self._rows(*queries.percentiles_sql(metric, group_by, where))
        return [
            PercentileRow(
                group={d: row[d] for d in group_by},
                count=row["count"],
                p50=row["q"][0],
                p95=row["q"][1],
                p99=row["q"][2],
                mean=row["mean"],
            )
            for row in rows
        ]

    def rollup_percentiles(
        self, metrics: Sequence[str], group_by: Sequence[str], where: SpanFilter
    ) -> list[dict[str, Any]]:
        return self._rows(*queries.rollup_percentiles_sql(metrics, group_by, where))

    def rollup_groups(self, group_by: Sequence[str], where: SpanFilter) -> list[dict[str, Any]]:
        """Each group (of rollup dimensions) that served requests in the window, with its request count."""
        return self._rows(*queries.rollup_groups_sql(group_by, where))

    def timeseries(
        self, metric: str, group_by: Sequence[str], where: SpanFilter, step_seconds: int
    ) -> list[dict[str, Any]]:
        return self._rows(*queries.timeseries_sql(metric, group_by, where, step_seconds))

    def tail_split(self, group_by: Sequence[str], where: SpanFilter) -> dict[tuple, dict[str, dict[str, float]]]:
        """Per group (its values in ``group_by`` order): per percentile name, the traces counted and the mean E2E,
        model, tool and orchestration time of the requests at that percentile of E2E (``queries.tail_split_sql``)."""
        names = {level: name for name, level in queries.TAIL_LEVELS.items()}
        found: dict[tuple, dict[str, dict[str, float]]] = {}
        for row in self._rows(*queries.tail_split_sql(group_by, where)):
            parts = {k: row[k] for k in ("traces", "e2e", "model", "tool", "orchestration")}
            found.setdefault(tuple(row[d] for d in group_by), {})[names[row["level"]]] = parts
        return found

    def dimension_summary(
        self, dimension: str, where: SpanFilter, from_rollups: bool, by_service: bool = False
    ) -> list[dict[str, Any]]:
        """Per value of route, agent, model or tool (per service and value with ``by_service``): counts, errors,
        rates and percentiles, exact from the spans, or from the rollups (percentiles exact up to EXACT_MAX
        values, t-digest beyond; cost grows with minutes, not spans)."""
        if not from_rollups:
            return self._rows(*queries.dimensions_sql(dimension, where, by_service))
        # All rows: a row limit could drop some metrics of a value the summary lists.
        metrics = queries.dimension_rollup_metrics(dimension)
        keys = ["service", dimension] if by_service else [dimension]
        rows = self._rows(*queries.rollup_percentiles_sql(metrics, keys, where, limit=None))
        return queries.dimension_summary_from_rollups(dimension, rows, by_service)

    def advice_evidence(self, where: SpanFilter, from_rollups: bool = False) -> advice.Evidence:
        """Per route: the aggregates the advisor reads, under keys calls, prefix, server, trace; exact
        from the spans and traces, or from the rollups. The queries run concurrently."""
        builds = _ADVICE_FROM_ROLLUPS if from_rollups else _ADVICE_EXACT
        with ThreadPoolExecutor(len(builds), thread_name_prefix="agentlat-advice") as pool:
            found = {key: pool.submit(self.backend.query_arrow, *build(where)) for key, build in builds.items()}
            rows = {key: future.result().to_pylist() for key, future in found.items()}
        evidence = advice.evidence_from_rollups(rows.pop("totals"), rows.pop("medians")) if from_rollups else {}
        for key, key_rows in rows.items():
            for row in key_rows:
                evidence.setdefault(row["route"], {})[key] = row
        return evidence
