"""Checks against a baseline (budgets/baseline.py) on controlled samples: exact differences, the margin's
rule, too few samples, a group the baseline lacks, results files and their errors, and the Markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlat.budgets.baseline import (
    BaselineError,
    BaselineReport,
    Margin,
    Wanted,
    check_against,
    load_results,
    markdown,
    overall,
    parse_margin,
    save_results,
)

BEFORE = [100.0 + i for i in range(40)]  # p50 119.5
AFTER = [150.0 + i for i in range(40)]  # p50 169.5: +50 ms at every percentile


def _one(current: list[float], baseline: list[float], margin: Margin, minimum: int = 30) -> object:
    [found] = check_against(
        {"route /chat": {"ttft": current}}, {"route /chat": {"ttft": baseline}},
        [Wanted("route /chat", "ttft", "p50", minimum)], margin,
    )  # fmt: skip
    return found


def test_a_shift_beyond_the_margin_is_a_regression_with_its_exact_difference() -> None:
    check = _one(AFTER, BEFORE, Margin(share=0.10))
    assert (check.baseline, check.current, check.difference) == (119.5, 169.5, 50.0)
    assert check.allowed == pytest.approx(11.95)
    assert check.low > check.allowed and check.low <= 50.0 <= check.high
    assert (check.baseline_count, check.current_count, check.status) == (40, 40, "regression")
    assert check.describe().startswith("TTFT p50 119.5 ms → 169.5 ms (+50 ms, 95% interval +")
    assert check.describe().endswith("), more than the margin 12 ms")


def test_a_shift_inside_the_margin_passes() -> None:
    check = _one(AFTER, BEFORE, Margin(ms=60.0))
    assert (check.difference, check.allowed, check.status) == (50.0, 60.0, "pass")
    assert check.low <= 60.0


def test_the_same_samples_pass_at_a_zero_margin() -> None:
    check = _one(BEFORE, BEFORE, Margin(ms=0.0))
    assert (check.difference, check.status) == (0.0, "pass")


def test_too_few_samples_give_the_difference_without_an_interval() -> None:
    check = _one(AFTER[:20], BEFORE[:20], Margin(share=0.10))
    assert (check.difference, check.low, check.high, check.status) == (50.0, None, None, "insufficient")
    assert "too few samples: 20 and 20, p50 needs 30 a side" in check.describe()


def test_a_group_the_baseline_lacks_is_reported_not_judged() -> None:
    [found] = check_against({"route /new": {"ttft": AFTER}}, {}, [Wanted("route /new", "ttft", "p50", 30)], Margin())
    assert (found.status, found.baseline, found.current) == ("no_baseline", None, 169.5)
    assert overall([found]) == "insufficient"  # nothing was judged


def test_overall_takes_the_worst() -> None:
    regression, passing = _one(AFTER, BEFORE, Margin(share=0.1)), _one(AFTER, BEFORE, Margin(ms=60))
    insufficient = _one(AFTER[:20], BEFORE[:20], Margin(share=0.1))
    assert overall([passing, insufficient, regression]) == "regression"
    assert overall([passing, insufficient]) == "insufficient"
    assert overall([passing]) == "pass"


@pytest.mark.parametrize(
    ("text", "margin"),
    [("10%", Margin(share=0.1)), ("0%", Margin(share=0.0)), ("50ms", Margin(ms=50.0)), ("1.5s", Margin(ms=1500.0)),
     ("25", Margin(ms=25.0)), ("0", Margin(ms=0.0))],
)  # fmt: skip
def test_margins_parse(text: str, margin: Margin) -> None:
    assert parse_margin(text) == margin


@pytest.mark.parametrize("text", ["ten percent", "-5ms", "150%", "", "5 parsecs"])
def test_a_bad_margin_says_what_to_give(text: str) -> None:
    with pytest.raises(BaselineError, match="give a percentage of the baseline"):
        parse_margin(text)


def test_results_files_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    save_results(path, {"route /chat": {"ttft": BEFORE, "e2e": [1.5]}}, "agentlat budget check", {"length": "1h"})
    assert load_results(path) == {"route /chat": {"ttft": BEFORE, "e2e": [1.5]}}
    document = json.loads(path.read_text())
    assert (document["agentlat_results"], document["source"], document["window"]) == (
        1,
        "agentlat budget check",
        {"length": "1h"},
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not a results file"),
        ('{"groups": {}}', "not an agentlat results file"),
        ('{"agentlat_results": 1, "groups": []}', "'groups' must map each group"),
        ('{"agentlat_results": 1, "groups": {"t": {"speed": [1]}}}', "'speed' must be a latency"),
        ('{"agentlat_results": 1, "groups": {"t": {"ttft": [1, "fast"]}}}', "every value must be a number of ms"),
        ('{"agentlat_results": 1, "groups": {"t": {"ttft": [-1]}}}', "every value must be a number of ms"),
    ],
)
def test_a_broken_results_file_names_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(content)
    with pytest.raises(BaselineError, match=message):
        load_results(path)


def test_a_missing_results_file_says_how_to_write_one(tmp_path: Path) -> None:
    with pytest.raises(
        BaselineError, match="no such results file; write one with agentlat budget check --save-results"
    ):
        load_results(tmp_path / "nope.json")


def test_markdown_lists_the_worst_first_with_exact_cells() -> None:
    checks = (_one(AFTER, BEFORE, Margin(ms=60.0)), _one(AFTER, BEFORE, Margin(share=0.1)))
    text = markdown(BaselineReport("release 1.0", Margin(share=0.1), checks))
    lines = text.splitlines()
    assert lines[0] == "### agentlat against the baseline: ❌ slower"
    assert lines[2] == "against release 1.0 · margin 10% · 1 slower, 0 insufficient data, 1 passed"
    regression = lines[6].split(" | ")
    assert regression[:6] == ["| ❌ slower", "`route /chat`", "TTFT p50", "119.5 ms", "169.5 ms", "+50 ms"]
    assert regression[7] == "40 → 40 |"
    assert lines[7].startswith("| ✅ pass | `route /chat` | TTFT p50 |")
