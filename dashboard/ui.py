"""Streamlit pieces every page shares: the API connection, cached fetching, the sidebar
scope, error and empty states, and budget-coloured latency tiles. Answers are the query API's
models (``agentlat.api.models``), read with attributes."""

from __future__ import annotations

from typing import TypeVar

import streamlit as st

from agentlat.api.client import ApiClient, ApiError, Call, api_url
from agentlat.api.models import Answer, BudgetsResponse
from agentlat.dashboard import fmt
from agentlat.dashboard.budgets import LEVEL_BADGE, BudgetBook, level
from agentlat.dashboard.state import DEFAULT_WINDOW, WINDOWS, Scope, describe_window, is_window, url_select

CACHE_SECONDS = 10
BUDGETS_HELP = "start the server with `--budgets FILE` (see docs/budgets.md)"
A = TypeVar("A", bound=Answer)


@st.cache_resource(show_spinner=False)
def _client(base_url: str) -> ApiClient:
    return ApiClient(base_url)


@st.cache_data(ttl=CACHE_SECONDS, show_spinner=False)
def _fetch(base_url: str, calls: tuple[Call, ...]) -> list[Answer | ApiError]:
    return _client(base_url).fetch(list(calls))  # models and errors pickle, as the cache needs


def fetch(calls: dict[str, Call]) -> dict[str, Answer | ApiError]:
    """Run named calls at once (answers cached for a few seconds, failures never)."""
    results = _fetch(api_url(), tuple(calls.values()))
    if any(isinstance(r, ApiError) and (r.status == 0 or r.status >= 500) for r in results):
        _fetch.clear()
    return dict(zip(calls, results, strict=True))


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
    chosen = Scope(window, service, route)
    st.session_state["_scope"] = chosen
    return chosen


def title(text: str, scope_: Scope) -> None:
    st.title(text)
    parts = [describe_window(scope_.window), scope_.service or "all services", scope_.route or "all routes"]
    st.caption(" · ".join(parts))
