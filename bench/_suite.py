"""bench/run's engine: every benchmark as a subprocess, one table of figure, value, target, ratio.

Each step's full output goes to ``<logs>/<step>.log``; the table also goes to
``<logs>/results.json`` and ``<logs>/table.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich import box
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench._figures import (
    Figure,
    parse_ingest_output,
    parse_normalise,
    parse_phoenix,
    parse_query,
    parse_sdk,
    parse_stages,
    versus_phoenix,
)

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("sdk", "normalise", "stages", "ingest", "phoenix", "query")
TABLE_WIDTH = 170
QUIET_HOST_REFERENCE_US = 117  # cpu_reference_us() measured on the 2-core machine of docs/benchmarks.md


@dataclass
class Step:
    name: str
    title: str
    command: list[str]
    parse: Callable[[str], list[Figure]]
    figures: list[Figure] = field(default_factory=list)
    seconds: float = 0.0
    exit_code: int | None = None
    load: str = ""


@dataclass
class Sizes:
    ingest_requests: int
    phoenix_requests: int
    spans: int
    reps: int
    pages_rounds: int
    browser_rounds: int
    clients: int


def sizes(args: argparse.Namespace) -> Sizes:
    quick = args.quick
    return Sizes(
        ingest_requests=args.ingest_requests or (50 if quick else 200),
        phoenix_requests=args.phoenix_requests or (5 if quick else 20),
        spans=args.spans or (200_000 if quick else 1_000_000),
        reps=3 if quick else 10,
        pages_rounds=2 if quick else 5,
        browser_rounds=2 if quick else 5,
        clients=args.clients,
    )


def plan(s: Sizes, logs: Path, meta: dict[str, object]) -> list[Step]:
    py = [sys.executable, "-u"]
    phoenix_json, ingest_json = logs / "phoenix.json", logs / "ingest.json"
    phoenix_opts = _opts(requests=s.phoenix_requests, clients=s.clients)

    def phoenix(_text: str) -> list[Figure]:
        figures, found = parse_phoenix(phoenix_json)
        meta["phoenix"] = found
        return figures

    return [
        Step("sdk", "SDK overhead", [*py, "-m", "bench.sdk_overhead"], parse_sdk),
        Step("normalise", "normaliser µs/span", [*py, "-m", "bench.normalise"], parse_normalise),
        Step("stages", "ingest CPU by stage", [*py, "-m", "bench.stages"], parse_stages),
        Step(
            "ingest",
            f"agentlat ingest, {s.ingest_requests} x 1,000 spans",
            [
                *py,
                "-m",
                "bench.ingest",
                "--json",
                str(ingest_json),
                *_opts(requests=s.ingest_requests, clients=s.clients),
            ],
            lambda text: parse_ingest_output(text, ingest_json),
        ),
        Step(
            "phoenix",
            f"Arize Phoenix ingest, {s.phoenix_requests} x 1,000 spans",
            [*py, "-m", "bench.phoenix", "--phoenix-only", "--json", str(phoenix_json), *phoenix_opts],
            phoenix,
        ),
        Step(
            "query",
            f"query API and dashboard pages (queries, browser) at {s.spans:,} spans",
            [
                *py,
                "bench/query.py",
                *_opts(spans=s.spans, reps=s.reps, pages_rounds=s.pages_rounds, browser_rounds=s.browser_rounds),
            ],
            parse_query,
        ),
    ]


def _opts(**values: int) -> list[str]:
    """``--name value`` pairs (underscores become dashes)."""
    return [x for name, value in values.items() for x in (f"--{name.replace('_', '-')}", str(value))]


# --- running ------------------------------------------------------------------------------------
def last_line(log: Path) -> str:
    """The last non-empty line of a log, \\r-separated progress lines included."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 400))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [x.strip() for x in tail.replace("\r", "\n").split("\n") if x.strip()]
    return lines[-1][:90] if lines else ""


def execute(step: Step, log: Path, progress: Progress, task: TaskID) -> str:
    """Run one step, its output into ``log``; return that output."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with log.open("wb") as out:
        out.write(f"$ {' '.join(step.command)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            step.command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            while proc.poll() is None:
                progress.update(task, description=f"[bold]{step.title}[/]  [dim]{last_line(log)}[/]")
                time.sleep(0.5)
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait()
            raise
    step.exit_code, step.seconds = proc.returncode, time.perf_counter() - started
    step.load = f"{load_before:.1f}→{os.getloadavg()[0]:.1f}"
    return log.read_text(errors="replace")


def collect(step: Step, text: str) -> None:
    try:
        step.figures = step.parse(text)
    except (OSError, ValueError, KeyError) as exc:
        step.figures = []
        text += f"\n(parse error: {exc})"
    for figure in step.figures:
        figure.load = step.load
    if not step.figures:
        note = f"exit {step.exit_code}, no figures found; see {step.name}.log"
        step.figures = [Figure(f"{step.name}: no result", None, "", note=note, load=step.load)]


def run_steps(steps: list[Step], logs: Path, console: Console) -> None:
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        for step in steps:
            task = progress.add_task(step.title, total=1)
            if not console.is_terminal:  # no live display: a line per step instead
                console.print(f"{datetime.now():%H:%M:%S} {step.title} ...")
            text = execute(step, logs / f"{step.name}.log", progress, task)
            collect(step, text)
            mark = "[green]✓[/]" if step.exit_code in (0, 1) and step.figures[0].value is not None else "[red]✗[/]"
            summary = f"{mark} [bold]{step.title}[/]  {step.seconds:.0f} s, exit {step.exit_code} → {step.name}.log"
            progress.update(task, description=summary, completed=1)
            if not console.is_terminal:
                console.print(f"{datetime.now():%H:%M:%S} {summary}")


# --- the table ----------------------------------------------------------------------------------
def show(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if value != value or abs(value) == float("inf"):
        return f"{value} {unit}".strip()
    digits = 0 if abs(value) >= 1000 else 1 if abs(value) >= 10 else 2
    return f"{value:,.{digits}f} {unit}".strip()


def target_text(f: Figure) -> str:
    goal = {"<=": "≤", ">=": "≥"}.get(f.goal, f.goal)
    return f"{goal} {show(f.target, f.unit)}" if f.goal else ""


VERDICT_STYLE = {"met": "green", "MISSED": "bold red", "FAILED": "bold red", "info": "dim"}


def table(figures: list[Figure]) -> Table:
    t = Table(title="agentlat benchmarks", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("figure", no_wrap=True)
    t.add_column("value", justify="right")
    t.add_column("target", justify="right")
    t.add_column("ratio (≥1 met)", justify="right")
    t.add_column("verdict")
    t.add_column("load", justify="right")
    t.add_column("note", style="dim")
    for f in figures:
        style = VERDICT_STYLE.get(f.verdict, "")
        ratio = "" if f.ratio is None else f"{f.ratio:.2f}"
        verdict = f"[{style}]{f.verdict}[/]" if style else f.verdict
        t.add_row(f.name, show(f.value, f.unit), target_text(f), ratio, verdict, f.load, f.note)
    return t


# --- main ---------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run", description="Run every agentlat benchmark; print one table.")
    p.add_argument("--quick", action="store_true", help="small sizes (a few minutes): 50/5 requests, 200k spans")
    p.add_argument("--spans", type=int, help="spans for the query benchmark (default 1,000,000; the target is 10M)")
    p.add_argument("--ingest-requests", type=int, help="agentlat ingest requests of 1,000 spans (default 200)")
    p.add_argument("--phoenix-requests", type=int, help="Phoenix ingest requests of 1,000 spans (default 20)")
    p.add_argument("--clients", type=int, default=4, help="posting processes for both ingest benchmarks")
    p.add_argument("--skip", action="append", default=[], help=f"comma-separated steps to skip: {', '.join(STEPS)}")
    p.add_argument("--only", action="append", default=[], help="comma-separated steps to run (default: all)")
    p.add_argument("--logs", type=Path, help="directory for each step's output (default: a new one in /tmp)")
    args = p.parse_args(argv)
    args.skip = {s for item in args.skip for s in item.split(",") if s}
    args.only = {s for item in args.only for s in item.split(",") if s}
    unknown = (args.skip | args.only) - set(STEPS)
    if unknown:
        p.error(f"unknown step(s) {', '.join(sorted(unknown))}; steps are {', '.join(STEPS)}")
    return args


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def cpu_reference_us() -> float:
    """µs for one fixed piece of pure Python (best of 5): the host's speed right now. A virtual
    machine's host can slow it, and with it every figure, by more than the load average shows."""
    return min(timeit.repeat("sum(range(10_000))", number=200, repeat=5)) / 200 * 1e6


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs = args.logs or Path(f"/tmp/agentlat-bench-{datetime.now():%Y%m%d-%H%M%S}")
    logs.mkdir(parents=True, exist_ok=True)
    for stale in ("ingest.json", "phoenix.json"):  # a reused --logs: never read a previous run's figures
        (logs / stale).unlink(missing_ok=True)
    s, meta = sizes(args), {"commit": git_commit(), "started": datetime.now().isoformat(timespec="seconds")}
    steps = [st for st in plan(s, logs, meta) if st.name not in args.skip and (not args.only or st.name in args.only)]
    console = Console()
    if not console.is_terminal:  # a file or a pipe: lines as wide as the table, not 80 columns
        console = Console(width=TABLE_WIDTH)
    load, meta["cpu_reference_us"] = os.getloadavg(), [round(cpu_reference_us())]
    console.print(f"agentlat {meta['commit']}, {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f}")
    console.print(f"steps: {', '.join(st.name for st in steps)}; full output of each in {logs}/")
    try:
        run_steps(steps, logs, console)
    except KeyboardInterrupt:
        console.print(f"interrupted; output so far in {logs}/")
        return 130
    figures: list[Figure] = []
    for st in steps:
        figures += st.figures
        if st.name == "phoenix":  # the side-by-side ratios right under Phoenix's own figures
            for ratio in versus_phoenix(figures, s.phoenix_requests):
                ratio.load = st.load
                figures.append(ratio)
    meta["cpu_reference_us"].append(round(cpu_reference_us()))
    report(figures, steps, logs, meta, console)
    return 1 if any(f.verdict == "FAILED" for f in figures) else 0


def report(figures: list[Figure], steps: list[Step], logs: Path, meta: dict[str, object], console: Console) -> None:
    rendered = table(figures)
    Console(width=max(console.width, TABLE_WIDTH)).print(rendered)  # wider than a narrow terminal, not squeezed
    missed = sum(f.verdict == "MISSED" for f in figures)
    met = sum(f.verdict == "met" for f in figures)
    console.print(f"{met} met, {missed} missed; load = 1-minute load average at the step's start→end (2 cores = 2.0)")
    console.print("ratio: target/value for a ceiling (≤, <), value/target for a floor (≥, >); ≥ 1 means met")
    start, end = meta["cpu_reference_us"]
    console.print(
        f"host speed: sum(range(10_000)) took {start} µs at the start, {end} µs at the end "
        f"({QUIET_HOST_REFERENCE_US} on this workplace's machine when its host is quiet; every figure scales with it)"
    )
    console.print(f"logs: {logs}/ ({', '.join(f'{st.name}.log' for st in steps)}, results.json, table.txt)")
    meta["finished"] = datetime.now().isoformat(timespec="seconds")
    meta["steps"] = {st.name: {"exit": st.exit_code, "seconds": round(st.seconds, 1), "load": st.load} for st in steps}
    data = {"meta": meta, "figures": [f.as_dict() for f in figures]}
    (logs / "results.json").write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    with (logs / "table.txt").open("w") as out:
        Console(file=out, width=TABLE_WIDTH, no_color=True).print(rendered)
