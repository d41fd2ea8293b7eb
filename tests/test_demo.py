"""``agentlat demo``: real clients against the fake model server produce every agent type."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.servers import AGENTLAT, ServerProcess, free_port, processes_with_env, spawned_workers, wait_for
from tests.test_trace_analysis_e2e import FAST as FAST_ANALYSIS


def test_demo_sends_every_agent_type(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, extra_env=FAST_ANALYSIS).start()
    try:
        result = subprocess.run(
            [AGENTLAT, "demo", "--endpoint", server.url, "--rate", "9", "--duration", "8", "--seed", "3"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        assert "agent runs sent" in result.stderr and "failed" not in result.stdout

        def routes() -> dict[str, dict] | None:
            body = server.get("/api/v1/percentiles", metric="e2e", group_by="route,service", window="1h").json()
            found = {(r["group"]["route"], r["group"]["service"]): r for r in body["rows"]}
            wanted = {"/chat", "/code", "/tools", "/rag"}
            return found if wanted <= {route for route, _ in found} else None

        found = wait_for(routes, timeout=60)
        assert {service for _, service in found} == {"support-bot", "code-assistant", "research-agent"}
        ttft = server.get("/api/v1/percentiles", metric="ttft", group_by="route", window="1h").json()["rows"]
        by_route = {r["group"]["route"]: r for r in ttft}
        assert by_route["/code"]["p50"] > by_route["/chat"]["p50"] * 1.2  # the code model starts slower
        assert all(r["count"] > 0 for r in ttft)
        traces = server.get("/api/v1/traces", route="/tools", limit=5, window="1h").json()["traces"]
        detail = server.get(f"/api/v1/traces/{traces[0]['trace_id']}").json()
        derived = [s["derived"] for s in detail["spans"]]
        assert {d["Role"] for d in derived} >= {"agent", "model", "tool"}
        assert {d["PrefetchOutcome"] for d in derived} & {"hit", "miss"}
        assert any(d["Streaming"] and d["ItlMeanMs"] for d in derived if d["Role"] == "model")
    finally:
        server.stop()


def test_demo_workers_exit_when_the_demo_is_killed_outright(tmp_path: Path) -> None:
    """SIGKILL runs no cleanup in the demo process: its workers must notice and exit on their own."""
    marker = f"AGENTLAT_TEST_DEMO_{os.getpid()}"
    command = [AGENTLAT, "demo", "--endpoint", f"http://127.0.0.1:{free_port()}", "--rate", "1", "--duration", "0"]
    with open(tmp_path / "demo.log", "wb") as log:
        demo = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, marker: "1"})
    try:
        wait_for(lambda: len(spawned_workers(marker)) == 3, timeout=120, interval=0.5)
    finally:
        demo.kill()
        demo.wait(10)
    wait_for(lambda: not processes_with_env(marker), timeout=20, interval=0.5)
