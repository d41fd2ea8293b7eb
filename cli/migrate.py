"""``agentlat migrate``: create or upgrade the store's schema, on one ClickHouse or ON CLUSTER.

Collectors migrate a single store themselves at start; this command does it ahead of a
rolling upgrade, and is the only way to migrate a cluster (collectors refuse to). With
``--print`` it writes the statements instead of running them, without connecting.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import parse_qsl, unquote, urlsplit

import typer
from rich.console import Console

from agentlat.cli.common import run_or_exit

if TYPE_CHECKING:
    from agentlat.server.config import Settings

ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="Create ReplicatedMergeTree tables behind Distributed ones ON CLUSTER NAME (a cluster of "
        "remote_servers, or {cluster}); needs a ClickHouse server.",
    ),
]
PrintOpt = Annotated[
    bool,
    typer.Option(
        "--print", help="Write the statements to stdout instead of running them (no connection; the database "
        "is the one the URL names, else default).",
    ),
]  # fmt: skip
ClickHouseOpt = Annotated[
    str | None, typer.Option("--clickhouse", help="ClickHouse server URL (env AGENTLAT_CLICKHOUSE_URL).")
]
DataOpt = Annotated[Path | None, typer.Option("--data", help="Embedded store directory (server stopped).")]


def migrate(
    clickhouse: ClickHouseOpt = None,
    data: DataOpt = None,
    cluster: ClusterOpt = None,
    print_only: PrintOpt = False,
) -> None:
    """Create or upgrade the store's schema; idempotent. Required on a cluster before collectors start."""

    def action() -> None:
        from agentlat.errors import ConfigError
        from agentlat.server.config import Settings

        settings = Settings.from_env(data_dir=data, clickhouse_url=clickhouse)
        url = settings.clickhouse_url
        if print_only:
            typer.echo(";\n\n".join(s.strip() for s in _statements(settings.ttl_days, cluster, url)) + ";")
        elif cluster:
            if data is not None or not url:
                raise ConfigError(
                    "--cluster needs a ClickHouse server: pass --clickhouse URL or set AGENTLAT_CLICKHOUSE_URL"
                )
            _statements(settings.ttl_days, cluster, url)  # checks the names before connecting
            _migrate_cluster(url, cluster, settings.ttl_days)
        else:
            _migrate_one(settings)

    run_or_exit(action)


def _migrate_one(settings: Settings) -> None:
    from agentlat.store import MIGRATIONS, open_store

    store = open_store(settings.data_dir, settings.clickhouse_url, settings.ttl_days)
    try:
        Console(stderr=True).print(
            f"Schema up to date (migration {MIGRATIONS[-1].version}) in the {store.description}."
        )
    finally:
        store.close()


def _statements(ttl_days: int, cluster: str | None, url: str | None) -> list[str]:
    from agentlat.errors import ConfigError
    from agentlat.store import LEDGER_DDL, MIGRATIONS, cluster_statements, with_ttl

    if not cluster:
        return [LEDGER_DDL, *(with_ttl(s, ttl_days) for m in MIGRATIONS for s in m.statements)]
    try:
        return cluster_statements(cluster, ttl_days, _database_of(url) if url else "default")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _migrate_cluster(url: str, cluster: str, ttl_days: int) -> None:
    from agentlat.errors import ConfigError
    from agentlat.store import CLUSTER_SETTINGS, ClickHouseBackend, Store

    err = Console(stderr=True)
    store = Store(ClickHouseBackend(url), ttl_days=ttl_days)  # not open_store: it would migrate one node
    try:
        try:
            applied = store.migrate_cluster(cluster)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        current = store.settings(list(CLUSTER_SETTINGS))
    finally:
        store.close()
    done = f"applied migrations {', '.join(map(str, applied))}" if applied else "nothing to apply"
    err.print(f"Cluster {cluster}: {done}.")
    for name, wanted in CLUSTER_SETTINGS.items():
        if current.get(name) != wanted:
            err.print(
                f"[bold yellow]warning:[/] this user has {name}={current.get(name)!r}; cluster mode needs "
                f"{wanted!r} in its settings profile (docs/operations.md, Cluster mode)"
            )


def _database_of(url: str) -> str:
    """The database a ClickHouse URL names (path or ``?database=``), as clickhouse-connect reads it."""
    parts = urlsplit(url)
    return dict(parse_qsl(parts.query)).get("database") or unquote(parts.path[1:].split("/")[0]) or "default"
