"""Stand-ins for a streamed response: each item timed as the user receives it, and the span ended
exactly once however the stream ends (read to the end, closed by whoever holds it, failed, or dropped
half-way). ``_wrapper`` makes them; a stand-in looks like the SDK's own stream (attributes, ``isinstance``).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

from agentlat._model_call import ModelCall
from agentlat._safety import guarded

STREAM_END = "agentlat.stream.end"  # how a streamed response ended
EXHAUSTED, CLOSED, FAILED, ABANDONED = "exhausted", "closed", "error", "abandoned"  # values of STREAM_END
_WATCHED = "__agentlat_watch__"  # on a stream response's timed close: the Watch it tells


def fail(call: ModelCall, exc: BaseException) -> None:
    """The request failed: the span ends with status Error and ``error.type``."""
    call.__exit__(type(exc), exc, exc.__traceback__)


def watch_of(response: Any) -> Watch | None:
    """The watch a stream's HTTP response tells when it is closed, if one does."""
    watch = getattr(getattr(response, "close", None), _WATCHED, None)
    return watch if isinstance(watch, Watch) else None


def is_raw_response(result: Any) -> bool:
    """An SDK's raw response (``LegacyAPIResponse``, ``APIResponse``): ``parse()`` gives the stream."""
    return callable(getattr(result, "parse", None)) and hasattr(result, "http_response")


def stream_proxy(stream: Any, watch: Watch) -> Proxy:
    """The stand-in for an SDK stream, sync or async, hiding what ``watch.hides`` says."""
    if hasattr(stream, "__anext__"):
        return (_AsyncStream if watch.hides is None else _AsyncStreamHiding)(stream, watch)
    return (_SyncStream if watch.hides is None else _SyncStreamHiding)(stream, watch)


class Watch:
    """The open span of one streamed response; fed by its proxies, ended exactly once: by the
    stream's end, its HTTP response closed by whoever holds it, or the last proxy dropped."""

    __slots__ = ("_finalizers", "call", "ended", "hides", "reader", "reading", "stream_types")

    def __init__(
        self, call: ModelCall, reader: Any, stream_types: tuple[type, ...], hides: Callable[[Any], bool] | None = None
    ) -> None:
        self.call = call
        self.reader = reader  # the endpoint's StreamReader: feed(item) says whether an item is a chunk; .facts
        if hasattr(self.reader, "call"):
            self.reader.call = call  # type: ignore[attr-defined]
        self.stream_types = stream_types
        self.hides = hides
        self.ended = False
        self.reading = False  # inside the stream's next(): a close then is the stream's own ending
        self._finalizers: list[weakref.finalize] = []

    def bind(self, proxy: Proxy, response: Any) -> None:
        """End the span when ``response`` (the stream's HTTP response) is closed outside a read, and
        when every proxy bound is garbage-collected before the stream ended."""
        self._finalizers.append(weakref.finalize(proxy, self._dropped))
        _on_close(response, self)

    def _dropped(self) -> None:
        if all(not f.alive for f in self._finalizers):
            self.end(ABANDONED)

    def closed(self) -> None:
        """The stream's HTTP response was closed: by a helper, the caller, or the SDK at the end."""
        if not self.reading:
            self.end(CLOSED)

    @guarded
    def item(self, item: Any) -> None:
        if self.reader.feed(item):
            self.call.chunk()

    @guarded
    def end(self, how: str, exc: BaseException | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        for finalizer in self._finalizers:
            finalizer.detach()
        self.reader.facts.apply(self.call)
        self.call.set(STREAM_END, how)
        if exc is None:
            self.call.__exit__(None, None, None)
        else:
            fail(self.call, exc)


def _on_close(response: Any, watch: Watch) -> None:
    """Have closing ``response`` (an httpx response: ``close``, or ``aclose`` when async) tell
    ``watch``: stream helpers close the response, not the stream we stand in for."""
    for name in ("close", "aclose"):
        close = getattr(response, name, None)
        if close is None or getattr(close, _WATCHED, None) is not None:
            continue
        if inspect.iscoroutinefunction(close):

            async def closing_async(close: Callable[[], Any] = close) -> None:
                try:
                    await close()
                finally:
                    watch.closed()

            closing: Callable[[], Any] = closing_async
        else:

            def closing_sync(close: Callable[[], Any] = close) -> None:
                try:
                    close()
                finally:
                    watch.closed()

            closing = closing_sync
        setattr(closing, _WATCHED, watch)
        try:
            setattr(response, name, closing)
        except (AttributeError, TypeError):  # a response that takes no attributes: dropping still ends the span
            return


class Proxy:
    """Stands in for an SDK stream: every attribute is the stream's, and ``isinstance`` sees the
    stream's class; iteration and closing go through the watch."""

    __slots__ = ("__weakref__", "_agentlat_stream", "_agentlat_watch")
    _agentlat_stream: Any
    _agentlat_watch: Watch

    def __init__(self, stream: Any, watch: Watch) -> None:
        object.__setattr__(self, "_agentlat_stream", stream)
        object.__setattr__(self, "_agentlat_watch", watch)
        response = getattr(stream, "http_response", None) or getattr(stream, "response", None)
        watch.bind(self, response)

    @property
    def __class__(self) -> type:  # type: ignore[override]
        return type(self._agentlat_stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agentlat_stream, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._agentlat_stream, name, value)

    def __repr__(self) -> str:
        return repr(self._agentlat_stream)


class _SyncStream(Proxy):
    __slots__ = ()

    def __iter__(self) -> _SyncStream:
        return self

    def __next__(self) -> Any:
        watch = self._agentlat_watch
        watch.reading = True
        try:
            item = next(self._agentlat_stream)
        except StopIteration:
            watch.end(EXHAUSTED)
            raise
        except BaseException as exc:
            watch.end(FAILED, exc)
            raise
        finally:
            watch.reading = False
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


class _AsyncStream(Proxy):
    __slots__ = ()

    def __aiter__(self) -> _AsyncStream:
        return self

    async def __anext__(self) -> Any:
        watch = self._agentlat_watch
        watch.reading = True
        try:
            item = await self._agentlat_stream.__anext__()
        except StopAsyncIteration:
            watch.end(EXHAUSTED)
            raise
        except BaseException as exc:
            watch.end(FAILED, exc)
            raise
        finally:
            watch.reading = False
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


class _SyncStreamHiding(_SyncStream):
    """A stream whose request the instrumentation changed: the items it added are not the caller's."""

    __slots__ = ()

    def __next__(self) -> Any:
        item = _SyncStream.__next__(self)
        while self._agentlat_watch.hides(item):  # type: ignore[misc]
            item = _SyncStream.__next__(self)
        return item


class _AsyncStreamHiding(_AsyncStream):
    __slots__ = ()

    async def __anext__(self) -> Any:
        item = await _AsyncStream.__anext__(self)
        while self._agentlat_watch.hides(item):  # type: ignore[misc]
            item = await _AsyncStream.__anext__(self)
        return item


class RawResponse(Proxy):
    """Stands in for the raw response of a streamed request (``with_raw_response``,
    ``with_streaming_response``): the stream ``parse()`` returns is timed; the span ends with it,
    when the response is closed, or when both are dropped."""

    __slots__ = ("_agentlat_parsed",)

    def __init__(self, response: Any, watch: Watch) -> None:
        object.__setattr__(self, "_agentlat_parsed", None)
        super().__init__(response, watch)

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        parsed = self._agentlat_stream.parse(*args, **kwargs)
        if inspect.isawaitable(parsed):
            return self._parsed_async(parsed)
        return self._stand_in(parsed)

    async def _parsed_async(self, parsed: Any) -> Any:
        return self._stand_in(await parsed)

    def _stand_in(self, parsed: Any) -> Any:
        watch = self._agentlat_watch
        if watch.ended or not isinstance(parsed, watch.stream_types):
            return parsed
        if self._agentlat_parsed is None or self._agentlat_parsed._agentlat_stream is not parsed:
            object.__setattr__(self, "_agentlat_parsed", stream_proxy(parsed, watch))
        return self._agentlat_parsed
