"""From an accepted request to the store: log first, acknowledge, then write in batches.

``submit()`` returns only once a request is in the write-ahead log, so an acknowledged span
survives a crash. Trace requests are logged as they came (``otlp.TraceRequest``), logs and
metrics as Arrow batches. The log is also the writer's queue: what waits in memory is where
each record is and how many rows it holds, and the records are read back (from the page cache,
as a rule) when they are taken, so memory does not grow with the backlog. One writer thread
inserts batches of up to ``batch_rows`` rows (or whatever arrived within ``flush_interval``) and
moves the log's checkpoint past them once the store has them; while it inserts one, a reader
thread gathers the next and decodes the trace requests in it in one call
(``otlp_engine.decode_requests``). A trace request nothing can decode is set aside in the
dead-letter folder, as a batch the store keeps refusing is. While the store is down the writer retries
with backoff and the log grows; past ``max_pending_bytes`` new requests are refused with a
retry hint instead of growing memory without bound, and so they are while the disk is below
its free-space floor (``DiskGuard``).

The writer never gives up: any error (a checkpoint the full disk cannot take, a dead-letter
file it cannot write, a bug) is logged and retried with backoff on the same batches, which
stay in memory and in the log until the store has them. Should its thread end anyway, the
next request restarts it; ``writer_state()`` says which of these is happening.

Duplicates: a span is identified by (project, trace id, span id). Replays after a crash and
client retries may write it twice; the spans table is a ReplacingMergeTree on that key and
queries read it with FINAL, so it counts once. GenAI events and metric points (OTLP logs and
metrics) take the same path: a batch names its table in its Arrow schema's metadata
(``schema.table_of``; none means spans, as in every log written before there were others), the
writer inserts each table's batches separately, and their rows carry a hash of the whole
record as the last column of their sorting keys, so they too count once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from agentlat.collector.ingest.diskspace import DiskGuard
from agentlat.collector.ingest.otlp import Limits, TraceRequest
from agentlat.collector.ingest.otlp_engine import decode_requests
from agentlat.collector.ingest.wal import Position, WriteAheadLog
from agentlat.errors import AgentlatError
from agentlat.store import (
    EVENTS_TABLE,
    METRIC_POINTS_TABLE,
    SPANS_TABLE,
    Store,
    StoreError,
    StoreUnavailable,
    from_arrow_stream,
    table_of,
    to_arrow_stream,
)

log = logging.getLogger("agentlat.collector")

MAX_REJECTIONS = 5  # attempts before a batch the store keeps refusing is set aside
FIRST_RETRY_SECONDS, LAST_RETRY_SECONDS = 0.1, 5.0
DISK_RETRY_AFTER = 10  # seconds a client is asked to wait while the disk is below its floor
BATCH_BYTES = 32 * 1024 * 1024  # records gathered for one insert, at most (a larger record alone)


class Backpressure(AgentlatError):
    """Too much is waiting for the store; the client should retry after ``retry_after`` s."""

    def __init__(self, reason: str, retry_after: int) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


Loggable = pa.Table | TraceRequest


@dataclass(frozen=True, slots=True)
class _Logged:
    """A record in the log, not yet in the store."""

    position: Position  # where it ends
    size: int  # bytes of its payload
    rows: int  # spans, events or points it holds


@dataclass(slots=True)
class _Batch:
    """Logged records gathered for one insert, and once read and decoded, their rows by table."""

    items: list[_Logged]
    tables: dict[str, pa.Table] | None = None


def _rows(item: Loggable) -> int:
    return item.spans if isinstance(item, TraceRequest) else item.num_rows


def _record(item: Loggable) -> bytes:
    return item.to_record() if isinstance(item, TraceRequest) else to_arrow_stream(item)


def _loggable(payload: bytes) -> Loggable:
    return TraceRequest.from_record(payload) if TraceRequest.is_record(payload) else from_arrow_stream(payload)


@dataclass(slots=True)
class PipelineStats:
    spans_written: int = 0
    spans_written_at: float = 0.0  # unix time of the last spans insert (0: none yet)
    events_written: int = 0
    metric_points_written: int = 0
    inserts: int = 0
    store_errors: int = 0
    dead_lettered: int = 0
    last_insert_seconds: float = 0.0
    writer_errors: int = 0
    writer_restarts: int = 0
    checkpoint_errors: int = 0


class IngestPipeline:
    def __init__(
        self,
        store: Store,
        wal: WriteAheadLog,
        *,
        max_pending_bytes: int = 256 * 1024 * 1024,
        batch_rows: int = 50_000,
        flush_interval: float = 0.2,
        disk: DiskGuard | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or Limits()  # what decoding trace requests cuts and flags
        self.disk = disk
        self.wal = wal
        self.max_pending_bytes = max_pending_bytes
        self.batch_rows = batch_rows
        self.flush_interval = flush_interval
        wal.set_listener(self._on_durable)
        self.stats = PipelineStats()
        self.store_available = True
        self._queue: queue.Queue[_Logged] = queue.Queue()
        self._pending_bytes = 0
        self._pending_lock = threading.Lock()
        self._stopping = threading.Event()
        self._writer: threading.Thread | None = None
        self._restart_lock = threading.Lock()
        self._held: _Batch | None = None  # gathered, not yet in the store: retried after any error
        # The next batch, gathered and decoded while this one is decoded (the first one, or after a failure)
        # or inserted: decoding and inserting each leave the GIL for most of their work, so the two overlap.
        self._ahead: Future[_Batch | None] | None = None
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="agentlat-reader")
        self._writer_problem: str | None = None
        self._checkpoint_failing = False
        self._listeners: list[Callable[[pa.Table], None]] = []
        self._observe_insert: Callable[[float], None] = lambda seconds: None

    def on_insert_timing(self, observe: Callable[[float], None]) -> None:
        """Call ``observe(seconds)`` with the duration of each successful store write."""
        self._observe_insert = observe

    def on_written(self, listener: Callable[[pa.Table], None]) -> None:
        """Call ``listener(batch)`` after each batch reaches the store (trace assembly, rollups)."""
        self._listeners.append(listener)

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def start(self) -> int:
        """Queue what the log holds past its checkpoint, then start writing. Returns that count."""
        replayed = 0
        for position, payload in self.wal.replay(self.wal.checkpoint()):
            self._enqueue(_Logged(position, len(payload), _rows(_loggable(payload))))
            replayed += 1
        if replayed:
            log.info("replaying %d logged batches not yet in the store", replayed)
        self._start_writer()
        return replayed

    def _start_writer(self) -> None:
        self._writer = threading.Thread(target=self._write_loop, name="agentlat-writer", daemon=True)
        self._writer.start()

    def ensure_writer(self) -> None:
        """Restart the writer thread if it has ended (it retries every error, so it should not)."""
        if self._writer is None or self._writer.is_alive() or self._stopping.is_set():
            return
        with self._restart_lock:
            if not self._writer.is_alive():
                self.stats.writer_restarts += 1
                log.error("the writer thread had stopped; restarting it (restart %d)", self.stats.writer_restarts)
                self._start_writer()

    def writer_state(self) -> str:
        """``running``, ``retrying: <the last error>`` or ``not running``."""
        if not self.writer_alive():
            return "not running"
        problem = self._writer_problem
        return f"retrying: {problem}" if problem else "running"

    def submit(self, item: Loggable) -> None:
        """Make ``item`` durable; raise Backpressure when the store is too far behind or the disk is low."""
        self.ensure_writer()  # gRPC requests come here without check_room
        self._refuse_if_disk_low()
        payload = _record(item)
        self._reserve(len(payload))
        try:
            self.wal.append(payload, token=(len(payload), _rows(item)))
        except OSError:
            self._release(len(payload))
            raise

    def check_room(self) -> None:
        """Refuse early (before a request is even read) when the log is full or the disk is low."""
        self.ensure_writer()
        self._refuse_if_disk_low()
        if self._pending_bytes >= self.max_pending_bytes:
            raise self._full()

    def _refuse_if_disk_low(self) -> None:
        shortage = self.disk.shortage() if self.disk is not None else None
        if shortage:
            raise Backpressure(shortage, retry_after=DISK_RETRY_AFTER)

    def _full(self) -> Backpressure:
        reason = "the store is unavailable" if not self.store_available else "ingest is behind"
        return Backpressure(f"{reason}; {self._pending_bytes} bytes waiting", retry_after=5)

    def _reserve(self, size: int) -> None:
        with self._pending_lock:
            # A batch larger than the whole allowance still goes through when nothing waits,
            # or it would be refused forever.
            if self._pending_bytes and self._pending_bytes + size > self.max_pending_bytes:
                raise self._full()
            self._pending_bytes += size

    def _release(self, size: int) -> None:
        with self._pending_lock:
            self._pending_bytes -= size

    def _on_durable(self, position: Position, token: tuple[int, int]) -> None:
        # Called by the log in log order, so the checkpoint never passes a record that is
        # not in the store yet.
        size, rows = token
        self._queue.put(_Logged(position, size, rows))

    def _enqueue(self, item: _Logged) -> None:
        with self._pending_lock:
            self._pending_bytes += item.size
        self._queue.put(item)

    def _write_loop(self) -> None:
        delay = FIRST_RETRY_SECONDS
        while not (self._stopping.is_set() and self._queue.empty() and self._held is None and self._ahead is None):
            try:
                if not self._write_step():
                    return  # stopping while the store is down: the log keeps them
            except Exception as exc:
                self.stats.writer_errors += 1
                self._writer_problem = f"{type(exc).__name__}: {exc}"
                log.exception("the writer failed; retrying in %.1f s (the log keeps every batch)", delay)
                if self._stopping.wait(delay):
                    return
                delay = min(delay * 2, LAST_RETRY_SECONDS)
            else:
                self._writer_problem, delay = None, FIRST_RETRY_SECONDS

    def _write_step(self) -> bool:
        """Insert one gathered batch (or the one held since a failure); False when stopping with the store down."""
        batch = self._held or self._next_batch()
        if batch is None:
            return True
        self._held = batch
        self._read_ahead()
        if batch.tables is None:
            batch.tables = self._tables_of(batch.items)
        if not self._insert(batch.tables):
            return False
        self._held = None
        self._release(sum(item.size for item in batch.items))
        self._checkpoint(batch.items[-1].position)
        return True

    def _next_batch(self) -> _Batch | None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            return ahead.result()  # never raises: _gather_ahead keeps what it gathered
        items = self._gather()
        return _Batch(items) if items else None

    def _read_ahead(self) -> None:
        if self._ahead is None and not self._stopping.is_set():
            self._ahead = self._reader.submit(self._gather_ahead)

    def _gather_ahead(self) -> _Batch | None:
        """The next batch, decoded; when decoding fails the writer decodes it again (and counts the error)."""
        items = self._gather()
        if not items:
            return None
        batch = _Batch(items)
        try:
            batch.tables = self._tables_of(items)
        except Exception:
            log.exception("decoding the next batch ahead failed; the writer decodes it again")
        return batch

    def _checkpoint(self, position: Position) -> None:
        """Move the log's checkpoint; when the disk cannot take it, go on: the spans are stored, and
        the records the log still holds would only be written again (and counted once) on a restart."""
        try:
            self.wal.save_checkpoint(position)
        except OSError as exc:
            self.stats.checkpoint_errors += 1
            if not self._checkpoint_failing:
                log.warning("cannot save the write-ahead log's checkpoint (%s); retrying with the next batch", exc)
            self._checkpoint_failing = True
            return
        if self._checkpoint_failing:
            log.info("the write-ahead log's checkpoint is saved again")
        self._checkpoint_failing = False
        self.wal.reclaim(position)

    def _gather(self) -> list[_Logged]:
        """Records for one insert: up to ``batch_rows`` rows and BATCH_BYTES of records (what decoding and
        inserting them holds in memory follows their size), or what came within ``flush_interval``."""
        try:
            first = self._queue.get(timeout=self.flush_interval)
        except queue.Empty:
            return []
        items, rows, size = [first], first.rows, first.size
        deadline = time.monotonic() + self.flush_interval
        while rows < self.batch_rows and size < BATCH_BYTES:
            try:
                item = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                break
            items.append(item)
            rows, size = rows + item.rows, size + item.size
        return items

    def _tables_of(self, items: list[_Logged]) -> dict[str, pa.Table]:
        """The gathered records read back from the log, trace requests decoded, by table; trace requests
        nothing can decode are set aside."""
        by_table: dict[str, list[pa.Table]] = {}
        records = [_loggable(self.wal.read(logged.position, logged.size)) for logged in items]
        requests = [record for record in records if isinstance(record, TraceRequest)]
        if requests:
            decoded = decode_requests(requests, self.limits, self.store.parse_trace_requests)
            for request, reason in decoded.undecodable:
                self._dead_letter_request(request, reason)
            by_table[SPANS_TABLE] = [decoded.batch]
        for record in records:
            if not isinstance(record, TraceRequest):
                by_table.setdefault(table_of(record), []).append(record)
        return {name: pa.concat_tables(batches) for name, batches in by_table.items()}

    def _insert(self, tables: dict[str, pa.Table]) -> bool:
        """Write a batch, one insert per table; False when stopping with the store down. After an error the
        writer retries all of them: a table already written gets duplicates, which its sorting key replaces."""
        return all(self._insert_table(name, table) for name, table in tables.items())

    def _insert_table(self, name: str, table: pa.Table) -> bool:
        """Write a batch; retry while the store is unavailable, set aside what it rejects."""
        insert = {
            SPANS_TABLE: self.store.insert_spans,
            EVENTS_TABLE: self.store.insert_events,
            METRIC_POINTS_TABLE: self.store.insert_metric_points,
        }.get(name)
        if insert is None:  # a log written by a newer version: keep the batch, do not guess
            self._dead_letter(table, StoreError(f"no table {name!r} in this version"))
            return True
        delay, rejections = FIRST_RETRY_SECONDS, 0
        while True:
            started = time.perf_counter()
            try:
                insert(table)
            except StoreUnavailable as exc:
                self._note_failure(exc)
            except StoreError as exc:
                # Not an outage: the store refuses this batch. Retry a few times (it may be a
                # transient error the backend could not classify), then set it aside so one
                # bad batch cannot stop ingest for good.
                self._note_failure(exc)
                rejections += 1
                if rejections >= MAX_REJECTIONS:
                    self._dead_letter(table, exc)
                    return True
            else:
                self._written(name, table, started)
                return True
            if self._stopping.wait(delay):
                return False
            delay = min(delay * 2, LAST_RETRY_SECONDS)

    def _note_failure(self, exc: StoreError) -> None:
        self.stats.store_errors += 1
        if self.store_available:
            log.warning("store write failed, retrying with backoff: %s", exc)
        self.store_available = False

    def _dead_letter_request(self, request: TraceRequest, reason: str) -> None:
        """Set aside a logged trace request that cannot be decoded; an OSError here leaves it held."""
        path = self._dead_letter_path("otlp")
        path.write_bytes(request.to_record())
        self.stats.dead_lettered += request.spans
        log.error(
            "a logged trace request of %d spans cannot be decoded (%s); it is kept in %s for inspection and "
            "ingest continues", request.spans, reason, path,
        )  # fmt: skip

    def _dead_letter_path(self, suffix: str) -> Path:
        folder = self.wal.directory / "dead-letter"
        folder.mkdir(exist_ok=True)
        return folder / f"batch-{time.time_ns()}.{suffix}"

    def _dead_letter(self, table: pa.Table, exc: StoreError) -> None:
        """Set a refused batch aside in a file; an OSError here leaves it held, and the writer retries."""
        path = self._dead_letter_path("arrows")
        path.write_bytes(to_arrow_stream(table))
        self.stats.dead_lettered += table.num_rows
        self.store_available = True
        log.error(
            "the store rejected a batch of %d rows for %s %d times (%s); it is kept in %s for inspection and "
            "ingest continues",
            table.num_rows, table_of(table), MAX_REJECTIONS, exc, path,
        )  # fmt: skip

    def _written(self, name: str, table: pa.Table, started: float) -> None:
        if not self.store_available:
            log.info("store is writable again")
        self.store_available = True
        self.stats.inserts += 1
        self.stats.last_insert_seconds = time.perf_counter() - started
        self._observe_insert(self.stats.last_insert_seconds)
        if name == EVENTS_TABLE:
            self.stats.events_written += table.num_rows
        elif name == METRIC_POINTS_TABLE:
            self.stats.metric_points_written += table.num_rows
        else:  # spans: trace assembly and rollups follow them
            self.stats.spans_written += table.num_rows
            self.stats.spans_written_at = time.time()
            self._notify(table)

    def _notify(self, table: pa.Table) -> None:
        for listener in self._listeners:
            try:
                listener(table)
            except Exception:  # a listener's bug must not stop ingest
                log.exception("after-write listener %r failed", listener)

    def writer_alive(self) -> bool:
        return self._writer is not None and self._writer.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Write what is queued (while the store answers), then stop the writer."""
        self._stopping.set()
        if self._writer is not None:
            self._writer.join(timeout)
        self._reader.shutdown(wait=True)
        self.wal.close()
