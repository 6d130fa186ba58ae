"""Optional packages: import one for a command, or say in one line which extra installs it.

``pyproject.toml``'s ``[project.optional-dependencies]`` lists the extras; a command that needs one
calls :func:`require` before it imports the package, so a machine without it gets a UserError
(exit code 2) naming the install command instead of a traceback from deep inside the import.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from types import ModuleType

from .errors import UserError

_CHECKOUT = Path(__file__).resolve().parent.parent  # the source checkout, when cisl runs from one


def extra_requirements(extra: str) -> list[str]:
    """The requirement strings of an extra (e.g. ``["torch==2.13.0"]``): from the checkout's
    pyproject.toml when running from a checkout, else from the installed distribution's metadata."""
    pyproject = _CHECKOUT / "pyproject.toml"
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
            if project.get("name") == "cisl":
                return list(project.get("optional-dependencies", {}).get(extra, []))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            pass
    from importlib import metadata

    try:
        requires = metadata.requires("cisl") or []
    except metadata.PackageNotFoundError:
        return []
    marker = re.compile(r"""extra\s*==\s*["']""" + re.escape(extra) + r"""["']""")
    return [r.split(";")[0].strip() for r in requires if ";" in r and marker.search(r.split(";", 1)[1])]


def install_command(extra: str, fallback: str) -> str:
    """How to install an extra: its pinned requirements with pip, and the checkout's own form."""
    reqs = extra_requirements(extra) or [fallback]
    cmd = "pip install " + " ".join(f'"{r}"' for r in reqs)
    if (_CHECKOUT / "pyproject.toml").is_file():
        cmd += f' (or, from the cisl checkout {_CHECKOUT}: pip install -e ".[{extra}]")'
    return cmd


def require(module: str, feature: str, extra: str) -> ModuleType:
    """Import ``module`` (an optional dependency of ``feature``) or raise a one-line UserError that
    names the extra and the exact install command."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        why = "is not installed" if getattr(e, "name", None) == top else f"cannot be imported ({e})"
        raise UserError(f"{feature} needs {top}, which {why}; install cisl's '{extra}' extra: "
                        f"{install_command(extra, top)}") from None
