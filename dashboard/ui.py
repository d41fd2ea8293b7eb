"""Streamlit pieces every page shares: the API connection, cached fetching, the sidebar
scope, error and empty states, and budget-coloured latency tiles. Answers are the query API's
models (``agentlat.api.models``), read with attributes.

And what keeps pages quick to open (issue 18, measured by bench/dashboard_browser.py): the
imports of the table pages warmed up in the background, the browser's chart and table code
loaded while it is idle, and each script run's times logged on request."""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import TypeVar

import streamlit as st

from agentlat.api.client import ApiClient, ApiError, Call, api_url
from agentlat.api.models import Answer, BudgetsResponse
from agentlat.dashboard import fmt
from agentlat.dashboard.budgets import LEVEL_BADGE, BudgetBook, level
from agentlat.dashboard.state import DEFAULT_WINDOW, WINDOWS, Scope, describe_window, is_window, url_select

CACHE_SECONDS = 10
TIMINGS_ENV = "AGENTLAT_DASHBOARD_TIMINGS"  # a file: one JSON line per script run (bench/dashboard_browser.py)
BUDGETS_HELP = "start the server with `--budgets FILE` (see docs/budgets.md)"
A = TypeVar("A", bound=Answer)
_run = threading.local()  # this script run's time in fetch (each run has its own thread)
# Streamlit's browser code loads what draws plotly charts (4.7 MB, ~1 s to compile and run on 2 cores) and tables
# only when a page first shows one. Asked for once the page is drawn and the browser idle (a person reading it), they
# are ready before the pages that need them; asked for earlier, they slow the first page down. Names as Streamlit's
# build calls these chunks; one not found is skipped (tests/test_dashboard_figures.py checks they are found).
LAZY_CHUNKS = ("PlotlyChart", "DataFrame")
_PRELOAD = """<script>(() => {
  const entry = document.querySelector('script[type="module"][src*="/static/js/index."]');
  if (!entry || window.__agentlatPreload) return;
  window.__agentlatPreload = true;
  const began = Date.now();
  let ran = false;  // drawn: the page's script seen running, then done, and every chart and table drawn
  const undrawn = (element, drawing) => [...document.querySelectorAll(`[data-testid="${element}"]`)]
    .some(e => !e.querySelector(drawing));
  const pending = () => undrawn('stPlotlyChart', '.main-svg') || undrawn('stDataFrame', 'canvas');
  const drawn = () => new Promise(done => {
    const check = () => {
      const app = document.querySelector('[data-testid="stApp"]');
      const running = app && app.getAttribute('data-test-script-state') === 'running';
      ran = ran || running;
      if ((ran && !running && !pending()) || Date.now() - began > 15000) done(); else setTimeout(check, 100);
    };
    check();
  });
  const idle = () => new Promise(done => (window.requestIdleCallback || (f => setTimeout(f, 1000)))(done));
  let loaded = drawn();
  for (const name of %s) {
    loaded = loaded.then(idle).then(() => import(new URL(name, entry.src).href)).catch(() => {});
  }
})();</script>"""

# What the pages after the first need and the Overview does not (pandas for tables, its Styler, Arrow): imported in the
# background once the process's first page has run, so the first switch to a table does not wait ~0.5 s for them.
WARM_UP = ("numpy", "pyarrow", "pandas", "pandas.io.formats.style")
_warm_up_lock = threading.Lock()
_warm_up: threading.Thread | None = None


@st.cache_resource(show_spinner=False)
def _client(base_url: str) -> ApiClient:
    return ApiClient(base_url)


@st.cache_data(ttl=CACHE_SECONDS, show_spinner=False)
def _fetch(base_url: str, calls: tuple[Call, ...]) -> list[Answer | ApiError]:
    return _client(base_url).fetch(list(calls))  # models and errors pickle, as the cache needs


def fetch(calls: dict[str, Call]) -> dict[str, Answer | ApiError]:
    """Run named calls at once (answers cached for a few seconds, failures never)."""
    started = time.perf_counter()
    results = _fetch(api_url(), tuple(calls.values()))
    if any(isinstance(r, ApiError) and (r.status == 0 or r.status >= 500) for r in results):
        _fetch.clear()
    _run.fetch_s = getattr(_run, "fetch_s", 0.0) + time.perf_counter() - started
    return dict(zip(calls, results, strict=True))


def log_run(page: str, started: float, sidebar_done: float) -> None:
    """With ``AGENTLAT_DASHBOARD_TIMINGS`` set, append this script run's times (epoch seconds; ms in fetch) to
    that file."""
    fetch_s, _run.fetch_s = getattr(_run, "fetch_s", 0.0), 0.0
    path = os.environ.get(TIMINGS_ENV)
    if path:
        run = {"page": page, "start": started, "sidebar": sidebar_done, "end": time.time(), "fetch_ms": fetch_s * 1000}
        with open(path, "a") as out:
            out.write(json.dumps(run) + "\n")


def warm_up() -> None:
    """Import ``WARM_UP`` in a background thread, once per process."""
    global _warm_up
    with _warm_up_lock:
        if _warm_up is None:
            _warm_up = threading.Thread(target=_import_warm_up, name="agentlat-warm-up", daemon=True)
            _warm_up.start()


def _import_warm_up() -> None:
    for name in WARM_UP:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def await_warm_up() -> None:
    """Wait for a warm-up still importing: two threads importing one package at once can fail (a deadlock error)."""
    if _warm_up is not None:
        _warm_up.join()


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$])")


def escape(text: str) -> str:
    """``text`` to show as itself inside ``st.markdown`` (a service named ``my_bot`` is not italics)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def require(result: A | ApiError) -> A:
    """The answer, or stop the page with the error shown."""
    if isinstance(result, ApiError):
        show_error(result)
        st.stop()
    return result


def show_error(error: ApiError) -> None:
    if error.status == 0:
        st.error(
            f"**Cannot reach agentlat at {api_url()}.** Start it with `agentlat up` (or `agentlat serve`), "
            f"or point the dashboard at another server with `agentlat dashboard --api URL`.",
            icon=":material/cloud_off:",
        )
    else:
        st.error(f"The query API answered {error.status}: {error.message}", icon=":material/error:")


def empty_state(what: str, scope: Scope) -> None:
    """Say that nothing matched, and how to send data."""
    where = ", ".join(x for x in (scope.service and f"service {scope.service}", scope.route and f"route {scope.route}"))
    base = api_url()
    st.info(
        f"**No {what} in {describe_window(scope.window)}{f' for {where}' if where else ''}.**\n\n"
        f'To send data, add one line to your agent: `agentlat.init(service="my-agent")` '
        f"with `OTEL_EXPORTER_OTLP_ENDPOINT={base}`, or point any OpenTelemetry exporter at "
        f"`{base}/v1/traces` (OTLP/HTTP, protobuf or JSON). Traces appear a few seconds after their root span ends.",
        icon=":material/inbox:",
    )


def budget_book(result: BudgetsResponse | ApiError) -> BudgetBook:
    """Budgets when the server has them; an empty book (no colouring) when it answers 404."""
    if isinstance(result, ApiError):
        if result.status != 404:
            show_error(result)
        return BudgetBook()
    return BudgetBook(result)


def latency_metric(label: str, value: float | None, previous: float | None, budget_ms: float | None) -> None:
    """A latency with its change from the previous window and, when budgeted, its budget status."""
    st.metric(label, fmt.ms(value), delta=fmt.change(value, previous), delta_color="inverse")
    if budget_ms is None:
        return
    status = level(value, budget_ms)
    if status is None:
        st.markdown(f":gray-badge[budget {fmt.ms(budget_ms)}]")
    else:
        words = {"ok": "within", "breach": "over"}[status]
        st.markdown(f":{LEVEL_BADGE[status]}-badge[{words} budget {fmt.ms(budget_ms)}]")


def scope() -> Scope:
    """The sidebar's scope for this run (set by ``sidebar``)."""
    return st.session_state.get("_scope", Scope())


def sidebar_call(window: str) -> Call:
    """What the sidebar asks on every page: the services and routes seen in the window."""
    return Call.of("/groups", group_by="service,route", window=window)


@functools.cache
def lazy_chunks() -> tuple[str, ...]:
    """File names of ``LAZY_CHUNKS`` in the installed Streamlit's browser build (those found once each)."""
    built = Path(st.__file__).parent / "static" / "static" / "js"
    found = [sorted(p.name for p in built.glob(f"{stem}.*.js")) for stem in LAZY_CHUNKS]
    return tuple(names[0] for names in found if len(names) == 1)


def preload_chunks() -> None:
    """Have the browser load ``lazy_chunks()`` one by one when it is idle (once per page load)."""
    if chunks := lazy_chunks():
        st.html(_PRELOAD % json.dumps(chunks), unsafe_allow_javascript=True)


def sidebar() -> Scope:
    """Window, service and route pickers in the sidebar, bound to the URL; options from the API."""
    with st.sidebar:
        st.markdown("**agentlat** · latency for LLM agents")
        st.caption(f"reading {api_url()}")
        window = url_select(
            "Window", "window", WINDOWS, DEFAULT_WINDOW, format_func=lambda w: f"last {w}", keep_unknown=is_window
        )
        options = fetch({"groups": sidebar_call(window)})["groups"]
        groups = [] if isinstance(options, ApiError) else [r.group for r in options.rows]
        services = ["", *sorted({g["service"] for g in groups})]
        service = url_select("Service", "service", services, format_func=lambda s: s or "all services")
        routes = ["", *sorted({g["route"] for g in groups if not service or g["service"] == service})]
        route = url_select("Route", "route", routes, format_func=lambda r: r or "all routes")
        if st.button("Refresh", icon=":material/refresh:", width="stretch"):
            _fetch.clear()
        preload_chunks()
    chosen = Scope(window, service, route)
    st.session_state["_scope"] = chosen
    return chosen


def title(text: str, scope_: Scope) -> None:
    st.title(text)
    parts = [describe_window(scope_.window), scope_.service or "all services", scope_.route or "all routes"]
    st.caption(" · ".join(parts))
