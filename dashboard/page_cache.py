"""Prompt cache: the hit rate over time with the misses by reason under it, and per route and model the hit rate,
why calls missed (the part a changed prompt first differs in, and where), and the TTFT and input cost of hits and
misses."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from agentlat.api.client import Call
from agentlat.api.models import CacheGroup, CacheResponse
from agentlat.dashboard import figures, fmt, ui
from agentlat.dashboard.state import Scope, step

REASONS = figures.MISS_REASONS
PART_NAMES = {"model": "model", "tools": "tool definitions", "system": "system prompt", "messages": "earlier message"}
EXPLAINED = (
    "**Why a call missed** (first that applies): *prefix changed*, its prompt first differs from the route's "
    "previous request in the named part, at the byte offset shown (as sent; the provider's own diagnosis counts "
    "too); *settings changed*, a setting the cache is keyed on changed; *no breakpoint*, an Anthropic request "
    "marked nothing to cache; *below minimum*, shorter than the provider caches; *cold*, the route's first "
    "request; *expired*, the route was idle longer than the cache lives; *unknown*, no prompt shape from the "
    "agentlat SDK, or the same prefix missed anyway. Input cost: per call, in full-price input tokens (cached "
    "and written tokens at their prices)."
)


def calls(scope: Scope) -> dict[str, Call]:
    """Every query-API call this page makes."""
    return {
        "cache": Call.of(
            "/cache",
            window=scope.window,
            service=scope.service,
            route=scope.route,
            group_by="route,model",
            step=step(scope.window),
        )
    }


def _main_reason(group: CacheGroup) -> str:
    """The most frequent cause in words (a changed prefix by its part, and where), with its share of the misses."""
    causes = [(n, REASONS[r][0]) for r, n in group.misses_by_reason.items() if r != "prefix_changed"]
    for part, facts in group.changed_parts.items():
        where = f" within {facts.offset_p95 + 1:,.0f} B" if facts.offset_p95 is not None else ""
        causes.append((facts.misses, f"{PART_NAMES[part]} changed{where}"))
    if not causes:
        return fmt.DASH
    n, text = max(causes, key=lambda cause: cause[0])
    return f"{text} ({n / group.misses:.0%})"


def table(body: CacheResponse) -> pd.DataFrame:
    """One row per route and model: calls, hit rate, misses and their main reason, TTFT and input cost."""
    records = [
        {
            "route": g.group.get("route", ""),
            "model": g.group.get("model", ""),
            "calls": g.calls,
            "hit rate": g.hit_rate,
            "misses": g.misses,
            "main reason": _main_reason(g),
            "TTFT hit": g.ttft_hit_ms,
            "TTFT miss": g.ttft_miss_ms,
            "input cost hit": g.input_cost_hit,
            "input cost miss": g.input_cost_miss,
        }
        for g in body.groups
    ]
    return pd.DataFrame.from_records(records, columns=["route", "model", "calls", "hit rate", "misses",
                                                       "main reason", "TTFT hit", "TTFT miss", "input cost hit",
                                                       "input cost miss"])  # fmt: skip


def reasons_table(body: CacheResponse) -> pd.DataFrame:
    """Misses per route and model by reason, a changed prefix split by part (with its median and p95 offsets)."""
    records = []
    for g in body.groups:
        record: dict[str, object] = {"route": g.group.get("route", ""), "model": g.group.get("model", "")}
        for reason, (label, _) in REASONS.items():
            if reason != "prefix_changed":
                record[label] = g.misses_by_reason.get(reason, 0)
        for part, name in PART_NAMES.items():
            facts = g.changed_parts.get(part)
            offsets = "" if facts is None or facts.offset_p50 is None else (
                f" (at {facts.offset_p50:,.0f}, p95 {facts.offset_p95:,.0f} B)")  # fmt: skip
            record[f"{name} changed"] = f"{facts.misses}{offsets}" if facts else "0"
        records.append(record)
    return pd.DataFrame.from_records(records)


def render() -> None:
    scope = ui.scope()
    ui.title("Prompt cache", scope)
    body = ui.require(ui.fetch(calls(scope))["cache"])
    if not body.groups:
        ui.empty_state("model calls that report prompt-cache tokens", scope)
        return
    st.plotly_chart(figures.cache_over_time(body.series, body.step_seconds), key="cache_over_time")
    frame = table(body)
    styled = frame.style.format(fmt.share, subset=["hit rate"], na_rep=fmt.DASH)
    styled = styled.format(fmt.ms, subset=["TTFT hit", "TTFT miss"], na_rep=fmt.DASH)
    styled = styled.format(lambda v: f"{v:,.0f} tokens", subset=["input cost hit", "input cost miss"], na_rep=fmt.DASH)
    st.dataframe(styled, hide_index=True, width="stretch", placeholder=fmt.DASH)
    st.markdown("#### Why calls missed")
    st.table(reasons_table(body).set_index(["route", "model"]))
    source = "exact, from raw spans" if body.source == "spans" else "from per-minute rollups"
    st.caption(f"Per route and model {source}; the chart from per-minute rollups. {EXPLAINED}")


if __name__ == "__main__":
    render()
