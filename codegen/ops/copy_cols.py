"""copy_cols: places a head's output columns into the node's block of the attention output."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, fail, shape_of


@dataclass(frozen=True)
class CopyColsAttrs:
    dst_col: int


@register
class CopyCols(OpKind):
    name = "copy_cols"
    Attrs = CopyColsAttrs

    def check(self, op, tensors, consts):
        rows, c = shape_of(tensors, op.ins[0], "in", 2)
        orows, total = shape_of(tensors, op.outs[0], "out", 2)
        d = op.attrs["dst_col"]
        if orows != rows or d < 0 or d + c > total:
            fail("dst_col", f"columns {d}..{d + c - 1} of {op.ins[0]} {[rows, c]} do not fit into {op.outs[0]} "
                            f"{[orows, total]}")

    def run(self, ex, k, op, v):
        src, name = v[op.ins[0]], op.outs[0]
        if name not in v:
            v[name] = np.zeros((src.shape[0],) + ex.tensors[k][name].shape, src.dtype)
        c = op.attrs["dst_col"]
        v[name][..., c:c + src.shape[-1]] = src

    def c_context(self, e, op):
        rows, src_cols = e.shape(op.ins[0])
        return {"in": e.tensor(op.ins[0]), "out": e.tensor(op.outs[0]), "rows": rows, "src_cols": src_cols,
                "dst_cols": e.shape(op.outs[0])[1], "dst_col": op.attrs["dst_col"]}
