"""Auto-instrumentation of LLM client libraries, applied by ``agentlat.init()``.

Each provider module exposes ``instrument()`` and ``uninstrument()``, imports its client
library lazily, and is skipped when that library is not installed. One client that cannot be
instrumented (a version without a module we patch) costs only itself: the others are still
instrumented, and a warning says what is not timed.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
from typing import Any

log = logging.getLogger("agentlat")

# provider module in this package -> the client library it patches
PROVIDERS: dict[str, str] = {"openai": "openai", "anthropic": "anthropic", "google_genai": "google.genai"}


def _installed(library: str) -> bool:
    try:
        return importlib.util.find_spec(library) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


def instrument_installed_clients(**options: Any) -> list[str]:
    """Instrument every supported client library that is installed; return their names. Each
    provider's ``instrument`` gets the ``options`` it takes (``stream_usage``: openai)."""
    done = []
    for module, library in PROVIDERS.items():
        if not _installed(library):
            continue
        try:
            instrument = importlib.import_module(f"agentlat.instrument.{module}").instrument
            takes = inspect.signature(instrument).parameters
            instrument(**{name: value for name, value in options.items() if name in takes})
        except Exception as exc:  # a client version we cannot patch: the others still are
            log.warning(
                "agentlat: %s calls are not timed: cannot instrument it (%s: %s)", library, type(exc).__name__, exc
            )
            continue
        done.append(library)
    return done


def uninstrument_clients(libraries: list[str]) -> None:
    """Undo ``instrument_installed_clients`` for the libraries it returned."""
    for module, library in PROVIDERS.items():
        if library in libraries:
            importlib.import_module(f"agentlat.instrument.{module}").uninstrument()
