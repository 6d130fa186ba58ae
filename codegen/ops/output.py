"""output: the sink prints the forecast (`output` lines); the executor's result."""

from __future__ import annotations

from . import register
from .base import OpKind, shape_of


@register
class Output(OpKind):
    name = "output"

    def check(self, op, tensors, consts):
        shape_of(tensors, op.ins[0], "in")

    def run(self, ex, k, op, v):
        ex.output_value = v[op.ins[0]]

    def c_context(self, e, op):
        return {"in": e.tensor(op.ins[0]), "n": e.size(op.ins[0])}
