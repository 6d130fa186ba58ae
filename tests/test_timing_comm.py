"""Communication time from the radio (codegen/timing/comm.py): every Mixer round of a compiled plan
through the slot-level Mixer simulation, both round policies, radio-on time per node, determinism,
per-exchange sums, and identity with the virtual testbed's radio medium."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clib import have_compiler
from codegen.compile import CompileOptions, compile_model
from codegen.errors import UserError
from codegen.plan.io import load_plan
from codegen.radio.airtime import air_time_us
from codegen.timing.comm import RAMP_US, comm_schedule, exchange_times, mixer_seed, total_air_us
from codegen.timing.energy import load_power, node_energy, radio_use
from models import config_for_tokens, make_model_dir

pytestmark = [pytest.mark.hostc, pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not installed")]


def _plan(root: Path, devices: int, board: str = "nrf52840dk", **opts):
    model = make_model_dir(root / "m", config_for_tokens(8, 64, layers=1), devices=devices, keep_ratio=1.0, seed=2)
    compile_model(model, root / "b", CompileOptions(board=board, **opts))
    return root


@pytest.fixture(scope="module")
def plan4(tmp_path_factory):
    return load_plan(_plan(tmp_path_factory.mktemp("comm4"), 4) / "b")


def test_fixed_rounds_last_3g_plus_200_slots(plan4):
    rounds = comm_schedule(plan4, policy="fixed", inferences=2)
    assert len(rounds) == sum(len(ex) for ex in plan4.meta["mixer"]["exchanges"]) > 0
    for r in rounds:
        assert r.policy == "fixed" and r.deadline_slots == 3 * r.generation + 200
        assert r.slots.min == r.slots.max == 3 * r.generation + 200
        assert r.air_us.min == r.air_us.max == (3 * r.generation + 200) * r.slot_us == r.fixed_us
        assert r.slot_us == plan4.meta["mixer"]["exchanges"][r.sg][r.part]["slot_us"]  # the firmware's, margin in


def test_done_rounds_end_early_and_deliver_everything_on_a_good_channel(plan4):
    fixed = {(r.sg, r.part): r for r in comm_schedule(plan4, topology="full_mesh", policy="fixed")}
    for topo in ("full_mesh", None):  # None: `cisl sim`'s default for 4 nodes, the 35 m hallway
        rounds = comm_schedule(plan4, topology=topo, policy="done", inferences=2)
        assert rounds[0].topology == (topo or "hallway")
        for r in rounds:
            assert r.slots.max < r.deadline_slots
            assert r.air_us.max < fixed[(r.sg, r.part)].air_us.min
            assert r.complete == 1.0
            for n in r.nodes:
                assert n.delivered.min == n.expected
    # somegather points: every node expects every other sender; the head reduction only the sink
    head = [r for r in rounds if r.point == "head"]
    assert head and all(n.expected == (3 if n.node == plan4.sink else 0) for n in head[0].nodes)
    assert all(n.expected == 3 for r in rounds if r.point != "head" for n in r.nodes)


@pytest.mark.parametrize("policy", ["done", "fixed"])
def test_radio_on_time_fits_in_the_round(plan4, policy):
    for r in comm_schedule(plan4, topology="hallway", policy=policy, inferences=2, seed=1):
        assert r.packet_air_us == air_time_us(r.packet_len, r.phy)
        for s in r.samples:
            for k, n in enumerate(s.nodes):
                assert n.tx_on_us == n.tx_slots * (RAMP_US + r.packet_air_us)
                assert n.rx_on_us_low <= n.rx_on_us
                assert n.tx_on_us + n.rx_on_us <= s.slots * r.slot_us, (r.name, k)
                assert n.tx_slots + n.rx_slots <= s.slots
                assert n.rx_packets + n.rx_busy + n.scan_slots <= n.rx_slots
        # the radio is on for a good part of a round: Mixer listens whenever it does not send
        assert all(n.tx_on_us.mean + n.rx_on_us.mean > 0.3 * r.air_us.mean for n in r.nodes)


def test_same_seed_same_numbers_and_inferences_continue_the_channel(plan4):
    a = comm_schedule(plan4, topology="hallway", inferences=3, seed=5)
    b = comm_schedule(plan4, topology="hallway", inferences=3, seed=5)
    assert [r.to_json(samples=True) for r in a] == [r.to_json(samples=True) for r in b]
    other = comm_schedule(plan4, topology="hallway", inferences=3, seed=6)
    assert [r.to_json(samples=True) for r in a] != [r.to_json(samples=True) for r in other]
    one = comm_schedule(plan4, topology="hallway", inferences=1, seed=5)
    assert [r.samples[0] for r in one] == [r.samples[0] for r in a]  # inference 0 does not depend on how many follow
    for r in a:
        assert len(r.samples) == 3 and r.slots.min <= r.slots.mean <= r.slots.max
        assert r.slots.mean == pytest.approx(np.mean([s.slots for s in r.samples]))
    assert mixer_seed(0, 0, 0) == 0x9E3779B9 and mixer_seed(1, 2, 1) == ((0x9E3779B9 * 2) ^ (2 << 8) ^ 1) & 0xFFFFFFFF


def test_exchanges_are_keyed_by_sg_and_sum_their_rounds(tmp_path):
    plan = load_plan(_plan(tmp_path, 4, max_generation=3) / "b")  # header + 2 rows: several rounds per exchange
    rounds = comm_schedule(plan, topology="full_mesh", inferences=2)
    assert any(r.parts > 1 for r in rounds)
    ex = exchange_times(rounds)
    assert sorted(ex) == [s.sg for s in plan.sgs]
    for s in plan.sgs:
        e = ex[s.sg]
        assert (e.name, e.layer, e.point) == (s.name, s.layer, s.point)
        mine = [r for r in rounds if r.sg == s.sg]
        assert e.rounds == len(mine) == mine[0].parts
        assert e.air_us.mean == pytest.approx(sum(r.air_us.mean for r in mine))
        for k, n in enumerate(e.nodes):
            assert n.expected == sum(r.nodes[k].expected for r in mine)
            assert n.delivered.min == n.expected  # a mesh loses nothing
    assert total_air_us(rounds).mean == pytest.approx(sum(e.air_us.mean for e in ex.values()))
    assert ex[plan.sgs[0].sg].to_json()["air_us"]["mean"] > 0


def test_fixed_rounds_cost_more_energy_than_done(plan4):
    power = load_power("nrf52840dk")
    energy = {}
    for policy in ("done", "fixed"):
        use = radio_use(comm_schedule(plan4, policy=policy), node=1)
        energy[policy] = node_energy(power, 1e6, 64e6, use.tx_on_us, use.rx_on_us, 2e6, comm_us=use.comm_us)
    assert energy["fixed"].radio_uj.low > energy["done"].radio_uj.high
    assert energy["fixed"].total_uj.low > energy["done"].total_uj.high


def test_topology_policy_and_node_count_errors(plan4, tmp_path):
    with pytest.raises(UserError, match="hallway16 has 16 nodes"):
        comm_schedule(plan4, topology="hallway16")
    with pytest.raises(UserError, match="unknown"):
        comm_schedule(plan4, topology="moon")
    with pytest.raises(UserError, match="done"):
        comm_schedule(plan4, policy="sometimes")
    with pytest.raises(UserError, match="dead node"):
        comm_schedule(plan4, dead=[9])
    one = load_plan(_plan(tmp_path, 1) / "b")  # the central baseline: nothing goes over the radio
    assert comm_schedule(one) == []


def test_a_dead_radio_loses_its_messages(plan4):
    rounds = comm_schedule(plan4, topology="full_mesh", dead=[2])
    for r in rounds:
        assert r.complete == 0.0
        if r.point != "head":
            assert all(n.delivered.max < n.expected for k, n in enumerate(r.nodes) if k != 2)


@pytest.mark.sim
def test_identical_to_the_virtual_testbed_radio_medium(tmp_path):
    """The sim medium and comm.py play the same channel with the same Mixer seeds: same slots."""
    from codegen.build import build
    from codegen.vtestbed.run import run_sim

    root = _plan(tmp_path, 4, board="sim")
    build(root / "b")
    x = np.load(root / "m" / "test_windows.npy")[:2]
    r = run_sim(root / "b", x, radio="hallway", radio_seed=3)
    assert r.ok, r.first_difference or r.problems
    sim = {(rr["inference"], rr["sg"], rr["part"]): rr for rr in r.radio_rounds}
    rounds = comm_schedule(load_plan(root / "b"), topology="hallway", inferences=2, seed=3)
    mine = {(s.inference, rt.sg, rt.part): (rt, s) for rt in rounds for s in rt.samples}
    assert sim.keys() == mine.keys()
    for key, rr in sim.items():
        rt, s = mine[key]
        assert rr["slots"] == s.slots and rr["slot_us"] == rt.slot_us and rr["deadline"] == rt.deadline_slots
        assert rr["packet_len"] == rt.packet_len
        assert rr["finished"] == [n.done_slot + 1 for n in s.nodes]  # the medium sees FINISHED one slot later
    assert r.delivered == sum(n.delivered for rt in rounds for s in rt.samples for n in s.nodes)
    assert r.expected == sum(n.expected for rt in rounds for s in rt.samples for n in s.nodes)


@pytest.mark.parametrize("node", [15, 0])
def test_a_node_back_from_an_outage_is_waited_for_again_down_a_hallway(tmp_path, node):
    """A node loses its radio for 4 rounds: every other node declares it dead, and it declares every
    other node dead. Node 15 sits at one end of hallway16; most nodes never hear it directly and must
    take it back from its rows, which its neighbours relay, and no node's view of the dead may stop
    those rows (docs/design/dead-nodes.md, "Revival by rows"). Node 0 is the initiator and the sink;
    counting everyone dead, it must still listen for them in its rounds. Before, the far nodes counted
    node 15 dead for good and its neighbours learnt its rows as weak zeros from them, and node 0 ended
    every later round at once, alone: their messages were lost in every later round."""
    plan = load_plan(_plan(tmp_path, 16) / "b")
    per_inference = len(comm_schedule(plan, topology="hallway16"))
    rounds = comm_schedule(plan, topology="hallway16", inferences=4, fail=[(node, 2, 4)])
    first = [s for rt in rounds for s in rt.samples if s.inference == 0]
    assert any(n.delivered < n.expected for s in first for n in s.nodes)  # the outage did cost messages
    for inf in (2, 3):  # from the round after next on, nothing is lost and no round runs to its deadline
        late = [s for rt in rounds for s in rt.samples if s.inference == inf]
        assert len(late) == per_inference
        assert all(n.delivered == n.expected for s in late for n in s.nodes), inf
        assert all(s.slots < rt.deadline_slots for rt in rounds for s in rt.samples if s.inference == inf)


def test_the_energy_model_times_an_empty_rx_slot_by_the_drivers_address_offset():
    """comm.py's radio-on time of an RX slot without a packet ends at the ADDRESS offset radio.c uses
    (audit U 2 moved it to 474 / 814 ticks with the TX side; the model kept 29 / 50 µs)."""
    from codegen.boards import load_board
    from codegen.timing.comm import ADDR_EVENT_US
    from codegen.timing.mixer_budget import _driver_constants

    ticks = _driver_constants(load_board("nrf52840dk").path)
    assert ADDR_EVENT_US == {phy: -(-ticks[f"ADDR_TICKS_{phy}"] // 16) for phy in ("2M", "1M")}
