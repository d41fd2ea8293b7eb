"""Cluster mode: the single-node migrations rewritten for a ClickHouse cluster.

``agentlat migrate --cluster NAME`` runs the migrations of ``migrations.py`` in a second form
generated from them, so the schema keeps one source: each MergeTree-family table T becomes
``T_local`` (Replicated...MergeTree on every node) behind a Distributed table named T, and
every query of the store runs unchanged against the Distributed tables. Owns the sharding
keys, the settings cluster mode needs and the rewrite; pure, nothing here runs a statement.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from agentlat.store.migrations import DEFAULT_TTL_DAYS, LEDGER_DDL, MIGRATIONS, SPANS_REBUILD_TABLE, with_ttl

SHARDING_KEYS: dict[str, str] = {
    # One trace lives on one shard: FINAL deduplicates within a shard only, the trace-time
    # view runs on the node that stores the spans, and joins of spans with per-trace rows
    # stay on their shard (distributed_product_mode = 'local').
    "otel_traces": "cityHash64(TraceId)",
    "otel_traces_trace_id_ts": "cityHash64(TraceId)",
    "agentlat_traces": "cityHash64(TraceId)",
    # A recomputed rollup row must land on the shard of the row it replaces, so the key is a
    # function of the sorting key: all of it but the release and prompt version (migration 24 appended them to
    # the sorting key; a part of it does as well), which spreads one minute over every shard.
    "agentlat_rollup_1m": "cityHash64(ProjectId, Metric, Minute, ServiceName, Route, Agent, Model, Tool)",
    "agentlat_rollup_1h": "cityHash64(ProjectId, Metric, Hour, ServiceName, Route, Agent, Model, Tool)",
    "agentlat_rollup_1d": "cityHash64(ProjectId, Metric, Day, ServiceName, Route, Agent, Model, Tool)",
    "agentlat_prefix_1m": "cityHash64(ProjectId, Minute, ServiceName, Route, Model, PrefixHash)",
    # Each shard's view keeps its own spans' first and last times; reads take min and max over the shards.
    "agentlat_versions": "cityHash64(ProjectId, Dimension, ServiceName, Route, Value)",
    # A trace's events sit on the shard of its spans (a duplicate has the same trace id).
    "agentlat_events": "cityHash64(TraceId)",
    "agentlat_metric_points": "cityHash64(PointId)",
    "agentlat_api_keys": "cityHash64(KeyId)",
    "agentlat_migrations": "Version",
    "agentlat_alert_state": "cityHash64(ProjectId, Kind, Key)",
    "agentlat_alert_events": "cityHash64(ProjectId, Fingerprint)",
    "agentlat_alert_outbox": "cityHash64(ProjectId, Id)",
}

# Settings of agentlat's ClickHouse user that cluster mode relies on (docs/operations.md).
CLUSTER_SETTINGS: dict[str, str] = {
    "distributed_product_mode": "local",  # co-sharded JOIN/IN subqueries read each shard's own rows
    "distributed_foreground_insert": "1",  # an insert returns once every shard holds its rows
}

# Tables a migration creates for a while (a rebuild's copy) -> the table whose sharding key they take.
TRANSIENT_TABLES: dict[str, str] = {SPANS_REBUILD_TABLE: "otel_traces"}

_IDENTIFIER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$")
_CREATE_TABLE = re.compile(
    r"^\s*CREATE TABLE IF NOT EXISTS (?P<name>\w+) (?P<body>\(.*\))\s*"
    r"ENGINE = (?P<engine>\w*MergeTree)(?:\((?P<args>[^)]*)\))?(?P<rest>.*?)\s*$",
    re.S,
)
_CREATE_VIEW = re.compile(
    r"^\s*CREATE MATERIALIZED VIEW IF NOT EXISTS (?P<name>\w+)\s+TO (?P<target>\w+) AS\b(?P<select>.*?)\s*$", re.S
)
_MODIFY_QUERY = re.compile(r"^\s*ALTER TABLE (?P<name>\w+) MODIFY QUERY\b(?P<select>.*?)\s*$", re.S)
_ALTER = re.compile(r"^\s*ALTER TABLE (?P<name>\w+) (?P<commands>.*?)\s*$", re.S)
_INSERT_SELECT = re.compile(
    r"^\s*INSERT INTO (?P<name>\w+)\s*(?P<columns>\([^)]*\))?\s+(?P<select>SELECT\b.*?)\s*$", re.S
)
_EXCHANGE = re.compile(r"^\s*EXCHANGE TABLES (?P<first>\w+) AND (?P<second>\w+)\s*$")
_DROP = re.compile(r"^\s*DROP TABLE IF EXISTS (?P<name>\w+)\s*$")
_COLUMN_COMMAND = re.compile(r"^(ADD|DROP|MODIFY|RENAME|COMMENT|CLEAR) COLUMN\b")
_SORTING_KEY_COMMAND = re.compile(r",\s*MODIFY ORDER BY \([^)]*\)")  # a key the columns' ALTER extends
_TABLE_REFERENCE = re.compile(r"\b(FROM|(?<!ARRAY )JOIN)\s+(\w+)\b")


def cluster_statements(
    cluster: str, ttl_days: int = DEFAULT_TTL_DAYS, database: str = "default", applied: Collection[int] = ()
) -> list[str]:
    """The ledger and every migration not in ``applied``, rewritten for a ClickHouse cluster.

    Pure: nothing runs. ``cluster`` is a name from the servers' ``remote_servers`` (or the
    ``{cluster}`` macro). Table names are qualified with ``database``, since ON CLUSTER
    statements run on other nodes whose current database may differ. Each migration ends
    with its ledger row, inserted in the foreground so collectors see it at once. Raises
    ValueError for a name that is not a plain identifier, and for a statement or table this
    function does not know how to distribute (extend it, and SHARDING_KEYS, with the schema).
    """
    if cluster != "{cluster}":
        _check_identifier(cluster, "cluster")
    target = _ClusterTarget(cluster, _check_identifier(database, "database"))
    statements = target.rewrite(LEDGER_DDL)
    for migration in MIGRATIONS:
        if migration.version in applied:
            continue
        for statement in migration.statements:
            statements += target.rewrite(with_ttl(statement, ttl_days))
        statements.append(
            f"INSERT INTO {target.qualified('agentlat_migrations')} (Version, Name) "
            f"SETTINGS distributed_foreground_insert = 1 VALUES ({migration.version}, {_literal(migration.name)})"
        )
    return statements


@dataclass(frozen=True, slots=True)
class _ClusterTarget:
    cluster: str
    database: str

    @property
    def on_cluster(self) -> str:
        return f"ON CLUSTER {_literal(self.cluster)}"

    def qualified(self, name: str) -> str:
        return f"`{self.database}`.{name}"

    def local(self, name: str) -> str:
        _sharding_key(name)
        return self.qualified(f"{name}_local")

    def rewrite(self, statement: str) -> list[str]:
        """The cluster form of one single-node statement."""
        if table := _CREATE_TABLE.match(statement):
            return self._table(**table.groupdict())
        if view := _CREATE_VIEW.match(statement):
            select = _TABLE_REFERENCE.sub(lambda ref: f"{ref[1]} {self.local(ref[2])}", view["select"])
            return [
                f"CREATE MATERIALIZED VIEW IF NOT EXISTS {self.qualified(view['name'])} {self.on_cluster}\n"
                f"TO {self.local(view['target'])} AS{select}"
            ]
        if modify := _MODIFY_QUERY.match(statement):  # a materialized view's query: it reads the local tables
            select = _TABLE_REFERENCE.sub(lambda ref: f"{ref[1]} {self.local(ref[2])}", modify["select"])
            return [f"ALTER TABLE {self.qualified(modify['name'])} {self.on_cluster} MODIFY QUERY{select}"]
        if alter := _ALTER.match(statement):
            name, commands = alter["name"], alter["commands"]
            local = f"ALTER TABLE {self.local(name)} {self.on_cluster} {commands}"
            if _COLUMN_COMMAND.match(commands):  # the Distributed table mirrors the columns, nothing else
                columns = _SORTING_KEY_COMMAND.sub("", commands)
                return [local, f"ALTER TABLE {self.qualified(name)} {self.on_cluster} {columns}"]
            return [local]
        if insert := _INSERT_SELECT.match(statement):  # a backfill: runs once, through the Distributed tables
            select = _TABLE_REFERENCE.sub(lambda ref: f"{ref[1]} {self.qualified(ref[2])}", insert["select"])
            columns = f" {insert['columns']}" if insert["columns"] else ""
            return [
                f"INSERT INTO {self.qualified(insert['name'])}{columns} SETTINGS distributed_foreground_insert = 1\n"
                f"{select}"
            ]
        # A rebuild (migration 9): the copy goes through the Distributed tables (same sharding key, so
        # every row stays on its shard), then each node swaps its local tables and drops the old one
        # (SYNC: its Keeper path is free at once, for a run again after an interruption).
        if exchange := _EXCHANGE.match(statement):
            first, second = self.local(exchange["first"]), self.local(exchange["second"])
            return [f"EXCHANGE TABLES {first} AND {second} {self.on_cluster}"]
        if drop := _DROP.match(statement):
            name = drop["name"]
            return [
                f"DROP TABLE IF EXISTS {self.qualified(name)} {self.on_cluster} SYNC",
                f"DROP TABLE IF EXISTS {self.local(name)} {self.on_cluster} SYNC",
            ]
        raise ValueError(f"cluster mode does not know how to distribute this statement:\n{statement.strip()}")

    def _table(self, name: str, body: str, engine: str, args: str | None, rest: str) -> list[str]:
        local = self.local(name)
        path = _literal(f"/clickhouse/tables/{{shard}}/{self.database}/{name}")
        engine_args = ", ".join([path, "'{replica}'", *([args] if args else [])])
        return [
            f"CREATE TABLE IF NOT EXISTS {local} {self.on_cluster} {body}\n"
            f"ENGINE = Replicated{engine}({engine_args}){rest}",
            f"CREATE TABLE IF NOT EXISTS {self.qualified(name)} {self.on_cluster} AS {local}\n"
            f"ENGINE = Distributed({_literal(self.cluster)}, {_literal(self.database)}, "
            f"{_literal(name + '_local')}, {_sharding_key(name)})",
        ]


def _sharding_key(name: str) -> str:
    key = SHARDING_KEYS.get(TRANSIENT_TABLES.get(name, name))
    if key is None:
        raise ValueError(f"table {name} has no entry in SHARDING_KEYS: decide how cluster mode shards it")
    return key


def _check_identifier(value: str, what: str) -> str:
    if not _IDENTIFIER.match(value):
        raise ValueError(f"{what} name {value!r}: use up to 128 letters, digits, '_' or '-'")
    return value


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
