"""The package's shape: a light SDK import, a guarded public surface, a helpful CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import agentlat
from tests.servers import AGENTLAT

SERVER_MODULES = ("chdb", "clickhouse_connect", "fastapi", "streamlit", "polars", "pyarrow", "uvicorn")


def test_import_agentlat_stays_light() -> None:
    code = "import sys, agentlat; print(' '.join(m for m in sys.argv[1:] if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code, *SERVER_MODULES], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_public_surface_is_exactly_all() -> None:
    # Submodules become attributes once imported anywhere, so compare everything else.
    def non_modules(names: set[str]) -> set[str]:
        return {n for n in names if not isinstance(getattr(agentlat, n), types.ModuleType)}

    public = {name for name in vars(agentlat) if not name.startswith("_")}
    assert non_modules(public) == non_modules(set(agentlat.__all__) - {"__version__"})
    assert isinstance(agentlat.semconv, types.ModuleType)


def test_cli_help_lists_commands() -> None:
    wide = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run([AGENTLAT, "--help"], capture_output=True, text=True, check=True, env=wide)
    for command in ("serve", "up", "version"):
        assert command in result.stdout
    serve = subprocess.run([AGENTLAT, "serve", "--help"], capture_output=True, text=True, check=True, env=wide)
    for option in ("--host", "--port", "--data", "--clickhouse", "AGENTLAT_DATA"):
        assert option in serve.stdout


def test_bad_environment_value_is_named(tmp_path) -> None:
    env = {**os.environ, "AGENTLAT_PORT": "forty"}
    result = subprocess.run(
        [AGENTLAT, "serve", "--data", str(tmp_path / "d")], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2
    assert "AGENTLAT_PORT='forty'" in result.stderr
