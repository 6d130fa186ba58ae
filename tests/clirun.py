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


def vouch_for(build_dir: Path, node: int) -> bytes:
    """Record node's current image in build.json as if `cisl build` had made it (tests of broken or
    crashing images); returns build.json's previous bytes."""
    import json

    from codegen.fsutil import sha256_file

    path = Path(build_dir) / "build.json"
    original = path.read_bytes()
    doc = json.loads(original)
    for n in doc["nodes"]:
        if n["node"] == node:
            n["sha256"] = sha256_file(Path(build_dir) / f"node_{node:02d}" / "firmware.elf")
    path.write_text(json.dumps(doc))
    return original
