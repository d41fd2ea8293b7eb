"""agentlat.budgets: latency budgets files, their validation and the pure evaluation against measured data.

A leaf: it imports only the shared vocabulary (``agentlat.errors``, ``agentlat.shared``: config files, what
budgets judge, and the bootstrap a baseline check uses), so the SDK's pytest plugin, the CLI, the server and
the dashboard can all use the one rule.
"""
