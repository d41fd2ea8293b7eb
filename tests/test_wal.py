"""The write-ahead log: framing, group commit, torn tails, rotation, checkpoints, reopening."""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from pathlib import Path
from unittest.mock import patch

import pytest

from agentlat.collector.ingest.wal import Position, WriteAheadLog

HEADER = struct.Struct("<II")  # the documented frame header: length, crc32
FSYNC = "agentlat.collector.ingest.wal.os.fsync"
REAL_FSYNC = os.fsync
REAL_WRITE = os.write
START = Position(0, 0)


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def segment_file(wal: WriteAheadLog, segment: int) -> Path:
    return wal.directory / f"wal-{segment:09d}.log"


def replayed(wal: WriteAheadLog, after: Position = START) -> list[tuple[Position, bytes]]:
    return list(wal.replay(after))


@pytest.fixture
def wal(tmp_path: Path):
    log = WriteAheadLog(tmp_path / "wal")
    yield log
    log.close()


# --- appending and replaying ------------------------------------------------------------


def test_append_returns_increasing_positions_and_replay_is_byte_identical(wal: WriteAheadLog) -> None:
    payloads = [b"first", b"\x00\xff binary \n\r", b"x" * 10_000]

    positions = [wal.append(p) for p in payloads]

    assert positions == [
        Position(1, 8 + 5),
        Position(1, 13 + 8 + 12),
        Position(1, 33 + 8 + 10_000),
    ]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert replayed(wal) == list(zip(positions, payloads, strict=True))
    assert segment_file(wal, 1).read_bytes() == b"".join(frame(p) for p in payloads)


def test_an_empty_record_is_refused(wal: WriteAheadLog) -> None:
    # A zero-length frame is what a zero-filled tail looks like, so none is ever written.
    with pytest.raises(ValueError, match="empty"):
        wal.append(b"")
    assert replayed(wal) == []


def test_every_sequential_append_is_fsynced_before_it_returns(wal: WriteAheadLog) -> None:
    with patch(FSYNC, wraps=REAL_FSYNC) as fsync:
        for count in range(1, 4):
            wal.append(b"record %d" % count)
            assert fsync.call_count == count


def test_replay_after_a_position_yields_only_later_records(wal: WriteAheadLog) -> None:
    positions = [wal.append(b"r%d" % i) for i in range(5)]

    assert [p for _, p in replayed(wal, positions[1])] == [b"r2", b"r3", b"r4"]
    assert replayed(wal, positions[-1]) == []


def test_listener_is_called_once_per_record_in_log_order(wal: WriteAheadLog) -> None:
    calls: list[tuple[Position, object]] = []
    wal.set_listener(lambda position, token: calls.append((position, token)))

    positions = [wal.append(b"payload %d" % i, token=("token", i)) for i in range(4)]

    assert calls == [(positions[i], ("token", i)) for i in range(4)]


def test_append_raises_oserror_when_the_disk_fails(wal: WriteAheadLog) -> None:
    calls: list[Position] = []
    wal.set_listener(lambda position, token: calls.append(position))

    with (
        patch(FSYNC, side_effect=OSError(28, "No space left on device")),
        pytest.raises(OSError, match=r"write-ahead log write failed: .*No space left on device"),
    ):
        wal.append(b"lost")
    assert calls == []  # never reported durable


def test_concurrent_appends_share_fsyncs_and_replay_each_record_once(wal: WriteAheadLog) -> None:
    threads, per_thread = 8, 25
    listened: list[tuple[Position, bytes]] = []
    wal.set_listener(lambda position, token: listened.append((position, token)))
    returned: dict[bytes, Position] = {}
    returned_lock = threading.Lock()
    start = threading.Barrier(threads)
    failures: list[BaseException] = []

    def slow_fsync(fd: int) -> None:
        # Models a disk whose fsync takes a millisecond (real disks take longer); the other
        # appenders queue up behind it. This is latency injection, not a wait for a condition.
        time.sleep(0.001)
        REAL_FSYNC(fd)

    def appender(thread: int) -> None:
        try:
            start.wait(timeout=10)
            for i in range(per_thread):
                payload = b"thread %d record %03d" % (thread, i)
                position = wal.append(payload, token=payload)
                with returned_lock:
                    returned[payload] = position
        except BaseException as exc:
            failures.append(exc)

    with patch(FSYNC, wraps=slow_fsync) as fsync:
        workers = [threading.Thread(target=appender, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)

    assert failures == []
    assert not any(worker.is_alive() for worker in workers)
    records = replayed(wal)
    expected = {b"thread %d record %03d" % (t, i) for t in range(threads) for i in range(per_thread)}
    assert len(records) == threads * per_thread
    assert {payload for _, payload in records} == expected  # each exactly once (len matches)
    assert listened == records  # listener order == log order, with the same positions
    assert {payload: position for position, payload in records} == returned
    for t in range(threads):  # one thread's appends are sequential, so stay in its order
        mine = [payload for _, payload in records if payload.startswith(b"thread %d " % t)]
        assert mine == sorted(mine)
    assert 0 < fsync.call_count < threads * per_thread  # group commit happened


# --- torn tails -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"garbage!!", id="garbage-bytes"),
        pytest.param(b"\xff" * 8 + b"more", id="huge-length"),
        pytest.param(b"\x05\x00\x00", id="partial-header"),
        pytest.param(frame(b"0123456789" * 10)[:50], id="truncated-frame"),
        pytest.param(HEADER.pack(4, zlib.crc32(b"good") ^ 1) + b"good", id="bad-crc"),
        pytest.param(frame(b"flipped")[:-1] + b"F", id="corrupt-payload"),
    ],
)
def test_torn_tail_is_dropped_and_truncated_so_later_appends_replay(wal: WriteAheadLog, tail: bytes) -> None:
    positions = [wal.append(b"complete %d" % i) for i in range(3)]
    path = segment_file(wal, 1)
    intact = path.read_bytes()
    with open(path, "ab") as f:
        f.write(tail)

    assert replayed(wal) == [(positions[i], b"complete %d" % i) for i in range(3)]
    assert path.read_bytes() == intact

    later = wal.append(b"after the tear")
    assert later == Position(1, len(intact) + 8 + len(b"after the tear"))
    assert [p for _, p in replayed(wal)] == [b"complete 0", b"complete 1", b"complete 2", b"after the tear"]


def test_torn_tail_left_by_a_crash_is_truncated_when_reopened(tmp_path: Path) -> None:
    directory = tmp_path / "wal"
    first = WriteAheadLog(directory)
    positions = [first.append(b"kept %d" % i) for i in range(3)]
    first.close()
    with open(directory / "wal-000000001.log", "ab") as f:
        f.write(frame(b"never acknowledged")[:-3])

    second = WriteAheadLog(directory)
    try:
        assert replayed(second) == [(positions[i], b"kept %d" % i) for i in range(3)]
        assert second.append(b"new") == Position(1, positions[-1].offset + 8 + 3)
        assert [p for _, p in replayed(second)] == [b"kept 0", b"kept 1", b"kept 2", b"new"]
    finally:
        second.close()


def test_zero_filled_tail_is_not_replayed_as_records(wal: WriteAheadLog) -> None:
    positions = [wal.append(b"complete %d" % i) for i in range(3)]
    path = segment_file(wal, 1)
    intact = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b"\x00" * 16)

    assert replayed(wal) == [(positions[i], b"complete %d" % i) for i in range(3)]
    assert path.read_bytes() == intact


# --- rotation and checkpoints -----------------------------------------------------------


def test_rotation_creates_segments_and_checkpoint_drops_spent_ones(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal", segment_bytes=64)
    try:
        payloads = [b"record-%02d-padding!!!" % i for i in range(9)]  # 20 bytes, 28 per frame
        positions = [wal.append(p) for p in payloads]

        # a segment rotates once it has reached 64 bytes: three 28-byte frames per segment
        assert wal.segments() == [1, 2, 3]
        assert positions == [Position(s, 28 * k) for s in (1, 2, 3) for k in (1, 2, 3)]
        assert replayed(wal) == list(zip(positions, payloads, strict=True))

        wal.save_checkpoint(positions[4])  # (2, 56): everything up to record 4 is stored

        assert wal.checkpoint() == Position(2, 56)
        assert wal.segments() == [2, 3]
        assert not segment_file(wal, 1).exists()
        assert replayed(wal, wal.checkpoint()) == list(zip(positions[5:], payloads[5:], strict=True))

        wal.save_checkpoint(positions[8])
        assert wal.segments() == [3]
        assert replayed(wal, wal.checkpoint()) == []
        assert wal.append(b"x") == Position(4, 8 + 1)  # segment 3 was full
        assert replayed(wal, wal.checkpoint()) == [(Position(4, 9), b"x")]
    finally:
        wal.close()


def test_a_record_is_read_back_where_it_ends_in_any_segment(tmp_path: Path) -> None:
    """The writer takes records from the log itself, by position and size (collector/ingest/pipeline.py)."""
    wal = WriteAheadLog(tmp_path / "wal", segment_bytes=64)
    try:
        payloads = [b"record-%02d-" % i + b"\x00\xff" * i for i in range(7)]
        positions = [wal.append(p) for p in payloads]
        assert len(wal.segments()) > 1
        assert [wal.read(at, len(p)) for at, p in zip(positions, payloads, strict=True)] == payloads
        with pytest.raises(OSError, match="cut short"):
            wal.read(Position(positions[-1].segment, positions[-1].offset + 5), len(payloads[-1]) + 5)
    finally:
        wal.close()


def test_checkpoint_on_a_segment_boundary_replays_from_the_next_segment(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal", segment_bytes=10)
    try:
        positions = [wal.append(b"%d" % i * 5) for i in range(3)]  # one 13-byte frame per segment
        assert wal.segments() == [1, 2, 3]

        wal.save_checkpoint(positions[0])

        assert wal.segments() == [1, 2, 3]  # segment 1 is the checkpoint's own
        assert [p for _, p in replayed(wal, wal.checkpoint())] == [b"11111", b"22222"]
    finally:
        wal.close()


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(None, id="missing"),
        pytest.param(b"", id="empty"),
        pytest.param(b"garbage", id="one-word"),
        pytest.param(b"1", id="one-number"),
        pytest.param(b"1 2 3", id="three-numbers"),
        pytest.param(b"one 2", id="not-a-number"),
        pytest.param(b"1.5 2", id="float"),
        pytest.param(b"\xff\xfe\x00\x01", id="not-utf8"),
        pytest.param("directory", id="a-directory"),
    ],
)
def test_checkpoint_is_the_start_when_missing_or_corrupt(wal: WriteAheadLog, content: bytes | str | None) -> None:
    wal.append(b"record")
    path = wal.directory / "checkpoint"
    if content == "directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)

    assert wal.checkpoint() == Position(0, 0)
    assert [p for _, p in replayed(wal, wal.checkpoint())] == [b"record"]


def test_saved_checkpoint_survives_reopening(tmp_path: Path) -> None:
    directory = tmp_path / "wal"
    first = WriteAheadLog(directory)
    positions = [first.append(b"r%d" % i) for i in range(3)]
    first.save_checkpoint(positions[1])
    first.close()

    second = WriteAheadLog(directory)
    try:
        assert second.checkpoint() == positions[1]
        assert replayed(second, second.checkpoint()) == [(positions[2], b"r2")]
        assert not (directory / "checkpoint.tmp").exists()
    finally:
        second.close()


# --- reopening --------------------------------------------------------------------------


def test_reopening_continues_after_existing_records(tmp_path: Path) -> None:
    directory = tmp_path / "wal"
    first = WriteAheadLog(directory)
    before = [first.append(b"before %d" % i) for i in range(3)]
    first.close()

    second = WriteAheadLog(directory)
    try:
        after = [second.append(b"after %d" % i) for i in range(2)]

        assert after == [Position(1, before[-1].offset + 15), Position(1, before[-1].offset + 30)]
        assert replayed(second) == [
            *zip(before, [b"before 0", b"before 1", b"before 2"], strict=True),
            *zip(after, [b"after 0", b"after 1"], strict=True),
        ]
    finally:
        second.close()


def test_reopening_continues_in_the_last_segment(tmp_path: Path) -> None:
    directory = tmp_path / "wal"
    first = WriteAheadLog(directory, segment_bytes=30)
    for i in range(4):
        first.append(b"%02d" % i * 5)  # 18-byte frames: two per segment
    assert first.segments() == [1, 2]
    first.close()

    second = WriteAheadLog(directory, segment_bytes=30)
    try:
        assert second.append(b"next") == Position(3, 12)  # segment 2 was already full
        assert second.segments() == [1, 2, 3]
        assert [p for _, p in replayed(second)][-2:] == [b"03" * 5, b"next"]
    finally:
        second.close()


# --- I/O errors: nothing torn is ever left in front of an acknowledged record ----------------


def failing_write(after_bytes: int, error: int = 28):
    """An os.write that writes ``after_bytes`` of its first call, then fails like a full disk."""
    calls = {"n": 0}

    def write(fd: int, data) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return REAL_WRITE(fd, bytes(data[:after_bytes]))
        raise OSError(error, os.strerror(error))

    return write


def test_a_write_that_fails_midway_is_cut_back_before_the_next_append(wal: WriteAheadLog) -> None:
    kept = [wal.append(b"acknowledged %d" % i) for i in range(2)]
    path = segment_file(wal, 1)
    intact = path.read_bytes()

    with (
        patch("agentlat.collector.ingest.wal.os.write", side_effect=failing_write(after_bytes=11)),
        pytest.raises(OSError, match="No space left on device"),
    ):
        wal.append(b"never acknowledged: the disk filled up")

    assert path.read_bytes() == intact  # the torn 11 bytes are gone
    assert len(intact) == 2 * (8 + 14)
    later = wal.append(b"after space returned")
    assert later == Position(1, len(intact) + 8 + 20)
    assert replayed(wal) == [
        (kept[0], b"acknowledged 0"),
        (kept[1], b"acknowledged 1"),
        (later, b"after space returned"),
    ]


def test_appends_wait_for_a_failed_truncation_to_succeed(wal: WriteAheadLog) -> None:
    wal.append(b"first")
    path = segment_file(wal, 1)
    intact = path.read_bytes()
    truncations = {"failures_left": 2}
    real_ftruncate = os.ftruncate

    def flaky_ftruncate(fd: int, length: int) -> None:
        if truncations["failures_left"]:
            truncations["failures_left"] -= 1
            raise OSError(5, "Input/output error")
        real_ftruncate(fd, length)

    with (
        patch("agentlat.collector.ingest.wal.os.ftruncate", side_effect=flaky_ftruncate),
        patch("agentlat.collector.ingest.wal.os.write", side_effect=failing_write(after_bytes=6)),
        pytest.raises(OSError),
    ):
        wal.append(b"torn")
    assert len(path.read_bytes()) == len(intact) + 6  # the first truncation failed

    with (
        patch("agentlat.collector.ingest.wal.os.ftruncate", side_effect=flaky_ftruncate),
        pytest.raises(OSError, match="Input/output error"),
    ):
        wal.append(b"refused: the torn bytes are still there")
    assert len(path.read_bytes()) == len(intact) + 6  # nothing appended after them

    with patch("agentlat.collector.ingest.wal.os.ftruncate", side_effect=flaky_ftruncate):
        position = wal.append(b"second")
    assert path.read_bytes() == intact + frame(b"second")
    assert [p for _, p in replayed(wal)] == [b"first", b"second"]
    assert position == Position(1, len(intact) + 14)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(frame(b"0123456789" * 10)[:50], id="torn-frame"),
        pytest.param(b"\x00" * 4096, id="zero-filled-block"),
        pytest.param(HEADER.pack(4, zlib.crc32(b"good") ^ 1) + b"good", id="bad-crc"),
        pytest.param(b"\xff" * 8 + b"more", id="huge-length"),
    ],
)
def test_a_bad_stretch_mid_log_is_skipped_saved_and_reported_never_cutting_later_records(
    tmp_path: Path, damage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "wal"
    directory.mkdir()
    before, after = [b"before %d" % i for i in range(2)], [b"after %d" % i for i in range(3)]
    content = b"".join(frame(p) for p in before) + damage + b"".join(frame(p) for p in after)
    (directory / "wal-000000001.log").write_bytes(content)

    with caplog.at_level("ERROR", logger="agentlat.collector"):
        wal = WriteAheadLog(directory)
        try:
            assert [p for _, p in replayed(wal)] == before + after
            assert (directory / "wal-000000001.log").read_bytes() == content  # nothing truncated
            assert wal.append(b"new") == Position(1, len(content) + 11)
            assert [p for _, p in replayed(wal)] == [*before, *after, b"new"]
        finally:
            wal.close()

    damaged_at = sum(len(frame(p)) for p in before)
    saved = directory / "damaged" / f"wal-000000001-at-{damaged_at}.bin"
    assert saved.read_bytes() == damage
    reports = [r.getMessage() for r in caplog.records if "not a valid record" in r.getMessage()]
    assert len(reports) == 1  # once, however often the stretch is read
    assert f"{len(damage)} bytes at offset {damaged_at}" in reports[0]


def test_a_caught_up_segment_is_swapped_for_an_empty_one(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal")
    try:
        positions = [wal.append(b"x" * 300_000) for _ in range(4)]  # 1.2 MB, over RECLAIM_BYTES
        assert wal.reclaim(positions[2]) is False  # not everything is stored yet
        wal.save_checkpoint(positions[3])
        assert wal.reclaim(positions[3]) is True
        assert wal.segments() == [2]
        assert replayed(wal, wal.checkpoint()) == []
        assert wal.append(b"next") == Position(2, 12)
        assert replayed(wal, wal.checkpoint()) == [(Position(2, 12), b"next")]
        assert wal.reclaim(Position(2, 12)) is False  # small segments stay
    finally:
        wal.close()


def test_a_real_full_disk_loses_no_acknowledged_record(tmp_path: Path) -> None:
    from tests.small_disk import fill, small_filesystem

    with small_filesystem(tmp_path / "disk", 8) as disk:
        filler = fill(disk, leave_bytes=300_000)
        wal = WriteAheadLog(disk / "wal")
        acknowledged, refused = [], 0
        for i in range(20):
            payload = b"%04d" % i + os.urandom(40_000)
            try:
                wal.append(payload)
                acknowledged.append(payload)
            except OSError:
                refused += 1
        assert refused > 0 and 0 < len(acknowledged) < 20

        filler.unlink()  # space returns
        for i in range(5):
            payload = b"late %d" % i + os.urandom(40_000)
            wal.append(payload)
            acknowledged.append(payload)
        wal.close()

        reopened = WriteAheadLog(disk / "wal")
        try:
            assert [p for _, p in replayed(reopened)] == acknowledged
            assert not (disk / "wal" / "damaged").exists()
        finally:
            reopened.close()
