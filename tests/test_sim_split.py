"""One somegather message split across several Mixer rounds, end to end (issue 15, item 4b).

Two nodes of an N = 256, F = 384 model send 49 152-byte messages, more than one Mixer round carries
(255 rows of at most 187 B at G = 256), so `cisl compile` splits each into pieces over consecutive
rounds of its exchange. The nodes reassemble them and are bit-exact with the int8 reference: on the
radio medium without losses, with a radio that fails for exactly the round of one piece (the whole
message is lost although its other pieces arrived), and on the message medium with losses. The
cycle/latency model (codegen/timing/comm.py) plays the same rounds slot for slot and loses the same
messages.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.footprint import estimate_plan
from codegen.boards import load_board
from codegen.lossmodel import LossRates
from codegen.plan.io import load_plan
from codegen.plan.mixer_schedule import MAX_GENERATION, Fragments, MixerRound, check_pieces
from codegen.timing.boardtime import lost_messages
from codegen.timing.comm import comm_schedule, exchange_times
from codegen.vtestbed.run import run_sim
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.sim

MESSAGE = 256 * 384 // 2


@pytest.fixture(scope="module")
def split2(tmp_path_factory):
    root = tmp_path_factory.mktemp("split2")
    model = make_model_dir(root / "m", config_for_tokens(256, 384, layers=1), devices=2, keep_ratio=1.0, seed=2,
                           calibration=4, tests=2)
    compile_model(model, root / "b", CompileOptions(board="sim", max_calibration=4))
    build(root / "b")
    return root


def _rounds(plan, sg: int) -> list[MixerRound]:
    return [MixerRound(**{**r, "senders": [Fragments(**f) for f in r["senders"]]})
            for r in ({k: v for k, v in r.items() if k != "estimated_us"} for r in plan.meta["mixer"]["exchanges"][sg])]


def test_the_plan_splits_each_message_over_rounds(split2):
    plan = load_plan(split2 / "b")
    assert plan.devices == 2
    gathers = [s for s in plan.sgs if s.point != "head"]
    assert gathers and all(s.msg_bytes == [MESSAGE, MESSAGE] for s in gathers)
    for s in gathers:
        rounds = _rounds(plan, s.sg)
        check_pieces(rounds, 2)
        assert len(rounds) >= 2 and all(r.generation <= MAX_GENERATION for r in rounds)
        for j in (0, 1):
            pieces = [f for r in rounds for f in r.senders if f.node == j]
            assert len(pieces) >= 2 and pieces[0].offset == 0 and pieces[-1].offset > 0
    # the receivers' reassembly buffer holds one whole message
    fp = estimate_plan(plan, load_board("sim"))
    assert all(f.ram_parts["reassembly"] == MESSAGE for f in fp.values())
    src = (split2 / "b" / "node_01" / "cisl_mixer.c").read_text()
    assert f"static uint8_t cisl_mx_reassembly[{MESSAGE}u];" in src and ".offset = " in src


def test_radio_medium_is_bit_exact_and_identical_to_the_cycle_model(split2):
    x = np.load(split2 / "m" / "test_windows.npy")[:1]
    r = run_sim(split2 / "b", x, radio="full_mesh", radio_seed=0, logs_dir=split2 / "logs-radio")
    assert r.ok, r.first_difference or r.problems
    assert r.delivered == r.expected == 2 * 4 + 1  # four somegather points both ways, the head partial
    plan = load_plan(split2 / "b")
    rounds = comm_schedule(plan, topology="full_mesh", inferences=1, seed=0)
    sim = {(rr["inference"], rr["sg"], rr["part"]): rr for rr in r.radio_rounds}
    assert sim.keys() == {(0, rt.sg, rt.part) for rt in rounds}
    assert max(rr["part"] for rr in r.radio_rounds) >= 1
    for rt in rounds:
        rr = sim[(0, rt.sg, rt.part)]
        assert rr["slots"] == rt.samples[0].slots and rr["packet_len"] == rt.packet_len
    ex = exchange_times(rounds)
    assert r.delivered == sum(n.delivered.mean for e in ex.values() for n in e.nodes)
    # a split message's delivery slot is one of the round of its last piece
    slots = {(rt.sg, rt.part): rt.samples[0].slots for rt in rounds}
    for d in map(json.loads, (split2 / "logs-radio" / "radio_deliveries.jsonl").read_text().splitlines()):
        ex = plan.meta["mixer"]["exchanges"][d["sg"]]
        for k, row in enumerate(d["decode_slot"]):
            for j, v in enumerate(row):
                if j != k and d["delivered"][k][j]:
                    part = max(r["part"] for r in ex if any(f["node"] == j for f in r["senders"]))
                    assert v is not None and 0 <= v < slots[(d["sg"], part)]


def test_a_radio_dead_for_one_piece_loses_the_whole_message(split2):
    """Node 1's radio fails for round 1 of the run only: the second piece of node 0's first message.
    Node 1 decoded the first piece (round 0) but must not take the message; the nodes stay bit-exact
    with the reference that loses exactly that message, and the cycle model loses the same."""
    plan = load_plan(split2 / "b")
    first = plan.sgs[0].sg
    r0, r1 = _rounds(plan, first)[:2]
    assert [f.node for f in r0.senders] == [0] and [(f.node, f.offset > 0) for f in r1.senders] == [(0, True)]
    fail = [(1, 1, 1)]
    x = np.load(split2 / "m" / "test_windows.npy")[:1]
    r = run_sim(split2 / "b", x, radio="full_mesh", radio_fail=fail)
    assert r.ok, r.first_difference or r.problems
    assert r.delivered == r.expected - 1
    clean = run_sim(split2 / "b", x)
    assert not np.array_equal(r.forecast, clean.forecast)  # the lost message did change the result
    rounds = comm_schedule(plan, topology="full_mesh", inferences=1, fail=fail)
    part0 = next(rt for rt in rounds if rt.sg == first and rt.part == 0)
    assert part0.samples[0].nodes[1].expected == 0  # the first piece alone delivers nothing yet
    # round 0 ran exactly as without the failure, where node 1 decoded every row of it
    clean0 = next(rt for rt in comm_schedule(plan, topology="full_mesh", inferences=1)
                  if rt.sg == first and rt.part == 0)
    assert part0.samples[0] == clean0.samples[0] and clean0.samples[0].nodes[1].rx_packets > 0
    lost = lost_messages(plan, rounds, 1)
    assert list(lost) == [first] and lost[first].tolist() == [[[False, False], [True, False]]]
    sim = {(rr["sg"], rr["part"]): rr["slots"] for rr in r.radio_rounds}
    assert sim == {(rt.sg, rt.part): rt.samples[0].slots for rt in rounds}


def test_message_medium_with_losses_is_bit_exact(split2):
    x = np.load(split2 / "m" / "test_windows.npy")[:2]
    lossy = run_sim(split2 / "b", x, loss=LossRates(link=0.4), loss_seed=3)
    assert lossy.problems == [] and lossy.bit_exact, lossy.first_difference
    assert 0 < lossy.delivered < lossy.expected


def test_many_pieces_per_message_with_a_small_max_generation(tmp_path):
    """--max-generation 2 (the header and one row per round): four nodes' 256-byte messages each go
    in pieces over several rounds; bit-exact over the radio, also with a radio that fails for a few
    rounds in the middle of messages, and slot-identical with the cycle model."""
    model = make_model_dir(tmp_path / "m", config_for_tokens(16, 64, layers=1), devices=4, keep_ratio=1.0, seed=2,
                           calibration=8, tests=2)
    compile_model(model, tmp_path / "b", CompileOptions(board="sim", max_generation=2, max_calibration=8))
    build(tmp_path / "b")
    plan = load_plan(tmp_path / "b")
    for s in plan.sgs:
        rounds = _rounds(plan, s.sg)
        check_pieces(rounds, 4)
        assert all(r.generation == 2 for r in rounds)
    assert any(f["offset"] > 0 for ex in plan.meta["mixer"]["exchanges"] for r in ex for f in r["senders"])
    x = np.load(tmp_path / "m" / "test_windows.npy")[:2]
    clean = run_sim(tmp_path / "b", x, radio="hallway", radio_seed=1)
    assert clean.ok and clean.delivered == clean.expected, clean.first_difference or clean.problems
    first = _rounds(plan, plan.sgs[0].sg)
    assert [(f.node, f.offset > 0) for r in first[2:6] for f in r.senders] == [(1, False), (1, True), (2, False),
                                                                               (2, True)]
    # node 2's radio is dead in rounds 3-4: it misses the second piece of node 1's message (it has the
    # first) and the others miss the first piece of its own (they get the second); later, node 1
    fail = [(2, 3, 2), (1, 30, 1)]
    r = run_sim(tmp_path / "b", x, radio="hallway", radio_seed=1, radio_fail=fail)
    assert r.ok, r.first_difference or r.problems
    assert r.delivered < r.expected
    rounds = comm_schedule(plan, topology="hallway", inferences=2, seed=1, fail=fail)
    assert {(rr["inference"], rr["sg"], rr["part"]): rr["slots"] for rr in r.radio_rounds} == \
        {(s.inference, rt.sg, rt.part): s.slots for rt in rounds for s in rt.samples}
    assert r.delivered == sum(n.delivered for rt in rounds for s in rt.samples for n in s.nodes)
