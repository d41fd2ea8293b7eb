"""The query API (``/api/v1``): what the dashboard, the CI budget check and alerts read.

Every route is scoped to the caller's project and reads through ``agentlat.store``; no SQL
is written here.
"""

import asyncio
import contextlib
import json
import math
import re
import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from agentlat.collector.advisor import advise, route_evidence
from agentlat.store import (
    ACCEPTED_TIMES,
    DIMENSION_METRICS,
    DIMENSIONS,
    METRICS,
    ROLLUP_DIMENSIONS,
    ROLLUP_METRICS,
    SpanFilter,
    Store,
    iso,
    parse_duration,
    time_range,
)
from agentlat.store.schema import DERIVED_NAMES

NS = 1_000_000_000
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
SPLIT = {"e2e": "e2e", "model": "split_model", "tool": "split_tool", "orchestration": "split_orchestration"}


def _filters(request: Request) -> dict[str, str]:
    return {d: v for d in DIMENSIONS if (v := request.query_params.get(d)) not in (None, "")}


def _group_by(raw: list[str], allowed: Sequence[str] = tuple(DIMENSIONS)) -> list[str]:
    names = [part.strip() for item in raw for part in item.split(",") if part.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise HTTPException(400, f"group_by {unknown}: choose from {sorted(allowed)}")
    return list(dict.fromkeys(names))


def _require_rollup_filters(where: SpanFilter) -> None:
    extra = sorted(set(where.equals) - set(ROLLUP_DIMENSIONS))
    if extra:
        raise HTTPException(400, f"filters {extra} are not kept in rollups; filter by {list(ROLLUP_DIMENSIONS)}")


def _use_rollups(source: str, metric: str, dims: list[str], where: SpanFilter) -> bool:
    possible = metric in ROLLUP_METRICS and set(dims) | set(where.equals) <= set(ROLLUP_DIMENSIONS)
    if source == "rollups" and not possible:
        raise HTTPException(400, f"metric {metric!r} with these dimensions is not kept in rollups; use source=spans")
    if source == "auto":
        return possible and where.reads_rollups
    return source == "rollups"


def _source_query(description: str) -> Any:
    """The ``source`` parameter of the endpoints that can read spans or rollups."""
    return Query(pattern="^(auto|spans|rollups)$", description=description)


def _step_seconds(step: str) -> int:
    seconds = parse_duration(step, "step", example="1m, 5m, 1h")
    if seconds % 60:
        raise HTTPException(400, f"step={step!r}: rollups are per minute; use whole minutes")
    return seconds


def _window(where: SpanFilter) -> dict[str, str]:
    return {"start": iso(where.start_ns), "end": iso(where.end_ns)}


def _stats(row: dict[str, Any]) -> dict[str, Any]:
    """Count, percentiles and (when the query has it) mean of a rollup row."""
    p50, p95, p99 = row["q"]
    stats = {"count": row["count"], "p50": p50, "p95": p95, "p99": p99}
    if "mean" in row:
        stats["mean"] = row["mean"]
    return stats


def _with_shares(entry: dict[str, Any]) -> dict[str, Any]:
    """Means of the parts add up to the mean E2E (each trace's parts add up to its E2E)."""
    mean_e2e = entry["e2e"]["mean"] or 0.0
    entry["traces"] = entry["e2e"]["count"]
    entry["share"] = {
        part: (entry[part]["mean"] / mean_e2e if part in entry and mean_e2e else 0.0)
        for part in ("model", "tool", "orchestration")
    }
    return entry


def _analysis(row: dict[str, Any]) -> dict[str, Any]:
    details = json.loads(row.pop("Details") or "{}")
    out = {_snake(k): v for k, v in row.items()}
    out["start"] = iso(out["start_ns"])
    out["partial"] = bool(out["partial"])
    out["segments"] = [
        {"span_id": sid, "start_ns": start, "end_ns": end, "category": cat, "phase": phase}
        for sid, start, end, cat, phase in details.get("segments", [])
    ]
    out["parallelisable"] = details.get("parallelisable", [])
    return out


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def make_router(store: Store, project_of) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["query"])
    Project = Annotated[str, Depends(project_of)]
    Window = Annotated[str, Query(description="trailing window, e.g. 15m, 1h, 24h, 7d (at most 400d)")]
    Instant = Annotated[str | None, Query(description=f"{ACCEPTED_TIMES}; overrides window")]

    def span_filter(
        request: Request,
        project: Project,
        window: Window = "1h",
        start: Instant = None,
        end: Instant = None,
    ) -> SpanFilter:
        start_ns, end_ns = time_range(time.time_ns(), window, start, end)
        return SpanFilter(project, start_ns, end_ns, _filters(request))

    Filter = Annotated[SpanFilter, Depends(span_filter)]

    @router.get("/percentiles", summary="count, p50, p95, p99 and mean of a latency metric")
    async def percentiles(
        where: Filter,
        metric: Annotated[str, Query(description=f"one of {sorted(METRICS)}")] = "e2e",
        group_by: Annotated[list[str], Query(description=f"any of {sorted(DIMENSIONS)}")] = [],  # noqa: B006
        source: Annotated[
            str,
            _source_query(
                "spans: exact, from raw spans; rollups: from the rollups, exact up to 128 values, t-digest beyond; "
                "auto: spans for windows up to 6 h, rollups beyond when the metric and dimensions allow"
            ),
        ] = "auto",
    ) -> dict[str, Any]:
        if metric not in METRICS:
            raise HTTPException(400, f"metric={metric!r}: choose from {sorted(METRICS)}")
        dims = _group_by(group_by)
        use_rollups = _use_rollups(source, metric, dims, where)
        if use_rollups:
            found = await run_in_threadpool(store.rollup_percentiles, [metric], dims, where)
            rows = [{"group": {d: r[d] for d in dims}, **_stats(r)} for r in found]
        else:
            exact = await run_in_threadpool(store.percentiles, metric, dims, where)
            rows = [
                {"group": r.group, "count": r.count, "p50": r.p50, "p95": r.p95, "p99": r.p99, "mean": r.mean}
                for r in exact
            ]
        return {
            "metric": metric,
            "unit": "ms",
            "description": METRICS[metric].description,
            "source": "rollups" if use_rollups else "spans",
            "window": _window(where),
            "filters": where.equals,
            "group_by": dims,
            "rows": rows,
        }

    @router.get("/breakdown", summary="E2E split into model, tool and orchestration time, by any grouping")
    async def breakdown(
        where: Filter,
        group_by: Annotated[list[str], Query(description=f"any of {list(ROLLUP_DIMENSIONS)}")] = [],  # noqa: B006
    ) -> dict[str, Any]:
        dims = _group_by(group_by, ROLLUP_DIMENSIONS)
        _require_rollup_filters(where)
        found = await run_in_threadpool(store.rollup_percentiles, list(SPLIT.values()), dims, where)
        groups: dict[tuple, dict[str, Any]] = {}
        for row in found:
            key = tuple(row[d] for d in dims)
            entry = groups.setdefault(key, {"group": dict(zip(dims, key, strict=True))})
            part = next(name for name, metric in SPLIT.items() if metric == row["metric"])
            entry[part] = _stats(row)
        rows = [_with_shares(entry) for entry in groups.values() if "e2e" in entry]
        rows.sort(key=lambda r: -r["traces"])
        return {"window": _window(where), "filters": where.equals, "group_by": dims, "unit": "ms", "rows": rows}

    @router.get(
        "/groups", summary="the groups that served requests in a window, with their counts (cheap: no percentiles)"
    )
    async def groups(
        where: Filter,
        group_by: Annotated[list[str], Query(description=f"one or more of {list(ROLLUP_DIMENSIONS)}")] = ["service"],  # noqa: B006
    ) -> dict[str, Any]:
        dims = _group_by(group_by, ROLLUP_DIMENSIONS)
        if not dims:
            raise HTTPException(400, f"group_by: give one or more of {list(ROLLUP_DIMENSIONS)}")
        _require_rollup_filters(where)
        found = await run_in_threadpool(store.rollup_groups, dims, where)
        rows = [{"group": {d: row[d] for d in dims}, "count": row["count"]} for row in found]
        return {"window": _window(where), "filters": where.equals, "group_by": dims, "rows": rows}

    @router.get("/timeseries", summary="p50/p95/p99 of a metric per interval, from the per-minute rollups")
    async def timeseries(
        where: Filter,
        metric: Annotated[str, Query(description=f"one of {list(ROLLUP_METRICS)}")] = "e2e",
        step: Annotated[str, Query(description="interval, e.g. 1m, 5m, 1h")] = "5m",
        group_by: Annotated[list[str], Query(description=f"any of {list(ROLLUP_DIMENSIONS)}")] = [],  # noqa: B006
    ) -> dict[str, Any]:
        if metric not in ROLLUP_METRICS:
            raise HTTPException(400, f"metric={metric!r}: choose from {list(ROLLUP_METRICS)}")
        dims = _group_by(group_by, ROLLUP_DIMENSIONS)
        _require_rollup_filters(where)
        step_seconds = _step_seconds(step)
        found = await run_in_threadpool(store.timeseries, metric, dims, where, step_seconds)
        series: dict[tuple, dict[str, Any]] = {}
        for row in found:
            key = tuple(row[d] for d in dims)
            entry = series.setdefault(key, {"group": dict(zip(dims, key, strict=True)), "points": []})
            entry["points"].append({"t": iso(row["t"] * NS), **_stats(row)})
        return {
            "metric": metric,
            "unit": "ms",
            "step_seconds": step_seconds,
            "window": _window(where),
            "filters": where.equals,
            "group_by": dims,
            "series": list(series.values()),
        }

    @router.get("/dimensions", summary="per route, agent, model or tool: percentiles, cache hits, speculation, errors")
    async def dimensions(
        where: Filter,
        dimension: Annotated[str, Query(description=f"one of {list(DIMENSION_METRICS)}")] = "route",
        source: Annotated[str, _source_query("where percentiles come from, as for /percentiles")] = "auto",
    ) -> dict[str, Any]:
        if dimension not in DIMENSION_METRICS:
            raise HTTPException(400, f"dimension={dimension!r}: choose from {list(DIMENSION_METRICS)}")
        metrics = list(DIMENSION_METRICS[dimension])
        use_rollups = all(_use_rollups(source, m, [dimension], where) for m in metrics)
        found = await run_in_threadpool(store.dimension_summary, dimension, where, use_rollups)
        return {
            "dimension": dimension,
            "unit": "ms",
            "source": "rollups" if use_rollups else "spans",
            "window": _window(where),
            "filters": where.equals,
            "metrics": metrics,
            "rows": _dimension_rows(found, metrics),
        }

    @router.get("/advice", summary="which latency lever each route should pull, ranked by expected saving")
    async def advice(
        where: Filter,
        route: str | None = None,
        source: Annotated[
            str,
            _source_query(
                "evidence exact from the spans, or from the rollups (medians estimated); "
                "auto: rollups for windows over 6h"
            ),
        ] = "auto",
    ) -> dict[str, Any]:
        use_rollups = source == "rollups" or (source == "auto" and where.reads_rollups)
        evidence = await run_in_threadpool(store.advice_evidence, where, use_rollups)
        findings = advise([route_evidence(name, facts) for name, facts in evidence.items()])
        return {
            "source": "rollups" if use_rollups else "spans",
            "window": _window(where),
            "findings": [f.as_dict() for f in findings if route in (None, "", f.route)],
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
        return {"window": _window(where), "traces": rows}

    @router.get("/traces/{trace_id}", summary="every span of one trace, and its GenAI events")
    async def trace(trace_id: str, project: Project) -> dict[str, Any]:
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

    @router.get(
        "/metric_points",
        summary="gen_ai.* metric data points received over OTLP (histograms with their buckets), oldest first",
    )
    async def metric_points(
        project: Project,
        name: Annotated[str | None, Query(max_length=255, description="e.g. gen_ai.client.operation.duration")] = None,
        service: Annotated[str | None, Query(max_length=255, description="the resource's service.name")] = None,
        window: Window = "1h",
        start: Instant = None,
        end: Instant = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> dict[str, Any]:
        start_ns, end_ns = time_range(time.time_ns(), window, start, end)
        rows = await run_in_threadpool(store.metric_points, project, start_ns, end_ns, name or None, service or None,
                                       limit)  # fmt: skip
        return {"window": {"start": iso(start_ns), "end": iso(end_ns)}, "points": [_point(row) for row in rows]}

    return router


def _dimension_rows(found: list[dict[str, Any]], metrics: list[str]) -> list[dict[str, Any]]:
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


def _finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity: such a value (OTLP allows them) reads as null."""
    return value if value is None or math.isfinite(value) else None


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


def _point(row: dict[str, Any]) -> dict[str, Any]:
    point = dict(row)
    point["time"] = iso(row["time_ns"])
    point["attributes"] = dict(row["attributes"])
    point["monotonic"] = bool(row["monotonic"])
    for key in ("sum", "min", "max", "value"):
        point[key] = _finite(row[key])
    point["explicit_bounds"] = [_finite(bound) for bound in row["explicit_bounds"]]
    return point


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
