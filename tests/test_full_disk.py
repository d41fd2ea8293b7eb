"""A full disk never loses an acknowledged span: real small file systems, exact counts.

Each test counts the spans the collector acknowledged (200) and the spans the store holds,
across the fault, the return of space and a kill -9 with a restart.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import ServerProcess, wait_for
from tests.small_disk import MIB, fill, resize, small_filesystem

PROTOBUF = {"Content-Type": "application/x-protobuf"}
SPANS_PER_REQUEST = 1000
pytestmark = pytest.mark.slow


class DiskServer(ServerProcess):
    """A collector whose store and log live where the test says (its own log file stays outside)."""

    def __init__(self, workdir: Path, data_dir: Path, wal_dir: Path, extra_env: dict[str, str]) -> None:
        super().__init__(workdir, extra_env={"AGENTLAT_WAL": str(wal_dir), **extra_env})
        self.data_dir = data_dir

    def store_args(self) -> list[str]:
        return ["--data", str(self.data_dir)]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_filesystem(tmp_path / "disk", 64) as mounted:
        yield mounted


def post_batch(server: ServerProcess, service: str, index: int) -> httpx.Response:
    spans = [SpanSpec(f"op {index}.{j}", service=service, attributes={"i": j}) for j in range(SPANS_PER_REQUEST)]
    return httpx.post(f"{server.url}/v1/traces", content=otlp_protobuf(spans), headers=PROTOBUF, timeout=60)


def stored(server: ServerProcess, service: str) -> int:
    body = server.get("/api/v1/percentiles", metric="span", service=service, window="2h").json()
    return sum(row["count"] for row in body["rows"])


class Tally:
    """Acknowledged spans and the refusals seen, with their Retry-After hints."""

    def report(self, stored_spans: int) -> None:
        print(
            f"\n{self.sent} requests of {SPANS_PER_REQUEST} spans: {self.acknowledged} spans acknowledged, "
            f"{len(self.refusals)} requests refused, {stored_spans} stored, {self.acknowledged - stored_spans} lost"
        )

    def __init__(self) -> None:
        self.acknowledged = 0
        self.refusals: list[httpx.Response] = []
        self.sent = 0

    def post(self, server: ServerProcess, service: str) -> httpx.Response:
        response = post_batch(server, service, self.sent)
        self.sent += 1
        if response.status_code == 200:
            self.acknowledged += SPANS_PER_REQUEST
        else:
            self.refusals.append(response)
        return response

    def post_until_refused(self, server: ServerProcess, service: str, limit: int = 200) -> None:
        for _ in range(limit):
            if self.post(server, service).status_code != 200:
                return
        raise AssertionError(f"{limit} requests were all acknowledged; the disk never filled")


def ready(server: ServerProcess) -> bool:
    return server.get("/readyz").status_code == 200


def test_a_full_disk_under_store_and_log_loses_nothing_acknowledged(tmp_path: Path, disk: Path) -> None:
    # Slow flushes keep batches waiting for the store when the disk fills, so the store's
    # inserts and the log's checkpoint meet the full disk too, not only the log's appends.
    env = {"AGENTLAT_MIN_FREE_BYTES": "0", "AGENTLAT_FLUSH_INTERVAL": "8"}
    server = DiskServer(tmp_path, disk / "data", disk / "wal", env)
    server.start()
    try:
        tally = Tally()
        filler = fill(disk, leave_bytes=4 * MIB)
        tally.post_until_refused(server, "full-disk")
        fill(disk, leave_bytes=0)
        wait_for(lambda: "store write failed" in server.log(), timeout=30, interval=0.2)
        assert server.get("/metrics").text.count("agentlat_store_available 0.0") == 1
        for _ in range(5):  # while full: refused with a hint, nothing acknowledged wrongly
            tally.post(server, "full-disk")
        assert tally.refusals, "the disk never filled"
        assert {r.status_code for r in tally.refusals} == {503}
        assert all(int(r.headers["Retry-After"]) > 0 for r in tally.refusals)
        assert server.process.poll() is None

        filler.unlink()  # space returns
        wait_for(lambda: ready(server), timeout=60, interval=0.2)
        for _ in range(30):
            assert tally.post(server, "full-disk").status_code == 200
        wait_for(lambda: stored(server, "full-disk") == tally.acknowledged, timeout=90, interval=0.5)

        server.kill()
        server.start()
        tally.report(stored(server, "full-disk"))
        assert stored(server, "full-disk") == tally.acknowledged
        assert not (disk / "wal" / "damaged").exists()
    finally:
        server.kill()


def test_below_the_free_space_floor_new_data_waits_and_resumes_by_itself(tmp_path: Path, disk: Path) -> None:
    server = DiskServer(tmp_path, disk / "data", disk / "wal", {"AGENTLAT_MIN_FREE_BYTES": str(16 * MIB)})
    server.start()
    try:
        tally = Tally()
        for _ in range(3):
            assert tally.post(server, "floor").status_code == 200
        filler = fill(disk, leave_bytes=10 * MIB)

        refused = wait_for(lambda: tally.post(server, "floor").status_code == 503 and tally.refusals[-1], timeout=5)
        assert refused.headers["Retry-After"] == "10"
        assert "disk space low" in refused.text and "AGENTLAT_MIN_FREE_BYTES" in refused.text
        readiness = server.get("/readyz")
        assert readiness.status_code == 503
        assert any("disk space low" in problem for problem in readiness.json()["problems"])
        metrics = server.get("/metrics").text
        assert f'agentlat_disk_free_bytes{{path="{disk / "wal"}"}}' in metrics

        filler.unlink()
        wait_for(lambda: tally.post(server, "floor").status_code == 200, timeout=5, interval=0.2)
        wait_for(lambda: stored(server, "floor") == tally.acknowledged, timeout=60, interval=0.5)
        tally.report(stored(server, "floor"))
        assert tally.acknowledged >= 4 * SPANS_PER_REQUEST
    finally:
        server.kill()


def test_a_log_alone_on_a_full_disk_that_is_enlarged_loses_nothing(tmp_path: Path, disk: Path) -> None:
    resize(disk, 4)  # the log alone, on 4 MiB; the store on the ordinary disk
    server = DiskServer(
        tmp_path, tmp_path / "data", disk / "wal", {"AGENTLAT_MIN_FREE_BYTES": "0", "AGENTLAT_FLUSH_INTERVAL": "60"}
    )
    server.start()
    try:
        tally = Tally()
        tally.post_until_refused(server, "enlarged")
        before = tally.acknowledged
        assert before > 0

        resize(disk, 32)
        for _ in range(10):
            assert tally.post(server, "enlarged").status_code == 200

        server.kill()  # everything acknowledged is in the log only (60 s flushes)
        server.env["AGENTLAT_FLUSH_INTERVAL"] = "0.1"
        server.start()
        wait_for(lambda: stored(server, "enlarged") == tally.acknowledged, timeout=90, interval=0.5)
        tally.report(stored(server, "enlarged"))
        assert "replaying" in server.log()
    finally:
        server.kill()


CHDB_FULL_DISK_INSERT = """
import os, sys
from pathlib import Path
import pyarrow as pa
from agentlat.store.backends import ChdbBackend, StoreUnavailable
disk = Path(sys.argv[1])
backend = ChdbBackend(disk / "data")
backend.execute("CREATE TABLE t (a UInt64, s String) ENGINE = MergeTree ORDER BY a")
rows = pa.table({"a": pa.array(range(50_000), pa.uint64()), "s": [os.urandom(16).hex() for _ in range(50_000)]})
backend.insert_arrow("t", rows)
with open(disk / "filler", "wb") as filler:
    try:
        while True:
            filler.write(bytes(65536))
            filler.flush()
    except OSError:
        pass
try:
    backend.insert_arrow("t", rows)
    print("acknowledged")
except StoreUnavailable as exc:
    print("unavailable:", exc)
print("rows", backend.query_arrow("SELECT count() AS n FROM t").column("n")[0].as_py())
"""


def test_an_embedded_insert_on_a_full_disk_fails_instead_of_vanishing(tmp_path: Path, disk: Path) -> None:
    # chDB's streaming insert reported rows written for a part it could not write; the store
    # must raise so the writer keeps the batch and retries. chDB opens one data path per
    # process, so this runs in a process of its own.
    run = subprocess.run(
        [sys.executable, "-c", CHDB_FULL_DISK_INSERT, str(disk)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("unavailable:") and "NOT_ENOUGH_SPACE" in lines[0]
    assert lines[1] == "rows 50000"
