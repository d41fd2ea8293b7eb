"""The pytest plugin, run in pytester subprocesses: budgets that pass, fail, and see noisy timings.

Timings come from sleeps of known length, and budgets sit far from them: a sleep never ends
early, so a budget below it always fails, and one ten times above it passes on a busy machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

AGENT = '''
import time

import agentlat


def agent_call(ttft_s=0.01, gaps_s=(0.002, 0.002, 0.002), tool_s=None):
    """One streamed model call (TTFT = ttft_s, ITL = the gaps), then optionally a tool call."""
    with agentlat.model_call("fake-model", provider="test", stream=True) as call:
        time.sleep(ttft_s)
        call.chunk()
        for gap in gaps_s:
            time.sleep(gap)
            call.chunk()
    if tool_s is not None:
        with agentlat.tool("search"):
            time.sleep(tool_s)


class Cached:
    """A model call a run, reporting (input, cache-read) tokens in turn: 1,000 / 800, 1,000 / 0, 2,000 / 1,000."""

    TOKENS = ((1000, 800), (1000, 0), (2000, 1000))

    def __init__(self):
        self.calls = 0

    def __call__(self):
        input_tokens, cached = self.TOKENS[self.calls % len(self.TOKENS)]
        self.calls += 1
        with agentlat.model_call("fake-model", provider="test") as call:
            call.usage(input_tokens=input_tokens, cache_read_tokens=cached, output_tokens=5)


class Noisy:
    """Fast calls, and one slow call at a known run."""

    def __init__(self, slow_run, fast_s=0.005, slow_s=0.3):
        self.slow_run, self.fast_s, self.slow_s, self.calls = slow_run, fast_s, slow_s, 0

    def __call__(self):
        time.sleep(self.slow_s if self.calls == self.slow_run else self.fast_s)
        self.calls += 1
'''


@pytest.fixture
def agent(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(agent_helpers=AGENT)
    return pytester


def test_a_passing_budget_passes_and_shows_in_the_summary(agent: pytest.Pytester) -> None:
    agent.makepyfile(
        test_fast="""
        import pytest
        from agent_helpers import agent_call

        @pytest.mark.latency_budget(runs=10, ttft_p95_ms=500, itl_p50_ms=50, e2e_p50_ms=2000)
        def test_fast(latency):
            result = latency.measure(agent_call)
            assert len(result.samples["ttft"]) == 10 and len(result.samples["e2e"]) == 10
            assert 10 <= result.percentile("ttft", "p50") < 500

        def test_measure_only(latency):
            latency.measure(agent_call, runs=3)
        """
    )
    result = agent.runpytest_subprocess()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*= agentlat latency budgets =*",
            "PASS *test_fast.py::test_fast (10 runs)",
            "    ttft  n=10   p50 * ms  p95 * ms  p99 * ms  | p95 ≤ 500 ms pass",
            "    itl   n=10   p50 * ms  p95 * ms  p99 * ms  | p50 ≤ 50 ms pass",
            "    e2e   n=10   p50 * ms  p95 * ms  p99 * ms  | p50 ≤ 2,000 ms pass",
            "    model n=10   *",
            "MEASURED *test_fast.py::test_measure_only (3 runs)",
            "    ttft  n=3    p50 * ms  p95 * ms  p99 * ms",
        ]
    )


def test_a_failing_budget_fails_with_a_clear_message(agent: pytest.Pytester) -> None:
    agent.makepyfile(
        test_slow="""
        import pytest
        from agent_helpers import agent_call

        @pytest.mark.latency_budget(runs=5, ttft_p95_ms=20, e2e_p50_ms=5000)
        def test_slow(latency):
            latency.measure(lambda: agent_call(ttft_s=0.06))
        """
    )
    result = agent.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "latency budget not met over 5 runs:",
            "  ttft p95 = * ms > budget 20 ms",
            "measured:",
            "  ttft  n=5    p50 * | p95 ≤ 20 ms breach",
            "  e2e   n=5    p50 * | p50 ≤ 5,000 ms pass",
            "BREACH *test_slow.py::test_slow (5 runs)",
        ]
    )
    assert "e2e p50" not in result.stdout.str().split("measured:")[0]  # only what failed is listed first


def test_noisy_timings_pass_at_p50_and_p95_but_fail_at_p99(agent: pytest.Pytester) -> None:
    # 20 runs, one of them 300 ms: p50 and p95 stay near 5 ms, p99 interpolates to about 245 ms.
    agent.makepyfile(
        test_noisy="""
        import pytest
        from agent_helpers import Noisy

        @pytest.mark.latency_budget(runs=20, e2e_p50_ms=100, e2e_p95_ms=100)
        def test_typical(latency):
            latency.measure(Noisy(slow_run=7))

        @pytest.mark.latency_budget(runs=20, e2e_p99_ms=100)
        def test_tail(latency):
            latency.measure(Noisy(slow_run=7))

        @pytest.mark.latency_budget(runs=20, warmup=1, e2e_p99_ms=100)
        def test_tail_after_a_slow_warmup(latency):
            latency.measure(Noisy(slow_run=0))
        """
    )
    result = agent.runpytest_subprocess()
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*FAILED test_noisy.py::test_tail - Failed: latency budget not met over 20 runs:*"])
    result.stdout.fnmatch_lines(["  e2e p99 = * ms > budget 100 ms"])
    result.stdout.fnmatch_lines(["PASS *test_noisy.py::test_tail_after_a_slow_warmup (20 runs)"])


def test_budgets_come_from_the_budgets_file(agent: pytest.Pytester) -> None:
    agent.makefile(
        ".yaml",
        budgets="""
        default:
          ttft: {p50: 2s, p95: 3s}
        routes:
          /chat:
            ttft: {p95: 20ms}
        agents:
          searcher:
            tool: {p50: 1}
        """,
    )
    agent.makepyfile(
        test_file="""
        import pytest
        from agent_helpers import agent_call

        @pytest.mark.latency_budget(runs=5, budgets="budgets.yaml", route="/chat")
        def test_chat(latency):
            latency.measure(lambda: agent_call(ttft_s=0.03))

        @pytest.mark.latency_budget(runs=5, budgets="budgets.yaml", route="/chat", ttft_p95_ms=1000)
        def test_chat_with_an_inline_override(latency):
            latency.measure(lambda: agent_call(ttft_s=0.03))

        @pytest.mark.latency_budget(runs=5, budgets="budgets.yaml", agent="searcher")
        def test_searcher(latency):
            latency.measure(lambda: agent_call(tool_s=0.01))

        @pytest.mark.latency_budget(runs=5, budgets="budgets.yaml", agent="writer")
        def test_unlisted_agent(latency):
            latency.measure(agent_call)
        """
    )
    result = agent.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=2, errors=1)  # a budgets-file problem errors in setup
    result.stdout.fnmatch_lines(["*test_chat - Failed: latency budget not met over 5 runs:*"])
    result.stdout.fnmatch_lines(["  ttft p95 = * ms > budget 20 ms"])
    result.stdout.fnmatch_lines(["PASS *test_file.py::test_chat_with_an_inline_override (5 runs)"])
    result.stdout.fnmatch_lines(["    ttft  n=5 * | p50 ≤ 2,000 ms pass; p95 ≤ 1,000 ms pass"])
    result.stdout.fnmatch_lines(["  tool p50 = * ms > budget 1 ms"])
    result.stdout.fnmatch_lines(["*budgets.yaml: no budgets for agent 'writer' (agents listed: searcher)*"])


def test_a_budget_without_samples_fails_and_says_why(agent: pytest.Pytester) -> None:
    agent.makepyfile(
        test_missing="""
        import pytest
        from agent_helpers import agent_call

        @pytest.mark.latency_budget(runs=3, tool_p95_ms=1000)
        def test_no_tool(latency):
            latency.measure(agent_call)
        """
    )
    result = agent.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["  tool p95 ≤ 1,000 ms: no tool-time samples: the function made no agentlat.tool call"]
    )
    result.stdout.fnmatch_lines(["INSUFFICIENT test_missing.py::test_no_tool (3 runs)"])


def test_misuse_is_an_error_naming_the_problem(agent: pytest.Pytester) -> None:
    agent.makepyfile(
        test_misuse="""
        import pytest
        from agent_helpers import agent_call

        @pytest.mark.latency_budget(runs=3, ttft_p90_ms=100)
        def test_typo(latency):
            latency.measure(agent_call)

        @pytest.mark.latency_budget(runs=0)
        def test_no_runs(latency):
            latency.measure(agent_call)

        @pytest.mark.latency_budget(route="/chat")
        def test_route_without_file(latency):
            latency.measure(agent_call)

        @pytest.mark.latency_budget(budgets="budgets.yaml", route="/chat", agent="a")
        def test_route_and_agent(latency):
            latency.measure(agent_call)

        @pytest.mark.latency_budget(ttft_p95_ms="fast")
        def test_not_a_number(latency):
            latency.measure(agent_call)

        @pytest.mark.latency_budget(5)
        def test_positional(latency):
            latency.measure(agent_call)

        @pytest.mark.latency_budget(runs=3, ttft_p95_ms=100)
        def test_forgot_to_measure(latency):
            pass

        def test_measures_twice(latency):
            latency.measure(agent_call, runs=1)
            latency.measure(agent_call, runs=1)

        def test_bad_runs_argument(latency):
            latency.measure(agent_call, runs=2.5)
        """
    )
    result = agent.runpytest_subprocess()
    result.assert_outcomes(passed=1, errors=7, failed=2)  # marker errors at setup, a missing measure at teardown
    result.stdout.fnmatch_lines(["*latency_budget: unknown argument(s) ttft_p90_ms; expected runs, warmup*"])
    result.stdout.fnmatch_lines(
        ["*latency_budget: runs must be a whole number ≥ 1 and warmup ≥ 0, got runs=0, warmup=0*"]
    )
    result.stdout.fnmatch_lines(["*latency.measure() runs once per test; split the measurements into tests*"])
    result.stdout.fnmatch_lines(["*latency.measure(runs=...) must be a whole number ≥ 1, got 2.5*"])
    result.stdout.fnmatch_lines(["*route= and agent= pick budgets from a file; add budgets='budgets.yaml'*"])
    result.stdout.fnmatch_lines(["*latency_budget: pass route= or agent=, not both*"])
    result.stdout.fnmatch_lines(["*latency_budget: ttft_p95_ms must be a number of milliseconds > 0, got 'fast'*"])
    result.stdout.fnmatch_lines(["*latency_budget takes keyword arguments only, got (5,)*"])
    result.stdout.fnmatch_lines(["*the test is marked latency_budget but never called latency.measure(fn)*"])


def test_it_works_beside_the_applications_own_init_and_keeps_its_spans(agent: pytest.Pytester) -> None:
    agent.makeconftest(
        """
        import pytest
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        import agentlat

        EXPORTED = InMemorySpanExporter()
        agentlat.init(service="app", exporter=EXPORTED, options=agentlat.Options(instrument_clients=False))
        """
    )
    agent.makepyfile(
        test_init="""
        import asyncio
        import pytest
        import agentlat
        from agent_helpers import agent_call
        from conftest import EXPORTED

        @pytest.mark.latency_budget(runs=3, ttft_p95_ms=1000)
        def test_first(latency):
            assert len(latency.measure(agent_call).samples["ttft"]) == 3
            agent_call()  # after measuring: not recorded, still exported by the application
            assert agentlat.flush()
            assert sum(s.name == "chat fake-model" for s in EXPORTED.get_finished_spans()) == 4

        @pytest.mark.latency_budget(runs=2, ttft_p95_ms=1000)
        def test_async_agent(latency):
            async def call():
                await asyncio.sleep(0)
                agent_call()

            assert len(latency.measure(call).samples["ttft"]) == 2
        """
    )
    result = agent.runpytest_subprocess()
    result.assert_outcomes(passed=2)


def test_the_plugin_is_inert_unless_used(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = pytester.runpytest_subprocess("--strict-markers")
    result.assert_outcomes(passed=1)
    assert "latency" not in result.stdout.str()
    code = "import sys, agentlat.budgets.pytest_plugin; print(sorted(m for m in ('yaml', 'httpx') if m in sys.modules))"
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "[]"


def test_the_plugin_can_be_disabled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_uses="def test_uses(latency):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:agentlat")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'latency' not found*"])


def test_a_hit_rate_budget_is_a_floor_over_every_runs_tokens(agent: pytest.Pytester) -> None:
    agent.makefile(".yaml", budgets="routes:\n  /chat:\n    cache_hit_rate: {min: 80%}\n")
    agent.makepyfile(
        test_cache="""
        import pytest
        from agent_helpers import Cached, agent_call

        @pytest.mark.latency_budget(runs=3, cache_hit_rate_min=0.4)
        def test_warm(latency):
            assert latency.measure(Cached()).hit_rate == pytest.approx(1800 / 4000)

        @pytest.mark.latency_budget(runs=3, cache_hit_rate_min=0.45)
        def test_at_the_floor(latency):
            latency.measure(Cached())

        @pytest.mark.latency_budget(runs=3, budgets="budgets.yaml", route="/chat")
        def test_cold(latency):
            latency.measure(Cached())

        @pytest.mark.latency_budget(runs=2, cache_hit_rate_min=0.5)
        def test_no_reports(latency):
            latency.measure(agent_call)

        @pytest.mark.latency_budget(cache_hit_rate_min=80)
        def test_a_percentage_is_a_share(latency):
            latency.measure(agent_call)
        """
    )
    result = agent.runpytest_subprocess()
    result.assert_outcomes(passed=2, failed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "latency budget not met over 3 runs:",
            "  cache_hit_rate = 45% < minimum 80%",
            "measured:",
            "  model n=3 *",
            "  cache_hit_rate n=3       45%  | ≥ 80% breach",
        ]
    )
    result.stdout.fnmatch_lines(["  cache_hit_rate ≥ 50%: no model call reported cache-read and input tokens*"])
    result.stdout.fnmatch_lines(["*cache_hit_rate_min must be a share from 0 to 1 (0.8 for 80 %), got 80*"])
    result.stdout.fnmatch_lines(
        ["PASS *test_cache.py::test_warm (3 runs)", "    model n=3 *", "    cache_hit_rate n=3       45%  | ≥ 40% pass"]
    )
    result.stdout.fnmatch_lines(["PASS *test_cache.py::test_at_the_floor (3 runs)"])


BASELINE_TEST = """
import pytest
from agent_helpers import agent_call

@pytest.mark.latency_budget(runs=30, ttft_p50_ms=5000)
def test_chat(latency):
    latency.measure(lambda: agent_call(ttft_s={ttft_s}, gaps_s=()))
"""


def _main_results(path: Path, ttft_ms: float) -> None:
    """main's run, written by hand so the baseline's values are exact: 30 runs, TTFT ``ttft_ms``."""
    group = {"ttft": [ttft_ms] * 30, "e2e": [ttft_ms + 1] * 30, "model": [ttft_ms] * 30}
    path.write_text(
        json.dumps({"agentlat_results": 1, "source": "pytest", "groups": {"test_chat.py::test_chat": group}})
    )


def test_a_branch_slower_than_main_fails_and_the_summary_says_by_how_much(agent: pytest.Pytester) -> None:
    agent.makepyfile(test_chat=BASELINE_TEST.format(ttft_s=0.06))
    _main_results(agent.path / "main.json", 10.0)
    result = agent.runpytest_subprocess("--agentlat-baseline=main.json", "--agentlat-summary=summary.md",
                                        "--agentlat-results=branch.json")  # fmt: skip
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "slower than the baseline over 30 runs:",
        "  TTFT p50 10 ms → * ms (+* ms, 95% interval +* ms to +* ms), more than the margin 1 ms (against main.json)",
        "  E2E p50 11 ms → * more than the margin 1.1 ms (against main.json)",
        "SLOWER       test_chat.py::test_chat (30 runs)",
    ])  # fmt: skip
    summary = (agent.path / "summary.md").read_text()
    assert "### agentlat latency budgets: ✅ pass\n\n1 test measured\n" in summary
    assert "### agentlat against the baseline: ❌ slower" in summary
    assert "against results file main.json · margin 10% · 3 slower, 0 insufficient data, 0 passed" in summary
    assert "| ❌ slower | `test_chat.py::test_chat` | TTFT p50 | 10 ms |" in summary
    saved = json.loads((agent.path / "branch.json").read_text())["groups"]["test_chat.py::test_chat"]
    assert len(saved["ttft"]) == 30 and min(saved["ttft"]) >= 60.0  # a sleep never ends early


def test_a_branch_as_fast_as_main_passes_within_the_margin(agent: pytest.Pytester) -> None:
    agent.makepyfile(test_chat=BASELINE_TEST.format(ttft_s=0.01))
    _main_results(agent.path / "main.json", 500.0)  # main was far slower: the branch is faster, never a regression
    result = agent.runpytest_subprocess("--agentlat-baseline=main.json", "--agentlat-margin=0ms")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["    pass: TTFT p50 500 ms → * ms (-4* ms, 95% interval -* ms to -* ms), not surely more *"]
    )


def test_a_bad_baseline_is_a_usage_error(agent: pytest.Pytester) -> None:
    agent.makepyfile(test_chat=BASELINE_TEST.format(ttft_s=0.01))
    missing = agent.runpytest_subprocess("--agentlat-baseline=nope.json")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*nope.json: no such results file; write one with *--agentlat-results*"])
    _main_results(agent.path / "main.json", 10.0)
    margin = agent.runpytest_subprocess("--agentlat-baseline=main.json", "--agentlat-margin=lots")
    assert margin.ret == pytest.ExitCode.USAGE_ERROR
    margin.stderr.fnmatch_lines(["*margin 'lots': give a percentage of the baseline (10%) or a duration*"])
