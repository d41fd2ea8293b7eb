"""``agentlat budget``: write a starter budgets file, and check live latency against one in CI.

Module import pulls in typer and rich only; the budgets model (PyYAML) loads inside the
commands, and the API client imports httpx only when a client is made, so ``agentlat --help``
stays fast.

Exit codes of ``check``: 0 every budget passes, 1 a budget is breached, 2 usage, file or
connection error, 3 no breach but some percentile had too few samples (0 with
``--allow-insufficient``).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentlat.api.client import DEFAULT_API, ApiClient
from agentlat.cli.common import ApiOpt, fail

if TYPE_CHECKING:
    from agentlat.budgets.model import Budgets, Measurements, Report

budget_app = typer.Typer(
    help="Latency budgets as code: a YAML file of p50/p95/p99 budgets per route and agent, checked in CI.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


class AgentKind(StrEnum):
    """Agent types with a starter file (the keys of ``agentlat.budgets.model.AGENT_TYPES``)."""

    chat = "chat"
    reasoning = "reasoning"
    tools = "tools"
    rag = "rag"
    multimodal = "multimodal"


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    junit = "junit"
    markdown = "markdown"


@budget_app.command("init")
def init(
    path: Annotated[Path, typer.Argument(help="Where to write the file.")] = Path("budgets.yaml"),
    kind: Annotated[
        AgentKind,
        typer.Option(
            "--type",
            help="chat (TTFT, ITL), reasoning (E2E, TTFT), tools (E2E, TTFT), rag (TTFT, E2E), "
            "multimodal (TTFT, ITL): primary and secondary metric.",
        ),
    ] = AgentKind.chat,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter budgets file for an agent type."""
    from agentlat.budgets.templates import template

    if path.exists() and not force:
        fail(f"{path} exists; pass --force to overwrite it or choose another path")
    try:
        path.write_text(template(kind.value), encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}")
    typer.echo(f"wrote {path} ({kind.value}); tune the numbers, then: agentlat budget check {path}")


@budget_app.command("check")
def check(
    budgets_file: Annotated[Path, typer.Argument(metavar="BUDGETS", help="The budgets YAML file.")],
    api: ApiOpt = DEFAULT_API,
    window: Annotated[str, typer.Option("--window", help="Trailing window of live data, e.g. 1h, 24h, 7d.")] = "1h",
    output_format: Annotated[OutputFormat, typer.Option("--format", help="How to print the results.")] = (
        OutputFormat.table
    ),
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Write the --format output to this file; the table still goes to stdout."),
    ] = None,
    allow_insufficient: Annotated[
        bool, typer.Option("--allow-insufficient", help="Exit 0 instead of 3 when the only problem is too few samples.")
    ] = False,
) -> None:
    """Compare live p50/p95/p99 with the budgets; exit 1 on a breach, 3 on too few samples."""
    from agentlat.budgets.model import evaluate, exit_code, load_budgets
    from agentlat.budgets.report import render_table
    from agentlat.errors import AgentlatError

    try:
        budgets = load_budgets(budgets_file)
        measured, span = fetch(ApiClient(api), budgets, window)
    except AgentlatError as exc:
        fail(str(exc))
    report = evaluate(budgets, measured)
    if output is None:
        _emit(output_format, budgets, report, span)
    else:
        _write(output, output_format, budgets, report, span)
        render_table(budgets, report, span)
    raise typer.Exit(exit_code(report.status, allow_insufficient))


def fetch(client: ApiClient, budgets: Budgets, window: str) -> tuple[Measurements, dict[str, str]]:
    """Percentiles per route or agent for each latency the file budgets (``/api/v1/percentiles``), and
    hit rates (``/api/v1/cache``), over one fixed window.

    The first answer fixes the window's start and end, so later requests read the same span.
    """
    from agentlat.budgets.model import RATIO_METRICS, Share, Stats

    measured: dict[tuple[str, str], dict[str, Stats | Share]] = {}
    span: dict[str, str] = {"length": window}
    for dimension, metric in budgets.queries():
        when = {"start": span["start"], "end": span["end"]} if "start" in span else {"window": window}
        if metric in RATIO_METRICS:
            body = client.get("/api/v1/cache", group_by=dimension, service=budgets.service, **when)
            measured[(dimension, metric)] = {g.group[dimension]: Share(g.calls, g.hit_rate) for g in body.groups}
        else:
            body = client.get("/api/v1/percentiles", metric=metric, group_by=dimension, service=budgets.service, **when)
            measured[(dimension, metric)] = {
                row.group[dimension]: Stats(row.count, row.p50, row.p95, row.p99) for row in body.rows
            }
        span.update(start=body.window.start, end=body.window.end)
    return measured, span


def _render(output_format: OutputFormat, budgets: Budgets, report: Report, span: dict[str, str]) -> str:
    from agentlat.budgets import report as budget_format

    renderer = {
        OutputFormat.json: budget_format.render_json,
        OutputFormat.junit: budget_format.render_junit,
        OutputFormat.markdown: budget_format.render_markdown,
    }[output_format]
    return renderer(budgets, report, span)


def _emit(output_format: OutputFormat, budgets: Budgets, report: Report, span: dict[str, str]) -> None:
    from agentlat.budgets.report import render_table

    if output_format is OutputFormat.table:
        render_table(budgets, report, span)
    else:
        typer.echo(_render(output_format, budgets, report, span), nl=False)


def _write(path: Path, output_format: OutputFormat, budgets: Budgets, report: Report, span: dict[str, str]) -> None:
    from agentlat.budgets.report import render_table

    try:
        with path.open("w", encoding="utf-8") as out:
            if output_format is OutputFormat.table:
                render_table(budgets, report, span, file=out)
            else:
                out.write(_render(output_format, budgets, report, span))
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}")
