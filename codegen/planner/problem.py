"""The planning problem: per-node option tables and a linear model of the Mixer rounds.

A node k of the testbed either stays out (x[k,0] = 1) or computes with h in 1..H heads
(one-hot x[k,h]) and u >= 1 hidden units. What that costs it comes from exact structures
(:mod:`.costs`), so the tables are exact where the model is separable:

* **cycles** of block b: ``A[k][b][h] + B[k][b]·u`` — the profile's rates of k's board on the ops
  a node with h heads and u hidden units runs (unpruned, a node's ops depend only on its own share:
  it gathers every column). A is a table over h (per-head work, call overheads, the full-width
  LayerNorms every computing node does), B the slope in u (checked linear: two exact points);
* **memory**: ``u <= U[k][h]``, the most hidden units a node with h heads can hold: flash
  (linear in u) and RAM (the exact memory plan's arena, monotone in u, by bisection) against k's
  board, with the plan-wide parts (Mixer state, tables, reassembly) of the all-nodes plan;
* **rounds**: the radio time of block b with the set S of n = |S| >= 2 nodes taking part,
  ``T_b(S) = Tn[n][b] + Σ_{k∈S} ε[k][b]`` (one node alone: no rounds). Tn[n] simulates an even
  split of the n best-connected candidates (the firmware's Mixer, slot by slot, on the testbed's
  topology), and ε[k] = δ[k] − mean δ, where δ[k] is what the all-nodes rounds lose without node k:
  a node far down the hallway costs its rounds more than its share. Exact for all nodes, first
  order beyond (the plan is re-checked exactly);
* **energy** of node k: ``e_cyc[k]·cycles + e_comm[k][n]·p_k·T(S)`` (the CPU runs during rounds, the
  radio is on for the busiest node's measured share of n-node rounds: fewer nodes each send more), µJ.

:func:`model_cost` evaluates this model for one assignment; the MILP (:mod:`.solve`) and brute
force minimise it, and :func:`.costs.evaluate` re-checks the winner exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..boards import shared_board
from ..footprint import NodeFacts, estimate
from ..modelspec import ModelConfig
from ..partition import even_split
from .costs import (
    RADIO_INFERENCES,
    evaluate,
    layout_of,
    node_cycles,
    radio_rounds,
    structure_of,
)
from .profile import Profile


@dataclass
class Problem:
    cfg: ModelConfig
    keep: float
    rescale: bool
    profile: Profile
    nodes: list[int]                       # candidate testbed node ids
    blocks: list[str]
    A: list[list[list[float]]]             # [k][b][h] cycles (h = 0: unused)
    B: list[list[float]]                   # [k][b] cycles per hidden unit
    U: list[list[int]]                     # [k][h] most hidden units with h heads (0: that h does not fit)
    clock: list[float]
    Tn: list[list[float]]                  # [n][b] µs of rounds of n nodes (n = 0, 1: none)
    eps: list[list[float]]                 # [k][b] µs node k adds to its rounds beyond an average node
    delta: list[list[float]]               # [k][b] µs the all-nodes rounds lose without node k
    e_cyc: list[float]                     # µJ per cycle
    e_comm: list[list[float]]              # [k][n] µJ per µs of rounds with n nodes taking part
    budget: list[float | None]             # µJ per inference
    notes: list[str] = field(default_factory=list)
    # ms per inference outside the blocks (input loop, lines, output): the slowest candidate board's, a
    # constant of the model (`cisl estimate` counts the slowest taking-part node's; the re-check too)
    outside_ms: float = 0.0

    @property
    def H(self) -> int:
        return self.cfg.heads

    @property
    def Fh(self) -> int:
        return self.cfg.mlp_hidden


def _device_pair(cfg: ModelConfig, h: int, u: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(heads, hidden) of a two-node structure whose node 0 has (h, u): node 0's ops are those of a
    node with that share in any unpruned split."""
    return (h, cfg.heads - h), (u, cfg.mlp_hidden - u)


def build_problem(profile: Profile, cfg: ModelConfig, nodes: list[int], keep: float = 1.0, rescale: bool = True,
                  kernels: str = "nnref", say=lambda s: None) -> Problem:
    if not nodes:
        from ..errors import UserError

        raise UserError("no nodes left to plan for")
    H, Fh, D = cfg.heads, cfg.mlp_hidden, len(nodes)
    boards = [profile.node(k).board for k in nodes]
    # plan-wide parts of the footprint: the all-nodes even plan (the most senders and rows)
    d_all = min(D, H, Fh)
    ref = structure_of(cfg, tuple(even_split(H, d_all)), tuple(even_split(Fh, d_all)), keep, rescale,
                       tuple(boards[:d_all]))
    tables = max(f.tables for f in ref.facts)
    mm, maxima = ref.facts[0].max_message, ref.maxima

    def share(h: int, u: int):  # node 0's ops and memory: no Mixer schedule needed (the plan-wide parts are ref's)
        hs, us = _device_pair(cfg, h, u)
        return layout_of(cfg, hs, us, keep, rescale)

    def footprint(board: str, h: int, u: int):
        const, ops, arena = share(h, u).memory(0)
        facts = NodeFacts(const, ops, tables, arena, mm, cfg.lookback)
        return estimate(facts, shared_board(board), kernels, maxima)

    blocks = [f"{b}{layer}" if layer >= 0 else b for b, layer, _, _ in ref.blocks[0]]
    A, B, U = [], [], []
    memo: dict[str, tuple] = {}
    for k, nid in enumerate(nodes):
        board = boards[k]
        if board not in memo:
            a = [[0.0] * (H + 1) for _ in blocks]
            b = [0.0] * len(blocks)
            umax = [0] * (H + 1)
            bud = shared_board(board)
            ends = {}
            for h in range(1, H + 1):
                lo_s, hi_s = share(h, 1), share(h, Fh)
                ends[h] = (node_cycles(profile, board, lo_s.st.nodes[0], lo_s.blocks[0]),
                           node_cycles(profile, board, hi_s.st.nodes[0], hi_s.blocks[0]))
                for bi in range(len(blocks)):
                    # the slope in u is W1's work and the z exchange's, the same for every h; the
                    # largest over h keeps the model an upper bound should they differ
                    slope = (ends[h][1][bi] - ends[h][0][bi]) / (Fh - 1) if Fh > 1 else 0.0
                    b[bi] = max(b[bi], slope)
            for h in range(1, H + 1):
                for bi in range(len(blocks)):
                    a[bi][h] = ends[h][0][bi] - b[bi]
                # the most hidden units that fit: flash and RAM grow with u (bisection on exact plans)
                def fits(u: int) -> bool:
                    fp = footprint(board, h, u)
                    return fp.flash <= bud.flash_bytes and fp.ram <= bud.ram_bytes
                if not fits(1):
                    umax[h] = 0
                    continue
                lo, hi = 1, Fh
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if fits(mid):
                        lo = mid
                    else:
                        hi = mid - 1
                umax[h] = lo
            memo[board] = (a, b, umax)
        a, b, umax = memo[board]
        A.append(a)
        B.append(b)
        U.append(umax)
    clock = [profile.boards[b].clock_hz for b in boards]

    # the linear radio model: all nodes, then each left out (even splits)
    say(f"plan: simulating the Mixer rounds of {D} nodes and of each {D - 1}-node subset")
    def block_us(ids: list[int]) -> tuple[list[float], list]:
        if len(ids) < 2:
            return [0.0] * len(blocks), []
        s = structure_of(cfg, tuple(even_split(H, len(ids))), tuple(even_split(Fh, len(ids))), keep, rescale,
                         tuple(profile.node(i).board for i in ids))
        rounds = radio_rounds(profile, cfg, s, [profile.node(i).board for i in ids], ids)
        by_sg: dict[int, float] = {}
        for r in rounds:
            by_sg[r.sg] = by_sg.get(r.sg, 0.0) + r.air_us.mean + r.guard_us
        return [sum(by_sg.get(sg, 0.0) for sg in sgs) for _, _, _, sgs in s.blocks[0]], rounds

    T_all, rounds_all = block_us(nodes)
    delta = []
    for k in range(D):
        t, _ = block_us(nodes[:k] + nodes[k + 1:]) if D > 1 else ([0.0] * len(blocks), [])
        delta.append([T_all[b] - t[b] for b in range(len(blocks))])
    eps, best = node_excess(delta)
    from ..timing.energy import load_power, radio_use

    def shares(rounds, n: int) -> tuple[float, float]:
        """The largest TX-on and RX-on share of the rounds' air time over the n nodes (fewer nodes:
        each transmits more often)."""
        air = sum(r.air_us.mean for r in rounds) or 1.0
        uses = [radio_use(rounds, k) for k in range(n)]
        return (max(u.tx_on_us.central for u in uses) / air, max(u.rx_on_us.central for u in uses) / air)

    Tn = [[0.0] * len(blocks), [0.0] * len(blocks)]
    frac = [(0.0, 0.0), (0.0, 0.0)]
    for n in range(2, D + 1):
        # the n best-connected nodes, their own ε taken out, so Tn + Σ ε of any n nodes is the model
        ids = sorted(best[:n])
        t, rounds = (T_all, rounds_all) if n == D else block_us([nodes[i] for i in ids])
        Tn.append([t[b] - sum(eps[i][b] for i in ids) for b in range(len(blocks))])
        frac.append(shares(rounds, n) if rounds else (0.0, 0.0))

    e_cyc, e_comm, budget = [], [], []
    for k, nid in enumerate(nodes):
        p = load_power(boards[k])
        v, i_cpu = p.voltage_v, p.cpu_active_ma.central
        e_cyc.append(v * i_cpu / clock[k] * 1e3)  # V·mA·s = mJ -> µJ per cycle: ·1e3
        # per node count n: V·mA·µs = nJ -> µJ: ·1e-3 (the CPU polls through the whole round; the
        # radio is on for the busiest node's share of it)
        e_comm.append([v * (i_cpu + p.tx_ma().central * tx + p.rx_ma("2M").central * rx) * 1e-3 for tx, rx in frac])
        budget.append(profile.node(nid).energy_uj)
    outside = max(profile.boards[b].runtime_cycles / profile.boards[b].clock_hz * 1e3 for b in set(boards))
    return Problem(cfg, keep, rescale, profile, list(nodes), blocks, A, B, U, clock, Tn, eps, delta, e_cyc, e_comm,
                   budget, outside_ms=outside)


def node_excess(delta: list[list[float]]) -> tuple[list[list[float]], list[int]]:
    """ε per node and block from the leave-one-out losses δ, and the nodes best-connected first.

    Round times are not additive in general (a hallway's rounds follow its span in hops, not the
    sum of its nodes), so only a node whose δ stands out (more than 3 MADs above the median, a node
    far from the rest) is priced individually: ε = δ − median. Every other node gets ε = 0 plus a
    negligible rank term, so that among equal choices the solver takes the best-connected nodes:
    the n-node rounds Tn[n] are simulated on exactly those."""
    D = len(delta)
    if D == 0:
        return [], []
    nb = len(delta[0])
    tot = [sum(d) for d in delta]
    med = float(np.median(tot))
    mad = float(np.median([abs(t - med) for t in tot]))
    med_b = [float(np.median([delta[k][b] for k in range(D)])) for b in range(nb)]
    best = sorted(range(D), key=lambda k: (tot[k], k))
    rank = {k: i for i, k in enumerate(best)}
    eps = []
    for k in range(D):
        outlier = tot[k] - med > max(3 * mad, 1e-9)
        eps.append([(delta[k][b] - med_b[b] if outlier else 0.0) + 1e-3 * rank[k] for b in range(nb)])
    return eps, best


def rounds_us(p: "Problem", part: list[int]) -> list[float]:
    """The model's µs of rounds per block for the candidate nodes ``part`` taking part."""
    n = len(part)
    if n < 2:
        return [0.0] * len(p.blocks)
    return [p.Tn[n][b] + sum(p.eps[k][b] for k in part) for b in range(len(p.blocks))]


@dataclass
class Assignment:
    heads: list[int]   # per candidate node (0: out)
    hidden: list[int]

    @property
    def taking_part(self) -> list[int]:
        return [k for k, h in enumerate(self.heads) if h > 0]


@dataclass
class ModelCost:
    latency_ms: float
    energy_uj: float
    node_energy_uj: list[float]
    feasible: bool
    why: list[str]


def model_cost(p: Problem, a: Assignment, deadline_ms: float | None = None) -> ModelCost:
    """The planning model's latency and energy of an assignment, and whether it meets every
    constraint (the MILP's objective and constraints, evaluated directly)."""
    why = []
    if sum(a.heads) != p.H or sum(a.hidden) != p.Fh:
        why.append("shares do not add up")
    part = [k for k in range(len(p.nodes)) if a.heads[k] > 0]
    for k in range(len(p.nodes)):
        h, u = a.heads[k], a.hidden[k]
        if h == 0 and u != 0:
            why.append(f"node {p.nodes[k]} has hidden units but no heads")
        if h > 0 and not 1 <= u <= p.U[k][h]:
            why.append(f"node {p.nodes[k]}: {u} hidden units with {h} heads do not fit (at most {p.U[k][h]})")
    T = rounds_us(p, part)
    comp = [max([(p.A[k][b][a.heads[k]] + p.B[k][b] * a.hidden[k]) / p.clock[k] * 1e3 for k in part] or [0.0])
            for b in range(len(p.blocks))]
    latency = sum(comp) + sum(T) / 1e3 + p.outside_ms
    energy = []
    for k in range(len(p.nodes)):
        if k not in part:
            energy.append(0.0)
            continue
        cyc = sum(p.A[k][b][a.heads[k]] + p.B[k][b] * a.hidden[k] for b in range(len(p.blocks)))
        n = len(part)
        base = sum(p.Tn[n]) if n >= 2 else 0.0  # the n-node rounds at n nodes' radio shares; ε at the dearest
        energy.append(p.e_cyc[k] * cyc + p.e_comm[k][n] * base + max(p.e_comm[k]) * (sum(T) - base))
        if p.budget[k] is not None and energy[-1] > p.budget[k] * (1 + 1e-9):
            why.append(f"node {p.nodes[k]} over its energy budget")
    if not part:
        why.append("no node takes part")
    if deadline_ms is not None and latency > deadline_ms * (1 + 1e-9):
        why.append("over the deadline")
    return ModelCost(latency, sum(energy), energy, not why, why)


def exact(p: Problem, a: Assignment, deadline_ms: float | None = None, kernels: str = "nnref", relays=(),
          inferences: int = RADIO_INFERENCES):
    """:func:`.costs.evaluate` of an assignment (the nodes taking part, in plan order; ``relays``:
    testbed nodes that would only relay; ``inferences``: simulated inferences of the rounds)."""
    part = a.taking_part
    return evaluate(p.profile, p.cfg, [p.nodes[k] for k in part], [a.heads[k] for k in part],
                    [a.hidden[k] for k in part], p.keep, p.rescale, deadline_ms, kernels, relays, inferences)
