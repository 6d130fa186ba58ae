"""Locate the project's non-Python resources (templates, firmware, boards).

In a source checkout (editable install) they live at the repository root; in a wheel they are
packaged under ``codegen/_resources``.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """Return the directory ``name`` (``templates``, ``firmware`` or ``boards``)."""
    for candidate in (_PKG.parent / name, _PKG / "_resources" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"cisl installation is incomplete: resource folder '{name}' not found")
