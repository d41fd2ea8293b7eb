"""Arrow batches of the spans table from just the columns a test cares about."""

from __future__ import annotations

import pyarrow as pa

from agentlat.store import SPAN_ARROW_SCHEMA
from agentlat.store.schema import empty_column


def span_batch(columns: dict[str, pa.Array], n: int) -> pa.Table:
    """n spans: the given columns, every other column of the spans table empty."""
    return pa.Table.from_arrays(
        [columns[f.name] if f.name in columns else empty_column(f, n) for f in SPAN_ARROW_SCHEMA],
        schema=SPAN_ARROW_SCHEMA,
    )
