"""The evaluator: rules run against the store at given times, state and outbox kept in the store.

``Evaluator.evaluate(now)`` reads every rule's windows ending at ``config.window_end(now)``
for each project with data, advances the engine, notes what changed with alerts that fired,
and persists in an order that survives a crash at any point: transitions, then new outbox
messages (their ids are derived from the group and its sequence number, and one already in
the outbox is not written again), then the state. If the store fails half-way, the engine
goes back to the stored state, so the next evaluation decides the same notifications again
under the same ids.

``replay`` runs the same rules over stored data with an engine of its own, in memory, for
``agentlat alerts test``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentlat.alerts.conditions import Interval, Observation
from agentlat.alerts.engine import Alert, Changes, Engine, Group, Notification, Transition
from agentlat.alerts.message import explain
from agentlat.alerts.rules import AlertConfig, Rule
from agentlat.alerts.source import MetricSource, RuleData, observations
from agentlat.api.windows import parse_duration
from agentlat.store import Store, StoreError

log = logging.getLogger("agentlat.alerts")

MAX_REPLAY_STEPS = 2880
MAX_REPLAY_SECONDS = 30 * 86400  # how far back a replay may look


@dataclass(frozen=True, slots=True)
class Step:
    """What one evaluation did."""

    time: int
    window_end: int
    transitions: tuple[Transition, ...]
    notifications: tuple[Notification, ...]


class Evaluator:
    """Evaluates rules on the store; one per store (two would both notify)."""

    def __init__(
        self, store: Store, config: AlertConfig, receivers: Sequence[str], dashboard_url: str,
        projects: Sequence[str] | None = None,
    ) -> None:  # fmt: skip
        """``projects``: evaluate only these; by default every project with data in the rules' windows."""
        self.projects = tuple(projects) if projects else None
        self.tables = store.alerts
        self.source = MetricSource(store)
        self.engine = Engine(config, receivers, dashboard_url)
        self.last: Step | None = None
        self.lock = threading.Lock()  # guards the engine between the evaluator and API snapshots
        self._version = 0
        self._stale = False  # an evaluation failed to store what it decided
        self._load()

    def _load(self) -> None:
        rows = self.tables.load_state(self.projects)
        alerts = [Alert.from_json(r["body"]) for r in rows if r["kind"] == "alert"]
        groups = [Group.from_json(r["body"]) for r in rows if r["kind"] == "group"]
        self.engine = Engine(self.engine.config, self.engine.receivers, self.engine.dashboard_url, alerts, groups)

    @property
    def config(self) -> AlertConfig:
        return self.engine.config

    def evaluate(self, now: int) -> Step:
        """One evaluation at ``now`` (unix seconds)."""
        step = self._decide(self._evaluate, now)
        self.last = step
        return step

    def flush(self, now: int) -> Step:
        """The notifications due at ``now`` between evaluations (a group's wait ending), stored in the outbox."""
        return self._decide(self._flush, now)

    def next_flush_at(self, now: int) -> int | None:
        """When a notification falls due next if no evaluation changes anything."""
        with self.lock:
            return self.engine.next_flush_at(now)

    def _decide(self, decide: Callable[[int], Step], now: int) -> Step:
        if self._stale:
            with self.lock:
                self._load()  # forget what was decided but not stored; this step decides it again
            self._stale = False
        try:
            return decide(now)
        except StoreError:
            self._stale = True
            raise

    def _flush(self, now: int) -> Step:
        with self.lock:
            notifications = self.engine.flush(now)
            changes = self.engine.take_changes()
        self._persist([], notifications, changes)
        return Step(now, self.config.window_end(now), (), tuple(notifications))

    def _evaluate(self, now: int) -> Step:
        """Store reads happen outside the lock, so the API's snapshots never wait on them."""
        config = self.config
        end = config.window_end(now)
        since = end - max(r.window for r in config.rules)
        with self.lock:
            active = {a.project for a in self.engine.alerts.values() if a.state in ("pending", "firing")}
        found = set(self.source.projects(since)) | active
        projects = tuple(sorted(found & set(self.projects) if self.projects else found))
        fetched = {(p, r.key): self.source.fetch(p, r, [end]) for p in projects for r in config.rules}
        transitions: list[Transition] = []
        with self.lock:
            for project in projects:
                for rule in config.rules:
                    observed = _observed(self.engine, project, rule, fetched[(project, rule.key)], end)
                    transitions += self.engine.observe(now, project, rule, observed)
        changed = self._changes(transitions, end)
        with self.lock:
            for key, what in changed.items():
                if key in self.engine.alerts:
                    self.engine.alerts[key].changes = what
            notifications = self.engine.flush(now)
            changes = self.engine.take_changes()
        self._persist(transitions, notifications, changes)
        return Step(now, end, tuple(transitions), tuple(notifications))

    def _changes(self, transitions: Sequence[Transition], end: int) -> dict[tuple[str, str], list[str]]:
        """What changed with each alert that started firing: in the window in which its condition first held
        (where a drift began, before ``for`` let it fire), against the window before."""
        found = {}
        for t in transitions:
            alert = self.engine.alerts.get((t.project, t.fingerprint))
            if t.to_state != "firing" or alert is None:
                continue
            rule = self.engine.rules[alert.rule]
            length = int(alert.observation.get("facts", {}).get("long", rule.window))
            began = alert.active_window if alert.active_window is not None else end
            found[(t.project, t.fingerprint)] = self.source.changes(t.project, rule, alert.values, began, length)
        return found

    def _persist(
        self, transitions: Sequence[Transition], notifications: Sequence[Notification], changes: Changes
    ) -> None:
        self.tables.add_events([_event_row(t) for t in transitions])
        known = self.tables.known_ids([n.id for n in notifications])
        self.tables.write_outbox([outbox_row(n, self._next_version()) for n in notifications if n.id not in known])
        kept = [(a.project, "alert", a.fingerprint, a.to_json()) for a in changes.alerts]
        kept += [(g.project, "group", g.key, g.to_json()) for g in changes.groups]
        gone = [(p, "alert", k, "") for p, k in changes.forgotten_alerts]
        gone += [(p, "group", k, "") for p, k in changes.forgotten_groups]
        rows = [_state_row(*row, self._next_version()) for row in kept]
        self.tables.save_state(rows + [_state_row(*row, self._next_version(), 1) for row in gone])

    def _next_version(self) -> int:
        self._version = max(time.time_ns(), self._version + 1)
        return self._version


def _observed(engine: Engine, project: str, rule: Rule, data: RuleData, end: int) -> list[Observation]:
    """The rule's observations at ``end``, drift baselines leaving out windows the alert was active in."""

    def active(values: Mapping[str, str]) -> list[Interval]:
        alert = engine.alert_for(project, rule, values)
        return alert.intervals() if alert else []

    return observations(rule, data, end, active)


def _event_row(t: Transition) -> dict[str, Any]:
    obs = t.observation
    return {
        "ProjectId": t.project, "Time": t.time, "Fingerprint": t.fingerprint, "Alert": t.labels["alertname"],
        "Severity": t.labels["severity"], "Labels": dict(t.labels), "FromState": t.from_state,
        "ToState": t.to_state, "Value": obs.get("value"), "Reference": obs.get("reference"),
        "Count": obs.get("count", 0), "Summary": t.summary, "Detail": json.dumps(obs.get("facts", {})),
    }  # fmt: skip


def outbox_row(n: Notification, version: int) -> dict[str, Any]:
    return {
        "project": n.project, "id": n.id, "receiver": n.receiver, "group_key": n.group_key, "status": n.status,
        "created_at": n.time, "delivery": "pending", "attempts": 0, "next_attempt_ms": n.time * 1000,
        "last_error": "", "sent_ms": None, "payload": json.dumps(n.payload), "version": version,
    }  # fmt: skip


def _state_row(project: str, kind: str, key: str, body: str, version: int, deleted: int = 0) -> dict[str, Any]:
    return {"project": project, "kind": kind, "key": key, "body": body, "deleted": deleted, "version": version}


# --- replay ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replay:
    """What the rules would have done over [start, end), evaluated every ``step`` seconds."""

    start: int
    end: int
    step: int
    evaluations: int
    projects: tuple[str, ...]
    transitions: tuple[Transition, ...]
    notifications: tuple[Notification, ...]
    explained: tuple[tuple[Rule, str], ...] = ()  # each rule and, in words, what it saw


def replay_seconds(window: str, name: str = "window") -> int:
    """Seconds of a replay's trailing ``window``, in the query API's grammar (``15m``, ``24h``,
    ``7d``) and at most ``MAX_REPLAY_SECONDS``; anything else raises ``TimeRangeError`` (an
    ``AgentlatError``) naming ``name`` and what is accepted."""
    return parse_duration(window, name, most=MAX_REPLAY_SECONDS, example="6h, 24h, 7d")


def replay_step(config: AlertConfig, seconds: int) -> int:
    """Whole minutes (windows end on minutes), at least the evaluation interval, and at most
    ``MAX_REPLAY_STEPS`` evaluations over the window."""
    interval = math.ceil(config.evaluation_interval / 60) * 60
    return max(interval, math.ceil(seconds / MAX_REPLAY_STEPS / 60) * 60)


def replay(
    store: Store, config: AlertConfig, receivers: Sequence[str], dashboard_url: str, start: int, end: int,
    projects: Sequence[str] | None = None,
) -> Replay:  # fmt: skip
    """Evaluate ``config`` as if it had run from ``start`` to ``end`` (unix seconds). Nothing is
    stored or sent; alerts start inactive at ``start``, and what changed with an alert is not
    looked up (the live evaluator does that)."""
    source = MetricSource(store)
    engine = Engine(config, receivers, dashboard_url)
    step = replay_step(config, end - start)
    times = list(range(start - start % 60 + step, end + 1, step))
    ends = [config.window_end(t) for t in times]
    chosen = tuple(projects) if projects is not None else tuple(source.projects(start - config.evaluation_delay))
    data = {(p, r.key): source.fetch(p, r, ends) for p in chosen for r in config.rules} if times else {}
    transitions: list[Transition] = []
    notifications: list[Notification] = []
    seen: dict[str, list[Observation]] = {rule.key: [] for rule in config.rules}
    for now, window_end, until in zip(times, ends, [*times[1:], end + 1], strict=True):
        for project in chosen:
            for rule in config.rules:
                observed = _observed(engine, project, rule, data[(project, rule.key)], window_end)
                seen[rule.key] += observed
                transitions += engine.observe(now, project, rule, observed)
        notifications += engine.flush(now)
        while (due := engine.next_flush_at(now)) is not None and due < until:  # as the live service flushes
            now = max(due, now + 1)
            notifications += engine.flush(now)
    fired = Counter(t.labels["alertname"] for t in transitions if t.to_state == "firing")
    explained = tuple((rule, explain(rule, seen[rule.key], fired[rule.alert])) for rule in config.rules)
    return Replay(start, end, step, len(times), chosen, tuple(transitions), tuple(notifications), explained)
