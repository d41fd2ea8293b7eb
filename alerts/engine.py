"""The alert state machine and notification policy. Pure: plain data in, transitions and
notifications out; the caller supplies the time and persists what changed.

Per rule and label set (Prometheus semantics)::

    inactive/resolved --holds--> pending --holds for `for`--> firing --not holds for `keep_firing_for`--> resolved
    pending --not holds--> inactive

An observation with too few samples (``holds is None``) changes nothing: it neither starts,
fires nor resolves an alert. A pending alert not evaluated for over an hour (the evaluator
was down) starts its ``for`` again, as Prometheus does after such an outage.

Notifications follow Alertmanager: firing alerts that are neither silenced nor inhibited (a
firing alert of higher severity with otherwise equal labels mutes them) are grouped per
receiver by ``notify.group_by``; a new group waits ``group_wait``, a changed group (a new
firing alert, or a resolved one with ``send_resolved``) waits ``group_interval`` after its
last message, and an unchanged firing group repeats every ``repeat_interval``. Those times are
kept between evaluations (``next_flush_at`` says when to flush next), and a message tells
whatever happened since the last one: an alert that fired and resolved before its group's
first message is still sent, as resolved, so a short spike is never lost. Each
notification has an id derived from its group and sequence number, so deciding it again
after a crash yields the same id and the outbox keeps one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentlat.alerts import message
from agentlat.alerts.conditions import Interval, Observation
from agentlat.alerts.rules import OUTAGE_TOLERANCE, AlertConfig, Rule, fingerprint, format_seconds, severity_rank

HISTORY_DAYS = 1  # resolved alerts stay (for the API and drift baselines) at least this long
MAX_HISTORY = 100  # active intervals kept per alert


@dataclass
class Alert:
    """The state of one rule for one label set."""

    project: str
    rule: str  # Rule.key
    labels: dict[str, str]
    values: dict[str, str]  # the label set: the rule's by dimensions
    state: str = "inactive"  # inactive | pending | firing | resolved
    active_at: int | None = None  # the condition started to hold (evaluation time)
    active_window: int | None = None  # the end of the first window in which it held
    fired_at: int | None = None
    resolved_at: int | None = None
    keep_firing_since: int | None = None  # the condition stopped holding while firing
    evaluated_at: int | None = None
    window_end: int | None = None
    observation: dict[str, Any] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)  # what changed with it when it fired
    history: list[list[int]] = field(default_factory=list)  # ends of windows that alerted before: [first, stop)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.labels)

    def intervals(self) -> list[Interval]:
        """Ends of the windows in which this alert was active (pending or firing), the current run open."""
        closed: list[Interval] = [(a, b) for a, b in self.history]
        active = self.state in ("pending", "firing") and self.active_window is not None
        return [*closed, (self.active_window, None)] if active else closed

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Alert:
        return cls(**json.loads(text))


@dataclass
class Group:
    """Notifications of one receiver for alerts sharing the ``group_by`` label values."""

    project: str
    receiver: str
    labels: dict[str, str]
    created_at: int
    last_sent_at: int | None = None
    seq: int = 0
    notified: list[str] = field(default_factory=list)  # fingerprints sent as firing in the last message
    seen: list[str] = field(default_factory=list)  # fingerprints that fired since the last message

    @property
    def key(self) -> str:
        return group_key(self.receiver, self.labels)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Group:
        return cls(**json.loads(text))


def group_key(receiver: str, labels: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps([receiver, sorted(labels.items())]).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Transition:
    time: int
    project: str
    fingerprint: str
    labels: Mapping[str, str]
    from_state: str
    to_state: str
    observation: Mapping[str, Any]
    summary: str


@dataclass(frozen=True, slots=True)
class Notification:
    id: str
    project: str
    receiver: str
    group_key: str
    time: int
    status: str  # firing | resolved
    payload: Mapping[str, Any]  # the generic webhook body; Slack renders it (message.slack_body)


@dataclass(frozen=True, slots=True)
class Changes:
    """What to persist after a step: alerts and groups that changed, and those to forget."""

    alerts: list[Alert]
    groups: list[Group]
    forgotten_alerts: list[tuple[str, str]]  # (project, fingerprint)
    forgotten_groups: list[tuple[str, str]]  # (project, group key)


class Engine:
    """Every alert's state and every group's notification timing, advanced by ``observe`` and ``flush``."""

    def __init__(
        self,
        config: AlertConfig,
        receivers: Sequence[str],
        dashboard_url: str,
        alerts: Iterable[Alert] = (),
        groups: Iterable[Group] = (),
    ) -> None:
        self.receivers = tuple(receivers)
        self.dashboard_url = dashboard_url
        self.alerts = {(a.project, a.fingerprint): a for a in alerts}
        self.groups = {(g.project, g.key): g for g in groups}
        self._stored = set(self.alerts)  # alerts the store holds
        self._dirty_alerts: set[tuple[str, str]] = set()
        self._dirty_groups: set[tuple[str, str]] = set()
        self._gone_alerts: set[tuple[str, str]] = set()
        self._gone_groups: set[tuple[str, str]] = set()
        self.reconfigure(config)

    def reconfigure(self, config: AlertConfig) -> None:
        """Use new rules; alerts of rules that are gone are forgotten."""
        self.config = config
        self.rules = {r.key: r for r in config.rules}
        for key, alert in list(self.alerts.items()):
            if alert.rule not in self.rules:
                self._forget(key)

    # --- evaluation -----------------------------------------------------------------
    def observe(self, now: int, project: str, rule: Rule, observations: Iterable[Observation]) -> list[Transition]:
        """Advance the rule's alerts in ``project`` by one evaluation at ``now``. Label sets with state
        but no observation this time are evaluated as having too few samples."""
        transitions: list[Transition] = []
        seen = set()
        for obs in observations:
            labels = rule.alert_labels(obs.values)
            key = (project, fingerprint(labels))
            alert = self.alerts.get(key) or Alert(project, rule.key, labels, dict(obs.values))
            self.alerts[key] = alert
            seen.add(key)
            transitions += self._step(alert, rule, obs, now)
        for key, alert in list(self.alerts.items()):
            if key in seen or alert.project != project or alert.rule != rule.key:
                continue
            if alert.labels != rule.alert_labels(alert.values):  # the rule's labels were edited
                self._forget(key)
                continue
            transitions += self._step(alert, rule, Observation(alert.values, None), now)
        return transitions

    def alert_for(self, project: str, rule: Rule, values: Mapping[str, str]) -> Alert | None:
        return self.alerts.get((project, fingerprint(rule.alert_labels(values))))

    def _step(self, alert: Alert, rule: Rule, obs: Observation, now: int) -> list[Transition]:
        out: list[Transition] = []
        previous = alert.evaluated_at
        alert.evaluated_at, alert.observation = now, obs.as_dict()
        alert.window_end = self.config.window_end(now)
        if alert.state == "pending" and previous is not None and now - previous > OUTAGE_TOLERANCE:
            out.append(self._move(alert, rule, "inactive", now, f"not evaluated for {format_seconds(now - previous)}"))
        if obs.holds:
            alert.keep_firing_since = None
            if alert.state in ("inactive", "resolved"):
                alert.active_at, alert.active_window = now, alert.window_end
                alert.fired_at = alert.resolved_at = None
                out.append(self._move(alert, rule, "pending", now))
            if alert.state == "pending" and now - (alert.active_at or now) >= rule.for_seconds:
                alert.fired_at = now
                out.append(self._move(alert, rule, "firing", now))
        elif obs.holds is False and alert.state == "pending":
            out.append(self._move(alert, rule, "inactive", now))
        elif obs.holds is False and alert.state == "firing":
            alert.keep_firing_since = alert.keep_firing_since or now
            if now - alert.keep_firing_since >= rule.keep_firing_for:
                alert.resolved_at = now
                out.append(self._move(alert, rule, "resolved", now))
        self._prune(alert, rule, now)
        return out

    def _move(self, alert: Alert, rule: Rule, state: str, now: int, reason: str = "") -> Transition:
        before = alert.state
        if state in ("inactive", "resolved") and alert.active_window is not None:
            alert.history = [*alert.history, [alert.active_window, alert.window_end or now]][-MAX_HISTORY:]
            alert.active_at = alert.active_window = None
        alert.state = state
        summary = reason or message.describe(rule, alert.observation)
        return Transition(now, alert.project, alert.fingerprint, dict(alert.labels), before, state,
                          dict(alert.observation), summary)  # fmt: skip

    def _prune(self, alert: Alert, rule: Rule, now: int) -> None:
        """Keep history as far back as drift baselines and the API need. An alert with nothing to
        remember leaves the store, and memory too once its label set has no samples."""
        horizon = now - max(rule.lookback, HISTORY_DAYS * 86400)
        alert.history = [h for h in alert.history if h[1] > horizon]
        key = (alert.project, alert.fingerprint)
        notified = any(alert.fingerprint in g.notified for g in self.groups.values() if g.project == alert.project)
        if alert.state in ("pending", "firing") or alert.history or notified:
            self._dirty_alerts.add(key)
            self._stored.add(key)
            return
        alert.state = "inactive"  # a resolved alert whose history aged out
        if key in self._stored:  # nothing left worth storing; memory keeps it while its label set has samples
            self._stored.discard(key)
            self._dirty_alerts.discard(key)
            self._gone_alerts.add(key)
        if not alert.observation.get("count"):
            del self.alerts[key]

    def _forget(self, key: tuple[str, str]) -> None:
        self.alerts.pop(key, None)
        self._dirty_alerts.discard(key)
        if key in self._stored:
            self._stored.discard(key)
            self._gone_alerts.add(key)

    # --- notifications --------------------------------------------------------------
    def silenced(self, alert: Alert, now: int) -> bool:
        return any(s.mutes(alert.labels, now) for s in self.config.silences)

    def muted(self, alert: Alert, now: int) -> str | None:
        """Why a firing alert is not notified: a silence, or a more severe alert inhibiting it."""
        silence = next((s for s in self.config.silences if s.mutes(alert.labels, now)), None)
        if silence is not None:
            return f"silenced until {message.iso(silence.ends)}" + (f": {silence.comment}" if silence.comment else "")
        rank = severity_rank(alert.labels["severity"])
        others = {k: v for k, v in alert.labels.items() if k != "severity"}
        for source in self.alerts.values():
            if (
                source.state == "firing" and source.project == alert.project
                and severity_rank(source.labels["severity"]) > rank
                and {k: v for k, v in source.labels.items() if k != "severity"} == others
            ):  # fmt: skip
                return f"inhibited by the {source.labels['severity']} alert"
        return None

    def flush(self, now: int) -> list[Notification]:
        """The notifications due at ``now``."""
        out = []
        for key, firing in self._members(now).items():
            notification = self._flush_group(self.groups[key], firing, now)
            if notification is not None:
                out.append(notification)
        return out

    def next_flush_at(self, now: int) -> int | None:
        """When the next notification falls due if nothing changes (``flush`` then), None if none will."""
        members = self._members(now)
        times = [due for key, firing in members.items() if (due := self._due_at(self.groups[key], firing, now))]
        return min(times, default=None)

    def _members(self, now: int) -> dict[tuple[str, str], list[Alert]]:
        """Every group and its firing, unmuted alerts (sorted); a group is made when its first alert fires."""
        members: dict[tuple[str, str], list[Alert]] = {key: [] for key in self.groups}
        for alert in self.alerts.values():
            if alert.state != "firing" or self.muted(alert, now):
                continue
            for receiver in self.rules[alert.rule].receivers or self.receivers:
                labels = {k: alert.labels.get(k, "") for k in self.config.notify.group_by}
                key = (alert.project, group_key(receiver, labels))
                if key not in self.groups:
                    self.groups[key] = Group(alert.project, receiver, labels, created_at=now)
                members.setdefault(key, []).append(alert)
        for key, firing in members.items():
            firing.sort(key=lambda a: a.fingerprint)
            group = self.groups[key]
            if new := [a.fingerprint for a in firing if a.fingerprint not in group.seen]:
                group.seen = group.seen + new
                self._dirty_groups.add(key)
        return members

    def _resolved(self, group: Group, firing: list[Alert], now: int) -> list[Alert]:
        """Alerts the group's message should report resolved: those it last sent as firing (with
        ``send_resolved``), and always those that fired since and resolved before being sent."""
        fps = {a.fingerprint for a in firing}
        told = group.notified if self.config.notify.send_resolved else []
        candidates = dict.fromkeys([*told, *(fp for fp in group.seen if fp not in group.notified)])
        return [  # no longer firing, not silenced (muted ones drop out without a word)
            alert for fp in candidates if fp not in fps
            and (alert := self.alerts.get((group.project, fp))) is not None and alert.state != "firing"
            and not self.silenced(alert, now)
        ]  # fmt: skip

    def _due_at(self, group: Group, firing: list[Alert], now: int) -> int | None:
        notify = self.config.notify
        resolved = self._resolved(group, firing, now)
        if group.last_sent_at is None:
            return group.created_at + notify.group_wait if firing or resolved else None
        if _changed(group, firing, resolved):
            return group.last_sent_at + notify.group_interval
        return group.last_sent_at + notify.repeat_interval if firing else None

    def _flush_group(self, group: Group, firing: list[Alert], now: int) -> Notification | None:
        key = (group.project, group.key)
        resolved = self._resolved(group, firing, now)
        due_at = self._due_at(group, firing, now)
        sent = None
        if due_at is not None and now >= due_at:
            repeat = group.last_sent_at is not None and not _changed(group, firing, resolved)
            sent = self._notification(group, firing, resolved, now, repeat)
            group.last_sent_at, group.notified, group.seen = now, [a.fingerprint for a in firing], []
            self._dirty_groups.add(key)
        if not firing and (sent is not None or not resolved):
            del self.groups[key]
            self._dirty_groups.discard(key)
            self._gone_groups.add(key)
        return sent

    def _notification(
        self, group: Group, firing: list[Alert], resolved: list[Alert], now: int, repeat: bool
    ) -> Notification:
        group.seq += 1
        status = "firing" if firing else "resolved"
        seed = f"{group.project}|{group.receiver}|{group.key}|{group.created_at}|{group.seq}"
        ident = hashlib.sha256(seed.encode()).hexdigest()[:32]
        payload = {
            "version": "1", "id": ident, "project": group.project, "receiver": group.receiver,
            "status": status, "repeat": repeat, "group_key": group.key, "group_labels": dict(group.labels),
            "time": message.iso(now),
            "alerts": [self._alert_payload(a, "firing") for a in firing]
            + [self._alert_payload(a, "resolved") for a in resolved],
        }  # fmt: skip
        return Notification(ident, group.project, group.receiver, group.key, now, status, payload)

    def _alert_payload(self, alert: Alert, status: str) -> dict[str, Any]:
        rule = self.rules[alert.rule]
        spec = rule.spec
        annotations = {k: v.format_map(_Blank(alert.labels)) for k, v in rule.annotations.items()}
        return {
            "status": status, "fingerprint": alert.fingerprint, "labels": dict(alert.labels),
            "annotations": annotations, "kind": rule.kind, "metric": rule.metric,
            "percentile": getattr(spec, "percentile", None), "window": format_seconds(rule.window),
            "window_end": message.iso(alert.window_end), "starts_at": message.iso(alert.fired_at),
            "ends_at": message.iso(alert.resolved_at),
            "value": alert.observation.get("value"), "reference": alert.observation.get("reference"),
            "count": alert.observation.get("count", 0), "facts": alert.observation.get("facts", {}),
            "summary": message.describe(rule, alert.observation), "changes": list(alert.changes),
            "dashboard_url": message.dashboard_link(self.dashboard_url, rule, alert.labels),
        }  # fmt: skip

    def take_changes(self) -> Changes:
        """What changed since the last call, for the caller to persist."""
        changes = Changes(
            [self.alerts[k] for k in sorted(self._dirty_alerts) if k in self.alerts],
            [self.groups[k] for k in sorted(self._dirty_groups) if k in self.groups],
            sorted(self._gone_alerts),
            sorted(self._gone_groups),
        )
        self._dirty_alerts, self._dirty_groups, self._gone_alerts, self._gone_groups = set(), set(), set(), set()
        return changes


def _changed(group: Group, firing: list[Alert], resolved: list[Alert]) -> bool:
    """A new firing alert since the group's last message, or one to report resolved."""
    return bool({a.fingerprint for a in firing} - set(group.notified)) or bool(resolved)


class _Blank(dict):
    """Annotation placeholders for labels an alert lacks become empty."""

    def __missing__(self, key: str) -> str:
        return ""
