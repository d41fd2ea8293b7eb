"""Auto-instrumentation of the ``google-genai`` client: ``generate_content`` and
``generate_content_stream``, sync (``client.models``) and async (``client.aio.models``).

Owns: what a ``GenerateContentResponse`` and the chunks of its stream say (content, usage, model,
function calls), and where the trace header goes (``config.http_options.headers``: the client takes
no ``extra_headers``); the generic wrapper in ``agentlat.instrument._wrapper`` does the rest.

The patched methods are the ones behind the public ones that send one request each
(``Models._generate_content`` and ``_generate_content_stream``, in every google-genai from 1.0 to 3.6):
automatic function calling and automatic continuation make several requests for one public call,
with the caller's Python functions run in between, and each request is one model call span, so
the time the functions take is never counted as the model's. The public streaming methods are
generators of google-genai's own that read the patched one; closing one early drops that stream
without closing it, so such a span ends at once, as ``abandoned``.

Gemini's ``prompt_token_count`` includes cached tokens (``cached_content_token_count``), as the
GenAI conventions want; its ``candidates_token_count`` leaves out the thinking tokens
(``thoughts_token_count``), so the span's ``gen_ai.usage.output_tokens`` is their sum, which
includes reasoning tokens as the conventions want (and as OpenAI and Anthropic count them).
Gemini sends each function call whole, in one chunk: the moment that chunk arrives is the moment
its arguments are complete (``ModelCall.tool_call_ready``).
"""

from __future__ import annotations

import types
from typing import Any

from agentlat import semconv as sc
from agentlat._model_call import ModelCall
from agentlat._prompt_shape import parts_of_gemini
from agentlat.instrument._wrapper import Endpoint, Facts, Patcher, with_trace_header

GEMINI, VERTEX_AI = "gcp.gemini", "gcp.vertex_ai"  # gen_ai.provider.name: the Gemini API, Vertex AI
# Part fields that carry output; the others (thought_signature, video_metadata, ...) annotate it.
_OUTPUT_FIELDS = ("text", "function_call", "inline_data", "file_data", "executable_code", "code_execution_result")

_METHODS = {"_generate_content": False, "_generate_content_stream": True}  # one request each -> streams

_patcher = Patcher()


def instrument() -> None:
    """Patch the request-sending methods of ``Models`` and ``AsyncModels``; a second call does nothing.
    A google-genai without them (before 1.0) is not patched at all, and ``init`` warns."""
    from google.genai.models import AsyncModels, Models

    methods = [(Models, False, types.GeneratorType), (AsyncModels, True, types.AsyncGeneratorType)]
    missing = [f"{o.__name__}.{name}" for o, _, _ in methods for name in _METHODS if name not in vars(o)]
    if missing:
        raise AttributeError(f"google-genai has no {', '.join(missing)} (versions before 1.0)")
    for owner, is_async, stream_type in methods:
        for name, streams in _METHODS.items():
            endpoint = Endpoint(
                GEMINI,
                (stream_type,),
                response_facts,
                ResponseReader,
                operation=sc.OP_GENERATE_CONTENT,
                streams=streams,
                add_trace_header=with_trace_config,
                provider_of=provider_of,
                prompt_parts=parts_of_gemini,
            )
            _patcher.wrap(owner, name, endpoint, is_async=is_async)


def uninstrument() -> None:
    _patcher.undo()


def provider_of(models: Any) -> str:
    """Vertex AI or the Gemini API, as the client was made (``genai.Client(vertexai=True)``)."""
    return VERTEX_AI if getattr(getattr(models, "_api_client", None), "vertexai", False) else GEMINI


def with_trace_config(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments with the trace header added to ``config.http_options.headers``, in copies:
    the caller's config (a dict, a ``GenerateContentConfig`` or None) is left as it was, and a header
    it sets wins. A call without a config gets one holding only the header, which google-genai sends
    as an empty ``generationConfig`` (what the API assumes without one)."""
    from google.genai import types as genai

    config = kwargs.get("config")
    as_dict = config is None or isinstance(config, dict)
    options = (config or {}).get("http_options") if as_dict else getattr(config, "http_options", None)
    if isinstance(options, dict) or (options is None and as_dict):
        options = {**(options or {}), "headers": with_trace_header((options or {}).get("headers"))}
    elif options is None:
        options = genai.HttpOptions(headers=with_trace_header(None))
    else:
        options = options.model_copy(update={"headers": with_trace_header(options.headers)})
    if as_dict:
        config = {**(config or {}), "http_options": options}
    else:
        config = config.model_copy(update={"http_options": options})
    return {**kwargs, "config": config}


# --- what a response says ----------------------------------------------------------------


def _set_usage(facts: Facts, usage: Any) -> None:
    candidates, thoughts = getattr(usage, "candidates_token_count", None), getattr(usage, "thoughts_token_count", None)
    facts.set_usage(
        input_tokens=getattr(usage, "prompt_token_count", None),
        output_tokens=candidates + (thoughts or 0) if isinstance(candidates, int) else None,
        cache_read_tokens=getattr(usage, "cached_content_token_count", None),
        reasoning_tokens=thoughts,
    )


def _candidates(response: Any) -> list[tuple[int, list[Any]]]:
    """(index, parts) of each candidate of a response or chunk."""
    return [
        (c.index if isinstance(getattr(c, "index", None), int) else k, getattr(c.content, "parts", None) or [])
        for k, c in enumerate(getattr(response, "candidates", None) or [])
        if getattr(c, "content", None) is not None
    ]


def _fill(facts: Facts, response: Any) -> None:
    facts.model = getattr(response, "model_version", None) or facts.model
    if (usage := getattr(response, "usage_metadata", None)) is not None:
        _set_usage(facts, usage)


def response_facts(response: Any) -> Facts:
    """Usage, model and function calls of a ``GenerateContentResponse`` (empty for anything else)."""
    facts = Facts()
    _fill(facts, response)
    for c, parts in _candidates(response):
        calls = [part.function_call for part in parts if getattr(part, "function_call", None)]
        facts.tool_calls.update({(c, k): call.name for k, call in enumerate(calls) if call.name})
    return facts


class ResponseReader:
    """``GenerateContentResponse`` chunks: a chunk is output when a part of it carries text (thoughts
    included), a function call, code or data; each function call is ready when its chunk arrives."""

    call: ModelCall | None = None  # the span's, given by the wrapper before the first chunk

    def __init__(self) -> None:
        self.facts = Facts()
        self._calls: dict[int, int] = {}  # candidate -> function calls seen so far

    def feed(self, chunk: Any) -> bool:
        _fill(self.facts, chunk)
        content = False
        for c, parts in _candidates(chunk):
            for part in parts:
                content = content or any(getattr(part, name, None) for name in _OUTPUT_FIELDS)
                if (call := getattr(part, "function_call", None)) is not None:
                    self._function_call(c, call)
        return content

    def _function_call(self, candidate: int, call: Any) -> None:
        k = self._calls.get(candidate, 0)
        self._calls[candidate] = k + 1
        if call.name:
            self.facts.tool_calls[candidate, k] = call.name
        if candidate == 0 and self.call is not None:  # the call's positions are those of one message
            self.call.tool_call_ready(getattr(call, "id", None), call.name, index=k)
