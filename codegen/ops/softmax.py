"""softmax: int8 softmax along each row (arm_softmax_s8), output scale 1/256."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, expect_same, quant
from ..quant import arith
from ..quant import kernels as K


@dataclass(frozen=True)
class SoftmaxAttrs:
    mult: int = quant()
    shift: int = quant()
    diff_min: int = quant()


@register
class Softmax(OpKind):
    name = "softmax"
    Attrs = SoftmaxAttrs
    work_unit = "element"

    def check(self, op, tensors, consts):
        expect_same(tensors, op.ins[0], op.outs[0], "out")

    def quantize(self, qc, op, stem):
        m, s, dmin = arith.softmax_params(qc.qp[op.ins[0]].scale)
        op.attrs.update(mult=int(m), shift=int(s), diff_min=int(dmin))

    def run(self, ex, k, op, v):
        x = v[op.ins[0]]
        if ex.mode == "float":
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            v[op.outs[0]] = e / e.sum(axis=-1, keepdims=True)
        else:
            a = op.attrs
            v[op.outs[0]] = K.softmax_s8(x, a["mult"], a["shift"], a["diff_min"])

    def c_context(self, e, op):
        rows, row_size = e.shape(op.ins[0])
        a = op.attrs
        return {"in": e.tensor(op.ins[0]), "out": e.tensor(op.outs[0]), "rows": rows, "row_size": row_size,
                "mult": a["mult"], "shift": a["shift"], "diff_min": a["diff_min"]}
