"""Small real file systems for fault tests: a tmpfs the test mounts (it runs as root here).

Where mounting is not allowed the test is skipped with the reason; CI on this project's
machines runs as root, so there it always runs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MIB = 1024 * 1024


@contextmanager
def small_filesystem(mount_point: Path, size_mib: int) -> Iterator[Path]:
    """A ``size_mib`` tmpfs mounted at ``mount_point`` for the duration of the block."""
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount_point)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip()}); fault tests need root")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def resize(mount_point: Path, size_mib: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_mib}m", str(mount_point)], check=True)


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def fill(path: Path, leave_bytes: int) -> Path:
    """Take all but ``leave_bytes`` of the file system at ``path`` with one file; return it."""
    filler = path / "filler"
    size = max(free_bytes(path) - leave_bytes, 0)
    with open(filler, "ab") as f:
        os.posix_fallocate(f.fileno(), 0, (filler.stat().st_size if filler.exists() else 0) + size)
    return filler
