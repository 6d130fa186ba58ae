"""The Mixer's processing budget on the cycle model (codegen/timing/mixer_budget.py): the harness image
(mixer.c + firmware/mixer/bench/mx_bench.c for the nRF52840) decodes a round correctly, its per-packet
cycles grow with G, and a small (G, P) fits the BLE 2M gap. Needs arm-none-eabi-gcc (marker arm)."""

from __future__ import annotations

import shutil

import pytest

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
pytestmark = [pytest.mark.arm, pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")]


def test_harness_round_decodes_what_was_written():
    from codegen.timing.mixer_budget import build_image, default_maxima, run_round

    elf = build_image(default_maxima(12, 24, 4))
    assert build_image(default_maxima(12, 24, 4)) == elf  # cached by content
    # row 5 a weak zero; the emulated node (1) owns rows 4..6 of the others' blocks
    owners = [0, 0, 0, 1, 1, -1, 2, 2, 2, 3, 3, 3]
    tr = run_round(elf, 12, 24, 4, owners=owners, node=1, seed=3)
    assert tr.verify_missing == 0 and tr.verify_wrong == 0
    assert tr.slots[-1].rank == 12
    assert any(s.rx_status == 1 for s in tr.slots) and any(s.act == 2 for s in tr.slots)
    # every measured step cost something, and an innovative reception more than a slot end alone
    assert all(s.prep[1] > 0 and s.after[1] > 0 for s in tr.slots)
    rx = [s.after[1] for s in tr.slots if s.rx_status == 1]
    idle = [s.after[1] for s in tr.slots if s.rx_status == 127]
    assert min(rx) > max(idle)


def test_cycles_grow_with_generation_and_small_round_fits_2m():
    from codegen.timing.mixer_budget import packet_budget

    small, mid, big = (packet_budget(g, 32, "2M", nodes=4, rounds=1) for g in (4, 16, 32))
    # the row combination (run ahead, while the previous packet is on the air) and the reception grow
    # with G; the gap itself holds only the reception and mx_slot's last touches
    assert small.worst_ahead[1] < mid.worst_ahead[1] < big.worst_ahead[1]
    assert small.worst_rx[1] < mid.worst_rx[1] < big.worst_rx[1]
    assert max(b.worst_prep[1] for b in (small, mid, big)) < big.worst_ahead[1]
    assert all(b.decoded_ok for b in (small, mid, big))
    for b in (small, mid, big):
        lo, ce, hi = b.worst
        assert lo <= ce <= hi
    assert small.fits and small.late_slots == 0
    assert small.worst_us < small.gap_us and small.worst_prep_us < small.tx_window_us
    assert small.gap_us == small.slot_us - small.air_us - 40
