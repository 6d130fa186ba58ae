"""The virtual testbed over the simulated radio: nodes run Mixer, the medium plays the channel per slot.

Loss-free, a 16-node model is bit-exact with the reference and every message arrives; with losses
(a dead radio), the outputs equal the reference run with exactly the messages each node decoded.
"""

from __future__ import annotations

import numpy as np
import pytest

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.vtestbed.run import run_sim
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def build16(tmp_path_factory):
    root = tmp_path_factory.mktemp("radio16")
    model = make_model_dir(root / "m", config_for_tokens(8, 64), devices=16, keep_ratio=0.5, seed=5)
    compile_model(model, root / "build", CompileOptions())
    build(root / "build")
    return root


def test_sixteen_nodes_over_mixer_on_a_near_perfect_mesh_are_bit_exact(build16):
    x = np.load(build16 / "m" / "test_windows.npy")[:2]
    r = run_sim(build16 / "build", x, radio="full_mesh", radio_seed=0)
    assert r.ok, r.first_difference or r.problems
    assert r.delivered == r.expected > 0
    assert r.radio_rounds and all(rr["slots"] < rr["deadline"] for rr in r.radio_rounds)  # "done" policy ends early
    clean = run_sim(build16 / "build", x)  # the message-level medium gives the same forecast
    np.testing.assert_array_equal(r.forecast, clean.forecast)


def test_two_hop_hallway_is_bit_exact_and_fast(build16):
    x = np.load(build16 / "m" / "test_windows.npy")[:2]
    r = run_sim(build16 / "build", x, radio="hallway16", radio_seed=3)
    assert r.ok, r.first_difference or r.problems
    air = sum(rr["slots"] * rr["slot_us"] for rr in r.radio_rounds)
    fixed = sum(rr["deadline"] * rr["slot_us"] for rr in r.radio_rounds)
    assert air < 0.5 * fixed
    # the nodes log the simulated air time of every round as their communication time
    sg_us = [int(rec.fields["us"]) for rec in r.records if rec.event == "sg" and rec.node == 5]
    assert sum(sg_us) >= 0.9 * air / 1  # every round is logged by every node


def test_lost_messages_follow_the_reference_semantics(build16):
    x = np.load(build16 / "m" / "test_windows.npy")[:2]
    r = run_sim(build16 / "build", x, radio="full_mesh", radio_seed=1, radio_dead=[7])
    assert r.ok, r.first_difference or r.problems  # bit-exact with the reference fed the same losses
    assert r.delivered < r.expected
    clean = run_sim(build16 / "build", x)
    assert not np.array_equal(r.forecast, clean.forecast)


def test_exchanges_larger_than_a_generation_run_as_several_rounds(tmp_path):
    model = make_model_dir(tmp_path / "m", config_for_tokens(8, 64), devices=4, keep_ratio=1.0, seed=2)
    compile_model(model, tmp_path / "b", CompileOptions(max_generation=3))  # header + 2 rows per round
    build(tmp_path / "b")
    r = run_sim(tmp_path / "b", np.load(tmp_path / "m" / "test_windows.npy")[:2], radio="full_mesh")
    assert r.ok, r.first_difference or r.problems
    exchanges = {(rr["inference"], rr["sg"]) for rr in r.radio_rounds}
    assert len(r.radio_rounds) > len(exchanges)  # some exchanges needed more than one Mixer round
    assert max(rr["part"] for rr in r.radio_rounds) >= 1


@pytest.mark.parametrize("dead", [0, 7, 15])  # the sink and initiator, a middle node, the last node
def test_a_dead_node_is_detected_and_no_later_round_waits_for_it(build16, dead):
    """Issue 15: after DEAD_AFTER_ROUNDS rounds without a sign of a node, every live node declares it
    dead (a `peer` line); inside those rounds a dead sender is declared silent and a dead initiator's
    round is started by its backup, so no round reaches its deadline at a live node; the forecast
    stays bit-exact with the reference fed the same losses, and cisl estimate's simulation (the
    Python mirror of the detection) gives the same slots, round by round."""
    from codegen.plan.io import load_plan
    from codegen.radio.peers import DEAD_AFTER_ROUNDS
    from codegen.serial_contract import peer_summary
    from codegen.timing.comm import comm_schedule

    x = np.load(build16 / "m" / "test_windows.npy")[:3]
    r = run_sim(build16 / "build", x, radio="full_mesh", radio_seed=1, radio_dead=[dead])
    assert r.ok, r.first_difference or r.problems
    live = [k for k in range(16) if k != dead]
    finish = [max(rr["finished"][k] for k in live) for rr in r.radio_rounds]
    assert all(f < rr["deadline"] for f, rr in zip(finish, r.radio_rounds)), finish
    events = [rec for rec in r.records if rec.event == "peer" and rec.node != dead]
    assert sorted(rec.node for rec in events) == live  # every live node, once
    assert all(rec.fields["peer"] == dead and rec.fields["state"] == "dead" and rec.fields["inf"] == 0
               and rec.fields["rounds"] == DEAD_AFTER_ROUNDS for rec in events)
    assert {rec.fields["role"] for rec in events} == {"sink" if dead == 0 else "node"}
    summary = [s for s in peer_summary(r.records) if s.endswith(")") or "sink" in s]
    assert any(f"node {dead} declared dead by 15 of 15 other nodes" in s for s in summary), summary
    sim = {(rr["inference"], rr["sg"], rr["part"]): rr["slots"] for rr in r.radio_rounds}
    est = {(s.inference, rt.sg, rt.part): s.slots
           for rt in comm_schedule(load_plan(build16 / "build"), "full_mesh", inferences=3, seed=1, dead=[dead])
           for s in rt.samples}
    assert sim == est


def test_a_node_that_hears_no_one_is_named_not_its_peers():
    """The `peers:` summary: node 3's radio is dead, so it declares every other node dead, while the
    others declare node 3 dead. The sink is not reported lost (one deaf node said so); node 3 is."""
    from codegen.serial_contract import parse_text, peer_summary

    lines = [f"CISL {k} peer inf=0 peer=3 state=dead rounds=2 role=node" for k in (0, 1, 2)]
    lines += [f"CISL 3 peer inf=0 peer={p} state=dead rounds=2 role={'sink' if p == 0 else 'node'}" for p in (0, 1, 2)]
    summary = peer_summary(parse_text("\n".join(lines) + "\n"))
    assert summary == ["node 3 declared dead by 3 of 3 other nodes (from inference 0)",
                       "node 3 declared every other node dead (from inference 0): it hears no one, so its own radio "
                       "or place is the fault"], summary
    # a real dead sink, declared by some of the others: they are named
    summary = peer_summary(parse_text("CISL 1 peer inf=2 peer=0 state=dead rounds=2 role=sink\n"
                                      "CISL 2 infer inf=0 us=1 crc=00\nCISL 3 infer inf=0 us=1 crc=00\n"))
    assert summary == ["the sink node 0 declared dead by 1 of 3 other nodes, node 1 (from inference 2): the other "
                       "nodes go on, but no forecast reaches the host from them"], summary
