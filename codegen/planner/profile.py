"""Node profiles: what the planner needs to know of every node (`cisl profile`).

Per node of a testbed (or for one board):

* **rates**: cycles per unit of work of every op class, ``cycles = per_unit · units + per_out ·
  outputs + per_op`` (``outputs``: the elements the op writes; ``per_out`` is fitted only where the
  reference has sizes enough to tell it from the units, else 0), least-squares (non-negative) over
  the ops of a reference build of the model's shapes run on the cycle model
  (codegen/timing; every node checked bit-exact), or over the ``op`` lines (DWT cycles) that real
  boards printed for a `cisl build --profile-ops` build recorded by `cisl logs` (``--logs``). Units are the op kind's work unit (MACs of
  fc/bmm/fc_s32, elements of adds, LayerNorm, softmax, rescale) and, for the other kinds, the
  elements they write (somegather: the gathered tensor, with the receive work folded in). The
  reference uses random weights: cycles depend on shapes, not values.
* **memory**: the board's flash and RAM and what code and runtime take before any model (the
  footprint model's fixed parts and the stack): what is left for the node's share.
* **power**: the board's datasheet currents (board.toml [power], central figures; the planner's
  re-check carries low..high) and the testbed file's energy source and budget per inference.

The profile names the model shapes it was made for; `cisl plan` refuses a profile of another model
(different shapes give other rates and footprints).
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..boards import load_board
from ..errors import UserError
from ..modelspec import ModelConfig
from ..ops import kind_of

FORMAT = "cisl-profile"
VERSION = 1
SAMPLE_NODES = 2  # reference nodes run on the cycle model (node 0, the sink, has the head's reduction)


def op_units(op, shapes: dict[str, tuple[int, ...]]) -> int:
    """Units of work of one op: its kind's work unit, else the elements it writes (0 for markers)."""
    kind = kind_of(op)
    if kind.work_unit:
        return int(kind.work(op, shapes))
    for name in list(op.outs) + list(op.ins):
        if name in shapes:
            return int(np.prod(shapes[name]))
    return 0


def op_outputs(op, shapes: dict[str, tuple[int, ...]]) -> int:
    """The elements the op writes (its first output), 0 for one that writes nothing."""
    return int(np.prod(shapes[op.outs[0]])) if op.outs and op.outs[0] in shapes else 0


@dataclass(frozen=True)
class Rate:
    per_unit: float  # cycles per unit of work
    per_op: float    # cycles per call
    # cycles per element written: an fc's requantisation and store per output, whatever its depth, which
    # MACs alone price wrongly (the embedding's 16-deep fc ran 26 % above the 64-deep ones' rate)
    per_out: float = 0.0

    def cycles(self, units: int, outputs: int = 0) -> float:
        return self.per_unit * units + self.per_out * outputs + self.per_op


def fit_rate(units: list[int], cycles: list[float], outputs: list[int] | None = None) -> Rate:
    """Least squares ``cycles = a·units + c·outputs + b`` with a, b, c >= 0 where the sizes tell the
    three apart (units and outputs not in proportion); ``c·outputs + b`` where only the outputs vary;
    else ``cycles = a·units + b`` (one distinct size: through 0)."""
    x = np.asarray(units, dtype=float)
    y = np.asarray(cycles, dtype=float)
    if outputs is not None:
        from scipy.optimize import nnls

        o = np.asarray(outputs, dtype=float)
        design = np.column_stack([x, o, np.ones_like(x)])
        if np.linalg.matrix_rank(design) == 3:
            scale = np.maximum(np.abs(design).max(axis=0), 1.0)  # columns of like size for NNLS
            coef = nnls(design / scale, y)[0] / scale
            return Rate(float(coef[0]), float(coef[2]), float(coef[1]))
        if len(set(units)) == 1 and len(set(outputs)) > 1:  # one size of work, several of output (a model's
            # two attention products: the same MACs, 144 or 48 outputs per head): the outputs tell them apart
            scale = np.array([max(o.max(), 1.0), 1.0])
            coef = nnls(np.column_stack([o, np.ones_like(o)]) / scale, y)[0] / scale
            return Rate(0.0, float(coef[1]), float(coef[0]))
    if len(set(units)) > 1:
        a, b = np.polyfit(x, y, 1)
        if a >= 0 and b >= 0:
            return Rate(float(a), float(b))
        if a < 0:
            return Rate(0.0, float(y.mean()))
    if x.sum() > 0:
        return Rate(float(y.sum() / x.sum()), 0.0)
    return Rate(0.0, float(y.mean()) if len(y) else 0.0)


@dataclass
class BoardProfile:
    """What the cycle model measured for one board on the model's shapes."""

    board: str
    clock_hz: float
    rates: dict[str, Rate]
    kernels: str
    # per inference, the work outside the blocks (input loop, block and infer lines, output ops) of the
    # slowest reference node: `cisl estimate` counts it; 0 where it was not measured (op lines of boards)
    runtime_cycles: float = 0.0

    def op_cycles(self, op, shapes) -> float:
        r = self.rates.get(op.kind)
        if r is None:
            if kind_of(op).block_marker:
                return 0.0
            raise UserError(f"the profile of board {self.board} has no rate for op kind '{op.kind}'; profile "
                            f"again with this cisl (`cisl profile`)")
        return r.cycles(op_units(op, shapes), op_outputs(op, shapes))

    def to_json(self) -> dict:
        return {"board": self.board, "clock_hz": self.clock_hz, "kernels": self.kernels,
                "runtime_cycles": self.runtime_cycles,
                "rates": {k: {"per_unit": r.per_unit, "per_op": r.per_op, "per_out": r.per_out}
                          for k, r in sorted(self.rates.items())}}

    @staticmethod
    def from_json(d: dict) -> "BoardProfile":
        return BoardProfile(str(d["board"]), float(d["clock_hz"]),
                            {k: Rate(float(v["per_unit"]), float(v["per_op"]), float(v.get("per_out", 0.0)))
                             for k, v in d["rates"].items()},
                            str(d.get("kernels", "nnref")), float(d.get("runtime_cycles", 0.0)))


@dataclass
class Power:
    """Central datasheet currents of a node's board (mA; idle µA) and the supply voltage."""

    voltage_v: float
    cpu_ma: float
    tx_ma: float
    rx_ma: float
    idle_ua: float

    @staticmethod
    def of_board(board: str, phy: str = "2M") -> "Power":
        from ..timing.energy import load_power

        p = load_power(board)
        return Power(p.voltage_v, p.cpu_active_ma.central, p.tx_ma().central, p.rx_ma(phy).central,
                     p.idle_ua.central)


@dataclass
class NodeProfile:
    """One testbed node: its board's profile, memory budgets, currents and energy budget."""

    id: int
    board: str
    flash_bytes: int
    ram_bytes: int
    flash_free: int   # after the fixed code (kernels, runtime, Mixer, board, C library)
    ram_free: int     # after the fixed statics and the stack
    power: Power
    energy_source: str = "battery"
    energy_uj: float | None = None
    position: tuple[float, ...] | None = None

    def to_json(self) -> dict:
        return {"id": self.id, "board": self.board, "flash_bytes": self.flash_bytes, "ram_bytes": self.ram_bytes,
                "flash_free": self.flash_free, "ram_free": self.ram_free, "power": self.power.__dict__,
                "energy_source": self.energy_source, "energy_uj": self.energy_uj,
                "position": list(self.position) if self.position else None}

    @staticmethod
    def from_json(d: dict) -> "NodeProfile":
        return NodeProfile(int(d["id"]), str(d["board"]), int(d["flash_bytes"]), int(d["ram_bytes"]),
                           int(d["flash_free"]), int(d["ram_free"]), Power(**d["power"]), str(d["energy_source"]),
                           None if d.get("energy_uj") is None else float(d["energy_uj"]),
                           tuple(d["position"]) if d.get("position") else None)


@dataclass
class Profile:
    model: ModelConfig
    boards: dict[str, BoardProfile]
    nodes: list[NodeProfile]
    topology: str | None = None   # the testbed's [sim] topology when profiled (`cisl plan` reads the file's own)
    seed: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def node(self, node_id: int) -> NodeProfile:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise UserError(f"the profile has no node {node_id} (nodes {', '.join(str(n.id) for n in self.nodes)})")

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "model": self.model.to_json(),
                "boards": {k: b.to_json() for k, b in sorted(self.boards.items())},
                "nodes": [n.to_json() for n in self.nodes], "topology": self.topology, "seed": self.seed,
                "meta": self.meta}

    def check_model(self, cfg: ModelConfig, where: str) -> None:
        if cfg != self.model:
            mine = self.model.to_json()
            other = cfg.to_json()
            diff = next(k for k in mine if mine[k] != other.get(k))
            raise UserError(f"{where}: a profile of another model ({diff} = {mine[diff]}, the model has "
                            f"{other.get(diff)}); profile this model with `cisl profile MODEL --testbed T -o ...`")


def _value_problem(d: dict) -> str | None:
    """The first value of a profile document the planner cannot compute with (a rate, budget, current,
    position or seed that is not a finite number of the right sign), else None. Rates, clocks and
    currents are also held below 1e12: larger ones overflow the MILP's objective."""
    def number(v, low: float | None = 0.0, high: float = 1e12) -> bool:
        return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and (low is None or v >= low) and abs(v) <= high)

    def whole(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if not isinstance(d.get("boards"), dict) or not isinstance(d.get("nodes"), list):
        return "boards must be an object and nodes a list"
    for name, b in d["boards"].items():
        if not isinstance(b, dict) or not number(b.get("clock_hz")) or not b["clock_hz"] > 0:
            return f"board {name}: clock_hz must be a number in (0, 1e12]"
        if "runtime_cycles" in b and not number(b["runtime_cycles"]):
            return f"board {name}: runtime_cycles must be a number of cycles in [0, 1e12]"
        for kind, r in (b.get("rates") or {}).items() if isinstance(b.get("rates"), dict) else ():
            if not isinstance(r, dict) or not (number(r.get("per_unit")) and number(r.get("per_op"))
                                               and number(r.get("per_out", 0.0))):
                return f"board {name}: rate {kind} needs per_unit and per_op (and per_out, if any), cycles in [0, 1e12]"
    for i, n in enumerate(d["nodes"]):
        if not isinstance(n, dict):
            return f"nodes[{i}] must be an object"
        for key in ("id", "flash_bytes", "ram_bytes", "flash_free", "ram_free"):
            if not whole(n.get(key)):
                return f"node {n.get('id', i)}: {key} must be a whole number >= 0, got {n.get(key)!r}"
        if isinstance(n.get("power"), dict) and not all(number(v) for v in n["power"].values()):
            return f"node {n['id']}: power currents and voltage must be numbers in [0, 1e12]"
        if n.get("energy_uj") is not None and not number(n["energy_uj"], high=math.inf):
            return f"node {n['id']}: energy_uj must be a finite number >= 0, got {n['energy_uj']!r}"
        pos = n.get("position")
        if pos is not None and not (isinstance(pos, list) and len(pos) in (2, 3) and all(number(v, None, math.inf) for v in pos)):
            return f"node {n['id']}: position must be [x, y] or [x, y, z] in metres, got {pos!r}"
    if not whole(d.get("seed", 0)):
        return f"seed must be a whole number >= 0, got {d.get('seed')!r}"
    if d.get("topology") is not None and not isinstance(d["topology"], str):
        return f"topology must be a name, got {d['topology']!r}"
    return None


def read_profile(path: Path | str) -> Profile:
    from .split import read_document

    path = Path(path)
    d = read_document(path, FORMAT, VERSION, "profile", "cisl profile MODEL --testbed T")
    problem = _value_problem(d)
    if problem:
        raise UserError(f"{path}: {problem}; profile again (`cisl profile MODEL --testbed T`)")
    try:
        prof = Profile(ModelConfig.from_json(d["model"]),
                       {k: BoardProfile.from_json(v) for k, v in d["boards"].items()},
                       [NodeProfile.from_json(n) for n in d["nodes"]], d.get("topology"), int(d.get("seed", 0)),
                       dict(d.get("meta", {})))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UserError(f"{path}: profile is incomplete or malformed ({e}); profile again") from None
    # every node's board needs its measured rates: the planner prices each node's work with them
    unmeasured = sorted({n.board for n in prof.nodes} - set(prof.boards))
    if unmeasured:
        raise UserError(f"{path}: no rates for board(s) {', '.join(unmeasured)} that its nodes use; "
                        "profile again (`cisl profile MODEL --testbed T`)")
    for n in prof.nodes:  # the planner sizes shares by the board's own budgets: the profile must agree
        b = load_board(n.board)
        if (n.flash_bytes, n.ram_bytes) != (b.flash_bytes, b.ram_bytes) or n.flash_free > n.flash_bytes \
                or n.ram_free > n.ram_bytes:
            raise UserError(f"{path}: node {n.id}: flash/RAM {n.flash_bytes}/{n.ram_bytes} B (free "
                            f"{n.flash_free}/{n.ram_free} B) do not match board {n.board} ({b.flash_bytes}/"
                            f"{b.ram_bytes} B); profile again (`cisl profile MODEL --testbed T`)")
    return prof


def node_profile(node_id: int, board: str, energy_source: str = "battery", energy_uj: float | None = None,
                 position=None, kernels: str = "nnref", phy: str = "2M") -> NodeProfile:
    """A node's memory budgets (after the fixed code and statics) and currents from its board.toml."""
    b = load_board(board)
    fp = b.facts.get("footprint", {})
    lib = fp.get(kernels, fp.get("nnref", {}))
    if not lib or "power" not in b.facts:
        raise UserError(f"board '{board}' has no [footprint] or [power] facts; the planner needs both "
                        f"(see boards/nrf52840dk/board.toml)")
    stack = int(b.build.get("stack_bytes", 0))
    return NodeProfile(node_id, b.name, b.flash_bytes, b.ram_bytes, b.flash_bytes - int(lib["flash_fixed"]),
                       b.ram_bytes - int(lib["ram_fixed"]) - stack, Power.of_board(board, phy), energy_source,
                       energy_uj, tuple(position) if position else None)


def reference_shares(cfg: ModelConfig, d: int) -> tuple[list[int], list[int]]:
    """Heads and hidden units per node of the reference build: even, except that the two sampled nodes
    hold different shares (node 0 a head and half its hidden units fewer, node 1 as many more), so every
    op whose size follows a node's share is measured at two sizes and its fixed cost per call is told
    from its cost per unit (an even reference priced a 1-node plan's column copies at 4× their cycles,
    its whole latency 1.6 % high; 0.9 % with this one)."""
    heads = [cfg.heads // d] * d
    hidden = [cfg.mlp_hidden // d] * d
    heads[-1] += cfg.heads - sum(heads)
    hidden[-1] += cfg.mlp_hidden - sum(hidden)
    if d >= 2 and heads[0] >= 2:
        heads[0], heads[1] = heads[0] - 1, heads[1] + 1
    elif d >= 3 and max(heads[2:]) >= 2:  # one head each on the sampled nodes: node 1 takes one from the richest
        donor = 2 + heads[2:].index(max(heads[2:]))
        heads[donor], heads[1] = heads[donor] - 1, heads[1] + 1
    if d >= 2 and hidden[0] >= 2:
        moved = hidden[0] // 2
        hidden[0], hidden[1] = hidden[0] - moved, hidden[1] + moved
    return heads, hidden


def measure_board(cfg: ModelConfig, board: str, work: Path, jobs: int | None = None,
                  say: Callable[[str], None] = lambda s: None, devices: int | None = None) -> BoardProfile:
    """Run a reference build of ``cfg``'s shapes for ``board`` on the cycle model; fit the rates."""
    from ..build import build
    from ..compile import CompileOptions, compile_model
    from ..kernel_library import kernel_library
    from ..randmodel import make_model_dir
    from ..timing.compute import compute_build
    from .split import SplitFile, write_split

    from ..modelspec import weight_shapes

    b = load_board(board)
    params = sum(int(np.prod(s)) for s in weight_shapes(cfg).values())
    d = devices or next((n for n in (4, 8, 16, 32, 64) if n <= cfg.heads and params / n < 600_000),
                        min(cfg.heads, cfg.mlp_hidden))
    model = make_model_dir(work / "model", cfg, d, 1.0, seed=0, calibration=8, tests=4, rescale=True)
    out = work / "build"
    say(f"profile {board}: reference build of {d} nodes on the cycle model")
    # compiled for the virtual board standing in for this one and linked as qemu-m4 images (the same
    # code and flags, 1 MB each): the reference's nodes need not fit the part itself
    split = work / "reference_split.json"
    write_split(split, SplitFile(cfg, 1.0, list(range(d)), [b.name] * d, *reference_shares(cfg, d), {}))
    compile_model(model, out, CompileOptions(board="sim", split=split, max_calibration=8))
    build(out, "qemu-m4", jobs=jobs, nodes=list(range(min(SAMPLE_NODES, d))))
    from ..plan.io import load_plan

    plan = load_plan(out)
    sample = list(range(min(SAMPLE_NODES, d)))
    # the images are linked as qemu-m4 images: the memory model takes its flash size (the part's
    # wait states and cache are the board's own)
    computed = compute_build(out, jobs=jobs, nodes=sample, flash_bytes=load_board("qemu-m4").flash_bytes)
    units: dict[str, list[int]] = {}
    outputs: dict[str, list[int]] = {}
    cycles: dict[str, list[float]] = {}
    for nc in computed:
        node = plan.nodes[nc.device]
        shapes = {t: node.tensors[t].shape for t in node.tensors}
        for i, op in enumerate(node.ops):
            if kind_of(op).block_marker:
                continue
            c = nc.op_cycles.get(i, (0.0, 0.0, 0.0))[1] + nc.rx_op_cycles.get(i, (0.0, 0.0, 0.0))[1]
            units.setdefault(op.kind, []).append(op_units(op, shapes))
            outputs.setdefault(op.kind, []).append(op_outputs(op, shapes))
            cycles.setdefault(op.kind, []).append(c)
    rates = {k: fit_rate(units[k], cycles[k], outputs[k]) for k in sorted(units)}
    runtime = max((nc.runtime_cycles[1] for nc in computed), default=0.0)
    return BoardProfile(b.name, float(b.facts["board"]["clock_hz"]), rates, kernel_library().kind, float(runtime))


def measure_logs(cfg: ModelConfig, build_dir: Path, logs_dir: Path) -> dict[str, BoardProfile]:
    """Rates from real boards: the ``op inf= i= cycles=`` lines (DWT cycles) of a run of a build made
    with `cisl build --profile-ops`, recorded by `cisl logs`; one profile per board of the build."""
    from ..kernel_library import kernel_library
    from ..plan.io import load_plan
    from ..testbed.report import load_run, per_node_latency

    plan = load_plan(build_dir)
    if plan.cfg != cfg:
        raise UserError(f"{build_dir}: a build of another model; profile with a build of this model")
    run = load_run(logs_dir)
    if run.failed is not None:  # rates from a run `cisl logs` failed (a stale board, a node that stopped) mislead
        first = next(iter(sorted(run.failed.items())), None)
        why = f"node {first[0]}: {first[1]}" if first else (run.failed_problems or ["see its summary.json"])[0]
        raise UserError(f"{logs_dir}: `{run.failed_by}` failed this run ({why}); profile from a run "
                        f"it recorded as good")
    boots = run.of("boot")
    stale = [r for r in boots if str(r.get("plan")) != plan.sha256[:16]]
    if not boots or stale:
        raise UserError(f"{logs_dir}: logs of another build (boot plan={stale[0].get('plan') if stale else '?'}, "
                        f"{build_dir} is {plan.sha256[:16]}); flash {build_dir} and record it with `cisl logs`")
    clocks = {str(r.get("clock", "dwt")) for r in boots}
    if not clocks <= {"dwt", "model"}:
        raise UserError(f"{logs_dir}: the nodes counted {', '.join(sorted(clocks))}, not CPU cycles; op cycles come "
                        f"from boards (DWT) or the virtual testbed with board time")
    ops = run.of("op")
    if not ops:
        raise UserError(f"{logs_dir}: no `op` lines; build with `cisl build {build_dir} --profile-ops`, flash it and "
                        f"record a run with `cisl logs`")
    units: dict[str, dict[str, list[int]]] = {}
    outputs: dict[str, dict[str, list[int]]] = {}
    cycles: dict[str, dict[str, list[float]]] = {}
    for r in ops:
        k, i = int(r["node"]), int(r["i"])
        node = plan.nodes[k] if 0 <= k < plan.devices else None
        op = node.ops[i] if node is not None and 0 <= i < len(node.ops) else None
        if node is None:
            what = f"the build has nodes 0..{plan.devices - 1}"
        elif op is None:
            what = f"node {k} has no op {i} (its ops are 0..{len(node.ops) - 1})"
        elif kind_of(op).block_marker:
            continue  # a block's start: no work of its own (the cycle model's rates leave them out too)
        elif kind_of(op).sync:
            # a communication op's line includes the wait for the radio, which plans count as the rounds: its
            # rate comes from the cycle model (fitted here, it priced a lone node's gathers at +86 %)
            continue
        elif not r["cycles"] >= 0:
            what = f"cycles={r['cycles']} is negative"
        else:
            what = None
        if what:
            raise UserError(f"{logs_dir}: an `op` line of node {k} (i={i}) does not fit {build_dir}: {what}; were "
                            f"the logs edited, or recorded from another build? record the run again with `cisl logs`")
        board = plan.node_board(k)
        shapes = {t: node.tensors[t].shape for t in node.tensors}
        units.setdefault(board, {}).setdefault(op.kind, []).append(op_units(op, shapes))
        outputs.setdefault(board, {}).setdefault(op.kind, []).append(op_outputs(op, shapes))
        cycles.setdefault(board, {}).setdefault(op.kind, []).append(float(r["cycles"]))
    # the work outside the blocks (input loop, output, finish: what plans add as outside_blocks_ms) is what
    # an inference took beyond its blocks and rounds; the boards take the printing of log lines out of both,
    # which the cycle model's runtime_cycles (a reference build's) counts: ~60 µs less on a 2-node split
    outside_us: dict[str, float] = {}
    for row in per_node_latency(run)[0]:
        if math.isfinite(row["other_us"]) and 0 <= int(row["node"]) < plan.devices:
            board = plan.node_board(int(row["node"]))
            outside_us[board] = max(outside_us.get(board, 0.0), max(0.0, float(row["other_us"])))
    out = {}
    for board in sorted(units):
        clock = float(load_board(board).facts["board"]["clock_hz"])
        out[board] = BoardProfile(board, clock, {kind: fit_rate(units[board][kind], cycles[board][kind],
                                                                outputs[board][kind])
                                                 for kind in sorted(units[board])}, kernel_library().kind,
                                  outside_us.get(board, 0.0) * clock / 1e6)
    return out


def make_profile(cfg: ModelConfig, testbed_path: Path | None = None, board: str | None = None,
                 jobs: int | None = None, say: Callable[[str], None] = lambda s: None,
                 logs: tuple[Path, Path] | None = None) -> Profile:
    """`cisl profile`: every node of a testbed (or one node of ``board``), measured on the cycle model."""
    from ..testbed.config import load_testbed

    if (testbed_path is None) == (board is None):
        raise UserError("give a testbed (--testbed T) or a board (--board B) to profile")
    if testbed_path is not None:
        tb = load_testbed(testbed_path)
        entries = [(n.id, n.hardware, n.energy_source, n.energy_uj, n.position) for n in tb.nodes]
        topology, seed = tb.sim.topology, tb.sim.seed
    else:
        entries = [(0, board, "battery", None, None)]
        topology, seed = None, 0
    for _, b, *_ in entries:
        load_board(b)  # an unknown board is one line before any work
    nodes = [node_profile(i, b, src, e, pos) for i, b, src, e, pos in entries]
    from_logs = measure_logs(cfg, logs[0], logs[1]) if logs else {}
    boards: dict[str, BoardProfile] = {}
    with tempfile.TemporaryDirectory(prefix="cisl-profile-") as tmp:
        for name in sorted({n.board for n in nodes} | set(from_logs)):
            boards[name] = measure_board(cfg, name, Path(tmp) / name, jobs, say)
    for name, measured in from_logs.items():
        # the boards' own rates where their logs have the op kind; the cycle model's for the rest: the
        # communication ops, and kinds this board's nodes did not run (a mixed build's non-sink board has
        # no output op), which `cisl plan` would otherwise refuse the profile for
        model = boards[name]
        boards[name] = BoardProfile(name, measured.clock_hz, {**model.rates, **measured.rates}, measured.kernels,
                                    measured.runtime_cycles or model.runtime_cycles)
    from .. import __version__

    return Profile(cfg, boards, nodes, topology, seed, {"tool_version": __version__,
                                                        "testbed": str(testbed_path) if testbed_path else None,
                                                        "rates": {b: ("logs and the cycle model" if b in from_logs
                                                                      else "cycle model") for b in boards}})


def write_profile(path: Path, profile: Profile) -> None:
    from ..fsutil import check_output_file, json_format, write_output_file

    ours = json_format(FORMAT)
    check_output_file(path, ours)
    write_output_file(path, json.dumps(profile.to_json(), indent=1) + "\n", ours)
