"""Google ADK, as ``adk_agent.py``, under its legacy telemetry schema: ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1
(the ``invocation`` and ``call_llm`` spans, GenAI semconv 1.36), set before ADK is imported."""

import os
import runpy

os.environ["ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"] = "1"
runpy.run_module("tests.conformance.cases.adk_agent", run_name="__main__")
