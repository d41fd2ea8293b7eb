"""agentlat.store: the schema, its migrations, the two ClickHouse backends and every query.

Public surface: ``open_store()``, the ``Store`` it returns, and the names in ``__all__`` (the
vocabulary of the query API, the Arrow schemas of what ingest writes, the migrations the CLI
prints). Other rooms import from here, never from a submodule. Nothing here imports the
collector, alerts or dashboard; they call in.

``Store`` is put together from parts, one module each: ``admin`` (migrations, settings,
retention), ``writes`` (ingest inserts), ``reads`` (traces, spans, events, points),
``aggregates`` (percentiles, summaries, advice), ``keys`` (API keys), ``maintenance``
(trace analysis and rollups) and ``alerts`` (alerting's tables).
"""

from __future__ import annotations

from pathlib import Path

from agentlat.store.admin import SchemaAdmin
from agentlat.store.aggregates import LATENCY_EDGES_MS, AggregateReads, HeatmapColumn, PercentileRow
from agentlat.store.alerts import AlertTables
from agentlat.store.analysis import TRACE_ROW_SCHEMA, analysis_input_of
from agentlat.store.backends import (
    Backend,
    ChdbBackend,
    ClickHouseBackend,
    StoreError,
    StoreInUse,
    StoreUnavailable,
    from_arrow_stream,
    to_arrow_stream,
)
from agentlat.store.cluster_ddl import CLUSTER_SETTINGS, cluster_statements
from agentlat.store.compare import DIMENSIONS as COMPARE_DIMENSIONS
from agentlat.store.compare import VERSION_DIMENSIONS, Sides, rollup_at
from agentlat.store.keys import ApiKeyRecord, KeyAdmin
from agentlat.store.maintenance import RollupMaintenance
from agentlat.store.migrations import DEFAULT_TTL_DAYS, LEDGER_DDL, MIGRATIONS, with_ttl
from agentlat.store.otlp_parse import ParsedRequests
from agentlat.store.queries import (
    DIMENSION_METRICS,
    DIMENSIONS,
    METRICS,
    ROLLUP_DIMENSIONS,
    SAMPLES_CAP,
    TRACE_DIMENSIONS,
    SpanFilter,
)
from agentlat.store.reads import TraceReads
from agentlat.store.rollup_sql import ROLLUP_METRICS
from agentlat.store.schema import (
    DERIVED_DEFAULTS,
    DERIVED_NAMES,
    EVENT_ARROW_SCHEMA,
    EVENTS_TABLE,
    METRIC_POINT_ARROW_SCHEMA,
    METRIC_POINTS_TABLE,
    SPAN_ARROW_SCHEMA,
    SPANS_TABLE,
    table_of,
)
from agentlat.store.writes import Writes

__all__ = [
    "CLUSTER_SETTINGS",
    "COMPARE_DIMENSIONS",
    "DEFAULT_TTL_DAYS",
    "DERIVED_DEFAULTS",
    "DERIVED_NAMES",
    "DIMENSIONS",
    "DIMENSION_METRICS",
    "EVENTS_TABLE",
    "EVENT_ARROW_SCHEMA",
    "LATENCY_EDGES_MS",
    "LEDGER_DDL",
    "METRICS",
    "METRIC_POINTS_TABLE",
    "METRIC_POINT_ARROW_SCHEMA",
    "MIGRATIONS",
    "ROLLUP_DIMENSIONS",
    "ROLLUP_METRICS",
    "SAMPLES_CAP",
    "SPANS_TABLE",
    "SPAN_ARROW_SCHEMA",
    "TRACE_DIMENSIONS",
    "TRACE_ROW_SCHEMA",
    "VERSION_DIMENSIONS",
    "AlertTables",
    "ApiKeyRecord",
    "ClickHouseBackend",
    "HeatmapColumn",
    "ParsedRequests",
    "PercentileRow",
    "Sides",
    "SpanFilter",
    "Store",
    "StoreError",
    "StoreInUse",
    "StoreUnavailable",
    "analysis_input_of",
    "cluster_statements",
    "from_arrow_stream",
    "open_store",
    "rollup_at",
    "table_of",
    "to_arrow_stream",
    "with_ttl",
]


class Store(SchemaAdmin, Writes, TraceReads, AggregateReads, KeyAdmin, RollupMaintenance):
    """The spans store on one backend. Thread-safe: backends serialise what must be.
    Each base class is one part of it, on the same backend (see the module docstring)."""

    def __init__(self, backend: Backend, ttl_days: int = DEFAULT_TTL_DAYS) -> None:
        self.backend = backend
        self.ttl_days = ttl_days

    @property
    def alerts(self) -> AlertTables:
        """Alert state, events, the notification outbox and the reads of alert rules (store/alerts.py)."""
        return AlertTables(self.backend)


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
