"""Overview: E2E, TTFT and ITL percentiles with budget status and change against the previous
window, the E2E split of each route's p50, p95 and p99 requests, and p50/p95/p99 and the whole
distribution over time; a click on either opens that interval's slowest traces."""

from __future__ import annotations

import time

import streamlit as st

from agentlat.api.client import ApiError, Call
from agentlat.api.models import Answer, BreakdownResponse, PercentileRow, PercentilesResponse, TimeseriesPoint
from agentlat.dashboard import figures, fmt, ui
from agentlat.dashboard.budgets import BudgetBook
from agentlat.dashboard.state import Scope, interval_link, previous_window, step, url_segment

TILES = (
    ("e2e", "End-to-end (E2E)", "requests"),
    ("ttft", "Time to first token (TTFT)", "model calls"),
    ("itl", "Inter-token latency (ITL)", "streamed calls"),
)
SERIES = {"e2e": "E2E", "ttft": "TTFT", "itl": "ITL"}
PERCENTILES = ("p50", "p95", "p99")
OVER_TIME = ("series", "heatmap", "releases")  # the calls of the chart over time, made when it is drawn


def calls(scope: Scope, now_s: int, series: str = "e2e") -> dict[str, Call]:
    """Every query-API call this page makes. Percentiles come from the per-minute rollups,
    whose cost grows with minutes and groups rather than spans."""
    start, end = previous_window(scope.window, now_s)
    filters = {"service": scope.service, "route": scope.route}
    digests = {"source": "rollups", **filters}
    tiles = ",".join(metric for metric, _, _ in TILES)  # one read a window for all tiles
    out = {
        "now": Call.of("/percentiles", metric=tiles, window=scope.window, **digests),
        "before": Call.of("/percentiles", metric=tiles, start=start, end=end, **digests),
    }
    out["split"] = Call.of("/breakdown", group_by="route", window=scope.window, **filters)
    out["budgets"] = Call.of("/budgets", window=scope.window)
    over_time = {"metric": series, "step": step(scope.window), "window": scope.window, **filters}
    out["series"] = Call.of("/timeseries", **over_time)
    out["heatmap"] = Call.of("/heatmap", **over_time)
    out["releases"] = Call.of("/versions", dimension="release", window=scope.window, **filters)
    return out


def _row(result: PercentilesResponse | ApiError, metric: str) -> PercentileRow | None:
    """The metric's row of an answer without grouping; None when it has none."""
    rows = [] if isinstance(result, ApiError) else result.rows
    return next((row for row in rows if row.metric == metric), None)


def _value(row: PercentileRow | None, name: str) -> float | None:
    """The row's ``name`` (count or a percentile); None without a row."""
    return getattr(row, name) if row is not None else None


def _tiles(found: dict[str, Answer | ApiError], book: BudgetBook, scope: Scope) -> None:
    for metric, label, unit in TILES:
        now, before = _row(found["now"], metric), _row(found["before"], metric)
        with st.container(border=True):
            head, *cells = st.columns([1.4, 1, 1, 1], vertical_alignment="center")
            head.markdown(f"**{label}**")
            head.caption(f"{fmt.count(_value(now, 'count') or 0)} {unit}; change against the previous {scope.window}")
            for cell, pct in zip(cells, PERCENTILES, strict=True):
                with cell:
                    budget = book.budget_ms(scope.route, metric, pct, scope.service)
                    ui.latency_metric(f"{SERIES[metric]} {pct}", _value(now, pct), _value(before, pct), budget)


def _split(result: BreakdownResponse | ApiError) -> None:
    st.subheader("Where E2E goes, per route")
    st.caption(
        "The split of each route's p50, p95 and p99 requests along the critical path (the mean of the requests "
        "ranked within half a percentile point of each): model + tool + orchestration = E2E. Hover a bar for "
        "each part; a part too small to label shows in the hover only."
    )
    rows = ui.require(result).rows
    if rows:
        st.plotly_chart(figures.split_bars(rows), key="split_chart")
    else:
        st.caption("No analysed traces yet in this window.")


def _open_clicked(event: object) -> None:
    """Open the trace explorer on the interval of the point or cell just clicked, slowest traces first."""
    points = event.selection.points if event else []  # type: ignore[attr-defined]
    if points and points[0].get("customdata"):
        start, end = points[0]["customdata"][:2]
        st.switch_page("page_traces.py", query_params=interval_link(ui.scope(), start, end))


def _over_time(scope: Scope, book: BudgetBook, now_s: int) -> None:
    st.subheader("Over time")
    metric = url_segment("Metric", "series", list(SERIES), "e2e", format_func=SERIES.__getitem__)
    wanted = calls(scope, now_s, metric)
    found = ui.fetch({k: wanted[k] for k in OVER_TIME})
    body = ui.require(found["series"])
    points: list[TimeseriesPoint] = body.series[0].points if body.series else []
    if not points:
        st.caption(f"No {SERIES[metric]} samples in this window.")
        return
    budgets = {p: b for p in PERCENTILES if (b := book.budget_ms(scope.route, metric, p, scope.service)) is not None}
    distribution = found["heatmap"]
    if isinstance(distribution, ApiError):
        ui.show_error(distribution)
        distribution = None
    window = (body.window.start, body.window.end)
    releases = found["releases"]
    markers = [] if isinstance(releases, ApiError) else figures.deploy_markers(releases.versions)
    chart = figures.over_time(points, SERIES[metric], window, body.step_seconds, budgets, distribution, markers)
    _open_clicked(st.plotly_chart(chart, key="over_time_chart", on_select="rerun", selection_mode="points"))
    minutes = body.step_seconds // 60
    st.caption(
        f"Above, p50, p95 and p99 per {minutes} min; below, how many {SERIES[metric]} values fell in each latency "
        f"bucket per {minutes} min, so a drifting tail shows as a shape (exact up to 128 values per interval, "
        "t-digest estimates beyond). From the per-minute rollups. Click a point or a cell to see that interval's "
        "slowest traces." + (" A dotted line marks a release first seen then (service.version)." if markers else "")
    )


def render() -> None:
    scope = ui.scope()
    ui.title("Overview", scope)
    now_s = int(time.time()) // 10 * 10  # a few seconds of slack lets the previous window be cached
    found = ui.fetch({k: v for k, v in calls(scope, now_s).items() if k not in OVER_TIME})
    ui.require(found["now"])
    book = ui.budget_book(found["budgets"])
    if all(_row(found["now"], m) is None for m, _, _ in TILES):
        ui.empty_state("traces", scope)
        return
    if not book:
        st.caption(f"No latency budgets on this server, so latencies are not coloured: {ui.BUDGETS_HELP}.")
    _tiles(found, book, scope)
    st.caption("Percentiles from per-minute rollups: exact up to 128 values, t-digest estimates beyond.")
    _split(found["split"])
    _over_time(scope, book, now_s)


if __name__ == "__main__":
    render()
