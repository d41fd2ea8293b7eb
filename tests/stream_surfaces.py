"""Every way user code streams from the openai and anthropic clients, as one table the surface tests
run through, sync and async, on whatever client versions are installed (the project's, the newest;
``clients-oldest``, the oldest the project declares: tests/test_instrument_oldest_clients.py).

A surface is opened as its users write it and handed back with the way they close it: a
``create(stream=True)`` stream and its ``close()``; a ``stream()`` helper's manager entered and exited
(read as events, ``text_stream``, the final message, or ``until_done()``); a ``with_raw_response``
answer's ``parse()`` and the stream's ``close()``; a ``with_streaming_response`` context entered, its
``parse()``, and the context exited. A surface a client version lacks is named in ``ABSENT`` with the
version, so that its test says so instead of passing silently."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai

from agentlat.demo import FakeLLM

OPENAI_MODEL = "gpt-fake-1"
ANTHROPIC_MODEL = "claude-fake-1"
TOOL_NAMES = ("get_weather", "search_docs")
_SCHEMA = {"type": "object", "properties": {}}
MODES = ("sync", "async")

# client version -> surfaces it does not have, and why the test skips them there
ABSENT: dict[str, dict[str, str]] = {
    "openai 1.40.0": {
        "chat.completions.stream": "the helper lived under beta only (client.beta.chat.completions.stream)",
        **{
            f"responses.{way}": "no Responses API yet (added in openai 1.66)"
            for way in ("create", "stream", "with_raw_response.create", "with_streaming_response.create")
        },
    },
}


@dataclass(frozen=True)
class Surface:
    provider: str  # openai | anthropic
    api: str  # chat | responses | messages
    path: str  # attribute path from the client to the method called
    kind: str  # create | helper | raw | streaming
    how: str = "events"  # how a helper's stream is read: events | text_stream | final | until_done

    @property
    def id(self) -> str:
        return self.path + ("" if self.how == "events" else f"+{self.how}")

    @property
    def client_version(self) -> str:
        library = openai if self.provider == "openai" else anthropic
        return f"{self.provider} {library.__version__}"

    def absent_because(self) -> str | None:
        """Why the installed client lacks this surface (from ``ABSENT``); None when it has it."""
        return ABSENT.get(self.client_version, {}).get(self.path)


def _surfaces() -> list[Surface]:
    table = []
    for provider, api, prefix in (
        ("openai", "chat", "chat.completions"),
        ("openai", "responses", "responses"),
        ("anthropic", "messages", "messages"),
    ):
        table += [
            Surface(provider, api, f"{prefix}.create", "create"),
            Surface(provider, api, f"{prefix}.with_raw_response.create", "raw"),
            Surface(provider, api, f"{prefix}.with_streaming_response.create", "streaming"),
        ]
        ways = {"chat": ("events", "final", "until_done"), "responses": ("events", "final", "until_done")}
        for how in ways.get(api, ("events", "text_stream", "final", "until_done")):
            table.append(Surface(provider, api, f"{prefix}.stream", "helper", how))
    table.append(Surface("openai", "chat", "beta.chat.completions.stream", "helper"))
    return table


SURFACES = _surfaces()
HELPERS = [s for s in SURFACES if s.kind == "helper" and s.how == "events"]


def request_kwargs(surface: Surface, *, tools: bool = False) -> dict[str, Any]:
    """What the caller passes: usage asked for where the API wants it asked (chat streams)."""
    if surface.api == "chat":
        kwargs: dict[str, Any] = {"model": OPENAI_MODEL, "messages": [{"role": "user", "content": "hi"}]}
        kwargs["stream_options"] = {"include_usage": True}
        # strict: the helper of older clients (beta) parses the arguments and takes strict tools only
        specs = [
            {"type": "function", "function": {"name": n, "parameters": _SCHEMA, "strict": True}} for n in TOOL_NAMES
        ]
    elif surface.api == "responses":
        kwargs = {"model": OPENAI_MODEL, "input": "hi"}
        specs = [{"type": "function", "name": n, "parameters": _SCHEMA} for n in TOOL_NAMES]
    else:
        kwargs = {"model": ANTHROPIC_MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
        specs = [{"name": n, "input_schema": _SCHEMA} for n in TOOL_NAMES]
    if tools:
        kwargs |= {"tools": specs, "extra_headers": {"x-fake-tool-calls": ",".join(TOOL_NAMES)}}
    return kwargs


def client_for(surface: Surface, llm: FakeLLM, mode: str) -> Any:
    if surface.provider == "openai":
        make = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
        return make(base_url=f"{llm.url}/v1", api_key="fake", max_retries=0)
    make = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    return make(base_url=llm.url, api_key="fake", max_retries=0)


def method_of(client: Any, surface: Surface) -> Any:
    target = client
    for name in surface.path.split("."):
        target = getattr(target, name)
    return target


def has_surface(surface: Surface) -> bool:
    """Whether the installed client has the surface (looked up on a client that is never used)."""
    client = client_for(surface, FakeLLM(), "sync")
    try:
        method_of(client, surface)
    except AttributeError:
        return False
    finally:
        client.close()
    return True


def is_content(surface: Surface, item: Any) -> bool:
    """An item that carries text, as the surface yields it."""
    if surface.api == "messages":
        return item.type == "content_block_delta"
    if surface.api == "responses":
        return item.type == "response.output_text.delta"
    if surface.kind == "helper":
        return item.type == "content.delta" and bool(item.delta)  # the role-only first chunk gives an empty one
    return bool(item.choices and item.choices[0].delta.content)


# --- opening a surface: (the stream to read, how its user closes it) ------------------------


def open_sync(client: Any, surface: Surface, kwargs: dict[str, Any]) -> tuple[Any, Callable[[], Any]]:
    method = method_of(client, surface)
    if surface.kind == "helper":
        manager = method(**kwargs)
        return manager.__enter__(), lambda: manager.__exit__(None, None, None)
    if surface.kind == "streaming":
        context = method(stream=True, **kwargs)
        return context.__enter__().parse(), lambda: context.__exit__(None, None, None)
    answer = method(stream=True, **kwargs)
    stream = answer.parse() if surface.kind == "raw" else answer
    return stream, stream.close


async def open_async(client: Any, surface: Surface, kwargs: dict[str, Any]) -> tuple[Any, Callable[[], Any]]:
    method = method_of(client, surface)
    if surface.kind == "helper":
        manager = method(**kwargs)
        return await manager.__aenter__(), lambda: manager.__aexit__(None, None, None)
    if surface.kind == "streaming":
        context = method(stream=True, **kwargs)
        response = await context.__aenter__()
        return await response.parse(), lambda: context.__aexit__(None, None, None)
    answer = await method(stream=True, **kwargs)
    stream = answer.parse() if surface.kind == "raw" else answer
    if inspect.isawaitable(stream):  # an async raw response parses asynchronously in some versions
        stream = await stream
    return stream, stream.close


def _final(stream: Any) -> Callable[[], Any]:
    for name in ("get_final_completion", "get_final_response", "get_final_message"):
        if hasattr(stream, name):
            return getattr(stream, name)
    raise AssertionError(f"{type(stream).__name__} has no final-message method")


def read_sync(stream: Any, how: str) -> None:
    if how == "events":
        for _ in stream:
            pass
    elif how == "text_stream":
        for _ in stream.text_stream:
            pass
    elif how == "final":
        assert _final(stream)() is not None
    else:
        stream.until_done()


async def read_async(stream: Any, how: str) -> None:
    if how == "events":
        async for _ in stream:
            pass
    elif how == "text_stream":
        async for _ in stream.text_stream:
            pass
    elif how == "final":
        assert await _final(stream)() is not None
    else:
        await stream.until_done()


def read_some_sync(surface: Surface, stream: Any, contents: int) -> None:
    """Read until ``contents`` items with text arrived."""
    seen = 0
    for item in stream:
        seen += is_content(surface, item)
        if seen == contents:
            return


async def read_some_async(surface: Surface, stream: Any, contents: int) -> None:
    seen = 0
    async for item in stream:
        seen += is_content(surface, item)
        if seen == contents:
            return
