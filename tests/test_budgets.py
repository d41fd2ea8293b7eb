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
    TOP_LEVEL_KEYS,
    BudgetError,
    Report,
    Share,
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
from agentlat.shared.measures import LATENCIES, METRIC_NAMES, PERCENTILES, RATIO_METRICS, percent
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
    fields = ("dimension", "name", "source", "metric", "percentile", "budget", "actual", "status")
    return [tuple(getattr(v, f) for f in fields) for v in report.verdicts]


# --- the model ------------------------------------------------------------------------


def test_a_file_parses_into_thresholds_with_units_and_lines() -> None:
    budgets = parse_budgets(FILE, "b.yaml")
    assert (budgets.type, budgets.service) == ("rag", "docs-bot")
    assert budgets.min_samples == {"p50": 30, "p95": 50, "p99": 1000}  # only p95 overridden
    assert {k: (t.limit, t.line) for k, t in budgets.default.items()} == {
        ("ttft", "p50"): (1000.0, 6),
        ("ttft", "p95"): (2500.0, 6),
        ("e2e", "p95"): (10_000.0, 7),
    }
    assert budgets.metric_order[:2] == ("ttft", "e2e")  # rag: primary TTFT, secondary E2E


def test_routes_override_the_default_and_null_drops_it() -> None:
    budgets = parse_budgets(FILE, "b.yaml")
    ask = [(t.metric, t.percentile, t.limit) for t in budgets.thresholds_for("route", "/ask")]
    assert ask == [("ttft", "p50", 1000.0), ("ttft", "p95", 1800.0)]
    summarise = [(t.metric, t.percentile, t.limit) for t in budgets.thresholds_for("route", "/summarise")]
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
        own = {(t.metric, t.percentile): t.limit for t in budgets.thresholds_for(dimension, name)}
        looked_up = {
            (m, p): ms for m in LATENCIES for p in PERCENTILES if (ms := budget_for(served, dimension, name, m, p))
        }
        assert looked_up == own, (dimension, name)
    assert budget_for(served, "route", "", "ttft", "p95") == 2500.0  # all routes: the default
    assert budget_for(served, "agent", "writer", "tool", "p50") is None  # not listed: nothing applies
    assert budget_for(served, "route", "/ask", "ttft", "p95", service="docs-bot") == 1800.0
    assert budget_for(served, "route", "/ask", "ttft", "p95", service="other") is None  # the file budgets docs-bot


def test_budget_metrics_are_query_api_and_rollup_metrics() -> None:
    assert set(LATENCIES) <= set(API_METRICS)
    assert set(LATENCIES) <= set(ROLLUP_METRICS)  # the server's long windows read rollups


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
            "b.yaml:1: min_samples: expected a mapping of p50/p95/p99/cache_hit_rate to counts, got 100",
        ),
        ("agents:\n  7: {e2e: {p50: 1}}\n", "b.yaml:2: agents: expected agent names as strings (quote numbers), got 7"),
        (
            "routes:\n  /a: {e2e: {p50: 1}}\n  /a: {e2e: {p50: 2}}\n",
            "b.yaml:3: not valid YAML: duplicate key '/a' (first on line 2)",
        ),
        (
            "routes:\n  /a: 300\n",
            "b.yaml:2: routes./a: expected a mapping of metric (ttft, itl, e2e, model, tool) to percentiles, or "
            "cache_hit_rate to min, got 300",
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
    assert f"Primary metric {METRIC_NAMES[agent_type.primary]}" in template(kind)


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
    for name in (*TOP_LEVEL_KEYS, *LATENCIES, *RATIO_METRICS, *AGENT_TYPES, "min"):
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
    assert (over.missed_so_far, under.missed_so_far) == (True, False)
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


# --- the prompt-cache hit rate: a floor -----------------------------------------------

HIT_RATE_FILE = """\
type: chat
min_samples: {p50: 10, cache_hit_rate: 3}
default:
  ttft: {p50: 500}
  cache_hit_rate: {min: 0.6}
routes:
  /chat:
    cache_hit_rate: {min: 80%}
  /batch:
    cache_hit_rate: {min: null}
  /quiet:
    cache_hit_rate: {min: 0.5}
agents:
  planner:
    cache_hit_rate: {min: 0.4}
"""


def test_a_hit_rate_budget_is_a_floor_keyed_min() -> None:
    budgets = parse_budgets(HIT_RATE_FILE, "h.yaml")
    assert {k: (t.limit, t.line) for k, t in budgets.default.items()} == {
        ("ttft", "p50"): (500.0, 4),
        ("cache_hit_rate", "min"): (0.6, 5),
    }
    chat = [(t.metric, t.percentile, t.limit) for t in budgets.thresholds_for("route", "/chat")]
    assert chat == [("ttft", "p50", 500.0), ("cache_hit_rate", "min", 0.8)]  # the type's metrics first, the rate last
    assert [t.metric for t in budgets.thresholds_for("route", "/batch")] == ["ttft"]  # null drops the default
    assert budgets.min_samples == {"p50": 10, "p95": 200, "p99": 1000, "cache_hit_rate": 3}
    assert budgets.queries() == [("route", "ttft"), ("route", "cache_hit_rate"), ("agent", "cache_hit_rate")]
    assert budgets.raw_thresholds()["routes"]["/chat"] == {"cache_hit_rate": {"min": 0.8}}
    served = report_dict(budgets, Report(()), {"length": "1h"})
    assert budget_for(served, "route", "/chat", "cache_hit_rate", "min") == 0.8
    assert budget_for(served, "route", "/other", "cache_hit_rate", "min") == 0.6
    assert budget_for(served, "route", "/batch", "cache_hit_rate", "min") is None


def test_the_hit_rate_minimum_defaults_to_20_calls_and_shows_only_where_budgeted() -> None:
    assert parse_budgets("routes: {/chat: {cache_hit_rate: {min: 0.8}}}\n", "b.yaml").min_samples == {
        "p50": 30, "p95": 200, "p99": 1000, "cache_hit_rate": 20,
    }  # fmt: skip
    assert "cache_hit_rate" not in parse_budgets("default: {ttft: {p50: 500}}\n", "b.yaml").min_samples


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "default:\n  cache_hit_rate: {min: 1.5}\n",
            "b.yaml:2: default.cache_hit_rate.min: expected a share from 0 to 1, or a percentage (0.6, 60%), got 1.5",
        ),
        ("default:\n  cache_hit_rate: {min: fast}\n", "default.cache_hit_rate.min: expected a share from 0 to 1"),
        ("default:\n  cache_hit_rate: {min: 800ms}\n", "got '800ms'"),
        ("default:\n  cache_hit_rate: {min: yes}\n", "a share from 0 to 1, or a percentage (0.6, 60%), got True"),
        (
            "routes:\n  /chat:\n    cache_hit_rate:\n      p95: 0.5\n",
            "b.yaml:4: routes./chat.cache_hit_rate.p95: expected min (a hit rate has a floor, no percentiles)",
        ),
        (
            "routes:\n  /chat:\n    cache_hit_rate: {max: 0.5}\n",
            "b.yaml:3: routes./chat.cache_hit_rate.max: unknown field; expected one of min",
        ),
        (
            "default:\n  cache_hit_rate: 0.8\n",
            "b.yaml:2: default.cache_hit_rate: expected {min: share}, e.g. {min: 0.8} or {min: 80%}, got 0.8",
        ),
        (
            "default:\n  cache_hit_rate: {min: null}\n",
            "b.yaml:2: default.cache_hit_rate.min: expected a share (null only drops a default in a route)",
        ),
        (
            "min_samples: {cache_hit_rate: 0}\ndefault: {ttft: {p50: 1}}\n",
            "b.yaml:1: min_samples.cache_hit_rate: expected a whole number of model calls reporting cache tokens ≥ 1",
        ),
        (
            "default:\n  ttft: {min: 0.5}\n",
            "b.yaml:2: default.ttft.min: unknown field; expected one of p50, p95, p99",
        ),
    ],
)
def test_hit_rate_mistakes_name_file_line_field_and_expectation(text: str, message: str) -> None:
    with pytest.raises(BudgetError) as caught:
        parse_budgets(text, "b.yaml")
    assert message in str(caught.value)


def test_a_hit_rate_under_its_floor_breaches_at_it_passes_and_no_data_is_never_zero() -> None:
    budgets = parse_budgets(HIT_RATE_FILE, "h.yaml")
    measured = {
        ("route", "cache_hit_rate"): {
            "/chat": Share(3, 1800 / 4000),  # 1000 in / 800 cached, 1000 / 0, 2000 / 1000: 0.45 < 0.8
            "/search": Share(5, 0.6),  # at the default floor: passes
            "/rare": Share(2, 0.1),  # under it, but 2 < 3 calls
            "/empty": Share(4, None),  # calls reported cache tokens, but no input tokens: no rate
        },
        ("route", "ttft"): {"/chat": stats(40, 300.0, 400.0, 450.0)},
        ("agent", "cache_hit_rate"): {"planner": Share(3, 0.4)},
    }
    report = evaluate(budgets, measured)
    assert verdicts(report) == [
        ("route", "/chat", "default", "ttft", "p50", 500.0, 300.0, "pass"),
        ("route", "/chat", "route", "cache_hit_rate", "min", 0.8, pytest.approx(0.45), "breach"),
        ("route", "/quiet", "route", "cache_hit_rate", "min", 0.5, None, "insufficient"),  # listed, no cache reports
        ("agent", "planner", "agent", "cache_hit_rate", "min", 0.4, 0.4, "pass"),
        ("route", "/empty", "default", "cache_hit_rate", "min", 0.6, None, "insufficient"),
        ("route", "/rare", "default", "cache_hit_rate", "min", 0.6, 0.1, "insufficient"),
        ("route", "/search", "default", "cache_hit_rate", "min", 0.6, 0.6, "pass"),
    ]
    assert [v.min_samples for v in report.verdicts[1:]] == [3] * 6
    assert [v.missed_so_far for v in report.verdicts] == [False, False, False, False, False, True, False]
    assert report.status == "breach"
    # a route without any calls reporting cache tokens gets no default hit-rate verdict at all
    assert "/batch" not in {v.name for v in report.verdicts}


def test_hit_rate_verdicts_read_as_floors_in_every_format() -> None:
    budgets = parse_budgets(HIT_RATE_FILE, "h.yaml")
    breach = Verdict("route", "/chat", "route", "cache_hit_rate", "min", 0.8, 0.45, 3, 3, "breach", 8)
    under = Verdict("route", "/rare", "default", "cache_hit_rate", "min", 0.6, 0.1, 2, 3, "insufficient", 5)
    none = Verdict("route", "/quiet", "route", "cache_hit_rate", "min", 0.5, None, 0, 3, "insufficient", 12)
    report = Report((breach, under, none))
    window = {"length": "1h", "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}
    assert budget_format.counted(report) == "1 breached, 2 insufficient data (1 under its minimum so far), 0 passed"
    markdown = budget_format.render_markdown(budgets, report, window)
    assert "| ❌ breach | route `/chat` | cache hit rate | ≥ 80% | 45% | 3 |" in markdown
    assert "| ⚠️ insufficient data, under so far | route `/rare` | cache hit rate | ≥ 60% (default) | 10% |" in markdown
    assert "| ⚠️ insufficient data | route `/quiet` | cache hit rate | ≥ 50% | — | 0 (needs 3) |" in markdown
    cases = list(ET.fromstring(budget_format.render_junit(budgets, report, window)).iter("testcase"))
    assert [c.get("name") for c in cases] == ["cache hit rate ≥ 80%", "cache hit rate ≥ 60% (default)",
                                              "cache hit rate ≥ 50%"]  # fmt: skip
    failure, skipped, empty = (c[0] for c in cases)
    assert failure.get("message") == "cache hit rate of route /chat is 45%, under its minimum of 80%"
    assert failure.text == f"{failure.get('message')} (3 model calls reporting cache tokens)"
    assert skipped.get("message") == (
        "insufficient data: 2 model calls reporting cache tokens, cache hit rate needs 3; "
        "under its minimum so far (10% against 60%)"
    )
    assert empty.get("message") == "insufficient data: 0 model calls reporting cache tokens, cache hit rate needs 3"


def test_a_share_reads_to_a_tenth_of_a_percent_and_never_as_the_floor_it_misses() -> None:
    assert [percent(v) for v in (0.8, 0.4567, 0.425, 1.0, 0.0, None)] == ["80%", "45.7%", "42.5%", "100%", "0%", "—"]
    assert [percent(v, 0.8) for v in (0.79996, 0.7996, 0.8, 0.80004, 0.42)] == [
        "79.996%", "79.96%", "80%", "80.004%", "42%",
    ]  # fmt: skip
