"""send: a node's int32 partial sums of the head, to the sink only (the head exchange)."""

from __future__ import annotations

from dataclasses import dataclass

from . import register
from .base import OpKind, fail, shape_of


@dataclass(frozen=True)
class SendAttrs:
    sg: int
    name: str
    dest: int


@register
class Send(OpKind):
    name = "send"
    Attrs = SendAttrs
    sync = True

    def check(self, op, tensors, consts):
        shape_of(tensors, op.ins[0], "in", 1)
        if tensors[op.ins[0]].dtype != "int32":
            fail("in", f"tensor {op.ins[0]} must be int32 partial sums")

    def message(self, ex, k, op, v, batch):
        return v[op.ins[0]]

    def c_context(self, e, op):
        a = op.attrs
        return {"in": e.tensor(op.ins[0]), "n": e.shape(op.ins[0])[0], "sg": e.exchange_base + a["sg"], "dest": a["dest"]}
