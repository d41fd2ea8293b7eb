"""The store's own upkeep: applying migrations (single node or ON CLUSTER), the connection's
settings and the spans table's retention. Part of ``Store`` (store/__init__.py)."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

from agentlat.store.backends import Backend, ChdbBackend, StoreError
from agentlat.store.cluster_ddl import SHARDING_KEYS, cluster_statements
from agentlat.store.migrations import LEDGER_DDL, MIGRATIONS, with_ttl

log = logging.getLogger("agentlat.store")

_SPANS_TTL = re.compile(r"\bTTL toDate\(Timestamp\) \+ toIntervalDay\((\d+)\)")
_CLUSTER_PENDING = (
    "this ClickHouse database is set up for a cluster and has migrations pending; apply them with "
    "`agentlat migrate --cluster NAME` before starting this version (docs/operations.md, Upgrades)"
)


def _schema_change(before: set[int], applied: list[int], where: str) -> str:
    """One line for what ``migrate`` did: a store created, or upgraded from one schema version to another."""
    known = [m.version for m in MIGRATIONS if m.version in before]  # the ledger holds marks of steps too
    if not known:
        return f"created the store: {where} (schema {applied[-1]})"
    names = "; ".join(m.name for m in MIGRATIONS if m.version in applied)
    return f"upgraded the store from schema {max(known)} to {applied[-1]}: {where} ({names})"


class SchemaAdmin:
    """Migrations, settings and retention of the store's database."""

    backend: Backend
    ttl_days: int

    @property
    def description(self) -> str:
        if isinstance(self.backend, ChdbBackend):
            return f"embedded chDB at {Path(self.backend.data_dir).resolve()}"
        return "ClickHouse server"

    def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied now."""
        self.backend.execute(LEDGER_DDL)
        done = self._applied_versions()
        if any(m.version not in done for m in MIGRATIONS) and "Distributed" in self._schema_engines().values():
            raise StoreError(_CLUSTER_PENDING)
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
            log.debug("applied migration %d: %s", migration.version, migration.name)
            applied.append(migration.version)
        if applied:
            log.info("%s", _schema_change(done, applied, self.description))
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

    def ping(self) -> None:
        self.backend.query_arrow("SELECT 1 AS ok")

    def close(self) -> None:
        self.backend.close()

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
