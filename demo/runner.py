"""``agentlat demo``: start the fake model server and one workload process per service and release,
and show progress until the duration is over (or forever, with duration 0)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from agentlat.demo.fake_llm import FakeLLM, Scenario
from agentlat.demo.workload import RELEASES, run_service
from agentlat.shared.processes import child_env, exit_with_parent
from agentlat.shared.processes import stop as stop_process


def _service_process(service: str, release: str, endpoint: str, fake_url: str, rate: float, duration: float,
                     seed: int, counter: mp.Value, parent: int) -> None:  # fmt: skip
    exit_with_parent(parent)

    def progress() -> None:
        with counter.get_lock():
            counter.value += 1

    run_service(service, release, endpoint, fake_url, rate, duration, seed, progress)


def run_demo(
    endpoint: str,
    rate: float,
    duration: float,
    seed: int = 1,
    on_progress: Callable[[int, float | None], None] = lambda done, total: None,
) -> int:
    """Run the workload; ``rate`` is agent runs per second over all services. Returns runs done."""
    context = mp.get_context("spawn")
    counter = context.Value("i", 0)
    per_service = rate / len(RELEASES)  # a service's releases share its traffic
    # each service's draws as before there were releases (seed + its index), another release's apart from them
    deployments = [
        (service, release, seed + i + 1000 * j)
        for i, (service, releases) in enumerate(RELEASES.items())
        for j, release in enumerate(releases)
    ]
    total = rate * duration if duration else None
    with FakeLLM(Scenario(itl_jitter_ms=2.0, seed=seed)) as fake:
        workers = [
            context.Process(
                target=_service_process,
                args=(service, release, endpoint, fake.url, per_service / len(RELEASES[service]), duration, draws,
                      counter, os.getpid()),
                name=f"agentlat-demo-{service}-{release}",
                daemon=True,
            )
            for service, release, draws in deployments
        ]  # fmt: skip
        for worker in workers:
            worker.start()
        try:
            while any(w.is_alive() for w in workers):
                on_progress(counter.value, total)
                time.sleep(0.25)
        finally:
            for worker in workers:
                if worker.is_alive():
                    worker.terminate()
                worker.join(5)
        on_progress(counter.value, total)
    return counter.value


@contextlib.contextmanager
def background_demo(api_url: str, rate: float, log_path: Path) -> Iterator[None]:
    """Run ``agentlat demo`` forever beside a server that is starting: it begins once the
    server answers /readyz, writes its output to ``log_path`` and stops on exit."""
    stop = threading.Event()
    holder: list[subprocess.Popen[bytes]] = []

    def launch() -> None:
        while not stop.is_set() and not _ready(api_url):
            stop.wait(0.5)
        if stop.is_set():
            return
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            command = [sys.executable, "-m", "agentlat.cli.main", "demo", "--endpoint", api_url,
                       "--rate", str(rate), "--duration", "0"]  # fmt: skip
            holder.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=child_env()))

    starter = threading.Thread(target=launch, name="agentlat-demo-starter", daemon=True)
    starter.start()
    try:
        yield
    finally:
        stop.set()
        starter.join(5)
        for process in holder:
            stop_process(process)


def demo_file(name: str) -> Path:
    """A file shipped with the demo: ``budgets.yaml`` and ``alerts.yaml``, which ``agentlat up`` serves."""
    return Path(__file__).with_name(name)


def _ready(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
