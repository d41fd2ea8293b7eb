"""Demo helpers: a local fake model server for examples and tests (``agentlat.demo.fake_llm``).

Not imported by ``import agentlat``; stdlib only. Names load on first use, so that
``python -m agentlat.demo.fake_llm`` runs the module once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentlat.demo.fake_llm import FakeLLM, Received, Scenario

__all__ = ["FakeLLM", "Received", "Scenario"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from agentlat.demo import fake_llm

        return getattr(fake_llm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
