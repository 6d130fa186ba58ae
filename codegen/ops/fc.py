"""fc: a fully connected layer on int8 rows (arm_fully_connected_per_channel_s8), optional ReLU."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, WeightRef, align4, const_ref, expect_const, fail, quant, shape_of
from ..quant import arith
from ..quant import kernels as K
from ..quant.scheme import quantize_weight_rows, to_int32


@dataclass(frozen=True)
class FcAttrs:
    weight: WeightRef
    bias: WeightRef
    relu: bool
    weight_c: str = const_ref()
    bias_c: str = const_ref()
    mult_c: str = const_ref()
    shift_c: str = const_ref()
    in_offset: int = quant()
    out_offset: int = quant()
    act_min: int = quant()
    act_max: int = quant()


@register
class Fc(OpKind):
    name = "fc"
    Attrs = FcAttrs
    work_unit = "MAC"

    def check(self, op, tensors, consts):
        rows, k = shape_of(tensors, op.ins[0], "in", 2)
        orows, n = shape_of(tensors, op.outs[0], "out", 2)
        if orows != rows:
            fail("out", f"tensor {op.outs[0]} has {orows} rows, its input {op.ins[0]} {rows}")
        a = op.attrs
        expect_const(consts, a["weight_c"], "weight_c", (n, k), "int8")
        for f in ("bias_c", "mult_c", "shift_c"):
            expect_const(consts, a[f], f, (n,), "int32")

    def quantize(self, qc, op, stem):
        a = op.attrs
        si, so = qc.qp[op.ins[0]], qc.qp[op.outs[0]]
        wq, sw = quantize_weight_rows(qc.weight(a["weight"]), qc.row_scale(a["weight"]))
        m, s = arith.quantize_multiplier_array(si.scale * sw / so.scale)
        a.update(weight_c=qc.add(f"{stem}_w", wq), bias_c=qc.add(f"{stem}_b", to_int32(qc.weight(a["bias"]) /
                                                                                      (si.scale * sw))),
                 mult_c=qc.add(f"{stem}_mult", m.astype(np.int32)), shift_c=qc.add(f"{stem}_shift", s.astype(np.int32)),
                 in_offset=-si.zero_point, out_offset=so.zero_point,
                 act_min=max(-128, so.zero_point) if a["relu"] else -128, act_max=127)

    def run(self, ex, k, op, v):
        a, x = op.attrs, v[op.ins[0]]
        if ex.mode == "float":
            y = x @ ex.weight_slice(a["weight"]).T + ex.weight_slice(a["bias"])
            v[op.outs[0]] = np.maximum(y, 0) if a["relu"] else y
        else:
            C = ex.constants[k]
            v[op.outs[0]] = K.fully_connected_s8(x, C[a["weight_c"]], C[a["bias_c"]], a["in_offset"], 0,
                                                 a["out_offset"], C[a["mult_c"]], C[a["shift_c"]],
                                                 a["act_min"], a["act_max"])

    def c_context(self, e, op):
        a = op.attrs
        rows, kk = e.shape(op.ins[0])
        stored = e.stored_shape(a["weight_c"])
        # an elastic mode that uses the first kk columns of longer stored rows: cisl_fc_strided_s8
        return {"in": e.tensor(op.ins[0]), "out": e.tensor(op.outs[0]), "rows": rows, "k": kk,
                "stride": stored[1] if stored[1] != kk or a["weight_c"] in e.strided else 0,
                "n": e.shape(op.outs[0])[1], "weight": e.const[a["weight_c"]], "bias": e.const[a["bias_c"]],
                "mult": e.const[a["mult_c"]], "shift": e.const[a["shift_c"]], "in_offset": a["in_offset"],
                "out_offset": a["out_offset"], "act_min": a["act_min"], "act_max": a["act_max"]}

    def const_bytes(self, op, tensors, cfg):
        rows, cols = len(op.attrs["weight"]["rows"]), len(op.attrs["weight"]["cols"])
        return align4(rows * cols) + 3 * 4 * rows

    def stored_weights(self, op, cfg):
        return len(op.attrs["weight"]["rows"]) * (len(op.attrs["weight"]["cols"]) + 1)

    def gemm_shape(self, op, shape):
        rows, k = shape[op.ins[0]]
        return rows, k, shape[op.outs[0]][1]
