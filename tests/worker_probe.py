"""Run by tests inside a spawned worker process: what has that process imported?

It imports nothing but ``sys``, so sending it to a worker does not change the answer."""

from __future__ import annotations

import sys


def imported_modules() -> list[str]:
    """Names of the modules imported; a name marked missing (``None``) is not one."""
    return sorted(name for name, module in sys.modules.items() if module is not None)


def gc_thresholds() -> tuple[int, int, int]:
    """The garbage collector's thresholds in this process."""
    import gc  # here, not at the top: the module itself must import nothing but sys (see above)

    return gc.get_threshold()
