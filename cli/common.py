"""What every ``agentlat`` command shares: the stderr console, logging, the error exit and the
``--api`` option.

The commands' modules (``main``, ``alerts``, ``budget``, ``keys``, ``migrate``, ``dashboard``)
import from here and never from each other's helpers, so the imports inside ``cli/`` have no
cycle: ``main`` registers the others, nothing imports ``main``. Module import pulls in typer
and rich only, so ``agentlat --help`` stays fast.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from agentlat.api.client import ENV_API
from agentlat.errors import AgentlatError

console = Console(stderr=True)

ApiOpt = Annotated[str, typer.Option("--api", help=f"agentlat server URL (env {ENV_API}).", envvar=ENV_API)]


def setup_logging(level: str) -> None:
    """Rich's columns on a terminal; one plain line per record elsewhere (a file, a pipe, a container's log),
    which Rich would wrap at 80 columns."""
    from rich.logging import RichHandler

    handler: logging.Handler
    if console.is_terminal:
        handler, fmt = RichHandler(console=console, show_path=False, rich_tracebacks=False), "%(name)s: %(message)s"
    else:
        handler, fmt = logging.StreamHandler(sys.stderr), "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level.upper(), format=fmt, handlers=[handler], force=True)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per HTTP call is noise here


def fail(message: str) -> NoReturn:
    """Print ``message`` as an error on stderr and exit with status 2 (usage, file, store or connection errors)."""
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def run_or_exit(action: Callable[[], None]) -> None:
    """Run a command's action; an agentlat error becomes a red message and exit status 2."""
    try:
        action()
    except AgentlatError as exc:
        fail(str(exc))
