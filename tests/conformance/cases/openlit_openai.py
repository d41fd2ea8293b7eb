"""OpenLIT (openlit 1.44, in a virtualenv of its own: tests/conformance/envs.py), set up as its docs
say: ``openlit.init(otlp_endpoint=...)`` instruments the openai client and exports OTLP/HTTP traces,
metrics and logs (events). Its pricing table comes from a local file (``pricing_json``): by default
``init`` fetches it from the internet. OpenLIT has no way to mark an agent or a tool (``@openlit.trace``
opens a plain span), so those spans are opened with the OpenTelemetry tracer under the GenAI
conventions' names."""

from pathlib import Path

import openlit
from opentelemetry import trace

from tests.conformance.case_kit import parse_case
from tests.conformance.cases.agent_loops import client_of, genai_agent

case = parse_case()
openlit.init(
    application_name="conformance-openlit-openai",
    otlp_endpoint=case.collector,
    pricing_json=str(Path(__file__).with_name("openlit_pricing.json")),
)
tracer = trace.get_tracer("weather-app")
agent = genai_agent(case, client_of(case), lambda name, attrs: tracer.start_as_current_span(name, attributes=attrs))
case.run(agent)
trace.get_tracer_provider().shutdown()
case.finish()
