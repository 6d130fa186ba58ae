"""reduce_requant: the sink turns the reduced int32 head sums into the int8 forecast."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, WeightRef, const_ref, expect_const, fail, quant, shape_of
from ..quant import arith
from ..quant import kernels as K
from ..quant.scheme import to_int32


@dataclass(frozen=True)
class ReduceRequantAttrs:
    bias: WeightRef
    bias_c: str = const_ref()
    mult_c: str = const_ref()
    shift_c: str = const_ref()
    out_offset: int = quant()


@register
class ReduceRequant(OpKind):
    name = "reduce_requant"
    Attrs = ReduceRequantAttrs

    def check(self, op, tensors, consts):
        (n,) = shape_of(tensors, op.ins[0], "in", 1)
        if shape_of(tensors, op.outs[0], "out", 1) != (n,):
            fail("out", f"tensor {op.outs[0]} must have {n} values, as {op.ins[0]}")
        for f in ("bias_c", "mult_c", "shift_c"):
            expect_const(consts, op.attrs[f], f, (n,), "int32")

    def quantize(self, qc, op, stem):
        last_x = qc.q[f"l{qc.cfg.layers}.x"]
        so = qc.qp[op.outs[0]]
        m, s = arith.quantize_multiplier_array(last_x.scale * qc.head_scale / so.scale)
        op.attrs.update(bias_c=qc.add(f"{stem}_b", to_int32(qc.weight(op.attrs["bias"]) / (last_x.scale * qc.head_scale))),
                        mult_c=qc.add(f"{stem}_mult", m.astype(np.int32)),
                        shift_c=qc.add(f"{stem}_shift", s.astype(np.int32)), out_offset=so.zero_point)

    def run(self, ex, k, op, v):
        part = v[op.ins[0]]
        if ex.mode == "float":
            v[op.outs[0]] = part + ex.weight_slice(op.attrs["bias"])
        else:
            C, a = ex.constants[k], op.attrs
            v[op.outs[0]] = K.reduce_requant_s32_s8([part], None, C[a["bias_c"]], C[a["mult_c"]], C[a["shift_c"]],
                                                    a["out_offset"])

    def c_context(self, e, op):
        a = op.attrs
        return {"in": e.tensor(op.ins[0]), "out": e.tensor(op.outs[0]), "n": e.shape(op.outs[0])[0],
                "bias": e.const[a["bias_c"]], "mult": e.const[a["mult_c"]], "shift": e.const[a["shift_c"]],
                "out_offset": a["out_offset"]}

    def const_bytes(self, op, tensors, cfg):
        return 3 * 4 * cfg.horizon

    def stored_weights(self, op, cfg):
        return cfg.horizon
