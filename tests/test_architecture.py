"""Architecture: the `codegen` package has no import cycles, lazy imports included.

The module graph is built from the AST of every module, not by importing it, so that an import
inside a function (a "lazy" import) counts exactly like one at the top of the file: a lazy import
hides a cycle from Python, not from the design. Edges:

* `import a.b.c` -> `a.b.c`; `from a.b import c` -> `a.b.c` when `c` is a submodule, else `a.b`
  (the names come from the package's `__init__`); relative imports are resolved against the
  importing module's package; `from . import x` is an import of the submodule `x`.
* Importing `a.b.c` runs the `__init__` of every package above it, so it also implies an edge to
  `a.b` and `a`: except to the importer's own ancestor packages. A module inside package `p` runs
  only after `p`'s `__init__` has started, so importing `p` implicitly is a no-op for it; counting
  it would make every package whose `__init__` re-exports its submodules (radio, data, quant) a
  false cycle. An *explicit* `from p import name` of a name defined in `p`'s `__init__` is kept:
  that one needs the `__init__` to have finished.
* Imports under `if TYPE_CHECKING:` count too: a type-only import is still a dependency between two
  rooms, and a cycle should not disappear because one side of it is guarded.

Run `python tests/test_architecture.py` to print the graph's cycles (or "no import cycles").
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def package_modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `package` under `root` (a package is its `__init__`)."""
    mods = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path, package: str) -> dict[str, dict[str, list[int]]]:
    """importer -> {imported module: [line numbers]}, only modules inside `package`."""
    mods = package_modules(root, package)
    graph: dict[str, dict[str, list[int]]] = {m: {} for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        own_pkg = mod if is_pkg else mod.rpartition(".")[0]
        own_ancestors = set(_ancestors(mod))

        def add(target: str, line: int, explicit: bool) -> None:
            # the target itself, then the packages whose __init__ importing it runs
            if target in mods and target != mod and (explicit or target not in own_ancestors):
                graph[mod].setdefault(target, []).append(line)
            for anc in _ancestors(target):
                if anc in mods and anc != mod and anc not in own_ancestors:
                    graph[mod].setdefault(anc, []).append(line)

        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name, node.lineno, explicit=False)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = own_pkg.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                names = [a.name for a in node.names]
                subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in mods]
                # names that are not submodules come from base's __init__ (or base is a module)
                add(base, node.lineno, explicit=len(subs) < len(names))
                for sub in subs:
                    add(sub, node.lineno, explicit=True)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (a module never imports itself here)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(comps)


def a_cycle(graph: dict[str, dict[str, list[int]]], comp: list[str]) -> list[str]:
    """One shortest cycle through the component's first module, as a list of modules (first == last)."""
    start, members = comp[0], set(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{comp} is not strongly connected")


def describe_cycles(graph: dict[str, dict[str, list[int]]], root: Path) -> str:
    comps = strongly_connected(graph)
    if not comps:
        return f"no import cycles ({len(graph)} modules, {sum(len(e) for e in graph.values())} imports)"
    mods = package_modules(root, next(iter(graph)).split(".")[0])
    out = [f"{len(comps)} import cycle(s):"]
    for comp in comps:
        out.append(f"  component of {len(comp)}: {', '.join(comp)}")
        cycle = a_cycle(graph, comp)
        for a, b in zip(cycle, cycle[1:]):
            lines = ", ".join(str(n) for n in sorted(graph[a][b]))
            out.append(f"    {a} -> {b}  ({mods[a].relative_to(root)}:{lines})")
    return "\n".join(out)


def test_codegen_has_no_import_cycles():
    graph = import_graph(ROOT, "codegen")
    cycles = strongly_connected(graph)
    assert cycles == [], describe_cycles(graph, ROOT)


def test_the_graph_sees_lazy_relative_and_package_imports():
    """The real graph holds edges of every kind the check claims to see (an empty graph would pass)."""
    graph = import_graph(ROOT, "codegen")
    assert len(graph) > 50
    assert "codegen.compile" in graph["codegen.cli.model"]  # `from ..compile import ...` inside a function
    assert "codegen.vtestbed.bed" in graph["codegen.testbed.runners"]    # `from ..vtestbed import bed`
    assert "codegen.radio.channel" in graph["codegen.radio"]               # a package __init__ re-export
    assert "codegen.radio" in graph["codegen.vtestbed.medium"]                  # ..radio.channel runs radio/__init__


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


@pytest.mark.parametrize("files,cycle", [
    # a lazy import inside a function closes the cycle
    ({"a.py": "import pkg.b\n", "b.py": "def f():\n    from pkg import a\n"}, ["pkg.a", "pkg.b"]),
    # relative imports, two levels, and `from . import submodule`
    ({"a.py": "from .sub import c\n", "sub/__init__.py": "", "sub/c.py": "from .. import a\n"},
     ["pkg.a", "pkg.sub.c"]),
    # importing a submodule runs its package's __init__, which imports back
    ({"a.py": "from pkg.sub.c import x\n", "sub/__init__.py": "from pkg.a import y\n", "sub/c.py": "x = 1\n"},
     ["pkg.a", "pkg.sub"]),
    # a type-only import counts
    ({"a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
      "b.py": "from .a import A\n"}, ["pkg.a", "pkg.b"]),
    # a submodule that takes a name from its own package's __init__, which imports the submodule
    ({"__init__.py": "from .a import f\nX = 1\n", "a.py": "from pkg import X\n"}, ["pkg", "pkg.a"]),
])
def test_the_check_finds_cycles(tmp_path, files, cycle):
    _write(tmp_path / "pkg", {"__init__.py": "", **files})
    graph = import_graph(tmp_path, "pkg")
    comps = strongly_connected(graph)
    assert comps == [cycle], describe_cycles(graph, tmp_path)
    assert "import cycle(s)" in describe_cycles(graph, tmp_path)


def test_a_package_reexporting_its_submodules_is_no_cycle(tmp_path):
    """radio/__init__ imports radio.channel, which imports radio.topology: the parent __init__ is no edge."""
    _write(tmp_path / "pkg", {
        "__init__.py": "",
        "radio/__init__.py": "from .channel import Channel\nfrom .topology import Topology\n",
        "radio/channel.py": "from pkg.radio.topology import Topology\nfrom . import topology\n",
        "radio/topology.py": "import pkg.radio.trace\n",
        "radio/trace.py": "",
        "user.py": "from pkg.radio import Channel\nfrom pkg.radio.trace import x\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert strongly_connected(graph) == [], describe_cycles(graph, tmp_path)
    assert set(graph["pkg.user"]) == {"pkg.radio", "pkg.radio.trace"}
    assert set(graph["pkg.radio.channel"]) == {"pkg.radio.topology"}


if __name__ == "__main__":
    g = import_graph(ROOT, "codegen")
    print(describe_cycles(g, ROOT))
    sys.exit(1 if strongly_connected(g) else 0)
