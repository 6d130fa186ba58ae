"""rescale: scale what arrived from the other nodes by expected / delivered columns (issue 16).

After a somegather (h and z points) or the LayerNorm that follows one (x and y points), the columns a
node received from the others are multiplied by E / R: E the columns it expects from them, R the
columns that arrived this round (the valid mask says which). A consumer then sees the same input mass
whatever the loss — like inverted dropout — so a model trained with message dropout also holds on a
loss-free link, and a lost message no longer shrinks every output. Own columns are never scaled; with
nothing or everything delivered the op changes nothing. In place, same quantisation (a received value
times E / R saturates at the int8 range).

int8: y = clamp(zp + round((x − zp) · E / R)), rounding half away from zero (cisl_rescale_s8).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, fail, quant, shape_of
from ..quant.kernels import rescale_delivered, rescale_s8


@dataclass(frozen=True)
class RescaleAttrs:
    own_lo: int = 0  # the node's own columns are [own_lo, own_hi) of the tensor; the others are received
    own_hi: int = 0
    zero_point: int = quant()


def rescale_float(x: np.ndarray, valid: np.ndarray, own_lo: int, own_hi: int) -> np.ndarray:
    cols = x.shape[-1]
    expected = cols - (own_hi - own_lo)
    got = rescale_delivered(valid, own_lo, own_hi)
    factor = np.where((got > 0) & (got < expected), expected / np.maximum(got, 1), 1.0)  # [batch]
    cross = np.ones(cols, dtype=bool)
    cross[own_lo:own_hi] = False
    sel = np.asarray(valid, dtype=bool) & cross[None, :]
    return np.where(sel[:, None, :], x * factor[:, None, None], x).astype(x.dtype)


@register
class Rescale(OpKind):
    name = "rescale"
    Attrs = RescaleAttrs
    work_unit = "element"

    def check(self, op, tensors, consts):
        a = op.attrs
        rows, cols = shape_of(tensors, op.ins[0], "in", 2)
        if op.outs != op.ins[:1]:
            fail("out", f"rescale works in place: its output must be its input {op.ins[0]}")
        if shape_of(tensors, op.ins[1], "in", 1) != (cols,):
            fail("in", f"the valid mask {op.ins[1]} must have {cols} entries, one per column of {op.ins[0]}")
        if not 0 <= a["own_lo"] <= a["own_hi"] <= cols:
            fail("own_lo", f"own columns [{a['own_lo']}, {a['own_hi']}) must lie inside the {cols} columns")

    def quantize(self, qc, op, stem):
        op.attrs["zero_point"] = qc.qp[op.ins[0]].zero_point

    def run(self, ex, k, op, v):
        a = op.attrs
        x, valid = v[op.ins[0]], v[op.ins[1]]
        if x.ndim == 2:  # one sample
            x, valid = x[None], np.asarray(valid)[None]
        valid = np.broadcast_to(np.asarray(valid, dtype=bool), (x.shape[0], x.shape[-1]))
        if ex.mode == "float":
            y = rescale_float(x, valid, a["own_lo"], a["own_hi"])
        else:
            y = rescale_s8(x, valid, a["own_lo"], a["own_hi"], a["zero_point"])
        v[op.outs[0]] = y.reshape(v[op.ins[0]].shape)

    def c_context(self, e, op):
        a = op.attrs
        rows, cols = e.shape(op.ins[0])
        return {"x": e.tensor(op.ins[0]), "valid": e.tensor(op.ins[1]), "rows": rows, "cols": cols,
                "own_lo": a["own_lo"], "own_hi": a["own_hi"], "zero_point": a["zero_point"]}
