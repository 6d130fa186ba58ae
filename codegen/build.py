"""`cisl build`: compile every node of a compiled plan into a firmware image, in parallel.

The kernel library is upstream CMSIS-NN when CMSIS_NN_ROOT points at a checkout, otherwise
firmware/nnref. Kernel and runtime objects are compiled once per build folder and linked into every
node; only the generated files are compiled per node. Our own code builds with warnings as errors.

The board's board.toml [build] section says how: compiler, CPU flags, C flags (kernels may get their
own), linker flags and script, board sources, whether to write an Intel HEX image, the stack, and
whether the plan's input windows are compiled into the image. Mixer's compile-time maxima are set
from the plan (its largest generation, payload and node count), so Mixer's RAM is what the plan
needs. For boards with a size check, every node's flash and RAM are read from its ELF and written
next to the planner's estimate (node_NN/size.json); a node that does not fit fails the build with
one line naming the node, the region and the overflow.

Every image folder also gets a Makefile and compile_commands.json with the very commands used here
(`make -C build/node_00` links the same bytes), and images do not depend on where they are built:
-ffile-prefix-map names the build folder, cisl's firmware and board folders and CMSIS_NN_ROOT by
fixed names in debug info and __FILE__ (docs/design/standalone-build.md). Builds against CMSIS-NN
record its commit in build.json (kernels_commit) and in the boot line (cmsis_nn).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import re
import shlex
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from . import __version__
from .boards import load_board
from .errors import CheckFailed, UserError
from .fsutil import MAKE_PRODUCTS, output_lock, sha256_file, write_text_atomic
from .kernel_library import KernelLib, kernel_library
from .plan.io import load_plan
from .plan.mixer_layout import mixer_maxima
from .resources import resource_dir, runtime_fingerprint
from .toolrun import log_command

if TYPE_CHECKING:
    from .boards import Board
    from .plan.io import Plan

RUNTIME_SOURCES = ["runtime/cisl_kernels.c", "runtime/cisl_log.c", "runtime/cisl_runtime.c", "runtime/cisl_run.c",
                   "runtime/cisl_host.c", "runtime/cisl_mode_select.c", "somegather/cisl_somegather.c", "somegather/cisl_mixer_transport.c", "somegather/cisl_modes.c",
                   "mixer/mixer.c"]
# speed-critical runtime sources: built with the board's kernel_cflags (e.g. -O2 where the rest is -Os)
SPEED_SOURCES = {"runtime/cisl_kernels.c", "mixer/mixer.c"}
NODE_CACHE_LIMIT = 256 * 1024  # generated sources up to this size are cached across builds
NODE_SOURCES = ["cisl_node.c", "cisl_weights.c", "cisl_mixer.c"]
INPUTS_SOURCE = "cisl_board_inputs.c"  # boards that compile the input windows in: generated per build


@dataclass
class CompileJob:
    source: Path
    obj: Path
    flags: list[str]  # ends with the prefix map of cwd (see prefix_maps)
    log: Path
    cwd: Path  # the compiler runs here; its path is mapped to "." (DW_AT_comp_dir)
    kind: str = "node"  # kernels, runtime, board, inputs or node: the Makefile's flag groups
    cacheable: bool = False  # shared sources (kernels, runtime, board) are cached across builds
    key_extra: bytes = b""  # more content the object depends on (a node's generated headers)


def cache_dir() -> Path | None:
    """Where compiled shared objects are kept between builds (CISL_CACHE_DIR, default ~/.cache/cisl;
    set CISL_CACHE_DIR to an empty string to disable)."""
    env = os.environ.get("CISL_CACHE_DIR")
    if env == "":
        return None
    return Path(env) if env else Path.home() / ".cache" / "cisl" / "objects"


@contextmanager
def _cache_entry_lock(cache: Path, key: str) -> Iterator[None]:
    """Held while one cached object is compiled: builds that start together on a cold cache (test
    workers, a sweep's parallel units) compile each shared object once and copy it, instead of all
    compiling it. One of 256 lock files by the key's first byte; without locks (a read-only cache), none."""
    import fcntl

    try:
        (cache / "locks").mkdir(parents=True, exist_ok=True)
        fd = os.open(cache / "locks" / f"{key[:2]}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _cache_key(cc_id: str, job: CompileJob, headers: bytes) -> str:
    # the working directory is mapped to "." and nothing else lives there: the object does not
    # depend on where it is, so builds in other folders share cached kernels and runtime
    flags = [f.replace(f"={job.cwd}=", "=<cwd>=") for f in job.flags]
    h = hashlib.sha256()
    for part in (cc_id.encode(), "\0".join(flags).encode(), job.source.read_bytes(), headers, job.key_extra):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _headers_digest(dirs: list[Path]) -> bytes:
    """Content of every header the shared sources could include: any change invalidates the cache."""
    h = hashlib.sha256()
    for d in dirs:
        for p in sorted(d.glob("*.h")):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.digest()


def prefix_maps(fw: Path, board: Board, lib: KernelLib) -> list[str]:
    """-ffile-prefix-map flags that name the resource folders by fixed names in debug info and
    __FILE__, so an image does not depend on where cisl, the board or CMSIS-NN are installed. The
    job's own map of its working directory (and the node folder's) come after these: the last
    matching map wins."""
    maps = [f"-ffile-prefix-map={fw}=cisl/firmware",
            f"-ffile-prefix-map={board.support}=cisl/boards/{board.support.name}"]
    if lib.kind == "cmsis-nn":
        maps.append(f"-ffile-prefix-map={lib.root}=CMSIS-NN")
    return maps


def cwd_map(cwd: Path) -> str:
    return f"-ffile-prefix-map={cwd}=."


def _run(cmd: list[str], log: Path, cwd: Path | None = None) -> tuple[bool, str]:
    """Run one compiler, linker or objcopy command, appending it and its output to log."""
    log_command(cmd, cwd)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    text = (f"$ cd {cwd} && " if cwd else "$ ") + " ".join(cmd) + "\n" + p.stdout + p.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(text)
    return p.returncode == 0, p.stdout + p.stderr


# characters make or the shell read as syntax in the node folders' Makefiles (`$` expands, `%` makes a
# rule a pattern, `:` and `=` split rules and flags, `#` starts a comment, `,` splits -Wl, flags, the rest
# are shell syntax or globs; a backslash escapes): with `$x` in the folder's name `make clean` removed another folder's obj/.
# Only the Makefiles refuse them (and spaces): `cisl compile` and `cisl build` run no make and no shell, so a
# folder named like `runs/lr=0.1,bs=32` is theirs to use.
MAKE_UNSAFE = "\\$%:;#'\"`&|<>*?[]{}()=,"


ARM_APT = "sudo apt-get install -y --no-install-recommends gcc-arm-none-eabi libnewlib-arm-none-eabi"


def board_defines(board: Board, plan: Plan) -> list[str]:
    """-D flags for the board's own sources from board.toml facts ([uart], [radio], [security], [inputs])."""
    f = board.facts
    out = []
    uart = f.get("uart", {})
    for key, macro in (("baud", "CISL_UART_BAUD"), ("tx_pin", "CISL_UART_TX_PIN"), ("rx_pin", "CISL_UART_RX_PIN")):
        if key in uart:
            out.append(f"-D{macro}={int(uart[key])}")
    radio = f.get("radio", {})
    if radio:
        phy = plan.meta["mixer"]["policy"]["phy"]
        if phy not in radio.get("phys", [phy]):
            raise UserError(f"the plan's Mixer slots are timed for BLE {phy}, which board {board.name} does not "
                            f"support ({', '.join(radio['phys'])}); compile with --phy {radio['phys'][0]}")
        out.append(f"-DCISL_RADIO_PHY_MBIT={int(phy.rstrip('M'))}")
        if radio.get("first_guard_ms", 0) >= radio.get("takeover_ms", 1 << 31):
            raise UserError(f"{board.path / 'board.toml'}: [radio] first_guard_ms ({radio['first_guard_ms']}) must be "
                            f"below takeover_ms ({radio['takeover_ms']}), or the backup starts the first round "
                            f"while the initiator still waits")
        for key, macro in (("frequency_mhz", "CISL_RADIO_FREQUENCY_MHZ"), ("txpower_dbm", "CISL_RADIO_TXPOWER_DBM"),
                           ("start_guard_us", "CISL_RADIO_START_GUARD_US"),
                           ("first_guard_ms", "CISL_RADIO_FIRST_GUARD_MS"),
                           ("scan_timeout_ms", "CISL_RADIO_SCAN_TIMEOUT_MS"),
                           ("takeover_ms", "CISL_RADIO_TAKEOVER_MS"),
                           ("resync_listen_ms", "CISL_RADIO_RESYNC_LISTEN_MS")):
            if key in radio:
                out.append(f"-D{macro}={int(radio[key])}")
    if "security" in f:  # boards/nrf52840dk/startup.c: open (default) or protected debug port
        out.append(f"-DCISL_DEBUG_PORT_OPEN={int(f['security'].get('debug_port', 'open') == 'open')}")
        if "approtect_from_build" in f["security"]:
            out.append(f"-DCISL_APPROTECT_FROM_BUILD='{f['security']['approtect_from_build']}'")
    if board.support != board.path:  # shared board code prints the name of the board it runs on
        out.append(f'-DCISL_BOARD_NAME="{board.name}"')
    if "watchdog" in f:
        out.append(f"-DCISL_WATCHDOG_MS={check_watchdog_blocks(board, plan)}")
    inputs = f.get("inputs", {})
    if "inferences" in inputs:
        out.append(f"-DCISL_INPUTS_INFERENCES={int(inputs['inferences'])}")
    return out


# A bound on the cycles per MAC of a whole block, printing aside: the cycle model measures the FC inner
# loop at 2.3-3.1 cycles per MAC (docs/results/cycle_model_validation.md) and whole schedules run
# 3.4-4.6 instructions per MAC with softmax and LayerNorm (docs/results/qemu_instructions.md).
WATCHDOG_CYCLES_PER_MAC = 8.0


def check_watchdog_blocks(board: Board, plan: Plan) -> int:
    """board.toml [watchdog] timeout_ms, after checking that every node's longest block of the schedule
    (the runtime reloads the watchdog as a block begins, and the block's rounds at every slot) computes
    well within it, at WATCHDOG_CYCLES_PER_MAC; a block that might not would reset a healthy node."""
    from .ops import kind_of

    ms, clock = int(board.facts["watchdog"].get("timeout_ms", 0)), float(board.facts["board"]["clock_hz"])
    if ms == 0 or clock <= 0:
        return ms
    worst = (0, 0, "")
    for node in plan.nodes:
        macs, name = 0, ""
        for op in node.ops:
            kind = kind_of(op)
            if kind.block_marker == "begin":
                layer = int(op.attrs["layer"])
                macs, name = 0, f"{op.attrs['block']}{layer if layer >= 0 else ''}"
            elif kind.work_unit == "MAC":
                macs += kind.work(op, {n: node.tensors[n].shape for n in op.ins + op.outs if n in node.tensors})
            worst = max(worst, (macs, node.device, name))
    seconds = worst[0] * WATCHDOG_CYCLES_PER_MAC / clock
    if seconds * 1000 > ms:
        raise UserError(f"{board.path / 'board.toml'}: [watchdog] timeout_ms = {ms} is shorter than node "
                        f"{worst[1]}'s block {worst[2]} may compute ({worst[0]:,} MACs: up to {seconds:.1f} s at "
                        f"{WATCHDOG_CYCLES_PER_MAC:g} cycles per MAC), and the watchdog would reset it; raise "
                        f"timeout_ms to at least {int(seconds * 1000) + 1}, or set 0 to turn it off")
    return ms


def _inputs_source(plan: Plan, build_dir: Path, max_windows: int) -> str:
    """C source of the input windows compiled into the image: build/inputs.npy, quantised."""
    import numpy as np

    from .inputs import load_build_inputs

    x = plan.quantize_input(load_build_inputs(build_dir, lookback=plan.cfg.lookback).astype(np.float64))[:max_windows]
    rows = [", ".join(str(int(v)) for v in w) for w in x]
    body = ",\n".join(f"    {r}" for r in rows)
    windows = hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16]
    return (f"/*\n * generated by cisl {__version__} -- do not edit.\n"
            f" * windows {windows}; plan {plan.sha256[:16]}\n"
            f" * {len(x)} input windows of {plan.cfg.lookback} values from build/inputs.npy, quantised with the\n"
            f" * plan's input parameters. `cisl build` rewrites it.\n */\n"
            f'#include "cisl_board_inputs.h"\n\n'
            f"const int8_t cisl_board_inputs[] = {{\n{body}\n}};\n"
            f"const uint32_t cisl_board_input_count = {len(x)}u;\n"
            f"const uint32_t cisl_board_input_len = {plan.cfg.lookback}u;\n")


OVERFLOW_RE = re.compile(r"region [`'](\w+)' overflowed by (\d+) bytes")


def _overflows(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for region, n in OVERFLOW_RE.findall(text):
        out[region] = max(out.get(region, 0), int(n))
    return out


def image_dir(build_dir: Path, device: int, board: Board, plan_board: str) -> Path:
    """Where a node's image goes: node_NN/ for the board the node is compiled for (``plan_board``:
    `node_target`), node_NN/<board>/ for a board that builds plans compiled for another one
    (qemu-m4 builds nrf52840dk plans)."""
    nd = Path(build_dir) / f"node_{device:02d}"
    return nd if board.name == plan_board else nd / board.name


def node_target(plan: Plan, device: int) -> str:
    """The board node ``device``'s own image (node_NN/firmware.elf) is built for: the plan's board,
    or in a mixed testbed's plan for real boards, the node's own board."""
    target = plan.meta["board"]
    if plan.meta.get("node_boards") and load_board(target).models is None:
        return str(plan.meta["node_boards"][device])
    return target


def build(build_dir: Path, board_name: str | None = None, jobs: int | None = None,
          say: Callable[[str], None] = lambda s: None, nodes: list[int] | None = None,
          extra_cflags: list[str] | None = None, link_script: Path | None = None) -> dict:
    """Build every node in ``build_dir`` (or only ``nodes``); returns the summary also written to
    build.json (build-<board>.json when building for another board than the plan's). A mixed
    testbed's plan builds each node for its own board (one build.json lists them all).
    ``extra_cflags`` (e.g. -DCISL_PROFILE_OPS for benchmarks) go to all of cisl's own code.
    ``link_script`` (benchmarks only) replaces the board's linker script, e.g. one with a larger
    flash to time a model that does not fit the part."""
    build_dir = Path(build_dir)
    with output_lock(build_dir):  # two builds of one folder at once would mix their objects
        plan = load_plan(build_dir)
        _check_runtime(build_dir)
        known = [n.device for n in plan.nodes]
        if nodes is not None:
            bad = [k for k in nodes if k not in known]
            if bad:
                raise UserError(f"--node {bad[0]}: the plan has nodes 0..{len(known) - 1}")
        selected = known if nodes is None else [k for k in known if k in nodes]
        if board_name is not None:
            return _build(build_dir, plan, load_board(board_name), jobs, say, selected, extra_cflags, link_script)
        groups: dict[str, list[int]] = {}
        for k in selected:
            groups.setdefault(node_target(plan, k), []).append(k)
        if len(groups) <= 1:
            return _build(build_dir, plan, load_board(node_target(plan, selected[0]) if selected else plan.meta["board"]),
                          jobs, say, selected, extra_cflags, link_script)
        (build_dir / "build.json").unlink(missing_ok=True)
        parts = [_build(build_dir, plan, load_board(name), jobs, say, group, extra_cflags, link_script,
                        summary_name=None) for name, group in sorted(groups.items())]
        name = "+".join(p["board"] for p in parts)
        summary = {**parts[0], "board": name, "plan_board": name,
                   "boards": {p["board"]: [n["node"] for n in p["nodes"]] for p in parts},
                   "nodes": sorted((n for p in parts for n in p["nodes"]), key=lambda n: n["node"])}
        write_text_atomic(build_dir / "build.json", json.dumps(summary, indent=1) + "\n")
        return summary


def _check_runtime(build_dir: Path) -> None:
    """Refuse, before any image is removed, generated C that another cisl compiled: linked with this
    cisl's firmware it may lack functions the runtime now calls (audit V F1: the link failed after the
    working images were gone, and "run `cisl build` first" could not help)."""
    try:
        made_for = json.loads((build_dir / "compile.json").read_text()).get("runtime")
    except (OSError, ValueError, AttributeError):
        made_for = None
    if made_for != runtime_fingerprint():
        raise UserError(f"{build_dir}: compiled by another cisl version (its generated C was made for another "
                        f"firmware runtime than this cisl's); compile it again with this one: cisl compile MODEL "
                        f"-o {shlex.quote(str(build_dir))} (its images, if built, still run as they are)")


def _build(build_dir: Path, plan: Plan, board: Board, jobs: int | None, say: Callable[[str], None],
           nodes: list[int], extra_cflags: list[str] | None, link_script: Path | None,
           summary_name: str | None = "") -> dict:
    """Build ``nodes`` for ``board``; write the summary to ``summary_name`` ("" for the default
    name, None: the caller merges the summaries of a mixed testbed)."""
    plan_board = plan.meta["board"]
    own = {node_target(plan, n.device) for n in plan.nodes}
    if (board.name not in own and plan_board not in board.facts["board"].get("builds_plans_for", [])
            and board.name != plan_board):
        raise UserError(f"{build_dir}: compiled for board '{plan_board}', not '{board.name}'; "
                        f"recompile with `cisl compile --board {board.name}`")
    for k in nodes:
        if plan.meta.get("node_boards") and board.name in own and node_target(plan, k) != board.name:
            raise UserError(f"node {k} is a {node_target(plan, k)} in this plan, not a {board.name}; build it "
                            f"without --board (each node for its own board), or for qemu-m4 or sim")
    selected = [n for n in plan.nodes if n.device in nodes]
    mine = board.name in own  # the images are the nodes' own (node_NN/), not a second board's (qemu-m4)
    where = board.name if mine else plan_board
    # a build that fails must not leave the images of an earlier one looking current
    if summary_name == "":
        summary_name = "build.json" if mine else f"build-{board.name}.json"
    if summary_name:
        (build_dir / summary_name).unlink(missing_ok=True)
    for node in selected:
        (image_dir(build_dir, node.device, board, where) / board.build["output"]).unlink(missing_ok=True)
    cc = board.build["cc"]
    if shutil.which(cc) is None:
        hint = ARM_APT if cc.startswith("arm-none-eabi") else "sudo apt-get install --no-install-recommends gcc"
        raise UserError(f"compiler '{cc}' for board {board.name} not found; install it (Debian/Ubuntu: {hint})")
    lib = kernel_library()
    fw = resource_dir("firmware").absolute()
    absb = build_dir.absolute()  # the compilers run in other folders
    includes = [f"-I{lib.include}", f"-I{fw / 'runtime'}", f"-I{fw / 'somegather'}", f"-I{fw / 'mixer'}"]
    maps = prefix_maps(fw, board, lib)
    cpu = list(board.build.get("cpu_flags", []))
    maxima = mixer_maxima(plan)
    mx_defs = [f"-D{k}={v}u" for k, v in maxima.items()]
    extra = list(extra_cflags or [])
    # board.toml [build] defines: macros the board needs in cisl's own code (e.g. the op hook)
    cflags = cpu + list(board.build["cflags"]) + [f"-D{d}" for d in board.build.get("defines", [])] + mx_defs + extra
    board_flags = cflags + includes + [f"-I{board.support}"] + board_defines(board, plan)
    obj_dir = absb / "_obj" / board.name
    if obj_dir.exists():
        shutil.rmtree(obj_dir)
    obj_dir.mkdir(parents=True)
    for node in selected:
        (image_dir(build_dir, node.device, board, where) / "build.log").unlink(missing_ok=True)
    common_log = obj_dir / "build.log"

    jobs_list: list[CompileJob] = []
    if lib.kind == "cmsis-nn":
        kernel_flags = cpu + list(board.build.get("upstream_cflags", board.build["cflags"]))
    else:
        kernel_flags = cpu + list(board.build.get("kernel_cflags", board.build["cflags"]))
    for src in lib.sources:
        jobs_list.append(CompileJob(src, obj_dir / "kernels" / (src.stem + ".o"),
                                    kernel_flags + [f"-I{lib.include}"] + maps + [cwd_map(obj_dir)], common_log,
                                    obj_dir, "kernels", cacheable=True))
    speed_flags = cpu + list(board.build.get("kernel_cflags", board.build["cflags"])) + mx_defs + extra
    # the boot line names the CMSIS-NN commit the image was built against
    commit = [f'-DCISL_CMSIS_NN_COMMIT="{lib.commit[:12]}"'] if lib.commit else []
    for rel in RUNTIME_SOURCES:
        src = fw / rel
        flags = (speed_flags if rel in SPEED_SOURCES else cflags) + includes
        if rel == "runtime/cisl_runtime.c":
            flags = flags + commit
        jobs_list.append(CompileJob(src, obj_dir / "runtime" / (src.stem + ".o"), flags + maps + [cwd_map(obj_dir)],
                                    common_log, obj_dir, "runtime", cacheable=True))
    for rel in board.build["sources"]:
        src = board.support / rel
        jobs_list.append(CompileJob(src, obj_dir / "board" / (src.stem + ".o"), board_flags + maps + [cwd_map(obj_dir)],
                                    common_log, obj_dir, "board", cacheable=True))
    inputs_text = None
    if board.build.get("inputs"):
        inputs_text = _inputs_source(plan, build_dir, int(board.facts.get("inputs", {}).get("max_windows", 16)))
        src = obj_dir / "board" / INPUTS_SOURCE
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(inputs_text)
        # compiled where it is (mapped to "."), as the node folder's Makefile compiles its copy
        jobs_list.append(CompileJob(src, obj_dir / "board" / "cisl_board_inputs.o",
                                    cflags + includes + maps + [cwd_map(src.parent)], common_log, src.parent, "inputs"))
    for node in selected:
        nd = build_dir / f"node_{node.device:02d}"
        missing = [rel for rel in NODE_SOURCES if not (nd / rel).is_file()]
        if missing:
            raise UserError(f"{nd / missing[0]}: missing; {build_dir} was compiled by another cisl version or "
                            f"edited, run `cisl compile` again")
    node_objs: dict[int, list[Path]] = {}
    for node in selected:
        nd = absb / f"node_{node.device:02d}"
        out_dir = image_dir(absb, node.device, board, where)
        out_dir.mkdir(parents=True, exist_ok=True)
        node_headers = b"".join(p.name.encode() + p.read_bytes() for p in sorted(nd.glob("*.h")))
        node_objs[node.device] = []
        # the node's sources are named node_NN/... and its image folder "." (the folder's Makefile
        # compiles them from there), wherever the build folder is
        node_maps = maps + [f"-ffile-prefix-map={nd}={nd.name}", cwd_map(out_dir)]
        for rel in NODE_SOURCES:
            obj = obj_dir / f"node_{node.device:02d}" / (Path(rel).stem + ".o")
            # generated files are cached too (a second board with the same flags reuses them), but
            # not large weight tables, which are rarely built twice and would only fill the cache
            jobs_list.append(CompileJob(nd / rel, obj, cflags + includes + [f"-I{nd}"] + node_maps,
                                        out_dir / "build.log", out_dir, "node",
                                        cacheable=(nd / rel).stat().st_size < NODE_CACHE_LIMIT,
                                        key_extra=node_headers))
            node_objs[node.device].append(obj)

    say(f"build: {len(selected)} nodes for {board.name} with {lib.kind} ({len(jobs_list)} compile jobs)")
    workers = jobs or os.cpu_count() or 2

    cache = cache_dir()
    if cache:
        log_command([cc, "--version"])
    cc_id = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout if cache else ""
    headers = _headers_digest([lib.include, lib.include.parent / "Include" / "Internal", fw / "runtime",
                               fw / "somegather", fw / "mixer", board.support, fw / "nnref" / "Source",
                               lib.root / "Source"]) if cache else b""

    def compile_one(j: CompileJob) -> tuple[CompileJob, bool, str]:
        j.obj.parent.mkdir(parents=True, exist_ok=True)
        cached = cache / f"{_cache_key(cc_id, j, headers)}.o" if (cache and j.cacheable) else None
        if cached is None:
            return compile_and_keep(j, None)
        if not cached.is_file():
            with _cache_entry_lock(cache, cached.stem):
                if not cached.is_file():  # else another build (a parallel worker, a sweep's unit) made it meanwhile
                    return compile_and_keep(j, cached)
        shutil.copyfile(cached, j.obj)
        return j, True, ""

    def compile_and_keep(j: CompileJob, cached: Path | None) -> tuple[CompileJob, bool, str]:
        ok, out = _run([cc, *j.flags, "-c", str(j.source), "-o", str(j.obj)], j.log, j.cwd)
        if ok and cached is not None:
            try:
                cached.parent.mkdir(parents=True, exist_ok=True)
                tmp = cached.with_suffix(f".tmp{os.getpid()}")
                shutil.copyfile(j.obj, tmp)
                tmp.replace(cached)  # atomic: concurrent builds never see half an object
            except OSError:
                pass  # a read-only or full cache only costs speed
        return j, ok, out

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(compile_one, jobs_list))
    failed = [(j, out) for j, ok, out in results if not ok]
    if failed:
        j, out = failed[0]
        first = next((ln for ln in out.splitlines() if "error" in ln), out.strip().splitlines()[0] if out.strip() else "")
        raise CheckFailed(f"compiling {j.source} failed: {first.strip()} (full log: {j.log})")

    shared_jobs = [j for j in jobs_list if j.kind != "node"]
    shared = [j.obj for j in shared_jobs]
    ldflags = [a.replace("{board}", str(board.path)) for a in board.build.get("ldflags", [])]
    if link_script is not None:
        ldflags = [f"-T{Path(link_script).absolute()}" if a.startswith("-T") else a for a in ldflags]
    stack = board.build.get("stack_bytes")
    if stack is not None:
        ldflags.append(f"-Wl,--defsym=__cisl_stack_size={int(stack)}")
    objcopy = board.build.get("objcopy") if board.build.get("hex") else None

    def link(device: int) -> tuple[int, bool, str, Path]:
        out_dir = image_dir(absb, device, board, where)
        out = out_dir / board.build["output"]
        out.unlink(missing_ok=True)
        mapfile = [f"-Wl,-Map={out.with_suffix('.map')}"] if cpu else []
        node_jobs = [j for j in jobs_list if j.kind == "node" and j.obj in node_objs[device]]
        write_standalone(out_dir, absb / f"node_{device:02d}", node_jobs + shared_jobs, cc, cpu, ldflags, mapfile,
                         out, objcopy, inputs_text, fw, board, lib, obj_dir, device, plan.sha256[:16])
        ok, text = _run([cc, *cpu, *[str(o) for o in node_objs[device]], *[str(o) for o in shared],
                         *ldflags, *mapfile, "-o", str(out)], out_dir / "build.log", out_dir)
        if ok and objcopy:
            ok, text = _run([objcopy, "-O", "ihex", str(out), str(out.with_suffix(".hex"))], out_dir / "build.log",
                            out_dir)
        return device, ok, text, out

    with ThreadPoolExecutor(workers) as pool:
        links = list(pool.map(link, [n.device for n in selected]))

    sizes: dict[int, dict] = {}
    if board.build.get("size_check"):
        from .footprint import estimate_plan

        estimates = estimate_plan(plan, board, lib.kind)
        for device, ok, text, out in links:
            sizes[device] = _size_report(device, out, ok, text, estimates[device], board, maxima)
        _print_sizes(sizes, board, say)
        over = [(d, s) for d, s in sizes.items() if s.get("overflow")]
        if over and link_script is None:  # a benchmark's own linker script times a hypothetical part
            d, s = over[0]
            region, n = max(s["overflow"].items(), key=lambda kv: kv[1])
            more = f"; {len(over) - 1} more node(s) do not fit either" if len(over) > 1 else ""
            raise CheckFailed(f"node {d} does not fit {board.name}: {region} overflows by {n} bytes "
                              f"(estimate: flash {s['estimate']['flash']} of {board.flash_bytes} B, RAM "
                              f"{s['estimate']['ram']} of {board.ram_bytes} B){more}")
    for device, ok, text, _ in links:
        if not ok:
            log = image_dir(build_dir, device, board, where) / "build.log"
            raise CheckFailed(f"linking node {device} failed: {text.strip().splitlines()[-1] if text.strip() else ''} "
                              f"(full log: {log})")
    summary = {"board": board.name, "plan_board": where, "plan": plan.sha256[:16], "compiler": cc,
               "kernels": lib.kind, "kernels_root": lib.given,
               **({"kernels_commit": lib.commit} if lib.commit else {}), "mixer_maxima": maxima,
               "nodes": [{"node": d, "image": str(p.relative_to(absb)), "bytes": p.stat().st_size,
                          "sha256": sha256_file(p),
                          **({"flash": sizes[d]["elf"]["flash"], "ram": sizes[d]["elf"]["ram"]} if d in sizes else {})}
                         for d, _, _, p in links]}
    if summary_name:
        write_text_atomic(build_dir / summary_name, json.dumps(summary, indent=1) + "\n")
    return summary


def _mk_quote(arg: str) -> str:
    """A Makefile recipe word: as it is when the shell would not split or expand it, else quoted
    (make still expands the $(VAR) inside)."""
    if re.fullmatch(r"[A-Za-z0-9_\-+=./,:@%$()]+", arg):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"


def write_standalone(out_dir: Path, nd: Path, jobs: list[CompileJob], cc: str, cpu: list[str], ldflags: list[str],
                     mapfile: list[str], out: Path, objcopy: str | None, inputs_text: str | None, fw: Path,
                     board: Board, lib: KernelLib, obj_dir: Path, device: int, plan_hash: str) -> None:
    """Write out_dir/Makefile and out_dir/compile_commands.json: the compile and link commands of
    this node's image as `cisl build` runs them, so `make -C out_dir` links the same bytes.

    Paths outside the folder are variables with the installed locations as defaults (CISL_FIRMWARE,
    CISL_BOARD, CMSIS_NN_ROOT, NODE_DIR for images in a board subfolder); objects go to obj/."""
    if inputs_text is not None:
        write_text_atomic(out_dir / INPUTS_SOURCE, inputs_text)
    var_paths = [(nd, "$(NODE_DIR)"), (out_dir, "$(IMAGE_DIR)"), (fw, "$(CISL_FIRMWARE)"),
                 (board.path, "$(CISL_BOARD)")]
    if board.support != board.path:  # the sources and headers of another board's folder
        var_paths.append((board.support, "$(CISL_BOARD_SUPPORT)"))
    if lib.kind == "cmsis-nn":
        var_paths.append((lib.root, "$(CMSIS_NN_ROOT)"))
    var_paths.sort(key=lambda kv: -len(str(kv[0])))

    def sub(arg: str, cwd: Path | None = None) -> str:
        if cwd is not None:  # the job's working directory is the image folder in the Makefile
            arg = arg.replace(f"={cwd}=", "=$(IMAGE_DIR)=")
        for path, var in var_paths:
            arg = re.sub(re.escape(str(path)) + r"(?=/|=|$)", lambda _m, v=var: v, arg)
        return arg

    def obj_of(j: CompileJob) -> str:
        return f"$(OBJ)/{j.kind}/{j.obj.name}"

    def src_of(j: CompileJob) -> str:
        return f"$(IMAGE_DIR)/{INPUTS_SOURCE}" if j.kind == "inputs" else sub(str(j.source))

    groups: dict[tuple[str, ...], str] = {}
    for j in jobs:
        fl = tuple(sub(f, j.cwd) for f in j.flags)
        if fl not in groups:
            n = sum(1 for v in groups.values() if v.startswith(f"FLAGS_{j.kind.upper()}"))
            groups[fl] = f"FLAGS_{j.kind.upper()}" + (f"_{n + 1}" if n else "")
    top = out_dir == nd
    products = [out.name] + ([out.with_suffix(".hex").name] if objcopy else []) + (
        [out.with_suffix(".map").name] if mapfile else []) + ["obj/"]
    lines = [
        f"# generated by cisl {__version__} -- do not edit; `cisl build` rewrites it. plan {plan_hash}",
        f"# Builds node {device}'s {out.name} for board {board.name}, the same bytes as `cisl build` links:",
        "#   make -C <this folder>        (objects in obj/; `make clean` removes them)",
        "# What it makes is cisl's to replace: `cisl compile -o` over this build replaces it with the sources.",
        MAKE_PRODUCTS + " ".join(products),
        "# Sources outside this folder are found through these variables (defaults: where cisl build found",
        "# them); a copy of the folder builds the same image if they point at the same files:",
        f"#   make CISL_FIRMWARE=... CISL_BOARD=...{' CMSIS_NN_ROOT=...' if lib.kind == 'cmsis-nn' else ''}"
        f"{'' if top else ' NODE_DIR=...'}",
        "# Your CPPFLAGS, CFLAGS, LDFLAGS and LDLIBS (command line or environment) are added after cisl's own",
        "# flags, and a CC from the command line or the environment replaces cisl's compiler: the image is",
        "# then no longer the bytes `cisl build` links (`make clean` first: flags are not tracked).",
        "",
        "CISL_MAKEFILE := $(abspath $(lastword $(MAKEFILE_LIST)))",
        "IMAGE_DIR := $(patsubst %/,%,$(dir $(CISL_MAKEFILE)))",
        "NODE_DIR ?= $(IMAGE_DIR)" if top else "NODE_DIR ?= $(abspath $(IMAGE_DIR)/..)",
        f"CISL_FIRMWARE ?= {fw}",
        f"CISL_BOARD ?= {board.path}",
    ] + ([f"CISL_BOARD_SUPPORT ?= {board.support}"] if board.support != board.path else [])
    if lib.kind == "cmsis-nn":
        lines.append(f"CMSIS_NN_ROOT ?= {lib.root}")
    # cisl's compiler unless CC comes from the command line or the environment (make's built-in cc does not count)
    lines += ["ifeq ($(filter environment command line,$(origin CC)),)", f"CC := {cc}", "endif"]
    lines += ([f"OBJCOPY := {objcopy}"] if objcopy else []) + ["OBJ := $(IMAGE_DIR)/obj", ""]
    # make splits paths at spaces: in such a folder `make clean` removed a folder above the build (its
    # path cut at the space), so refuse to run at all where any path of the build holds one; the same
    # for the characters make or the shell read as syntax (MAKE_UNSAFE: `$x` made `make clean` remove
    # another folder's obj/)
    path_vars = ["CURDIR", "IMAGE_DIR", "NODE_DIR", "CISL_FIRMWARE", "CISL_BOARD"] + (
        ["CISL_BOARD_SUPPORT"] if board.support != board.path else []) + (
        ["CMSIS_NN_ROOT"] if lib.kind == "cmsis-nn" else [])
    unsafe = " ".join("\\#" if c == "#" else "$$" if c == "$" else c for c in MAKE_UNSAFE)
    lines += [f"cisl_unsafe_chars := {unsafe}",
              "cisl_unsafe = $(strip $(foreach c,$(cisl_unsafe_chars),$(if $(findstring $(c),$(1)),$(c))))"]
    for var in path_vars:
        lines += [f"ifneq ($(words $({var})),1)",
                  f"$(error {var} ($({var})) holds a space, which make cannot take in a path: copy or link the "
                  "folder to a path without one (or set the variable so), or rebuild with `cisl build`)",
                  "endif"]
        lines += [f"ifneq ($(call cisl_unsafe,$({var})),)",
                  f"$(error {var} ($({var})) holds '$(firstword $(call cisl_unsafe,$({var})))', which make or the "
                  "shell would read as syntax: copy or link the folder to a path without it (or set the "
                  "variable so))",
                  "endif"]
    lines.append("")
    for fl, name in groups.items():
        lines.append(f"{name} := \\\n    " + " \\\n    ".join(_mk_quote(f) for f in fl))
    node_objs = [obj_of(j) for j in jobs if j.kind == "node"]
    shared_objs = [obj_of(j) for j in jobs if j.kind != "node"]
    lines += ["", "NODE_OBJS := " + " ".join(node_objs),
              "SHARED_OBJS := \\\n    " + " \\\n    ".join(shared_objs),
              "CPU_FLAGS := " + " ".join(_mk_quote(f) for f in cpu),
              "CISL_LDFLAGS := " + " ".join(_mk_quote(sub(f)) for f in ldflags + mapfile),
              "# every object records the headers it included (obj/*/*.d): a header edit rebuilds what uses it",
              "CISL_DEPFLAGS := -MMD -MP", ""]
    outputs = [f"$(IMAGE_DIR)/{out.name}"] + ([f"$(IMAGE_DIR)/{out.with_suffix('.hex').name}"] if objcopy else [])
    lines += [".PHONY: all clean", f"all: {' '.join(outputs)}", "",
              f"$(IMAGE_DIR)/{out.name}: $(NODE_OBJS) $(SHARED_OBJS)",
              "\tcd $(IMAGE_DIR) && $(CC) $(CPU_FLAGS) $(LDFLAGS) $(NODE_OBJS) $(SHARED_OBJS) $(CISL_LDFLAGS) "
              "$(LDLIBS) -o $@", ""]
    if objcopy:
        lines += [f"$(IMAGE_DIR)/{out.with_suffix('.hex').name}: $(IMAGE_DIR)/{out.name}",
                  "\t$(OBJCOPY) -O ihex $< $@", ""]
    # the compiler runs in this folder (its path is mapped to "."), as `cisl build` runs it
    for j in jobs:
        lines += [f"{obj_of(j)}: {src_of(j)}", "\t@mkdir -p $(@D)",
                  f"\tcd $(IMAGE_DIR) && $(CC) $({groups[tuple(sub(f, j.cwd) for f in j.flags)]}) $(CPPFLAGS) "
                  "$(CFLAGS) $(CISL_DEPFLAGS) -c $< -o $@", ""]
    lines += ["# the node's objects follow its generated headers, every object the flags written here",
              "$(NODE_OBJS): $(wildcard $(NODE_DIR)/*.h)", "$(NODE_OBJS) $(SHARED_OBJS): $(CISL_MAKEFILE)", "",
              "clean:", "\trm -rf $(OBJ)", "", "-include $(wildcard $(OBJ)/*/*.d)", ""]
    write_text_atomic(out_dir / "Makefile", "\n".join(lines))

    def expand(arg: str) -> str:
        for var, path in (("$(IMAGE_DIR)", out_dir), ("$(NODE_DIR)", nd), ("$(CISL_FIRMWARE)", fw),
                          ("$(CISL_BOARD_SUPPORT)", board.support), ("$(CISL_BOARD)", board.path),
                          ("$(CMSIS_NN_ROOT)", lib.root), ("$(OBJ)", out_dir / "obj")):
            arg = arg.replace(var, str(path))
        return arg

    commands = []
    for j in jobs:
        src, obj = expand(src_of(j)), expand(obj_of(j))
        flags = [expand(sub(f, j.cwd)) for f in j.flags]
        commands.append({"directory": str(out_dir), "arguments": [cc, *flags, "-c", src, "-o", obj], "file": src,
                         "output": obj})
    write_text_atomic(out_dir / "compile_commands.json", json.dumps(commands, indent=1) + "\n")


def _size_report(device: int, elf: Path, linked: bool, link_text: str, estimate, board: Board,
                 maxima: dict[str, int]) -> dict:
    """node_NN/size.json: flash and RAM by section from the ELF, next to the planner's estimate."""
    from .elfsize import read_elf_size

    rep: dict = {"node": device, "board": board.name, "flash_budget": board.flash_bytes,
                 "ram_budget": board.ram_bytes, "mixer_maxima": maxima,
                 "estimate": {"flash": estimate.flash, "ram": estimate.ram, "flash_parts": estimate.flash_parts,
                              "ram_parts": estimate.ram_parts}}
    if linked:
        e = read_elf_size(elf, int(board.facts["board"].get("ram_origin", 0x20000000)))
        rep["elf"] = {"flash": e.flash, "ram": e.ram, "flash_sections": e.flash_by_section,
                      "ram_sections": e.ram_by_section}
        rep["error"] = {"flash": (estimate.flash - e.flash) / e.flash, "ram": (estimate.ram - e.ram) / e.ram}
        over = {}
        if e.flash > board.flash_bytes:
            over["FLASH"] = e.flash - board.flash_bytes
        if e.ram > board.ram_bytes:
            over["RAM"] = e.ram - board.ram_bytes
        if over:
            rep["overflow"] = over
    else:
        over = _overflows(link_text)
        if over:
            rep["overflow"] = over
    (elf.parent / "size.json").write_text(json.dumps(rep, indent=1) + "\n")
    return rep


def _print_sizes(sizes: dict[int, dict], board: Board, say: Callable[[str], None]) -> None:
    say(f"{'node':>4} {'flash (B)':>10} {'estimate':>9} {'err':>6} {'RAM (B)':>9} {'estimate':>9} {'err':>6}  "
        f"(budgets: flash {board.flash_bytes}, RAM {board.ram_bytes})")
    for d in sorted(sizes):
        s = sizes[d]
        est = s["estimate"]
        if "elf" in s:
            e = s["elf"]
            say(f"{d:>4} {e['flash']:>10} {est['flash']:>9} {100 * s['error']['flash']:>+5.1f}% {e['ram']:>9} "
                f"{est['ram']:>9} {100 * s['error']['ram']:>+5.1f}%")
        else:
            over = ", ".join(f"{r} overflows by {n} B" for r, n in s.get("overflow", {}).items()) or "link failed"
            say(f"{d:>4} {'-':>10} {est['flash']:>9} {'':>6} {'-':>9} {est['ram']:>9} {'':>6}  {over}")


def check_images(build_dir: Path, plan: Plan, images: list[Path] | dict[int, Path],
                 summary_name: str = "build.json") -> None:
    """Every node image must be the one the last successful `cisl build` made from this plan (its
    summary records the plan's hash and each image's): never run, time or flash a stale image."""
    summary = Path(build_dir) / summary_name
    try:
        doc = json.loads(summary.read_text())
    except FileNotFoundError:
        raise UserError(f"{summary}: missing (the last `cisl build` failed or never ran); run `cisl build "
                        f"{build_dir}`") from None
    except (OSError, ValueError):
        raise UserError(f"{summary}: unreadable; run `cisl build {build_dir}` again") from None
    if not isinstance(doc, dict) or doc.get("plan") != plan.sha256[:16]:
        raise UserError(f"{build_dir}: the images were built from another plan.json; run `cisl build {build_dir}`")
    nodes = doc.get("nodes", [])
    if not isinstance(nodes, list) or not all(isinstance(n, dict) and isinstance(n.get("node"), int) for n in nodes):
        raise UserError(f"{summary}: its nodes are not the list `cisl build` writes; run `cisl build {build_dir}` again")
    shas = {n["node"]: n.get("sha256") for n in nodes}
    items = images.items() if isinstance(images, dict) else enumerate(images)
    for k, img in items:
        if shas.get(k) is None or shas[k] != sha256_file(img):
            raise UserError(f"{img}: not the image `cisl build` made from this plan (stale or changed); run "
                            f"`cisl build {build_dir}`")
