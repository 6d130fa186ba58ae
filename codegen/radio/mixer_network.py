"""Many Mixer nodes in one process: the protocol's C code (firmware/mixer) over the radio channel.

This runs the same C as the firmware, through ctypes and the batch step API (two calls per slot for
all nodes), against `codegen.radio.channel.Channel`. It is what the Mixer benchmarks and the loss
statistics for message dropout use; the virtual testbed runs the same protocol inside the node
processes instead.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_int, c_int8, c_int16, c_size_t, c_uint8, c_uint16, c_uint32, c_void_p
from dataclasses import dataclass

import numpy as np

from ..resources import resource_dir
from ..hostlib import shared_library
from .channel import Channel

FEAT_COORDINATED_TX, FEAT_REQUESTS, FEAT_WEAK_ZEROS = 1, 2, 4
FEAT_ALL = 7
FEAT_DEFAULT = FEAT_COORDINATED_TX | FEAT_WEAK_ZEROS  # MX_FEAT_DEFAULT: requests measured to hurt (docs/design/mixer.md)
TERM_DEADLINE, TERM_DONE = 0, 1
ARM_INITIATOR, ARM_LISTENER = 0, 1
ACT_OFF, ACT_RX, ACT_TX = 0, 1, 2
ROW_MISSING, ROW_DECODED, ROW_WEAK = 0, 1, 2
NO_SLOT = 0xFFFF


class MixerConfig(Structure):
    """firmware/mixer/mixer.h mx_config (the tests' ctypes harness uses it too)."""

    _fields_ = [("num_nodes", c_uint8), ("initiator", c_uint8), ("generation_size", c_uint16),
                ("payload_size", c_uint16), ("round_length", c_uint16), ("features", c_uint8),
                ("termination", c_uint8), ("linger_slots", c_uint16), ("seed", c_uint32), ("absent", c_uint32),
                ("slot_shares", c_uint8 * 32), ("takeover_slots", c_uint16), ("backup", c_uint8),
                ("reserved", c_uint8)]


class _Counters(Structure):
    _fields_ = [(name, c_uint32) for name in ("slots", "slots_missed", "tx", "rx_ok", "rx_innovative",
                                              "rx_non_innovative", "rx_malformed", "rx_wrong_slot",
                                              "rx_timeout", "radio_on_slots")] + \
               [(name, c_uint16) for name in ("slot_synced", "slot_full_rank", "slot_all_full", "slot_done",
                                              "rank", "slot_linger")]


_LIB: ctypes.CDLL | None = None


def library() -> ctypes.CDLL:
    """The Mixer C code as a shared library, built once (cached by source content)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    src_dir = resource_dir("firmware") / "mixer"
    so = shared_library("mixer", [src_dir / "mixer.c"], [src_dir / "mixer.h"], [f"-I{src_dir}"],
                        "to run the Mixer simulation")
    lib = ctypes.CDLL(str(so))
    st = c_void_p
    for fn, res, args in [
        ("mx_state_size", c_size_t, []), ("mx_packet_len", c_uint16, [POINTER(MixerConfig)]),
        ("mx_init", c_int, [st, POINTER(MixerConfig), c_uint8]), ("mx_write", c_int, [st, c_uint16, c_void_p, c_uint16]),
        ("mx_arm", c_int, [st, c_uint8]), ("mx_finished", c_int, [st]),
        ("mx_slot_batch", None, [POINTER(c_void_p), c_uint16, c_uint16, POINTER(c_int8), POINTER(c_uint8), c_uint16]),
        ("mx_deliver_batch", c_uint16, [POINTER(c_void_p), c_uint16, c_uint16, POINTER(c_uint8), c_uint16,
                                        POINTER(c_int16), POINTER(c_int8)]),
        ("mx_row_status", c_int, [st, c_uint16]), ("mx_stats", POINTER(_Counters), [st]),
        ("mx_heard_map", c_uint32, [st]), ("mx_alive_map", c_uint32, [st]), ("mx_synced", c_int, [st]),
        ("mx_row_source", c_int, [st, c_uint16, c_uint16, c_uint8]), ("mx_silent_map", c_uint32, [st]),
        ("mx_backup_header", c_int, [st, c_void_p, c_uint16]), ("mx_taken_over", c_int, [st]),
    ]:
        f = getattr(lib, fn)
        f.restype, f.argtypes = res, args
    _LIB = lib
    return lib


@dataclass
class RoundResult:
    slots: int  # slots until every node was done (or the deadline)
    deadline: int
    decoded: np.ndarray  # bool [node, row]: node can read row (weak rows count as decoded)
    data: np.ndarray  # bool [node, row]: node decoded row with data (MX_ROW_DECODED, weak rows excluded)
    full_rank_slot: np.ndarray  # [node] slot of full rank, -1 if never
    done_slot: np.ndarray  # [node] last slot of the node's round
    tx: np.ndarray  # [node] packets sent
    heard: np.ndarray  # [node] mx_heard_map: bit j = an intact packet from node j arrived
    synced: np.ndarray  # bool [node]: the node joined the round (heard a packet, or started it)
    silent: np.ndarray | None = None  # [node] mx_silent_map: bit j = node j made absent inside the round
    taken_over: np.ndarray | None = None  # bool [node] mx_taken_over: the node knows the backup started the round
    alive: np.ndarray | None = None  # [node] mx_alive_map: heard, or its rows seen in a coding vector

    @property
    def complete(self) -> bool:
        """Every node decoded every row."""
        return bool(self.decoded.all())


def slot_shares(n: int, owners: list[int], weak_rows: set[int] = frozenset()) -> list[int]:
    """mx_config.slot_shares as the somegather transport sets it: every node's rows in the round.

    Row 0 is the initiator's header, sent in slot 0, so it has no share; weak rows are never sent."""
    shares = [0] * n
    for row, owner in enumerate(owners):
        if row > 0 and row not in weak_rows:
            shares[owner] += 1
    return shares



def owner_table(n: int, shares: list[int], initiator: int, slots: int) -> list[int]:
    """The owner of each of the first ``slots`` slots, as the firmware's slot_owner computes it: slot 0
    the initiator's, then the weighted pass (smooth weighted round robin over ``shares``, ties to the
    lower id), then slot s node s mod n's; without shares slot s is node s mod n's throughout."""
    total = sum(shares)
    if not total:
        return [t % n for t in range(slots)]
    cur, table = [0] * n, [initiator]
    for _ in range(total):
        best = 0
        for j in range(n):
            cur[j] += shares[j]
            if cur[j] > cur[best]:
                best = j
        cur[best] -= total
        table.append(best)
    return (table + [t % n for t in range(len(table), slots)])[:slots]


def owner_schedule_limit(prr: np.ndarray, owners: list[int], shares: list[int], initiator: int = 0) -> list[int]:
    """Per node, the slot in which its expected receptions reach G minus its own rows when every
    slot's owner sends and nobody else does (coordinated TX): the sum over earlier slots of the PRR from
    the slot's owner. A node that cannot hear some owners loses their slots; with one sender per slot no
    schedule of these owners does better on average. ``prr[sender, receiver]`` is the median link PRR."""
    n, g = prr.shape[0], len(owners)
    table = owner_table(n, shares, initiator, 8 * g + 64 * n)
    out = []
    for v in range(n):
        need, got = g - owners.count(v), 0.0
        for t, o in enumerate(table):
            if got >= need - 1e-9:
                break
            if o != v:
                got += float(prr[o, v])
        out.append(t - 1)  # the slot of the last reception needed (as full_rank_slot counts)
    return out

class MixerNetwork:
    """n Mixer instances sharing a channel; `run_round` plays one round of G rows of P bytes."""

    def __init__(self, channel: Channel, generation: int, payload: int, deadline: int | None = None,
                 termination: int = TERM_DONE, linger: int | None = None, initiator: int = 0,
                 features: int = FEAT_DEFAULT, weighted: bool = True, row_sources: bool = True):
        self.lib = library()
        self.weighted = weighted
        self.row_sources = row_sources  # name every row's sender (mx_row_source), as the transport does
        self.channel = channel
        self.n = channel.n
        self.cfg = MixerConfig(self.n, initiator, generation, payload, deadline or 3 * generation + 200, features,
                           termination, max(self.n, 4) if linger is None else linger, 1)
        self.plen = self.lib.mx_packet_len(ctypes.byref(self.cfg))
        if self.plen == 0:
            raise ValueError(f"invalid Mixer configuration n={self.n} G={generation} P={payload}")
        size = self.lib.mx_state_size()
        self.bufs = [ctypes.create_string_buffer(size) for _ in range(self.n)]
        self.ptrs = (c_void_p * self.n)(*[ctypes.addressof(b) for b in self.bufs])
        self.packets = np.zeros((self.n, self.plen), dtype=np.uint8)
        self.actions = np.zeros(self.n, dtype=np.int8)
        self.rx_status = np.zeros(self.n, dtype=np.int8)
        self.frm = np.full(self.n, -1, dtype=np.int16)

    def run_round(self, owners: list[int], seed: int, weak_rows: set[int] = frozenset(),
                  absent: list[int] | None = None, initiators: list[int] | None = None,
                  shares: list[int] | None = None, takeover: int = 0,
                  backups: list[int] | None = None) -> RoundResult:
        """One round: row i is written by node owners[i] (random payload), or is a weak zero.

        ``absent[k]``: the nodes node k knows to be dead (a bit set, mx_config.absent); k writes their
        rows as weak zeros itself. ``initiators[k]``: the round's initiator in node k's view (default:
        the configured one); a node that sees itself as initiator starts the round. ``shares``: the
        weighted first pass (mx_config.slot_shares); by default every node's rows but row 0, as the
        somegather transport sets them (``weighted=False``: none, slot s is node s mod n's).
        ``takeover`` > 0: the backup initiator (``backups[k]`` in node k's view; default the node
        after its initiator) starts the round after that many scan slots without a packet, with the
        same header (mx_backup_header), as the transport arms it."""
        G, P = self.cfg.generation_size, self.cfg.payload_size
        if len(owners) != G:
            raise ValueError("owners must name the writer of every row")
        absent = absent or [0] * self.n
        initiators = initiators or [self.cfg.initiator] * self.n
        backups = backups or [(initiators[i] + 1) % self.n for i in range(self.n)]
        planned = self.cfg.initiator
        self.cfg.seed = seed & 0xFFFFFFFF
        if shares is None:
            shares = slot_shares(self.n, owners, weak_rows) if self.weighted else [0] * self.n
        if len(shares) != self.n or min(shares) < 0 or max(shares) > 255:
            raise ValueError("shares must give every node a slot count 0..255")
        for j in range(32):
            self.cfg.slot_shares[j] = shares[j] if j < self.n else 0
        rng = np.random.default_rng(seed)
        runs: dict[int, list[tuple[int, int, int]]] = {}  # per initiator: the nodes that agree share them
        for i in range(self.n):
            self.cfg.absent, self.cfg.initiator = absent[i], initiators[i]
            on = takeover > 0 and backups[i] != initiators[i]
            self.cfg.takeover_slots, self.cfg.backup = (takeover, backups[i]) if on else (0, 0)
            if self.lib.mx_init(self.ptrs[i], ctypes.byref(self.cfg), i) != 0:
                raise RuntimeError("mx_init failed")
            if self.row_sources:  # row 0, the header, named after the node's own initiator, as the transport does
                if initiators[i] not in runs:
                    runs[initiators[i]] = _runs([initiators[i]] + list(owners[1:]))
                for first, rows, node in runs[initiators[i]]:
                    self.lib.mx_row_source(self.ptrs[i], first, rows, node)
        self.cfg.absent, self.cfg.initiator, self.cfg.takeover_slots, self.cfg.backup = 0, planned, 0, 0
        knowing = [i for i in range(self.n) if absent[i]]  # the nodes that know some node dead
        for row, owner in enumerate(owners):
            if row in weak_rows:
                self.lib.mx_write(self.ptrs[owner], row, None, 0)
            else:
                data = rng.integers(0, 256, P, dtype=np.uint8).tobytes()
                self.lib.mx_write(self.ptrs[owner], row, data, P)
                if row == 0 and owner == initiators[owner]:
                    # row 0 is the initiator's header: every node that starts the round in its own
                    # view writes the same one (e.g. a node that does not know it was declared dead)
                    for i in range(self.n):
                        if i != owner and initiators[i] == i:
                            self.lib.mx_write(self.ptrs[i], 0, data, P)
                        elif takeover > 0 and backups[i] == i and initiators[i] != i:
                            self.lib.mx_backup_header(self.ptrs[i], data, P)  # the same header
            for i in knowing:
                # a dead sender's rows are weak zeros at the nodes that know it dead; never the header
                # (row 0): the firmware writes it only at a node that starts the round, so a node that
                # thinks the initiator dead still decodes its header if it comes
                if row > 0 and i != owner and absent[i] >> owner & 1 and row not in weak_rows:
                    self.lib.mx_write(self.ptrs[i], row, None, 0)
        for i in range(self.n):
            self.lib.mx_arm(self.ptrs[i], ARM_INITIATOR if i == initiators[i] else ARM_LISTENER)
        self.channel.begin_round()
        pk = self.packets.ctypes.data_as(POINTER(c_uint8))
        ac = self.actions.ctypes.data_as(POINTER(c_int8))
        frm = self.frm.ctypes.data_as(POINTER(c_int16))
        rxs = self.rx_status.ctypes.data_as(POINTER(c_int8))
        slot = 0
        deadline = self.cfg.round_length
        note_slot = getattr(self.channel, "note_slot", None)  # observers that need the round's slot number
        finished = sum(self.lib.mx_finished(self.ptrs[i]) != 0 for i in range(self.n))
        # per slot: two calls for all nodes (the loop runs ~10^5 slots a plan; a call per node and slot
        # and numpy on 16-element arrays were most of the simulation's time); names bound once
        n, plen, ptrs, actions_of, frm_of = self.n, self.plen, self.ptrs, self.actions.tolist, self.frm
        slot_batch, deliver_batch, channel_slot = self.lib.mx_slot_batch, self.lib.mx_deliver_batch, self.channel.slot
        while slot < deadline and finished < n:
            # every node its own next slot: after a takeover the backup's grid starts later
            slot_batch(ptrs, n, NO_SLOT, ac, pk, plen)
            actions = actions_of()
            tx = {i: plen for i, a in enumerate(actions) if a == ACT_TX}
            rx = [i for i, a in enumerate(actions) if a == ACT_RX]
            frm_of.fill(-1)
            if note_slot is not None:
                note_slot(slot)
            if tx and rx:
                for r, s in channel_slot(tx, rx).items():
                    frm_of[r] = s
            finished = deliver_batch(ptrs, n, NO_SLOT, pk, plen, frm, rxs)
            slot += 1
        decoded = np.zeros((self.n, G), dtype=bool)
        data = np.zeros((self.n, G), dtype=bool)
        frs, done, txc, heard, silent, alive = (np.zeros(self.n, dtype=np.int64) for _ in range(6))
        synced = np.zeros(self.n, dtype=bool)
        taken = np.zeros(self.n, dtype=bool)
        for i in range(self.n):
            for row in range(G):
                status = self.lib.mx_row_status(self.ptrs[i], row)
                decoded[i, row] = status != ROW_MISSING
                data[i, row] = status == ROW_DECODED
            heard[i] = self.lib.mx_heard_map(self.ptrs[i])
            silent[i] = self.lib.mx_silent_map(self.ptrs[i])
            alive[i] = self.lib.mx_alive_map(self.ptrs[i])
            taken[i] = bool(self.lib.mx_taken_over(self.ptrs[i]))
            synced[i] = bool(self.lib.mx_synced(self.ptrs[i])) or i == initiators[i]
            c = self.lib.mx_stats(self.ptrs[i]).contents
            # slots of the channel: a round the backup started is on a grid `takeover` slots later
            shift = takeover if taken[i] else 0
            frs[i] = -1 if c.slot_full_rank == NO_SLOT else c.slot_full_rank + shift
            done[i] = slot - 1 if c.slot_done == NO_SLOT else c.slot_done + shift
            txc[i] = c.tx
        return RoundResult(slot, deadline, decoded, data, frs, done, txc, heard, synced, silent, taken, alive)


def _runs(owners: list[int]) -> list[tuple[int, int, int]]:
    """(first row, rows, node) for every run of consecutive rows with the same writer."""
    out: list[tuple[int, int, int]] = []
    for row, owner in enumerate(owners):
        if out and out[-1][2] == owner and out[-1][0] + out[-1][1] == row:
            out[-1] = (out[-1][0], out[-1][1] + 1, owner)
        else:
            out.append((row, 1, owner))
    return out
