"""add_const: adds a constant int8 tensor (the position embedding) with the add's arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .add import AddAttrs, add_context, add_quant_params, run_add
from .base import OpKind, WeightRef, align4, const_ref, expect_const, expect_same
from ..quant.scheme import quantize_const_s8


@dataclass(frozen=True, kw_only=True)
class AddConstAttrs(AddAttrs):
    """The add's parameters, and the constant that is its second operand."""

    const: WeightRef
    const_qgroup: str
    const_c: str = const_ref()


@register
class AddConst(OpKind):
    name = "add_const"
    Attrs = AddConstAttrs
    work_unit = "element"

    def check(self, op, tensors, consts):
        shape = expect_same(tensors, op.ins[0], op.outs[0], "out")
        expect_const(consts, op.attrs["const_c"], "const_c", shape, "int8")

    def quantize(self, qc, op, stem):
        a = op.attrs
        s2 = qc.q[a["const_qgroup"]]
        a["const_c"] = qc.add(f"{stem}_c", quantize_const_s8(qc.weight(a["const"]), s2))
        a.update(add_quant_params(qc.qp[op.ins[0]], s2, qc.qp[op.outs[0]]))

    def run(self, ex, k, op, v):
        x = v[op.ins[0]]
        other = ex.weight_slice(op.attrs["const"]) if ex.mode == "float" else \
            np.broadcast_to(ex.constants[k][op.attrs["const_c"]], x.shape)
        run_add(ex, op, v, other)

    def c_context(self, e, op):
        return add_context(e, op, e.const[op.attrs["const_c"]])

    def const_bytes(self, op, tensors, cfg):
        return align4(tensors[op.outs[0]].size)

    def stored_weights(self, op, cfg):
        return len(op.attrs["const"]["rows"]) * len(op.attrs["const"]["cols"])
