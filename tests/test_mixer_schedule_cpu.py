"""The planner sizes Mixer slots for the board CPU's per-packet work (issue 12, item 8)."""

from __future__ import annotations

import pytest

from codegen.compile import _per_packet_us, _slot_work_us
from codegen.plan.mixer_schedule import RAMP_US, RoundPolicy, packet_length, schedule_exchange
from codegen.radio.airtime import air_time_us, slot_us_for_length

pytestmark = pytest.mark.unit


def test_every_slot_holds_air_time_ramp_up_and_the_work():
    cpu = _per_packet_us("nrf52840dk")
    assert cpu is not None and _per_packet_us("sim") is None
    policy = RoundPolicy(per_packet_us=cpu, slot_work_us=_slot_work_us("nrf52840dk"), linger=16)
    for msg in ([672] * 16, [5000] * 16, [300] * 4, [21504, 0]):
        for r in schedule_exchange(0, msg, policy):
            length = packet_length(len(msg), r.generation, r.payload)
            work = policy.processing_us(r.generation, r.payload)
            assert r.slot_us >= air_time_us(length, policy.phy) + RAMP_US + work
            assert r.slot_us >= RAMP_US + policy.slot_work(r.generation, r.payload)
            assert r.slot_us >= slot_us_for_length(length, policy.phy, policy.margin_us)


def test_large_exchanges_get_longer_slots_or_smaller_generations():
    # 16 nodes of 5000 B each: the unconstrained planner picks G = 145, P = 209, whose row combination
    # (about 72 rows of 216 B) outlasts the packet's air time on BLE 2M even though it runs ahead
    msg = [5000] * 16
    free = schedule_exchange(0, msg, RoundPolicy(linger=16))
    cpu = RoundPolicy(per_packet_us=_per_packet_us("nrf52840dk"), slot_work_us=_slot_work_us("nrf52840dk"), linger=16)
    bound = schedule_exchange(0, msg, cpu)
    # without a CPU limit the planner packs big generations whose elimination overruns the gap
    assert any(r.slot_us < cpu.slot_us(packet_length(16, r.generation, r.payload), r.generation, r.payload)
               for r in free)
    # with it, every slot fits, and it costs at most what lengthening the unconstrained slots would
    lengthened = sum(r.estimated_slots * cpu.slot_us(packet_length(16, r.generation, r.payload), r.generation,
                                                     r.payload) for r in free)
    assert sum(r.estimated_us for r in bound) <= lengthened
    assert sum(r.estimated_us for r in bound) >= sum(r.estimated_us for r in free)
