"""bench/mixer_knowledge_bound.py: the perfect-gossip replay its bound rests on (issue 15)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "mixer_knowledge_bound.py"


def _bench():
    spec = importlib.util.spec_from_file_location("mixer_knowledge_bound", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.unit
def test_knowledge_travels_one_hop_per_packet_and_only_in_packets():
    all_know = _bench().all_know_slot
    full = np.array([0, 1, 2])  # a line 0 - 1 - 2; node k reaches full rank in slot k
    # slot 2: 0 tells 1; slot 3: 1 tells 0 and 2 {0, 1}; slot 4: 2 tells 1 {0, 1, 2}; slot 5: 1 tells 0
    trace = [{}, {}, {1: 0}, {0: 1, 2: 1}, {1: 2}, {0: 1}]
    assert all_know(trace, full) == 5
    assert all_know(trace[:5], full) is None  # node 0 never heard node 2's bit
    # a packet carries what its sender knew before the slot: node 1 cannot pass on in slot 4 what it
    # hears in slot 4
    assert all_know(trace[:4] + [{1: 2, 0: 1}], full) is None


@pytest.mark.hostc
def test_the_bound_lies_between_the_last_full_rank_and_the_rounds_end():
    r = _bench().run(16, 32, 6, 0)
    assert r["last_full"][0] < r["know"][0] <= r["end"][0]
    assert r["last_full"][1] < r["know"][1] <= r["end"][1]
