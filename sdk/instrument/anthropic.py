"""Auto-instrumentation of the ``anthropic`` client: Messages, sync and async.

Owns: what an Anthropic message and its stream events say (content chunks, usage, model, tool
calls and the moments each call's name and complete input arrive); the generic wrapper in
``agentlat.instrument._wrapper`` does the rest. Anthropic's ``input_tokens`` leaves out the tokens
read from and written to the prompt cache, so the span's ``gen_ai.usage.input_tokens`` is their sum,
which includes cached tokens as the GenAI conventions want. Every way to stream is timed, one span per
request: ``create(stream=True)``, ``messages.stream()`` (which builds its request without ``create``,
from anthropic 0.40 to 2.x: its ``_post`` is timed) with its events, ``text_stream``,
``get_final_message()`` and ``until_done()``, ``parse()``, and the raw responses of
``with_raw_response``/``with_streaming_response`` whose ``parse()`` gives the stream. The SDK's own
span ("anthropic.messages.create", which ``agentlat.init`` turns off for clients made after it) is a
child of agentlat's when a client asks for it, and its traceparent replaces agentlat's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlat import semconv as sc
from agentlat._prompt_shape import cache_settings_of_anthropic, field_of, parts_of_anthropic
from agentlat.instrument._wrapper import Endpoint, Facts, Patcher

if TYPE_CHECKING:
    from agentlat._model_call import ModelCall

PROVIDER = "anthropic"
_USAGE_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")
_HELPERS = ("stream", "parse")  # build their request without create (parse: where it exists)

_patcher = Patcher()


def instrument() -> None:
    """Patch ``Messages.create`` and ``AsyncMessages.create`` and their ``stream``/``parse`` helpers;
    a second call does nothing."""
    import anthropic
    from anthropic.resources.messages import AsyncMessages, Messages

    streams = (anthropic.Stream, anthropic.AsyncStream)
    messages = Endpoint(
        PROVIDER,
        streams,
        message_facts,
        MessagesReader,
        paths=frozenset({"/v1/messages"}),
        prompt_parts=parts_of_anthropic,
        cache_settings=cache_settings_of_anthropic,
    )
    _patcher.wrap(Messages, "create", messages, is_async=False)
    _patcher.wrap(AsyncMessages, "create", messages, is_async=True)
    for helper in _HELPERS:
        _patcher.wrap_helper(Messages, helper, messages)
        _patcher.wrap_helper(AsyncMessages, helper, messages)
    # the helper's stream: older versions build their own over the response of the one they get
    from anthropic.lib.streaming import AsyncMessageStream, MessageStream

    _patcher.wrap_stream_holder(MessageStream, "_raw_stream")
    _patcher.wrap_stream_holder(AsyncMessageStream, "_raw_stream")


def uninstrument() -> None:
    _patcher.undo()


def _set_usage(facts: Facts, raw: dict[str, int]) -> None:
    """Usage from Anthropic's counts, with input tokens made to include cached ones."""
    given = "input_tokens" in raw
    cache_read, cache_creation = raw.get("cache_read_input_tokens"), raw.get("cache_creation_input_tokens")
    facts.set_usage(
        input_tokens=raw["input_tokens"] + (cache_read or 0) + (cache_creation or 0) if given else None,
        output_tokens=raw.get("output_tokens"),
        cache_read_tokens=cache_read,
        cache_creation_tokens=cache_creation,
    )


def _counts(usage: Any) -> dict[str, int]:
    """The usage fields that are reported (message_delta leaves some out)."""
    return {name: value for name in _USAGE_FIELDS if isinstance(value := getattr(usage, name, None), int)}


def cache_diagnosis(message: Any) -> dict[str, Any]:
    """Anthropic's own diagnosis of a prompt-cache miss (``diagnostics.cache_miss_reason``, asked for with
    ``diagnostics={"previous_message_id": ...}``): its type and the input tokens it says the miss cost."""
    reason = field_of(field_of(message, "diagnostics"), "cache_miss_reason")
    kind, missed = field_of(reason, "type"), field_of(reason, "cache_missed_input_tokens")
    if not isinstance(kind, str):
        return {}
    return {sc.CACHE_PROVIDER_REASON: kind} | ({sc.CACHE_MISSED_TOKENS: missed} if isinstance(missed, int) else {})


def message_facts(message: Any) -> Facts:
    """Usage, model, tool calls and cache diagnosis of a ``Message`` (empty for anything else)."""
    facts = Facts(model=getattr(message, "model", None), attributes=cache_diagnosis(message))
    _set_usage(facts, _counts(getattr(message, "usage", None)))
    blocks = getattr(message, "content", None) or []
    facts.tool_calls = {(0, k): b.name for k, b in enumerate(blocks) if getattr(b, "type", None) == "tool_use"}
    return facts


class MessagesReader:
    """``RawMessageStreamEvent`` items: every ``content_block_delta`` is output, and so is the start
    of a ``tool_use`` block (it carries the tool's name); message_start, text block starts, stops
    and message_delta are not. A tool call is named at its block's start and ready at its stop."""

    call: ModelCall | None = None

    def __init__(self) -> None:
        self.facts = Facts()
        self._usage: dict[str, int] = {}
        self._tools: dict[int, tuple[str | None, str]] = {}  # block index -> (tool_use id, name)

    def feed(self, event: Any) -> bool:
        kind = event.type
        if kind == "content_block_delta":
            return True
        if kind == "content_block_start":
            block = event.content_block
            if block.type != "tool_use":
                return False
            self.facts.tool_calls[0, event.index] = block.name
            tool = self._tools[event.index] = (getattr(block, "id", None), block.name)
            if self.call is not None:
                self.call.tool_call_named(*tool, index=event.index)
            return True
        if kind == "content_block_stop":
            tool = self._tools.pop(event.index, None)
            if tool is not None and self.call is not None:
                self.call.tool_call_ready(*tool, index=event.index)
        elif kind == "message_start":
            self.facts.model = event.message.model
            self.facts.attributes.update(cache_diagnosis(event.message))
            self._add_usage(event.message.usage)
        elif kind == "message_delta":
            self._add_usage(event.usage)  # cumulative: later counts replace earlier ones
        return False

    def _add_usage(self, usage: Any) -> None:
        self._usage.update(_counts(usage))
        _set_usage(self.facts, self._usage)
