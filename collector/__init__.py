"""agentlat.collector: what the server does with spans, in three parts (README's Layout says the rules):
``normalise`` (dialects into one vocabulary, pure), ``ingest`` (decoding, write-ahead log, writer), and
``analysis`` (trace assembly, the critical path, rollups, the advisor). ``requests`` and ``metrics``
compose them for the receivers.

Imports the SDK vocabulary, the shared kernel and the store; never alerts, dashboard or the entry points.
"""
