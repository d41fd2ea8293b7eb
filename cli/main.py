"""The ``agentlat`` command line: server, bring-up and (from the other packages) their tools."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from agentlat import __version__
from agentlat.api.client import DEFAULT_API, ApiClient
from agentlat.cli.alerts import alerts_app
from agentlat.cli.budget import budget_app
from agentlat.cli.common import ApiOpt, console, run_or_exit, setup_logging
from agentlat.cli.compare import compare
from agentlat.cli.dashboard import dashboard
from agentlat.cli.keys import keys_app
from agentlat.cli.migrate import migrate
from agentlat.cli.top import top

if TYPE_CHECKING:
    from agentlat.api.models import AdviceResponse

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
GrpcPortOpt = Annotated[
    int | None, typer.Option("--grpc-port", help="OTLP/gRPC port, 0 for none (env AGENTLAT_GRPC_PORT, default 4317).")
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


@app.command()
def serve(
    host: HostOpt = None,
    port: PortOpt = None,
    grpc_port: GrpcPortOpt = None,
    data: DataOpt = None,
    clickhouse: ClickHouseOpt = None,
    require_keys: Annotated[
        bool, typer.Option("--require-keys", help="Require API keys even on loopback (always required beyond it).")
    ] = False,
    budgets: Annotated[
        Path | None,
        typer.Option("--budgets", help="Budgets file served, evaluated, at /api/v1/budgets (env AGENTLAT_BUDGETS)."),
    ] = None,
    alerts: Annotated[
        Path | None,
        typer.Option("--alerts", help="Alert rules evaluated in the server, sent to Slack (env AGENTLAT_ALERTS)."),
    ] = None,
    log_level: LogOpt = "info",
) -> None:
    """Run the collector: OTLP/HTTP on /v1/traces, /v1/logs and /v1/metrics, and the query API on /api/v1.

    Stops cleanly on Ctrl-C, SIGTERM or SIGHUP. Requests are logged when they fail; --log-level debug logs them all.
    """
    from agentlat.server.serve import run_server
    from agentlat.shared.processes import stop_on_signals

    setup_logging(log_level)
    stop_on_signals()
    run_or_exit(
        lambda: run_server(
            host=host,
            port=port,
            grpc_port=grpc_port,
            data_dir=data,
            clickhouse_url=clickhouse,
            budgets_path=budgets,
            alerts_path=alerts,
            require_keys=require_keys,
            log_level=log_level,
            console=console,
        )
    )


@app.command()
def up(
    port: PortOpt = None,
    grpc_port: GrpcPortOpt = None,
    data: DataOpt = None,
    dashboard_port: Annotated[
        int, typer.Option("--dashboard-port", help="Dashboard port on 127.0.0.1 (0: no dashboard).")
    ] = 8501,
    demo_rate: Annotated[
        float, typer.Option("--demo-rate", help="Demo agent runs per second sent to it (0: no demo traffic).")
    ] = 1.0,
    budgets: Annotated[
        Path | None,
        typer.Option("--budgets", help="Budgets file for the dashboard's budget page (default: the demo's budgets)."),
    ] = None,
    alerts: Annotated[
        Path | None,
        typer.Option("--alerts", help="Alert rules evaluated in the server (default: the demo's rules)."),
    ] = None,
    log_level: LogOpt = "info",
) -> None:
    """Bring up the whole product on the embedded store (collector, dashboard, demo traffic) and print where to look.

    Stops everything it started on Ctrl-C, SIGTERM or SIGHUP.
    """
    from agentlat.cli.dashboard import beside
    from agentlat.demo.runner import background_demo, demo_file
    from agentlat.server.config import Settings
    from agentlat.server.serve import run_server, when_ready
    from agentlat.shared.processes import stop_on_signals

    def bring_up() -> None:
        settings = Settings.from_env(port=port, data_dir=data)
        api = f"http://127.0.0.1:{settings.port}"
        logs = settings.data_dir.parent.resolve()
        demo = background_demo(api, demo_rate, logs / "demo.log") if demo_rate > 0 else contextlib.nullcontext()
        rules = alerts or demo_file("alerts.yaml")
        files = budgets or demo_file("budgets.yaml")

        def announce(collector: str) -> None:
            lines = [collector]
            if dashboard_port:
                lines.append(f"[bold green]agentlat[/] dashboard on [bold]http://127.0.0.1:{dashboard_port}[/]")
            if demo_rate > 0:
                lines.append(f"  demo       {demo_rate} agent runs/s from 3 services (log: {logs / 'demo.log'})")
            lines.append("Stop with Ctrl-C.")

            def show() -> None:
                console.print("\n".join(lines), soft_wrap=True)  # whole lines, to copy from a log file too

            if dashboard_port:  # the banner waits for the dashboard too
                when_ready(f"http://127.0.0.1:{dashboard_port}/_stcore/health", show)
            else:
                show()

        with beside(dashboard_port, api, logs / "dashboard.log"), demo:
            run_server(
                port=port, grpc_port=grpc_port, data_dir=data, budgets_path=files, alerts_path=rules,
                log_level=log_level, console=console, announce=announce,
            )  # fmt: skip

    setup_logging(log_level)
    stop_on_signals()
    run_or_exit(bring_up)


WindowOpt = Annotated[str, typer.Option("--window", help="Trailing window to read, e.g. 1h, 24h, 7d.")]


@app.command()
def advise(
    api: ApiOpt = DEFAULT_API,
    window: WindowOpt = "24h",
    route: Annotated[str | None, typer.Option("--route", help="Only this route.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Which latency lever each route should pull, ranked by expected saving."""
    run_or_exit(lambda: _print_advice(ApiClient(api).get("/api/v1/advice", window=window, route=route), as_json))


def _print_advice(body: AdviceResponse, as_json: bool) -> None:
    from rich.table import Table

    if as_json:
        typer.echo(json.dumps(body.model_dump(mode="json", by_alias=True), indent=2))
        return
    if not body.findings:
        Console().print(f"No findings for {body.window.start} to {body.window.end}: nothing to pull.")
        return
    table = Table(title="agentlat advice (largest expected saving first)", show_lines=True)
    for column in ("route", "finding", "lever", "saves (averaged over)", "total saved"):
        table.add_column(column, overflow="fold")
    for f in body.findings:
        table.add_row(f.route, f.title, f.lever, f.saving_basis, f"{f.total_saving_s:.1f} s over {f.requests} requests")
    Console().print(table)


app.command()(dashboard)
app.command()(migrate)
app.command()(top)
app.command()(compare)


@app.command()
def demo(
    endpoint: Annotated[
        str | None, typer.Option("--endpoint", help="Collector to send spans to (default: AGENTLAT_ENDPOINT or local).")
    ] = None,
    rate: Annotated[float, typer.Option("--rate", help="Agent runs per second, over all services.")] = 3.0,
    duration: Annotated[float, typer.Option("--duration", help="Seconds to run; 0 runs until interrupted.")] = 60.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the timing distributions.")] = 1,
) -> None:
    """Send a realistic agent workload (6 agent types, 3 services) to the collector.

    The real openai and anthropic clients, instrumented by the SDK, call a local fake model server that streams
    their wire formats with realistic time to first token and inter-token latency.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from agentlat._setup import resolve_endpoint
    from agentlat.demo.runner import run_demo
    from agentlat.shared.processes import exit_with_parent_from_env

    exit_with_parent_from_env()  # started by `agentlat up`: end with it, even if it is killed outright
    target = resolve_endpoint(endpoint)
    # `agentlat up` stops its demo with SIGTERM: exit through the finally blocks that stop the workers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    how_long = f"for {duration} s" if duration else "until stopped"
    console.print(f"demo: sending agent runs to {target} at {rate}/s {how_long}")
    columns = [TextColumn("demo agent runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("runs", total=rate * duration if duration else None)
        done = run_demo(target, rate, duration, seed, lambda n, total: bar.update(task, completed=n))
    console.print(f"demo: {done} agent runs sent; open the dashboard or `agentlat advise` to see them")


@app.command()
def version() -> None:
    """Print the agentlat version."""
    typer.echo(__version__)


app.add_typer(keys_app, name="keys")
app.add_typer(budget_app, name="budget", help="Latency budgets as code: init a budgets file, check live data in CI.")
app.add_typer(alerts_app, name="alerts", help="Alert rules: check a rules file, replay it on stored data, run it.")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
