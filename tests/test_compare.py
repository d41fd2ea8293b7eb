"""The comparison's statistics (shared/difference.py) on controlled samples: exact differences, intervals that hold
the truth, and the states a difference can be in."""

from __future__ import annotations

import numpy as np
import pytest

from agentlat.shared.difference import BOOTSTRAP_CAP, mean_change, mean_comparison, percentile_comparison, ratio_change


def _by_statistic(found: dict) -> dict[str, dict]:
    return {d["statistic"]: d for d in found["differences"]}


def test_a_shift_is_measured_exactly_and_its_interval_holds_it() -> None:
    a = list(range(1000, 3000))  # 2,000 values: enough for p99's interval (1,000)
    b = [v + 250 for v in a]
    found = _by_statistic(percentile_comparison(a, b))
    for statistic in ("p50", "p95", "p99"):
        d = found[statistic]
        assert d["difference"] == pytest.approx(250.0) and d["status"] == "slower"
        assert 0 < d["low"] <= 250.0 <= d["high"]
    back = _by_statistic(percentile_comparison(b, a))
    assert {s: d["status"] for s, d in back.items()} == dict.fromkeys(("p50", "p95", "p99"), "faster")


def test_the_same_values_are_no_clear_change() -> None:
    rng = np.random.default_rng(7)
    a = rng.lognormal(6, 0.4, 3000)
    found = _by_statistic(percentile_comparison(a, rng.permutation(a)))  # B: A's values in another order
    assert {s: d["status"] for s, d in found.items()} == dict.fromkeys(("p50", "p95", "p99"), "no_clear_change")
    assert all(d["difference"] == 0 and d["low"] < 0 < d["high"] for d in found.values())


def test_too_few_samples_give_the_difference_without_an_interval() -> None:
    found = _by_statistic(percentile_comparison([10.0] * 29, [20.0] * 500))
    assert [(d["difference"], d["low"], d["status"]) for d in found.values()] == [(10.0, None, "too_few_samples")] * 3
    assert _by_statistic(mean_comparison([10.0] * 30, [20.0] * 30))["mean"]["status"] == "slower"  # 30: enough
    empty = percentile_comparison([], [1.0, 2.0])
    assert (empty["a"]["count"], empty["a"]["p50"], empty["b"]["p50"]) == (0, None, 1.5)
    assert {d["status"] for d in empty["differences"]} == {"no_data"}


def test_beyond_the_cap_the_figures_stay_exact_and_the_interval_is_drawn_from_a_subset() -> None:
    a = np.arange(3 * BOOTSTRAP_CAP, dtype=float)
    found = percentile_comparison(a, a + 5)
    assert found["a"]["p50"] == pytest.approx(np.percentile(a, 50)) and found["a"]["count"] == 3 * BOOTSTRAP_CAP
    p50 = _by_statistic(found)["p50"]
    assert p50["difference"] == pytest.approx(5.0) and p50["low"] < 5.0 < p50["high"]


def test_one_store_gives_one_answer() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(100, 10, 500), rng.normal(103, 10, 500)
    assert percentile_comparison(a, b) == percentile_comparison(a, b)


def test_a_ratio_of_sums_moves_lower_with_its_interval() -> None:
    found = ratio_change([(800, 1000)] * 40, [(200, 1000)] * 40, 20)
    assert (found["a"], found["b"]) == ({"count": 40, "value": 0.8}, {"count": 40, "value": 0.2})
    assert (found["statistic"], found["status"]) == ("ratio", "lower")
    assert found["difference"] == pytest.approx(-0.6) and found["low"] == found["high"] == pytest.approx(-0.6)


def test_a_ratio_weighs_each_call_by_its_tokens() -> None:
    # 900 of 1,000 and 0 of 9,000: 900 / 10,000 = 9 %, not the calls' mean of 45 %
    found = ratio_change([(900, 1000), (0, 9000)] * 10, [(900, 1000), (0, 9000)] * 10, 20)
    assert found["a"]["value"] == pytest.approx(0.09) and found["difference"] == pytest.approx(0.0)
    assert found["status"] == "no_clear_change" and found["low"] <= 0 <= found["high"]


def test_a_ratio_from_too_few_calls_or_none() -> None:
    few = ratio_change([(1, 2)] * 10, [(1, 4)] * 10, 20)
    assert (few["difference"], few["low"], few["status"]) == (pytest.approx(-0.25), None, "too_few_samples")
    assert ratio_change([], [(1, 4)] * 30, 20)["status"] == "no_data"


def test_a_lever_mean_reads_higher_not_slower() -> None:
    found = mean_change([float(i) for i in range(40)], [i + 200.0 for i in range(40)])
    assert (found["a"]["value"], found["b"]["count"]) == (19.5, 40)
    assert (found["difference"], found["status"]) == (pytest.approx(200.0), "higher")
