"""Auto-instrumentation of the ``openai`` client: Chat Completions and Responses, sync and async.

Owns: what an OpenAI response and its stream items say (content chunks, usage, model, tool calls);
the generic wrapper in ``agentlat.instrument._wrapper`` does the rest. The helpers built on
``create`` (``chat.completions.stream()``, ``responses.stream()``) are covered through it; ``parse``
and ``with_raw_response``/``with_streaming_response`` calls get a span without stream timing.
OpenAI's ``prompt_tokens``/``input_tokens`` already include cached tokens, as the GenAI
conventions want.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from agentlat.instrument._wrapper import Endpoint, Facts, Patcher

log = logging.getLogger("agentlat")

PROVIDER = "openai"
_TOOL_ITEMS = frozenset({"function_call", "custom_tool_call"})  # Responses output items the client runs
_FINAL_EVENTS = frozenset({"response.created", "response.completed", "response.incomplete", "response.failed"})

_patcher = Patcher()


def instrument() -> None:
    """Patch the ``create`` methods of Chat Completions and Responses; a second call does nothing.
    A surface this openai version lacks (Responses before openai 1.66) is left out with a warning;
    the others are patched."""
    import openai

    streams = (openai.Stream, openai.AsyncStream)
    surfaces = (
        (
            "Chat Completions",
            "openai.resources.chat.completions",
            ("Completions", "AsyncCompletions"),
            chat_facts,
            ChatReader,
        ),
        ("Responses", "openai.resources.responses", ("Responses", "AsyncResponses"), response_facts, ResponsesReader),
    )
    for surface, module, (sync, asynchronous), facts, reader in surfaces:
        try:
            owners = importlib.import_module(module)
            sync_owner, async_owner = getattr(owners, sync), getattr(owners, asynchronous)
        except (ImportError, AttributeError) as exc:
            log.warning(
                "agentlat: openai %s has no %s API (%s); those calls are not timed", openai.__version__, surface, exc
            )
            continue
        endpoint = Endpoint(PROVIDER, streams, facts, reader)
        _patcher.wrap(sync_owner, "create", endpoint, is_async=False)
        _patcher.wrap(async_owner, "create", endpoint, is_async=True)


def uninstrument() -> None:
    _patcher.undo()


# --- Chat Completions --------------------------------------------------------------------


def _chat_usage(facts: Facts, usage: Any) -> None:
    facts.set_usage(
        input_tokens=getattr(usage, "prompt_tokens", None),
        output_tokens=getattr(usage, "completion_tokens", None),
        cache_read_tokens=getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None),
        reasoning_tokens=getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None),
    )


def _tool_name(call: Any) -> str | None:
    """The name of a function (or custom) tool call."""
    spec = getattr(call, "function", None) or getattr(call, "custom", None)
    return getattr(spec, "name", None)


def chat_facts(completion: Any) -> Facts:
    """Usage, model and tool calls of a ``ChatCompletion`` (empty for anything else)."""
    facts = Facts(model=getattr(completion, "model", None))
    _chat_usage(facts, getattr(completion, "usage", None))
    for choice in getattr(completion, "choices", None) or []:
        for k, call in enumerate(getattr(choice.message, "tool_calls", None) or []):
            if name := _tool_name(call):
                facts.tool_calls[choice.index, k] = name
    return facts


class ChatReader:
    """``ChatCompletionChunk`` items: content, refusal, audio and tool-call deltas are output; the
    role-only first chunk, the finish chunk and the usage chunk are not."""

    def __init__(self) -> None:
        self.facts = Facts()

    def feed(self, chunk: Any) -> bool:
        self.facts.model = chunk.model or self.facts.model
        if chunk.usage is not None:
            _chat_usage(self.facts, chunk.usage)
        content = False
        for choice in chunk.choices:
            delta = getattr(choice, "delta", None)  # some OpenAI-compatible servers leave it out
            if delta is None:
                continue
            content = content or bool(delta.content or delta.refusal or delta.audio or delta.function_call)
            for call in delta.tool_calls or ():
                content = True
                if name := _tool_name(call):
                    self.facts.tool_calls[choice.index, call.index] = name
        return content


# --- Responses ---------------------------------------------------------------------------


def _fill_response(facts: Facts, response: Any) -> None:
    facts.model = getattr(response, "model", None) or facts.model
    usage = getattr(response, "usage", None)
    facts.set_usage(
        input_tokens=getattr(usage, "input_tokens", None),
        output_tokens=getattr(usage, "output_tokens", None),
        cache_read_tokens=getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", None),
        reasoning_tokens=getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", None),
    )
    for k, item in enumerate(getattr(response, "output", None) or []):
        if getattr(item, "type", None) in _TOOL_ITEMS:
            facts.tool_calls[0, k] = item.name


def response_facts(response: Any) -> Facts:
    """Usage, model and tool calls of a ``Response`` (empty for anything else)."""
    facts = Facts()
    _fill_response(facts, response)
    return facts


class ResponsesReader:
    """``ResponseStreamEvent`` items: every ``*.delta`` event is output, and so is a tool call's
    first item; lifecycle events (created, part added, done, completed) are not."""

    def __init__(self) -> None:
        self.facts = Facts()

    def feed(self, event: Any) -> bool:
        kind = event.type
        if kind in _FINAL_EVENTS:
            _fill_response(self.facts, event.response)
            return False
        if kind == "response.output_item.added" and event.item.type in _TOOL_ITEMS:
            self.facts.tool_calls[0, event.output_index] = event.item.name
            return True
        return kind.endswith(".delta")
