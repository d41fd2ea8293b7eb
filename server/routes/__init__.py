"""The server's routers, one module per resource, defined at module level: OTLP/HTTP ingest,
health and metrics, and the query API. ``create_app`` includes ``ROUTERS``.

What they share (the store, the caller's project, the span filter, ``group_by``, the
``source`` rule) are FastAPI dependencies in ``deps``; the query API's answers are the models
of ``agentlat.api.models``."""

from agentlat.server.routes import (
    advice,
    alerts,
    breakdown,
    budgets,
    cache,
    compare,
    dimensions,
    groups,
    health,
    ingest,
    keys,
    metric_points,
    percentiles,
    timeseries,
    traces,
)

ROUTERS = tuple(
    module.router
    for module in (
        ingest, health,
        percentiles, breakdown, groups, timeseries, dimensions, advice, cache, compare, traces, metric_points,
        budgets, alerts, keys,
    )
)  # fmt: skip
