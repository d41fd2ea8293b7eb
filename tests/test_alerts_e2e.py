"""Alerting end to end: ``agentlat serve --alerts`` receives known spans, evaluates the rules and
sends the firing message to a fake Slack; the API shows states and events; the CLI replays."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.fake_slack import SECRET_PATH, FakeSlack, fake_slack
from tests.otlp_payloads import MS, SpanSpec, otlp_protobuf
from tests.servers import AGENTLAT, ServerProcess, wait_for

SERVICE = "e2e-alert-svc"
DASHBOARD = "http://dashboard.example:8501"
RULES = """\
evaluation_interval: 2s
evaluation_delay: 0s
notify: {group_by: [alertname, route], group_wait: 0s, group_interval: 1m}
receivers:
  team: {type: slack, url: "${E2E_SLACK_URL}"}
rules:
  - alert: E2ETTFTHigh
    type: threshold
    metric: ttft
    percentile: p95
    threshold: 500ms
    window: 5m
    by: [service, route]
    min_samples: 20
    annotations: {summary: "TTFT on {route} is slow"}
"""


class AlertingServer(ServerProcess):
    """``agentlat serve --alerts RULES``."""

    def __init__(self, workdir: Path, rules: Path, env: dict[str, str]) -> None:
        super().__init__(workdir, extra_env=env)
        self.rules = rules

    def store_args(self) -> list[str]:
        return [*super().store_args(), "--alerts", str(self.rules)]


def model_calls(start_ns: int, ttft_s: float, prompt_version: str) -> list[SpanSpec]:
    attributes = {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m1", "gen_ai.response.time_to_first_chunk": ttft_s,
        "agentlat.route": "/e2e", "agentlat.prompt.version": prompt_version,
    }  # fmt: skip
    return [SpanSpec("chat m1", start_ns=start_ns + i * 10 * MS, duration_ns=2000 * MS, kind=3, service=SERVICE,
                     attributes=attributes) for i in range(30)]  # fmt: skip


SENT: dict[str, int] = {}  # when the slow prompt version's spans began (the alerting fixture sets it)


@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlack]:
    with fake_slack() as fake:
        yield fake


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("alert-rules") / "alerts.yaml"
    path.write_text(RULES)
    return path


@pytest.fixture(scope="module")
def alerting(tmp_path_factory: pytest.TempPathFactory, rules_file: Path, slack: FakeSlack) -> Iterator[ServerProcess]:
    env = {"E2E_SLACK_URL": slack.url, "AGENTLAT_DASHBOARD_URL": DASHBOARD, "AGENTLAT_ROLLUP_SETTLE": "0.3"}
    proc = AlertingServer(tmp_path_factory.mktemp("alerting"), rules_file, env).start()
    minute = time.time_ns() // (60 * 10**9) * 60 * 10**9
    SENT["v2_start_s"] = minute // 10**9 - 150
    spans = model_calls(minute - 450 * 10**9, 0.1, "v1") + model_calls(SENT["v2_start_s"] * 10**9, 0.9, "v2")
    response = httpx.post(f"{proc.url}/v1/traces", content=otlp_protobuf(spans),
                          headers={"Content-Type": "application/x-protobuf"}, timeout=30)  # fmt: skip
    assert response.status_code == 200, response.text
    yield proc
    proc.stop()


def test_the_firing_message_reaches_slack_with_text_blocks_and_a_dashboard_link(
    alerting: ServerProcess, slack: FakeSlack
) -> None:
    [message] = wait_for(lambda: slack.delivered, timeout=60)
    assert message["text"].startswith(":rotating_light: FIRING: E2ETTFTHigh (warning) — TTFT p95 900 ms &gt; threshold")
    header, _, section, changed, _ = message["blocks"]
    assert header["text"]["text"] == "FIRING: E2ETTFTHigh (warning)"
    text = section["text"]["text"]
    assert "*TTFT p95 900 ms &gt; threshold 500 ms*" in text and "TTFT on /e2e is slow" in text
    assert "30 samples in the 5m window ending" in text and f"`service={SERVICE}` `route=/e2e`" in text
    link = f"{DASHBOARD}/?window=1h&service={SERVICE}&route=%2Fe2e&series=ttft"
    assert section["accessory"]["url"] == link and f"<{link}|dashboard>" in message["text"]
    began = datetime.fromtimestamp(SENT["v2_start_s"], tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    expected = f"Changed with it: new agentlat.prompt.version v2 from {began} (before: v1)"
    assert changed["elements"][0]["text"] == expected
    assert SECRET_PATH not in alerting.log()


def test_the_api_shows_rules_states_and_events(alerting: ServerProcess, slack: FakeSlack) -> None:
    wait_for(lambda: slack.delivered, timeout=60)
    body = alerting.get("/api/v1/alerts").json()
    [rule] = body["rules"]
    assert (rule["alert"], rule["state"], rule["firing"], rule["condition"]) == (
        "E2ETTFTHigh", "firing", 1, "TTFT p95 > 500 ms over 5m")  # fmt: skip
    [alert] = body["alerts"]
    assert alert["labels"] == {"alertname": "E2ETTFTHigh", "severity": "warning", "service": SERVICE, "route": "/e2e"}
    assert (alert["state"], alert["value"], alert["count"], alert["muted"]) == ("firing", pytest.approx(900), 30, None)
    assert body["receivers"] == [{"name": "team", "type": "slack"}] and "s3cr3t" not in str(body)
    assert [e["to"] for e in body["events"]] == ["firing", "pending"]

    def sent() -> dict | None:
        events = alerting.get("/api/v1/alerts/events", window="1h").json()
        return events if events["notifications"] and events["notifications"][0]["delivery"] == "sent" else None

    [note] = wait_for(sent)["notifications"]
    assert (note["status"], note["title"], note["attempts"], note["alerts"]) == (
        "firing", "FIRING: E2ETTFTHigh (warning)", 1, 1)  # fmt: skip


def test_alerts_test_replays_the_stored_data(alerting: ServerProcess, rules_file: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run([AGENTLAT, "alerts", "test", str(rules_file), "--window", "1h", "--api", alerting.url],
                            capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{rules_file}: replayed ") and "evaluations every 1m; projects: default" in lines[0]
    firing = [line for line in lines if "firing    E2ETTFTHigh (warning)" in line]
    assert firing and f"{{service={SERVICE}, route=/e2e}}  TTFT p95 900 ms > threshold 500 ms (n=30)" in firing[0]
    assert any("notify    team: FIRING: E2ETTFTHigh (warning)" in line for line in lines)
    assert lines[-1] == "fired 1 time (E2ETTFTHigh), resolved 0 times, 1 notifications"


def test_alerts_test_says_why_nothing_fired(alerting: ServerProcess, tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text(RULES.replace("threshold: 500ms", "threshold: 2s"))
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run([AGENTLAT, "alerts", "test", str(quiet), "--window", "1h", "--api", alerting.url],
                            capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == [
        "Nothing would have fired:",
        f"  E2ETTFTHigh (warning): never held over 1 series; closest: TTFT p95 900 ms ≤ threshold 2,000 ms "
        f"(service={SERVICE}, route=/e2e)",
    ]


def test_replay_rejects_broken_rules_with_their_line(alerting: ServerProcess) -> None:
    body = {"rules": RULES.replace("p95", "p90"), "file": "mine.yaml"}
    response = httpx.post(f"{alerting.url}/api/v1/alerts/replay", json=body, timeout=30)
    assert response.status_code == 400
    assert "mine.yaml:10: rules[0].percentile: expected p50 or p95 or p99" in response.json()["error"]["message"]


def test_without_rules_the_alert_routes_say_how_to_configure_them(server: ServerProcess) -> None:
    for path in ("/api/v1/alerts", "/api/v1/alerts/events"):
        response = server.get(path)
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["status"] == 404 and "agentlat serve --alerts alerts.yaml" in error["message"]


def test_standalone_run_needs_a_clickhouse_server(rules_file: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTLAT_CLICKHOUSE_URL"} | {"COLUMNS": "200"}
    result = subprocess.run([AGENTLAT, "alerts", "run", str(rules_file)], capture_output=True, text=True, env=env,
                            timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert "needs a ClickHouse server" in result.stderr and "agentlat serve --alerts RULES" in result.stderr
