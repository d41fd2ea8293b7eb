"""Real agentlat server processes on 127.0.0.1 for tests."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

AGENTLAT = str(Path(sys.executable).with_name("agentlat"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    """Poll until ``predicate()`` is truthy; return its value or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")


def processes_with_env(variable: str) -> list[int]:
    """Live processes (not zombies) whose environment holds ``variable``: what a test started, and its children."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            holds = f"{variable}=".encode() in (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if holds and state != "Z":
            found.append(int(proc.name))
    return found


def spawned_workers(variable: str) -> list[int]:
    """Processes holding ``variable`` that multiprocessing's spawn started (workers of a test's process)."""
    found = []
    for pid in processes_with_env(variable):
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 now (a refused connection or a timeout is a no)."""
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class ServerProcess:
    """``agentlat serve`` in a subprocess with its own data directory and port."""

    def __init__(self, workdir: Path, port: int | None = None, extra_env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"server-{self.port}.log"
        self.env = {**os.environ, "AGENTLAT_GRPC_PORT": "0", **(extra_env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ServerProcess:
        cmd = [AGENTLAT, "serve", "--port", str(self.port), *self.store_args()]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(cmd, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        wait_for(self._ready, timeout=timeout, interval=0.1)
        return self

    def store_args(self) -> list[str]:
        """``--data`` in the workdir; with AGENTLAT_CLICKHOUSE_URL set, a database of this workdir on that server."""
        url = self.env.get("AGENTLAT_CLICKHOUSE_URL")
        if not url:
            return ["--data", str(self.workdir / "data")]
        database = "agentlat_test_" + hashlib.sha1(str(self.workdir.resolve()).encode()).hexdigest()[:12]
        return ["--clickhouse", urlsplit(url)._replace(path=f"/{database}").geturl()]

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"server exited with {self.process.returncode}:\n{self.log()}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", params=params, timeout=30)
