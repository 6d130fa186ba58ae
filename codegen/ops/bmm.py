"""bmm: int8 batch matmul lhs · rhsᵀ with one output scale (attention scores and context)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, fail, quant, shape_of
from ..quant import arith
from ..quant import kernels as K

BMM_PARAMS = ("lhs_offset", "rhs_offset", "out_offset", "mult", "shift", "act_min", "act_max")


@dataclass(frozen=True)
class BmmAttrs:
    alpha: float
    lhs_offset: int = quant()
    rhs_offset: int = quant()
    out_offset: int = quant()
    mult: int = quant()
    shift: int = quant()
    act_min: int = quant()
    act_max: int = quant()


@register
class Bmm(OpKind):
    name = "bmm"
    Attrs = BmmAttrs
    work_unit = "MAC"

    def check(self, op, tensors, consts):
        m, k = shape_of(tensors, op.ins[0], "in", 2)
        n, k2 = shape_of(tensors, op.ins[1], "in", 2)
        if k2 != k:
            fail("in", f"{op.ins[0]} {[m, k]} and {op.ins[1]} {[n, k2]} must share their last dimension")
        if shape_of(tensors, op.outs[0], "out") != (m, n):
            fail("out", f"tensor {op.outs[0]} must have shape {[m, n]}")

    def quantize(self, qc, op, stem):
        sl, sr, so = qc.qp[op.ins[0]], qc.qp[op.ins[1]], qc.qp[op.outs[0]]
        m, s = arith.quantize_multiplier(sl.scale * sr.scale * op.attrs["alpha"] / so.scale)
        op.attrs.update(lhs_offset=-sl.zero_point, rhs_offset=-sr.zero_point, out_offset=so.zero_point,
                        mult=int(m), shift=int(s), act_min=-128, act_max=127)

    def run(self, ex, k, op, v):
        lhs, rhs = v[op.ins[0]], v[op.ins[1]]
        if ex.mode == "float":
            v[op.outs[0]] = op.attrs["alpha"] * (lhs @ np.swapaxes(rhs, -1, -2))
        else:
            v[op.outs[0]] = K.batch_matmul_s8(lhs, rhs, *(op.attrs[key] for key in BMM_PARAMS))

    def c_context(self, e, op):
        m, kk = e.shape(op.ins[0])
        return dict(lhs=e.tensor(op.ins[0]), rhs=e.tensor(op.ins[1]), out=e.tensor(op.outs[0]), m=m, k=kk,
                    n=e.shape(op.ins[1])[0], **{key: op.attrs[key] for key in BMM_PARAMS})

    def gemm_shape(self, op, shape):
        m, k = shape[op.ins[0]]
        return m, k, shape[op.ins[1]][0]
