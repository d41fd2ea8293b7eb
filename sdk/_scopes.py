"""Manual instrumentation: agent runs, tool calls and prefetches as spans.

Each scope works as a sync or async context manager and as a decorator of sync or async
functions (a fresh span per call). Telemetry failures never reach the caller's code:
see ``agentlat._safety``.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentlat import semconv as sc
from agentlat._context import AGENTLAT_SCOPE, CARRIED
from agentlat._safety import guarded
from agentlat._version import __version__

F = TypeVar("F", bound=Callable[..., Any])

TRACER_NAME = AGENTLAT_SCOPE


_tracer_cache: tuple[object, trace.Tracer] | None = None


def tracer() -> trace.Tracer:
    """agentlat's tracer from the current global provider, made once per provider (per span it
    would cost more than the rest of a scope)."""
    global _tracer_cache
    provider = trace.get_tracer_provider()
    if _tracer_cache is None or _tracer_cache[0] is not provider:
        _tracer_cache = (provider, provider.get_tracer(TRACER_NAME, __version__))
    return _tracer_cache[1]


class SpanScope:
    """A span that is current while the scope is open. Subclasses set name and attributes."""

    kind = SpanKind.INTERNAL

    def __init__(self, name: str, attributes: dict[str, Any]) -> None:
        self._name = name
        self._attributes = {k: v for k, v in attributes.items() if v is not None}
        self._span: Span | None = None
        self._token: object | None = None

    # --- as a decorator -------------------------------------------------------------
    def _fresh(self) -> Self:
        """A new scope with the same arguments, for one call of a decorated function."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._attributes = dict(self._attributes)
        clone._span, clone._token = None, None
        return clone

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with self._fresh():
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    # --- as a context manager -------------------------------------------------------
    def __enter__(self) -> Self:
        self._start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._finish(exc)

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.__exit__(exc_type, exc, tb)

    @guarded
    def _start(self) -> None:
        self._span = tracer().start_span(
            self._name, kind=self.kind, attributes=self._attributes, start_time=self._start_time_ns()
        )
        ctx = trace.set_span_in_context(self._span)
        for attribute, key in CARRIED.items():
            if value := self._attributes.get(attribute):
                ctx = otel_context.set_value(key, value, ctx)
        self._token = otel_context.attach(ctx)

    @guarded
    def _finish(self, exc: BaseException | None) -> None:
        if self._span is None:
            return
        if exc is not None:
            record_error(self._span, exc)
        self._before_end(self._span)
        if self._token is not None:
            otel_context.detach(self._token)
        self._span.end(end_time=self._end_time_ns())

    def _start_time_ns(self) -> int | None:
        """Hook for subclasses that keep their own clock; None means now."""
        return None

    def _end_time_ns(self) -> int | None:
        return None

    def _before_end(self, span: Span) -> None:
        """Hook for subclasses: last attributes before the span ends."""

    @property
    def span(self) -> Span:
        """The underlying OpenTelemetry span (a non-recording one outside the scope)."""
        return self._span or trace.INVALID_SPAN

    @guarded
    def set(self, key: str, value: Any) -> None:
        """Set one more attribute on the span."""
        if self._span is not None:
            self._span.set_attribute(key, value)


def record_error(span: Span, exc: BaseException) -> None:
    span.set_status(Status(StatusCode.ERROR, str(exc)[:1000]))
    span.set_attribute(sc.ERROR_TYPE, type(exc).__qualname__)
    span.record_exception(exc)


class AgentRun(SpanScope):
    """``invoke_agent {name}``: one run of an agent, the usual root of a trace."""

    def __init__(
        self,
        name: str,
        *,
        route: str | None = None,
        prompt_version: str | None = None,
        conversation_id: str | None = None,
        agent_id: str | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            f"{sc.OP_INVOKE_AGENT} {name}",
            {
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.GEN_AI_AGENT_NAME: name,
                sc.GEN_AI_AGENT_ID: agent_id,
                sc.GEN_AI_CONVERSATION_ID: conversation_id,
                sc.ROUTE: route,
                sc.PROMPT_VERSION: prompt_version,
                **(attributes or {}),
            },
        )


class ToolCall(SpanScope):
    """``execute_tool {name}``: one tool call.

    ``depends_on`` names the tool call ids whose output this call consumed; the trace
    analysis never proposes running dependent calls in parallel. For a tool call streamed
    by the model, ``args_ready_ns`` is when its arguments were complete in the stream
    (``time.time_ns()``); the gap to the span start is time the tool could have started
    earlier.
    """

    def __init__(
        self,
        name: str,
        *,
        call_id: str | None = None,
        depends_on: Sequence[str] = (),
        args_ready_ns: int | None = None,
        tool_type: str | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            f"{sc.OP_EXECUTE_TOOL} {name}",
            {
                sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
                sc.GEN_AI_TOOL_NAME: name,
                sc.GEN_AI_TOOL_CALL_ID: call_id,
                sc.GEN_AI_TOOL_TYPE: tool_type,
                sc.TOOL_DEPENDS_ON: list(depends_on) or None,
                sc.TOOL_ARGS_READY_TIME: args_ready_ns,
                **(attributes or {}),
            },
        )
        self.call_id = call_id

    @guarded
    def consumes(self, *others: ToolCall | str) -> None:
        """Declare that this call used the output of other tool calls (or call ids)."""
        ids = [o if isinstance(o, str) else o.call_id for o in others]
        known = list(self._attributes.get(sc.TOOL_DEPENDS_ON) or [])
        merged = known + [i for i in ids if i and i not in known]
        self._attributes[sc.TOOL_DEPENDS_ON] = merged
        self.set(sc.TOOL_DEPENDS_ON, merged)


class Prefetch(ToolCall):
    """A tool call started speculatively, before the model asked for it.

    Say how it went with ``hit()``, ``miss()`` or ``cancelled()``; a prefetch closed without
    a verdict counts as a miss (its result was not used). A miss or a cancelled prefetch
    wasted its own duration unless told otherwise; a hit saved, by default, the whole
    duration (the result was ready when the model asked).
    """

    def __init__(self, name: str, *, call_id: str | None = None, attributes: dict[str, Any] | None = None) -> None:
        super().__init__(name, call_id=call_id, attributes=attributes)
        self._outcome = "miss"
        self._seconds: float | None = None
        self._started = time.monotonic()

    def _start(self) -> None:
        self._started = time.monotonic()
        super()._start()

    def hit(self, saved_seconds: float | None = None) -> None:
        self._outcome, self._seconds = "hit", saved_seconds

    def miss(self, wasted_seconds: float | None = None) -> None:
        self._outcome, self._seconds = "miss", wasted_seconds

    def cancelled(self, wasted_seconds: float | None = None) -> None:
        self._outcome, self._seconds = "cancelled", wasted_seconds

    def _before_end(self, span: Span) -> None:
        seconds = self._seconds if self._seconds is not None else time.monotonic() - self._started
        span.set_attribute(sc.PREFETCH_OUTCOME, self._outcome)
        span.set_attribute(sc.PREFETCH_SAVED if self._outcome == "hit" else sc.PREFETCH_WASTED, seconds)
