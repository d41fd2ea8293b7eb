"""End to end in a real browser: the real server with known traces, ``agentlat dashboard`` on
a free port, and Debian's chromium driven by Playwright. Every page must show the expected
numbers and no error; a screenshot of each lands in ``test-artifacts/dashboard/``."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from agentlat.api.windows import iso
from agentlat.cli.dashboard import streamlit_command
from agentlat.dashboard import fmt
from agentlat.demo.runner import demo_file
from agentlat.shared.processes import stop
from tests.browser import CHROMIUM, CHROMIUM_ARGS
from tests.dashboard_data import start_known_server
from tests.servers import AGENTLAT, ServerProcess, answers, free_port, processes_with_env, wait_for
from tests.test_compare_api import two_releases

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "dashboard"
RENDER_TIMEOUT_MS = 45_000
PROBLEMS = '[data-testid="stException"], [data-testid="stAlertContentError"], [role="dialog"]'


@pytest.fixture(scope="module")
def chromium() -> Path:
    if CHROMIUM.exists():
        return CHROMIUM
    if shutil.which("apt-get") is None:
        pytest.skip("Debian's chromium is not installed and apt-get is unavailable to install it")
    pytest.fail("/usr/bin/chromium is missing: `python3 run.py test` installs it (apt-get install chromium)")


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from start_known_server(tmp_path_factory.mktemp("browser"))


@contextlib.contextmanager
def dashboard_on(api: str, workdir: Path) -> Iterator[str]:
    """``agentlat dashboard --api <api> --port <free>``: its URL once Streamlit answers."""
    port, log_path = free_port(), workdir / "dashboard.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [AGENTLAT, "dashboard", "--api", api, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, log_path.read_text()
        return answers(f"{url}/_stcore/health")

    try:
        wait_for(healthy, timeout=60, interval=0.2)
        yield url
    finally:
        process.terminate()
        process.wait(20)


@pytest.fixture(scope="module")
def dashboard(known: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dashboard_on(known.url, tmp_path_factory.mktemp("dashboard")) as url:
        yield url


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Browser]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1500, "height": 2400})
    yield context.new_page()
    context.close()


def grid_cells(page: Page) -> list[str]:
    """Texts of every table cell (Streamlit draws tables on a canvas with an accessible grid beside it)."""
    return page.locator('[role="gridcell"]').all_inner_texts()


def settle(page: Page, texts: list[str] = (), cells: list[str] = (), charts: int = 0) -> None:  # type: ignore[assignment]
    """Wait until the page shows ``texts`` and table ``cells``, draws ``charts`` and has stopped running."""
    for text in texts:
        expect(page.get_by_text(text, exact=True).first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    if cells:
        wait_for(lambda: set(cells) <= set(grid_cells(page)), timeout=RENDER_TIMEOUT_MS / 1000, interval=0.2)
    if charts:
        page.wait_for_function(
            f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {charts}", timeout=RENDER_TIMEOUT_MS
        )
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=RENDER_TIMEOUT_MS)
    assert page.locator(PROBLEMS).count() == 0, page.locator(PROBLEMS).all_inner_texts()


def visit(page: Page, url: str, name: str, **expected: object) -> None:
    page.goto(url)
    settle(page, **expected)  # type: ignore[arg-type]
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def e2e_p50(server: ServerProcess, **filters: str) -> str:
    """The Overview's E2E p50 tile: the server's t-digest estimate from the rollups."""
    body = server.get("/api/v1/percentiles", metric="e2e", source="rollups", window="1h", **filters).json()
    return fmt.ms(body["rows"][0]["p50"])


def test_overview(page: Page, dashboard: str, known: ServerProcess) -> None:
    all_routes = e2e_p50(known)
    visit(
        page, f"{dashboard}/?window=1h", "overview", texts=["Overview", all_routes, "within budget 2,000 ms"], charts=2
    )
    split = page.locator(".js-plotly-plot").first
    for label in ("p50", "p95", "p99", "/checkout", "/search", "model", "tool", "orchestration"):
        expect(split.get_by_text(label, exact=True).first).to_be_visible()  # axis labels and the legend
    # the /checkout p99 requests: 600 ms model, 400 ms tool, 185 ms orchestration of 1,185 ms, labelled upright
    for label in ("600 ms · 50.6%", "400 ms · 33.8%", "185 ms · 15.6%"):
        text = split.get_by_text(label, exact=True)
        expect(text).to_be_visible()
        assert "rotate" not in (text.get_attribute("transform") or "")
    assert split.get_by_text("100.0%").count() == 0
    checkout = e2e_p50(known, route="/checkout")
    visit(
        page,
        f"{dashboard}/?window=1h&route=%2Fcheckout",
        "overview-checkout",
        texts=[checkout, "over budget 1,000 ms", "over budget 150 ms"],
        charts=2,
    )


def click_point(page: Page, chart: int, trace: int, point: int) -> None:
    """Click where plotly drew point ``point`` of trace ``trace`` of the page's chart number ``chart``."""
    plot = page.locator(".js-plotly-plot").nth(chart)
    plot.scroll_into_view_if_needed()
    x, y = plot.evaluate(
        """(gd, [trace, point]) => {
            const data = gd._fullData[trace], box = gd.getBoundingClientRect();
            const axis = (id) => gd._fullLayout[id.replace(/^(x|y)/, "$1axis")];
            const [xa, ya] = [axis(data.xaxis), axis(data.yaxis)];
            return [box.left + xa._offset + xa.d2p(data.x[point]), box.top + ya._offset + ya.d2p(data.y[point])];
        }""",
        [trace, point],
    )
    page.mouse.move(x, y)
    page.mouse.click(x, y)


def open_traces_by_clicking(page: Page, chart: int, trace: int, point: int) -> None:
    """Click a point until the trace explorer opens: on a loaded host a click can land while Streamlit still
    redraws the chart, and a person would click again."""
    for _ in range(4):
        click_point(page, chart, trace, point)
        try:
            page.wait_for_url("**/traces?*", timeout=10_000)
            return
        except PlaywrightTimeout:
            settle(page, charts=2)
    raise AssertionError(f"4 clicks on point {point} of trace {trace} did not open the trace explorer: {page.url}")


def test_a_click_on_the_distribution_or_a_percentile_opens_that_minutes_slowest_traces(
    page: Page, dashboard: str, known: ServerProcess
) -> None:
    minutes = [c["t"] for c in known.get("/api/v1/heatmap", step="1m", window="1h").json()["columns"]]
    visit(page, f"{dashboard}/?window=1h", "overview-distribution", texts=["Over time"], charts=2)
    open_traces_by_clicking(page, chart=1, trace=4, point=0)  # the distribution's first filled cell: /checkout's
    settle(page, texts=["Trace explorer", "1,190 ms"], cells=["/checkout", "1190"], charts=1)
    assert "/search" not in grid_cells(page) and "sort=slowest" in page.url
    assert f"start={minutes[0].replace(':', '%3A')}" in page.url
    expect(page.get_by_text("the interval clicked on the Overview")).to_be_visible()
    page.get_by_role("button", name="Whole window").click()
    expect(page.get_by_text("the interval clicked on the Overview")).to_have_count(0, timeout=RENDER_TIMEOUT_MS)
    settle(page, cells=["/checkout", "1190"], charts=1)
    assert "start=" not in page.url and "window=1h" in page.url

    visit(page, f"{dashboard}/?window=1h", "overview-distribution", texts=["Over time"], charts=2)
    open_traces_by_clicking(page, chart=1, trace=2, point=1)  # the p99 line's second minute: /search's
    settle(page, texts=["Trace explorer", "500 ms"], cells=["/search"], charts=1)
    assert "/checkout" not in grid_cells(page) and f"start={minutes[1].replace(':', '%3A')}" in page.url


def test_filters_follow_page_navigation(page: Page, dashboard: str) -> None:
    page.goto(f"{dashboard}/?window=1h&route=%2Fsearch")
    settle(page, texts=["500 ms"], charts=2)
    page.get_by_role("link", name="Trace explorer").click()
    settle(page, texts=["Trace explorer", "invoke_agent search · shop"], cells=["/search"], charts=1)
    assert "route=%2Fsearch" in page.url and "window=1h" in page.url
    assert "/checkout" not in grid_cells(page)


def test_routes_and_models(page: Page, dashboard: str) -> None:
    visit(
        page,
        f"{dashboard}/routes?window=1h",
        "routes",
        texts=["Routes & models"],
        cells=["/checkout", "/search", "shop", "20", "10", "500", "0.125", "0.7", "0.1"],  # the columns in view
    )
    assert "None" not in grid_cells(page)  # /checkout reports no speculation: a dash on the canvas
    headers = page.locator('[role="columnheader"]')
    route_header = headers.filter(has_text="route").first
    before = route_header.bounding_box()
    page.locator('[data-testid="stDataFrame"]').first.hover()
    page.mouse.wheel(2000, 0)  # scroll the table sideways: the pinned name and service stay in view
    page.wait_for_timeout(500)
    assert route_header.bounding_box() == before and "shop" in grid_cells(page)
    visit(page, f"{dashboard}/routes?window=1h&dim=tool&order=error+rate", "tools", cells=["web_search", "0.2", "250"])


def test_prompt_cache(page: Page, dashboard: str) -> None:
    visit(
        page,
        f"{dashboard}/cache?window=1h",
        "cache",
        texts=["Prompt cache", "Why calls missed", "4 (at 29, p95 29 B)"],
        cells=["/checkout", "m1", "system prompt changed within 30 B (40%)", "/search"],
        charts=1,
    )
    chart = page.locator(".js-plotly-plot").first
    for label in ("prefix changed", "expired", "cold (first call)", "hit rate"):
        expect(chart.get_by_text(label, exact=True).first).to_be_visible()  # the legend


def test_compare(page: Page, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two releases of known timings (tests/test_compare_api.py): 2.0's TTFT 50 ms and its search tool 300 ms
    slower, its E2E 300 ms slower."""
    with two_releases(tmp_path_factory.mktemp("compare")) as server, dashboard_on(
        server.url, tmp_path_factory.mktemp("compare-dashboard")
    ) as url:  # fmt: skip
        visit(
            page,
            f"{url}/compare?window=1h&route=%2Fchat&dimension=release&a=1.0&b=2.0",
            "compare",
            texts=["Compare"],
            cells=[
                "TTFT p50",
                "+50.0 ms",
                "slower",
                "tool search p50",
                "+300 ms",
                "too few samples",
                "40 / 40",
                "cache hit rate",
                "80.0%",
                "20.0%",
                "-60.0 pts",
                "lower",
                "output tokens (a call)",
                "+200.0",
            ],
            charts=1,
        )
        expect(page.get_by_text("is +300 ms in B (2.0) against A (1.0): slower", exact=False).first).to_be_visible()
        # the Overview marks where each release was first seen, on the chart over time
        visit(page, f"{url}/?window=1h", "overview-releases", texts=["Over time"], charts=2)
        expect(page.get_by_text("A dotted line marks a release first seen then", exact=False)).to_be_visible()
        over_time = page.locator(".js-plotly-plot").nth(1)
        for release in ("release 1.0", "release 2.0"):
            expect(over_time.locator(".annotation-text", has_text=release)).to_be_visible()
        at = iso(time.time_ns() - 30 * 60 * 10**9)  # 2.0 began 10 min after it
        visit(page, f"{url}/compare?window=1h&dimension=time&at={at}", "compare-time", texts=["Compare"], charts=1)
        expect(page.get_by_text("release 2.0 of shop first seen", exact=False)).to_be_visible()
        expect(page.get_by_text("10 min after the instant", exact=False).first).to_be_visible()


def selected_rows(page: Page) -> list[str]:
    """Texts of the selected rows of the page's tables."""
    return page.locator('[role="row"][aria-selected="true"]').all_inner_texts()


def test_trace_explorer(page: Page, dashboard: str, known: ServerProcess) -> None:
    visit(
        page,
        f"{dashboard}/traces?window=1h&sort=slowest",
        "traces",
        texts=["Trace explorer", "1,190 ms", "invoke_agent checkout · shop", "-200 ms"],
        # the accessible grid holds the values (the canvas draws them formatted: 1,190 ms, a UTC time)
        cells=["1190", "inventory, payment", "990 ms", "600 ms", "50.4%"],
        charts=1,
    )
    assert page.locator(".js-plotly-plot").get_by_text("critical path").count() == 1
    assert page.locator('[data-testid="stMetricDelta"] svg').count() == 1  # the saving's arrow ...
    assert "-200 ms" in page.locator('[data-testid="stMetricDelta"]').inner_text()  # ... points down
    slowest = known.get("/api/v1/traces", sort="slowest", window="1h").json()["traces"]
    third = slowest[2]["trace_id"]
    visit(page, f"{dashboard}/traces?window=1h&sort=slowest&trace={third}", "traces-linked",
          texts=["1,170 ms"], cells=["1170"], charts=1)  # fmt: skip
    # the linked trace (E2E 1,170 ms, the only one) is the selected row, though not the first of the list
    wait_for(lambda: any("1170" in row for row in selected_rows(page)), timeout=20, interval=0.2)
    assert len(selected_rows(page)) == 1
    *_, first = known.get("/api/v1/traces", route="/search", sort="recent").json()["traces"]
    visit(
        page,
        f"{dashboard}/traces?window=1h&trace={first['trace_id']}",
        "trace-phases",
        texts=["invoke_agent search · shop", "500 ms"],
        cells=["200 ms", "250 ms"],
        charts=1,
    )
    assert page.locator(".js-plotly-plot").get_by_text("llm_request").count() == 1


def test_budgets_and_alerts(page: Page, dashboard: str) -> None:
    visit(
        page,
        f"{dashboard}/budgets?window=1h",
        "budgets",
        texts=["Budgets", "Alerting is not set up yet on this server."],
        cells=["/checkout", "190 ms", "≤ 150 ms", "breach", "pass", "default", "≥ 95.0%", "90.0%"],
        charts=1,
    )


def test_advisor(page: Page, dashboard: str) -> None:
    visit(
        page,
        f"{dashboard}/advisor?window=1h",
        "advisor",
        texts=["1. Independent tool calls run one after another in 20 of 20 traces", "4.0 s", "200 ms"],
        charts=2,
    )


def test_up_serves_the_dashboard_beside_the_collector(tmp_path: Path) -> None:
    api_port, ui_port = free_port(), free_port()
    log_path = tmp_path / "up.log"
    command = [
        AGENTLAT,
        "up",
        "--port",
        str(api_port),
        "--data",
        str(tmp_path / "data"),
        "--dashboard-port",
        str(ui_port),
    ]
    marker = f"AGENTLAT_TEST_UP_{os.getpid()}"  # inherited by every process `up` starts
    env = {**os.environ, "AGENTLAT_GRPC_PORT": "0", marker: "1"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=env)

    def alive_and_answers(url: str) -> bool:
        assert process.poll() is None, log_path.read_text()
        return answers(url)

    try:
        wait_for(lambda: alive_and_answers(f"http://127.0.0.1:{api_port}/readyz"), timeout=60, interval=0.2)
        wait_for(lambda: alive_and_answers(f"http://127.0.0.1:{ui_port}/_stcore/health"), timeout=60, interval=0.2)
        # the banner follows once both answer
        wait_for(lambda: "Stop with Ctrl-C." in log_path.read_text(), timeout=15)
        assert words(banner_of(log_path.read_text())) == words(readme_banner(tmp_path, api_port, ui_port))
        wait_for(lambda: demo_spans_stored(api_port), timeout=90, interval=0.5)  # the demo's workers are running
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)
    wait_for(lambda: not answers(f"http://127.0.0.1:{ui_port}/_stcore/health"), timeout=20, interval=0.2)
    # nothing it started outlives it: dashboard, demo and the demo's worker processes
    wait_for(lambda: not processes_with_env(marker), timeout=20, interval=0.5)


def banner_of(log: str) -> str:
    return log[log.index("agentlat collector on") : log.index("Stop with Ctrl-C.") + len("Stop with Ctrl-C.")]


def readme_banner(data_parent: Path, api_port: int, ui_port: int) -> str:
    """The README's banner as this test's ``up`` prints it: its ports, its data directory, the demo's files
    where this install keeps them, and gRPC off."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    text = banner_of(readme[readme.index("## Quickstart") :])
    replacements = {
        "/home/you/agentlat/.agentlat": str(data_parent),
        "/home/you/agentlat/demo": str(demo_file("budgets.yaml").parent),
        "127.0.0.1:4318": f"127.0.0.1:{api_port}",
        "127.0.0.1:8501": f"127.0.0.1:{ui_port}",
        "OTLP/gRPC  127.0.0.1:4317": "OTLP/gRPC  off",
    }
    for before, after in replacements.items():
        text = text.replace(before, after)
    return text


def words(text: str) -> list[str]:
    """The text's words: a banner that the log file wraps at 80 columns reads the same."""
    return text.split()


def demo_spans_stored(api_port: int) -> bool:
    params = {"metric": "span", "window": "1h"}
    response = httpx.get(f"http://127.0.0.1:{api_port}/api/v1/percentiles", params=params, timeout=10)
    return response.status_code == 200 and bool(response.json()["rows"])


def test_dashboard_command_help() -> None:
    wide = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run([AGENTLAT, "dashboard", "--help"], capture_output=True, text=True, check=True, env=wide)
    for option in ("--api", "--port", "AGENTLAT_API", "8501"):
        assert option in result.stdout
    up = subprocess.run([AGENTLAT, "up", "--help"], capture_output=True, text=True, check=True, env=wide)
    assert "--dashboard-port" in up.stdout


def loaded_scripts(page: Page) -> list[str]:
    """File names of the scripts the page has fetched (the resource timeline: dynamic imports included)."""
    return page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name.split('/').pop())")


def test_chart_and_table_code_is_preloaded_after_the_first_page(page: Page, dashboard: str) -> None:
    """Streamlit's chart code is fetched after a page without charts is drawn, and its table code after the
    Overview (no table), so the first switch to a page that needs one does not wait for it."""
    for path, texts, expected, chunk in (
        ("/routes?window=1h", ["Routes & models"], {"cells": ["/checkout"]}, "PlotlyChart."),
        ("/?window=1h", ["Overview"], {"charts": 2}, "DataFrame."),
    ):
        page.goto(f"{dashboard}{path}")
        settle(page, texts=texts, **expected)  # type: ignore[arg-type]
        wait_for(lambda c=chunk: any(n.startswith(c) for n in loaded_scripts(page)), timeout=30, interval=0.2)


def test_no_request_leaves_the_machine(page: Page, dashboard: str) -> None:
    """Every page works offline: each request the browser makes (documents, scripts, fonts, the favicon, API
    calls) goes to the dashboard on the loopback."""
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    for path, texts in (
        ("/?window=1h", ["Overview"]),
        ("/routes?window=1h", ["Routes & models"]),
        ("/traces?window=1h", ["Trace explorer"]),
        ("/budgets?window=1h", ["Budgets"]),
        ("/advisor?window=1h", ["Advisor"]),
    ):
        page.goto(f"{dashboard}{path}")
        settle(page, texts=texts)
    page.wait_for_timeout(1000)  # the favicon and late fonts
    assert requested
    outside = [u for u in requested if urlsplit(u).scheme not in ("data", "blob")
               and urlsplit(u).hostname not in ("127.0.0.1", "localhost")]  # fmt: skip
    assert outside == []
    icon = page.locator("link[rel='shortcut icon']").get_attribute("href") or ""
    assert urlsplit(icon).hostname in (None, "127.0.0.1", "localhost"), icon


def test_an_unexpected_error_links_to_no_outside_site(page: Page, tmp_path: Path) -> None:
    """A page that fails shows its error, but no "Ask Google" or "Ask ChatGPT" link carrying the error's
    text and file paths to another site: a page run with the dashboard's own Streamlit options."""
    failing = tmp_path / "failing.py"
    failing.write_text('import streamlit as st\n\nst.title("Overview")\nraise ValueError("the store said no")\n')
    port = free_port()
    command = streamlit_command(port)
    command[4] = str(failing)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: answers(f"{url}/_stcore/health"), timeout=60, interval=0.2)
        page.goto(url)
        expect(page.locator('[data-testid="stException"]')).to_contain_text("the store said no", timeout=30_000)
        links = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")
        assert [link for link in links if urlsplit(link).hostname not in ("127.0.0.1", "localhost")] == []
    finally:
        stop(process)
