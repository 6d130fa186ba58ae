"""Test helper for firmware/mixer: build the library, ctypes bindings, a Python model of the packet
layout, a GF(2) reference decoder and a slot-level network driver over the batch API."""

from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_int, c_int8, c_int16, c_int32, c_size_t, c_uint8, c_uint16, c_uint32
from ctypes import c_void_p
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Sequence

import numpy as np

from clib import FIRMWARE, STRICT_FLAGS, build_shared_lib, load
from codegen.radio.mixer_network import MixerConfig

MIXER_DIR = FIRMWARE / "mixer"
MIXER_SOURCES = [MIXER_DIR / "mixer.c"]

FEAT_COORD, FEAT_REQ, FEAT_WEAK = 1, 2, 4
FEAT_ALL = 7
TERM_DEADLINE, TERM_DONE = 0, 1
ARM_INITIATOR, ARM_LISTENER, ARM_PASSIVE = 0, 1, 2
ACT_OFF, ACT_RX, ACT_TX = 0, 1, 2
ROW_MISSING, ROW_DECODED, ROW_WEAK = 0, 1, 2
NO_SLOT = 0xFFFF
RX_OK, RX_INNOVATIVE = 0, 1

INFO_NONE, INFO_REQUEST, INFO_FULL_RANK, INFO_WEAK = 0, 1, 2, 3
F_SILENT, F_ALL_FULL, F_FULL_RANK, F_RESERVED = 0x10, 0x20, 0x40, 0x80

E = {
    "NULL": -1, "NODES": -2, "GENERATION": -3, "PAYLOAD": -4, "ROUND": -5, "INITIATOR": -6,
    "PACKET_LEN": -7, "MEMORY": -8, "FEATURES": -9, "TERMINATION": -10, "NODE_ID": -11, "ROW": -12,
    "LEN": -13, "STATE": -14, "SLOT": -15, "WEAK": -16, "MODE": -17, "DUPLICATE": -18, "HAL": -19, "ABSENT": -20,
    "SHARES": -21,
    "PKT_LEN": -32, "PKT_SENDER": -33, "PKT_SLOT": -34, "PKT_FLAGS": -35, "PKT_CODING": -36,
    "PKT_INFO": -37, "PKT_WRONG_SLOT": -38,
}  # fmt: skip


Config = MixerConfig  # firmware/mixer/mixer.h mx_config, as the product's ctypes mirror declares it


class Counters(Structure):
    _fields_ = [
        (name, c_uint32)
        for name in (
            "slots", "slots_missed", "tx", "rx_ok", "rx_innovative", "rx_non_innovative", "rx_malformed",
            "rx_wrong_slot", "rx_timeout", "radio_on_slots",
        )
    ] + [
        (name, c_uint16)
        for name in ("slot_synced", "slot_full_rank", "slot_all_full", "slot_done", "rank", "slot_linger")
    ]  # fmt: skip


WAIT_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint16)
TX_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_uint8), c_uint16)
RX_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_uint8), c_uint16, c_int, POINTER(c_uint32))
SYNC_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint16, c_uint32)
OFF_FN = ctypes.CFUNCTYPE(None, c_void_p)
LISTEN_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int)
TXDONE_FN = ctypes.CFUNCTYPE(c_int, c_void_p)


class RadioHal(Structure):
    _fields_ = [("wait_slot", WAIT_FN), ("transmit", TX_FN), ("receive", RX_FN), ("sync", SYNC_FN), ("off", OFF_FN),
                ("listen", LISTEN_FN), ("tx_done", TXDONE_FN), ("initiate", OFF_FN)]


def config(n: int, g: int, p: int, r: int, *, initiator: int = 0, features: int = FEAT_ALL,
           termination: int = TERM_DEADLINE, linger: int = 0, seed: int = 1) -> Config:  # fmt: skip
    return Config(n, initiator, g, p, r, features, termination, linger, seed & 0xFFFFFFFF)


def build(out_dir: Path, defines: dict[str, int] | None = None, name: str = "libmixer.so") -> ctypes.CDLL:
    flags = [*STRICT_FLAGS, *(f"-D{k}={v}u" for k, v in (defines or {}).items())]
    lib = load(build_shared_lib(MIXER_SOURCES, out_dir, name=name, include_dirs=[MIXER_DIR], flags=flags))
    st = c_void_p
    sig = {
        "mx_state_size": (c_size_t, []),
        "mx_packet_len": (c_uint16, [POINTER(Config)]),
        "mx_config_check": (c_int, [POINTER(Config)]),
        "mx_init": (c_int, [st, POINTER(Config), c_uint8]),
        "mx_write": (c_int, [st, c_uint16, c_void_p, c_uint16]),
        "mx_arm": (c_int, [st, c_uint8]),
        "mx_slot": (c_int, [st, c_uint16, POINTER(c_uint8), POINTER(c_uint16)]),
        "mx_receive": (c_int, [st, c_uint16, POINTER(c_uint8), c_uint16]),
        "mx_slot_end": (c_int, [st, c_uint16]),
        "mx_prepare": (c_int, [st]),
        "mx_finished": (c_int, [st]),
        "mx_synced": (c_int, [st]),
        "mx_next_slot": (c_uint16, [st]),
        "mx_slot_batch": (None, [POINTER(c_void_p), c_uint16, c_uint16, POINTER(c_int8), POINTER(c_uint8), c_uint16]),
        "mx_deliver_batch": (
            None,
            [POINTER(c_void_p), c_uint16, c_uint16, POINTER(c_uint8), c_uint16, POINTER(c_int16), POINTER(c_int8)],
        ),
        "mx_start": (c_int32, [st, POINTER(RadioHal), c_void_p]),
        "mx_read": (c_void_p, [st, c_uint16, POINTER(c_uint16)]),
        "mx_row_status": (c_int, [st, c_uint16]),
        "mx_rank": (c_uint16, [st]),
        "mx_coded_row": (c_int, [st, c_uint16, POINTER(c_uint8), POINTER(c_uint8)]),
        "mx_stats": (POINTER(Counters), [st]),
        "mx_row_slot": (c_uint16, [st, c_uint16]),
        "mx_full_rank_map": (c_uint32, [st]),
        "mx_packet_check": (c_int, [POINTER(Config), POINTER(c_uint8), c_uint16]),
    }
    for fn, (res, args) in sig.items():
        f = getattr(lib, fn)
        f.restype = res
        f.argtypes = args
    return lib


def u8p(buf: bytes | bytearray | np.ndarray) -> ctypes._Pointer:  # type: ignore[type-arg]
    if isinstance(buf, np.ndarray):
        return buf.ctypes.data_as(POINTER(c_uint8))
    arr = (c_uint8 * max(len(buf), 1)).from_buffer_copy(bytes(buf) or b"\0")
    return ctypes.cast(arr, POINTER(c_uint8))


# ---- packet layout (docs/design/mixer.md §2) ------------------------------------------------


def cv_bytes(g: int) -> int:
    return (g + 7) // 8


def info_bytes(n: int, g: int) -> int:
    return (max(g, n) + 7) // 8


def packet_len(n: int, g: int, p: int) -> int:
    return 4 + cv_bytes(g) + p + info_bytes(n, g)


def bits_to_bytes(bits: int, nbytes: int) -> bytes:
    return bits.to_bytes(nbytes, "little")


def make_packet(n: int, g: int, p: int, *, slot: int, sender: int, cv: int, payload: bytes, flags: int = 0,
                info: int = 0) -> bytes:  # fmt: skip
    assert len(payload) == p
    return (
        slot.to_bytes(2, "little") + bytes([sender, flags]) + bits_to_bytes(cv, cv_bytes(g)) + payload
        + bits_to_bytes(info, info_bytes(n, g))
    )  # fmt: skip


@dataclass
class Packet:
    slot: int
    sender: int
    flags: int
    cv: int
    payload: bytes
    info: int


def parse_packet(n: int, g: int, p: int, pkt: bytes) -> Packet:
    cb = cv_bytes(g)
    return Packet(
        slot=int.from_bytes(pkt[0:2], "little"),
        sender=pkt[2],
        flags=pkt[3],
        cv=int.from_bytes(pkt[4 : 4 + cb], "little"),
        payload=bytes(pkt[4 + cb : 4 + cb + p]),
        info=int.from_bytes(pkt[4 + cb + p :], "little"),
    )


# ---- GF(2) reference decoder ------------------------------------------------------------------


class RefDecoder:
    """Rows as (coding vector int, payload int); plain Gauss-Jordan elimination."""

    def __init__(self, g: int, p: int) -> None:
        self.g, self.p = g, p
        self.rows: dict[int, tuple[int, int]] = {}  # pivot (lowest set bit) -> (cv, payload)

    def add(self, cv: int, payload: bytes | int) -> bool:
        pl = payload if isinstance(payload, int) else int.from_bytes(payload, "little")
        while cv:
            low = (cv & -cv).bit_length() - 1
            if low not in self.rows:
                self.rows[low] = (cv, pl)
                return True
            rcv, rpl = self.rows[low]
            cv ^= rcv
            pl ^= rpl
        return False

    @property
    def rank(self) -> int:
        return len(self.rows)

    def rref(self) -> dict[int, tuple[int, int]]:
        rows = dict(self.rows)
        for i in sorted(rows, reverse=True):
            cvi, pli = rows[i]
            for j in rows:
                if j < i and rows[j][0] >> i & 1:
                    rows[j] = (rows[j][0] ^ cvi, rows[j][1] ^ pli)
        return rows

    def readable(self) -> dict[int, bytes]:
        """Rows that can be isolated (e_i in the span) and their payloads."""
        return {
            i: pl.to_bytes(self.p, "little") for i, (cv, pl) in self.rref().items() if cv == 1 << i
        }


# ---- network driver ------------------------------------------------------------------------------

Channel = Callable[[int, np.ndarray], np.ndarray]
"""channel(slot, actions) -> from: for each node, the index of the node whose packet it receives, or -1."""


def perfect_channel(slot: int, actions: np.ndarray) -> np.ndarray:
    """Everyone hears the single transmitter of a slot; two or more collide and nobody receives."""
    tx = np.flatnonzero(actions == ACT_TX)
    frm = np.full(len(actions), -1, dtype=np.int16)
    if len(tx) == 1:
        frm[actions == ACT_RX] = tx[0]
    return frm


def topology_channel(adj: np.ndarray) -> Channel:
    """A receiver gets a packet iff exactly one of its neighbours (adj[r, s]) transmits."""

    def ch(slot: int, actions: np.ndarray) -> np.ndarray:
        tx = actions == ACT_TX
        cnt = adj[:, tx].sum(axis=1)
        frm = np.full(len(actions), -1, dtype=np.int16)
        for r in np.flatnonzero((actions == ACT_RX) & (cnt == 1)):
            frm[r] = np.flatnonzero(adj[r] & tx)[0]
        return frm

    return ch


@dataclass
class Network:
    lib: ctypes.CDLL
    cfg: Config
    size: int = 0
    bufs: list[ctypes.Array] = field(default_factory=list)  # type: ignore[type-arg]

    def __post_init__(self) -> None:
        n = self.cfg.num_nodes
        self.size = self.lib.mx_state_size()
        self.bufs = [ctypes.create_string_buffer(self.size) for _ in range(n)]
        self.ptrs = (c_void_p * n)(*[ctypes.addressof(b) for b in self.bufs])
        self.plen = self.lib.mx_packet_len(ctypes.byref(self.cfg))
        assert self.plen > 0
        self.packets = np.zeros((n, self.plen), dtype=np.uint8)
        self.actions = np.zeros(n, dtype=np.int8)
        self.rx_status = np.zeros(n, dtype=np.int8)
        for i in range(n):
            assert self.lib.mx_init(self.ptrs[i], ctypes.byref(self.cfg), i) == 0

    def state(self, i: int) -> int:
        return self.ptrs[i]  # type: ignore[no-any-return]

    def write(self, node: int, row: int, data: bytes | None) -> int:
        if data is None:
            return int(self.lib.mx_write(self.state(node), row, None, 0))
        return int(self.lib.mx_write(self.state(node), row, data, len(data)))

    def arm(self, modes: Sequence[int] | None = None) -> None:
        for i in range(self.cfg.num_nodes):
            mode = modes[i] if modes else (ARM_INITIATOR if i == self.cfg.initiator else ARM_LISTENER)
            assert self.lib.mx_arm(self.state(i), mode) == 0

    def step(self, slot: int, channel: Channel = perfect_channel) -> np.ndarray:
        n = self.cfg.num_nodes
        self.lib.mx_slot_batch(
            self.ptrs, n, slot, self.actions.ctypes.data_as(POINTER(c_int8)),
            self.packets.ctypes.data_as(POINTER(c_uint8)), self.plen,
        )  # fmt: skip
        frm = np.ascontiguousarray(channel(slot, self.actions.copy()), dtype=np.int16)
        self.lib.mx_deliver_batch(
            self.ptrs, n, slot, self.packets.ctypes.data_as(POINTER(c_uint8)), self.plen,
            frm.ctypes.data_as(POINTER(c_int16)), self.rx_status.ctypes.data_as(POINTER(c_int8)),
        )  # fmt: skip
        return self.actions.copy()

    def run(self, channel: Channel = perfect_channel, on_slot: Callable[[int, np.ndarray], None] | None = None) -> int:
        """Run until every node finished or the deadline; returns the number of slots stepped."""
        slot = 0
        while slot < self.cfg.round_length:
            if all(self.lib.mx_finished(self.state(i)) for i in range(self.cfg.num_nodes)):
                break
            acts = self.step(slot, channel)
            if on_slot:
                on_slot(slot, acts)
            slot += 1
        return slot

    def stats(self, i: int) -> Counters:
        c = self.lib.mx_stats(self.state(i)).contents
        out = Counters()
        ctypes.memmove(ctypes.byref(out), ctypes.byref(c), ctypes.sizeof(Counters))
        return out

    def read(self, i: int, row: int) -> bytes | None | str:
        ln = c_uint16(0)
        p = self.lib.mx_read(self.state(i), row, ctypes.byref(ln))
        if p is None:
            return None
        if self.lib.mx_row_status(self.state(i), row) == ROW_WEAK:
            assert ln.value == 0
            return "weak"
        return ctypes.string_at(p, ln.value)
