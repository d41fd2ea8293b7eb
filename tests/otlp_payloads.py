"""Build OTLP requests (JSON and protobuf) from plain span descriptions with exact timings."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

MS = 1_000_000


def new_trace_id() -> str:
    return os.urandom(16).hex()


def new_span_id() -> str:
    return os.urandom(8).hex()


@dataclass
class SpanSpec:
    name: str
    trace_id: str = field(default_factory=new_trace_id)
    span_id: str = field(default_factory=new_span_id)
    parent_span_id: str = ""
    start_ns: int = field(default_factory=lambda: time.time_ns() - 60_000 * MS)
    duration_ns: int = 10 * MS
    attributes: dict[str, Any] = field(default_factory=dict)
    kind: int = 1  # INTERNAL
    service: str = "test-svc"
    status_code: int = 0
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_json_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _json_attributes(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _json_value(v)} for k, v in attributes.items()]


def otlp_json(spans: list[SpanSpec]) -> dict[str, Any]:
    by_service: dict[str, list[SpanSpec]] = defaultdict(list)
    for span in spans:
        by_service[span.service].append(span)
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _json_attributes({"service.name": service})},
                "scopeSpans": [
                    {
                        "scope": {"name": "tests", "version": "1"},
                        "spans": [
                            {
                                "traceId": s.trace_id,
                                "spanId": s.span_id,
                                "parentSpanId": s.parent_span_id,
                                "name": s.name,
                                "kind": s.kind,
                                "startTimeUnixNano": str(s.start_ns),
                                "endTimeUnixNano": str(s.end_ns),
                                "attributes": _json_attributes(s.attributes),
                                "events": [
                                    {"name": n, "timeUnixNano": str(t), "attributes": _json_attributes(a)}
                                    for n, t, a in s.events
                                ],
                                "status": {"code": s.status_code},
                            }
                            for s in service_spans
                        ],
                    }
                ],
            }
            for service, service_spans in by_service.items()
        ]
    }


def _proto_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def _proto_attributes(attributes: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_proto_value(v)) for k, v in attributes.items()]


def otlp_protobuf(spans: list[SpanSpec]) -> bytes:
    request = ExportTraceServiceRequest()
    by_service: dict[str, list[SpanSpec]] = defaultdict(list)
    for span in spans:
        by_service[span.service].append(span)
    for service, service_spans in by_service.items():
        resource_spans = ResourceSpans()
        resource_spans.resource.attributes.extend(_proto_attributes({"service.name": service}))
        scope_spans = ScopeSpans()
        for s in service_spans:
            span = Span(
                trace_id=bytes.fromhex(s.trace_id),
                span_id=bytes.fromhex(s.span_id),
                parent_span_id=bytes.fromhex(s.parent_span_id),
                name=s.name,
                kind=s.kind,
                start_time_unix_nano=s.start_ns,
                end_time_unix_nano=s.end_ns,
            )
            span.attributes.extend(_proto_attributes(s.attributes))
            span.status.code = s.status_code
            for n, t, a in s.events:
                event = span.events.add(name=n, time_unix_nano=t)
                event.attributes.extend(_proto_attributes(a))
            scope_spans.spans.append(span)
        resource_spans.scope_spans.append(scope_spans)
        request.resource_spans.append(resource_spans)
    return request.SerializeToString()
