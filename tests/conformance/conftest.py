"""One collector and one fake model for every conformance case."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlat.demo import FakeLLM
from tests.conformance.harness import SCENARIO
from tests.servers import ServerProcess


@pytest.fixture(scope="session")
def conformance_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir: Path = tmp_path_factory.mktemp("conformance")
    server = ServerProcess(workdir, extra_env={"AGENTLAT_TRACE_GRACE": "0.5"}).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(SCENARIO) as fake:
        yield fake
