"""An append-only write-ahead log of span batches, fsynced before a request is acknowledged.

Records are framed as ``length (4 bytes) | crc32 (4 bytes) | payload`` in numbered segment
files. Concurrent appenders share one fsync (group commit): the first waiter of a group
writes and syncs everything queued so far while the others wait for it. A frame cut short
by a crash fails its length or checksum on replay and is truncated away; it was never
acknowledged. ``checkpoint`` records the position up to which records are in the store.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HEADER = struct.Struct("<II")
_SEGMENT_GLOB = "wal-*.log"


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
        segments = self.segments()
        self._segment = segments[-1] if segments else 1
        self._file = open(self._segment_path(self._segment), "ab")  # noqa: SIM115
        for _ in self._read_segment(self._segment, self._segment_path(self._segment), 0):
            pass  # reading truncates a torn tail left by a crash

    def set_listener(self, on_durable: Callable[[Position, Any], None]) -> None:
        """``on_durable(position, token)`` runs for every record, in log order, once synced."""
        self._on_durable = on_durable

    # --- appending -------------------------------------------------------------------
    def append(self, payload: bytes, token: Any = None) -> Position:
        """Write one record and return once it is on disk (fsynced)."""
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
        if self._file.tell() >= self.segment_bytes:
            self._rotate()
        for payload in group.payloads:
            self._file.write(_HEADER.pack(len(payload), zlib.crc32(payload)))
            self._file.write(payload)
            group.positions.append(Position(self._segment, self._file.tell()))
        self._file.flush()
        os.fsync(self._file.fileno())
        if self._on_durable is not None:
            for position, token in zip(group.positions, group.tokens, strict=True):
                self._on_durable(position, token)

    def _rotate(self) -> None:
        self._file.close()
        self._segment += 1
        self._file = open(self._segment_path(self._segment), "ab")  # noqa: SIM115
        _fsync_dir(self.directory)

    # --- reading and trimming --------------------------------------------------------
    def replay(self, after: Position) -> Iterator[tuple[Position, bytes]]:
        """Every complete record past ``after``; a torn tail is truncated."""
        for segment in self.segments():
            if segment < after.segment:
                continue
            path = self._segment_path(segment)
            start = after.offset if segment == after.segment else 0
            yield from self._read_segment(segment, path, start)

    def _read_segment(self, segment: int, path: Path, start: int) -> Iterator[tuple[Position, bytes]]:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(start)
            offset = start
            while offset < size:
                header = f.read(_HEADER.size)
                length, crc = _HEADER.unpack(header) if len(header) == _HEADER.size else (0, 0)
                # Every record written has a payload; zero length is a zero-filled tail, and
                # a length past the end of the file is a torn frame.
                payload = f.read(length) if 0 < length <= size - offset - _HEADER.size else b""
                if not payload or len(payload) != length or zlib.crc32(payload) != crc:
                    self._truncate(path, offset)
                    return
                offset = f.tell()
                yield Position(segment, offset), payload

    def _truncate(self, path: Path, offset: int) -> None:
        if path == self._segment_path(self._segment):
            self._file.truncate(offset)
            self._file.seek(offset)
        else:
            with open(path, "r+b") as f:
                f.truncate(offset)

    def checkpoint(self) -> Position:
        try:
            segment, offset = (self.directory / "checkpoint").read_text().split()
            return Position(int(segment), int(offset))
        except (OSError, ValueError):
            return Position(0, 0)

    def save_checkpoint(self, position: Position) -> None:
        """Record that everything up to ``position`` is in the store; drop spent segments."""
        tmp = self.directory / "checkpoint.tmp"
        tmp.write_text(f"{position.segment} {position.offset}\n")
        os.replace(tmp, self.directory / "checkpoint")
        for segment in self.segments():
            if segment < position.segment:
                self._segment_path(segment).unlink(missing_ok=True)

    def segments(self) -> list[int]:
        return sorted(int(p.stem.split("-")[1]) for p in self.directory.glob(_SEGMENT_GLOB))

    def _segment_path(self, segment: int) -> Path:
        return self.directory / f"wal-{segment:09d}.log"

    def close(self) -> None:
        with self._cond:
            self._file.close()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
