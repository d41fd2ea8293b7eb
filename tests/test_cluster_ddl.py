"""Cluster mode: the ON CLUSTER statements generated from the single-node migrations.

No ClickHouse cluster runs where these tests do, so they check three things:
- the generated text (engines, ON CLUSTER, Keeper paths, Distributed sharding keys, views
  on the ``_local`` tables, TTLs, ledger rows), and that ClickHouse's parser accepts every
  statement (``formatQuery`` in chDB);
- the ``_local`` tables and views, executed in chDB in a database of their own with
  ``ON CLUSTER`` dropped and the Replicated engines swapped back, have exactly the
  single-node schema; a Buffer table passing straight through to each ``_local`` table
  stands in for its Distributed table (one shard), and spans written through them are
  analysed, rolled up and read back by the store's own queries;
- the migrator's guards (no single-node migration on a cluster, no cluster migration over
  single-node tables), with a backend double that records statements.
What needs a real cluster (rows spread over shards, distributed_product_mode) rests on
the sharding keys checked here: a trace's spans, trace row and time-index row share a shard.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from agentlat.collector.analysis.assembler import TraceAssembler
from agentlat.collector.ingest.otlp import Limits, parse_protobuf, to_batch
from agentlat.store import SpanFilter, Store, StoreError, cluster_ddl
from agentlat.store.cluster_ddl import SHARDING_KEYS, cluster_statements
from agentlat.store.migrations import DEFAULT_TTL_DAYS, MIGRATIONS, Migration
from tests.otlp_payloads import MS, SpanSpec, otlp_protobuf
from tests.servers import AGENTLAT

DB = "cluster_check"
STATEMENTS = cluster_statements("prod", 30, "agentlat")
PATH = "'/clickhouse/tables/{shard}/agentlat/%s', '{replica}'"
EXPECTED_ENGINES = {
    "otel_traces": f"ReplicatedReplacingMergeTree({PATH % 'otel_traces'})",
    "otel_traces_trace_id_ts": f"ReplicatedAggregatingMergeTree({PATH % 'otel_traces_trace_id_ts'})",
    "agentlat_traces": f"ReplicatedReplacingMergeTree({PATH % 'agentlat_traces'}, AnalysedAt)",
    "agentlat_rollup_1m": f"ReplicatedReplacingMergeTree({PATH % 'agentlat_rollup_1m'}, Version)",
    "agentlat_rollup_1h": f"ReplicatedReplacingMergeTree({PATH % 'agentlat_rollup_1h'}, Version)",
    "agentlat_api_keys": f"ReplicatedReplacingMergeTree({PATH % 'agentlat_api_keys'}, Version)",
    "agentlat_migrations": f"ReplicatedReplacingMergeTree({PATH % 'agentlat_migrations'})",
    "agentlat_events": f"ReplicatedReplacingMergeTree({PATH % 'agentlat_events'})",
    "agentlat_metric_points": f"ReplicatedReplacingMergeTree({PATH % 'agentlat_metric_points'})",
    "agentlat_versions": f"ReplicatedAggregatingMergeTree({PATH % 'agentlat_versions'})",
}
TRACE_TABLES = ("otel_traces", "otel_traces_trace_id_ts", "agentlat_traces", "agentlat_events")
LEDGER = "INSERT INTO `agentlat`.agentlat_migrations (Version, Name)"  # a migration's ledger row


def statement(prefix: str) -> str:
    """The one generated statement starting with ``prefix``."""
    found = [s for s in STATEMENTS if s.startswith(prefix)]
    assert len(found) == 1, (prefix, found)
    return found[0]


# --- the generated text ---------------------------------------------------------------
@pytest.mark.parametrize("table", sorted(EXPECTED_ENGINES))
def test_each_table_is_replicated_on_every_node(table: str) -> None:
    local = statement(f"CREATE TABLE IF NOT EXISTS `agentlat`.{table}_local ON CLUSTER 'prod' (")
    assert f"\nENGINE = {EXPECTED_ENGINES[table]}\n" in local + "\n"


@pytest.mark.parametrize("table", sorted(EXPECTED_ENGINES))
def test_each_table_has_a_distributed_table_of_its_own_name(table: str) -> None:
    distributed = statement(f"CREATE TABLE IF NOT EXISTS `agentlat`.{table} ON CLUSTER 'prod' AS ")
    assert distributed == (
        f"CREATE TABLE IF NOT EXISTS `agentlat`.{table} ON CLUSTER 'prod' AS `agentlat`.{table}_local\n"
        f"ENGINE = Distributed('prod', 'agentlat', '{table}_local', {SHARDING_KEYS[table]})"
    )


@pytest.mark.parametrize("table", TRACE_TABLES)
def test_a_trace_lives_on_one_shard(table: str) -> None:
    assert SHARDING_KEYS[table] == "cityHash64(TraceId)"


@pytest.mark.parametrize("table", sorted(SHARDING_KEYS))
def test_rows_that_replace_each_other_share_a_shard(table: str) -> None:
    """ReplacingMergeTree and AggregatingMergeTree collapse rows of equal sorting key within a
    shard only, so the sharding key may use sorting-key columns and nothing else."""
    local = statement(f"CREATE TABLE IF NOT EXISTS `agentlat`.{table}_local ")
    order_by = re.search(r"\nORDER BY (.*)\n?", local)[1]
    sorting_columns = set(re.findall(r"[A-Z]\w*", order_by))
    key_columns = set(re.findall(r"\b[A-Z]\w*\b", SHARDING_KEYS[table])) - {"cityHash64"}
    assert key_columns and key_columns <= sorting_columns


def test_the_view_reads_and_writes_local_tables() -> None:
    view = statement("CREATE MATERIALIZED VIEW IF NOT EXISTS `agentlat`.otel_traces_trace_id_ts_mv ON CLUSTER 'prod'")
    assert "\nTO `agentlat`.otel_traces_trace_id_ts_local AS\n" in view
    assert "FROM `agentlat`.otel_traces_local\n" in view
    assert re.findall(r"(?:FROM|JOIN|TO) (\S+)", view) == [
        "`agentlat`.otel_traces_trace_id_ts_local",
        "`agentlat`.otel_traces_local",
    ]


def test_the_versions_view_reads_and_writes_local_tables() -> None:
    view = statement("CREATE MATERIALIZED VIEW IF NOT EXISTS `agentlat`.agentlat_versions_mv ON CLUSTER 'prod'")
    assert "ARRAY JOIN [('release', ResourceAttributes['service.version'])" in view  # not a table
    assert re.findall(r"(?:FROM|(?<!ARRAY )JOIN|TO) (\S+)", view) == [
        "`agentlat`.agentlat_versions_local",
        "`agentlat`.otel_traces_local",
    ]


def test_column_changes_reach_local_and_distributed_tables() -> None:
    added = [s for s in STATEMENTS if "ADD COLUMN IF NOT EXISTS IngestedAt" in s]
    assert [s.split(" ADD COLUMN")[0] for s in added] == [
        "ALTER TABLE `agentlat`.otel_traces_local ON CLUSTER 'prod'",
        "ALTER TABLE `agentlat`.otel_traces ON CLUSTER 'prod'",
    ]


def test_rollup_version_columns_extend_the_local_sorting_keys_only() -> None:
    """Migration 24 adds them, and 5, 7, 8, 10, 11 and 22, whose rollup SQL groups by them, first where missing:
    the local tables' sorting key grows in the same ALTER; a Distributed table takes the columns alone."""
    added = [s for s in STATEMENTS if "ADD COLUMN IF NOT EXISTS Release LowCardinality(String) CODEC" in s]
    local = [s for s in added if "_local ON CLUSTER" in s]
    assert len(local) == len(added) / 2 == 2 + 2 + 2 + 1 + 3 + 3 + 3
    assert all(s.endswith(", Model, Tool, Release, PromptVersion)") and "MODIFY ORDER BY" in s for s in local)
    assert all("MODIFY ORDER BY" not in s and s.endswith("AFTER Release") for s in added if s not in local)


def test_trace_dispatch_columns_reach_local_and_distributed_tables() -> None:
    """Migration 13 adds them; 7, 8 and 11, whose rollup SQL reads them, add them first where missing."""
    added = [s for s in STATEMENTS if "ADD COLUMN IF NOT EXISTS DispatchSavingMs Float64" in s]
    assert [s.split(" ADD COLUMN")[0] for s in added] == [
        "ALTER TABLE `agentlat`.agentlat_traces_local ON CLUSTER 'prod'",
        "ALTER TABLE `agentlat`.agentlat_traces ON CLUSTER 'prod'",
    ] * 4
    assert all("DispatchDelaysMs Array(Float64)" in s and "DispatchStreamedCalls UInt32" in s for s in added)


def test_backfills_run_once_through_the_distributed_tables() -> None:
    into_ledger = "INSERT INTO `agentlat`.agentlat_migrations "  # ledger rows and migration 9's mark
    backfills = [s for s in STATEMENTS if s.startswith("INSERT INTO") and not s.startswith(into_ledger)]
    into = r"INSERT INTO (\S+)(?: \([^)]*\))? SETTINGS distributed_foreground_insert = 1\n"  # the columns named or not
    assert [re.match(into, s)[1] for s in backfills] == [
        "`agentlat`.agentlat_rollup_1h",  # migration 5
        "`agentlat`.agentlat_rollup_1m",  # migration 7: minutes, then their hours
        "`agentlat`.agentlat_rollup_1h",
        "`agentlat`.agentlat_prefix_1m",  # migration 8: prefix counts, minutes, hours
        "`agentlat`.agentlat_rollup_1m",
        "`agentlat`.agentlat_rollup_1h",
        "`agentlat`.otel_traces_v9",  # migration 9: the copy, then what arrived during it
        "`agentlat`.otel_traces",
        "`agentlat`.agentlat_rollup_1d",  # migration 10: days from hours
        "`agentlat`.agentlat_rollup_1m",  # migration 11: minutes, hours, days with exact values
        "`agentlat`.agentlat_rollup_1h",
        "`agentlat`.agentlat_rollup_1d",
        "`agentlat`.agentlat_rollup_1m",  # migration 22: minutes, hours, days with the prompt cache's metrics
        "`agentlat`.agentlat_rollup_1h",
        "`agentlat`.agentlat_rollup_1d",
        "`agentlat`.agentlat_versions",  # migration 23: first and last seen of the spans stored before its view
        "`agentlat`.agentlat_traces",  # migration 24: each analysed trace's release, then minutes, hours, days
        "`agentlat`.agentlat_rollup_1m",
        "`agentlat`.agentlat_rollup_1h",
        "`agentlat`.agentlat_rollup_1d",
    ]
    # ARRAY JOINs are left alone; the newest analyses of the traces found; the groups the minutes held
    traces = ["`agentlat`.agentlat_traces", "`agentlat`.agentlat_traces"]
    minutes = ["`agentlat`.otel_traces", "arrayFilter", *traces, "arrayFilter", "`agentlat`.agentlat_rollup_1m"]
    hours = ["`agentlat`.agentlat_rollup_1m"]
    # each per-span metric leaves out the spans an analysis found seen again: a co-sharded subquery
    seen_again = "(SELECT ProjectId, TraceId, arrayJoin(SeenAgainSpanIds) FROM `agentlat`.agentlat_traces WHERE"
    assert all(seen_again in s for s in backfills if "otel_traces FINAL" in s)
    backfills = [re.sub(re.escape(seen_again) + r"[^)]*\)", "", s) for s in backfills]
    assert [re.findall(r"(?:FROM|JOIN) ([`\w.]+)", s) for s in backfills] == [
        hours,
        minutes,
        hours,
        ["`agentlat`.otel_traces"],  # migration 8: prefix counts, minutes, hours
        minutes,
        hours,
        ["`agentlat`.otel_traces"],  # migration 9: the copy, then what arrived during it
        ["`agentlat`.otel_traces_v9", "`agentlat`.agentlat_migrations", "`agentlat`.otel_traces",
         "`agentlat`.agentlat_migrations"],
        ["`agentlat`.agentlat_rollup_1h"],
        minutes,  # migration 11
        hours,
        ["`agentlat`.agentlat_rollup_1h"],
        minutes,  # migration 22
        hours,
        ["`agentlat`.agentlat_rollup_1h"],
        ["`agentlat`.otel_traces"],  # migration 23: versions (its ARRAY JOIN is no table)
        ["`agentlat`.agentlat_traces", "`agentlat`.otel_traces"],  # migration 24: releases of analysed traces
        minutes,
        hours,
        ["`agentlat`.agentlat_rollup_1h"],
    ]  # fmt: skip
    assert not any("ON CLUSTER" in s for s in backfills)


def test_retention_is_filled_in() -> None:
    ttls = [re.search(r"\nTTL (.*)", s)[1] for s in STATEMENTS if "\nTTL " in s]
    assert len(ttls) == 13 and all(ttl.endswith("+ INTERVAL 30 DAY") for ttl in ttls)
    assert not any("{ttl_days}" in s for s in STATEMENTS)


def test_every_statement_runs_on_the_cluster_with_qualified_names() -> None:
    for s in STATEMENTS:
        if not s.startswith("INSERT"):
            assert " ON CLUSTER 'prod'" in s
        keywords = r"TABLE IF NOT EXISTS|VIEW IF NOT EXISTS|ALTER TABLE|INSERT INTO|AS(?= `)|TO|FROM"
        keywords += r"|TABLE IF EXISTS|TABLES|(?<=_local) AND"  # migration 9's DROP and EXCHANGE
        names = re.findall(rf"(?:{keywords}) (\S+)", s)
        assert names and all(n.startswith("`agentlat`.") for n in names if n[0] == "`" or n[0].islower()), s


def test_each_migration_is_recorded_after_its_statements() -> None:
    inserts = [i for i, s in enumerate(STATEMENTS) if s.startswith(LEDGER)]
    assert len(inserts) == len(MIGRATIONS) and inserts[-1] == len(STATEMENTS) - 1
    assert STATEMENTS[inserts[0]] == (
        "INSERT INTO `agentlat`.agentlat_migrations (Version, Name) SETTINGS distributed_foreground_insert = 1 "
        "VALUES (1, 'spans table and trace time index')"
    )


def test_applied_migrations_are_left_out() -> None:
    pending = cluster_statements("prod", 30, "agentlat", applied={m.version for m in MIGRATIONS[:-1]})
    assert pending[:2] == STATEMENTS[:2]  # the ledger's tables, always
    assert [s for s in pending[2:] if s.startswith(LEDGER)] == [STATEMENTS[-1]]
    assert not any(s.startswith("CREATE TABLE IF NOT EXISTS `agentlat`.otel_traces ") for s in pending)
    assert not any(s.startswith("CREATE TABLE IF NOT EXISTS `agentlat`.otel_traces_local ") for s in pending)


def test_the_cluster_macro_is_accepted() -> None:
    assert " ON CLUSTER '{cluster}' " in cluster_statements("{cluster}", 30, "agentlat")[0]


@pytest.mark.parametrize(
    ("cluster", "database", "message"),
    [
        ("prod cluster", "agentlat", "cluster name 'prod cluster'"),
        ("prod'; DROP TABLE x; --", "agentlat", "cluster name"),
        ("prod", "agent`lat", "database name 'agent`lat'"),
        ("prod", "", "database name ''"),
    ],
)
def test_names_that_are_not_identifiers_are_refused(cluster: str, database: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        cluster_statements(cluster, 30, database)


@pytest.mark.parametrize(
    ("new_statement", "message"),
    [
        ("CREATE TABLE IF NOT EXISTS new_table (a UInt8) ENGINE = MergeTree ORDER BY a", "new_table has no entry"),
        ("CREATE VIEW IF NOT EXISTS v AS SELECT 1", "does not know how to distribute"),
        ("ALTER TABLE unknown_table ADD COLUMN x UInt8", "unknown_table has no entry"),
    ],
)
def test_a_migration_cluster_mode_cannot_place_is_refused(
    monkeypatch: pytest.MonkeyPatch, new_statement: str, message: str
) -> None:
    monkeypatch.setattr(cluster_ddl, "MIGRATIONS", (*MIGRATIONS, Migration(99, "new", (new_statement,))))
    with pytest.raises(ValueError, match=message):
        cluster_statements("prod", 30, "agentlat")


def test_clickhouse_parses_every_statement(embedded_store: Store) -> None:
    for s in STATEMENTS:  # the backend passes string parameters to chDB in its escaped text form
        parsed = embedded_store.backend.query_arrow("SELECT formatQuery({q:String}) AS f", {"q": s})
        assert parsed.column("f")[0].as_py().startswith(s.split(" ", 1)[0])


# --- executed in chDB -----------------------------------------------------------------
_REPLICATED = re.compile(r"Replicated(\w*MergeTree)\('/clickhouse/tables/\{shard\}/\w+/\w+', '\{replica\}'(?:, )?")
_DISTRIBUTED = re.compile(r"ENGINE = Distributed\('prod', '(\w+)', '(\w+)', .*\)$", re.S)


def single_node_form(cluster_statement: str) -> str:
    """What chDB can run: no ON CLUSTER, plain engines, and for each Distributed table a Buffer
    table that passes every insert straight to the ``_local`` table (a one-shard stand-in)."""
    s = _REPLICATED.sub(r"\1(", cluster_statement.replace(" ON CLUSTER 'prod'", ""))
    return _DISTRIBUTED.sub(r"ENGINE = Buffer('\1', '\2', 1, 0, 0, 0, 0, 0, 0)", s)


@pytest.fixture(scope="module")
def cluster_db(embedded_store: Store) -> Iterator[str]:
    """The cluster schema in database cluster_check; yields the session store's own database."""
    backend = embedded_store.backend
    home = backend.query_arrow("SELECT currentDatabase() AS db").column("db")[0].as_py()
    backend.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
    for s in cluster_statements("prod", DEFAULT_TTL_DAYS, DB):
        backend.execute(single_node_form(s))
    yield home
    backend.execute(f"DROP DATABASE IF EXISTS {DB}")


def rows(store: Store, sql: str, **params: Any) -> list[dict[str, Any]]:
    return store.backend.query_arrow(sql, params).to_pylist()


@pytest.mark.parametrize("table", sorted(SHARDING_KEYS))
def test_local_tables_have_the_single_node_schema(embedded_store: Store, cluster_db: str, table: str) -> None:
    columns = "SELECT name, type, default_expression, compression_codec FROM system.columns "
    columns += "WHERE database = {db:String} AND table = {t:String} ORDER BY position"
    single = rows(embedded_store, columns, db=cluster_db, t=table)
    assert single and rows(embedded_store, columns, db=DB, t=f"{table}_local") == single
    engine = "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = {t:String}"
    assert rows(embedded_store, engine, db=DB, t=f"{table}_local") == rows(
        embedded_store, engine, db=cluster_db, t=table
    )
    stand_in = [c["name"] for c in rows(embedded_store, columns, db=DB, t=table)]
    assert stand_in == [c["name"] for c in single]


def test_every_single_node_table_has_a_cluster_form(embedded_store: Store, cluster_db: str) -> None:
    tables = "SELECT name, engine FROM system.tables WHERE database = {db:String} ORDER BY name"
    single = {r["name"]: r["engine"] for r in rows(embedded_store, tables, db=cluster_db)}
    clustered = {r["name"]: r["engine"] for r in rows(embedded_store, tables, db=DB)}
    merge_trees = {name for name, engine in single.items() if engine.endswith("MergeTree")}
    assert merge_trees == set(SHARDING_KEYS)
    for name, engine in single.items():
        if engine.endswith("MergeTree"):
            assert clustered[f"{name}_local"] == engine and clustered[name] == "Buffer"  # Buffer: the stand-in
        else:
            assert clustered[name] == engine, name  # materialized views keep their names


@pytest.mark.parametrize("table", sorted(SHARDING_KEYS))
def test_sharding_keys_are_integers_of_the_tables_columns(embedded_store: Store, cluster_db: str, table: str) -> None:
    described = rows(embedded_store, f"DESCRIBE (SELECT {SHARDING_KEYS[table]} AS k FROM {DB}.{table}_local)")
    assert described[0]["type"] in ("UInt32", "UInt64")


def agent_trace(route: str) -> list[SpanSpec]:
    root = SpanSpec("invoke_agent support", duration_ns=900 * MS, attributes={"agentlat.route": route})
    start = root.start_ns
    model = SpanSpec(
        "chat gpt-4o", trace_id=root.trace_id, parent_span_id=root.span_id, start_ns=start + 50 * MS,
        duration_ns=500 * MS, attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                                          "gen_ai.provider.name": "openai", "gen_ai.response.time_to_first_chunk": 0.2},
    )  # fmt: skip
    tool = SpanSpec(
        "execute_tool search", trace_id=root.trace_id, parent_span_id=root.span_id, start_ns=start + 600 * MS,
        duration_ns=200 * MS, attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"},
    )  # fmt: skip
    for span in (model, tool):
        span.attributes["agentlat.route"] = route
    return [root, model, tool]


def test_spans_are_analysed_and_rolled_up_through_the_distributed_tables(
    embedded_store: Store, cluster_db: str
) -> None:
    spans = agent_trace("/cluster")
    trace_id, project = spans[0].trace_id, "cluster-project"
    batch = to_batch(parse_protobuf(otlp_protobuf(spans)), project, time.time_ns(), Limits()).batch
    store = Store(embedded_store.backend)
    store.backend.execute(f"USE {DB}")
    try:
        store.insert_spans(batch)
        assembler = TraceAssembler(store, grace_seconds=0.0)
        assembler.observe(batch)
        assert assembler.run_due() == 1 and assembler.read_back == 0  # span rows counted through the index
        minute = spans[0].start_ns // 60_000_000_000 * 60
        store.rollup([minute], version=1)

        assert [s["span_id"] for s in store.trace_spans(project, trace_id)] == [s.span_id for s in spans]
        analysis = store.trace_analysis(project, trace_id)
        assert analysis["E2eMs"] == pytest.approx(900.0) and analysis["ModelMs"] == pytest.approx(500.0)
        assert analysis["ToolMs"] == pytest.approx(200.0)
        window = SpanFilter(project, minute * 10**9, (minute + 60) * 10**9)
        rolled = {r["metric"]: r for r in store.rollup_percentiles(["e2e", "model", "tool"], ["route"], window)}
        assert {k: (r["route"], r["count"]) for k, r in rolled.items()} == {
            "e2e": ("/cluster", 1), "model": ("/cluster", 1), "tool": ("/cluster", 1),
        }  # fmt: skip
        assert rolled["e2e"]["q"][0] == pytest.approx(900.0)
        assert store.percentiles("e2e", [], window)[0].p50 == pytest.approx(900.0)
    finally:
        store.backend.execute(f"USE {cluster_db}")
    for table, n in (("otel_traces", 3), ("otel_traces_trace_id_ts", 1), ("agentlat_traces", 1)):
        local = rows(
            store, f"SELECT count() AS n FROM {DB}.{table}_local FINAL WHERE TraceId = {{t:String}}", t=trace_id
        )
        assert local == [{"n": n}], table
    rolled_up = rows(store, f"SELECT Metric FROM {DB}.agentlat_rollup_1m_local FINAL WHERE Route = '/cluster'")
    assert {"e2e", "model", "tool"} <= {r["Metric"] for r in rolled_up}
    assert store.count_spans(project) == 0  # nothing reached the session store's own tables


# --- the migrator's guards --------------------------------------------------------------
class RecordingBackend:
    """Answers the migrator's three questions from fixed values and records every statement."""

    name = "recording"

    def __init__(self, engines: dict[str, str], versions: set[int]) -> None:
        self.engines, self.versions, self.executed = engines, versions, []

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        self.executed.append(sql)

    def query_arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        if "system.tables" in sql:
            return pa.Table.from_pylist([{"name": n, "engine": e} for n, e in self.engines.items()])
        if "agentlat_migrations" in sql:
            return pa.table({"Version": sorted(self.versions)})
        if "currentDatabase()" in sql:
            return pa.table({"db": ["agentlat"]})
        raise AssertionError(sql)

    def insert_arrow(self, table: str, data: pa.Table, settings: object = None) -> None:
        raise AssertionError(table)

    def close(self) -> None:
        pass


DISTRIBUTED = dict.fromkeys(SHARDING_KEYS, "Distributed")


def test_collectors_refuse_pending_migrations_on_a_cluster() -> None:
    backend = RecordingBackend(DISTRIBUTED, {1, 2})
    with pytest.raises(StoreError, match="agentlat migrate --cluster NAME"):
        Store(backend).migrate()
    assert len(backend.executed) == 1  # the ledger's CREATE ... IF NOT EXISTS, a no-op on a cluster


def test_collectors_start_on_an_up_to_date_cluster() -> None:
    backend = RecordingBackend(DISTRIBUTED, {m.version for m in MIGRATIONS})
    assert Store(backend).migrate() == []


def test_cluster_migration_refuses_single_node_tables() -> None:
    backend = RecordingBackend({"otel_traces": "ReplacingMergeTree", "agentlat_migrations": "Distributed"}, {1})
    with pytest.raises(StoreError, match=r"^otel_traces already exist here as single-node tables"):
        Store(backend).migrate_cluster("prod")
    assert backend.executed == []


def test_cluster_migration_applies_what_is_pending() -> None:
    fresh = RecordingBackend({}, set())
    assert Store(fresh, ttl_days=30).migrate_cluster("prod") == [m.version for m in MIGRATIONS]
    assert fresh.executed == STATEMENTS
    upgraded = RecordingBackend(DISTRIBUTED, {1, 2})
    assert Store(upgraded, ttl_days=30).migrate_cluster("prod") == [m.version for m in MIGRATIONS[2:]]
    assert upgraded.executed == cluster_statements("prod", 30, "agentlat", applied={1, 2})


# --- the command line -----------------------------------------------------------------
def agentlat(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTLAT, *args], capture_output=True, text=True, timeout=120, env=env)


def test_migrate_prints_the_cluster_statements_without_connecting() -> None:
    unreachable = {"AGENTLAT_CLICKHOUSE_URL": "http://agentlat:secret@127.0.0.1:9/agentlat", "PATH": ""}
    result = agentlat("migrate", "--cluster", "prod", "--print", env={**unreachable, "AGENTLAT_TTL_DAYS": "30"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == ";\n\n".join(STATEMENTS) + ";\n"


def test_migrate_refuses_a_bad_cluster_name() -> None:
    result = agentlat("migrate", "--cluster", "prod; DROP", "--print")
    assert result.returncode == 2 and "cluster name 'prod; DROP'" in result.stderr


def test_migrate_cluster_needs_a_server(tmp_path) -> None:
    result = agentlat("migrate", "--cluster", "prod", "--data", str(tmp_path / "data"))
    assert result.returncode == 2 and "--cluster needs a ClickHouse server" in result.stderr


def test_migrate_applies_the_single_node_migrations_idempotently(tmp_path) -> None:
    for _ in range(2):
        result = agentlat("migrate", "--data", str(tmp_path / "data"))
        assert result.returncode == 0, result.stderr
        assert f"Schema up to date (migration {MIGRATIONS[-1].version})" in result.stderr
