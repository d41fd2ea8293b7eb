"""Request plumbing the query API's routers share, as FastAPI dependencies.

``create_app`` keeps the per-app objects on ``app.state`` (the store, the authenticator, the
budgets file, the alert service); a route receives them through ``Depends``, so every router
is a plain module-level object. Also here: the caller and its project, the span filter built
from ``window``/``start``/``end`` and the dimension filters, ``group_by`` parsing, and the
``source`` rule (raw spans or rollups), and the parts of answers several routes build alike.
Dependencies that do not block are ``async``, sparing each request a trip through the thread pool.
"""

import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Query, Request

from agentlat.api.models import ErrorResponse
from agentlat.api.windows import ACCEPTED_TIMES, iso, time_range
from agentlat.server.api_guard import known_caller
from agentlat.server.auth import Authenticator, Caller
from agentlat.store import DIMENSIONS, ROLLUP_DIMENSIONS, ROLLUP_METRICS, SpanFilter, Store

# --- per-app objects ---------------------------------------------------------------------


async def get_store(request: Request) -> Store:
    return request.app.state.store


def get_authenticator(request: Request) -> Authenticator:
    return request.app.state.authenticator


StoreDep = Annotated[Store, Depends(get_store)]
AuthenticatorDep = Annotated[Authenticator, Depends(get_authenticator)]


# --- who is calling ----------------------------------------------------------------------


def caller_of(request: Request) -> Caller:
    """The caller the API guard authenticated, else the one the request's key names."""
    if (known := known_caller(request)) is not None:
        return known
    hint = request.headers.get("x-agentlat-project") or request.query_params.get("project")
    return get_authenticator(request).caller(request.headers, hint)


def project_of(request: Request) -> str:
    return caller_of(request).project


Project = Annotated[str, Depends(project_of)]


# --- which spans -------------------------------------------------------------------------

WindowQuery = Annotated[str, Query(description="trailing window, e.g. 15m, 1h, 24h, 7d (at most 400d)")]
InstantQuery = Annotated[str | None, Query(description=f"{ACCEPTED_TIMES}; overrides window")]


async def span_filter(
    request: Request,
    project: Project,
    window: WindowQuery = "1h",
    start: InstantQuery = None,
    end: InstantQuery = None,
) -> SpanFilter:
    """The caller's project, the time range and an equality filter per dimension named in the query."""
    start_ns, end_ns = time_range(time.time_ns(), window, start, end)
    filters = {d: v for d in DIMENSIONS if (v := request.query_params.get(d)) not in (None, "")}
    return SpanFilter(project, start_ns, end_ns, filters)


Filter = Annotated[SpanFilter, Depends(span_filter)]


def window_of(where: SpanFilter) -> dict[str, str]:
    return {"start": iso(where.start_ns), "end": iso(where.end_ns)}


def rollup_stats(row: dict[str, Any]) -> dict[str, Any]:
    """Count, percentiles and (when the query has it) mean of a rollup row."""
    p50, p95, p99 = row["q"]
    stats = {"count": row["count"], "p50": p50, "p95": p95, "p99": p99}
    if "mean" in row:
        stats["mean"] = row["mean"]
    return stats


EXACT_WINDOW_MAX_NS = 7 * 86_400 * 10**9  # the longest window a route reading every span's value takes


def require_exact_window(where: SpanFilter, what: str) -> None:
    """A 400 for a window longer than ``EXACT_WINDOW_MAX_NS``, for the routes that read each value exactly."""
    if where.end_ns - where.start_ns > EXACT_WINDOW_MAX_NS:
        raise HTTPException(400, f"{what} reads the spans exactly: choose a window of at most 7d")


def require_rollup_filters(where: SpanFilter) -> None:
    extra = sorted(set(where.equals) - set(ROLLUP_DIMENSIONS))
    if extra:
        raise HTTPException(400, f"filters {extra} are not kept in rollups; filter by {list(ROLLUP_DIMENSIONS)}")


# --- group_by ----------------------------------------------------------------------------


def parse_group_by(raw: list[str], allowed: Sequence[str]) -> list[str]:
    """Repeated and comma-separated names, checked against ``allowed``, duplicates dropped."""
    names = [part.strip() for item in raw for part in item.split(",") if part.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise HTTPException(400, f"group_by {unknown}: choose from {sorted(allowed)}")
    return list(dict.fromkeys(names))


def group_by(allowed: Sequence[str], description: str, default: Sequence[str] = ()) -> Any:
    """A dependency: the ``group_by`` parameter, parsed by ``parse_group_by``."""

    async def parsed(group_by: Annotated[list[str], Query(description=description)] = list(default)) -> list[str]:  # noqa: B006
        return parse_group_by(group_by, allowed)

    return Depends(parsed)


GroupBy = Annotated[list[str], group_by(tuple(DIMENSIONS), f"any of {sorted(DIMENSIONS)}")]
RollupGroupBy = Annotated[list[str], group_by(ROLLUP_DIMENSIONS, f"any of {list(ROLLUP_DIMENSIONS)}")]


# --- source=auto|spans|rollups -----------------------------------------------------------


class SourceRule:
    """Where a route reads, as ``source`` asks: raw spans (exact) or the rollups."""

    def __init__(self, asked: str, where: SpanFilter) -> None:
        self.asked, self.where = asked, where

    def rollups(self, metric: str | None = None, dims: Sequence[str] = ()) -> bool:
        """Whether to read the rollups for ``metric`` grouped by ``dims`` (``None``: whatever the route
        reads, the rollups keep it). ``rollups`` when they keep it (else a 400); ``auto`` when they keep
        it and the window is longer than raw spans are read for (6 h)."""
        possible = metric is None or (
            metric in ROLLUP_METRICS and set(dims) | set(self.where.equals) <= set(ROLLUP_DIMENSIONS)
        )
        if self.asked == "rollups" and not possible:
            raise HTTPException(
                400, f"metric {metric!r} with these dimensions is not kept in rollups; use source=spans"
            )
        if self.asked == "auto":
            return possible and self.where.reads_rollups
        return self.asked == "rollups"

    @staticmethod
    def name(rollups: bool) -> str:
        return "rollups" if rollups else "spans"


def source(description: str) -> Any:
    """A dependency: the ``source`` parameter, described for the route, and its rule."""

    async def rule(
        where: Filter,
        source: Annotated[str, Query(pattern="^(auto|spans|rollups)$", description=description)] = "auto",
    ) -> SourceRule:
        return SourceRule(source, where)

    return Depends(rule)


# --- error answers, for the OpenAPI document -----------------------------------------------

_ERRORS = {
    400: "a parameter or body that cannot be used; the message says what is accepted",
    401: "an API key is required, or the one sent is not valid",
    403: "the key may not do this",
    404: "nothing found, or the feature is not configured on this server",
    429: "the key's rate limit is exceeded (Retry-After)",
    500: "the query failed in the store",
    503: "the store is unavailable (Retry-After)",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of routes answering these statuses (every error has the same shape)."""
    return {status: {"model": ErrorResponse, "description": _ERRORS[status]} for status in statuses}


QUERY_ERRORS = errors(400, 401, 403, 429, 500, 503)
