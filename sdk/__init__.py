"""agentlat: latency observability for LLM agents.

``import agentlat`` is the SDK and stays light: it pulls in OpenTelemetry only, never the
server parts (chdb, clickhouse-connect, fastapi, streamlit, polars).

    import agentlat
    agentlat.init(service="support-bot")

    with agentlat.agent("triage", route="/support"):
        with agentlat.model_call("gpt-4o", provider="openai", stream=True) as call:
            for chunk in stream:
                call.chunk()
        with agentlat.tool("search", call_id="call_1"):
            ...
"""

from agentlat import semconv
from agentlat._model_call import ModelCall
from agentlat._scopes import AgentRun, Prefetch, ToolCall
from agentlat._setup import Options, flush, init, shutdown
from agentlat._version import __version__
from agentlat.errors import AgentlatError, ConfigError

agent = AgentRun
tool = ToolCall
model_call = ModelCall
prefetch = Prefetch

__all__ = [
    "AgentRun",
    "AgentlatError",
    "ConfigError",
    "ModelCall",
    "Options",
    "Prefetch",
    "ToolCall",
    "__version__",
    "agent",
    "flush",
    "init",
    "model_call",
    "prefetch",
    "semconv",
    "shutdown",
    "tool",
]
