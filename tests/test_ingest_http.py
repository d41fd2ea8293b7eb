"""OTLP/HTTP ingest against a real collector process: what lands, and every bad input."""

from __future__ import annotations

import gzip
import json
import time

import httpx
import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id, otlp_json, otlp_protobuf
from tests.servers import ServerProcess, wait_for

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
MIB = 1024 * 1024


def post(server: ServerProcess, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/traces", content=body, headers=headers, timeout=30)


def trace_spans(server: ServerProcess, trace_id: str, expected: int) -> list[dict]:
    def fetch() -> list[dict] | None:
        response = server.get(f"/api/v1/traces/{trace_id}")
        spans = response.json()["spans"] if response.status_code == 200 else []
        return spans if len(spans) >= expected else None

    return wait_for(fetch)


def test_real_otlp_exporter_spans_land_exactly(server: ServerProcess) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "exporter-svc", "service.version": "1.2.3"}))
    exporter = OTLPSpanExporter(endpoint=f"{server.url}/v1/traces")
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test-scope", "0.9")
    with (
        tracer.start_as_current_span(
            "invoke_agent planner",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "planner",
                "agentlat.route": "/plan",
            },
        ),
        tracer.start_as_current_span(
            "chat gpt-4o",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.time_to_first_chunk": 0.004,
                "gen_ai.usage.input_tokens": 1200,
                "gen_ai.usage.cache_read.input_tokens": 1000,
                "gen_ai.request.stream": True,
                "tags": ["a", "b"],
            },
        ) as chat,
    ):
        chat.add_event("first chunk", {"n": 1})
    provider.shutdown()
    sent = {format(s.context.span_id, "016x"): s for s in memory.get_finished_spans()}
    trace_id = format(next(iter(sent.values())).context.trace_id, "032x")

    stored = {s["span_id"]: s for s in trace_spans(server, trace_id, 2)}
    assert stored.keys() == sent.keys()
    for span_id, original in sent.items():
        got = stored[span_id]
        assert got["trace_id"] == trace_id
        assert got["parent_span_id"] == (format(original.parent.span_id, "016x") if original.parent else "")
        assert got["start_ns"] == original.start_time
        assert got["duration_ns"] == original.end_time - original.start_time
        assert got["service"] == "exporter-svc"
        assert got["resource"]["service.version"] == "1.2.3"
        assert got["scope_name"] == "test-scope" and got["scope_version"] == "0.9"
    chat = stored[format(next(s for s in sent.values() if s.name == "chat gpt-4o").context.span_id, "016x")]
    assert chat["kind"] == "Client"
    assert chat["attributes"] == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.time_to_first_chunk": "0.004",
        "gen_ai.usage.input_tokens": "1200",
        "gen_ai.usage.cache_read.input_tokens": "1000",
        "gen_ai.request.stream": "true",
        "tags": '["a","b"]',
    }
    assert [e["name"] for e in chat["events"]] == ["first chunk"]
    assert chat["events"][0]["attributes"] == {"n": "1"}
    derived = chat["derived"]
    assert derived["Role"] == "model" and derived["Dialect"] == "genai"
    assert derived["Model"] == "gpt-4o" and derived["Provider"] == "openai"
    assert derived["TtftMs"] == pytest.approx(4.0)
    assert derived["InputTokens"] == 1200 and derived["CacheReadTokens"] == 1000
    assert derived["Streaming"] == 1
    root = next(s for s in stored.values() if s["parent_span_id"] == "")
    assert root["derived"]["Role"] == "agent" and root["derived"]["Agent"] == "planner"
    assert root["derived"]["Route"] == "/plan"


def test_hand_written_otlp_json_lands(server: ServerProcess) -> None:
    trace_id, root_id, child_id = new_trace_id(), new_span_id(), new_span_id()
    t0 = (time.time_ns() // 10**9 - 3600) * 10**9  # a whole second an hour ago
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]},
                "schemaUrl": "https://opentelemetry.io/schemas/1.26.0",
                "futureField": {"ignored": True},
                "scopeSpans": [
                    {
                        "scope": {"name": "hand", "unknown": 1},
                        "spans": [
                            {
                                "traceId": trace_id.upper(),
                                "spanId": root_id,
                                "name": "execute_tool search",
                                "kind": 3,
                                "startTimeUnixNano": str(t0),
                                "endTimeUnixNano": t0 + 250 * MS,
                                "attributes": [
                                    {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                                    {"key": "gen_ai.tool.name", "value": {"stringValue": "search"}},
                                    {"key": "retries", "value": {"intValue": "3"}},
                                ],
                                "status": {"code": 2, "message": "timeout"},
                                "someNewSpanField": [1, 2],
                            },
                            {
                                "traceId": trace_id,
                                "spanId": child_id,
                                "parentSpanId": root_id,
                                "name": "http GET",
                                "startTimeUnixNano": str(t0 + 10 * MS),
                                "endTimeUnixNano": str(t0 + 20 * MS),
                            },
                        ],
                    }
                ],
            }
        ]
    }
    response = post(server, json.dumps(body).encode(), JSON)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {}
    server_window = {"start": str(t0 // 10**9 - 100), "end": str(t0 // 10**9 + 100)}
    spans = {s["span_id"]: s for s in trace_spans(server, trace_id, 2)}
    root = spans[root_id]
    assert root["start_ns"] == t0
    assert root["duration_ns"] == 250 * MS
    assert root["kind"] == "Client"
    assert root["status_code"] == "Error" and root["status_message"] == "timeout"
    assert root["attributes"]["retries"] == "3"
    assert root["derived"]["Role"] == "tool" and root["derived"]["Tool"] == "search"
    assert spans[child_id]["parent_span_id"] == root_id
    listed = server.get("/api/v1/traces", service="json-svc", **server_window).json()["traces"]
    assert [(t["trace_id"], t["duration_ms"], t["errors"]) for t in listed] == [(trace_id, 250.0, 1)]


def _status(response: httpx.Response) -> status_pb2.Status:
    if response.headers["content-type"].startswith("application/x-protobuf"):
        return status_pb2.Status.FromString(response.content)
    body = response.json()
    return status_pb2.Status(code=body["code"], message=body["message"])


BOMB = gzip.compress(b"\0" * (21 * MIB))


@pytest.mark.parametrize(
    ("case", "body", "headers", "status", "code", "message"),
    [
        ("garbage protobuf", b"\xff\xfe not protobuf \x00\x01", PROTOBUF, 400, code_pb2.INVALID_ARGUMENT, "protobuf"),
        ("invalid json", b"{not json", JSON, 400, code_pb2.INVALID_ARGUMENT, "not valid JSON"),
        ("json not an object", b"[1, 2]", JSON, 400, code_pb2.INVALID_ARGUMENT, "JSON object"),
        ("json wrong type", b'{"resourceSpans": "x"}', JSON, 400, code_pb2.INVALID_ARGUMENT, "OTLP trace schema"),
        ("wrong content type", b"hello", {"Content-Type": "text/plain"}, 415, code_pb2.INVALID_ARGUMENT, "text/plain"),
        (
            "bad gzip",
            b"definitely not gzip",
            {**PROTOBUF, "Content-Encoding": "gzip"},
            400,
            code_pb2.INVALID_ARGUMENT,
            "gzip",
        ),
        ("unknown encoding", b"x", {**PROTOBUF, "Content-Encoding": "br"}, 415, code_pb2.INVALID_ARGUMENT, "br"),
        (
            "gzip bomb",
            BOMB,
            {**PROTOBUF, "Content-Encoding": "gzip"},
            413,
            code_pb2.RESOURCE_EXHAUSTED,
            "after decompression",
        ),
        ("oversize body", b"\0" * (21 * MIB), PROTOBUF, 413, code_pb2.RESOURCE_EXHAUSTED, "larger than"),
    ],
)
def test_bad_input_gets_documented_status(
    server: ServerProcess, case: str, body: bytes, headers: dict[str, str], status: int, code: int, message: str
) -> None:
    response = post(server, body, headers)
    assert response.status_code == status, case
    error = _status(response)
    assert error.code == code
    assert message in error.message


@pytest.mark.parametrize(
    ("body", "headers"),
    [(b"", PROTOBUF), (b"", JSON), (b"{}", JSON), (gzip.compress(b""), {**PROTOBUF, "Content-Encoding": "gzip"})],
)
def test_empty_request_is_success(server: ServerProcess, body: bytes, headers: dict[str, str]) -> None:
    response = post(server, body, headers)
    assert response.status_code == 200
    if headers["Content-Type"] == "application/json":
        assert response.json() == {}
    else:
        assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_invalid_ids_rejected_but_valid_spans_land(server: ServerProcess, encoding: str) -> None:
    good = SpanSpec("good span", service="partial-svc")
    bad_trace = SpanSpec("bad trace id", trace_id="00" * 16, service="partial-svc")
    bad_span = SpanSpec("bad span id", span_id="abcd", service="partial-svc")
    spans = [bad_trace, good, bad_span]
    if encoding == "json":
        payload = otlp_json(spans)
        payload["resourceSpans"][0]["scopeSpans"][0]["spans"][2]["spanId"] = "zz-not-hex"
        response = post(server, json.dumps(payload).encode(), JSON)
        partial = response.json()["partialSuccess"]
        rejected, message = int(partial["rejectedSpans"]), partial["errorMessage"]
    else:
        response = post(server, otlp_protobuf(spans), PROTOBUF)
        partial = ExportTraceServiceResponse.FromString(response.content).partial_success
        rejected, message = partial.rejected_spans, partial.error_message
    assert response.status_code == 200
    assert rejected == 2
    assert "trace_id" in message and "span_id" in message
    stored = trace_spans(server, good.trace_id, 1)
    assert [s["name"] for s in stored] == ["good span"]


def test_gzip_and_chunked_bodies_land(server: ServerProcess) -> None:
    spans = [SpanSpec("gzipped", service="enc-svc"), SpanSpec("chunked", service="enc-svc")]
    response = post(server, gzip.compress(otlp_protobuf(spans[:1])), {**PROTOBUF, "Content-Encoding": "gzip"})
    assert response.status_code == 200
    payload = otlp_protobuf(spans[1:])

    def pieces():
        for i in range(0, len(payload), 7):
            yield payload[i : i + 7]

    response = httpx.post(f"{server.url}/v1/traces", content=pieces(), headers=PROTOBUF, timeout=30)
    assert response.status_code == 200
    for spec in spans:
        assert [s["name"] for s in trace_spans(server, spec.trace_id, 1)] == [spec.name]


def test_duplicate_delivery_counts_once(server: ServerProcess) -> None:
    spec = SpanSpec("retried", service="dup-svc", duration_ns=7 * MS)
    body = otlp_protobuf([spec])
    assert post(server, body, PROTOBUF).status_code == 200
    assert post(server, body, PROTOBUF).status_code == 200
    trace_spans(server, spec.trace_id, 1)
    result = server.get("/api/v1/percentiles", metric="span", service="dup-svc", window="2h").json()
    assert result["rows"][0]["count"] == 1
