"""Frames between virtual-testbed nodes and the medium (mirrors boards/sim/hal_sim.c).

Every frame is a 16-byte little-endian header — u8 type, u8 src, u8 dest, u8 flags, u16 sg,
u16 reserved, u32 inference, u32 len — followed by ``len`` payload bytes.

A node says HELLO once, then per inference asks for an input (INPUT_REQ -> INPUT or END) and, for
every communication round, sends TX (its message, possibly empty) and receives RX frames (one per
message delivered to it) closed by RX_END. BYE ends its session.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PROTOCOL_VERSION = 2  # boards/sim/hal_sim.c PROTOCOL_VERSION; a node says it in its HELLO
HELLO, INPUT_REQ, INPUT, END, TX, RX, RX_END, BYE = range(1, 9)
# radio mode (nodes run Mixer; the medium plays the channel slot by slot), see boards/sim/hal_sim.c
CONFIG, TX_COPY, ROUND_BEGIN, ACTION, SLOT_RESULT, FINISHED, ROUND_END, DELIVERY = range(9, 17)
MODE_MESSAGE, MODE_RADIO = 0, 1
ACT_OFF, ACT_RX, ACT_TX = 0, 1, 2
BROADCAST = 0xFF
HEADER = struct.Struct("<BBBBHHII")


@dataclass
class Frame:
    type: int
    src: int
    dest: int
    sg: int
    inference: int
    payload: bytes
    flags: int = 0


def pack(f: Frame, flags: int = 0) -> bytes:
    return HEADER.pack(f.type, f.src, f.dest, flags, f.sg, 0, f.inference, len(f.payload)) + f.payload


def read_frame(sock) -> Frame | None:
    """Read one frame from a blocking socket; None at end of stream."""
    head = _read_exact(sock, HEADER.size)
    if head is None:
        return None
    t, src, dest, flags, sg, _r, inf, n = HEADER.unpack(head)
    payload = _read_exact(sock, n) if n else b""
    if payload is None:
        return None
    return Frame(t, src, dest, sg, inf, payload, flags)


def _read_exact(sock, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf.extend(chunk)
    return bytes(buf)


TRANSCRIPT_RECORD = struct.Struct("<IHBBI")  # inference, sg, src, dest, len; then the payload


def read_transcript(path) -> dict[tuple[int, int, int], bytes]:
    """(inference, sg, src) -> payload bytes, as the medium recorded every message it carried."""
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off < len(data):
        inf, sg, src, _dest, n = TRANSCRIPT_RECORD.unpack_from(data, off)
        off += TRANSCRIPT_RECORD.size
        out[(inf, sg, src)] = data[off:off + n]
        off += n
    return out


LOSS_RECORD = struct.Struct("<IHH")  # inference, sg, nodes; then nodes*nodes bytes lost[receiver][sender]


def read_losses(path) -> dict[tuple[int, int], "object"]:
    """(inference, sg) -> bool array [receiver, sender] of the messages the medium dropped."""
    import numpy as np

    out = {}
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off < len(data):
        inf, sg, n = LOSS_RECORD.unpack_from(data, off)
        off += LOSS_RECORD.size
        out[(inf, sg)] = np.frombuffer(data, dtype=np.uint8, count=n * n, offset=off).reshape(n, n).astype(bool)
        off += n * n
    return out
