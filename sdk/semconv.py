"""The attribute vocabulary agentlat emits and recognises.

GenAI names follow the OpenTelemetry GenAI semantic conventions at the version pinned in
``GENAI_SEMCONV_VERSION`` (stability: development); older names they replaced are still read. Server phases use vLLM's
``gen_ai.latency.*`` names. Everything no standard covers lives under ``agentlat.*``.
All durations in attributes are seconds, as in the GenAI conventions; ``*_ms`` names are
never emitted.
"""

from __future__ import annotations

# semantic-conventions-genai, where the GenAI conventions live since semantic-conventions 1.41.0
GENAI_SEMCONV_VERSION = "0.1.0"

# --- OpenTelemetry GenAI semantic conventions -------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"  # deprecated name of gen_ai.provider.name, still common
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"  # seconds
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"  # includes cached tokens
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS = "gen_ai.usage.cache_write.input_tokens"  # input tokens written to the cache
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"  # its name before 0.1.0
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"  # also names a workflow (invoke_workflow) since 0.1.0
GEN_AI_WORKFLOW_NAME = "gen_ai.workflow.name"  # a workflow's name before 0.1.0, still read
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
# GenAI's server-side timing metrics (seconds), which some instrumentations (OpenLIT) write as
# attributes of the client's span
GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"  # a metric's name, on spans
GEN_AI_CLIENT_INFERENCE_TIME_TO_FIRST_CHUNK = "gen_ai.client.inference.time_to_first_chunk"  # its name since 0.1.0
GEN_AI_SERVER_TIME_TO_FIRST_TOKEN = "gen_ai.server.time_to_first_token"
GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN = "gen_ai.server.time_per_output_token"
ERROR_TYPE = "error.type"

# Legacy usage names (OpenLLMetry, vLLM, older instrumentations).
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS_LEGACY = "gen_ai.usage.cache_read_input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS_LEGACY = "gen_ai.usage.cache_creation_input_tokens"

# gen_ai.operation.name values
OP_CHAT = "chat"
OP_TEXT_COMPLETION = "text_completion"
OP_GENERATE_CONTENT = "generate_content"
OP_EMBEDDINGS = "embeddings"
OP_EXECUTE_TOOL = "execute_tool"
OP_INVOKE_AGENT = "invoke_agent"
OP_CREATE_AGENT = "create_agent"
OP_INVOKE_WORKFLOW = "invoke_workflow"
MODEL_OPERATIONS = frozenset({OP_CHAT, OP_TEXT_COMPLETION, OP_GENERATE_CONTENT, OP_EMBEDDINGS})
AGENT_OPERATIONS = frozenset({OP_INVOKE_AGENT, OP_CREATE_AGENT, OP_INVOKE_WORKFLOW})

# --- Model Context Protocol (the mcp SDK's spans, OTel's MCP conventions) ------------------
MCP_METHOD_NAME = "mcp.method.name"  # "tools/call", "tools/list", "initialize", ...
MCP_TOOLS_CALL = "tools/call"

# --- vLLM server phases (seconds) -------------------------------------------------------
GEN_AI_LATENCY_TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL = "gen_ai.latency.time_in_model_prefill"
GEN_AI_LATENCY_TIME_IN_MODEL_DECODE = "gen_ai.latency.time_in_model_decode"
GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
GEN_AI_LATENCY_E2E = "gen_ai.latency.e2e"
GEN_AI_USAGE_CACHED_TOKENS = "gen_ai.usage.cached_tokens"  # vLLM: prompt tokens from cache

# --- agentlat namespace (no standard covers these) --------------------------------------
ROUTE = "agentlat.route"
PHASE = "agentlat.phase"  # on child phase spans: "queue" | "prefill" | "decode"
CHUNK_COUNT = "agentlat.stream.chunks"
DECODE_DURATION = "agentlat.decode.duration"  # seconds, first chunk -> last chunk
ITL_MEAN = "agentlat.itl.mean"  # seconds
ITL_P50 = "agentlat.itl.p50"
ITL_P95 = "agentlat.itl.p95"
ITL_MAX = "agentlat.itl.max"
ITL_STALLS = "agentlat.itl.stalls"  # gaps over the stall threshold
ITL_STALL_THRESHOLD = "agentlat.itl.stall_threshold"  # seconds
OUTPUT_TOKENS_PER_SECOND = "agentlat.output.tokens_per_second"
SPECULATIVE_PROPOSED_TOKENS = "agentlat.speculative.proposed_tokens"
SPECULATIVE_ACCEPTED_TOKENS = "agentlat.speculative.accepted_tokens"
PREFETCH_OUTCOME = "agentlat.prefetch.outcome"  # "hit" | "miss" | "cancelled"
PREFETCH_SAVED = "agentlat.prefetch.saved"  # seconds of E2E saved by a hit
PREFETCH_WASTED = "agentlat.prefetch.wasted"  # seconds spent on a miss or cancelled prefetch
TOOL_DEPENDS_ON = "agentlat.tool.depends_on"  # tool call ids whose output this call consumed
TOOL_ARGS_READY_TIME = "agentlat.tool.args_ready_time"  # unix ns: call JSON complete in stream
# One event per tool call a model streamed, on the model call's span, stamped when its arguments were
# complete (or, never complete, when its name appeared); with gen_ai.tool.call.id and gen_ai.tool.name.
TOOL_CALL_EVENT = "agentlat.tool_call"
TOOL_CALL_NAMED_AT = "agentlat.tool_call.named_at"  # seconds from the call's start to the tool's name in the stream
TOOL_CALL_READY_AT = "agentlat.tool_call.ready_at"  # seconds from the call's start to its arguments complete
# The prompt's version: ``agentlat.agent(..., prompt_version="v4")`` puts it on every span of the run; a model call
# the auto-instrumentation sees without one gets its PROMPT_PREFIX_HASH (the same tools and system prompt, the same
# version). A dimension of GET /api/v1/compare.
PROMPT_VERSION = "agentlat.prompt.version"
# sha256 (first 16 hex) of the prompt's stable prefix (system prompt + tool definitions):
# equal hashes that miss the provider's prefix cache point at dynamic content placed before it.
PROMPT_PREFIX_HASH = "agentlat.prompt.prefix_hash"
# The prompt's structure as the auto-instrumentation sees a request (agentlat._prompt_shape), never its text: its
# parts in the order a provider's cache reads them (tools, system, message N), the hash of the prompt up to each
# part's end, its size in bytes, and where it first differs from the previous request of the same provider, route
# and model: the part ("tools", "system", "message N"; "model" for a model new to the route) and, for a part present
# in both, the byte offset in it.
PROMPT_PARTS = "agentlat.prompt.parts"
PROMPT_PART_HASHES = "agentlat.prompt.part_hashes"
PROMPT_BYTES = "agentlat.prompt.bytes"
PROMPT_CHANGED_PART = "agentlat.prompt.changed_part"
PROMPT_CHANGED_OFFSET = "agentlat.prompt.changed_offset"
# Seconds since the previous request of the same provider, route and model (the one the changed part is found
# against; for a model new to the route, since the route's last request).
PROMPT_SINCE_PREVIOUS_S = "agentlat.prompt.since_previous_s"
# What a request says of the provider's prompt cache, and what the provider said of it (issue 39): the
# lifetime in seconds its cache entries were asked for (the request's own setting, else the SDK's
# ``Options.prompt_cache_ttl_s``), the number of cache breakpoints it marks (Anthropic caches nothing
# without one), the provider's own diagnosis of a miss (Anthropic ``diagnostics.cache_miss_reason.type``,
# OpenAI Responses ``prompt_cache_diagnostics``: its ``reason``, or its ``type`` when it has none) and
# the input tokens the provider says the miss cost.
CACHE_TTL_S = "agentlat.cache.ttl_s"
CACHE_BREAKPOINTS = "agentlat.cache.breakpoints"
# The provider's minimum cacheable prompt for the request's model, in tokens (from CACHE_MIN_TOKENS_BY_MODEL); a
# prompt shorter than this is never cached. The collector reads it, else the same table by provider and model.
CACHE_MIN_TOKENS = "agentlat.cache.min_tokens"
CACHE_PROVIDER_REASON = "agentlat.cache.provider_reason"
CACHE_MISSED_TOKENS = "agentlat.cache.missed_tokens"
# Set by the SDK on a span of another instrumentation that starts directly inside an agentlat
# model call (anthropic's built-in span, say): the same call seen twice, not another call.
INNER_OF_MODEL_CALL = "agentlat.inner_of_model_call"

PREFETCH_OUTCOMES = frozenset({"hit", "miss", "cancelled"})

# The provider's minimum cacheable prompt, by model: (gen_ai.provider.name, a regular expression searched in the
# model name, tokens), the first match wins (provider documentation, 2026-12): Anthropic by model family, OpenAI
# 1,024 for every model, Gemini's implicit caching by tier. Another provider (a self-hosted server, say) has no
# minimum agentlat knows of: none of its misses is judged below it.
CACHE_MIN_TOKENS_BY_MODEL: tuple[tuple[str, str, int], ...] = (
    ("anthropic", "opus-4-[5-9]|haiku-4", 4096),
    ("anthropic", "sonnet-4-[6-9]|haiku-3|3-haiku|3-5-haiku", 2048),
    ("anthropic", "", 1024),
    ("openai", "", 1024),
    ("gcp.gemini", "pro", 4096),
    ("gcp.gemini", "", 1024),
    ("gcp.vertex_ai", "pro", 4096),
    ("gcp.vertex_ai", "", 1024),
)

# Roles the collector assigns to every span.
ROLE_MODEL = "model"
ROLE_TOOL = "tool"
ROLE_AGENT = "agent"
ROLE_OTHER = "other"
# A record that times a model call's stream apart from the call's own span (Logfire's "streaming
# response from ... took ...s" log, emitted when the stream ends): not a call; the trace analysis
# counts the interval it states as the call's model time.
ROLE_STREAM = "stream"
ROLES = (ROLE_MODEL, ROLE_TOOL, ROLE_AGENT, ROLE_OTHER, ROLE_STREAM)
