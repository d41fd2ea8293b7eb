"""Alert rules files: the model, validation errors with line, field and expectation, and the docs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentlat.alerts.message import condition
from agentlat.alerts.receivers import missing_variables, resolved_url
from agentlat.alerts.rules import (
    DEFAULT_BURN_WINDOWS,
    AlertRulesError,
    BurnRate,
    Drift,
    Floor,
    Threshold,
)
from agentlat.alerts.rules_file import ALL_FIELDS, load_rules, parse_rules
from agentlat.cli.alerts import alerts_app
from agentlat.shared.measures import RATIO_MIN_SAMPLES
from agentlat.shared.yamlfile import WatchedFile

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "alerts.yaml"

BASE = """\
version: 1
receivers:
  oncall: {type: slack, url: "${SLACK_URL}"}
rules:
  - alert: TTFTHigh
    type: threshold
    metric: ttft
    percentile: p95
    threshold: 800ms
    window: 5m
    by: [route]
"""


def rules_with(extra: str) -> str:
    """BASE with ``extra`` lines added to its rule."""
    return BASE + "".join(f"    {line}\n" for line in extra.splitlines())


def test_the_example_file_is_valid_and_complete() -> None:
    config = load_rules(EXAMPLE)
    kinds = [(r.alert, r.severity, r.kind) for r in config.rules]
    assert kinds == [
        ("ChatTTFTHigh", "warning", "threshold"),
        ("ChatTTFTHigh", "critical", "threshold"),
        ("ToolLatencyDrift", "warning", "drift"),
        ("ModelLatencyWeeklyDrift", "warning", "drift"),
        ("SupportE2ESLOBurn", "critical", "burn_rate"),
        ("SupportE2ESLOBurn", "warning", "burn_rate"),
    ]
    assert [r.name for r in config.receivers] == ["oncall", "audit"] and len(config.silences) == 1
    assert {f for f in ALL_FIELDS if f in EXAMPLE.read_text()} >= {"keep_firing_for", "baseline", "slo", "windows"}


def test_a_rule_parses_with_units_lines_and_defaults() -> None:
    config = parse_rules(rules_with("for: 2m\nkeep_firing_for: 90s\nannotations: {summary: 'slow on {route}'}"))
    [rule] = config.rules
    assert rule.spec == Threshold("p95", 800.0, 300)
    assert (rule.for_seconds, rule.keep_firing_for, rule.min_samples, rule.line) == (120, 90, 200, 5)
    assert rule.alert_labels({"route": "/chat"}) == {"alertname": "TTFTHigh", "severity": "warning", "route": "/chat"}
    assert (config.evaluation_interval, config.evaluation_delay, config.notify.group_wait) == (60, 60, 30)


def test_drift_and_burn_rate_rules() -> None:
    text = """\
rules:
  - {alert: D, type: drift, metric: tool, window: 15m, baseline: {weeks: 4}, ratio: 1.5, floor: 0}
  - {alert: B, type: burn_rate, metric: e2e, slo: {objective: 99.9%, threshold: 2s}}
"""
    drift, page, ticket = parse_rules(text).rules
    assert drift.spec == Drift("p99", 900, 1.5, 0.0, 0, 4, 2)
    assert drift.spec.baseline_ends(10_000_000) == [10_000_000 - k * 7 * 86400 for k in (1, 2, 3, 4)]
    assert (page.severity, ticket.severity) == ("critical", "warning")
    assert isinstance(page.spec, BurnRate) and page.spec.windows == DEFAULT_BURN_WINDOWS[:2]
    assert ticket.spec.windows == DEFAULT_BURN_WINDOWS[2:] and ticket.spec.budget == pytest.approx(0.001)
    assert (page.min_samples, page.window) == (100, 6 * 3600)


DURATION = "expected a duration > 0: milliseconds (800), or a string with a unit ('800ms', '1.5s')"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE.replace("version: 1", "version: 1\nevalution_interval: 1m"),
         "r.yaml:2: evalution_interval: unknown field; expected one of version, evaluation_interval"),
        (BASE.replace("type: threshold", "type: thresold"),
         "r.yaml:6: rules[0].type: expected threshold or drift or burn_rate, got 'thresold'"),
        (BASE.replace("    threshold: 800ms\n", ""),
         "r.yaml:5: rules[0].threshold: expected a value (required in a threshold rule)"),
        (BASE.replace("800ms", "fast"), f"r.yaml:9: rules[0].threshold: {DURATION}, got 'fast'"),
        (BASE.replace("window: 5m", "window: 90s"),
         "r.yaml:10: rules[0].window: expected a duration in whole minutes such as '5m', '1h' or '3d', got '90s'"),
        (BASE.replace("p95", "p90"), "r.yaml:8: rules[0].percentile: expected p50 or p95 or p99, got 'p90'"),
        (BASE.replace("metric: ttft", "metric: latency"),
         "r.yaml:7: rules[0].metric: expected one of e2e, ttft, itl, decode, model, tool, agent, cache_hit_rate, got"
         " 'latency'"),
        (BASE.replace("metric: ttft", "metric: e2e").replace("[route]", "[model]"),
         "r.yaml:11: rules[0].by: expected a list of names from service, route, agent, each once, got 'model'"),
        (rules_with("match: {route: /a}"),
         "r.yaml:12: rules[0].match.route: expected dimensions of ttft (service, route, agent, model) not also in by"),
        (rules_with("labels: {severity: page}"),
         "r.yaml:12: rules[0].labels.severity: expected labels other than alertname, severity and the rule's"),
        (rules_with("annotations: {summary: 'slow on {rout}'}"),
         "r.yaml:12: rules[0].annotations.summary: expected placeholders naming the alert's labels"),
        (rules_with("for: soon"), "r.yaml:12: rules[0].for: expected a duration such as '30s', '5m', '1h', '3d'"),
        (rules_with("min_samples: 0"), "r.yaml:12: rules[0].min_samples: expected a whole number from 1 to 1,000,000"),
        (rules_with("receivers: [pager]"),
         "r.yaml:12: rules[0].receivers: expected a list of names from oncall, each once, got 'pager'"),
        (rules_with("window: 10m"), "r.yaml:12: not valid YAML: duplicate key 'window' (first on line 10)"),
        (BASE.replace("type: slack", "type: email"), "r.yaml:3: receivers.oncall.type: expected slack or webhook"),
        (BASE.replace('"${SLACK_URL}"', "hooks.slack.com/x"),
         "r.yaml:3: receivers.oncall.url: expected an http:// or https:// URL, or ${VAR}"),
        (BASE + "notify: {group_wait: later}\n", "r.yaml:12: notify.group_wait: expected a duration such as"),
        (BASE + "silences:\n  - matchers: {route: /a}\n", "r.yaml:13: silences[0].ends: expected a value"),
        (BASE + "silences:\n  - {matchers: {route: /a}, ends: tomorrow}\n",
         "r.yaml:13: silences[0].ends: expected an ISO-8601 time such as 2026-12-24T18:00:00Z, got 'tomorrow'"),
        (BASE + BASE[BASE.index("  - alert"):],
         "r.yaml:12: rules[1]: expected a rule that differs from the one on line 5 in alert, severity or match"),
        ("rules: []\n", "r.yaml:1: rules: expected a list of at least one rule"),
        ("", "r.yaml:1: the file: expected alert rules"),
    ],
)  # fmt: skip
def test_mistakes_name_the_line_the_field_and_what_was_expected(text: str, expected: str) -> None:
    with pytest.raises(AlertRulesError) as raised:
        parse_rules(text, "r.yaml")
    assert expected in str(raised.value)


DRIFT = """\
rules:
  - alert: Drift
    type: drift
    metric: tool
    window: 15m
    baseline: {windows: 12}
    ratio: 1.5
    floor: 200ms
"""
BURN = """\
rules:
  - alert: Burn
    type: burn_rate
    metric: e2e
    slo: {objective: 0.99, threshold: 2s}
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DRIFT.replace("1.5", "0.5"), "r.yaml:7: rules[0].ratio: expected a number above 1 (1.5: 50 % slower), got"),
        (DRIFT.replace("{windows: 12}", "{windows: 12, weeks: 2}"),
         "r.yaml:6: rules[0].baseline: expected exactly one of windows (the last N windows) or weeks"),
        (DRIFT.replace("{windows: 12}", "{windows: 4, min_windows: 5}"),
         "r.yaml:6: rules[0].baseline.min_windows: expected a whole number from 1 to 4, got 5"),
        (DRIFT.replace("floor: 200ms", "floor: -3"), "r.yaml:8: rules[0].floor: expected a duration > 0"),
        (DRIFT + "    severity: page\n", "r.yaml:9: rules[0].severity: expected critical or warning or info, got"),
        (BURN.replace("0.99", "99"),
         "r.yaml:5: rules[0].slo.objective: expected a fraction (0.995) or a percentage ('99.5%') between 0 and 1"),
        (BURN + "    windows: [{long: 1h, short: 5m, factor: 200}]\n",
         "r.yaml:6: rules[0].windows[0].factor: expected a factor of at most 100: a higher rate needs"),
        (BURN + "    windows: [{long: 5m, short: 1h, factor: 2}]\n",
         "r.yaml:6: rules[0].windows[0].short: expected a window shorter than long, got '1h'"),
        (BURN + "    severity: critical\n", "r.yaml:6: rules[0].severity: unknown field; expected one of alert"),
        (BURN.replace("slo: {objective: 0.99, threshold: 2s}", "slo: {objective: 0.99}"),
         "r.yaml:5: rules[0].slo.threshold: expected a value (this field is required)"),
    ],
)  # fmt: skip
def test_drift_and_burn_rate_mistakes(text: str, expected: str) -> None:
    with pytest.raises(AlertRulesError) as raised:
        parse_rules(text, "r.yaml")
    assert expected in str(raised.value)


def test_every_rule_with_a_mistake_is_reported_at_once() -> None:
    text = BASE.replace("p95", "p90") + BASE[BASE.index("  - alert") :].replace("5m", "5 minutes")
    with pytest.raises(AlertRulesError) as raised:
        parse_rules(text, "r.yaml")
    assert [p.split(":")[1] for p in raised.value.problems] == ["8", "17"]


def test_secrets_come_from_the_environment_only_where_alerts_are_sent() -> None:
    config = parse_rules(BASE)
    assert missing_variables(config, {}) == ["SLACK_URL"]
    [oncall] = config.receivers
    assert resolved_url(config, oncall, {"SLACK_URL": "https://hooks.example/x"}) == "https://hooks.example/x"
    with pytest.raises(AlertRulesError, match="the environment variable SLACK_URL is not set"):
        resolved_url(config, oncall, {})


def test_every_rule_field_is_documented() -> None:
    docs = (ROOT / "docs" / "alerts.md").read_text()
    missing = [name for name in ALL_FIELDS if not re.search(rf"`(?:[\w\[\]]+\.)*{name}`", docs)]  # `slo.objective`
    assert not missing, f"docs/alerts.md does not describe: {missing}"
    for kind in ("threshold", "drift", "burn_rate"):
        assert re.search(rf"^#+ .*`{kind}`", docs, re.M), kind


def test_check_prints_the_rules_or_every_mistake(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(alerts_app, ["check", str(EXAMPLE)], env={"COLUMNS": "200"})
    assert ok.exit_code == 0, ok.output
    assert "6 alert rules are valid" in ok.output and "TTFT p95 > 1,200 ms over 5m by route" in ok.output
    broken = tmp_path / "broken.yaml"
    broken.write_text(BASE.replace("800ms", "fast").replace("p95", "p90"))
    bad = runner.invoke(alerts_app, ["check", str(broken)], env={"COLUMNS": "200"})
    assert bad.exit_code == 1
    assert f"{broken}:8: rules[0].percentile: expected p50 or p95 or p99, got 'p90'" in bad.output
    assert "1 problem" in bad.output


def test_the_server_rereads_a_changed_file_and_keeps_the_last_good_one(tmp_path: Path) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text(BASE)
    source = WatchedFile(path, load_rules)
    assert not source.changed()
    path.write_text(BASE.replace("800ms", "900ms"))
    os.utime(path, ns=(1, 1))
    assert source.changed() and source.error is None
    assert source.value.rules[0].spec.threshold_ms == 900.0  # type: ignore[union-attr]
    path.write_text(BASE.replace("800ms", "fast"))
    os.utime(path, ns=(2, 2))
    assert source.changed() and isinstance(source.error, AlertRulesError)
    assert source.value.rules[0].spec.threshold_ms == 900.0  # type: ignore[union-attr]
    assert not source.changed() and isinstance(source.error, AlertRulesError)  # kept until the next change


def test_a_missing_or_unreadable_rules_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(
        AlertRulesError, match=re.escape("no such alert rules file; examples/alerts.yaml is a complete one")
    ):
        load_rules(tmp_path / "absent.yaml")
    with pytest.raises(AlertRulesError, match="cannot read the alert rules file"):
        load_rules(tmp_path)  # a directory


HIT_RATE = """\
rules:
  - alert: CacheCold
    type: threshold
    metric: cache_hit_rate
    threshold: 60%
    window: 30m
    match: {route: /chat}
"""


def test_a_hit_rate_rule_has_a_floor_and_no_percentile() -> None:
    [rule] = parse_rules(HIT_RATE).rules
    assert (rule.spec, rule.kind, rule.min_samples) == (Floor(0.6, 1800), "threshold", RATIO_MIN_SAMPLES)
    assert condition(rule) == "cache hit rate < 60% over 30m"
    assert parse_rules(HIT_RATE.replace("60%", "0.45")).rules[0].spec == Floor(0.45, 1800)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (HIT_RATE.replace("60%", "150%"), "r.yaml:5: rules[0].threshold: expected a share from 0 to 1, or a"),
        (HIT_RATE.replace("60%", "fast"), "r.yaml:5: rules[0].threshold: expected a share from 0 to 1"),
        (HIT_RATE + "    percentile: p95\n", "r.yaml:8: rules[0].percentile: expected none (a ratio has no"),
        (HIT_RATE.replace("type: threshold", "type: drift").replace("threshold: 60%", "ratio: 2\n    floor: 1ms\n"
                                                                    "    baseline: {windows: 3}"),
         "r.yaml:3: rules[0].type: expected threshold (a cache hit rate fires below its threshold), got 'drift'"),
        (HIT_RATE.replace("match: {route: /chat}", "match: {tool: x}"), "r.yaml:7: rules[0].match.tool: expected"),
    ],
)  # fmt: skip
def test_hit_rate_mistakes(text: str, expected: str) -> None:
    with pytest.raises(AlertRulesError) as raised:
        parse_rules(text, "r.yaml")
    assert expected in str(raised.value)
