"""``agentlat compare``: which change made it slower. Two releases, models or prompt versions, or before and
after an instant, on the same route (``GET /api/v1/compare``): TTFT, ITL and E2E at p50/p95/p99, where the
time moved (model, tool, orchestration; each tool), each difference with its 95 % interval."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from agentlat.api.client import DEFAULT_API, ApiClient
from agentlat.cli.common import ApiOpt, run_or_exit

if TYPE_CHECKING:
    from rich.table import Table

    from agentlat.api.models import CompareResponse

VERDICT_STYLE = {"slower": "bold red", "faster": "green", "no_clear_change": "", "too_few_samples": "yellow",
                 "no_data": "dim"}  # fmt: skip


def compare(
    api: ApiOpt = DEFAULT_API,
    release: Annotated[
        tuple[str, str] | None, typer.Option("--release", metavar="A B", help="Two service.version values.")
    ] = None,
    model: Annotated[tuple[str, str] | None, typer.Option("--model", metavar="A B", help="Two models.")] = None,
    prompt: Annotated[
        tuple[str, str] | None, typer.Option("--prompt", metavar="A B", help="Two agentlat.prompt.version values.")
    ] = None,
    at: Annotated[
        str | None, typer.Option("--at", help="Before against from this instant on (ISO-8601 or unix seconds).")
    ] = None,
    route: Annotated[str | None, typer.Option("--route", help="Only this route.")] = None,
    service: Annotated[str | None, typer.Option("--service", help="Only this service.")] = None,
    window: Annotated[
        str, typer.Option("--window", help="Trailing window holding both sides: exact up to 7d, from rollups beyond.")
    ] = "24h",
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's answer as JSON, for scripts.")] = False,
) -> None:
    """Compare two releases (--release A B), models (--model), prompt versions (--prompt), or before and after
    an instant (--at): TTFT, ITL and E2E at p50/p95/p99, the split's parts and each tool, each difference B - A
    with its 95 % interval (a bootstrap over the spans up to 7 days; from the rollups beyond) and whether B is
    slower, faster or not clearly either."""
    chosen = {k: v for k, v in (("release", release), ("model", model), ("prompt", prompt), ("time", at)) if v}
    if len(chosen) != 1:
        raise typer.BadParameter("give exactly one of --release A B, --model A B, --prompt A B or --at TIME")
    [(dimension, value)] = chosen.items()
    sides = {"at": value} if dimension == "time" else {"a": value[0], "b": value[1]}
    params = {"dimension": dimension, "window": window, "route": route, "service": service, **sides}

    def fetch() -> CompareResponse:
        with ApiClient(api) as client:
            return client.get("/api/v1/compare", **params)  # type: ignore[return-value]

    if as_json:
        run_or_exit(lambda: typer.echo(json.dumps(fetch().model_dump(mode="json"), indent=2)))
    else:
        run_or_exit(lambda: _print(fetch()))


def _print(found: CompareResponse) -> None:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=160, no_color=True, highlight=False)
    console.print(table(found))
    console.print(lever_table(found))
    _print_began(console, found)


def _print_began(console: object, found: CompareResponse) -> None:
    from agentlat.dashboard import comparison

    lines = comparison.began(found)
    if lines:
        console.print("Began in the window:", style="bold")  # type: ignore[attr-defined]
        for line in lines:
            console.print(f"  {line}", markup=False)  # type: ignore[attr-defined]


def table(found: CompareResponse) -> Table:
    """One row per figure and statistic: A, B, the difference B - A with its interval, and the verdict."""
    from rich.table import Table

    from agentlat.dashboard import comparison, fmt

    window = f"{found.window.start} to {found.window.end}"
    title = f"agentlat compare: {found.dimension} {found.a} (A) against {found.b} (B), {window}"
    caption = f"{comparison.source_note(found)} {comparison.MIN_SAMPLES_NOTE}."
    grid = Table(title=title, title_justify="left", header_style="bold", caption=caption)
    for name, justify in (("figure", "left"), ("A", "right"), ("B", "right"), ("B - A", "right"),
                          ("95 % interval", "right"), ("samples A / B", "right"), ("verdict", "left")):  # fmt: skip
        grid.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in comparison.rows(found):
        style = VERDICT_STYLE[row.status]
        verdict = f"[{style}]{row.verdict}[/]" if style else row.verdict
        grid.add_row(row.figure, fmt.ms(row.a), fmt.ms(row.b), comparison.signed(row.difference), row.interval,
                     row.samples, verdict)  # fmt: skip
    return grid


def lever_table(found: CompareResponse) -> Table:
    """What moved with the latency: each lever's A, B and B - A with its interval."""
    from rich.table import Table

    from agentlat.dashboard import comparison

    grid = Table(title="What moved with it", title_justify="left", header_style="bold")
    for name, justify in (("lever", "left"), ("A", "right"), ("B", "right"), ("B - A", "right"),
                          ("95 % interval", "right"), ("samples A / B", "right"), ("verdict", "left")):  # fmt: skip
        grid.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in comparison.lever_rows(found):
        grid.add_row(row.lever, row.a, row.b, row.difference, row.interval, row.samples, row.verdict)
    return grid
