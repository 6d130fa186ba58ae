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
import time
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


# the user's compiler and flags from the environment go into make's commands (docs/usage.md)
USER_MAKE_VARS = ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDLIBS")


def _make(folder: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in USER_MAKE_VARS}
    p = subprocess.run(["make", "-C", str(folder), "-j2", *args], capture_output=True, text=True, timeout=600,
                       env={**base, **(env or {})})
    if check:
        assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    return p


def _compile_lines(dry_run: str) -> list[str]:
    return [ln for ln in dry_run.splitlines() if " -c " in ln]


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
    b = _compiled(tmp_path, "sim", devices=2)  # (every node folder has the same Makefile: two suffice)
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


def test_make_follows_header_edits_and_adds_the_users_flags(tmp_path):
    """Objects follow every header they include (audit S F2: after an edit of firmware/mixer/mixer.h
    make said "Nothing to be done" and kept the stale image)."""
    b = _compiled(tmp_path, "sim", devices=2)
    summary = _build(b, "--no-board-time")
    fw = tmp_path / "vendor" / "firmware"  # the user's copy of cisl's firmware, as usage.md suggests
    shutil.copytree(resource_dir("firmware"), fw, ignore=shutil.ignore_patterns("bench", "fuzz"))
    node, var = b / "node_00", f"CISL_FIRMWARE={fw}"
    _make(node, var)
    assert sha256_file(node / "firmware.elf") == summary["nodes"][0]["sha256"]
    assert _make(node, "-q", var, check=False).returncode == 0  # nothing to do
    now = (node / "firmware.elf").stat().st_mtime
    for f in [*node.rglob("*"), *fw.rglob("*")]:  # all of it made a while ago, then the header edited
        os.utime(f, (now - 20, now - 20))
    os.utime(fw / "mixer" / "mixer.h", (now, now))
    assert _make(node, "-q", var, check=False).returncode == 1, "a header edit left the image current"
    rebuilt = {Path(ln.split(" -c ")[1].split()[0]).name for ln in _compile_lines(_make(node, "-n", var).stdout)}
    assert {"mixer.c", "cisl_mixer.c"} <= rebuilt and "cisl_weights.c" not in rebuilt, rebuilt
    _make(node, var)
    assert sha256_file(node / "firmware.elf") == summary["nodes"][0]["sha256"]
    assert _make(node, "-q", var, check=False).returncode == 0
    # the user's flags add to cisl's (audit S F3: CFLAGS, CPPFLAGS and an exported CC were ignored)
    _make(node, "clean")
    plain = _compile_lines(_make(node, "-n").stdout)
    assert plain and all(" gcc " in ln for ln in plain)  # cisl's compiler, not make's built-in cc
    for how in ({"args": ["CFLAGS=-DUSER_CFLAG"]}, {"env": {"CFLAGS": "-DUSER_CFLAG"}},
                {"env": {"CPPFLAGS": "-DUSER_CFLAG"}}):
        lines = _compile_lines(_make(node, "-n", *how.get("args", []), env=how.get("env")).stdout)
        assert len(lines) == len(plain) and all("-Werror" in ln and "-DUSER_CFLAG" in ln for ln in lines), how
    lines = _compile_lines(_make(node, "-n", env={"CC": "my-cc"}).stdout)
    assert lines and all("&& my-cc " in ln for ln in lines)


def test_paths_make_or_the_shell_would_misread_are_refused(tmp_path):
    """`$`, `%`, `:` ... in a path (audit S F8): with `$x` in a node folder's name, `make clean` removed
    another folder's obj/. The node Makefiles refuse such a folder in one line; `cisl compile` and `cisl
    build` (no make, no shell) take it: folder names like `lr=0.1,bs=32` are common."""
    b = _compiled(tmp_path, "sim", devices=2)
    named = tmp_path / "runs" / "lr=0.1,bs=(32)"
    p = cisl("compile", str(tmp_path / "m" / "model.onnx"), "-o", str(named), "--board", "sim", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    _build(named, "--no-board-time")
    _build(b, "--no-board-time")
    (tmp_path / "sp" / "dol" / "obj").mkdir(parents=True)
    (tmp_path / "sp" / "dol" / "obj" / "mine.txt").write_text("mine\n")
    shutil.copytree(b / "node_01", tmp_path / "sp" / "dol$x")
    for name in ("dol$x", "pct%x", "co:lon"):
        if name != "dol$x":
            shutil.copytree(b / "node_01", tmp_path / "sp" / name)
        for args in (["clean"], []):
            p = _make(tmp_path / "sp" / name, *args, check=False)
            bad = next(c for c in name if c in "$%:")
            assert p.returncode != 0 and f"holds '{bad}'" in p.stderr, (name, args, p.stderr)
    assert (tmp_path / "sp" / "dol" / "obj" / "mine.txt").read_text() == "mine\n"


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


def _compiled_sources(stderr: str) -> list[str]:
    """The shared sources (kernels, runtime, board support: not a node's own cisl_*.c) that `cisl build -v`
    says it compiled."""
    words = [ln.split() for ln in stderr.splitlines()]
    return sorted(Path(w[w.index("-c") + 1]).name for w in words if "-c" in w
                  and not Path(w[w.index("-c") + 1]).name.startswith("cisl_"))


def test_builds_started_together_on_a_cold_cache_compile_each_shared_object_once(tmp_path):
    # test workers or a sweep's units start many builds at once; each shared object is compiled by one of
    # them and copied by the others (it took 4 parallel cold builds 66.6 CPU-s before, 43.0 after)
    b = _compiled(tmp_path, "sim")
    for name in ("one", "b1", "b2"):
        shutil.copytree(b, tmp_path / name)
    env = {**os.environ, "CISL_CACHE_DIR": str(tmp_path / "cache-one")}
    one = ok(cisl("build", "one", "-v", "-q", cwd=tmp_path, env=env))
    env["CISL_CACHE_DIR"] = str(tmp_path / "cache-two")
    procs = [subprocess.Popen([sys.executable, "-m", "codegen.cli", "build", name, "-v", "-q"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("b1", "b2")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    alone = _compiled_sources(one.stderr)
    assert alone and _compiled_sources(outs[0][1] + outs[1][1]) == alone


def test_one_build_in_two_folders_gives_the_same_sim_images(tmp_path):
    b = _compiled(tmp_path / "one", "sim", devices=2)
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
    b = _compiled(tmp_path / "one", "nrf52840dk", devices=2)  # each image is compiled three times, made twice
    other = tmp_path / "two" / "b"
    shutil.copytree(b, other)
    first = _build(b, cache=False)
    second = _build(other, cache=False)
    assert [n["sha256"] for n in first["nodes"]] == [n["sha256"] for n in second["nodes"]]
    _make_gives_same_image(b, first, ("firmware.elf", "firmware.hex"))
    # make's LDFLAGS add to the board's link (audit S F3: they replaced it, linker script and all)
    link = [ln for ln in _make(b / "node_00", "-n", "-B", "LDFLAGS=-Wl,--print-memory-usage").stdout.splitlines()
            if " -o " in ln and "firmware.elf" in ln and " -c " not in ln]
    assert len(link) == 1 and "--print-memory-usage" in link[0] and "/nrf52840.ld" in link[0], link
    assert link[0].split("&& ")[1].startswith("arm-none-eabi-gcc ")
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


# a user's firmware: its own board layer around the node library (one node: nobody to talk to)
USER_BOARD = r"""
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
    return 0;
}
"""

USER_MAIN = USER_BOARD + r"""

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


@pytest.fixture(scope="module")
def node_library(tmp_path_factory):
    """A one-node plan's node and runtime compiled as a library with their own commands, less the sim
    board's macro (its op hook into the testbed's clock); not the cisl board (boards/sim) and not its
    loop (cisl_run.c). Returns (folder, objects, the node's compile flags, plan, quantised windows)."""
    tmp = tmp_path_factory.mktemp("library")
    b = _compiled(tmp, "sim", devices=1)
    _build(b, "--no-board-time")
    cmds = json.loads((b / "node_00" / "compile_commands.json").read_text())
    objs = []
    for i, c in enumerate(cmds):
        if "/boards/" in c["file"] or c["file"].endswith(("cisl_run.c", "cisl_mixer_transport.c", "/mixer.c")):
            continue
        args = [a for a in c["arguments"] if a != "-DCISL_BOARD_OP_HOOK"]
        args[args.index("-o") + 1] = str(tmp / f"{i}.o")
        p = subprocess.run(args, capture_output=True, text=True, cwd=c["directory"])
        assert p.returncode == 0, p.stderr
        objs.append(str(tmp / f"{i}.o"))
    node_cmd = next(c for c in cmds if Path(c["file"]).name == "cisl_node.c")["arguments"]
    flags = [a for a in node_cmd[1:node_cmd.index("-c")] if a != "-DCISL_BOARD_OP_HOOK"]
    plan = load_plan(b)
    x = np.load(tmp / "m" / "test_windows.npy")[:3]
    return tmp, objs, flags, plan, plan.quantize_input(x.astype(np.float64)).astype(np.int8)


def _user_program(lib, name: str, source: str, compiler: str = "gcc") -> Path:
    tmp, objs, flags, _, _ = lib
    src = tmp / name
    src.write_text(source)
    if compiler != "gcc":  # C++: the same warnings, none of the C-only flags
        flags = ["-std=c++11" if f.startswith("-std=") else f for f in flags]
    p = subprocess.run([compiler, *flags, str(src), *objs, "-o", str(src.with_suffix(""))], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    return src.with_suffix("")


def _forecasts_are_the_reference(lib, program: Path) -> None:
    _, _, _, plan, xq = lib
    r = subprocess.run([str(program)], input=xq.tobytes(), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    got = np.frombuffer(r.stdout, dtype=np.int8).reshape(len(xq), -1)
    ref = reference(plan, xq)
    for i in range(len(xq)):
        assert got[i].tobytes() == np.asarray(ref.output[i]).astype(np.int8).tobytes(), f"inference {i}"
    # the node reported its inference lines through the user's cisl_board_write
    assert r.stderr.decode().count(" output inf=") >= len(xq)


def test_the_node_is_a_library_other_firmware_calls(node_library):
    """A one-node plan linked into the user's own program, without any cisl board: its forecasts are
    the numpy int8 reference's."""
    _forecasts_are_the_reference(node_library, _user_program(node_library, "user.c", USER_MAIN))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_a_cpp_program_calls_the_node(node_library):
    """The public headers declare C linkage for C++ (audit S F4: user.cpp got undefined references to
    cisl_node_init(), and the runtime could not find the user's C++ cisl_board_write)."""
    _forecasts_are_the_reference(node_library, _user_program(node_library, "user.cpp", USER_MAIN, "g++"))


NULL_INPUT = USER_BOARD + r"""

int main(void)
{
    static int8_t out[CISL_OUTPUT_LEN];
    uint32_t crc = 0u;
    if (cisl_node_init() != 0) {
        return 1;
    }
    return cisl_node_infer(NULL, out, &crc) == -3 /* CISL_ERR_ARG */ ? 0 : 2;
}
"""


def test_cisl_node_h_alone_gives_the_return_codes_it_documents(node_library):
    """cisl_node.h documents CISL_OK and the CISL_ERR_* codes and cisl_node_skip: a file including only
    it compiles (audit S F7: CISL_OK was undeclared, it lived in cisl_runtime.h)."""
    tmp, _, flags, _, _ = node_library
    (tmp / "codes.c").write_text('#include "cisl_node.h"\n'
                                 "int f(void) { cisl_node_skip(1u); return CISL_OK + CISL_ERR_ARG + CISL_ERR_KERNEL "
                                 "+ CISL_ERR_TRANSPORT; }\n")
    p = subprocess.run(["gcc", *flags, "-fsyntax-only", str(tmp / "codes.c")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    header = next(Path(f[2:]) for f in flags if f.startswith("-I") and (Path(f[2:]) / "cisl_node.h").is_file())
    assert "cisl_node_skip(uint32_t count)" in (header / "cisl_node.h").read_text()


def test_infer_refuses_a_null_input(node_library):
    """cisl_node_infer(NULL, ...) returns CISL_ERR_ARG after an `error` line (audit S F6: it read address 0)."""
    r = subprocess.run([str(_user_program(node_library, "null_input.c", NULL_INPUT))], capture_output=True,
                       timeout=60)
    assert r.returncode == 0, (r.returncode, r.stderr.decode())
    assert "error inf=0 where=input code=-3" in r.stderr.decode()


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


def test_what_the_node_makefile_makes_is_replaced_with_the_build_the_users_edit_is_not(tmp_path):
    """`make -C build/node_00` (the docs' "taking a node home") then `cisl compile -o build` again: make's
    objects and image are cisl's to replace, as `make clean` would remove them; they used to make the
    compile refuse the folder ("holds node_00/firmware.elf ... move it away"). A generated source the user
    edited stays theirs, and the refusal names it, not make's products."""
    b = _compiled(tmp_path, "sim", devices=2)
    _build(b, "--no-board-time")
    node = b / "node_00"
    time.sleep(0.01)  # make's files are newer than the build's stamp, as they are for a user
    _make(node, "clean")
    _make(node, "CFLAGS=-DUSER_CFLAG")
    assert (node / "firmware.elf").is_file() and any((node / "obj").rglob("*.o"))
    again = ["compile", str(tmp_path / "m" / "model.onnx"), "-o", "b", "--board", "sim"]
    ok(cisl(*again, cwd=tmp_path))
    assert not (node / "firmware.elf").exists() and not (node / "obj").exists()
    _build(b, "--no-board-time")
    time.sleep(0.01)
    with open(node / "cisl_node.c", "a") as f:
        f.write("/* the user's note */\n")
    _make(node)
    p = cisl(*again, cwd=tmp_path)
    assert p.returncode == 2 and "b: holds node_00/cisl_node.c, which was written or changed after" in p.stderr, p.stderr
    assert "the user's note" in (node / "cisl_node.c").read_text()
