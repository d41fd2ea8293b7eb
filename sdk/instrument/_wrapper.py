"""The one generic wrapper behind agentlat's client instrumentations.

Owns: patching a client method (sync or async) so that each call is a ``ModelCall`` span, adding
the W3C ``traceparent`` to the request, handing a streamed response to a stand-in (``_streams``) that
times each chunk as the user receives it and ends the span however the stream ends, and undoing the
patches. A provider module supplies
only an ``Endpoint``: how to read a whole response and the items of a stream.

One HTTP request is one span, whichever way the SDK makes it: ``create`` is patched, and so are the
helpers (``stream``, ``parse``) that in some SDK version build their request without it. A patched
helper times the request it makes through the resource's ``_post`` for the endpoint's paths; the
outermost patched entry point owns the request (``create`` inside a helper is not counted twice).
A raw response (``with_raw_response``, ``with_streaming_response``) of a streamed request keeps the
span open: the stream its ``parse()`` returns is timed like any other.

Never changes what the user's code sends (beyond the trace header) or receives, and never raises
into it: instrumentation errors go to ``agentlat._safety.report``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry.propagate import inject

from agentlat import semconv as sc
from agentlat._context import PROMPT_VERSION_KEY, ROUTE_KEY
from agentlat._model_call import ModelCall
from agentlat._prompt_shape import PromptHistory, PromptPart
from agentlat._safety import guarded, report
from agentlat.instrument._streams import Proxy, RawResponse, Watch, fail, is_raw_response, stream_proxy, watch_of

# Attributes no standard covers (see agentlat.semconv: agentlat.* holds those).
TOOL_CALLS = "agentlat.response.tool_calls"  # names of the tools the model asked to call, in order
TOOL_CALL_COUNT = "agentlat.response.tool_call_count"

_MARK = "__agentlat_patch__"  # on our wrappers: the _Patch they belong to
_POSTED = "__agentlat_post__"  # on a resource's timed ``_post``: the SDK's own, which it calls
# True while a patched entry point makes its request: a patched method it calls makes no second span.
_OWNED: ContextVar[bool] = ContextVar("agentlat_request_owned", default=False)
PROMPTS = PromptHistory()  # the previous prompt of each provider and route, for where a new one differs


@dataclass(slots=True)
class Facts:
    """What a response said about itself, from the whole response or gathered from stream items."""

    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)  # keyword arguments of ModelCall.usage
    tool_calls: dict[tuple[int, int], str] = field(default_factory=dict)  # (choice or 0, position) -> tool name
    attributes: dict[str, Any] = field(default_factory=dict)  # anything else it said, as span attributes

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
        for key, value in self.attributes.items():
            call.set(key, value)


class StreamReader(Protocol):
    """Reads the items of one streamed response, in order. A reader whose class declares
    ``call: ModelCall | None = None`` gets the span's ``ModelCall`` there before the first item,
    to report moments as items arrive (``tool_call_named``, ``tool_call_ready``)."""

    facts: Facts

    def feed(self, item: Any) -> bool:
        """Take one item; True when it carries output content (text, a tool call, reasoning)."""
        ...


def _in_extra_headers(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {**kwargs, "extra_headers": with_trace_header(kwargs.get("extra_headers"))}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One API endpoint of a provider, as the generic wrapper needs to know it."""

    provider: str  # gen_ai.provider.name
    stream_types: tuple[type, ...]  # the SDK's stream classes (sync and async)
    read_response: Callable[[Any], Facts]  # a whole response (or whatever else the method returned)
    new_reader: Callable[[], StreamReader]
    paths: frozenset[str] = frozenset()  # request paths of this endpoint (for the helpers' requests)
    # Adjusts a streamed request's parameters (create's keyword arguments, or the body a helper posts):
    # returns them, and a test for items the SDK would not have yielded without the change (hidden).
    prepare: Callable[[dict[str, Any]], tuple[dict[str, Any], Callable[[Any], bool] | None]] | None = None
    operation: str = sc.OP_CHAT  # gen_ai.operation.name
    streams: bool | None = None  # the method always streams, or never; None: its ``stream=True`` argument says
    add_trace_header: Callable[[dict[str, Any]], dict[str, Any]] = _in_extra_headers  # to the call's arguments
    provider_of: Callable[[Any], str] | None = None  # the provider as the client object says, else ``provider``
    # the request's prompt in the parts a provider's cache reads (agentlat._prompt_shape), from its parameters
    prompt_parts: Callable[[dict[str, Any]], list[PromptPart]] | None = None
    # what the request asks of the provider's prompt cache (breakpoints, lifetime), as span attributes
    cache_settings: Callable[[dict[str, Any]], dict[str, Any]] | None = None


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

    def wrap_helper(self, owner: type, name: str, endpoint: Endpoint) -> None:
        """Replace the helper ``owner.name`` (``stream``, ``parse``) by one that times the requests it
        makes, through ``create`` or not: it gives the resource a ``_post`` that makes a span of each
        request to ``endpoint.paths`` no patched method owns; skipped when missing or already ours."""
        current = vars(owner).get(name)
        if current is None or is_patched(current):
            return
        patch = _Patch(owner, name, current)
        patch.wrapper = _helper_wrapper(patch, endpoint)
        setattr(owner, name, patch.wrapper)
        self._patches.append(patch)

    def wrap_stream_holder(self, owner: type, attribute: str) -> None:
        """Patch ``owner.__init__`` (a helper's stream class) so that the stream it keeps in
        ``attribute`` is timed when it built that stream itself over the HTTP response of a stream we
        returned (anthropic 0.40's ``MessageStream`` does: the stream handed to it is dropped)."""
        current = vars(owner).get("__init__")
        if current is None or is_patched(current):
            return
        patch = _Patch(owner, "__init__", current)
        patch.wrapper = _holder_wrapper(patch, attribute)
        owner.__init__ = patch.wrapper  # type: ignore[misc]
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
        started = _begin(patch, endpoint, self, kwargs)
        if started is None:
            return original(self, *args, **kwargs)
        return _request(started, lambda kw: original(self, *args, **kw))

    setattr(wrapper, _MARK, patch)
    return wrapper


def _async_wrapper(patch: _Patch, endpoint: Endpoint) -> Callable[..., Any]:
    original = patch.original

    @functools.wraps(original)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = _begin(patch, endpoint, self, kwargs)
        if started is None:
            return await original(self, *args, **kwargs)
        return await _request_async(started, lambda kw: original(self, *args, **kw))

    setattr(wrapper, _MARK, patch)
    return wrapper


def _request(started: _Started, send: Callable[[dict[str, Any]], Any]) -> Any:
    """Make the request with the started call's arguments, owning it (a patched method it goes
    through makes no span of its own); what the caller receives."""
    owned = _OWNED.set(True)
    try:
        result = send(started.kwargs)
    except BaseException as exc:
        fail(started.call, exc)
        raise
    finally:
        _OWNED.reset(owned)
    return _complete(started, result)


async def _request_async(started: _Started, send: Callable[[dict[str, Any]], Any]) -> Any:
    owned = _OWNED.set(True)
    try:
        result = await send(started.kwargs)
    except BaseException as exc:
        fail(started.call, exc)
        raise
    finally:
        _OWNED.reset(owned)
    return _complete(started, result)


def _helper_wrapper(patch: _Patch, endpoint: Endpoint) -> Callable[..., Any]:
    """The helper, run with the resource's ``_post`` timed (kept on the resource: a helper may post
    later, when its stream manager is entered)."""
    original = patch.original

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if patch.active:
            _time_posts(self, patch, endpoint)
        return original(self, *args, **kwargs)

    setattr(wrapper, _MARK, patch)
    return wrapper


def _holder_wrapper(patch: _Patch, attribute: str) -> Callable[..., Any]:
    original = patch.original

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if patch.active:
            _adopt(self, attribute)

    setattr(wrapper, _MARK, patch)
    return wrapper


@guarded
def _adopt(holder: Any, attribute: str) -> None:
    """Time ``holder.<attribute>``, a stream built over the response of a stream we watch, in its place."""
    stream = getattr(holder, attribute, None)
    if stream is None or isinstance(stream, Proxy):
        return
    watch = watch_of(getattr(stream, "response", None))
    if watch is not None and not watch.ended and isinstance(stream, watch.stream_types):
        setattr(holder, attribute, stream_proxy(stream, watch))


@guarded
def _time_posts(resource: Any, patch: _Patch, endpoint: Endpoint) -> None:
    """Give ``resource`` a ``_post`` that makes a span of each request to the endpoint's paths that
    no patched method owns (the SDK sets ``_post`` on each resource, as its client's ``post``); once
    per resource and patch."""
    post = vars(resource).get("_post")
    if post is None or getattr(post, _MARK, None) is patch:
        return
    post = getattr(post, _POSTED, post)  # an earlier patch's (undone): replaced
    timed = _async_post if inspect.iscoroutinefunction(post) else _sync_post
    resource._post = timed(patch, endpoint, resource, post)


def _begin_post(patch: _Patch, endpoint: Endpoint, resource: Any, path: Any, kwargs: dict[str, Any]) -> _Started | None:
    """``_begin`` for a ``_post`` of the resource, when it requests one of the endpoint's paths."""
    body = kwargs.get("body")
    if not isinstance(path, str) or path.split("?")[0] not in endpoint.paths or not isinstance(body, dict):
        return None
    options = kwargs.get("options") or {}

    def build(body: dict[str, Any]) -> dict[str, Any]:
        headers = with_trace_header(options.get("headers"))
        return {**kwargs, "body": body, "options": {**options, "headers": headers}}

    return _begin(patch, endpoint, resource, body, build, stream=kwargs.get("stream") is True)


def _sync_post(patch: _Patch, endpoint: Endpoint, resource: Any, post: Callable[..., Any]) -> Callable[..., Any]:
    def timed_post(path: Any, *args: Any, **kwargs: Any) -> Any:
        started = _begin_post(patch, endpoint, resource, path, kwargs)
        if started is None:
            return post(path, *args, **kwargs)
        return _request(started, lambda kw: post(path, *args, **kw))

    setattr(timed_post, _MARK, patch)
    setattr(timed_post, _POSTED, post)
    return timed_post


def _async_post(patch: _Patch, endpoint: Endpoint, resource: Any, post: Callable[..., Any]) -> Callable[..., Any]:
    async def timed_post(path: Any, *args: Any, **kwargs: Any) -> Any:
        started = _begin_post(patch, endpoint, resource, path, kwargs)
        if started is None:
            return await post(path, *args, **kwargs)
        return await _request_async(started, lambda kw: post(path, *args, **kw))

    setattr(timed_post, _MARK, patch)
    setattr(timed_post, _POSTED, post)
    return timed_post


# --- one call ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Started:
    call: ModelCall
    endpoint: Endpoint
    kwargs: dict[str, Any]  # what the patched method is called with: the caller's, with the trace header
    stream: bool
    hides: Callable[[Any], bool] | None  # stream items the caller does not see (see Endpoint.prepare)


@guarded
def _begin(
    patch: _Patch,
    endpoint: Endpoint,
    client: Any,
    params: dict[str, Any],
    build: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    *,
    stream: bool | None = None,
) -> _Started | None:
    """Start the span (current while the request is made) and build the call's arguments from the
    request's ``params`` (``create``'s keyword arguments, adjusted by ``endpoint.prepare`` for a stream)
    with its trace header (``build``, else ``endpoint.add_trace_header``); None when inactive or when
    an outer patched method owns the request (the call then runs untouched)."""
    if not patch.active or _OWNED.get():
        return None
    model, hides = params.get("model"), None
    if stream is None:
        stream = params.get("stream") is True if endpoint.streams is None else endpoint.streams
    if stream and endpoint.prepare is not None:
        params, hides = endpoint.prepare(params)
    model = model if isinstance(model, str) and model else "unknown"
    provider = endpoint.provider_of(client) if endpoint.provider_of else endpoint.provider
    call = ModelCall(model, provider=provider, operation=endpoint.operation, stream=stream)
    call.__enter__()
    _record_prompt(call, endpoint, params, provider, model)
    try:
        return _Started(call, endpoint, (build or endpoint.add_trace_header)(params), stream, hides)
    except BaseException:
        call.__exit__(None, None, None)
        raise


@guarded
def _record_prompt(call: ModelCall, endpoint: Endpoint, params: dict, provider: str, model: str) -> None:
    """The prompt's shape on the span, where it first differs from the previous request of its provider and route
    (never its text), what it asks of the provider's cache, and its version: the agent run's, else the hash of
    its stable part (tools and system prompt), which changes exactly when they do."""
    if endpoint.prompt_parts is None:
        return
    route = str(otel_context.get_value(ROUTE_KEY) or "")
    shape = PROMPTS.attributes(provider, route, model, endpoint.prompt_parts(params))
    if not otel_context.get_value(PROMPT_VERSION_KEY) and sc.PROMPT_PREFIX_HASH in shape:
        shape[sc.PROMPT_VERSION] = shape[sc.PROMPT_PREFIX_HASH]  # no version named: the stable part's hash is one
    if endpoint.cache_settings is not None:
        shape.update(endpoint.cache_settings(params))
    for key, value in shape.items():
        call.set(key, value)


def with_trace_header(headers: Any) -> dict[str, Any]:
    """The caller's extra headers plus ``traceparent`` (and whatever else the application's
    propagators write) for the current span; a header the caller set wins."""
    carrier: dict[str, Any] = {}
    inject(carrier)
    return {**carrier, **(headers or {})}


def _complete(started: _Started, result: Any) -> Any:
    """What the caller receives: the result itself, or a stand-in for a stream or for the raw
    response of a streamed request."""
    call = started.call
    try:
        if isinstance(result, started.endpoint.stream_types):
            _release(call)
            return stream_proxy(result, _watch(started))
        if started.stream and is_raw_response(result):
            _release(call)
            return RawResponse(result, _watch(started))
        started.endpoint.read_response(result).apply(call)
    except Exception as exc:
        report(f"{__name__}._complete", exc)
    call.__exit__(None, None, None)
    return result


def _watch(started: _Started) -> Watch:
    endpoint = started.endpoint
    return Watch(started.call, endpoint.new_reader(), endpoint.stream_types, started.hides)


def _release(call: ModelCall) -> None:
    """Stop the span being current while it stays open: the stream outlives the call that made it,
    and the user's next spans are not its children. (``_token`` is the scope's context token.)"""
    token, call._token = call._token, None
    if token is not None:
        otel_context.detach(token)
