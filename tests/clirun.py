"""Test helper: run the `cisl` command line in a folder, as a user would (a fresh process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cisl(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return p
