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


@pytest.mark.hostc
def test_a_node_down_loses_its_messages_and_nothing_more():
    """A node down for an exchange neither sends nor receives: its messages are lost although the others'
    rows for it are weak zeros (which count as decoded for the round's rank), and a down initiator's
    round is started by its backup, as the firmware does. Counting weak zeros as delivered printed
    q_send 0.047 for 20 % node failures; without the backup every exchange with node 0 down was lost
    for everyone (q_recv 0.28)."""
    st = measure("full_mesh", 4, 64, exchanges=200, fail_prob=0.2)
    assert st.q_link == 0  # a full mesh loses nothing else
    assert 0.1 < st.q_send <= st.q_recv < 0.25, st
    # every lost message is one with a down end: at least the 1 - (1 - p)^2 that independent failures cause
    assert st.effective_link_loss > 0.28, st
    # and the modes train for what was measured: a down node's losses are counted once, not as both a
    # receiver's and a sender's (which gave 35.6 % for 31.8 % measured)
    assert st.model_link_loss == pytest.approx(st.effective_link_loss, abs=0.03), st


def _cisl(cwd, *args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.hostc
def test_radio_loss_refuses_settings_that_lose_every_message_instead_of_writing_them(tmp_path):
    """A deadline too tight for any node to decode wrote q_recv = q_send = 1 (exit 0), a [dropout] file
    that `cisl train --dropout` then refused."""
    p = _cisl(tmp_path, "radio", "loss", "--topology", "full_mesh", "--nodes", "3", "--deadline", "5",
              "--exchanges", "5", "-o", "dead.toml")
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "every message of every exchange was lost" in p.stderr and "--deadline 5" in p.stderr, p.stderr
    assert "raise it" in p.stderr and not (tmp_path / "dead.toml").exists()
    ok = _cisl(tmp_path, "radio", "loss", "--topology", "full_mesh", "--nodes", "3", "--deadline", "40",
               "--exchanges", "5", "-o", "ok.toml")
    assert ok.returncode == 0 and "q_recv = 0\n" in (tmp_path / "ok.toml").read_text(), ok.stderr


@pytest.mark.hostc
@pytest.mark.parametrize("deadline,needle", [("1", "--deadline 1: a round of 3 nodes needs at least 5 slots"),
                                             ("4", "use --deadline 5 or more"),
                                             ("65535", "use --deadline 65534 or less")])
def test_a_deadline_mixer_cannot_run_names_the_option_and_the_bound(tmp_path, deadline, needle):
    # was "error: invalid Mixer configuration n=3 G=13 P=84"
    p = _cisl(tmp_path, "radio", "loss", "--topology", "full_mesh", "--nodes", "3", "--deadline", deadline,
              "--exchanges", "2")
    assert p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.unit
def test_a_rate_just_below_one_is_not_written_as_one():
    from codegen.radio.lossstats import _rate

    assert _rate(0.12) == "0.12" and _rate(1 - 1e-9) == repr(1 - 1e-9) and float(_rate(1 - 1e-9)) < 1


@pytest.mark.hostc
def test_messages_too_large_for_an_exchange_name_the_option(tmp_path):
    # was "exchange 0: 160000000 B of messages ...": an exchange the user never named
    p = _cisl(tmp_path, "radio", "loss", "--topology", "full_mesh", "--nodes", "16", "--message-bytes", "10000000",
              "--exchanges", "2")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--message-bytes 10000000" in p.stderr and "exchange 0" not in p.stderr and "fewer bytes" in p.stderr
