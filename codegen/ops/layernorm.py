"""layernorm: device-local LayerNorm over the valid columns of each row (cisl kernel)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, WeightRef, const_ref, expect_const, fail, quant, shape_of
from ..quant import arith
from ..quant import kernels as K


@dataclass(frozen=True)
class LayerNormAttrs:
    gamma: WeightRef
    beta: WeightRef
    eps: float
    zp_in: int = quant()
    zp_out: int = quant()
    eps_q: int = quant()
    gamma_c: str = const_ref()
    beta_c: str = const_ref()


def float_layernorm(x: np.ndarray, valid: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the valid columns only; invalid columns give 0 (they contribute nothing)."""
    m = valid[:, None, :].astype(x.dtype)
    n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
    mean = (x * m).sum(axis=-1, keepdims=True) / n
    var = (((x - mean) * m) ** 2).sum(axis=-1, keepdims=True) / n
    return ((x - mean) / np.sqrt(var + eps) * gamma + beta) * m


@register
class LayerNorm(OpKind):
    name = "layernorm"
    Attrs = LayerNormAttrs
    work_unit = "element"

    def check(self, op, tensors, consts):
        rows, cols = shape_of(tensors, op.ins[0], "in", 2)
        if shape_of(tensors, op.ins[1], "in", 1) != (cols,):
            fail("in", f"the valid mask {op.ins[1]} must have {cols} entries, one per column of {op.ins[0]}")
        if shape_of(tensors, op.outs[0], "out") != (rows, cols):
            fail("out", f"tensor {op.outs[0]} must have the input's shape {[rows, cols]}")
        for f in ("gamma_c", "beta_c"):
            expect_const(consts, op.attrs[f], f, (cols,), "int32")

    def quantize(self, qc, op, stem):
        a = op.attrs
        si, so = qc.qp[op.ins[0]], qc.qp[op.outs[0]]
        eps_q, gq, bq = arith.layernorm_params(si.scale, so.scale, qc.weight(a["gamma"]), qc.weight(a["beta"]),
                                               a["eps"])
        a.update(zp_in=si.zero_point, zp_out=so.zero_point, eps_q=int(eps_q),
                 gamma_c=qc.add(f"{stem}_gamma", gq.astype(np.int32)), beta_c=qc.add(f"{stem}_beta", bq.astype(np.int32)))

    def run(self, ex, k, op, v):
        a = op.attrs
        x, valid = v[op.ins[0]], v[op.ins[1]]
        if ex.mode == "float":
            v[op.outs[0]] = float_layernorm(x, valid, ex.weight_slice(a["gamma"]), ex.weight_slice(a["beta"]), a["eps"])
        else:
            C = ex.constants[k]
            v[op.outs[0]] = K.layernorm_s8(x, valid, a["zp_in"], a["zp_out"], a["eps_q"], C[a["gamma_c"]],
                                           C[a["beta_c"]])

    def c_context(self, e, op):
        a = op.attrs
        rows, cols = e.shape(op.ins[0])
        return {"in": e.tensor(op.ins[0]), "out": e.tensor(op.outs[0]), "rows": rows, "cols": cols,
                "valid": e.tensor(op.ins[1]), "zp_in": a["zp_in"], "zp_out": a["zp_out"], "eps_q": a["eps_q"],
                "gamma": e.const[a["gamma_c"]], "beta": e.const[a["beta_c"]]}

    def const_bytes(self, op, tensors, cfg):
        return 2 * 4 * len(op.attrs["gamma"]["rows"])

    def stored_weights(self, op, cfg):
        return 2 * len(op.attrs["gamma"]["rows"])
