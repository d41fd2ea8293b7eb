"""Every way of stopping an entry point ends everything it started.

Each case starts a real entry point (``python3 run.py up``, ``agentlat up``, ``agentlat serve``)
in a session of its own, waits until it answers, notes every process under it (collector,
decode workers, dashboard, demo and its workers), sends one signal to the top process only
(as a service manager, ``docker stop`` or an IDE's stop button does), and checks that every
one of those processes is gone and the ports are free again. SIGKILL is included: children
watch their parent themselves, so even a process killed outright leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.otlp_payloads import SpanSpec, otlp_json
from tests.servers import AGENTLAT, answers, free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent

BANNER_END = "Stop with Ctrl-C."


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children of all its threads, recursively)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found |= {child, *descendants(child)}
    return found


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie has ended; only its parent's wait is missing


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@contextmanager
def started(command: list[str], tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = tmp_path / "out.log"
    env = {**os.environ, "COLUMNS": "200", "AGENTLAT_DATA": str(tmp_path / "data")}
    env.pop("AGENTLAT_CLICKHOUSE_URL", None)
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)  # fmt: skip
    try:
        yield process, log
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def up_command(entry: str, port: int, dashboard: int) -> list[str]:
    options = ["--port", str(port), "--grpc-port", "0", "--dashboard-port", str(dashboard), "--demo-rate", "2"]
    if entry == "run.py up":
        return [sys.executable, str(ROOT / "run.py"), "up", *options]
    return [AGENTLAT, "up", *options]


def stop_and_check(process: subprocess.Popen[bytes], sig: signal.Signals, ports: list[int], log: Path) -> None:
    started_below = descendants(process.pid)
    process.send_signal(sig)
    process.wait(60)
    wait_for(lambda: not any(alive(p) for p in started_below), timeout=20)
    left = [p for p in started_below if alive(p)]
    assert left == [], f"{sig.name} left {left} running:\n{log.read_text()[-3000:]}"
    assert all(port_free(p) for p in ports), f"{sig.name} left a port open"


@pytest.mark.parametrize(
    ("entry", "sig"),
    [
        ("run.py up", signal.SIGTERM),
        ("run.py up", signal.SIGINT),
        ("agentlat up", signal.SIGTERM),
        ("agentlat up", signal.SIGINT),
        ("agentlat up", signal.SIGHUP),
        ("agentlat up", signal.SIGKILL),
    ],
)
def test_up_stops_everything_it_started(entry: str, sig: signal.Signals, tmp_path: Path) -> None:
    port, dashboard = free_port(), free_port()
    with started(up_command(entry, port, dashboard), tmp_path) as (process, log):
        wait_for(lambda: BANNER_END in log.read_text(), timeout=120)
        assert answers(f"http://127.0.0.1:{port}/readyz") and answers(f"http://127.0.0.1:{dashboard}/_stcore/health")
        wait_for(lambda: any("demo" in _cmdline(p) for p in descendants(process.pid)), timeout=60)
        stop_and_check(process, sig, [port, dashboard], log)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL])
def test_serve_stops_with_its_decode_workers(sig: signal.Signals, tmp_path: Path) -> None:
    port = free_port()
    command = [AGENTLAT, "serve", "--port", str(port), "--grpc-port", "0"]
    with started(command, tmp_path) as (process, log):
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/readyz"), timeout=120)
        spans = json.dumps(otlp_json([SpanSpec("chat m", start_ns=time.time_ns(), duration_ns=10**8)])).encode()
        exported = httpx.post(f"http://127.0.0.1:{port}/v1/traces", content=spans,
                              headers={"content-type": "application/json"}, timeout=30)  # fmt: skip
        assert exported.status_code == 200  # the decode workers start with the first OTLP/JSON export
        wait_for(lambda: descendants(process.pid), timeout=60)
        stop_and_check(process, sig, [port], log)
        if sig != signal.SIGKILL:
            assert "Application shutdown complete" in log.read_text()  # stopped in order, the log flushed


def test_up_prints_one_banner_once_everything_answers_and_logs_only_failures(tmp_path: Path) -> None:
    port, dashboard = free_port(), free_port()
    with started(up_command("agentlat up", port, dashboard), tmp_path) as (process, log):
        wait_for(lambda: BANNER_END in log.read_text(), timeout=120)
        shown = log.read_text()
        first_screen, banner = shown.split("agentlat collector on", 1)
        # a new store is one line, and no log line is wrapped when the output is not a terminal
        assert first_screen.count("created the store: embedded chDB at") == 1 and "migration" not in first_screen
        assert all(line.startswith("20") for line in first_screen.splitlines()), first_screen
        assert len(first_screen.splitlines()) <= 10, first_screen
        assert f"dashboard on http://127.0.0.1:{dashboard}" in banner and "budgets" in banner and "alerts" in banner
        demo_log = tmp_path / "demo.log"
        wait_for(lambda: demo_log.exists() and "agent runs" in demo_log.read_text(errors="replace"), timeout=60)
        time.sleep(3)  # demo traffic flows: a line per export would show here
        refused = httpx.post(f"http://127.0.0.1:{port}/v1/traces", content=b"x", headers={"content-type": "text/x"})
        assert refused.status_code == 415
        wait_for(lambda: "POST /v1/traces -> 415" in log.read_text(), timeout=10)
        text = log.read_text()
        assert text.count(BANNER_END) == 1 and text.count("agentlat collector on") == 1
        assert "-> 200" not in text and '"POST /v1/traces HTTP/1.1" 200' not in text
        budgets = httpx.get(f"http://127.0.0.1:{port}/api/v1/budgets", timeout=30)
        alerts = httpx.get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=30)
        assert budgets.status_code == 200 and alerts.status_code == 200  # the demo's examples, out of the box
        assert {r["alert"] for r in alerts.json()["rules"]} >= {"ChatTTFTHigh", "E2ESLOBurn"}
        stop_and_check(process, signal.SIGTERM, [port, dashboard], log)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""
