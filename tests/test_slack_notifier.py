"""Delivery to a local receiver that answers like Slack's incoming webhook: pacing, Retry-After,
retries of transient errors, permanent errors reported once, no duplicates, no loss, no leaked URL."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from agentlat.alerts import views
from agentlat.alerts.conditions import Observation
from agentlat.alerts.engine import Engine
from agentlat.alerts.evaluator import outbox_row
from agentlat.alerts.notify import Courier, build_notifiers
from agentlat.alerts.rules import AlertConfig
from agentlat.alerts.rules_file import parse_rules
from agentlat.store import Store
from tests.fake_slack import SECRET_PATH, FakeSlack, fake_slack
from tests.servers import wait_for

RULES = """\
notify: {group_by: [alertname, route], group_wait: 0s}
receivers:
  team: {type: slack, url: "${SLACK}", timeout: 0.5}
  hook: {type: webhook, url: "${HOOK}", timeout: 0.5}
rules:
  - {alert: ToolSlow, type: threshold, metric: tool, percentile: p95, threshold: 500, window: 5m, by: [route],
     receivers: [RECEIVER]}
"""
_projects = itertools.count()


@pytest.fixture(autouse=True)
def no_secret_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every record of every logger, at every level, is checked for the webhook's secret path."""
    caplog.set_level(logging.DEBUG)
    yield
    leaked = [r.getMessage() for r in caplog.records if SECRET_PATH in r.getMessage() or "s3cr3t" in r.getMessage()]
    assert not leaked


class Outbox:
    """Messages for one receiver of a fresh project, queued as the evaluator queues them."""

    def __init__(self, store: Store, receiver: str) -> None:
        self.store = store
        self.project = f"slack-{next(_projects)}"
        self.config: AlertConfig = parse_rules(RULES.replace("RECEIVER", receiver))
        self.engine = Engine(self.config, [receiver], "http://dash.example")
        self.version = 0

    def queue(self, *routes: str) -> list[str]:
        """One firing notification per route, in order; returns their ids."""
        rule = self.config.rules[0]
        ids = []
        for i, route in enumerate(routes):
            now = int(time.time()) - 3600 + i  # queued a while ago: due now
            self.engine.observe(now, self.project, rule, [Observation({"route": route}, True, 900.0, 500.0, 300)])
            for note in self.engine.flush(now):
                self.version += 1
                self.store.alerts.write_outbox([outbox_row(note, self.version)])
                ids.append(note.id)
        return ids

    def rows(self) -> dict[str, dict]:
        return {r["id"]: r for r in self.store.alerts.notifications(self.project, 0, 2_000_000_000)}


class Running:
    """A courier on its own thread, as the server runs it."""

    def __init__(self, outbox: Outbox, environ: dict[str, str]) -> None:
        self.courier = Courier(outbox.store.alerts, build_notifiers(outbox.config, environ), projects=[outbox.project])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.courier.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.courier.wake.set()
        self.thread.join(10)
        self.courier.close()


def secrets(fake: FakeSlack) -> dict[str, str]:
    return {"SLACK": fake.url, "HOOK": fake.url}


def deliver(outbox: Outbox, fake: FakeSlack, done: int) -> None:
    """Run a courier until ``done`` messages are no longer pending."""
    running = Running(outbox, secrets(fake))
    try:
        wait_for(lambda: sum(r["delivery"] != "pending" for r in outbox.rows().values()) >= done, timeout=30)
    finally:
        running.close()


def routes_of(bodies: list[dict]) -> list[str]:
    return [b["blocks"][2]["text"]["text"].split("`route=")[1].split("`")[0] for b in bodies]


def test_messages_go_out_in_order_at_most_one_a_second(embedded_store: Store) -> None:
    outbox = Outbox(embedded_store, "team")
    outbox.queue("/a", "/b", "/c", "/d")
    with fake_slack() as fake:
        deliver(outbox, fake, 4)
    assert routes_of(fake.delivered) == ["/a", "/b", "/c", "/d"]
    gaps = [b.at - a.at for a, b in itertools.pairwise(fake.received)]
    assert min(gaps) >= 0.98, gaps
    assert {r["delivery"] for r in outbox.rows().values()} == {"sent"}


def test_429_waits_for_retry_after(embedded_store: Store) -> None:
    outbox = Outbox(embedded_store, "team")
    [ident] = outbox.queue("/a")
    with fake_slack("429:2") as fake:
        deliver(outbox, fake, 1)
    assert [r.answer for r in fake.received] == ["429:2", "ok"]
    assert fake.received[1].at - fake.received[0].at >= 1.98
    row = outbox.rows()[ident]
    assert (row["delivery"], row["attempts"]) == ("sent", 2)


@pytest.mark.parametrize("answer", ["400:invalid_payload", "404:channel_not_found"])
def test_permanent_errors_are_reported_once_and_not_retried(
    embedded_store: Store, caplog: pytest.LogCaptureFixture, answer: str
) -> None:
    outbox = Outbox(embedded_store, "team")
    broken, fine = outbox.queue("/a", "/b")
    with fake_slack(answer) as fake:
        deliver(outbox, fake, 2)
        again = Courier(embedded_store.alerts, build_notifiers(outbox.config, secrets(fake)), projects=[outbox.project])
        assert again.step(idle=5.0) == 5.0  # nothing left to send, not even after a restart
        again.close()
    assert [r.answer for r in fake.received] == [answer, "ok"] and routes_of(fake.delivered) == ["/b"]
    rows = outbox.rows()
    code = answer.split(":")[1]
    assert (rows[broken]["delivery"], rows[broken]["attempts"]) == ("failed", 1) and code in rows[broken]["last_error"]
    assert rows[fine]["delivery"] == "sent"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and code in errors[0].getMessage() and "will not be retried" in errors[0].getMessage()


def test_server_errors_and_timeouts_are_retried_without_duplicates_or_loss(embedded_store: Store) -> None:
    outbox = Outbox(embedded_store, "team")
    first, second = outbox.queue("/a", "/b")
    with fake_slack("500:rollup_error", "timeout", "ok", "503:unavailable") as fake:
        deliver(outbox, fake, 2)
    assert [r.answer for r in fake.received] == ["500:rollup_error", "timeout", "ok", "503:unavailable", "ok"]
    assert routes_of(fake.delivered) == ["/a", "/b"]  # each once, in order: /b waited behind /a's retries
    rows = outbox.rows()
    assert (rows[first]["attempts"], rows[second]["attempts"]) == (3, 2)
    assert {r["delivery"] for r in rows.values()} == {"sent"}
    shown = {ident: views.notification_dict(row) for ident, row in rows.items()}  # as /api/v1/alerts/events shows them
    [failed_1, failed_2] = shown[first]["errors"]  # the history stays after the retry that succeeded
    assert failed_1.startswith("attempt 1: ") and "500" in failed_1 and "rollup_error" in failed_1
    assert failed_2 == "attempt 2: no answer within 0.5 s" and shown[first]["last_error"] == failed_2
    [only] = shown[second]["errors"]
    assert only.startswith("attempt 1: ") and "503" in only


def test_a_restart_sends_what_was_not_acknowledged_and_nothing_that_was(embedded_store: Store) -> None:
    outbox = Outbox(embedded_store, "team")
    outbox.queue("/a", "/b", "/c")
    with fake_slack() as fake:
        before = Courier(embedded_store.alerts, build_notifiers(outbox.config, secrets(fake)),
                         projects=[outbox.project])  # fmt: skip
        before.step()  # sends /a, then the process dies
        before.close()
        deliver(outbox, fake, 3)
    assert routes_of(fake.delivered) == ["/a", "/b", "/c"] and len(fake.received) == 3


def test_a_generic_webhook_gets_the_notification_with_its_id(embedded_store: Store) -> None:
    outbox = Outbox(embedded_store, "hook")
    [ident] = outbox.queue("/a")
    with fake_slack("503:unavailable") as fake:
        deliver(outbox, fake, 1)
    assert [r.answer for r in fake.received] == ["503:unavailable", "ok"]
    [body] = fake.delivered
    assert body["id"] == ident and body["status"] == "firing" and body["receiver"] == "hook"
    assert body["alerts"][0]["labels"] == {"alertname": "ToolSlow", "severity": "warning", "route": "/a"}
    assert fake.received[1].headers["Idempotency-Key"] == ident
    assert json.loads(outbox.rows()[ident]["payload"]) == body
