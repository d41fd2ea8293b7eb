"""Fuzzing the OTLP/HTTP receiver with 10,000+ inputs: never a 5xx, never a crash, and the
good spans of a mixed request are kept."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.otlp_payloads import SpanSpec, otlp_json, otlp_protobuf
from tests.servers import ServerProcess, wait_for

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
RUNS = {"protobuf": 3000, "json": 3000, "mutated": 4000}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    server = ServerProcess(tmp_path_factory.mktemp("fuzz")).start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield server, client
    assert server.process is not None and server.process.poll() is None, "the server died during fuzzing"
    server.stop()


def check(client: httpx.Client, body: bytes, headers: dict[str, str]) -> httpx.Response:
    response = client.post("/v1/traces", content=body, headers=headers)
    assert response.status_code < 500, (response.status_code, response.text[:300], body[:200])
    return response


ids = st.one_of(st.binary(max_size=20), st.binary(min_size=16, max_size=16), st.binary(min_size=8, max_size=8))
any_values = st.recursive(
    st.one_of(st.text(max_size=30), st.integers(-(2**63), 2**63 - 1), st.floats(), st.booleans(), st.none()),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=8,
)


@st.composite
def protobuf_requests(draw: st.DrawFn) -> bytes:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 3))):
        rs = request.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = draw(st.text(max_size=20))
        scope = rs.scope_spans.add()
        for _ in range(draw(st.integers(0, 4))):
            span = scope.spans.add(
                trace_id=draw(ids), span_id=draw(ids), parent_span_id=draw(ids), name=draw(st.text(max_size=40)),
                kind=draw(st.integers(-3, 9)), start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                end_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
            )  # fmt: skip
            for key, value in draw(st.dictionaries(st.text(max_size=40), any_values, max_size=6)).items():
                _set(span.attributes.add(key=key).value, value)
            span.status.code = draw(st.integers(-2, 5))
            for _ in range(draw(st.integers(0, 2))):
                span.events.add(name=draw(st.text(max_size=20)), time_unix_nano=draw(st.integers(0, 2**64 - 1)))
    return request.SerializeToString()


def _set(target: object, value: object) -> None:
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, list):
        for item in value:
            _set(target.array_value.values.add(), item)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=20,
)
otlp_keys = st.sampled_from(
    ["resourceSpans", "scopeSpans", "spans", "traceId", "spanId", "parentSpanId", "name", "kind", "attributes",
     "startTimeUnixNano", "endTimeUnixNano", "events", "links", "status", "code", "key", "value", "stringValue",
     "intValue", "arrayValue", "values", "resource"]
)  # fmt: skip
otlp_shaped = st.recursive(
    json_values,
    lambda inner: st.dictionaries(otlp_keys, inner, max_size=5) | st.lists(inner, max_size=3),
    max_leaves=30,
)


@settings(max_examples=RUNS["protobuf"], deadline=None, suppress_health_check=list(HealthCheck))
@given(body=protobuf_requests())
def test_fuzz_protobuf(fuzzed: tuple[ServerProcess, httpx.Client], body: bytes) -> None:
    check(fuzzed[1], body, PROTOBUF)


@settings(max_examples=RUNS["json"], deadline=None, suppress_health_check=list(HealthCheck))
@given(document=st.one_of(otlp_shaped, st.dictionaries(st.just("resourceSpans"), otlp_shaped)))
def test_fuzz_json(fuzzed: tuple[ServerProcess, httpx.Client], document: object) -> None:
    check(fuzzed[1], json.dumps(document).encode(), JSON)


def _real_payloads() -> list[tuple[bytes, dict[str, str]]]:
    spans = [SpanSpec(f"s{i}", attributes={"gen_ai.operation.name": "chat", "n": i, "f": 0.5}) for i in range(5)]
    return [(otlp_protobuf(spans), PROTOBUF), (json.dumps(otlp_json(spans)).encode(), JSON)]


def test_fuzz_truncated_and_corrupted_real_payloads(fuzzed: tuple[ServerProcess, httpx.Client]) -> None:
    rng = random.Random(20261129)
    payloads = _real_payloads()
    for i in range(RUNS["mutated"]):
        body, headers = payloads[i % 2]
        mutated = bytearray(body)
        if i % 3 == 0:
            mutated = mutated[: rng.randrange(1, len(mutated))]
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        check(fuzzed[1], bytes(mutated), headers)


def test_good_spans_in_mixed_requests_are_kept(fuzzed: tuple[ServerProcess, httpx.Client]) -> None:
    server, client = fuzzed
    good = [SpanSpec("kept one", service="fuzz-mixed"), SpanSpec("kept two", service="fuzz-mixed")]
    bad = [
        SpanSpec("bad id", trace_id="ab"),
        SpanSpec("zero", span_id="00" * 8),
        SpanSpec("huge", start_ns=2**64 - 1, duration_ns=0),
    ]
    response = check(client, otlp_protobuf([bad[0], good[0], bad[1], good[1], bad[2]]), PROTOBUF)
    assert response.status_code == 200
    for spec in good:
        spans = wait_for(lambda spec=spec: server.get(f"/api/v1/traces/{spec.trace_id}").json().get("spans"))
        assert [s["name"] for s in spans] == [spec.name]
    assert server.get("/readyz").status_code == 200
