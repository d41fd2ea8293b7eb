"""Admission control for OTLP/HTTP: a request waits for room *before* its body is read.

The gate counts the bytes of request bodies the server holds at once (as sent, and again as
inflated when gzipped). A request that cannot get room within ``wait_seconds`` is refused
with 503 and Retry-After instead of queueing its body in memory, so the server's memory stays
bounded whatever the clients send, and an overloaded server answers within a second.
Everything here runs on the event loop, so plain counters need no lock.
"""

from __future__ import annotations

import asyncio

from agentlat.errors import AgentlatError


class Overloaded(AgentlatError):
    """No room for this request within the admission wait; the client should retry later."""


class AdmissionGate:
    def __init__(self, capacity_bytes: int, wait_seconds: float) -> None:
        self.capacity = max(capacity_bytes, 1)
        self.wait_seconds = wait_seconds
        self.used = 0
        self._freed = asyncio.Event()

    async def admit(self, size: int) -> int:
        """Wait for room for ``size`` bytes and take it; return what was taken (release it later).
        A body larger than the whole capacity waits until nothing else is held."""
        size = min(max(size, 1), self.capacity)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        while self.used + size > self.capacity:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise self._overloaded()
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), remaining)
            except TimeoutError:
                raise self._overloaded() from None
        self.used += size
        return size

    def grow(self, size: int) -> int:
        """Take ``size`` more bytes now (an inflating gzip body), or raise Overloaded."""
        if self.used + size > self.capacity:
            raise self._overloaded()
        self.used += size
        return size

    def release(self, size: int) -> None:
        self.used -= size
        self._freed.set()

    def _overloaded(self) -> Overloaded:
        return Overloaded(
            f"the collector holds its limit of {self.capacity // (1024 * 1024)} MiB of request bodies "
            "(AGENTLAT_MAX_INFLIGHT_BYTES); retry later"
        )
