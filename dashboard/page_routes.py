"""Routes & models: every route, agent, model, tool, release and prompt version with its count, p50/p95/p99 of
each metric, prompt-cache hit rate, speculative acceptance and error rate; sortable, and each row opens its
traces."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from agentlat.api.client import Call
from agentlat.api.models import DimensionsResponse
from agentlat.dashboard import fmt, ui
from agentlat.dashboard.budgets import BudgetBook, colour
from agentlat.dashboard.state import Scope, url_segment, url_select

DIMENSIONS = {"route": "Routes", "agent": "Agents", "model": "Models", "tool": "Tools", "release": "Releases",
              "prompt": "Prompt versions"}  # fmt: skip
UNITS = {"route": "requests", "agent": "runs", "model": "calls", "tool": "calls", "release": "requests",
         "prompt": "calls"}  # fmt: skip
METRIC_LABELS = {
    "e2e": "E2E",
    "ttft": "TTFT",
    "itl": "ITL",
    "model": "model call",
    "tool": "tool call",
    "agent": "agent run",
    "decode": "decode",
}
PERCENTILES = ("p50", "p95", "p99")
RATES = {"cache_hit_rate": "cache hit", "spec_acceptance": "spec. acceptance", "error_rate": "error rate"}
LINK = "traces"
SERVICE = "service"


def calls(scope: Scope, dimension: str = "route") -> dict[str, Call]:
    """Every query-API call this page makes."""
    return {
        "table": Call.of(
            "/dimensions",
            dimension=dimension,
            group_by="service",  # a route two services serve is two rows
            source="rollups",  # percentiles from the per-minute digests: cost grows with minutes, not spans
            window=scope.window,
            service=scope.service,
            route=scope.route,
        ),
        "budgets": Call.of("/budgets", window=scope.window),
    }


def latency_columns(body: DimensionsResponse) -> list[tuple[str, str, str]]:
    """(column, metric, percentile) for each metric that has samples in some row."""
    present = [m for m in body.metrics if any(r.metrics[m].count for r in body.rows)]
    return [(f"{METRIC_LABELS[m]} {p}", m, p) for m in present for p in PERCENTILES]


def table(body: DimensionsResponse, scope: Scope) -> pd.DataFrame:
    """One row per service and value of the dimension; latencies in ms, rates as ratios (cache hit and speculative
    acceptance only when some row reports them), a link to its traces."""
    dimension, columns = body.dimension, latency_columns(body)
    records = []
    for row in body.rows:
        service = row.service or ""
        record: dict[str, Any] = {dimension: row.name, SERVICE: service, UNITS[dimension]: row.count}
        record.update({label: getattr(row, key) for key, label in RATES.items()})
        record.update({name: getattr(row.metrics[m], p) for name, m, p in columns})
        link = scope.link(**{"service": service or scope.service, dimension: row.name, "sort": "slowest"})
        record[LINK] = f"{LINK}?{urlencode(link)}"
        records.append(record)
    numbers = [*RATES.values(), *(c for c, _, _ in columns)]
    frame = pd.DataFrame.from_records(records, columns=[dimension, SERVICE, UNITS[dimension], *numbers, LINK])
    frame[numbers] = frame[numbers].astype("float64")  # missing values as NaN, shown as a dash
    unreported = [c for c in (RATES["cache_hit_rate"], RATES["spec_acceptance"]) if frame[c].isna().all()]
    return frame.drop(columns=unreported)


def cell_styles(frame: pd.DataFrame, body: DimensionsResponse, book: BudgetBook, service: str = "") -> pd.DataFrame:
    """CSS per cell: latencies of a route coloured by that route's budget, the rest neutral."""
    styles = pd.DataFrame("", index=frame.index, columns=frame.columns)
    if body.dimension != "route" or not book:
        return styles
    for name, metric, pct in latency_columns(body):
        for i, (route, value, own) in enumerate(zip(frame["route"], frame[name], frame[SERVICE], strict=True)):
            level = book.level(None if pd.isna(value) else value, route, metric, pct, own or service)
            if level is not None:
                styles.iloc[i, frame.columns.get_loc(name)] = f"color: {colour(level)}; font-weight: 600"
    return styles


def _show(frame: pd.DataFrame, body: DimensionsResponse, book: BudgetBook, service: str) -> Any:
    latency = [name for name, _, _ in latency_columns(body)]
    styled = frame.style.apply(lambda _: cell_styles(frame, body, book, service), axis=None)
    styled = styled.format(fmt.ms, subset=latency, na_rep=fmt.DASH)
    styled = styled.format(fmt.share, subset=[c for c in RATES.values() if c in frame], na_rep=fmt.DASH)
    config = {
        body.dimension: st.column_config.TextColumn(body.dimension, pinned=True),  # stays when scrolling sideways
        SERVICE: st.column_config.TextColumn(SERVICE, pinned=True),
        LINK: st.column_config.LinkColumn(LINK, display_text="open traces", width="small"),
    }
    return st.dataframe(
        styled,
        hide_index=True,
        column_config=config,
        placeholder=fmt.DASH,  # a missing value, never "None"
        on_select="rerun",
        selection_mode="single-row",
        key="dimension_table",
        width="stretch",
    )


def _click_through(frame: pd.DataFrame, dimension: str, selected: list[int], scope: Scope) -> None:
    if not selected:
        st.caption("Select a row to open its traces; click a column header to sort.")
        return
    name, service = frame.iloc[selected[0]][[dimension, SERVICE]]
    params = scope.link(**{"service": service or scope.service, dimension: name, "sort": "slowest"})
    left, right = st.columns(2)
    left.page_link(
        "page_traces.py",
        label=f"Slowest traces of {dimension} {name}",
        icon=":material/waterfall_chart:",
        query_params=params,
    )
    if dimension == "route":
        right.page_link(
            "page_overview.py",
            label=f"Overview of route {name}",
            icon=":material/speed:",
            query_params=scope.link(service=service or scope.service, route=name),
        )


def render() -> None:
    scope = ui.scope()
    ui.title("Routes & models", scope)
    show, sort = st.columns([2, 1], vertical_alignment="bottom")
    with show:
        dimension = url_segment("Show", "dim", list(DIMENSIONS), "route", format_func=DIMENSIONS.__getitem__)
    found = ui.fetch(calls(scope, dimension))
    body = ui.require(found["table"])
    book = ui.budget_book(found["budgets"])
    if not body.rows:
        ui.empty_state(f"{DIMENSIONS[dimension].lower()}", scope)
        return
    frame = table(body, scope)
    sortable = [c for c in frame.columns if c not in (dimension, SERVICE, LINK)]
    order = url_select("Sort by (largest first)", "order", sortable, UNITS[dimension], where=sort, keep_unknown=False)
    frame = frame.sort_values(order, ascending=False, na_position="last", kind="stable").reset_index(drop=True)
    event = _show(frame, body, book, scope.service)
    source = (
        "exact, from raw spans"
        if body.source == "spans"
        else "from per-minute rollups (exact up to 128 values, t-digest beyond)"
    )
    st.caption(
        f"Percentiles {source}. Cache hit: cached input tokens / input tokens. Spec. acceptance: "
        f"accepted / proposed draft tokens. Error rate: {UNITS[dimension]} that failed."
    )
    _click_through(frame, dimension, list(event.selection.rows), scope)


if __name__ == "__main__":
    render()
