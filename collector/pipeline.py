"""From an accepted request to the store: log first, acknowledge, then write in batches.

``submit()`` returns only once a batch is in the write-ahead log, so an acknowledged span
survives a crash. One writer thread gathers logged batches into inserts of up to
``batch_rows`` rows (or whatever arrived within ``flush_interval``) and moves the log's
checkpoint past them once the store has them. While the store is down the writer retries
with backoff and the log grows; past ``max_pending_bytes`` new requests are refused with a
retry hint instead of growing memory without bound.

Duplicates: a span is identified by (project, trace id, span id). Replays after a crash and
client retries may write it twice; the spans table is a ReplacingMergeTree on that key and
queries read it with FINAL, so it counts once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from agentlat.collector.wal import Position, WriteAheadLog
from agentlat.store import Store, StoreError, StoreUnavailable
from agentlat.store.backends import from_arrow_stream, to_arrow_stream

log = logging.getLogger("agentlat.collector")

MAX_REJECTIONS = 5  # attempts before a batch the store keeps refusing is set aside


class Backpressure(Exception):
    """Too much is waiting for the store; the client should retry after ``retry_after`` s."""

    def __init__(self, reason: str, retry_after: int) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class _Logged:
    position: Position
    batch: pa.Table
    size: int


@dataclass(slots=True)
class PipelineStats:
    spans_written: int = 0
    inserts: int = 0
    store_errors: int = 0
    dead_lettered: int = 0
    last_insert_seconds: float = 0.0


class IngestPipeline:
    def __init__(
        self,
        store: Store,
        wal: WriteAheadLog,
        *,
        max_pending_bytes: int = 256 * 1024 * 1024,
        batch_rows: int = 50_000,
        flush_interval: float = 0.2,
    ) -> None:
        self.store = store
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
            self._enqueue(_Logged(position, from_arrow_stream(payload), len(payload)))
            replayed += 1
        if replayed:
            log.info("replaying %d logged batches not yet in the store", replayed)
        self._writer = threading.Thread(target=self._write_loop, name="agentlat-writer", daemon=True)
        self._writer.start()
        return replayed

    def submit(self, batch: pa.Table) -> None:
        """Make ``batch`` durable; raise Backpressure when the store is too far behind."""
        payload = to_arrow_stream(batch)
        self._reserve(len(payload))
        try:
            self.wal.append(payload, token=(batch, len(payload)))
        except OSError:
            self._release(len(payload))
            raise

    def check_room(self) -> None:
        """Refuse early (before a request is even decoded) when the log is already full."""
        if self._pending_bytes >= self.max_pending_bytes:
            raise self._full()

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

    def _on_durable(self, position: Position, token: tuple[pa.Table, int]) -> None:
        # Called by the log in log order, so the checkpoint never passes a record that is
        # not in the store yet.
        batch, size = token
        self._queue.put(_Logged(position, batch, size))

    def _enqueue(self, item: _Logged) -> None:
        with self._pending_lock:
            self._pending_bytes += item.size
        self._queue.put(item)

    def _write_loop(self) -> None:
        while not (self._stopping.is_set() and self._queue.empty()):
            items = self._gather()
            if items and not self._insert(items):
                return  # stopping while the store is down: the log keeps them
            if items:
                self.wal.save_checkpoint(items[-1].position)
                self._release(sum(item.size for item in items))

    def _gather(self) -> list[_Logged]:
        try:
            first = self._queue.get(timeout=self.flush_interval)
        except queue.Empty:
            return []
        items, rows = [first], first.batch.num_rows
        deadline = time.monotonic() + self.flush_interval
        while rows < self.batch_rows:
            try:
                item = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                break
            items.append(item)
            rows += item.batch.num_rows
        return items

    def _insert(self, items: list[_Logged]) -> bool:
        """Write a batch; retry while the store is unavailable, set aside what it rejects."""
        table = pa.concat_tables([item.batch for item in items])
        delay, rejections = 0.1, 0
        while True:
            started = time.perf_counter()
            try:
                self.store.insert_spans(table)
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
                self._written(table, started)
                return True
            if self._stopping.wait(delay):
                return False
            delay = min(delay * 2, 5.0)

    def _note_failure(self, exc: StoreError) -> None:
        self.stats.store_errors += 1
        if self.store_available:
            log.warning("store write failed, retrying with backoff: %s", exc)
        self.store_available = False

    def _dead_letter(self, table: pa.Table, exc: StoreError) -> None:
        folder = self.wal.directory / "dead-letter"
        folder.mkdir(exist_ok=True)
        path = folder / f"batch-{time.time_ns()}.arrows"
        path.write_bytes(to_arrow_stream(table))
        self.stats.dead_lettered += table.num_rows
        self.store_available = True
        log.error(
            "the store rejected a batch of %d spans %d times (%s); it is kept in %s for inspection and "
            "ingest continues",
            table.num_rows, MAX_REJECTIONS, exc, path,
        )  # fmt: skip

    def _written(self, table: pa.Table, started: float) -> None:
        if not self.store_available:
            log.info("store is writable again")
        self.store_available = True
        self.stats.inserts += 1
        self.stats.spans_written += table.num_rows
        self.stats.last_insert_seconds = time.perf_counter() - started
        self._observe_insert(self.stats.last_insert_seconds)
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
        self.wal.close()
