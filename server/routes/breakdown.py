"""``GET /api/v1/breakdown``: the E2E split into model, tool and orchestration time, from the rollups, and
the split of the requests at p50, p95 and p99 from the analysed traces."""

import asyncio
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import BreakdownResponse
from agentlat.server.routes.deps import (
    QUERY_ERRORS,
    Filter,
    RollupGroupBy,
    StoreDep,
    require_rollup_filters,
    rollup_stats,
    window_of,
)
from agentlat.store import TRACE_DIMENSIONS

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)

SPLIT = {"e2e": "e2e", "model": "split_model", "tool": "split_tool", "orchestration": "split_orchestration"}


def _with_shares(entry: dict[str, Any]) -> dict[str, Any]:
    """Each part's share of the split: of the traces that hold their model calls (the parts of each add up to its
    E2E), so the shares add up to 1 though traces whose calls went elsewhere count in ``traces`` and E2E."""
    parts = ("model", "tool", "orchestration")
    whole = sum(entry[part]["mean"] or 0.0 for part in parts if part in entry)
    entry["traces"] = entry["e2e"]["count"]
    entry["share"] = {part: (entry[part]["mean"] / whole if part in entry and whole else 0.0) for part in parts}
    return entry


@router.get(
    "/breakdown",
    summary="E2E split into model, tool and orchestration time, by any grouping",
    response_model=BreakdownResponse,
    response_model_exclude_unset=True,  # a part the rollups lack is left out, not null
)
async def breakdown(store: StoreDep, where: Filter, dims: RollupGroupBy) -> dict[str, Any]:
    require_rollup_filters(where)
    split = run_in_threadpool(store.rollup_percentiles, list(SPLIT.values()), dims, where)
    if set(dims) | set(where.equals) <= set(TRACE_DIMENSIONS):  # the split at p50/p95/p99 needs trace rows
        found, tails = await asyncio.gather(split, run_in_threadpool(store.tail_split, dims, where))
    else:
        found, tails = await split, {}
    groups: dict[tuple, dict[str, Any]] = {}
    for row in found:
        key = tuple(row[d] for d in dims)
        entry = groups.setdefault(key, {"group": dict(zip(dims, key, strict=True))})
        part = next(name for name, metric in SPLIT.items() if metric == row["metric"])
        entry[part] = rollup_stats(row)
    for key, entry in groups.items():
        if key in tails:
            entry["at"] = tails[key]
    rows = [_with_shares(entry) for entry in groups.values() if "e2e" in entry]
    rows.sort(key=lambda r: -r["traces"])
    return {"window": window_of(where), "filters": where.equals, "group_by": dims, "unit": "ms", "rows": rows}
