"""Keeps the per-minute rollups in step with the raw tables.

A minute is marked dirty when spans for it are stored or a trace starting in it is
analysed. It is recomputed whole from the raw tables (which drop duplicates at read time)
once no new mark has come for ``settle_seconds``, or at the latest ``max_delay_seconds``
after its first mark while data keeps arriving. Late data marks a minute again and the
newer rollup row replaces the older.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from agentlat.store import Store, StoreError

log = logging.getLogger("agentlat.collector")

NS_PER_MINUTE = 60_000_000_000


def minutes_of(batch: pa.Table) -> list[int]:
    """The minutes (unix seconds of their start) that a batch's spans start in."""
    nanos = pc.cast(batch.column("Timestamp"), pa.int64())
    return [m * 60 for m in pc.unique(pc.divide(nanos, NS_PER_MINUTE)).to_pylist()]


class RollupScheduler:
    def __init__(
        self,
        store: Store,
        *,
        settle_seconds: float = 5.0,
        max_delay_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.settle = settle_seconds
        self.max_delay = max_delay_seconds
        self.clock = clock
        self.rolled = 0
        self._dirty: dict[int, tuple[float, float]] = {}  # minute -> (first mark, last mark)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def mark(self, minutes: Iterable[int]) -> None:
        now = self.clock()
        with self._lock:
            for minute in minutes:
                first, _ = self._dirty.get(minute, (now, now))
                self._dirty[minute] = (first, now)

    def run_due(self, force: bool = False) -> int:
        """Recompute the minutes that are due (all dirty ones with ``force``)."""
        now = self.clock()
        with self._lock:
            due = [
                m for m, (first, last) in self._dirty.items()
                if force or now - last >= self.settle or now - first >= self.max_delay
            ]  # fmt: skip
            for minute in due:
                del self._dirty[minute]
        if not due:
            return 0
        try:
            self.store.rollup(due, version=time.time_ns())
        except StoreError as exc:
            log.warning("rollup of %d minutes failed, will retry: %s", len(due), exc)
            self.mark(due)
            return 0
        self.rolled += len(due)
        return len(due)

    def start(self, interval: float = 1.0) -> None:
        self._thread = threading.Thread(target=self._loop, args=(interval,), name="agentlat-rollups", daemon=True)
        self._thread.start()

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.run_due()
            except Exception:
                log.exception("rollup failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.run_due(force=True)
