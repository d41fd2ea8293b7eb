"""agentlat.collector: OTLP decoding, normalisation, write-ahead log, batching, trace analysis and the advisor.

Imports the SDK vocabulary and the store; never alerts, dashboard or the entry points (server, cli).
"""
