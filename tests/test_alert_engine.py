"""The pure core of alerting: conditions, the per-label-set state machine and notification policy,
driven at synthetic times with exact expected transitions and notifications."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from agentlat.alerts import conditions
from agentlat.alerts.conditions import Observation, WindowStat
from agentlat.alerts.engine import Alert, Engine, Group, Notification, Transition
from agentlat.alerts.message import slack_body
from agentlat.alerts.rules import Rule
from agentlat.alerts.rules_file import parse_rules

T0 = 1_800_000_000  # a whole minute
P = "engine-tests"
DASH = "http://dash.example"


def rules(rule: str, notify: str = "{group_by: [alertname], group_wait: 30s, group_interval: 5m, repeat_interval: 1h}",
          extra: str = "") -> str:  # fmt: skip
    return f"evaluation_delay: 0s\nnotify: {notify}\n{extra}rules:\n{rule}"


SLOW = "  - {alert: Slow, type: threshold, metric: tool, percentile: p95, threshold: 500, window: 5m, by: [route]"


def engine(text: str) -> tuple[Engine, list[Rule]]:
    config = parse_rules(text)
    return Engine(config, ["team"], DASH), list(config.rules)


def holds(route: str = "/a") -> Observation:
    return Observation({"route": route}, True, 900.0, 500.0, 500)


def clear(route: str = "/a") -> Observation:
    return Observation({"route": route}, False, 100.0, 500.0, 500)


def few(route: str = "/a") -> Observation:
    return Observation({"route": route}, None, 900.0, 500.0, 10)


class Driver:
    """Feeds observations and flushes at T0 + t, recording what happened relative to T0."""

    def __init__(self, eng: Engine) -> None:
        self.engine = eng
        self.transitions: list[tuple[int, str, str, str]] = []
        self.notifications: list[tuple[int, str, list[str]]] = []
        self.sent: list[Notification] = []

    def at(self, t: int, *observed: tuple[Rule, Sequence[Observation]]) -> None:
        for rule, obs in observed:
            found: list[Transition] = self.engine.observe(T0 + t, P, rule, obs)
            self.transitions += [(x.time - T0, x.labels["route"], x.from_state, x.to_state) for x in found]
        for n in self.engine.flush(T0 + t):
            self.sent.append(n)
            described = [f"{a['labels']['route']} {a['labels']['severity']} {a['status']}" for a in n.payload["alerts"]]
            self.notifications.append((t, n.status, described))


def test_pending_fires_after_for_and_notifies_after_group_wait() -> None:
    eng, [rule] = engine(rules(SLOW + ", for: 2m}"))
    run = Driver(eng)
    for t in (0, 60, 120, 180):
        run.at(t, (rule, [holds()]))
    assert run.transitions == [(0, "/a", "inactive", "pending"), (120, "/a", "pending", "firing")]
    assert run.notifications == [(180, "firing", ["/a warning firing"])]  # group made at 120, group_wait 30 s


def test_a_condition_that_clears_before_for_never_fires() -> None:
    eng, [rule] = engine(rules(SLOW + ", for: 2m}"))
    run = Driver(eng)
    run.at(0, (rule, [holds()]))
    run.at(60, (rule, [clear()]))
    run.at(120, (rule, [holds()]))
    assert run.transitions == [(0, "/a", "inactive", "pending"), (60, "/a", "pending", "inactive"),
                               (120, "/a", "inactive", "pending")]  # fmt: skip
    assert run.notifications == []


def test_keep_firing_for_holds_an_alert_through_flaps() -> None:
    eng, [rule] = engine(rules(SLOW + ", keep_firing_for: 3m}"))
    run = Driver(eng)
    for t, obs in [(0, holds()), (60, clear()), (120, holds()), (180, clear()), (240, clear()), (300, clear()),
                   (360, clear())]:  # fmt: skip
        run.at(t, (rule, [obs]))
    assert run.transitions == [(0, "/a", "inactive", "pending"), (0, "/a", "pending", "firing"),
                               (360, "/a", "firing", "resolved")]  # fmt: skip
    assert run.notifications == [(60, "firing", ["/a warning firing"]), (360, "resolved", ["/a warning resolved"])]


def test_too_few_samples_neither_fire_nor_resolve() -> None:
    eng, [rule] = engine(rules(SLOW + ", for: 2m}"))
    run = Driver(eng)
    run.at(0, (rule, [few()]))
    run.at(60, (rule, [holds()]))
    for t in (120, 180, 240):  # `for` elapses, but without enough samples nothing fires
        run.at(t, (rule, [few()]))
    run.at(300, (rule, [holds()]))
    for t in range(360, 3600, 600):  # hours of too few samples (or none at all) do not resolve it
        run.at(t, (rule, [few()] if (t // 600) % 2 else []))
    run.at(3600, (rule, [clear()]))
    assert run.transitions == [(60, "/a", "inactive", "pending"), (300, "/a", "pending", "firing"),
                               (3600, "/a", "firing", "resolved")]  # fmt: skip


def test_groups_wait_then_batch_changes_and_repeat() -> None:
    eng, [rule] = engine(rules(SLOW + "}"))
    run = Driver(eng)
    run.at(0, (rule, [holds("/a")]))
    run.at(30)
    run.at(60, (rule, [holds("/b")]))  # joins the group: sent after group_interval from the last message
    for t in (120, 300, 330, 600, 3900):
        run.at(t)
    run.at(3930)  # nothing changed for repeat_interval: a reminder
    run.at(4000, (rule, [clear("/a")]))
    run.at(4200)
    run.at(4230)
    assert run.notifications == [
        (30, "firing", ["/a warning firing"]),
        (330, "firing", ["/a warning firing", "/b warning firing"]),
        (3930, "firing", ["/a warning firing", "/b warning firing"]),
        (4230, "firing", ["/b warning firing", "/a warning resolved"]),
    ]
    assert [n.payload["repeat"] for n in run.sent] == [False, False, True, False]
    assert len({n.id for n in run.sent}) == 4


def test_a_critical_alert_inhibits_the_warning_with_the_same_labels() -> None:
    critical = SLOW.replace("threshold: 500", "threshold: 2000") + ", severity: critical}"
    eng, [warning, page] = engine(rules(f"{SLOW}}}\n{critical}"))
    run = Driver(eng)
    run.at(0, (warning, [holds()]), (page, [holds()]))
    run.at(30)
    run.at(60, (page, [clear()]))  # the page resolves: the warning is no longer muted
    run.at(330)
    assert run.notifications == [
        (30, "firing", ["/a critical firing"]),
        (330, "firing", ["/a warning firing", "/a critical resolved"]),
    ]
    [alert] = [a for a in eng.alerts.values() if a.labels["severity"] == "warning"]
    assert eng.muted(alert, T0 + 330) is None


def iso(t: int) -> str:
    return datetime.fromtimestamp(T0 + t, tz=UTC).isoformat().replace("+00:00", "Z")


def test_silences_mute_matching_alerts_from_start_to_end() -> None:
    silence = (
        f"silences:\n  - {{matchers: {{route: /a}}, ends: '{iso(600)}', comment: load test}}\n"
        f"  - {{matchers: {{route: /b}}, starts: '{iso(620)}', ends: '{iso(9000)}'}}\n"
    )
    eng, [rule] = engine(rules(SLOW + "}", "{group_by: [alertname, route], group_wait: 30s}", silence))
    run = Driver(eng)
    run.at(0, (rule, [holds("/a"), holds("/b")]))
    for t in (30, 300, 599):
        run.at(t)
    [muted] = [a for a in eng.alerts.values() if a.labels["route"] == "/a"]
    assert eng.muted(muted, T0 + 599) == f"silenced until {iso(600)}: load test"
    run.at(600)
    run.at(630, (rule, [clear("/b")]))  # /b resolves while silenced: no resolved message
    run.at(1000)
    assert run.notifications == [(30, "firing", ["/b warning firing"]), (630, "firing", ["/a warning firing"])]


def restored(eng: Engine) -> Engine:
    """A new engine from the JSON the store keeps: what a restart sees."""
    alerts = [Alert.from_json(a.to_json()) for a in eng.alerts.values() if a.state != "inactive" or a.history]
    groups = [Group.from_json(g.to_json()) for g in eng.groups.values()]
    return Engine(eng.config, eng.receivers, eng.dashboard_url, alerts, groups)


def test_a_restart_continues_pending_and_firing_alerts_without_repeating() -> None:
    eng, [rule] = engine(rules(SLOW + ", for: 2m}"))
    first = Driver(eng)
    first.at(0, (rule, [holds()]))
    second = Driver(restored(eng))  # restart while pending
    second.at(120, (rule, [holds()]))
    second.at(150)
    third = Driver(restored(second.engine))  # restart while firing
    third.at(180, (rule, [holds()]))
    third.at(3000)
    assert second.transitions == [(120, "/a", "pending", "firing")]
    assert second.notifications == [(150, "firing", ["/a warning firing"])]
    assert third.transitions == [] and third.notifications == []


def test_the_same_decision_after_a_crash_gets_the_same_notification_id() -> None:
    eng, [rule] = engine(rules(SLOW + "}"))
    before_crash = restored(eng)
    Driver(eng).at(0, (rule, [holds()]))
    again = Driver(restored(eng))
    again.at(30)
    Driver(before_crash).at(0, (rule, [holds()]))
    replayed = Driver(before_crash)
    replayed.at(30)
    assert [n.id for n in again.sent] == [n.id for n in replayed.sent] and len(again.sent) == 1


def test_a_pending_alert_not_evaluated_for_over_an_hour_starts_again() -> None:
    eng, [rule] = engine(rules(SLOW + ", for: 5m}"))
    run = Driver(eng)
    run.at(0, (rule, [holds()]))
    run.at(3700, (rule, [holds()]))
    assert run.transitions == [(0, "/a", "inactive", "pending"), (3700, "/a", "pending", "inactive"),
                               (3700, "/a", "inactive", "pending")]  # fmt: skip


def test_notification_payload_and_slack_rendering() -> None:
    eng, [rule] = engine(rules(SLOW + ", annotations: {summary: 'tool calls on {route} are slow'}}"))
    run = Driver(eng)
    run.at(0, (rule, [holds("/a")]))
    eng.alerts[next(iter(eng.alerts))].changes = ["new service.version 2.0 (before: 1.9)"]
    run.at(30)
    [sent] = run.sent
    [alert] = sent.payload["alerts"]
    assert alert["summary"] == "tool time p95 900 ms > threshold 500 ms"
    assert alert["annotations"] == {"summary": "tool calls on /a are slow"}
    assert alert["dashboard_url"] == "http://dash.example/?window=1h&route=%2Fa"
    body = slack_body(sent.payload)
    assert body["text"].startswith(":rotating_light: FIRING: Slow (warning) — tool time p95 900 ms &gt; threshold")
    assert body["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": "FIRING: Slow (warning)",
                                                            "emoji": True}}  # fmt: skip
    section = body["blocks"][2]
    assert "`route=/a`" in section["text"]["text"] and section["accessory"]["url"] == alert["dashboard_url"]
    assert body["blocks"][3]["elements"][0]["text"] == "Changed with it: new service.version 2.0 (before: 1.9)"


def test_slack_messages_stay_within_block_limits() -> None:
    eng, [rule] = engine(rules(SLOW + "}"))
    run = Driver(eng)
    run.at(0, (rule, [holds(f"/r{i:02}") for i in range(30)]))
    run.at(30)
    body = slack_body(run.sent[0].payload)
    assert len(body["blocks"]) <= 50 and len(str(body)) < 40_000
    assert body["blocks"][-2]["text"]["text"].startswith("…and 20 more alerts")


# --- conditions --------------------------------------------------------------------------
DRIFT_RULE = parse_rules(
    "rules:\n  - {alert: D, type: drift, metric: tool, window: 5m, baseline: {windows: 4, min_windows: 3},"
    " ratio: 1.5, floor: 50, min_samples: 100}"
).rules[0]


def stat(p99: float, count: int = 500) -> WindowStat:
    return WindowStat(count, (p99 / 3, p99 / 2, p99))


@pytest.mark.parametrize(
    ("current", "baseline", "active", "expected"),
    [
        (stat(400), [stat(200), stat(210), stat(190), stat(205)], [], (True, 202.5)),
        (stat(250), [stat(200), stat(210), stat(190), stat(205)], [], (False, 202.5)),  # 1.23x: under the ratio
        (stat(90), [stat(50), stat(55), stat(45), stat(52)], [], (False, 51.0)),  # 1.8x but +39 ms: under the floor
        (stat(400, 50), [stat(200), stat(210), stat(190), stat(205)], [], (None, 202.5)),  # too few now
        (stat(400), [stat(200), stat(210, 10), stat(190, 10), stat(205)], [], (None, 202.5)),  # 2 usable < 3
        # windows overlapping the alert being active are left out of the baseline
        (stat(400), [stat(380), stat(200), stat(210), stat(190)], [(T0 - 400, None)], (True, 200.0)),
    ],
)
def test_drift_against_the_median_of_usable_baseline_windows(
    current: WindowStat, baseline: list[WindowStat], active: list, expected: tuple
) -> None:
    ends = DRIFT_RULE.spec.baseline_ends(T0)
    obs = conditions.drift(DRIFT_RULE, {}, current, list(zip(ends, baseline, strict=True)), active)
    assert (obs.holds, obs.reference) == expected


BURN_RULE = parse_rules(
    "rules:\n  - {alert: B, type: burn_rate, metric: e2e, slo: {objective: 0.99, threshold: 1s}, min_samples: 100,"
    " windows: [{long: 1h, short: 5m, factor: 10}]}"
).rules[0]


@pytest.mark.parametrize(
    ("long", "short", "expected"),
    [
        ((1000, 150), (100, 20), True),  # 15x over the hour and 20x over 5 min
        ((1000, 50), (100, 30), False),  # a spike: the short window burns, the hour does not
        ((1000, 150), (100, 0), False),  # recovered: the hour still burns, the last 5 min do not
        ((1000, 150), (40, 20), None),  # too few requests in the short window
    ],
)
def test_burn_rate_needs_both_windows(long: tuple[int, int], short: tuple[int, int], expected: bool | None) -> None:
    obs = conditions.burn_rate(BURN_RULE, {}, lambda seconds: long if seconds == 3600 else short)
    assert obs.holds is expected
    assert obs.value == pytest.approx(long[1] / long[0] / 0.01)


class TimedDriver(Driver):
    """Evaluates every 60 s like the live service and, between evaluations, flushes when
    ``next_flush_at`` says a group's wait ends (``AlertService._evaluate_loop``)."""

    def until(self, t: int) -> None:
        while (due := self.engine.next_flush_at(T0 + t)) is not None and due < T0 + t:
            for n in self.engine.flush(due):
                described = [f"{a['labels']['route']} {a['status']}" for a in n.payload["alerts"]]
                self.notifications.append((due - T0, n.status, described))

    def evaluate(self, t: int, rule: Rule, obs: Observation) -> None:
        self.until(t)
        found = self.engine.observe(T0 + t, P, rule, [obs])
        self.transitions += [(x.time - T0, x.labels["route"], x.from_state, x.to_state) for x in found]
        for n in self.engine.flush(T0 + t):
            self.notifications.append(
                (t, n.status, [f"{a['labels']['route']} {a['status']}" for a in n.payload["alerts"]])
            )


def test_an_alert_that_fires_and_resolves_within_an_interval_is_sent_at_its_group_wait() -> None:
    eng, [rule] = engine(rules(SLOW + "}"))  # group_wait 30 s, evaluated every 60 s
    run = TimedDriver(eng)
    run.evaluate(0, rule, holds())
    assert eng.next_flush_at(T0) == T0 + 30
    run.evaluate(60, rule, clear())
    run.until(400)
    assert run.transitions == [
        (0, "/a", "inactive", "pending"),
        (0, "/a", "pending", "firing"),
        (60, "/a", "firing", "resolved"),
    ]
    assert run.notifications == [(30, "firing", ["/a firing"]), (330, "resolved", ["/a resolved"])]


def test_an_alert_resolved_before_its_group_wait_ends_is_still_told() -> None:
    notify = "{group_by: [alertname], group_wait: 2m, group_interval: 5m, repeat_interval: 1h, send_resolved: false}"
    eng, [rule] = engine(rules(SLOW + "}", notify))
    run = TimedDriver(eng)
    run.evaluate(0, rule, holds())
    run.evaluate(60, rule, clear())
    run.until(1000)
    assert run.notifications == [(120, "resolved", ["/a resolved"])]  # fired at 0, cleared at 60: a spike, told once
    assert eng.groups == {} and eng.next_flush_at(T0 + 1000) is None


def test_a_group_sent_once_waits_its_interval_between_evaluations() -> None:
    eng, [rule] = engine(rules(SLOW + "}"))
    run = TimedDriver(eng)
    for t in range(0, 3601, 60):
        run.evaluate(t, rule, holds())
    run.until(3661)
    assert [(t, status) for t, status, _ in run.notifications] == [(30, "firing"), (3630, "firing")]  # repeat: 1 h
