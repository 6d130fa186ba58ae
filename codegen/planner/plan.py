"""`cisl plan`: choose each node's share to meet a deadline at least energy, re-check it, write it.

1. The model's shapes come from a model.onnx (any split can be compiled from an unpruned model)
   or a training config (a pruned model's split is fixed before training).
2. The profile (`cisl profile`) must be of those shapes; the testbed file says which nodes there
   are (``--without`` takes some out: re-planning around dead nodes).
3. :func:`.problem.build_problem` makes the tables, :func:`.solve.solve_milp` the plan.
4. The plan is re-checked against every constraint with the exact evaluation
   (:func:`.costs.evaluate`: structure, footprint, cycles, simulated Mixer rounds), never trusting
   the solver's word; where the linear radio model was optimistic the deadline is tightened by the
   difference and the problem solved again (at most ``REPLANS`` times).
5. Infeasible: one line with the fastest latency achievable and what binds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..errors import UserError
from ..modelspec import ModelConfig
from .costs import CHECK_INFERENCES, RADIO_INFERENCES, Evaluation
from .problem import Assignment, Problem, build_problem, exact, model_cost
from .profile import Profile, read_profile
from .solve import TIME_LIMIT_S, Solution, compositions, coedge_plan, even_plan, proportional_plan, solve_milp
from .split import SplitFile, write_split

REPLANS = 4
OBJECTIVES = ("energy", "latency")


@dataclass
class ModelShape:
    cfg: ModelConfig
    keep: float
    rescale: bool
    pruned: bool
    source: str
    trained_devices: int | None = None


def model_shape(path: Path) -> ModelShape:
    """The shapes to plan for: a model.onnx, or a training config (.toml)."""
    path = Path(path)
    if path.suffix == ".toml":
        from ..train.config import load_config

        tc = load_config(path)
        keep = tc.prune.keep if tc.prune.method != "none" else tc.split.random_keep
        return ModelShape(tc.model, float(keep), True, keep < 1.0, str(path))
    from ..onnx_model import load_model

    m = load_model(path)
    return ModelShape(m.config, float(m.keep_ratio), bool(m.rescale), m.keep_ratio < 1.0, str(path), m.devices)


POLISH_EVALUATIONS = 400  # exact evaluations the swap search may spend (~0.1 s each with 16 nodes)
# and the time it may take: a 7.9 M-parameter model on 16 nodes spends ~0.8 s per evaluation, and 400
# of them made `cisl plan` take 341 s
POLISH_SECONDS = 60.0


@dataclass
class PlanResult:
    split: SplitFile
    evaluation: Evaluation
    solution: Solution
    problem: Problem
    notes: list[str] = field(default_factory=list)
    baselines: dict[str, tuple] = field(default_factory=dict)  # name: (solution, model cost, exact evaluation)
    milp: Evaluation | None = None  # the MILP's re-checked plan (None: it found none), written or not


def parse_without(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        return sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise UserError(f"--without {text}: give node ids separated by commas, e.g. --without 3,7") from None


def explain_infeasible(p: Problem, deadline_ms: float | None) -> str:
    """One line: why no plan meets the constraints, with the fastest latency achievable."""
    free = solve_milp(p, None, "latency", energy_limits=False)
    if free.assignment is None:
        cap = sum(max((h for h in range(1, p.H + 1) if p.U[k][h] >= 1), default=0) for k in range(len(p.nodes)))
        usable = [k for k in range(len(p.nodes)) if any(p.U[k][1:])] or list(range(len(p.nodes)))  # not dropped
        tight = min(usable, key=lambda k: sum(1 for h in range(1, p.H + 1) if p.U[k][h] >= 1))
        return (f"the nodes together cannot hold the model: with its hidden units they fit at most {cap} of its "
                f"{p.H} heads (node {p.nodes[tight]}'s flash and RAM bind tightest); add nodes, use boards with "
                f"more memory, or plan a smaller model")
    fast = model_cost(p, free.assignment)
    ev = exact(p, free.assignment)
    if deadline_ms is not None and ev.latency_ms > deadline_ms:
        comm = sum(ev.comm_ms)
        return (f"no plan meets the deadline of {deadline_ms:g} ms: the fastest achievable is {ev.latency_ms:.1f} ms "
                f"({ev.latency_ms - comm:.1f} ms compute on the slowest nodes, {comm:.1f} ms radio) with "
                f"{len(ev.node_ids)} node{'s' if len(ev.node_ids) != 1 else ''}; relax --deadline to at least "
                f"{math.ceil(ev.latency_ms * 10) / 10:.1f}")  # rounded up: the advice must work
    # only the limits that are set (the search may have tightened p.budget: the testbed's are the profile's)
    budget = {nid: p.profile.node(nid).energy_uj for nid in p.nodes}
    limits = _limits(p, deadline_ms)
    over = [(nid, e) for nid, e in zip(ev.node_ids, ev.energy_uj) if budget[nid] is not None and e > budget[nid]]
    if over:
        nid, e = over[0]
        return (f"no plan meets {limits}: node {nid}'s energy_uj binds (the fastest plan, {ev.latency_ms:.1f} ms, "
                f"needs {e:.1f} of its {budget[nid]:g} uJ); {_relax(p, deadline_ms)}, or add nodes")
    if ev.violations:
        return f"no plan found that meets {limits}: the fastest plan breaks one ({ev.violations[0]})"
    return (f"no plan found that meets {limits}: the fastest plan meets them when evaluated exactly "
            f"({ev.latency_ms:.1f} ms), but the planner's model, above the exact one at {fast.latency_ms:.1f} ms, "
            f"ruled out every plan; {_relax(p, deadline_ms)} a little")


def _limits(p: Problem, deadline_ms: float | None) -> str:
    """The constraints a request sets, in words (memory always; the deadline and budgets when given)."""
    budgets = any(p.profile.node(nid).energy_uj is not None for nid in p.nodes)
    parts = ([f"the deadline of {deadline_ms:g} ms"] if deadline_ms is not None else []) + (
        ["every node's energy budget"] if budgets else [])
    return " within ".join(parts) or "every node's memory"


def _relax(p: Problem, deadline_ms: float | None) -> str:
    budgets = any(p.profile.node(nid).energy_uj is not None for nid in p.nodes)
    return " or ".join((["relax --deadline"] if deadline_ms is not None else [])
                       + (["raise the energy budgets"] if budgets else [])) or "add nodes"


def make_plan(model_path: Path, testbed_path: Path, profile_path: Path, deadline_ms: float | None,
              objective: str = "energy", without: list[int] | None = None, kernels: str = "nnref",
              say: Callable[[str], None] = lambda s: None, all_nodes: bool = False,
              search_seconds: float = POLISH_SECONDS) -> PlanResult:
    from ..testbed.config import load_testbed

    if objective not in OBJECTIVES:
        raise UserError(f"--objective {objective}: choose energy or latency")
    if objective == "energy" and deadline_ms is None:
        raise UserError("--objective energy needs --deadline MS (the least energy without a deadline is one node "
                        "doing everything); or leave --objective out for the fastest plan")
    if deadline_ms is not None and not 0 < deadline_ms < math.inf:  # inf would write JSON that is not JSON
        raise UserError(f"--deadline {deadline_ms:g}: must be a positive number of milliseconds")
    shape = model_shape(model_path)
    tb = load_testbed(testbed_path)
    profile = read_profile(profile_path)
    profile.check_model(shape.cfg, str(profile_path))
    ids = [n.id for n in tb.nodes]
    missing = [k for k in ids if k not in {n.id for n in profile.nodes}]
    if missing:
        raise UserError(f"{profile_path}: a profile of another testbed (no node {missing[0]} of {testbed_path}); "
                        f"profile it with `cisl profile MODEL --testbed {testbed_path}`")
    for n in tb.nodes:
        if profile.node(n.id).board != n.hardware:
            raise UserError(f"{profile_path}: node {n.id} is profiled as a {profile.node(n.id).board}, the testbed "
                            f"says {n.hardware}; profile the testbed again")
        # the testbed file's budgets and radio layout are the ones that count (a profile may be older:
        # a node moved since profiling would otherwise be planned, and re-checked, where it was)
        pn = profile.node(n.id)
        pn.energy_uj, pn.energy_source, pn.position = n.energy_uj, n.energy_source, n.position
    profile.nodes = [profile.node(n.id) for n in tb.nodes]  # a named [sim] topology is laid out for these
    profile.topology, profile.seed = tb.sim.topology, tb.sim.seed
    profile.meta = {**profile.meta, "testbed": str(testbed_path)}
    without = without or []
    unknown = [k for k in without if k not in ids]
    if unknown:
        raise UserError(f"--without {unknown[0]}: the testbed has no node {unknown[0]} (nodes {ids[0]}..{ids[-1]})")
    candidates = [k for k in ids if k not in without]
    most = min(shape.cfg.heads, shape.cfg.mlp_hidden)
    if all_nodes and len(candidates) > most:  # every taking-part node holds a head and a hidden unit
        raise UserError(f"--all-nodes: {len(candidates)} nodes, but the model has {shape.cfg.heads} heads and "
                        f"{shape.cfg.mlp_hidden} hidden units, and every node that takes part needs one of each: at "
                        f"most {most} nodes; leave some out with --without, or drop --all-nodes")
    notes = []
    if shape.pruned and without:
        notes.append(f"{shape.source} is pruned (keep {shape.keep:g}): its somegather masks belong to the split it "
                     f"was trained for, so the plan for the surviving nodes needs retraining: `cisl train --split "
                     f"SPLIT.json` (then compile); an unpruned model compiles for it directly")
    p = build_problem(profile, shape.cfg, candidates, shape.keep, shape.rescale, kernels, say)
    try:
        solution, ev = solve_checked(p, deadline_ms, objective, all_nodes, kernels, say)
        refused = None
    except UserError as e:  # the MILP's model is above the exact one: a candidate below may still meet it
        solution, ev, refused = None, None, e
    others = baselines(p, deadline_ms, objective, with_fastest=refused is not None, kernels=kernels)
    more = loosened(p, deadline_ms, objective, all_nodes, kernels) if refused is not None else {}
    milp, milp_solution = ev, solution
    solution, ev, why = best_checked(p, solution, ev, {**others, **more}, objective, all_nodes)
    if solution is None:
        solution, ev, why = repaired(p, {**others, **more}, deadline_ms, objective, all_nodes, kernels, say)
        if solution is None:
            raise refused
    if why:
        notes.append(why)
    solution, ev, why = polish(p, solution, ev, deadline_ms, objective, kernels, say, seconds=search_seconds)
    if why:
        notes.append(why)
    say(f"plan: the written plan and the other candidates over {CHECK_INFERENCES} simulated inferences")
    solution, ev, milp, others, why = _finalists(p, solution, (milp_solution, milp), others, more, deadline_ms,
                                                objective, all_nodes, kernels)
    if why:
        notes.append(why)
    a = solution.assignment
    part = a.taking_part
    boards = [p.profile.node(p.nodes[k]).board for k in part]
    sf = SplitFile(shape.cfg, shape.keep, [p.nodes[k] for k in part], boards, [a.heads[k] for k in part],
                   [a.hidden[k] for k in part],
                   {"objective": objective, "deadline_ms": deadline_ms, "testbed": str(testbed_path),
                    "without": without, "all_nodes": all_nodes, "model": shape.source, "solver": solution.method,
                    "status": solution.status, "solve_seconds": round(solution.seconds, 3),
                    "predicted": ev.to_json(), "needs_retraining": bool(shape.pruned and (
                        without or shape.trained_devices != len(part)))})
    return PlanResult(sf, ev, solution, p, notes, others, milp)


def _finalists(p: Problem, solution: Solution, milp: tuple, others: dict[str, tuple], more: dict[str, tuple],
               deadline_ms: float | None, objective: str, all_nodes: bool, kernels: str):
    """The search's plan and the other candidates (the MILP's, the baselines, the loosened MILP's) over
    ``CHECK_INFERENCES`` simulated inferences each. The search chose among many candidates evaluated on
    ``RADIO_INFERENCES`` each, so its figures favour lucky rounds, and its choice may fall to one: the
    best of them that meets every constraint is written. Returns (solution, its evaluation, the MILP's
    evaluation, the baselines with theirs, a note or "")."""
    searched = exact(p, solution.assignment, deadline_ms, kernels, inferences=CHECK_INFERENCES)

    def again(sol: Solution | None, e: Evaluation | None, chosen: Solution, ev: Evaluation) -> Evaluation | None:
        if e is None or sol is None or sol.assignment is None:
            return e
        if sol.assignment == chosen.assignment:  # one object per split: `--compare` marks the written one's rows
            return ev
        return exact(p, sol.assignment, deadline_ms, kernels, inferences=CHECK_INFERENCES)

    milp_solution, milp_ev = milp[0], again(*milp, solution, searched)
    others = {name: (sol, mc, again(sol, e, solution, searched)) for name, (sol, mc, e) in others.items()}
    more = {name: (sol, mc, again(sol, e, solution, searched)) for name, (sol, mc, e) in more.items()}
    best = _best_meeting(p, {"milp": (milp_solution, None, milp_ev), **others, **more}, objective, all_nodes)
    key = _exact_key(searched, objective)[0]
    if best is not None and (searched.violations or _exact_key(best[1], objective)[0] < key * (1 - 1e-6)):
        sol, ev = best
        what = "energy" if objective == "energy" else "latency"
        note = (f"over {CHECK_INFERENCES} simulated inferences the {sol.method} split "
                + ("meets every constraint and" if searched.violations else f"is better on {what} than")
                + f" the plan the search chose over {RADIO_INFERENCES} each ({ev.latency_ms:.2f} ms, "
                f"{ev.energy_total_uj:,.1f} uJ against {searched.latency_ms:.2f} ms, "
                f"{searched.energy_total_uj:,.1f} uJ" + (f", {searched.violations[0]}" if searched.violations else "")
                + "): written instead")
        milp_ev = again(milp_solution, milp_ev, sol, ev)
        others = {name: (s, mc, again(s, e, sol, ev)) for name, (s, mc, e) in others.items()}
        return sol, ev, milp_ev, others, note
    note = (f"over {CHECK_INFERENCES} simulated inferences the plan breaks a limit it met over {RADIO_INFERENCES} "
            f"({searched.violations[0]}): the rounds vary from inference to inference; leave that margin (a looser "
            f"--deadline or budget) where the limit is hard") if searched.violations else ""
    return solution, searched, milp_ev, others, note


def _farther(p: Problem, pair: tuple[int, int]) -> int:
    """Of two nodes that cannot hear each other, the one farther from the other candidates (where the
    testbed file puts them: the layout the rounds were simulated on)."""
    from .costs import topology_for

    xy = topology_for(p.profile, p.nodes).positions
    pos = {nid: xy[i] for i, nid in enumerate(p.nodes)}

    def spread(nid: int) -> float:
        return sum(float(((pos[nid] - q) ** 2).sum() ** 0.5) for m, q in pos.items() if m != nid)

    return max(pair, key=spread)


def solve_checked(p: Problem, deadline_ms: float | None, objective: str = "energy", all_nodes: bool = False,
                  kernels: str = "nnref", say: Callable[[str], None] = lambda s: None) -> tuple[Solution, Evaluation]:
    """The MILP's plan, re-checked exactly; where the model was optimistic, the deadline (or a
    node's energy budget) is tightened by the difference and the problem solved again. A plan is
    returned only if the exact evaluation meets every constraint."""
    budgets, caps = list(p.budget), [list(u) for u in p.U]
    try:
        return _solve_checked(p, deadline_ms, objective, all_nodes, kernels, say)
    finally:  # the tightened budgets and dropped nodes were the search's, not the testbed's
        p.budget, p.U = budgets, caps


def _solve_checked(p, deadline_ms, objective, all_nodes, kernels, say):
    target = deadline_ms
    solution = None
    attempt, dropped = 0, []
    say(f"plan: solving the MILP over {len(p.nodes)} candidate nodes (HiGHS; at most {TIME_LIMIT_S:g} s per solve)")
    while True:
        solution = solve_milp(p, target, objective, all_nodes=all_nodes)
        if solution.assignment is None:
            if all_nodes and solve_milp(p, target, objective).assignment is not None:
                raise UserError(f"no plan that uses all {len(p.nodes)} nodes meets {_limits(p, deadline_ms)} "
                                f"(with each node's memory); drop --all-nodes to let the planner leave nodes out")
            raise UserError("; ".join([explain_infeasible(p, deadline_ms)] + dropped))
        ev = exact(p, solution.assignment, deadline_ms, kernels)
        memory = [v for v in ev.violations if "flash" in v or "RAM" in v]
        if memory:  # the tables are exact for memory: a violation is a bug, never a plan
            raise AssertionError(f"the planner's memory tables disagree with the footprint model: {memory[0]}")
        late = deadline_ms is not None and ev.latency_ms > deadline_ms
        if not ev.violations:
            break
        if ev.unreachable and all_nodes:
            raise UserError(f"{ev.violations[0]}, so no plan can use all {len(p.nodes)} nodes; drop --all-nodes "
                            f"to let the planner leave one out")
        if ev.unreachable:  # the pair cannot hear each other: the farther node sits out
            drop = _farther(p, ev.unreachable)
            p.U[p.nodes.index(drop)] = [0] * len(p.U[0])
            say(f"plan: {ev.violations[0]}; planning without node {drop}")
            dropped.append(f"node {drop} left out ({ev.violations[0]})")
            assert len(dropped) <= len(p.nodes)
            continue
        if attempt == REPLANS:
            raise UserError(f"no plan found that the exact re-check accepts after {REPLANS} tightenings "
                            f"({ev.violations[0]}); {_relax(p, deadline_ms)}")
        if late:
            mc = model_cost(p, solution.assignment)
            target = (target or ev.latency_ms) - (ev.latency_ms - mc.latency_ms) - 1e-3 * deadline_ms
            say(f"plan: the exact re-check is {ev.latency_ms - mc.latency_ms:+.2f} ms off the model; tightening the "
                f"deadline to {target:.2f} ms")
        else:  # an energy budget: tighten every budget by the largest relative excess the re-check found
            excess = max((ev.energy_uj[ev.node_ids.index(nid)] / p.budget[k] for k, nid in enumerate(p.nodes)
                          if nid in ev.node_ids and p.budget[k] is not None), default=1.0)
            if excess > 1.0:
                for k in range(len(p.nodes)):
                    if p.budget[k] is not None:
                        p.budget[k] /= 1.01 * excess
                say(f"plan: the exact re-check found a node {100 * (excess - 1):.1f} % over its energy budget; "
                    f"tightening every budget by that")
        attempt += 1
    assert solution is not None and solution.assignment is not None
    return solution, ev


def baselines(p: Problem, deadline_ms: float | None, objective: str = "energy",
              with_fastest: bool = False, kernels: str = "nnref") -> dict[str, tuple]:
    """The even, speed-proportional and CoEdge plans of the same problem (and, ``with_fastest``, the
    MILP's fastest plan without energy limits): (solution, model cost, exact evaluation or None)."""
    out = {}
    sols = [even_plan(p), proportional_plan(p), coedge_plan(p, deadline_ms, objective)]
    if with_fastest:
        fastest = solve_milp(p, None, "latency", energy_limits=False)
        fastest.method = "fastest"
        sols.append(fastest)
    for sol in sols:
        if sol.assignment is None:
            out[sol.method] = (sol, None, None)
            continue
        out[sol.method] = (sol, model_cost(p, sol.assignment, deadline_ms),
                           exact(p, sol.assignment, deadline_ms, kernels))
    return out


LOOSEN = (1.02, 1.04, 1.06, 1.08, 1.10)  # the model's energy was up to ~8 % above the exact one (stop 59)


def loosened(p: Problem, deadline_ms: float | None, objective: str, all_nodes: bool,
             kernels: str = "nnref") -> dict[str, tuple]:
    """MILP plans with every energy budget loosened in the model by each factor of ``LOOSEN``, each
    evaluated exactly against the real budgets: the model charges every node the busiest node's
    radio share, so a request it refuses may be met (4 nRF52833s, budgets 11000 uJ: refused, while
    the plan found at +8 % takes at most 10,776 uJ per node). Only when budgets are set."""
    true = list(p.budget)
    if all(b is None for b in true):
        return {}
    out = {}
    try:
        for f in LOOSEN:
            p.budget = [None if b is None else b * f for b in true]
            sol = solve_milp(p, deadline_ms, objective, all_nodes=all_nodes)
            if sol.assignment is not None:
                sol.method = f"milp (budgets +{round(100 * (f - 1))} % in its model)"
                out[sol.method] = (sol, None, exact(p, sol.assignment, deadline_ms, kernels))
    finally:
        p.budget = true
    return out


def best_checked(p: Problem, solution: Solution | None, ev: Evaluation | None, others: dict[str, tuple],
                 objective: str, all_nodes: bool) -> tuple[Solution | None, Evaluation | None, str]:
    """The MILP's re-checked plan, unless a candidate evaluated exactly beside it (a baseline, the
    fastest plan) also meets every constraint and is better on the objective: the MILP optimises a
    linear model of the radio, which can rank uneven splits wrongly. Returns (solution, evaluation,
    a note saying which was taken, or "")."""
    best = _best_meeting(p, others, objective, all_nodes)
    if best is None:
        return solution, ev, ""
    sol, e = best
    what = "energy" if objective == "energy" else "latency"
    if ev is None:
        return sol, e, (f"the MILP found no plan (its radio model is above the exact one); the {sol.method} split "
                        f"meets every constraint when evaluated exactly: written")
    if _exact_key(e, objective)[0] < _exact_key(ev, objective)[0] * (1 - 1e-6):
        return sol, e, (f"the {sol.method} split beats the MILP's plan on {what} when evaluated exactly "
                        f"({e.latency_ms:.2f} ms, {e.energy_total_uj:,.1f} uJ against {ev.latency_ms:.2f} ms, "
                        f"{ev.energy_total_uj:,.1f} uJ) and meets every constraint: written instead")
    return solution, ev, ""


def _best_meeting(p: Problem, candidates: dict[str, tuple], objective: str,
                  all_nodes: bool) -> tuple[Solution, Evaluation] | None:
    """The candidate (solution, model cost, exact evaluation) best on the objective among those that meet
    every constraint when evaluated exactly (and, ``all_nodes``, use every node), or None."""
    ok = [(sol, e) for sol, _, e in candidates.values()
          if e is not None and not e.violations and (not all_nodes or len(e.node_ids) == len(p.nodes))]
    if not ok:
        return None
    sol, e = min(ok, key=lambda x: _exact_key(x[1], objective))
    if sol.status == "infeasible":  # the model's verdict on a heuristic the exact evaluation accepts
        sol = replace(sol, status="heuristic")
    return sol, e


def excess(p: Problem, e: Evaluation, deadline_ms: float | None) -> float:
    """How far an exactly evaluated plan is from meeting the deadline and every energy budget: the sum of
    the relative excesses (0: it meets them; infinite: two of its nodes cannot hear each other)."""
    if e.unreachable:
        return math.inf
    x = max(0.0, e.latency_ms / deadline_ms - 1) if deadline_ms else 0.0
    for k, nid in enumerate(p.nodes):
        if nid in e.node_ids and p.budget[k]:
            x += max(0.0, e.energy_uj[e.node_ids.index(nid)] / p.budget[k] - 1)
    return x


def repaired(p: Problem, candidates: dict[str, tuple], deadline_ms: float | None, objective: str, all_nodes: bool,
             kernels: str = "nnref", say: Callable[[str], None] = lambda s: None
             ) -> tuple[Solution | None, Evaluation | None, str]:
    """When no candidate meets every constraint exactly: the polish's steps from the candidate nearest to
    meeting them, each kept when it brings the plan nearer (:func:`excess`), until one meets them all.
    The model's limits are a linear model's: a deadline 2 ms above the fastest plan `--objective latency`
    wrote (707.77 ms) was refused as below the fastest achievable (719.1 ms). (None, None, "") when no
    step gets there."""
    near = [(excess(p, e, deadline_ms), sol, e) for sol, _, e in candidates.values()
            if e is not None and sol.assignment is not None and (not all_nodes or len(e.node_ids) == len(p.nodes))]
    near = [x for x in near if math.isfinite(x[0])]
    if not near:
        return None, None, ""
    _, sol, e = min(near, key=lambda t: t[0])
    say(f"plan: no candidate meets every constraint; moving shares from the nearest ({sol.method}), each step "
        "evaluated exactly")
    fixed, ev, _ = polish(p, sol, e, deadline_ms, objective, kernels, say, repair=True)
    if ev.violations:
        return None, None, ""
    return fixed, ev, (f"no solver's plan met every constraint when evaluated exactly; moving shares from the "
                       f"{sol.method} split found one ({ev.latency_ms:.2f} ms, {ev.energy_total_uj:,.1f} uJ)")


def _exact_key(e: Evaluation, objective: str) -> tuple[float, float]:
    return (e.energy_total_uj, e.latency_ms) if objective == "energy" else (e.latency_ms, e.energy_total_uj)


def polish(p: Problem, solution: Solution, ev: Evaluation, deadline_ms: float | None, objective: str,
           kernels: str = "nnref", say: Callable[[str], None] = lambda s: None,
           budget: int = POLISH_EVALUATIONS, repair: bool = False,
           seconds: float = POLISH_SECONDS) -> tuple[Solution, Evaluation, str]:
    """The written plan improved by swapping and moving shares between nodes, each step evaluated exactly.

    The linear model prices n nodes' rounds alike whoever takes part and however the shares sit on
    them, but the exact rounds differ:
    - where a share sits: on a hallway the node with the smallest message in the middle or at an end
      is a few percent apart (4 nRF52833s: 30,943 against 31,891 uJ for the same shares);
    - how uneven the shares are: a node's radio energy grows with what it sends and with how long it
      waits for slower nodes in the rounds (2 nodes: 5,844.7 to 6,341.4 uJ over splits the model prices
      within 54 uJ), so a looser deadline could write a dearer plan than a tighter one.
    First improvement, until no step helps or ``budget`` evaluations or ``seconds`` are spent:
    - swaps over every pair (two nodes taking part, or one taking part and one left out, which moves
      its share);
    - then moves between two nodes taking part: one head, or a step of hidden units (an eighth of them,
      halved down to one whenever no move of that step helps; back to swaps after every improvement).
    Where every division of the heads and hidden units among the nodes taking part fits half the budget
    (2 nodes of a small model), all of them are tried first: the exact energy is rugged in the shares.
    Only steps that meet every constraint exactly and improve the objective count, over ``RADIO_INFERENCES``
    simulated inferences and then, confirmed, over ``CHECK_INFERENCES`` (14 nodes: of two swaps that were
    better over 3, 101.12 against 101.79 ms, the pair was worse over 16, 102.67 against 101.79); with
    ``repair``, from a plan that breaks some, steps that bring it nearer to meeting them (:func:`excess`),
    until it does.
    Returns (solution, evaluation, a note or "")."""
    heads, hidden = list(solution.assignment.heads), list(solution.assignment.hidden)
    origin = (tuple(heads), tuple(hidden))
    best = ev
    tried, swaps, moves, said = 0, 0, 0, 0
    D = len(p.nodes)
    ends, timed_out = time.monotonic() + seconds, False

    def spent() -> bool:
        return tried >= budget or timed_out

    def better(h2: list[int], u2: list[int]) -> bool:
        nonlocal best, heads, hidden, timed_out, tried, said
        if any(h and not 1 <= u <= p.U[k][h] for k, (h, u) in enumerate(zip(h2, u2))):
            return False  # a share a node cannot hold: the tables are exact for memory
        if time.monotonic() > ends:
            timed_out = True
            return False
        if repair and not best.violations:
            return False  # repaired: the objective's polish comes after
        tried += 1
        if tried >= said + 50:
            said = tried - tried % 50
            say(f"plan: {said} steps evaluated exactly, {swaps} swaps and {moves} moves kept so far")
        e = exact(p, Assignment(h2, u2), deadline_ms, kernels)
        if repair:
            ok = excess(p, e, deadline_ms) < excess(p, best, deadline_ms) - 1e-9  # the nodes taking part stay
        else:
            ok = not e.violations and _exact_key(e, objective)[0] < _exact_key(best, objective)[0] * (1 - 1e-6)
            if ok:  # confirmed over more inferences: on 3 each, most "better" steps of many nodes were luck
                ok = confirmed(h2, u2)
        if ok:
            heads, hidden, best = h2, u2, e
            return True
        return False

    checked: dict = {}  # (heads, hidden) -> evaluation over CHECK_INFERENCES

    def over_more(h2: list[int], u2: list[int]) -> Evaluation:
        nonlocal tried
        k = (tuple(h2), tuple(u2))
        if k not in checked:
            tried += 1
            checked[k] = exact(p, Assignment(list(h2), list(u2)), deadline_ms, kernels, inferences=CHECK_INFERENCES)
        return checked[k]

    def confirmed(h2: list[int], u2: list[int]) -> bool:
        now, e = over_more(heads, hidden), over_more(h2, u2)
        return not e.violations and _exact_key(e, objective)[0] < _exact_key(now, objective)[0] * (1 - 1e-6)

    def swap_round() -> bool:
        nonlocal swaps
        for i in range(D):
            for j in range(i + 1, D):
                if spent():
                    return False
                if (heads[i], hidden[i]) == (heads[j], hidden[j]) or heads[i] == 0 == heads[j]:
                    continue
                h2, u2 = list(heads), list(hidden)
                h2[i], h2[j], u2[i], u2[j] = heads[j], heads[i], hidden[j], hidden[i]
                if better(h2, u2):
                    swaps += 1
                    return True
        return False

    def move_round(step: int) -> bool:
        nonlocal moves
        part = [k for k in range(D) if heads[k] > 0]
        for i in part:
            for j in part:
                if i == j:
                    continue
                tries = []
                if step == 1 and heads[i] > 1:
                    tries.append((1, 0))  # a head, with the smallest steps: the coarse ones move hidden units
                if hidden[i] > step:
                    tries.append((0, step))
                for dh, du in tries:
                    if spent():
                        return False
                    h2, u2 = list(heads), list(hidden)
                    h2[i], h2[j], u2[i], u2[j] = h2[i] - dh, h2[j] + dh, u2[i] - du, u2[j] + du
                    if better(h2, u2):
                        moves += 1
                        return True
        return False

    if seconds <= 0:
        return solution, ev, ""
    say("plan: trying the shares on other nodes and moved between them, each evaluated exactly")
    part = [k for k in range(D) if heads[k] > 0]
    if math.comb(p.H - 1, len(part) - 1) * math.comb(p.Fh - 1, len(part) - 1) <= budget // 2:
        # few enough divisions among the nodes taking part to try them all: the energy is rugged in the
        # shares (messages fill whole packets), so a local search can stop short of the best
        start = (heads, hidden)
        for hs in compositions(p.H, len(part)):
            for us in compositions(p.Fh, len(part)):
                h2, u2 = list(heads), list(hidden)
                for k, h, u in zip(part, hs, us):
                    h2[k], u2[k] = h, u
                if (h2, u2) != (heads, hidden):
                    better(h2, u2)
        moves += (heads, hidden) != start  # the best division, one move
    first = max(1, p.Fh // 8)
    step = first
    while not spent() and not (repair and not best.violations):
        if swap_round():
            step = first
            continue
        if move_round(step):
            continue
        if step == 1:
            break
        step = max(1, step // 2)
    if timed_out:
        say(f"plan: the search for better shares stopped after {seconds:g} s")
    if swaps == moves == 0:
        say(f"plan: none of the {tried} steps tried beats the plan")
        return solution, ev, ""
    what = "energy" if objective == "energy" else "latency"
    steps = " and ".join(x for x in (f"{swaps} swap{'s' if swaps != 1 else ''}" if swaps else "",
                                     f"{moves} move{'s' if moves != 1 else ''}" if moves else "") if x)
    sol = replace(solution, assignment=Assignment(heads, hidden), method=f"{solution.method} + {steps}")
    # the figures over CHECK_INFERENCES where the steps were confirmed (not for a repair)
    was, now, over = checked.get(origin, ev), checked.get((tuple(heads), tuple(hidden)), best), ""
    if origin in checked:
        over = f" over {CHECK_INFERENCES} simulated inferences"
    return sol, best, (f"the shares swapped or moved between nodes are better on {what} when evaluated exactly{over} "
                       f"({now.latency_ms:.2f} ms, {now.energy_total_uj:,.1f} uJ against {was.latency_ms:.2f} ms, "
                       f"{was.energy_total_uj:,.1f} uJ; {steps} of {tried} tried): written instead")


def format_plan(r: PlanResult) -> str:
    ev = r.evaluation
    lines = [f"{'node':>4} {'board':<11} {'heads':>5} {'hidden':>6} {'flash (B)':>10} {'RAM (B)':>8} {'energy uJ':>10}"]
    for i, nid in enumerate(ev.node_ids):
        lines.append(f"{nid:>4} {r.split.boards[i]:<11} {ev.heads[i]:>5} {ev.hidden[i]:>6} {ev.flash[i]:>10} "
                     f"{ev.ram[i]:>8} {ev.energy_uj[i]:>10.1f}")
    out = [n for n in r.problem.nodes if n not in ev.node_ids]
    if out:
        lines.append(f"left out: {', '.join(str(n) for n in out)}")
    dl = r.split.planner.get("deadline_ms")
    goal = "least energy" if r.split.planner.get("objective") == "energy" else "fastest"
    # the solver's status is about its linear model; the polish's steps come after it, evaluated exactly
    base, _, steps = r.solution.method.partition(" + ")
    solved = f"{base} {r.solution.status} in {r.solution.seconds:.2f} s" + (
        f" (on its linear model), then {steps} evaluated exactly" if steps else "")
    checked = ("re-checked exactly: no constraint broken" if not ev.violations else
               f"re-checked over {CHECK_INFERENCES} simulated inferences: {ev.violations[0]} (see the note)")
    lines.append(f"latency {ev.latency_ms:.2f} ms" + (f" (deadline {dl:g} ms)" if dl else "") + f" [{goal}]"
                 + f", energy {ev.energy_total_uj:,.1f} uJ per inference; {solved}; {checked}")
    return "\n".join(lines)


def write_plan_file(out: Path, r: PlanResult) -> None:
    write_split(out, r.split)


__all__ = ["PlanResult", "baselines", "format_plan", "make_plan", "model_shape", "parse_without", "write_plan_file",
           "Assignment", "Profile"]
