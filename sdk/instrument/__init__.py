"""Auto-instrumentation of LLM client libraries, applied by ``agentlat.init()``.

Each provider module exposes ``instrument()`` and ``uninstrument()``, imports its client
library lazily, and is skipped when that library is not installed.
"""

from __future__ import annotations

import importlib
import importlib.util

# provider module in this package -> the client library it patches
PROVIDERS: dict[str, str] = {"openai": "openai", "anthropic": "anthropic"}


def instrument_installed_clients() -> list[str]:
    """Instrument every supported client library that is installed; return their names."""
    done = []
    for module, library in PROVIDERS.items():
        if importlib.util.find_spec(library) is None:
            continue
        importlib.import_module(f"agentlat.instrument.{module}").instrument()
        done.append(library)
    return done


def uninstrument_clients(libraries: list[str]) -> None:
    """Undo ``instrument_installed_clients`` for the libraries it returned."""
    for module, library in PROVIDERS.items():
        if library in libraries:
            importlib.import_module(f"agentlat.instrument.{module}").uninstrument()
