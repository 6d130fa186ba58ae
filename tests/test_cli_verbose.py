"""`cisl -v`: every external command as a line that reruns it; west-style short options."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from codegen.cli import main
from codegen.toolrun import command_line
from models import config_for_tokens, make_model_dir


def cisl(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=600)


@pytest.mark.unit
def test_command_line_quotes_for_the_shell(tmp_path):
    odd = tmp_path / "a dir" / "it's.c"
    line = command_line(["gcc", "-DX=\"1 2\"", "-c", odd], cwd=tmp_path / "b c")
    assert line.startswith(f"(cd {shlex.quote(str(tmp_path / 'b c'))} && gcc ")
    inner = line[line.index("&& ") + 3:-1]
    assert shlex.split(inner) == ["gcc", "-DX=\"1 2\"", "-c", str(odd)]
    assert command_line(["true"]) == "true"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("v")
    model = make_model_dir(root / "m", config_for_tokens(8, 64), devices=2, keep_ratio=1.0)
    p = cisl("compile", str(model), "-o", "b", "-b", "sim", "-q", cwd=root)
    assert p.returncode == 0, p.stderr
    return root


@pytest.mark.hostc
def test_verbose_build_prints_compiler_lines_that_rerun(compiled):
    env = {"CISL_CACHE_DIR": ""}  # no object cache: every source is compiled, so every line shows
    quiet = cisl("build", "-d", "b", "--no-board-time", "-q", cwd=compiled, env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert "$ " not in quiet.stderr, quiet.stderr

    p = cisl("-v", "build", "b", "--no-board-time", "-q", cwd=compiled, env=env)
    assert p.returncode == 0, p.stderr
    lines = [ln[2:] for ln in p.stderr.splitlines() if ln.startswith("$ ")]
    # where it ran: the folder cisl was started in, or the build's folder the command ran in
    assert lines and all(ln.startswith(f"(cd {shlex.quote(str(compiled))}") and ln.endswith(")")
                         for ln in lines), p.stderr
    cmds = [shlex.split(ln[ln.index("&& ") + 3:-1]) for ln in lines]
    compiles = [c for c in cmds if c[0] == "gcc" and "-c" in c]
    links = [c for c in cmds if c[0] == "gcc" and "-c" not in c and any(a.endswith("firmware.elf") for a in c)]
    assert any(a.endswith("cisl_node.c") for c in compiles for a in c), p.stderr
    assert len(links) == 2, p.stderr  # one link per node

    # the logged line is the command: rerun by hand from another folder, it makes the same object again
    k = next(i for i, c in enumerate(cmds) if c in compiles and any(a.endswith("node_00/cisl_node.c") for a in c))
    obj = Path(lines[k][len("(cd "):lines[k].index(" && ")]) / cmds[k][cmds[k].index("-o") + 1]
    obj.unlink()
    r = subprocess.run(["bash", "-c", lines[k]], cwd="/", capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert obj.is_file()

    # -v after the command name works too
    p = cisl("build", "b", "--no-board-time", "-q", "--verbose", cwd=compiled, env=env)
    assert p.returncode == 0 and any(" && gcc " in ln for ln in p.stderr.splitlines()), p.stderr


@pytest.mark.unit
def test_build_dir_given_twice_is_one_line(tmp_path):
    p = cisl("sim", "a", "-d", "b", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "error: the build folder is given twice (a and -d b); give it once (see `cisl sim --help`)"]


@pytest.mark.unit
def test_short_build_dir_and_board_options_reach_the_command(tmp_path):
    # -d names the folder exactly like the positional argument (the error names it)
    for argv in (["build", "-d", "nowhere"], ["build", "nowhere"], ["qemu", "-d", "nowhere"],
                 ["estimate", "-d", "nowhere"], ["sim", "-d", "nowhere"]):
        p = cisl(*argv, cwd=tmp_path)
        assert p.returncode == 2 and "nowhere" in p.stderr and "Traceback" not in p.stderr, (argv, p.stderr)
    p = cisl("compile", "m.onnx", "-b", "moon", cwd=tmp_path)
    assert p.returncode == 2 and "m.onnx" in p.stderr  # the model is checked first
    p = cisl("testbed", "-v", "sim", "--nodes", "2", "-b", "qemu-m4", "-o", "tb.toml", cwd=tmp_path)
    assert p.returncode == 0, p.stderr  # -v after a subcommand group's name too
    assert 'board = "qemu-m4"' in (tmp_path / "tb.toml").read_text()


@pytest.mark.unit
def test_flash_runner_override(tmp_path):
    from codegen.errors import UserError
    from codegen.testbed.config import load_testbed, with_runner

    (tmp_path / "tb.toml").write_text('[defaults]\nboard = "nrf52840dk"\nrunner = "nrfutil"\n'
                                      '[[node]]\nid = 0\nprobe = "683000001"\nport = "/dev/ttyACM0"\n')
    tb = load_testbed(tmp_path / "tb.toml")
    assert [n.runner for n in with_runner(tb, "pyocd").nodes] == ["pyocd"]
    assert with_runner(tb, None) is tb
    r = CliRunner().invoke(main, ["testbed", "sim", "--nodes", "1", "-o", str(tmp_path / "sim.toml")])
    assert r.exit_code == 0, r.output
    with pytest.raises(UserError, match="virtual testbed"):
        with_runner(load_testbed(tmp_path / "sim.toml"), "nrfjprog")
    r = CliRunner().invoke(main, ["flash", "-d", str(tmp_path), "--testbed", str(tmp_path / "sim.toml"),
                                  "-r", "pyocd"])
    assert r.exit_code == 2 and "drop --runner" in r.output, r.output
