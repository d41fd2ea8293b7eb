"""agentlat's own SDK, held to the same conformance checks as every other instrumentation."""

from pathlib import Path

import pytest

from agentlat.demo import FakeLLM
from tests.conformance.harness import Expect, assert_conforms, run_case
from tests.servers import ServerProcess

pytestmark = pytest.mark.slow

EXPECT = Expect(agent="weather_agent", ttft=True, decode=True, itl=True, tokens=True, cache=True)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_agentlat_openai(conformance_server: ServerProcess, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    run = run_case("agentlat_openai", conformance_server, llm, stream, tmp_path)
    print(assert_conforms(run, EXPECT))
