"""``GET /api/v1/samples`` and ``agentlat budget check --baseline`` on the known traces of two releases that
tests/test_compare_api.py sends through the real OpenTelemetry SDK and exporter: release 1.0's 40 model calls
have TTFT 100 + i ms (p50 119.5), release 2.0's 150 + i (p50 169.5), and E2E is 1000 + 10 i against 1300 + 10 i
(p50 1195 against 1495). A release baseline, the window before, and a results file saved from release 1.0 each
find TTFT p50 +50 ms and E2E p50 +300 ms, slower beyond a 10 % margin, within a 400 ms one."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import AGENTLAT, ServerProcess
from tests.test_compare_api import E2E, TTFT, N, two_releases

BUDGETS = """\
version: 1
routes:
  /chat:
    ttft: {p50: 1000ms}
    e2e: {p50: 5s}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with two_releases(tmp_path_factory.mktemp("baseline")) as proc:
        yield proc


def check(server: ServerProcess, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "budgets.yaml"
    path.write_text(BUDGETS)
    args = [AGENTLAT, "budget", "check", str(path), "--api", server.url, *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_samples_are_every_value_of_each_group(server: ServerProcess) -> None:
    body = server.get("/api/v1/samples", metric="ttft", group_by="release", window="2h").json()
    assert (body["metric"], body["unit"], body["group_by"], body["cap"]) == ("ttft", "ms", ["release"], 10_000)
    rows = {row["group"]["release"]: row for row in body["rows"]}
    assert rows["1.0"]["values"] == pytest.approx(TTFT["a"]) and rows["2.0"]["values"] == pytest.approx(TTFT["b"])
    assert rows["1.0"]["count"] == rows["2.0"]["count"] == N


def test_samples_filter_by_release_and_prompt(server: ServerProcess) -> None:
    body = server.get("/api/v1/samples", metric="e2e", group_by="route", release="2.0", window="2h").json()
    assert body["filters"] == {"release": "2.0"}
    assert [row["group"] for row in body["rows"]] == [{"route": "/chat"}]
    assert body["rows"][0]["values"] == pytest.approx(E2E["b"])
    by_prompt = server.get("/api/v1/samples", metric="ttft", group_by="prompt", window="2h").json()["rows"]
    assert {row["group"]["prompt"]: row["count"] for row in by_prompt} == {"v3": N, "v4": N}


@pytest.mark.parametrize(
    ("params", "message"),
    [({"metric": "speed"}, "metric='speed': choose from"), ({"window": "8d"}, "choose a window of at most 7d"),
     ({"group_by": "colour"}, "group_by ['colour']: choose from")],
)  # fmt: skip
def test_samples_reject_bad_asks(server: ServerProcess, params: dict[str, str], message: str) -> None:
    answer = server.get("/api/v1/samples", **params)
    assert answer.status_code == 400 and message in answer.json()["error"]["message"], answer.text


def _checks(result: subprocess.CompletedProcess[str]) -> list[tuple]:
    body = json.loads(result.stdout)
    return [
        (c["group"], c["metric"], c["percentile"], c["baseline"], c["current"], c["difference"], c["status"])
        for c in body["baseline"]["checks"]
    ]


EXPECTED = [
    ("route /chat", "ttft", "p50", 119.5, 169.5, 50.0, "regression"),
    ("route /chat", "e2e", "p50", 1195.0, 1495.0, 300.0, "regression"),
]


def _baselines(server: ServerProcess, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Each kind of baseline: the arguments, and what the report says it was."""
    saved = tmp_path / "release-1.0.json"
    made = check(server, tmp_path, "--window", "2h", "--release", "1.0", "--save-results", str(saved))
    assert made.returncode == 0, made.stdout + made.stderr
    release = ["--window", "2h", "--release", "2.0"]
    return {
        "release": ([*release, "--baseline", "release:1.0"], "release 1.0 (last 7d), now release 2.0"),
        "window before": (["--window", "30m", "--baseline", "1h"], "the 1h before the window"),  # 2.0 began 20 min ago
        "results file": ([*release, "--baseline", str(saved)], f"results file {saved}, now release 2.0"),
    }


def test_each_kind_of_baseline_finds_the_same_regressions(server: ServerProcess, tmp_path: Path) -> None:
    for kind, (args, against) in _baselines(server, tmp_path).items():
        result = check(server, tmp_path, *args, "--format", "json")
        assert result.returncode == 1, (kind, result.stdout + result.stderr)
        assert _checks(result) == EXPECTED, kind
        body = json.loads(result.stdout)
        assert body["status"] == "pass" and body["baseline"]["status"] == "regression"  # the budgets themselves pass
        assert body["baseline"]["against"] == against
        assert body["baseline"]["counts"] == {"regression": 2, "insufficient": 0, "pass": 0, "no_baseline": 0}
        for found in body["baseline"]["checks"]:
            assert found["low"] > found["allowed"] and found["low"] <= found["difference"] <= found["high"]
            assert found["allowed"] == pytest.approx(0.1 * found["baseline"])


def test_a_wider_margin_passes_and_the_table_says_against_what(server: ServerProcess, tmp_path: Path) -> None:
    result = check(server, tmp_path, "--window", "2h", "--release", "2.0", "--baseline", "release:1.0",
                   "--margin", "400ms")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "against release 1.0 (last 7d), now release 2.0, margin 400 ms" in result.stdout
    rows = [[c.strip() for c in line.strip("│ ").split("│")] for line in result.stdout.splitlines() if "→" in line]
    assert rows == [
        ["pass", "route /chat", "TTFT p50", "119.5 ms", "169.5 ms", "+50 ms", "+42 ms to +58.5 ms", "40 → 40"],
        ["pass", "route /chat", "E2E p50", "1,195 ms", "1,495 ms", "+300 ms", "+220 ms to +385 ms", "40 → 40"],
    ]  # the bootstrap's seed is fixed: the same values give the same interval
    assert result.stdout.rstrip().endswith("pass: 0 slower, 0 insufficient data, 2 passed")


def test_markdown_and_junit_carry_the_baseline(server: ServerProcess, tmp_path: Path) -> None:
    args = ["--window", "2h", "--release", "2.0", "--baseline", "release:1.0"]
    markdown = check(server, tmp_path, *args, "--format", "markdown").stdout
    assert "### agentlat latency budgets: ✅ pass" in markdown
    assert "### agentlat against the baseline: ❌ slower" in markdown
    assert "| ❌ slower | `route /chat` | E2E p50 | 1,195 ms | 1,495 ms | +300 ms |" in markdown
    root = ET.fromstring(check(server, tmp_path, *args, "--format", "junit").stdout)
    assert (root.get("tests"), root.get("failures")) == ("4", "2")
    suite = root.findall("testsuite")[1]
    assert suite.get("name") == "against release 1.0 (last 7d), now release 2.0"
    failures = [case.find("failure").get("message") for case in suite.iter("testcase")]
    assert failures[0].startswith("TTFT p50 119.5 ms → 169.5 ms (+50 ms, 95% interval +")


def test_too_few_samples_against_the_baseline_exit_3(server: ServerProcess, tmp_path: Path) -> None:
    saved = tmp_path / "few.json"
    saved.write_text(json.dumps({"agentlat_results": 1, "groups": {"route /chat": {"ttft": TTFT["a"][:10]}}}))
    result = check(server, tmp_path, "--window", "2h", "--release", "2.0", "--baseline", str(saved), "--format", "json")
    assert result.returncode == 3, result.stdout + result.stderr
    statuses = [(c["metric"], c["status"], c["difference"]) for c in json.loads(result.stdout)["baseline"]["checks"]]
    assert statuses == [("ttft", "insufficient", 50.0 + 15.0), ("e2e", "no_baseline", None)]  # 10 values: p50 104.5


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--baseline", "missing.json"], "no such results file; write one with agentlat budget check --save-results"),
     (["--baseline", "1h", "--margin", "lots"], "margin 'lots': give a percentage")],
)  # fmt: skip
def test_baseline_mistakes_exit_2_saying_what_to_do(
    server: ServerProcess, tmp_path: Path, args: list[str], message: str
) -> None:
    result = check(server, tmp_path, "--window", "30m", *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
