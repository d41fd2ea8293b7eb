"""``agentlat budget``: write a starter budgets file, and check live latency against one in CI.

Module import pulls in typer and rich only; the budgets model (PyYAML) loads inside the
commands, and the API client imports httpx only when a client is made, so ``agentlat --help``
stays fast.

Exit codes of ``check``: 0 every budget passes, 1 a budget is breached (or, with ``--baseline``, a
percentile is surely slower than the baseline's by more than the margin), 2 usage, file or connection
error, 3 no breach but some percentile had too few samples (0 with ``--allow-insufficient``).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentlat.api.client import DEFAULT_API, ApiClient
from agentlat.budgets.baseline import DEFAULT_MARGIN
from agentlat.cli.common import ApiOpt, fail

if TYPE_CHECKING:
    from agentlat.budgets.baseline import BaselineReport, Margin, Samples
    from agentlat.budgets.model import Budgets, Measurements, Report

RELEASE_BASELINE = "release:"
BASELINE_RELEASE_WINDOW = "7d"  # how far back a baseline release's spans are read (samples: a week at most)

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
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            help="Also fail when a budgeted percentile is surely slower than a baseline's by more than --margin: "
            "release:1.4.1 (that release's spans of the last 7d), a duration such as 24h (the window just "
            "before the checked one), or a results file a previous run saved with --save-results.",
        ),
    ] = None,
    margin: Annotated[
        str,
        typer.Option("--margin", help="How much slower than the baseline is allowed: 10% (of its value) or 50ms."),
    ] = DEFAULT_MARGIN,
    release: Annotated[
        str | None,
        typer.Option(
            "--release",
            help="Compare (and save) only this release's spans (service.version) against the baseline; "
            "the budgets themselves read every release.",
        ),
    ] = None,
    save_results: Annotated[
        Path | None,
        typer.Option("--save-results", help="Write the checked window's samples here, a later run's --baseline."),
    ] = None,
) -> None:
    """Compare live p50/p95/p99 with the budgets (and with a baseline); exit 1 on a breach, 3 on too few samples."""
    from agentlat.budgets.baseline import parse_margin
    from agentlat.budgets.model import evaluate, exit_code, load_budgets
    from agentlat.budgets.report import render_table
    from agentlat.errors import AgentlatError

    try:
        budgets = load_budgets(budgets_file)
        allowed = parse_margin(margin)
        client = ApiClient(api)
        measured, span = fetch(client, budgets, window)
        report = evaluate(budgets, measured)
        compared = None
        if baseline is not None or save_results is not None:
            compared = against_baseline(client, budgets, report, span, baseline, allowed, release, save_results)
    except AgentlatError as exc:
        fail(str(exc))
    if output is None:
        _emit(output_format, budgets, report, span, compared)
    else:
        _write(output, output_format, budgets, report, span, compared)
        render_table(budgets, report, span, baseline=compared)
    raise typer.Exit(exit_code(combined_status(report, compared), allow_insufficient))


def combined_status(report: Report, compared: BaselineReport | None) -> str:
    """The budgets' status, made a breach by a regression and insufficient by a check with too few samples."""
    statuses = {report.status, {"regression": "breach"}.get(compared.status, compared.status) if compared else "pass"}
    return next(s for s in ("breach", "insufficient", "pass") if s in statuses)


def against_baseline(
    client: ApiClient,
    budgets: Budgets,
    report: Report,
    span: dict[str, str],
    baseline: str | None,
    margin: Margin,
    release: str | None,
    save_results: Path | None,
) -> BaselineReport | None:
    """The budgeted percentiles of the checked window against the baseline's (None without a baseline),
    after saving the window's samples when asked."""
    from agentlat.budgets.baseline import BaselineReport, Wanted, check_against, group_name
    from agentlat.budgets.baseline import save_results as save

    latencies = [v for v in report.verdicts if not v.ratio]
    wanted = [Wanted(group_name(v.dimension, v.name), v.metric, v.percentile, v.min_samples) for v in latencies]
    asked = {(v.dimension, v.metric) for v in latencies}
    current = fetch_samples(client, budgets, asked, {"start": span["start"], "end": span["end"], "release": release})
    if save_results is not None:
        save(save_results, current, "agentlat budget check", span)
    if baseline is None:
        return None
    before, against = baseline_samples(client, budgets, asked, span, baseline)
    if release:
        against += f", now release {release}"
    return BaselineReport(against, margin, tuple(check_against(current, before, wanted, margin)))


def baseline_samples(
    client: ApiClient, budgets: Budgets, asked: set[tuple[str, str]], span: dict[str, str], baseline: str
) -> tuple[Samples, str]:
    """The baseline's samples and what it is: a release's spans, the window before, or a results file."""
    from agentlat.api.windows import iso, parse_duration, parse_instant
    from agentlat.budgets.baseline import load_results

    if baseline.startswith(RELEASE_BASELINE):
        named = baseline.removeprefix(RELEASE_BASELINE)
        when = {"window": BASELINE_RELEASE_WINDOW, "end": span["end"], "release": named}
        return fetch_samples(client, budgets, asked, when), f"release {named} (last {BASELINE_RELEASE_WINDOW})"
    if Path(baseline).exists() or not _is_duration(baseline):
        return load_results(Path(baseline)), f"results file {baseline}"
    start_ns = parse_instant(span["start"], "start")
    when = {"start": iso(start_ns - parse_duration(baseline, "--baseline") * 1_000_000_000), "end": span["start"]}
    return fetch_samples(client, budgets, asked, when), f"the {baseline} before the window"


def _is_duration(text: str) -> bool:
    from agentlat.api.windows import parse_duration
    from agentlat.errors import AgentlatError

    try:
        parse_duration(text, "--baseline")
    except AgentlatError:
        return False
    return True


def fetch_samples(
    client: ApiClient, budgets: Budgets, asked: set[tuple[str, str]], when: dict[str, str | None]
) -> Samples:
    """The values (``/api/v1/samples``) of each (dimension, latency) asked, per route or agent."""
    from agentlat.budgets.baseline import group_name

    found: dict[str, dict[str, list[float]]] = {}
    for dimension, metric in sorted(asked):
        body = client.get("/api/v1/samples", metric=metric, group_by=dimension, service=budgets.service, **when)
        for row in body.rows:
            found.setdefault(group_name(dimension, row.group[dimension]), {})[metric] = row.values
    return found


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


def _render(
    output_format: OutputFormat, budgets: Budgets, report: Report, span: dict[str, str], compared: BaselineReport | None
) -> str:
    from agentlat.budgets import report as budget_format

    renderer = {
        OutputFormat.json: budget_format.render_json,
        OutputFormat.junit: budget_format.render_junit,
        OutputFormat.markdown: budget_format.render_markdown,
    }[output_format]
    return renderer(budgets, report, span, compared)


def _emit(
    output_format: OutputFormat, budgets: Budgets, report: Report, span: dict[str, str], compared: BaselineReport | None
) -> None:
    from agentlat.budgets.report import render_table

    if output_format is OutputFormat.table:
        render_table(budgets, report, span, baseline=compared)
    else:
        typer.echo(_render(output_format, budgets, report, span, compared), nl=False)


def _write(
    path: Path,
    output_format: OutputFormat,
    budgets: Budgets,
    report: Report,
    span: dict[str, str],
    compared: BaselineReport | None,
) -> None:
    from agentlat.budgets.report import render_table

    try:
        with path.open("w", encoding="utf-8") as out:
            if output_format is OutputFormat.table:
                render_table(budgets, report, span, file=out, baseline=compared)
            else:
                out.write(_render(output_format, budgets, report, span, compared))
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}")
