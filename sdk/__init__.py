"""agentlat: latency observability for LLM agents.

``import agentlat`` is the SDK and stays light: it pulls in OpenTelemetry only, never the
server parts (chdb, clickhouse-connect, fastapi, streamlit, polars).
"""

from agentlat.errors import AgentlatError, ConfigError

__version__ = "0.1.0"

__all__ = ["AgentlatError", "ConfigError", "__version__"]
