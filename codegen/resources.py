"""Locate the project's non-Python resources (templates, firmware, boards).

In a source checkout (editable install) they live at the repository root; in a wheel they are
packaged under ``codegen/_resources``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """Return the directory ``name`` (``templates``, ``firmware`` or ``boards``)."""
    for candidate in (_PKG.parent / name, _PKG / "_resources" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"cisl installation is incomplete: resource folder '{name}' not found")


# the firmware the generated C is compiled with (its API, its data layouts); nnref is CMSIS-NN's API
RUNTIME_PARTS = ("runtime", "somegather", "mixer")


@lru_cache(maxsize=1)
def runtime_fingerprint() -> str:
    """sha256 (16 hex digits) of the firmware sources the generated C is built against: a build folder
    compiled by another cisl may call functions this one no longer has, or lack ones it now needs."""
    h = hashlib.sha256()
    fw = resource_dir("firmware")
    for part in RUNTIME_PARTS:
        for f in sorted((fw / part).glob("*.[ch]")):
            h.update(f"{part}/{f.name}\0".encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]
