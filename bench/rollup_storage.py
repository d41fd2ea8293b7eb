"""Storage of the rollup tables: bytes per rollup row on disk, and what their reads cost.

Realistic spans from bench/query.py's ``generate`` (10 per trace, 5 services, 8 routes, 4 models, 6 tools)
at ``--per-minute`` traces a minute (bench/query.py's 10M spans over 7 days is ~100) over ``--hours``
hours ending 2 minutes ago go into a fresh embedded store with their per-trace rows; every minute is
rolled up, then the rollup tables are merged (OPTIMIZE ... FINAL) and measured from ``system.parts`` and
``system.parts_columns``; then the rollup reads of the query API are timed::

    python bench/rollup_storage.py [--per-minute 100] [--hours 24] [--reps 5] [--skip 16]

``--skip N`` leaves migration N out (its ledger row says skipped), to measure a migration side by side.

It measures whichever ``agentlat`` Python imports: to compare with an earlier version, put first on
PYTHONPATH a directory whose ``agentlat`` package is that version (its sdk/ files, with its store/ and
collector/ beside them).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentlat.store import SpanFilter, rollup_sql
from bench.query import generate
from bench.storage import open_fresh

TABLES = ("agentlat_rollup_1m", "agentlat_rollup_1h", "agentlat_rollup_1d")
PROJECT = "default"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-minute", type=int, default=100, help="traces a minute (10 spans each)")
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions of each read, after one warm-up")
    parser.add_argument("--seed", type=int, default=20_260_101)
    parser.add_argument("--skip", type=int, action="append", default=[], help="leave migration N out")
    args = parser.parse_args(argv)
    exact_max = getattr(rollup_sql, "EXACT_MAX", None)
    print(f"agentlat from {Path(rollup_sql.__file__).resolve().parent}; EXACT_MAX = {exact_max}")
    data = Path(tempfile.mkdtemp(prefix="agentlat-rollup-storage-", dir="/tmp")) / "data"
    try:
        store = open_fresh(data, args.skip, [])
        rng = np.random.default_rng(args.seed)
        last_s = int(time.time()) // 60 * 60 - 120
        first_s = last_s - args.hours * 3600
        for hour in range(first_s, last_s, 3600):
            spans, traces = generate(rng, args.per_minute * 60, hour, hour + 3600)
            store.insert_spans(spans)
            store.write_traces(traces)
        minutes = list(range(first_s, last_s, 60))
        began, cpu = time.perf_counter(), time.process_time()
        for i in range(0, len(minutes), 360):
            store.rollup(minutes[i : i + 360], version=1)
        rollup_s, rollup_cpu = time.perf_counter() - began, time.process_time() - cpu
        cpu = time.process_time()
        for table in TABLES:
            store.backend.execute(f"OPTIMIZE TABLE {table} FINAL")
        merge_cpu = time.process_time() - cpu
        print(
            f"{len(minutes) * args.per_minute * 10:,} spans over {args.hours} h; rollups took {rollup_s:.1f} s "
            f"({rollup_cpu:.1f} s of CPU), their merge {merge_cpu:.1f} s of CPU"
        )
        _sizes(store)
        _reads(store, SpanFilter(PROJECT, first_s * 10**9, last_s * 10**9), args.reps)
        store.close()
    finally:
        shutil.rmtree(data.parent, ignore_errors=True)
    return 0


def _sizes(store) -> None:
    parts = store.backend.query_arrow(
        "SELECT table, sum(rows) AS rows, sum(bytes_on_disk) AS bytes FROM system.parts "
        "WHERE active AND database = currentDatabase() AND table IN {t:Array(String)} GROUP BY table",
        {"t": list(TABLES)},
    ).to_pylist()
    columns = store.backend.query_arrow(
        "SELECT table, column, sum(column_data_compressed_bytes) AS bytes FROM system.parts_columns "
        "WHERE active AND database = currentDatabase() AND table IN {t:Array(String)} "
        "AND column IN ('Digest', 'Exact') GROUP BY table, column",
        {"t": list(TABLES)},
    ).to_pylist()
    exact = "" if "Exact" not in {c["column"] for c in columns} else ", rows holding exact values"
    shares = {}
    if exact:
        for table in TABLES:
            row = store.backend.query_arrow(
                f"SELECT countIf(notEmpty(Exact)) / count() AS share FROM {table} FINAL"
            ).to_pylist()[0]
            shares[table] = row["share"]
    by_column = {(c["table"], c["column"]): c["bytes"] for c in columns}
    total_rows = total_bytes = 0
    print(f"\ntable: rows, bytes on disk per row (Digest column, Exact column{exact})")
    for r in sorted(parts, key=lambda r: TABLES.index(r["table"])):
        t, rows = r["table"], r["rows"]
        total_rows, total_bytes = total_rows + rows, total_bytes + r["bytes"]
        cols = ", ".join(f"{c} {by_column.get((t, c), 0) / rows:.1f}" for c in ("Digest", "Exact"))
        share = f", {shares[t]:.0%}" if t in shares else ""
        print(f"  {t}: {rows:,} rows, {r['bytes'] / rows:.1f} B/row ({cols}{share})")
    print(f"  all: {total_rows:,} rows, {total_bytes / total_rows:.1f} B/row, {total_bytes / 1e6:.2f} MB")


def _reads(store, window: SpanFilter, reps: int) -> None:
    last_6h = SpanFilter(PROJECT, window.end_ns - 6 * 3600 * 10**9, window.end_ns)
    reads = {
        "percentiles e2e,ttft,tool by route, whole window": lambda: store.rollup_percentiles(
            ["e2e", "ttft", "tool"], ["route"], window
        ),
        "percentiles tool by route,tool, last 6 h": lambda: store.rollup_percentiles(
            ["tool"], ["route", "tool"], last_6h
        ),
        "timeseries ttft by model, 1m steps, last 6 h": lambda: store.timeseries("ttft", ["model"], last_6h, 60),
        "dimensions route (rollups), whole window": lambda: store.dimension_summary("route", window, True),
    }
    print(f"\nread: median of {reps} (ms)")
    for name, read in reads.items():
        read()
        times = []
        for _ in range(reps):
            began = time.perf_counter()
            read()
            times.append((time.perf_counter() - began) * 1e3)
        print(f"  {name}: {statistics.median(times):.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
