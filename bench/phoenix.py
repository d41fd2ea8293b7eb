"""Arize Phoenix beside agentlat: the same OTLP/protobuf payloads into both, in one run.

Phoenix is installed into its own virtual environment, ``bench/.phoenix-venv`` (created on
first use, git-ignored, never a project dependency), and started as ``phoenix serve`` on
127.0.0.1 with a free port, a temporary working directory and its default SQLite store.

The payloads are bench/ingest.py's (``build_requests``: 1,000 GenAI spans per request, 10
per trace, same generator and seed), posted concurrently from separate processes to
Phoenix's OTLP/HTTP endpoint (``/v1/traces`` on its HTTP port). Phoenix answers 200 before
it stores anything (the spans wait in an in-memory queue) and 503 when that queue is full;
the posters retry a 503 after a short pause, as an OTLP exporter does. So two rates:

- acknowledged spans/s: 200 answers over the time to post everything;
- stored spans/s: rows in Phoenix's ``spans`` table (polled read-only in its SQLite file)
  over the time until all acknowledged spans are there (or ``--store-timeout`` passes).

Also the request latency p50/p99, the CPU seconds and peak RSS of Phoenix's process tree.
Unless ``--phoenix-only``, bench/ingest.py's ``run()`` is measured too and the ratios
agentlat ÷ Phoenix are printed. Run from the repository root::

    .venv/bin/python -m bench.phoenix [--requests 20] [--clients 4] [--phoenix-only] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from agentlat.stream_stats import percentile
from bench.ingest import SPANS_PER_REQUEST, build_requests
from tests.servers import free_port

PHOENIX_VERSION = "20.26.1"
VENV = Path(__file__).resolve().parent / ".phoenix-venv"
STAMP = VENV / ".bench-installed"
RETRY_PAUSE_S = 0.25  # after a 503 (Phoenix's span queue is full)
Row = tuple[str, float, str, str]


# --- install --------------------------------------------------------------------------------
def phoenix_executable() -> Path:
    return VENV / "bin" / "phoenix"


def ensure_phoenix() -> Path:
    """Create bench/.phoenix-venv with arize-phoenix once; pip's output goes to a log in it."""
    if STAMP.exists() and STAMP.read_text() == PHOENIX_VERSION and phoenix_executable().exists():
        return phoenix_executable()
    print(f"installing arize-phoenix=={PHOENIX_VERSION} into {VENV} (once; ~2 min)", flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    log = VENV / "bench-pip.log"
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    with log.open("ab") as out:
        done = subprocess.run([*pip, f"arize-phoenix=={PHOENIX_VERSION}"], stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"pip install arize-phoenix=={PHOENIX_VERSION} failed; see {log}")
    STAMP.write_text(PHOENIX_VERSION)
    return phoenix_executable()


# --- the server -------------------------------------------------------------------------------
@dataclass
class Phoenix:
    process: subprocess.Popen[bytes]
    url: str
    db: Path
    log: Path


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def phoenix_server(workdir: Path, timeout: float = 300) -> Iterator[Phoenix]:
    """``phoenix serve`` on 127.0.0.1, its data (SQLite) in ``workdir``; stopped on exit."""
    exe = ensure_phoenix()
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = workdir / "phoenix.log"
    with log.open("ab") as out:
        process = subprocess.Popen([str(exe), "serve"], cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Phoenix(process, f"http://127.0.0.1:{port}", workdir / "phoenix.db", log)
    try:
        _wait_ready(server, timeout)
        print(f"  phoenix {PHOENIX_VERSION} ready at {server.url}, data in {workdir}", flush=True)
        yield server
    finally:
        _stop(process)


def _wait_ready(server: Phoenix, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise SystemExit(f"phoenix exited with {server.process.returncode}:\n{_tail(server.log)}")
        if _healthy(server.url):
            return
        time.sleep(0.5)
    raise SystemExit(f"phoenix not ready within {timeout:.0f} s:\n{_tail(server.log)}")


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the process tree's CPU and memory -------------------------------------------------------
def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants (from /proc's parent pids)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, IndexError):
                continue
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo += children.get(pid, [])
    return pids


def tree_cpu_seconds(root: int) -> float:
    """User+system CPU of the live tree, plus what the root's reaped children used."""
    ticks = 0
    for pid in tree_pids(root):
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if pid == root else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class RssSampler(threading.Thread):
    """The peak of the tree's summed RSS, sampled every 0.2 s (and at least the root's VmHWM)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.peak_kib, self._stop_event = root, 0, threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            self.peak_kib = max(self.peak_kib, sum(_status_kib(p, "VmRSS:") for p in tree_pids(self.root)))

    def stop(self) -> float:
        self._stop_event.set()
        self.join()
        return max(self.peak_kib, _status_kib(self.root, "VmHWM:")) / 1024


# --- posting ---------------------------------------------------------------------------------
def _post_share(url: str, payloads: list[bytes], results: mp.Queue) -> None:
    """One client process: post each payload until accepted (503 and 429 are retried)."""
    latencies, acked, retries, failed = [], 0, 0, 0
    headers = {"Content-Type": "application/x-protobuf"}
    with httpx.Client(timeout=120) as client:
        for body in payloads:
            while True:
                started = time.perf_counter()
                status = client.post(url, content=body, headers=headers).status_code
                if status in (429, 503):
                    retries += 1
                    time.sleep(RETRY_PAUSE_S)
                    continue
                latencies.append(time.perf_counter() - started)
                acked += SPANS_PER_REQUEST if status == 200 else 0
                failed += status != 200
                break
    results.put((acked, latencies, retries, failed))


def post_all(url: str, payloads: list[bytes], clients: int) -> tuple[int, list[float], int, int]:
    """Post ``payloads`` from ``clients`` processes; (acked spans, latencies, retries, failed requests)."""
    results: mp.Queue = mp.Queue()
    workers = [mp.Process(target=_post_share, args=(url, payloads[i::clients], results)) for i in range(clients)]
    for w in workers:
        w.start()
    outcomes = [results.get() for _ in workers]
    for w in workers:
        w.join()
    latencies = sorted(x for _, lat, _, _ in outcomes for x in lat)
    return sum(o[0] for o in outcomes), latencies, sum(o[2] for o in outcomes), sum(o[3] for o in outcomes)


def stored_spans(db: Path) -> int:
    """Rows in Phoenix's spans table, read without writing to its database."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as con:
            return int(con.execute("SELECT count(*) FROM spans").fetchone()[0])
    except sqlite3.Error:
        return 0


def wait_stored(db: Path, expected: int, timeout: float) -> int:
    """Poll the spans table until ``expected`` rows are in or ``timeout`` passes; say how it goes."""
    began = time.monotonic()
    stored, said = stored_spans(db), began
    while stored < expected and time.monotonic() - began < timeout:
        time.sleep(0.5)
        stored = stored_spans(db)
        if time.monotonic() - said >= 10:
            print(f"  phoenix stored {stored:,} of {expected:,} spans", flush=True)
            said = time.monotonic()
    return stored


# --- the benchmark ----------------------------------------------------------------------------
def run(requests: int = 20, clients: int = 4, store_timeout: float = 600) -> list[Row]:
    """Phoenix's rows of (figure, value, unit, note), the same shape as bench/ingest.py's."""
    payloads = build_requests(requests)
    workdir = Path(tempfile.mkdtemp(prefix="agentlat-bench-phoenix-"))
    try:
        with phoenix_server(workdir) as server:
            return _measure(server, payloads, clients, store_timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _measure(server: Phoenix, payloads: list[bytes], clients: int, store_timeout: float) -> list[Row]:
    pid = server.process.pid
    time.sleep(2)  # let start-up work finish before counting CPU
    cpu_before, rss = tree_cpu_seconds(pid), RssSampler(pid)
    rss.start()
    started = time.perf_counter()
    acked, latencies, retries, failed = post_all(f"{server.url}/v1/traces", payloads, clients)
    acked_s = time.perf_counter() - started
    print(f"  phoenix acknowledged {acked:,} spans in {acked_s:.1f} s; waiting until they are stored", flush=True)
    stored = wait_stored(server.db, acked, store_timeout)
    stored_s = time.perf_counter() - started
    cpu, peak_mib = tree_cpu_seconds(pid) - cpu_before, rss.stop()
    complete = "all" if stored >= acked else f"only {stored:,} of {acked:,} (timed out)"
    return [
        ("phoenix: acknowledged spans/s", acked / acked_s, "spans/s", f"{retries} retried 503s, {failed} failed"),
        ("phoenix: stored spans/s", stored / stored_s, "spans/s", f"{complete} stored in {stored_s:.1f} s"),
        ("phoenix: request latency p50", percentile(latencies, 0.5) * 1000, "ms", f"{SPANS_PER_REQUEST}/request"),
        ("phoenix: request latency p99", percentile(latencies, 0.99) * 1000, "ms", ""),
        ("phoenix: server CPU per 100k spans", cpu / max(stored, 1) * 100_000, "CPU s", f"{cpu:.1f} s in all"),
        ("phoenix: server peak RSS", peak_mib, "MiB", "process tree"),
    ]  # fmt: skip


RATIO_PAIRS = {  # kind: (agentlat's figure, Phoenix's figure, note)
    "acknowledged": (
        "ingest: acknowledged (durable) spans/s",
        "phoenix: acknowledged spans/s",
        "Phoenix acks into a memory queue, agentlat after its write-ahead log",
    ),
    "stored": ("ingest: stored spans/s", "phoenix: stored spans/s", "same payloads, same machine"),
}


def ratios(rows: list[Row]) -> list[Row]:
    """agentlat ÷ Phoenix for acknowledged and stored spans/s."""
    values = {figure: value for figure, value, _, _ in rows}
    return [
        (f"agentlat ÷ phoenix: {kind} spans/s", values[ours] / max(values[theirs], 1e-9), "x", note)
        for kind, (ours, theirs, note) in RATIO_PAIRS.items()
        if ours in values and theirs in values
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20, help="requests of 1,000 spans (Phoenix stores slowly)")
    parser.add_argument("--clients", type=int, default=4, help="posting processes")
    parser.add_argument("--store-timeout", type=float, default=600, help="seconds to wait for Phoenix to store")
    parser.add_argument("--phoenix-only", action="store_true", help="skip the agentlat side and the ratios")
    parser.add_argument("--json", type=Path, help="also write the rows here as JSON")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    rows = run(args.requests, args.clients, args.store_timeout)
    if not args.phoenix_only:
        from bench import ingest

        agentlat_rows = ingest.run(args.requests, args.clients)
        rows = [*agentlat_rows, *rows]
        rows += ratios(rows)
    load_after = os.getloadavg()[0]
    for figure, value, unit, note in rows:
        print(f"{figure:<48} {value:>12,.1f} {unit:<8} {note}")
    print(f"\n{args.requests} requests x {SPANS_PER_REQUEST} spans, {args.clients} clients; Phoenix {PHOENIX_VERSION}")
    print(f"load average {load_before:.2f} before, {load_after:.2f} after ({os.cpu_count()} cores)")
    if args.json:
        meta = {"phoenix_version": PHOENIX_VERSION, "requests": args.requests, "clients": args.clients}
        meta |= {"load_before": load_before, "load_after": load_after}
        figures = [{"figure": f, "value": v, "unit": u, "note": n} for f, v, u, n in rows]
        args.json.write_text(json.dumps({"meta": meta, "rows": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
