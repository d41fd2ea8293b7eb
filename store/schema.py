"""What the store's writers add to the tables' column layout: empty columns for bulk writers,
latencies rounded to the stored resolution, the table a batch is written to.

The layout itself (names, Arrow types, the derived columns the normaliser fills) is
``agentlat.shared.columns``, which the collector's decode workers import without the store; the
names of it that ``agentlat.store`` exports are re-exported here.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from agentlat import semconv as sc
from agentlat.shared.columns import (
    DERIVED_COLUMNS,
    DERIVED_DEFAULTS,
    DERIVED_NAMES,
    EVENT_ARROW_SCHEMA,
    EVENTS_TABLE,
    METRIC_POINT_ARROW_SCHEMA,
    METRIC_POINTS_TABLE,
    SPAN_ARROW_SCHEMA,
    SPAN_COLUMNS,
    SPANS_TABLE,
    TABLE_KEY,
)

__all__ = [
    "DERIVED_DEFAULTS",
    "DERIVED_NAMES",
    "EVENTS_TABLE",
    "EVENT_ARROW_SCHEMA",
    "LATENCY_COLUMNS",
    "LATENCY_STEPS_PER_MS",
    "METRIC_POINTS_TABLE",
    "METRIC_POINT_ARROW_SCHEMA",
    "SPANS_TABLE",
    "SPAN_ARROW_SCHEMA",
    "at_stored_resolution",
    "derived_sql",
    "empty_column",
    "stored_once",
    "table_of",
]

_NULLABLE_NAMES = frozenset(c.name for c in SPAN_COLUMNS if c.nullable)


def empty_column(field: pa.Field, rows: int) -> pa.Array:
    """``rows`` empty values of a spans-table column, for bulk writers that fill only some columns:
    empty maps, lists and strings, NULL for numbers that mean "not reported", zero otherwise."""
    kind = field.type
    if pa.types.is_map(kind) or pa.types.is_list(kind):
        offsets = pa.array([0] * (rows + 1), pa.int32())
        if pa.types.is_map(kind):
            return pa.MapArray.from_arrays(offsets, pa.array([], kind.key_type), pa.array([], kind.item_type))
        return pa.ListArray.from_arrays(offsets, pa.array([], kind.value_type))
    if pa.types.is_string(kind):
        return pa.repeat("", rows)
    if field.name in _NULLABLE_NAMES:
        return pa.nulls(rows, kind)
    return pa.repeat(pa.scalar(0, kind), rows)


# Stored latencies are rounded to 1/1024 ms (under a microsecond, far finer than any latency
# anyone acts on). A measured duration in ms has a random 52-bit mantissa; rounded, its low bits
# are zero and compress: 7.5 -> 3.1 bytes a value for TTFT-like values.
LATENCY_STEPS_PER_MS = 1024.0
LATENCY_COLUMNS: tuple[str, ...] = tuple(c.name for c in DERIVED_COLUMNS if c.name.endswith("Ms"))
_FINER_THAN_STEP = 2.0**52 / LATENCY_STEPS_PER_MS  # from here on a float's own spacing is a step or more


def at_stored_resolution(batch: pa.Table) -> pa.Table:
    """``batch`` with its latency columns rounded to the stored resolution."""
    for name in LATENCY_COLUMNS:
        index = batch.schema.get_field_index(name)
        if index < 0:
            continue
        values = batch.column(index)
        rounded = pc.divide(pc.round(pc.multiply(values, LATENCY_STEPS_PER_MS)), LATENCY_STEPS_PER_MS)
        batch = batch.set_column(
            index, batch.schema.field(index), pc.if_else(pc.less(values, _FINER_THAN_STEP), rounded, values)
        )
    return batch


# Derived columns kept once on disk (issue 21, docs/attributes.md): where a span's value is its own attribute
# under the GenAI key, the column is stored empty and bit i of AttributeCopies (the i-th entry here) says
# "read it from SpanAttributes". Random ids cost their full length a copy (ToolCallId: 6.5 of 75.9 B a span
# at 10M). SpanAttributes stays whole, so tools that read the exporter's schema see every attribute.
# Entries are only ever appended: a bit's meaning is on disk.
ATTRIBUTE_COPIES: tuple[tuple[str, str], ...] = (
    ("ToolCallId", sc.GEN_AI_TOOL_CALL_ID),
    ("ConversationId", sc.GEN_AI_CONVERSATION_ID),
)
ATTRIBUTE_COPIES_COLUMN = "AttributeCopies"
_COPY_BITS = {column: (bit, key) for bit, (column, key) in enumerate(ATTRIBUTE_COPIES)}


def stored_once(batch: pa.Table) -> pa.Table:
    """``batch`` as the spans table stores it: each ``ATTRIBUTE_COPIES`` column empty where its
    attribute holds the same value, and the bits saying so."""
    attributes = batch.column("SpanAttributes")
    copies = pa.repeat(pa.scalar(0, pa.uint8()), batch.num_rows)
    for bit, (column, key) in enumerate(ATTRIBUTE_COPIES):
        index = batch.schema.get_field_index(column)
        values = batch.column(index)
        same = pc.and_(pc.not_equal(values, ""), pc.equal(values, pc.map_lookup(attributes, key, "first")))
        same = pc.fill_null(same, False)
        batch = batch.set_column(index, batch.schema.field(index), pc.if_else(same, "", values))
        copies = pc.bit_wise_or(copies, pc.if_else(same, pa.scalar(1 << bit, pa.uint8()), pa.scalar(0, pa.uint8())))
    return batch.append_column(ATTRIBUTE_COPIES_COLUMN, copies)


def derived_sql(column: str) -> str:
    """A derived column of the spans table as SQL, its value restored where ``stored_once`` kept it once."""
    if column not in _COPY_BITS:
        return column
    bit, key = _COPY_BITS[column]
    return f"if(bitTest({ATTRIBUTE_COPIES_COLUMN}, {bit}), SpanAttributes['{key}'], {column})"


def table_of(batch: pa.Table) -> str:
    """The table a batch is written to: named in its schema's metadata, else the spans table."""
    metadata = batch.schema.metadata or {}
    return metadata.get(TABLE_KEY, SPANS_TABLE.encode()).decode()
