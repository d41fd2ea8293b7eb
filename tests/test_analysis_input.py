"""A trace's spans as analysis input (``assembler.spans_by_trace``), in both forms the store gives: read back
from the real store (``Store.analysis_input``), and computed from the batch just stored (``analysis_input_of``).
Each test runs on both, with the same expected records."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from agentlat.collector.analysis.assembler import _details, spans_by_trace, trace_rows
from agentlat.collector.analysis.critical_path import SpanRecord, StreamedToolCall, analyse
from agentlat.collector.ingest.otlp import Limits, parse_protobuf, to_batch
from agentlat.store import Store, analysis_input_of
from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id, otlp_protobuf

FORMS = ["read back", "from the batch"]


def stored_input(store: Store, form: str, spans: list[SpanSpec], project: str, traces: list[str]) -> pa.Table:
    """Store the spans, then their analysis input in one of the two forms."""
    batch = to_batch(parse_protobuf(otlp_protobuf(spans)), project, time.time_ns(), Limits()).batch
    store.insert_spans(batch)
    if form == "read back":
        return store.analysis_input(project, traces)
    held = analysis_input_of(batch)
    return held.filter(pc.is_in(held.column("trace_id"), pa.array(traces)))


@pytest.mark.parametrize("form", FORMS)
def test_stored_spans_become_span_records_by_trace(embedded_store: Store, form: str) -> None:
    base = time.time_ns() - 600_000 * MS
    traces = [new_trace_id(), new_trace_id()]
    root, calls = new_span_id(), [new_span_id() for _ in range(3)]
    tool = {"gen_ai.operation.name": "execute_tool", "agentlat.route": "/input"}
    spans = [
        SpanSpec("invoke_agent a", trace_id=traces[0], span_id=root, start_ns=base, duration_ns=900 * MS,
                 service="input-svc", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
        SpanSpec("chat m1", trace_id=traces[0], span_id=calls[0], parent_span_id=root, start_ns=base + 10 * MS,
                 duration_ns=300 * MS, service="input-svc",
                 attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m1",
                             "gen_ai.response.time_to_first_chunk": 0.125, "gen_ai.usage.input_tokens": 700}),
        SpanSpec("execute_tool b", trace_id=traces[0], span_id=calls[1], parent_span_id=root,
                 start_ns=base + 400 * MS, duration_ns=100 * MS, service="input-svc",
                 attributes={**tool, "gen_ai.tool.name": "b", "gen_ai.tool.call.id": "c2",
                             "agentlat.tool.depends_on": '["c0", "c1"]'}),
        SpanSpec("execute_tool c", trace_id=traces[0], span_id=calls[2], parent_span_id=root,
                 start_ns=base + 500 * MS, duration_ns=50 * MS, service="input-svc",
                 attributes={**tool, "gen_ai.tool.name": "c", "agentlat.tool.depends_on": "c2"}),
        SpanSpec("execute_tool d", trace_id=traces[1], start_ns=base, duration_ns=20 * MS, service="input-svc",
                 attributes={**tool, "gen_ai.tool.name": "d"}),
    ]  # fmt: skip
    by_trace = spans_by_trace(stored_input(embedded_store, form, spans, "input", traces))

    assert sorted(by_trace) == sorted(traces)
    records = {r.span_id: r for r in by_trace[traces[0]]}
    assert set(records) == {root, *calls}
    assert records[root] == SpanRecord(
        span_id=root, parent_span_id="", name="invoke_agent a", service="input-svc", start_ns=base,
        end_ns=base + 900 * MS, role="agent", agent="a",
    )  # fmt: skip
    model = records[calls[0]]
    assert (model.role, model.model, model.ttft_ms, model.input_tokens) == ("model", "m1", 125.0, 700)
    assert (model.start_ns, model.end_ns, model.depends_on) == (base + 10 * MS, base + 310 * MS, ())
    assert (records[calls[1]].tool, records[calls[1]].depends_on) == ("b", ("c0", "c1"))  # a JSON list
    assert (records[calls[2]].tool, records[calls[2]].depends_on) == ("c", ("c2",))  # one id as plain text
    [lone] = by_trace[traces[1]]
    assert (lone.tool, lone.parent_span_id, lone.depends_on, lone.route) == ("d", "", (), "/input")


@pytest.mark.parametrize("form", FORMS)
def test_streamed_tool_calls_are_read_from_the_model_spans_events(embedded_store: Store, form: str) -> None:
    """A model span's ``agentlat.tool_call`` events become its streamed tool calls (offsets from its start as
    unix ns); other events, and those events on spans that are not model calls, are left out; a tool span's
    ``agentlat.tool.args_ready_time`` is read as is."""
    base = time.time_ns() - 600_000 * MS
    trace, model, tool, other = new_trace_id(), new_span_id(), new_span_id(), new_span_id()
    ready = {"agentlat.tool_call.named_at": 0.125, "agentlat.tool_call.ready_at": 0.3,
             "gen_ai.tool.call.id": "call_0", "gen_ai.tool.name": "search"}  # fmt: skip
    events = [
        ("gen_ai.content.completion.chunk", base + 50 * MS, {}),
        ("agentlat.tool_call", base + 300 * MS, ready),
        ("agentlat.tool_call", base + 400 * MS, {"agentlat.tool_call.named_at": 0.4, "gen_ai.tool.call.id": "c1"}),
        ("agentlat.tool_call", base + 500 * MS, {"agentlat.tool_call.ready_at": "soon", "gen_ai.tool.call.id": "c2"}),
    ]
    spans = [
        SpanSpec("chat m", trace_id=trace, span_id=model, start_ns=base, duration_ns=900 * MS, events=events,
                 attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}),
        SpanSpec("execute_tool search", trace_id=trace, span_id=tool, start_ns=base + 950 * MS, duration_ns=MS,
                 attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                             "gen_ai.tool.call.id": "call_0", "agentlat.tool.args_ready_time": base + 310 * MS}),
        SpanSpec("step", trace_id=trace, span_id=other, start_ns=base, duration_ns=MS, events=events[1:2],
                 attributes={"agentlat.tool.args_ready_time": base}),
    ]  # fmt: skip
    records = {r.span_id: r for r in spans_by_trace(stored_input(embedded_store, form, spans, "input", [trace]))[trace]}

    assert records[model].tool_calls == (
        StreamedToolCall("call_0", "search", base + 125 * MS, base + 300 * MS),
        StreamedToolCall("c1", "", base + 400 * MS, None),  # never complete
        StreamedToolCall("c2", "", None, None),  # not a time
    )
    assert (records[model].args_ready_ns, records[tool].tool_calls) == (None, ())
    assert records[tool].args_ready_ns == base + 310 * MS
    assert (records[other].tool_calls, records[other].args_ready_ns) == ((), None)


@pytest.mark.parametrize("form", FORMS)
def test_each_value_counts_only_for_its_role(embedded_store: Store, form: str) -> None:
    """A response id counts on model calls only, an args-ready time on tool calls only and only as an integer
    of ns; status Error is an error; events of a span without tool calls leave the next span's alone."""
    base = time.time_ns() - 600_000 * MS
    trace = new_trace_id()
    ids = [new_span_id() for _ in range(5)]
    call = {"agentlat.tool_call.ready_at": 0.02, "gen_ai.tool.call.id": "k"}
    spans = [
        SpanSpec("step", trace_id=trace, span_id=ids[0], start_ns=base, duration_ns=MS, status_code=2,
                 attributes={"gen_ai.response.id": "r-step", "agentlat.phase": "decode"},
                 events=[("note", base, {"x": "1"}), ("another", base, {})]),
        SpanSpec("chat m", trace_id=trace, span_id=ids[1], start_ns=base, duration_ns=100 * MS,
                 attributes={"gen_ai.operation.name": "chat", "gen_ai.response.id": "r-1"},
                 events=[("agentlat.tool_call", base + 20 * MS, call)]),
        SpanSpec("execute_tool a", trace_id=trace, span_id=ids[2], start_ns=base + 200 * MS, duration_ns=MS,
                 attributes={"gen_ai.operation.name": "execute_tool", "agentlat.tool.args_ready_time": "1.5"}),
        SpanSpec("execute_tool b", trace_id=trace, span_id=ids[3], start_ns=base + 300 * MS, duration_ns=MS,
                 attributes={"gen_ai.operation.name": "execute_tool",
                             "agentlat.tool.args_ready_time": str(2**63)}),
        SpanSpec("execute_tool c", trace_id=trace, span_id=ids[4], start_ns=base + 400 * MS, duration_ns=MS,
                 attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.response.id": "r-tool",
                             "agentlat.tool.args_ready_time": str(base + 399 * MS)}),
    ]  # fmt: skip

    records = {r.span_id: r for r in spans_by_trace(stored_input(embedded_store, form, spans, "roles", [trace]))[trace]}

    step, model, a, b, c = (records[i] for i in ids)
    assert (step.error, step.response_id, step.phase, step.tool_calls) == (True, "", "decode", ())
    assert (model.error, model.response_id) == (False, "r-1")
    assert model.tool_calls == (StreamedToolCall("k", "", None, base + 20 * MS),)
    assert (a.args_ready_ns, b.args_ready_ns) == (None, None)  # not an integer; past int64
    assert (c.args_ready_ns, c.response_id) == (base + 399 * MS, "")


def test_the_trace_row_keeps_the_details_exactly() -> None:
    """``Details`` (the trace view's segments, what-ifs and dispatched calls) reads back as the analysis gave it:
    nanosecond times at the ends of int64 whole, fractions of a millisecond unrounded."""
    start = 2**63 - 10**12  # a trace 1,000 s before the last representable nanosecond
    spans = [
        SpanRecord("root", "", "invoke_agent", "svc", start, start + 900 * MS, "agent"),
        SpanRecord(
            "chat", "root", "chat", "svc", start + 1 * MS, start + 400 * MS, "model",
            tool_calls=(StreamedToolCall("call-1", "search", None, start + 300 * MS + 1),),
        ),
        SpanRecord("tool", "root", "execute_tool", "svc", start + 410 * MS + 7, start + 800 * MS, "tool",
                   tool="search", tool_call_id="call-1"),
    ]  # fmt: skip
    analysis = analyse(spans)
    row = trace_rows("p", [("t", analysis)], 0).to_pylist()[0]
    details = json.loads(row["Details"])
    assert details == _details(analysis)
    assert details["segments"][-1][2] == start + 900 * MS
    assert details["dispatched"][0]["ready_ns"] == start + 300 * MS + 1
    assert details["dispatched"][0]["delay_ms"] == 110.000006
