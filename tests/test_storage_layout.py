"""Migration 6, the spans table's storage layout: codecs per column and the skip indexes kept.

The layout's figures (bytes per span, insert rows/s) come from ``python bench/storage.py``;
these tests pin what the migration sets, that it applies again without effect, and that a
store holding spans from before it upgrades with its data readable.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from agentlat.store import Store
from agentlat.store.migrations import MIGRATIONS, SPANS_CODECS_DDL, SPANS_DROP_INDEXES_DDL, cluster_statements

EXPECTED_CODECS = {
    "SpanAttributes": "CODEC(ZSTD(6))",
    "ResourceAttributes": "CODEC(ZSTD(6))",
    "TraceId": "CODEC(ZSTD(6))",
    "ConversationId": "CODEC(ZSTD(6))",
    "ParentSpanId": "CODEC(ZSTD(3))",
    "Timestamp": "CODEC(T64, ZSTD(1))",
    "Duration": "CODEC(T64, ZSTD(1))",
    "IngestedAt": "CODEC(T64, ZSTD(1))",
    "StallCount": "CODEC(T64, ZSTD(1))",
    "InputTokens": "CODEC(T64, ZSTD(1))",
    "OutputTokens": "CODEC(T64, ZSTD(1))",
    "CacheReadTokens": "CODEC(T64, ZSTD(1))",
    "CacheCreationTokens": "CODEC(T64, ZSTD(1))",
    "ReasoningTokens": "CODEC(T64, ZSTD(1))",
    "SpecProposedTokens": "CODEC(T64, ZSTD(1))",
    "SpecAcceptedTokens": "CODEC(T64, ZSTD(1))",
    # unchanged: random ids and floats compress no further
    "SpanId": "CODEC(ZSTD(1))",
    "ToolCallId": "CODEC(ZSTD(1))",
    "TtftMs": "CODEC(ZSTD(1))",
    "ItlMeanMs": "CODEC(ZSTD(1))",
}
EXPECTED_INDEXES = {"idx_trace_id": "bloom_filter(0.001)", "idx_duration": "minmax"}


def codecs(store: Store) -> dict[str, str]:
    sql = (
        "SELECT name, compression_codec FROM system.columns "
        "WHERE database = currentDatabase() AND table = 'otel_traces' AND name IN {names:Array(String)}"
    )
    rows = store.backend.query_arrow(sql, {"names": list(EXPECTED_CODECS)}).to_pylist()
    return {r["name"]: r["compression_codec"] for r in rows}


def indexes(store: Store) -> dict[str, str]:
    sql = (
        "SELECT name, type_full FROM system.data_skipping_indices "
        "WHERE database = currentDatabase() AND table = 'otel_traces'"
    )
    return {r["name"]: r["type_full"] for r in store.backend.query_arrow(sql).to_pylist()}


def test_layout_migration_is_version_6() -> None:
    layout = [m for m in MIGRATIONS if m.version == 6]
    assert len(layout) == 1 and layout[0].statements == (SPANS_CODECS_DDL, SPANS_DROP_INDEXES_DDL)
    assert [m.version for m in MIGRATIONS] == sorted(m.version for m in MIGRATIONS)


def test_a_fresh_store_has_the_layout(embedded_store: Store) -> None:
    assert codecs(embedded_store) == EXPECTED_CODECS
    assert indexes(embedded_store) == EXPECTED_INDEXES


def test_the_layout_migration_applies_again_without_effect(embedded_store: Store) -> None:
    for statement in (SPANS_CODECS_DDL, SPANS_DROP_INDEXES_DDL):
        embedded_store.backend.execute(statement)
    assert codecs(embedded_store) == EXPECTED_CODECS
    assert indexes(embedded_store) == EXPECTED_INDEXES
    assert embedded_store.migrate() == []


def test_cluster_mode_sets_codecs_on_both_tables_and_drops_indexes_on_local_ones() -> None:
    statements = cluster_statements("prod", 30, "agentlat", applied={1, 2, 3, 4, 5})
    alters = [s for s in statements if s.startswith("ALTER")]
    heads = [s.split(" ON CLUSTER")[0] + " " + s.split("'prod' ")[1].split(" ", 1)[0] for s in alters]
    assert heads == [
        "ALTER TABLE `agentlat`.otel_traces_local MODIFY",
        "ALTER TABLE `agentlat`.otel_traces MODIFY",
        "ALTER TABLE `agentlat`.otel_traces_local DROP",
    ]


UPGRADE = """
import sys
import time
from pathlib import Path

from agentlat.collector.otlp import Limits, parse_protobuf, to_batch
from agentlat.store import Store
from agentlat.store.backends import ChdbBackend
from agentlat.store.migrations import LEDGER_DDL, MIGRATIONS, with_ttl
from bench.ingest import build_requests

data = Path(sys.argv[1])
backend = ChdbBackend(data)
backend.execute(LEDGER_DDL)
for migration in MIGRATIONS:
    if migration.version < 6:
        for statement in migration.statements:
            backend.execute(with_ttl(statement, 30))
old = Store(backend)
old.backend.execute("INSERT INTO agentlat_migrations (Version, Name) SELECT number + 1, '' FROM numbers(5)")
batch = to_batch(parse_protobuf(build_requests(1)[0]), "p", time.time_ns(), Limits()).batch
old.insert_spans(batch)
trace_id = batch.column("TraceId")[0].as_py()
before = (old.count_spans(), len(old.trace_spans("p", trace_id)))
old.close()
store = Store(ChdbBackend(data))
applied = store.migrate()
roots = "SELECT sum(Count) AS n FROM agentlat_rollup_1m FINAL WHERE Metric = 'n_root'"  # migration 7's backfill
after = (store.count_spans(), len(store.trace_spans("p", trace_id)))
print(applied, before, after, store.backend.query_arrow(roots).column("n")[0].as_py())
"""


def test_a_store_with_spans_upgrades_with_its_data_readable(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(UPGRADE), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=110,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    later = [m.version for m in MIGRATIONS if m.version >= 6]
    assert run.stdout.strip() == f"{later} (1000, 10) (1000, 10) 100"
