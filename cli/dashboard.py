"""``agentlat dashboard``: serve the Streamlit dashboard (on 127.0.0.1 by default), reading the query API.

Imports only typer and rich at module import; Streamlit runs in its own process (``streamlit run``),
which gets the API URL through the environment (``AGENTLAT_API``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer

from agentlat.api.client import DEFAULT_API, ENV_API
from agentlat.cli.common import ApiOpt

APP = Path(str(resources.files("agentlat.dashboard") / "app.py"))
DEFAULT_PORT = 8501
THEME = {
    "base": "light",
    "primaryColor": "#1f77b4",
    "backgroundColor": "#ffffff",
    "secondaryBackgroundColor": "#f4f6f9",
    "textColor": "#1f2328",
}


def streamlit_command(port: int, host: str = "127.0.0.1") -> list[str]:
    """The ``streamlit run`` command line for the dashboard on ``host``:``port``."""
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.address", host,
        "--server.port", str(port),
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "viewer",
        *(f"--theme.{name}={value}" for name, value in THEME.items()),
    ]  # fmt: skip


def start(api: str, port: int) -> subprocess.Popen[bytes]:
    """Start the dashboard in a child process (``agentlat up`` runs it beside the collector)."""
    return subprocess.Popen(streamlit_command(port), env={**os.environ, ENV_API: api})


@contextmanager
def beside(port: int, api: str, console: Any) -> Iterator[None]:
    """Run the dashboard on ``port`` (0: not at all) for as long as the block runs (``agentlat up``)."""
    if not port:
        yield
        return
    process = start(api, port)
    console.print(f"[bold green]agentlat[/] dashboard on [bold]http://127.0.0.1:{port}[/]")
    try:
        yield
    finally:
        process.terminate()
        process.wait(10)


def dashboard(
    api: ApiOpt = DEFAULT_API,
    port: Annotated[int, typer.Option("--port", help="Dashboard port.")] = DEFAULT_PORT,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to bind. The dashboard has no login of its own: bind beyond 127.0.0.1 only inside a "
            "container whose port is published on loopback, or behind an authenticating proxy.",
        ),
    ] = "127.0.0.1",
) -> None:
    """Serve the latency dashboard (Streamlit), reading the agentlat query API."""
    typer.echo(f"agentlat dashboard on http://{host}:{port}  (reading {api})")
    sys.stdout.flush()
    # Become Streamlit (no child to orphan): signals and the exit code are its own.
    os.execve(sys.executable, streamlit_command(port, host), {**os.environ, ENV_API: api})
