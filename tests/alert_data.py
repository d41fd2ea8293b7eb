"""Synthetic span series for the alert tests, written straight into a store and rolled up.

Tool spans (role ``tool``) carry the durations, so the ``tool`` metric of rollups and raw spans
both see them; each test uses its own ProjectId in the session's one embedded store.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from agentlat.store import SPAN_ARROW_SCHEMA, Store
from agentlat.store.schema import empty_column

_ids = itertools.count()


def tool_spans(
    project: str,
    starts_s: Sequence[float],
    durations_ms: Sequence[float],
    *,
    route: str = "/r",
    tool: str = "lookup",
    service: str = "alert-svc",
    service_version: str = "",
    prompt_version: str = "",
) -> pa.Table:
    """One tool span per (start, duration), all with the given route, tool and service."""
    n = len(starts_s)
    ids = [f"{project}-{next(_ids)}" for _ in range(n)]
    resource = [[("service.version", service_version)] if service_version else [] for _ in range(n)]
    attributes = [[("agentlat.prompt.version", prompt_version)] if prompt_version else [] for _ in range(n)]
    columns = {
        "Timestamp": pa.array([int(s * 1e9) for s in starts_s], pa.timestamp("ns", tz="UTC")),
        "TraceId": pa.array(ids), "SpanId": pa.array(ids), "ParentSpanId": pa.repeat("parent", n),
        "SpanName": pa.repeat(f"execute_tool {tool}", n), "SpanKind": pa.repeat("Internal", n),
        "ServiceName": pa.repeat(service, n), "StatusCode": pa.repeat("Ok", n),
        "Duration": pa.array([int(d * 1e6) for d in durations_ms], pa.uint64()),
        "ResourceAttributes": pa.array(resource, pa.map_(pa.string(), pa.string())),
        "SpanAttributes": pa.array(attributes, pa.map_(pa.string(), pa.string())),
        "Role": pa.repeat("tool", n), "Tool": pa.repeat(tool, n), "Route": pa.repeat(route, n),
        "ProjectId": pa.repeat(project, n),
    }  # fmt: skip
    fields = SPAN_ARROW_SCHEMA
    arrays = [columns[f.name] if f.name in columns else empty_column(f, n) for f in fields]
    return pa.Table.from_arrays(arrays, schema=fields)


def load(store: Store, *tables: pa.Table) -> None:
    """Insert the spans and roll up every minute they touch."""
    minutes: set[int] = set()
    for table in tables:
        store.insert_spans(table)
        stamps = table.column("Timestamp").cast(pa.int64()).to_numpy() // 60_000_000_000 * 60
        minutes.update(int(m) for m in np.unique(stamps))
    store.rollup(sorted(minutes), version=next(_ids) + 1)


def per_minute(first_minute: int, minutes: int, count: int) -> list[float]:
    """``count`` evenly spread start times (unix seconds) in each of ``minutes`` minutes."""
    return [first_minute + m * 60 + (i + 0.5) * 60 / count for m in range(minutes) for i in range(count)]
