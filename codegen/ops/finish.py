"""finish: the end of an inference; the node checksums its last tensor for the `infer` line."""

from __future__ import annotations

from . import register
from .base import OpKind, shape_of


@register
class Finish(OpKind):
    name = "finish"

    def check(self, op, tensors, consts):
        shape_of(tensors, op.ins[0], "in")

    def c_context(self, e, op):
        return {"in": e.tensor(op.ins[0]), "nbytes": e.node.tensors[op.ins[0]].nbytes}
