"""reduce_recv: the sink adds the partial sums that arrive to its own (int32, wrapping)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, fail, shape_of
from ..quant import arith


@dataclass(frozen=True)
class ReduceRecvAttrs:
    sg: int
    name: str
    senders: list[int]


@register
class ReduceRecv(OpKind):
    name = "reduce_recv"
    Attrs = ReduceRecvAttrs
    sync = True

    def check(self, op, tensors, consts):
        if shape_of(tensors, op.ins[0], "in", 1) != shape_of(tensors, op.outs[0], "out", 1):
            fail("out", f"tensors {op.ins[0]} and {op.outs[0]} must have the same length")

    def receive(self, ex, k, op, v, messages, got, batch):
        acc = v[op.ins[0]].copy()
        for j in op.attrs["senders"]:
            ok = got(j)
            part = np.where(ok[:, None], messages[j], 0)
            acc = arith.wrap32(acc.astype(np.int64) + part) if ex.mode == "int8" else acc + part
        v[op.outs[0]] = acc.astype(np.int32) if ex.mode == "int8" else acc

    def senders(self, op):
        return list(op.attrs["senders"])

    def c_context(self, e, op):
        a = op.attrs
        return {"out": e.tensor(op.outs[0]), "n": e.shape(op.outs[0])[0], "sg": a["sg"], "senders": a["senders"]}

    def table_bytes(self, op):
        return len(op.attrs["senders"])
