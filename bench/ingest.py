"""Ingest throughput: pre-encoded OTLP/protobuf requests posted concurrently from separate
processes to a real ``agentlat serve``.

Each request holds 1,000 realistic GenAI spans (10 per trace: an agent run, 4 model calls,
5 tool calls, ~12 attributes each). Reports acknowledged (= durable, in the write-ahead
log) spans/s, stored spans/s, request latency p50/p99, the server's CPU seconds and peak
RSS (with its decode worker processes, if any), its CPU per span by part (Python threads,
ClickHouse merges, ClickHouse's other threads, decode workers), and whether trace analysis kept up;
``--json FILE`` also writes them as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from agentlat.stream_stats import percentile
from tests.otlp_payloads import MS, SpanSpec, otlp_protobuf
from tests.servers import ServerProcess, free_port

SPANS_PER_REQUEST = 1000
SPANS_PER_TRACE = 10
ROUTES = ["/chat", "/search", "/code", "/rag"]
MODELS = ["gpt-4o", "claude-sonnet", "llama-70b"]
TOOLS = ["search", "fetch", "sql", "calc", "browse"]


def trace_spans(rng: random.Random, base_ns: int) -> list[SpanSpec]:
    """One agent trace of 10 spans with realistic attributes and timings."""
    root = SpanSpec(
        "invoke_agent support",
        start_ns=base_ns,
        duration_ns=rng.randint(800, 6000) * MS,
        service=f"svc-{rng.randint(1, 5)}",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support",
            "agentlat.route": rng.choice(ROUTES),
            "gen_ai.conversation.id": f"c{rng.randint(1, 10**6)}",
        },
    )
    spans, t = [root], base_ns
    for i in range(9):
        start, duration = t + rng.randint(1, 20) * MS, rng.randint(20, 600) * MS
        if i % 2 == 0:
            ttft = duration / 1e9 * rng.uniform(0.1, 0.6)  # within the call, as real streams are
            attrs = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": rng.choice(MODELS),
                "gen_ai.request.stream": True,
                "gen_ai.response.time_to_first_chunk": ttft,
                "gen_ai.usage.input_tokens": rng.randint(200, 20000),
                "gen_ai.usage.output_tokens": rng.randint(10, 900),
                "gen_ai.usage.cache_read.input_tokens": rng.randint(0, 10000),
                "agentlat.itl.mean": rng.uniform(0.01, 0.05),
                "agentlat.decode.duration": duration / 1e9 - ttft,
                "agentlat.route": root.attributes["agentlat.route"],
                "agentlat.stream.chunks": rng.randint(5, 400),
            }
            name = f"chat {attrs['gen_ai.request.model']}"
        else:
            tool = rng.choice(TOOLS)
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": f"call_{rng.randint(1, 10**9)}",
                "agentlat.route": root.attributes["agentlat.route"],
                "http.method": "GET",
                "http.status_code": 200,
                "server.address": "tools.internal",
                "tool.args.size": rng.randint(10, 2000),
                "tool.result.size": rng.randint(10, 20000),
                "retry.count": 0,
                "cache.hit": False,
            }
            name = f"execute_tool {tool}"
        spans.append(
            SpanSpec(
                name,
                trace_id=root.trace_id,
                parent_span_id=root.span_id,
                start_ns=start,
                duration_ns=duration,
                service=root.service,
                attributes=attrs,
            )
        )
        t = start + duration
    return spans  # fmt: skip


def build_requests(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    now = time.time_ns() - 3600 * 1_000_000_000
    payloads = []
    for _ in range(count):
        spans: list[SpanSpec] = []
        while len(spans) < SPANS_PER_REQUEST:
            spans += trace_spans(rng, now + rng.randint(0, 3000) * 1_000_000_000)
        payloads.append(otlp_protobuf(spans[:SPANS_PER_REQUEST]))
    return payloads


def _post_all(url: str, payloads: list[bytes], results: mp.Queue) -> None:
    latencies, acked = [], 0
    with httpx.Client(timeout=60) as client:
        for body in payloads:
            started = time.perf_counter()
            response = client.post(url, content=body, headers={"Content-Type": "application/x-protobuf"})
            latencies.append(time.perf_counter() - started)
            acked += SPANS_PER_REQUEST if response.status_code == 200 else 0
    results.put((acked, latencies))


def _process_tree(pid: int) -> list[int]:
    """The server and its child processes (decode workers), alive now."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [pid, *(p for child in children for p in _process_tree(int(child)))]


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids``; a process that is gone counts 0."""
    total = 0.0
    for pid in pids:
        try:
            total += _stat_cpu_seconds(Path(f"/proc/{pid}/stat"))
        except OSError:
            continue
    return total


CPU_PARTS = {
    "python": "Python threads",
    "merges": "ClickHouse merges",
    "native": "ClickHouse inserts, queries (native threads)",
    "workers": "decode workers",
}


def _cpu_by_part(pid: int) -> dict[str, float]:
    """The server's CPU seconds by ``CPU_PARTS``. Python threads carry the process's own name;
    chDB names its threads (merges run in ``MergeMutate`` ones); the workers are child processes."""
    try:
        own_name = Path(f"/proc/{pid}/comm").read_text().strip()
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return dict.fromkeys(CPU_PARTS, 0.0)
    by_name = {"python": 0.0, "merges": 0.0}
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            seconds = _stat_cpu_seconds(task / "stat")
        except OSError:
            continue
        if name == own_name:
            by_name["python"] += seconds
        elif name.startswith("MergeMutate"):
            by_name["merges"] += seconds
    # Threads that ended (chDB's pools come and go) count in the process's total, so native is the rest.
    native = _cpu_seconds([pid]) - by_name["python"] - by_name["merges"]
    return {**by_name, "native": native, "workers": _cpu_seconds(_process_tree(pid)[1:])}


def _stat_cpu_seconds(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pids: list[int]) -> float:
    """Sum of each process's own peak RSS (an upper bound of the tree's peak)."""
    total = 0
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(line.split()[1]) for line in lines if line.startswith("VmHWM:"))
    return total / 1024


KEPT_UP_SECONDS = 10.0  # analysis done this long after the last span was stored: grace (5 s) + 5 s


@dataclass(frozen=True, slots=True)
class Figures:
    """One run's measurements; ``--json`` writes them as one object."""

    requests: int
    clients: int
    spans_acked: int
    spans_stored: int
    spans_per_s_acked: float
    spans_per_s_stored: float
    latency_p50_ms: float
    latency_p99_ms: float
    server_cpu_s: float
    server_cpu_s_per_100k_spans: float
    peak_rss_mb: float
    processes: int
    traces_expected: int
    traces_analysed: int
    analysis_seconds: float
    analysis_kept_up: bool
    cpu_us_per_span: dict[str, float]  # by CPU_PARTS
    traces_read_back: int  # of those analysed: read back from the store, not analysed from the spans held
    gc_collections: dict[str, int]  # the server's garbage collections during the run: young, full

    def rows(self) -> list[tuple[str, float, str, str]]:
        kept_up = "kept up" if self.analysis_kept_up else "did NOT keep up"
        return [
            ("ingest: acknowledged (durable) spans/s", self.spans_per_s_acked, "spans/s", "target ≥ 100,000"),
            ("ingest: stored spans/s", self.spans_per_s_stored, "spans/s",
             f"{self.spans_stored} of {self.spans_acked} stored"),
            ("ingest: request latency p50", self.latency_p50_ms, "ms", f"{SPANS_PER_REQUEST}/request"),
            ("ingest: request latency p99", self.latency_p99_ms, "ms", ""),
            ("ingest: server CPU per 100k spans", self.server_cpu_s_per_100k_spans, "CPU s", "2 cores available"),
            ("ingest: server peak RSS", self.peak_rss_mb, "MiB", f"{self.processes} processes"),
            ("ingest: traces analysed", self.traces_analysed, "traces",
             f"of {self.traces_expected} in {self.analysis_seconds:.1f} s ({kept_up})"),
            *((f"ingest: server CPU per span, {CPU_PARTS[part]}", us, "µs", "")
              for part, us in self.cpu_us_per_span.items()),
            ("ingest: traces read back from the store", self.traces_read_back, "traces",
             "the rest were analysed from the spans held in memory"),
            *((f"ingest: server garbage collections, {kind}", count, "", "")
              for kind, count in self.gc_collections.items()),
        ]  # fmt: skip


def run(requests: int = 200, clients: int = 4) -> list[tuple[str, float, str, str]]:
    """The figures as (figure, value, unit, note) rows."""
    return measure(requests, clients).rows()


def measure(requests: int = 200, clients: int = 4) -> Figures:
    payloads = build_requests(requests)
    workdir = Path(tempfile.mkdtemp(prefix="agentlat-bench-"))
    server = ServerProcess(workdir, port=free_port(), extra_env={"AGENTLAT_LOG_LEVEL": "warning"}).start()
    try:
        return _measure(server, payloads, clients)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _measure(server: ServerProcess, payloads: list[bytes], clients: int) -> Figures:
    pid = server.process.pid
    cpu_before, parts_before = _cpu_seconds(_process_tree(pid)), _cpu_by_part(pid)
    gc_before = _gc_collections(server)
    results: mp.Queue = mp.Queue()
    shares = [payloads[i::clients] for i in range(clients)]
    workers = [mp.Process(target=_post_all, args=(f"{server.url}/v1/traces", s, results)) for s in shares]
    started, started_at = time.perf_counter(), time.time()
    for w in workers:
        w.start()
    outcomes = [results.get() for _ in workers]
    acked_seconds = time.perf_counter() - started
    for w in workers:
        w.join()
    acked = sum(a for a, _ in outcomes)
    stored = wait_stored(server, acked)
    stored_seconds = _seconds_until(server, "agentlat_spans_written_timestamp_seconds", started_at)
    traces_expected = acked // SPANS_PER_TRACE
    analysed = wait_analysed(server, traces_expected)
    analysis_seconds = _seconds_until(server, "agentlat_traces_analysed_timestamp_seconds", started_at)
    pids = _process_tree(pid)  # decode workers start with the first request
    cpu = _cpu_seconds(pids) - cpu_before
    parts = {part: (seconds - parts_before[part]) / max(acked, 1) * 1e6 for part, seconds in _cpu_by_part(pid).items()}
    latencies = sorted(x for _, lat in outcomes for x in lat)
    gc_after = _gc_collections(server)
    return Figures(
        requests=len(payloads), clients=clients, spans_acked=acked, spans_stored=stored,
        spans_per_s_acked=acked / acked_seconds, spans_per_s_stored=stored / stored_seconds,
        latency_p50_ms=percentile(latencies, 0.5) * 1000, latency_p99_ms=percentile(latencies, 0.99) * 1000,
        server_cpu_s=cpu, server_cpu_s_per_100k_spans=cpu / max(acked, 1) * 100_000,
        peak_rss_mb=_peak_rss_mb(pids), processes=len(pids),
        traces_expected=traces_expected, traces_analysed=analysed, analysis_seconds=analysis_seconds,
        analysis_kept_up=analysed >= traces_expected and analysis_seconds <= stored_seconds + KEPT_UP_SECONDS,
        cpu_us_per_span=parts, traces_read_back=int(metric_value(server, "agentlat_traces_read_back_total")),
        gc_collections={kind: gc_after[kind] - gc_before[kind] for kind in gc_after},
    )  # fmt: skip


def metric_value(server: ServerProcess, path: str) -> float:
    text = server.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(path + " "):
            return float(line.split()[1])
    return 0.0


def _gc_collections(server: ServerProcess) -> dict[str, int]:
    """The server's young and full garbage collections so far (shared/gc_tuning.py)."""
    young, full = (int(metric_value(server, f'python_gc_collections_total{{generation="{g}"}}')) for g in (0, 2))
    return {"young": young, "full": full}


def wait_stored(server: ServerProcess, expected: int, timeout: float = 600) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        written = int(metric_value(server, "agentlat_spans_written_total"))
        if written >= expected:
            return written
        time.sleep(0.2)
    return int(metric_value(server, "agentlat_spans_written_total"))


def wait_analysed(server: ServerProcess, expected: int, timeout: float = 600) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        analysed = int(metric_value(server, "agentlat_traces_analysed_total"))
        if analysed >= expected and metric_value(server, "agentlat_traces_pending") == 0:
            return analysed
        time.sleep(0.5)
    return int(metric_value(server, "agentlat_traces_analysed_total"))


def _seconds_until(server: ServerProcess, timestamp: str, started_at: float) -> float:
    """Seconds from ``started_at`` to the moment the server stamped in the gauge ``timestamp``: the polls
    above notice a write up to their interval late, which would count in a run of a few seconds."""
    return metric_value(server, timestamp) - started_at


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--json", type=Path, help="also write the figures here as one JSON object")
    args = parser.parse_args()
    figures = measure(args.requests, args.clients)
    for figure, value, unit, note in figures.rows():
        print(f"{figure:<42} {value:>12,.1f} {unit:<8} {note}")
    if args.json:
        args.json.write_text(json.dumps(asdict(figures), indent=2) + "\n")
