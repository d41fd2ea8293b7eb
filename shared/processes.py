"""Processes that end with the process that started them, however it ends.

A worker or child killed outright (SIGKILL) cleans nothing up, so each child watches for its
parent itself: ``exit_with_parent`` from inside the child (worker processes agentlat runs), or
``dies_with_parent`` as the ``preexec_fn`` of a child agentlat cannot change (Streamlit).
``stop_on_signals`` turns SIGTERM and SIGHUP into the same orderly exit as Ctrl-C, so a
service manager, ``docker stop`` or a closed terminal ends everything a command started.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

PARENT_ENV = "AGENTLAT_EXIT_WITH_PARENT"  # a child started with it set to a pid ends when that process does
_PR_SET_PDEATHSIG = 1


def exit_with_parent(parent: int) -> None:
    """Watch, from a daemon thread of this worker, for ``parent`` to be gone; then end the worker at once."""
    threading.Thread(target=_wait_for_parent, args=(parent,), name="agentlat-parent-watch", daemon=True).start()


def exit_with_parent_from_env() -> None:
    """``exit_with_parent`` for the pid in ``AGENTLAT_EXIT_WITH_PARENT``, when the starter set it."""
    if (parent := os.environ.pop(PARENT_ENV, "")).isdigit():
        exit_with_parent(int(parent))


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child that should end with this process (``exit_with_parent_from_env``)."""
    return {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}


def stop(process: subprocess.Popen[bytes], grace_seconds: float = 10.0) -> None:
    """End a child: SIGTERM, then SIGKILL if it has not exited within ``grace_seconds``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def dies_with_parent() -> None:
    """``preexec_fn``: the kernel sends the child SIGTERM when the thread that started it ends.
    Start such children from the main thread, which lives as long as the process."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_on_signals() -> None:
    """SIGTERM raises ``SystemExit`` in the main thread, so ``finally`` blocks and context managers
    stop what the command started; SIGHUP (a closed terminal) counts as SIGTERM. While uvicorn
    serves, its own SIGTERM handler shuts the server down first, then re-raises SIGTERM here."""
    signal.signal(signal.SIGTERM, _exit_on)
    signal.signal(signal.SIGHUP, _as_sigterm)


def _exit_on(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _as_sigterm(signum: int, frame: object) -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def _wait_for_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(0)
