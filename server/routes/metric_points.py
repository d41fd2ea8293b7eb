"""``GET /api/v1/metric_points``: gen_ai.* metric data points received over OTLP, oldest first."""

import math
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import MetricPointsResponse
from agentlat.api.windows import iso, time_range
from agentlat.server.routes.deps import QUERY_ERRORS, InstantQuery, Project, StoreDep, WindowQuery

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)


@router.get(
    "/metric_points",
    summary="gen_ai.* metric data points received over OTLP (histograms with their buckets), oldest first",
    response_model=MetricPointsResponse,
)
async def metric_points(
    project: Project,
    store: StoreDep,
    name: Annotated[str | None, Query(max_length=255, description="e.g. gen_ai.client.operation.duration")] = None,
    service: Annotated[str | None, Query(max_length=255, description="the resource's service.name")] = None,
    window: WindowQuery = "1h",
    start: InstantQuery = None,
    end: InstantQuery = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> dict[str, Any]:
    start_ns, end_ns = time_range(time.time_ns(), window, start, end)
    rows = await run_in_threadpool(store.metric_points, project, start_ns, end_ns, name or None, service or None,
                                   limit)  # fmt: skip
    return {"window": {"start": iso(start_ns), "end": iso(end_ns)}, "points": [_point(row) for row in rows]}


def _finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity: such a value (OTLP allows them) reads as null."""
    return value if value is None or math.isfinite(value) else None


def _point(row: dict[str, Any]) -> dict[str, Any]:
    point = dict(row)
    point["time"] = iso(row["time_ns"])
    point["attributes"] = dict(row["attributes"])
    point["monotonic"] = bool(row["monotonic"])
    for key in ("sum", "min", "max", "value"):
        point[key] = _finite(row[key])
    point["explicit_bounds"] = [_finite(bound) for bound in row["explicit_bounds"]]
    return point
