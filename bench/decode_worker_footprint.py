"""What one OTLP decode worker costs: the modules it imports, its memory and its start-up CPU.

Starts a real ``agentlat serve`` with one decode worker (``AGENTLAT_DECODE_WORKERS=1``), posts a
1-span OTLP/JSON request (which the worker parses, so it starts: protobuf trace requests never
need one), then one OTLP/JSON request of 1,000 GenAI spans from ``bench/ingest.py``'s generator,
and reads the worker's ``/proc`` after each: resident memory
(``VmRSS``; its peak, ``VmHWM``, at the end), CPU seconds (user + system) and the shared
libraries it has mapped. Its ``sys.modules`` comes from a ``sitecustomize`` put on the
server's ``PYTHONPATH`` for this run only, which in decode workers alone (never the server)
writes the module names to a file on SIGUSR1.

    PYTHONPATH=. .venv/bin/python -m bench.decode_worker_footprint
    PYTHONPATH=. .venv/bin/python -m bench.decode_worker_footprint --runs 3 --modules
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.ingest import trace_spans
from tests.otlp_payloads import SpanSpec, otlp_json
from tests.servers import ServerProcess, spawned_workers, wait_for

MARKER = "AGENTLAT_BENCH_DECODE_WORKER"
HOOK = """\
import os, signal, sys

if "--multiprocessing-fork" in sys.orig_argv and os.environ.get("AGENTLAT_BENCH_MODULES_DIR"):
    def _write_modules(signum, frame):
        path = os.path.join(os.environ["AGENTLAT_BENCH_MODULES_DIR"], str(os.getpid()))
        with open(path + ".tmp", "w") as out:
            out.write("\\n".join(sorted(n for n, m in sys.modules.items() if m is not None)))
        os.replace(path + ".tmp", path)

    signal.signal(signal.SIGUSR1, _write_modules)
"""
WATCHED = ("chdb", "clickhouse_connect", "agentlat.store", "pyarrow", "fastapi", "starlette", "uvicorn",
           "typer", "rich", "httpx", "prometheus_client", "opentelemetry.sdk", "agentlat.cli")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sample:
    rss_mb: float
    cpu_s: float
    libraries: int  # shared objects mapped (.so files)


@dataclass(frozen=True, slots=True)
class Run:
    first_request_s: float  # the 1-span request's latency, which includes the worker's start
    started: Sample  # after start and the 1-span request
    decoded: Sample  # after the 1,000-span request
    peak_rss_mb: float
    modules: list[str]


def _sample(pid: int) -> Sample:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    maps = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if ".so" in line}
    return Sample(int(status["VmRSS"].split()[0]) / 1024, cpu, len(maps))


def _peak_rss_mb(pid: int) -> float:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def _modules(pid: int, folder: Path) -> list[str]:
    os.kill(pid, signal.SIGUSR1)
    wait_for(lambda: (folder / str(pid)).exists(), timeout=10)
    return (folder / str(pid)).read_text().split()


def _json(spans: list[SpanSpec]) -> bytes:
    return json.dumps(otlp_json(spans)).encode()


def measure(workdir: Path, body: bytes) -> Run:
    hook_dir, modules_dir = workdir / "hook", workdir / "modules"
    hook_dir.mkdir()
    modules_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    path = os.pathsep.join(p for p in (str(hook_dir), os.environ.get("PYTHONPATH", "")) if p)
    env = {"AGENTLAT_DECODE_WORKERS": "1", "AGENTLAT_LOG_LEVEL": "warning", MARKER: "1",
           "PYTHONPATH": path, "AGENTLAT_BENCH_MODULES_DIR": str(modules_dir)}  # fmt: skip
    server = ServerProcess(workdir, extra_env=env).start()
    try:
        headers = {"Content-Type": "application/json"}
        with httpx.Client(timeout=120, headers=headers) as client:
            started_at = time.perf_counter()
            client.post(f"{server.url}/v1/traces", content=_json([SpanSpec("warm")])).raise_for_status()
            first_request_s = time.perf_counter() - started_at
            [worker] = spawned_workers(MARKER)
            started = _sample(worker)
            client.post(f"{server.url}/v1/traces", content=body).raise_for_status()
            decoded = _sample(worker)
        return Run(first_request_s, started, decoded, _peak_rss_mb(worker), _modules(worker, modules_dir))
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="servers started one after another (default 3)")
    parser.add_argument("--modules", action="store_true", help="print every module the worker imported")
    args = parser.parse_args()
    rng = random.Random(7)
    body = _json([span for _ in range(100) for span in trace_spans(rng, time.time_ns())])
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="agentlat-decode-worker-") as tmp:
            runs.append(measure(Path(tmp), body))

    def median(values: list[float]) -> float:
        return statistics.median(values)

    rows = [
        ("worker modules (sys.modules)", median([len(r.modules) for r in runs]), ""),
        ("worker shared libraries mapped", median([r.decoded.libraries for r in runs]), ""),
        ("worker RSS after start", median([r.started.rss_mb for r in runs]), "MiB"),
        ("worker RSS after a 1,000-span request", median([r.decoded.rss_mb for r in runs]), "MiB"),
        ("worker peak RSS", median([r.peak_rss_mb for r in runs]), "MiB"),
        ("worker start-up CPU (start + 1-span request)", median([r.started.cpu_s for r in runs]), "CPU s"),
        ("worker CPU of the 1,000-span request", median([r.decoded.cpu_s - r.started.cpu_s for r in runs]), "CPU s"),
        ("first request latency (worker start included)", median([r.first_request_s for r in runs]), "s"),
    ]
    print(f"decode worker footprint, median of {len(runs)} runs (load average {os.getloadavg()[0]:.2f})")
    for name, value, unit in rows:
        print(f"  {name:<48} {value:>9.2f} {unit}")
    modules = set(runs[-1].modules)
    loaded = [m for m in WATCHED if m in modules]
    print(f"  watched packages imported: {', '.join(loaded) or 'none'}")
    print(f"  not imported: {', '.join(m for m in WATCHED if m not in modules) or 'none'}")
    if args.modules:
        print("\n".join(sorted(modules)))


if __name__ == "__main__":
    main()
