"""Compare: which change made it slower. Two releases, models or prompt versions (or before and after an instant)
on the sidebar's service and route: TTFT, ITL and E2E at p50/p95/p99, the split's parts and each tool, each
difference B - A with its 95 % interval and whether B is slower, faster or not clearly either."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from agentlat.api.client import Call
from agentlat.api.models import CompareResponse, SideValuesResponse
from agentlat.dashboard import comparison, figures, fmt, ui
from agentlat.dashboard.state import Scope, url_segment, url_select, url_text

ROW_PX = 35  # a table row's height
DIMENSIONS = {"release": "release", "model": "model", "prompt": "prompt version", "time": "before / after"}


def values_call(scope: Scope, dimension: str) -> Call:
    return Call.of("/compare/values", dimension=dimension, window=scope.window, service=scope.service,
                   route=scope.route)  # fmt: skip


def compare_call(scope: Scope, dimension: str, **sides: str) -> Call:
    return Call.of("/compare", dimension=dimension, window=scope.window, service=scope.service, route=scope.route,
                   **sides)  # fmt: skip


def table(found: CompareResponse) -> pd.DataFrame:
    return pd.DataFrame.from_records(
        [
            {"figure": r.figure, "A": fmt.ms(r.a), "B": fmt.ms(r.b), "B - A": comparison.signed(r.difference),
             "95 % interval": r.interval, "samples A / B": r.samples, "verdict": r.verdict}
            for r in comparison.rows(found)
        ]
    )  # fmt: skip


def headline(found: CompareResponse) -> str:
    """What moved most, said plainly: the largest difference the data is sure of, or that none is."""
    sure = [r for r in comparison.rows(found) if r.status in ("slower", "faster")]
    if not sure:
        return "No difference the data is sure of (see the samples each interval needs)."
    top = max(sure, key=lambda r: abs(r.difference or 0))
    return (f"**{top.figure}** is {comparison.signed(top.difference)} in B ({found.b}) against A ({found.a}): "
            f"{top.verdict}, 95 % interval {top.interval}.")  # fmt: skip


def _sides(scope: Scope, dimension: str) -> dict[str, str] | None:
    """The sides the person chose (A the older, B the newer by default), or None when there are not two."""
    if dimension == "time":
        at = url_text("Before against from this instant on (ISO-8601, UTC)", "at", placeholder="2026-12-07T09:00:00Z")
        if not at:
            st.info("Name an instant inside the window: spans before it are A, spans from it on are B.")
            return None
        return {"at": at}
    found: SideValuesResponse = ui.require(ui.fetch({"values": values_call(scope, dimension)})["values"])
    values = [v.value for v in found.values]
    if len(values) < 2:
        st.info(f"Fewer than two {DIMENSIONS[dimension]}s in {scope.window}: nothing to compare yet. "
                "Widen the window, or set service.version / agentlat.prompt.version on your spans.")  # fmt: skip
        return None
    first = {v.value: v.first_seen for v in found.values}
    left, right = st.columns(2)
    label = (lambda v: f"{v} (first seen {fmt.utc_time(first[v])})") if dimension == "release" else str
    a = url_select("A", "a", values, values[-2], where=left, format_func=label, keep_unknown=False)
    b = url_select("B", "b", values, values[-1], where=right, format_func=label, keep_unknown=False)
    if a == b:
        st.info("Choose two different values.")
        return None
    return {"a": a, "b": b}


def render() -> None:
    scope = ui.scope()
    ui.title("Compare", scope)
    dimension = url_segment("Compare two", "dimension", list(DIMENSIONS), "release", format_func=DIMENSIONS.get)
    sides = _sides(scope, dimension)
    if sides is None:
        return
    found: CompareResponse = ui.require(ui.fetch({"compare": compare_call(scope, dimension, **sides)})["compare"])
    st.markdown(headline(found))
    if began := comparison.began(found):
        st.markdown("**Began in the window**, what may have started it:\n" + "".join(
            f"\n- {ui.escape(line)}" for line in began))  # fmt: skip
    rows = comparison.rows(found)
    if any(r.difference is not None for r in rows):
        st.plotly_chart(figures.difference_bars(rows), key="compare_chart")
    frame = table(found)
    st.dataframe(frame, hide_index=True, width="stretch", height=ROW_PX * (len(frame) + 1) + 3)  # every row shown
    st.caption(f"{comparison.source_note(found)} {comparison.MIN_SAMPLES_NOTE}.")
    st.subheader("What moved with it")
    levers = pd.DataFrame.from_records([
        {"lever": r.lever, "A": r.a, "B": r.b, "B - A": r.difference, "95 % interval": r.interval,
         "samples A / B": r.samples, "verdict": r.verdict}
        for r in comparison.lever_rows(found)
    ])  # fmt: skip
    st.dataframe(levers, hide_index=True, width="stretch", height=ROW_PX * (len(levers) + 1) + 3)
    st.caption(
        "Cache hit rate and speculative acceptance: token-weighted over the model calls reporting both counts "
        "(an interval needs 20 a side). Serial tools: what running a trace's independent tools in parallel would "
        "save. Dispatch delay: a streamed tool call's wait after its arguments were complete."
    )


if __name__ == "__main__":
    render()
