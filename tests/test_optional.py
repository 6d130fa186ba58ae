"""Optional packages: without torch, `cisl demo` and `cisl train` end with one line naming the extra
and its install command (exit code 2), not a traceback; the other commands never needed it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codegen.errors import UserError
from codegen.optional import extra_requirements, require

pytestmark = pytest.mark.unit

# A fresh interpreter in which `import torch` fails as on a machine without it, then the CLI.
BLOCK_TORCH = textwrap.dedent("""
    import sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoTorch())
    from codegen.cli import main
    main(sys.argv[1:], prog_name="cisl")
""")


def cisl_without_torch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def one_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def test_the_train_extra_is_declared_with_the_torch_pin():
    assert extra_requirements("train") == ["torch==2.13.0"]


@pytest.mark.parametrize("command", [["demo", "-o", "out"], ["train", "-o", "model"]])
def test_commands_without_torch_name_the_extra(tmp_path, command):
    line = one_line(cisl_without_torch(*command, cwd=tmp_path))
    assert line.startswith(f"error: cisl {command[0]} needs torch, which is not installed"), line
    assert "'train' extra" in line and 'pip install "torch==2.13.0"' in line, line
    assert 'pip install -e ".[train]"' in line, line
    assert not (tmp_path / command[2]).exists()  # nothing half-made


def test_compile_side_commands_still_work_without_torch(tmp_path):
    p = cisl_without_torch("radio", "loss", "--topology", "line", "--nodes", "3", "--exchanges", "5", cwd=tmp_path)
    assert p.returncode == 0, p.stderr


def test_require_returns_the_module_or_one_line():
    assert require("json", feature="x", extra="train").dumps([]) == "[]"
    with pytest.raises(UserError) as e:
        require("cisl_no_such_module_here", feature="cisl frob", extra="train")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("cisl frob needs cisl_no_such_module_here, which is not installed")
    assert 'pip install "torch==2.13.0"' in msg  # the extra's own requirements, not the module's name
