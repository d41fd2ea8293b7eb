"""The evaluator through the real store: synthetic series written as spans and rolled up, rules
evaluated at synthetic times, state and outbox kept in the store across restarts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from agentlat.alerts.evaluator import Evaluator, replay
from agentlat.alerts.notify import Courier, build_notifiers
from agentlat.alerts.rules import AlertConfig
from agentlat.alerts.rules_file import parse_rules
from agentlat.alerts.service import AlertService
from agentlat.store import Store
from tests.alert_data import load, per_minute, tool_spans
from tests.fake_slack import FakeSlack, fake_slack
from tests.servers import wait_for

DASH = "http://dash.example"
E = (int(time.time()) // 3600 - 3) * 3600  # evaluations happen around this whole hour, three hours ago
HEADER = "evaluation_delay: 0s\nnotify: {group_by: [alertname, route], group_wait: 0s, group_interval: 1m}\n"
THRESHOLD = (
    HEADER
    + """\
rules:
  - {alert: ToolSlow, type: threshold, metric: tool, percentile: p95, threshold: 500, window: 5m, by: [route],
     min_samples: 100}
"""
)


def evaluator(store: Store, project: str, text: str, receivers: tuple[str, ...] = ("team",)) -> Evaluator:
    return Evaluator(store, parse_rules(text), receivers, DASH, projects=[project])


def moves(step: object) -> list[tuple[str, str, str]]:
    return [(t.labels["route"], t.from_state, t.to_state) for t in step.transitions]  # type: ignore[attr-defined]


def series(project: str, start: int, minutes: int, per_min: int, ms: float, route: str = "/r", **kw: str) -> object:
    return tool_spans(project, per_minute(start, minutes, per_min), [ms] * minutes * per_min, route=route, **kw)


def test_a_threshold_fires_on_the_slow_window_and_is_kept_in_the_store(embedded_store: Store) -> None:
    p = "ae-threshold"
    load(embedded_store, series(p, E - 600, 5, 40, 100.0, service_version="1.4.1"),
         series(p, E - 300, 5, 40, 900.0, service_version="1.4.2"))  # fmt: skip
    ev = evaluator(embedded_store, p, THRESHOLD)
    assert moves(ev.evaluate(E - 300)) == []  # the window before: fast
    step = ev.evaluate(E)
    assert moves(step) == [("/r", "inactive", "pending"), ("/r", "pending", "firing")]
    [note] = step.notifications
    [alert] = note.payload["alerts"]
    assert (alert["value"], alert["reference"], alert["count"]) == (pytest.approx(900.0), 500.0, 200)
    assert alert["changes"] == [f"new service.version 1.4.2 from {minute(E - 300)} (before: 1.4.1)"]
    assert alert["dashboard_url"] == "http://dash.example/?window=1h&route=%2Fr"
    events = embedded_store.alerts.events(p, E - 3600, E + 1)
    assert [(e["to_state"], e["count"]) for e in events] == [("firing", 200), ("pending", 200)]
    [queued] = embedded_store.alerts.undelivered([p])
    assert (queued["id"], queued["delivery"], json.loads(queued["payload"])["status"]) == (note.id, "pending", "firing")


def minute(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def test_what_changed_is_named_where_the_condition_began_not_where_it_fired(embedded_store: Store) -> None:
    """With ``for: 5m`` the alert fires a window after the release that slowed it: the window it fires on and
    the one before both hold only 1.4.2, but the window it began in is the first of 1.4.2's."""
    p = "ae-began"
    load(embedded_store, series(p, E - 900, 10, 40, 100.0, service_version="1.4.1"),
         series(p, E - 300, 15, 40, 900.0, service_version="1.4.2"))  # fmt: skip
    rules = THRESHOLD.replace("min_samples: 100}", "min_samples: 100, for: 5m}")
    ev = evaluator(embedded_store, p, rules)
    assert moves(ev.evaluate(E)) == [("/r", "inactive", "pending")]
    step = ev.evaluate(E + 300)
    assert moves(step) == [("/r", "pending", "firing")]
    [alert] = step.notifications[0].payload["alerts"]
    assert alert["changes"] == [f"new service.version 1.4.2 from {minute(E - 300)} (before: 1.4.1)"]


def test_too_few_samples_never_fire_and_never_resolve(embedded_store: Store) -> None:
    p = "ae-few"
    load(
        embedded_store,
        series(p, E - 300, 5, 40, 900.0, route="/busy"),  # fires
        series(p, E - 300, 5, 5, 900.0, route="/sparse"),  # as slow, but 25 samples < 100
        series(p, E, 5, 5, 100.0, route="/busy"),  # fast, but too few to resolve
        series(p, E + 300, 5, 40, 100.0, route="/busy"),  # fast, enough: resolves
    )
    ev = evaluator(embedded_store, p, THRESHOLD)
    assert moves(ev.evaluate(E)) == [("/busy", "inactive", "pending"), ("/busy", "pending", "firing")]
    assert moves(ev.evaluate(E + 300)) == []
    assert moves(ev.evaluate(E + 600)) == [("/busy", "firing", "resolved")]
    sparse = ev.engine.alert_for(p, ev.config.rules[0], {"route": "/sparse"})
    assert sparse is None or sparse.state == "inactive"


FLAPPING = (
    HEADER
    + """\
rules:
  - {alert: ToolSlow, type: threshold, metric: tool, percentile: p95, threshold: 500, window: 1m, by: [route],
     min_samples: 30, keep_firing_for: 3m}
"""
)


def test_keep_firing_for_holds_a_flapping_series(embedded_store: Store) -> None:
    p = "ae-flapping"
    pattern = [900.0, 100.0, 900.0, 100.0, 100.0, 100.0, 100.0, 100.0]  # minute by minute
    load(embedded_store, *(series(p, E + 60 * m, 1, 40, ms) for m, ms in enumerate(pattern)))
    ev = evaluator(embedded_store, p, FLAPPING)
    steps = [ev.evaluate(E + 60 * k) for k in range(1, len(pattern) + 1)]  # each judges the minute before
    happened = [(k, t.to_state) for k, step in enumerate(steps, 1) for t in step.transitions]
    assert happened == [(1, "pending"), (1, "firing"), (7, "resolved")]  # not resolved at 2, nor re-fired at 3
    sent = [(k, n.status) for k, step in enumerate(steps, 1) for n in step.notifications]
    assert sent == [(1, "firing"), (7, "resolved")]


DRIFT = (
    HEADER
    + """\
rules:
  - {alert: ToolDrift, type: drift, metric: tool, percentile: p99, window: 5m, baseline: {windows: 12, min_windows: 6},
     ratio: 1.5, floor: 50, by: [route], min_samples: 200}
"""
)


def lognormal(seed: int, n: int, scale: float = 1.0) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(np.log(100.0), 0.3, n) * scale)


def test_drift_fires_on_a_real_p99_shift_and_not_on_noise(embedded_store: Store) -> None:
    p = "ae-drift"
    first = E - 12 * 300
    baseline_starts = per_minute(first, 60, 40)  # 12 windows of 200 samples
    tables = []
    for route, seed in (("/noise", 1), ("/shift", 2)):
        tables.append(tool_spans(p, baseline_starts, lognormal(seed, len(baseline_starts)), route=route))
    now_starts = per_minute(E, 10, 40)  # the two windows evaluated
    tables.append(tool_spans(p, now_starts, lognormal(3, len(now_starts)), route="/noise"))
    tables.append(tool_spans(p, now_starts, lognormal(4, len(now_starts), scale=2.0), route="/shift"))
    load(embedded_store, *tables)
    ev = evaluator(embedded_store, p, DRIFT)
    step = ev.evaluate(E + 300)
    assert moves(step) == [("/shift", "inactive", "pending"), ("/shift", "pending", "firing")]
    noise = ev.engine.alert_for(p, ev.config.rules[0], {"route": "/noise"})
    assert noise is not None and noise.observation["holds"] is False and noise.observation["value"] < 1.5 * 220
    [note] = step.notifications
    assert note.payload["alerts"][0]["summary"].startswith("tool time p99 ")
    # Five minutes on, the shifted window that alerted is left out of the baseline: still firing.
    assert moves(ev.evaluate(E + 600)) == []
    shift = ev.engine.alert_for(p, ev.config.rules[0], {"route": "/shift"})
    assert shift is not None and shift.state == "firing"
    assert shift.observation["facts"]["alerting_windows"] == 1 and shift.observation["facts"]["baseline_windows"] == 11


BURN = (
    HEADER
    + """\
rules:
  - {alert: ToolSLO, type: burn_rate, metric: tool, slo: {objective: 99%, threshold: 500ms}, by: [route],
     windows: [{long: 1h, short: 5m, factor: 10, severity: critical}], min_samples: 100}
"""
)


def slow_share(project: str, route: str, start: int, minutes: int, share: float) -> object:
    starts = per_minute(start, minutes, 20)
    slow_every = round(1 / share) if share else 0
    durations = [900.0 if slow_every and i % slow_every == 0 else 100.0 for i in range(len(starts))]
    return tool_spans(project, starts, durations, route=route)


def test_burn_rate_fires_only_when_the_long_and_the_short_window_both_burn(embedded_store: Store) -> None:
    p = "ae-burn"
    load(
        embedded_store,
        slow_share(p, "/spike", E - 3600, 55, 0.0), slow_share(p, "/spike", E - 300, 5, 0.5),
        slow_share(p, "/sustained", E - 3600, 60, 0.2),
        slow_share(p, "/recovered", E - 3600, 55, 0.2), slow_share(p, "/recovered", E - 300, 5, 0.0),
    )  # fmt: skip
    ev = evaluator(embedded_store, p, BURN)
    step = ev.evaluate(E)
    assert moves(step) == [("/sustained", "inactive", "pending"), ("/sustained", "pending", "firing")]
    facts = {r: ev.engine.alert_for(p, ev.config.rules[0], {"route": r}).observation["facts"]  # type: ignore[union-attr]
             for r in ("/spike", "/sustained", "/recovered")}  # fmt: skip
    assert (facts["/spike"]["long_rate"], facts["/spike"]["short_rate"]) == pytest.approx((50 / 1200 / 0.01, 50.0))
    assert (facts["/sustained"]["long_rate"], facts["/sustained"]["short_rate"]) == pytest.approx((20.0, 20.0))
    assert facts["/recovered"]["short_rate"] == 0.0 and facts["/recovered"]["long_rate"] > 10
    assert step.notifications[0].payload["alerts"][0]["labels"] == {
        "alertname": "ToolSLO", "severity": "critical", "route": "/sustained"}  # fmt: skip


# --- restarts ------------------------------------------------------------------------------
PENDING = THRESHOLD.replace("min_samples: 100}", "min_samples: 100, for: 2m}")


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with fake_slack() as fake:
        yield fake


def deliver(store: Store, config: AlertConfig, fake: FakeSlack, project: str, count: int) -> None:
    """Run a courier until the fake Slack holds ``count`` messages and the outbox is empty."""
    courier = Courier(store.alerts, build_notifiers(config, {"SLACK": fake.url}), projects=[project])
    stop = threading.Event()
    thread = threading.Thread(target=courier.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(fake.delivered) >= count and not store.alerts.undelivered([project]), timeout=20)
    finally:
        stop.set()
        courier.wake.set()
        thread.join(10)
        courier.close()


SLACK = '\nreceivers:\n  team: {type: slack, url: "${SLACK}"}\n'


def test_restart_while_pending_continues_to_firing_once(embedded_store: Store, slack: FakeSlack) -> None:
    p = "ae-restart-pending"
    text = PENDING + SLACK
    load(embedded_store, series(p, E - 300, 10, 40, 900.0))
    assert moves(evaluator(embedded_store, p, text).evaluate(E)) == [("/r", "inactive", "pending")]
    restarted = evaluator(embedded_store, p, text)  # the process died while pending
    assert moves(restarted.evaluate(E + 60)) == []
    assert moves(restarted.evaluate(E + 120)) == [("/r", "pending", "firing")]
    again = evaluator(embedded_store, p, text)
    assert moves(again.evaluate(E + 180)) == [] and again.last is not None and not again.last.notifications
    deliver(embedded_store, parse_rules(text), slack, p, 1)
    assert [m["text"].split(" — ")[0] for m in slack.delivered] == [":rotating_light: FIRING: ToolSlow (warning)"]


def test_restart_while_firing_neither_loses_nor_repeats_notifications(embedded_store: Store, slack: FakeSlack) -> None:
    p = "ae-restart-firing"
    text = THRESHOLD + SLACK
    config = parse_rules(text)
    load(embedded_store, series(p, E - 300, 6, 40, 900.0), series(p, E + 60, 5, 40, 100.0))
    first = evaluator(embedded_store, p, text)
    assert [n.status for n in first.evaluate(E).notifications] == ["firing"]
    deliver(embedded_store, config, slack, p, 1)  # acknowledged by Slack before the restart
    second = evaluator(embedded_store, p, text)
    assert second.evaluate(E + 60).notifications == ()  # still firing: nothing new
    assert [n.status for n in second.evaluate(E + 360).notifications] == ["resolved"]
    third = evaluator(embedded_store, p, text)  # dies before delivering: the resolved message waits in the outbox
    assert third.evaluate(E + 420).notifications == ()
    deliver(embedded_store, config, slack, p, 2)
    assert [m["text"].split(":")[1].strip() for m in slack.delivered] == ["rotating_light", "white_check_mark"]
    assert len(slack.received) == 2
    outbox = embedded_store.alerts.notifications(p, E - 3600, E + 3600)
    delivered = sorted((n["status"], n["delivery"], n["attempts"]) for n in outbox)
    assert delivered == [("firing", "sent", 1), ("resolved", "sent", 1)]


def test_replay_shows_what_would_have_fired_and_when(embedded_store: Store) -> None:
    p = "ae-replay"
    load(embedded_store, series(p, E - 1800, 20, 40, 100.0), series(p, E - 600, 10, 40, 900.0),
         series(p, E + 400, 20, 40, 100.0))  # fmt: skip
    result = replay(embedded_store, parse_rules(THRESHOLD), ["team"], DASH, E - 1800, E + 1800, [p])
    fired = [(t.time - E, t.to_state) for t in result.transitions]
    assert fired == [(-540, "pending"), (-540, "firing"), (600, "resolved")]  # E to E+400 had no data: kept firing
    assert [(n.time - E, n.status) for n in result.notifications] == [(-540, "firing"), (600, "resolved")]
    assert result.evaluations == 60 and embedded_store.alerts.events(p, E - 3600, E + 3600) == []


@pytest.mark.parametrize(
    ("group_wait", "expected"),
    [("90s", [(90, "firing")]), ("10m", [(600, "resolved")])],  # between evaluations; after it resolved: still told
)
def test_replay_sends_at_the_group_wait_as_the_live_service_does(
    embedded_store: Store, group_wait: str, expected: list[tuple[int, str]]
) -> None:
    p = f"ae-replay-wait-{group_wait}"
    load(embedded_store, series(p, E - 1800, 29, 40, 100.0), series(p, E - 60, 1, 40, 900.0),
         series(p, E, 20, 40, 100.0))  # fmt: skip
    rules = THRESHOLD.replace("group_wait: 0s", f"group_wait: {group_wait}, send_resolved: false")
    result = replay(embedded_store, parse_rules(rules), ["team"], DASH, E - 1800, E + 1800, [p])
    assert [(t.time - E, t.to_state) for t in result.transitions] == [(0, "pending"), (0, "firing"), (300, "resolved")]
    assert [(n.time - E, n.status) for n in result.notifications] == expected


def test_the_service_sends_when_the_group_wait_ends_not_at_the_next_evaluation(
    embedded_store: Store, slack: FakeSlack, tmp_path: Path
) -> None:
    p = "ae-service-wait"
    load(embedded_store, series(p, E - 300, 6, 40, 900.0))
    rules = tmp_path / "rules.yaml"
    text = "evaluation_interval: 20s\n" + THRESHOLD.replace("group_wait: 0s", "group_wait: 2s") + SLACK
    rules.write_text(text)
    offset = time.time() - (E + 5)  # the service's clock reads E + 5 s now, and runs on
    service = AlertService(
        embedded_store, rules, {"SLACK": slack.url}, clock=lambda: time.time() - offset, projects=[p]
    )
    started = time.monotonic()
    service.start()
    try:
        wait_for(lambda: len(slack.delivered) >= 1, timeout=15)
        waited = time.monotonic() - started
    finally:
        service.stop()
    assert [m["text"].split(" — ")[0] for m in slack.delivered] == [":rotating_light: FIRING: ToolSlow (warning)"]
    assert 1.0 <= waited < 10.0  # the group wait (2 s from a whole second), not the next evaluation (20 s later)


def test_replay_says_why_each_rule_did_not_fire(embedded_store: Store) -> None:
    p = "ae-replay-why"
    load(embedded_store, series(p, E - 1800, 30, 40, 412.0))
    rules = (
        HEADER
        + """\
rules:
  - {alert: ToolSlow, type: threshold, metric: tool, percentile: p95, threshold: 500, window: 5m, by: [route],
     min_samples: 100}
  - {alert: ElsewhereSlow, type: threshold, metric: tool, percentile: p95, threshold: 500, window: 5m,
     match: {route: /elsewhere}}
  - {alert: NeedsMore, type: threshold, metric: tool, percentile: p99, threshold: 100, window: 5m, min_samples: 5000}
"""
    )
    result = replay(embedded_store, parse_rules(rules), ["team"], DASH, E - 1800, E, [p])
    assert result.transitions == ()
    assert [(rule.alert, why) for rule, why in result.explained] == [
        (
            "ToolSlow",
            "never held over 1 series; closest: tool time p95 412 ms ≤ threshold 500 ms (route=/r); "
            "2 evaluations had too few samples",  # the first windows, before the data's 100th sample
        ),
        ("ElsewhereSlow", "no matching series: no tool time samples for it in the window"),
        ("NeedsMore", "too few samples at every evaluation (at most 200; it needs 5,000)"),
    ]


HIT_RATE = (
    HEADER
    + """\
rules:
  - {alert: CacheCold, type: threshold, metric: cache_hit_rate, threshold: 60%, window: 5m, by: [route]}
"""
)


def model_calls(
    project: str, start: int, minutes: int, per_min: int, cached: int | None, route: str = "/chat"
) -> object:
    """Client model calls of 1,000 input tokens, ``cached`` of them read from the prompt cache (None: not reported)."""
    table = series(project, start, minutes, per_min, 300.0, route=route)
    n = table.num_rows  # type: ignore[attr-defined]
    for name, values, kind in (
        ("Role", ["model"] * n, pa.string()),
        ("InputTokens", [1000] * n, pa.uint64()),
        ("CacheReadTokens", [cached] * n, pa.uint64()),
    ):
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values, kind))  # type: ignore[attr-defined]
    return table


def test_a_hit_rate_fires_below_its_threshold_and_says_so(embedded_store: Store) -> None:
    p = "ae-hit-rate"
    load(
        embedded_store,
        model_calls(p, E - 300, 5, 4, 900),  # 20 calls at 90 %: fine
        model_calls(p, E, 5, 2, 900), model_calls(p, E, 5, 3, 100),  # 25 calls: (10 x 900 + 15 x 100) / 25,000 = 42 %
        model_calls(p, E, 5, 4, 0, route="/few"),  # 20 calls at 0 %: the default minimum, fires too
        model_calls(p, E, 5, 4, None, route="/unreported"),  # no cache report: no data, never fires
        model_calls(p, E + 300, 5, 1, 0, route="/chat"),  # 5 calls at 0 %: too few to resolve or fire
    )  # fmt: skip
    ev = evaluator(embedded_store, p, HIT_RATE)
    assert moves(ev.evaluate(E)) == []
    step = ev.evaluate(E + 300)
    assert sorted(moves(step)) == [("/chat", "inactive", "pending"), ("/chat", "pending", "firing"),
                                   ("/few", "inactive", "pending"), ("/few", "pending", "firing")]  # fmt: skip
    alerts = {a["labels"]["route"]: a for note in step.notifications for a in note.payload["alerts"]}
    assert (alerts["/chat"]["value"], alerts["/chat"]["reference"], alerts["/chat"]["count"]) == (
        pytest.approx(0.42), 0.6, 25)  # fmt: skip
    assert alerts["/chat"]["summary"] == "cache hit rate 42% < threshold 60%"
    assert alerts["/chat"]["dashboard_url"] == "http://dash.example/cache?window=1h&route=%2Fchat"  # it says why
    assert moves(ev.evaluate(E + 600)) == []  # /chat: 5 calls at 0 %, too few to say; /few: no calls, no verdict
