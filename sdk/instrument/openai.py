"""Auto-instrumentation of the ``openai`` client: Chat Completions and Responses, sync and async.

Owns: what an OpenAI response and its stream items say (content chunks, usage, model, tool calls and
the moments each call's name and complete arguments arrive); the generic wrapper in
``agentlat.instrument._wrapper`` does the rest. Every way to stream is timed, one span per request:
``create(stream=True)``, the ``stream()`` helpers (``chat.completions``, ``beta.chat.completions``,
``responses``) with their events, ``text_stream`` or final completion, ``parse()``, and the raw
responses of ``with_raw_response``/``with_streaming_response`` whose ``parse()`` gives the stream.
OpenAI's ``prompt_tokens``/``input_tokens`` already include cached tokens, as the GenAI conventions
want. A streamed chat completion reports usage only when asked (``stream_options.include_usage``):
``instrument(stream_usage=True)`` asks for it and hides the extra chunk from the caller.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentlat import semconv as sc
from agentlat._prompt_shape import cache_settings_of_openai, field_of, parts_of_openai_chat, parts_of_openai_responses
from agentlat.instrument._wrapper import Endpoint, Facts, Patcher

if TYPE_CHECKING:
    from agentlat._model_call import ModelCall

log = logging.getLogger("agentlat")

PROVIDER = "openai"
_TOOL_ITEMS = frozenset({"function_call", "custom_tool_call"})  # Responses output items the client runs
_FINAL_EVENTS = frozenset({"response.created", "response.completed", "response.incomplete", "response.failed"})
# a tool call's arguments are complete (its output item's done event comes after, and counts if first)
_ARGS_DONE = frozenset({"response.function_call_arguments.done", "response.custom_tool_call_input.done"})
_HELPERS = ("stream", "parse")  # build their request with or without create, depending on the version

_patcher = Patcher()


def instrument(*, stream_usage: bool = False) -> None:
    """Patch the ``create`` methods of Chat Completions and Responses and their ``stream``/``parse``
    helpers; a second call does nothing. A surface this openai version lacks (Responses before openai
    1.66) is left out with a warning; the others are patched. ``stream_usage``: ask streamed chat
    completions for usage (``stream_options.include_usage``) where the caller did not, and hide the
    extra chunk it adds from the caller."""
    import openai

    streams = (openai.Stream, openai.AsyncStream)
    chat = Endpoint(
        PROVIDER,
        streams,
        chat_facts,
        ChatReader,
        paths=frozenset({"/chat/completions"}),
        prepare=ask_usage if stream_usage else None,
        prompt_parts=parts_of_openai_chat,
        cache_settings=cache_settings_of_openai,
    )
    responses = Endpoint(
        PROVIDER,
        streams,
        response_facts,
        ResponsesReader,
        paths=frozenset({"/responses"}),
        prompt_parts=parts_of_openai_responses,
        cache_settings=cache_settings_of_openai,
    )
    surfaces = (
        ("Chat Completions", "openai.resources.chat.completions", ("Completions", "AsyncCompletions"), chat),
        ("Responses", "openai.resources.responses", ("Responses", "AsyncResponses"), responses),
    )
    for surface, module, (sync, asynchronous), endpoint in surfaces:
        try:
            owners = importlib.import_module(module)
            sync_owner, async_owner = getattr(owners, sync), getattr(owners, asynchronous)
        except (ImportError, AttributeError) as exc:
            log.warning(
                "agentlat: openai %s has no %s API (%s); those calls are not timed", openai.__version__, surface, exc
            )
            continue
        _patcher.wrap(sync_owner, "create", endpoint, is_async=False)
        _patcher.wrap(async_owner, "create", endpoint, is_async=True)
        for helper in _HELPERS:
            _patcher.wrap_helper(sync_owner, helper, endpoint)
            _patcher.wrap_helper(async_owner, helper, endpoint)


def uninstrument() -> None:
    _patcher.undo()


# --- Chat Completions --------------------------------------------------------------------


def ask_usage(params: dict[str, Any]) -> tuple[dict[str, Any], Callable[[Any], bool] | None]:
    """A streamed chat request that says nothing of usage asks for it; the chunk that adds (no
    choices, usage only) is then hidden from the caller. A caller's explicit ``include_usage`` stays."""
    options = params.get("stream_options")
    if isinstance(options, dict) and "include_usage" in options:
        return params, None
    return {**params, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}, (
        _is_usage_chunk
    )


def _is_usage_chunk(chunk: Any) -> bool:
    return not chunk.choices and getattr(chunk, "usage", None) is not None


def _chat_usage(facts: Facts, usage: Any) -> None:
    facts.set_usage(
        input_tokens=getattr(usage, "prompt_tokens", None),
        output_tokens=getattr(usage, "completion_tokens", None),
        cache_read_tokens=field_of(field_of(usage, "prompt_tokens_details"), "cached_tokens"),
        cache_creation_tokens=field_of(field_of(usage, "prompt_tokens_details"), "cache_write_tokens"),
        reasoning_tokens=field_of(field_of(usage, "completion_tokens_details"), "reasoning_tokens"),
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
    role-only first chunk, the finish chunk and the usage chunk are not. A tool call is named when its
    id or name first appears at its index, and ready when a call at a higher index starts or its
    choice finishes, whichever comes first (chat deltas carry no end of one call's arguments)."""

    call: ModelCall | None = None

    def __init__(self) -> None:
        self.facts = Facts()
        self._open: dict[int, dict[int, tuple[str | None, str | None]]] = {}  # choice -> index -> (id, name)
        self._seen: set[tuple[int, int]] = set()  # (choice, index) of every call named

    def feed(self, chunk: Any) -> bool:
        self.facts.model = chunk.model or self.facts.model
        if chunk.usage is not None:
            _chat_usage(self.facts, chunk.usage)
        content = False
        for choice in chunk.choices:
            delta = getattr(choice, "delta", None)  # some OpenAI-compatible servers leave it out
            if delta is not None:
                # refusal and audio are missing from older clients' deltas (openai 1.40 has no audio)
                content = content or bool(delta.content or delta.function_call)
                content = content or bool(getattr(delta, "refusal", None) or getattr(delta, "audio", None))
                if delta.tool_calls:
                    content = True
                    self._tool_deltas(choice.index, delta.tool_calls)
            if self._open and choice.finish_reason:
                self._ready(choice.index, None)
        return content

    def _tool_deltas(self, choice: int, calls: Any) -> None:
        for call in calls:
            name = _tool_name(call)
            if name:
                self.facts.tool_calls[choice, call.index] = name
            if (choice, call.index) in self._seen or not (call.id or name):
                continue
            self._ready(choice, call.index)  # the calls before this one are complete
            self._seen.add((choice, call.index))
            self._open.setdefault(choice, {})[call.index] = (call.id, name)
            if self.call is not None:
                self.call.tool_call_named(call.id, name, index=call.index)

    def _ready(self, choice: int, below: int | None) -> None:
        """The open calls of ``choice`` (those at an index below ``below``) are complete."""
        open_calls = self._open.get(choice)
        for index in [i for i in open_calls or () if below is None or i < below]:
            call_id, name = open_calls.pop(index)  # type: ignore[union-attr]
            if self.call is not None:
                self.call.tool_call_ready(call_id, name, index=index)
        if not open_calls:
            self._open.pop(choice, None)


# --- Responses ---------------------------------------------------------------------------


def _fill_response(facts: Facts, response: Any) -> None:
    facts.model = getattr(response, "model", None) or facts.model
    usage = getattr(response, "usage", None)
    facts.set_usage(
        input_tokens=getattr(usage, "input_tokens", None),
        output_tokens=getattr(usage, "output_tokens", None),
        cache_read_tokens=field_of(field_of(usage, "input_tokens_details"), "cached_tokens"),
        cache_creation_tokens=field_of(field_of(usage, "input_tokens_details"), "cache_write_tokens"),
        reasoning_tokens=field_of(field_of(usage, "output_tokens_details"), "reasoning_tokens"),
    )
    facts.attributes.update(cache_diagnosis(getattr(response, "prompt_cache_diagnostics", None)))
    for k, item in enumerate(getattr(response, "output", None) or []):
        if getattr(item, "type", None) in _TOOL_ITEMS:
            facts.tool_calls[0, k] = item.name


def cache_diagnosis(diagnostics: Any) -> dict[str, Any]:
    """OpenAI's own diagnosis of the prompt cache (``prompt_cache_diagnostics``, asked for with
    ``prompt_cache_options.comparison_response_id``): a miss's reason and the tokens it cost, or the outcome."""
    kind = field_of(diagnostics, "type")
    if not isinstance(kind, str):
        return {}
    reason, missed = field_of(diagnostics, "reason"), field_of(diagnostics, "cache_missed_tokens")
    found = {sc.CACHE_PROVIDER_REASON: reason if isinstance(reason, str) else kind}
    return found | ({sc.CACHE_MISSED_TOKENS: missed} if isinstance(missed, int) else {})


def response_facts(response: Any) -> Facts:
    """Usage, model and tool calls of a ``Response`` (empty for anything else)."""
    facts = Facts()
    _fill_response(facts, response)
    return facts


class ResponsesReader:
    """``ResponseStreamEvent`` items: every ``*.delta`` event is output, and so is a tool call's
    first item; lifecycle events (created, part added, done, completed) are not. A tool call is named
    by its output item's ``added`` event and ready at its arguments' ``done`` event or its item's
    ``done``, whichever comes first."""

    call: ModelCall | None = None

    def __init__(self) -> None:
        self.facts = Facts()
        self._tools: dict[int, tuple[str | None, str | None]] = {}  # output index -> (call id, name)

    def feed(self, event: Any) -> bool:
        kind = event.type
        if kind.endswith(".delta"):
            return True
        if kind in _FINAL_EVENTS:
            _fill_response(self.facts, event.response)
        elif kind == "response.output_item.added" and event.item.type in _TOOL_ITEMS:
            tool = self._tools[event.output_index] = (getattr(event.item, "call_id", None), event.item.name)
            self.facts.tool_calls[0, event.output_index] = event.item.name
            if self.call is not None:
                self.call.tool_call_named(*tool, index=event.output_index)
            return True
        elif kind in _ARGS_DONE or kind == "response.output_item.done":
            tool = self._tools.pop(event.output_index, None)
            if tool is not None and self.call is not None:
                self.call.tool_call_ready(*tool, index=event.output_index)
        return False
