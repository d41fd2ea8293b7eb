"""Storage and insert cost of the spans table: bytes per span on disk, per column, and insert µs per span.

Issue targets: at most 80 bytes per realistic span on disk (issue 9), then 60 at 10M (issue 21).
Spans come from bench/query.py's ``generate`` (10 per trace, 12 attributes each) in chronological
batches over the last ``--days`` days, as bench/query.py loads them, and are inserted with
``Store.insert_spans`` into a fresh embedded store. Four ways to run it::

    python bench/storage.py [--spans 1000000] [--batch 100000] [--skip 9]... [--baseline] [--otlp 20000]
                            [--sql "ALTER TABLE otel_traces ..."]...
    python bench/storage.py --data DIR [--optimize]
    python bench/storage.py --codecs [--data DIR] [--trial-columns TraceId,Timestamp] [--trial-reps 3]
    python bench/storage.py --insert-reps 5 [--against-skip 14 | --against-sql "ALTER ..."] [--spans 1000000]

The first inserts generated spans, reads the sizes from ``system.parts``, ``system.columns`` and
``system.data_skipping_indices`` before and after ``OPTIMIZE TABLE ... FINAL`` and times two typical
queries. ``--skip N`` leaves migration N out (``--skip 9``: the spans table before its rebuild, sorted
by span name in granules of 8,192 rows); ``--baseline`` leaves out 6 and 9, the storage layout before
both; ``--sql`` runs extra statements after the migrations (experiments); ``--otlp N`` also stores N
spans built the way the collector builds them (OTLP protobuf -> ``collector.ingest.otlp.to_batch``) into a
second store and reports their size.

``--data DIR`` reports an existing store as it is (e.g. the one ``bench/query.py --keep`` leaves,
right after its load), without migrating it; ``--optimize`` runs ``OPTIMIZE TABLE otel_traces FINAL``
first (which rewrites it: old parts then take the current codecs too).

``--codecs`` tries codecs column by column (``CODEC_TRIALS``) on the spans of a store (``--data``, or
one generated as above): each column's values, in the table's sorting order, are inserted into a
scratch table with each codec, and the column's bytes per span and the CPU its compression adds to
the insert (µs per span, over the same insert with ``CODEC(NONE)``; median of ``--trial-reps``) are
printed. Columns compress independently, so the best codec of each column adds up.

``--insert-reps N`` times ``Store.insert_spans`` of the same batches into fresh stores, alternately
with every migration and without migration ``--against-skip`` (default: the newest) or, with
``--against-sql``, with every migration and these statements after them, N times each: CPU and wall
µs per span (medians) and the bytes per span the inserts left.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentlat.store import MIGRATIONS, SpanFilter, Store, open_store
from agentlat.store.backends import ChdbBackend
from agentlat.store.migrations import LEDGER_DDL
from bench.query import PROJECT, SPANS_PER_TRACE, generate

LAYOUT_MIGRATIONS = (6, 9)  # codecs, then the rebuild (sorting key, granularity)
SPANS_TABLE = "otel_traces"
BYTES_TARGET = 80.0
DAY_S = 86_400

# Candidate codecs per column for --codecs: what migrations 6 and 14 chose among (docs/benchmarks.md).
_FLOATS = ("ZSTD(1)", "ZSTD(3)", "Gorilla, ZSTD(1)", "FPC, ZSTD(1)")
_COUNTS = ("T64, ZSTD(1)", "T64, ZSTD(3)", "ZSTD(3)")
CODEC_TRIALS: dict[str, tuple[str, ...]] = {
    "SpanAttributes": ("ZSTD(1)", "ZSTD(3)", "ZSTD(6)", "ZSTD(9)", "ZSTD(12)"),
    "ResourceAttributes": ("ZSTD(1)", "ZSTD(3)", "ZSTD(6)", "ZSTD(9)"),
    "TraceId": ("ZSTD(1)", "ZSTD(3)", "ZSTD(6)"),
    "SpanId": ("ZSTD(1)", "ZSTD(3)", "ZSTD(6)"),
    "ToolCallId": ("ZSTD(1)", "ZSTD(3)"),
    "ParentSpanId": ("ZSTD(1)", "ZSTD(3)", "ZSTD(6)"),
    "ConversationId": ("ZSTD(1)", "ZSTD(3)", "ZSTD(6)"),
    "Timestamp": ("T64, ZSTD(1)", "T64, ZSTD(3)", "T64('bit'), ZSTD(3)", "Delta, ZSTD(3)", "DoubleDelta, ZSTD(1)"),
    "Duration": ("T64, ZSTD(1)", "T64, ZSTD(3)", "ZSTD(1)"),
    "IngestedAt": ("T64, ZSTD(1)", "T64, ZSTD(3)", "T64('bit'), ZSTD(3)", "Delta, ZSTD(3)", "DoubleDelta, ZSTD(1)"),
    **{name: _FLOATS for name in ("TtftMs", "DecodeMs", "ItlMeanMs", "ItlP50Ms", "ItlP95Ms", "ItlMaxMs")},
    **{name: _COUNTS for name in ("InputTokens", "OutputTokens", "CacheReadTokens")},
    **{name: ("ZSTD(1)", "ZSTD(3)") for name in ("ScopeName", "ScopeVersion", "SpanName", "Model", "Tool")},
}
# The scratch table of a trial: the spans table's sorting key, partitions and granules, wide parts only
# (ClickHouse keeps no per-column sizes of compact parts).
_TRIAL_KEY = "ProjectId, ServiceName, Role, toDateTime(Timestamp), TraceId, SpanName, SpanId"
_TRIAL_KEY_COLUMNS = (
    "ProjectId LowCardinality(String), ServiceName LowCardinality(String), Role LowCardinality(String), "
    "Timestamp DateTime64(9), TraceId String, SpanName LowCardinality(String), SpanId String"
)
_TRIAL_SETTINGS = "index_granularity = 1024, min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0"


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


def generated_batches(n_spans: int, batch: int, days: int, seed: int) -> Iterator[pa.Table]:
    """n_spans generated spans in batches of about ``batch``, each covering the next slice of the last
    ``days`` days (chronological, as a collector writes them and bench/query.py loads them)."""
    rng = np.random.default_rng(seed)
    last_s = int(time.time()) - 120
    first_s = last_s - days * DAY_S
    per_batch = max(1, batch // SPANS_PER_TRACE)
    n_traces = n_spans // SPANS_PER_TRACE
    done = 0
    while done < n_traces:
        size = min(per_batch, n_traces - done)
        slice_first = first_s + (last_s - first_s) * done // n_traces
        slice_last = max(slice_first + 1, first_s + (last_s - first_s) * (done + size) // n_traces)
        yield generate(rng, size, slice_first, slice_last)[0]
        done += size


def insert_generated(store: Store, n_spans: int, batch: int, days: int, seed: int) -> tuple[float, list[str]]:
    """Insert n_spans generated spans; return the seconds spent in insert_spans and sample trace ids."""
    spent, sample = 0.0, []
    for spans in generated_batches(n_spans, batch, days, seed):
        began = time.perf_counter()
        store.insert_spans(spans)
        spent += time.perf_counter() - began
        sample += spans.column("TraceId").to_pylist()[:: max(1, spans.num_rows // 20)]
    return spent, sample


def collector_batches(n_spans: int, seed: int) -> list[pa.Table]:
    """Spans as the collector stores them: bench/ingest.py's requests (OTLP protobuf) through to_batch."""
    from agentlat.collector.ingest.otlp import Limits, parse_protobuf, to_batch
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
    """Per column: compressed and uncompressed bytes (of wide parts: compact parts keep no per-column
    sizes) and the codec new parts get."""
    sql = (
        "SELECT name AS column, type, compression_codec AS codec, data_compressed_bytes AS data, "
        "data_uncompressed_bytes AS raw FROM system.columns "
        "WHERE database = currentDatabase() AND table = {t:String} ORDER BY data DESC, name"
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
        print(f"  {SPANS_TABLE} columns, B/span compressed (uncompressed), wide parts:")
        for r in rows[:columns]:
            codec = r["codec"].removeprefix("CODEC(").removesuffix(")")
            print(f"    {r['column']:<24} {r['data'] / spans:7.2f} ({r['raw'] / spans:7.1f})  {codec:<28} {r['type']}")
        rest = rows[columns:]
        print(f"    {len(rest)} others{'':<15} {sum(r['data'] for r in rest) / spans:7.2f}")
        print(f"    all columns{'':<13} {sum(r['data'] for r in rows) / spans:7.2f}")
    else:
        print("  (compact parts only: no per-column sizes)")
    for ix in index_sizes(store, SPANS_TABLE):
        print(f"    index {ix['name']:<18} {ix['data'] / spans:7.2f}  {ix['type']}")
    return per_span


# --- codec trials -------------------------------------------------------------------------------
_TRIAL_INSERT = (
    "INSERT INTO codec_trial SELECT * FROM codec_trial_rows SETTINGS max_threads = 1, max_insert_threads = 1"
)
_TRIAL_SCAN = "SELECT count() AS n FROM codec_trial WHERE NOT ignore(v) SETTINGS max_threads = 1"
_TRIAL_BYTES = (
    "SELECT sum(column_data_compressed_bytes) AS b FROM system.parts_columns "
    "WHERE active AND database = currentDatabase() AND table = 'codec_trial' AND column = 'v'"
)


def codec_trials(store: Store, trials: dict[str, tuple[str, ...]], reps: int) -> list[dict[str, Any]]:
    """Each column's bytes per span under each candidate codec, and the CPU per span its compression adds
    to an insert and its decompression to a scan of the column (over the same with CODEC(NONE))."""
    backend = store.backend
    spans = backend.query_arrow(f"SELECT count() AS n FROM {SPANS_TABLE}").column("n")[0].as_py()
    columns = {r["column"]: r for r in column_sizes(store, SPANS_TABLE)}
    results = []
    print(f"\ncodec trials on {spans:,} spans: B/span; CPU µs/span of an insert and of a scan (medians of {reps})")
    try:
        for column, codecs in trials.items():
            kind = columns[column]["type"]
            backend.execute("DROP TABLE IF EXISTS codec_trial_rows")
            backend.execute(
                "CREATE TABLE codec_trial_rows ENGINE = Memory AS SELECT ProjectId, ServiceName, Role, Timestamp, "
                f"TraceId, SpanName, SpanId, `{column}` AS v FROM {SPANS_TABLE} ORDER BY {_TRIAL_KEY}"
            )
            insert: dict[str, list[float]] = {codec: [] for codec in ("NONE", *codecs)}
            scan: dict[str, list[float]] = {codec: [] for codec in insert}
            size: dict[str, float] = {}
            for _ in range(reps):  # codecs alternate, so a busier moment of the host spreads over all
                for codec in insert:
                    backend.execute("DROP TABLE IF EXISTS codec_trial")
                    backend.execute(
                        f"CREATE TABLE codec_trial ({_TRIAL_KEY_COLUMNS}, v {kind} CODEC({codec})) "
                        f"ENGINE = MergeTree PARTITION BY toDate(Timestamp) ORDER BY ({_TRIAL_KEY}) "
                        f"SETTINGS {_TRIAL_SETTINGS}"
                    )
                    insert[codec].append(_cpu_seconds(lambda: backend.execute(_TRIAL_INSERT)))
                    scan[codec].append(_cpu_seconds(lambda: backend.query_arrow(_TRIAL_SCAN)))
                    size[codec] = backend.query_arrow(_TRIAL_BYTES).column("b")[0].as_py() / spans
            over_none = {
                codec: ((statistics.median(insert[codec]) - statistics.median(insert["NONE"])) / spans * 1e6,
                        (statistics.median(scan[codec]) - statistics.median(scan["NONE"])) / spans * 1e6)
                for codec in codecs
            }  # fmt: skip
            current = _normalised(columns[column]["codec"])
            print(f"  {column} ({kind}; now {current})")
            for codec, (insert_us, scan_us) in over_none.items():
                results.append({"column": column, "codec": codec, "bytes": size[codec], "insert_us": insert_us,
                                "scan_us": scan_us})  # fmt: skip
                mark = "  <- now" if f"CODEC({codec})" == current else ""
                cost = f"insert {insert_us:+6.2f}  scan {scan_us:+6.3f}"
                print(f"    {codec:<24} {size[codec]:7.3f} B/span  {cost}{mark}")
    finally:
        backend.execute("DROP TABLE IF EXISTS codec_trial")
        backend.execute("DROP TABLE IF EXISTS codec_trial_rows")
    return results


def _cpu_seconds(call: Callable[[], object]) -> float:
    began = time.process_time()
    call()
    return time.process_time() - began


def _normalised(codec: str) -> str:
    """A codec as a trial names it (system.columns writes Delta(8), Gorilla(8), ...)."""
    for name in ("Delta", "DoubleDelta", "Gorilla", "FPC"):
        for width in ("(1)", "(2)", "(4)", "(8)", "(12, 8)", "(12, 4)"):
            codec = codec.replace(f"{name}{width}", name)
    return codec


# --- insert cost ------------------------------------------------------------------------------
def insert_cost(args: argparse.Namespace, root: Path) -> None:
    """insert_spans of the same batches into fresh stores, with every migration and without one."""
    layouts: dict[str, tuple[list[int], list[str]]] = {"every migration": ([], args.sql)}
    if args.against_sql:
        layouts["with --against-sql"] = ([], [*args.sql, *args.against_sql])
    else:
        against = args.against_skip if args.against_skip is not None else MIGRATIONS[-1].version
        layouts[f"without migration {against}"] = ([against], args.sql)
    batches = list(generated_batches(args.spans, args.batch, args.days, args.seed))
    spans = sum(b.num_rows for b in batches)
    print(f"insert_spans of {spans:,} spans in batches of {args.batch:,}, {args.insert_reps} times per layout")

    def measure(rep: int, index: int, layout: tuple[list[int], list[str]]) -> tuple[float, ...]:
        data = root / f"insert-{rep}-{index}"
        store = open_fresh(data, *layout)
        try:
            cpu, wall = time.process_time(), time.perf_counter()
            for batch in batches:
                store.insert_spans(batch)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            bytes_ = next(t["bytes"] for t in table_sizes(store) if t["table"] == SPANS_TABLE)
        finally:
            store.close()
            shutil.rmtree(data, ignore_errors=True)
        return cpu / spans * 1e6, wall / spans * 1e6, bytes_ / spans

    alternate(layouts, args.insert_reps, measure, "insert CPU {:6.2f} µs/span, wall {:6.2f} µs/span, {:6.2f} B/span")


def alternate(
    layouts: dict[str, Any], reps: int, measure: Callable[[int, int, Any], tuple[float, ...]], shown: str
) -> None:
    """Measure each layout ``reps`` times, alternating them (``measure(rep, index, layout)``); print each
    run's figures with the format ``shown``, then the medians."""
    runs: dict[str, list[tuple[float, ...]]] = {name: [] for name in layouts}
    for rep in range(reps):
        for index, (name, layout) in enumerate(layouts.items()):
            runs[name].append(measure(rep, index, layout))
            print(f"  {name:<26} {shown.format(*runs[name][-1])}", flush=True)
    print(f"\nmedians of {reps}:")
    for name, values in runs.items():
        print(f"  {name:<26} {shown.format(*(statistics.median(v) for v in zip(*values, strict=True)))}")


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
        if args.codecs:
            codec_trials(store, _trials(args), args.trial_reps)
            return
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


def run_existing(args: argparse.Namespace) -> None:
    """Sizes of the store at --data as it is (not migrated), optionally after OPTIMIZE FINAL; or codec trials."""
    store = Store(ChdbBackend(args.data))
    try:
        spans = next((t["rows"] for t in table_sizes(store) if t["table"] == SPANS_TABLE), 0)
        if not spans:
            raise SystemExit(f"{args.data} holds no spans")
        if args.codecs:
            codec_trials(store, _trials(args), args.trial_reps)
            return
        label = f"of {args.data} as it is"
        if args.optimize:
            began = time.perf_counter()
            store.backend.execute(f"OPTIMIZE TABLE {SPANS_TABLE} FINAL")
            label = f"of {args.data} after OPTIMIZE FINAL ({time.perf_counter() - began:.0f} s)"
        per_span = report_sizes(store, label, spans, args.columns)
        print(f"\nbytes/span otel_traces: {per_span:.2f} ({spans:,} spans)")
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


def _trials(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    if not args.trial_columns:
        return CODEC_TRIALS
    names = [name.strip() for name in args.trial_columns.split(",") if name.strip()]
    unknown = [name for name in names if name not in CODEC_TRIALS]
    if unknown:
        raise SystemExit(f"no codec trials for {', '.join(unknown)}; known: {', '.join(CODEC_TRIALS)}")
    return {name: CODEC_TRIALS[name] for name in names}


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
    parser.add_argument("--columns", type=int, default=25, help="biggest columns to list")
    parser.add_argument("--seed", type=int, default=20_260_101)
    parser.add_argument("--data", type=Path, help="report this existing store instead of generating one")
    parser.add_argument("--optimize", action="store_true", help="with --data: OPTIMIZE TABLE otel_traces FINAL first")
    parser.add_argument("--codecs", action="store_true", help="codec trials, column by column")
    parser.add_argument("--trial-columns", default="", help="with --codecs: these columns only (comma-separated)")
    parser.add_argument("--trial-reps", type=int, default=3, help="with --codecs: timed inserts per codec")
    parser.add_argument("--insert-reps", type=int, default=0, help="time insert_spans N times per layout")
    parser.add_argument("--against-skip", type=int, default=None, help="with --insert-reps: the migration left out")
    parser.add_argument("--against-sql", action="append", default=[], help="with --insert-reps: the other layout's SQL")
    args = parser.parse_args(argv)
    if args.baseline:
        args.skip = sorted({*args.skip, *LAYOUT_MIGRATIONS})
    if args.data:
        run_existing(args)
        return 0
    root = Path(tempfile.mkdtemp(prefix="agentlat-storage-", dir="/tmp"))
    try:
        if args.insert_reps:
            insert_cost(args, root)
            return 0
        if args.spans:
            run_generated(args, root / "generated")
        if args.otlp:
            run_collector(args, root / "collector")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
