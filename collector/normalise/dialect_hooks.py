"""What the dialect tables cannot say as data: times from span events and ISO attributes, role
rules for agent frameworks, stream flags and usage buried in JSON. Each hook is named by a
``Dialect`` in ``dialects.py`` (``extra`` or ``role_rule``) and writes through ``Out``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping

from agentlat import semconv as sc
from agentlat.collector.normalise.convert import DURATIONS, iso_ns
from agentlat.collector.normalise.span import NS_PER_MS, Out, Span
from agentlat.stream_stats import gap_stats

_RUN_AGENT = (sc.ROLE_AGENT, sc.OP_INVOKE_AGENT)


def is_vllm(span: Span) -> bool:
    """A Server span named llm_request, or one with vLLM phases and no GenAI operation."""
    if span.kind != "Server":
        return False
    return span.name == "llm_request" or (
        sc.GEN_AI_OPERATION_NAME not in span.attrs and span.in_namespace("gen_ai.latency.")
    )


def first_token_event(span: Span, out: Out) -> None:
    """OpenInference: TTFT is the "First Token Stream Event" relative to span start. Its stream
    wrapper ends the span when the stream is consumed, so decode time runs from that event to the
    span's end (a stream the caller abandons ends when it is closed: the decode time then holds
    the reading the caller did)."""
    times = [at for name, at in zip(*span.events, strict=True) if name == "First Token Stream Event"]
    if times and span.start is not None:
        out.put("Streaming", 1)
        out.put_ms("TtftMs", (min(times) - span.start) / NS_PER_MS)
        if span.end is not None and span.start <= min(times) <= span.end:
            out.put_ms("DecodeMs", (span.end - min(times)) / NS_PER_MS)


# OpenInference writes what the framework it instruments hands it; the rules below fix what its
# span kind and attributes get wrong for agent frameworks (docs/attributes.md, "OpenInference").
_JSON_LIMIT = 64 * 1024  # a JSON attribute longer than this is not parsed
# What frameworks call a run nobody named: the OpenAI Agents SDK's default workflow_name, LangGraph's
# default graph name. A span named so, with no agent.name, names no agent.
UNNAMED_RUNS = frozenset({"Agent workflow", "LangGraph"})
_USAGE_KEY = re.compile(r'"usage"\s*:\s*')
_JSON = json.JSONDecoder()


def _json_object(raw: object) -> Mapping[str, object] | None:
    """A JSON-object attribute (or a map the decoder made of one), parsed only when under
    ``_JSON_LIMIT``; None for anything else, bad JSON included."""
    if isinstance(raw, Mapping):
        return raw
    parsed = _json_text(raw, "{")
    return parsed if isinstance(parsed, dict) else None


def _json_list(raw: object) -> list[object] | None:
    """A JSON-array attribute, parsed only when under ``_JSON_LIMIT``; None for anything else."""
    parsed = _json_text(raw, "[")
    return parsed if isinstance(parsed, list) else None


def _json_text(raw: object, opener: str) -> object:
    if not isinstance(raw, str) or len(raw) > _JSON_LIMIT or not raw.startswith(opener):
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def openinference_role(span: Span, role: tuple[str, str]) -> tuple[str, str]:
    """The role OpenInference's span kind gives, but for runs of agent frameworks it misnames:

    - LangChain's tracer gives kind AGENT to every run whose name contains "agent", and LangGraph
      names each run of a graph node after the node (``metadata.langgraph_node``; create_react_agent's
      model node is called "agent"). A graph node is a step of an agent, not one: AGENT on a node
      counts as CHAIN, unless the run is an agent that langchain's create_agent named
      (``metadata.lc_agent_name`` is the run's own name).
    - The run of a LangGraph graph itself (``metadata.ls_integration`` "langgraph", no node) is the
      agent, named by the graph's name (``create_react_agent(name=...)``), whatever its kind.
    - A run that only carries a framework's name for an unnamed one (``UNNAMED_RUNS``) and no
      ``agent.name`` is no agent: the OpenAI Agents SDK's trace root "Agent workflow" (the
      instrumentor gives it kind AGENT), whose agent span inside carries the agent's name.
    - A model span named after a private method of its object (``{object}._{method}``, not a dunder) is a
      step of the model object, not a call: framework instrumentors give every traced method of a model
      object kind LLM (LlamaIndex's ``OpenAILike._prepare_chat_with_tools`` builds the request's arguments
      beside the ``achat`` span that sends it).
    """
    if role[0] == sc.ROLE_MODEL and _private(_method(span.name)[1]):
        return sc.ROLE_OTHER, ""
    if role[0] not in (sc.ROLE_AGENT, sc.ROLE_OTHER):
        return role
    raw = span.attrs.get("metadata")
    if isinstance(raw, Mapping) or (isinstance(raw, str) and '"langgraph' in raw):
        metadata = _json_object(raw) or {}
        if "langgraph_node" in metadata:
            if role[0] == sc.ROLE_AGENT and span.name != metadata.get("lc_agent_name"):
                return sc.ROLE_OTHER, ""
        elif metadata.get("ls_integration") == "langgraph" and role[0] == sc.ROLE_OTHER:
            role = _RUN_AGENT
    if role[0] == sc.ROLE_AGENT and span.name in UNNAMED_RUNS and "agent.name" not in span.attrs:
        return sc.ROLE_OTHER, ""
    return role


def _cached_tokens(raw: object) -> int | None:
    """Cache-read tokens in the ``usage`` object of a JSON response (OpenAI's Responses shape,
    ``input_tokens_details.cached_tokens``, or Chat Completions', ``prompt_tokens_details``). Only
    that object is parsed: the last ``"usage"`` key (inside a string its quotes are escaped, so
    a match is a key or a string value, which no colon follows), so a long response costs a
    search, not a parse; bad or truncated JSON gives None."""
    if not isinstance(raw, str) or "cached_tokens" not in raw:
        return None
    found, at = None, len(raw)
    while found is None and (at := raw.rfind('"usage"', 0, at)) >= 0:
        found = _USAGE_KEY.match(raw, at)
    try:
        usage = _JSON.raw_decode(raw, found.end())[0] if found else None
    except (ValueError, RecursionError):
        return None
    for details in ("input_tokens_details", "prompt_tokens_details"):
        part = usage.get(details) if isinstance(usage, dict) else None
        cached = part.get("cached_tokens") if isinstance(part, dict) else None
        if type(cached) is int and 0 <= cached < 2**64:
            return cached
    return None


# OpenInference's framework instrumentors name a span after the method they wrap, ``{object}.{method}``
# (``weather_agent.run``, ``OpenAIModel.generate_stream``, ``OpenAILike.astream_chat``).
_RUN_METHODS = frozenset({"run", "arun", "run_sync", "run_stream", "invoke", "ainvoke"})


def _method(name: str) -> tuple[str, str]:
    """(object, method) of a ``{object}.{method}`` span name; ('', '') for any other name."""
    owner, dot, method = name.rpartition(".")
    return (owner, method) if dot and owner and method.isidentifier() else ("", "")


def _private(method: str) -> bool:
    """A private method's name (``_prepare``), not a dunder (``__call__``: DSPy's ``LM.__call__`` is the call)."""
    return method.startswith("_") and not (method.startswith("__") and method.endswith("__"))


def litellm_raw_request(span: Span, out: Out) -> None:
    """LiteLLM's raw request span: ``llm.{provider}.model`` and ``llm.{provider}.usage`` (a Python repr of the
    provider's usage: prompt, completion and cached tokens, read as literals, never evaluated)."""
    for key, value in span.attrs.items():
        if not (key.startswith("llm.") and isinstance(value, str)):
            continue
        if key.endswith(".model") and key.count(".") == 2 and not out.values["Model"]:
            out.put("Model", value)
        elif key.endswith(".usage") and key.count(".") == 2:
            _litellm_usage(key, value, out)


def _litellm_usage(key: str, text: str, out: Out) -> None:
    try:
        usage = ast.literal_eval(text) if len(text) < 4096 else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        usage = None
    if not isinstance(usage, dict):
        out.flag(f"bad_attribute:{key}")
        return
    details = usage.get("prompt_tokens_details")
    counts = {
        "InputTokens": usage.get("prompt_tokens", usage.get("input_tokens")),
        "OutputTokens": usage.get("completion_tokens", usage.get("output_tokens")),
        "CacheReadTokens": details.get("cached_tokens") if isinstance(details, dict) else None,
    }
    for column, count in counts.items():
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            out.put(column, count)


def openinference_extra(span: Span, out: Out) -> None:
    """TTFT from the first-token event; an agent run named ``{agent}.run`` (no ``agent.name``) names
    ``{agent}``; on model calls, the stream flag from the invocation parameters' ``stream``, else from
    a method name that says stream (``generate_stream``, ``astream_chat``), and, when no attribute gave
    them, cache-read tokens from the usage in ``output.value`` (the OpenAI Agents instrumentor leaves
    them there on Chat Completions streams)."""
    first_token_event(span, out)
    owner, method = _method(span.name)
    if out.role == sc.ROLE_AGENT and "agent.name" not in span.attrs and method in _RUN_METHODS:
        out.values["Agent"] = owner
    if out.role != sc.ROLE_MODEL:
        return
    if "Streaming" not in out.taken:
        params = _json_object(span.attrs.get("llm.invocation_parameters"))
        stream = params.get("stream") if params is not None else None
        if isinstance(stream, bool):
            out.put("Streaming", int(stream))
        elif "stream" in method:
            out.put("Streaming", 1)
    if out.values["CacheReadTokens"] is None:
        cached = _cached_tokens(span.attrs.get("output.value"))
        if cached is not None:
            out.put("CacheReadTokens", cached)
    if span.in_namespace("llm.output_messages."):
        asked = [str(v) for k, v in span.attrs.items() if _OUTPUT_TOOL_CALL_ID.fullmatch(k) and v]
        if asked:
            out.put("AnswerToolCallIds", " ".join(asked))


# llm.output_messages.{i}.message.tool_calls.{j}.tool_call.id: the attributes keep the answer's order
_OUTPUT_TOOL_CALL_ID = re.compile(r"llm\.output_messages\.\d+\.message\.tool_calls\.\d+\.tool_call\.id")


_CHUNK_EVENTS = frozenset({"gen_ai.content.completion.chunk", "llm.content.completion.chunk"})


def _content_chunks(times: list[int], out: Out) -> list[int]:
    """The chunk events (sorted times) of the chunks that carry content: text or tool-call deltas.
    OpenLLMetry adds one event per chunk of an OpenAI-style stream and marks none as content or
    not (the events have no attributes), so the stream's own shape says which: a Chat Completions
    stream opens with a chunk that carries only the role (``delta.content`` ""), closes with one
    that carries only the finish reason, and, when the caller asked for usage
    (``stream_options.include_usage``), ends with a usage chunk (no choices). OpenLLMetry 0.62
    reports a stream's tokens from that chunk alone, so tokens on the span mean it came. The
    role chunk is dropped on chat calls only; none is left of a stream without content."""
    if not times:
        return times
    lead = 1 if out.values["Operation"] == sc.OP_CHAT else 0
    usage = out.values["InputTokens"] is not None or out.values["OutputTokens"] is not None
    return times[lead : len(times) - 1 - usage]


def chunk_events(span: Span, out: Out) -> None:
    """OpenLLMetry: TTFT, decode time and inter-token latency from completion chunk events, of the
    chunks that carry content only (``_content_chunks``)."""
    names, times = span.events
    if not _CHUNK_EVENTS.issuperset(names):
        times = [at for name, at in zip(names, times, strict=True) if name in _CHUNK_EVENTS]
    times = sorted(times)
    if times:
        out.put("Streaming", 1)
    times = _content_chunks(times, out)
    if times and span.start is not None:
        out.put_ms("TtftMs", (times[0] - span.start) / NS_PER_MS)
    stats = gap_stats(times)
    if stats is None:
        return
    put = out.put  # gaps between sorted times are never negative
    put("DecodeMs", stats.decode_ns / NS_PER_MS)
    put("ItlMeanMs", stats.mean_ns / NS_PER_MS)
    put("ItlP50Ms", stats.p50_ns / NS_PER_MS)
    put("ItlP95Ms", stats.p95_ns / NS_PER_MS)
    put("ItlMaxMs", stats.max_ns / NS_PER_MS)


def mcp_tool_name(span: Span, out: Out) -> None:
    """An MCP tools/call span with no ``gen_ai.tool.name`` is named ``{method} {tool}`` (the conventions'
    ``tools/call get_weather``; the mcp SDK's client writes ``MCP send tools/call get_weather``)."""
    if out.role == sc.ROLE_TOOL and not out.values["Tool"]:
        _, found, tool = span.name.partition(f"{sc.MCP_TOOLS_CALL} ")
        if found and tool.strip():
            out.put("Tool", tool.strip())


def langfuse_ttft(span: Span, out: Out) -> None:
    key = "langfuse.observation.completion_start_time"
    at = iso_ns(span.attrs[key]) if key in span.attrs else None
    if key in span.attrs and at is None:
        out.flag(f"bad_attribute:{key}")
    elif at is not None and span.start is not None:
        out.put_ms("TtftMs", (at - span.start) / NS_PER_MS)


def vercel_stream(span: Span, out: Out) -> None:
    """The stream flag and decode of a doStream span, and the tool calls its answer asked for
    (``ai.response.toolCalls``, JSON). AI SDK 6 holds a streamed step's finish until the tools its
    answer asked for have returned, so that step's ``msToFinish`` times the tools too: no decode."""
    operation = span.attrs.get("ai.operationId", span.name)
    streamed = isinstance(operation, str) and operation.endswith(".doStream")
    if streamed:
        out.put("Streaming", 1)
    asked = _vercel_tool_call_ids(span.attrs.get("ai.response.toolCalls"))
    if asked:
        out.put("AnswerToolCallIds", " ".join(asked))
    first = out.read(span.attrs, "ai.response.msToFirstChunk", DURATIONS["ms"])
    finish = out.read(span.attrs, "ai.response.msToFinish", DURATIONS["ms"])
    if isinstance(first, float) and isinstance(finish, float) and not (streamed and asked):
        out.put_ms("DecodeMs", finish - first)


def _vercel_tool_call_ids(value: object) -> list[str]:
    """``[{"toolCallId": ...}, ...]`` as the AI SDK writes it; anything else holds none."""
    calls = _json_list(value)
    if calls is None:
        return []
    ids = (call.get("toolCallId") for call in calls if isinstance(call, dict))
    return [i for i in ids if isinstance(i, str) and i]


def logfire_stream(span: Span, out: Out) -> None:
    """A streamed request span ends when the response headers arrive, not at the first chunk, so its
    duration is no TTFT. The stream is timed by a record of its own (role stream): a zero-length log
    emitted when the stream ends, whose ``duration`` (s) runs from when the client began reading the
    stream; it goes to DecodeMs, which the trace analysis reads as the interval the record states."""
    if out.role == sc.ROLE_STREAM:
        out.put("Streaming", 1)
        stream = out.read(span.attrs, "duration", DURATIONS["s"])
        if isinstance(stream, float):
            out.put("DecodeMs", stream)


def ttft_means_streamed(span: Span, out: Out) -> None:
    """Only a stream has a first chunk: a call with a TTFT and no stream flag was streamed (pydantic-ai)."""
    if out.values["TtftMs"] is not None:
        out.put("Streaming", 1)
