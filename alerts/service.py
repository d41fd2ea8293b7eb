"""Alerting as a running service: the evaluator and the outbox courier on background threads.

Used by ``agentlat serve --alerts RULES`` (inside the server, which owns the embedded store)
and by ``agentlat alerts run RULES --clickhouse URL`` (standalone, beside collectors writing
to a ClickHouse server). The rules file is validated at start-up and re-read when it changes;
a broken edit is logged and the last good rules stay in force.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from agentlat.alerts.evaluator import Evaluator, Step
from agentlat.alerts.notify import Courier, Notifier, build_notifiers
from agentlat.alerts.receivers import effective_receivers
from agentlat.alerts.rules import AlertConfig, AlertRulesError
from agentlat.alerts.rules_file import load_rules
from agentlat.shared.yamlfile import WatchedFile
from agentlat.store import Store, StoreError

log = logging.getLogger("agentlat.alerts")

DASHBOARD_ENV = "AGENTLAT_DASHBOARD_URL"
DEFAULT_DASHBOARD_URL = "http://127.0.0.1:8501"


def dashboard_url(config: AlertConfig, environ: Mapping[str, str]) -> str:
    """The file's ``dashboard_url``, else AGENTLAT_DASHBOARD_URL, else the local dashboard."""
    return config.dashboard_url or environ.get(DASHBOARD_ENV) or DEFAULT_DASHBOARD_URL


class AlertService:
    """The evaluator (every ``evaluation_interval``) and the courier, for one store."""

    def __init__(
        self,
        store: Store,
        path: Path,
        environ: Mapping[str, str] = os.environ,
        clock: Callable[[], float] = time.time,
        projects: Sequence[str] | None = None,
    ) -> None:
        """``projects``: alert on these only (default: every project with data)."""
        self.rules = WatchedFile(path, load_rules)
        self.environ = environ
        self.clock = clock
        config = self.rules.value
        notifiers = build_notifiers(config, environ)
        self.evaluator = Evaluator(store, config, list(notifiers), dashboard_url(config, environ), projects)
        self.courier = Courier(store.alerts, notifiers, clock=clock, projects=projects)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._retired: list[Notifier] = []
        if not notifiers:
            log.warning(
                "%s declares no receivers and AGENTLAT_SLACK_WEBHOOK is not set: alerts are evaluated, not sent",
                path,
            )

    @property
    def config(self) -> AlertConfig:
        return self.evaluator.config

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._evaluate_loop, name="agentlat-alerts", daemon=True),
            threading.Thread(target=self.courier.run, args=(self._stop,), name="agentlat-alert-delivery", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        log.info("alerting: %d rules from %s, every %d s", len(self.config.rules), self.rules.path,
                 self.config.evaluation_interval)  # fmt: skip

    def _evaluate_loop(self) -> None:
        """Evaluate every ``evaluation_interval``; between evaluations, wake when a group's wait
        ends, so a notification is sent on time (not at the next evaluation, when the alert may
        already have resolved)."""
        next_evaluation = 0.0
        while not self._stop.is_set():
            now = self.clock()
            if now >= next_evaluation:
                self._reload()
                done = self._step(self.evaluator.evaluate, int(now))
                interval = self.config.evaluation_interval
                next_evaluation = now - now % interval + interval
            else:
                done = self._step(self.evaluator.flush, int(now))
            due = self.evaluator.next_flush_at(int(now)) if done else None  # failed: retry at the next evaluation
            wake = next_evaluation if due is None else min(next_evaluation, due)
            self._stop.wait(max(wake - self.clock(), 0.05))

    def _step(self, decide: Callable[[int], Step], now: int) -> bool:
        """Run one evaluation or flush; False when it failed (logged)."""
        try:
            if decide(now).notifications:
                self.courier.wake.set()
            return True
        except StoreError as exc:
            log.warning("alert evaluation failed, will retry: %s", exc)
        except Exception:
            log.exception("alert evaluation failed")
        return False

    def _reload(self) -> None:
        if not self.rules.changed():
            return
        if self.rules.error is not None:
            log.error("alert rules not reloaded, the last good ones stay in force: %s", self.rules.error)
            return
        config = self.rules.value
        try:
            notifiers = build_notifiers(config, self.environ)
        except AlertRulesError as exc:
            log.error("alert rules not reloaded, the last good ones stay in force: %s", exc)
            return
        with self.evaluator.lock:
            engine = self.evaluator.engine
            engine.reconfigure(config)
            engine.receivers = tuple(notifiers)
            engine.dashboard_url = dashboard_url(config, self.environ)
        self._retired += self.courier.notifiers.values()  # closed at stop: a send may be under way
        self.courier.notifiers = notifiers
        log.info("alert rules reloaded from %s: %d rules", self.rules.path, len(config.rules))

    def stop(self) -> None:
        self._stop.set()
        self.courier.wake.set()
        for thread in self._threads:
            thread.join(15)
        self.courier.close()
        for notifier in self._retired:
            notifier.close()


def receivers_summary(config: AlertConfig, environ: Mapping[str, str]) -> list[dict[str, str]]:
    """Receivers by name and type; never their URLs."""
    return [{"name": r.name, "type": r.type} for r in effective_receivers(config, environ)]
