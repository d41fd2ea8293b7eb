"""The engine's OTLP decoder (collector/ingest/otlp_engine.py) gives exactly the reference decoder's batch
(``otlp.to_batch``, span by span in Python) for any request: every normaliser case, limits and their
flags, odd values, rejected and expired spans, and random requests."""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from agentlat import semconv as sc
from agentlat.collector.ingest.otlp import DAY_NS, Limits, TraceRequest, logged_form, to_batch
from agentlat.collector.ingest.otlp_engine import decode_requests
from agentlat.collector.normalise import vector as normalise_vector
from agentlat.store import Store
from bench.ingest import build_requests
from tests.test_normalise import DIALECT_CASES, EDGE_CASES, INNER_CASES, MS, T0, Case

RECEIVED = T0 + 60_000 * MS
TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")


def value_of(python: Any) -> AnyValue:
    """An OTLP AnyValue holding ``python``."""
    if python is None:
        return AnyValue()
    if isinstance(python, bool):
        return AnyValue(bool_value=python)
    if isinstance(python, int):
        return AnyValue(int_value=python)
    if isinstance(python, float):
        return AnyValue(double_value=python)
    if isinstance(python, bytes):
        return AnyValue(bytes_value=python)
    if isinstance(python, list | tuple):
        return AnyValue(array_value=ArrayValue(values=[value_of(v) for v in python]))
    if isinstance(python, dict):
        return AnyValue(kvlist_value=KeyValueList(values=attributes_of(python)))
    return AnyValue(string_value=str(python))


def attributes_of(values: dict[str, Any] | Sequence[tuple[str, Any]]) -> list[KeyValue]:
    pairs = values.items() if isinstance(values, dict) else values
    return [KeyValue(key=key, value=value_of(value)) for key, value in pairs]


def span_of_case(case: Case, number: int) -> Span:
    events = [Span.Event(name=name, time_unix_nano=T0 + round(at * MS)) for name, at in case.events]
    return Span(
        trace_id=TRACE,
        span_id=(number + 1).to_bytes(8, "big"),
        name=case.name,
        kind=Span.SpanKind.Value(f"SPAN_KIND_{case.kind.upper()}"),
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + round(case.duration_ms * MS),
        attributes=attributes_of({k: v for k, v in case.attrs.items() if isinstance(k, str)}),
        events=events,
    )


def request_of(*spans: Span, resource: dict[str, Any] | None = None) -> ExportTraceServiceRequest:
    attributes = attributes_of({"service.name": "svc"} if resource is None else resource)
    scope = InstrumentationScope(name="lib", version="1.0")
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(resource=Resource(attributes=attributes), scope_spans=[ScopeSpans(scope=scope, spans=spans)])
        ]
    )


def logged(request: ExportTraceServiceRequest, limits: Limits, received: int = RECEIVED) -> TraceRequest:
    return logged_form(request, "proj", received, limits).batch


def assert_same(store: Store, requests: Sequence[ExportTraceServiceRequest], limits: Limits | None = None) -> pa.Table:
    """The engine's batch of the requests equals the reference's, column by column; returns it."""
    limits = limits or Limits()
    engine = decode_requests([logged(r, limits) for r in requests], limits, store.parse_trace_requests)
    assert engine.undecodable == []
    reference = pa.concat_tables([to_batch(r, "proj", RECEIVED, limits).batch for r in requests])
    assert engine.batch.schema.equals(reference.schema)
    for name in reference.schema.names:
        got, want = engine.batch.column(name).to_pylist(), reference.column(name).to_pylist()
        assert _same(got, want), f"{name}: engine {got} != reference {want}"
    return engine.batch


def _same(got: Any, want: Any) -> bool:
    """Equal, NaN equal to NaN (a NaN double attribute is rendered, never derived)."""
    if isinstance(got, float) and isinstance(want, float):
        return got == want or (math.isnan(got) and math.isnan(want))
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in got)
    if isinstance(got, tuple) and isinstance(want, tuple):
        return _same(list(got), list(want))
    return got == want


# --- every case the normaliser is tested on ----------------------------------------------------------
def _representable(case: Case) -> bool:
    """Attributes OTLP can carry: string keys; values of its types, integers within int64."""

    def fits(value: Any) -> bool:
        if isinstance(value, bool) or value is None or isinstance(value, str | float | bytes):
            return True
        if isinstance(value, int):
            return -(2**63) <= value < 2**63
        if isinstance(value, list | tuple):
            return all(fits(v) for v in value)
        return isinstance(value, dict) and all(isinstance(k, str) and fits(v) for k, v in value.items())

    return all(isinstance(k, str) and fits(v) for k, v in case.attrs.items())


ALL_CASES = [c for c in (*DIALECT_CASES, *EDGE_CASES, *INNER_CASES) if _representable(c)]


def test_every_normaliser_case_decodes_as_the_reference(embedded_store: Store) -> None:
    spans = [span_of_case(case, n) for n, case in enumerate(ALL_CASES)]
    batch = assert_same(embedded_store, [request_of(*spans)])
    assert batch.num_rows == len(ALL_CASES) >= 100


def test_the_benchmark_requests_decode_as_the_reference(embedded_store: Store) -> None:
    requests = [ExportTraceServiceRequest.FromString(body) for body in build_requests(3)]
    assert assert_same(embedded_store, requests).num_rows == 3000


def test_the_benchmark_spans_are_derived_column_wise() -> None:
    """The dialects the benchmark (and the agentlat SDK) writes need no span-by-span derive."""
    genai = next(c for c in normalise_vector._COMPILED if c.dialect.name == "genai")
    assert normalise_vector._columnwise(genai.dialect)


# --- limits, flags and odd values --------------------------------------------------------------------
def _span(number: int = 1, **fields: Any) -> Span:
    fields.setdefault("trace_id", TRACE)
    fields.setdefault("span_id", number.to_bytes(8, "big"))
    fields.setdefault("start_time_unix_nano", T0)
    fields.setdefault("end_time_unix_nano", T0 + 5 * MS)
    fields.setdefault("name", "op")
    return Span(**fields)


ODD_VALUES = [
    ("empty", ""), ("zero", 0), ("negative", -7), ("big", 2**63 - 1), ("smallest", -(2**63)),
    ("nan", math.nan), ("inf", math.inf), ("negative zero", -0.0), ("tiny", 5e-324), ("exp", 1e-05),
    ("whole", 100.0), ("huge", 1.5e300), ("false", False), ("unset", None), ("unicode", "İstanbul ✓ 😀"),
    ("quote", 'a"b\\c\n'), ("array", ["a", 1, 2.5, True, None]), ("empty array", []),
    ("kvlist", {"k": "v", "n": 1, "k2": 0.5}), ("duplicate kv", [("k", 1), ("k", 2)]),
]  # fmt: skip


def test_odd_values_render_and_derive_as_the_reference(embedded_store: Store) -> None:
    attributes = [(key, value if not isinstance(value, list) or key != "duplicate kv" else dict(value))
                  for key, value in ODD_VALUES]  # fmt: skip
    genai_typed = {sc.GEN_AI_OPERATION_NAME: "chat", **{f"gen_ai.usage.{k}": v for k, v in ODD_VALUES}}
    spans = [
        _span(1, attributes=attributes_of(attributes)),
        _span(2, attributes=attributes_of([*genai_typed.items(), ("gen_ai.request.model", 5)])),
        _span(3, attributes=attributes_of([("agentlat.route", "/a"), ("agentlat.route", "/b"), ("k", "x" * 40)])),
        _span(4, kind=99, status=Status(code=7, message="odd")),
        _span(5, name="ai.streamText.doStream", attributes=attributes_of({"ai.response.msToFirstChunk": "12.5"})),
        _span(6, name="llm_request", kind=Span.SpanKind.SPAN_KIND_SERVER),
    ]
    assert_same(embedded_store, [request_of(*spans, resource={"service.name": 7, "host": ["a"]})])


def _doubles_either_side_of_each_notation() -> list[float]:
    """Doubles where Python's ``repr`` and Arrow's text may part: a few ulps either side of where ``repr``
    turns to exponents (1e-4, 1e16) and of where Arrow may (1e15, 2**53), whole numbers, zeros, non-finite
    values, and random bit patterns."""
    edges = []
    for edge in (1e-4, 1e15, 1e16, 2.0**53, 1e21, 1.0):
        below = above = edge
        for _ in range(3):
            below, above = math.nextafter(below, 0.0), math.nextafter(above, math.inf)
            edges += [below, above, -below, -above]
        edges += [edge, -edge]
    rng = random.Random(21)
    patterns = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(3_000)]
    return [*edges, 0.0, -0.0, 100.0, 123456789012345.6, 9999999999999998.0, math.nan, -math.inf, *patterns]


def test_doubles_render_as_python_repr_in_either_notation(embedded_store: Store) -> None:
    doubles = _doubles_either_side_of_each_notation()
    per_span = 200
    spans = [
        _span(n + 1, attributes=attributes_of([(f"d{i}", v) for i, v in enumerate(doubles[first : first + per_span])]))
        for n, first in enumerate(range(0, len(doubles), per_span))
    ]
    batch = assert_same(embedded_store, [request_of(*spans)])
    stored = [text for attributes in batch.column("SpanAttributes").to_pylist() for _, text in attributes]
    assert stored == [repr(v) for v in doubles]


@pytest.mark.parametrize("service", [None, "", 0, 1.5, True, False, ["a"], {"k": 1}])
def test_service_name_of_any_type(embedded_store: Store, service: Any) -> None:
    assert_same(embedded_store, [request_of(_span(), resource={"service.name": service, "x": 1})])


def test_limits_cut_and_flag_as_the_reference(embedded_store: Store) -> None:
    limits = Limits(max_attributes=3, max_value_chars=4, max_events=2)
    event_attributes = attributes_of({"long": "abcdefgh", "n": 12345, "x": 1, "y": 2})
    events = [Span.Event(name=f"e{i}", time_unix_nano=T0 + i, attributes=event_attributes) for i in range(4)]
    events[1].time_unix_nano = 2**64 - 1  # past int64: read as 0 and flagged
    links = [Span.Link(trace_id=TRACE, span_id=b"\x01" * 8, attributes=event_attributes, trace_state="t=1")]
    spans = [
        _span(1, attributes=attributes_of({"a": "long value", "b": 1.25, "c": True, "d": "dropped"}), events=events),
        _span(2, links=links, start_time_unix_nano=0),
        _span(3, start_time_unix_nano=RECEIVED + DAY_NS, end_time_unix_nano=RECEIVED),  # future, ends before
        _span(4, start_time_unix_nano=RECEIVED - 40 * DAY_NS),  # past
        _span(5, attributes=attributes_of({sc.GEN_AI_OPERATION_NAME: "execute_tool", sc.GEN_AI_TOOL_NAME: "searcher"})),
    ]
    assert_same(embedded_store, [request_of(*spans, resource={"service.name": "a-long-service"})], limits)


def test_rejected_and_expired_spans_are_left_out_as_the_reference(embedded_store: Store) -> None:
    limits = Limits(retention_days=7)
    spans = [
        _span(1),
        _span(2, trace_id=b"\x00" * 16),
        _span(3, span_id=b"\x01" * 7),
        _span(4, parent_span_id=b"\x01" * 3),
        _span(5, end_time_unix_nano=2**63),
        _span(6, start_time_unix_nano=RECEIVED - 9 * DAY_NS, end_time_unix_nano=RECEIVED - 8 * DAY_NS),  # expired
        _span(7, parent_span_id=b"\x00" * 8),  # kept: a zero parent is an id like any other
    ]
    batch = assert_same(embedded_store, [request_of(*spans)], limits)
    assert batch.column("SpanId").to_pylist() == [(1).to_bytes(8, "big").hex(), (7).to_bytes(8, "big").hex()]


def test_values_the_engine_does_not_represent_go_to_the_reference(embedded_store: Store) -> None:
    """bytes, and arrays or lists inside arrays or lists: that request is decoded by the reference, the others
    by the engine."""
    plain = request_of(_span(1, attributes=attributes_of({"a": 1})))
    nested = request_of(_span(2, attributes=attributes_of({"n": [[1, 2], {"k": [3]}]})))
    raw = request_of(_span(3, events=[Span.Event(name="e", attributes=attributes_of({"b": b"\x00\xff"}))]))
    in_resource = request_of(_span(4), resource={"service.name": "s", "blob": b"\x01"})
    in_array = request_of(_span(5, links=[Span.Link(trace_id=TRACE, span_id=b"\x01" * 8,
                                                    attributes=attributes_of({"l": ["a", b"\xff"]}))]))  # fmt: skip
    requests = (plain, nested, raw, in_resource, in_array, plain)
    limits = Limits()
    engine = decode_requests([logged(r, limits) for r in requests], limits, embedded_store.parse_trace_requests)
    reference = pa.concat_tables([to_batch(r, "proj", RECEIVED, limits).batch for r in requests])
    assert engine.batch.to_pylist() == reference.to_pylist()


def test_a_call_the_engine_refuses_is_decoded_request_by_request(embedded_store: Store) -> None:
    requests = [request_of(_span(n)) for n in (1, 2)]
    limits = Limits()
    calls: list[int] = []

    def refusing(bodies: Sequence[bytes]) -> pa.Table:
        calls.append(len(bodies))
        raise RuntimeError("engine down")

    decoded = decode_requests([logged(r, limits) for r in requests], limits, refusing)
    assert calls == [2, 1, 1]
    assert (
        decoded.batch.to_pylist()
        == pa.concat_tables([to_batch(r, "proj", RECEIVED, limits).batch for r in requests]).to_pylist()
    )


def test_a_request_nothing_can_decode_is_reported_not_dropped(embedded_store: Store) -> None:
    good = logged(request_of(_span(1)), Limits())
    broken = TraceRequest(b"\x0a\xff\xff", "proj", RECEIVED, -1, 1)
    decoded = decode_requests([good, broken], Limits(), embedded_store.parse_trace_requests)
    assert decoded.batch.num_rows == 1
    assert [request for request, _ in decoded.undecodable] == [broken]


def test_the_record_keeps_the_request_whole() -> None:
    request = TraceRequest(b"\x00body\xff", "projé", RECEIVED, RECEIVED - DAY_NS, 12)
    record = request.to_record()
    assert TraceRequest.is_record(record) and not TraceRequest.is_record(b"\xff\xff\xff\xff")
    assert TraceRequest.from_record(record) == request


# --- random requests ---------------------------------------------------------------------------------
TABLE_KEYS = list(normalise_vector.TABLE_KEYS)
KIND_WORDS = ["chat", "Chat ", "EXECUTE_TOOL", "invoke_agent", "llm", "tool", "agent", "generation", "İ", "",
              "ai.streamText.doStream", "chat completion with x", "workflow", "task", "embeddings"]  # fmt: skip
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True),
    st.sampled_from(KIND_WORDS), st.text(max_size=8),
    st.sampled_from(["12", " 3.5 ", "1e3", "-1", "nan", "1_000", "true", "False", "0", "hit", " MISS "]),
)  # fmt: skip
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=3), scalars, max_size=2))
keys = st.one_of(st.sampled_from(TABLE_KEYS), st.text(max_size=6), st.sampled_from(["sglang.x", "gen_ai.latency.q"]))
names = st.one_of(st.text(max_size=10), st.sampled_from(["llm_request", "ai.generateText", "Message with x", "op"]))
event_names = st.sampled_from(
    ["gen_ai.content.completion.chunk", "First Token Stream Event", "x", "agentlat.tool_call"]
)


@st.composite
def spans(draw: st.DrawFn, number: int) -> Span:
    start = draw(st.sampled_from([T0, 0, RECEIVED + 20 * 60 * 10**9, T0 + 1, 2**63 + 5]))
    events = [
        Span.Event(name=draw(event_names), time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                   attributes=attributes_of(draw(st.lists(st.tuples(keys, scalars), max_size=2))))
        for _ in range(draw(st.integers(0, 3)))
    ]  # fmt: skip
    return Span(
        trace_id=draw(st.sampled_from([TRACE, b"\x00" * 16, b"\x01" * 15])),
        span_id=number.to_bytes(8, "big"),
        parent_span_id=draw(st.sampled_from([b"", b"\x02" * 8])),
        name=draw(names),
        kind=draw(st.integers(-1, 7)),
        start_time_unix_nano=start,
        end_time_unix_nano=draw(st.sampled_from([start, start + 7 * MS, T0, start + 10**13])) % 2**64,
        attributes=attributes_of(draw(st.lists(st.tuples(keys, values), max_size=8))),
        events=events,
        status=Status(code=draw(st.integers(0, 4))),
    )


@st.composite
def requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    count = draw(st.integers(1, 6))
    resource = dict(draw(st.lists(st.tuples(st.sampled_from(["service.name", "k"]), scalars), max_size=2)))
    return request_of(*(draw(spans(n + 1)) for n in range(count)), resource=resource)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(requests(), min_size=1, max_size=3), small=st.booleans())
def test_random_requests_decode_as_the_reference(embedded_store: Store, batch: list, small: bool) -> None:
    limits = Limits(max_attributes=4, max_value_chars=6, max_events=2, retention_days=3) if small else Limits()
    assert_same(embedded_store, batch, limits)
