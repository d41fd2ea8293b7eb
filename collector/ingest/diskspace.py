"""Free-space watch: refuse new data before the disk is full, resume by itself when space returns.

A full disk mid-write costs more than a refusal: the store and the write-ahead log both need
room to finish what they already accepted. Below ``min_free_bytes`` on any watched directory
(the log's, and the embedded store's) new requests get 503 with Retry-After while the
writer drains what is logged.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

MIB = 1024 * 1024


class DiskGuard:
    def __init__(self, directories: list[Path], min_free_bytes: int, recheck_seconds: float = 0.5) -> None:
        self.directories = list(dict.fromkeys(directories))
        self.min_free_bytes = min_free_bytes
        self.recheck_seconds = recheck_seconds
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._free: dict[Path, int] = {}

    def free_bytes(self) -> dict[Path, int]:
        """Free bytes per watched directory (for an unprivileged user), at most ``recheck_seconds`` old."""
        with self._lock:
            if time.monotonic() - self._checked_at >= self.recheck_seconds:
                self._free = {d: _free(d) for d in self.directories}
                self._checked_at = time.monotonic()
            return dict(self._free)

    def shortage(self) -> str | None:
        """Why new data must wait (the first directory below the floor), or None."""
        if not self.min_free_bytes:
            return None
        for directory, free in self.free_bytes().items():
            if free < self.min_free_bytes:
                return (
                    f"disk space low: {free / MIB:.1f} MiB free in {directory}, below the floor of "
                    f"{self.min_free_bytes / MIB:.0f} MiB (AGENTLAT_MIN_FREE_BYTES); free space there"
                )
        return None


def _free(directory: Path) -> int:
    try:
        stats = os.statvfs(directory)
    except OSError:  # not there (yet): nothing to guard
        return 1 << 62
    return stats.f_bavail * stats.f_frsize
