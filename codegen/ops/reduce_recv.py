"""reduce_recv: the sink adds the partial sums that arrive to its own (int32, wrapping).

With ``weights`` (rescaled models, issue 16) the other nodes' partials are first summed apart and
scaled by E / R — E the columns the sink expects partials for (each sender weighs its own columns),
R those whose partial arrived — so a lost partial does not shrink the forecast, as the `rescale`
op does for the somegathers. With nothing or everything delivered the sum is today's. int8:
out = own + round(S · E / R) with S the wrapped int32 sum of what arrived, the product in int64,
rounding half away from zero, the addition wrapping (cisl_reduce_partials).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import register
from .base import OpKind, fail, shape_of
from ..quant import arith


@dataclass(frozen=True)
class ReduceRecvAttrs:
    sg: int
    name: str
    senders: list[int]
    weights: list[int] = field(default_factory=list)  # columns per sender; empty: plain sum, in place


def scale_partials(total: np.ndarray, expected: int, got: np.ndarray, int8: bool) -> np.ndarray:
    """total [batch, n] of the received partials times E / R per sample (got [batch] = R)."""
    on = (got > 0) & (got < expected)
    if not on.any():
        return total
    r = np.where(on, got, 1).astype(np.int64)[:, None]
    if not int8:
        return np.where(on[:, None], total * expected / r, total)
    num = total.astype(np.int64) * expected
    q = np.sign(num) * ((np.abs(num) + r // 2) // r)
    return np.where(on[:, None], q, total)


@register
class ReduceRecv(OpKind):
    name = "reduce_recv"
    Attrs = ReduceRecvAttrs
    sync = True

    def check(self, op, tensors, consts):
        a = op.attrs
        if shape_of(tensors, op.ins[0], "in", 1) != shape_of(tensors, op.outs[0], "out", 1):
            fail("out", f"tensors {op.ins[0]} and {op.outs[0]} must have the same length")
        if a["weights"] and len(a["weights"]) != len(a["senders"]):
            fail("weights", f"{len(a['weights'])} weights for {len(a['senders'])} senders: one per sender")
        if a["weights"] and op.ins[0] == op.outs[0]:
            fail("out", "a rescaled reduction needs its own partial apart: out must differ from in")

    def receive(self, ex, k, op, v, messages, got, batch):
        a = op.attrs
        int8 = ex.mode == "int8"
        own = v[op.ins[0]]
        total = np.zeros_like(own) if a["weights"] else own.copy()
        arrived = np.zeros(batch, dtype=np.int64)  # R: the columns whose partial arrived
        for i, j in enumerate(a["senders"]):
            ok = got(j)
            part = np.where(ok[:, None], messages[j], 0)
            total = arith.wrap32(total.astype(np.int64) + part) if int8 else total + part
            if a["weights"]:
                arrived = arrived + np.asarray(ok, dtype=np.int64) * a["weights"][i]
        if a["weights"]:
            scaled = scale_partials(np.asarray(total), sum(a["weights"]), arrived, int8)
            total = arith.wrap32(own.astype(np.int64) + scaled) if int8 else own + scaled
        v[op.outs[0]] = total.astype(np.int32) if int8 else total

    def senders(self, op):
        return list(op.attrs["senders"])

    def c_context(self, e, op):
        a = op.attrs
        return {"out": e.tensor(op.outs[0]), "own": e.tensor(op.ins[0]) if a["weights"] else None,
                "n": e.shape(op.outs[0])[0], "sg": e.exchange_base + a["sg"], "senders": a["senders"], "weights": a["weights"]}

    def table_bytes(self, op):
        return len(op.attrs["senders"]) * (3 if op.attrs["weights"] else 1)
