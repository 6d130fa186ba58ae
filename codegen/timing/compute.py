"""Compute cycles of every node of a build, per op and per block of the schedule.

Runs each node's ARM image on the cycle model (:mod:`codegen.timing.node`) in parallel processes
and folds the per-op counts into the plan's blocks (``block_begin`` .. ``block_end``). A block's
compute is what the firmware's own block timer measures: the ops strictly between its
``block_begin`` and ``block_end`` (the block lines' printing is outside), communication taken out.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import interrupts
from ..boards import Board, load_board
from ..errors import CheckFailed, UserError
from ..fsutil import note_written
from ..ops import REGISTRY, kind_of
from ..plan.io import Plan, load_plan
from ..transcript import reference
from . import cycle_cache
from .engine import Counts
from .memsystem import MemoryModel
from .node import RUNTIME, NodeCycles, run_node



@dataclass(frozen=True)
class BlockKey:
    index: int   # position among the node's blocks (embed, attn0, mlp0, ..., head)
    block: str   # embed, attn, mlp, head
    layer: int

    @property
    def label(self) -> str:
        return self.block if self.layer < 0 else f"{self.block}{self.layer}"


@dataclass
class BlockCycles:
    key: BlockKey
    ops: list[int]                 # op indices inside the block
    exchanges: list[int]           # sg indices of the block's communication rounds
    cycles: tuple[float, float, float]   # compute, per inference
    rx_cycles: tuple[float, float, float]  # CPU work inside the rounds (receive callbacks), per inference
    macs: int = 0
    core_cycles: float = 0.0   # central cycles without the memory system's penalties, per inference
    mem_events: float = 0.0    # flash accesses that pay wait states at the central value, per inference


@dataclass
class NodeCompute:
    device: int
    board: str
    clock_hz: float
    blocks: list[BlockCycles]
    op_cycles: dict[int, tuple[float, float, float]]
    op_kinds: dict[int, str]
    runtime_cycles: tuple[float, float, float]   # per inference, outside the ops (input loop, reports)
    insns_per_inference: float
    messages_checked: int
    lines: list[str] = field(default_factory=list)
    rx_op_cycles: dict[int, tuple[float, float, float]] = field(default_factory=dict)  # receive work per sync op

    def compute_cycles(self) -> tuple[float, float, float]:
        return _sum3(b.cycles for b in self.blocks)


def _sum3(items) -> tuple[float, float, float]:
    lo = ce = hi = 0.0
    for a, b, c in items:
        lo += a
        ce += b
        hi += c
    return lo, ce, hi


def modelled(board: Board) -> bool:
    """A board the cycle model prices: a Cortex-M4 at a fixed clock with memory-system facts."""
    return (board.facts["board"].get("core", "").startswith("cortex-m4") and int(board.facts["board"]["clock_hz"]) > 0
            and "flash_wait" in board.facts.get("timing", {}))


def board_for_estimate(plan: Plan, device: int = 0) -> tuple[Board, Board]:
    """(the plan's board, the board whose timing and power facts model node ``device``: its own, or
    the one a virtual board stands in for; a mixed testbed's nodes differ)."""
    name = plan.meta["board"]
    board = load_board(name)
    model = load_board(plan.node_board(device))
    if not modelled(model):
        raise UserError(f"the build is compiled for board '{name}', which the cycle model cannot model (it runs "
                        f"ARM images of Cortex-M4 boards with [timing] facts, such as nrf52840dk, nrf52833dk, and of "
                        f"qemu-m4 and sim plans); compile with `cisl compile --board nrf52840dk` and `cisl build`")
    return board, model


def check_fits(elf: Path, device: int, model: Board) -> None:
    """A node image larger than the board it is timed for (a virtual node standing in for a smaller
    part: its qemu-m4 image was size-checked against QEMU's memory only) fails like a build that does
    not fit, not with the cycle model's own error about a segment outside the part's memory."""
    from ..elfsize import read_elf_size

    size = read_elf_size(elf)
    over = {"FLASH": size.flash - model.flash_bytes, "RAM": size.ram - model.ram_bytes}
    region, n = max(over.items(), key=lambda kv: kv[1])
    if n > 0:
        raise CheckFailed(f"node {device} does not fit {model.name}, the board it stands in for: {region} overflows "
                          f"by {n} bytes (flash {size.flash} of {model.flash_bytes} B, RAM {size.ram} of "
                          f"{model.ram_bytes} B); give it a smaller share of the model (`cisl plan`) or a larger board")


def image_of(build_dir: Path, device: int, plan: Plan) -> Path:
    """The node's ARM image: its own for ARM boards; for a sim plan the qemu-m4 image of the same
    plan (same generated code, same flags as an nRF52840 node)."""
    nd = Path(build_dir) / f"node_{device:02d}"
    if plan.meta["board"] == "sim":
        elf = nd / "qemu-m4" / "firmware.elf"
        if not elf.is_file():
            raise UserError(f"{elf}: not built; the cycle model runs the plan's ARM images: run `cisl build "
                            f"{build_dir} --board qemu-m4` (or `cisl build {build_dir}`, which makes them)")
        return elf
    elf = nd / "firmware.elf"
    if not elf.is_file():
        if (Path(build_dir) / "build.json").is_file() or not any(Path(build_dir).glob("node_*/size.json")):
            raise UserError(f"{elf}: not built; run `cisl build {build_dir}` first")
        # a build ran and failed (its size table is there, its summary is not): building again fails the same way
        raise UserError(f"{elf}: not built: the last `cisl build {build_dir}` failed (e.g. a node that does not "
                        f"fit its board); fix what its FAILED line says, then build again")
    return elf


def op_work(plan: Plan, device: int, op_index: int) -> int:
    """Units of work of one op (its kind's ``work_unit``: MACs of fc/bmm/fc_s32, output elements of
    softmax, LayerNorm and adds), 0 for ops without a natural unit."""
    node = plan.nodes[device]
    op = node.ops[op_index]
    return kind_of(op).work(op, {n: node.tensors[n].shape for n in op.ins + op.outs if n in node.tensors})


def work_unit(op) -> str | None:
    return kind_of(op).work_unit


WORK_UNITS = {name: k.work_unit for name, k in sorted(REGISTRY.items()) if k.work_unit}
"""The op kinds the per-class tables count, with their unit of work."""


def _macs(plan: Plan, device: int, op_index: int) -> int:
    return op_work(plan, device, op_index) if work_unit(plan.nodes[device].ops[op_index]) == "MAC" else 0


def fold_blocks(plan: Plan, device: int, nc: NodeCycles) -> NodeCompute:
    board, model = board_for_estimate(plan, device)
    clock = float(model.facts["board"]["clock_hz"])
    ops = plan.nodes[device].ops
    blocks: list[BlockCycles] = []
    cur: BlockCycles | None = None
    zero = (0.0, 0.0, 0.0)
    for i, op in enumerate(ops):
        marker = kind_of(op).block_marker
        if marker == "begin":
            cur = BlockCycles(BlockKey(len(blocks), str(op.attrs["block"]), int(op.attrs["layer"])), [], [], zero,
                              zero)
            blocks.append(cur)
            continue
        if marker == "end":
            cur = None
            continue
        if cur is None:
            continue
        cur.ops.append(i)
        cur.macs += _macs(plan, device, i)
        if kind_of(op).sync:
            cur.exchanges.append(int(op.attrs["sg"]))
    per_inf = {i: nc.op_cycles(i) for i in range(len(ops))}
    rx = {i: tuple(v / nc.inferences for v in c.cycles(nc.memory)) for i, c in nc.comm_ops.items()}
    for b in blocks:
        b.cycles = _sum3(per_inf[i] for i in b.ops)
        b.rx_cycles = _sum3(rx.get(i, zero) for i in b.ops)
        counts = [nc.ops[i] for i in b.ops if i in nc.ops]
        b.core_cycles = sum(c.central for c in counts) / nc.inferences
        b.mem_events = sum(c.flash_line_changes + c.icache_misses for c in counts) / nc.inferences
    outside = [i for i in range(len(ops)) if not any(i in b.ops for b in blocks)]
    runtime = _sum3([nc.op_cycles(RUNTIME)] + [per_inf[i] for i in outside])
    return NodeCompute(device, board.name, clock, blocks, per_inf, {i: op.kind for i, op in enumerate(ops)}, runtime,
                       nc.insns / nc.inferences, nc.messages_checked, nc.lines,
                       {i: c for i, c in rx.items() if isinstance(i, int)})


def mode_plan(build_dir: Path, mode: int | None) -> Plan:
    """The plan of ``build_dir`` or, of an image holding every elastic mode, that mode's plan."""
    plan = load_plan(build_dir)
    if mode is None:
        return plan
    from ..plan.elastic import elastic_plans

    plans = elastic_plans(build_dir, plan)
    if plans is None:
        raise UserError(f"{build_dir}: not an image with every elastic mode; drop --mode")
    if not 0 <= mode < len(plans):
        raise UserError(f"--mode {mode}: {build_dir} holds modes 0 to {len(plans) - 1}")
    return plans[mode]


def _run_one(args) -> NodeCompute:
    build_dir, device, inferences, flash_wait, flash_bytes, mode = args
    plan = mode_plan(build_dir, mode)
    board, model = board_for_estimate(plan, device)
    xq = inputs_for(build_dir, plan, inferences)
    image = image_of(build_dir, device, load_plan(build_dir))
    source = Path(build_dir) / f"node_{device:02d}" / "cisl_node.c"  # maps the image's code to the plan's ops
    key = cycle_cache.key_of("node-compute", plan.sha256, device, mode, inferences, flash_wait, flash_bytes,
                             model.facts, image.read_bytes(), source.read_bytes() if source.is_file() else b"",
                             xq.dtype.str, list(xq.shape), xq.tobytes())
    kept = cycle_cache.lookup(image.parent, key)
    if kept is not None:
        return node_from_json(kept)
    ref = reference(plan, xq)
    memory = MemoryModel.for_board(model, flash_wait, flash_bytes)
    nc = fold_blocks(plan, device, run_node(build_dir, plan, device, xq, ref, image, memory, mode))
    cycle_cache.store(image.parent, key, node_to_json(nc))
    return nc


def node_to_json(nc: NodeCompute) -> dict:
    """Every field, exactly (JSON floats round-trip); :func:`node_from_json` reads it back."""
    d = asdict(nc)
    for k in ("op_cycles", "op_kinds", "rx_op_cycles"):
        d[k] = [[i, v] for i, v in d[k].items()]
    return d


def node_from_json(d: dict) -> NodeCompute:
    t3 = tuple
    blocks = [BlockCycles(BlockKey(**b["key"]), list(b["ops"]), list(b["exchanges"]), t3(b["cycles"]),
                          t3(b["rx_cycles"]), b["macs"], b["core_cycles"], b["mem_events"]) for b in d["blocks"]]
    return NodeCompute(d["device"], d["board"], d["clock_hz"], blocks, {i: t3(v) for i, v in d["op_cycles"]},
                       {i: v for i, v in d["op_kinds"]}, t3(d["runtime_cycles"]), d["insns_per_inference"],
                       d["messages_checked"], list(d["lines"]), {i: t3(v) for i, v in d["rx_op_cycles"]})


def inputs_for(build_dir: Path, plan: Plan, inferences: int) -> np.ndarray:
    from ..inputs import load_build_inputs

    x = load_build_inputs(build_dir, lookback=plan.cfg.lookback)
    reps = -(-inferences // len(x))
    return plan.quantize_input(np.concatenate([x] * reps)[:inferences].astype(np.float64))


def images_digest(build_dir: Path, plan: Plan) -> str:
    h = hashlib.sha256()
    for d in range(plan.devices):
        h.update(image_of(build_dir, d, plan).read_bytes())
    return h.hexdigest()[:16]


def compute_build(build_dir: Path, inferences: int = 1, jobs: int | None = None, nodes: list[int] | None = None,
                  flash_wait: tuple[float, float, float] | None = None, progress=None,
                  flash_bytes: int | None = None, mode: int | None = None) -> list[NodeCompute]:
    """Per-node compute of a built nrf52840dk/qemu-m4 build (each node checked bit-exact); ``mode``:
    of an image holding every elastic mode, that mode. ``flash_bytes``: time the images in a memory of
    that size instead of the stand-in board's; the caller wants cycles of images that need not fit the
    board (`cisl profile`'s reference build of a model too large for an nRF52833 at its node count),
    so they are not size-checked against it."""
    build_dir = Path(build_dir)
    plan = load_plan(build_dir)
    todo = list(range(plan.devices)) if nodes is None else nodes
    for d in todo:
        board_for_estimate(plan, d)
    from ..build import check_images

    # the images `cisl build` made from this plan, never stale ones (a plan.json edited since, a
    # rebuilt node): sim plans are timed on their qemu-m4 images
    check_images(build_dir, plan, {d: image_of(build_dir, d, plan) for d in todo},
                 "build-qemu-m4.json" if plan.meta["board"] == "sim" else "build.json")
    for d in todo if flash_bytes is None else ():
        check_fits(image_of(build_dir, d, plan), d, board_for_estimate(plan, d)[1])
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
    args = [(build_dir, d, inferences, flash_wait, flash_bytes, mode) for d in todo]
    out = []
    try:
        if jobs == 1:
            for a in args:
                out.append(_run_one(a))
                if progress:
                    progress(1)
            return out
        with ProcessPoolExecutor(jobs, initializer=interrupts.worker_defaults) as pool:
            for r in pool.map(_run_one, args):
                out.append(r)
                if progress:
                    progress(1)
            return out
    finally:  # the nodes' stored results are cisl's, noted at once (fsutil.note_written)
        note_written(*(image_of(build_dir, d, plan).parent / cycle_cache.CACHE_FILE for d in todo))


__all__ = ["BlockCycles", "BlockKey", "Counts", "NodeCompute", "compute_build", "fold_blocks", "images_digest"]
