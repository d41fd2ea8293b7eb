"""``agentlat top``: the quick look from a terminal. Per route (or agent, model, tool): how many, TTFT and the
unit's own latency at p50/p95/p99, and where the time of requests and agent runs goes (model, tool,
orchestration), read from the same API answers as the dashboard (``/api/v1/dimensions`` and
``/api/v1/breakdown``), so the numbers are the API's."""

from __future__ import annotations

import json
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentlat.api.client import DEFAULT_API, ApiClient
from agentlat.cli.common import ApiOpt, run_or_exit

if TYPE_CHECKING:
    from rich.table import Table

    from agentlat.api.models import BreakdownResponse, DimensionsResponse


class By(StrEnum):
    route = "route"
    agent = "agent"
    model = "model"
    tool = "tool"
    release = "release"
    prompt = "prompt"


# The latency of each unit a dimension counts (its own duration), by the API's metric names.
OWN_LATENCY = {By.route: "e2e", By.agent: "agent", By.model: "model", By.tool: "tool", By.release: "e2e",
               By.prompt: "model"}  # fmt: skip
# Where the split is known: traces keep route, agent and release, not model, tool or prompt version.
SPLIT_BY = (By.route, By.agent, By.release)
PARTS = ("model", "tool", "orchestration")
LEVELS = ("p50", "p95", "p99")


def top(
    api: ApiOpt = DEFAULT_API,
    by: Annotated[
        By,
        typer.Option(
            "--by", help="One row per route, agent, model, tool, release (service.version) or prompt version."
        ),
    ] = By.route,
    window: Annotated[str, typer.Option("--window", help="Trailing window to read, e.g. 15m, 1h, 24h.")] = "1h",
    service: Annotated[str | None, typer.Option("--service", help="Only this service.")] = None,
    watch: Annotated[
        float, typer.Option("--watch", help="Refresh every this many seconds until Ctrl-C (0: print once).", min=0)
    ] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON, for scripts.")] = False,
) -> None:
    """Per route (or --by agent, model, tool, release, prompt): count, TTFT and latency at p50/p95/p99, and the
    split of E2E into model, tool and orchestration time (per route, agent and release)."""

    def once() -> dict[str, Any]:
        with ApiClient(api) as client:
            return summary(client, by, window, service)

    if as_json:
        run_or_exit(lambda: typer.echo(json.dumps(once(), indent=2)))
    elif not watch:
        run_or_exit(lambda: _console().print(table(once())))
    else:
        run_or_exit(lambda: _watch(once, watch))


def summary(client: ApiClient, by: By, window: str, service: str | None) -> dict[str, Any]:
    """The rows of ``top``: the dimension summary, with the split's means and shares where traces keep ``by``."""
    filters = {"window": window, "service": service}
    dims: DimensionsResponse = client.get("/api/v1/dimensions", dimension=by.value, **filters)  # type: ignore[assignment]
    split: dict[str, dict[str, Any]] = {}
    if by in SPLIT_BY:
        breakdown: BreakdownResponse = client.get("/api/v1/breakdown", group_by=by.value, **filters)  # type: ignore[assignment]
        split = {row.group[by.value]: _split(row) for row in breakdown.rows}
    own = OWN_LATENCY[by]
    rows = [
        {
            "name": row.name,
            "count": row.count,
            "errors": row.errors,
            "ttft_ms": _levels(row.metrics.get("ttft")),
            "latency_ms": _levels(row.metrics.get(own)),
            "split": split.get(row.name),
        }
        for row in dims.rows
    ]
    return {"by": by.value, "latency": own, "window": dims.window.model_dump(), "rows": rows}


def _levels(stats: Any) -> dict[str, float | None] | None:
    return None if stats is None else {level: getattr(stats, level) for level in LEVELS}


def _split(row: Any) -> dict[str, Any]:
    """Mean ms and share of each part over the traces whose split is known."""
    return {
        part: {"mean_ms": getattr(row, part).mean if getattr(row, part) else None, "share": getattr(row.share, part)}
        for part in PARTS
    }


def table(found: dict[str, Any]) -> Table:
    from rich.table import Table

    from agentlat.dashboard import fmt  # plain formatting helpers: no streamlit

    window = found["window"]
    title = f"agentlat top: per {found['by']}, {window['start']} to {window['end']}"
    grid = Table(title=title, title_justify="left", header_style="bold")
    grid.add_column(found["by"], overflow="fold")
    grid.add_column("count", justify="right")
    grid.add_column("errors", justify="right")
    for name in ("TTFT", found["latency"].upper() if found["latency"] == "e2e" else f"{found['latency']} time"):
        for level in LEVELS:
            grid.add_column(f"{name} {level}", justify="right")
    if found["by"] in SPLIT_BY:
        for part in PARTS:
            grid.add_column(part, justify="right")
    for row in found["rows"]:
        cells = [row["name"] or "(none)", fmt.count(row["count"]), fmt.count(row["errors"])]
        for key in ("ttft_ms", "latency_ms"):
            cells += [fmt.ms((row[key] or {}).get(level)) for level in LEVELS]
        if found["by"] in SPLIT_BY:
            split = row["split"] or {}
            cells += [fmt.share(split[part]["share"]) if part in split else fmt.DASH for part in PARTS]
        grid.add_row(*cells)
    if not found["rows"]:
        grid.caption = "nothing in this window yet: send spans, or widen --window"
    return grid


def _watch(once: Any, seconds: float) -> None:
    from rich.live import Live

    with Live(table(once()), console=_console(), auto_refresh=False) as live:
        while True:
            time.sleep(seconds)
            live.update(table(once()), refresh=True)


def _console() -> Any:
    from rich.console import Console

    return Console()
