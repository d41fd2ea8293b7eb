"""OTLP trace requests parsed by the engine: ClickHouse's ``Protobuf`` input format reads many
request bodies at once against the OTLP schema; Arrow flattens them to one row per span.

The rows hold what OTLP sends, with no rule of agentlat's applied: ids as lowercase hex, enums as
their numbers, times as unix ns, and every attribute as a typed value (``key``, and under
``value`` the members of OTLP's ``AnyValue``: ``string_value``, ``bool_value``, ``int_value``,
``double_value``, one level of ``array_value``/``kvlist_value`` members, and ``value``, the
number of the member that was set, ``VALUE_KINDS``). A value nested deeper than that is reported
by its kind only, and ``bytes_value`` holds raw bytes (not UTF-8): the caller decodes a request
holding either itself. Each span names its resource, a row of ``ParsedRequests.resources``.

Requests reach the engine through a file of length-delimited ``Envelope`` messages (the request
and its number in the call), written to ``/dev/shm`` when it exists: chDB reads no binary data
from query parameters. The engine returns each request whole (planning a query that takes
nested columns apart costs ~40 ms, this one ~6 ms) and Arrow takes it apart: lists flatten
without copying. Parsing costs the engine about 16 times the bodies' size in memory for the
moment, so the bodies of one call are parsed ``CHUNK_BYTES`` at a time. The ``.proto`` files are
written once per process from the descriptors compiled into the installed ``opentelemetry-proto``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.internal.encoder import _VarintBytes
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

CHUNK_BYTES = 4 * 1024 * 1024  # request bodies parsed in one query: about 64 MiB of the engine's memory
# AnyValue's oneof member by field number, as ``input_format_protobuf_oneof_presence`` reports it
VALUE_KINDS = ("none", "string", "bool", "int", "double", "array", "kvlist", "bytes")
_PRESENCE = "Enum8(" + ", ".join(f"'{kind}' = {number}" for number, kind in enumerate(VALUE_KINDS)) + ")"
# bytes_value is read only so that ``value`` reports it (a member left out of the structure reads as none)
_MEMBERS = "string_value String, bool_value Bool, int_value Int64, double_value Float64, bytes_value String"
_SCALAR = f"{_MEMBERS}, value {_PRESENCE}"
_ANY = (
    f"Tuple({_SCALAR}, array_value Tuple(values Array(Tuple({_SCALAR}))), "
    f"kvlist_value Tuple(values Array(Tuple(key String, value Tuple({_SCALAR})))))"
)
_ATTRIBUTES = f"Array(Tuple(key String, value {_ANY}))"
_SPAN = (
    "Tuple(trace_id String, span_id String, trace_state String, parent_span_id String, name String, kind Int32, "
    f"start_time_unix_nano UInt64, end_time_unix_nano UInt64, attributes {_ATTRIBUTES}, "
    f"events Array(Tuple(time_unix_nano UInt64, name String, attributes {_ATTRIBUTES})), "
    f"links Array(Tuple(trace_id String, span_id String, trace_state String, attributes {_ATTRIBUTES})), "
    "status Tuple(message String, code Int32))"
)
STRUCTURE = (
    f"seq UInt32, request Tuple(resource_spans Array(Tuple(resource Tuple(attributes {_ATTRIBUTES}), "
    f"scope_spans Array(Tuple(scope Tuple(name String, version String), spans Array({_SPAN}))))))"
)
_ENVELOPE_PROTO = """syntax = "proto3";
import "opentelemetry/proto/collector/trace/v1/trace_service.proto";
message Envelope {
  uint32 seq = 1;
  opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest request = 2;
}
"""


@dataclass(frozen=True, slots=True)
class ParsedRequests:
    """The spans of a call's requests, a row each, and their resources, a row each."""

    spans: pa.Table  # seq (the request's index in the call), resource (a row of ``resources``), the span's fields
    resources: pa.Table  # seq, attributes


def envelope(seq: int, body: bytes) -> bytes:
    """One request as a length-delimited ``Envelope`` (field 1: seq, field 2: the request's bytes)."""
    message = b"\x08" + _VarintBytes(seq) + b"\x12" + _VarintBytes(len(body)) + body
    return _VarintBytes(len(message)) + message


class OtlpParser:
    """Parses OTLP trace request bodies with a ClickHouse engine in this process (``run(sql)``)."""

    def __init__(self, run: Callable[[str], pa.Table]) -> None:
        self._run = run

    def parse(self, bodies: Sequence[bytes]) -> ParsedRequests:
        """The spans of ``bodies`` (serialized ExportTraceServiceRequests, each valid protobuf), ordered by
        request, resource, scope and span; ``seq`` is a request's index in ``bodies`` (at least one)."""
        parts = []
        for first, last in _chunks([len(body) for body in bodies]):
            content = b"".join(envelope(seq, bodies[seq]) for seq in range(first, last))
            with _BatchFile(content) as path:
                parts.append(_taken_apart(self._run(parse_sql(path, _schema()))))
        spans = [part.spans for part in parts]
        offsets = np.cumsum([0] + [part.resources.num_rows for part in parts[:-1]])
        for i, offset in enumerate(offsets):  # each part numbers its resources from 0
            spans[i] = spans[i].set_column(1, "resource", pc.add(spans[i].column("resource"), int(offset)))
        return ParsedRequests(pa.concat_tables(spans), pa.concat_tables([part.resources for part in parts]))


def _chunks(sizes: Sequence[int]) -> Iterator[tuple[int, int]]:
    """Runs of bodies (first, last + 1) of at most CHUNK_BYTES each (a larger body alone)."""
    first, taken = 0, 0
    for index, size in enumerate(sizes):
        if taken and taken + size > CHUNK_BYTES:
            yield first, index
            first, taken = index, 0
        taken += size
    if first < len(sizes):
        yield first, len(sizes)


def parse_sql(path: Path, schema: str) -> str:
    structure = STRUCTURE.replace("'", "\\'")
    return f"""
SELECT e.seq AS seq, e.request AS request
FROM file('{path}', 'Protobuf', '{structure}') AS e
SETTINGS format_schema = '{schema}', input_format_protobuf_oneof_presence = 1,
    input_format_parallel_parsing = 0, max_threads = 1, output_format_arrow_string_as_string = 0"""


# --- taking the requests apart, in Arrow -------------------------------------------------------------
def _text_type(kind: pa.DataType, name: str = "") -> pa.DataType:
    """``kind`` with every binary field but ``bytes_value`` as UTF-8 text (the engine returns String as binary)."""
    if pa.types.is_binary(kind):
        return kind if name == "bytes_value" else pa.string()
    if pa.types.is_list(kind):
        return pa.list_(pa.field(kind.value_field.name, _text_type(kind.value_type), kind.value_field.nullable))
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _text_type(f.type, f.name), f.nullable) for f in kind])
    return kind


def _taken_apart(nested: pa.Table) -> ParsedRequests:
    """One row a span and one a resource, from one row a request."""
    nested = nested.combine_chunks()  # a table of one chunk a column: one request at least
    seq, request = nested.column("seq").chunk(0), nested.column("request").chunk(0)
    resource_lists = request.field("resource_spans")
    resources = resource_lists.flatten()
    resource_request = np.asarray(pc.list_parent_indices(resource_lists), dtype=np.int64)
    scope_lists = resources.field("scope_spans")
    scopes = scope_lists.flatten()
    scope_resource = np.asarray(pc.list_parent_indices(scope_lists), dtype=np.int64)
    span_lists = scopes.field("spans")
    spans = span_lists.flatten()
    span_scope = np.asarray(pc.list_parent_indices(span_lists), dtype=np.int64)
    span_resource = scope_resource[span_scope]
    events, links = spans.field("events"), spans.field("links")
    columns = {
        "seq": seq.take(pa.array(resource_request[span_resource])),
        "resource": pa.array(span_resource),
        "trace_id": _hex(spans.field("trace_id")),
        "span_id": _hex(spans.field("span_id")),
        "parent_span_id": _hex(spans.field("parent_span_id")),
        "trace_state": _text(spans.field("trace_state")),
        "name": _text(spans.field("name")),
        "kind": spans.field("kind"),
        "start": spans.field("start_time_unix_nano"),
        "end": spans.field("end_time_unix_nano"),
        "scope_name": _text(scopes.field("scope").field("name")).take(pa.array(span_scope)),
        "scope_version": _text(scopes.field("scope").field("version")).take(pa.array(span_scope)),
        "attributes": _text(spans.field("attributes")),
        "event_times": _items(events, lambda e: e.field("time_unix_nano")),
        "event_names": _items(events, lambda e: _text(e.field("name"))),
        "event_attributes": _items(events, lambda e: _text(e.field("attributes"))),
        "link_trace_ids": _items(links, lambda link: _hex(link.field("trace_id"))),
        "link_span_ids": _items(links, lambda link: _hex(link.field("span_id"))),
        "link_trace_states": _items(links, lambda link: _text(link.field("trace_state"))),
        "link_attributes": _items(links, lambda link: _text(link.field("attributes"))),
        "status_code": spans.field("status").field("code"),
        "status_message": _text(spans.field("status").field("message")),
    }
    resource_table = pa.table(
        {
            "seq": seq.take(pa.array(resource_request)),
            "attributes": _text(resources.field("resource").field("attributes")),
        }
    )
    return ParsedRequests(pa.table(columns), resource_table)


def _text(array: pa.Array) -> pa.Array:
    """Binary fields as text, without a copy or a check: the requests were parsed (upb, which refuses
    invalid UTF-8 in strings) before they were logged."""
    return array.view(_text_type(array.type))


def _items(lists: pa.ListArray, field: Callable[[pa.StructArray], pa.Array]) -> pa.ListArray:
    """Per span, one field of each of its events or links, as a list."""
    lengths = np.asarray(pc.list_value_length(lists), dtype=np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, field(lists.flatten()))


_HEX_DIGITS = np.frombuffer(b"".join(b"%02x" % byte for byte in range(256)), dtype=np.uint8).reshape(256, 2)


def _hex(ids: pa.BinaryArray) -> pa.StringArray:
    """Each id as lowercase hex, two digits a byte."""
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int32)[ids.offset : ids.offset + len(ids) + 1]
    data = ids.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]] if data is not None else np.zeros(0, np.uint8)
    digits = _HEX_DIGITS[raw].reshape(-1)
    return pa.StringArray.from_buffers(
        len(ids), pa.py_buffer((offsets - offsets[0]).astype(np.int32) * 2), pa.py_buffer(digits.tobytes())
    )


class _BatchFile:
    """A scratch file holding ``content`` while the engine reads it."""

    def __init__(self, content: bytes) -> None:
        self.content = content
        self.path: Path | None = None

    def __enter__(self) -> Path:
        handle, name = tempfile.mkstemp(prefix="agentlat-otlp-", suffix=".pbd", dir=_scratch_dir())
        self.path = Path(name)
        with os.fdopen(handle, "wb") as file:
            file.write(self.content)
        return self.path

    def __exit__(self, *exc: object) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def _scratch_dir() -> str | None:
    """Memory-backed when the system has it (the file lives for one query), else the temp dir."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


_schema_lock = threading.Lock()
_schema_path: str | None = None


def _schema() -> str:
    """The ``format_schema`` setting: the envelope's .proto (written once per process) and message.
    chDB has no ``format_schema_path``: an absolute path makes its directory the import root."""
    global _schema_path
    with _schema_lock:
        if _schema_path is None:
            root = Path(tempfile.mkdtemp(prefix="agentlat-otlp-schema-"))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            _schema_path = f"{write_proto_files(root)}:Envelope"
        return _schema_path


def write_proto_files(root: Path) -> Path:
    """The OTLP trace .proto files and the envelope's under ``root``; returns the envelope's path."""
    pending, written = [ExportTraceServiceRequest.DESCRIPTOR.file], set()
    while pending:
        file = pending.pop()
        if file.name not in written:
            written.add(file.name)
            (root / file.name).parent.mkdir(parents=True, exist_ok=True)
            (root / file.name).write_text(_proto_text(file))
            pending.extend(file.dependencies)
    entry = root / "agentlat_envelope.proto"
    entry.write_text(_ENVELOPE_PROTO)
    return entry


_Field = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    _Field.TYPE_DOUBLE: "double", _Field.TYPE_INT64: "int64", _Field.TYPE_UINT64: "uint64",
    _Field.TYPE_INT32: "int32", _Field.TYPE_FIXED64: "fixed64", _Field.TYPE_FIXED32: "fixed32",
    _Field.TYPE_BOOL: "bool", _Field.TYPE_STRING: "string", _Field.TYPE_BYTES: "bytes",
    _Field.TYPE_UINT32: "uint32", _Field.TYPE_SINT32: "sint32", _Field.TYPE_SINT64: "sint64",
    _Field.TYPE_SFIXED32: "sfixed32", _Field.TYPE_SFIXED64: "sfixed64", _Field.TYPE_FLOAT: "float",
}  # fmt: skip


def _proto_text(file: FileDescriptor) -> str:
    """A .proto file's text from its compiled descriptor."""
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    lines = ['syntax = "proto3";', f"package {proto.package};", *(f'import "{d}";' for d in proto.dependency)]
    lines += [_enum_line(enum) for enum in proto.enum_type]
    for message in proto.message_type:
        lines += _message_lines(message)
    return "\n".join(lines) + "\n"


def _enum_line(enum: descriptor_pb2.EnumDescriptorProto) -> str:
    return f"enum {enum.name} {{ " + " ".join(f"{v.name} = {v.number};" for v in enum.value) + " }"


def _message_lines(message: descriptor_pb2.DescriptorProto) -> Iterator[str]:
    yield f"message {message.name} {{"
    for enum in message.enum_type:
        yield _enum_line(enum)
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
