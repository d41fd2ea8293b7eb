"""Time every query-API call each dashboard page makes, as the page makes them.

Target (issue 5): each page's queries under 300 ms at 10M spans. Point it at a server that
holds that much data::

    python bench/dashboard_queries.py --api http://127.0.0.1:4318 [--window 1h] [--route /chat] [--rounds 20]

A page runs its calls concurrently in batches (the overview asks for the time series after
its tiles, the trace explorer for one trace after the list), so a page's time is the sum of
its batches' slowest calls; that is what the target applies to. Per-call times (one at a
time) show which query to work on. Exit status 1 when a page's p50 misses the target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from agentlat.api.client import ApiClient, ApiError, Call
from agentlat.dashboard import page_advisor, page_budgets, page_overview, page_routes, page_traces
from agentlat.dashboard.state import Scope
from agentlat.dashboard.ui import sidebar_call

TARGET_MS = 300.0
Batches = list[dict[str, Call]]


def overview(scope: Scope, api: ApiClient) -> Batches:
    calls = page_overview.calls(scope, int(time.time()))
    over_time = {key: calls.pop(key) for key in ("series", "heatmap")}
    return [calls, over_time]


def traces(scope: Scope, api: ApiClient) -> Batches:
    listed = page_traces.calls(scope)
    found = api.call(listed["list"]).traces
    detail = page_traces.calls(scope, trace_id=found[0].trace_id)["trace"] if found else None
    return [listed, *([{"trace": detail}] if detail else [])]


PAGES: dict[str, Callable[[Scope, ApiClient], Batches]] = {
    "overview": overview,
    "routes (route)": lambda scope, api: [page_routes.calls(scope, "route")],
    "routes (model)": lambda scope, api: [page_routes.calls(scope, "model")],
    "routes (tool)": lambda scope, api: [page_routes.calls(scope, "tool")],
    "traces": traces,
    "budgets": lambda scope, api: [page_budgets.calls(scope)],
    "advisor": lambda scope, api: [page_advisor.calls(scope)],
}


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def page_ms(api: ApiClient, batches: Batches) -> float:
    """One page load: every batch at once, one batch after another; API errors (a 404 for an
    unconfigured budgets file) count as answers, an unreachable server stops the run."""

    def run() -> None:
        for batch in batches:
            for answer in api.fetch(list(batch.values())):
                if isinstance(answer, ApiError) and answer.status == 0:
                    sys.exit(str(answer))

    return timed(run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", default="http://127.0.0.1:4318", help="agentlat server URL")
    parser.add_argument("--window", default="1h", help="trailing window, e.g. 15m, 1h, 24h, 7d")
    parser.add_argument("--service", default="", help="only this service")
    parser.add_argument("--route", default="", help="only this route")
    parser.add_argument("--rounds", type=int, default=20, help="page loads to time per page")
    args = parser.parse_args(argv)
    api, scope = ApiClient(args.api, timeout=120), Scope(args.window, args.service, args.route)
    print(f"{args.api}, window {args.window}, {args.rounds} rounds; target {TARGET_MS:.0f} ms per page\n")
    print(f"{'page':<16} {'p50 ms':>8} {'max ms':>8}  verdict     calls (p50 ms each, one at a time)")
    missed = 0
    for name, plan in PAGES.items():
        batches = [{"sidebar": sidebar_call(scope.window)}, *plan(scope, api)]
        loads = [page_ms(api, batches) for _ in range(args.rounds)]
        per_call = {
            key: statistics.median(timed(lambda c=call: api.fetch([c])) for _ in range(max(3, args.rounds // 4)))
            for batch in batches
            for key, call in batch.items()
        }
        p50 = statistics.median(loads)
        verdict = "ok" if p50 < TARGET_MS else "TOO SLOW"
        missed += verdict != "ok"
        detail = ", ".join(f"{key} {ms:.0f}" for key, ms in sorted(per_call.items(), key=lambda kv: -kv[1]))
        print(f"{name:<16} {p50:>8.1f} {max(loads):>8.1f}  {verdict:<10}  {detail}")
    api.close()
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
