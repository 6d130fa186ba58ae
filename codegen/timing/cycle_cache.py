"""The cycle model's results kept next to the image they were measured on.

`cisl build` of a virtual-testbed plan runs every node image on the cycle model for its board time
table, and `cisl estimate` and `cisl modes` then ran the same images again (seconds per node). A result is now stored in the image's folder (``cycles.json``) under a key of everything it
depends on: the image's and the node source's bytes, the plan, the inputs, the memory model, the
run's arguments and the cisl code itself. Anything changed is a different key, so a result is never
used for another image, plan or model version (a stale result is never reported); a folder cisl
cannot write to just means no reuse.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..fsutil import write_text_atomic

CACHE_FILE = "cycles.json"
FORMAT = "cisl-cycles"
KEEP = 8  # results per image (modes, calibrations); the oldest go first


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """Of every Python source of cisl (the cycle model, the int8 reference the node is checked
    against, the op tables that fold the counts), of the cycle model's C hooks and of the emulator
    it runs on."""
    from importlib.metadata import PackageNotFoundError, version

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for emulator in ("unicorn", "capstone"):  # the instructions the model counts come from these
        with contextlib.suppress(PackageNotFoundError):
            h.update(f"{emulator} {version(emulator)}\0".encode())
    for path in sorted([*root.rglob("*.py"), root / "timing" / "cycle_hooks.c"]):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def key_of(*parts: Any) -> str:
    """One key for ``parts`` (JSON-able values and bytes, hashed in order) and the code digest."""
    h = hashlib.sha256(code_digest().encode())
    for p in parts:
        h.update(b"\0" + (p if isinstance(p, bytes) else json.dumps(p, sort_keys=True, default=str).encode()))
    return h.hexdigest()


def _read(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("results"), dict):
        return {}
    return doc["results"]


def lookup(image_dir: Path, key: str) -> Any | None:
    return _read(Path(image_dir) / CACHE_FILE).get(key)


def store(image_dir: Path, key: str, result: Any) -> None:
    path = Path(image_dir) / CACHE_FILE
    results = _read(path)
    results.pop(key, None)
    results[key] = result
    results = dict(list(results.items())[-KEEP:])
    with contextlib.suppress(UserError, OSError):  # a read-only build: no reuse, nothing else changes
        # noted by the caller, with the other nodes' (compute_build: parallel workers write them)
        write_text_atomic(path, json.dumps({"format": FORMAT, "results": results}), note=False)
