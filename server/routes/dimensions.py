"""``GET /api/v1/dimensions``: per route, agent, model, tool, release or prompt version, counts, percentiles,
cache hits, speculation and errors (the dashboard's routes and models table)."""

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import DimensionsResponse
from agentlat.server.routes.deps import QUERY_ERRORS, Filter, SourceRule, StoreDep, source, window_of
from agentlat.store import DIMENSION_METRICS

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)


def _rows(found: list[dict[str, Any]], metrics: list[str]) -> list[dict[str, Any]]:
    """Shape ``Store.dimension_summary`` rows (a value without samples of a metric has no percentiles)."""
    rows = []
    for row in found:
        stats = {}
        for m in metrics:
            count, q = row[f"{m}_count"], row[f"{m}_q"]
            p50, p95, p99 = q if count and q else (None, None, None)
            stats[m] = {"count": count, "p50": p50, "p95": p95, "p99": p99}
        rows.append(
            {
                **({"service": row["service"]} if "service" in row else {}),
                "name": row["name"],
                "count": row["count"],
                "errors": row["errors"],
                "error_rate": row["errors"] / row["count"] if row["count"] else None,
                "cache_hit_rate": row["cache_hit_rate"],
                "spec_acceptance": row["spec_acceptance"],
                "metrics": stats,
            }
        )
    return rows


@router.get(
    "/dimensions",
    summary="per route, agent, model, tool, release or prompt version: percentiles, cache hits, speculation, errors",
    response_model=DimensionsResponse,
    response_model_exclude_unset=True,  # a row's service only with group_by=service
)
async def dimensions(
    store: StoreDep,
    where: Filter,
    rule: Annotated[SourceRule, source("where percentiles come from, as for /percentiles")],
    dimension: Annotated[str, Query(description=f"one of {list(DIMENSION_METRICS)}")] = "route",
    group_by: Annotated[
        str, Query(description="'service': one row per service and value (a route two services serve is two rows)")
    ] = "",
) -> dict[str, Any]:
    if dimension not in DIMENSION_METRICS:
        raise HTTPException(400, f"dimension={dimension!r}: choose from {list(DIMENSION_METRICS)}")
    if group_by not in ("", "service"):
        raise HTTPException(400, f"group_by={group_by!r}: give 'service' or nothing")
    metrics, keys = list(DIMENSION_METRICS[dimension]), ["service"] if group_by else []
    use_rollups = all(rule.rollups(m, [*keys, dimension]) for m in metrics)
    found = await run_in_threadpool(store.dimension_summary, dimension, where, use_rollups, bool(keys))
    return {
        "dimension": dimension,
        "group_by": keys,
        "unit": "ms",
        "source": SourceRule.name(use_rollups),
        "window": window_of(where),
        "filters": where.equals,
        "metrics": metrics,
        "rows": _rows(found, metrics),
    }
