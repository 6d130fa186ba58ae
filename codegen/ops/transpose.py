"""transpose: swaps the two dimensions of an int8 matrix (V for the context matmul)."""

from __future__ import annotations

import numpy as np

from . import register
from .base import OpKind, fail, shape_of


@register
class Transpose(OpKind):
    name = "transpose"

    def check(self, op, tensors, consts):
        rows, cols = shape_of(tensors, op.ins[0], "in", 2)
        if shape_of(tensors, op.outs[0], "out") != (cols, rows):
            fail("out", f"tensor {op.outs[0]} must have shape {[cols, rows]}, the transpose of {op.ins[0]}")

    def run(self, ex, k, op, v):
        v[op.outs[0]] = np.ascontiguousarray(np.swapaxes(v[op.ins[0]], -1, -2))

    def c_context(self, e, op):
        rows, cols = e.shape(op.ins[0])
        return {"in": e.tensor(op.ins[0]), "out": e.tensor(op.outs[0]), "rows": rows, "cols": cols}
