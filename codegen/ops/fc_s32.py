"""fc_s32: the head's partial sums over a node's own columns, int32 out (no requantisation).

Its weights use the head's global per-channel scales, so every node's partial sums share one
scale per output and add exactly at the sink (docs/design/decisions.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, WeightRef, align4, const_ref, expect_const, quant, shape_of
from ..quant import kernels as K
from ..quant.scheme import round_half_away


@dataclass(frozen=True)
class FcS32Attrs:
    weight: WeightRef
    weight_c: str = const_ref()
    in_offset: int = quant()


@register
class FcS32(OpKind):
    name = "fc_s32"
    Attrs = FcS32Attrs
    work_unit = "MAC"

    def check(self, op, tensors, consts):
        k = int(np.prod(shape_of(tensors, op.ins[0], "in")))
        (n,) = shape_of(tensors, op.outs[0], "out", 1)
        expect_const(consts, op.attrs["weight_c"], "weight_c", (n, k), "int8")

    def quantize(self, qc, op, stem):
        w = qc.weight(op.attrs["weight"])
        wq = np.clip(round_half_away(w / qc.head_scale[:, None]), -127, 127).astype(np.int8)
        op.attrs.update(weight_c=qc.add(f"{stem}_w", wq), in_offset=-qc.qp[op.ins[0]].zero_point)

    def run(self, ex, k, op, v):
        x = v[op.ins[0]].reshape(v[op.ins[0]].shape[0], -1)
        if ex.mode == "float":
            v[op.outs[0]] = x @ ex.weight_slice(op.attrs["weight"]).T
        else:
            v[op.outs[0]] = K.fc_s8_s32(x, ex.constants[k][op.attrs["weight_c"]], op.attrs["in_offset"])

    def c_context(self, e, op):
        return {"in": e.tensor(op.ins[0]), "out": e.tensor(op.outs[0]), "k": e.size(op.ins[0]),
                "n": e.shape(op.outs[0])[0], "weight": e.const[op.attrs["weight_c"]], "in_offset": op.attrs["in_offset"]}

    def const_bytes(self, op, tensors, cfg):
        return align4(len(op.attrs["weight"]["rows"]) * len(op.attrs["weight"]["cols"]))

    def stored_weights(self, op, cfg):
        return len(op.attrs["weight"]["rows"]) * len(op.attrs["weight"]["cols"])

    def gemm_shape(self, op, shape):
        return 1, int(np.prod(shape[op.ins[0]])), shape[op.outs[0]][0]
