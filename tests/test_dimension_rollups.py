"""The per-dimension summary from rollups keeps every metric of every value it lists, however many
rollup rows the window holds."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc

from agentlat.store import SpanFilter, Store
from agentlat.store.queries import DIMENSION_ROWS
from tests.span_tables import span_batch

PROJECT = "many-tools"
TOOLS = 5_100  # two rollup rows each (calls, errors): more rows than a 10,000-row cap


def test_every_listed_tool_keeps_its_errors(embedded_store: Store) -> None:
    minute = (int(time.time()) // 60 - 10) * 60
    ids = pc.cast(pa.array(range(TOOLS)), pa.string())
    names = pc.utf8_lpad(ids, 4, "0")
    embedded_store.insert_spans(
        span_batch(
            {
                "Timestamp": pa.array([minute * 10**9] * TOOLS, pa.timestamp("ns", tz="UTC")),
                "TraceId": pc.binary_join_element_wise("many-tools-", ids, ""),
                "SpanId": ids,
                "ParentSpanId": pa.repeat("parent", TOOLS),
                "ProjectId": pa.repeat(PROJECT, TOOLS),
                "Role": pa.repeat("tool", TOOLS),
                "Tool": pc.binary_join_element_wise("tool-", names, ""),
                "Duration": pa.repeat(pa.scalar(5_000_000, pa.uint64()), TOOLS),
                "StatusCode": pa.repeat("Error", TOOLS),
            },
            TOOLS,
        )
    )
    embedded_store.rollup([minute], version=1)
    rows = embedded_store.dimension_summary("tool", SpanFilter(PROJECT, minute * 10**9, (minute + 60) * 10**9), True)
    assert [r["name"] for r in rows] == [f"tool-{i:04d}" for i in range(DIMENSION_ROWS)]  # ties by name
    assert {(r["count"], r["errors"], r["tool_count"]) for r in rows} == {(1, 1, 1)}
