"""``GET /api/v1/traces`` (recent or slowest traces) and ``GET /api/v1/traces/{trace_id}`` (every span of
one trace with its analysis and GenAI events)."""

import asyncio
import contextlib
import json
import re
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import TraceResponse, TracesResponse
from agentlat.api.windows import iso
from agentlat.server.routes.deps import QUERY_ERRORS, Filter, Project, StoreDep, errors, window_of
from agentlat.store import DERIVED_NAMES

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@router.get("/traces", summary="recent or slowest traces", response_model=TracesResponse)
async def traces(
    store: StoreDep,
    where: Filter,
    sort: Annotated[str, Query(pattern="^(recent|slowest)$")] = "recent",
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> dict[str, Any]:
    rows = await run_in_threadpool(store.traces, where, sort, limit)
    for row in rows:
        row["start"] = iso(row["start_ns"])
        row["duration_ms"] = row["duration_ns"] / 1e6
        row["has_root"] = bool(row["has_root"])
    return {"window": window_of(where), "traces": rows}


@router.get(
    "/traces/{trace_id}",
    summary="every span of one trace, and its GenAI events",
    response_model=TraceResponse,
    responses=errors(404),
)
async def trace(trace_id: str, project: Project, store: StoreDep) -> dict[str, Any]:
    trace_id = trace_id.lower()
    if not _HEX32.match(trace_id):
        raise HTTPException(400, "trace_id must be 32 hex characters")
    # The reads at once: the trace's analysis row and events need not wait for its spans.
    rows, analysis, events = await asyncio.gather(
        run_in_threadpool(store.trace_spans, project, trace_id),
        run_in_threadpool(store.trace_analysis, project, trace_id),
        run_in_threadpool(store.trace_events, project, trace_id),
    )
    if not rows:
        raise HTTPException(404, f"no spans for trace {trace_id} in this project")
    return {
        "trace_id": trace_id,
        "analysis": _analysis(analysis) if analysis else None,
        "spans": [_span(row) for row in rows],
        "events": [_event(row) for row in events],
    }


def _analysis(row: dict[str, Any]) -> dict[str, Any]:
    details = json.loads(row.pop("Details") or "{}")
    out = {_CAMEL.sub("_", k).lower(): v for k, v in row.items()}
    out["start"] = iso(out["start_ns"])
    out["partial"] = bool(out["partial"])
    out["segments"] = [
        {"span_id": sid, "start_ns": start, "end_ns": end, "category": cat, "phase": phase}
        for sid, start, end, cat, phase in details.get("segments", [])
    ]
    out["parallelisable"] = details.get("parallelisable", [])
    out["dispatched"] = details.get("dispatched", [])
    out["dispatch_groups"] = details.get("dispatch_groups", [])
    return out


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


def _event(row: dict[str, Any]) -> dict[str, Any]:
    """A GenAI event as the trace detail shows it; ``body`` parsed from its stored JSON unless it was cut."""
    event = dict(row)
    event["time"] = iso(row["time_ns"])
    event["attributes"] = dict(row["attributes"])
    text = row["body"]
    event["body"] = text or None
    if text and "truncated:body" not in row["ingest_flags"]:
        with contextlib.suppress(ValueError):  # else shown as stored
            event["body"] = json.loads(text, parse_constant=lambda constant: None)
    return event
