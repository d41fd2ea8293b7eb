"""``agentlat alerts``: check a rules file, replay it on stored data, or run it standalone.

Module import pulls in typer and rich only; the rules model, the store and the API client
load inside the commands, so ``agentlat --help`` stays fast.

Exit codes: 0 fine; 1 ``check`` found mistakes in the file; 2 usage, file, store or
connection errors (the message says which and what to do).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentlat.api.client import DEFAULT_API, ENV_API
from agentlat.cli.common import console, fail, setup_logging

if TYPE_CHECKING:
    from agentlat.api.models import ReplayedTransition, ReplayResponse

alerts_app = typer.Typer(
    help="Alert rules on p50/p95/p99, p99 drift and SLO burn rates, sent to Slack (docs/alerts.md).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
RulesArg = Annotated[Path, typer.Argument(metavar="RULES", help="The alert rules YAML file.")]
ClickHouseOpt = Annotated[
    str | None,
    typer.Option(
        "--clickhouse",
        help="ClickHouse server URL (env AGENTLAT_CLICKHOUSE_URL), e.g. http://user:pass@host:8123/agentlat.",
        envvar="AGENTLAT_CLICKHOUSE_URL",
    ),
]
STANDALONE_NEEDS_SERVER = (
    "`agentlat alerts run` needs a ClickHouse server (--clickhouse URL or AGENTLAT_CLICKHOUSE_URL): the embedded "
    "store belongs to the `agentlat serve` process, so with it run the evaluator inside the server instead: "
    "agentlat serve --alerts RULES"
)


@alerts_app.command("check")
def check(rules: RulesArg) -> None:
    """Validate a rules file: every mistake with its line, field and what was expected."""
    from agentlat.alerts.message import condition
    from agentlat.alerts.receivers import missing_variables
    from agentlat.alerts.rules import AlertRulesError, format_seconds
    from agentlat.alerts.rules_file import load_rules

    try:
        config = load_rules(rules)
    except AlertRulesError as exc:
        for problem in exc.problems:
            console.print(f"[bold red]error:[/] {problem}", highlight=False, soft_wrap=True)
        count = len(exc.problems)
        console.print(f"{rules}: {count} problem{'s' if count != 1 else ''}; see docs/alerts.md", highlight=False)
        raise typer.Exit(1) from None
    typer.echo(f"{rules}: {len(config.rules)} alert rules are valid (evaluated every "
               f"{format_seconds(config.evaluation_interval)})")  # fmt: skip
    for rule in config.rules:
        by = f" by {', '.join(rule.by)}" if rule.by else ""
        typer.echo(f"  line {rule.line:<4} {rule.alert} ({rule.severity}): {condition(rule)}{by}")
    names = ", ".join(f"{r.name} ({r.type})" for r in config.receivers) or "none (AGENTLAT_SLACK_WEBHOOK if set)"
    typer.echo(f"receivers: {names}; silences: {len(config.silences)}")
    missing = missing_variables(config, os.environ)
    if missing:
        typer.echo(f"note: {', '.join(missing)} not set here; set them where the alerts are sent")


@alerts_app.command("run")
def run(
    rules: Annotated[
        Path, typer.Argument(metavar="RULES", help="The rules file (env AGENTLAT_ALERTS).", envvar="AGENTLAT_ALERTS")
    ],
    clickhouse: ClickHouseOpt = None,
    project: Annotated[
        list[str] | None, typer.Option("--project", help="Alert on this project only (repeatable; default: all).")
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")] = "info",
) -> None:
    """Evaluate the rules and send notifications, beside collectors that write to a ClickHouse server."""
    from agentlat.errors import AgentlatError

    if not clickhouse:
        fail(STANDALONE_NEEDS_SERVER)
    setup_logging(log_level)
    try:
        _run_standalone(rules, clickhouse, project or None)
    except AgentlatError as exc:
        fail(str(exc))


def _run_standalone(rules: Path, clickhouse: str, projects: list[str] | None) -> None:
    from agentlat.alerts.service import AlertService
    from agentlat.store import open_store

    store = open_store(clickhouse_url=clickhouse)
    service = AlertService(store, rules, projects=projects)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    service.start()
    console.print(f"agentlat alerts: evaluating {rules} on {store.description}; Ctrl-C stops", highlight=False)
    stop.wait()
    service.stop()
    store.close()


@alerts_app.command("test")
def test(
    rules: RulesArg,
    window: Annotated[str, typer.Option("--window", help="How far back to replay, e.g. 6h, 24h, 7d.")] = "24h",
    api: Annotated[
        str, typer.Option("--api", help=f"Server whose data to replay (env {ENV_API}).", envvar=ENV_API)
    ] = DEFAULT_API,
    clickhouse: Annotated[
        str | None, typer.Option("--clickhouse", help="Read a ClickHouse server directly instead of --api.")
    ] = None,
    project: Annotated[str | None, typer.Option("--project", help="With --clickhouse: only this project.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the replay as JSON.")] = False,
) -> None:
    """Replay stored data through the rules and show what would have fired and resolved, and when."""
    from agentlat.api.models import ReplayResponse
    from agentlat.errors import AgentlatError

    try:
        if clickhouse:  # the document the API would answer, read as the API's answer is
            document = _replay_direct(rules, window, clickhouse, project)
            replayed = ReplayResponse.model_validate(document)
        else:
            replayed = _replay_api(rules, window, api)
            document = replayed.model_dump(mode="json", by_alias=True)
    except AgentlatError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(document, indent=2))
    else:
        _print_timeline(rules, replayed)


def _replay_api(rules: Path, window: str, api: str) -> ReplayResponse:
    from agentlat.alerts.rules_file import load_rules
    from agentlat.api.client import ApiClient

    load_rules(rules)  # report file mistakes here, with the local path
    text = rules.read_text(encoding="utf-8")
    body = {"rules": text, "window": window, "file": str(rules)}
    return ApiClient(api, timeout=300).post("/api/v1/alerts/replay", body)


def _replay_direct(rules: Path, window: str, clickhouse: str, project: str | None) -> dict[str, Any]:
    import time

    from agentlat.alerts.evaluator import replay, replay_seconds
    from agentlat.alerts.receivers import receiver_names
    from agentlat.alerts.rules_file import load_rules
    from agentlat.alerts.service import dashboard_url
    from agentlat.alerts.views import replay_document
    from agentlat.store import open_store

    seconds = replay_seconds(window, "--window")
    config = load_rules(rules)
    store = open_store(clickhouse_url=clickhouse)
    try:
        end = int(time.time())
        projects = [project] if project else None
        link = dashboard_url(config, os.environ)
        result = replay(store, config, receiver_names(config), link, end - seconds, end, projects)
    finally:
        store.close()
    return replay_document(result, window)


def _print_timeline(rules: Path, doc: ReplayResponse) -> None:
    span = doc.window
    projects = ", ".join(doc.projects) or "none with data"
    typer.echo(f"{rules}: replayed {span.start} to {span.end}, {doc.evaluations} evaluations every "
               f"{doc.step}; projects: {projects}")  # fmt: skip
    lines = [(t.time, 0, _transition_line(t)) for t in doc.transitions]
    lines += [(n.time, 1, f"notify    {n.receiver}: {n.title}") for n in doc.notifications]
    for time_iso, _, text in sorted(lines, key=lambda x: (x[0], x[1])):
        typer.echo(f"{time_iso.replace('T', ' ').replace(':00Z', 'Z')}  {text}")
    summary = doc.summary
    if not summary.fired:
        typer.echo("Nothing would have fired:")
    else:
        typer.echo(f"fired {_times(summary.fired)} ({', '.join(summary.alerts_fired)}), resolved "
                   f"{_times(summary.resolved)}, {summary.notifications} notifications")  # fmt: skip
    for rule in doc.rules:
        if rule.alert not in summary.alerts_fired:
            typer.echo(f"  {rule.alert} ({rule.severity}): {rule.why}")


def _times(count: int) -> str:
    return f"{count} time{'s' if count != 1 else ''}"


def _transition_line(t: ReplayedTransition) -> str:
    labels = ", ".join(f"{k}={v}" for k, v in t.labels.items() if k not in ("alertname", "severity"))
    count = f" (n={t.count:,})" if t.count else ""
    return f"{t.to:<9} {t.alert} ({t.severity}) {{{labels}}}  {t.summary}{count}"
