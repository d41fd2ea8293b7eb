"""The client instrumentation on the oldest openai and anthropic the project declares (pyproject's
``demo`` extra): tests/test_instrument_streams.py, every streaming surface with its exact figures, and
tests/test_instrument_stream_usage.py, the option that asks OpenAI chat streams for usage,
run by pytest in a virtualenv of those versions (``.venv-conformance/clients-oldest``, built by
tests/conformance/envs.py from tests/conformance/requirements-clients-oldest.txt; a failed build
fails this test). agentlat comes from this work tree. The project's own ``.venv`` holds the newest
clients, where the same file runs directly. A surface the oldest versions lack is skipped there,
with the reason ``tests/stream_surfaces.ABSENT`` gives, and this test holds the skips to that list."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conformance.envs import requirements, virtualenv
from tests.stream_surfaces import ABSENT, SURFACES

ROOT = Path(__file__).resolve().parents[1]
ENV = "clients-oldest"
SURFACE_TESTS = ("tests/test_instrument_streams.py", "tests/test_instrument_stream_usage.py")


def pinned(name: str) -> str:
    [line] = [line for line in requirements(ENV).read_text().splitlines() if line.startswith(f"{name}==")]
    return line.split("==")[1]


def test_the_pins_are_the_declared_minimums() -> None:
    demo = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["demo"]
    declared = dict(re.fullmatch(r"([\w-]+)>=([\d.]+)", spec).groups() for spec in demo)  # type: ignore[union-attr]
    for name in ("openai", "anthropic"):
        minimum = declared[name]
        assert pinned(name).split(".")[:2] == minimum.split(".")[:2], (
            f"{name}: pinned {pinned(name)}, declared {minimum}"
        )


def sdk_and_demo(site: Path) -> None:
    """agentlat from the work tree as pyproject maps it, with the rooms these tests import: the SDK
    (sdk/ is the package agentlat) and the demo's fake providers (demo/ is agentlat.demo)."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    package = site / "agentlat"
    package.mkdir(parents=True)
    for entry in (ROOT / package_dir["agentlat"]).iterdir():
        (package / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (package / "demo").symlink_to(ROOT / package_dir["agentlat.demo"], target_is_directory=True)


def test_every_streaming_surface_on_the_oldest_clients(tmp_path: Path) -> None:
    python = virtualenv(ENV)
    site = tmp_path / "site"
    sdk_and_demo(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    versions = subprocess.run(
        [str(python), "-c", "import openai, anthropic; print(openai.__version__, anthropic.__version__)"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    assert versions == [pinned("openai"), pinned("anthropic")]

    report = tmp_path / "report.xml"
    # no conftest (it needs the collector's packages) and no agentlat pytest plugin (its entry point
    # is the work tree's egg-info, naming packages this virtualenv does not have)
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:agentlat", "--noconftest"]
    done = subprocess.run(
        [*cmd, f"--junitxml={report}", *SURFACE_TESTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"{done.stdout[-8000:]}\n{done.stderr[-4000:]}"

    cases = ET.parse(report).getroot().iter("testcase")
    skipped: dict[str, str] = {}
    passed: set[str] = set()
    for case in cases:
        test = case.get("name", "")
        skip = case.find("skipped")
        if skip is None:
            passed.add(test)
        else:
            skipped[test] = skip.get("message", "")
    surface = re.compile(r"\[(.+)-(?:sync|async)\]$")
    passed = {test for test in passed if surface.search(test)}  # the surface tests (the others pass too)
    absent = ABSENT[f"openai {pinned('openai')}"]
    for test, message in skipped.items():
        path = surface.search(test).group(1).split("+")[0]  # type: ignore[union-attr]
        assert path in absent and f"not in openai {pinned('openai')}: {absent[path]}" in message, (test, message)
    ran = {surface.search(test).group(1) for test in passed}  # type: ignore[union-attr]
    missing = {s.id for s in SURFACES if s.path not in absent} - ran
    assert not missing, f"surfaces not tested on the oldest clients: {sorted(missing)}"
    assert {surface.search(t).group(1).split("+")[0] for t in skipped} == set(absent)  # type: ignore[union-attr]
