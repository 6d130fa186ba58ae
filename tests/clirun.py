"""Test helper: run the `cisl` command line in a folder, as a user would (a fresh process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cisl(*args: str, cwd: Path, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


def without_torch(folder: Path) -> dict[str, str]:
    """An environment in which `import torch` fails: what must be checked before torch is imported
    (it takes seconds) still gives its answer there."""
    fake = Path(folder) / "torch-hidden" / "torch"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text('raise ImportError("torch is hidden by the test")\n')
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(fake.parent), os.environ.get("PYTHONPATH")]))}


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
