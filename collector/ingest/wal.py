"""An append-only write-ahead log of span batches, fsynced before a request is acknowledged.

Records are framed as ``length (4 bytes) | crc32 (4 bytes) | payload`` in numbered segment
files. Concurrent appenders share one fsync (group commit): the first waiter of a group
writes and syncs everything queued so far while the others wait for it.

Every I/O error leaves the log as it was before the failed append: the group's bytes are
cut off again (the file is truncated back to the last good frame) before anything else is
appended, so a full disk or a failed fsync never leaves a torn frame in front of later,
acknowledged ones. Should a log still hold a bad stretch (a crash mid-write, a bad sector,
a log written by an older version), replay skips it, keeps every valid frame after it,
saves the skipped bytes under ``damaged/`` and says so loudly; only a bad stretch with no
valid frame after it (a torn tail, never acknowledged) is truncated away.
``checkpoint`` records the position up to which records are in the store.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("agentlat.collector")

_HEADER = struct.Struct("<II")
_SEGMENT_GLOB = "wal-*.log"
RECLAIM_BYTES = 1024 * 1024  # a fully stored segment this large is swapped for an empty one


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """The end of a record: segment number and byte offset just past it."""

    segment: int
    offset: int


@dataclass(slots=True)
class _Group:
    payloads: list[bytes] = field(default_factory=list)
    tokens: list[Any] = field(default_factory=list)
    positions: list[Position] = field(default_factory=list)
    done: bool = False
    error: BaseException | None = None


class WriteAheadLog:
    def __init__(
        self,
        directory: Path,
        segment_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.directory = directory
        self._on_durable: Callable[[Position, Any], None] | None = None
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._cond = threading.Condition()
        self._open_group: _Group | None = None
        self._flushing = False
        self._reported: set[tuple[int, int]] = set()
        self._cut_back_to: int | None = None  # an offset a failed append could not truncate to yet
        segments = self.segments()
        self._segment = segments[-1] if segments else 1
        self._fd = _open_append(self._segment_path(self._segment))
        for _ in self._read_segment(self._segment, 0):
            pass  # reading truncates a torn tail left by a crash
        self._end = os.fstat(self._fd).st_size

    def set_listener(self, on_durable: Callable[[Position, Any], None]) -> None:
        """``on_durable(position, token)`` runs for every record, in log order, once synced."""
        self._on_durable = on_durable

    # --- appending -------------------------------------------------------------------
    def append(self, payload: bytes, token: Any = None) -> Position:
        """Write one record and return once it is on disk (fsynced); raise OSError when it is not."""
        if not payload:
            raise ValueError("an empty record cannot be logged")
        with self._cond:
            group = self._open_group or _Group()
            self._open_group = group
            index = len(group.payloads)
            group.payloads.append(payload)
            group.tokens.append(token)
            while not group.done:
                if self._flushing:
                    self._cond.wait()
                    continue
                self._flushing = True
                self._open_group = None
                self._cond.release()
                try:
                    self._write_group(group)
                except BaseException as exc:
                    group.error = exc
                finally:
                    self._cond.acquire()
                    group.done = True
                    self._flushing = False
                    self._cond.notify_all()
            if group.error is not None:
                raise OSError(f"write-ahead log write failed: {group.error}") from None
            return group.positions[index]

    def _write_group(self, group: _Group) -> None:
        self._finish_cut_back()
        if self._end >= self.segment_bytes:
            try:
                self._rotate()
            except OSError as exc:  # the current segment grows on; the next group tries again
                log.warning("write-ahead log: cannot start a new segment: %s", exc)
        start, frames = self._end, []
        for payload in group.payloads:
            frames += (_HEADER.pack(len(payload), zlib.crc32(payload)), payload)
            self._end += _HEADER.size + len(payload)
            group.positions.append(Position(self._segment, self._end))
        try:
            _write_all(self._fd, frames)
            os.fsync(self._fd)
        except BaseException:
            group.positions.clear()
            self._cut_back(start)
            raise
        if self._on_durable is not None:
            for position, token in zip(group.positions, group.tokens, strict=True):
                self._on_durable(position, token)

    def _cut_back(self, offset: int) -> None:
        """Drop a failed group's bytes so the next frame follows the last good one."""
        self._end = offset
        self._cut_back_to = offset
        try:
            self._finish_cut_back()
        except OSError as exc:
            log.error("write-ahead log: cannot truncate %s back to %d (%s); retrying before the next append",
                      self._segment_path(self._segment), offset, exc)  # fmt: skip

    def _finish_cut_back(self) -> None:
        """Raise OSError while a failed group's bytes cannot be truncated away: nothing may follow them."""
        if self._cut_back_to is not None:
            os.ftruncate(self._fd, self._cut_back_to)
            self._cut_back_to = None

    def _rotate(self) -> None:
        path = self._segment_path(self._segment + 1)
        fd = _open_append(path)
        os.close(self._fd)
        self._fd, self._segment, self._end = fd, self._segment + 1, 0
        _fsync_dir(self.directory)

    # --- reading and trimming --------------------------------------------------------
    def read(self, position: Position, size: int) -> bytes:
        """The payload of the ``size``-byte record that ends at ``position`` (not yet checkpointed)."""
        fd = os.open(self._segment_path(position.segment), os.O_RDONLY)
        try:
            payload = os.pread(fd, size, position.offset - size)
        finally:
            os.close(fd)
        if len(payload) != size:
            raise OSError(f"write-ahead log: record at {position} is cut short ({len(payload)} of {size} bytes)")
        return payload

    def replay(self, after: Position) -> Iterator[tuple[Position, bytes]]:
        """Every valid record past ``after``; bad stretches are skipped (and saved), a torn tail truncated."""
        for segment in self.segments():
            if segment < after.segment:
                continue
            yield from self._read_segment(segment, after.offset if segment == after.segment else 0)

    def _read_segment(self, segment: int, start: int) -> Iterator[tuple[Position, bytes]]:
        path = self._segment_path(segment)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= start:
                return
            with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as data:
                offset = start
                while offset < size:
                    end = _frame_end(data, offset, size)
                    if end is None:
                        offset = self._skip_bad_stretch(segment, data, offset, size)
                        continue
                    yield Position(segment, end), bytes(data[offset + _HEADER.size : end])
                    offset = end

    def _skip_bad_stretch(self, segment: int, data: mmap.mmap, offset: int, size: int) -> int:
        """Where reading resumes after the bad bytes at ``offset``: the next valid frame, or the end."""
        resume = next((o for o in range(offset + 1, size) if _frame_end(data, o, size) is not None), None)
        path = self._segment_path(segment)
        if resume is None:
            # A torn tail: the frame was cut short by a crash or a failed write, never acknowledged.
            self._truncate(segment, offset)
            return size
        if (segment, offset) not in self._reported:
            self._reported.add((segment, offset))
            saved = self._save_damaged(segment, offset, data[offset:resume])
            log.error(
                "write-ahead log %s: %d bytes at offset %d are not a valid record (bad length or checksum); "
                "skipped them and kept the records that follow%s",
                path, resume - offset, offset, f"; the bytes are saved in {saved}" if saved else "",
            )  # fmt: skip
        return resume

    def _save_damaged(self, segment: int, offset: int, content: bytes) -> Path | None:
        path = self.directory / "damaged" / f"wal-{segment:09d}-at-{offset}.bin"
        try:
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(content)
        except OSError as exc:
            log.error("write-ahead log: cannot save damaged bytes to %s: %s", path, exc)
            return None
        return path

    def _truncate(self, segment: int, offset: int) -> None:
        if segment == self._segment:
            os.ftruncate(self._fd, offset)
            self._end = offset
        else:
            os.truncate(self._segment_path(segment), offset)

    def checkpoint(self) -> Position:
        try:
            segment, offset = (self.directory / "checkpoint").read_text().split()
            return Position(int(segment), int(offset))
        except (OSError, ValueError):
            return Position(0, 0)

    def save_checkpoint(self, position: Position) -> None:
        """Record that everything up to ``position`` is in the store; drop spent segments.
        Raise OSError when the checkpoint could not be written (the previous one stays)."""
        tmp = self.directory / "checkpoint.tmp"
        tmp.write_text(f"{position.segment} {position.offset}\n")
        os.replace(tmp, self.directory / "checkpoint")
        for segment in self.segments():
            if segment < position.segment:
                self._segment_path(segment).unlink(missing_ok=True)

    def reclaim(self, stored: Position) -> bool:
        """Start an empty segment when every record of a large current one is stored (``stored``
        is the saved checkpoint), so a log that keeps up frees its disk space without waiting
        for ``segment_bytes``. True when a segment was dropped."""
        with self._cond:
            caught_up = stored == Position(self._segment, self._end) and self._cut_back_to is None
            if self._flushing or self._open_group or not caught_up or self._end < RECLAIM_BYTES:
                return False
            spent = self._segment
            try:
                self._rotate()
            except OSError:
                return False
        self._segment_path(spent).unlink(missing_ok=True)
        return True

    def segments(self) -> list[int]:
        return sorted(int(p.stem.split("-")[1]) for p in self.directory.glob(_SEGMENT_GLOB))

    def _segment_path(self, segment: int) -> Path:
        return self.directory / f"wal-{segment:09d}.log"

    def close(self) -> None:
        with self._cond:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _frame_end(data: mmap.mmap, offset: int, size: int) -> int | None:
    """The end of the valid frame at ``offset``, or None. Every record has a payload, so a zero
    length is a zero-filled tail; a length past the end of the file is a torn frame."""
    if offset + _HEADER.size > size:
        return None
    length, crc = _HEADER.unpack_from(data, offset)
    end = offset + _HEADER.size + length
    if length == 0 or end > size or zlib.crc32(data[offset + _HEADER.size : end]) != crc:
        return None
    return end


def _open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def _write_all(fd: int, chunks: list[bytes]) -> None:
    """Write every chunk; os.write may write less than asked (a disk filling up mid-write)."""
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
