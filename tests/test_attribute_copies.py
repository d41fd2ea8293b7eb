"""A call or conversation id equal to the span's own GenAI attribute is stored once (migration 18,
``store.schema.stored_once``): the column is written empty with a bit saying "read the attribute", and
every read (a trace's spans, the analysis input) gives back exactly the value the collector derived."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from agentlat.collector.ingest.otlp import Limits, parse_protobuf, to_batch
from agentlat.store import Store, analysis_input_of
from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id, otlp_protobuf

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
OPENINFERENCE_TOOL = {"openinference.span.kind": "TOOL", "tool.name": "search"}

# name: (attributes, the ToolCallId and ConversationId the collector derives, AttributeCopies stored)
CASES: dict[str, tuple[dict[str, object], str, str, int]] = {
    "GenAI tool call: kept once": ({**TOOL, "gen_ai.tool.call.id": "call_a1"}, "call_a1", "", 0b01),
    "agent run with a conversation: kept once": (
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "conv_7"}, "", "conv_7", 0b10,
    ),
    "both ids on one span": (
        {**TOOL, "gen_ai.tool.call.id": "call_b", "gen_ai.conversation.id": "conv_8"}, "call_b", "conv_8", 0b11,
    ),
    "OpenInference's own key: the column keeps it": ({**OPENINFERENCE_TOOL, "tool_call.id": "oi_1"}, "oi_1", "", 0),
    "dialect key and GenAI key differ: the column keeps the dialect's": (
        {**OPENINFERENCE_TOOL, "tool_call.id": "oi_2", "gen_ai.tool.call.id": "genai_2"}, "oi_2", "", 0,
    ),
    "an id that is not text: no column value, the attribute's text stays in the map only": (
        {**TOOL, "gen_ai.tool.call.id": 123}, "", "", 0,
    ),
    "an empty id": ({**TOOL, "gen_ai.tool.call.id": ""}, "", "", 0),
    "no id at all": (dict(TOOL), "", "", 0),
}  # fmt: skip


@pytest.fixture
def stored(embedded_store: Store) -> tuple[Store, str, pa.Table, dict[str, str]]:
    """Every case as one span of a trace under an agent root, decoded and stored as the collector does."""
    base, trace, root = time.time_ns() - 600_000 * MS, new_trace_id(), new_span_id()
    spans = [SpanSpec("root", trace_id=trace, span_id=root, start_ns=base, duration_ns=900 * MS)]
    ids = {}
    for i, (name, (attributes, *_)) in enumerate(CASES.items()):
        ids[name] = new_span_id()
        spans.append(
            SpanSpec(f"case {i}", trace_id=trace, span_id=ids[name], parent_span_id=root,
                     start_ns=base + (i + 1) * MS, duration_ns=MS, attributes=attributes)
        )  # fmt: skip
    batch = to_batch(parse_protobuf(otlp_protobuf(spans)), "copies", time.time_ns(), Limits()).batch
    embedded_store.insert_spans(batch)
    return embedded_store, trace, batch, ids


def test_the_collector_derives_the_cases_ids(stored: tuple[Store, str, pa.Table, dict[str, str]]) -> None:
    _, _, batch, ids = stored
    derived = {r["SpanId"]: (r["ToolCallId"], r["ConversationId"]) for r in batch.to_pylist()}
    assert {name: derived[ids[name]] for name in CASES} == {name: (c[1], c[2]) for name, c in CASES.items()}


def test_an_id_equal_to_its_attribute_is_stored_once(stored: tuple[Store, str, pa.Table, dict[str, str]]) -> None:
    store, trace, _, ids = stored
    rows = store.backend.query_arrow(
        "SELECT SpanId, ToolCallId, ConversationId, AttributeCopies FROM otel_traces WHERE TraceId = {t:String}",
        {"t": trace},
    ).to_pylist()
    on_disk = {r["SpanId"]: (r["ToolCallId"], r["ConversationId"], r["AttributeCopies"]) for r in rows}
    expected = {
        name: ("" if bits & 1 else call, "" if bits & 2 else conversation, bits)
        for name, (_, call, conversation, bits) in CASES.items()
    }
    assert {name: on_disk[ids[name]] for name in CASES} == expected


def test_every_read_gives_back_the_derived_ids(stored: tuple[Store, str, pa.Table, dict[str, str]]) -> None:
    store, trace, batch, ids = stored
    spans = {s["span_id"]: s for s in store.trace_spans("copies", trace)}
    assert {name: (spans[ids[name]]["ToolCallId"], spans[ids[name]]["ConversationId"]) for name in CASES} == {
        name: (c[1], c[2]) for name, c in CASES.items()
    }
    assert dict(spans[ids["both ids on one span"]]["attributes"])["gen_ai.tool.call.id"] == "call_b"  # map whole
    read_back = {r["span_id"]: r["tool_call_id"] for r in store.analysis_input("copies", [trace]).to_pylist()}
    from_batch = {r["span_id"]: r["tool_call_id"] for r in analysis_input_of(batch).to_pylist()}
    assert read_back == from_batch
    assert read_back[ids["GenAI tool call: kept once"]] == "call_a1"
