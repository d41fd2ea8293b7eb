"""What the collector makes of stored spans: each trace's critical path and split (``critical_path``, pure, the
reference; ``flat_traces``, the same for flat traces a batch at a time in columnar form), the assembler that
decides when a trace is ready and writes its analysis, the per-minute rollups, and the advisor.
Imports nothing of ingest or normalise: it reads spans as the store gives them."""
