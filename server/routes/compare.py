"""``GET /api/v1/compare``: two sides of one dimension on the same spans (release A vs B, model X vs Y, prompt
version 3 vs 4, before vs after an instant): TTFT, ITL and E2E at p50/p95/p99, the split's parts and each tool,
with the difference and its interval (store/compare.py): exact from the spans up to 7 days, from the rollups
beyond."""

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import CompareResponse, SideValuesResponse, VersionsResponse
from agentlat.api.windows import iso, parse_instant
from agentlat.server.routes.deps import (
    EXACT_WINDOW_MAX_NS,
    QUERY_ERRORS,
    Filter,
    StoreDep,
    require_rollup_filters,
    window_of,
)
from agentlat.shared.measures import DEFAULT_MIN_SAMPLES
from agentlat.store import COMPARE_DIMENSIONS, VERSION_DIMENSIONS, Sides, SpanFilter, Store, rollup_at

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)


@router.get(
    "/compare",
    summary="two releases, models, prompt versions, or before and after an instant, compared with intervals",
    response_model=CompareResponse,
)
async def compare(
    store: StoreDep,
    where: Filter,
    dimension: Annotated[str, Query(description=f"one of {list(COMPARE_DIMENSIONS)}")],
    a: Annotated[str, Query(description="side A's value (not for dimension=time)")] = "",
    b: Annotated[str, Query(description="side B's value (not for dimension=time)")] = "",
    at: Annotated[str, Query(description="dimension=time: the instant between the sides, inside the window")] = "",
) -> dict[str, Any]:
    sides = _sides(dimension, a, b, at, where.start_ns, where.end_ns)
    from_rollups = where.end_ns - where.start_ns > EXACT_WINDOW_MAX_NS
    if from_rollups:
        require_rollup_filters(where)
    if from_rollups and dimension == "time":  # the rollups split at whole minutes
        sides = replace(sides, at_ns=rollup_at(sides.at_ns))
        if sides.at_ns <= where.start_ns:
            raise HTTPException(400, f"at={at}: its minute starts before the window; choose a later instant")
    found = await run_in_threadpool(store.compare, sides, where, from_rollups)
    nearest = sides.at_ns if dimension == "time" else None
    began = [v for v in await run_in_threadpool(_versions, store, list(VERSION_DIMENSIONS), where, nearest) if v["new"]]
    return {
        "dimension": dimension,
        "a": a if dimension != "time" else f"before {iso(sides.at_ns)}",
        "b": b if dimension != "time" else f"from {iso(sides.at_ns)}",
        "at": iso(sides.at_ns) if dimension == "time" else None,
        "window": window_of(where),
        "filters": where.equals,
        "source": "rollups" if from_rollups else "spans",
        "unit": "ms",
        "min_samples": {**DEFAULT_MIN_SAMPLES, "mean": DEFAULT_MIN_SAMPLES["p50"]},
        "not_in_rollups": [],
        **found,
        "began": began,
    }


@router.get(
    "/versions",
    summary="releases, prompt versions and models seen in the window, with when each was first seen: deploy markers",
    response_model=VersionsResponse,
)
async def versions(
    store: StoreDep,
    where: Filter,
    dimension: Annotated[
        list[str], Query(description=f"any of {list(VERSION_DIMENSIONS)}, repeated or comma-separated")
    ] = ["release", "prompt"],  # noqa: B006
) -> dict[str, Any]:
    asked = list(dict.fromkeys(d.strip() for item in dimension for d in item.split(",") if d.strip()))
    if not asked or set(asked) - set(VERSION_DIMENSIONS):
        raise HTTPException(400, f"dimension={','.join(dimension)!r}: choose from {list(VERSION_DIMENSIONS)}")
    found = await run_in_threadpool(_versions, store, asked, where)
    return {"window": window_of(where), "filters": where.equals, "versions": found}


def _versions(
    store: Store, dimensions: list[str], where: SpanFilter, nearest_ns: int | None = None
) -> list[dict[str, Any]]:
    """The versions seen in the window, the first seen first (or, given ``nearest_ns``, the nearest to it first)."""
    rows = store.versions(dimensions, where)
    if nearest_ns is not None:
        rows.sort(key=lambda r: abs(r["first_ns"] - nearest_ns))  # stable: ties keep the store's order
    return [
        {"dimension": r["dimension"], "service": r["service"], "value": r["value"], "first_seen": iso(r["first_ns"]),
         "last_seen": iso(r["last_ns"]), "new": r["first_ns"] >= where.start_ns}
        for r in rows
    ]  # fmt: skip


@router.get(
    "/compare/values",
    summary="the releases, models or prompt versions seen in the window, with when each was first seen",
    response_model=SideValuesResponse,
)
async def side_values(
    store: StoreDep,
    where: Filter,
    dimension: Annotated[str, Query(description=f"one of {[d for d in COMPARE_DIMENSIONS if d != 'time']}")],
) -> dict[str, Any]:
    if dimension not in COMPARE_DIMENSIONS or dimension == "time":
        choices = [d for d in COMPARE_DIMENSIONS if d != "time"]
        raise HTTPException(400, f"dimension={dimension!r}: choose from {choices}")
    rows = await run_in_threadpool(store.side_values, dimension, where)
    values = [
        {"value": r["value"], "spans": r["spans"], "first_seen": iso(r["first_ns"]), "last_seen": iso(r["last_ns"])}
        for r in rows
    ]
    return {"dimension": dimension, "window": window_of(where), "filters": where.equals, "values": values}


def _sides(dimension: str, a: str, b: str, at: str, start_ns: int, end_ns: int) -> Sides:
    if dimension not in COMPARE_DIMENSIONS:
        raise HTTPException(400, f"dimension={dimension!r}: choose from {list(COMPARE_DIMENSIONS)}")
    if dimension == "time":
        if not at or a or b:
            raise HTTPException(400, "dimension=time compares before and after `at`: give at=, not a= or b=")
        at_ns = parse_instant(at, "at")
        if not start_ns < at_ns < end_ns:
            raise HTTPException(400, f"at={at}: must fall inside the window ({iso(start_ns)} to {iso(end_ns)})")
        return Sides(dimension, at_ns=at_ns)
    if not a or not b or a == b:
        raise HTTPException(400, f"dimension={dimension} compares two values: give a= and b=, different")
    return Sides(dimension, a, b)
