"""The heterogeneous planner (codegen/planner): the MILP is exact on its model, the model agrees
with the exact evaluation, and every plan it returns meets every constraint when re-checked.

Profiles here use fixed per-op rates (no cycle model needed); tests/test_plan_cli.py runs the real
`cisl profile` → `cisl plan` → `cisl compile --split` → `cisl sim` chain.
"""

from __future__ import annotations

import itertools

import pytest

from codegen.errors import UserError
from codegen.modelspec import ModelConfig
from codegen.ops import REGISTRY
from codegen.planner.costs import evaluate
from codegen.planner.problem import Assignment, build_problem, exact, model_cost
from codegen.planner.plan import solve_checked
from codegen.planner.profile import BoardProfile, Profile, Rate, node_profile
from codegen.planner.solve import brute_force, coedge_plan, even_plan, proportional_plan, solve_milp
from codegen.partition import Split
from codegen.planner.split import split_of, split_problem

pytestmark = pytest.mark.unit

CFG = ModelConfig(lookback=64, patch_len=8, stride=8, padding="none", d_model=16, heads=4, layers=1, mlp_hidden=8,
                  horizon=8)


def rates(mac: float = 2.0, elem: float = 8.0, call: float = 200.0) -> dict[str, Rate]:
    return {k: Rate(mac if REGISTRY[k].work_unit == "MAC" else elem, call) for k in REGISTRY}


def profile(boards: list[str], positions=None, budgets=None, slow: set[str] = frozenset()) -> Profile:
    bp = {b: BoardProfile(b, 64e6, rates(mac=6.0 if b in slow else 2.0), "nnref") for b in set(boards)}
    nodes = [node_profile(k, b, "harvest" if budgets and budgets[k] else "battery", budgets[k] if budgets else None,
                          positions[k] if positions else (3.0 * k, 0.0)) for k, b in enumerate(boards)]
    return Profile(CFG, bp, nodes)


CASES = {
    # name: boards, positions, energy budgets, U overrides {node: max heads it may hold}
    "mixed4": (["nrf52840dk", "nrf52840dk", "nrf52833dk", "nrf52833dk"], None, None, {}),
    "far_node5": (["nrf52840dk"] * 5, [(0, 0), (3, 0), (6, 0), (9, 0), (40, 0)], None, {}),
    "budgets4": (["nrf52840dk", "nrf52833dk", "nrf52840dk", "nrf52833dk"], None, [None, 900.0, None, 400.0], {}),
    "memory6": (["nrf52840dk", "nrf52833dk"] * 3, None, None, {1: 1, 3: 1, 5: 1, 0: 2}),
}


@pytest.fixture(scope="module")
def problems():
    out = {}
    for name, (boards, pos, budgets, caps) in CASES.items():
        prof = profile(boards, pos, budgets, slow={"nrf52833dk"})
        p = build_problem(prof, CFG, list(range(len(boards))))
        for k, hmax in caps.items():  # a node that holds fewer heads (as a smaller part would)
            p.U[k] = [u if h <= hmax else 0 for h, u in enumerate(p.U[k])]
        out[name] = p
    return out


def _deadlines(p):
    fastest = model_cost(p, solve_milp(p, None, "latency", energy_limits=False).assignment).latency_ms
    return [None, fastest * 1.05, fastest * 1.5, fastest * 3.0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_milp_equals_brute_force(problems, name):
    p = problems[name]
    for deadline, objective in itertools.product(_deadlines(p), ("energy", "latency")):
        if objective == "energy" and deadline is None:
            continue
        m, b = solve_milp(p, deadline, objective), brute_force(p, deadline, objective)
        assert (m.assignment is None) == (b.assignment is None), (name, deadline, objective)
        if m.assignment is None:
            continue
        assert m.status == "optimal"
        mc, bc = model_cost(p, m.assignment, deadline), model_cost(p, b.assignment, deadline)
        assert mc.feasible, (name, deadline, mc.why)
        key = (lambda c: c.energy_uj) if objective == "energy" else (lambda c: c.latency_ms)
        assert key(mc) == pytest.approx(key(bc), rel=1e-6), (name, deadline, objective, m.assignment, b.assignment)


def test_an_unreachable_deadline_is_infeasible_for_both(problems):
    p = problems["mixed4"]
    assert solve_milp(p, 0.01).assignment is None and brute_force(p, 0.01).assignment is None


def test_memory_caps_and_budgets_bind(problems):
    p = problems["memory6"]
    a = solve_milp(p, None, "latency").assignment
    assert all(a.heads[k] <= 1 for k in (1, 3, 5)) and a.heads[0] <= 2
    q = problems["budgets4"]
    slack = 3 * model_cost(q, solve_milp(q, None, "latency", energy_limits=False).assignment).latency_ms
    e = model_cost(q, solve_milp(q, slack).assignment)
    assert e.feasible and all(e.node_energy_uj[k] <= q.budget[k] + 1e-6 for k in (1, 3))


def test_the_model_agrees_with_the_exact_evaluation(problems):
    """Compute and memory are exact tables; the rounds are exact for the sets they were simulated on."""
    p = problems["mixed4"]
    for heads, hidden in (([1, 1, 1, 1], [2, 2, 2, 2]), ([2, 1, 1, 0], [4, 3, 1, 0]), ([0, 3, 0, 1], [0, 5, 0, 3])):
        a = Assignment(heads, hidden)
        mc, ev = model_cost(p, a), exact(p, a)
        part = a.taking_part
        for bi in range(len(p.blocks)):
            model = max((p.A[k][bi][heads[k]] + p.B[k][bi] * hidden[k]) / p.clock[k] * 1e3 for k in part)
            # every node's ops are priced as the sink's (its head block reduces instead of sending):
            # an upper bound, within a few per cent
            assert ev.compute_ms[bi] - 1e-9 <= model <= 1.2 * ev.compute_ms[bi] + 1e-3, (heads, p.blocks[bi])
            if p.blocks[bi] != "head":
                assert model == pytest.approx(ev.compute_ms[bi], rel=0.02), (heads, p.blocks[bi])
        if len(part) == len(p.nodes):  # all nodes: the simulated set itself
            assert mc.latency_ms == pytest.approx(ev.latency_ms, rel=0.02)
        assert not ev.violations
    # the memory staircase is exact: U hidden units fit, one more does not (or U is the whole layer)
    q = build_problem(profile(["nrf52833dk"] * 2), CFG, [0, 1])
    assert all(q.U[0][h] == CFG.mlp_hidden for h in range(1, CFG.heads + 1))  # a tiny model fits anywhere


def test_baselines_and_the_exact_recheck(problems):
    p = problems["mixed4"]
    for sol in (even_plan(p), proportional_plan(p)):
        assert sum(sol.assignment.heads) == CFG.heads and sum(sol.assignment.hidden) == CFG.mlp_hidden
    assert even_plan(p).assignment.heads == [1, 1, 1, 1]
    prop = proportional_plan(p).assignment  # the slow nRF52833 profile gets less
    assert prop.heads[0] + prop.heads[1] >= prop.heads[2] + prop.heads[3]
    loose = 3 * model_cost(p, even_plan(p).assignment).latency_ms
    co = coedge_plan(p, loose)
    assert co.assignment is not None and model_cost(p, co.assignment, loose).feasible
    milp = solve_milp(p, loose)
    assert model_cost(p, milp.assignment).energy_uj <= model_cost(p, co.assignment).energy_uj + 1e-6
    assert model_cost(p, milp.assignment).energy_uj <= model_cost(p, even_plan(p).assignment).energy_uj + 1e-6


def test_uneven_splits_are_checked():
    assert split_problem([2, 2], [4, 4], CFG) is None
    assert "holds 3 heads" in split_problem([2, 1], [4, 4], CFG)
    assert "node 1" in split_problem([4, 0], [4, 4], CFG)
    s = split_of([3, 1], [2, 6], CFG)
    assert s.hidden_cols(1) == (2, 8) and s.model_cols(1) == (12, 16) and not s.is_even
    assert split_of([2, 2], [4, 4], CFG) == Split.even(2, 4, CFG.d_model, 8)
    ev = evaluate(profile(["nrf52840dk", "nrf52833dk"]), CFG, [0, 1], [3, 1], [2, 6])
    assert ev.heads == [3, 1] and len(ev.flash) == 2 and not ev.violations


def test_all_nodes_keeps_every_candidate(problems):
    p = problems["mixed4"]
    m = solve_milp(p, None, "latency", all_nodes=True)
    assert all(h > 0 for h in m.assignment.heads)
    b = brute_force(p, None, "latency", all_nodes=True)
    assert model_cost(p, m.assignment).latency_ms == pytest.approx(model_cost(p, b.assignment).latency_ms, rel=1e-6)


def test_a_pair_that_cannot_hear_each_other_is_never_a_plan():
    """Short rounds that deliver nothing are no plan: the re-check names the pair, the planner leaves
    the far node out, and says so when what is left cannot hold the model."""
    prof = profile(["nrf52840dk"] * 3, [(0, 0), (3, 0), (46, 0)])
    p = build_problem(prof, CFG, [0, 1, 2])
    for k, hmax in {0: 2, 1: 1, 2: 2}.items():  # only nodes 0 and 2 together hold the 4 heads
        p.U[k] = [u if h <= hmax else 0 for h, u in enumerate(p.U[k])]
    ev = exact(p, Assignment([2, 0, 2], [4, 0, 4]))
    assert ev.unreachable == (0, 2) and "out of each other's radio range" in ev.violations[0]
    with pytest.raises(UserError, match=r"node 2 left out \(radio: node 0 never received node 2's message"):
        solve_checked(p, None, "latency")
    with pytest.raises(UserError, match="no plan can use all 3 nodes"):
        solve_checked(p, None, "latency", all_nodes=True)
    assert p.U[2][2] > 0  # the search's drop is not the testbed's


def test_a_relay_carries_messages_between_nodes_out_of_range():
    """The evaluation's relays (bench/heterogeneous.py's relay study): a node in the rounds that
    computes nothing bridges two nodes 48 m apart, and pays for its radio. (At 40 m, this test's
    distance until stop 45, the two nodes do reach each other on this channel; they only looked out
    of range because a 2-node round locked the second node out, docs/design/mixer.md §5. An
    unreachable split's rounds now end early, its messages lost, so its latency says nothing.)"""
    prof = profile(["nrf52840dk"] * 3, [(0, 0), (48, 0), (24, 0)])
    alone = evaluate(prof, CFG, [0, 1], [2, 2], [4, 4])
    relayed = evaluate(prof, CFG, [0, 1], [2, 2], [4, 4], relays=[2])
    assert alone.unreachable == (0, 1) and any("out of each other's radio range" in v for v in alone.violations)
    assert relayed.unreachable is None and not relayed.violations
    assert relayed.relays == [2] and relayed.relay_energy_uj[0] > 0
    assert relayed.energy_total_uj == pytest.approx(sum(relayed.energy_uj) + relayed.relay_energy_uj[0])


@pytest.mark.parametrize("sim_topology", [None, "line"])
def test_the_planner_the_estimate_and_the_virtual_testbed_place_nodes_alike(tmp_path, sim_topology):
    """One layout rule (codegen/testbed/layout.py): the rounds `cisl plan` priced are the ones `cisl
    estimate/sim --testbed` and the virtual testbed run. A split on testbed nodes 0..n-1 of a larger
    testbed ran on a fresh topology for n nodes (a 3-node full mesh, an 8-node hallway: 148 ms
    against a planned 118.6), and with `[sim] topology = "line"` the planner priced the file's
    hallway positions while the medium ran the line."""
    from types import SimpleNamespace

    import numpy as np

    from codegen.planner.costs import topology_for
    from codegen.radio.topology import topology
    from codegen.testbed.config import load_testbed
    from codegen.timing.estimate import testbed_topology
    from codegen.vtestbed.bed import radio_layout, run_topology, sim_testbed_text

    tb_file = tmp_path / "tb.toml"
    text = sim_testbed_text(6)  # hallway positions
    if sim_topology:
        text = text.replace("[sim]\n", f'[sim]\ntopology = "{sim_topology}"\n', 1)
    tb_file.write_text(text)
    tb = load_testbed(tb_file)
    prof = Profile(CFG, {}, [node_profile(n.id, "nrf52840dk", position=n.position) for n in tb.nodes],
                   tb.sim.topology, tb.sim.seed)
    whole = topology(sim_topology or "hallway", 6, 0).positions  # where the file puts its six nodes
    for where in ([0, 1, 2], [0, 1, 2, 3, 4, 5], [1, 3], [5, 0, 2]):
        plan = SimpleNamespace(testbed_nodes=where, devices=len(where), meta={"testbed_nodes": where})
        priced = topology_for(prof, where).positions
        assert np.allclose(priced, whole[where], atol=0.01), (where, priced)
        ran = run_topology(radio_layout(tb, plan))
        ran = ran.positions if not isinstance(ran, str) else topology(ran, len(where), 0).positions
        estimated = testbed_topology(tb_file, plan)[0]
        estimated = estimated.positions if not isinstance(estimated, str) else topology(estimated, len(where)).positions
        assert np.allclose(ran, priced, atol=0.01) and np.allclose(estimated, priced, atol=0.01), where


def test_the_plan_is_polished_by_exact_swaps():
    """The linear model prices n nodes' rounds alike wherever the shares sit, but on a hallway the exact
    rounds depend on it (4 nRF52833s: the same three shares cost 30,943 or 31,891 uJ by placement, and a
    looser budget wrote the dearer one). `cisl plan` swaps shares between nodes, evaluating each swap
    exactly, until none helps."""
    from codegen.planner.plan import polish
    from codegen.planner.solve import Solution

    p = build_problem(profile(["nrf52840dk"] * 6, [(6.0 * k, 0.0) for k in range(6)]), CFG, list(range(6)))
    spread = Assignment([1, 0, 1, 0, 0, 2], [2, 0, 2, 0, 0, 4])  # 30 m end to end: rounds over several hops
    start = exact(p, spread)
    sol, ev, note = polish(p, Solution("milp", spread, "optimal", 0.0), start, None, "energy")
    assert not ev.violations and ev.energy_total_uj < 0.7 * start.energy_total_uj, (start, ev)
    assert "swap" in sol.method and "better on energy when evaluated exactly" in note
    a = sol.assignment
    assert sorted(zip(a.heads, a.hidden)) == sorted(zip(spread.heads, spread.hidden))  # the same shares
    for i, j in itertools.combinations(range(6), 2):  # no single swap is better any more
        h, u = list(a.heads), list(a.hidden)
        h[i], h[j], u[i], u[j] = h[j], h[i], u[j], u[i]
        e = exact(p, Assignment(h, u))
        assert e.violations or e.energy_total_uj >= ev.energy_total_uj * (1 - 1e-6), (h, u)
    # latency objective too, and a plan no swap improves is returned as it was
    sol2, _, note2 = polish(p, Solution("milp", a, "optimal", 0.0), ev, None, "energy")
    assert sol2.assignment == a and note2 == ""
    _, ev3, _ = polish(p, Solution("milp", spread, "optimal", 0.0), start, None, "latency")
    assert ev3.latency_ms < start.latency_ms


def test_the_polish_moves_shares_to_the_best_division_exactly():
    """The model prices a 2-node split's energy alike however uneven it is (within 54 uJ on the audit's
    case), while the exact energy varies by 9 % with the shares (what each node sends, how long it waits
    in the rounds): `--deadline 105` wrote 6,012.1 uJ where `--deadline 92` had written 5,905.8. With few
    enough divisions, the polish tries them all, so the plan is the exact optimum of its nodes whatever
    the MILP started from, and a looser deadline never writes a dearer plan."""
    from codegen.planner.plan import polish
    from codegen.planner.solve import Solution, compositions

    p = build_problem(profile(["nrf52840dk", "nrf52833dk"], [(0.0, 0.0), (9.0, 0.0)], slow={"nrf52833dk"}), CFG,
                      [0, 1])
    every = {}
    for hs in compositions(p.H, 2):
        for us in compositions(p.Fh, 2):
            e = exact(p, Assignment(hs, us))
            if not e.violations:
                every[(tuple(hs), tuple(us))] = e
    lo, hi = min(e.energy_total_uj for e in every.values()), max(e.energy_total_uj for e in every.values())
    assert hi > 1.05 * lo  # something to find
    last = None
    for deadline in sorted({round(e.latency_ms + 0.01, 2) for e in every.values()}):
        fits = [k for k, e in every.items() if e.latency_ms <= deadline]
        start = max(fits, key=lambda k: every[k].energy_total_uj)  # the dearest plan that meets it
        sol, ev, note = polish(p, Solution("milp", Assignment(*map(list, start)), "optimal", 0.0), every[start],
                               deadline, "energy")
        want = min(every[k].energy_total_uj for k in fits)
        assert ev.energy_total_uj == pytest.approx(want, rel=1e-9) and not ev.violations, (deadline, sol)
        assert last is None or ev.energy_total_uj <= last * (1 + 1e-9), deadline
        last = ev.energy_total_uj
    assert "move" in sol.method and "better on energy when evaluated exactly" in note


def test_rates_price_what_an_op_writes_where_the_sizes_tell_it_apart():
    """An fc's cycles grow with its MACs and with its outputs (each is requantised and stored), so the
    embedding's 16-deep fc costs more per MAC than a 64-deep one: fitted on MACs alone it came out 26 %
    low. Where units and outputs vary apart the fit prices both; where only outputs vary (the two
    attention products: the same MACs), the outputs."""
    from codegen.planner.profile import fit_rate

    shapes = [(3072, 48), (3072, 192), (12288, 192), (49152, 768)]
    r = fit_rate([u for u, _ in shapes], [9.0 * u + 85.0 * o + 1100.0 for u, o in shapes], [o for _, o in shapes])
    assert (r.per_unit, r.per_out, r.per_op) == pytest.approx((9.0, 85.0, 1100.0), rel=1e-6)
    assert r.cycles(12288, 768) == pytest.approx(9.0 * 12288 + 85.0 * 768 + 1100.0)
    r = fit_rate([576, 576], [100.0 * 144 + 300, 100.0 * 48 + 300], [144, 48])
    assert r.cycles(576, 144) == pytest.approx(14700.0) and r.cycles(576, 48) == pytest.approx(5100.0)
    r = fit_rate([10, 20, 30], [25.0, 45.0, 65.0], [10, 20, 30])  # outputs in proportion: units and a call
    assert (r.per_unit, r.per_op, r.per_out) == pytest.approx((2.0, 5.0, 0.0))


def test_the_reference_build_measures_share_sized_ops_at_two_sizes():
    """The two sampled reference nodes hold different shares, so an op whose size follows the share (the
    column copies: ~680 cycles whatever their size) is fitted with its fixed cost per call; with an even
    reference it was priced per element, a 1-node plan's copies at 4× their cycles."""
    from codegen.planner.profile import reference_shares

    cfg16 = ModelConfig(lookback=96, patch_len=16, stride=8, padding="end", d_model=64, heads=16, layers=2,
                        mlp_hidden=64, horizon=24)
    heads, hidden = reference_shares(cfg16, 4)
    assert sum(heads) == 16 and sum(hidden) == 64 and min(heads) >= 1 and min(hidden) >= 1
    assert heads[0] != heads[1] and hidden[0] != hidden[1]
    assert reference_shares(CFG, 4) == ([1, 1, 1, 1], [1, 3, 2, 2])  # one head each: only hidden units move
    six = ModelConfig(lookback=64, patch_len=8, stride=8, padding="none", d_model=48, heads=6, layers=1,
                      mlp_hidden=40, horizon=8)
    heads, _ = reference_shares(six, 4)  # 1, 1, 1, 3 evenly: node 1 takes a head from node 3 (audit O)
    assert heads == [1, 2, 1, 2]


def test_the_polish_stops_at_its_time_limit():
    """400 exact evaluations of a 7.9 M-parameter model on 16 nodes made `cisl plan` take 341 s: the polish
    also stops after its time limit, keeping what it found."""
    import time

    from codegen.planner.plan import polish
    from codegen.planner.solve import Solution

    p = build_problem(profile(["nrf52840dk"] * 6, [(6.0 * k, 0.0) for k in range(6)]), CFG, list(range(6)))
    spread = Assignment([1, 0, 1, 0, 0, 2], [2, 0, 2, 0, 0, 4])
    start = exact(p, spread)
    t0 = time.monotonic()
    sol, ev, _ = polish(p, Solution("milp", spread, "optimal", 0.0), start, None, "energy", seconds=0.0)
    assert time.monotonic() - t0 < 5 and sol.assignment == spread and ev is start
