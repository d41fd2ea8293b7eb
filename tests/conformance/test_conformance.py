"""Every instrumentation of compatibility.py, unmodified, end to end through a real collector
against the fake model: roles, names, TTFT, decode, ITL, tokens and the E2E split against the
truth the test measures itself (harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlat.demo import FakeLLM
from tests.conformance.compatibility import INSTRUMENTATIONS, Instrumentation
from tests.conformance.envs import virtualenv
from tests.conformance.harness import conforms
from tests.servers import ServerProcess

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("case", INSTRUMENTATIONS, ids=[i.ident for i in INSTRUMENTATIONS])
def test_conforms(
    conformance_server: ServerProcess,
    llm: FakeLLM,
    tmp_path: Path,
    case: Instrumentation,
    stream: bool,
) -> None:
    python = {"python": str(virtualenv(case.virtualenv))} if case.virtualenv else {}
    expect = case.stream if stream else case.whole
    errors = conforms(case.script, conformance_server, llm, stream, tmp_path, expect, provider=case.provider, **python)
    print(f"{case.ident} {'stream' if stream else 'whole'}: " + ", ".join(f"{k} {v:+.2f}" for k, v in errors.items()))
