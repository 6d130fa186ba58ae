"""Mixer slot and round timing on the nRF52840 BLE PHYs (notes/mixer.md §6, §8).

All times are microseconds. ``L`` is the PHY payload (the Mixer packet): L = 4 + 2·⌈G/8⌉ + P (+ A
aggregate bytes), at most 255 B.

The slot length is the fixed point of the firmware's slot constraint (mixer_transport_ble.c, GPI
radio timing), evaluated in 16 MHz timer ticks as the CATS and RockNet generators do:

    slot ≥ (t_air + RX/TX-to-grid 40 µs + 2·RX_WINDOW_MAX + ISR buffer 20 µs + 25 µs) · 1.0003
    DT            = ⌈slot_ticks / 1000⌉ ticks, 1 ≤ DT ≤ 2500          (±1000 ppm drift tolerance)
    RX_WINDOW_MIN = 2·(3·DT + 2·jitter 4 µs + 5 µs)
    RX_WINDOW_MAX = min(RX_WINDOW_MIN + 20·1.5·DT, (slot − t_air − 40 µs − 20 µs) / 2)

which is ≈ 1.078·(t_air + 137 µs) (:func:`slot_us_approx`). The generators then round up to whole
µs and add a margin (CATS +50 µs, RockNet +10 µs).
"""

from __future__ import annotations

import functools
import math

TICKS_PER_US = 16
PHYS = ("1M", "2M")

# firmware constants (µs)
RX_TO_GRID_US = 40
ISR_BUFFER_US = 20
JITTER_US = 4
SLOT_SLACK_US = 25
SLOT_FACTOR = 1.0003
MAX_PHY_PAYLOAD = 255


def _check_phy(phy: str) -> None:
    if phy not in PHYS:
        raise ValueError(f"phy must be one of {PHYS}, not {phy!r}")


def packet_length(payload: int, generation: int, aggregate: int = 0) -> int:
    """Mixer PHY payload L = 4 + 2·⌈G/8⌉ + P + A (slot_number, sender_id, flags, coding and info vectors)."""
    if payload < 0 or generation < 1 or aggregate < 0:
        raise ValueError(f"bad packet shape P={payload} G={generation} A={aggregate}")
    length = 4 + 2 * math.ceil(generation / 8) + payload + aggregate
    if length > MAX_PHY_PAYLOAD:
        raise ValueError(f"Mixer packet of {length} B exceeds the {MAX_PHY_PAYLOAD} B PHY payload "
                         f"(P={payload}, G={generation}, A={aggregate})")
    return length


def air_time_us(length: int, phy: str = "2M") -> int:
    """On-air time of a PHY payload of ``length`` bytes: 1M 8·(L+10) µs, 2M 4·(L+11) µs."""
    _check_phy(phy)
    if phy == "2M":
        return 4 * (length + 11)   # preamble 2, access address 4, S0+LENGTH 2, CRC 3
    return 8 * (length + 10)       # preamble 1, access address 4, S0+LENGTH 2, CRC 3


@functools.lru_cache(maxsize=4096)  # a pure function the planner's schedule search calls ~10^6 times
def slot_us_for_length(length: int, phy: str = "2M", margin_us: int = 0) -> int:
    """Slot length (µs, rounded up) for a PHY payload of ``length`` bytes, plus ``margin_us``."""
    air = air_time_us(length, phy) * TICKS_PER_US
    fixed = (RX_TO_GRID_US + ISR_BUFFER_US + SLOT_SLACK_US) * TICKS_PER_US
    jitter = JITTER_US * TICKS_PER_US
    slot = 80_000.0   # 5 ms start, above every fixed point; the iteration only shrinks
    for _ in range(200):
        dt = min(2500, max(math.ceil(slot / 1000), 1))
        win_min = 2 * (3 * dt + 2 * jitter + 5 * TICKS_PER_US)
        win_max = min(win_min + 20 * 1.5 * dt,
                      (slot - air - (RX_TO_GRID_US + ISR_BUFFER_US) * TICKS_PER_US) / 2)
        new = (air + fixed + 2 * win_max) * SLOT_FACTOR
        if new == slot:
            break
        slot = new
    else:   # pragma: no cover - the map is a contraction with a piecewise-constant DT
        raise RuntimeError("slot-length iteration did not converge")
    return math.ceil(slot / TICKS_PER_US) + margin_us


def slot_us(payload: int, generation: int, phy: str = "2M", margin_us: int = 0,
            aggregate: int = 0) -> int:
    """Slot length (µs) for Mixer payload P and generation size G; CATS adds margin_us=50, RockNet 10."""
    return slot_us_for_length(packet_length(payload, generation, aggregate), phy, margin_us)


def slot_us_approx(payload: int, generation: int, phy: str = "2M", aggregate: int = 0) -> float:
    """The closed-form approximation 1.078·(t_air + 137 µs), without margin."""
    return 1.078 * (air_time_us(packet_length(payload, generation, aggregate), phy) + 137)


def round_slots(generation: int, rule: str = "cats") -> int:
    """Fixed deadline R in slots: ``cats`` 3G + 200, ``rocknet`` max(3G, 150)."""
    if rule == "cats":
        return 3 * generation + 200
    if rule == "rocknet":
        return max(3 * generation, 150)
    raise ValueError(f"unknown round-length rule {rule!r} (cats, rocknet)")


def round_us(slots: int, payload: int, generation: int, phy: str = "2M", margin_us: int = 50,
             initiator_slots: int = 3, overhead_us: int = 50, aggregate: int = 0) -> int:
    """Wall-clock time of one Mixer round: (R + initiator_slots)·T_slot + overhead_us (notes §8.3).

    Every round waits out its deadline, so this does not depend on when the nodes finish. Pass
    ``initiator_slots=0, overhead_us=0`` for the bare R·T_slot of the notes' tables.
    """
    if slots < 1:
        raise ValueError(f"a round needs at least one slot, not {slots}")
    t_slot = slot_us(payload, generation, phy, margin_us, aggregate)
    return (slots + initiator_slots) * t_slot + overhead_us
