from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlat.store import Store, open_store
from tests.servers import ServerProcess


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real collector for the session; tests use distinct services or trace ids."""
    proc = ServerProcess(tmp_path_factory.mktemp("server")).start()
    yield proc
    proc.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A collector of this test's own, for restarts and crashes."""
    proc = ServerProcess(tmp_path)
    yield proc
    proc.kill()


@pytest.fixture(scope="session")
def embedded_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """The one in-process chDB store of the test session (chDB opens one data path per process)."""
    store = open_store(tmp_path_factory.mktemp("embedded") / "data")
    yield store
    store.close()


@pytest.fixture(autouse=True)
def keep_main_module() -> Iterator[None]:
    """AppTest runs a page as this process's ``__main__`` and leaves it there. A process pool a later test
    spawns (decode workers) would re-run that page in each worker: put the real one back."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main
