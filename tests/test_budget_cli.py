"""``agentlat budget check`` on known live data, in every format, and ``agentlat budget init``."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentlat.budgets.model import AGENT_TYPES, load_budgets
from tests.budget_data import (
    BREACHING,
    CHAT_E2E,
    CHAT_HIT_RATE,
    CHAT_ITL,
    CHAT_TTFT,
    HIT_RATES,
    INSUFFICIENT,
    PASSING,
    ingest_known_spans,
    pct,
)
from tests.servers import AGENTLAT, ServerProcess, wait_for


@pytest.fixture(scope="module")
def api(server: ServerProcess) -> str:
    ingest_known_spans(server)
    return server.url


def budgets_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "budgets.yaml"
    path.write_text(text)
    return path


def agentlat(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTLAT, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def check(api: str, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return agentlat("budget", "check", str(path), "--api", api, "--window", "2h", *extra)


def table_rows(stdout: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("│ ").split("│")] for line in stdout.splitlines() if "│" in line]


def test_passing_budgets_exit_0_with_a_table(api: str, tmp_path: Path) -> None:
    result = check(api, budgets_file(tmp_path, PASSING))
    assert result.returncode == 0, result.stdout + result.stderr
    assert table_rows(result.stdout) == [
        ["pass", "route /chat", "TTFT p50", "≤ 150 ms", "105 ms", "20"],
        ["pass", "route /chat", "TTFT p95", "≤ 250 ms", "190.5 ms", "20"],
        ["pass", "route /chat", "ITL p95", "≤ 30 ms", "19.1 ms", "20"],
        ["pass", "agent support", "E2E p50", "≤ 2,000 ms", "1,050 ms", "20"],
        ["pass", "route /search", "TTFT p50", "≤ 1,500 ms (default)", "1,000 ms", "10"],
    ]
    assert result.stdout.rstrip().endswith("pass: 0 breached, 0 insufficient data, 5 passed")


def test_a_breach_exits_1_and_leads_the_table(api: str, tmp_path: Path) -> None:
    result = check(api, budgets_file(tmp_path, BREACHING))
    assert result.returncode == 1, result.stdout + result.stderr
    rows = table_rows(result.stdout)
    assert rows[0] == ["breach", "route /search", "TTFT p50", "≤ 500 ms (default)", "1,000 ms", "10"]
    assert rows[1] == ["insufficient", "route /chat", "E2E p99", "≤ 5,000 ms", "1,981 ms", "20 (needs 50)"]
    assert [row[0] for row in rows[2:]] == ["pass"] * 4
    assert "breach: 1 breached, 1 insufficient data, 4 passed" in result.stdout


def test_too_few_samples_exit_3_unless_allowed(api: str, tmp_path: Path) -> None:
    path = budgets_file(tmp_path, INSUFFICIENT)
    result = check(api, path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "insufficient: 0 breached, 1 insufficient data, 5 passed" in result.stdout
    assert check(api, path, "--allow-insufficient").returncode == 0


def test_json_has_every_verdict_with_exact_values(api: str, tmp_path: Path) -> None:
    path = budgets_file(tmp_path, BREACHING)
    result = check(api, path, "--format", "json")
    assert result.returncode == 1
    body = json.loads(result.stdout)
    assert body["status"] == "breach" and body["counts"] == {"pass": 4, "breach": 1, "insufficient": 1}
    assert (body["file"], body["type"], body["primary"], body["secondary"]) == (str(path), "chat", "ttft", "itl")
    assert body["window"]["length"] == "2h" and body["window"]["start"] < body["window"]["end"]
    assert body["min_samples"] == {"p50": 10, "p95": 20, "p99": 50}
    assert body["thresholds"]["default"] == {"ttft": {"p50": 500.0}}
    got = [
        (r["dimension"], r["name"], r["source"], r["metric"], r["percentile"], r["budget"], r["actual"],
         r["count"], r["min_samples"], r["status"], r["line"])
        for r in body["results"]
    ]  # fmt: skip
    e2e_p99 = pytest.approx(pct(CHAT_E2E, "p99"))
    assert got == [
        ("route", "/chat", "route", "ttft", "p50", 150.0, pytest.approx(pct(CHAT_TTFT, "p50")), 20, 10, "pass", 9),
        ("route", "/chat", "route", "ttft", "p95", 250.0, pytest.approx(pct(CHAT_TTFT, "p95")), 20, 20, "pass", 9),
        ("route", "/chat", "route", "itl", "p95", 30.0, pytest.approx(pct(CHAT_ITL, "p95")), 20, 20, "pass", 10),
        ("route", "/chat", "route", "e2e", "p99", 5000.0, e2e_p99, 20, 50, "insufficient", 11),
        ("agent", "support", "agent", "e2e", "p50", 2000.0, pytest.approx(pct(CHAT_E2E, "p50")), 20, 10, "pass", 14),
        ("route", "/search", "default", "ttft", "p50", 500.0, pytest.approx(1000.0), 10, 10, "breach", 6),
    ]


def test_junit_has_a_failure_per_breach_and_a_skip_per_gap(api: str, tmp_path: Path) -> None:
    path = budgets_file(tmp_path, BREACHING)
    result = check(api, path, "--format", "junit")
    assert result.returncode == 1
    assert result.stdout.startswith('<?xml version="1.0" encoding="utf-8"?>\n<testsuites')
    root = ET.fromstring(result.stdout)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "1", "0")
    suite = root.find("testsuite")
    assert suite is not None and (suite.get("name"), suite.get("skipped")) == (str(path), "1")
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["window"] == "2h" and properties["end"] == suite.get("timestamp")
    cases = [
        (c.get("classname"), c.get("name"), c.get("line"), [child.tag for child in c]) for c in suite.iter("testcase")
    ]
    assert cases == [
        ("route /chat", "TTFT p50 ≤ 150 ms", "9", []),
        ("route /chat", "TTFT p95 ≤ 250 ms", "9", []),
        ("route /chat", "ITL p95 ≤ 30 ms", "10", []),
        ("route /chat", "E2E p99 ≤ 5,000 ms", "11", ["skipped"]),
        ("agent support", "E2E p50 ≤ 2,000 ms", "14", []),
        ("route /search", "TTFT p50 ≤ 500 ms (default)", "6", ["failure"]),
    ]
    skipped = suite.find("testcase/skipped")
    assert skipped is not None and skipped.get("message") == "insufficient data: 20 samples, p99 needs 50"
    failure = suite.find("testcase/failure")
    assert failure is not None
    assert failure.get("message") == "TTFT p50 of route /search is 1,000 ms, over its budget of 500 ms"
    assert failure.text == "TTFT p50 of route /search is 1,000 ms, over its budget of 500 ms (10 samples)"


def test_markdown_fits_a_pull_request_comment(api: str, tmp_path: Path) -> None:
    path = budgets_file(tmp_path, BREACHING)
    result = check(api, path, "--format", "markdown")
    assert result.returncode == 1
    assert result.stdout == (
        "### agentlat latency budgets: ❌ breach\n"
        "\n"
        f"`{path}` · last 2h · 1 breached, 1 insufficient data, 4 passed\n"
        "\n"
        "| status | target | check | budget | actual | samples |\n"
        "|---|---|---|---|---|---|\n"
        "| ❌ breach | route `/search` | TTFT p50 | ≤ 500 ms (default) | 1,000 ms | 10 |\n"
        "| ⚠️ insufficient data | route `/chat` | E2E p99 | ≤ 5,000 ms | 1,981 ms | 20 (needs 50) |\n"
        "| ✅ pass | route `/chat` | TTFT p50 | ≤ 150 ms | 105 ms | 20 |\n"
        "| ✅ pass | route `/chat` | TTFT p95 | ≤ 250 ms | 190.5 ms | 20 |\n"
        "| ✅ pass | route `/chat` | ITL p95 | ≤ 30 ms | 19.1 ms | 20 |\n"
        "| ✅ pass | agent `support` | E2E p50 | ≤ 2,000 ms | 1,050 ms | 20 |\n"
    )


def test_output_writes_the_format_to_a_file_and_the_table_to_stdout(api: str, tmp_path: Path) -> None:
    report = tmp_path / "summary.md"
    result = check(api, budgets_file(tmp_path, PASSING), "--format", "markdown", "--output", str(report))
    assert result.returncode == 0
    assert report.read_text().startswith("### agentlat latency budgets: ✅ pass\n")
    assert table_rows(result.stdout)[0] == ["pass", "route /chat", "TTFT p50", "≤ 150 ms", "105 ms", "20"]


def test_service_filter_excludes_other_services(api: str, tmp_path: Path) -> None:
    path = budgets_file(tmp_path, PASSING.replace("service: budget-svc", "service: no-such-svc"))
    result = check(api, path, "--format", "json")
    assert result.returncode == 3  # the listed route and agent have no data
    assert {(r["name"], r["count"], r["status"]) for r in json.loads(result.stdout)["results"]} == {
        ("/chat", 0, "insufficient"),
        ("support", 0, "insufficient"),
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--window", "soon"], "window='soon'"),
        (["--api", "http://127.0.0.1:9"], "cannot reach agentlat at http://127.0.0.1:9"),
    ],
)
def test_api_problems_exit_2(api: str, tmp_path: Path, args: list[str], message: str) -> None:
    path = budgets_file(tmp_path, PASSING)
    result = agentlat("budget", "check", str(path), "--api", api, *args)
    assert result.returncode == 2
    assert message in " ".join(result.stderr.split())


def test_a_broken_file_exits_2_naming_the_line(api: str, tmp_path: Path) -> None:
    path = budgets_file(tmp_path, PASSING.replace("itl: {p95: 30}", "itl: {p95: soon}"))
    result = check(api, path)
    assert result.returncode == 2
    assert f"{path}:10: routes./chat.itl.p95: expected a duration > 0" in " ".join(result.stderr.split())


@pytest.mark.parametrize("kind", list(AGENT_TYPES))
def test_init_writes_a_valid_starter_file(tmp_path: Path, kind: str) -> None:
    result = agentlat("budget", "init", "--type", kind, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"wrote budgets.yaml ({kind})" in result.stdout
    budgets = load_budgets(tmp_path / "budgets.yaml")
    assert budgets.type == kind
    assert {m for m, _ in budgets.default} == {AGENT_TYPES[kind].primary, AGENT_TYPES[kind].secondary}


def test_init_keeps_an_existing_file_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("keep me\n")
    refused = agentlat("budget", "init", str(path), "--type", "rag")
    assert refused.returncode == 2
    assert "exists; pass --force" in refused.stderr and path.read_text() == "keep me\n"
    forced = agentlat("budget", "init", str(path), "--type", "rag", "--force")
    assert forced.returncode == 0 and load_budgets(path).type == "rag"


def test_init_rejects_an_unknown_type(tmp_path: Path) -> None:
    result = agentlat("budget", "init", "--type", "robot", cwd=tmp_path)
    assert result.returncode == 2
    assert "robot" in result.stderr and not (tmp_path / "budgets.yaml").exists()


HIT_RATE_ROWS = [
    ["breach", "route /chat", "cache hit rate", "≥ 50%", "42.5%", "20"],
    ["insufficient", "route /search", "cache hit rate", "≥ 50%", "—", "0 (needs 20)"],  # no cache reports: no rate
    ["pass", "agent support", "cache hit rate", "≥ 40%", "42.5%", "20"],
]


def test_a_hit_rate_under_its_floor_breaches_and_no_cache_reports_are_no_data(api: str, tmp_path: Path) -> None:
    path = budgets_file(tmp_path, HIT_RATES)
    result = check(api, path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert table_rows(result.stdout) == HIT_RATE_ROWS
    assert "breach: 1 breached, 1 insufficient data, 1 passed" in result.stdout
    body = json.loads(check(api, path, "--format", "json").stdout)
    assert body["min_samples"] == {"p50": 30, "p95": 200, "p99": 1000, "cache_hit_rate": 20}
    assert [(r["name"], r["metric"], r["percentile"], r["budget"], r["actual"], r["count"], r["line"])
            for r in body["results"]] == [
        ("/chat", "cache_hit_rate", "min", 0.5, pytest.approx(CHAT_HIT_RATE), 20, 7),
        ("/search", "cache_hit_rate", "min", 0.5, None, 0, 9),
        ("support", "cache_hit_rate", "min", 0.4, pytest.approx(CHAT_HIT_RATE), 20, 12),
    ]  # fmt: skip
    markdown = check(api, path, "--format", "markdown").stdout
    assert "| ❌ breach | route `/chat` | cache hit rate | ≥ 50% | 42.5% | 20 |" in markdown
    root = ET.fromstring(check(api, path, "--format", "junit").stdout)
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None
    assert failure.get("message") == "cache hit rate of route /chat is 42.5%, under its minimum of 50%"
    passing = budgets_file(tmp_path, HIT_RATES.replace("{min: 50%}", "{min: 0.425}").replace("/search:", "/unused:"))
    assert check(api, passing, "--allow-insufficient").returncode == 0  # at the floor passes


def test_a_long_window_reads_the_same_hit_rate_from_the_rollups(api: str, tmp_path: Path) -> None:
    path = budgets_file(tmp_path, HIT_RATES)

    def settled() -> subprocess.CompletedProcess[str] | None:
        result = agentlat("budget", "check", str(path), "--api", api, "--window", "7d")
        return result if table_rows(result.stdout) == HIT_RATE_ROWS else None  # rollups settle after ingest

    result = wait_for(settled, timeout=60, interval=1)
    assert result.returncode == 1
