"""Logfire: ``logfire.instrument_openai()`` (or ``instrument_anthropic()``), exporting to another OTLP
backend as Logfire's "alternative backends" guide says (the traces endpoint in
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, ``send_to_logfire=False``). Logfire's LLM integrations record
model calls only, so the agent and each tool call are ``logfire.span``s the user opens, carrying the
GenAI conventions' attributes."""

import os

import logfire

from tests.conformance.case_kit import parse_case
from tests.conformance.cases.agent_loops import client_of, genai_agent

case = parse_case()
os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = case.traces_endpoint
logfire.configure(service_name=f"conformance-logfire-{case.provider}", send_to_logfire=False, console=False)
client = client_of(case)
if case.provider == "anthropic":
    logfire.instrument_anthropic(client)
else:
    logfire.instrument_openai(client)
case.run(genai_agent(case, client, lambda name, attrs: logfire.span(name, **attrs)))
logfire.shutdown()
case.finish()
