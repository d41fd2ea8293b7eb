"""Trace explorer: the slowest or most recent traces with filters (of the sidebar's window, or of one
interval opened from an Overview chart), and one trace as a waterfall with its critical path, model
phases and tools, beside its E2E split and what-if savings."""

from __future__ import annotations

import hashlib
from typing import Any

import pandas as pd
import streamlit as st

from agentlat.api.client import ApiError, Call
from agentlat.api.models import TraceAnalysis, TraceResponse, TraceSummary
from agentlat.dashboard import figures, fmt, ui
from agentlat.dashboard.state import INTERVAL_KEYS, Scope, url_segment, url_text, url_value

SORTS = {"slowest": "Slowest", "recent": "Most recent"}
FILTERS = ("agent", "model", "tool", "release", "prompt")  # release: service.version; prompt: its version
LIMIT = 50
TRACE_COLUMNS = {
    "start": "started (UTC)",
    "duration_ms": "E2E",
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
    scope: Scope,
    sort: str = "slowest",
    filters: dict[str, str] | None = None,
    trace_id: str = "",
    interval: dict[str, str] | None = None,
) -> dict[str, Call]:
    """Every query-API call this page makes (the trace's own when one is chosen); an ``interval`` (start and
    end) replaces the scope's window."""
    found = {
        "list": Call.of("/traces", sort=sort, limit=LIMIT, **scope.params(), **(interval or {}), **(filters or {})),
    }
    if trace_id:
        found["trace"] = Call.of(f"/traces/{trace_id}")
    return found


def trace_table(traces: list[TraceSummary]) -> pd.DataFrame:
    """The list as numbers and times (so a header click sorts them); ``styled`` formats them for people."""
    records = [{column: getattr(t, column) for column in TRACE_COLUMNS} for t in traces]
    frame = pd.DataFrame.from_records(records, columns=list(TRACE_COLUMNS))
    return frame.rename(columns=TRACE_COLUMNS)


def styled(frame: pd.DataFrame) -> Any:
    """Durations as the dashboard writes milliseconds, start times to the second in UTC."""
    return frame.style.format(fmt.ms, subset=[TRACE_COLUMNS["duration_ms"]]).format(
        fmt.utc_time, subset=[TRACE_COLUMNS["start"]]
    )


def selection_key(ids: list[str], chosen: str) -> str:
    """The list's widget key: a new one whenever the rows or the chosen trace change, so the selection Streamlit
    keeps by row position never lands on another trace; the new widget selects the chosen trace's row."""
    return "trace_table:" + hashlib.blake2s("\n".join([chosen, *ids]).encode(), digest_size=8).hexdigest()


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


def dispatch_what_if(analysis: TraceAnalysis) -> pd.DataFrame:
    """Per model call that streamed tool calls: the E2E saved had each tool started when its arguments were
    complete, and how long each waited."""
    delays: dict[str, list[str]] = {}
    for call in analysis.dispatched:
        delays.setdefault(call.model_span_id, []).append(f"{call.tool} {fmt.ms(call.delay_ms)}")
    return pd.DataFrame.from_records(
        [
            {
                "start as they stream": ", ".join(delays.get(g.model_span_id, g.tools)),
                "saves": fmt.ms(g.saving_ms),
                "E2E after": fmt.ms(analysis.e2e_ms - g.saving_ms),
                "on critical path": "yes" if g.on_critical_path else "no",
            }
            for g in analysis.dispatch_groups
        ],
        columns=["start as they stream", "saves", "E2E after", "on critical path"],
    )


def _pick(ids: list[str], key: str) -> None:
    rows = st.session_state[key].selection.rows
    if rows:
        st.session_state["trace"] = ids[rows[0]]


def _interval() -> dict[str, str]:
    """The interval an Overview chart opened (start and end in the URL), with a way back to the window."""
    interval = {key: url_value(key) for key in INTERVAL_KEYS}
    if not all(interval.values()):
        return {}
    text, back = st.columns([4, 1], vertical_alignment="center")
    text.info(
        f"Traces that started from {fmt.utc_time(interval['start'])} to {fmt.utc_time(interval['end'])}, "
        "the interval clicked on the Overview.",
        icon=":material/schedule:",
    )
    if back.button("Whole window", icon=":material/close:", help="list the traces of the sidebar's window"):
        for key in INTERVAL_KEYS:
            del st.query_params[key]
        st.rerun()
    return interval


def _list(scope: Scope) -> tuple[list[TraceSummary], str]:
    interval = _interval()
    sort = url_segment("Traces", "sort", list(SORTS), "slowest", format_func=SORTS.__getitem__)
    columns = st.columns(len(FILTERS) + 1)
    filters = {
        name: url_text(name.capitalize(), name, where=col, placeholder="any")
        for name, col in zip(FILTERS, columns, strict=False)
    }
    trace_id = url_text("Trace id", "trace", where=columns[-1], placeholder="32 hex characters").lower()
    traces = ui.require(ui.fetch(calls(scope, sort, filters, interval=interval))["list"]).traces
    return traces, trace_id


def split_table(analysis: TraceAnalysis) -> pd.DataFrame:
    """Model, tool and orchestration time along the critical path (they add up to E2E), and plain sums."""
    e2e = analysis.e2e_ms
    sums = {"model": analysis.model_sum_ms, "tool": analysis.tool_sum_ms, "orchestration": None}
    rows = []
    for part in figures.PARTS:
        ms = getattr(analysis, f"{part}_ms")  # None: not known (the trace's model calls are in other traces)
        rows.append((part, fmt.ms(ms), fmt.share(ms / e2e if e2e and ms is not None else None), fmt.ms(sums[part])))
    return pd.DataFrame(rows, columns=["part", "on critical path", "share", "plain sum"])


def _incomplete_split_reason(analysis: TraceAnalysis) -> str:
    unknown = (
        "so model and orchestration time are not known here (and this trace is left out of the split's percentiles)"
    )
    if analysis.model_calls == 0:
        return (
            f"No model call in this agent run's trace: its instrumentation exported each call as a trace of its own, "
            f"{unknown}. docs/trace-analysis.md says how to keep the calls in the run's trace."
        )
    return (
        f"A model call's span ended before its first chunk, and no span times the rest of its stream (whoever read "
        f"it recorded nothing), {unknown}. Its TTFT and the tool time are measured."
    )


def _split(analysis: TraceAnalysis) -> None:
    st.metric("E2E", fmt.ms(analysis.e2e_ms))
    st.dataframe(split_table(analysis), hide_index=True, width="stretch", key="split_table")
    if not analysis.split_complete:
        st.warning(_incomplete_split_reason(analysis), icon=":material/call_split:")
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
    parallel, dispatch = what_if(analysis), dispatch_what_if(analysis)
    if parallel.empty and dispatch.empty:
        st.caption("No serial, independent tool calls and no streamed ones: nothing to parallelise or start sooner.")
        return
    shown = [(frame, label, saving, key) for frame, label, saving, key in (
        (parallel, "E2E with parallel tool calls", analysis.parallel_saving_ms, "what_if"),
        (dispatch, "E2E starting tools as they stream", analysis.dispatch_saving_ms, "dispatch_what_if"),
    ) if not frame.empty]  # fmt: skip
    for column, (_, label, saving, _) in zip(st.columns(len(shown)), shown, strict=True):
        column.metric(label, fmt.ms(analysis.e2e_ms - saving), fmt.saving(saving), delta_color="inverse")
    for frame, _, _, key in shown:
        st.dataframe(frame, hide_index=True, width="stretch", key=key)
    if not dispatch.empty:
        st.caption(
            "Each tool with its dispatch delay (its start minus the moment its arguments were complete in the "
            "stream; red ticks on the waterfall). Savings count only where the tools are on the critical path."
        )


def _detail(result: TraceResponse | ApiError) -> None:
    body = ui.require(result)
    analysis = body.analysis
    root = next((s for s in body.spans if s.parent_span_id == ""), body.spans[0])
    st.subheader(f"{root.name} · {root.service}")
    st.caption(f"trace {body.trace_id} · started {fmt.utc_time(root.start)} · {len(body.spans)} spans")
    chart, side = st.columns([3, 2], gap="medium")
    chart.plotly_chart(figures.waterfall(body), key="waterfall")
    chart.caption(
        "Outlined spans are on the critical path; faded ones overlapped it. Blue: model (queue, prefill, decode "
        "from light to dark); orange: tool; grey: orchestration and agent spans. A red tick on a model call: a "
        "tool call it streamed had its arguments complete there."
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
    chosen = trace_id or traces[0].trace_id
    if traces:
        frame = trace_table(traces)
        ids = [t.trace_id for t in traces]
        key = selection_key(ids, chosen)
        st.dataframe(
            styled(frame),
            hide_index=True,
            on_select=lambda: _pick(ids, key),
            selection_mode="single-row",
            selection_default={"selection": {"rows": [ids.index(chosen)] if chosen in ids else []}},
            key=key,
            width="stretch",
            height=min(400, 38 + 35 * len(frame)),
        )
    if not trace_id:
        st.caption("Showing the first trace of the list; select a row or enter a trace id to see another.")
    _detail(ui.fetch({"trace": calls(scope, trace_id=chosen)["trace"]})["trace"])


if __name__ == "__main__":
    render()
