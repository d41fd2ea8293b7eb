"""What alerts say: one-line summaries, dashboard links, Slack Block Kit and generic webhook bodies.

Pure functions of plain data. A notification's payload (built by the engine, kept in the
outbox) is the generic webhook body; ``slack_body`` renders the same payload for Slack
within its limits (50 blocks, 3,000 characters a section, 40,000 in all).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from agentlat.alerts.conditions import Observation
from agentlat.alerts.rules import BurnRate, Drift, Floor, Rule, format_seconds
from agentlat.shared.measures import METRIC_NAMES, RATIO_METRICS, percent

DASHBOARD_WINDOWS = ((900, "15m"), (3600, "1h"), (6 * 3600, "6h"), (86400, "24h"), (7 * 86400, "7d"))
MAX_SLACK_ALERTS = 10  # alerts shown per Slack message; the rest are counted
SECTION_LIMIT = 3000
MESSAGE_LIMIT = 40_000
ICONS = {"firing": ":rotating_light:", "resolved": ":white_check_mark:"}


def ms(value: float | None) -> str:
    """``1234.5`` -> ``'1,234 ms'``; seconds from 10 s up."""
    if value is None:
        return "n/a"
    if value >= 10_000:
        return f"{value / 1000:,.1f} s"
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.1f} ms"


def describe(rule: Rule, observation: Mapping[str, Any]) -> str:
    """One line on what the rule measured: ``TTFT p95 1,240 ms > threshold 800 ms``."""
    value, reference, facts = observation.get("value"), observation.get("reference"), observation.get("facts", {})
    name = METRIC_NAMES[rule.metric]
    if isinstance(rule.spec, BurnRate):
        return _describe_burn(rule.spec, name, facts)
    if isinstance(rule.spec, Floor):
        if value is None:
            return f"{name}: no model calls reporting cache tokens in the last {format_seconds(rule.window)}"
        sign = "<" if value < (reference or 0) else "≥"
        return f"{name} {percent(value, reference)} {sign} threshold {percent(reference)}"
    percentile = rule.spec.percentile
    if value is None:
        return f"{name} {percentile}: no samples in the last {format_seconds(rule.window)}"
    if isinstance(rule.spec, Drift):
        if reference is None:
            return f"{name} {percentile} {ms(value)}, no baseline yet"
        ratio = value / reference if reference else float("inf")
        change = f"{'+' if value >= reference else '-'}{ms(abs(value - reference))}"
        return f"{name} {percentile} {ms(value)} vs baseline {ms(reference)} ({ratio:.2f}x, {change})"
    sign = ">" if value > (reference or 0) else "≤"
    return f"{name} {percentile} {ms(value)} {sign} threshold {ms(reference)}"


def explain(rule: Rule, observed: Sequence[Observation], fired: int) -> str:
    """Why a replayed rule fired or not, in one line: no matching series, too few samples, or how
    close its nearest miss came (``TTFT p95 412 ms ≤ threshold 500 ms``)."""
    if fired:
        return f"fired {fired} time{'s' if fired != 1 else ''}"
    with_data = [o for o in observed if o.count]
    if not with_data:
        return f"no matching series: no {METRIC_NAMES[rule.metric]} samples for it in the window"
    judged = [o for o in with_data if o.holds is not None]
    if not judged:
        most = max(o.count for o in with_data)
        return f"too few samples at every evaluation (at most {most:,}; it needs {rule.min_samples:,})"
    series = len({tuple(sorted(o.values.items())) for o in judged})
    closest = max(judged, key=lambda o: _closeness(rule, o))
    short = len(with_data) - len(judged)
    also = f"; {short:,} evaluations had too few samples" if short else ""
    where = ", ".join(f"{k}={v}" for k, v in closest.values.items())
    return (
        f"never held over {series} series; closest: {describe(rule, closest.as_dict())}"
        + (f" ({where})" if where else "")
        + also
    )


def _closeness(rule: Rule, observation: Observation) -> float:
    """How near a value came to its reference (1.0: at it; a hit rate from above); unknown counts as far."""
    value, reference = observation.value, observation.reference
    if value is None or not reference:
        return 0.0
    if isinstance(rule.spec, Floor):
        return reference / value if value else float("inf")
    return value / reference


def _describe_burn(spec: BurnRate, name: str, facts: Mapping[str, Any]) -> str:
    if facts.get("long_rate") is None:
        return f"{name} SLO: no requests in the last {format_seconds(facts.get('long', 0))}"
    share = facts["long_slow"] / facts["long_count"]
    return (
        f"{name} SLO burn rate {facts['long_rate']:.1f}x over {format_seconds(facts['long'])} and "
        f"{facts['short_rate'] or 0:.1f}x over {format_seconds(facts['short'])} (alert at {facts['factor']:g}x): "
        f"{share:.1%} of {facts['long_count']:,} requests slower than {ms(spec.threshold_ms)}, "
        f"objective {spec.objective:.2%}"
    )


def condition(rule: Rule) -> str:
    """The rule's condition in words, e.g. ``TTFT p95 > 1,200 ms over 5m``."""
    name, spec = METRIC_NAMES[rule.metric], rule.spec
    if isinstance(spec, BurnRate):
        pairs = " or ".join(
            f">= {w.factor:g}x over {format_seconds(w.long)} and {format_seconds(w.short)}" for w in spec.windows
        )
        return f"{name} SLO {spec.objective:.2%} within {ms(spec.threshold_ms)}: burn rate {pairs}"
    if isinstance(spec, Floor):
        return f"{name} < {percent(spec.threshold)} over {format_seconds(spec.window)}"
    if isinstance(spec, Drift):
        base = f"the same window in the last {spec.weeks} weeks" if spec.weeks else f"the last {spec.windows} windows"
        return (
            f"{name} {spec.percentile} over {format_seconds(spec.window)} > {spec.ratio:g}x and "
            f"+{ms(spec.floor_ms)} above the median of {base}"
        )
    return f"{name} {spec.percentile} > {ms(spec.threshold_ms)} over {format_seconds(spec.window)}"


def dashboard_link(base: str, rule: Rule, labels: Mapping[str, str]) -> str:
    """A dashboard URL with the alert's filters set: the Prompt cache page for a hit rate (it says why calls
    missed), the trace explorer when an agent, model or tool is named (slowest first), else the overview
    with the metric's chart."""
    window = next((name for seconds, name in DASHBOARD_WINDOWS if seconds >= 4 * rule.window), "30d")
    params = {"window": window, **{k: labels[k] for k in ("service", "route") if labels.get(k)}}
    picked = {k: labels[k] for k in ("agent", "model", "tool") if labels.get(k)}
    if rule.metric in RATIO_METRICS:
        path = "/cache"
    elif picked:
        path, params = "/traces", {**params, **picked, "sort": "slowest"}
    else:
        path = "/"
        if rule.metric in ("e2e", "ttft", "itl"):
            params["series"] = rule.metric
    return f"{base.rstrip('/')}{path}?{urlencode(params)}"


def when(instant: str | None) -> str:
    """An ISO-8601 instant as ``2026-11-29 12:05 UTC``."""
    if instant is None:
        return "—"
    return datetime.fromisoformat(instant.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")


def iso(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")


# --- Slack ----------------------------------------------------------------------------


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int = SECTION_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def title(payload: Mapping[str, Any]) -> str:
    """``FIRING: ChatTTFTHigh (warning)``, naming how many alerts when several."""
    alerts = payload["alerts"]
    names = sorted({a["labels"]["alertname"] for a in alerts})
    severities = sorted({a["labels"]["severity"] for a in alerts})
    count = f" [{len(alerts)}]" if len(alerts) > 1 else ""
    return f"{payload['status'].upper()}{count}: {', '.join(names)} ({', '.join(severities)})"


def _alert_text(alert: Mapping[str, Any]) -> str:
    labels = " ".join(f"`{k}={_escape(v)}`" for k, v in alert["labels"].items() if k not in ("alertname", "severity"))
    status = alert["status"]
    lines = [f"*{_escape(alert['summary'])}*"]
    if alert["annotations"].get("summary"):
        lines.append(_escape(alert["annotations"]["summary"]))
    if status == "firing":
        lines.append(f"{alert['count']:,} samples in the {alert['window']} window ending {when(alert['window_end'])}")
    else:
        lines.append(f"resolved {when(alert['ends_at'])}, firing since {when(alert['starts_at'])}")
    if labels:
        lines.append(labels)
    if alert["annotations"].get("runbook_url"):
        lines.append(f"<{alert['annotations']['runbook_url']}|Runbook>")
    return _cut("\n".join(lines))


def slack_body(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``text`` (the fallback for notifications) plus Block Kit blocks for one notification."""
    status = payload["status"]
    alerts = payload["alerts"]
    first = alerts[0]
    more = f" (+{len(alerts) - 1} more)" if len(alerts) > 1 else ""
    summary = _escape(first["summary"])
    text = _cut(f"{ICONS[status]} {title(payload)} — {summary}{more} <{first['dashboard_url']}|dashboard>")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title(payload), 150), "emoji": True}}
    ]
    for alert in alerts[:MAX_SLACK_ALERTS]:
        blocks += _alert_blocks(alert)
    if len(alerts) > MAX_SLACK_ALERTS:
        rest = f"…and {len(alerts) - MAX_SLACK_ALERTS} more alerts in this group; see the dashboard."
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": rest}})
    project = payload["project"]
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"agentlat · project {project}"}]})
    body = {"text": text, "blocks": blocks}
    while len(json.dumps(body)) > MESSAGE_LIMIT and len(blocks) > 2:
        del blocks[-2]
    return body


def _alert_blocks(alert: Mapping[str, Any]) -> list[dict[str, Any]]:
    button = {"type": "button", "text": {"type": "plain_text", "text": "Open in dashboard"}}
    blocks: list[dict[str, Any]] = [
        {"type": "divider"},
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": _alert_text(alert)},
            "accessory": {**button, "url": alert["dashboard_url"]},
        },
    ]
    if alert["changes"] and alert["status"] == "firing":
        changed = "Changed with it: " + "; ".join(alert["changes"])
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(_escape(changed))}]})
    return blocks
