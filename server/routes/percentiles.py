"""``GET /api/v1/percentiles``: count, p50, p95, p99 and mean of a latency metric, by any grouping; and
``GET /api/v1/samples``: the values themselves, what a comparison with a baseline bootstraps over."""

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import PercentilesResponse, SamplesResponse
from agentlat.server.routes.deps import (
    QUERY_ERRORS,
    Filter,
    GroupBy,
    SourceRule,
    StoreDep,
    require_exact_window,
    rollup_stats,
    source,
    window_of,
)
from agentlat.store import METRICS, SAMPLES_CAP

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)

Source = Annotated[
    SourceRule,
    source(
        "spans: exact, from raw spans; rollups: from the rollups, exact up to 128 values, t-digest beyond; "
        "auto: spans for windows up to 6 h, rollups beyond when the metric and dimensions allow"
    ),
]


@router.get(
    "/percentiles",
    summary="count, p50, p95, p99 and mean of one latency metric or several",
    response_model=PercentilesResponse,
)
async def percentiles(
    store: StoreDep,
    where: Filter,
    dims: GroupBy,
    rule: Source,
    metric: Annotated[
        str,
        Query(
            description=f"one of {sorted(METRICS)}, or several comma-separated (one read for all: e2e,ttft,itl); "
            "rollups are read when every metric asked for can be"
        ),
    ] = "e2e",
) -> dict[str, Any]:
    metrics = list(dict.fromkeys(m.strip() for m in metric.split(",") if m.strip()))  # each once, in order
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise HTTPException(400, f"metric={metric!r}: choose from {sorted(METRICS)}")
    use_rollups = all([rule.rollups(m, dims) for m in metrics])  # a list: every metric's check runs
    if use_rollups:
        found = await run_in_threadpool(store.rollup_percentiles, metrics, dims, where)
        rows = [{"metric": r["metric"], "group": {d: r[d] for d in dims}, **rollup_stats(r)} for r in found]
        rows.sort(key=lambda row: metrics.index(row["metric"]))  # stable: most counted first within a metric
    else:
        rows = []
        for name in metrics:
            exact = await run_in_threadpool(store.percentiles, name, dims, where)
            rows += [
                {"metric": name, "group": r.group, "count": r.count, "p50": r.p50, "p95": r.p95, "p99": r.p99,
                 "mean": r.mean}
                for r in exact
            ]  # fmt: skip
    described = (f"{m}: {METRICS[m].description}" for m in metrics)
    return {
        "metric": ",".join(metrics),
        "unit": "ms",
        "description": METRICS[metrics[0]].description if len(metrics) == 1 else "; ".join(described),
        "source": SourceRule.name(use_rollups),
        "window": window_of(where),
        "filters": where.equals,
        "group_by": dims,
        "rows": rows,
    }


@router.get(
    "/samples",
    summary="one latency metric's values per group, for comparing with a baseline",
    response_model=SamplesResponse,
)
async def samples(
    store: StoreDep,
    where: Filter,
    dims: GroupBy,
    metric: Annotated[str, Query(description=f"one of {sorted(METRICS)}")] = "e2e",
) -> dict[str, Any]:
    if metric not in METRICS:
        raise HTTPException(400, f"metric={metric!r}: choose from {sorted(METRICS)}")
    require_exact_window(where, "samples")
    rows = await run_in_threadpool(store.samples, metric, dims, where)
    return {
        "metric": metric,
        "unit": "ms",
        "window": window_of(where),
        "filters": where.equals,
        "group_by": dims,
        "cap": SAMPLES_CAP,
        "rows": rows,
    }
