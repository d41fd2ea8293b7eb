"""The OpenAI Agents SDK on its Responses model (the SDK's default), traced by OpenInference's
OpenAI Agents instrumentor: the same agent as ``openai_agents_openinference``."""

from tests.conformance.cases.openai_agents_openinference import main

main(responses=True)
