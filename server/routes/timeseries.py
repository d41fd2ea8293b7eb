"""``GET /api/v1/timeseries`` (p50/p95/p99 and count of a metric per interval) and ``GET /api/v1/heatmap``
(its distribution per interval over fixed latency buckets), from the per-minute rollups."""

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import HeatmapResponse, TimeseriesResponse
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
from agentlat.store import LATENCY_EDGES_MS, ROLLUP_METRICS, HeatmapColumn, SpanFilter

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)

NS = 1_000_000_000


MetricQuery = Annotated[str, Query(description=f"one of {list(ROLLUP_METRICS)}")]
StepQuery = Annotated[str, Query(description="interval, e.g. 1m, 5m, 1h")]


def checked_metric(metric: str) -> str:
    if metric not in ROLLUP_METRICS:
        raise HTTPException(400, f"metric={metric!r}: choose from {list(ROLLUP_METRICS)}")
    return metric


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
    metric: MetricQuery = "e2e",
    step: StepQuery = "5m",
) -> dict[str, Any]:
    require_rollup_filters(where)
    seconds = step_seconds(step)
    found = await run_in_threadpool(store.timeseries, checked_metric(metric), dims, where, seconds)
    series: dict[tuple, dict[str, Any]] = {}
    for row in found:
        key = tuple(row[d] for d in dims)
        entry = series.setdefault(key, {"group": dict(zip(dims, key, strict=True)), "points": []})
        entry["points"].append({"t": iso(row["t"] * NS), **rollup_stats(row)})
    return {**_head(metric, seconds, where), "group_by": dims, "series": list(series.values())}


@router.get(
    "/heatmap",
    summary="how many values of a metric fell in each latency bucket, per interval, from the per-minute rollups",
    response_model=HeatmapResponse,
)
async def heatmap(
    store: StoreDep, where: Filter, metric: MetricQuery = "e2e", step: StepQuery = "5m"
) -> dict[str, Any]:
    require_rollup_filters(where)
    seconds = step_seconds(step)
    columns = await run_in_threadpool(store.latency_heatmap, checked_metric(metric), where, seconds)
    return {**_head(metric, seconds, where), **heatmap_grid(columns)}


def _head(metric: str, seconds: int, where: SpanFilter) -> dict[str, Any]:
    """What an answer over time says about itself: the metric, its unit, the step, the window and filters."""
    window, filters = window_of(where), where.equals
    return {"metric": metric, "unit": "ms", "step_seconds": seconds, "window": window, "filters": filters}


def heatmap_grid(columns: list[HeatmapColumn]) -> dict[str, Any]:
    """The buckets from the lowest to the highest that any column fills, and each column's counts in them."""
    filled = [i for i in range(len(LATENCY_EDGES_MS)) if any(column.counts[i] for column in columns)]
    if not filled:
        return {"buckets": [], "columns": []}
    low, high = filled[0], filled[-1] + 1
    uppers = [*LATENCY_EDGES_MS[1:], None]
    return {
        "buckets": [{"lower_ms": LATENCY_EDGES_MS[i], "upper_ms": uppers[i]} for i in range(low, high)],
        "columns": [
            {"t": iso(c.t * NS), "count": c.count, "exact": c.exact, "counts": c.counts[low:high]} for c in columns
        ],
    }
