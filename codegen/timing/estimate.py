"""`cisl estimate`: how long one inference takes on the boards, and what it costs in energy.

Compute comes from the cycle model of every node's real image (:mod:`codegen.timing.compute`),
communication from the slot-level Mixer simulation of every round (:mod:`codegen.timing.comm`),
energy from the board's datasheet currents (:mod:`codegen.timing.energy`).

Latency is bulk-synchronous, as the nodes run: a block ends when its last round ends, and a round
starts when the slowest node reaches it. Per block: the slowest node's compute, then the block's
rounds (air time, plus the receive work of the slowest receiver inside the round). Every figure has
a central value and low/high bounds (the cycle model's ranges; the radio's min/max over the
simulated inferences).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..fsutil import reads_build
from ..plan.io import load_plan
from ..radio.topology import Topology
from . import comm as C
from .memsystem import MemoryModel
from .compute import NodeCompute, board_for_estimate, compute_build, images_digest, mode_plan
from .energy import Energy, node_energy, plan_pricing, radio_use

Triple = tuple[float, float, float]


def _ms(cycles: Triple, clock: float) -> Triple:
    return tuple(c * 1e3 / clock for c in cycles)  # type: ignore[return-value]


@dataclass
class BlockEstimate:
    label: str                 # embed, attn0, mlp0, ..., head
    block: str
    layer: int
    compute_ms: dict[int, Triple]   # per node
    comm_ms: Triple                 # the block's rounds: air time (min/mean/max) + slowest receiver's work
    exchanges: list[int]
    node_comm_ms: dict[int, Triple] = field(default_factory=dict)  # per node: air time + its own receive work

    @property
    def slowest_compute_ms(self) -> Triple:
        vals = list(self.compute_ms.values())
        return (max(v[0] for v in vals), max(v[1] for v in vals), max(v[2] for v in vals))

    @property
    def latency_ms(self) -> Triple:
        c = self.slowest_compute_ms
        return (c[0] + self.comm_ms[0], c[1] + self.comm_ms[1], c[2] + self.comm_ms[2])


@dataclass
class Estimate:
    build: str
    board: str
    model_board: str
    devices: int
    topology: str
    policy: str
    inferences: int
    images: str
    clock_hz: float
    nodes: list[NodeCompute]
    blocks: list[BlockEstimate]
    exchanges: dict[int, C.ExchangeTime]
    energy: dict[int, Energy] = field(default_factory=dict)
    rounds: list[C.RoundTime] = field(default_factory=list)
    flash_wait: Triple = (0.0, 0.0, 0.0)
    phy: str = "2M"
    node_boards: dict[int, str] = field(default_factory=dict)  # node -> the board that models it
    plan: str = ""  # the plan the images' boot lines name (`cisl report` checks the logs ran it)
    mode: int | None = None  # of an image holding every elastic mode: the mode estimated
    # per inference, the slowest node's work outside the blocks: the input loop, the block and infer
    # lines, the output and finish ops (NodeCompute.runtime_cycles)
    outside_ms: Triple = (0.0, 0.0, 0.0)

    @property
    def blocks_ms(self) -> Triple:
        return tuple(sum(b.latency_ms[i] for b in self.blocks) for i in range(3))  # type: ignore[return-value]

    @property
    def latency_ms(self) -> Triple:
        """One inference, back to back: the blocks (bulk-synchronous) and the work outside them."""
        return tuple(self.blocks_ms[i] + self.outside_ms[i] for i in range(3))  # type: ignore[return-value]

    @property
    def comm_ms(self) -> Triple:
        return tuple(sum(b.comm_ms[i] for b in self.blocks) for i in range(3))  # type: ignore[return-value]

    @property
    def comm_share(self) -> float:
        lat = self.latency_ms[1]
        return self.comm_ms[1] / lat if lat > 0 else 0.0

    @property
    def network_energy_uj(self) -> Triple:
        es = list(self.energy.values())
        return (sum(e.total_uj.low for e in es), sum(e.total_uj.central for e in es), sum(e.total_uj.high for e in es))

    @property
    def radio_share(self) -> float:
        """The radio's share of the network's energy per inference (central)."""
        total = sum(e.total_uj.central for e in self.energy.values())
        return sum(e.radio_uj.central for e in self.energy.values()) / total if total > 0 else 0.0

    def to_json(self) -> dict:
        return {
            "build": self.build, "plan": self.plan, "mode": self.mode, "board": self.board,
            "model_board": self.model_board, "devices": self.devices,
            "topology": self.topology, "policy": self.policy, "phy": self.phy, "inferences": self.inferences, "images": self.images,
            "clock_hz": self.clock_hz, "flash_wait": list(self.flash_wait),
            "latency_ms": _j(self.latency_ms), "outside_blocks_ms": _j(self.outside_ms),
            "comm_ms": _j(self.comm_ms), "comm_share": round(self.comm_share, 4),
            "network_energy_uj": _j(self.network_energy_uj), "radio_energy_share": round(self.radio_share, 4),
            "blocks": [{"block": b.label, "exchanges": b.exchanges, "comm_ms": _j(b.comm_ms),
                        "latency_ms": _j(b.latency_ms), "slowest_compute_ms": _j(b.slowest_compute_ms),
                        "compute_ms": {str(k): _j(v) for k, v in b.compute_ms.items()},
                        "node_comm_ms": {str(k): _j(v) for k, v in b.node_comm_ms.items()}} for b in self.blocks],
            "nodes": [{"node": n.device, "model_board": self.node_boards.get(n.device, self.model_board),
                       "insns_per_inference": round(n.insns_per_inference),
                       "messages_checked": n.messages_checked,
                       "runtime_cycles": _j(n.runtime_cycles),
                       "blocks": [{"block": b.key.label, "ops": b.ops, "macs": b.macs, "cycles": _j(b.cycles),
                                   "rx_cycles": _j(b.rx_cycles), "core_cycles": round(b.core_cycles, 1),
                                   "mem_events": round(b.mem_events, 1)} for b in n.blocks],
                       "ops": {str(i): _j(c) for i, c in sorted(n.op_cycles.items()) if any(c)},
                       "energy": self.energy[n.device].to_json() if n.device in self.energy else None}
                      for n in self.nodes],
            "exchanges": {str(k): v.to_json() for k, v in sorted(self.exchanges.items())},
        }


def _j(t: Triple) -> dict:
    return {"low": round(t[0], 6), "central": round(t[1], 6), "high": round(t[2], 6)}


def estimate(build_dir: Path, topology: str | Topology | None = None, policy: str | None = None, inferences: int = 1,
             radio_inferences: int = 4, seed: int = 0, jobs: int | None = None, period_ms: float | None = None,
             flash_wait: Triple | None = None, progress=None, nodes: list[NodeCompute] | None = None,
             mode: int | None = None) -> Estimate:
    """The estimate of a built build; ``nodes`` reuses compute already modelled (e.g. for a second
    round policy: the cycle model does not depend on the radio). ``mode``: of an image holding every
    elastic mode, that mode (its compute on the image, its Mixer rounds). ``topology``: a name, None
    for `cisl sim`'s default, or a Topology of the plan's nodes (a testbed's positions: `testbed_topology`)."""
    build_dir = Path(build_dir)
    plan = mode_plan(build_dir, mode)
    board, model = board_for_estimate(plan)
    models = [board_for_estimate(plan, d)[1] for d in range(plan.devices)]  # a mixed testbed's differ
    clock = float(model.facts["board"]["clock_hz"])
    clocks = {m.name: int(m.facts["board"]["clock_hz"]) for m in models}
    if len(set(clocks.values())) > 1:
        named = ", ".join(f"{name} {hz} Hz" for name, hz in sorted(clocks.items()))
        raise UserError(f"{build_dir}: its nodes' boards run at different clocks ({named}); the estimate "
                        f"supports one CPU clock per testbed")
    if nodes is None:
        nodes = compute_build(build_dir, inferences=inferences, jobs=jobs, flash_wait=flash_wait, progress=progress,
                              mode=mode)
    topo = topology if isinstance(topology, Topology) else C.resolve_topology(plan, topology)
    pol = policy or str(plan.meta.get("mixer", {}).get("policy", {}).get("kind", "done"))  # the firmware's
    rounds = C.comm_schedule(plan, topo, pol, inferences=radio_inferences, seed=seed)
    ex = C.exchange_times(rounds)
    blocks: list[BlockEstimate] = []
    control = C.control_exchange(plan)
    if control is not None and control in ex:  # the control round that fixes the inference's mode
        e = ex[control]
        air = tuple(getattr(e.air_us, f) / 1e3 + e.guard_us / 1e3 for f in ("min", "mean", "max"))
        blocks.append(BlockEstimate("control", "control", -1, {n.device: (0.0, 0.0, 0.0) for n in nodes}, air,
                                    [control], {n.device: air for n in nodes}))
    for bi, b0 in enumerate(nodes[0].blocks):
        compute = {n.device: _ms(n.blocks[bi].cycles, clock) for n in nodes}
        air = [0.0, 0.0, 0.0]
        for sg in b0.exchanges:
            e = ex.get(sg)
            if e is None:
                continue
            air[0] += e.air_us.min / 1e3 + e.guard_us / 1e3
            air[1] += e.air_us.mean / 1e3 + e.guard_us / 1e3
            air[2] += e.air_us.max / 1e3 + e.guard_us / 1e3
        rx = [max(_ms(n.blocks[bi].rx_cycles, clock)[i] for n in nodes) for i in range(3)]
        comm = (air[0] + rx[0], air[1] + rx[1], air[2] + rx[2])
        own = {n.device: tuple(air[i] + _ms(n.blocks[bi].rx_cycles, clock)[i] for i in range(3)) for n in nodes}
        blocks.append(BlockEstimate(b0.key.label, b0.key.block, b0.key.layer, compute, comm, list(b0.exchanges),
                                    own))
    est = Estimate(str(build_dir), board.name, "+".join(sorted({m.name for m in models})), plan.devices,
                   topo.name if isinstance(topo, Topology) else topo, pol,
                   inferences,
                   images_digest(build_dir, plan), clock, nodes, blocks, ex,
                   flash_wait=flash_wait or MemoryModel.for_board(model).flash_wait, rounds=rounds,
                   phy=plan.phy, node_boards={d: m.name for d, m in enumerate(models)},
                   # every mode runs in the one image of plan.json, and its boot line names that plan
                   plan=(plan if mode is None else load_plan(build_dir)).sha256[:16], mode=mode,
                   outside_ms=tuple(max(_ms(n.runtime_cycles, clock)[i] for n in nodes)  # type: ignore[arg-type]
                                    for i in range(3)))
    if period_ms is not None and period_ms < est.latency_ms[1]:
        raise UserError(f"--period-ms {period_ms:g}: shorter than one inference ({est.latency_ms[1]:.2f} ms on this "
                        f"build, {est.outside_ms[1]:.2f} ms of it outside the blocks); give a period of at least that, "
                        f"or drop --period-ms for back to back")
    period_us = (period_ms if period_ms is not None else est.latency_ms[1]) * 1e3
    pricing = plan_pricing(plan)  # each node's board (or the one it stands in for) and the plan's PHY, as `cisl report`
    for n in nodes:
        use = radio_use(rounds, n.device)  # per-inference means
        est.energy[n.device] = node_energy(pricing.power[n.device], _sum_cycles(n), clock, use.tx_on_us,
                                           use.rx_on_us, period_us, comm_us=use.comm_us, phy=pricing.phy)
    return est


def _sum_cycles(n: NodeCompute) -> Triple:
    c = n.compute_cycles()
    rx = tuple(sum(b.rx_cycles[i] for b in n.blocks) for i in range(3))
    return (c[0] + rx[0] + n.runtime_cycles[0], c[1] + rx[1] + n.runtime_cycles[1], c[2] + rx[2] + n.runtime_cycles[2])


def _r(t: Triple, digits: int = 2) -> str:
    return f"{t[1]:.{digits}f} [{t[0]:.{digits}f}..{t[2]:.{digits}f}]"


def format_table(est: Estimate) -> str:
    """The human-readable report of `cisl estimate`: per node and block, then per inference."""
    # a mixed testbed's board images are each node's own board's (the plan names only one board)
    images = est.model_board if est.board not in ("sim", "qemu-m4") else est.board
    lines = [f"cisl estimate: {est.build} ({est.devices} nodes, {images} images, modelled as {est.model_board} at "
             f"{est.clock_hz / 1e6:.0f} MHz), radio: {est.topology}, round policy {est.policy}",
             "central [low..high]; compute = the cycle model of each node's image (bit-exact checked), "
             "communication = Mixer air time + start guard + receive work", ""]
    lines.append(f"{'node':>4} {'block':<7} {'cycles':>30} {'compute ms':>24} {'comm ms':>24} {'energy uJ':>26}")
    by_label = {b.label: b for b in est.blocks}  # an every-mode image's blocks start with its control round
    for n in est.nodes:
        for bi, b in enumerate(n.blocks):
            be = by_label[b.key.label]
            energy = _r((est.energy[n.device].total_uj.low, est.energy[n.device].total_uj.central,
                         est.energy[n.device].total_uj.high), 1) if bi == 0 else ""
            cyc = f"{b.cycles[1]:,.0f} [{b.cycles[0]:,.0f}..{b.cycles[2]:,.0f}]"
            own = be.node_comm_ms.get(n.device, be.comm_ms)  # this node's: air time and its own receive work
            lines.append(f"{n.device:>4} {b.key.label:<7} {cyc:>30} {_r(_ms(b.cycles, est.clock_hz), 3):>24} "
                         f"{_r(own, 3):>24} {energy:>26}")
    lines.append("")
    lines.append(f"{'block':<7} {'slowest compute ms':>26} {'communication ms':>26} {'latency ms':>26} {'comm share':>10}")
    for b in est.blocks:
        share = b.comm_ms[1] / b.latency_ms[1] if b.latency_ms[1] > 0 else 0.0
        lines.append(f"{b.label:<7} {_r(b.slowest_compute_ms, 3):>26} {_r(b.comm_ms, 3):>26} {_r(b.latency_ms, 3):>26} "
                     f"{share:>9.1%}")
    e = est.network_energy_uj
    lines += ["",
              f"per inference: latency {_r(est.latency_ms)} ms (bulk-synchronous, {est.outside_ms[1]:.2f} ms of it "
              f"outside the blocks), communication {est.comm_share:.1%} of it; "
              f"energy of the network {e[1]:,.1f} [{e[0]:,.1f}..{e[2]:,.1f}] uJ, radio {est.radio_share:.1%} of it"]
    return "\n".join(lines)


def testbed_topology(testbed_file: Path, plan) -> tuple[str | Topology, int]:
    """The radio layout of a plan's nodes on a testbed and its seed, as `cisl estimate --testbed` prices
    them: the layout rule `cisl plan` and the virtual testbed share (codegen/testbed/layout.py), so a
    planned split's nodes keep the places the planner priced (its testbed nodes)."""
    from ..vtestbed.bed import POSITIONS, plan_layout

    lay = plan_layout(testbed_file, plan)
    if lay["topology"] != POSITIONS:
        return lay["topology"], int(lay["seed"])
    nodes = ",".join(str(t) for t in plan.testbed_nodes)
    return Topology(f"positions of testbed nodes {nodes} ({Path(testbed_file).name})",
                    np.asarray(lay["positions"], dtype=float)), int(lay["seed"])


def radio_of(plan, topology: str | None, testbed_file: Path | None) -> tuple[str | Topology | None, int | None]:
    """Where `--topology` or `--testbed` puts the nodes, and the testbed's seed (None without one);
    giving both is one line."""
    if testbed_file is None:
        return topology, None
    if topology is not None:
        from ..vtestbed.bed import BOTH_LAYOUTS

        raise UserError(BOTH_LAYOUTS)
    return testbed_topology(testbed_file, plan)


def layout_key(topology: str | Topology, seed: int) -> str:
    """A radio layout as one string (what `cisl modes` records its table was profiled on): a name, with
    its seed when not 0; a testbed's positions by label and a digest of the coordinates and seed."""
    if isinstance(topology, str):
        return topology if seed == 0 else f"{topology} seed {seed}"
    import hashlib

    digest = hashlib.sha256(repr((np.round(topology.positions, 6).tolist(), seed)).encode()).hexdigest()[:12]
    return f"{topology.name} {digest}"


def testbed_hint(plan, build_dir: Path, doing: str = "are priced", do: str = "price") -> str | None:
    """Advice for a planned split estimated (or, ``doing="run"``, simulated) without its testbed: the
    rounds then use a topology made for that many nodes, not the places the planner priced."""
    where = plan.testbed_nodes
    if plan.meta.get("testbed_nodes") is None or plan.devices < 2:  # not planned, or no rounds to place
        return None
    return (f"note: {build_dir} is a split planned for testbed nodes {', '.join(map(str, where))}; its Mixer rounds "
            f"{doing} on {C.resolve_topology(plan, None)} for {plan.devices} nodes: pass --testbed FILE to {do} "
            f"them where those nodes are, as `cisl plan` did")


@reads_build
def run_estimate(build_dir: Path, topology: str | None = None, policy: str | None = None, inferences: int = 1,
                 radio_inferences: int = 4, seed: int | None = None, jobs: int | None = None,
                 period_ms: float | None = None, out_file: Path | None = None, progress_bar=None,
                 mode: int | None = None, testbed: Path | None = None, say=None) -> Estimate:
    """`cisl estimate`: :func:`estimate`, with its JSON written to ``out_file`` (only over a file an
    estimate wrote). ``progress_bar(total)`` gives a context manager with ``update(n)`` (a tqdm bar).
    ``testbed``: price the rounds where the testbed file puts the nodes (`testbed_topology`); its
    [sim] seed unless ``seed`` is given. ``say``: where advice goes (`testbed_hint`)."""
    import contextlib
    import json

    from ..fsutil import check_output_file, json_with, write_output_file

    ours = json_with("images", "latency_ms", "nodes")
    check_output_file(out_file, ours)
    plan = load_plan(build_dir)
    topo, tb_seed = radio_of(plan, topology, testbed)
    seed = seed if seed is not None else tb_seed or 0
    if topo is None and say is not None and (hint := testbed_hint(plan, build_dir)):
        say(hint)
    with (progress_bar(plan.devices) if progress_bar else contextlib.nullcontext()) as bar:
        est = estimate(build_dir, topo, policy, inferences, radio_inferences, seed, jobs, period_ms,
                       progress=bar.update if bar is not None else None, mode=mode)
    if out_file is not None:
        write_output_file(out_file, json.dumps(est.to_json(), indent=1) + "\n", ours)
    return est
