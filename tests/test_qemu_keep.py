"""`cisl qemu --keep DIR`: an owned output folder, written whole. It used to be mkdir'ed and written
into file by file: a user's node_00.log was overwritten, a model folder filled with logs, and two runs
(the second with --node 1) left one folder mixing both.

A stand-in for qemu-system-arm on PATH runs the nodes (no ARM toolchain or QEMU needed): what is
checked here is where the files go, not the emulation (tests/test_arm_build.py runs the real one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clirun import cisl
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.unit

FAKE_QEMU = """#!/bin/sh
# a stand-in for QEMU: says which image it ran; node 1 hangs while $FAKE_HANG is set
echo "$*" >> "$FAKE_CALLS"
case "$*" in *node_01*) if [ -n "$FAKE_HANG" ]; then echo "CISL 1 boot (fake qemu, hanging)"; touch "$FAKE_HANG"
  exec sleep 60; fi;; esac
echo "CISL 1 boot (fake qemu)"
"""


@pytest.fixture(scope="module")
def qemu_build(tmp_path_factory) -> Path:
    """A 2-node qemu-m4 build with placeholder images and a fake qemu-system-arm in ROOT/bin."""
    root = tmp_path_factory.mktemp("qemu-keep")
    model = make_model_dir(root / "m", config_for_tokens(8, 64), 2, 1.0, seed=9)
    p = cisl("compile", str(model), "--board", "qemu-m4", "-o", "b", cwd=root)
    assert p.returncode == 0, p.stderr
    for k in (0, 1):
        (root / "b" / f"node_{k:02d}" / "firmware.elf").write_bytes(b"not run: the fake QEMU only prints")
    (root / "bin").mkdir()
    (root / "bin" / "qemu-system-arm").write_text(FAKE_QEMU)
    (root / "bin" / "qemu-system-arm").chmod(0o755)
    return root / "b"


def _env(build: Path, tmp: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{build.parent / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "FAKE_CALLS": str(tmp / "calls"), **extra}


def qemu(build: Path, tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return cisl("qemu", str(build), "-n", "1", *args, cwd=tmp, env=_env(build, tmp, **env))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    for n in needles:
        assert n in lines[0], lines[0]


def _users_folder(d: Path) -> None:
    d.mkdir()
    (d / "node_00.log").write_text("my notes on node 0\n")  # a name cisl writes, but the user's file


def _model_folder(d: Path) -> None:
    d.mkdir()
    (d / ".cisl-output").write_text("cisl model\n")
    (d / "model.onnx").write_bytes(b"a model")


@pytest.mark.parametrize("make,needle", [
    (_users_folder, "k: exists and was not written by cisl"),
    (_model_folder, "k: is a cisl model folder, not a qemu-logs folder"),
    (lambda d: d.write_text("a file\n"), "k: is a file, not a folder"),
], ids=["a folder of the user's", "a cisl model folder", "a file"])
def test_keep_refuses_what_cisl_did_not_make_before_any_emulation(qemu_build: Path, tmp_path: Path, make,
                                                                   needle: str) -> None:
    make(tmp_path / "k")
    before = snapshot(tmp_path) if (tmp_path / "k").is_dir() else (tmp_path / "k").read_bytes()
    one_line_error(qemu(qemu_build, tmp_path, "--keep", "k"), needle, "--keep")
    assert (snapshot(tmp_path) if (tmp_path / "k").is_dir() else (tmp_path / "k").read_bytes()) == before
    assert not (tmp_path / "calls").exists()  # refused before QEMU ran


def test_keep_holds_one_run_and_an_interrupted_run_leaves_it_as_it_was(qemu_build: Path, tmp_path: Path) -> None:
    keep = tmp_path / "k"
    qemu(qemu_build, tmp_path, "--keep", "k")  # the fake nodes send nothing: FAILED (exit 1), a complete run
    assert sorted(snapshot(keep)) == [".cisl-output", "node_00.log", "node_00.transcript.bin", "node_01.log",
                                      "node_01.transcript.bin"]
    assert (keep / ".cisl-output").read_text() == "cisl qemu-logs\n"
    # a second run replaces the folder: node 0's files of the first run are not left to look like this run's
    p = qemu(qemu_build, tmp_path, "--keep", "k", "--node", "1")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert sorted(snapshot(keep)) == [".cisl-output", "node_01.log", "node_01.transcript.bin"]
    before = snapshot(keep)

    # node 1 hangs past --timeout: it fails, node 0 runs on, and the run's files are kept, the hanging
    # node's log so far included (they are what one debugs a hang with; they used to be thrown away)
    p = qemu(qemu_build, tmp_path, "--keep", "k", "--timeout", "1", FAKE_HANG=str(tmp_path / "hanging"))
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    rows = p.stdout.splitlines()[1:3]
    assert [r.split()[0] for r in rows] == ["0", "1"], p.stdout
    # the column sums the block lines (no rounds, no runtime between blocks): it says so
    assert p.stdout.splitlines()[0].split() == ["node", "exit", "messages", "block", "insns/inference", "stack",
                                                "(B)", "result"], p.stdout
    assert rows[1].endswith("FAILED: node 1 on QEMU did not finish within 1 s"), p.stdout
    assert sorted(snapshot(keep)) == [".cisl-output", "node_00.log", "node_00.transcript.bin", "node_01.log",
                                      "node_01.transcript.bin"] and not list(tmp_path.glob(".k.*"))
    assert "fake qemu, hanging" in (keep / "node_01.log").read_text()
    before = snapshot(keep)

    # Ctrl-C (to the terminal's process group) while node 1 runs
    hanging = tmp_path / "hanging2"
    proc = subprocess.Popen([sys.executable, "-m", "codegen.cli", "qemu", str(qemu_build), "-n", "1", "--keep", "k"],
                            cwd=tmp_path, env=_env(qemu_build, tmp_path, FAKE_HANG=str(hanging)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not hanging.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert hanging.exists(), proc.communicate(timeout=10)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in err, (proc.returncode, err)
    assert snapshot(keep) == before and not list(tmp_path.glob(".k.*"))
