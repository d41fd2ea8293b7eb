"""agentlat.server: the HTTP and gRPC entry points: the FastAPI app factory, its routers, the OTLP receivers.

Composes the domains (collector, store, alerts, budgets); no domain imports it.
"""
