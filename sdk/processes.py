"""Worker processes that end with their parent: one killed outright (SIGKILL) cleans nothing up."""

from __future__ import annotations

import os
import threading
import time


def exit_with_parent(parent: int) -> None:
    """Watch, from a daemon thread of this worker, for ``parent`` to be gone; then end the worker at once."""
    threading.Thread(target=_wait_for_parent, args=(parent,), name="agentlat-parent-watch", daemon=True).start()


def _wait_for_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(0)
