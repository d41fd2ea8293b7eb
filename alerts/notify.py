"""Sending notifications: Slack incoming webhooks, generic JSON webhooks, and the outbox courier.

The courier sends what the evaluator put in the store's outbox, oldest first per receiver,
and records each attempt there, so a restart resends nothing acknowledged and loses nothing
unsent. A message counts as sent only after a 2xx answer (at-least-once: were the process
to die between that answer and the store write, the message would go out again; the generic
webhook carries the notification id, in the body and as ``Idempotency-Key``, for receivers
that deduplicate).

Per webhook URL at most one message a second (Slack's limit), a 429's ``Retry-After``
honoured; 5xx answers, timeouts and connection errors are retried with exponential backoff
(1 s doubling to 5 min) for up to a day; permanent errors (any other 4xx, which is how Slack answers
invalid_payload, channel_not_found, invalid_token, no_service, ...) are logged once and not
retried. Webhook URLs are secrets: they are never logged, stored or returned by the API.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from agentlat.alerts.message import slack_body, title
from agentlat.alerts.receivers import effective_receivers, resolved_url, substitute
from agentlat.alerts.rules import AlertConfig
from agentlat.store import AlertTables, StoreError

log = logging.getLogger("agentlat.alerts")

MIN_INTERVAL = 1.0  # seconds between two messages to one webhook
MAX_BACKOFF = 300.0
MAX_RETRY_AFTER = 3600.0
GIVE_UP_AFTER = 86400.0
# Anything else that is not 2xx is permanent: every error Slack names (invalid_payload 400,
# action_prohibited and invalid_token 403, channel_not_found and no_service 404,
# channel_is_archived 410, ...) comes with a 4xx; its rollup_error (500) is worth a retry.
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class _Redactor(logging.Filter):
    """Replaces webhook URLs in records of the ``httpx`` logger (it logs each request's URL)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: dict[str, str] = {}

    def add(self, url: str) -> None:
        parts = urlsplit(url)
        self.secrets[url] = f"{parts.scheme}://{parts.netloc}/<redacted>"

    def redact(self, text: str) -> str:
        for secret, shown in sorted(self.secrets.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(secret, shown)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            record.msg, record.args = self.redact(record.getMessage()), ()
        return True


REDACTOR = _Redactor()
logging.getLogger("httpx").addFilter(REDACTOR)


@dataclass(frozen=True, slots=True)
class Delivery:
    """The outcome of one attempt: ``sent``, ``retry`` (after ``retry_after`` s if given) or ``failed``."""

    outcome: str
    detail: str = ""
    retry_after: float | None = None


class Notifier(Protocol):
    name: str  # the receiver's name
    key: str  # identifies the webhook URL (for pacing) without revealing it

    def send(self, payload: Mapping[str, Any]) -> Delivery: ...

    def close(self) -> None: ...


def retry_after(headers: httpx.Headers) -> float:
    """Seconds from a Retry-After header (delta-seconds), at least the pacing interval."""
    try:
        return min(max(float(headers.get("retry-after", "")), MIN_INTERVAL), MAX_RETRY_AFTER)
    except ValueError:
        return MIN_INTERVAL


class _Webhook:
    """POSTs JSON to a secret URL and classifies the answer."""

    service = "webhook"

    def __init__(self, name: str, url: str, timeout: float, headers: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.key = hashlib.sha256(url.encode()).hexdigest()[:12]
        self._url = url
        self._client = httpx.Client(timeout=timeout, headers=dict(headers or {}), follow_redirects=False)
        self._timeout = timeout
        REDACTOR.add(url)

    def body(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        return dict(payload)

    def extra_headers(self, payload: Mapping[str, Any]) -> dict[str, str]:
        return {}

    def send(self, payload: Mapping[str, Any]) -> Delivery:
        try:
            response = self._client.post(self._url, json=self.body(payload), headers=self.extra_headers(payload))
        except httpx.TimeoutException:
            return Delivery("retry", f"no answer within {self._timeout:g} s")
        except httpx.HTTPError as exc:
            return Delivery("retry", REDACTOR.redact(f"{type(exc).__name__}: {exc}"))
        return self.classify(response.status_code, response.text.strip()[:200], response.headers)

    def classify(self, status: int, body: str, headers: httpx.Headers) -> Delivery:
        answer = f"{self.service} answered {status} {body}".strip()
        if 200 <= status < 300:
            return Delivery("sent", answer)
        if status in RETRYABLE_STATUS:
            honour = status == 429 or (status == 503 and "retry-after" in headers)
            return Delivery("retry", answer, retry_after(headers) if honour else None)
        return Delivery("failed", answer)

    def close(self) -> None:
        self._client.close()


class SlackNotifier(_Webhook):
    """A Slack incoming webhook: ``text`` plus Block Kit blocks."""

    service = "Slack"

    def body(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        return slack_body(payload)


class WebhookNotifier(_Webhook):
    """Any HTTP endpoint taking the notification as JSON (the outbox payload, Alertmanager-like)."""

    def extra_headers(self, payload: Mapping[str, Any]) -> dict[str, str]:
        return {"Idempotency-Key": str(payload["id"])}


def build_notifiers(config: AlertConfig, environ: Mapping[str, str]) -> dict[str, Notifier]:
    """A notifier per receiver, secrets read from ``environ``; raises AlertRulesError naming a missing one."""
    out: dict[str, Notifier] = {}
    for receiver in effective_receivers(config, environ):
        url = resolved_url(config, receiver, environ)
        where = f"{config.path}: receivers.{receiver.name}.headers"
        headers = {k: substitute(v, environ, f"{where}.{k}") for k, v in receiver.headers.items()}
        kind = SlackNotifier if receiver.type == "slack" else WebhookNotifier
        out[receiver.name] = kind(receiver.name, url, receiver.timeout, headers)
    return out


class Courier:
    """Delivers the outbox: one message at a time per receiver, in order, paced per webhook."""

    def __init__(
        self,
        tables: AlertTables,
        notifiers: Mapping[str, Notifier],
        *,
        clock: Callable[[], float] = time.time,
        give_up_after: float = GIVE_UP_AFTER,
        projects: Sequence[str] | None = None,
    ) -> None:
        self.tables = tables
        self.projects = projects
        self.notifiers = dict(notifiers)
        self.clock = clock
        self.give_up_after = give_up_after
        self.wake = threading.Event()
        self._free_at: dict[str, float] = {}  # webhook key -> earliest next send

    def step(self, idle: float = 5.0) -> float:
        """Send each receiver's oldest due message; return the seconds until another may be due."""
        wait = idle
        heads: dict[str, dict[str, Any]] = {}
        for item in self.tables.undelivered(self.projects):
            heads.setdefault(item["receiver"], item)
        for receiver, item in heads.items():
            notifier = self.notifiers.get(receiver)
            if notifier is None:
                self._record(item, Delivery("failed", f"receiver {receiver!r} is not configured"), self.clock())
                continue
            due = max(item["next_attempt_ms"] / 1000, self._free_at.get(notifier.key, 0.0))
            now = self.clock()
            if due > now:
                wait = min(wait, due - now)
                continue
            delivery = notifier.send(json.loads(item["payload"]))
            now = self.clock()
            self._free_at[notifier.key] = now + max(MIN_INTERVAL, delivery.retry_after or 0.0)
            self._record(item, delivery, now)
            wait = 0.0
        return wait

    def _record(self, item: dict[str, Any], delivery: Delivery, now: float) -> None:
        attempts = item["attempts"] + 1
        row = {**item, "attempts": attempts, "version": max(time.time_ns(), item["version"] + 1)}
        what = f"notification {item['id'][:12]} ({title(json.loads(item['payload']))}) to {item['receiver']}"
        if delivery.outcome == "sent":
            row.update(delivery="sent", sent_ms=int(now * 1000))
            log.info("sent %s", what)
        elif delivery.outcome == "retry" and now - item["created_at"] < self.give_up_after:
            wait = delivery.retry_after or min(2.0 ** (attempts - 1), MAX_BACKOFF)
            row.update(
                last_error=failed_attempt(item, attempts, delivery.detail), next_attempt_ms=int((now + wait) * 1000)
            )
            log.warning("%s: %s; retrying in %.0f s (attempt %d)", what, delivery.detail, wait, attempts)
        else:
            gave_up = " (gave up retrying after a day)" if delivery.outcome == "retry" else ""
            row.update(delivery="failed", last_error=failed_attempt(item, attempts, delivery.detail + gave_up))
            log.error("%s was not delivered and will not be retried: %s%s", what, delivery.detail, gave_up)
        self.tables.write_outbox([row])

    def run(self, stop: threading.Event, idle: float = 5.0) -> None:
        """Deliver until ``stop`` is set; ``wake`` cuts a wait short when new messages arrive."""
        while not stop.is_set():
            try:
                wait = self.step(idle)
            except StoreError as exc:
                log.warning("alert delivery cannot read the outbox, will retry: %s", exc)
                wait = idle
            if wait > 0:
                self.wake.wait(wait)
                self.wake.clear()

    def close(self) -> None:
        for notifier in self.notifiers.values():
            notifier.close()


MAX_ERRORS_KEPT = 10


def failed_attempt(item: Mapping[str, Any], attempt: int, detail: str) -> str:
    """The outbox row's error history (``LastError``) with this failed attempt added: one line per
    failed attempt, the last ``MAX_ERRORS_KEPT``, kept when a later attempt succeeds."""
    lines = [*filter(None, (item.get("last_error") or "").split("\n")), f"attempt {attempt}: {detail}"]
    return "\n".join(lines[-MAX_ERRORS_KEPT:])
