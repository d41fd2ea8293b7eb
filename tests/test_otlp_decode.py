"""OTLP trace decoding: protobuf and OTLP/JSON requests to one Arrow batch of the spans table."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pyarrow as pa
import pytest
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

from agentlat.collector.ingest.otlp import (
    DecodedBatch,
    Limits,
    OtlpDecodeError,
    any_value,
    as_text,
    parse_json,
    parse_protobuf,
    to_batch,
)

TRACE_HEX = "5b8efff798038103d269b633813fc60c"
SPAN_HEX = "eee19b7ec3c1b174"
PARENT_HEX = "eee19b7ec3c1b173"
LINK_TRACE_HEX = "0af7651916cd43dd8448eb211c80319c"
LINK_SPAN_HEX = "b7ad6b7169203331"
RECEIVED = 1_700_000_000_000_000_000  # fixed "now", so clock-skew checks are deterministic
START = RECEIVED - 2_000_000_000
END = START + 1_500_000_000
MINUTE = 60 * 1_000_000_000
DAY = 24 * 60 * MINUTE
TRACE_ERROR = "trace_id must be 16 non-zero bytes (32 hex characters)"
SPAN_ERROR = "span_id must be 8 non-zero bytes (16 hex characters)"
PARENT_ERROR = "parent_span_id must be empty or 8 bytes (16 hex characters)"


# --- builders ---------------------------------------------------------------------------


def kv(key: str, value: AnyValue) -> KeyValue:
    return KeyValue(key=key, value=value)


def s(text: str) -> AnyValue:
    return AnyValue(string_value=text)


def pb_span(name: str = "op", **fields: Any) -> Span:
    fields.setdefault("trace_id", bytes.fromhex(TRACE_HEX))
    fields.setdefault("span_id", bytes.fromhex(SPAN_HEX))
    fields.setdefault("start_time_unix_nano", START)
    fields.setdefault("end_time_unix_nano", END)
    return Span(name=name, **fields)


def pb_request(*spans: Span, resource: list[KeyValue] | None = None) -> ExportTraceServiceRequest:
    attributes = [kv("service.name", s("checkout"))] if resource is None else resource
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=attributes),
                scope_spans=[ScopeSpans(scope=InstrumentationScope(name="lib", version="1.2"), spans=list(spans))],
            )
        ]
    )


def decode(request: ExportTraceServiceRequest, limits: Limits | None = None, project: str = "proj") -> DecodedBatch:
    return to_batch(request, project, RECEIVED, limits or Limits())


def rows(decoded: DecodedBatch) -> list[dict[str, Any]]:
    """The batch as plain rows, timestamps as integer unix ns (pylist would give pandas Timestamps)."""
    table = decoded.batch
    for name, int_type in (("Timestamp", pa.int64()), ("Events.Timestamp", pa.list_(pa.int64()))):
        table = table.set_column(table.schema.get_field_index(name), name, table[name].cast(int_type))
    return table.to_pylist()


def only_row(decoded: DecodedBatch) -> dict[str, Any]:
    assert (decoded.accepted, decoded.rejected, decoded.errors) == (1, 0, [])
    [row] = rows(decoded)
    return row


def json_document(int64: type = str, **span_fields: Any) -> dict[str, Any]:
    """An OTLP/JSON request equal to ``full_pb_request()``, with unknown fields at every level."""

    def n(value: int) -> Any:
        return int64(value)

    span = {
        "traceId": TRACE_HEX,
        "spanId": SPAN_HEX,
        "parentSpanId": PARENT_HEX,
        "traceState": "vendor=1",
        "name": "GET /orders",
        "kind": 2,
        "startTimeUnixNano": n(START),
        "endTimeUnixNano": n(END),
        "attributes": [
            {"key": "http.route", "value": {"stringValue": "/orders"}},
            {"key": "count", "value": {"intValue": n(100)}},
            {"key": "ratio", "value": {"doubleValue": 0.25}},
            {"key": "ok", "value": {"boolValue": True}, "unknownOnKeyValue": 1},
            {"key": "tags", "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"stringValue": "b"}]}}},
            {
                "key": "meta",
                "value": {
                    "kvlistValue": {"values": [{"key": "k", "value": {"stringValue": "v"}}]},
                    "unknownOnAnyValue": "x",
                },
            },
        ],
        "events": [
            {
                "timeUnixNano": n(START + 10),
                "name": "exception",
                "attributes": [{"key": "exception.type", "value": {"stringValue": "ValueError"}}],
                "unknownOnEvent": [1, 2],
            }
        ],
        "links": [
            {
                "traceId": LINK_TRACE_HEX,
                "spanId": LINK_SPAN_HEX,
                "traceState": "k=v",
                "attributes": [{"key": "link.kind", "value": {"stringValue": "follows"}}],
                "unknownOnLink": None,
            }
        ],
        "status": {"code": 2, "message": "boom", "unknownOnStatus": True},
        "unknownOnSpan": {"nested": {"deeper": [1]}},
    }
    span.update(span_fields)
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "checkout"}}],
                    "unknownOnResource": 1,
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "lib", "version": "1.2", "unknownOnScope": "z"},
                        "spans": [span],
                        "unknownOnScopeSpans": 3,
                    }
                ],
                "unknownOnResourceSpans": "y",
            }
        ],
        "unknownTopLevel": {"a": 1},
    }


def full_pb_request() -> ExportTraceServiceRequest:
    return pb_request(
        pb_span(
            "GET /orders",
            parent_span_id=bytes.fromhex(PARENT_HEX),
            trace_state="vendor=1",
            kind=Span.SPAN_KIND_SERVER,
            attributes=[
                kv("http.route", s("/orders")),
                kv("count", AnyValue(int_value=100)),
                kv("ratio", AnyValue(double_value=0.25)),
                kv("ok", AnyValue(bool_value=True)),
                kv("tags", AnyValue(array_value=ArrayValue(values=[s("a"), s("b")]))),
                kv("meta", AnyValue(kvlist_value=KeyValueList(values=[kv("k", s("v"))]))),
            ],
            events=[
                Span.Event(
                    time_unix_nano=START + 10, name="exception", attributes=[kv("exception.type", s("ValueError"))]
                )
            ],
            links=[
                Span.Link(
                    trace_id=bytes.fromhex(LINK_TRACE_HEX),
                    span_id=bytes.fromhex(LINK_SPAN_HEX),
                    trace_state="k=v",
                    attributes=[kv("link.kind", s("follows"))],
                )
            ],
            status=Status(code=Status.STATUS_CODE_ERROR, message="boom"),
        )
    )


FULL_ROW = {
    "Timestamp": START,
    "TraceId": TRACE_HEX,
    "SpanId": SPAN_HEX,
    "ParentSpanId": PARENT_HEX,
    "TraceState": "vendor=1",
    "SpanName": "GET /orders",
    "SpanKind": "Server",
    "ServiceName": "checkout",
    "ResourceAttributes": [("service.name", "checkout")],
    "ScopeName": "lib",
    "ScopeVersion": "1.2",
    "SpanAttributes": [
        ("http.route", "/orders"),
        ("count", "100"),
        ("ratio", "0.25"),
        ("ok", "true"),
        ("tags", '["a","b"]'),
        ("meta", '{"k":"v"}'),
    ],
    "Duration": 1_500_000_000,
    "StatusCode": "Error",
    "StatusMessage": "boom",
    "Events.Timestamp": [START + 10],
    "Events.Name": ["exception"],
    "Events.Attributes": [[("exception.type", "ValueError")]],
    "Links.TraceId": [LINK_TRACE_HEX],
    "Links.SpanId": [LINK_SPAN_HEX],
    "Links.TraceState": ["k=v"],
    "Links.Attributes": [[("link.kind", "follows")]],
    "Role": "other",
    "Dialect": "",
    "Model": "",
    "TtftMs": None,
    "ProjectId": "proj",
    "IngestFlags": [],
}


def subset(row: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in like}


# --- protobuf ---------------------------------------------------------------------------


def test_protobuf_span_decodes_to_exact_columns() -> None:
    body = full_pb_request().SerializeToString()

    row = only_row(decode(parse_protobuf(body)))

    assert subset(row, FULL_ROW) == FULL_ROW
    assert decode(parse_protobuf(body)).batch.schema.names == list(row)


def test_empty_protobuf_body_is_an_empty_request() -> None:
    decoded = decode(parse_protobuf(b""))

    assert (decoded.accepted, decoded.rejected, decoded.errors, decoded.batch.num_rows) == (0, 0, [], 0)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\xff\xff\xff\xff", id="invalid-tag"),
        pytest.param(b"garbage bytes", id="text"),
        pytest.param(b"\x0a\x05abc", id="length-past-end"),
        pytest.param(b"\x0a\xff", id="truncated-varint"),
        pytest.param(b'{"resourceSpans": []}', id="json-sent-as-protobuf"),
    ],
)
def test_garbage_protobuf_raises_decode_error(body: bytes) -> None:
    with pytest.raises(OtlpDecodeError, match="not an OTLP ExportTraceServiceRequest protobuf"):
        parse_protobuf(body)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (Span.SPAN_KIND_UNSPECIFIED, "Unspecified"),
        (Span.SPAN_KIND_INTERNAL, "Internal"),
        (Span.SPAN_KIND_SERVER, "Server"),
        (Span.SPAN_KIND_CLIENT, "Client"),
        (Span.SPAN_KIND_PRODUCER, "Producer"),
        (Span.SPAN_KIND_CONSUMER, "Consumer"),
        (99, "Unspecified"),
    ],
)
def test_span_kind_names(kind: int, expected: str) -> None:
    assert only_row(decode(pb_request(pb_span(kind=kind))))["SpanKind"] == expected


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (Status.STATUS_CODE_UNSET, "Unset"),
        (Status.STATUS_CODE_OK, "Ok"),
        (Status.STATUS_CODE_ERROR, "Error"),
        (7, "Unset"),
    ],
)
def test_status_code_names(code: int, expected: str) -> None:
    row = only_row(decode(pb_request(pb_span(status=Status(code=code, message="m")))))

    assert (row["StatusCode"], row["StatusMessage"]) == (expected, "m")


@pytest.mark.parametrize("via", ["protobuf", "json"])
def test_negative_enum_values_map_to_the_unknown_name(via: str) -> None:
    if via == "protobuf":
        request = pb_request(pb_span(kind=-1, status=Status(code=-1)))
    else:
        request = parse_json(json.dumps(json_document(kind=-1, status={"code": -1})).encode())

    row = only_row(decode(request))

    assert (row["SpanKind"], row["StatusCode"]) == ("Unspecified", "Unset")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(s("hello"), "hello", id="string"),
        pytest.param(AnyValue(string_value=""), "", id="empty-string"),
        pytest.param(AnyValue(int_value=100), "100", id="int"),
        pytest.param(AnyValue(int_value=-7), "-7", id="negative-int"),
        pytest.param(AnyValue(int_value=2**63 - 1), "9223372036854775807", id="int64-max"),
        pytest.param(AnyValue(double_value=0.25), "0.25", id="double"),
        pytest.param(AnyValue(bool_value=True), "true", id="true"),
        pytest.param(AnyValue(bool_value=False), "false", id="false"),
        pytest.param(AnyValue(array_value=ArrayValue(values=[s("a"), s("b")])), '["a","b"]', id="array"),
        pytest.param(
            AnyValue(
                array_value=ArrayValue(
                    values=[AnyValue(int_value=1), s("x"), AnyValue(bool_value=True), AnyValue(double_value=0.5)]
                )
            ),
            '[1,"x",true,0.5]',
            id="mixed-array",
        ),
        pytest.param(
            AnyValue(kvlist_value=KeyValueList(values=[kv("k", s("v")), kv("n", AnyValue(int_value=1))])),
            '{"k":"v","n":1}',
            id="kvlist",
        ),
        pytest.param(
            AnyValue(
                kvlist_value=KeyValueList(
                    values=[kv("outer", AnyValue(array_value=ArrayValue(values=[s("x"), AnyValue()])))]
                )
            ),
            '{"outer":["x",null]}',
            id="nested",
        ),
        pytest.param(AnyValue(bytes_value=b"\x01\x02\xff"), "AQL/", id="bytes-as-base64"),
        pytest.param(AnyValue(), "", id="unset"),
    ],
)
def test_span_attributes_are_rendered_as_strings(value: AnyValue, text: str) -> None:
    row = only_row(decode(pb_request(pb_span(attributes=[kv("attr", value)]))))

    assert row["SpanAttributes"] == [("attr", text)]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (s("x"), "x"),
        (AnyValue(int_value=5), 5),
        (AnyValue(double_value=1.5), 1.5),
        (AnyValue(bool_value=False), False),
        (AnyValue(bytes_value=b"hi"), "aGk="),
        (AnyValue(array_value=ArrayValue(values=[s("a"), AnyValue(int_value=2)])), ["a", 2]),
        (AnyValue(kvlist_value=KeyValueList(values=[kv("k", AnyValue(bool_value=True))])), {"k": True}),
        (AnyValue(), None),
    ],
)
def test_any_value_to_python(value: AnyValue, expected: Any) -> None:
    result = any_value(value)

    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("s", "s"),
        (True, "true"),
        (False, "false"),
        (100, "100"),
        (0.25, "0.25"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (math.nan, "nan"),
        (None, ""),
        (["a", "b"], '["a","b"]'),
        ({"k": [1, 2], "b": False}, '{"k":[1,2],"b":false}'),
    ],
)
def test_as_text(value: Any, text: str) -> None:
    assert as_text(value) == text


@pytest.mark.parametrize(
    ("resource", "service"),
    [
        pytest.param([kv("service.name", s("checkout"))], "checkout", id="named"),
        pytest.param([], "unknown_service", id="no-attributes"),
        pytest.param([kv("host.name", s("h1"))], "unknown_service", id="other-attributes"),
        pytest.param([kv("service.name", s(""))], "unknown_service", id="empty-name"),
    ],
)
def test_service_name_comes_from_the_resource(resource: list[KeyValue], service: str) -> None:
    row = only_row(decode(pb_request(pb_span(), resource=resource)))

    assert row["ServiceName"] == service
    assert row["ResourceAttributes"] == [(a.key, a.value.string_value) for a in resource]


def test_each_resource_keeps_its_own_service_and_scope_and_the_project_is_set() -> None:
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=[kv("service.name", s(service))]),
                scope_spans=[
                    ScopeSpans(scope=InstrumentationScope(name=f"{service}-scope"), spans=[pb_span(f"{service}-op")])
                ],
            )
            for service in ("api", "worker")
        ]
    )

    decoded = decode(request, project="tenant-7")

    assert (decoded.accepted, decoded.rejected) == (2, 0)
    assert [(r["SpanName"], r["ServiceName"], r["ScopeName"], r["ProjectId"]) for r in rows(decoded)] == [
        ("api-op", "api", "api-scope", "tenant-7"),
        ("worker-op", "worker", "worker-scope", "tenant-7"),
    ]


@pytest.mark.parametrize(
    ("trace_id", "span_id", "parent_span_id", "message"),
    [
        pytest.param(bytes(range(1, 16)), None, b"", TRACE_ERROR, id="trace-15-bytes"),
        pytest.param(bytes(16), None, b"", TRACE_ERROR, id="trace-all-zero"),
        pytest.param(b"", None, b"", TRACE_ERROR, id="trace-empty"),
        pytest.param(None, bytes(range(1, 10)), b"", SPAN_ERROR, id="span-9-bytes"),
        pytest.param(None, bytes(8), b"", SPAN_ERROR, id="span-all-zero"),
        pytest.param(None, None, bytes(range(1, 8)), PARENT_ERROR, id="parent-7-bytes"),
    ],
)
def test_protobuf_span_with_invalid_id_is_rejected_alone(
    trace_id: bytes | None, span_id: bytes | None, parent_span_id: bytes, message: str
) -> None:
    ids = {"parent_span_id": parent_span_id}
    if trace_id is not None:
        ids["trace_id"] = trace_id
    if span_id is not None:
        ids["span_id"] = span_id

    decoded = decode(pb_request(pb_span("good-1"), pb_span("bad", **ids), pb_span("good-2")))

    assert (decoded.accepted, decoded.rejected) == (2, 1)
    assert decoded.errors == [f"span 'bad': {message}"]
    assert decoded.error_message() == f"span 'bad': {message}"
    assert [r["SpanName"] for r in rows(decoded)] == ["good-1", "good-2"]


def test_only_the_first_five_errors_are_reported() -> None:
    bad = [pb_span(f"bad-{i}", trace_id=bytes(16)) for i in range(7)]

    decoded = decode(pb_request(pb_span("good"), *bad))

    assert (decoded.accepted, decoded.rejected) == (1, 7)
    assert decoded.errors == [f"span 'bad-{i}': {TRACE_ERROR}" for i in range(5)]
    assert decoded.error_message() == "; ".join(decoded.errors) + "; and 2 more"


# --- OTLP/JSON --------------------------------------------------------------------------


@pytest.mark.parametrize("int64", [str, int], ids=["int64-as-strings", "int64-as-numbers"])
def test_json_decodes_to_the_same_row_as_protobuf(int64: type) -> None:
    body = json.dumps(json_document(int64)).encode()

    from_json = rows(decode(parse_json(body)))
    from_protobuf = rows(decode(full_pb_request()))

    assert from_json == from_protobuf
    assert subset(from_json[0], FULL_ROW) == FULL_ROW


def test_json_hex_ids_are_not_base64_decoded() -> None:
    # protobuf's own JSON mapping would read these 32 characters as base64 (24 wrong bytes)
    request = parse_json(json.dumps(json_document()).encode())
    span = request.resource_spans[0].scope_spans[0].spans[0]

    assert (span.trace_id, span.span_id, span.parent_span_id) == (
        bytes.fromhex(TRACE_HEX),
        bytes.fromhex(SPAN_HEX),
        bytes.fromhex(PARENT_HEX),
    )
    assert (span.links[0].trace_id, span.links[0].span_id) == (
        bytes.fromhex(LINK_TRACE_HEX),
        bytes.fromhex(LINK_SPAN_HEX),
    )


def test_json_uppercase_hex_ids_are_stored_lowercase() -> None:
    document = json_document(traceId=TRACE_HEX.upper(), spanId=SPAN_HEX.upper(), parentSpanId=PARENT_HEX.upper())

    row = only_row(decode(parse_json(json.dumps(document).encode())))

    assert (row["TraceId"], row["SpanId"], row["ParentSpanId"]) == (TRACE_HEX, SPAN_HEX, PARENT_HEX)


def test_json_accepts_snake_case_field_names() -> None:
    document = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": TRACE_HEX,
                                "span_id": SPAN_HEX,
                                "parent_span_id": PARENT_HEX,
                                "name": "snake",
                                "start_time_unix_nano": str(START),
                                "end_time_unix_nano": END,
                            }
                        ]
                    }
                ]
            }
        ]
    }

    row = only_row(decode(parse_json(json.dumps(document).encode())))

    assert subset(row, {"TraceId": 0, "SpanId": 0, "ParentSpanId": 0, "SpanName": 0, "Duration": 0}) == {
        "TraceId": TRACE_HEX,
        "SpanId": SPAN_HEX,
        "ParentSpanId": PARENT_HEX,
        "SpanName": "snake",
        "Duration": 1_500_000_000,
    }


def test_json_root_span_without_parent_has_empty_parent_id() -> None:
    document = json_document()
    del document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["parentSpanId"]

    assert only_row(decode(parse_json(json.dumps(document).encode())))["ParentSpanId"] == ""


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        pytest.param("traceId", "zz" * 16, TRACE_ERROR, id="trace-not-hex"),
        pytest.param("traceId", TRACE_HEX[:30], TRACE_ERROR, id="trace-15-bytes"),
        pytest.param("traceId", TRACE_HEX[:31], TRACE_ERROR, id="trace-odd-length"),
        pytest.param("traceId", TRACE_HEX + "00", TRACE_ERROR, id="trace-17-bytes"),
        pytest.param("traceId", "0" * 32, TRACE_ERROR, id="trace-all-zero"),
        pytest.param("traceId", "", TRACE_ERROR, id="trace-empty"),
        pytest.param("traceId", "W47/95gDgQPSabYzgT/GDA==", TRACE_ERROR, id="trace-base64"),
        pytest.param("spanId", "g" * 16, SPAN_ERROR, id="span-not-hex"),
        pytest.param("spanId", SPAN_HEX[:15], SPAN_ERROR, id="span-odd-length"),
        pytest.param("spanId", "0" * 16, SPAN_ERROR, id="span-all-zero"),
        pytest.param("parentSpanId", "abcd", PARENT_ERROR, id="parent-2-bytes"),
        pytest.param("parentSpanId", PARENT_HEX + "ff", PARENT_ERROR, id="parent-9-bytes"),
        pytest.param("parentSpanId", "xyz", PARENT_ERROR, id="parent-not-hex"),
    ],
)
def test_json_span_with_invalid_id_is_rejected_and_others_kept(field: str, value: str, message: str) -> None:
    good = json_document()["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    spans = [
        {**copy.deepcopy(good), "name": "good-1"},
        {**copy.deepcopy(good), "name": "bad", field: value},
        {**copy.deepcopy(good), "name": "good-2"},
    ]
    document = json_document()
    document["resourceSpans"][0]["scopeSpans"][0]["spans"] = spans

    decoded = decode(parse_json(json.dumps(document).encode()))

    assert (decoded.accepted, decoded.rejected) == (2, 1)
    assert decoded.errors == [f"span 'bad': {message}"]
    assert [(r["SpanName"], r["TraceId"]) for r in rows(decoded)] == [("good-1", TRACE_HEX), ("good-2", TRACE_HEX)]


def _bad_span(**fields: Any) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [fields]}]}]}).encode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"[1]", "must be a JSON object", id="array"),
        pytest.param(b'"x"', "must be a JSON object", id="string"),
        pytest.param(b"null", "must be a JSON object", id="null"),
        pytest.param(b"42", "must be a JSON object", id="number"),
        pytest.param(b"", "not valid JSON", id="empty"),
        pytest.param(b"{bad", "not valid JSON", id="invalid-json"),
        pytest.param(b'{"resourceSpans": []', "not valid JSON", id="unterminated"),
        pytest.param(b"\xff\xfe\x00", "not valid JSON", id="not-text"),
        pytest.param(b'{"resourceSpans": "x"}', "does not match the OTLP trace schema", id="resourceSpans-string"),
        pytest.param(b'{"resourceSpans": [1]}', "does not match the OTLP trace schema", id="resourceSpans-item-int"),
        pytest.param(
            b'{"resourceSpans": [{"scopeSpans": [{"spans": "x"}]}]}',
            "does not match the OTLP trace schema",
            id="spans-string",
        ),
        pytest.param(_bad_span(traceId=5), "does not match the OTLP trace schema", id="traceId-number"),
        pytest.param(_bad_span(name=5), "does not match the OTLP trace schema", id="name-number"),
        pytest.param(_bad_span(startTimeUnixNano="abc"), "does not match the OTLP trace schema", id="time-text"),
        pytest.param(_bad_span(startTimeUnixNano=1.5), "does not match the OTLP trace schema", id="time-fraction"),
        pytest.param(_bad_span(startTimeUnixNano=-1), "does not match the OTLP trace schema", id="time-negative"),
        pytest.param(_bad_span(attributes={"a": 1}), "does not match the OTLP trace schema", id="attributes-object"),
        pytest.param(_bad_span(kind=[1]), "does not match the OTLP trace schema", id="kind-list"),
    ],
)
def test_invalid_json_raises_decode_error(body: bytes, message: str) -> None:
    with pytest.raises(OtlpDecodeError, match=message):
        parse_json(body)


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 100_000], ids=["arrays", "objects"])
def test_deeply_nested_json_raises_decode_error(body: bytes) -> None:
    with pytest.raises(OtlpDecodeError):
        parse_json(body)


# --- times, limits and flags ------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "duration", "flags"),
    [
        pytest.param(START, END, 1_500_000_000, [], id="normal"),
        pytest.param(START, START, 0, [], id="zero-length"),
        pytest.param(START, START - 1_000, 0, ["end_before_start"], id="end-before-start"),
        pytest.param(START, 0, 0, ["end_before_start"], id="missing-end"),
        pytest.param(0, 0, 0, ["missing_start_time"], id="missing-start"),
        pytest.param(RECEIVED + 10 * MINUTE, RECEIVED + 10 * MINUTE, 0, [], id="future-at-limit"),
        pytest.param(
            RECEIVED + 10 * MINUTE + 1, RECEIVED + 11 * MINUTE, MINUTE - 1, ["clock_skew_future"], id="future"
        ),
        pytest.param(
            RECEIVED + DAY, RECEIVED, 0, ["clock_skew_future", "end_before_start"], id="future-and-end-before-start"
        ),
        pytest.param(RECEIVED - 30 * DAY, RECEIVED - 30 * DAY + 5, 5, [], id="past-at-limit"),
        pytest.param(RECEIVED - 30 * DAY - 1, RECEIVED - 30 * DAY, 1, ["clock_skew_past"], id="past"),
    ],
)
def test_span_times(start: int, end: int, duration: int, flags: list[str]) -> None:
    row = only_row(decode(pb_request(pb_span(start_time_unix_nano=start, end_time_unix_nano=end))))

    assert (row["Timestamp"], row["Duration"], row["IngestFlags"]) == (start, duration, flags)


@pytest.mark.parametrize("where", ["span-start", "event-time"])
def test_time_past_int64_does_not_fail_the_whole_request(where: str) -> None:
    huge = 2**64 - 1
    if where == "span-start":
        odd = pb_span("odd", start_time_unix_nano=huge, end_time_unix_nano=huge)
    else:
        odd = pb_span("odd", events=[Span.Event(time_unix_nano=huge, name="e")])

    decoded = decode(pb_request(pb_span("good"), odd))

    assert decoded.accepted + decoded.rejected == 2
    assert rows(decoded)[0]["SpanName"] == "good"


@pytest.mark.parametrize(
    ("value", "stored", "flagged"),
    [
        pytest.param(s("x" * 25), "x" * 10, True, id="long-string"),
        pytest.param(s("y" * 10), "y" * 10, False, id="string-at-limit"),
        pytest.param(AnyValue(int_value=123456789012345), "1234567890", True, id="long-int"),
        pytest.param(
            AnyValue(array_value=ArrayValue(values=[s("abcdef"), s("ghijkl")])), '["abcdef",', True, id="long-array"
        ),
    ],
)
def test_long_attribute_values_are_truncated_and_flagged(value: AnyValue, stored: str, flagged: bool) -> None:
    span = pb_span(attributes=[kv("short", s("abc")), kv("big", value)])

    row = only_row(decode(pb_request(span), Limits(max_value_chars=10)))

    assert row["SpanAttributes"] == [("short", "abc"), ("big", stored)]
    assert row["IngestFlags"] == (["truncated:big"] if flagged else [])


def test_default_value_limit_truncates_to_exactly_max_value_chars() -> None:
    limit = Limits().max_value_chars
    span = pb_span(attributes=[kv("prompt", s("p" * (limit + 1)))])

    row = only_row(decode(pb_request(span)))

    assert dict(row["SpanAttributes"])["prompt"] == "p" * limit
    assert row["IngestFlags"] == ["truncated:prompt"]


def test_long_event_and_link_attribute_values_are_truncated_too() -> None:
    span = pb_span(
        events=[Span.Event(time_unix_nano=START, name="e", attributes=[kv("ev", s("e" * 20))])],
        links=[
            Span.Link(
                trace_id=bytes.fromhex(LINK_TRACE_HEX),
                span_id=bytes.fromhex(LINK_SPAN_HEX),
                attributes=[kv("ln", s("l" * 20))],
            )
        ],
    )

    row = only_row(decode(pb_request(span), Limits(max_value_chars=4)))

    assert row["Events.Attributes"] == [[("ev", "eeee")]]
    assert row["Links.Attributes"] == [[("ln", "llll")]]
    assert row["IngestFlags"] == ["truncated:ev", "truncated:ln"]


@pytest.mark.parametrize(
    ("limits", "count", "kept", "flags"),
    [
        pytest.param(Limits(max_attributes=3), 3, 3, [], id="at-limit"),
        pytest.param(Limits(max_attributes=3), 5, 3, ["attributes_dropped"], id="over-limit"),
        pytest.param(
            Limits(), Limits().max_attributes + 1, Limits().max_attributes, ["attributes_dropped"], id="default"
        ),
    ],
)
def test_attributes_past_the_limit_are_dropped_and_flagged(
    limits: Limits, count: int, kept: int, flags: list[str]
) -> None:
    span = pb_span(attributes=[kv(f"a{i:03d}", AnyValue(int_value=i)) for i in range(count)])

    row = only_row(decode(pb_request(span), limits))

    assert row["SpanAttributes"] == [(f"a{i:03d}", str(i)) for i in range(kept)]
    assert row["IngestFlags"] == flags


@pytest.mark.parametrize(("count", "flags"), [(2, []), (3, ["events_dropped"])])
def test_events_past_the_limit_are_dropped_and_flagged(count: int, flags: list[str]) -> None:
    span = pb_span(events=[Span.Event(time_unix_nano=START + i, name=f"e{i}") for i in range(count)])

    row = only_row(decode(pb_request(span), Limits(max_events=2)))

    assert row["Events.Name"] == ["e0", "e1"][:count]
    assert row["Events.Timestamp"] == [START, START + 1][:count]
    assert row["IngestFlags"] == flags


# --- derived GenAI columns --------------------------------------------------------------


def test_genai_chat_span_gets_derived_columns() -> None:
    attributes = [
        kv("gen_ai.operation.name", s("chat")),
        kv("gen_ai.request.model", s("gpt-4o")),
        kv("gen_ai.provider.name", s("openai")),
        kv("gen_ai.request.stream", AnyValue(bool_value=True)),
        kv("gen_ai.response.time_to_first_chunk", AnyValue(double_value=0.25)),
        kv("gen_ai.usage.input_tokens", AnyValue(int_value=100)),
        kv("gen_ai.usage.output_tokens", AnyValue(int_value=20)),
    ]
    span = pb_span("chat gpt-4o", kind=Span.SPAN_KIND_CLIENT, attributes=attributes)

    row = only_row(decode(pb_request(span)))

    expected = {
        "Role": "model",
        "Dialect": "genai",
        "Operation": "chat",
        "Provider": "openai",
        "Model": "gpt-4o",
        "Streaming": 1,
        "TtftMs": 250.0,
        "InputTokens": 100,
        "OutputTokens": 20,
        "IngestFlags": [],
    }
    assert subset(row, expected) == expected


def test_genai_json_span_with_string_numbers_gets_the_same_derived_columns() -> None:
    document = json_document(
        name="chat gpt-4o",
        kind=3,
        attributes=[
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
            {"key": "gen_ai.response.time_to_first_chunk", "value": {"doubleValue": 0.25}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "100"}},
        ],
    )

    row = only_row(decode(parse_json(json.dumps(document).encode())))

    assert subset(row, {"SpanKind": 0, "Role": 0, "Model": 0, "TtftMs": 0, "InputTokens": 0}) == {
        "SpanKind": "Client",
        "Role": "model",
        "Model": "gpt-4o",
        "TtftMs": 250.0,
        "InputTokens": 100,
    }
    assert dict(row["SpanAttributes"])["gen_ai.usage.input_tokens"] == "100"


def test_bad_genai_attribute_is_flagged_and_the_span_kept() -> None:
    attributes = [kv("gen_ai.operation.name", s("chat")), kv("gen_ai.usage.input_tokens", s("lots"))]

    row = only_row(decode(pb_request(pb_span(attributes=attributes))))

    assert (row["Role"], row["InputTokens"]) == ("model", None)
    assert row["IngestFlags"] == ["bad_attribute:gen_ai.usage.input_tokens"]


def test_too_many_spans_in_one_request_is_refused_whole() -> None:
    from agentlat.collector.ingest.otlp import TooManySpans

    request = pb_request(*(pb_span(f"s{i}") for i in range(4)))
    with pytest.raises(TooManySpans, match="4 spans in one request; the limit is 3"):
        to_batch(request, "p", RECEIVED, Limits(max_spans=3))
    assert to_batch(request, "p", RECEIVED, Limits(max_spans=4)).accepted == 4
