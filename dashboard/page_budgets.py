"""Budgets & alerts: latency budgets against actuals per route, alert rules with their states,
and recent alert events, each as the server has them configured."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st
from pydantic import BaseModel

from agentlat.api.client import ApiError, Call
from agentlat.api.models import AlertsResponse, BudgetsResponse, Verdict
from agentlat.dashboard import figures, fmt, ui
from agentlat.dashboard.budgets import STATUS_COLOURS
from agentlat.dashboard.state import Scope

STATUS_TEXT = {"pass": "pass", "breach": "breach", "insufficient": "too few samples"}
NOT_CONFIGURED = (
    "**Budgets are not configured** on this server: start it with `--budgets FILE` (see docs/budgets.md; "
    "`agentlat budget init` writes a starter file). Until then latencies are shown without colours."
)
NO_ALERTS = (
    "**Alerting is not set up yet on this server.** Alert rules, their states and recent events will show here "
    "once the server runs the alert evaluator."
)


def calls(scope: Scope) -> dict[str, Call]:
    """Every query-API call this page makes."""
    return {"budgets": Call.of("/budgets", window=scope.window), "alerts": Call.of("/alerts")}


def budget_table(verdicts: list[Verdict]) -> pd.DataFrame:
    return pd.DataFrame.from_records(
        [
            {
                v.dimension: v.name,
                "metric": v.metric,
                "percentile": v.percentile,
                "budget": f"{'≥' if v.unit == 'ratio' else '≤'} {amount(v, v.budget)}",
                "actual": amount(v, v.actual),
                "samples": f"{v.count:,} / {v.min_samples:,}",
                "status": STATUS_TEXT[v.status],
                "declared in": v.source,
            }
            for v in verdicts
        ],
        columns=[
            verdicts[0].dimension,
            "metric",
            "percentile",
            "budget",
            "actual",
            "samples",
            "status",
            "declared in",
        ],
    )


def amount(v: Verdict, value: float | None) -> str:
    """A value in the verdict's unit: a latency in ms, the hit rate as a percentage."""
    return fmt.share(value) if v.unit == "ratio" else fmt.ms(value)


def _verdicts(verdicts: list[Verdict], dimension: str) -> None:
    frame = budget_table(verdicts)
    colours = [STATUS_COLOURS[v.status] for v in verdicts]
    styled = frame.style.apply(lambda _: [f"color: {c}; font-weight: 600" for c in colours], subset=["status"])
    st.dataframe(styled, hide_index=True, width="stretch", key=f"budgets_{dimension}")


def _budgets(result: BudgetsResponse | ApiError, scope: Scope) -> None:
    st.subheader("Budgets")
    if isinstance(result, ApiError) and result.status == 404:
        st.info(NOT_CONFIGURED, icon=":material/rule:")
        return
    body = ui.require(result)
    verdicts = [v for v in body.results if not scope.route or v.dimension != "route" or v.name == scope.route]
    counts = {s: sum(1 for v in verdicts if v.status == s) for s in STATUS_TEXT}
    minimum = ", ".join(f"{k} {v:,}" for k, v in body.min_samples.items())
    service = f" · service {body.service}" if body.service else ""
    st.caption(
        f"{body.file}{service} · {len(verdicts)} budgets: {counts['pass']} pass, {counts['breach']} breach, "
        f"{counts['insufficient']} with too few samples (minimum {minimum})"
    )
    if not verdicts:
        st.info("No budget in the file applies to this scope.", icon=":material/rule:")
        return
    for dimension in ("route", "agent"):
        chosen = [v for v in verdicts if v.dimension == dimension]
        if chosen:
            st.markdown(f"**Per {dimension}**")
            _verdicts(chosen, dimension)
    if any(v.unit == "ms" and v.actual is not None for v in verdicts):
        st.plotly_chart(figures.budget_bars(verdicts), key="budget_chart")


def records(rows: Sequence[BaseModel]) -> pd.DataFrame:
    """Rows as a table, columns named as in the API's JSON, values as people read them: labels and matchers as
    ``route=/chat``, lists joined, times to the second in UTC (a missing value is shown as a dash)."""
    plain = [row.model_dump(mode="json", by_alias=True) for row in rows]
    return pd.DataFrame.from_records([{k: readable(v) for k, v in row.items()} for row in plain])


_ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d")


def readable(value: Any) -> Any:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, str) and _ISO_TIME.match(value):
        return fmt.utc_time(value)
    return value


ALERT_TABLES = (
    ("rules", "Rules", "No alert rules are loaded."),
    ("alerts", "Alerts and their states", "No alert has been pending or firing."),
    ("events", "Recent events", "No alert events yet."),
)


def _alerts(result: AlertsResponse | ApiError) -> None:
    st.subheader("Alerts")
    if isinstance(result, ApiError) and result.status == 404:
        how = "" if result.message == "Not Found" else f"\n\nThe server says: {result.message}"
        st.info(NO_ALERTS + how, icon=":material/notifications_off:")
        return
    body = ui.require(result)
    st.caption(" · ".join(f"{state} {n}" for state, n in body.counts.model_dump().items()))
    for key, heading, none in ALERT_TABLES:
        st.markdown(f"**{heading}**")
        frame = records(getattr(body, key))
        if frame.empty:
            st.caption(none)
        else:
            st.dataframe(frame, hide_index=True, width="stretch", key=f"alert_{key}", placeholder=fmt.DASH)


def render() -> None:
    scope = ui.scope()
    ui.title("Budgets & alerts", scope)
    found = ui.fetch(calls(scope))
    _budgets(found["budgets"], scope)
    _alerts(found["alerts"])


if __name__ == "__main__":
    render()
