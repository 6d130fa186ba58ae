"""The medium-side trace: what it records, aggregation, save/load."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.radio import DEAD, HEARD_NOTHING, IDLE, TX, Channel, ChannelParams, Trace, topology
from codegen.radio.bench import measure

pytestmark = pytest.mark.unit


def test_trace_records_every_slot(tmp_path):
    ch = Channel(np.array([[0.0, 0], [3, 0], [6, 0], [60, 0]]), ChannelParams(shadowing_sigma_db=0), seed=0,
                 trace=True)
    ch.fail(3)
    ch.begin_round()
    r0 = ch.slot({0: 20}, {1, 2, 3})
    r1 = ch.slot({}, {0, 1})
    ch.begin_round()
    r2 = ch.slot({1: 30, 3: 30}, {0, 1, 2})
    assert r0 == {1: 0, 2: 0} and r1 == {} and r2 == {0: 1, 2: 1}
    tr = ch.trace.to_trace()
    assert len(tr) == 3 and tr.n == 4
    assert tr.round.tolist() == [0, 0, 1] and tr.slot.tolist() == [0, 1, 0]
    assert tr.length.tolist() == [20, 0, 30]
    assert tr.state.tolist() == [[TX, 0, 0, DEAD],
                                 [HEARD_NOTHING, HEARD_NOTHING, IDLE, DEAD],
                                 [1, TX, 1, DEAD]]
    attempts, successes = tr.link_counts()
    assert attempts[0].tolist() == [0, 1, 1, 0] and successes[0].tolist() == [0, 1, 1, 0]
    assert attempts[1].tolist() == [1, 0, 1, 0] and successes[1].tolist() == [1, 0, 1, 0]
    assert attempts[3].sum() == 0                              # a dead node transmits nothing
    pr = tr.per_round()
    assert pr["round"].tolist() == [0, 1] and pr["slots"].tolist() == [2, 1]
    assert pr["transmissions"].tolist() == [1, 1] and pr["receptions"].tolist() == [2, 2]
    assert pr["empty_listens"].tolist() == [2, 0]

    tr.save(tmp_path / "t.npz")
    back = Trace.load(tmp_path / "t.npz")
    assert all(np.array_equal(getattr(back, f), getattr(tr, f)) for f in ("round", "slot", "length", "state"))
    both = Trace.concat([tr, back])
    assert len(both) == 6 and both.state.dtype == np.int8


def test_trace_grows_and_matches_link_prr():
    t = topology("line", 3, spacing=30.0)                      # one grey-zone link pair
    ch = Channel(t, ChannelParams(shadowing_sigma_db=0), seed=1, trace=True)
    ch.trace._alloc(8)                                         # force regrowth
    for _ in range(3000):
        ch.slot({0: 162}, {1, 2})
    tr = ch.trace.to_trace()
    attempts, successes = tr.link_counts()
    assert attempts[0, 1] == 3000
    q = ch.link_prr(162)[0, 1]
    assert abs(successes[0, 1] / 3000 - q) < 4 * np.sqrt(q * (1 - q) / 3000) + 1e-9


def test_bench_runs():
    res = measure(slots=300, repeats=1)
    assert set(res) >= {"1 tx", "3 tx", "3 tx + bursts"} and all(v > 0 for v in res.values())
