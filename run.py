#!/usr/bin/env python3
"""The two commands: ``python3 run.py up`` brings agentlat up, ``python3 run.py test`` tests it.

Needs only Python 3.11+ and git. Creates ./.venv on first use and reinstalls when
pyproject.toml changes. Anything after the command is passed on (to ``agentlat up`` or to
pytest). ``test`` also installs Debian's chromium with apt-get when it is missing: the
dashboard's browser tests drive it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".agentlat-install"
EXTRAS = ".[server,demo,test]"
CHROMIUM = "/usr/bin/chromium"


def say(message: str) -> None:
    print(f"\033[1m==>\033[0m {message}", flush=True)


def ensure_environment() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - run.py may be started by an older python3
        sys.exit(f"agentlat needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not (BIN / "python").exists():
        say(f"creating a virtual environment in {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    say("installing agentlat and its dependencies (first run takes a minute)")
    pip = [str(BIN / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "install", "--quiet", "--editable", EXTRAS], check=True, cwd=ROOT)
    STAMP.write_text(wanted)


def ensure_chromium() -> None:
    """The dashboard's browser tests drive Debian's chromium: install it when missing (CI starts fresh)."""
    if Path(CHROMIUM).exists():
        return
    if shutil.which("apt-get") is None:
        say(f"{CHROMIUM} is missing and apt-get is unavailable: the browser tests will be skipped")
        return
    say("installing Debian's chromium for the dashboard's browser tests (apt-get install chromium)")
    sudo = [] if getattr(os, "geteuid", lambda: 0)() == 0 else ["sudo"]
    quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=quiet)
    subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "chromium"], check=True, env=quiet)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("up", "test"):
        print(__doc__.strip())
        print("\nusage: python3 run.py up [agentlat up options] | test [pytest options]")
        return 2
    command, rest = argv[0], argv[1:]
    ensure_environment()
    if command == "up":
        # Become `agentlat up`: a signal for this process (a service manager's, an IDE's stop
        # button) then reaches it, and it stops everything it started.
        os.chdir(ROOT)
        os.execv(BIN / "agentlat", [str(BIN / "agentlat"), "up", *rest])
    ensure_chromium()
    say("running the test suite")
    return subprocess.call([str(BIN / "python"), "-m", "pytest", *rest], cwd=ROOT)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
    except subprocess.CalledProcessError as exc:
        sys.exit(f"setup step failed ({' '.join(map(str, exc.cmd))}); see the output above")
