"""Where an ingested span's CPU goes: each stage of the collector's path timed alone.

The same pre-encoded requests as ``bench/ingest.py`` (1,000 GenAI spans each, 10 per trace)
go through the collector's own functions one stage at a time, in this process, with chDB
in it: check each request (protobuf parse, which spans it keeps), log it as it came
(write-ahead log with fsync), decode the writer's batches in bulk (the engine's parse, the
columns and the normaliser: ``otlp_engine.decode_requests``), insert them into the store,
hold each batch's analysis input and count each trace's stored span rows (or, for a trace
that is not all held, read it back: timed apart, not in the total), analyse the traces (flat ones
in columnar form, the rest one by one; every trace one by one, as the reference does it, timed apart),
store the analysis, and roll the minutes up. Apart, not in the total: the engine's parse
alone, and the reference decoder (``otlp.to_batch``, span by span in Python) that the bulk
decode replaces. Each figure is CPU µs per span (``time.process_time``, so chDB's own
threads count), best of a few rounds (the insert runs once, so that the spans are stored
once).

Beside each stage is the most spans/s that stage alone would allow on this machine's 2
cores if it were the only work, and at the end the same for every stage together and for
a best case: the engine's parse followed by the store insert and nothing else.

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

from agentlat.collector.analysis.assembler import TraceAssembler, analysis_rows, spans_by_trace, trace_rows
from agentlat.collector.analysis.critical_path import analyse
from agentlat.collector.analysis.rollups import minutes_of
from agentlat.collector.ingest.otlp import Limits, TraceRequest, logged_form, parse_protobuf, to_batch
from agentlat.collector.ingest.otlp_engine import decode_requests
from agentlat.collector.ingest.wal import WriteAheadLog
from agentlat.store import Store, analysis_input_of, open_store
from bench.ingest import SPANS_PER_REQUEST, build_requests

CORES = 2
WRITER_BATCH = 50_000  # rows per store insert, the writer's default batch_rows
REQUESTS_PER_BATCH = WRITER_BATCH // SPANS_PER_REQUEST
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
        self.store: Store = open_store(workdir / "store")
        self.logged: list[TraceRequest] = [self._logged(body) for body in bodies]
        self.writer_batches = [
            self._decoded(self.logged[first : first + REQUESTS_PER_BATCH])
            for first in range(0, len(self.logged), REQUESTS_PER_BATCH)
        ]
        table = pa.concat_tables(self.writer_batches)
        self.spans = table.num_rows
        self.trace_ids: list[str] = pc.unique(table.column("TraceId")).to_pylist()
        self.minutes = minutes_of(table)
        self.inputs: list[pa.Table] = []  # analysis input, ANALYSIS_BATCH traces a table
        self.analyses: list[pa.Table] = []

    @staticmethod
    def _logged(body: bytes) -> TraceRequest:
        return logged_form(parse_protobuf(body), PROJECT, time.time_ns(), Limits(), body).batch

    def _decoded(self, requests: list[TraceRequest]) -> pa.Table:
        return decode_requests(requests, Limits(), self.store.parse_trace_requests).batch

    def check(self) -> None:
        for body in self.bodies:
            self._logged(body)

    def log(self) -> None:
        wal = WriteAheadLog(Path(tempfile.mkdtemp(dir=self.workdir)))
        for request in self.logged:
            wal.append(request.to_record())
        wal.close()

    def decode(self) -> None:
        for first in range(0, len(self.logged), REQUESTS_PER_BATCH):
            self._decoded(self.logged[first : first + REQUESTS_PER_BATCH])

    def engine_parse(self) -> None:
        for first in range(0, len(self.bodies), REQUESTS_PER_BATCH):
            self.store.parse_trace_requests(self.bodies[first : first + REQUESTS_PER_BATCH])

    def reference_decode(self) -> None:
        for body in self.bodies:
            to_batch(parse_protobuf(body), PROJECT, time.time_ns(), Limits())

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
        self.analyses = [analysis_rows(PROJECT, [stored], time.time_ns() // 1000)[0] for stored in self.inputs]

    def analyse_by_reference(self) -> None:
        """The analysis as it was before flat traces were analysed in columnar form: every trace one by one."""
        for stored in self.inputs:
            results = [(trace_id, analyse(records)) for trace_id, records in spans_by_trace(stored).items()]
            trace_rows(PROJECT, results, time.time_ns() // 1000)

    def write_analyses(self) -> None:
        for table in self.analyses:
            self.store.write_traces(table)

    def rollup(self) -> None:
        self.store.rollup(self.minutes, version=time.time_ns())


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
            ("check each request (protobuf parse, spans kept)", stages.check),
            ("write-ahead log (each request as it came, fsync)", stages.log),
            (f"decode in bulk ({REQUESTS_PER_BATCH} requests a call)", stages.decode),
            (f"store insert ({WRITER_BATCH:,} rows a batch)", stages.insert),
            (f"analysis input held, rows counted ({ANALYSIS_BATCH:,} a pass)", stages.hold),
            ("analysis (critical path, splits; flat traces columnar)", stages.analyse),
            ("analysis rows stored", stages.write_analyses),
            ("rollups of the minutes touched", stages.rollup),
        ]
        # The insert runs once: repeating it would store every span again and inflate the read-back.
        timed = {
            name: cpu_seconds(run, 1 if run == stages.insert else args.rounds) / stages.spans * 1e6
            for name, run in path
        }
        native = cpu_seconds(stages.engine_parse, args.rounds) / stages.spans * 1e6
        reference = cpu_seconds(stages.reference_decode, args.rounds) / stages.spans * 1e6
        read_back = cpu_seconds(stages.read, args.rounds) / stages.spans * 1e6
        by_reference = cpu_seconds(stages.analyse_by_reference, args.rounds) / stages.spans * 1e6
        stages.store.close()
    print(f"{stages.spans:,} spans ({args.requests} requests); CPU µs per span, best of {args.rounds} rounds")
    print(f"{'stage':<61} {'µs/span':>8}   most spans/s on {CORES} cores")
    for name, us in timed.items():
        _row(f"stage: {name}", us)
    _row("stage: (of the bulk decode: the engine parses OTLP)", native)
    _row("stage: (the reference decoder, span by span: not used)", reference)
    _row(f"stage: (a trace not all held: read back, {ANALYSIS_BATCH:,} a query)", read_back)
    _row("stage: (analysis, every trace by the reference: not used)", by_reference)
    _row("all stages, as the collector runs them", sum(timed.values()))
    _row("best case: the engine parses, store insert, nothing else", native + timed[path[3][0]])


def _row(name: str, us: float) -> None:
    print(f"{name:<61} {us:8.2f}   {ceiling(us):12,.0f}")


if __name__ == "__main__":
    main()
