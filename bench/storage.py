"""Storage and insert cost of the spans table: bytes per span on disk and Arrow insert rows/s.

Issue target: at most 80 bytes per realistic span on disk. Spans come from bench/query.py's
``generate`` (10 per trace, 12 attributes each, start times over the last ``--days`` days) and
are inserted with ``Store.insert_spans`` in batches into a fresh embedded store; then the sizes
are read from ``system.parts``, ``system.parts_columns`` and ``system.data_skipping_indices``
before and after ``OPTIMIZE TABLE ... FINAL``, and two typical queries are timed on the store::

    python bench/storage.py [--spans 1000000] [--batch 100000] [--skip 9]... [--baseline] [--otlp 20000]
                            [--sql "ALTER TABLE otel_traces ..."]...

``--skip N`` leaves migration N out (``--skip 9``: the spans table before its rebuild, sorted by span
name in granules of 8,192 rows); ``--baseline`` leaves out 6 and 9, the storage layout before both;
``--sql`` runs extra statements after the migrations (experiments); ``--otlp N`` also stores N
spans built the way the collector builds them (OTLP protobuf -> ``collector.otlp.to_batch``)
into a second store and reports their size.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentlat.store import SpanFilter, Store, open_store
from agentlat.store.backends import ChdbBackend
from agentlat.store.migrations import LEDGER_DDL
from bench.query import PROJECT, SPANS_PER_TRACE, generate

LAYOUT_MIGRATIONS = (6, 9)  # codecs, then the rebuild (sorting key, granularity)
SPANS_TABLE = "otel_traces"
BYTES_TARGET = 80.0
DAY_S = 86_400


def open_fresh(data: Path, skip: list[int], extra: list[str]) -> Store:
    """A new embedded store at ``data``, migrated but for the migrations in ``skip``."""
    if not skip:
        store = open_store(data)
    else:
        backend = ChdbBackend(data)
        backend.execute(LEDGER_DDL)
        for version in skip:
            backend.execute(f"INSERT INTO agentlat_migrations (Version, Name) VALUES ({int(version)}, 'skipped')")
        store = Store(backend)
        store.migrate()
    for statement in extra:
        store.backend.execute(statement)
    return store


def insert_generated(store: Store, n_spans: int, batch: int, days: int, seed: int) -> tuple[float, list[str]]:
    """Insert n_spans generated spans; return the seconds spent in insert_spans and sample trace ids."""
    rng = np.random.default_rng(seed)
    last_s = int(time.time()) - 120
    first_s = last_s - days * DAY_S
    per_batch = max(1, batch // SPANS_PER_TRACE)
    n_traces = n_spans // SPANS_PER_TRACE
    spent, done, sample = 0.0, 0, []
    while done < n_traces:
        size = min(per_batch, n_traces - done)
        spans, traces = generate(rng, size, first_s, last_s)
        began = time.perf_counter()
        store.insert_spans(spans)
        spent += time.perf_counter() - began
        sample += traces.column("TraceId").to_pylist()[:: max(1, size // 20)]
        done += size
    return spent, sample


def collector_batches(n_spans: int, seed: int) -> list[pa.Table]:
    """Spans as the collector stores them: bench/ingest.py's requests (OTLP protobuf) through to_batch."""
    from agentlat.collector.otlp import Limits, parse_protobuf, to_batch
    from bench.ingest import SPANS_PER_REQUEST, build_requests

    payloads = build_requests(max(1, n_spans // SPANS_PER_REQUEST), seed)
    now = time.time_ns()
    return [to_batch(parse_protobuf(body), PROJECT, now, Limits()).batch for body in payloads]


# --- sizes -----------------------------------------------------------------------------------
def table_sizes(store: Store) -> list[dict[str, Any]]:
    sql = (
        "SELECT table, count() AS parts, sum(rows) AS rows, sum(bytes_on_disk) AS bytes, "
        "sum(data_compressed_bytes) AS data, sum(secondary_indices_compressed_bytes) AS skip, "
        "sum(primary_key_size) AS pk, sum(marks_bytes) AS marks, sum(data_uncompressed_bytes) AS raw "
        "FROM system.parts WHERE active AND database = currentDatabase() GROUP BY table ORDER BY bytes DESC"
    )
    return store.backend.query_arrow(sql).to_pylist()


def column_sizes(store: Store, table: str) -> list[dict[str, Any]]:
    sql = (
        "SELECT column, type, sum(column_data_compressed_bytes) AS data, "
        "sum(column_data_uncompressed_bytes) AS raw "
        "FROM system.parts_columns WHERE active AND database = currentDatabase() AND table = {t:String} "
        "GROUP BY column, type ORDER BY data DESC"
    )
    return store.backend.query_arrow(sql, {"t": table}).to_pylist()


def index_sizes(store: Store, table: str) -> list[dict[str, Any]]:
    sql = (
        "SELECT name, type_full AS type, data_compressed_bytes AS data FROM system.data_skipping_indices "
        "WHERE database = currentDatabase() AND table = {t:String} ORDER BY data DESC"
    )
    return store.backend.query_arrow(sql, {"t": table}).to_pylist()


def report_sizes(store: Store, label: str, spans: int, columns: int) -> float:
    """Print the sizes; return the spans table's bytes on disk per span."""
    print(f"\n== sizes {label} ==")
    per_span = float("nan")
    for t in table_sizes(store):
        per_row = t["bytes"] / t["rows"] if t["rows"] else 0.0
        if t["table"] == SPANS_TABLE:
            per_span = t["bytes"] / spans
        print(
            f"  {t['table']:<26} {t['parts']:>4} parts {t['rows']:>10,} rows {t['bytes'] / 2**20:>8.1f} MiB "
            f"= {per_row:6.1f} B/row (per span {t['bytes'] / spans:6.1f}; data {t['data'] / spans:.1f}, "
            f"skip indexes {t['skip'] / spans:.1f}, marks {t['marks'] / spans:.1f}, pk {t['pk'] / spans:.2f})"
        )
    rows = column_sizes(store, SPANS_TABLE)
    if rows and sum(r["data"] for r in rows):
        print(f"  {SPANS_TABLE} columns, B/span compressed (uncompressed):")
        for r in rows[:columns]:
            print(f"    {r['column']:<24} {r['data'] / spans:7.2f} ({r['raw'] / spans:7.1f})  {r['type']}")
        rest = rows[columns:]
        print(f"    {len(rest)} others{'':<15} {sum(r['data'] for r in rest) / spans:7.2f}")
    else:
        print("  (compact parts only: no per-column sizes)")
    for ix in index_sizes(store, SPANS_TABLE):
        print(f"    index {ix['name']:<18} {ix['data'] / spans:7.2f}  {ix['type']}")
    return per_span


# --- queries ----------------------------------------------------------------------------------
def timed(call: Callable[[], object], reps: int) -> float:
    call()  # warm-up
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def time_queries(store: Store, sample: list[str], reps: int) -> dict[str, float]:
    now_ns = time.time_ns()
    day = SpanFilter(PROJECT, now_ns - DAY_S * 10**9, now_ns)
    ids = iter(sample * (reps + 1))
    results = {
        "ttft percentiles by route, 24h": timed(lambda: store.percentiles("ttft", ["route"], day), reps),
        "dimensions route, 24h, exact": timed(lambda: store.dimension_summary("route", day, True), reps),
        "traces list, slowest, 24h": timed(lambda: store.traces(day, "slowest", 50), reps),
        "trace by id": timed(lambda: store.trace_spans(PROJECT, next(ids)), reps),
        "analysis input, 20 trace ids": timed(lambda: store.analysis_input(PROJECT, sample[:20]), reps),
    }
    for name, ms in results.items():
        print(f"  {name:<32} {ms:8.1f} ms (median of {reps})")
    return results


# --- runs -------------------------------------------------------------------------------------
def run_generated(args: argparse.Namespace, data: Path) -> None:
    store = open_fresh(data, args.skip, args.sql)
    try:
        print(f"inserting {args.spans:,} generated spans in batches of {args.batch:,} into {data}", flush=True)
        spent, sample = insert_generated(store, args.spans, args.batch, args.days, args.seed)
        print(f"insert: {args.spans / spent:,.0f} rows/s ({spent:.1f} s in insert_spans)")
        before = report_sizes(store, "after insert (background merges may still run)", args.spans, args.columns)
        began = time.perf_counter()
        store.backend.execute(f"OPTIMIZE TABLE {SPANS_TABLE} FINAL")
        print(f"\nOPTIMIZE TABLE {SPANS_TABLE} FINAL: {time.perf_counter() - began:.1f} s")
        after = report_sizes(store, "after OPTIMIZE FINAL", args.spans, args.columns)
        print("\nqueries on the optimised store:")
        time_queries(store, sample, args.reps)
        verdict = "ok" if after <= BYTES_TARGET else "OVER"
        print(
            f"\nbytes/span otel_traces: {before:.1f} before OPTIMIZE, {after:.1f} after "
            f"(target {BYTES_TARGET:.0f}: {verdict})"
        )
        print(f"insert rows/s: {args.spans / spent:,.0f}")
    finally:
        store.close()


def run_collector(args: argparse.Namespace, data: Path) -> None:
    store = open_fresh(data, args.skip, args.sql)
    try:
        tables = collector_batches(args.otlp, args.seed)
        spans = sum(t.num_rows for t in tables)
        began = time.perf_counter()
        store.insert_spans(pa.concat_tables(tables))
        spent = time.perf_counter() - began
        print(f"\ncollector-path spans: {spans:,} inserted at {spans / spent:,.0f} rows/s")
        store.backend.execute(f"OPTIMIZE TABLE {SPANS_TABLE} FINAL")
        report_sizes(store, "collector-path spans, after OPTIMIZE FINAL", spans, args.columns)
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="generated spans (10 per trace)")
    parser.add_argument("--batch", type=int, default=100_000, help="spans per insert")
    parser.add_argument("--days", type=int, default=7, help="spread start times over this many days")
    parser.add_argument("--skip", type=int, action="append", default=[], help="leave migration N out")
    parser.add_argument("--baseline", action="store_true", help="leave out migrations 6 and 9 (the layout before)")
    parser.add_argument("--sql", action="append", default=[], help="extra statement to run after migrating")
    parser.add_argument("--otlp", type=int, default=0, help="also store this many collector-path spans")
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions per query")
    parser.add_argument("--columns", type=int, default=15, help="biggest columns to list")
    parser.add_argument("--seed", type=int, default=20_260_101)
    args = parser.parse_args(argv)
    if args.baseline:
        args.skip = sorted({*args.skip, *LAYOUT_MIGRATIONS})
    root = Path(tempfile.mkdtemp(prefix="agentlat-storage-", dir="/tmp"))
    try:
        if args.spans:
            run_generated(args, root / "generated")
        if args.otlp:
            run_collector(args, root / "collector")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
