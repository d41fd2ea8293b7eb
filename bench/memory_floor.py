"""The embedded server's memory floor: its RSS at rest, and after a few requests stored and analysed.

Starts the real server (``agentlat serve``, embedded store) and sends ``bench/ingest.py``'s requests of
1,000 spans one at a time, each after the previous one was answered, so that little is in flight at
once. Once every span is stored and every trace analysed, it prints the server's peak RSS (``VmHWM``)
and what its resident memory is now: chDB's library (``_chdb.abi3.so``), anonymous memory (heaps: Python,
Arrow, the engine's allocations) and other mappings (the other libraries, stacks).

This is the floor under the ingest benchmark's peak RSS: what the server holds before any span, and
what a little traffic adds with almost nothing in flight.

Run: ``python -m bench.memory_floor [--requests 1 10 50]``; set ``JE_MALLOC_CONF`` to try chDB's
allocator settings.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.ingest import SPANS_PER_REQUEST, SPANS_PER_TRACE, build_requests, wait_analysed, wait_stored
from tests.servers import ServerProcess, free_port

MIB = 1024 * 1024
_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def resident(pid: int) -> str:
    """The process's peak RSS and its resident memory now, by what it maps."""
    kinds: Counter[str] = Counter()
    kind = "anonymous"
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            if _MAPPING.match(line):
                fields = line.split()
                path = fields[5] if len(fields) > 5 else ""
                kind = (
                    "chDB library" if "_chdb" in path else "anonymous" if path in ("", "[heap]") else "other mappings"
                )
            elif line.startswith("Rss:"):
                kinds[kind] += int(line.split()[1]) * 1024
    status = Path(f"/proc/{pid}/status").read_text()
    peak = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) * 1024
    now = ", ".join(f"{name} {size / MIB:,.0f}" for name, size in sorted(kinds.items()))
    return f"peak RSS {peak / MIB:,.0f} MiB; resident now (MiB): {now}"


def measure(requests: int) -> list[str]:
    bodies = build_requests(requests)
    with tempfile.TemporaryDirectory(prefix="agentlat-floor-") as workdir:
        server = ServerProcess(Path(workdir), port=free_port(), extra_env={"AGENTLAT_LOG_LEVEL": "warning"}).start()
        try:
            time.sleep(2)  # the start-up's background work (migrations, first rollup pass) settles
            lines = [f"at rest: {resident(server.process.pid)}"]
            with httpx.Client(timeout=60) as client:
                for body in bodies:
                    answer = client.post(
                        f"{server.url}/v1/traces", content=body, headers={"content-type": "application/x-protobuf"}
                    )
                    answer.raise_for_status()
            _wait_done(server, requests * SPANS_PER_REQUEST)
            lines.append(f"{requests} requests stored and analysed: {resident(server.process.pid)}")
            return lines
        finally:
            server.stop()


def _wait_done(server: ServerProcess, spans: int) -> None:
    stored = wait_stored(server, spans)
    analysed = wait_analysed(server, spans // SPANS_PER_TRACE)
    if stored < spans or analysed < spans // SPANS_PER_TRACE:
        raise TimeoutError(f"the server stored {stored:,} of {spans:,} spans and analysed {analysed:,} traces")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--requests", type=int, nargs="+", default=[1, 10, 50], help="requests to send, a fresh server each"
    )
    args = parser.parse_args(argv)
    for requests in args.requests:
        for line in measure(requests):
            print(line, flush=True)


if __name__ == "__main__":
    main()
