"""Every package that codegen imports (at the top of a module or inside a function) is declared in
pyproject.toml: in [project] dependencies or in an extra of [project.optional-dependencies]."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules() -> dict[str, list[str]]:
    """Top-level module name -> the files (and lines) importing it, every import statement of codegen."""
    out: dict[str, list[str]] = {}
    for path in sorted((ROOT / "codegen").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                out.setdefault(name.split(".")[0], []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def declared() -> dict[str, str]:
    """Normalised distribution name -> where pyproject.toml declares it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    out = {}
    for where, reqs in [("dependencies", project["dependencies"])] + [
            (f"extra '{k}'", v) for k, v in project.get("optional-dependencies", {}).items()]:
        for req in reqs:
            out[_norm(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req).group(0))] = where
    return out


def test_every_imported_package_is_declared():
    dists = metadata.packages_distributions()  # import name -> distributions that provide it (installed)
    have = declared()
    missing = []
    for module, sites in sorted(imported_modules().items()):
        if module in sys.stdlib_module_names or module in ("codegen", "__future__"):
            continue
        providers = [_norm(d) for d in dists.get(module, [])]
        assert providers, f"{module} (imported at {sites[0]}) is not installed here, so its distribution is unknown"
        if not any(p in have for p in providers):
            missing.append(f"{module} ({'/'.join(providers)}, imported at {', '.join(sites[:2])})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_the_scan_sees_imports_inside_functions_and_renamed_distributions():
    mods = imported_modules()
    assert any(s.startswith("codegen/testbed/capture.py") for s in mods["serial"])  # `import serial` in a function
    assert "pyserial" in [_norm(d) for d in metadata.packages_distributions()["serial"]]
    assert "torch" in mods and declared()["torch"] == "extra 'train'"
