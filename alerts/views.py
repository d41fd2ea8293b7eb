"""The JSON documents of the alerts API (and of ``agentlat alerts test --json``). Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentlat.alerts import message
from agentlat.alerts.engine import Alert, Engine, Notification, Transition
from agentlat.alerts.evaluator import Replay, Step
from agentlat.alerts.rules import STATES, Rule, format_seconds

STATE_ORDER = {s: i for i, s in enumerate(("inactive", "resolved", "pending", "firing"))}


def rule_dict(rule: Rule, alerts: Sequence[Alert]) -> dict[str, Any]:
    """A rule as written, with how many of its label sets are in each state."""
    counts = {s: sum(1 for a in alerts if a.state == s) for s in STATES}
    worst = max((a.state for a in alerts), key=STATE_ORDER.__getitem__, default="inactive")
    return {
        "alert": rule.alert, "severity": rule.severity, "type": rule.kind, "metric": rule.metric,
        "percentile": getattr(rule.spec, "percentile", None), "condition": message.condition(rule),
        "window": format_seconds(rule.window), "by": list(rule.by), "match": dict(rule.match),
        "for": format_seconds(rule.for_seconds), "keep_firing_for": format_seconds(rule.keep_firing_for),
        "min_samples": rule.min_samples, "line": rule.line, "state": worst, **counts,
    }  # fmt: skip


def alert_dict(engine: Engine, alert: Alert, now: int) -> dict[str, Any]:
    """One label set of one rule: its state, last observation and why it is muted, if it is."""
    rule = engine.rules[alert.rule]
    obs = alert.observation
    return {
        "alert": rule.alert, "severity": rule.severity, "labels": dict(alert.labels), "state": alert.state,
        "active_at": message.iso(alert.active_at), "fired_at": message.iso(alert.fired_at),
        "resolved_at": message.iso(alert.resolved_at), "evaluated_at": message.iso(alert.evaluated_at),
        "value": obs.get("value"), "reference": obs.get("reference"), "count": obs.get("count", 0),
        "enough_samples": obs.get("holds") is not None, "summary": message.describe(rule, obs) if obs else "",
        "muted": engine.muted(alert, now) if alert.state == "firing" else None, "changes": list(alert.changes),
        "dashboard_url": message.dashboard_link(engine.dashboard_url, rule, alert.labels),
    }  # fmt: skip


def status_document(
    engine: Engine, project: str, last: Step | None, receivers: list[dict[str, str]], events: list[dict[str, Any]]
) -> dict[str, Any]:
    """``GET /api/v1/alerts``: rules, the alerts of ``project`` per label set, recent transitions."""
    now = last.time if last else 0
    mine = [a for a in engine.alerts.values() if a.project == project and a.rule in engine.rules]
    mine.sort(key=lambda a: (-STATE_ORDER[a.state], a.labels["alertname"], sorted(a.labels.items())))
    config = engine.config
    return {
        "file": config.path,
        "evaluation_interval": format_seconds(config.evaluation_interval),
        "evaluated_at": message.iso(last.time) if last else None,
        "window_end": message.iso(last.window_end) if last else None,
        "receivers": receivers,
        "counts": {s: sum(1 for a in mine if a.state == s) for s in STATES},
        "rules": [rule_dict(r, [a for a in mine if a.rule == r.key]) for r in config.rules],
        "alerts": [alert_dict(engine, a, now) for a in mine],
        "events": [event_dict(e) for e in events],
    }


def event_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored transition."""
    return {
        "time": message.iso(row["time"]), "alert": row["alert"], "severity": row["severity"],
        "labels": dict(row["labels"]), "from": row["from_state"], "to": row["to_state"], "value": row["value"],
        "reference": row["reference"], "count": row["count"], "summary": row["summary"],
    }  # fmt: skip


def notification_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored notification with its delivery status."""
    payload = json.loads(row["payload"])
    return {
        "id": row["id"], "time": message.iso(row["created_at"]), "receiver": row["receiver"],
        "status": row["status"], "title": message.title(payload), "alerts": len(payload["alerts"]),
        "delivery": row["delivery"], "attempts": row["attempts"],
        "last_error": errors[-1] if (errors := (row["last_error"] or "").splitlines()) else None, "errors": errors,
        "sent_at": message.iso(row["sent_ms"] // 1000) if row["sent_ms"] is not None else None,
    }  # fmt: skip


def transition_dict(t: Transition) -> dict[str, Any]:
    obs = t.observation
    return {
        "time": message.iso(t.time), "project": t.project, "alert": t.labels["alertname"],
        "severity": t.labels["severity"], "labels": dict(t.labels), "from": t.from_state, "to": t.to_state,
        "value": obs.get("value"), "reference": obs.get("reference"), "count": obs.get("count", 0),
        "summary": t.summary,
    }  # fmt: skip


def replayed_notification(n: Notification) -> dict[str, Any]:
    return {
        "time": message.iso(n.time), "project": n.project, "receiver": n.receiver, "status": n.status,
        "title": message.title(n.payload), "alerts": [a["summary"] for a in n.payload["alerts"]],
    }  # fmt: skip


def replay_document(result: Replay, window: str) -> dict[str, Any]:
    """``POST /api/v1/alerts/replay`` and ``agentlat alerts test --json``."""
    fired = [t for t in result.transitions if t.to_state == "firing"]
    return {
        "window": {"length": window, "start": message.iso(result.start), "end": message.iso(result.end)},
        "step": format_seconds(result.step),
        "evaluations": result.evaluations,
        "projects": list(result.projects),
        "summary": {
            "fired": len(fired),
            "resolved": sum(1 for t in result.transitions if t.to_state == "resolved"),
            "notifications": len(result.notifications),
            "alerts_fired": sorted({t.labels["alertname"] for t in fired}),
        },
        "transitions": [transition_dict(t) for t in result.transitions],
        "notifications": [replayed_notification(n) for n in result.notifications],
        "rules": [{"alert": rule.alert, "severity": rule.severity, "why": why} for rule, why in result.explained],
    }
