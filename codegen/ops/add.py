"""add: the residual add of two int8 tensors (arm_elementwise_add_s8)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, expect_same, quant
from ..quant import arith
from ..quant import kernels as K

ADD_PARAMS = ("in1_offset", "in1_mult", "in1_shift", "in2_offset", "in2_mult", "in2_shift", "left_shift",
              "out_offset", "out_mult", "out_shift", "act_min", "act_max")


@dataclass(frozen=True, kw_only=True)
class AddAttrs:
    in1_offset: int = quant()
    in1_mult: int = quant()
    in1_shift: int = quant()
    in2_offset: int = quant()
    in2_mult: int = quant()
    in2_shift: int = quant()
    left_shift: int = quant()
    out_offset: int = quant()
    out_mult: int = quant()
    out_shift: int = quant()
    act_min: int = quant()
    act_max: int = quant()


def add_quant_params(s1, s2, so) -> dict:
    """The elementwise add's integer parameters for input scales s1, s2 and output so."""
    p = arith.add_params(s1.scale, s2.scale, so.scale)
    return dict(in1_offset=-s1.zero_point, in1_mult=p["in1_mult"], in1_shift=p["in1_shift"],
                in2_offset=-s2.zero_point, in2_mult=p["in2_mult"], in2_shift=p["in2_shift"],
                left_shift=p["left_shift"], out_offset=so.zero_point, out_mult=p["out_mult"],
                out_shift=p["out_shift"], act_min=-128, act_max=127)


def run_add(ex, op, v, other: np.ndarray) -> None:
    x, a = v[op.ins[0]], op.attrs
    if ex.mode == "float":
        v[op.outs[0]] = x + other
    else:
        v[op.outs[0]] = K.elementwise_add_s8(x, other, *(a[key] for key in ADD_PARAMS))


def add_context(e, op, in2: str) -> dict:
    return dict(in1=e.tensor(op.ins[0]), in2=in2, out=e.tensor(op.outs[0]), size=e.size(op.outs[0]),
                **{key: op.attrs[key] for key in ADD_PARAMS})


@register
class Add(OpKind):
    name = "add"
    Attrs = AddAttrs
    work_unit = "element"

    def check(self, op, tensors, consts):
        expect_same(tensors, op.ins[0], op.ins[1], "in")
        expect_same(tensors, op.ins[0], op.outs[0], "out")

    def quantize(self, qc, op, stem):
        op.attrs.update(add_quant_params(qc.qp[op.ins[0]], qc.qp[op.ins[1]], qc.qp[op.outs[0]]))

    def run(self, ex, k, op, v):
        run_add(ex, op, v, v[op.ins[1]])

    def c_context(self, e, op):
        return add_context(e, op, e.tensor(op.ins[1]))
