"""Budget check results as a terminal table, JSON, JUnit XML and Markdown (pure: text out).

The table and the Markdown put breaches first, then missing data, then passes; JSON and
JUnit keep the file's order. Each renders the checks against a baseline too when there are some
(``budgets/baseline.py``). Rich is imported only by ``render_table``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import IO, Any

from agentlat.budgets import baseline as against_baseline
from agentlat.budgets.baseline import BaselineReport
from agentlat.budgets.model import Budgets, Report, Verdict, report_dict
from agentlat.shared.measures import METRIC_NAMES, RATIO_SAMPLES, ms, percent

FORMATS = ("table", "json", "junit", "markdown")
_SEVERITY = {"breach": 0, "insufficient": 1, "pass": 2}
_MD_STATUS = {"breach": "❌ breach", "insufficient": "⚠️ insufficient data", "pass": "✅ pass"}


def actual(v: Verdict) -> str:
    """The measured value: a latency in ms, a ratio as a percentage (finer where it would read as its budget)."""
    return percent(v.actual, v.budget) if v.ratio else ms(v.actual)


def limit(v: Verdict) -> str:
    return percent(v.budget) if v.ratio else ms(v.budget)


def target(v: Verdict) -> str:
    return f"{v.dimension} {v.name}"


def check_name(v: Verdict) -> str:
    """``TTFT p95``; a ratio has one budget, so just its name: ``cache hit rate``."""
    return METRIC_NAMES[v.metric] if v.ratio else f"{METRIC_NAMES[v.metric]} {v.percentile}"


def budget(v: Verdict) -> str:
    """``≤ 800 ms`` (a latency's ceiling) or ``≥ 80%`` (a ratio's floor), marked when it is the default's."""
    return f"{'≥' if v.ratio else '≤'} {limit(v)}" + (" (default)" if v.source == "default" else "")


def _so_far(v: Verdict) -> str:
    return "under so far" if v.ratio else "over so far"


def status_text(v: Verdict) -> str:
    """The verdict, and for too few samples whether those there already miss the budget."""
    return f"{v.status}, {_so_far(v)}" if v.missed_so_far else v.status


def samples(v: Verdict) -> str:
    return f"{v.count} (needs {v.min_samples})" if v.status == "insufficient" else str(v.count)


def counted(report: Report) -> str:
    """'1 breached, 1 insufficient data, 4 passed', or why there is nothing to count."""
    if not report.verdicts:
        return "no route or agent had data for any budget in this window"
    counts = report.counts()
    over = sum(v.missed_so_far and not v.ratio for v in report.verdicts)
    under = sum(v.missed_so_far and v.ratio for v in report.verdicts)
    so_far = [f"{over} over budget so far"] * bool(over) + [f"{under} under its minimum so far"] * bool(under)
    already = f" ({', '.join(so_far)})" if so_far else ""
    return f"{counts['breach']} breached, {counts['insufficient']} insufficient data{already}, {counts['pass']} passed"


def by_severity(report: Report) -> list[Verdict]:
    return sorted(report.verdicts, key=lambda v: _SEVERITY[v.status])


def render_json(
    budgets: Budgets, report: Report, window: Mapping[str, str], baseline: BaselineReport | None = None
) -> str:
    found = report_dict(budgets, report, window)
    if baseline is not None:
        found["baseline"] = baseline.as_dict()
    return json.dumps(found, indent=2, ensure_ascii=False) + "\n"


def render_markdown(
    budgets: Budgets, report: Report, window: Mapping[str, str], baseline: BaselineReport | None = None
) -> str:
    """A pull-request comment or a CI job summary."""
    lines = [
        f"### agentlat latency budgets: {_MD_STATUS[report.status]}",
        "",
        f"`{budgets.path}` · last {window['length']} · {counted(report)}",
        "",
    ]
    if report.verdicts:
        lines += ["| status | target | check | budget | actual | samples |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {_md_status(v)} | {v.dimension} `{_md(v.name)}` | {check_name(v)} | {budget(v)} "
            f"| {actual(v)} | {samples(v)} |"
            for v in by_severity(report)
        ]
    text = "\n".join(lines) + "\n"
    return text + ("\n" + against_baseline.markdown(baseline) if baseline is not None else "")


def _md_status(v: Verdict) -> str:
    return _MD_STATUS[v.status] + (f", {_so_far(v)}" if v.missed_so_far else "")


def _md(text: str) -> str:
    return text.replace("`", "'").replace("|", "\\|")


def render_junit(
    budgets: Budgets, report: Report, window: Mapping[str, str], baseline: BaselineReport | None = None
) -> str:
    """One test case per budget: a breach is a failure, missing data a skip; with a baseline, a second suite of
    one case per check, a regression a failure."""
    counts = report.counts()
    totals = {"tests": str(len(report.verdicts)), "failures": str(counts["breach"]), "errors": "0"}
    suites = ET.Element("testsuites", name="agentlat latency budgets", **totals)
    suite = ET.SubElement(
        suites, "testsuite", name=budgets.path, skipped=str(counts["insufficient"]), timestamp=window["end"], **totals
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (("window", window["length"]), ("start", window["start"]), ("end", window["end"])):
        ET.SubElement(properties, "property", name=name, value=value)
    for v in report.verdicts:
        case = ET.SubElement(
            suite, "testcase", classname=target(v), name=f"{check_name(v)} {budget(v)}",
            file=budgets.path, line=str(v.line), time="0",
        )  # fmt: skip
        if v.status == "breach":
            message = _breach(v)
            ET.SubElement(case, "failure", message=message, type="breach").text = f"{message} ({_counted(v)})"
        elif v.status == "insufficient":
            ET.SubElement(case, "skipped", message=_too_few(v))
    if baseline is not None:
        _baseline_suite(suites, baseline, window)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _baseline_suite(suites: ET.Element, baseline: BaselineReport, window: Mapping[str, str]) -> None:
    checks = baseline.checks
    failures = sum(c.status == "regression" for c in checks)
    suite = ET.SubElement(
        suites, "testsuite", name=f"against {baseline.against}", tests=str(len(checks)), failures=str(failures),
        errors="0", skipped=str(sum(c.status in ("insufficient", "no_baseline") for c in checks)),
        timestamp=window["end"],
    )  # fmt: skip
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=c.group, name=f"{c.name} within {baseline.margin}", time="0")
        if c.status == "regression":
            ET.SubElement(case, "failure", message=c.describe(), type="slower than the baseline")
        elif c.status != "pass":
            ET.SubElement(case, "skipped", message=c.describe())
    suites.set("tests", str(int(suites.get("tests", "0")) + len(checks)))
    suites.set("failures", str(int(suites.get("failures", "0")) + failures))


def _breach(v: Verdict) -> str:
    return f"{check_name(v)} of {target(v)} is {actual(v)}, {_missed(v)} of {limit(v)}"


def _missed(v: Verdict) -> str:
    return "under its minimum" if v.ratio else "over its budget"


def _counted(v: Verdict) -> str:
    """``412 samples``; a hit rate counts the model calls that reported cache tokens."""
    return f"{v.count} {RATIO_SAMPLES if v.ratio else 'samples'}"


def _too_few(v: Verdict) -> str:
    needs = METRIC_NAMES[v.metric] if v.ratio else v.percentile
    text = f"insufficient data: {_counted(v)}, {needs} needs {v.min_samples}"
    return text + (f"; {_missed(v)} so far ({actual(v)} against {limit(v)})" if v.missed_so_far else "")


def render_table(
    budgets: Budgets,
    report: Report,
    window: Mapping[str, str],
    file: IO[str] | None = None,
    baseline: BaselineReport | None = None,
) -> None:
    """A rich table on ``file`` (stdout by default); wide and uncoloured when not a terminal."""
    from rich.table import Table

    console = _console(file)
    table = Table(title=f"agentlat latency budgets: {budgets.path}, last {window['length']}")
    for column in ("status", "target", "check", "budget", "actual", "samples"):
        table.add_column(column, justify="right" if column in ("actual", "samples") else "left")
    style = {"breach": "bold red", "insufficient": "yellow", "pass": "green"}
    for v in by_severity(report):
        status = f"[{style[v.status]}]{status_text(v)}[/]"
        table.add_row(status, target(v), check_name(v), budget(v), actual(v), samples(v))
    console.print(table)
    console.print(f"{report.status}: {counted(report)}", style=style[report.status], markup=False)
    if baseline is not None:
        _baseline_table(console, baseline)


def _console(file: IO[str] | None) -> Any:
    from rich.console import Console

    console = Console(file=file)
    return console if console.is_terminal else Console(file=file, width=160, no_color=True, highlight=False)


def _baseline_table(console: Any, baseline: BaselineReport) -> None:
    from rich.table import Table

    table = Table(title=f"against {baseline.against}, margin {baseline.margin}")
    columns = ("status", "target", "check", "baseline", "now", "difference", "95% interval", "samples")
    for column in columns:
        table.add_column(column, justify="left" if column in ("status", "target", "check") else "right")
    style = {"regression": "bold red", "insufficient": "yellow", "pass": "green", "no_baseline": "dim"}
    for row in against_baseline.table_rows(baseline.checks):
        table.add_row(f"[{style[row[0]]}]{row[0]}[/]", *row[1:])
    console.print(table)
    status = baseline.status
    console.print(f"{status}: {against_baseline.counted(baseline.checks)}", style=style[status], markup=False)
