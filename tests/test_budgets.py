"""Budgets files: the model, validation errors with line numbers, and the pure evaluation."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentlat.budgets import report as budget_format
from agentlat.budgets.model import (
    AGENT_TYPES,
    METRICS,
    PERCENTILES,
    TOP_LEVEL_KEYS,
    BudgetError,
    Report,
    Stats,
    Verdict,
    budget_for,
    evaluate,
    exit_code,
    load_budgets,
    parse_budgets,
    report_dict,
)
from agentlat.budgets.templates import template
from agentlat.cli.budget import AgentKind
from agentlat.store import METRICS as API_METRICS
from agentlat.store import ROLLUP_METRICS

ROOT = Path(__file__).resolve().parents[1]

FILE = """\
version: 1
type: rag
service: docs-bot
min_samples: {p95: 50}
default:
  ttft: {p50: 1s, p95: 2500ms}
  e2e: {p95: 10s}
routes:
  /ask:
    ttft: {p95: 1800}
    e2e: {p95: null}
  /summarise:
    itl: {p99: 120.5}
agents:
  retriever:
    tool: {p50: 200, p99: 900}
"""


DURATION = "expected a duration > 0: milliseconds (800), or a string with a unit ('800ms', '1.5s')"


def stats(count: int, p50: float, p95: float, p99: float) -> Stats:
    return Stats(count, p50, p95, p99)


def verdicts(report: Report) -> list[tuple]:
    fields = ("dimension", "name", "source", "metric", "percentile", "budget_ms", "actual_ms", "status")
    return [tuple(getattr(v, f) for f in fields) for v in report.verdicts]


# --- the model ------------------------------------------------------------------------


def test_a_file_parses_into_thresholds_with_units_and_lines() -> None:
    budgets = parse_budgets(FILE, "b.yaml")
    assert (budgets.type, budgets.service) == ("rag", "docs-bot")
    assert budgets.min_samples == {"p50": 30, "p95": 50, "p99": 1000}  # only p95 overridden
    assert {k: (t.budget_ms, t.line) for k, t in budgets.default.items()} == {
        ("ttft", "p50"): (1000.0, 6),
        ("ttft", "p95"): (2500.0, 6),
        ("e2e", "p95"): (10_000.0, 7),
    }
    assert budgets.metric_order[:2] == ("ttft", "e2e")  # rag: primary TTFT, secondary E2E


def test_routes_override_the_default_and_null_drops_it() -> None:
    budgets = parse_budgets(FILE, "b.yaml")
    ask = [(t.metric, t.percentile, t.budget_ms) for t in budgets.thresholds_for("route", "/ask")]
    assert ask == [("ttft", "p50", 1000.0), ("ttft", "p95", 1800.0)]
    summarise = [(t.metric, t.percentile, t.budget_ms) for t in budgets.thresholds_for("route", "/summarise")]
    assert summarise == [
        ("ttft", "p50", 1000.0),
        ("ttft", "p95", 2500.0),
        ("e2e", "p95", 10_000.0),
        ("itl", "p99", 120.5),
    ]
    unlisted = [(t.metric, t.percentile) for t in budgets.thresholds_for("route", "/other")]
    assert unlisted == [("ttft", "p50"), ("ttft", "p95"), ("e2e", "p95")]


def test_agents_get_only_their_own_budgets() -> None:
    budgets = parse_budgets(FILE, "b.yaml")
    assert [(t.metric, t.percentile) for t in budgets.thresholds_for("agent", "retriever")] == [
        ("tool", "p50"),
        ("tool", "p99"),
    ]
    with pytest.raises(BudgetError, match="no budgets for agent 'writer' \\(agents listed: retriever\\)"):
        budgets.thresholds_for("agent", "writer")


def test_queries_name_each_metric_per_dimension_once() -> None:
    assert parse_budgets(FILE, "b.yaml").queries() == [
        ("route", "ttft"),
        ("route", "e2e"),
        ("route", "itl"),
        ("agent", "tool"),
    ]


def test_raw_thresholds_keep_nulls_for_the_dashboard() -> None:
    raw = parse_budgets(FILE, "b.yaml").raw_thresholds()
    assert raw["default"] == {"ttft": {"p50": 1000.0, "p95": 2500.0}, "e2e": {"p95": 10_000.0}}
    assert raw["routes"]["/ask"] == {"ttft": {"p95": 1800.0}, "e2e": {"p95": None}}
    assert raw["agents"] == {"retriever": {"tool": {"p50": 200.0, "p99": 900.0}}}


def test_the_plain_data_look_up_is_the_same_rule() -> None:
    """What the dashboard looks up in /api/v1/budgets is what the file's own evaluation applies."""
    budgets = parse_budgets(FILE, "b.yaml")
    served = report_dict(budgets, Report(()), {"length": "1h"})
    for dimension, name in [("route", "/ask"), ("route", "/summarise"), ("route", "/other"), ("agent", "retriever")]:
        own = {(t.metric, t.percentile): t.budget_ms for t in budgets.thresholds_for(dimension, name)}
        looked_up = {
            (m, p): ms for m in METRICS for p in PERCENTILES if (ms := budget_for(served, dimension, name, m, p))
        }
        assert looked_up == own, (dimension, name)
    assert budget_for(served, "route", "", "ttft", "p95") == 2500.0  # all routes: the default
    assert budget_for(served, "agent", "writer", "tool", "p50") is None  # not listed: nothing applies
    assert budget_for(served, "route", "/ask", "ttft", "p95", service="docs-bot") == 1800.0
    assert budget_for(served, "route", "/ask", "ttft", "p95", service="other") is None  # the file budgets docs-bot


def test_budget_metrics_are_query_api_and_rollup_metrics() -> None:
    assert set(METRICS) <= set(API_METRICS)
    assert set(METRICS) <= set(ROLLUP_METRICS)  # the server's long windows read rollups


# --- validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("default:\n  ttft: {p50: [1\n", "b.yaml:3: not valid YAML"),
        ("default:\n  ttft: {p50: 1}\ncolour: red\n", "b.yaml:3: colour: unknown field; expected one of version, type"),
        (
            "default:\n  ttfb: {p50: 1}\n",
            "b.yaml:2: default.ttfb: unknown field; expected one of ttft, itl, e2e, model, tool",
        ),
        (
            "routes:\n  /chat:\n    ttft:\n      p90: 5\n",
            "b.yaml:4: routes./chat.ttft.p90: unknown field; expected one of p50, p95, p99",
        ),
        (
            "routes:\n  /chat:\n    ttft: {p95: fast}\n",
            f"b.yaml:3: routes./chat.ttft.p95: {DURATION}, got 'fast'",
        ),
        ("default:\n  e2e:\n    p95: -5\n", "b.yaml:3: default.e2e.p95: expected a duration > 0"),
        (
            "default:\n  e2e:\n    p95: yes\n",
            f"b.yaml:3: default.e2e.p95: {DURATION}, got True",
        ),
        ("default:\n  e2e:\n    p95: 2 minutes\n", "got '2 minutes'"),
        (
            "default:\n  e2e:\n    p95: null\n",
            "b.yaml:3: default.e2e.p95: expected a duration (null only drops a default in a route)",
        ),
        (
            "type: robot\ndefault: {e2e: {p50: 1}}\n",
            "b.yaml:1: type: expected one of chat, reasoning, tools, rag, multimodal, got 'robot'",
        ),
        (
            "version: 2\ndefault: {e2e: {p50: 1}}\n",
            "b.yaml:1: version: expected 1 (the format this agentlat reads), got 2",
        ),
        ("service: 7\ndefault: {e2e: {p50: 1}}\n", "b.yaml:1: service: expected a service name, got 7"),
        (
            "min_samples:\n  p99: 0\ndefault: {e2e: {p50: 1}}\n",
            "b.yaml:2: min_samples.p99: expected a whole number of samples ≥ 1, got 0",
        ),
        (
            "min_samples: 100\ndefault: {e2e: {p50: 1}}\n",
            "b.yaml:1: min_samples: expected a mapping p50/p95/p99, got 100",
        ),
        ("agents:\n  7: {e2e: {p50: 1}}\n", "b.yaml:2: agents: expected agent names as strings (quote numbers), got 7"),
        (
            "routes:\n  /a: {e2e: {p50: 1}}\n  /a: {e2e: {p50: 2}}\n",
            "b.yaml:3: not valid YAML: duplicate key '/a' (first on line 2)",
        ),
        (
            "routes:\n  /a: 300\n",
            "b.yaml:2: routes./a: expected a mapping of metric (ttft, itl, e2e, model, tool) to percentiles, got 300",
        ),
        ("default:\n  ttft: 300\n", "b.yaml:2: default.ttft: expected a mapping of p50/p95/p99 to a duration, got 300"),
        ("", "b.yaml:1: the file: expected budgets (see `agentlat budget init`)"),
        ("default: {ttft: {p50: 1}}\n\x07\n", "b.yaml: not valid YAML: unacceptable character #x0007"),
        ("routes:\n  [a, b]: {e2e: {p50: 1}}\n", "b.yaml:2: not valid YAML: a key must be a plain value"),
        ("- a\n- b\n", "b.yaml:1: the file: expected a mapping with default, routes and/or agents, got ['a', 'b']"),
        (
            "version: 1\nroutes: {}\n",
            "b.yaml:1: the file: expected at least one budget under default, routes or agents",
        ),
    ],
)
def test_errors_name_file_line_field_and_expectation(text: str, message: str) -> None:
    with pytest.raises(BudgetError) as caught:
        parse_budgets(text, "b.yaml")
    assert message in str(caught.value)


def test_a_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(BudgetError, match="no such budgets file; `agentlat budget init` writes a starter one"):
        load_budgets(tmp_path / "nope.yaml")


def test_the_example_file_validates() -> None:
    budgets = load_budgets(ROOT / "examples" / "budgets.yaml")
    assert budgets.type == "chat" and budgets.service == "support-bot"
    assert [t.name for t in budgets.routes] == ["/support/chat", "/support/summarise"]
    assert [t.name for t in budgets.agents] == ["triage", "order-lookup"]


@pytest.mark.parametrize("kind", list(AGENT_TYPES))
def test_each_template_validates_and_budgets_its_primary_and_secondary_metric(kind: str) -> None:
    budgets = parse_budgets(template(kind), f"{kind}.yaml")
    agent_type = AGENT_TYPES[kind]
    assert budgets.type == kind
    assert {metric for metric, _ in budgets.default} == {agent_type.primary, agent_type.secondary}
    assert {pct for _, pct in budgets.default} == {"p50", "p95", "p99"}
    assert f"Primary metric {budget_format.METRIC_LABELS[agent_type.primary]}" in template(kind)


def test_the_cli_offers_every_agent_type() -> None:
    assert [k.value for k in AgentKind] == list(AGENT_TYPES)


def test_the_budget_cli_module_imports_neither_yaml_nor_httpx() -> None:
    code = "import sys, agentlat.cli.budget; print(sorted(m for m in ('yaml', 'httpx') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# --- evaluation -----------------------------------------------------------------------

EVAL_FILE = """\
min_samples: {p50: 10, p95: 100, p99: 1000}
default:
  ttft: {p50: 500, p95: 1000}
routes:
  /chat:
    ttft: {p95: 800}
    e2e: {p50: 3000}
agents:
  planner:
    e2e: {p50: 5000}
"""


def test_evaluation_gives_exact_verdicts() -> None:
    budgets = parse_budgets(EVAL_FILE, "e.yaml")
    measured = {
        ("route", "ttft"): {
            "/chat": stats(500, 450.0, 790.0, 990.0),
            "/search": stats(500, 520.0, 700.0, 900.0),
            "/rare": stats(50, 100.0, 2000.0, 3000.0),
            "": stats(900, 100.0, 100.0, 100.0),  # spans without a route are not budgeted
        },
        ("route", "e2e"): {"/chat": stats(400, 3000.0, 5000.0, 9000.0)},
        ("agent", "e2e"): {"planner": stats(9, 4000.0, 6000.0, 7000.0)},
    }
    report = evaluate(budgets, measured)
    assert verdicts(report) == [
        ("route", "/chat", "default", "ttft", "p50", 500.0, 450.0, "pass"),
        ("route", "/chat", "route", "ttft", "p95", 800.0, 790.0, "pass"),
        ("route", "/chat", "route", "e2e", "p50", 3000.0, 3000.0, "pass"),  # at the budget passes
        ("agent", "planner", "agent", "e2e", "p50", 5000.0, 4000.0, "insufficient"),  # 9 < 10 samples
        ("route", "/rare", "default", "ttft", "p50", 500.0, 100.0, "pass"),
        ("route", "/rare", "default", "ttft", "p95", 1000.0, 2000.0, "insufficient"),  # over, but 50 < 100
        ("route", "/search", "default", "ttft", "p50", 500.0, 520.0, "breach"),
        ("route", "/search", "default", "ttft", "p95", 1000.0, 700.0, "pass"),
    ]
    assert report.status == "breach"
    assert report.counts() == {"pass": 5, "breach": 1, "insufficient": 2}
    assert [v.line for v in report.verdicts[:3]] == [3, 6, 7]


def test_listed_targets_without_data_are_insufficient_defaults_are_skipped() -> None:
    report = evaluate(parse_budgets(EVAL_FILE, "e.yaml"), {})
    assert verdicts(report) == [
        ("route", "/chat", "route", "ttft", "p95", 800.0, None, "insufficient"),
        ("route", "/chat", "route", "e2e", "p50", 3000.0, None, "insufficient"),
        ("agent", "planner", "agent", "e2e", "p50", 5000.0, None, "insufficient"),
    ]
    assert [v.count for v in report.verdicts] == [0, 0, 0]
    assert report.status == "insufficient"


def test_nothing_to_judge_is_not_a_pass() -> None:
    report = evaluate(parse_budgets("default: {ttft: {p50: 500}}\n", "d.yaml"), {})
    assert report.verdicts == () and report.status == "insufficient"
    assert budget_format.counted(report) == "no route or agent had data for any budget in this window"


@pytest.mark.parametrize(
    ("status", "allow_insufficient", "code"),
    [
        ("pass", False, 0),
        ("breach", False, 1),
        ("breach", True, 1),
        ("insufficient", False, 3),
        ("insufficient", True, 0),
    ],
)
def test_exit_codes(status: str, allow_insufficient: bool, code: int) -> None:
    assert exit_code(status, allow_insufficient) == code


# --- formats (pure; the CLI tests check them on live data) ----------------------------


def _one(status: str, name: str = "/a|b") -> Report:
    return Report((Verdict("route", name, "route", "ttft", "p95", 800.0, 812.34, 250, 200, status, 4),))


@pytest.mark.parametrize(
    ("value", "text"),
    [(800.0, "800 ms"), (1234.56, "1,234.6 ms"), (19.04, "19 ms"), (0.26, "0.3 ms"), (None, "—")],
)
def test_milliseconds_format(value: float | None, text: str) -> None:
    assert budget_format.ms(value) == text


def test_markdown_escapes_table_cells() -> None:
    budgets = parse_budgets("default: {ttft: {p95: 800}}\n", "b.yaml")
    text = budget_format.render_markdown(budgets, _one("breach"), {"length": "1h", "start": "s", "end": "e"})
    assert "| ❌ breach | route `/a\\|b` | TTFT p95 | ≤ 800 ms | 812.3 ms | 250 |" in text


def test_junit_counts_and_escapes() -> None:
    budgets = parse_budgets("default: {ttft: {p95: 800}}\n", "b<1>.yaml")
    window = {"length": "1h", "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}
    root = ET.fromstring(budget_format.render_junit(budgets, _one("pass", "/a&b"), window))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "b<1>.yaml" and suite.get("timestamp") == window["end"]
    [case] = suite.findall("testcase")
    assert (case.get("classname"), case.get("name"), case.get("line")) == ("route /a&b", "TTFT p95 ≤ 800 ms", "4")
    assert list(case) == []


def test_the_docs_cover_every_field_metric_type_option_and_exit_code() -> None:
    docs = (ROOT / "docs" / "budgets.md").read_text()
    for name in (*TOP_LEVEL_KEYS, *METRICS, *AGENT_TYPES):
        assert f"`{name}`" in docs, name
    for option in ("--api", "--window", "--format", "--output", "--allow-insufficient", "--type", "--force"):
        assert f"`{option}`" in docs or f"{option} " in docs, option
    for code in range(4):
        assert f"| {code} |" in docs
    for marker_argument in ("runs", "warmup", "budgets", "route", "agent"):
        assert f"`{marker_argument}`" in docs, marker_argument


def test_too_few_samples_already_over_budget_say_so_and_keep_the_exit_code() -> None:
    budgets = parse_budgets("routes: {/chat: {ttft: {p95: 1200}}}\n", "b.yaml")
    over = Verdict("route", "/chat", "route", "ttft", "p95", 1200.0, 2940.0, 29, 30, "insufficient", 1)
    under = Verdict("route", "/chat", "route", "ttft", "p50", 1200.0, 800.0, 29, 30, "insufficient", 1)
    report = Report((over, under))
    window = {"length": "1h", "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}
    assert (over.over_so_far, under.over_so_far) == (True, False)
    assert budget_format.counted(report) == "0 breached, 2 insufficient data (1 over budget so far), 0 passed"
    markdown = budget_format.render_markdown(budgets, report, window)
    assert (
        "| ⚠️ insufficient data, over so far | route `/chat` | TTFT p95 | ≤ 1,200 ms | 2,940 ms | 29 (needs 30) |"
        in markdown
    )
    skipped = [
        c.find("skipped") for c in ET.fromstring(budget_format.render_junit(budgets, report, window)).iter("testcase")
    ]
    assert [s.get("message") for s in skipped if s is not None] == [
        "insufficient data: 29 samples, p95 needs 30; over its budget so far (2,940 ms against 1,200 ms)",
        "insufficient data: 29 samples, p50 needs 30",
    ]
    assert report.status == "insufficient" and exit_code(report.status) == 3
