"""Storage and write cost of the per-trace analysis rows (``agentlat_traces``), with and without a migration.

The rows are the collector's own: ``bench/ingest.py``'s requests go through ``bench/stages.py``'s
stages (decode, store, read back, analyse) once. Then the same rows are written the way the trace
assembler writes them (``Store.write_traces``, ``--batch`` traces an insert) into fresh embedded
stores, alternately with every migration and without ``--against-skip`` (default: the newest migration
that changes the table, 15),
``--reps`` times each, and ``OPTIMIZE TABLE agentlat_traces FINAL`` merges the parts they left.
Printed per run and as medians: insert and merge CPU µs per trace, and bytes per trace on disk
after the merge.

Run: ``python -m bench.trace_rows [--requests 500] [--reps 3] [--against-skip N]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from agentlat.store import MIGRATIONS
from bench.ingest import build_requests
from bench.stages import Stages
from bench.storage import alternate, open_fresh

TABLE = "agentlat_traces"
NEWEST_FOR_TABLE = max(m.version for m in MIGRATIONS if any(TABLE in statement for statement in m.statements))


def analysis_rows(requests: int, workdir: Path) -> pa.Table:
    """The analysis rows of ``requests`` benchmark requests, as the collector computes them."""
    stages = Stages(build_requests(requests), workdir / "stages")
    try:
        stages.insert()
        stages.read()
        stages.analyse()
    finally:
        stages.store.close()
    return pa.concat_tables(stages.analyses)


def write_and_merge(rows: pa.Table, data: Path, skip: list[int], batch: int) -> tuple[float, float, float]:
    """Insert and merge CPU µs per trace, and bytes per trace after the merge, in a fresh store at ``data``."""
    store = open_fresh(data, skip, [])
    try:
        started = time.process_time()
        for first in range(0, rows.num_rows, batch):
            store.write_traces(rows.slice(first, batch))
        inserted = time.process_time()
        store.backend.execute(f"OPTIMIZE TABLE {TABLE} FINAL")
        merged = time.process_time()
        sql = f"SELECT sum(bytes_on_disk) AS b FROM system.parts WHERE active AND table = '{TABLE}'"
        size = store.backend.query_arrow(sql).column("b")[0].as_py()
    finally:
        store.close()
        shutil.rmtree(data, ignore_errors=True)
    per_trace = 1e6 / rows.num_rows
    return (inserted - started) * per_trace, (merged - inserted) * per_trace, size / rows.num_rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="requests of 1,000 spans (100 traces each)")
    parser.add_argument("--reps", type=int, default=3, help="runs per layout, alternated")
    parser.add_argument("--batch", type=int, default=2000, help="traces an insert (the assembler's batch_size)")
    parser.add_argument("--against-skip", type=int, default=NEWEST_FOR_TABLE, help="the migration left out")
    args = parser.parse_args(argv)
    layouts = {"every migration": [], f"without migration {args.against_skip}": [args.against_skip]}
    with tempfile.TemporaryDirectory(prefix="agentlat-trace-rows-") as tmp:
        rows = analysis_rows(args.requests, Path(tmp))
        print(f"{rows.num_rows:,} analysis rows, {args.batch:,} an insert, {args.reps} runs per layout")

        def measure(rep: int, index: int, skip: list[int]) -> tuple[float, ...]:
            return write_and_merge(rows, Path(tmp) / f"run-{rep}-{index}", skip, args.batch)

        alternate(layouts, args.reps, measure, "insert {:6.2f} µs/trace, merge {:6.2f} µs/trace, {:6.1f} B/trace")


if __name__ == "__main__":
    main()
