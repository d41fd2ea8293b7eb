"""One client, or one surface of a client, that cannot be instrumented costs only itself: an openai
version without the Responses module (openai 1.40) still gets Chat Completions timed, anthropic
is instrumented whatever happens to openai, and google-genai, instrumented by default, costs the
others nothing when it is missing or cannot be instrumented. Each case runs in a fresh interpreter,
where the missing part is made missing before agentlat looks for it."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, logging, sys
{setup}
import agentlat
from agentlat.instrument._wrapper import is_patched
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

warnings = []
handler = logging.Handler()
handler.emit = lambda record: warnings.append(record.getMessage())
logging.getLogger("agentlat").addHandler(handler)
agentlat.init(service="t", exporter=InMemorySpanExporter())
from anthropic.resources.messages import Messages
from openai.resources.chat.completions import Completions
responses = sys.modules.get("openai.resources.responses")
try:
    from google.genai.models import AsyncModels, Models
    methods = ("_generate_content", "_generate_content_stream")  # one request each
    gemini = [is_patched(vars(owner).get(name)) for owner in (Models, AsyncModels) for name in methods]
except ImportError:
    gemini = None
print(json.dumps({{
    "chat": is_patched(vars(Completions)["create"]),
    "responses": bool(responses) and is_patched(vars(responses.Responses)["create"]),
    "anthropic": is_patched(vars(Messages)["create"]),
    "gemini": gemini,
    "warnings": warnings,
}}))
"""


def probe(setup: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_missing_surface_costs_only_that_surface() -> None:
    found = probe('sys.modules["openai.resources.responses"] = None  # as in openai 1.40')
    assert (found["chat"], found["responses"], found["anthropic"]) == (True, False, True)
    [warning] = found["warnings"]
    assert "no Responses API" in warning and "those calls are not timed" in warning


def test_a_client_that_cannot_be_instrumented_costs_only_itself() -> None:
    found = probe("import openai\ndel openai.Stream  # a client whose shape we do not know")
    assert (found["chat"], found["anthropic"]) == (False, True)
    [warning] = found["warnings"]
    assert warning.startswith("agentlat: openai calls are not timed: cannot instrument it (AttributeError")


def test_google_genai_is_instrumented_by_default() -> None:
    found = probe("")
    assert (found["chat"], found["responses"], found["anthropic"]) == (True, True, True)
    assert found["gemini"] == [True] * 4 and found["warnings"] == []


def test_google_genai_missing_costs_nothing() -> None:
    found = probe('sys.modules["google.genai"] = None  # not installed')
    assert (found["chat"], found["responses"], found["anthropic"], found["gemini"]) == (True, True, True, None)
    assert found["warnings"] == []


def test_a_google_genai_that_cannot_be_instrumented_costs_only_itself() -> None:
    found = probe("from google.genai.models import AsyncModels\ndel AsyncModels._generate_content_stream")
    assert (found["chat"], found["responses"], found["anthropic"]) == (True, True, True)
    assert found["gemini"] == [False] * 4  # none patched: never half of it
    [warning] = found["warnings"]
    assert warning.startswith("agentlat: google.genai calls are not timed: cannot instrument it (AttributeError")
    assert "AsyncModels._generate_content_stream" in warning
