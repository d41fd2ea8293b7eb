"""The writer never gives up on a logged batch: errors are retried, a dead thread is restarted,
and its state is what /readyz and /metrics report. Faults are injected into a real store."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pyarrow as pa
import pytest

from agentlat.collector.ingest.otlp import Limits, logged_form, parse_protobuf, to_batch
from agentlat.collector.ingest.pipeline import IngestPipeline
from agentlat.collector.ingest.wal import WriteAheadLog
from agentlat.store import Store, to_arrow_stream
from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import wait_for


class FaultyStore:
    """The real store, whose first ``failures`` span inserts raise ``error`` instead."""

    def __init__(self, store: Store, error: BaseException, failures: int = 1) -> None:
        self.store, self.error, self.failures = store, error, failures

    def insert_spans(self, batch: pa.Table) -> None:
        if self.failures:
            self.failures -= 1
            raise self.error
        self.store.insert_spans(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def batch_of(service: str, count: int) -> pa.Table:
    spans = [SpanSpec(f"op {i}", service=service) for i in range(count)]
    return to_batch(parse_protobuf(otlp_protobuf(spans)), "supervision", time.time_ns(), Limits()).batch


def stored(store: Store, service: str) -> int:
    sql = "SELECT count() AS n FROM otel_traces FINAL WHERE ServiceName = {service:String}"
    return store.backend.query_arrow(sql, {"service": service}).column("n")[0].as_py()


@pytest.fixture
def make_pipeline(tmp_path: Path) -> Iterator[Any]:
    made: list[IngestPipeline] = []

    def make(store: Any) -> IngestPipeline:
        pipeline = IngestPipeline(store, WriteAheadLog(tmp_path / f"wal-{len(made)}"), flush_interval=0.05)
        made.append(pipeline)
        pipeline.start()
        return pipeline

    yield make
    for pipeline in made:
        pipeline.stop()


def test_an_unexpected_error_is_retried_on_the_same_batch(embedded_store: Store, make_pipeline: Any) -> None:
    pipeline = make_pipeline(FaultyStore(embedded_store, RuntimeError("a bug in a listener"), failures=3))

    pipeline.submit(batch_of("bug-retried", 7))

    wait_for(lambda: pipeline.stats.spans_written == 7, timeout=10)
    assert stored(embedded_store, "bug-retried") == 7
    assert pipeline.stats.writer_errors == 3
    assert pipeline.writer_state() == "running"
    assert pipeline.stats.writer_restarts == 0


def test_the_writer_state_names_the_error_while_it_retries(embedded_store: Store, make_pipeline: Any) -> None:
    pipeline = make_pipeline(FaultyStore(embedded_store, RuntimeError("disk on fire"), failures=8))

    pipeline.submit(batch_of("state-named", 2))

    assert wait_for(lambda: pipeline.writer_state() == "retrying: RuntimeError: disk on fire", timeout=5)
    wait_for(lambda: pipeline.writer_state() == "running" and pipeline.stats.spans_written == 2, timeout=30)
    assert stored(embedded_store, "state-named") == 2


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_writer_thread_that_ended_is_restarted_by_the_next_request(embedded_store: Store, make_pipeline: Any) -> None:
    # SystemExit is not an Exception: it ends the thread, as a fault the loop cannot catch would.
    pipeline = make_pipeline(FaultyStore(embedded_store, SystemExit("thread killed"), failures=1))

    pipeline.submit(batch_of("restarted", 5))
    wait_for(lambda: not pipeline.writer_alive(), timeout=5)
    assert pipeline.writer_state() == "not running"

    pipeline.check_room()  # what every OTLP request (and /readyz) does first

    wait_for(lambda: pipeline.stats.spans_written == 5, timeout=10)
    assert stored(embedded_store, "restarted") == 5
    assert pipeline.stats.writer_restarts == 1
    assert pipeline.writer_state() == "running"


def test_a_checkpoint_the_disk_cannot_take_does_not_stop_ingest(embedded_store: Store, make_pipeline: Any) -> None:
    pipeline = make_pipeline(embedded_store)
    full = OSError(28, os.strerror(28))

    with patch.object(pipeline.wal, "save_checkpoint", side_effect=full):
        pipeline.submit(batch_of("no-checkpoint", 3))
        wait_for(lambda: pipeline.stats.checkpoint_errors == 1, timeout=10)
        pipeline.submit(batch_of("no-checkpoint", 4))
        wait_for(lambda: pipeline.stats.checkpoint_errors == 2, timeout=10)
    assert pipeline.writer_state() == "running"

    pipeline.submit(batch_of("no-checkpoint", 1))  # space returned: this checkpoint covers all three
    wait_for(lambda: pipeline.stats.spans_written == 8, timeout=10)
    assert stored(embedded_store, "no-checkpoint") == 8
    wait_for(lambda: list(pipeline.wal.replay(pipeline.wal.checkpoint())) == [], timeout=5)
    assert pipeline.pending_bytes == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_batch_submitted_without_a_room_check_restarts_the_writer(embedded_store: Store, make_pipeline: Any) -> None:
    # OTLP/gRPC requests reach submit() directly, without check_room().
    pipeline = make_pipeline(FaultyStore(embedded_store, SystemExit("thread killed"), failures=1))
    pipeline.submit(batch_of("restarted-by-submit", 2))
    wait_for(lambda: not pipeline.writer_alive(), timeout=5)

    pipeline.submit(batch_of("restarted-by-submit", 3))

    wait_for(lambda: pipeline.stats.spans_written == 5, timeout=10)
    assert stored(embedded_store, "restarted-by-submit") == 5
    assert pipeline.stats.writer_restarts == 1


def feed(pipeline: IngestPipeline, items: list[Any], service: str, spans: int) -> None:
    """Start the pipeline, submit the items and stop it once ``spans`` spans of ``service`` are stored."""
    try:
        pipeline.start()
        for item in items:
            pipeline.submit(item)
        wait_for(lambda: stored(pipeline.store, service) == spans, timeout=20)  # type: ignore[arg-type]
    finally:
        pipeline.stop()


class CountingStore:
    """The real store, noting the rows of each span insert."""

    def __init__(self, store: Store) -> None:
        self.store, self.inserts = store, []

    def insert_spans(self, batch: pa.Table) -> None:
        self.inserts.append(batch.num_rows)
        self.store.insert_spans(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_an_insert_gathers_records_up_to_the_byte_budget(embedded_store: Store, tmp_path: Path) -> None:
    """What decoding and inserting a batch holds in memory follows its records' size, not only their rows."""
    store = CountingStore(embedded_store)
    batches = [batch_of("byte-budget", 3) for _ in range(4)]
    record = len(to_arrow_stream(batches[0]))
    with patch("agentlat.collector.ingest.pipeline.BATCH_BYTES", record + record // 2):
        feed(IngestPipeline(store, WriteAheadLog(tmp_path / "wal"), flush_interval=2.0), batches, "byte-budget", 12)
    assert store.inserts == [6, 6]  # two records reach the budget; the next insert takes the other two


class MeetingStore:
    """The real store, whose engine parse of trace requests returns only once two parses have begun."""

    def __init__(self, store: Store) -> None:
        self.store, self.meeting, self.met = store, threading.Barrier(2, timeout=10), 0

    def parse_trace_requests(self, bodies: list[bytes]) -> Any:
        self.meeting.wait()  # BrokenBarrierError after 10 s alone: the writer would retry, and the test fail
        self.met += 1
        return self.store.parse_trace_requests(bodies)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_the_next_batch_is_decoded_while_the_first_one_is(embedded_store: Store, tmp_path: Path) -> None:
    """Start-up fills the pipeline at once: the writer decodes the first batch it gathered while the reader
    already decodes the second, so neither waits for the other."""
    store = MeetingStore(embedded_store)
    requests = []
    for i in range(2):
        body = otlp_protobuf([SpanSpec(f"op {k}", service="read-ahead") for k in range(5 + i)])
        requests.append(logged_form(parse_protobuf(body), "supervision", time.time_ns(), Limits(), body).batch)
    pipeline = IngestPipeline(store, WriteAheadLog(tmp_path / "wal"), batch_rows=1, flush_interval=0.05)  # type: ignore[arg-type]
    feed(pipeline, requests, "read-ahead", 11)
    assert store.met == 2
    assert pipeline.stats.writer_errors == 0
    assert pipeline.stats.inserts == 2
