"""The deployment: docker-compose.yml, the Dockerfile and .dockerignore, and the admin-key bootstrap.

No Docker engine runs where these tests do, so the files are checked by their structure:
images and builds, commands, health checks (the collector's probe is also run against a
real collector), environment, dependencies, restart policies and published ports. Every
variable the compose file reads is documented in docs/operations.md, and every AGENTLAT_*
variable is one the server reads (server/config.py) or a documented client variable.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentlat.server import config
from agentlat.server.auth import bootstrap_admin_record, hash_secret, new_key
from agentlat.store import ApiKeyRecord
from tests.servers import AGENTLAT, ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
AGENTLAT_SERVICES = ("init", "collector", "dashboard", "alerts")
LONG_RUNNING = ("clickhouse", "collector", "dashboard", "alerts")
OPERATIONS = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
SERVER_VARIABLES = {var for _, var, _ in config._ENV}
# Read by the commands (dashboard, keys bootstrap, the alert evaluator), not the server's settings.
CLIENT_VARIABLES = {
    "AGENTLAT_API",
    "AGENTLAT_API_KEY",
    "AGENTLAT_BOOTSTRAP_ADMIN_KEY",
    "AGENTLAT_SLACK_WEBHOOK",
    "AGENTLAT_DASHBOARD_URL",
}
SECRETS = {"CLICKHOUSE_PASSWORD", "AGENTLAT_API_KEY"}
INTERPOLATION = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:[-?])(?P<arg>[^}]*))?\}")


def strings(node: Any) -> Iterator[str]:
    """Every string in the compose document, keys included."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)
    elif isinstance(node, str):
        yield node


def with_defaults(text: str) -> str:
    """A compose value as it reads with nothing set in the environment (secrets as <NAME>)."""
    return INTERPOLATION.sub(lambda m: m["arg"] if m["op"] == ":-" else f"<{m['name']}>", text)


def probe(service: str) -> str:
    """The Python code of a service's health check."""
    test = SERVICES[service]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"] and len(test) == 4
    return test[3]


# --- services, images, commands -------------------------------------------------------
def test_the_stack_has_clickhouse_init_collector_dashboard_and_alerts() -> None:
    assert set(SERVICES) == {"clickhouse", "init", "collector", "dashboard", "alerts"}


def test_clickhouse_runs_a_pinned_release_with_data_in_a_named_volume() -> None:
    clickhouse = SERVICES["clickhouse"]
    assert re.fullmatch(r"clickhouse/clickhouse-server:\d+\.\d+", clickhouse["image"])
    assert clickhouse["volumes"] == ["clickhouse-data:/var/lib/clickhouse"]
    assert "clickhouse-data" in COMPOSE["volumes"]
    assert "ports" not in clickhouse  # reached on the compose network only
    env = clickhouse["environment"]
    assert env["CLICKHOUSE_PASSWORD"].startswith("${CLICKHOUSE_PASSWORD:?")
    assert with_defaults(env["CLICKHOUSE_USER"]) == with_defaults(env["CLICKHOUSE_DB"]) == "agentlat"


@pytest.mark.parametrize("service", AGENTLAT_SERVICES)
def test_agentlat_services_run_the_image_built_from_the_dockerfile(service: str) -> None:
    spec = SERVICES[service]
    assert spec["build"] == {"context": ".", "dockerfile": "Dockerfile"} and spec["image"] == "agentlat:local"
    assert (ROOT / spec["build"]["context"] / spec["build"]["dockerfile"]).is_file()
    assert spec["command"][0] in ("agentlat", "sh")


def test_collector_serves_beyond_loopback_on_the_clickhouse_server() -> None:
    collector = SERVICES["collector"]
    assert collector["command"] == ["agentlat", "serve", "--host", "0.0.0.0"]  # so API keys are required
    url = with_defaults(collector["environment"]["AGENTLAT_CLICKHOUSE_URL"])
    assert url == "http://agentlat:<CLICKHOUSE_PASSWORD>@clickhouse:8123/agentlat"
    assert with_defaults(str(collector["deploy"]["replicas"])) == "1"
    assert collector["stop_grace_period"] == "30s"  # time to drain the write-ahead log on shutdown


def test_init_migrates_then_registers_the_admin_key() -> None:
    init = SERVICES["init"]
    assert init["command"] == ["sh", "-c", "agentlat migrate && agentlat keys bootstrap"]
    env = init["environment"]
    assert env["AGENTLAT_CLICKHOUSE_URL"] == SERVICES["collector"]["environment"]["AGENTLAT_CLICKHOUSE_URL"]
    assert env["AGENTLAT_BOOTSTRAP_ADMIN_KEY"].startswith("${AGENTLAT_API_KEY:?")
    assert env["AGENTLAT_TTL_DAYS"] == SERVICES["collector"]["environment"]["AGENTLAT_TTL_DAYS"]


def test_dashboard_reads_the_collectors_with_the_admin_key() -> None:
    dashboard = SERVICES["dashboard"]
    assert dashboard["command"] == [
        "agentlat", "dashboard", "--api", "http://collector:4318", "--host", "0.0.0.0", "--port", "8501",
    ]  # fmt: skip
    assert dashboard["environment"] == {
        "AGENTLAT_API_KEY": SERVICES["init"]["environment"]["AGENTLAT_BOOTSTRAP_ADMIN_KEY"]
    }


def test_alert_evaluator_is_opt_in_and_reads_clickhouse_with_mounted_rules() -> None:
    alerts = SERVICES["alerts"]
    assert alerts["command"] == ["agentlat", "alerts", "run"] and alerts["profiles"] == ["alerts"]
    assert alerts["environment"] == {
        "AGENTLAT_CLICKHOUSE_URL": SERVICES["collector"]["environment"]["AGENTLAT_CLICKHOUSE_URL"],
        "AGENTLAT_ALERTS": "/etc/agentlat/alerts.yaml",
        "AGENTLAT_SLACK_WEBHOOK": "${SLACK_WEBHOOK_URL:-}",
        "AGENTLAT_DASHBOARD_URL": "${AGENTLAT_DASHBOARD_URL:-http://127.0.0.1:8501}",
    }
    assert alerts["volumes"] == ["./alerts.yaml:/etc/agentlat/alerts.yaml:ro"]


# --- health, dependencies, restarts, ports --------------------------------------------
@pytest.mark.parametrize(
    ("service", "url"),
    [
        ("clickhouse", "http://127.0.0.1:8123/ping"),
        ("collector", "http://127.0.0.1:4318/readyz"),
        ("dashboard", "http://127.0.0.1:8501/_stcore/health"),
    ],
)
def test_long_running_services_have_health_checks(service: str, url: str) -> None:
    check = SERVICES[service]["healthcheck"]
    assert check["test"][0] == "CMD" and any(url in part for part in check["test"])
    assert {"interval", "timeout", "retries", "start_period"} <= set(check)


@pytest.mark.parametrize("service", ["init", "alerts"])
def test_services_without_a_port_turn_off_the_images_health_check(service: str) -> None:
    assert SERVICES[service]["healthcheck"] == {"disable": True}


@pytest.mark.parametrize(
    ("service", "needs"),
    [
        ("init", {"clickhouse": "service_healthy"}),
        ("collector", {"clickhouse": "service_healthy", "init": "service_completed_successfully"}),
        ("dashboard", {"collector": "service_healthy"}),
        ("alerts", {"collector": "service_healthy"}),
    ],
)
def test_services_start_in_order(service: str, needs: dict[str, str]) -> None:
    assert {name: dep["condition"] for name, dep in SERVICES[service]["depends_on"].items()} == needs


def test_restart_policies() -> None:
    assert {name: SERVICES[name]["restart"] for name in LONG_RUNNING} == dict.fromkeys(LONG_RUNNING, "unless-stopped")
    assert SERVICES["init"]["restart"] == "no"


def test_published_ports_bind_loopback_by_default() -> None:
    published = {name: [with_defaults(p) for p in spec.get("ports", [])] for name, spec in SERVICES.items()}
    assert published == {
        "clickhouse": [],
        "init": [],
        "collector": ["127.0.0.1:4318:4318", "127.0.0.1:4317:4317"],
        "dashboard": ["127.0.0.1:8501:8501"],
        "alerts": [],
    }
    assert "PUBLISH_ADDRESS" not in json.dumps(SERVICES["dashboard"])  # no login: loopback always


# --- environment ----------------------------------------------------------------------
def test_every_agentlat_variable_is_read_by_the_server_or_a_documented_client() -> None:
    used = set()
    for text in strings(COMPOSE):
        used |= set(re.findall(r"\bAGENTLAT_[A-Z0-9_]+\b", text))
    assert used and used <= SERVER_VARIABLES | CLIENT_VARIABLES, used - SERVER_VARIABLES - CLIENT_VARIABLES
    for variable in CLIENT_VARIABLES:
        assert f"`{variable}`" in OPERATIONS


@pytest.mark.parametrize("service", AGENTLAT_SERVICES)
def test_tunables_pass_through_under_their_own_names(service: str) -> None:
    for name, value in SERVICES[service]["environment"].items():
        passed = INTERPOLATION.fullmatch(value)
        if name in SERVER_VARIABLES and passed and passed["op"] == ":-":
            assert passed["name"] == name and passed["arg"] == "", name  # empty: the server's own default


def test_every_interpolation_has_a_default_except_the_secrets() -> None:
    found = [match for text in strings(COMPOSE) for match in INTERPOLATION.finditer(text)]
    assert {match["name"] for match in found} >= SECRETS
    for match in found:
        if match["name"] in SECRETS:
            assert match["op"] == ":?" and "docs/operations.md" in match["arg"], match[0]
        else:
            assert match["op"] == ":-", match[0]
        assert f"`{match['name']}`" in OPERATIONS, f"{match['name']} is not documented in docs/operations.md"


# --- the collector's health probe, run for real ---------------------------------------
def test_collector_probe_passes_on_a_ready_collector_and_fails_without_one(server: ServerProcess) -> None:
    code = probe("collector")
    ready = subprocess.run([sys.executable, "-c", code.replace(":4318/", f":{server.port}/")], timeout=30)
    assert ready.returncode == 0
    closed = subprocess.run([sys.executable, "-c", code.replace(":4318/", f":{free_port()}/")],
                            capture_output=True, timeout=30)  # fmt: skip
    assert closed.returncode != 0


# --- Dockerfile and .dockerignore ---------------------------------------------------------
def instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_dockerfile_builds_on_python_slim_and_runs_as_a_user() -> None:
    steps = instructions()
    assert [arg.split()[0] for op, arg in steps if op == "FROM"] == ["python:3.12-slim", "python:3.12-slim"]
    final_stage = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM") :]
    users = [arg for op, arg in final_stage if op == "USER"]
    assert users == ["agentlat"]
    assert final_stage.index(("USER", "agentlat")) < final_stage.index(
        ("CMD", '["agentlat", "serve", "--host", "0.0.0.0"]')
    )


def test_dockerfile_installs_the_server_and_exposes_its_ports() -> None:
    steps = instructions()
    assert ("RUN", "/opt/agentlat/bin/pip install '.[server,demo]'") in steps
    exposed = {port for op, arg in steps if op == "EXPOSE" for port in arg.split()}
    assert exposed == {"4317", "4318", "8501"}
    (volume,) = [json.loads(arg) for op, arg in steps if op == "VOLUME"]
    assert volume == ["/var/lib/agentlat"]  # each container's own write-ahead log
    assert any(op == "ENV" and "AGENTLAT_WAL=/var/lib/agentlat/wal" in arg for op, arg in steps)


def test_dockerfile_health_check_is_the_collector_probe() -> None:
    (check,) = [arg for op, arg in instructions() if op == "HEALTHCHECK"]
    options, command = check.split(" CMD ", 1)
    assert json.loads(command) == SERVICES["collector"]["healthcheck"]["test"][1:]
    assert "--interval=" in options and "--timeout=" in options


def test_the_build_context_holds_the_package_and_nothing_private() -> None:
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }  # fmt: skip
    assert {".git", ".venv", ".agentlat", ".env", "tests"} <= ignored
    copied = {src for op, arg in instructions() if op == "COPY" and "--from" not in arg for src in arg.split()[:-1]}
    assert not copied & ignored and all((ROOT / path).exists() for path in copied)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    assert folders | {"pyproject.toml", "README.md"} <= copied


# --- the admin-key bootstrap (compose's init step) ---------------------------------------
KEY = "alk_0123456789ab_" + "s" * 43


def stored(key: str, **changes: Any) -> ApiKeyRecord:
    key_id, secret = key.split("_")[1], key.split("_", 2)[2]
    fields = {"key_id": key_id, "project": "default", "name": "ops", "admin": True,
              "secret_hash": hash_secret(secret), "created_ms": 0, **changes}  # fmt: skip
    return ApiKeyRecord(**fields)


def test_bootstrap_registers_a_new_admin_key_by_its_hash() -> None:
    record = bootstrap_admin_record(KEY, [stored(new_key("default")[0])])
    assert record is not None and record.key_id == "0123456789ab" and record.admin
    assert record.secret_hash == hash_secret("s" * 43) and record.project == "default"


def test_bootstrap_leaves_a_registered_key_alone() -> None:
    assert bootstrap_admin_record(KEY, [stored(KEY)]) is None


@pytest.mark.parametrize(
    ("key", "existing", "message"),
    [
        ("not-a-key", [], "not an agentlat key"),
        ("alk_0123456789ab_" + "s" * 31, [], "shorter than 32 characters"),
        (KEY, [stored(KEY, revoked=True)], "key 0123456789ab was revoked"),
        (KEY, [stored(KEY, secret_hash=hash_secret("t" * 43))], "belongs to another key"),
        (KEY, [stored(KEY, admin=False)], "belongs to another key"),
    ],
)
def test_bootstrap_refuses(key: str, existing: list[ApiKeyRecord], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bootstrap_admin_record(key, existing)


def test_bootstrap_command_is_idempotent_and_never_prints_the_key(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    env = {**os.environ, "AGENTLAT_BOOTSTRAP_ADMIN_KEY": KEY, "COLUMNS": "200"}
    outputs = []
    for done in ("is now an admin key", "is already an admin key"):
        result = subprocess.run([AGENTLAT, "keys", "bootstrap", "--data", data], capture_output=True, text=True,
                                timeout=120, env=env)  # fmt: skip
        assert result.returncode == 0 and f"0123456789ab from AGENTLAT_BOOTSTRAP_ADMIN_KEY {done}" in result.stderr
        outputs.append(result.stdout + result.stderr)
    listed = subprocess.run([AGENTLAT, "keys", "list", "--data", data], capture_output=True, text=True, timeout=120,
                            env=env, check=True).stdout  # fmt: skip
    assert re.search(r"0123456789ab\s.*default\s.*yes\s.*bootstrap", listed)
    assert not any("s" * 43 in output for output in [*outputs, listed])


def test_bootstrap_command_without_a_key_says_how_to_make_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTLAT_BOOTSTRAP_ADMIN_KEY"}
    result = subprocess.run([AGENTLAT, "keys", "bootstrap", "--data", str(tmp_path / "data")], capture_output=True,
                            text=True, timeout=120, env=env)  # fmt: skip
    assert result.returncode == 2 and "AGENTLAT_BOOTSTRAP_ADMIN_KEY is not set" in result.stderr
    assert "openssl rand" in result.stderr
