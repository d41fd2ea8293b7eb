"""agentlat.store: the schema, its migrations, the two ClickHouse backends and every query.

Public surface: ``open_store()`` and the ``Store`` it returns. Nothing here imports the
collector, alerts or dashboard; they call in.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from agentlat.api.windows import ACCEPTED_TIMES, TimeRangeError, iso, parse_duration, time_range, trailing
from agentlat.store import advice, analysis, queries, signals
from agentlat.store.alerts import AlertTables
from agentlat.store.backends import (
    Backend,
    ChdbBackend,
    ClickHouseBackend,
    StoreError,
    StoreUnavailable,
)
from agentlat.store.keys import KEY_ROW_SCHEMA, ApiKeyRecord
from agentlat.store.migrations import (
    DEFAULT_TTL_DAYS,
    LEDGER_DDL,
    MIGRATIONS,
    SHARDING_KEYS,
    cluster_statements,
    with_ttl,
)
from agentlat.store.queries import DIMENSION_METRICS, DIMENSIONS, METRICS, ROLLUP_DIMENSIONS, SpanFilter
from agentlat.store.rollup_sql import ROLLUP_METRICS
from agentlat.store.schema import (
    DERIVED_NAMES,
    EVENTS_TABLE,
    METRIC_POINTS_TABLE,
    SPAN_ARROW_SCHEMA,
    at_stored_resolution,
)

__all__ = [
    "ACCEPTED_TIMES",
    "DIMENSIONS",
    "DIMENSION_METRICS",
    "METRICS",
    "ROLLUP_DIMENSIONS",
    "ROLLUP_METRICS",
    "SPAN_ARROW_SCHEMA",
    "AlertTables",
    "ApiKeyRecord",
    "PercentileRow",
    "SpanFilter",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TimeRangeError",
    "iso",
    "open_store",
    "parse_duration",
    "time_range",
    "trailing",
]

log = logging.getLogger("agentlat.store")

SPANS_TABLE = "otel_traces"
_SPANS_TTL = re.compile(r"\bTTL toDate\(Timestamp\) \+ toIntervalDay\((\d+)\)")


@dataclass(frozen=True, slots=True)
class PercentileRow:
    group: dict[str, str]
    count: int
    p50: float
    p95: float
    p99: float
    mean: float


class Store:
    """The spans store on one backend. Thread-safe: backends serialise what must be."""

    def __init__(self, backend: Backend, ttl_days: int = DEFAULT_TTL_DAYS) -> None:
        self.backend = backend
        self.ttl_days = ttl_days

    @property
    def description(self) -> str:
        if isinstance(self.backend, ChdbBackend):
            return f"embedded chDB at {self.backend.data_dir}"
        return "ClickHouse server"

    def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied now."""
        self.backend.execute(LEDGER_DDL)
        done = self._applied_versions()
        if any(m.version not in done for m in MIGRATIONS) and "Distributed" in self._schema_engines().values():
            raise StoreError(
                "this ClickHouse database is set up for a cluster and has migrations pending; apply them with "
                "`agentlat migrate --cluster NAME` before starting this version (docs/operations.md, Upgrades)"
            )
        applied = []
        for migration in MIGRATIONS:
            if migration.version in done:
                continue
            for statement in migration.statements:
                self.backend.execute(with_ttl(statement, self.ttl_days))
            self.backend.execute(
                "INSERT INTO agentlat_migrations (Version, Name) VALUES ({v:UInt32}, {n:String})",
                {"v": migration.version, "n": migration.name},
            )
            log.info("applied migration %d: %s", migration.version, migration.name)
            applied.append(migration.version)
        return applied

    def migrate_cluster(self, cluster: str) -> list[int]:
        """Apply pending migrations ON CLUSTER, as replicated tables behind Distributed ones; return
        the versions applied now. Refuses a database that already holds single-node tables."""
        engines = self._schema_engines()
        single = sorted(name for name, engine in engines.items() if engine != "Distributed")
        if single:
            raise StoreError(
                f"{', '.join(single)} already exist here as single-node tables (a collector created them "
                "before cluster mode); cluster mode needs a database without them (docs/operations.md)"
            )
        done = self._applied_versions() if "agentlat_migrations" in engines else set()
        database = self.backend.query_arrow("SELECT currentDatabase() AS db").column("db")[0].as_py()
        for statement in cluster_statements(cluster, self.ttl_days, database, applied=done):
            self.backend.execute(statement)
        return [m.version for m in MIGRATIONS if m.version not in done]

    def settings(self, names: Sequence[str]) -> dict[str, str]:
        """The values of these ClickHouse settings for this connection's user."""
        sql = "SELECT name, value FROM system.settings WHERE name IN {names:Array(String)}"
        return {r["name"]: r["value"] for r in self.backend.query_arrow(sql, {"names": list(names)}).to_pylist()}

    def _applied_versions(self) -> set[int]:
        ledger = self.backend.query_arrow("SELECT Version FROM agentlat_migrations")
        return set(ledger.column("Version").to_pylist()) if ledger.num_rows else set()

    def _schema_engines(self) -> dict[str, str]:
        """Engine of each of the schema's tables present in the current database."""
        sql = (
            "SELECT name, engine FROM system.tables "
            "WHERE database = currentDatabase() AND name IN {names:Array(String)}"
        )
        rows = self.backend.query_arrow(sql, {"names": list(SHARDING_KEYS)}).to_pylist()
        return {r["name"]: r["engine"] for r in rows}

    @property
    def alerts(self) -> AlertTables:
        """Alert state, events, the notification outbox and the reads of alert rules (store/alerts.py)."""
        return AlertTables(self.backend)

    def insert_spans(self, batch: pa.Table) -> None:
        self.backend.insert_arrow(SPANS_TABLE, at_stored_resolution(batch))

    def insert_events(self, batch: pa.Table) -> None:
        """GenAI events decoded from OTLP logs (``schema.EVENT_ARROW_SCHEMA``)."""
        self.backend.insert_arrow(EVENTS_TABLE, batch)

    def insert_metric_points(self, batch: pa.Table) -> None:
        """gen_ai.* metric data points decoded from OTLP metrics (``schema.METRIC_POINT_ARROW_SCHEMA``)."""
        self.backend.insert_arrow(METRIC_POINTS_TABLE, batch)

    def trace_events(self, project: str, trace_id: str) -> list[dict[str, Any]]:
        """The GenAI events of one trace, in time order (at most ``signals.MAX_TRACE_EVENTS``)."""
        sql, params = signals.trace_events_sql(project, trace_id)
        return self.backend.query_arrow(sql, params).to_pylist()

    def metric_points(
        self, project: str, start_ns: int, end_ns: int, name: str | None = None, service: str | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """gen_ai.* metric points whose time is in [start_ns, end_ns), oldest first."""
        sql, params = signals.metric_points_sql(project, start_ns, end_ns, name, service, limit)
        return self.backend.query_arrow(sql, params).to_pylist()

    def ping(self) -> None:
        self.backend.query_arrow("SELECT 1 AS ok")

    def percentiles(self, metric: str, group_by: Sequence[str], where: SpanFilter) -> list[PercentileRow]:
        sql, params = queries.percentiles_sql(metric, group_by, where)
        rows = self.backend.query_arrow(sql, params).to_pylist()
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

    def traces(self, where: SpanFilter, sort: str = "recent", limit: int = 50) -> list[dict[str, Any]]:
        sql, params = queries.traces_sql(where, sort, limit)
        return self.backend.query_arrow(sql, params).to_pylist()

    def trace_spans(self, project: str, trace_id: str) -> list[dict[str, Any]]:
        sql, params = queries.trace_sql(project, trace_id, DERIVED_NAMES)
        return self.backend.query_arrow(sql, params).to_pylist()

    # --- per-trace analysis and rollups ---------------------------------------------
    def analysis_input(self, project: str, trace_ids: Sequence[str]) -> pa.Table:
        """The spans of these traces, one row each, columns named after the analysis's SpanRecord fields."""
        sql, params = analysis.analysis_input_sql(project, trace_ids)
        return self.backend.query_arrow(sql, params)

    def write_traces(self, rows: pa.Table) -> None:
        self.backend.insert_arrow("agentlat_traces", rows)

    def unanalysed_traces(self, since_seconds: int) -> list[tuple[str, str]]:
        sql, params = analysis.unanalysed_sql(since_seconds)
        return [(r["project"], r["trace_id"]) for r in self.backend.query_arrow(sql, params).to_pylist()]

    def rollup(self, minutes: Sequence[int], version: int) -> None:
        """Recompute the rollups of these minutes (unix seconds) from the raw tables, then their hours and days."""
        if minutes:
            for sql, params in (*analysis.rollup_sql(minutes, version), *analysis.coarser_rollup_sql(minutes)):
                self.backend.execute(sql, params)

    def trace_analysis(self, project: str, trace_id: str) -> dict[str, Any] | None:
        sql, params = queries.trace_analysis_sql(project, trace_id)
        rows = self.backend.query_arrow(sql, params).to_pylist()
        return rows[0] if rows else None

    def rollup_percentiles(
        self, metrics: Sequence[str], group_by: Sequence[str], where: SpanFilter
    ) -> list[dict[str, Any]]:
        sql, params = queries.rollup_percentiles_sql(metrics, group_by, where)
        return self.backend.query_arrow(sql, params).to_pylist()

    def rollup_groups(self, group_by: Sequence[str], where: SpanFilter) -> list[dict[str, Any]]:
        """Each group (of rollup dimensions) that served requests in the window, with its request count."""
        sql, params = queries.rollup_groups_sql(group_by, where)
        return self.backend.query_arrow(sql, params).to_pylist()

    def timeseries(
        self, metric: str, group_by: Sequence[str], where: SpanFilter, step_seconds: int
    ) -> list[dict[str, Any]]:
        sql, params = queries.timeseries_sql(metric, group_by, where, step_seconds)
        return self.backend.query_arrow(sql, params).to_pylist()

    def dimension_summary(self, dimension: str, where: SpanFilter, from_rollups: bool) -> list[dict[str, Any]]:
        """Per value of route, agent, model or tool: counts, errors, rates and percentiles, exact from
        the spans, or from the rollups (percentiles exact up to EXACT_MAX values, t-digest beyond; cost grows
        with minutes, not spans)."""
        if from_rollups:
            # All rows: a row limit could drop some metrics of a value the summary lists.
            metrics = queries.dimension_rollup_metrics(dimension)
            sql, params = queries.rollup_percentiles_sql(metrics, [dimension], where, limit=None)
            rows = self.backend.query_arrow(sql, params).to_pylist()
            return queries.dimension_summary_from_rollups(dimension, rows)
        sql, params = queries.dimensions_sql(dimension, where)
        return self.backend.query_arrow(sql, params).to_pylist()

    def advice_evidence(self, where: SpanFilter, from_rollups: bool = False) -> advice.Evidence:
        """Per route: the aggregates the advisor reads, under keys calls, prefix, server, trace; exact
        from the spans and traces, or from the rollups. The queries run concurrently."""
        if from_rollups:
            builds = {
                "totals": advice.rollup_totals_sql,
                "medians": advice.rollup_medians_sql,
                "prefix": advice.rollup_prefix_misses_sql,
                "server": advice.server_phases_sql,
            }
        else:
            builds = {
                "calls": advice.model_calls_sql,
                "prefix": advice.prefix_misses_sql,
                "server": advice.server_phases_sql,
                "trace": advice.traces_sql,
            }
        with ThreadPoolExecutor(len(builds), thread_name_prefix="agentlat-advice") as pool:
            found = {key: pool.submit(self.backend.query_arrow, *build(where)) for key, build in builds.items()}
            rows = {key: future.result().to_pylist() for key, future in found.items()}
        evidence = advice.evidence_from_rollups(rows.pop("totals"), rows.pop("medians")) if from_rollups else {}
        for key, key_rows in rows.items():
            for row in key_rows:
                evidence.setdefault(row["route"], {})[key] = row
        return evidence

    # --- API keys -------------------------------------------------------------------
    def save_key(self, key: ApiKeyRecord) -> None:
        """Insert a key, or a newer version of it (revocation)."""
        table = pa.Table.from_pylist([key.row()], schema=KEY_ROW_SCHEMA)
        self.backend.insert_arrow("agentlat_api_keys", table)

    def api_keys(self) -> list[ApiKeyRecord]:
        rows = self.backend.query_arrow(
            "SELECT KeyId, ProjectId, Name, Admin, SecretHash, toUnixTimestamp64Milli(CreatedAt) AS CreatedMs, "
            "Revoked, Version FROM agentlat_api_keys FINAL ORDER BY CreatedAt"
        ).to_pylist()
        return [ApiKeyRecord.from_row(row) for row in rows]

    def spans_retention_days(self) -> int | None:
        """The days the spans table keeps a span, from its TTL (``toDate(Timestamp) + N days``: what
        AGENTLAT_TTL_DAYS was when the table was created, or what an ALTER ... MODIFY TTL set since);
        None when it has no TTL of that form."""
        sql = (
            "SELECT create_table_query AS ddl FROM system.tables "
            "WHERE database = currentDatabase() AND name IN ('otel_traces', 'otel_traces_local')"
        )
        for row in self.backend.query_arrow(sql).to_pylist():
            if found := _SPANS_TTL.search(row["ddl"]):
                return int(found[1])
        return None

    def count_spans(self, project: str | None = None) -> int:
        if project is None:
            table = self.backend.query_arrow(f"SELECT count() AS n FROM {SPANS_TABLE} FINAL")
        else:
            table = self.backend.query_arrow(
                f"SELECT count() AS n FROM {SPANS_TABLE} FINAL WHERE ProjectId = {{p:String}}",
                {"p": project},
            )
        return int(table.column("n")[0].as_py())

    def close(self) -> None:
        self.backend.close()


def open_store(
    data_dir: Path | None = None,
    clickhouse_url: str | None = None,
    ttl_days: int = DEFAULT_TTL_DAYS,
) -> Store:
    """Open (and migrate) the store: a ClickHouse server when a URL is given, else chDB."""
    backend: Backend
    if clickhouse_url:
        backend = ClickHouseBackend(clickhouse_url)
    else:
        backend = ChdbBackend(data_dir or Path(".agentlat/data"))
    store = Store(backend, ttl_days=ttl_days)
    store.migrate()
    return store
