"""Board time for the virtual testbed: per-node tables of the cycle model that sim nodes count in.

`cisl build` of a ``sim`` plan also builds the plan's ARM images (board qemu-m4, the same code and
flags as an nRF52840 node) when the ARM toolchain is there, runs them on the cycle model
(:mod:`codegen.timing.compute`, bit-exact checked) and writes ``node_NN/board_time.txt`` next to
each sim image. A sim node that finds the table keeps a virtual nRF52840 clock (boards/sim/hal_sim.c):

* ``op i c`` — finishing op i of the schedule advances the clock by c cycles. Ops inside a block
  carry their central cycles; a ``block_begin``'s cycles are moved to its ``block_end`` (whose hook
  runs after the block timer stopped), so a block line measures exactly the ops inside the block,
  as the firmware's block timer does on a board and as `cisl estimate` reports;
* ``rx sg c`` — the receive work of exchange sg (the node's receive callbacks), inside the round;
* ``runtime c`` — per inference, everything outside the ops (input loop, reports);
* radio rounds advance the clock by the medium's air time (slots × slot length);
* ``mode m`` — in an image holding every elastic mode, the ``op`` and ``runtime`` lines that follow
  are mode m's (the lines before the first ``mode`` are mode 0's); ``rx`` lines use the image's
  exchange numbers, which differ per mode. The node counts the mode it runs (cisl_node_mode).

The table names the plan and the sim image it belongs to; tools that place it (``cisl sim``,
``cisl flash`` onto sim nodes) check both, so a stale table is never used.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from ..errors import UserError
from ..fsutil import write_text_atomic
from ..ops import kind_of
from ..plan.io import Plan, load_plan
from .compute import NodeCompute

TABLE = "board_time.txt"
VERSION = 1


def table_text(plan: Plan, node: NodeCompute, image_sha: str,
               modes: list[tuple[Plan, NodeCompute]] = ()) -> str:
    """The table of one node; ``modes``: of an image holding every elastic mode, each further mode's
    plan and cycles (mode 1 first)."""
    from .comm import round_guard_us

    out = [f"cisl-board-time {VERSION}", f"plan {plan.sha256[:16]}", f"image {image_sha}",
           f"clock_hz {int(node.clock_hz)}"]
    if round_guard_us(plan):  # the board's initiator waits it before slot 0 of every round
        out.append(f"guard_us {round_guard_us(plan)}")
    for m, (mode_plan, nc) in enumerate([(plan, node), *modes]):
        if m:
            out.append(f"mode {m}")
        out += _mode_lines(mode_plan, nc, sg_base=m * len(mode_plan.sgs))
    return "\n".join(out) + "\n"


def _mode_lines(plan: Plan, node: NodeCompute, sg_base: int) -> list[str]:
    """runtime, op and rx lines of one mode (its exchanges numbered from ``sg_base`` in the image)."""
    ops = plan.nodes[node.device].ops
    cycles = {i: int(round(c[1])) for i, c in node.op_cycles.items()}
    inside = {i for b in node.blocks for i in b.ops}
    out = [f"runtime {int(round(node.runtime_cycles[1] - _outside(node, inside)))}"]
    pending = 0
    for i, op in enumerate(ops):
        c = cycles.get(i, 0)
        marker = kind_of(op).block_marker
        if marker == "begin":
            pending += c
            continue
        if marker == "end":
            c += pending
            pending = 0
        if c:
            out.append(f"op {i} {c}")
    rx: dict[int, int] = {}
    for b in node.blocks:
        per_sg = node_rx_by_sg(plan, node, b)
        for sg, c in per_sg.items():
            rx[sg] = rx.get(sg, 0) + c
    return out + [f"rx {sg_base + sg} {c}" for sg, c in sorted(rx.items()) if c]


def _outside(node: NodeCompute, inside: set[int]) -> float:
    """Central cycles of ops outside every block (their hooks count them; not again in runtime)."""
    return sum(c[1] for i, c in node.op_cycles.items() if i not in inside)


def node_rx_by_sg(plan: Plan, node: NodeCompute, block) -> dict[int, int]:
    """The block's receive work per exchange (each sync op's callbacks belong to its own exchange)."""
    ops = plan.nodes[node.device].ops
    out: dict[int, int] = {}
    for i in block.ops:
        c = node.rx_op_cycles.get(i)
        if c is None:
            continue
        sg = int(ops[i].attrs.get("sg", -1))
        if sg >= 0:
            out[sg] = out.get(sg, 0) + int(round(c[1]))
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def write_tables(build_dir: Path, nodes: list[NodeCompute], modes: list[list[NodeCompute]] = ()) -> list[Path]:
    """node_NN/board_time.txt of every node in ``nodes``; ``modes``: of an image holding every elastic
    mode, the cycles of modes 1, 2, … (each a list like ``nodes``)."""
    build_dir = Path(build_dir)
    plan = load_plan(build_dir)
    plans = _mode_plans(build_dir, plan) if modes else []
    paths = []
    for k, n in enumerate(nodes):
        nd = build_dir / f"node_{n.device:02d}"
        image = nd / "firmware.elf"
        path = nd / TABLE
        write_text_atomic(path, table_text(plan, n, sha256(image),
                                           [(plans[m + 1], per[k]) for m, per in enumerate(modes)]))
        paths.append(path)
    return paths


def _mode_plans(build_dir: Path, plan: Plan) -> list[Plan]:
    """Every mode's plan of an image holding every elastic mode, else []."""
    from ..plan.elastic import elastic_plans

    return elastic_plans(build_dir, plan) or []


def remove_tables(build_dir: Path, plan: Plan) -> None:
    for n in plan.nodes:
        (Path(build_dir) / f"node_{n.device:02d}" / TABLE).unlink(missing_ok=True)


def read_header(path: Path) -> dict[str, str]:
    head = {}
    for line in Path(path).read_text().splitlines()[:5]:
        k, _, v = line.partition(" ")
        head[k] = v
    return head


def check_table(table: Path, image: Path, plan: Plan | None = None) -> bool:
    """True if ``table`` belongs to ``image`` (of ``plan``); False if there is none; UserError if stale."""
    if not table.is_file():
        return False
    head = read_header(table)
    if head.get("cisl-board-time") != str(VERSION):
        raise UserError(f"{table}: not a board time table of this cisl version; run `cisl build` again")
    if (plan is not None and head.get("plan") != plan.sha256[:16]) or head.get("image") != sha256(image):
        raise UserError(f"{table}: belongs to another build of this folder (stale); run `cisl build "
                        f"{table.parent.parent}` again")
    return True


def place_table(source_image: Path, dest_image: Path, plan: Plan | None = None) -> bool:
    """Copy the board time table of ``source_image`` next to ``dest_image`` (or remove a stale one
    there); True if the node will count board time."""
    src = Path(source_image).parent / TABLE
    dest = Path(dest_image).parent / TABLE
    if not check_table(src, Path(source_image), plan):
        dest.unlink(missing_ok=True)
        return False
    tmp = dest.with_suffix(".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dest)
    return True


def refresh(build_dir: Path, nodes: list[int] | None = None, jobs: int | None = None,
            say=lambda s: None) -> str:
    """After a build for the virtual testbed (board sim or qemu-m4): the board time tables (or why
    not). A sim plan's ARM images are built first (board qemu-m4, the same code and flags).

    Returns one line for the user. Tables of the rebuilt nodes are removed first, so a failure
    here never leaves a table that belongs to an older image."""
    from ..boards import load_board
    from ..build import build
    from .compute import compute_build

    build_dir = Path(build_dir)
    plan = load_plan(build_dir)
    kind = "sim" if plan.meta["board"] == "sim" else "qemu-m4"
    selected = [n.device for n in plan.nodes] if nodes is None else list(nodes)
    for d in selected:
        (build_dir / f"node_{d:02d}" / TABLE).unlink(missing_ok=True)
    if kind == "sim":
        cc = load_board("qemu-m4").build["cc"]
        if shutil.which(cc) is None:
            return (f"board time: {cc} not found, so the sim nodes will print host time; install the ARM toolchain "
                    f"(Debian/Ubuntu: sudo apt-get install --no-install-recommends gcc-arm-none-eabi "
                    f"libnewlib-arm-none-eabi) and build again for nRF52840 time")
        build(build_dir, "qemu-m4", jobs, say, selected)
    parts = ", ".join(sorted({load_board(plan.node_board(d)).part for d in selected}))
    modes = len(_mode_plans(build_dir, plan))
    if modes and kind == "qemu-m4":
        # the qemu-m4 board reads one mode's cycles and radio per exchange (node_table_bin): counting
        # mode 0's time in another mode would print a wrong board time, so these nodes count instructions
        return (f"board time: not for qemu-m4 nodes of an image with every elastic mode (they print instruction "
                f"counts, clock=icount); build it for board sim for {parts} time per mode")
    say(f"board time: the {parts} cycle model runs {len(selected)} node images"
        + (f" in each of {modes} modes" if modes else ""))
    computed = compute_build(build_dir, jobs=jobs, nodes=selected)
    others = [compute_build(build_dir, jobs=jobs, nodes=selected, mode=m) for m in range(1, modes)]
    write_tables(build_dir, computed, others)
    return (f"board time: {len(computed)} nodes on the {parts} cycle model (bit-exact"
            + (f", each of {modes} modes" if modes else "") + f"), node_NN/{TABLE}: the {kind} nodes print {parts} time")


def read_table(path: Path) -> dict:
    """The numbers of a board time table: clock_hz, runtime, op {index: cycles}, rx {sg: cycles} (mode
    0's runtime and ops), and modes {m: {"runtime", "op"}} for the further modes of an every-mode image."""
    out: dict = {"clock_hz": 64_000_000, "runtime": 0, "op": {}, "rx": {}, "modes": {}}
    cur = out
    for line in Path(path).read_text().splitlines()[1:]:
        key, *vals = line.split()
        if key == "mode":
            cur = out["modes"].setdefault(int(vals[0]), {"runtime": 0, "op": {}})
        elif key in ("clock_hz", "runtime"):
            cur[key] = int(vals[0])
        elif key == "op":
            cur["op"][int(vals[0])] = int(vals[1])
        elif key == "rx":
            out["rx"][int(vals[0])] = int(vals[1])
    return out


# -- qemu-m4 nodes: the table in the binary form the board reads over semihosting ------------------

BIN_TABLE = "board_time.bin"
BIN_MAGIC = b"CISLBT01"
BIN_VERSION = 1


def exchange_radio(rounds, device: int, inferences: int) -> dict[tuple[int, int], tuple[int, int, int]]:
    """(inference, sg) -> (air µs incl. start guards, TX-on µs, RX-on µs) of node ``device``, all the
    exchange's rounds summed: what the radio medium would have told a sim node."""
    out: dict[tuple[int, int], list[int]] = {}
    for r in rounds:
        for i in range(inferences):
            smp = r.samples[i]
            v = out.setdefault((i, r.sg), [0, 0, 0])
            v[0] += smp.slots * r.slot_us + r.guard_us
            v[1] += smp.nodes[device].tx_on_us
            v[2] += smp.nodes[device].rx_on_us
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def lost_messages(plan: Plan, rounds, inferences: int):
    """The messages the slot-level simulation lost, as the int8 reference's ``lost`` argument:
    {sg: bool [inference, receiver, sender]} (a message split over rounds is lost if any part is)."""
    import numpy as np

    n = plan.devices
    lost: dict[int, np.ndarray] = {}
    for r in rounds:
        a = lost.setdefault(r.sg, np.zeros((inferences, n, n), dtype=bool))
        for i in range(inferences):
            for k, node in enumerate(r.samples[i].nodes):
                for j in node.missing:
                    a[i, k, j] = True
    return {sg: a for sg, a in lost.items() if a.any()}


def node_table_bin(plan: Plan, table: dict, radio: dict[tuple[int, int], tuple[int, int, int]], inferences: int) -> bytes:
    """What boards/qemu-m4/board.c reads: header, cycles per op, receive cycles per sg, then per
    inference and sg the air, TX-on and RX-on µs (all little-endian u32)."""
    import struct

    nops = max((len(nd.ops) for nd in plan.nodes), default=0)
    nsg = max([s.sg for s in plan.sgs], default=-1) + 1
    out = bytearray(BIN_MAGIC + struct.pack("<6I", BIN_VERSION, table["clock_hz"], table["runtime"], nops, nsg,
                                             inferences))
    out += struct.pack(f"<{nops}I", *(table["op"].get(i, 0) for i in range(nops)))
    out += struct.pack(f"<{nsg}I", *(table["rx"].get(sg, 0) for sg in range(nsg)))
    for i in range(inferences):
        for sg in range(nsg):
            out += struct.pack("<3I", *radio.get((i, sg), (0, 0, 0)))
    return bytes(out)


def build_with_board_time(build_dir: Path, board: str | None = None, jobs: int | None = None,
                          say=lambda s: None, nodes: list[int] | None = None,
                          board_time: bool = True, profile_ops: bool = False) -> tuple[dict, str | None]:
    """`cisl build`: build the nodes' images, then (``board_time``, for a sim plan or a qemu-m4 plan
    built for qemu-m4) their board time tables with :func:`refresh`. Returns the build's summary and
    refresh's line for the user (None when no table was made). ``profile_ops``: every op prints its
    cycles (``op`` lines, for `cisl profile --logs`): on a board's DWT, or on the virtual testbed the
    board time table's (the cycle model's cycles of the op)."""
    from ..build import build
    from ..fsutil import output_lock

    with output_lock(Path(build_dir)):  # one lock over both steps: a compile of the folder in between is refused
        s = build(build_dir, board, jobs, say, nodes, extra_cflags=["-DCISL_PROFILE_OPS"] if profile_ops else None)
        line = None
        if s["board"] == "sim" or s["board"] == s["plan_board"] == "qemu-m4":
            try:
                plan = load_plan(build_dir)
                selected = [n.device for n in plan.nodes] if nodes is None else list(nodes)
                if board_time:
                    line = refresh(build_dir, nodes, jobs, say)
                else:  # asked for host time: a table an earlier build left would still give board time
                    for d in selected:
                        (Path(build_dir) / f"node_{d:02d}" / TABLE).unlink(missing_ok=True)
                    counts = "host time (clock=host)" if s["board"] == "sim" else "instruction counts (clock=icount)"
                    line = f"board time: off (--no-board-time), so the nodes will print {counts}"
                # with or without board time: a node that cannot exist on the board it stands in for
                check_stand_in_fit(build_dir, plan, selected, str(s.get("kernels", "nnref")))
            except BaseException:
                # the build failed: its summary must not pass `cisl sim`, `cisl flash` or `cisl estimate`
                (Path(build_dir) / "build.json").unlink(missing_ok=True)
                raise
    return s, line


def check_stand_in_fit(build_dir: Path, plan: Plan, nodes: list[int], kernels: str) -> None:
    """Every virtual node must fit the board it stands in for (a mixed testbed's nrf52833dk: half the
    nRF52840's flash and RAM), as a board's build must fit the board: measured on the node's ARM image
    of this plan where there is one (a qemu-m4 plan's own, a sim plan's board-time image), else
    (--no-board-time, or no ARM toolchain) by the planner's estimate of it, which `cisl compile`
    warned with."""
    from ..boards import load_board
    from ..build import check_images
    from ..errors import CheckFailed
    from ..footprint import estimate_plan
    from .compute import check_fits, image_of

    build_dir = Path(build_dir)
    try:
        arm = {d: image_of(build_dir, d, plan) for d in nodes}
        check_images(build_dir, plan, arm, "build-qemu-m4.json" if plan.meta["board"] == "sim" else "build.json")
    except UserError:
        arm = {}  # no ARM image of this plan: the estimate
    estimates: dict[str, dict] = {}
    for d in nodes:
        model = load_board(plan.node_board(d))
        if d in arm:
            check_fits(arm[d], d, model)
            continue
        if model.name not in estimates:
            estimates[model.name] = estimate_plan(plan, model, kernels)
        e = estimates[model.name][d]
        over = {"flash": (e.flash, model.flash_bytes), "RAM": (e.ram, model.ram_bytes)}
        region, (used, budget) = max(over.items(), key=lambda kv: kv[1][0] - kv[1][1])
        if used > budget:
            raise CheckFailed(f"node {d} does not fit {model.name}, the board it stands in for: {region} estimated at "
                              f"{used} of {budget} B (the planner's estimate: no ARM image of this plan was built to "
                              f"measure); give it a smaller share of the model (`cisl plan`) or a larger board")
