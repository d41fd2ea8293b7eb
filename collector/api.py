"""The query API (``/api/v1``): what the dashboard, the CI budget check and alerts read.

Every route is scoped to the caller's project and reads through ``agentlat.store``; no SQL
is written here.
"""

import re
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from agentlat.store import DIMENSIONS, METRICS, SpanFilter, Store
from agentlat.store.schema import DERIVED_NAMES

NS = 1_000_000_000
_WINDOW = re.compile(r"^(\d+)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
MAX_WINDOW_DAYS = 400


def parse_window(now_ns: int, window: str, start: str | None, end: str | None) -> tuple[int, int]:
    """A time range from ``start``/``end`` (ISO-8601 or unix seconds) or a trailing ``window``."""
    end_ns = _parse_instant(end, "end") if end else now_ns
    if start:
        start_ns = _parse_instant(start, "start")
    else:
        match = _WINDOW.match(window.strip())
        if not match:
            raise HTTPException(400, f"window={window!r}: expected a number and a unit s|m|h|d, e.g. 15m, 24h, 7d")
        seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        if seconds > MAX_WINDOW_DAYS * 86400:
            raise HTTPException(400, f"window={window!r} is longer than {MAX_WINDOW_DAYS} days")
        start_ns = end_ns - seconds * NS
    if start_ns >= end_ns:
        raise HTTPException(400, "start must be before end")
    return start_ns, end_ns


def _parse_instant(value: str, name: str) -> int:
    try:
        return int(float(value) * NS)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(
            400, f"{name}={value!r}: expected ISO-8601 (2026-11-29T12:00:00Z) or unix seconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * NS)


def iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / NS, tz=UTC).isoformat().replace("+00:00", "Z")


def _filters(request: Request) -> dict[str, str]:
    return {d: v for d in DIMENSIONS if (v := request.query_params.get(d)) not in (None, "")}


def _group_by(raw: list[str]) -> list[str]:
    names = [part.strip() for item in raw for part in item.split(",") if part.strip()]
    unknown = [n for n in names if n not in DIMENSIONS]
    if unknown:
        raise HTTPException(400, f"group_by {unknown}: choose from {sorted(DIMENSIONS)}")
    return list(dict.fromkeys(names))


def make_router(store: Store, project_of) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["query"])
    Project = Annotated[str, Depends(project_of)]
    Window = Annotated[str, Query(description="trailing window, e.g. 15m, 1h, 24h, 7d")]
    Instant = Annotated[str | None, Query(description="ISO-8601 or unix seconds; overrides window")]

    def span_filter(
        request: Request,
        project: Project,
        window: Window = "1h",
        start: Instant = None,
        end: Instant = None,
    ) -> SpanFilter:
        start_ns, end_ns = parse_window(time.time_ns(), window, start, end)
        return SpanFilter(project, start_ns, end_ns, _filters(request))

    Filter = Annotated[SpanFilter, Depends(span_filter)]

    @router.get("/percentiles", summary="count, p50, p95, p99 and mean of a latency metric")
    async def percentiles(
        where: Filter,
        metric: Annotated[str, Query(description=f"one of {sorted(METRICS)}")] = "e2e",
        group_by: Annotated[list[str], Query(description=f"any of {sorted(DIMENSIONS)}")] = [],  # noqa: B006
    ) -> dict[str, Any]:
        if metric not in METRICS:
            raise HTTPException(400, f"metric={metric!r}: choose from {sorted(METRICS)}")
        dims = _group_by(group_by)
        rows = await run_in_threadpool(store.percentiles, metric, dims, where)
        return {
            "metric": metric,
            "unit": "ms",
            "description": METRICS[metric].description,
            "window": {"start": iso(where.start_ns), "end": iso(where.end_ns)},
            "filters": where.equals,
            "group_by": dims,
            "rows": [
                {
                    "group": r.group,
                    "count": r.count,
                    "p50": r.p50,
                    "p95": r.p95,
                    "p99": r.p99,
                    "mean": r.mean,
                }
                for r in rows
            ],
        }

    @router.get("/traces", summary="recent or slowest traces")
    async def traces(
        where: Filter,
        sort: Annotated[str, Query(pattern="^(recent|slowest)$")] = "recent",
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    ) -> dict[str, Any]:
        rows = await run_in_threadpool(store.traces, where, sort, limit)
        for row in rows:
            row["start"] = iso(row["start_ns"])
            row["duration_ms"] = row["duration_ns"] / 1e6
            row["has_root"] = bool(row["has_root"])
        return {"window": {"start": iso(where.start_ns), "end": iso(where.end_ns)}, "traces": rows}

    @router.get("/traces/{trace_id}", summary="every span of one trace")
    async def trace(trace_id: str, project: Project) -> dict[str, Any]:
        trace_id = trace_id.lower()
        if not _HEX32.match(trace_id):
            raise HTTPException(400, "trace_id must be 32 hex characters")
        rows = await run_in_threadpool(store.trace_spans, project, trace_id)
        if not rows:
            raise HTTPException(404, f"no spans for trace {trace_id} in this project")
        return {"trace_id": trace_id, "spans": [_span(row) for row in rows]}

    return router


def _span(row: dict[str, Any]) -> dict[str, Any]:
    span = {k: v for k, v in row.items() if k not in DERIVED_NAMES}
    span["attributes"] = dict(row["attributes"])
    span["resource"] = dict(row["resource"])
    span["start"] = iso(row["start_ns"])
    span["duration_ms"] = row["duration_ns"] / 1e6
    span["events"] = [
        {"name": name, "time_ns": t, "attributes": dict(attrs)}
        for name, t, attrs in zip(
            span.pop("event_names"),
            span.pop("event_times_ns"),
            span.pop("event_attributes"),
            strict=True,
        )
    ]
    span["derived"] = {name: row[name] for name in DERIVED_NAMES}
    return span
