"""The dashboard's speed as a person sees it: pages timed in a real browser until fully drawn.

Targets (issue 18): the first page drawn within 2 s and a page switch within 1 s, at 1M spans on
an idle machine. Point it at a running server (bench/query.py runs it on the store it builds)::

    python bench/dashboard_browser.py --api http://127.0.0.1:4318 [--rounds 5] [--window 1h]

It starts ``agentlat dashboard --api URL`` on a free 127.0.0.1 port and drives Debian's chromium
(``/usr/bin/chromium``) with Playwright, as tests/test_dashboard_browser.py does. Each round:

- **first page**: a fresh browser context (empty cache, new session) opens ``/?window=1h``
  (Overview); timed from the navigation's start until the page is drawn;
- **page switch**: from that drawn page, a click on each other page in the sidebar, then back to
  Overview; timed from the click until the new page is drawn;
- **first page in a new tab**: the same browser opening Overview again in a new tab, a new
  session whose scripts and styles are in the browser's cache (a person coming back); shown
  beside the first page, with the same target.

"Drawn" means, for ``--quiet-ms`` (750) in a row: the page's own title heading is on screen,
Streamlit is not running the script (the app's script state; its running indicator shows only
after 500 ms), no element is stale (left from the run before) or still loading (skeleton),
every plotly chart has drawn its SVG and every table its canvas. The time is when that began.

Every first page waits out the dashboard's answer cache (``CACHE_SECONDS`` in dashboard/ui.py),
so it asks the API again; switches in a round follow each other as a person makes them, so a
switch back to Overview may find its answers cached. Before the rounds, one first page warms
the dashboard up (Streamlit imports plotly on its first run): shown, not counted.

The dashboard logs each script run (``AGENTLAT_DASHBOARD_TIMINGS``), so each measurement splits
into: before the script (page load, websocket, rerun request), the script (of which waiting for
the query API), and after it (the browser drawing what it sent: plotly, tables); "browser busy"
is the main thread's long tasks (over 50 ms) meanwhile.

Beside it, each round opens a **bare page** the same two ways: a Streamlit page holding one title and
one line, served by the same ``streamlit run`` settings from a process of its own. What Streamlit
itself costs on this machine at this moment is that page's time, so the ratio of the Overview's first
page to the bare page's (target: at most 1.6, fresh browser and new tab alike) is the figure that
compares across machines and loads; the absolute targets stay beside it. A second yardstick, the
**one-chart page**, is the bare page with one plotly chart of 60 points: what drawing any plotly chart
costs (its 4.7 MB of browser code, compiled on first use). The Overview's ratio to it (no target)
is the dashboard's own cost over the toolkit's for what its first screen shows.

Verdicts use the p50 of the rounds. Exit status 1 when one misses its target.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentlat.cli.dashboard import streamlit_command
from agentlat.shared.processes import stop
from tests.browser import CHROMIUM, CHROMIUM_ARGS
from tests.servers import answers, free_port, wait_for

FIRST_PAGE_TARGET_MS = 2000.0
SWITCH_TARGET_MS = 1000.0
RATIO_TARGET = 1.6  # the Overview's first page ÷ the bare page's, measured in the same rounds
BARE_PAGE = """import streamlit as st

st.title("Overview")
st.write("A bare Streamlit page: one title, one line.")
"""
CHART_PAGE = f"""{BARE_PAGE}
import plotly.graph_objects as go

st.plotly_chart(go.Figure(go.Scatter(x=list(range(60)), y=[i % 7 for i in range(60)])))
"""
# the yardsticks: (name, source), each measured in a fresh browser and a new tab beside the dashboard
REFERENCES = (("bare page", BARE_PAGE), ("one-chart page", CHART_PAGE))
FIRST_PAGE = "first page (Overview)"
NEW_TAB = "first page in a new tab (assets cached)"
FRESH, TAB = "fresh browser", "new tab"
# (page, yardstick, target): the Overview's first loads over each yardstick's; None: shown, no target
RATIOS = (
    (FIRST_PAGE, f"bare page, {FRESH}", RATIO_TARGET),
    (NEW_TAB, f"bare page, {TAB}", RATIO_TARGET),
    (FIRST_PAGE, f"one-chart page, {FRESH}", None),
    (NEW_TAB, f"one-chart page, {TAB}", None),
)
VIEWPORT = {"width": 1500, "height": 1800}
# (sidebar link, page title heading, URL path) in the sidebar's order: dashboard/app.py's PAGES
PAGES = (
    ("Overview", "Overview", ""),
    ("Routes & models", "Routes & models", "routes"),
    ("Trace explorer", "Trace explorer", "traces"),
    ("Budgets & alerts", "Budgets & alerts", "budgets"),
    ("Advisor", "Advisor", "advisor"),
)
PROBLEMS = '[data-testid="stException"], [data-testid="stAlertContentError"]'

# Runs in every document before the page's own scripts: marks when the page is drawn (see the module
# docstring) and collects the main thread's long tasks. State in window.__agentlatBench.
WATCHER = """
(() => {
  const s = window.__agentlatBench = {title: %(title)s, since: null, clicked: null, busy: []};
  const problems = %(problems)s;
  document.addEventListener('pointerdown', () => { s.clicked = performance.now(); }, true);
  try {
    new PerformanceObserver(list => {
      for (const e of list.getEntries()) s.busy.push([e.startTime, e.duration]);
    }).observe({type: 'longtask', buffered: true});
  } catch (e) {}
  const drawn = () => {
    const app = document.querySelector('[data-testid="stApp"]');  // the script's run state, without the
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;  // indicator's delay
    if (document.querySelector('[data-stale="true"], [data-testid="stSkeleton"], '
        + '[data-testid="stSkeletonElement"], [data-testid="stAppSkeleton"]')) return false;
    const heading = [...document.querySelectorAll('[data-testid="stMain"] h1')]
      .some(h => h.textContent.trim() === s.title);
    if (!heading && !document.querySelector(problems)) return false;
    for (const c of document.querySelectorAll('[data-testid="stPlotlyChart"]'))
      if (!c.querySelector('.main-svg')) return false;
    for (const t of document.querySelectorAll('[data-testid="stDataFrame"]'))
      if (!t.querySelector('canvas')) return false;
    return true;
  };
  setInterval(() => {
    if (!drawn()) s.since = null;
    else if (s.since === null) s.since = performance.now();
  }, 20);
})();
"""
SETTLED = """q => {
  const s = window.__agentlatBench;
  if (!s || s.since === null || performance.now() - s.since < q) return false;
  return {since: s.since, clicked: s.clicked, origin: performance.timeOrigin, busy: s.busy};
}"""


@dataclass
class Sample:
    """One measured page: browser ms, and how the time splits (from the dashboard's script-run log)."""

    ms: float
    before_ms: float = float("nan")  # start → first script run starts
    script_ms: float = float("nan")  # script runs (sum)
    fetch_ms: float = float("nan")  # of which waiting for the query API
    after_ms: float = float("nan")  # last script run ends → drawn
    busy_ms: float = float("nan")  # browser main-thread long tasks meanwhile
    runs: int = 0


@dataclass
class Measurements:
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    def add(self, name: str, sample: Sample) -> None:
        self.samples.setdefault(name, []).append(sample)


def start_dashboard(api: str, port: int, log_path: Path, timings: Path) -> subprocess.Popen[bytes]:
    agentlat = str(Path(sys.executable).with_name("agentlat"))
    env = {**os.environ, "AGENTLAT_DASHBOARD_TIMINGS": str(timings)}
    return start_streamlit([agentlat, "dashboard", "--api", api, "--port", str(port)], port, log_path, env)


def start_reference_page(name: str, source: str, port: int, workdir: Path) -> subprocess.Popen[bytes]:
    """A yardstick page, served with the dashboard's ``streamlit run`` settings."""
    app = workdir / f"{name.replace(' ', '_').replace('-', '_')}.py"
    app.write_text(source)
    return start_streamlit(streamlit_command(port, app=app), port, app.with_suffix(".log"), dict(os.environ))


def start_streamlit(command: list[str], port: int, log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def healthy() -> bool:
        if process.poll() is not None:
            raise SystemExit(f"{command[0]} exited with {process.returncode}:\n{log_path.read_text()}")
        return answers(f"http://127.0.0.1:{port}/_stcore/health")

    try:
        wait_for(healthy, timeout=90, interval=0.2)
    except AssertionError:
        stop(process)
        raise SystemExit(f"{' '.join(command[:4])} did not answer within 90 s:\n{log_path.read_text()}") from None
    return process


def script_runs(timings: Path) -> list[dict[str, float]]:
    try:
        return [json.loads(line) for line in timings.read_text().splitlines() if line.strip()]
    except OSError:
        return []


class Bench:
    def __init__(self, browser, url: str, window: str, timings: Path, quiet_ms: float, timeout_s: float) -> None:
        self.browser, self.url, self.window, self.timings = browser, url, window, timings
        self.quiet_ms, self.timeout_ms = quiet_ms, timeout_s * 1000

    def open_first(self, context=None):
        """Overview in a new tab of ``context``, or of a fresh context: (page, its Sample)."""
        if context is None:
            context = self.browser.new_context(viewport=VIEWPORT)
            context.add_init_script(WATCHER % {"title": json.dumps(PAGES[0][1]), "problems": json.dumps(PROBLEMS)})
        page = context.new_page()
        page.goto(f"{self.url}/?window={self.window}", wait_until="commit")
        return page, self._settle(page, start=0.0)

    def switch(self, page, link: str, title: str) -> Sample:
        """Click ``link`` in the sidebar navigation; the Sample of the page it opens."""
        reset = "t => { const s = window.__agentlatBench; s.title = t; s.since = null; s.clicked = null; }"
        page.evaluate(reset, title)
        page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=link, exact=True).click()
        return self._settle(page, start=None)

    def _settle(self, page, start: float | None) -> Sample:
        state = page.wait_for_function(SETTLED, arg=self.quiet_ms, polling=50, timeout=self.timeout_ms).json_value()
        if page.locator(PROBLEMS).count():
            raise SystemExit(f"the page shows an error: {page.locator(PROBLEMS).all_inner_texts()}")
        began = state["clicked"] if start is None else start
        if began is None:
            raise SystemExit("the click was not seen by the page")
        sample = Sample(ms=state["since"] - began)
        sample.busy_ms = sum(
            min(t + d, state["since"]) - max(t, began) for t, d in state["busy"] if t + d > began and t < state["since"]
        )
        # the script runs between the start and the drawn moment, on the same clock (epoch ms)
        origin = state["origin"]
        lo, hi = (origin + began) / 1000, (origin + state["since"]) / 1000
        time.sleep(0.05)  # the run's log line is written as it ends; the drawn moment can come first
        runs = [r for r in script_runs(self.timings) if r["start"] >= lo - 0.01 and r["start"] <= hi]
        if runs:
            sample.runs = len(runs)
            sample.before_ms = (runs[0]["start"] - lo) * 1000
            sample.script_ms = sum(r["end"] - r["start"] for r in runs) * 1000
            sample.fetch_ms = sum(r["fetch_ms"] for r in runs)
            sample.after_ms = (hi - runs[-1]["end"]) * 1000
        return sample


def cache_seconds() -> float:
    """How long the dashboard keeps query-API answers: ``CACHE_SECONDS`` in dashboard/ui.py, read without
    importing Streamlit (10 when not found)."""
    ui = Path(__file__).resolve().parents[1] / "dashboard" / "ui.py"
    try:
        for node in ast.parse(ui.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CACHE_SECONDS" for t in node.targets):
                return float(ast.literal_eval(node.value))
    except (OSError, SyntaxError, ValueError):
        pass
    return 10.0


def p50(samples: list[Sample], attribute: str = "ms") -> float:
    values = [getattr(s, attribute) for s in samples if getattr(s, attribute) == getattr(s, attribute)]
    return statistics.median(values) if values else float("nan")


def report(measured: Measurements, cold: Sample | None) -> int:
    yardsticks = {f"{name}, {way}": None for name, _ in REFERENCES for way in (FRESH, TAB)}
    targets = {FIRST_PAGE: FIRST_PAGE_TARGET_MS, NEW_TAB: FIRST_PAGE_TARGET_MS, **yardsticks}
    if cold is not None:
        print(f"\nwarm-up, first page after the dashboard started (not counted): {cold.ms:,.0f} ms")
    width = max(len(name) for name in measured.samples) + len("browser: ")
    print(f"\n{'figure':<{width}}  {'p50 ms':>9}  {'max ms':>9}  {'target':>11}  verdict")
    missed = 0
    for name, samples in measured.samples.items():
        target = targets.get(name, SWITCH_TARGET_MS)
        mid, worst = p50(samples), max(s.ms for s in samples)
        if target is None:  # the yardstick: no target of its own
            print(f"{'browser: ' + name:<{width}}  {mid:>9.1f}  {worst:>9.1f}")
            continue
        verdict = "ok" if mid <= target else "OVER"
        missed += verdict == "OVER"
        print(f"{'browser: ' + name:<{width}}  {mid:>9.1f}  {worst:>9.1f}  {'<= ' + f'{target:.0f} ms':>11}  {verdict}")
    for page, yardstick, ratio_target in RATIOS:
        if page not in measured.samples or yardstick not in measured.samples:
            continue
        ratio = p50(measured.samples[page]) / p50(measured.samples[yardstick])
        label = f"{page} ÷ {yardstick.split(',')[0]}"
        if ratio_target is None:
            print(f"{label:<{width}}  {ratio:>8.2f}x")
            continue
        verdict = "ok" if ratio <= ratio_target else "OVER"
        missed += verdict == "OVER"
        print(f"{label:<{width}}  {ratio:>8.2f}x  {'':>9}  {'<= ' + f'{ratio_target}x':>11}  {verdict}")
    print("\nwhere the time goes, p50 ms of each part (script runs from the dashboard's log):")
    parts = ("before_ms", "script_ms", "fetch_ms", "after_ms", "busy_ms")
    heads = ("before script", "script", "of it API", "after script", "browser busy")
    print(f"{'page':<{width}}  {'total':>7}  " + "  ".join(f"{h:>13}" for h in heads) + "  runs")
    for name, samples in measured.samples.items():
        cells = "  ".join(f"{p50(samples, part):>13.0f}" for part in parts)
        runs = "/".join(str(s.runs) for s in samples)
        print(f"{name:<{width}}  {p50(samples):>7.0f}  {cells}  {runs}")
    return 1 if missed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", default="http://127.0.0.1:4318", help="agentlat server URL")
    parser.add_argument("--rounds", type=int, default=5, help="rounds: a first page, then a switch to each page")
    parser.add_argument("--window", default="1h", help="the sidebar's window in the first page's URL")
    parser.add_argument("--quiet-ms", type=float, default=750, help="how long a page must stay drawn to count")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for one page")
    parser.add_argument("--chromium", type=Path, default=CHROMIUM)
    parser.add_argument("--keep", action="store_true", help="keep the dashboard's output and script-run log")
    args = parser.parse_args(argv)
    if not args.chromium.exists():
        print(f"skipped: no chromium at {args.chromium} (apt-get install chromium)")
        return 0
    from playwright.sync_api import sync_playwright

    workdir = Path(tempfile.mkdtemp(prefix="agentlat-browser-bench-"))
    log_path, timings = workdir / "dashboard.log", workdir / "script-runs.jsonl"
    port = free_port()
    pause = cache_seconds() + 1
    print(
        f"dashboard on 127.0.0.1:{port} reading {args.api}, window {args.window}, {args.rounds} rounds; targets "
        f"first page {FIRST_PAGE_TARGET_MS:.0f} ms, page switch {SWITCH_TARGET_MS:.0f} ms (p50)",
        flush=True,
    )
    process = start_dashboard(args.api, port, log_path, timings)
    references = []  # (name, process, port)
    for name, source in REFERENCES:
        reference_port = free_port()
        references.append((name, start_reference_page(name, source, reference_port, workdir), reference_port))
    measured, cold = Measurements(), None
    load_before = os.getloadavg()[0]
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(args.chromium), args=CHROMIUM_ARGS)
            try:
                bench = Bench(browser, f"http://127.0.0.1:{port}", args.window, timings, args.quiet_ms, args.timeout)
                yardsticks = [
                    (name, Bench(browser, f"http://127.0.0.1:{port_}", args.window, workdir / "none", args.quiet_ms,
                                 args.timeout))
                    for name, _, port_ in references
                ]  # fmt: skip
                for warm_up in (*(b for _, b in yardsticks), bench):
                    page, cold = warm_up.open_first()
                    page.context.close()
                for round_ in range(1, args.rounds + 1):
                    time.sleep(pause)  # every first page asks the API again
                    page, first = bench.open_first()
                    measured.add(FIRST_PAGE, first)
                    line = [f"first page {first.ms:,.0f}"]
                    for link, title, _ in [*PAGES[1:], PAGES[0]]:
                        sample = bench.switch(page, link, title)
                        measured.add(f"switch to {title}", sample)
                        line.append(f"{title} {sample.ms:,.0f}")
                    time.sleep(pause)
                    _, tab = bench.open_first(page.context)
                    measured.add(NEW_TAB, tab)
                    line.append(f"new tab {tab.ms:,.0f}")
                    page.context.close()
                    for name, yardstick in yardsticks:
                        page, fresh = yardstick.open_first()
                        _, tab = yardstick.open_first(page.context)
                        page.context.close()
                        measured.add(f"{name}, {FRESH}", fresh)
                        measured.add(f"{name}, {TAB}", tab)
                        line.append(f"{name} {fresh.ms:,.0f} and {tab.ms:,.0f} in a new tab")
                    print(f"round {round_}: " + ", ".join(line) + " ms", flush=True)
            finally:
                browser.close()
    finally:
        stop(process)
        for _, reference, _ in references:
            stop(reference)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (2 cores)")
    if args.keep:
        print(f"kept {workdir}")
    return report(measured, cold)


if __name__ == "__main__":
    sys.exit(main())
