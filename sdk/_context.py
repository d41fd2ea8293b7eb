"""Context that follows the agent's work: the route and prompt version onto every span, a mark on spans that
are another instrumentation's view of an agentlat model call, and the current span into
thread pools (asyncio tasks already copy context; threads do not)."""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from agentlat import semconv as sc

ROUTE_KEY = otel_context.create_key("agentlat.route")
PROMPT_VERSION_KEY = otel_context.create_key("agentlat.prompt.version")
# What an agent run carries onto every span started inside it: attribute -> its context key.
CARRIED = {sc.ROUTE: ROUTE_KEY, sc.PROMPT_VERSION: PROMPT_VERSION_KEY}


AGENTLAT_SCOPE = "agentlat"


class ContextProcessor(SpanProcessor):
    """On every span started in this process:

    - copies the route and prompt version of the enclosing agent run onto it (spans of other
      instrumentations too), so any span can be grouped by them;
    - marks a span of another instrumentation that starts directly inside an agentlat model
      call (anthropic's built-in span, OpenLLMetry's) as that same call seen again, so the
      collector does not count it as a second model call.
    """

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        for attribute, key in CARRIED.items():
            value = otel_context.get_value(key, parent_context)
            if value and not (span.attributes or {}).get(attribute):
                span.set_attribute(attribute, value)
        if _is_foreign(span) and _is_agentlat_model_call(trace.get_current_span(parent_context)):
            span.set_attribute(sc.INNER_OF_MODEL_CALL, True)

    def on_end(self, span: ReadableSpan) -> None:
        pass


def _is_foreign(span: Span) -> bool:
    scope = span.instrumentation_scope
    return scope is None or scope.name != AGENTLAT_SCOPE


def _is_agentlat_model_call(parent: object) -> bool:
    scope = getattr(parent, "instrumentation_scope", None)
    attributes = getattr(parent, "attributes", None) or {}
    return (
        scope is not None
        and scope.name == AGENTLAT_SCOPE
        and attributes.get(sc.GEN_AI_OPERATION_NAME) in sc.MODEL_OPERATIONS
    )


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
