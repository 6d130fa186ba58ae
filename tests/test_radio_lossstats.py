"""Loss statistics for message dropout: attribution to the three modes, and the in-process Mixer network."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.lossmodel import LossRates, sample_lost
from codegen.radio.channel import Channel
from codegen.radio.lossstats import measure, split_modes
from codegen.radio.mixer_network import MixerNetwork
from codegen.radio.topology import topology


@pytest.mark.unit
def test_split_modes_attributes_whole_rows_and_columns():
    got = np.ones((2, 4, 4), dtype=bool)
    got[0, 2, :] = False  # exchange 0: receiver 2 got nothing
    got[1, :, 1] = False  # exchange 1: nobody got sender 1
    got[1, 3, 0] = False  # exchange 1: one link lost
    q_link, q_recv, q_send, loss = split_modes(got)
    assert q_recv == pytest.approx(1 / 8)  # one of 2 x 4 (exchange, receiver)
    assert q_send == pytest.approx(1 / 8)
    assert q_link > 0 and loss == pytest.approx((3 + 3 + 1) / (2 * 12))


@pytest.mark.unit
def test_split_modes_recovers_the_rates_it_was_sampled_with():
    rates = LossRates(0.05, 0.1, 0.08)
    lost = sample_lost(np.random.default_rng(0), 20000, 8, rates)
    q_link, q_recv, q_send, loss = split_modes(~lost)
    assert q_recv == pytest.approx(0.1, abs=0.01)
    assert q_send == pytest.approx(0.08, abs=0.01)
    assert q_link == pytest.approx(0.05, abs=0.01)
    assert loss == pytest.approx(rates.effective_link_loss, abs=0.01)


@pytest.mark.hostc
def test_mixer_network_completes_on_a_mesh():
    net = MixerNetwork(Channel(topology("full_mesh", 6, 0), seed=0), generation=12, payload=32)
    res = net.run_round([0] + [1 + i % 5 for i in range(11)], seed=3)
    assert res.complete and res.slots < res.deadline and (res.full_rank_slot >= 0).all()


@pytest.mark.hostc
def test_measure_tight_deadlines_lose_messages_consistently():
    ok = measure("full_mesh", 6, 64, exchanges=20)
    assert ok.effective_link_loss == 0 and ok.complete_fraction == 1
    # 35 slots: short of what the 17-row rounds need on the hallway (about 45; 15 % of the messages
    # are lost at 35), so some but not all are lost
    tight = measure("hallway16", None, 64, exchanges=30, policy="fixed", deadline=35)
    assert 0 < tight.effective_link_loss < 1
    assert tight.model_link_loss == pytest.approx(tight.effective_link_loss, abs=0.08)
    assert "[dropout]" in tight.toml() and "q_link" in tight.toml()
