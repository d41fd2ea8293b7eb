"""A lever for ingest: ClickHouse parsing OTLP/protobuf itself, side by side with our Python decode.

The same pre-encoded requests as ``bench/ingest.py`` (1,000 spans each) are turned into one row
per span twice: by the collector's decoder (``collector.ingest.decode``: protobuf, columns,
normaliser), and by chDB reading the bodies with its ``Protobuf`` input format against the OTLP
schema and flattening them with ARRAY JOIN (ids, kinds, times, attributes as text maps; the
normaliser's derived columns are not computed). chDB is timed with 1, 10 and all requests per
query, because every query has a fixed cost (planning the flatten SQL) of ~50 ms of CPU.

The .proto files are written from the descriptors compiled into the installed
``opentelemetry-proto`` package. Figures are CPU µs per span of this process (chDB runs in it).

Run: ``python -m bench.native_decode [--requests 50]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import chdb
import pyarrow as pa
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.internal.encoder import _VarintBytes
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentlat.collector.ingest import decode
from agentlat.collector.otlp import Limits
from bench.ingest import build_requests

_Field = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    _Field.TYPE_DOUBLE: "double", _Field.TYPE_INT64: "int64", _Field.TYPE_UINT64: "uint64",
    _Field.TYPE_INT32: "int32", _Field.TYPE_FIXED64: "fixed64", _Field.TYPE_FIXED32: "fixed32",
    _Field.TYPE_BOOL: "bool", _Field.TYPE_STRING: "string", _Field.TYPE_BYTES: "bytes",
    _Field.TYPE_UINT32: "uint32", _Field.TYPE_SINT32: "sint32", _Field.TYPE_SINT64: "sint64",
}  # fmt: skip


def _message_lines(message: descriptor_pb2.DescriptorProto) -> Iterator[str]:
    yield f"message {message.name} {{"
    for enum in message.enum_type:
        yield f"enum {enum.name} {{ " + " ".join(f"{v.name} = {v.number};" for v in enum.value) + " }"
    for nested in message.nested_type:
        yield from _message_lines(nested)
    oneofs: dict[int, list[str]] = {}
    for field in message.field:
        kind = field.type_name if field.type in (_Field.TYPE_MESSAGE, _Field.TYPE_ENUM) else _SCALARS[field.type]
        line = f"{kind} {field.name} = {field.number};"
        if field.HasField("oneof_index") and not field.proto3_optional:
            oneofs.setdefault(field.oneof_index, []).append(line)
        else:
            yield ("repeated " if field.label == _Field.LABEL_REPEATED else "") + line
    for index, lines in oneofs.items():
        yield f"oneof {message.oneof_decl[index].name} {{ " + " ".join(lines) + " }"
    yield "}"


def _proto_text(file: FileDescriptor) -> str:
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    lines = ['syntax = "proto3";', f"package {proto.package};", *(f'import "{d}";' for d in proto.dependency)]
    lines += [
        f"enum {e.name} {{ " + " ".join(f"{v.name} = {v.number};" for v in e.value) + " }" for e in proto.enum_type
    ]
    for message in proto.message_type:
        lines += _message_lines(message)
    return "\n".join(lines) + "\n"


def write_schema(root: Path) -> str:
    """The OTLP trace .proto files under ``root``; returns the ``format_schema`` setting's value.
    An absolute schema path makes its directory the import root, so the entry file sits there."""
    pending, written = [ExportTraceServiceRequest.DESCRIPTOR.file], set()
    while pending:
        file = pending.pop()
        if file.name not in written:
            written.add(file.name)
            (root / file.name).parent.mkdir(parents=True, exist_ok=True)
            (root / file.name).write_text(_proto_text(file))
            pending.extend(file.dependencies)
    entry = root / "otlp_trace_service.proto"
    entry.write_text(_proto_text(ExportTraceServiceRequest.DESCRIPTOR.file))
    return f"{entry}:ExportTraceServiceRequest"


# AnyValue's oneof member, as input_format_protobuf_oneof_presence reports it (its field number).
_ONEOF = "Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, " \
    "'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7)"  # fmt: skip
_KV = "Array(Tuple(key String, value Tuple(string_value String, bool_value Bool, int_value Int64, " \
    f"double_value Float64, bytes_value String, value {_ONEOF})))"  # fmt: skip
STRUCTURE = (
    f"resource_spans Array(Tuple(resource Tuple(attributes {_KV}), scope_spans Array(Tuple("
    "scope Tuple(name String, version String), spans Array(Tuple(trace_id String, span_id String, "
    "parent_span_id String, trace_state String, name String, kind Int32, start_time_unix_nano UInt64, "
    f"end_time_unix_nano UInt64, attributes {_KV}, events Array(Tuple(time_unix_nano UInt64, name String)), "
    "status Tuple(code Int32, message String)))))))"
)

_QUOTED_STRUCTURE = STRUCTURE.replace("'", "\\'")


def _text_map(pairs: str) -> str:
    """Attributes as Map(String, String), scalar values rendered as text (arrays and maps left empty)."""
    value = (
        "multiIf(a.value.value = 'string_value', a.value.string_value, a.value.value = 'int_value', "
        "toString(a.value.int_value), a.value.value = 'double_value', toString(a.value.double_value), "
        "a.value.value = 'bool_value', if(a.value.bool_value, 'true', 'false'), "
        "a.value.value = 'bytes_value', base64Encode(a.value.bytes_value), '')"
    )
    return f"mapFromArrays(arrayMap(a -> a.key, {pairs}), arrayMap(a -> {value}, {pairs}))"


def flatten_sql(path: Path, schema: str) -> str:
    return f"""
    SELECT fromUnixTimestamp64Nano(toInt64(sp.start_time_unix_nano), 'UTC') AS Timestamp,
        lower(hex(sp.trace_id)) AS TraceId, lower(hex(sp.span_id)) AS SpanId,
        lower(hex(sp.parent_span_id)) AS ParentSpanId, sp.name AS SpanName,
        ['Unspecified', 'Internal', 'Server', 'Client', 'Producer', 'Consumer'][sp.kind + 1] AS SpanKind,
        {_text_map("rs.resource.attributes")} AS ResourceAttributes, ss.scope.name AS ScopeName,
        {_text_map("sp.attributes")} AS SpanAttributes,
        greatest(sp.end_time_unix_nano, sp.start_time_unix_nano) - sp.start_time_unix_nano AS Duration,
        ['Unset', 'Ok', 'Error'][sp.status.code + 1] AS StatusCode,
        arrayMap(e -> e.name, sp.events) AS `Events.Name`
    FROM file('{path}', 'Protobuf', '{_QUOTED_STRUCTURE}')
    ARRAY JOIN resource_spans AS rs ARRAY JOIN rs.scope_spans AS ss ARRAY JOIN ss.spans AS sp
    SETTINGS format_schema = '{schema}', input_format_protobuf_oneof_presence = 1"""


def framed(bodies: list[bytes]) -> bytes:
    """Request bodies as one length-delimited stream, as the ``Protobuf`` input format reads them."""
    return b"".join(_VarintBytes(len(body)) + body for body in bodies)


def cpu_us_per_span(run: Callable[[], int], rounds: int) -> tuple[float, int]:
    """Best round's CPU µs per span, and the spans it produced."""
    best, spans = float("inf"), 0
    for _ in range(rounds):
        started = time.process_time()
        spans = run()
        best = min(best, (time.process_time() - started) / spans * 1e6)
    return best, spans


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50, help="requests of 1,000 spans (default 50)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure; the best is reported")
    args = parser.parse_args(argv)
    bodies = build_requests(args.requests)
    with tempfile.TemporaryDirectory(prefix="agentlat-native-", dir="/dev/shm") as tmp:
        schema, batch_file = write_schema(Path(tmp)), Path(tmp) / "batch.pbd"
        connection = chdb.connect(":memory:")

        def chdb_rows(per_query: int) -> Callable[[], int]:
            def run() -> int:
                rows = 0
                for first in range(0, len(bodies), per_query):
                    batch_file.write_bytes(framed(bodies[first : first + per_query]))
                    rows += connection.query(flatten_sql(batch_file, schema), "ArrowTable").num_rows
                return rows

            return run

        def python_rows() -> int:
            return sum(decode(b, True, "default", time.time_ns(), Limits()).batch.num_rows for b in bodies)

        figures = [("python decode (collector.ingest.decode)", *cpu_us_per_span(python_rows, args.rounds))]
        for per_query in sorted({1, 10, len(bodies)}):
            label = f"chDB Protobuf format, {per_query} request(s) a query"
            figures.append((label, *cpu_us_per_span(chdb_rows(per_query), args.rounds)))
        batch_file.write_bytes(framed(bodies))
        native: pa.Table = connection.query(flatten_sql(batch_file, schema), "ArrowTable")
        python = pa.concat_tables(decode(b, True, "default", 0, Limits()).batch for b in bodies)
    baseline = figures[0][1]
    print(f"{len(bodies)} requests of 1,000 spans; CPU µs per span, best of {args.rounds} rounds")
    for label, us, spans in figures:
        print(f"{label:<44} {us:8.2f} µs/span  {baseline / us:5.2f}x python  ({spans} spans)")
    same = {
        column: native.column(column).to_pylist() == python.column(column).to_pylist()
        for column in ("TraceId", "SpanId", "ParentSpanId", "SpanName", "SpanKind", "Duration", "StatusCode")
    }
    print(f"same rows in the same order as the python decode: {same}")


if __name__ == "__main__":
    main()
