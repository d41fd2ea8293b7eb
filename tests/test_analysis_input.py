"""A trace's spans read back from the real store as analysis input (``assembler.spans_by_trace``)."""

from __future__ import annotations

import time

from agentlat.collector.analysis import SpanRecord, StreamedToolCall
from agentlat.collector.assembler import spans_by_trace
from agentlat.collector.otlp import Limits, parse_protobuf, to_batch
from agentlat.store import Store
from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id, otlp_protobuf


def test_stored_spans_become_span_records_by_trace(embedded_store: Store) -> None:
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
    embedded_store.insert_spans(to_batch(parse_protobuf(otlp_protobuf(spans)), "input", time.time_ns(), Limits()).batch)

    by_trace = spans_by_trace(embedded_store.analysis_input("input", traces))

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


def test_streamed_tool_calls_are_read_from_the_model_spans_events(embedded_store: Store) -> None:
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
    embedded_store.insert_spans(to_batch(parse_protobuf(otlp_protobuf(spans)), "input", time.time_ns(), Limits()).batch)

    records = {r.span_id: r for r in spans_by_trace(embedded_store.analysis_input("input", [trace]))[trace]}

    assert records[model].tool_calls == (
        StreamedToolCall("call_0", "search", base + 125 * MS, base + 300 * MS),
        StreamedToolCall("c1", "", base + 400 * MS, None),  # never complete
        StreamedToolCall("c2", "", None, None),  # not a time
    )
    assert (records[model].args_ready_ns, records[tool].tool_calls) == (None, ())
    assert records[tool].args_ready_ns == base + 310 * MS
    assert (records[other].tool_calls, records[other].args_ready_ns) == ((), None)
