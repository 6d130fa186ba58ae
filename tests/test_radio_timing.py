"""Mixer slot/round timing reproduces the numbers in notes/mixer.md §8."""

from __future__ import annotations

import pytest

from codegen.radio.airtime import (air_time_us, packet_length, round_slots, round_us, slot_us,
                                  slot_us_approx)

pytestmark = pytest.mark.unit


def test_check_values_from_the_notes():
    # CATS: P=150, G=25 → L=162, t_air=692 µs, 897 + 50 = 947 µs (its dnni_mixer_config.h)
    assert packet_length(150, 25) == 162
    assert air_time_us(162, "2M") == 692
    assert slot_us(150, 25) == 897
    assert slot_us(150, 25, margin_us=50) == 947
    # RockNet: P=100, G=15 → 663 + 10 = 673 µs
    assert slot_us(100, 15, margin_us=10) == 673


# notes §8.1 "Slot without margin": P → (2M G=8, 2M G=16, 1M G=8, 1M G=16)
SLOT_TABLE = {
    16: (292, 300, 425, 446), 32: (361, 369, 567, 583), 64: (502, 510, 841, 857),
    100: (655, 663, 1151, 1167), 128: (776, 784, 1393, 1409), 150: (869, 881, 1583, 1599),
    200: (1087, 1095, 2015, 2031), 230: (1216, 1224, 2273, 2289),
}


@pytest.mark.parametrize("payload", sorted(SLOT_TABLE))
def test_slot_table(payload):
    got = (slot_us(payload, 8, "2M"), slot_us(payload, 16, "2M"),
           slot_us(payload, 8, "1M"), slot_us(payload, 16, "1M"))
    assert got == SLOT_TABLE[payload]


def test_closed_form_is_close():
    # 1.078·(t_air + 137) leaves out the rounding of the drift tolerance up to whole ticks
    for p in (16, 64, 150, 230):
        for g in (8, 25, 64):
            assert 0 <= slot_us(p, g) - slot_us_approx(p, g) <= 6


def test_air_time_and_packet_length():
    assert air_time_us(0, "2M") == 44 and air_time_us(0, "1M") == 80
    assert air_time_us(100, "1M") == 880
    assert packet_length(0, 1) == 6 and packet_length(10, 9) == 18 and packet_length(10, 9, 3) == 21
    assert packet_length(247, 16) == 255
    with pytest.raises(ValueError, match="exceeds"):
        packet_length(248, 16)
    with pytest.raises(ValueError, match="phy"):
        air_time_us(10, "coded")


def test_round_lengths():
    assert round_slots(25) == 275                      # CATS 3G + 200
    assert round_slots(15, "rocknet") == 150 and round_slots(60, "rocknet") == 180
    with pytest.raises(ValueError):
        round_slots(5, "tight")
    # the shipped CATS config: 275 slots of 947 µs ≈ 260 ms
    assert round_us(275, 150, 25, initiator_slots=0, overhead_us=0) == 275 * 947
    # T_round = (R + 3)·T_slot + 50 µs
    assert round_us(275, 150, 25) == 278 * 947 + 50


# notes §8.3: n → G = n + 1, slot 2M/1M with the 50 µs margin, R = 3G + 200 round time in ms
@pytest.mark.parametrize("n,payload,slot2m,slot1m,t2m,t1m", [
    (4, 32, 411, 617, 88, 133), (4, 128, 826, 1443, 178, 310), (4, 240, 1310, 2407, 282, 518),
    (8, 32, 419, 633, 95, 144), (8, 128, 834, 1459, 189, 331), (8, 240, 1318, 2428, 299, 551),
    (16, 32, 431, 649, 108, 163), (16, 128, 842, 1475, 211, 370), (16, 240, 1326, 2444, 333, 613),
])
def test_round_table(n, payload, slot2m, slot1m, t2m, t1m):
    g = n + 1
    assert slot_us(payload, g, "2M", 50) == slot2m
    assert slot_us(payload, g, "1M", 50) == slot1m
    r = round_slots(g)
    for phy, t_ms in (("2M", t2m), ("1M", t1m)):
        t = round_us(r, payload, g, phy, 50, initiator_slots=0, overhead_us=0)
        assert round(t / 1000) == t_ms
