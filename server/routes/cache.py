"""``GET /api/v1/cache``: the prompt cache per route (or model, service, agent): hit rate, misses by reason and by
changed part, TTFT and input cost of hits and misses, and the hit rate and misses by reason over time."""

from typing import Annotated, Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import CacheResponse
from agentlat.api.windows import iso
from agentlat.server.routes.deps import (
    QUERY_ERRORS,
    Filter,
    RollupGroupBy,
    SourceRule,
    StoreDep,
    require_rollup_filters,
    source,
    window_of,
)
from agentlat.server.routes.timeseries import NS, StepQuery, step_seconds

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)

Source = Annotated[
    SourceRule, source("the groups exact from the spans, or from the rollups; auto: rollups for windows over 6h")
]


@router.get(
    "/cache",
    summary="the prompt cache: hit rate, why calls missed, TTFT and input cost of hits and misses",
    response_model=CacheResponse,
)
async def cache(
    store: StoreDep, where: Filter, dims: RollupGroupBy, rule: Source, step: StepQuery = "5m"
) -> dict[str, Any]:
    require_rollup_filters(where)  # the series reads the rollups whatever the source
    dims = dims or ["route"]
    seconds, use_rollups = step_seconds(step), rule.rollups()
    groups = await run_in_threadpool(store.cache_report, dims, where, use_rollups)
    series = await run_in_threadpool(store.cache_series, [], where, seconds)
    return {
        "source": SourceRule.name(use_rollups),
        "window": window_of(where),
        "filters": where.equals,
        "group_by": dims,
        "step_seconds": seconds,
        "groups": groups,
        "series": [{**point, "t": iso(point["t"] * NS)} for point in series],
    }
