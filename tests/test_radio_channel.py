"""The slot-level channel: path loss, PRR, capture, half duplex, failures, bursts, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.radio.channel import Channel
from codegen.radio.physics import ChannelParams, GilbertElliott, ber, link_prr_matrix, path_loss_db, prr

pytestmark = pytest.mark.unit

FLAT = ChannelParams(shadowing_sigma_db=0.0)   # geometry alone decides the powers
L = 162


def pos(*xs: float) -> np.ndarray:
    return np.array([[x, 0.0] for x in xs])


def decode_rate(ch: Channel, tx: dict, rx: int, slots: int, sender: int | None = None) -> float:
    hits = 0
    for _ in range(slots):
        got = ch.slot(tx, {rx})
        if rx in got and (sender is None or got[rx] == sender):
            hits += 1
    return hits / slots


def snr_distance(snr_db: float, p: ChannelParams = FLAT) -> float:
    """Distance at which the median SNR is snr_db."""
    return p.d0_m * 10 ** ((p.tx_power_dbm - p.noise_floor_dbm - snr_db - p.pl_d0_db) / (10 * p.pl_exponent))


# -- physics -------------------------------------------------------------------------------------------

def test_path_loss_monotone_in_distance():
    d = np.linspace(0.01, 100.0, 2000)
    pl = path_loss_db(d)
    assert np.all(np.diff(pl) >= 0)
    assert np.all(np.diff(pl[d > 1.0]) > 0)
    assert path_loss_db(1.0) == pytest.approx(40.0)
    assert path_loss_db(0.2) == pytest.approx(40.0)                     # clamped below d0
    assert path_loss_db(10.0) == pytest.approx(40.0 + 10 * FLAT.pl_exponent)


def test_ber_calibrated_to_sensitivity():
    p = ChannelParams()
    assert ber(10 ** (p.snr_ref_db / 10), p) == pytest.approx(p.ber_ref)
    # the datasheet sensitivity (−92 dBm on 2M) is where BER = 1e-3
    assert p.noise_floor_dbm + p.snr_ref_db == pytest.approx(-92.0)
    assert ChannelParams.for_phy("1M").noise_floor_dbm + p.snr_ref_db == pytest.approx(-95.0)


def test_prr_increases_with_sinr_and_decreases_with_length():
    snr = np.linspace(-5, 30, 200)
    for length in (10, 100, 255):
        q = prr(snr, length)
        assert np.all(np.diff(q) >= 0) and q[0] < 1e-6 and q[-1] > 0.999999
    lengths = np.arange(0, 256, 5)
    for s in (8.0, 9.0, 10.0):
        q = prr(s, lengths)
        assert np.all(np.diff(q) < 0)
    assert prr(9.0, 255) < prr(9.0, 162) < prr(9.0, 20)


def test_link_prr_matrix_and_shadowing_are_symmetric():
    rng = np.random.default_rng(0)
    positions = rng.uniform(0, 30, (16, 2))
    ch = Channel(positions, ChannelParams(), seed=3)
    assert np.array_equal(ch.rx_power_dbm, ch.rx_power_dbm.T)
    q = ch.link_prr(L)
    assert np.all(np.diag(q) == 0) and np.allclose(q, q.T) and q.min() >= 0 and q.max() <= 1
    flat = Channel(positions, FLAT, seed=3)
    iu = np.triu_indices(16, 1)
    shadow = flat.rx_power_dbm[iu] - ch.rx_power_dbm[iu]
    assert 2.5 < shadow.std() < 5.5 and abs(shadow.mean()) < 1.5
    assert np.allclose(flat.link_prr(L), link_prr_matrix(flat.rx_power_dbm, L, FLAT))


# -- one transmitter -------------------------------------------------------------------------------------

def test_single_transmitter_is_plain_prr():
    d = snr_distance(9.0)                                     # a grey-zone link
    ch = Channel(pos(0.0, d), FLAT, seed=1)
    expect = prr(9.0, L)
    assert 0.2 < expect < 0.9
    slots = 4000
    got = decode_rate(ch, {0: L}, 1, slots)
    assert abs(got - expect) < 4 * math.sqrt(expect * (1 - expect) / slots)
    assert ch.link_prr(L)[0, 1] == pytest.approx(expect)


def test_longer_packets_fail_more_in_the_slot():
    d = snr_distance(8.5)
    ch = Channel(pos(0.0, d), FLAT, seed=2)
    short = decode_rate(ch, {0: 10}, 1, 2000)
    long = decode_rate(ch, {0: bytes(250)}, 1, 2000)          # a packet's length is its len()
    assert short > long + 0.3


# -- capture ---------------------------------------------------------------------------------------------

def test_much_stronger_transmitter_is_captured():
    # receiver 0; node 1 at 2 m (SNR ≈ 56 dB), node 2 at 20 m (SNR ≈ 16 dB, decodable alone)
    ch = Channel(pos(0.0, 2.0, -20.0), FLAT, seed=4)
    assert decode_rate(ch, {2: L}, 0, 200, sender=2) > 0.95
    assert decode_rate(ch, {1: L, 2: L}, 0, 500, sender=1) == 1.0


def test_equal_power_transmitters_collide():
    ch = Channel(pos(0.0, 5.0, -5.0), FLAT, seed=5)
    assert decode_rate(ch, {1: L}, 0, 100) == 1.0
    assert decode_rate(ch, {1: L, 2: L}, 0, 500) == 0.0


def test_capture_threshold():
    p = FLAT
    # SIR = 40·log10(d_b/d_a) with the receiver at the origin; noise negligible at 2 m
    def sir_channel(sir_db: float) -> Channel:
        ratio = 10 ** (sir_db / (10 * p.pl_exponent))
        return Channel(pos(0.0, 2.0, -2.0 * ratio), p, seed=6)
    below = sir_channel(p.capture_db - 0.3)
    assert decode_rate(below, {1: L, 2: L}, 0, 300) == 0.0
    above = sir_channel(p.capture_db + 3.0)
    assert decode_rate(above, {1: L, 2: L}, 0, 300, sender=1) > 0.9
    # two weaker interferers add up: each alone is capture + 2 dB below, together capture − 1 dB
    ratio = 10 ** ((p.capture_db + 2.0) / (10 * p.pl_exponent))
    three = Channel(np.array([[0, 0], [2, 0], [-2 * ratio, 0], [0, 2 * ratio]]), p, seed=7)
    assert decode_rate(three, {1: L, 2: L}, 0, 200, sender=1) > 0.8
    assert decode_rate(three, {1: L, 2: L, 3: L}, 0, 200) == 0.0


def test_mixed_lengths_use_the_strongest_senders_length():
    # node 1 on a grey-zone link, node 2 a negligible interferer (40 dB weaker) of the other length
    ch = Channel(pos(0.0, snr_distance(8.5), -snr_distance(-31.5)), FLAT, seed=8)
    short = decode_rate(ch, {1: 10, 2: 250}, 0, 2000, sender=1)
    long = decode_rate(ch, {1: 250, 2: 10}, 0, 2000, sender=1)
    assert short > long + 0.3


# -- half duplex and failures --------------------------------------------------------------------------

def test_half_duplex():
    ch = Channel(pos(0.0, 1.0, 2.0), FLAT, seed=9)
    for _ in range(50):
        got = ch.slot({0: L, 1: L}, {0, 1, 2})
        assert 0 not in got and 1 not in got
        assert got.get(2) in (None, 0, 1)
    assert ch.slot({0: L}, {0}) == {}


def test_dead_nodes_neither_send_nor_receive():
    ch = Channel(pos(0.0, 5.0, -5.0), FLAT, seed=10)
    ch.fail(2, start=3, duration=4)                           # slots 3..6
    out = [ch.slot({1: L, 2: L}, {0}) for _ in range(10)]
    assert [bool(o) for o in out] == [False] * 3 + [True] * 4 + [False] * 3
    assert all(o == {0: 1} for o in out[3:7])                 # a dead node is no interferer
    ch.fail(0)                                                # permanent, from now on
    assert ch.dead_nodes() == {0}
    assert all(ch.slot({1: L}, {0, 2}) == {2: 1} for _ in range(20))
    ch.revive(0)
    assert ch.slot({1: L}, {0}) == {0: 1}


def test_failures_in_rounds():
    ch = Channel(pos(0.0, 3.0), FLAT, seed=11)
    ch.fail(1, start=1, duration=2, unit="round")
    seen = []
    for r in range(4):
        ch.begin_round()
        seen.append(any([ch.slot({1: L}, {0}) for _ in range(5)]))
        assert ch.slot_in_round == 5
    assert seen == [True, False, False, True]
    assert ch.round_index == 3 and ch.slot_index == 20
    with pytest.raises(ValueError):
        ch.fail(5)
    with pytest.raises(ValueError):
        ch.fail(0, unit="minute")


def test_out_of_range_nodes_are_rejected():
    ch = Channel(pos(0.0, 3.0), FLAT)
    with pytest.raises(ValueError):
        ch.slot({2: L}, {0})
    with pytest.raises(ValueError):
        ch.slot({0: L}, {7})


# -- bursts ----------------------------------------------------------------------------------------------

def test_gilbert_elliott_long_run_loss_matches_stationary():
    ge = GilbertElliott(p_good_to_bad=0.05, p_bad_to_good=0.2, loss_good=0.0, loss_bad=1.0)
    assert ge.stationary_bad == pytest.approx(0.2) and ge.mean_loss == pytest.approx(0.2)
    ch = Channel(pos(0.0, 2.0), ChannelParams(shadowing_sigma_db=0.0, burst=ge), seed=12)
    got = np.array([1 in ch.slot({0: L}, {1}) for _ in range(20000)])
    loss = 1 - got
    assert abs(loss.mean() - ge.mean_loss) < 0.03
    # bursty: after a loss, the next slot is lost with probability 1 − p_bg = 0.8, not 0.2
    after_loss = loss[1:][loss[:-1] == 1].mean()
    assert after_loss == pytest.approx(1 - ge.p_bad_to_good, abs=0.05)
    assert ch.link_prr(L, include_burst=True)[0, 1] == pytest.approx(0.8, abs=1e-6)


def test_gilbert_elliott_lazy_draws_keep_the_law():
    # the link is only used every 7th slot: its state must still be stationary, and the correlation
    # between uses must follow (1 − p_gb − p_bg)^7
    ge = GilbertElliott(p_good_to_bad=0.1, p_bad_to_good=0.3, loss_good=0.1, loss_bad=0.9)
    ch = Channel(pos(0.0, 2.0), ChannelParams(shadowing_sigma_db=0.0, burst=ge), seed=13)
    got = []
    for k in range(7 * 6000):
        if k % 7 == 0:
            got.append(1 in ch.slot({0: L}, {1}))
        else:
            ch.slot({}, {1})
    loss = 1 - np.array(got, dtype=float)
    assert abs(loss.mean() - ge.mean_loss) < 0.03
    lam7 = (1 - 0.1 - 0.3) ** 7
    pb = ge.stationary_bad
    # P(loss_{t+1} | loss_t) from the two-step chain with the 7-slot transition
    p_bad_given_loss = pb * 0.9 / ge.mean_loss
    p_bad_next = pb + (p_bad_given_loss - pb) * lam7
    expect = p_bad_next * 0.9 + (1 - p_bad_next) * 0.1
    assert loss[1:][loss[:-1] == 1].mean() == pytest.approx(expect, abs=0.05)


# -- determinism -------------------------------------------------------------------------------------------

def _run(seed: int, burst: GilbertElliott | None = None) -> list[dict[int, int]]:
    rng = np.random.default_rng(99)
    positions = rng.uniform(0, 35, (12, 2))
    ch = Channel(positions, ChannelParams(burst=burst), seed=seed)
    out = []
    for _ in range(300):
        tx = rng.choice(12, rng.integers(1, 4), replace=False).tolist()
        out.append(ch.slot({s: L for s in tx}, set(range(12))))
    return out


def test_deterministic_given_seed_and_calls():
    assert _run(1) == _run(1)
    assert _run(1, GilbertElliott()) == _run(1, GilbertElliott())
    assert _run(1) != _run(2)


def test_shadowing_depends_on_the_channel_seed_only():
    positions = np.random.default_rng(0).uniform(0, 30, (8, 2))
    a, b, c = (Channel(positions, seed=s) for s in (4, 4, 5))
    a.slot({0: L}, {1, 2})                                    # slots do not touch the static terms
    assert np.array_equal(a.rx_power_dbm, b.rx_power_dbm)
    assert not np.array_equal(a.rx_power_dbm, c.rx_power_dbm)


# -- invariants --------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), tx=st.sets(st.integers(0, 9), max_size=5),
       listeners=st.sets(st.integers(0, 9)), dead=st.sets(st.integers(0, 9), max_size=3),
       length=st.integers(0, 255))
def test_slot_invariants(seed, tx, listeners, dead, length):
    positions = np.random.default_rng(seed).uniform(0, 40, (10, 2))
    ch = Channel(positions, ChannelParams(), seed=seed)
    for d in dead:
        ch.fail(d)
    got = ch.slot({s: np.int64(length) for s in tx}, listeners)
    alive_tx = tx - dead
    assert set(got) <= listeners - tx - dead
    for r, s in got.items():
        assert s in alive_tx
        # capture: only ever the strongest transmitter on the air
        assert ch.rx_power_dbm[s, r] == max(ch.rx_power_dbm[t, r] for t in alive_tx)
