"""The SDK never breaks the agent it observes.

An internal error is logged once per place ("your code still runs, with less telemetry")
and swallowed. Under pytest, or with AGENTLAT_STRICT=1, it is raised instead, so our own
tests and users' tests fail loudly.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger("agentlat")
_reported: set[str] = set()


def strict() -> bool:
    flag = os.environ.get("AGENTLAT_STRICT")
    if flag is not None:
        return flag not in ("", "0", "false")
    return "pytest" in sys.modules


def report(where: str, exc: BaseException) -> None:
    if strict():
        raise exc
    if where not in _reported:
        _reported.add(where)
        log.warning("agentlat: internal error in %s (%r); your code still runs, with less telemetry", where, exc)


def guarded(fn: F) -> F:
    """Run ``fn``; on an internal error, report it and return None."""
    where = fn.__qualname__

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            report(where, exc)
            return None

    return wrapper  # type: ignore[return-value]
