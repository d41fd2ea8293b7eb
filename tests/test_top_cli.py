"""``agentlat top`` against a real collector holding known traces: the same numbers as the API's."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.otlp_payloads import MS
from tests.servers import AGENTLAT, ServerProcess, wait_for
from tests.test_trace_analysis_e2e import FAST, agent_trace, ingest


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Four requests of /support (E2E 1000 ms: model 600, tools 400; TTFT 100 on the first call) and two of /faq."""
    server = ServerProcess(tmp_path_factory.mktemp("top"), extra_env=FAST).start()
    base = (time.time_ns() // (60_000 * MS) - 3) * 60_000 * MS
    for i in range(4):
        ingest(server, agent_trace(base + i * 1000 * MS, "/support", service="top-svc"))
    for i in range(2):
        ingest(server, agent_trace(base + (10 + i) * 1000 * MS, "/faq", service="top-svc"))
    wait_for(lambda: _routes(server) == {"/support": 4, "/faq": 2} or None, timeout=60)
    yield server
    server.stop()


def _routes(server: ServerProcess) -> dict[str, int]:
    body = server.get("/api/v1/breakdown", group_by="route", service="top-svc", window="1h").json()
    return {row["group"]["route"]: row["traces"] for row in body.get("rows", [])}


def top(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [AGENTLAT, "top", "--api", server.url, "--service", "top-svc", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env={"COLUMNS": "220", "PATH": ""})


def test_json_rows_hold_the_apis_numbers(served: ServerProcess) -> None:
    done = top(served, "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    rows = {row["name"]: row for row in found["rows"]}
    assert (found["by"], found["latency"], list(rows)) == ("route", "e2e", ["/support", "/faq"])
    support = rows["/support"]
    assert (support["count"], support["errors"]) == (4, 0)
    assert support["latency_ms"] == {"p50": 1000.0, "p95": 1000.0, "p99": 1000.0}
    assert support["ttft_ms"] == {"p50": 100.0, "p95": 100.0, "p99": 100.0}
    assert support["split"] == {
        "model": {"mean_ms": 600.0, "share": 0.6},
        "tool": {"mean_ms": 400.0, "share": 0.4},
        "orchestration": {"mean_ms": 0.0, "share": 0.0},
    }
    api = served.get("/api/v1/dimensions", dimension="route", service="top-svc", window="1h").json()
    assert [(r["name"], r["count"], r["metrics"]["e2e"]["p95"]) for r in api["rows"]] == [
        (name, row["count"], row["latency_ms"]["p95"]) for name, row in rows.items()
    ]


def test_by_tool_has_no_split_and_the_tools_own_time(served: ServerProcess) -> None:
    found = json.loads(top(served, "--json", "--by", "tool").stdout)
    assert [(r["name"], r["count"], r["latency_ms"]["p50"], r["split"]) for r in found["rows"]] == [
        ("a", 6, 200.0, None),
        ("b", 6, 200.0, None),
    ]


def test_the_table_shows_each_route_with_its_percentiles_and_split(served: ServerProcess) -> None:
    done = top(served)
    assert done.returncode == 0, done.stderr
    [support] = [line for line in done.stdout.splitlines() if "/support" in line]
    cells = [cell.strip() for cell in support.strip("│ ").split("│")]
    assert cells == ["/support", "4", "0", *["100 ms"] * 3, *["1,000 ms"] * 3, "60.0%", "40.0%", "0.0%"]


def test_an_unreachable_api_says_what_to_do(served: ServerProcess) -> None:
    done = subprocess.run([AGENTLAT, "top", "--api", "http://127.0.0.1:9"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "error:" in done.stderr
