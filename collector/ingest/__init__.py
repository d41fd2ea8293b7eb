"""The ingest path: OTLP decoding (protobuf by the engine, JSON, logs and metrics in worker processes),
admission, the write-ahead log and the writer that stores batches. Reads spans' meaning only through
``agentlat.collector.normalise``; knows nothing of analysis."""
