"""``GET /api/v1/budgets``: the server judges its budgets file on known data for the dashboard."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.budget_data import BREACHING, CHAT_HIT_RATE, CHAT_TTFT, HIT_RATES, PASSING, ingest_known_spans, pct
from tests.servers import AGENTLAT, ServerProcess, wait_for


@pytest.fixture(scope="module")
def budgets_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("budgets") / "budgets.yaml"
    path.write_text(BREACHING)
    return path


@pytest.fixture(scope="module")
def budget_server(tmp_path_factory: pytest.TempPathFactory, budgets_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("budget-server"), extra_env={"AGENTLAT_BUDGETS": str(budgets_path)})
    proc.start()
    ingest_known_spans(proc)
    yield proc
    proc.stop()


def test_without_a_budgets_file_the_route_says_how_to_configure_one(server: ServerProcess) -> None:
    response = server.get("/api/v1/budgets")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["status"] == 404
    assert "agentlat serve --budgets budgets.yaml" in error["message"] and "AGENTLAT_BUDGETS" in error["message"]


def test_the_server_returns_verdicts_and_the_raw_thresholds(budget_server: ServerProcess, budgets_path: Path) -> None:
    body = budget_server.get("/api/v1/budgets", window="2h").json()
    assert body["file"] == str(budgets_path) and body["status"] == "breach"
    assert body["window"]["length"] == "2h"
    assert body["counts"] == {"pass": 4, "breach": 1, "insufficient": 1}
    assert body["thresholds"]["routes"]["/chat"] == {
        "ttft": {"p50": 150.0, "p95": 250.0},
        "itl": {"p95": 30.0},
        "e2e": {"p99": 5000.0},
    }
    results = {(r["name"], r["metric"], r["percentile"]): r for r in body["results"]}
    chat_p95 = results[("/chat", "ttft", "p95")]
    assert chat_p95["actual"] == pytest.approx(pct(CHAT_TTFT, "p95"))
    assert (chat_p95["budget"], chat_p95["count"], chat_p95["status"]) == (250.0, 20, "pass")
    search = results[("/search", "ttft", "p50")]
    assert (search["source"], search["actual"], search["status"]) == ("default", pytest.approx(1000.0), "breach")
    assert results[("/chat", "e2e", "p99")]["status"] == "insufficient"


def test_long_windows_read_the_rollups(budget_server: ServerProcess) -> None:
    def chat_ttft_p50() -> dict | None:
        body = budget_server.get("/api/v1/budgets", window="7d").json()
        found = [r for r in body["results"] if (r["name"], r["metric"], r["percentile"]) == ("/chat", "ttft", "p50")]
        return found[0] if found and found[0]["count"] == 20 else None

    result = wait_for(chat_ttft_p50)  # rollups settle a few seconds after ingest
    assert result["actual"] == pytest.approx(pct(CHAT_TTFT, "p50"), rel=0.05)  # t-digest: approximate


def test_the_file_is_reread_when_it_changes(budget_server: ServerProcess, budgets_path: Path) -> None:
    try:
        budgets_path.write_text(PASSING)
        os.utime(budgets_path, ns=(1, 1))  # a new modification time even within the clock's resolution
        assert budget_server.get("/api/v1/budgets", window="2h").json()["status"] == "pass"
        budgets_path.write_text(PASSING.replace("ttft: {p50: 1500}", "ttft: {p50: never}"))
        os.utime(budgets_path, ns=(2, 2))
        broken = budget_server.get("/api/v1/budgets", window="2h")
        assert broken.status_code == 500
        assert f"{budgets_path}:6: default.ttft.p50: expected a duration" in broken.json()["error"]["message"]
        assert budget_server.get("/api/v1/budgets", window="2h").status_code == 500  # until the file changes
    finally:
        budgets_path.write_text(BREACHING)
        os.utime(budgets_path, ns=(3, 3))


def test_a_bad_window_is_a_400(budget_server: ServerProcess) -> None:
    response = budget_server.get("/api/v1/budgets", window="forever")
    assert response.status_code == 400
    assert "window='forever'" in response.json()["error"]["message"]


def test_serve_refuses_to_start_with_a_broken_budgets_file(tmp_path: Path) -> None:
    broken = tmp_path / "budgets.yaml"
    broken.write_text("default:\n  ttfb: {p50: 1}\n")
    result = subprocess.run(
        [AGENTLAT, "serve", "--data", str(tmp_path / "data"), "--port", "0", "--budgets", str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "AGENTLAT_BUDGETS"},
    )
    assert result.returncode == 2
    assert f"{broken}:2: default.ttfb: unknown field" in " ".join(result.stderr.split())


def test_hit_rates_are_judged_exact_and_from_rollups_alike(budget_server: ServerProcess, budgets_path: Path) -> None:
    """/chat's 0.425 under its 50 % floor, from the spans (2 h) and from the rollups' token sums (7 d) alike;
    /search reports no cache tokens: no rate, insufficient, never 0 %."""
    try:
        budgets_path.write_text(HIT_RATES)
        os.utime(budgets_path, ns=(4, 4))

        def results(window: str) -> dict | None:
            body = budget_server.get("/api/v1/budgets", window=window).json()
            found = {(r["dimension"], r["name"]): r for r in body["results"]}
            chat = found.get(("route", "/chat"))
            return {"body": body, **found} if chat and chat["count"] == 20 else None

        for window in ("2h", "7d"):  # 7d: rollups settle a few seconds after ingest
            found = wait_for(lambda w=window: results(w))
            body = found.pop("body")
            assert body["status"] == "breach" and body["counts"] == {"pass": 1, "breach": 1, "insufficient": 1}
            assert body["min_samples"]["cache_hit_rate"] == 20
            assert body["thresholds"]["routes"]["/chat"] == {"cache_hit_rate": {"min": 0.5}}
            got = {
                key: (r["source"], r["metric"], r["percentile"], r["budget"], r["actual"], r["count"], r["status"])
                for key, r in found.items()
            }
            assert got == {
                ("route", "/chat"): ("route", "cache_hit_rate", "min", 0.5, pytest.approx(CHAT_HIT_RATE), 20, "breach"),
                ("route", "/search"): ("route", "cache_hit_rate", "min", 0.5, None, 0, "insufficient"),
                ("agent", "support"): ("agent", "cache_hit_rate", "min", 0.4, pytest.approx(CHAT_HIT_RATE), 20, "pass"),
            }, window
    finally:
        budgets_path.write_text(BREACHING)
        os.utime(budgets_path, ns=(5, 5))
