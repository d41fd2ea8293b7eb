"""The ``agentlat`` command line: server, bring-up and (from the other packages) their tools."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler

from agentlat import __version__
from agentlat.alerts.cli import budget_app
from agentlat.collector.keys_cli import keys_app
from agentlat.dashboard.cli import dashboard
from agentlat.errors import AgentlatError

console = Console(stderr=True)
app = typer.Typer(
    name="agentlat",
    help="Latency observability for LLM agents: TTFT, ITL and E2E split into model, tool and orchestration time.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)

HostOpt = Annotated[
    str | None,
    typer.Option("--host", help="Address to bind (env AGENTLAT_HOST, default 127.0.0.1)."),
]
PortOpt = Annotated[
    int | None,
    typer.Option("--port", help="OTLP/HTTP + API port (env AGENTLAT_PORT, default 4318)."),
]
DataOpt = Annotated[
    Path | None,
    typer.Option("--data", help="Embedded store directory (env AGENTLAT_DATA, default ./.agentlat/data)."),
]
ClickHouseOpt = Annotated[
    str | None,
    typer.Option(
        "--clickhouse",
        help="ClickHouse server URL, e.g. http://user:pass@host:8123/db, instead of the embedded "
        "store (env AGENTLAT_CLICKHOUSE_URL).",
    ),
]
LogOpt = Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")]


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(name)s: %(message)s",
        handlers=[RichHandler(console=console, show_path=False, rich_tracebacks=False)],
        force=True,
    )


@app.command()
def serve(
    host: HostOpt = None,
    port: PortOpt = None,
    grpc_port: Annotated[
        int | None,
        typer.Option("--grpc-port", help="OTLP/gRPC port, 0 for none (env AGENTLAT_GRPC_PORT, default 4317)."),
    ] = None,
    data: DataOpt = None,
    clickhouse: ClickHouseOpt = None,
    require_keys: Annotated[
        bool, typer.Option("--require-keys", help="Require API keys even on loopback (always required beyond it).")
    ] = False,
    budgets: Annotated[
        Path | None,
        typer.Option("--budgets", help="Budgets file served, evaluated, at /api/v1/budgets (env AGENTLAT_BUDGETS)."),
    ] = None,
    log_level: LogOpt = "info",
) -> None:
    """Run the collector: OTLP/HTTP on /v1/traces and the query API on /api/v1."""
    from agentlat.collector.server import run_server

    if budgets is not None:  # the option outranks the variable; run_server reads settings from the environment
        os.environ["AGENTLAT_BUDGETS"] = str(budgets)
    setup_logging(log_level)
    _run(
        lambda: run_server(
            host=host,
            port=port,
            grpc_port=grpc_port,
            data_dir=data,
            clickhouse_url=clickhouse,
            require_keys=require_keys,
            log_level=log_level,
            console=console,
        )
    )


@app.command()
def up(
    port: PortOpt = None,
    data: DataOpt = None,
    dashboard_port: Annotated[
        int, typer.Option("--dashboard-port", help="Dashboard port on 127.0.0.1 (0: no dashboard).")
    ] = 8501,
    log_level: LogOpt = "info",
) -> None:
    """Bring up the whole product on the embedded store (collector and dashboard) and print where to look."""
    from agentlat.collector.config import Settings
    from agentlat.collector.server import run_server
    from agentlat.dashboard.cli import beside

    def serve_with_dashboard() -> None:
        settings = Settings.from_env(port=port, data_dir=data)
        with beside(dashboard_port, f"http://127.0.0.1:{settings.port}", console):
            run_server(port=port, data_dir=data, log_level=log_level, console=console)

    setup_logging(log_level)
    _run(serve_with_dashboard)


ApiOpt = Annotated[str, typer.Option("--api", help="agentlat server URL (env AGENTLAT_API).", envvar="AGENTLAT_API")]
WindowOpt = Annotated[str, typer.Option("--window", help="Trailing window to read, e.g. 1h, 24h, 7d.")]


@app.command()
def advise(
    api: ApiOpt = "http://127.0.0.1:4318",
    window: WindowOpt = "24h",
    route: Annotated[str | None, typer.Option("--route", help="Only this route.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Which latency lever each route should pull, ranked by expected saving."""
    from agentlat.collector.client import ApiClient

    _run(lambda: _print_advice(ApiClient(api).get("/api/v1/advice", window=window, route=route), as_json))


def _print_advice(body: dict, as_json: bool) -> None:
    from rich.table import Table

    if as_json:
        typer.echo(json.dumps(body, indent=2))
        return
    findings = body["findings"]
    if not findings:
        Console().print(f"No findings for {body['window']['start']} to {body['window']['end']}: nothing to pull.")
        return
    table = Table(title="agentlat advice (largest expected saving first)", show_lines=True)
    for column in ("route", "finding", "lever", "saves / request", "total saved"):
        table.add_column(column, overflow="fold")
    for f in findings:
        table.add_row(
            f["route"], f["title"], f["lever"], f"{f['saving_ms_per_request']:.0f} ms",
            f"{f['total_saving_s']:.1f} s over {f['requests']} requests",
        )  # fmt: skip
    Console().print(table)


app.command()(dashboard)


@app.command()
def version() -> None:
    """Print the agentlat version."""
    typer.echo(__version__)


def run_or_exit(action: Callable[[], None]) -> None:
    """Run a command's action; an agentlat error becomes a red message and exit status 2."""
    try:
        action()
    except AgentlatError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None


_run = run_or_exit


app.add_typer(keys_app, name="keys")
app.add_typer(budget_app, name="budget", help="Latency budgets as code: init a budgets file, check live data in CI.")


def main() -> None:
    app()
