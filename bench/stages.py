"""Where an ingested span's CPU goes: each stage of the collector's path timed alone.

The same pre-encoded requests as ``bench/ingest.py`` (1,000 GenAI spans each, 10 per trace)
go through the collector's own functions one stage at a time, in this process, with chDB
in it: parse the protobuf, turn spans into columns (normaliser included), log them (Arrow
IPC, write-ahead log with fsync), insert them into the store in the writer's batches, hold
each batch's analysis input and count each trace's stored span rows (or, for a trace that
is not all held, read it back: timed apart, not in the total), analyse each trace, store the
analysis, and roll the minutes up. Each figure is
CPU µs per span (``time.process_time``, so chDB's own threads count), best of a few rounds
(the insert runs once, so that the spans are stored once).

Beside each stage is the most spans/s that stage alone would allow on this machine's 2
cores if it were the only work, and at the end the same for every stage together and for
a best case: chDB parsing OTLP itself (``bench/native_decode.py``'s flatten query, 50
requests a query, no normaliser) followed by the store insert and nothing else. These
ceilings say what the end-to-end target (100,000 spans/s) would need.

Run: ``python -m bench.stages [--requests 100]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from agentlat.collector.analysis import analyse
from agentlat.collector.assembler import TraceAssembler, spans_by_trace, trace_rows
from agentlat.collector.otlp import Limits, parse_protobuf, to_batch
from agentlat.collector.rollups import minutes_of
from agentlat.collector.wal import WriteAheadLog
from agentlat.store import Store, analysis_input_of, open_store
from agentlat.store.backends import to_arrow_stream
from bench.ingest import build_requests
from bench.native_decode import flatten_sql, framed, write_schema

CORES = 2
WRITER_BATCH = 50_000  # rows per store insert, the writer's default batch_rows
ANALYSIS_BATCH = 2_000  # traces per read-back query, the assembler's default batch_size
PROJECT = "default"


def cpu_seconds(run: Callable[[], object], rounds: int) -> float:
    """The best round's CPU seconds of this process (all threads)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best


class Stages:
    """The requests, and what each stage hands the next, so every stage can be timed alone."""

    def __init__(self, bodies: list[bytes], workdir: Path) -> None:
        self.bodies = bodies
        self.workdir = workdir
        self.requests = [parse_protobuf(body) for body in bodies]
        self.batches = [to_batch(r, PROJECT, time.time_ns(), Limits()).batch for r in self.requests]
        self.spans = sum(batch.num_rows for batch in self.batches)
        table = pa.concat_tables(self.batches)
        self.writer_batches = [table.slice(i, WRITER_BATCH) for i in range(0, table.num_rows, WRITER_BATCH)]
        self.trace_ids: list[str] = pc.unique(table.column("TraceId")).to_pylist()
        self.minutes = minutes_of(table)
        self.store: Store = open_store(workdir / "store")
        self.inputs: list[pa.Table] = []  # analysis input, ANALYSIS_BATCH traces a table
        self.analyses: list[pa.Table] = []

    def parse(self) -> None:
        for body in self.bodies:
            parse_protobuf(body)

    def columns(self) -> None:
        for request in self.requests:
            to_batch(request, PROJECT, time.time_ns(), Limits())

    def log(self) -> None:
        wal = WriteAheadLog(Path(tempfile.mkdtemp(dir=self.workdir)))
        for batch in self.batches:
            wal.append(to_arrow_stream(batch))
        wal.close()

    def insert(self) -> None:
        for batch in self.writer_batches:
            self.store.insert_spans(batch)

    def read(self) -> None:
        ids = self.trace_ids
        self.inputs = [
            self.store.analysis_input(PROJECT, ids[i : i + ANALYSIS_BATCH]) for i in range(0, len(ids), ANALYSIS_BATCH)
        ]

    def hold(self) -> None:
        """What the assembler does instead of a read-back: each stored batch's analysis input, then per pass
        the traces' rows taken from it, counted, and their stored span rows looked up."""
        held = [analysis_input_of(batch) for batch in self.writer_batches]
        assembler = TraceAssembler(self.store)  # for its rule: stored span rows equal to the rows held
        self.inputs = []
        for first in range(0, len(self.trace_ids), ANALYSIS_BATCH):
            ids = pa.array(self.trace_ids[first : first + ANALYSIS_BATCH])
            rows = pa.concat_tables([t.filter(pc.is_in(t.column("trace_id"), ids)) for t in held])
            complete = assembler._complete_in_memory(PROJECT, rows)
            assert len(complete) == len(ids), "every trace should be analysed from memory here"
            self.inputs.append(rows)

    def analyse(self) -> None:
        self.analyses = []
        for stored in self.inputs:
            results = [(trace_id, analyse(records)) for trace_id, records in spans_by_trace(stored).items()]
            self.analyses.append(trace_rows(PROJECT, results, time.time_ns() // 1000))

    def write_analyses(self) -> None:
        for table in self.analyses:
            self.store.write_traces(table)

    def rollup(self) -> None:
        self.store.rollup(self.minutes, version=time.time_ns())

    def native_decode(self) -> None:
        schema, path = write_schema(self.workdir), self.workdir / "batch.pbd"
        for first in range(0, len(self.bodies), 50):
            path.write_bytes(framed(self.bodies[first : first + 50]))
            self.store.backend.query_arrow(flatten_sql(path, schema))


def ceiling(us_per_span: float) -> float:
    return CORES * 1e6 / us_per_span


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100, help="requests of 1,000 spans (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per stage; the best is reported")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentlat-stages-") as tmp:
        stages = Stages(build_requests(args.requests), Path(tmp))
        path = [
            ("parse protobuf (upb ParseFromString)", stages.parse),
            ("spans to columns, normaliser included", stages.columns),
            ("write-ahead log (Arrow IPC, fsync)", stages.log),
            (f"store insert ({WRITER_BATCH:,} rows a batch)", stages.insert),
            (f"analysis input held, rows counted ({ANALYSIS_BATCH:,} a pass)", stages.hold),
            ("analysis (critical path, splits)", stages.analyse),
            ("analysis rows stored", stages.write_analyses),
            ("rollups of the minutes touched", stages.rollup),
        ]
        # The insert runs once: repeating it would store every span again and inflate the read-back.
        timed = {
            name: cpu_seconds(run, 1 if run == stages.insert else args.rounds) / stages.spans * 1e6
            for name, run in path
        }
        native = cpu_seconds(stages.native_decode, args.rounds) / stages.spans * 1e6
        read_back = cpu_seconds(stages.read, args.rounds) / stages.spans * 1e6
        stages.store.close()
    print(f"{stages.spans:,} spans ({args.requests} requests); CPU µs per span, best of {args.rounds} rounds")
    print(f"{'stage':<61} {'µs/span':>8}   most spans/s on {CORES} cores")
    for name, us in timed.items():
        print(f"stage: {name:<54} {us:8.2f}   {ceiling(us):12,.0f}")
    total = sum(timed.values())
    insert = timed[path[3][0]]
    print(f"stage: {'chDB parses OTLP (50 requests a query)':<54} {native:8.2f}   {ceiling(native):12,.0f}")
    read = f"(a trace not all held: read back, {ANALYSIS_BATCH:,} a query)"
    print(f"stage: {read:<54} {read_back:8.2f}   {ceiling(read_back):12,.0f}")
    print(f"{'all stages, as the collector runs them':<61} {total:8.2f}   {ceiling(total):12,.0f}")
    best = native + insert
    print(f"{'best case: chDB parses, store insert, nothing else':<61} {best:8.2f}   {ceiling(best):12,.0f}")


if __name__ == "__main__":
    main()
