"""The backup initiator (issue 15): a round whose initiator is dead is started by the next node after
takeover_slots scan slots, so it ends like a round with any other dead sender instead of at its
deadline; with a live initiator no backup ever takes a round over. (That two grids, a late
initiator's and the backup's, never mix rows is the net fuzzer's invariant: fuzz_mixer_net.c.)"""

from __future__ import annotations

import numpy as np
import pytest

from codegen.plan.mixer_schedule import takeover_slots
from codegen.radio.channel import Channel
from codegen.radio.mixer_network import MixerNetwork
from codegen.radio.physics import ChannelParams, GilbertElliott
from codegen.radio.topology import topology
from clib import have_compiler

pytestmark = [pytest.mark.hostc, pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not installed")]

G = 48
OWNERS = sorted([0] + [i % 16 for i in range(G - 1)])  # node 0, the initiator, sends rows too
TAKEOVER = takeover_slots(16, 3 * G + 200)


def network(name: str, dead: int | None = None, loss: float = 0.0, seed: int = 3) -> MixerNetwork:
    topo = topology(name, None if name == "hallway16" else 16, 0)
    params = ChannelParams.for_phy("2M", **({"burst": GilbertElliott(0.0, 1.0, loss, loss)} if loss else {}))
    ch = Channel(topo, params, seed=seed)
    if dead is not None:
        ch.fail(dead)
    return MixerNetwork(ch, G, 32)


@pytest.mark.parametrize("name", ["hallway16", "full_mesh"])
def test_a_dead_initiator_is_taken_over_and_the_round_ends_early(name: str) -> None:
    net = network(name, dead=0)
    live = list(range(1, 16))
    rows = [r for r in range(G) if OWNERS[r] != 0]
    for seed in range(3):
        stuck = net.run_round(OWNERS, seed=seed)  # no backup: the round never starts
        assert not stuck.synced[live].any()
        res = net.run_round(OWNERS, seed=seed, takeover=TAKEOVER)
        assert res.taken_over[live].all()
        end = max(int(res.done_slot[k]) for k in live) + 1
        assert end < res.deadline, end
        assert res.decoded[np.ix_(live, rows)].all() and res.data[np.ix_(live, rows)].all()
        assert res.data[live, 0].all()  # the backup's copy of the header
        assert all(int(res.silent[k]) == 1 for k in live)  # the initiator, and only it, declared silent


@pytest.mark.parametrize("name,loss", [("hallway16", 0.0), ("full_mesh", 0.3)])
def test_a_live_initiator_is_never_taken_over(name: str, loss: float) -> None:
    net = network(name, loss=loss)
    for seed in range(12):
        res = net.run_round(OWNERS, seed=seed, takeover=TAKEOVER)
        assert not res.taken_over.any()
        assert res.complete


def test_the_backup_is_the_next_live_node_in_every_view() -> None:
    from codegen.radio.peers import PeerView

    v = PeerView(5, 16, planned_initiator=0)
    assert (v.initiator(), v.backup()) == (0, 1)
    v.dead = 0b11  # nodes 0 and 1 declared dead: node 2 starts the rounds, node 3 backs it up
    assert (v.initiator(), v.backup()) == (2, 3)
    lone = PeerView(0, 2, planned_initiator=0)
    lone.dead = 0b10
    assert lone.backup() == lone.initiator() == 0  # nobody else alive: no backup
