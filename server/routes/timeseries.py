"""``GET /api/v1/timeseries``: p50/p95/p99 and count of a metric per interval, from the per-minute rollups."""

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import TimeseriesResponse
from agentlat.api.windows import iso, parse_duration
from agentlat.server.routes.deps import (
    QUERY_ERRORS,
    Filter,
    RollupGroupBy,
    StoreDep,
    require_rollup_filters,
    rollup_stats,
    window_of,
)
from agentlat.store import ROLLUP_METRICS

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)

NS = 1_000_000_000


def step_seconds(step: str) -> int:
    seconds = parse_duration(step, "step", example="1m, 5m, 1h")
    if seconds % 60:
        raise HTTPException(400, f"step={step!r}: rollups are per minute; use whole minutes")
    return seconds


@router.get(
    "/timeseries",
    summary="p50/p95/p99 of a metric per interval, from the per-minute rollups",
    response_model=TimeseriesResponse,
)
async def timeseries(
    store: StoreDep,
    where: Filter,
    dims: RollupGroupBy,
    metric: Annotated[str, Query(description=f"one of {list(ROLLUP_METRICS)}")] = "e2e",
    step: Annotated[str, Query(description="interval, e.g. 1m, 5m, 1h")] = "5m",
) -> dict[str, Any]:
    if metric not in ROLLUP_METRICS:
        raise HTTPException(400, f"metric={metric!r}: choose from {list(ROLLUP_METRICS)}")
    require_rollup_filters(where)
    seconds = step_seconds(step)
    found = await run_in_threadpool(store.timeseries, metric, dims, where, seconds)
    series: dict[tuple, dict[str, Any]] = {}
    for row in found:
        key = tuple(row[d] for d in dims)
        entry = series.setdefault(key, {"group": dict(zip(dims, key, strict=True)), "points": []})
        entry["points"].append({"t": iso(row["t"] * NS), **rollup_stats(row)})
    return {
        "metric": metric,
        "unit": "ms",
        "step_seconds": seconds,
        "window": window_of(where),
        "filters": where.equals,
        "group_by": dims,
        "series": list(series.values()),
    }
