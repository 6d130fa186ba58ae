"""What a user can take home from `cisl build`: every image folder has a Makefile (and
compile_commands.json) that links the very same bytes, images do not depend on the folder they were
built in, the CMSIS-NN commit is recorded, and a node is a library that other firmware can call.

Sim builds need gcc and make; ARM builds arm-none-eabi-gcc (marker arm).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clirun import cisl, ok
from codegen.kernel_library import cmsis_nn_commit
from codegen.fsutil import sha256_file
from codegen.plan.io import load_plan
from codegen.transcript import reference
from codegen.resources import resource_dir
from models import config_for_tokens, make_model_dir

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
HAVE_MAKE = shutil.which("make") is not None and shutil.which("gcc") is not None
pytestmark = pytest.mark.skipif(not HAVE_MAKE, reason="make or gcc not installed")


def _compiled(tmp: Path, board: str, devices: int = 3) -> Path:
    model = make_model_dir(tmp / "m", config_for_tokens(16, 32), devices, 0.5, seed=3)
    ok(cisl("compile", str(model), "-o", "b", "--board", board, cwd=tmp))
    return tmp / "b"


def _build(build_dir: Path, *args: str, cache: bool = True) -> dict:
    env = dict(os.environ)
    if not cache:  # every object compiled here, none copied from another build
        env["CISL_CACHE_DIR"] = ""
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "build", str(build_dir), *args], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, (p.stdout, p.stderr)
    name = "build.json" if "--board" not in args else f"build-{args[args.index('--board') + 1]}.json"
    return json.loads((build_dir / name).read_text())


def _make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run(["make", "-C", str(folder), "-j2", *args], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    return p


def _make_gives_same_image(build_dir: Path, summary: dict, outputs: tuple[str, ...]) -> None:
    for n in summary["nodes"]:
        elf = build_dir / n["image"]
        folder = elf.parent
        want = {o: (folder / o).read_bytes() for o in outputs}
        assert sha256_file(elf) == n["sha256"]
        for o in outputs:
            (folder / o).unlink()
        _make(folder)
        for o in outputs:
            assert (folder / o).read_bytes() == want[o], f"node {n['node']}: make's {o} differs from cisl build's"
        assert sha256_file(elf) == n["sha256"]


def _no_paths(elf: Path, *dirs: Path) -> None:
    data = elf.read_bytes()
    for d in dirs:
        assert str(d).encode() not in data, f"{elf} names {d}"


def test_make_builds_the_sim_images_byte_for_byte(tmp_path):
    b = _compiled(tmp_path, "sim")
    summary = _build(b, "--no-board-time")
    _make_gives_same_image(b, summary, ("firmware.elf",))
    # compile_commands.json: the commands of this node's sources, each an existing file
    cmds = json.loads((b / "node_01" / "compile_commands.json").read_text())
    files = {Path(c["file"]).name for c in cmds}
    assert {"cisl_node.c", "cisl_weights.c", "cisl_mixer.c", "cisl_runtime.c", "main.c"} <= files
    for c in cmds:
        assert Path(c["file"]).is_file() and c["arguments"][0] == "gcc"
        if "/kernels/" not in c["output"]:  # cisl's own code; upstream CMSIS-NN builds with its own flags
            assert "-Werror" in c["arguments"], c["file"]
    # a second make has nothing to do; `make clean` removes only the objects
    assert "Nothing to be done" in _make(b / "node_00").stdout or "is up to date" in _make(b / "node_00").stdout
    _make(b / "node_00", "clean")
    assert not (b / "node_00" / "obj").exists() and (b / "node_00" / "firmware.elf").is_file()


def test_a_copied_node_folder_builds_the_same_image(tmp_path):
    """The user's case: copy node_NN/ out of the build folder (and delete the build), make it there."""
    b = _compiled(tmp_path, "sim", devices=2)
    summary = _build(b, "--no-board-time")
    home = tmp_path / "elsewhere" / "my_node"  # make does not take paths with spaces
    shutil.copytree(b / "node_01", home)
    shutil.rmtree(b)
    (home / "firmware.elf").unlink()
    _make(home)
    assert sha256_file(home / "firmware.elf") == summary["nodes"][1]["sha256"]
    _no_paths(home / "firmware.elf", home, tmp_path, resource_dir("firmware").absolute())


def test_one_build_in_two_folders_gives_the_same_sim_images(tmp_path):
    b = _compiled(tmp_path / "one", "sim")
    other = tmp_path / "two" / "much" / "deeper" / "b"
    shutil.copytree(b, other)
    first = _build(b, "--no-board-time", cache=False)
    second = _build(other, "--no-board-time", cache=False)
    assert [n["sha256"] for n in first["nodes"]] == [n["sha256"] for n in second["nodes"]]
    for n in first["nodes"]:
        _no_paths(b / n["image"], tmp_path, resource_dir("firmware").absolute(), resource_dir("boards").absolute())


@pytest.mark.arm
@pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")
def test_make_and_two_folders_give_the_same_arm_images(tmp_path):
    b = _compiled(tmp_path / "one", "nrf52840dk")
    other = tmp_path / "two" / "b"
    shutil.copytree(b, other)
    first = _build(b, cache=False)
    second = _build(other, cache=False)
    assert [n["sha256"] for n in first["nodes"]] == [n["sha256"] for n in second["nodes"]]
    _make_gives_same_image(b, first, ("firmware.elf", "firmware.hex"))
    for n in first["nodes"]:
        _no_paths(b / n["image"], tmp_path, resource_dir("firmware").absolute(), resource_dir("boards").absolute())
    # images for another board live in a subfolder; its Makefile takes the sources from ..
    q = _build(b, "--board", "qemu-m4")
    assert q["board"] == "qemu-m4" and q["nodes"][0]["image"] == "node_00/qemu-m4/firmware.elf"
    _make_gives_same_image(b, q, ("firmware.elf",))


def test_cmsis_nn_commit_of_a_checkout(tmp_path):
    assert cmsis_nn_commit(tmp_path) == "unknown"  # not a git checkout
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (tmp_path / "f").write_text("x")
    for cmd in (["init", "-q"], ["add", "f"], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(tmp_path), *cmd], check=True, env=env, capture_output=True)
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert cmsis_nn_commit(tmp_path) == head.strip()


@pytest.mark.upstream
@pytest.mark.skipif(not os.environ.get("CMSIS_NN_ROOT"), reason="CMSIS_NN_ROOT not set")
def test_cmsis_nn_commit_in_build_json_and_boot_line(tmp_path):
    from codegen.vtestbed.run import run_sim

    root = os.environ["CMSIS_NN_ROOT"]
    b = _compiled(tmp_path, "sim", devices=2)
    summary = _build(b, "--no-board-time")
    want = cmsis_nn_commit(Path(root))
    assert summary["kernels"] == "cmsis-nn" and summary["kernels_commit"] == want
    r = run_sim(b, np.load(tmp_path / "m" / "test_windows.npy")[:1])
    assert r.ok, r.first_difference or r.problems
    boots = [rec for rec in r.records if rec.event == "boot"]
    assert len(boots) == 2 and all(rec.fields["cmsis_nn"] == want[:12] for rec in boots)
    _make_gives_same_image(b, summary, ("firmware.elf",))
    for n in summary["nodes"]:
        _no_paths(b / n["image"], Path(root).absolute(), tmp_path)


USER_MAIN = r"""
/* A user's firmware: its own board layer and loop around the node library. */
#include <stdio.h>
#include <string.h>

#include "cisl_board.h"
#include "cisl_node.h"
#include "cisl_transport.h"

const char *cisl_board_name(void) { return "user"; }
uint32_t cisl_board_time_us(void) { return 0u; }
uint32_t cisl_board_cycles(void) { return 0u; }
void cisl_board_write(const char *text, uint32_t n) { (void)fwrite(text, 1, n, stderr); }
int cisl_transport_round(uint16_t sg, uint32_t inference, const uint8_t *msg, uint32_t len, uint8_t dest,
                         cisl_rx_fn on_rx, void *ctx)
{
    (void)sg; (void)inference; (void)msg; (void)len; (void)dest; (void)on_rx; (void)ctx;
    return 0; /* one node: nobody to talk to */
}

int main(void)
{
    static int8_t in[CISL_INPUT_LEN], out[CISL_OUTPUT_LEN];
    if (cisl_node_init() != 0 || cisl_node.input_len != CISL_INPUT_LEN) {
        return 1;
    }
    while (fread(in, 1, sizeof in, stdin) == sizeof in) {
        memset(out, 0x55, sizeof out);
        uint32_t crc = 0;
        if (cisl_node_infer(in, out, &crc) != 0) {
            return 1;
        }
        (void)fwrite(out, 1, sizeof out, stdout);
    }
    return 0;
}
"""


def test_the_node_is_a_library_other_firmware_calls(tmp_path):
    """A one-node plan linked into the user's own program, without any cisl board: its forecasts are
    the numpy int8 reference's."""
    b = _compiled(tmp_path, "sim", devices=1)
    _build(b, "--no-board-time")
    nd = b / "node_00"
    cmds = json.loads((nd / "compile_commands.json").read_text())
    (tmp_path / "user.c").write_text(USER_MAIN)
    # the node and the runtime library with their own commands, less the sim board's macro (its op
    # hook into the testbed's clock); not the cisl board (boards/sim) and not its loop (cisl_run.c)
    objs = []
    for i, c in enumerate(cmds):
        if "/boards/" in c["file"] or c["file"].endswith(("cisl_run.c", "cisl_mixer_transport.c", "/mixer.c")):
            continue
        args = [a for a in c["arguments"] if a != "-DCISL_BOARD_OP_HOOK"]
        args[args.index("-o") + 1] = str(tmp_path / f"{i}.o")
        p = subprocess.run(args, capture_output=True, text=True, cwd=c["directory"])
        assert p.returncode == 0, p.stderr
        objs.append(str(tmp_path / f"{i}.o"))
    node_cmd = next(c for c in cmds if Path(c["file"]).name == "cisl_node.c")["arguments"]
    flags = [a for a in node_cmd[1:node_cmd.index("-c")] if a != "-DCISL_BOARD_OP_HOOK"]
    p = subprocess.run(["gcc", *flags, str(tmp_path / "user.c"), *objs, "-o", str(tmp_path / "user")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    plan = load_plan(b)
    x = np.load(tmp_path / "m" / "test_windows.npy")[:3]
    xq = plan.quantize_input(x.astype(np.float64)).astype(np.int8)
    r = subprocess.run([str(tmp_path / "user")], input=xq.tobytes(), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    got = np.frombuffer(r.stdout, dtype=np.int8).reshape(len(xq), -1)
    ref = reference(plan, xq)
    for i in range(len(xq)):
        assert got[i].tobytes() == np.asarray(ref.output[i]).astype(np.int8).tobytes(), f"inference {i}"
    # the node reported its inference lines through the user's cisl_board_write
    assert r.stderr.decode().count(" output inf=") >= len(xq)


def test_make_refuses_a_folder_whose_path_holds_a_space(tmp_path):
    """make splits paths at spaces: in `My Project/build/node_00`, `make clean` ran `rm -rf .../My` and
    removed the user's folder above the build (audit M). The Makefile now refuses before any rule."""
    home = tmp_path / "home" / "me"
    (home / "My Project").mkdir(parents=True)
    (home / "thesis.txt").write_text("mine\n")
    model = make_model_dir(tmp_path / "m", config_for_tokens(16, 32), 2, 0.5, seed=3)
    ok(cisl("compile", str(model), "-o", str(home / "My Project" / "build"), cwd=tmp_path))
    _build(home / "My Project" / "build", "--no-board-time")
    node = home / "My Project" / "build" / "node_00"
    for args in (["clean"], []):
        p = subprocess.run(["make", "-C", str(node), *args], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and "holds a space" in p.stderr, (args, p.stdout, p.stderr)
    assert (home / "thesis.txt").read_text() == "mine\n" and (node / "firmware.elf").is_file()
