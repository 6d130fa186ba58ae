"""Mixer rounds with n instances in one process: a perfect channel (one transmitter is heard by
all, two or more collide), multi-hop topologies and a lossy channel, both termination policies,
weak zeros, determinism, and the blocking mx_start loop over a radio HAL."""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_uint8

import numpy as np
import pytest

import mixer_lib as m
from clib import have_compiler

pytestmark = [pytest.mark.hostc, pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not installed")]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return m.build(tmp_path_factory.mktemp("mixer_net"), {"MX_MAX_NODES": 16, "MX_MAX_G": 64, "MX_MAX_P": 128})


def messages(g: int, p: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, p, dtype=np.uint8).tobytes() for _ in range(g)]


def setup(lib: ctypes.CDLL, cfg: m.Config, msgs: list[bytes | None]) -> m.Network:
    """Row r belongs to node r % n; None rows are weak zeros."""
    net = m.Network(lib, cfg)
    for r, msg in enumerate(msgs):
        assert net.write(r % cfg.num_nodes, r, msg) == 0
    net.arm()
    return net


def check_all_decoded(net: m.Network, msgs: list[bytes | None]) -> None:
    n = net.cfg.num_nodes
    for i in range(n):
        st = net.stats(i)
        assert st.rank == len(msgs), f"node {i}"
        for r, msg in enumerate(msgs):
            assert net.read(i, r) == ("weak" if msg is None else msg), f"node {i} row {r}"


@pytest.mark.parametrize(
    ("n", "g", "p", "features"),
    [(1, 4, 8, m.FEAT_ALL), (2, 2, 1, m.FEAT_ALL), (4, 8, 16, m.FEAT_ALL), (16, 64, 128, m.FEAT_ALL),
     (16, 16, 32, m.FEAT_COORD), (8, 24, 20, m.FEAT_REQ), (8, 24, 20, 0), (5, 37, 7, m.FEAT_ALL)],
)  # fmt: skip
def test_fixed_deadline_everyone_decodes_and_ends_at_r(lib: ctypes.CDLL, n: int, g: int, p: int,
                                                       features: int) -> None:  # fmt: skip
    r = 400
    cfg = m.config(n, g, p, r, features=features, seed=11)
    msgs: list[bytes | None] = list(messages(g, p, n))
    net = setup(lib, cfg, msgs)
    assert net.run() == r
    check_all_decoded(net, msgs)
    for i in range(n):
        st = net.stats(i)
        assert lib.mx_finished(net.state(i))
        assert st.slot_done == r - 1
        assert st.slot_full_rank < r and st.rx_malformed == 0 and st.rx_wrong_slot == 0
        assert st.slots == r - st.slot_synced  # one step per slot from synchronisation on
        assert st.radio_on_slots == st.slots
        assert st.tx + st.rx_ok + st.rx_timeout == st.slots


def test_coordinated_full_mesh_is_a_schedule(lib: ctypes.CDLL) -> None:
    """With coordination on a perfect channel, only slot owners send: no collisions, every slot
    carries one packet, and full rank takes G slots (one new row per slot)."""
    n, g, p = 16, 64, 32
    cfg = m.config(n, g, p, 300, seed=3)
    net = setup(lib, cfg, list(messages(g, p, 0)))
    senders = []
    net.run(on_slot=lambda slot, acts: senders.append(np.flatnonzero(acts == m.ACT_TX).tolist()))
    assert all(len(s) == 1 for s in senders)
    assert all(s[0] == slot % n for slot, s in enumerate(senders[1:], 1))
    assert max(net.stats(i).slot_full_rank for i in range(n)) == g - 1


@pytest.mark.parametrize(("n", "g", "linger"), [(4, 8, 4), (4, 8, 8), (16, 64, 32), (16, 64, 200), (8, 40, 16)])
def test_done_policy_ends_rounds_early(lib: ctypes.CDLL, n: int, g: int, linger: int) -> None:
    r, p = 500, 24
    cfg = m.config(n, g, p, r, termination=m.TERM_DONE, linger=linger, seed=5)
    msgs: list[bytes | None] = list(messages(g, p, 1))
    net = setup(lib, cfg, msgs)
    slots = net.run()
    assert slots < r
    check_all_decoded(net, msgs)
    for i in range(n):
        st = net.stats(i)
        assert lib.mx_finished(net.state(i))
        assert st.slot_full_rank <= st.slot_all_full <= st.slot_done <= st.slot_all_full + linger
        assert lib.mx_full_rank_map(net.state(i)) == (1 << n) - 1
    assert max(net.stats(i).slot_done for i in range(n)) == slots - 1


def test_done_policy_waits_for_a_node_that_never_joins(lib: ctypes.CDLL) -> None:
    """A node that hears nothing never reports full rank, so the others run to the deadline."""
    n, g, p, r = 4, 8, 8, 120
    cfg = m.config(n, g, p, r, termination=m.TERM_DONE, linger=4)
    msgs = messages(g, p, 2)
    net = setup(lib, cfg, list(msgs))

    def deaf3(slot: int, actions: np.ndarray) -> np.ndarray:
        a = actions.copy()
        frm = m.perfect_channel(slot, a)
        frm[3] = -1
        if a[3] == m.ACT_TX:  # node 3 is cut off both ways
            a[3] = m.ACT_RX
            frm = m.perfect_channel(slot, a)
            frm[3] = -1
        return frm

    assert net.run(deaf3) == r
    for i in range(3):
        assert net.stats(i).slot_done == r - 1
        assert net.stats(i).slot_all_full == m.NO_SLOT
    assert net.stats(3).slot_synced == m.NO_SLOT and net.stats(3).rank == 2


@pytest.mark.parametrize("term", [m.TERM_DEADLINE, m.TERM_DONE])
def test_weak_zeros_are_reported_and_not_waited_for(lib: ctypes.CDLL, term: int) -> None:
    n, g, p, r = 8, 32, 16, 300
    cfg = m.config(n, g, p, r, termination=term, linger=16, seed=9)
    msgs: list[bytes | None] = list(messages(g, p, 3))
    for row in (1, 2, 9, 17, 30, 31):
        msgs[row] = None
    # node 6 owns rows 6, 14, 22, 30: make all of them weak (it sends only maps)
    for row in (6, 14, 22, 30):
        msgs[row] = None
    net = setup(lib, cfg, msgs)
    slots = net.run()
    check_all_decoded(net, msgs)
    if term == m.TERM_DONE:
        assert slots < r
    else:
        assert slots == r


def adjacency_line(n: int) -> np.ndarray:
    a = np.zeros((n, n), dtype=bool)
    for i in range(n - 1):
        a[i, i + 1] = a[i + 1, i] = True
    return a


def adjacency_grid(k: int) -> np.ndarray:
    n = k * k
    a = np.zeros((n, n), dtype=bool)
    for i in range(n):
        x, y = i % k, i // k
        if x + 1 < k:
            a[i, i + 1] = a[i + 1, i] = True
        if y + 1 < k:
            a[i, i + k] = a[i + k, i] = True
    return a


@pytest.mark.parametrize(
    ("name", "adj", "g", "features"),
    [("line8", adjacency_line(8), 16, m.FEAT_ALL), ("grid4x4", adjacency_grid(4), 32, m.FEAT_ALL),
     ("grid4x4-coord-only", adjacency_grid(4), 32, m.FEAT_COORD), ("line6-uncoordinated", adjacency_line(6), 12, 0)],
)  # fmt: skip
def test_multi_hop_with_collisions(lib: ctypes.CDLL, name: str, adj: np.ndarray, g: int, features: int) -> None:
    n, p, r = adj.shape[0], 16, 600
    cfg = m.config(n, g, p, r, features=features, termination=m.TERM_DONE, linger=2 * n, seed=21)
    msgs: list[bytes | None] = list(messages(g, p, 4))
    net = setup(lib, cfg, msgs)
    slots = net.run(m.topology_channel(adj))
    check_all_decoded(net, msgs)
    assert slots < r, name


def test_lossy_channel(lib: ctypes.CDLL) -> None:
    n, g, p, r = 16, 48, 32, 600
    rng = np.random.default_rng(7)

    def lossy(slot: int, actions: np.ndarray) -> np.ndarray:
        frm = m.perfect_channel(slot, actions)
        frm[rng.random(n) < 0.3] = -1
        return frm

    cfg = m.config(n, g, p, r, termination=m.TERM_DONE, linger=2 * n, seed=2)
    msgs: list[bytes | None] = list(messages(g, p, 5))
    net = setup(lib, cfg, msgs)
    assert net.run(lossy) < r
    check_all_decoded(net, msgs)


def trace(lib: ctypes.CDLL, seed: int) -> list[bytes]:
    n, g, p = 6, 12, 8
    cfg = m.config(n, g, p, 80, features=m.FEAT_ALL, seed=seed)
    net = setup(lib, cfg, list(messages(g, p, 6)))
    out: list[bytes] = []
    rng = np.random.default_rng(0)

    def ch(slot: int, actions: np.ndarray) -> np.ndarray:
        frm = m.perfect_channel(slot, actions)
        frm[rng.random(n) < 0.3] = -1
        return frm

    net.run(ch, on_slot=lambda slot, acts: out.extend(bytes(net.packets[i]) for i in np.flatnonzero(acts == 2)))
    return out


def test_deterministic_given_the_seed(lib: ctypes.CDLL) -> None:
    a, b, c = trace(lib, 1), trace(lib, 1), trace(lib, 2)
    assert a == b
    assert a != c


def test_transmitted_packets_are_consistent(lib: ctypes.CDLL) -> None:
    """Every packet on air passes the stateless check and is a true combination of the messages."""
    n, g, p = 8, 24, 12
    msgs = messages(g, p, 8)
    cfg = m.config(n, g, p, 200, seed=4)
    net = setup(lib, cfg, list(msgs))
    seen = 0

    def check(slot: int, acts: np.ndarray) -> None:
        nonlocal seen
        for i in np.flatnonzero(acts == m.ACT_TX):
            pkt = bytes(net.packets[i])
            assert lib.mx_packet_check(ctypes.byref(cfg), m.u8p(pkt), len(pkt)) == 0
            pk = m.parse_packet(n, g, p, pkt)
            assert pk.slot == slot and pk.sender == i
            want = 0
            for r in range(g):
                if pk.cv >> r & 1:
                    want ^= int.from_bytes(msgs[r], "little")
            assert int.from_bytes(pk.payload, "little") == want
            seen += 1

    net.run(on_slot=check)
    assert seen > 100


def test_state_size_of_the_sim_build(lib: ctypes.CDLL) -> None:
    assert lib.mx_state_size() < 40_000


# ---- mx_start over a radio HAL -----------------------------------------------------------------


class HalSim:
    """Node 0 runs mx_start; nodes 1..n-1 run on the step API inside the HAL callbacks. A slot is
    completed when node 0 transmits, receives or waits for the next slot."""

    def __init__(self, lib: ctypes.CDLL, cfg: m.Config, msgs: list[bytes], listen: bool = False) -> None:
        self.lib, self.cfg = lib, cfg
        self.listened = False
        self.sent: list[bytes] = []
        self.net = setup(lib, cfg, list(msgs))  # node 0 armed as listener (initiator is node 1)
        self.n = cfg.num_nodes
        self.slot = 0  # the slot the others are in
        self.events: list[tuple[str, int]] = []
        self.errors: list[str] = []  # exceptions inside ctypes callbacks would be swallowed
        self.hal = m.RadioHal(m.WAIT_FN(self.wait_slot), m.TX_FN(self.transmit), m.RX_FN(self.receive),
                              m.SYNC_FN(self.sync), m.OFF_FN(self.off))  # fmt: skip
        if listen:  # both overlap hooks: mx_start then runs mx_prepare inside every slot
            self.hal.listen = m.LISTEN_FN(self.listen)
            self.hal.tx_done = m.TXDONE_FN(self.tx_done)

    def tx_done(self, ctx: int) -> int:
        self.events.append(("tx_done", self.slot - 1))
        return 0

    def listen(self, ctx: int, scan: int) -> int:
        self.events.append(("listen", self.slot))
        if scan:
            self.others_begin()
        self.listened = True
        return 0

    def others_begin(self) -> None:
        for i in range(1, self.n):
            out = self.net.packets[i].ctypes.data_as(POINTER(c_uint8))
            self.net.actions[i] = self.lib.mx_slot(self.net.state(i), self.slot, out, None)

    def others_end(self, node0_packet: bytes | None) -> bytes | None:
        """Deliver this slot (node 0 sends node0_packet, or listens); returns what node 0 hears."""
        senders = [i for i in range(1, self.n) if self.net.actions[i] == m.ACT_TX]
        if node0_packet is not None:
            senders.append(0)
        pkt = None
        if len(senders) == 1:
            pkt = node0_packet if senders == [0] else bytes(self.net.packets[senders[0]])
        for i in range(1, self.n):
            if self.net.actions[i] == m.ACT_RX and pkt is not None:
                buf = (c_uint8 * len(pkt)).from_buffer_copy(pkt)
                self.lib.mx_receive(self.net.state(i), self.slot, buf, len(pkt))
            self.lib.mx_slot_end(self.net.state(i), self.slot)
        self.slot += 1
        return pkt if node0_packet is None else None

    def wait_slot(self, ctx: int, slot: int) -> None:
        self.events.append(("wait", slot))
        if slot != self.slot:
            self.errors.append(f"wait_slot({slot}) in slot {self.slot}")
        self.others_begin()

    def transmit(self, ctx: int, packet: ctypes._Pointer, length: int) -> int:  # type: ignore[type-arg]
        pkt = ctypes.string_at(packet, length)
        self.sent.append(pkt)
        self.events.append(("tx", self.slot))
        self.others_end(pkt)
        return 0

    def receive(self, ctx: int, buf: ctypes._Pointer, mx: int, scan: int,  # type: ignore[type-arg]
                t: ctypes._Pointer) -> int:  # type: ignore[type-arg]  # fmt: skip
        if scan and not self.listened:
            self.others_begin()
        self.listened = False
        got = self.others_end(None)
        self.events.append(("rx" if got else "rx-none", self.slot - 1))
        if not got:
            return 0
        ctypes.memmove(buf, got, len(got))
        t[0] = 1000 * (self.slot - 1) + 40
        return len(got)

    def sync(self, ctx: int, slot: int, t: int) -> None:
        self.events.append(("sync", slot))
        if t != 1000 * slot + 40:
            self.errors.append(f"sync({slot}, {t})")

    def off(self, ctx: int) -> None:
        self.events.append(("off", self.slot))


def test_mx_start_runs_a_round_over_the_hal(lib: ctypes.CDLL) -> None:
    n, g, p, r = 4, 8, 16, 60
    cfg = m.config(n, g, p, r, initiator=1, termination=m.TERM_DONE, linger=8, seed=13)
    msgs = messages(g, p, 9)
    sim = HalSim(lib, cfg, msgs)
    last = lib.mx_start(sim.net.state(0), ctypes.byref(sim.hal), None)
    assert sim.errors == []
    assert 0 < last < r - 1
    assert sim.events[0] == ("rx", 0) and sim.events[1] == ("sync", 0)  # joined on the initiator's slot 0
    assert sim.events[-1][0] == "off"
    assert ("tx", 4) in sim.events  # owns slot 4
    for row in range(g):
        assert sim.net.read(0, row) == msgs[row]
    st = sim.net.stats(0)
    assert st.slot_done == last and st.slot_all_full != m.NO_SLOT


def test_mx_start_prepares_the_next_packet_while_listening(lib: ctypes.CDLL) -> None:
    """Issue 15, the M4 budget: with a HAL that arms the radio and returns (listen, and transmit with
    tx_done), mx_start combines the next packet (mx_prepare) while this slot's packet is on the air. What goes on the air
    must not change: the same packets, the same slots, the same decoded round as without listen."""
    n, g, p, r = 5, 24, 16, 200
    cfg = m.config(n, g, p, r, initiator=1, termination=m.TERM_DONE, linger=8, seed=21)
    msgs = messages(g, p, 4)
    runs = {}
    for listen in (False, True):
        sim = HalSim(lib, cfg, msgs, listen=listen)
        last = lib.mx_start(sim.net.state(0), ctypes.byref(sim.hal), None)
        assert sim.errors == [] and last > 0
        runs[listen] = (last, sim.sent, [e for e in sim.events if e[0] not in ("listen", "tx_done")], sim)
    assert runs[True][:3] == runs[False][:3]
    assert len(runs[False][1]) >= 4  # node 0 sent random combinations too, not only its rows
    events = runs[True][3].events
    assert all(events[k - 1][0] == "listen" for k, e in enumerate(events) if e[0] in ("rx", "rx-none"))
    assert all(events[k + 1][0] == "tx_done" for k, e in enumerate(events) if e[0] == "tx")
    for row in range(g):
        assert runs[True][3].net.read(0, row) == msgs[row]


def test_prepare_outside_a_slot_is_refused(lib: ctypes.CDLL) -> None:
    cfg = m.config(2, 4, 8, 40)
    net = m.Network(lib, cfg)
    assert lib.mx_prepare(net.state(0)) == m.E["STATE"]  # not armed, not in a slot
    assert lib.mx_prepare(None) == m.E["NULL"]


def test_mx_start_rejects_an_incomplete_hal(lib: ctypes.CDLL) -> None:
    cfg = m.config(2, 2, 2, 10)
    net = m.Network(lib, cfg)
    net.arm()
    hal = m.RadioHal()
    assert lib.mx_start(net.state(0), ctypes.byref(hal), None) == m.E["NULL"]
    assert lib.mx_start(None, ctypes.byref(hal), None) == m.E["NULL"]
    sim = HalSim(lib, m.config(4, 8, 16, 60, initiator=1), messages(8, 16, 1), listen=True)
    sim.hal.tx_done = m.TXDONE_FN(0)  # listen without tx_done: one of the pair missing
    assert lib.mx_start(sim.net.state(0), ctypes.byref(sim.hal), None) == m.E["NULL"]


def test_absent_nodes_are_not_waited_for_and_are_checked(lib):
    """mx_config.absent (issue 15): a node known dead counts as full and acknowledged, its rows are
    weak zeros at every node, so a done round ends early instead of at the deadline; without the
    mask (and without row sources, so no in-round silence either) the same round runs to the
    deadline. The mask may not name the node itself or the initiator."""
    from codegen.radio.channel import Channel
    from codegen.radio.mixer_network import MixerNetwork, TERM_DONE
    from codegen.radio.topology import topology

    def run(absent: bool):
        ch = Channel(topology("full_mesh", 8, 0), seed=0)
        ch.fail(5)
        net = MixerNetwork(ch, 16, 32, termination=TERM_DONE, row_sources=False)
        owners = [0] + [1 + i % 7 for i in range(15)]
        mask = [1 << 5 if absent and k != 5 else 0 for k in range(8)]
        return net.run_round(owners, seed=3, absent=mask), owners

    live = [k for k in range(8) if k != 5]  # node 5 itself (radio dead) scans the whole round
    without, owners = run(False)
    assert without.done_slot[live].max() == without.deadline - 1
    with_mask, _ = run(True)
    assert with_mask.done_slot[live].max() < 0.5 * with_mask.deadline
    live_rows = [i for i, o in enumerate(owners) if o != 5]
    dead_rows = [i for i, o in enumerate(owners) if o == 5]
    for k in range(8):
        if k != 5:
            assert with_mask.data[k, live_rows].all() and not with_mask.data[k, dead_rows].any()
    cfg = m.config(4, 8, 16, 100)
    cfg.absent = 1 << 1
    state = ctypes.create_string_buffer(lib.mx_state_size())
    assert lib.mx_init(state, ctypes.byref(cfg), 1) == m.E["ABSENT"]  # itself
    assert lib.mx_init(state, ctypes.byref(cfg), 2) == 0
    cfg.absent = 1 << cfg.initiator
    assert lib.mx_init(state, ctypes.byref(cfg), 2) == m.E["ABSENT"]  # the initiator
    cfg.absent = 1 << 4  # not one of the 4 nodes
    assert lib.mx_init(state, ctypes.byref(cfg), 2) == m.E["ABSENT"]
