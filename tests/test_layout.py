"""The package's shape: a light SDK import, a guarded public surface, a helpful CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import agentlat
from tests.servers import AGENTLAT

SERVER_MODULES = ("chdb", "clickhouse_connect", "fastapi", "streamlit", "polars", "pyarrow", "uvicorn")
OTLP_EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


def imported(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``."""
    probe = f"import sys\n{code}\nprint(' '.join(m for m in sys.argv[1:] if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe, *modules], capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_import_agentlat_stays_light() -> None:
    assert imported("import agentlat", (*SERVER_MODULES, OTLP_EXPORTER)) == []


def test_import_agentlat_loads_only_the_sdk_room() -> None:
    """The SDK is what a user installs: nothing of the server's shared room or the demo comes with it."""
    probe = (
        "import sys, agentlat\n"
        "print('\\n'.join(sorted(m.__file__ for n, m in sys.modules.items() if n.startswith('agentlat'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    sdk = os.path.join(os.path.dirname(agentlat.__file__), "")
    assert loaded and [f for f in loaded if not f.startswith(sdk)] == []
    assert any(f.endswith("semconv.py") for f in loaded)


def test_own_exporter_spares_the_otlp_exporter_import() -> None:
    code = (
        "import agentlat\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "agentlat.init(service='t', exporter=InMemorySpanExporter(), "
        "options=agentlat.Options(instrument_clients=False))"
    )
    assert imported(code, (OTLP_EXPORTER,)) == []
    assert imported("import agentlat\nagentlat.init(service='t')", (OTLP_EXPORTER,)) == [OTLP_EXPORTER]


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


def test_every_public_error_is_an_agentlat_error() -> None:
    """``AgentlatError`` is the root of every error agentlat raises on purpose (sdk/errors.py)."""
    import importlib

    from agentlat.errors import AgentlatError
    from tests.import_graph import modules

    outside = []
    for module_name in modules():
        if module_name.rsplit(".", 1)[-1].startswith(("page_", "__main__")):  # these run on import
            continue
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
                and not issubclass(value, AgentlatError)
            ):
                outside.append(f"{module.__name__}.{name}")
    assert outside == []
