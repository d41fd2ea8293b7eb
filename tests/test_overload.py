"""Overload is pushed back: many clients with large bodies get 503 quickly and memory stays bounded.

48 clients post 15 MB bodies at once. Before admission control the server read every body
before waiting for a decode slot: its RSS grew from ~400 MiB to ~2.2 GiB and clients waited
minutes for a 200. Now a request waits for room before its body is read.
"""

from __future__ import annotations

import gzip
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from agentlat.collector.analysis.assembler import HELD_BYTES
from agentlat.collector.ingest.pipeline import BATCH_BYTES
from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import ServerProcess

pytestmark = pytest.mark.slow
MIB = 1024 * 1024
CLIENTS = 48
INFLIGHT_MIB, BODY_MIB, PENDING_MIB, DECODE_WORKERS = 64, 20, 256, 2
BATCH_MIB, HELD_MIB = BATCH_BYTES // MIB, HELD_BYTES // MIB  # the writer's records at once; held analysis input
# docs/reliability.md: what the server may add to its size at rest (pending records wait on disk, not in memory);
# two batches: the one the writer inserts and the next, which its reader thread decodes meanwhile
RSS_BOUND_MIB = 2 * INFLIGHT_MIB + 2 * 12 * BATCH_MIB + HELD_MIB


def large_body(size: int) -> bytes:
    spans = [SpanSpec(f"op {i}", attributes={"payload": "x" * 4000, "i": i}) for i in range(size // 4100)]
    return otlp_protobuf(spans)


def tree_rss_mib(pid: int) -> float:
    """RSS of a process and all its descendants (the decode workers)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total / 1024


class PeakSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, 0.0, True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, tree_rss_mib(self.pid))
            time.sleep(0.02)


def test_large_bodies_from_many_clients_get_503_fast_and_memory_stays_bounded(tmp_path: Path) -> None:
    settings = {
        "AGENTLAT_MAX_INFLIGHT_BYTES": str(INFLIGHT_MIB * MIB),
        "AGENTLAT_MAX_BODY_BYTES": str(BODY_MIB * MIB),
        "AGENTLAT_MAX_PENDING_BYTES": str(PENDING_MIB * MIB),
        "AGENTLAT_DECODE_WORKERS": str(DECODE_WORKERS),
    }
    server = ServerProcess(tmp_path, extra_env=settings).start()
    try:
        body = large_body(15 * MIB)
        assert 14 * MIB < len(body) < 16 * MIB
        assert httpx.post(f"{server.url}/v1/traces", content=b"", headers=PROTOBUF).status_code == 200
        idle = tree_rss_mib(server.process.pid)  # at rest (protobuf trace requests start no decode worker)
        sampler = PeakSampler(server.process.pid)
        sampler.start()
        started = time.monotonic()

        def post(_: int) -> tuple[int, float, str | None]:
            sent = time.monotonic()
            response = httpx.post(f"{server.url}/v1/traces", content=body, headers=PROTOBUF, timeout=120)
            return response.status_code, time.monotonic() - sent, response.headers.get("Retry-After")

        with ThreadPoolExecutor(CLIENTS) as pool:
            answers = list(pool.map(post, range(CLIENTS)))
        sampler.running = False
        sampler.join()

        refused = sorted(elapsed for status, elapsed, _ in answers if status == 503)
        accepted = [elapsed for status, elapsed, _ in answers if status == 200]
        print(
            f"\nidle {idle:.0f} MiB, peak {sampler.peak:.0f} MiB; {len(accepted)} acknowledged, "
            f"{len(refused)} refused, first 503 after {refused[0]:.2f} s, slowest answer "
            f"{max(e for _, e, _ in answers):.1f} s, all within {time.monotonic() - started:.1f} s"
        )
        assert {status for status, _, _ in answers} <= {200, 503}
        assert refused and accepted
        assert all(retry == "1" for status, _, retry in answers if status == 503)
        # A client is refused after the admission wait (1 s), not after waiting for room: before the acknowledged
        # bodies are through (a fixed 2 s failed on a busy 2-core host at 2.16 s, with the slowest answer at 5.7 s;
        # half the slowest answer failed once checking a protobuf body took far less than decoding it: 1.15 s
        # against 2.3 s).
        assert refused[0] < max(accepted) and refused[0] < 10
        assert max(elapsed for _, elapsed, _ in answers) < 30  # under an OTLP exporter's retry horizon
        assert sampler.peak - idle < RSS_BOUND_MIB
        assert server.process.poll() is None
    finally:
        server.stop()


PROTOBUF = {"Content-Type": "application/x-protobuf"}


def test_a_gzipped_body_takes_room_as_it_inflates(tmp_path: Path) -> None:
    # 8 MiB of spans compress to well under 1 MiB: the room a body needs is what it inflates to.
    settings = {"AGENTLAT_MAX_INFLIGHT_BYTES": str(4 * MIB), "AGENTLAT_DECODE_WORKERS": "0"}
    server = ServerProcess(tmp_path, extra_env=settings).start()
    try:
        inflated = large_body(8 * MIB)
        body = gzip.compress(inflated)
        assert len(body) < MIB < 4 * MIB < len(inflated)
        gzipped = {**PROTOBUF, "Content-Encoding": "gzip"}

        refused = httpx.post(f"{server.url}/v1/traces", content=body, headers=gzipped, timeout=60)

        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"
        assert b"AGENTLAT_MAX_INFLIGHT_BYTES" in refused.content
        small = gzip.compress(large_body(2 * MIB))
        assert httpx.post(f"{server.url}/v1/traces", content=small, headers=gzipped, timeout=60).status_code == 200
        assert "agentlat_inflight_body_bytes 0.0" in server.get("/metrics").text  # every byte given back
    finally:
        server.stop()


def test_requests_past_the_decode_queue_are_refused_and_a_free_slot_never_is(tmp_path: Path) -> None:
    settings = {"AGENTLAT_MAX_DECODE_QUEUE": "0", "AGENTLAT_DECODE_WORKERS": "2"}
    server = ServerProcess(tmp_path, extra_env=settings).start()
    try:
        body = large_body(4 * MIB)
        for _ in range(3):  # one at a time: a decode slot is always free, so nobody waits
            assert httpx.post(f"{server.url}/v1/traces", content=body, headers=PROTOBUF, timeout=60).status_code == 200

        with ThreadPoolExecutor(16) as pool:
            answers = list(
                pool.map(
                    lambda _: httpx.post(f"{server.url}/v1/traces", content=body, headers=PROTOBUF, timeout=60),
                    range(16),
                )
            )

        statuses = [a.status_code for a in answers]
        assert set(statuses) == {200, 503}
        assert statuses.count(200) >= 2  # both decode slots were used
        refusals = [a for a in answers if a.status_code == 503]
        assert all(a.headers["Retry-After"] == "1" for a in refusals)
        assert any(b"AGENTLAT_MAX_DECODE_QUEUE" in a.content for a in refusals)
    finally:
        server.stop()
