"""``GET /api/v1/groups``: the groups that served requests in a window, with their counts (no percentiles)."""

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import GroupsResponse
from agentlat.server.routes.deps import (
    QUERY_ERRORS,
    Filter,
    StoreDep,
    group_by,
    require_rollup_filters,
    window_of,
)
from agentlat.store import ROLLUP_DIMENSIONS

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)

GroupBy = Annotated[
    list[str], group_by(ROLLUP_DIMENSIONS, f"one or more of {list(ROLLUP_DIMENSIONS)}", default=("service",))
]


@router.get(
    "/groups",
    summary="the groups that served requests in a window, with their counts (cheap: no percentiles)",
    response_model=GroupsResponse,
)
async def groups(store: StoreDep, where: Filter, dims: GroupBy) -> dict[str, Any]:
    if not dims:
        raise HTTPException(400, f"group_by: give one or more of {list(ROLLUP_DIMENSIONS)}")
    require_rollup_filters(where)
    found = await run_in_threadpool(store.rollup_groups, dims, where)
    rows = [{"group": {d: row[d] for d in dims}, "count": row["count"]} for row in found]
    return {"window": window_of(where), "filters": where.equals, "group_by": dims, "rows": rows}
