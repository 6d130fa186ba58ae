"""Mixer's GF(2) decoder against a Python reference, through the real receive path (a passive node
fed one packet per slot): full rank decodes everything, partial rank decodes exactly the
isolatable rows, non-innovative packets change nothing, arrival order does not matter."""

from __future__ import annotations

import ctypes
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mixer_lib as m
from clib import have_compiler

pytestmark = [pytest.mark.hostc, pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not installed")]

CASES = settings(
    max_examples=100,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

N = 4  # nodes in the configuration; node 0 listens, packets come from 1..3
R = 60000


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return m.build(tmp_path_factory.mktemp("mixer_gf2"), {"MX_MAX_G": 64, "MX_MAX_P": 32, "MX_MAX_NODES": 8})


class Listener:
    """A passive node 0 that receives one given packet per slot."""

    def __init__(self, lib: ctypes.CDLL, g: int, p: int, features: int = 0) -> None:
        self.lib, self.g, self.p = lib, g, p
        self.cfg = m.config(N, g, p, R, features=features, initiator=1)
        self.buf = ctypes.create_string_buffer(lib.mx_state_size())
        self.s = ctypes.addressof(self.buf)
        assert lib.mx_init(self.s, ctypes.byref(self.cfg), 0) == 0
        self.slot = 0
        self.armed = False

    def write(self, row: int, data: bytes | None) -> int:
        return int(self.lib.mx_write(self.s, row, data, len(data) if data else 0))

    def feed(self, cv: int, payload: int, *, sender: int = 1, flags: int = 0, info: int = 0) -> int:
        if not self.armed:
            assert self.lib.mx_arm(self.s, m.ARM_PASSIVE) == 0
            self.armed = True
        pkt = m.make_packet(N, self.g, self.p, slot=self.slot, sender=sender, cv=cv,
                            payload=payload.to_bytes(self.p, "little"), flags=flags, info=info)  # fmt: skip
        assert self.lib.mx_slot(self.s, self.slot, None, None) == m.ACT_RX
        r = int(self.lib.mx_receive(self.s, self.slot, m.u8p(pkt), len(pkt)))
        assert self.lib.mx_slot_end(self.s, self.slot) == 0
        self.slot += 1
        return r

    def rank(self) -> int:
        return int(self.lib.mx_rank(self.s))

    def readable(self) -> dict[int, bytes]:
        out = {}
        for row in range(self.g):
            ln = ctypes.c_uint16()
            ptr = self.lib.mx_read(self.s, row, ctypes.byref(ln))
            status = self.lib.mx_row_status(self.s, row)
            if ptr is None:
                assert status == m.ROW_MISSING and ln.value == 0
            else:
                assert status == m.ROW_DECODED and ln.value == self.p
                out[row] = ctypes.string_at(ptr, self.p)
        return out

    def reduced_rows(self) -> dict[int, tuple[int, bytes]]:
        """The node's row-reduced echelon form: pivot -> (coding vector, payload)."""
        cb = m.cv_bytes(self.g)
        out = {}
        for piv in range(self.g):
            cv = (ctypes.c_uint8 * cb)()
            pl = (ctypes.c_uint8 * self.p)()
            if self.lib.mx_coded_row(self.s, piv, cv, pl) == 1:
                out[piv] = (int.from_bytes(bytes(cv), "little"), bytes(pl))
        return out

    def stats(self) -> m.Counters:
        return self.lib.mx_stats(self.s).contents


def encode(cv: int, msgs: list[int]) -> int:
    pl = 0
    for i, msg in enumerate(msgs):
        if cv >> i & 1:
            pl ^= msg
    return pl


@st.composite
def generation(draw: st.DrawFn, max_g: int = 40) -> tuple[int, int, list[int], random.Random]:
    g = draw(st.integers(1, max_g))
    p = draw(st.integers(1, 32))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    msgs = [rng.getrandbits(8 * p) for _ in range(g)]
    return g, p, msgs, rng


def full_rank_set(g: int, rng: random.Random) -> list[int]:
    """g coding vectors of rank g: a random upper unitriangular matrix with shuffled columns... rows."""
    perm = list(range(g))
    rng.shuffle(perm)
    rows = []
    for i in range(g):
        v = 1 << perm[i]
        for j in range(i + 1, g):
            if rng.random() < 0.5:
                v |= 1 << perm[j]
        rows.append(v)
    return rows


@CASES
@given(generation(), st.integers(0, 20))
def test_full_rank_decodes_every_message(lib: ctypes.CDLL, gen: tuple, extra: int) -> None:
    g, p, msgs, rng = gen
    cvs = full_rank_set(g, rng) + [rng.getrandbits(g) | 1 << rng.randrange(g) for _ in range(extra)]
    rng.shuffle(cvs)
    node = Listener(lib, g, p)
    ref = m.RefDecoder(g, p)
    for cv in cvs:
        pl = encode(cv, msgs)
        assert node.feed(cv, pl) == int(ref.add(cv, pl))
    assert node.rank() == g
    assert node.readable() == {i: msgs[i].to_bytes(p, "little") for i in range(g)}
    st_ = node.stats()
    assert st_.rx_ok == len(cvs) and st_.rx_innovative == g and st_.rx_non_innovative == len(cvs) - g
    assert st_.slot_full_rank != m.NO_SLOT and node.lib.mx_full_rank_map(node.s) & 1


@CASES
@given(generation(), st.data())
def test_partial_rank_reads_exactly_the_isolatable_rows(lib: ctypes.CDLL, gen: tuple, data: st.DataObject) -> None:
    g, p, msgs, rng = gen
    k = data.draw(st.integers(0, g + 3))
    density = data.draw(st.sampled_from([0.05, 0.15, 0.5]))
    cvs = []
    for _ in range(k):
        v = sum(1 << i for i in range(g) if rng.random() < density) or 1 << rng.randrange(g)
        cvs.append(v)
    own = data.draw(st.lists(st.integers(0, g - 1), unique=True, max_size=3))
    node = Listener(lib, g, p)
    ref = m.RefDecoder(g, p)
    for row in own:
        assert node.write(row, msgs[row].to_bytes(p, "little")) == 0
        ref.add(1 << row, msgs[row])
    for cv in cvs:
        pl = encode(cv, msgs)
        assert node.feed(cv, pl) == int(ref.add(cv, pl))
    assert node.rank() == ref.rank
    readable = node.readable()
    assert readable == ref.readable()
    for row, payload in readable.items():
        assert payload == msgs[row].to_bytes(p, "little")
    assert node.reduced_rows() == {i: (cv, pl.to_bytes(p, "little")) for i, (cv, pl) in ref.rref().items()}
    # rank-up slots: rows present have one, others none
    for row in range(g):
        present = row in ref.rows
        assert (lib.mx_row_slot(node.s, row) != m.NO_SLOT) == present


@CASES
@given(generation(max_g=32), st.data())
def test_non_innovative_packets_change_nothing(lib: ctypes.CDLL, gen: tuple, data: st.DataObject) -> None:
    g, p, msgs, rng = gen
    cvs = [rng.getrandbits(g) or 1 for _ in range(data.draw(st.integers(1, g)))]
    node = Listener(lib, g, p)
    for cv in cvs:
        node.feed(cv, encode(cv, msgs))
    before_rows, before_read, before_rank = node.reduced_rows(), node.readable(), node.rank()
    before = node.stats().rx_non_innovative
    for _ in range(data.draw(st.integers(1, 8))):
        # a random combination of what was received is in the span
        combo = 0
        for cv in cvs:
            if rng.random() < 0.5:
                combo ^= cv
        if combo == 0:
            combo = cvs[0]
        assert node.feed(combo, encode(combo, msgs)) == m.RX_OK
    assert node.reduced_rows() == before_rows
    assert node.readable() == before_read and node.rank() == before_rank
    assert node.stats().rx_non_innovative > before


@CASES
@given(generation(max_g=32), st.data())
def test_arrival_order_does_not_matter(lib: ctypes.CDLL, gen: tuple, data: st.DataObject) -> None:
    g, p, msgs, rng = gen
    cvs = [rng.getrandbits(g) or 1 for _ in range(data.draw(st.integers(1, g + 4)))]
    orders = [list(cvs), list(reversed(cvs)), rng.sample(cvs, len(cvs))]
    results = []
    for order in orders:
        node = Listener(lib, g, p)
        for cv in order:
            node.feed(cv, encode(cv, msgs))
        results.append((node.rank(), node.reduced_rows(), node.readable()))
    assert results[0] == results[1] == results[2]


@CASES
@given(generation(max_g=24), st.data())
def test_weak_zero_map_completes_the_rank(lib: ctypes.CDLL, gen: tuple, data: st.DataObject) -> None:
    """Rows in a weak-zero map count as known zero rows: readable as weak, never as data."""
    g, p, msgs, rng = gen
    weak = data.draw(st.sets(st.integers(0, g - 1), min_size=1, max_size=g))
    for w in weak:
        msgs[w] = 0
    node = Listener(lib, g, p, features=m.FEAT_WEAK)
    live = [i for i in range(g) if i not in weak]
    # the coded packets never touch weak rows (senders that know them leave them out)
    cvs = [sum(1 << i for i in live if rng.random() < 0.5) for _ in range(len(live) + 6)]
    cvs = [cv for cv in cvs if cv]
    wmap = sum(1 << i for i in weak)
    at = data.draw(st.integers(0, len(cvs)))
    for j, cv in enumerate(cvs):
        if j == at:
            assert node.feed(0, 0, flags=m.INFO_WEAK, info=wmap) == m.RX_INNOVATIVE
        node.feed(cv, encode(cv, msgs))
    if at == len(cvs):
        assert node.feed(0, 0, flags=m.INFO_WEAK, info=wmap) == m.RX_INNOVATIVE
    ref = m.RefDecoder(g, p)
    for w in weak:
        ref.add(1 << w, 0)
    for cv in cvs:
        ref.add(cv, encode(cv, msgs))
    assert node.rank() == ref.rank
    for row in range(g):
        status = lib.mx_row_status(node.s, row)
        ptr = lib.mx_read(node.s, row, None)
        if row in weak:
            assert status == m.ROW_WEAK
            assert ptr == ctypes.addressof(ctypes.c_uint8.in_dll(lib, "mx_weak_zero"))
        elif row in ref.readable():
            assert status == m.ROW_DECODED and ctypes.string_at(ptr, p) == msgs[row].to_bytes(p, "little")
        else:
            assert status == m.ROW_MISSING and ptr is None
    # once known weak, a coded packet that touches a weak row is inconsistent and dropped
    w0 = min(weak)
    assert node.feed(1 << w0, 0) == m.E["PKT_CODING"]


def test_listener_adopts_the_first_packet_slot(lib: ctypes.CDLL, tmp_path: Path) -> None:
    node = Listener(lib, 8, 4)
    node.slot = 1234
    assert node.feed(0b101, 7) == m.RX_INNOVATIVE
    assert node.stats().slot_synced == 1234
    assert lib.mx_next_slot(node.s) == 1235
    # later slots must not go backwards
    assert lib.mx_slot(node.s, 1000, None, None) == m.E["SLOT"]
