"""agentlat.collector: OTLP receivers, normalisation, write-ahead log, batching and the query API.

Imports the SDK vocabulary and the store; never alerts or dashboard (the CLI composes them).
"""
