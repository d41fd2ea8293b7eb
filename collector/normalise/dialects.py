"""The dialect tables: which attribute of which instrumentation means what. The single source of
truth the normaliser (``normalise.py``) compiles; adding a dialect is adding a table here.

Each ``Dialect`` says how one instrumentation (OTel GenAI + ``agentlat.*``, OpenInference,
OpenLLMetry, Langfuse, Vercel AI SDK, vLLM, SGLang, Logfire, MCP) is recognised, which role each of
its span kinds has, and which attributes (preferred first) fill each derived column, in which
unit; ``GENERIC_SOURCES`` are read for every span after its dialect's own. What data cannot say
is a hook in ``dialect_hooks.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agentlat import semconv as sc
from agentlat.collector.normalise import dialect_hooks as hook
from agentlat.collector.normalise.span import Out, Span

Sources = Mapping[str, str | tuple[str, ...]]  # column -> attribute(s), preferred first
Extra = Callable[[Span, Out], None]
RoleRule = Callable[[Span, tuple[str, str]], tuple[str, str]]  # what the role table cannot say

SPAN_NAME = "@span.name"  # virtual attribute: the span name, for name fallbacks
NAME = "@name"  # kind key meaning "look the role up by span name"
ENTITY = "@entity"  # virtual column: Tool on tool spans, Agent on agent spans


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one instrumentation writes a span, as data; ``extra`` holds what data cannot.

    Detected when any ``markers`` attribute is present, any attribute key starts with
    ``key_prefix``, the span name starts with one of ``name_prefixes``, or ``detect`` says so;
    the first dialect in ``DIALECTS`` order that matches wins."""

    name: str
    markers: tuple[str, ...] = ()
    key_prefix: str = ""
    name_prefixes: tuple[str, ...] = ()
    detect: Callable[[Span], bool] | None = None  # what the three rules above cannot say
    kind_keys: tuple[str, ...] = ()  # attributes (or NAME) whose value selects the role
    roles: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # "x*" is a prefix
    sources: Sources = field(default_factory=dict)
    unit: str = "s"  # how this dialect writes durations: "s" | "ms" | "ns"
    json_attrs: tuple[str, ...] = ()  # JSON-object attributes, read as "<attr>.<key>"
    fixed: Mapping[str, object] = field(default_factory=dict)  # always set
    defaults: Mapping[str, object] = field(default_factory=dict)  # set when still empty
    extra: Extra | None = None  # events, ISO times, differences of two attributes
    role_rule: RoleRule | None = None  # (role, operation) the table gave -> the span's, before any read

    def __post_init__(self) -> None:  # role values are matched case-insensitively
        object.__setattr__(self, "roles", {k.lower(): r for k, r in self.roles.items()})


def _within(prefix: str, *keys: str) -> tuple[str, ...]:
    return tuple(f"{prefix}.{key}" for key in keys)


# Read for every span after its dialect's own table: OpenLLMetry, Vercel, Logfire emit these.
GENERIC_SOURCES: Sources = {
    "Model": (sc.GEN_AI_RESPONSE_MODEL, sc.GEN_AI_REQUEST_MODEL),
    "Provider": (sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM),
    "Operation": sc.GEN_AI_OPERATION_NAME,
    "InputTokens": (sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_PROMPT_TOKENS),
    "OutputTokens": (sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.GEN_AI_USAGE_COMPLETION_TOKENS),
    "CacheReadTokens": (
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS_LEGACY,
    ),
    "CacheCreationTokens": (
        sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
        sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS_LEGACY,
    ),
    "ReasoningTokens": sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    # GenAI's TTFT (s): the span attribute, and the metric's names, which pydantic-ai writes on spans
    "TtftMs": (
        sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
        sc.GEN_AI_CLIENT_INFERENCE_TIME_TO_FIRST_CHUNK,
        sc.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
    ),
    "Tool": sc.GEN_AI_TOOL_NAME,
    "ToolCallId": sc.GEN_AI_TOOL_CALL_ID,
    "Agent": (sc.GEN_AI_AGENT_NAME, sc.GEN_AI_WORKFLOW_NAME),
    "ConversationId": sc.GEN_AI_CONVERSATION_ID,
    "Route": sc.ROUTE,
}
_SERVER_SOURCES: Sources = {
    "QueueMs": sc.GEN_AI_LATENCY_TIME_IN_QUEUE,
    "PrefillMs": sc.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    "DecodeMs": sc.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE,
    "TtftMs": sc.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
    "CacheReadTokens": sc.GEN_AI_USAGE_CACHED_TOKENS,
}

_MODEL, _TOOL, _AGENT, _STREAM, _OTHER = sc.ROLE_MODEL, sc.ROLE_TOOL, sc.ROLE_AGENT, sc.ROLE_STREAM, sc.ROLE_OTHER
_CHAT, _EMBED = (_MODEL, sc.OP_CHAT), (_MODEL, sc.OP_EMBEDDINGS)
_COMPLETION = (_MODEL, sc.OP_TEXT_COMPLETION)
_RUN_TOOL, _RUN_AGENT = (_TOOL, sc.OP_EXECUTE_TOOL), (_AGENT, sc.OP_INVOKE_AGENT)
_GENAI_ROLES = {
    **{op: (_MODEL, op) for op in sc.MODEL_OPERATIONS},
    **{op: (_AGENT, op) for op in sc.AGENT_OPERATIONS},
    sc.OP_EXECUTE_TOOL: _RUN_TOOL,
}
# A span named in the conventions' "{operation} {target}" form for an agent, workflow or tool: its creator said
# what it is. Another instrumentation may write a model call's attributes onto it later (LiteLLM's callback writes
# its call onto whatever span is current when it has no span of its own, gen_ai.operation.name included), so in
# dialects that do so this name is read before any attribute.
_NAMED_BY_ITS_CREATOR = {
    f"{op} *": role for op, role in _GENAI_ROLES.items() if role[0] in (sc.ROLE_AGENT, sc.ROLE_TOOL)
}
_USAGE = "langfuse.observation.usage_details"
# Vercel's top-level calls run a whole multi-step loop (model and tool calls): the agent.
_VERCEL_TOP = ("generateText", "streamText", "generateObject", "streamObject", "embed", "embedMany")


DIALECTS: tuple[Dialect, ...] = (
    Dialect(
        name="openinference",
        markers=("openinference.span.kind",),
        kind_keys=("openinference.span.kind",),
        roles={"llm": _CHAT, "embedding": _EMBED, "tool": _RUN_TOOL, "agent": _RUN_AGENT},
        sources={
            "Model": ("llm.model_name", "embedding.model_name"),
            "Provider": ("llm.provider", "llm.system"),
            "InputTokens": "llm.token_count.prompt",
            "OutputTokens": "llm.token_count.completion",
            "CacheReadTokens": "llm.token_count.prompt_details.cache_read",
            "CacheCreationTokens": "llm.token_count.prompt_details.cache_write",
            "ReasoningTokens": "llm.token_count.completion_details.reasoning",
            "Tool": "tool.name",
            "ToolCallId": "tool_call.id",
            "Agent": "agent.name",
            "ConversationId": "session.id",
            ENTITY: SPAN_NAME,
        },
        extra=hook.openinference_extra,
        role_rule=hook.openinference_role,
    ),
    Dialect(
        name="openllmetry",
        # 0.62+ writes GenAI names only, with no llm.request.type nor traceloop.span.kind: it is
        # known by Traceloop's own attributes, which no GenAI convention or other dialect writes.
        # gen_ai.is_streaming (llm.is_streaming before) is on every request span, True or False;
        # gen_ai.openai.api_base on those of its openai instrumentation.
        markers=(
            "traceloop.span.kind",
            "llm.request.type",
            "gen_ai.is_streaming",
            "llm.is_streaming",
            "gen_ai.openai.api_base",
        ),
        kind_keys=(NAME, "llm.request.type", "traceloop.span.kind", sc.GEN_AI_OPERATION_NAME),
        roles={
            **_NAMED_BY_ITS_CREATOR,
            **_GENAI_ROLES,
            **{"chat": _CHAT, "completion": _COMPLETION, "embedding": _EMBED, "tool": _RUN_TOOL},
            **{"workflow": (_AGENT, sc.OP_INVOKE_WORKFLOW), "agent": _RUN_AGENT, "task": (_OTHER, "")},
        },
        sources={
            "DecodeMs": "llm.chat_completions.streaming_time_to_generate",
            # LiteLLM's callback (llm.request.type) under gen_ai_latest_experimental: gen_ai.request.stream
            "Streaming": ("gen_ai.is_streaming", "llm.is_streaming", sc.GEN_AI_REQUEST_STREAM),
            "ReasoningTokens": ("gen_ai.usage.reasoning_tokens", "llm.usage.reasoning_tokens"),
            ENTITY: "traceloop.entity.name",
        },
        extra=hook.chunk_events,
    ),
    Dialect(
        # LiteLLM's own span of the HTTP request of a call (under its litellm_request span, or under whatever span
        # was current, when it wrote the call onto that): the call's interval. llm.{provider}.* attributes, the
        # usage as a Python repr.
        name="litellm",
        name_prefixes=("raw_gen_ai_request",),
        kind_keys=(NAME,),
        roles={"raw_gen_ai_request": _CHAT},
        extra=hook.litellm_raw_request,
    ),
    Dialect(
        name="langfuse",
        markers=("langfuse.observation.type",),
        kind_keys=("langfuse.observation.type",),
        roles={"generation": _CHAT, "embedding": _EMBED, "tool": _RUN_TOOL, "agent": _RUN_AGENT},
        json_attrs=(_USAGE,),
        sources={
            "Model": "langfuse.observation.model.name",
            "InputTokens": _within(_USAGE, "input", "input_tokens"),
            "OutputTokens": _within(_USAGE, "output", "output_tokens"),
            "CacheReadTokens": _within(_USAGE, "cache_read_input_tokens", "input_cached_tokens"),
            "CacheCreationTokens": _within(_USAGE, "cache_creation_input_tokens"),
            "ReasoningTokens": _within(_USAGE, "output_reasoning_tokens", "reasoning_tokens"),
            "ConversationId": ("session.id", "langfuse.session.id"),
            ENTITY: SPAN_NAME,
        },
        extra=hook.langfuse_ttft,
    ),
    Dialect(
        name="vercel",
        markers=("ai.operationId",),
        name_prefixes=("ai.",),
        kind_keys=("ai.operationId", NAME),
        roles={
            **dict.fromkeys(_within("ai", "generateText.doGenerate", "streamText.doStream"), _CHAT),
            **dict.fromkeys(_within("ai", "generateObject.doGenerate", "streamObject.doStream"), _CHAT),
            **dict.fromkeys(_within("ai", "embed.doEmbed", "embedMany.doEmbed"), _EMBED),
            "ai.toolCall": _RUN_TOOL,
            **dict.fromkeys(_within("ai", *_VERCEL_TOP), _RUN_AGENT),
        },
        unit="ms",
        sources={
            "Model": ("ai.response.model", "ai.model.id"),
            "Provider": "ai.model.provider",
            "TtftMs": "ai.response.msToFirstChunk",
            "InputTokens": ("ai.usage.promptTokens", "ai.usage.inputTokens", "ai.usage.tokens"),
            "OutputTokens": ("ai.usage.completionTokens", "ai.usage.outputTokens"),
            "CacheReadTokens": "ai.usage.cachedInputTokens",
            "ReasoningTokens": "ai.usage.reasoningTokens",
            "Tool": "ai.toolCall.name",
            "ToolCallId": "ai.toolCall.id",
            ENTITY: "ai.telemetry.functionId",
        },
        extra=hook.vercel_stream,
    ),
    Dialect(
        name="logfire",
        markers=("logfire.msg_template",),
        name_prefixes=("Chat Completion with ", "Message with ", "streaming response from "),
        # the user's own logfire.span()s say what they are with gen_ai.operation.name, if at all
        kind_keys=("logfire.msg_template", NAME, sc.GEN_AI_OPERATION_NAME),
        roles={"chat completion with *": _CHAT, "message with *": _CHAT, "completion with *": _COMPLETION}
        | {"embedding creation with *": _EMBED, "streaming response from *": (_STREAM, sc.OP_CHAT)}
        | _GENAI_ROLES,
        json_attrs=("request_data",),
        sources={
            "Model": (sc.GEN_AI_RESPONSE_MODEL, sc.GEN_AI_REQUEST_MODEL, "request_data.model"),
            "Streaming": (sc.GEN_AI_REQUEST_STREAM, "request_data.stream"),
        },
        extra=hook.logfire_stream,
    ),
    Dialect(
        name="sglang",
        key_prefix="sglang.",
        fixed={"Role": _MODEL, "IsServerSpan": 1},
        defaults={"Provider": "sglang"},
        sources={
            **_SERVER_SOURCES,
            "CacheReadTokens": ("sglang.kv_cache.hit_tokens", sc.GEN_AI_USAGE_CACHED_TOKENS),
            "SpecProposedTokens": "sglang.speculative.proposed_drafts",
            "SpecAcceptedTokens": "sglang.speculative.accepted_drafts",
        },
    ),
    Dialect(
        name="vllm",
        detect=hook.is_vllm,
        fixed={"Role": _MODEL, "IsServerSpan": 1},
        defaults={"Provider": "vllm"},
        sources=_SERVER_SOURCES,
    ),
    Dialect(
        # The Model Context Protocol's spans (the mcp SDK's own, OTel's MCP conventions): `{method} {target}`,
        # client and server. A tools/call is a tool call, from either side (the server's span sits inside
        # the client's: one call, counted once by the trace analysis); every other method is the protocol's
        # own work. Before "genai": the server's span carries gen_ai.operation.name execute_tool too.
        name="mcp",
        markers=(sc.MCP_METHOD_NAME,),
        kind_keys=(sc.MCP_METHOD_NAME,),
        roles={sc.MCP_TOOLS_CALL: _RUN_TOOL},
        extra=hook.mcp_tool_name,
    ),
    Dialect(
        name="genai",
        markers=(sc.GEN_AI_OPERATION_NAME,),
        kind_keys=(sc.GEN_AI_OPERATION_NAME,),
        roles=_GENAI_ROLES,
        sources={
            "Streaming": sc.GEN_AI_REQUEST_STREAM,
            "QueueMs": sc.GEN_AI_LATENCY_TIME_IN_QUEUE,
            "PrefillMs": sc.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
            # the server's own decode time beats our first-to-last-chunk measurement
            "DecodeMs": (sc.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE, sc.DECODE_DURATION),
            "ItlMeanMs": sc.ITL_MEAN,
            "ItlP50Ms": sc.ITL_P50,
            "ItlP95Ms": sc.ITL_P95,
            "ItlMaxMs": sc.ITL_MAX,
            "StallCount": sc.ITL_STALLS,
            "SpecProposedTokens": sc.SPECULATIVE_PROPOSED_TOKENS,
            "SpecAcceptedTokens": sc.SPECULATIVE_ACCEPTED_TOKENS,
            "PrefetchOutcome": sc.PREFETCH_OUTCOME,
            "PrefetchSavedMs": sc.PREFETCH_SAVED,
            "PrefetchWastedMs": sc.PREFETCH_WASTED,
        },
        extra=hook.ttft_means_streamed,
    ),
)
