"""``GET /api/v1/budgets``: the budgets file judged against the store, for the dashboard.

The dashboard may only read the query API, so the server evaluates the same file the CI
check and the pytest plugin read, and also returns the file's thresholds for colouring
latencies. The file is validated at start-up (``watch_budgets``: a broken file stops the
server) and re-read when it changes on disk.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import BudgetsResponse
from agentlat.api.windows import iso, parse_duration, trailing
from agentlat.budgets.model import (
    RATIO_METRICS,
    BudgetError,
    Budgets,
    Measurements,
    Share,
    Stats,
    evaluate,
    load_budgets,
    report_dict,
)
from agentlat.server.routes.deps import QUERY_ERRORS, Project, StoreDep, errors
from agentlat.shared.yamlfile import WatchedFile
from agentlat.store import SpanFilter, Store

router = APIRouter(prefix="/api/v1", tags=["budgets"], responses={**QUERY_ERRORS, **errors(404)})

NOT_CONFIGURED = (
    "no budgets file is configured: start the server with `agentlat serve --budgets budgets.yaml` "
    "(or set AGENTLAT_BUDGETS); `agentlat budget init` writes a starter file"
)


def watch_budgets(path: Path | None) -> WatchedFile[Budgets] | None:
    """The budgets file to serve, validated now (raising ``BudgetError``); None without a path."""
    return WatchedFile(path, load_budgets) if path is not None else None


async def budgets_file(request: Request) -> WatchedFile[Budgets] | None:
    return request.app.state.budgets


def current_budgets(source: WatchedFile[Budgets]) -> Budgets:
    """The budgets file as it is now; raises ``BudgetError`` while it does not parse."""
    source.changed()
    if source.error is not None:
        raise source.error
    return source.value


def measure(store: Store, budgets: Budgets, where: SpanFilter) -> Measurements:
    """Percentiles per route or agent of every latency the file budgets, and its hit rates (all kept in
    rollups): exact from the spans, or from the rollups for windows over 6 h, as ``/api/v1/percentiles``
    and ``/api/v1/cache`` answer (which ``agentlat budget check`` reads)."""
    metrics_of: dict[str, list[str]] = {}
    ratios: list[tuple[str, str]] = []
    for dimension, metric in budgets.queries():
        if metric in RATIO_METRICS:
            ratios.append((dimension, metric))
        else:
            metrics_of.setdefault(dimension, []).append(metric)
    measured: dict[tuple[str, str], dict[str, Stats | Share]] = {}
    with ThreadPoolExecutor(4, thread_name_prefix="agentlat-budgets") as pool:
        hit_rates = [
            pool.submit(store.cache_report, [dimension], where, where.reads_rollups) for dimension, _ in ratios
        ]
        if where.reads_rollups:
            for dimension, metrics in metrics_of.items():
                for row in store.rollup_percentiles(metrics, [dimension], where):
                    p50, p95, p99 = row["q"]
                    stats = Stats(row["count"], p50, p95, p99)
                    measured.setdefault((dimension, row["metric"]), {})[row[dimension]] = stats
        else:
            pairs = [(dimension, metric) for dimension, metrics in metrics_of.items() for metric in metrics]
            found = pool.map(lambda pair: store.percentiles(pair[1], [pair[0]], where), pairs)
            for (dimension, metric), rows in zip(pairs, found, strict=True):
                measured[(dimension, metric)] = {r.group[dimension]: Stats(r.count, r.p50, r.p95, r.p99) for r in rows}
        for (dimension, metric), groups in zip(ratios, hit_rates, strict=True):
            measured[(dimension, metric)] = {
                g["group"][dimension]: Share(g["calls"], g["hit_rate"]) for g in groups.result()
            }
    return measured


def _report(store: Store, budgets: Budgets, where: SpanFilter, span: dict[str, str]) -> dict[str, Any]:
    return report_dict(budgets, evaluate(budgets, measure(store, budgets, where)), span)


@router.get(
    "/budgets",
    summary="each route and agent's p50/p95/p99 against the budgets file",
    response_model=BudgetsResponse,
)
async def budgets(
    project: Project,
    store: StoreDep,
    source: Annotated[WatchedFile[Budgets] | None, Depends(budgets_file)],
    window: Annotated[str, Query(description="trailing window, e.g. 15m, 1h, 24h, 7d")] = "1h",
) -> dict[str, Any]:
    if source is None:
        raise HTTPException(404, NOT_CONFIGURED)
    start_ns, end_ns = trailing(time.time_ns(), parse_duration(window, "window"))
    try:
        current = await run_in_threadpool(current_budgets, source)
    except BudgetError as exc:
        raise HTTPException(500, f"{exc} (the server re-reads the file when it changes)") from None
    where = SpanFilter(project, start_ns, end_ns, {"service": current.service} if current.service else {})
    span = {"length": window, "start": iso(start_ns), "end": iso(end_ns)}
    return await run_in_threadpool(_report, store, current, where, span)
