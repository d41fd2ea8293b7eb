"""Advisor: which latency lever each route should pull, ranked by the E2E it would save, each
finding with the evidence behind it."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from agentlat.api.client import Call
from agentlat.api.models import Finding
from agentlat.dashboard import figures, fmt, ui
from agentlat.dashboard.state import Scope, describe_window

CHARTED = 3  # findings drawn with an evidence chart: the browser takes ~100 ms a plotly chart, the ranking shows all
NO_FINDINGS = (
    "**No findings in {window}: no lever to pull.** The advisor looks at routes with at least 20 model calls "
    "or 10 traces in the window; with less data it says nothing."
)


def calls(scope: Scope) -> dict[str, Call]:
    """Every query-API call this page makes."""
    return {"advice": Call.of("/advice", window=scope.window, route=scope.route)}


def evidence_table(finding: Finding) -> pd.DataFrame:
    """The finding's evidence as (fact, value) rows: ms, shares and counts written out."""

    def text(key: str, value: Any) -> str:
        if isinstance(value, dict):  # counts by name (a cache miss's reason, say), or facts by name
            return ", ".join(f"{k.replace('_', ' ')} {_counted(v)}" for k, v in value.items()) or fmt.DASH
        if isinstance(value, float) and key.endswith("_ms"):
            return fmt.ms(value)
        if isinstance(value, float) and key in ("hit_rate", "dispatched_while_streaming"):
            return fmt.share(value)
        return f"{value:,.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"

    return pd.DataFrame(
        [(key.removesuffix("_ms").replace("_", " "), text(key, value)) for key, value in finding.evidence.items()],
        columns=["evidence", "value"],
    )


def _counted(value: Any) -> str:
    """A count, or the count of a part's facts (``misses``) with its p95 byte offset."""
    if isinstance(value, dict):
        offset = value.get("offset_p95")
        return f"{value.get('misses', 0):,}" + (f" (p95 offset {offset:,.0f} B)" if offset is not None else "")
    return f"{value:,}"


def _finding(rank: int, finding: Finding) -> None:
    with st.container(border=True):
        st.markdown(f"#### {rank}. {finding.title}")
        st.caption(f"route {finding.route} · {finding.kind.replace('_', ' ')}")
        st.markdown(f"**Lever:** {finding.lever}")
        if rank <= CHARTED:
            numbers, chart, facts = st.columns([2, 3, 2], gap="medium")
            chart.plotly_chart(figures.evidence(finding), key=f"evidence_{rank}")
        else:
            numbers, facts = st.columns([2, 5], gap="medium")
        numbers.metric("Saves per request", fmt.ms(finding.saving_ms_per_request))
        numbers.metric("Saved over the window", f"{finding.total_saving_s:,.1f} s")
        numbers.metric("Requests", fmt.count(finding.requests))
        numbers.caption(finding.saving_basis)
        facts.table(evidence_table(finding), hide_index=True)  # static: lighter to draw than a data grid


def render() -> None:
    scope = ui.scope()
    ui.title("Advisor", scope)
    findings = ui.require(ui.fetch(calls(scope))["advice"]).findings
    if not findings:
        st.success(NO_FINDINGS.format(window=describe_window(scope.window)), icon=":material/check_circle:")
        return
    st.caption("Ranked by the end-to-end time each change would save over the window (saving per request x requests).")
    st.plotly_chart(figures.savings_ranking(findings), key="ranking")
    for rank, finding in enumerate(findings, start=1):
        _finding(rank, finding)


if __name__ == "__main__":
    render()
