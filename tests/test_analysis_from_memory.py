"""Traces analysed from the spans the collector holds in memory, and read back from the store only when the
store holds spans it does not (another collector's, an earlier run's, a retried insert's) or a span repeats.

Real chDB store, real OTLP protobuf through the collector's decoder. Each case checks which way the trace was
analysed (``TraceAssembler.read_back``) and the analysis itself, with exact values from the spans' timings.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from agentlat.collector.analysis.assembler import TraceAssembler
from agentlat.collector.ingest.otlp import Limits, parse_protobuf, to_batch
from agentlat.store import Store, StoreError
from tests.otlp_payloads import MS, SpanSpec, new_trace_id, otlp_protobuf


def agent_run(trace_id: str, base: int, tools: int = 1) -> list[SpanSpec]:
    """An agent run of 1,000 ms: a model call [100, 400) ms, then tools of 100 ms each from 500 ms."""
    root = SpanSpec(
        "invoke_agent shop",
        trace_id=trace_id,
        start_ns=base,
        duration_ns=1000 * MS,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "shop"},
    )
    model = SpanSpec(
        "chat m",
        trace_id=trace_id,
        parent_span_id=root.span_id,
        start_ns=base + 100 * MS,
        duration_ns=300 * MS,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"},
    )
    calls = [
        SpanSpec(f"execute_tool t{i}", trace_id=trace_id, parent_span_id=root.span_id,
                 start_ns=base + (500 + 100 * i) * MS, duration_ns=100 * MS,
                 attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"t{i}"})
        for i in range(tools)
    ]  # fmt: skip
    return [root, model, *calls]


def stored(store: Store, project: str, spans: list[SpanSpec]) -> pa.Table:
    """Decode and store spans as the writer does; return the batch it hands the assembler."""
    batch = to_batch(parse_protobuf(otlp_protobuf(spans)), project, time.time_ns(), Limits()).batch
    store.insert_spans(batch)
    return batch


def split(store: Store, project: str, trace_id: str) -> tuple[float, float, float, float, int]:
    row = store.trace_analysis(project, trace_id)
    assert row is not None
    return row["E2eMs"], row["ModelMs"], row["ToolMs"], row["OrchestrationMs"], row["SpanCount"]


@pytest.fixture
def base() -> int:
    return time.time_ns() - 600_000 * MS


def test_traces_whose_spans_are_all_held_are_analysed_without_a_read_back(embedded_store: Store, base: int) -> None:
    traces = [new_trace_id() for _ in range(3)]
    assembler = TraceAssembler(embedded_store, grace_seconds=0.0)
    for i, trace_id in enumerate(traces):
        assembler.observe(stored(embedded_store, "mem-all", agent_run(trace_id, base, tools=i + 1)))

    assert assembler.run_due() == 3 and assembler.read_back == 0
    assert [split(embedded_store, "mem-all", t) for t in traces] == [
        (1000.0, 300.0, 100.0, 600.0, 3), (1000.0, 300.0, 200.0, 500.0, 4), (1000.0, 300.0, 300.0, 400.0, 5),
    ]  # fmt: skip
    assert assembler.held_bytes_now() == 0  # every batch let go once its traces were analysed


def test_the_analysis_is_the_same_from_memory_as_read_back(embedded_store: Store, base: int) -> None:
    """Every column of the analysis row, but when it was written, whichever way the spans came."""
    spans = agent_run(new_trace_id(), base, tools=2)
    spans[2].attributes |= {"agentlat.tool.depends_on": "c0", "gen_ai.tool.call.id": "c1"}
    spans[1].events = [("agentlat.tool_call", base + 300 * MS, {"agentlat.tool_call.ready_at": 0.15,
                                                                 "gen_ai.tool.call.id": "c1"})]  # fmt: skip
    rows = {}
    for project, held_bytes in (("mem-same-a", 64 << 20), ("mem-same-b", 0)):
        assembler = TraceAssembler(embedded_store, grace_seconds=0.0, held_bytes=held_bytes)
        assembler.observe(stored(embedded_store, project, spans))
        assert assembler.run_due() == 1 and assembler.read_back == (held_bytes == 0)
        row = embedded_store.trace_analysis(project, spans[0].trace_id)
        assert row is not None
        rows[project] = {k: v for k, v in row.items() if k != "AnalysedAt"}
    assert rows["mem-same-a"] == rows["mem-same-b"]
    assert rows["mem-same-a"]["DispatchDelaysMs"] == [250.0]  # ready at 250 ms (model start + 0.15 s), ran at 500


def test_spans_another_collector_stored_are_read_back(embedded_store: Store, base: int) -> None:
    spans = agent_run(new_trace_id(), base, tools=2)
    stored(embedded_store, "mem-other", spans[3:])  # stored, never seen by this collector
    assembler = TraceAssembler(embedded_store, grace_seconds=0.0)
    assembler.observe(stored(embedded_store, "mem-other", spans[:3]))

    assert assembler.run_due() == 1 and assembler.read_back == 1
    assert split(embedded_store, "mem-other", spans[0].trace_id) == (1000.0, 300.0, 200.0, 500.0, 4)


def test_a_span_held_twice_is_read_back_once(embedded_store: Store, base: int) -> None:
    """A retried export: the span's two rows are one span, as the store's reads make them."""
    spans = agent_run(new_trace_id(), base)
    assembler = TraceAssembler(embedded_store, grace_seconds=0.0)
    assembler.observe(stored(embedded_store, "mem-twice", spans))
    assembler.observe(stored(embedded_store, "mem-twice", spans[2:]))

    assert assembler.run_due() == 1 and assembler.read_back == 1
    assert split(embedded_store, "mem-twice", spans[0].trace_id) == (1000.0, 300.0, 100.0, 600.0, 3)


def test_a_late_span_has_the_whole_trace_read_back(embedded_store: Store, base: int) -> None:
    spans = agent_run(new_trace_id(), base, tools=2)
    assembler = TraceAssembler(embedded_store, grace_seconds=0.0)
    assembler.observe(stored(embedded_store, "mem-late", spans[:3]))
    assert assembler.run_due() == 1 and assembler.read_back == 0
    assert split(embedded_store, "mem-late", spans[0].trace_id) == (1000.0, 300.0, 100.0, 600.0, 3)

    assembler.observe(stored(embedded_store, "mem-late", spans[3:]))  # the spans analysed before were let go
    assert assembler.run_due() == 1 and assembler.read_back == 1
    assert split(embedded_store, "mem-late", spans[0].trace_id) == (1000.0, 300.0, 200.0, 500.0, 4)


def test_spans_in_several_held_batches_are_analysed_together(embedded_store: Store, base: int) -> None:
    spans = agent_run(new_trace_id(), base, tools=3)
    assembler = TraceAssembler(embedded_store, grace_seconds=0.0)
    for part in (spans[:2], spans[2:4], spans[4:]):
        assembler.observe(stored(embedded_store, "mem-parts", part))

    assert assembler.run_due() == 1 and assembler.read_back == 0
    assert split(embedded_store, "mem-parts", spans[0].trace_id) == (1000.0, 300.0, 300.0, 400.0, 5)


def test_past_its_memory_budget_the_oldest_batch_is_let_go_and_its_traces_read_back(
    embedded_store: Store, base: int
) -> None:
    first, second = agent_run(new_trace_id(), base), agent_run(new_trace_id(), base + 5 * MS)
    assembler = TraceAssembler(embedded_store, grace_seconds=0.0)
    assembler.observe(stored(embedded_store, "mem-budget", first))
    assembler.held_bytes = assembler.held_bytes_now() * 3 // 2  # room for one batch of this size
    assembler.observe(stored(embedded_store, "mem-budget", second))

    assert assembler.run_due() == 2 and assembler.read_back == 1
    assert split(embedded_store, "mem-budget", first[0].trace_id) == (1000.0, 300.0, 100.0, 600.0, 3)
    assert split(embedded_store, "mem-budget", second[0].trace_id) == (1000.0, 300.0, 100.0, 600.0, 3)
    assert assembler.held_bytes_now() == 0


def test_the_same_trace_id_in_two_projects_is_two_traces(embedded_store: Store, base: int) -> None:
    trace_id = new_trace_id()
    assembler = TraceAssembler(embedded_store, grace_seconds=0.0)
    assembler.observe(stored(embedded_store, "mem-project-a", agent_run(trace_id, base)))
    assembler.observe(stored(embedded_store, "mem-project-b", agent_run(trace_id, base, tools=2)))

    assert assembler.run_due() == 2 and assembler.read_back == 0
    assert split(embedded_store, "mem-project-a", trace_id)[-1] == 3
    assert split(embedded_store, "mem-project-b", trace_id)[-1] == 4


def test_a_root_arriving_after_its_children_waits_and_counts(embedded_store: Store, base: int) -> None:
    """A trace without its root waits; the root's batch joins the held ones and the trace is analysed whole."""
    spans = agent_run(new_trace_id(), base)
    clock = [0.0]
    assembler = TraceAssembler(embedded_store, grace_seconds=1.0, clock=lambda: clock[0])
    assembler.observe(stored(embedded_store, "mem-root", spans[1:]))
    clock[0] = 2.0
    assert assembler.run_due() == 0  # no root yet: partial only after the partial timeout
    assembler.observe(stored(embedded_store, "mem-root", spans[:1]))
    clock[0] = 3.5
    assert assembler.run_due() == 1 and assembler.read_back == 0
    row = embedded_store.trace_analysis("mem-root", spans[0].trace_id)
    assert row is not None and (row["Partial"], row["SpanCount"], row["RootSpanId"]) == (0, 3, spans[0].span_id)


def test_a_batch_it_cannot_hold_has_its_traces_read_back(embedded_store: Store, base: int) -> None:
    """A batch logged by another version, without a column the analysis input reads: scheduled all the same."""
    spans = agent_run(new_trace_id(), base)
    batch = stored(embedded_store, "mem-other-version", spans)
    assembler = TraceAssembler(embedded_store, grace_seconds=0.0)
    assembler.observe(batch.drop_columns(["Events.Name"]))

    assert assembler.run_due() == 1 and assembler.read_back == 1 and assembler.held_bytes_now() == 0
    assert split(embedded_store, "mem-other-version", spans[0].trace_id) == (1000.0, 300.0, 100.0, 600.0, 3)


def _assembler(store: Store, clock: list[float]) -> TraceAssembler:
    return TraceAssembler(store, grace_seconds=5.0, settle_seconds=1.0, clock=lambda: clock[0])


def test_a_trace_whose_every_parent_arrived_is_analysed_after_the_settle(embedded_store: Store, base: int) -> None:
    clock = [0.0]
    assembler = _assembler(embedded_store, clock)
    assembler.observe(stored(embedded_store, "settle-closed", agent_run(new_trace_id(), base)))
    clock[0] = 0.9
    assert assembler.run_due() == 0
    clock[0] = 1.1
    assert assembler.run_due() == 1


def test_a_trace_missing_a_parent_waits_the_grace(embedded_store: Store, base: int) -> None:
    """A span whose parent has not arrived (another service's, a batch exporter's next round): the grace."""
    root, model, tool = agent_run(new_trace_id(), base)
    inner = SpanSpec("child of the missing one", trace_id=root.trace_id, parent_span_id=tool.span_id, start_ns=base)
    clock = [0.0]
    assembler = _assembler(embedded_store, clock)
    assembler.observe(stored(embedded_store, "settle-open", [root, model, inner]))
    clock[0] = 4.9
    assert assembler.run_due() == 0
    clock[0] = 5.1
    assert assembler.run_due() == 1
    assert split(embedded_store, "settle-open", root.trace_id)[-1] == 3


def test_the_missing_parent_arriving_closes_the_trace(embedded_store: Store, base: int) -> None:
    root, model, tool = agent_run(new_trace_id(), base)
    inner = SpanSpec("child", trace_id=root.trace_id, parent_span_id=tool.span_id, start_ns=base + 510 * MS)
    clock = [0.0]
    assembler = _assembler(embedded_store, clock)
    assembler.observe(stored(embedded_store, "settle-joined", [root, inner]))  # model and tool come later
    clock[0] = 2.0
    assembler.observe(stored(embedded_store, "settle-joined", [model]))
    clock[0] = 3.5
    assert assembler.run_due() == 0  # the tool, parent of inner, is still missing: 7.0
    assembler.observe(stored(embedded_store, "settle-joined", [tool]))
    clock[0] = 4.4
    assert assembler.run_due() == 0
    clock[0] = 4.6  # closed at 3.5: due 4.5, not 8.5
    assert assembler.run_due() == 1 and assembler.read_back == 0
    assert split(embedded_store, "settle-joined", root.trace_id)[-1] == 4


def test_a_span_arriving_after_the_analysis_waits_the_grace(embedded_store: Store, base: int) -> None:
    """Its parent is in the spans analysed before, which the collector no longer holds: it waits for others."""
    root, model, tool = agent_run(new_trace_id(), base)
    clock = [0.0]
    assembler = _assembler(embedded_store, clock)
    assembler.observe(stored(embedded_store, "settle-late", [root, model, tool]))
    clock[0] = 1.1
    assert assembler.run_due() == 1
    late = SpanSpec("late", trace_id=root.trace_id, parent_span_id=model.span_id, start_ns=base + 110 * MS)
    assembler.observe(stored(embedded_store, "settle-late", [late]))
    clock[0] = 2.5
    assert assembler.run_due() == 0
    clock[0] = 6.2
    assert assembler.run_due() == 1
    assert split(embedded_store, "settle-late", root.trace_id)[-1] == 4


def test_the_background_passes_store_every_pass(embedded_store: Store, base: int) -> None:
    """Passes of one trace each, run back to back by the assembler's thread: every row lands, counted once."""
    traces = [new_trace_id() for _ in range(5)]
    assembler = TraceAssembler(embedded_store, grace_seconds=0.0, batch_size=1)
    for i, trace_id in enumerate(traces):
        assembler.observe(stored(embedded_store, "mem-passes", agent_run(trace_id, base, tools=i + 1)))
    assembler.start(interval=0.01)
    try:
        deadline = time.monotonic() + 30
        while assembler.analysed < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        assembler.stop()
    assert assembler.analysed == 5 and assembler.pending() == 0
    assert [split(embedded_store, "mem-passes", t)[2:] for t in traces] == [
        (100.0, 600.0, 3), (200.0, 500.0, 4), (300.0, 400.0, 5), (400.0, 300.0, 6), (500.0, 200.0, 7),
    ]  # fmt: skip


class _RefusesFirstWrite:
    """The real store, but its first write of analysis rows fails as a store that is down does."""

    def __init__(self, store: Store) -> None:
        self._store, self.refused = store, 0

    def write_traces(self, table: pa.Table) -> None:
        if not self.refused:
            self.refused = 1
            raise StoreError("the store is down (refused by the test)")
        self._store.write_traces(table)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_rows_the_store_refuses_are_analysed_again_after_the_grace(embedded_store: Store, base: int) -> None:
    trace_id, now = new_trace_id(), [100.0]
    store = _RefusesFirstWrite(embedded_store)
    assembler = TraceAssembler(store, grace_seconds=2.0, settle_seconds=0.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assembler.observe(stored(embedded_store, "mem-refused", agent_run(trace_id, base)))

    assert assembler.run_due() == 0 and store.refused == 1 and assembler.analysed == 0
    assert embedded_store.trace_analysis("mem-refused", trace_id) is None
    assert assembler.pending() == 1
    now[0] += 1.9
    assert assembler.run_due() == 0  # within the grace
    now[0] += 0.2
    assert assembler.run_due() == 1 and assembler.analysed == 1 and assembler.read_back == 1
    assert split(embedded_store, "mem-refused", trace_id) == (1000.0, 300.0, 100.0, 600.0, 3)
