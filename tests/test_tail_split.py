"""The split of the requests at p50, p95 and p99 (``Store.tail_split``) from known analysis rows: which
ranks each band takes, how ties in E2E are ordered, and that a re-analysed trace counts once, as its newest
analysis."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from agentlat.store import SpanFilter, Store
from agentlat.store.analysis import TRACE_ROW_SCHEMA

PROJECT = "tail-split"


def _row(trace_id: str, start_s: int, route: str, analysed_s: int, **parts: float) -> dict:
    """An analysis row whose E2E is the sum of its model, tool and orchestration time."""
    split = {"ModelMs": 0.0, "ToolMs": 0.0, "OrchestrationMs": 0.0, **parts}
    row = {f.name: None for f in TRACE_ROW_SCHEMA}
    row.update(
        ProjectId=PROJECT, TraceId=trace_id, Start=datetime.fromtimestamp(start_s, UTC), Route=route,
        E2eMs=sum(split.values()), AnalysedAt=datetime.fromtimestamp(analysed_s, UTC), **split,
    )  # fmt: skip
    return row


def test_each_band_takes_its_ranks_ties_ordered_by_trace_id_newest_analysis_only(embedded_store: Store) -> None:
    """/a has 11 traces: ranks 4-6 make p50, 9-10 make p95 and p99 (floor and ceil of (P -/+ 0.005) x 10).
    t-tie-a and t-tie-b both take 900 ms; by trace id t-tie-b ranks 9, so the tail holds its tool time, not
    t-tie-a's model time. t-top was first analysed at 5,000 ms, then at 1,100: only the newest counts."""
    start = int(datetime.now(UTC).timestamp()) - 600
    rows = [_row(f"t-{i}", start + i, "/a", 1, ModelMs=100.0 * (i + 1)) for i in range(8)]  # ranks 0-7
    rows += [
        _row("t-tie-b", start, "/a", 1, ToolMs=900.0),
        _row("t-tie-a", start, "/a", 1, ModelMs=900.0),
        _row("t-top", start, "/a", 1, ModelMs=5_000.0),
        _row("t-only", start, "/b", 1, ToolMs=40.0, OrchestrationMs=10.0),
    ]
    embedded_store.write_traces(pa.Table.from_pylist(rows, schema=TRACE_ROW_SCHEMA))
    newest = _row("t-top", start, "/a", 2, OrchestrationMs=1_100.0)
    embedded_store.write_traces(pa.Table.from_pylist([newest], schema=TRACE_ROW_SCHEMA))  # a later insert
    where = SpanFilter(PROJECT, (start - 60) * 10**9, (start + 60) * 10**9)

    found = embedded_store.tail_split(["route"], where)

    tail = {"traces": 2, "e2e": 1_000.0, "model": 0.0, "tool": 450.0, "orchestration": 550.0}
    assert found[("/a",)] == {
        "p50": {"traces": 3, "e2e": 600.0, "model": 600.0, "tool": 0.0, "orchestration": 0.0},  # t-4, t-5, t-6
        "p95": tail,
        "p99": tail,
    }
    only = {"traces": 1, "e2e": 50.0, "model": 0.0, "tool": 40.0, "orchestration": 10.0}
    assert found[("/b",)] == {"p50": only, "p95": only, "p99": only}
    ungrouped = embedded_store.tail_split([], SpanFilter(PROJECT, where.start_ns, where.end_ns, {"route": "/b"}))
    assert ungrouped == {(): {"p50": only, "p95": only, "p99": only}}


def test_a_window_without_traces_has_no_split(embedded_store: Store) -> None:
    assert embedded_store.tail_split(["route"], SpanFilter(PROJECT, 0, 10**9)) == {}
    assert embedded_store.tail_split([], SpanFilter(PROJECT, 0, 10**9)) == {}
