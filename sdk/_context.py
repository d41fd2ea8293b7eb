"""Context that follows the agent's work: the route onto every span, and the current
span into thread pools (asyncio tasks already copy context; threads do not)."""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from agentlat import semconv as sc

ROUTE_KEY = otel_context.create_key("agentlat.route")


class RouteProcessor(SpanProcessor):
    """Copies the route of the enclosing agent run onto every span started inside it,
    including spans of other instrumentations, so any span can be grouped by route."""

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        route = otel_context.get_value(ROUTE_KEY, parent_context)
        if route and not (span.attributes or {}).get(sc.ROUTE):
            span.set_attribute(sc.ROUTE, route)

    def on_end(self, span: ReadableSpan) -> None:
        pass


_original_submit: Callable[..., Any] | None = None


def propagate_into_thread_pools() -> None:
    """Make ``ThreadPoolExecutor.submit`` run work in the submitter's OpenTelemetry context."""
    global _original_submit
    if _original_submit is not None:
        return
    original = concurrent.futures.ThreadPoolExecutor.submit
    _original_submit = original

    @functools.wraps(original)
    def submit(self: concurrent.futures.ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any):
        ctx = otel_context.get_current()

        def run_in_context(*a: Any, **kw: Any) -> Any:
            token = otel_context.attach(ctx)
            try:
                return fn(*a, **kw)
            finally:
                otel_context.detach(token)

        return original(self, run_in_context, *args, **kwargs)

    concurrent.futures.ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]


def restore_thread_pools() -> None:
    global _original_submit
    if _original_submit is not None:
        concurrent.futures.ThreadPoolExecutor.submit = _original_submit  # type: ignore[method-assign]
        _original_submit = None
