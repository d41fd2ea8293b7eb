"""``agentlat keys``: create, list and revoke API keys.

With ``--api URL`` the running server does it (an admin key in AGENTLAT_API_KEY); without,
the command opens the store itself, which for the embedded store works only while no
server holds it. Either way the command reads keys as the API answers them
(``agentlat.api.models``: ``CreatedKey``, ``KeyInfo``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from agentlat.cli.common import run_or_exit

if TYPE_CHECKING:
    from agentlat.api.client import ApiClient
    from agentlat.api.models import KeyInfo

keys_app = typer.Typer(help="Create, list and revoke API keys.", no_args_is_help=True)

ApiOpt = Annotated[
    str | None, typer.Option("--api", help="Manage keys through this running server (admin key in AGENTLAT_API_KEY).")
]
DataOpt = Annotated[Path | None, typer.Option("--data", help="Embedded store directory (server stopped).")]
ClickHouseOpt = Annotated[str | None, typer.Option("--clickhouse", help="ClickHouse server URL.")]


@keys_app.command("create")
def create(
    project: Annotated[str, typer.Option("--project", help="Project the key reads and writes.")] = "default",
    admin: Annotated[bool, typer.Option("--admin", help="An admin key acts on every project.")] = False,
    name: Annotated[str, typer.Option("--name", help="What the key is for.")] = "",
    api: ApiOpt = None,
    data: DataOpt = None,
    clickhouse: ClickHouseOpt = None,
) -> None:
    """Create a key and print it once; only its hash is kept."""

    def action() -> None:
        from agentlat.api.models import CreatedKey

        if api:
            created = _client(api).post("/api/v1/keys", {"project": project, "admin": admin, "name": name})
        else:
            from agentlat.server.auth import new_key

            try:
                key, record = new_key(project, admin=admin, name=name)
            except ValueError as exc:
                raise typer.BadParameter(str(exc)) from None
            with _store(data, clickhouse, "create") as store:
                store.save_key(record)
            created = CreatedKey(key=key, **_info(record).model_dump())
        Console(stderr=True).print(
            f"Created {'admin ' if created.admin else ''}key [bold]{created.key_id}[/] for project "
            f"{created.project!r}. It is shown only now; keep it secret:"
        )
        typer.echo(created.key)

    run_or_exit(action)


@keys_app.command("list")
def listing(api: ApiOpt = None, data: DataOpt = None, clickhouse: ClickHouseOpt = None) -> None:
    """List active keys (ids and projects, never secrets)."""

    def action() -> None:
        if api:
            keys = _client(api).get("/api/v1/keys").keys
        else:
            with _store(data, clickhouse, "list", existing=True) as store:
                keys = [_info(k) for k in store.api_keys() if not k.revoked]
        table = Table("key id", "project", "admin", "name")
        for k in keys:
            table.add_row(k.key_id, k.project, "yes" if k.admin else "", k.name)
        Console().print(table)

    run_or_exit(action)


@keys_app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key id (the part after alk_).")],
    api: ApiOpt = None,
    data: DataOpt = None,
    clickhouse: ClickHouseOpt = None,
) -> None:
    """Revoke a key: it stops working within 30 s on every collector."""

    def action() -> None:
        if api:
            _client(api).delete(f"/api/v1/keys/{key_id}")
        else:
            with _store(data, clickhouse, f"revoke {key_id}", existing=True) as store:
                record = next((k for k in store.api_keys() if k.key_id == key_id and not k.revoked), None)
                if record is None:
                    raise typer.BadParameter(f"no active key {key_id!r}")
                store.save_key(record.revoke())
        Console(stderr=True).print(f"Revoked key {key_id}.")

    run_or_exit(action)


BOOTSTRAP_ENV = "AGENTLAT_BOOTSTRAP_ADMIN_KEY"


@keys_app.command("bootstrap")
def bootstrap(data: DataOpt = None, clickhouse: ClickHouseOpt = None) -> None:
    """Make the admin key in AGENTLAT_BOOTSTRAP_ADMIN_KEY valid unless it already is (deployments, idempotent)."""

    def action() -> None:
        from agentlat.errors import ConfigError
        from agentlat.server.auth import bootstrap_admin_record

        key = os.environ.get(BOOTSTRAP_ENV, "").strip()
        if not key:
            raise ConfigError(
                f"{BOOTSTRAP_ENV} is not set: put a new key in it, "
                "e.g. alk_$(openssl rand -hex 6)_$(openssl rand -hex 32)"
            )
        with _store(data, clickhouse, "bootstrap") as store:
            try:
                record = bootstrap_admin_record(key, store.api_keys())
            except ValueError as exc:
                raise ConfigError(f"{BOOTSTRAP_ENV}: {exc}") from None
            if record is not None:
                store.save_key(record)
        key_id = key.split("_")[1]
        done = "is already an admin key" if record is None else "is now an admin key"
        Console(stderr=True).print(f"Key [bold]{key_id}[/] from {BOOTSTRAP_ENV} {done}.")

    run_or_exit(action)


def _client(api: str) -> ApiClient:
    from agentlat.api.client import ApiClient

    return ApiClient(api)


def _info(record: Any) -> KeyInfo:
    """A stored key as the API lists it (never its secret)."""
    from agentlat.api.models import KeyInfo

    return KeyInfo.model_validate(record, from_attributes=True)


class _store:
    """The store named on the command line (or by the environment), closed afterwards.

    ``existing``: the command reads keys, so an embedded store that is not there is a mistake
    (a wrong ``--data`` or directory), never a reason to make an empty one. A store a running
    server holds is reached through that server (``--api``).
    """

    def __init__(self, data: Path | None, clickhouse: str | None, command: str, existing: bool = False) -> None:
        self.data, self.clickhouse, self.command, self.existing = data, clickhouse, command, existing

    def __enter__(self) -> Any:
        from agentlat.errors import ConfigError
        from agentlat.server.config import Settings
        from agentlat.store import StoreInUse, open_store

        settings = Settings.from_env(data_dir=self.data, clickhouse_url=self.clickhouse)
        where = settings.data_dir.resolve()
        if self.existing and not settings.clickhouse_url and not (where / "metadata").is_dir():
            raise ConfigError(
                f"no agentlat store at {where}: pass --data with the directory the server uses "
                f"(`agentlat up` and `serve` keep it in .agentlat/data where they run, or AGENTLAT_DATA), "
                f"or ask a running server: agentlat keys {self.command} --api http://127.0.0.1:4318"
            )
        try:
            self.store = open_store(settings.data_dir, settings.clickhouse_url, settings.ttl_days)
        except StoreInUse as exc:
            holder = f"process {exc.pid}" if exc.pid else "another process"
            raise ConfigError(
                f"the store at {where} is open in {holder}, a running agentlat server: manage keys through it, "
                f"agentlat keys {self.command} --api http://127.0.0.1:4318 (its URL; an admin key in "
                "AGENTLAT_API_KEY when it requires keys)"
            ) from None
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()
