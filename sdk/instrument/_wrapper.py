"""The one generic wrapper behind agentlat's client instrumentations.

Owns: patching a client method (sync or async) so that each call is a ``ModelCall`` span, adding
the W3C ``traceparent`` to the request, standing in for a streamed response so that each chunk is
timed as the user receives it and the span ends however the stream ends (read to the end, closed,
failed, or dropped half-way), and undoing the patches. A provider module supplies only an
``Endpoint``: how to read a whole response and the items of a stream.

Never changes what the user's code sends (beyond the trace header) or receives, and never raises
into it: instrumentation errors go to ``agentlat._safety.report``.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry.propagate import inject

from agentlat._model_call import ModelCall
from agentlat._safety import guarded, report

# Attributes no standard covers (see agentlat.semconv: agentlat.* holds those).
TOOL_CALLS = "agentlat.response.tool_calls"  # names of the tools the model asked to call, in order
TOOL_CALL_COUNT = "agentlat.response.tool_call_count"
STREAM_END = "agentlat.stream.end"  # how a streamed response ended
EXHAUSTED, CLOSED, FAILED, ABANDONED = "exhausted", "closed", "error", "abandoned"  # values of STREAM_END

_MARK = "__agentlat_patch__"  # on our wrappers: the _Patch they belong to


@dataclass(slots=True)
class Facts:
    """What a response said about itself, from the whole response or gathered from stream items."""

    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)  # keyword arguments of ModelCall.usage
    tool_calls: dict[tuple[int, int], str] = field(default_factory=dict)  # (choice or 0, position) -> tool name

    def set_usage(self, **counts: int | None) -> None:
        """Keep the counts the provider reported (zeros included), ignore the missing ones."""
        self.usage.update({k: int(v) for k, v in counts.items() if isinstance(v, int)})

    def apply(self, call: ModelCall) -> None:
        if self.model:
            call.response_model(self.model)
        if self.usage:
            call.usage(**self.usage)
        if self.tool_calls:
            names = [self.tool_calls[k] for k in sorted(self.tool_calls)]
            call.set(TOOL_CALLS, names)
            call.set(TOOL_CALL_COUNT, len(names))


class StreamReader(Protocol):
    """Reads the items of one streamed response, in order."""

    facts: Facts

    def feed(self, item: Any) -> bool:
        """Take one item; True when it carries output content (text, a tool call, reasoning)."""
        ...


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One API endpoint of a provider, as the generic wrapper needs to know it."""

    provider: str  # gen_ai.provider.name
    stream_types: tuple[type, ...]  # the SDK's stream classes (sync and async)
    read_response: Callable[[Any], Facts]  # a whole response (or whatever else the method returned)
    new_reader: Callable[[], StreamReader]


# --- patching ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Patch:
    owner: type
    name: str
    original: Callable[..., Any]
    wrapper: Callable[..., Any] | None = None
    active: bool = True  # False once undone: a wrapper someone else wrapped stays, and passes through


def is_patched(method: object) -> bool:
    """Whether ``method`` is one of agentlat's active wrappers."""
    patch = getattr(method, _MARK, None)
    return isinstance(patch, _Patch) and patch.active


class Patcher:
    """The patches of one provider module, applied once and undone together."""

    def __init__(self) -> None:
        self._patches: list[_Patch] = []

    def wrap(self, owner: type, name: str, endpoint: Endpoint, *, is_async: bool) -> None:
        """Replace ``owner.name`` by a wrapper that makes each call a model call span; skip it
        when it is missing (another SDK version) or already ours."""
        current = vars(owner).get(name)
        if current is None or is_patched(current):
            return
        patch = _Patch(owner, name, current)
        patch.wrapper = (_async_wrapper if is_async else _sync_wrapper)(patch, endpoint)
        setattr(owner, name, patch.wrapper)
        self._patches.append(patch)

    def undo(self) -> None:
        """Restore the original methods; a wrapper that another library wrapped in turn is left in
        place, inactive, so that its wrapper keeps working."""
        for patch in reversed(self._patches):
            patch.active = False
            if vars(patch.owner).get(patch.name) is patch.wrapper:
                setattr(patch.owner, patch.name, patch.original)
        self._patches.clear()


def _sync_wrapper(patch: _Patch, endpoint: Endpoint) -> Callable[..., Any]:
    original = patch.original

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = _begin(patch, endpoint, kwargs)
        if started is None:
            return original(self, *args, **kwargs)
        try:
            result = original(self, *args, **started.kwargs)
        except BaseException as exc:
            _fail(started.call, exc)
            raise
        return _complete(started, result, _SyncStream)

    setattr(wrapper, _MARK, patch)
    return wrapper


def _async_wrapper(patch: _Patch, endpoint: Endpoint) -> Callable[..., Any]:
    original = patch.original

    @functools.wraps(original)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = _begin(patch, endpoint, kwargs)
        if started is None:
            return await original(self, *args, **kwargs)
        try:
            result = await original(self, *args, **started.kwargs)
        except BaseException as exc:
            _fail(started.call, exc)
            raise
        return _complete(started, result, _AsyncStream)

    setattr(wrapper, _MARK, patch)
    return wrapper


# --- one call ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Started:
    call: ModelCall
    endpoint: Endpoint
    kwargs: dict[str, Any]  # the caller's, with the trace header added


@guarded
def _begin(patch: _Patch, endpoint: Endpoint, kwargs: dict[str, Any]) -> _Started | None:
    """Start the span (current while the request is made) and add its trace header; None when
    inactive (the call then runs untouched)."""
    if not patch.active:
        return None
    model = kwargs.get("model")
    call = ModelCall(
        model if isinstance(model, str) and model else "unknown",
        provider=endpoint.provider,
        stream=kwargs.get("stream") is True,
    )
    call.__enter__()
    try:
        return _Started(call, endpoint, {**kwargs, "extra_headers": with_trace_header(kwargs.get("extra_headers"))})
    except BaseException:
        call.__exit__(None, None, None)
        raise


def with_trace_header(headers: Any) -> dict[str, Any]:
    """The caller's extra headers plus ``traceparent`` (and whatever else the application's
    propagators write) for the current span; a header the caller set wins."""
    carrier: dict[str, Any] = {}
    inject(carrier)
    return {**carrier, **(headers or {})}


def _fail(call: ModelCall, exc: BaseException) -> None:
    """The request failed: the span ends with status Error and ``error.type``."""
    call.__exit__(type(exc), exc, exc.__traceback__)


def _complete(started: _Started, result: Any, proxy_type: type[_Proxy]) -> Any:
    """What the caller receives: the result itself, or a stand-in for a stream."""
    call = started.call
    try:
        if isinstance(result, started.endpoint.stream_types):
            _release(call)
            return proxy_type(result, _Watch(call, started.endpoint.new_reader()))
        started.endpoint.read_response(result).apply(call)
    except Exception as exc:
        report(f"{__name__}._complete", exc)
    call.__exit__(None, None, None)
    return result


def _release(call: ModelCall) -> None:
    """Stop the span being current while it stays open: the stream outlives the call that made it,
    and the user's next spans are not its children. (``_token`` is the scope's context token.)"""
    token, call._token = call._token, None
    if token is not None:
        otel_context.detach(token)


# --- streams -----------------------------------------------------------------------------


class _Watch:
    """The open span of one streamed response; fed by its proxy, ended exactly once."""

    __slots__ = ("_finalizer", "call", "ended", "reader")

    def __init__(self, call: ModelCall, reader: StreamReader) -> None:
        self.call = call
        self.reader = reader
        self.ended = False
        self._finalizer: weakref.finalize | None = None

    def bind(self, proxy: _Proxy) -> None:
        """End the span when ``proxy`` is garbage-collected before the stream ended."""
        self._finalizer = weakref.finalize(proxy, self.end, ABANDONED)

    @guarded
    def item(self, item: Any) -> None:
        if self.reader.feed(item):
            self.call.chunk()

    @guarded
    def end(self, how: str, exc: BaseException | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        if self._finalizer is not None:
            self._finalizer.detach()
        self.reader.facts.apply(self.call)
        self.call.set(STREAM_END, how)
        if exc is None:
            self.call.__exit__(None, None, None)
        else:
            _fail(self.call, exc)


class _Proxy:
    """Stands in for an SDK stream: every attribute is the stream's, and ``isinstance`` sees the
    stream's class; iteration and closing go through the watch."""

    __slots__ = ("__weakref__", "_agentlat_stream", "_agentlat_watch")
    _agentlat_stream: Any
    _agentlat_watch: _Watch

    def __init__(self, stream: Any, watch: _Watch) -> None:
        object.__setattr__(self, "_agentlat_stream", stream)
        object.__setattr__(self, "_agentlat_watch", watch)
        watch.bind(self)

    @property
    def __class__(self) -> type:  # type: ignore[override]
        return type(self._agentlat_stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agentlat_stream, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._agentlat_stream, name, value)

    def __repr__(self) -> str:
        return repr(self._agentlat_stream)


class _SyncStream(_Proxy):
    __slots__ = ()

    def __iter__(self) -> _SyncStream:
        return self

    def __next__(self) -> Any:
        watch = self._agentlat_watch
        try:
            item = next(self._agentlat_stream)
        except StopIteration:
            watch.end(EXHAUSTED)
            raise
        except BaseException as exc:
            watch.end(FAILED, exc)
            raise
        watch.item(item)
        return item

    def __enter__(self) -> _SyncStream:
        self._agentlat_stream.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        try:
            return self._agentlat_stream.__exit__(*exc_info)
        finally:
            self._agentlat_watch.end(CLOSED)

    def close(self) -> None:
        try:
            self._agentlat_stream.close()
        finally:
            self._agentlat_watch.end(CLOSED)


class _AsyncStream(_Proxy):
    __slots__ = ()

    def __aiter__(self) -> _AsyncStream:
        return self

    async def __anext__(self) -> Any:
        watch = self._agentlat_watch
        try:
            item = await self._agentlat_stream.__anext__()
        except StopAsyncIteration:
            watch.end(EXHAUSTED)
            raise
        except BaseException as exc:
            watch.end(FAILED, exc)
            raise
        watch.item(item)
        return item

    async def __aenter__(self) -> _AsyncStream:
        await self._agentlat_stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self._agentlat_stream.__aexit__(*exc_info)
        finally:
            self._agentlat_watch.end(CLOSED)

    async def close(self) -> None:
        try:
            await self._agentlat_stream.close()
        finally:
            self._agentlat_watch.end(CLOSED)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._agentlat_stream, name)
        return self._closing(attr) if name == "aclose" else attr  # openai's streams have aclose, anthropic's not

    def _closing(self, aclose: Callable[[], Any]) -> Callable[[], Any]:
        async def closing() -> None:
            try:
                await aclose()
            finally:
                self._agentlat_watch.end(CLOSED)

        return closing
