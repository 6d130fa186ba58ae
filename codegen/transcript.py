"""What one node receives and sends, as the numpy int8 reference records it: its transcript.

A node cannot run alone: it waits for its peers' messages at every exchange. A qemu-m4 node
(boards/qemu-m4) runs with its peers replaced by a *transcript* that the int8 reference records: for
every inference the input window and, for every exchange, exactly the messages the node received
(all of them, or those that survive a given loss pattern). It writes every message it sends to a
second file, the *sent file*, which the host compares with the reference's. `cisl qemu` (codegen/qemu.py) and the
virtual testbed's qemu-m4 nodes (codegen/vtestbed/bed.py) both run nodes against transcripts.

Transcript (little-endian u32 words): ``CISLQT01``, node, version; per inference ``1INP``
inference, len, window bytes; per exchange ``1XCH`` inference, sg, count, then per message
sender, len, bytes; finally ``1END``. Sent file: per transport call ``1SNT`` inference, sg, len,
bytes.
"""

from __future__ import annotations

import struct

import numpy as np

from .executor import PlanExecutor, RunResult
from .ops import kind_of
from .plan.io import Plan

TAG_INPUT = b"1INP"
TAG_EXCHANGE = b"1XCH"
TAG_END = b"1END"
TAG_SENT = b"1SNT"
MAGIC = b"CISLQT01"
VERSION = 1


def node_exchanges(plan: Plan, device: int) -> list[tuple[int, list[int]]]:
    """(sg, senders this node takes messages from) for every exchange, in schedule order."""
    out = []
    for op in plan.nodes[device].ops:
        kind = kind_of(op)
        if kind.sync:
            out.append((int(op.attrs["sg"]), kind.senders(op)))
    return out


def reference(plan: Plan, xq: np.ndarray, lost: dict[int, np.ndarray] | None = None) -> RunResult:
    return PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "int8",
                        constants=[n.constants for n in plan.nodes]).run(xq, lost=lost, record=True)


def transcript(plan: Plan, device: int, xq: np.ndarray, ref: RunResult) -> bytes:
    """What node ``device`` receives over all inferences of ``xq``, as the reference recorded it."""
    out = bytearray(MAGIC + struct.pack("<II", device, VERSION))
    exchanges = node_exchanges(plan, device)
    for i in range(len(xq)):
        out += TAG_INPUT + struct.pack("<II", i, xq.shape[1]) + xq[i].astype(np.int8).tobytes()
        for sg, senders in exchanges:
            msgs = []
            for j in senders:
                ok = ref.delivered.get((sg, device, j))
                if ok is None or bool(ok[i]):
                    msgs.append((j, ref.payloads[(sg, j)][i].tobytes()))
            out += TAG_EXCHANGE + struct.pack("<III", i, sg, len(msgs))
            for j, data in msgs:
                out += struct.pack("<II", j, len(data)) + data
    out += TAG_END
    return bytes(out)


def parse_sent(data: bytes) -> list[tuple[int, int, bytes]]:
    """(inference, sg, message) for every transport call the node made."""
    out, off = [], 0
    while off + 16 <= len(data):
        tag, inf, sg, n = struct.unpack_from("<4sIII", data, off)
        if tag != TAG_SENT:
            raise ValueError(f"sent file: bad record at byte {off}")
        out.append((inf, sg, data[off + 16:off + 16 + n]))
        off += 16 + n
    return out
