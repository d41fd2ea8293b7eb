"""Trace explorer: the slowest or most recent traces with filters, and one trace as a waterfall
with its critical path, model phases and tools, beside its E2E split and what-if savings."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from agentlat.api.client import ApiError, Call
from agentlat.api.models import TraceAnalysis, TraceResponse, TraceSummary
from agentlat.dashboard import figures, fmt, ui
from agentlat.dashboard.state import Scope, url_segment, url_text

SORTS = {"slowest": "Slowest", "recent": "Most recent"}
FILTERS = ("agent", "model", "tool")
LIMIT = 50
TRACE_COLUMNS = {
    "start": "started (UTC)",
    "duration_ms": "E2E (ms)",
    "route": "route",
    "service": "service",
    "root_name": "root span",
    "span_count": "spans",
    "model_calls": "model calls",
    "tool_calls": "tool calls",
    "errors": "errors",
    "trace_id": "trace id",
}


def calls(
    scope: Scope, sort: str = "slowest", filters: dict[str, str] | None = None, trace_id: str = ""
) -> dict[str, Call]:
    """Every query-API call this page makes (the trace's own when one is chosen)."""
    found = {
        "list": Call.of("/traces", sort=sort, limit=LIMIT, **scope.params(), **(filters or {})),
    }
    if trace_id:
        found["trace"] = Call.of(f"/traces/{trace_id}")
    return found


def trace_table(traces: list[TraceSummary]) -> pd.DataFrame:
    records = [{column: getattr(t, column) for column in TRACE_COLUMNS} for t in traces]
    frame = pd.DataFrame.from_records(records, columns=list(TRACE_COLUMNS))
    frame["start"] = frame["start"].str.replace("T", " ").str.slice(0, 23)
    return frame.rename(columns=TRACE_COLUMNS)


def what_if(analysis: TraceAnalysis) -> pd.DataFrame:
    """Serial, independent tool calls and the E2E saved by running each group in parallel."""
    return pd.DataFrame.from_records(
        [
            {
                "run in parallel": ", ".join(g.tools),
                "saves": fmt.ms(g.saving_ms),
                "E2E after": fmt.ms(analysis.e2e_ms - g.saving_ms),
                "on critical path": "yes" if g.on_critical_path else "no",
            }
            for g in analysis.parallelisable
        ],
        columns=["run in parallel", "saves", "E2E after", "on critical path"],
    )


def _pick(ids: list[str]) -> None:
    rows = st.session_state["trace_table"].selection.rows
    if rows:
        st.session_state["trace"] = ids[rows[0]]


def _list(scope: Scope) -> tuple[list[TraceSummary], str]:
    sort = url_segment("Traces", "sort", list(SORTS), "slowest", format_func=SORTS.__getitem__)
    columns = st.columns(len(FILTERS) + 1)
    filters = {
        name: url_text(name.capitalize(), name, where=col, placeholder="any")
        for name, col in zip(FILTERS, columns, strict=False)
    }
    trace_id = url_text("Trace id", "trace", where=columns[-1], placeholder="32 hex characters").lower()
    traces = ui.require(ui.fetch(calls(scope, sort, filters))["list"]).traces
    return traces, trace_id


def split_table(analysis: TraceAnalysis) -> pd.DataFrame:
    """Model, tool and orchestration time along the critical path (they add up to E2E), and plain sums."""
    e2e = analysis.e2e_ms
    sums = {"model": analysis.model_sum_ms, "tool": analysis.tool_sum_ms, "orchestration": None}
    rows = []
    for part in figures.PARTS:
        ms = getattr(analysis, f"{part}_ms")
        rows.append((part, fmt.ms(ms), fmt.share(ms / e2e if e2e else None), fmt.ms(sums[part])))
    return pd.DataFrame(rows, columns=["part", "on critical path", "share", "plain sum"])


def _split(analysis: TraceAnalysis) -> None:
    st.metric("E2E", fmt.ms(analysis.e2e_ms))
    st.dataframe(split_table(analysis), hide_index=True, width="stretch", key="split_table")
    facts = {
        "first TTFT": fmt.ms(analysis.first_ttft_ms),
        "model calls": fmt.count(analysis.model_calls),
        "tool calls": fmt.count(analysis.tool_calls),
        "cache hit": fmt.share(analysis.cache_hit_ratio),
        "spec. acceptance": fmt.share(analysis.spec_acceptance),
        "errors": fmt.count(analysis.errors),
    }
    st.markdown(" · ".join(f"{k} **{v}**" for k, v in facts.items()))


def _what_if(analysis: TraceAnalysis) -> None:
    st.markdown("**What if**")
    frame = what_if(analysis)
    if frame.empty:
        st.caption("No serial, independent tool calls: nothing to parallelise.")
        return
    saving = analysis.parallel_saving_ms
    st.metric(
        "Parallel tool calls would save",
        fmt.ms(saving),
        f"E2E {fmt.ms(analysis.e2e_ms - saving)}",
        delta_color="off",
    )
    st.dataframe(frame, hide_index=True, width="stretch", key="what_if")


def _detail(result: TraceResponse | ApiError) -> None:
    body = ui.require(result)
    analysis = body.analysis
    root = next((s for s in body.spans if s.parent_span_id == ""), body.spans[0])
    st.subheader(f"{root.name} · {root.service}")
    st.caption(f"trace {body.trace_id} · started {root.start} · {len(body.spans)} spans")
    chart, side = st.columns([3, 2], gap="medium")
    chart.plotly_chart(figures.waterfall(body), key="waterfall")
    chart.caption(
        "Outlined spans are on the critical path; faded ones overlapped it. Blue: model (queue, prefill, decode "
        "from light to dark); orange: tool; grey: orchestration and agent spans."
    )
    with side:
        if analysis is None:
            st.info("Not analysed yet: a trace is analysed a few seconds after its root span ends.")
            return
        _split(analysis)
        _what_if(analysis)


def render() -> None:
    scope = ui.scope()
    ui.title("Trace explorer", scope)
    traces, trace_id = _list(scope)
    if not traces and not trace_id:
        ui.empty_state("traces", scope)
        return
    if traces:
        frame = trace_table(traces)
        ids = [t.trace_id for t in traces]
        st.dataframe(
            frame,
            hide_index=True,
            on_select=lambda: _pick(ids),
            selection_mode="single-row",
            key="trace_table",
            width="stretch",
            height=min(400, 38 + 35 * len(frame)),
        )
    chosen = trace_id or traces[0].trace_id
    if not trace_id:
        st.caption("Showing the first trace of the list; select a row or enter a trace id to see another.")
    _detail(ui.fetch({"trace": calls(scope, trace_id=chosen)["trace"]})["trace"])


if __name__ == "__main__":
    render()
