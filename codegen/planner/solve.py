"""Solving the planning problem (:mod:`.problem`): the exact MILP, brute force, and baselines.

**MILP** (scipy.optimize.milp, HiGHS). Variables: one-hot ``x[k,h]`` (node k out for h = 0, else
h heads; p_k = 1 − x[k,0]), integer hidden units ``u[k]``, one-hot ``z[n]`` (n nodes take part),
the products ``w[k,n] = p_k·z[n]`` and ``y[k,j] = p_k·p_j`` for the radio terms (linearised
exactly for binaries by w ≥ p + z − 1, w ≤ p, w ≤ z; an objective coefficient's sign makes one
bound tight), and the per-block slowest compute ``t[b]``. Participation is all-or-nothing by
construction (a node out has no heads and no hidden units; a node in has at least one of each),
so no recursive elimination is needed for optimality.

    min  Σ_k E_k + λ·L                (or the latency, energy breaking ties)
    s.t. Σ_h x[k,h] = 1;  Σ_k Σ_h h·x[k,h] = H;  Σ_k u[k] = F_h;  Σ_n z[n] = 1;  Σ_n n·z[n] = Σ_k p_k
         Σ_{h≥1} x[k,h] ≤ u[k] ≤ Σ_h U[k][h]·x[k,h]                 (memory: exact staircase)
         t[b] ≥ (Σ_h A[k][b][h]·x[k,h] + B[k][b]·u[k]) / f_k          (every node, every block)
         T = Σ_n z[n]·Tn[n] + Σ_k ε_k·(p_k − w[k,1])                  (rounds; none for one node)
         L = Σ_b t[b] + T ≤ deadline
         E_k = e_cyc·cycles_k + Σ_n w[k,n]·e_comm[n]·Tn[n] + ē_comm·(ε_k·(p_k − w[k,1]) + Σ_{j≠k} ε_j·y[k,j]) ≤ budget_k

λ = ``TIE_UJ_PER_MS`` (0.001 µJ per ms) only breaks ties: the model prices the energy of n nodes
taking part the same however the work is divided among them (cycles add up, the rounds are those of
an even split), while an uneven division makes the exact rounds longer (larger messages) and so dearer;
among plans of equal modelled energy the faster one is nearly always the cheaper one exactly.

**Brute force** enumerates every set of nodes and every composition of heads and hidden units
over it and evaluates :func:`.problem.model_cost` directly (tests: D ≤ 6).

**Baselines**, all on the same model: the even split (today's cisl), MoDNN's speed-proportional
split (shares ∝ clock / cycles per MAC), and CoEdge's method (its LP relaxation over continuous
shares with one share per node for heads and hidden units alike, recursive elimination of nodes
whose share is below one head, then rounding by largest remainder).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from ..partition import even_split
from .problem import Assignment, Problem, model_cost, rounds_us

TIME_LIMIT_S = 120.0
TIE_UJ_PER_MS = 1e-3  # the energy objective's latency tie-break (module docstring)


@dataclass
class Solution:
    method: str
    assignment: Assignment | None
    status: str          # optimal, infeasible, time_limit, heuristic
    seconds: float
    objective: float | None = None
    message: str = ""


class _Layout:
    def __init__(self, p: Problem):
        self.D, self.H, self.nb = len(p.nodes), p.H, len(p.blocks)
        self.nx = self.D * (self.H + 1)
        self.pairs = [(k, j) for k in range(self.D) for j in range(self.D) if j != k]
        self.u0 = self.nx
        self.z0 = self.u0 + self.D             # z[n], n = 1..D
        self.w0 = self.z0 + self.D             # w[k,n]
        self.y0 = self.w0 + self.D * self.D
        self.t0 = self.y0 + len(self.pairs)
        self.n = self.t0 + self.nb

    def x(self, k: int, h: int) -> int:
        return k * (self.H + 1) + h

    def u(self, k: int) -> int:
        return self.u0 + k

    def z(self, n: int) -> int:
        return self.z0 + n - 1

    def w(self, k: int, n: int) -> int:
        return self.w0 + k * self.D + n - 1

    def y(self, i: int) -> int:
        return self.y0 + i

    def t(self, b: int) -> int:
        return self.t0 + b


def _energy_rows(p: Problem, L: _Layout) -> tuple[np.ndarray, np.ndarray]:
    """Per node, E_k = row·z + const (µJ)."""
    rows = np.zeros((L.D, L.n))
    const = np.zeros(L.D)
    eps = [sum(p.eps[j]) for j in range(L.D)]
    Tn = [sum(t) for t in p.Tn]
    for k in range(L.D):
        for h in range(1, L.H + 1):
            rows[k, L.x(k, h)] += p.e_cyc[k] * sum(p.A[k][b][h] for b in range(L.nb))
        rows[k, L.u(k)] += p.e_cyc[k] * sum(p.B[k])
        for n in range(1, L.D + 1):
            rows[k, L.w(k, n)] += p.e_comm[k][n] * Tn[n]
        # ε_k·(p_k − w[k,1]), p_k = 1 − x[k,0], priced at the dearest node count (ε ≥ 0 but the rank term)
        ek = max(p.e_comm[k])
        const[k] += ek * eps[k]
        rows[k, L.x(k, 0)] -= ek * eps[k]
        rows[k, L.w(k, 1)] -= ek * eps[k]
    for i, (k, j) in enumerate(L.pairs):
        rows[k, L.y(i)] += max(p.e_comm[k]) * eps[j]
    return rows, const


def _latency_row(p: Problem, L: _Layout) -> tuple[np.ndarray, float]:
    """L = row·z + const (ms)."""
    row = np.zeros(L.n)
    const = p.outside_ms  # the work outside the blocks: a constant of the model
    for b in range(L.nb):
        row[L.t(b)] = 1.0
    for n in range(1, L.D + 1):
        row[L.z(n)] += sum(p.Tn[n]) / 1e3
    for k in range(L.D):
        e = sum(p.eps[k]) / 1e3
        const += e
        row[L.x(k, 0)] -= e
    # − Σ_k ε_k·w[k,1]: with one node taking part its ε does not count (no rounds)
    for k in range(L.D):
        row[L.w(k, 1)] -= sum(p.eps[k]) / 1e3
    return row, const


def solve_milp(p: Problem, deadline_ms: float | None, objective: str = "energy", energy_limits: bool = True,
               time_limit: float = TIME_LIMIT_S, all_nodes: bool = False) -> Solution:
    from scipy.optimize import Bounds, LinearConstraint, milp

    t0 = time.perf_counter()
    L = _Layout(p)
    rows: list[np.ndarray] = []
    lo: list[float] = []
    hi: list[float] = []

    def add(row, a, b):
        rows.append(row)
        lo.append(a)
        hi.append(b)

    for k in range(L.D):
        r = np.zeros(L.n)
        r[[L.x(k, h) for h in range(L.H + 1)]] = 1
        add(r, 1, 1)
        r = np.zeros(L.n)  # u >= [k takes part]
        r[L.u(k)] = 1
        r[[L.x(k, h) for h in range(1, L.H + 1)]] = -1
        add(r, 0, np.inf)
        r = np.zeros(L.n)  # u <= U[k][h]
        r[L.u(k)] = 1
        for h in range(1, L.H + 1):
            r[L.x(k, h)] = -p.U[k][h]
        add(r, -np.inf, 0)
        for b in range(L.nb):  # t[b] >= compute of k in b (ms)
            r = np.zeros(L.n)
            r[L.t(b)] = 1
            for h in range(1, L.H + 1):
                r[L.x(k, h)] = -p.A[k][b][h] / p.clock[k] * 1e3
            r[L.u(k)] = -p.B[k][b] / p.clock[k] * 1e3
            add(r, 0, np.inf)
    r = np.zeros(L.n)
    for k in range(L.D):
        for h in range(1, L.H + 1):
            r[L.x(k, h)] = h
    add(r, L.H, L.H)
    r = np.zeros(L.n)
    r[L.u0:L.u0 + L.D] = 1
    add(r, p.Fh, p.Fh)
    r = np.zeros(L.n)  # at least one node takes part
    r[[L.x(k, 0) for k in range(L.D)]] = 1
    add(r, -np.inf, L.D - 1)
    r = np.zeros(L.n)  # one node count
    r[[L.z(n) for n in range(1, L.D + 1)]] = 1
    add(r, 1, 1)
    r = np.zeros(L.n)  # Σ n z[n] = Σ p_k = D − Σ x[k,0]
    for n in range(1, L.D + 1):
        r[L.z(n)] = n
    r[[L.x(k, 0) for k in range(L.D)]] = 1
    add(r, L.D, L.D)
    for i, (k, j) in enumerate(L.pairs):  # y = p_k p_j, p = 1 - x[., 0]
        r = np.zeros(L.n)
        r[[L.y(i), L.x(k, 0), L.x(j, 0)]] = 1
        add(r, 1, np.inf)
        r = np.zeros(L.n)
        r[[L.y(i), L.x(k, 0)]] = 1
        add(r, -np.inf, 1)
        r = np.zeros(L.n)
        r[[L.y(i), L.x(j, 0)]] = 1
        add(r, -np.inf, 1)
    for k in range(L.D):  # w = p_k z_n
        for n in range(1, L.D + 1):
            r = np.zeros(L.n)
            r[L.w(k, n)] = 1
            r[L.x(k, 0)] = 1
            r[L.z(n)] = -1
            add(r, 0, np.inf)      # w >= p + z - 1
            r = np.zeros(L.n)
            r[L.w(k, n)] = 1
            r[L.x(k, 0)] = 1
            add(r, -np.inf, 1)     # w <= p
            r = np.zeros(L.n)
            r[L.w(k, n)] = 1
            r[L.z(n)] = -1
            add(r, -np.inf, 0)     # w <= z
    erows, econst = _energy_rows(p, L)
    lrow, lconst = _latency_row(p, L)
    if deadline_ms is not None:
        add(lrow, -np.inf, deadline_ms - lconst)
    if energy_limits:
        for k in range(L.D):
            if p.budget[k] is not None:
                add(erows[k], -np.inf, p.budget[k] - econst[k])
    ub = np.full(L.n, np.inf)
    lb = np.zeros(L.n)
    for k in range(L.D):
        for h in range(L.H + 1):
            ub[L.x(k, h)] = 1 if (h == 0 and not all_nodes or h > 0 and p.U[k][h] >= 1) else 0
        ub[L.u(k)] = p.Fh
    ub[L.z0:L.t0] = 1
    integrality = np.zeros(L.n)
    integrality[:L.w0] = 1
    if objective == "energy":
        c = erows.sum(axis=0) + TIE_UJ_PER_MS * lrow
        const = float(econst.sum()) + TIE_UJ_PER_MS * lconst
    else:  # latency, energy breaking ties
        c = lrow + 1e-9 * erows.sum(axis=0)
        const = lconst + 1e-9 * float(econst.sum())
    res = milp(c, integrality=integrality, bounds=Bounds(lb, ub),
               constraints=LinearConstraint(np.array(rows), lo, hi),
               options={"time_limit": time_limit, "mip_rel_gap": 1e-9, "presolve": True})
    secs = time.perf_counter() - t0
    if res.x is None:
        status = "time_limit" if res.status == 1 else "infeasible"
        return Solution("milp", None, status, secs, None, res.message)
    z = np.round(res.x[:L.w0]).astype(int)
    heads = [next(h for h in range(L.H + 1) if z[L.x(k, h)] == 1) for k in range(L.D)]
    hidden = [int(z[L.u(k)]) for k in range(L.D)]
    status = "optimal" if res.status == 0 else "time_limit"
    return Solution("milp", Assignment(heads, hidden), status, secs, float(res.fun + const), res.message)


def compositions(total: int, parts: int):
    """Every way to write ``total`` as ``parts`` positive integers (ordered)."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        edges = (0,) + cuts + (total,)
        yield [edges[i + 1] - edges[i] for i in range(parts)]


def brute_force(p: Problem, deadline_ms: float | None, objective: str = "energy", all_nodes: bool = False) -> Solution:
    t0 = time.perf_counter()
    D = len(p.nodes)
    best, best_val = None, None
    for n in range(D if all_nodes else 1, min(D, p.H, p.Fh) + 1):
        for S in itertools.combinations(range(D), n):
            for hs in compositions(p.H, n):
                if any(p.U[k][h] < 1 for k, h in zip(S, hs)):
                    continue
                for us in compositions(p.Fh, n):
                    if any(u > p.U[k][h] for k, h, u in zip(S, hs, us)):
                        continue
                    heads, hidden = [0] * D, [0] * D
                    for k, h, u in zip(S, hs, us):
                        heads[k], hidden[k] = h, u
                    a = Assignment(heads, hidden)
                    mc = model_cost(p, a, deadline_ms)
                    if not mc.feasible:
                        continue
                    val = (mc.energy_uj + TIE_UJ_PER_MS * mc.latency_ms if objective == "energy"
                           else mc.latency_ms + 1e-9 * mc.energy_uj)
                    if best_val is None or val < best_val - 1e-9 * abs(val):
                        best, best_val = a, val
    return Solution("brute_force", best, "optimal" if best else "infeasible", time.perf_counter() - t0, best_val)


def _largest_remainder(shares: list[float], total: int, minimum: int = 1) -> list[int]:
    """Whole counts ∝ shares, summing to total, each >= minimum (shares > 0)."""
    n = len(shares)
    s = sum(shares)
    raw = [total * x / s for x in shares]
    out = [max(minimum, int(np.floor(r))) for r in raw]
    while sum(out) > total:
        i = max((i for i in range(n) if out[i] > minimum), key=lambda i: out[i] - raw[i])
        out[i] -= 1
    while sum(out) < total:
        i = max(range(n), key=lambda i: raw[i] - out[i])
        out[i] += 1
    return out


def _on(p: Problem, nodes: list[int], heads: list[int], hidden: list[int]) -> Assignment:
    h, u = [0] * len(p.nodes), [0] * len(p.nodes)
    for k, a, b in zip(nodes, heads, hidden):
        h[k], u[k] = a, b
    return Assignment(h, u)


def even_plan(p: Problem) -> Solution:
    n = min(len(p.nodes), p.H, p.Fh)
    nodes = list(range(n))
    return Solution("even", _on(p, nodes, even_split(p.H, n), even_split(p.Fh, n)), "heuristic", 0.0)


def proportional_plan(p: Problem) -> Solution:
    """MoDNN's rule: every node's share ∝ its speed (clock / cycles per MAC of its board's fc)."""
    n = min(len(p.nodes), p.H, p.Fh)
    nodes = list(range(n))
    speed = []
    for k in nodes:
        bp = p.profile.boards[p.profile.node(p.nodes[k]).board]
        speed.append(p.clock[k] / max(bp.rates["fc"].per_unit, 1e-9) if "fc" in bp.rates else p.clock[k])
    return Solution("proportional", _on(p, nodes, _largest_remainder(speed, p.H), _largest_remainder(speed, p.Fh)),
                    "heuristic", 0.0)


def coedge_plan(p: Problem, deadline_ms: float | None, objective: str = "energy") -> Solution:
    """CoEdge (Zeng et al., §IV): LP over continuous shares λ_k of the active set (heads and hidden
    units alike), recursive elimination of nodes whose share is below one head, then rounding."""
    from scipy.optimize import linprog

    t0 = time.perf_counter()
    active = list(range(len(p.nodes)))
    nb = len(p.blocks)
    while active:
        n = len(active)
        T = rounds_us(p, active)
        # cycles linear in λ: A through h = 1 and h = H, B per hidden unit
        def lin(k, b):
            if p.H > 1:
                slope = (p.A[k][b][p.H] - p.A[k][b][1]) / (p.H - 1)
            else:
                slope = 0.0
            c0 = p.A[k][b][1] - slope
            return c0, slope * p.H + p.B[k][b] * p.Fh
        # share limit from memory: the largest λ whose (ceil λH heads, λ·F_h units) fits
        cap = []
        for k in active:
            best = 0.0
            for h in range(1, p.H + 1):
                if p.U[k][h] >= 1:
                    best = max(best, min(h / p.H, p.U[k][h] / p.Fh))
            cap.append(best)
        # variables: λ (n), t (nb)
        nv = n + nb
        A_ub, b_ub = [], []
        for i, k in enumerate(active):
            for b in range(nb):
                c0, c1 = lin(k, b)
                r = np.zeros(nv)
                r[i] = c1 / p.clock[k] * 1e3
                r[n + b] = -1
                A_ub.append(r)
                b_ub.append(-c0 / p.clock[k] * 1e3)
        if deadline_ms is not None:
            r = np.zeros(nv)
            r[n:] = 1
            A_ub.append(r)
            b_ub.append(deadline_ms - sum(T) / 1e3)
        for i, k in enumerate(active):
            if p.budget[k] is not None:
                r = np.zeros(nv)
                c0 = sum(lin(k, b)[0] for b in range(nb))
                c1 = sum(lin(k, b)[1] for b in range(nb))
                r[i] = p.e_cyc[k] * c1
                A_ub.append(r)
                b_ub.append(p.budget[k] - p.e_cyc[k] * c0 - p.e_comm[k][n] * sum(T))
        A_eq = [np.concatenate([np.ones(n), np.zeros(nb)])]
        c = np.zeros(nv)
        if objective == "energy":
            for i, k in enumerate(active):
                c[i] = p.e_cyc[k] * sum(lin(k, b)[1] for b in range(nb))
        else:
            c[n:] = 1
        res = linprog(c, A_ub=np.array(A_ub) if A_ub else None, b_ub=b_ub if b_ub else None, A_eq=np.array(A_eq),
                      b_eq=[1.0], bounds=[(0, cap[i]) for i in range(n)] + [(0, None)] * nb, method="highs")
        if res.status != 0:
            # CoEdge §V: "the algorithm returns an infeasible signal ... we choose to offload all
            # workload to the device that can minimize the end-to-end execution latency"
            solo = [Assignment([p.H if j == k else 0 for j in range(len(p.nodes))],
                               [p.Fh if j == k else 0 for j in range(len(p.nodes))])
                    for k in range(len(p.nodes)) if p.U[k][p.H] >= p.Fh]
            if not solo:
                return Solution("coedge", None, "infeasible", time.perf_counter() - t0, None, res.message)
            a = min(solo, key=lambda x: model_cost(p, x).latency_ms)
            mc = model_cost(p, a, deadline_ms)
            return Solution("coedge", a, "heuristic" if mc.feasible else "infeasible", time.perf_counter() - t0,
                            mc.energy_uj if objective == "energy" else mc.latency_ms,
                            f"LP infeasible with {n} nodes: all work on node {p.nodes[a.taking_part[0]]} (CoEdge's fallback)")
        lam = list(res.x[:n])
        small = [i for i in range(n) if lam[i] * p.H < 1 - 1e-9]
        if not small:
            nodes = active
            heads = _largest_remainder(lam, p.H)
            hidden = _largest_remainder(lam, p.Fh)
            a = _on(p, nodes, heads, hidden)
            mc = model_cost(p, a, deadline_ms)
            return Solution("coedge", a, "heuristic" if mc.feasible else "infeasible", time.perf_counter() - t0,
                            mc.energy_uj if objective == "energy" else mc.latency_ms,
                            "" if mc.feasible else "; ".join(mc.why))
        # Algorithm 1: drop the nodes with a zero share and the smallest of the others
        drop = {i for i in small if lam[i] <= 1e-12}
        rest = [i for i in range(n) if i not in drop]
        if rest and any(i not in drop for i in small):
            drop.add(min(rest, key=lambda i: lam[i]))
        active = [k for i, k in enumerate(active) if i not in drop]
    return Solution("coedge", None, "infeasible", time.perf_counter() - t0)
