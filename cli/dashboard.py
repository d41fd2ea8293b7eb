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
from typing import IO, Annotated

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


def streamlit_command(port: int, host: str = "127.0.0.1", app: Path = APP) -> list[str]:
    """The ``streamlit run`` command line for the dashboard (or another ``app``, bench/dashboard_browser.py's bare
    page) on ``host``:``port``."""
    return [
        sys.executable, "-m", "streamlit", "run", str(app),
        "--server.address", host,
        "--server.port", str(port),
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "viewer",
        "--client.showErrorLinks", "false",  # no "Ask Google / ChatGPT" with a trace's text in the link
        # A served dashboard's code does not change: no watching it (each new session walked every imported
        # module, ~0.2 s of CPU), and no magic (no page writes anything implicitly; saves rewriting each page).
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--runner.magicEnabled", "false",
        "--runner.fastReruns", "true",  # a widget change stops the run it makes stale at once
        # No full collection after each run: it took the CPU just as the browser (often on the same machine) drew the
        # page the run sent; the interpreter's own thresholds still collect.
        "--runner.postScriptGC", "false",
        *(f"--theme.{name}={value}" for name, value in THEME.items()),
    ]  # fmt: skip


def start(api: str, port: int, log: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """Start the dashboard in a child process that ends with this one, even if this one is killed
    outright (``agentlat up`` runs it beside the collector); its output goes to ``log``."""
    from agentlat.shared.processes import dies_with_parent

    env = {**os.environ, ENV_API: api}
    return subprocess.Popen(  # started from the main thread (see dies_with_parent)
        streamlit_command(port), env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
        preexec_fn=dies_with_parent,
    )  # fmt: skip


@contextmanager
def beside(port: int, api: str, log_path: Path) -> Iterator[None]:
    """Run the dashboard on ``port`` (0: not at all) for as long as the block runs (``agentlat up``),
    its output in ``log_path``."""
    if not port:
        yield
        return
    from agentlat.shared.processes import stop

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = start(api, port, log)
        try:
            yield
        finally:
            stop(process)


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
