"""gather: the patches of the input window (an index table into the input)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, align4, const_ref, expect_const, fail, shape_of


@dataclass(frozen=True)
class GatherAttrs:
    index: list[int]
    index_c: str = const_ref()


@register
class Gather(OpKind):
    name = "gather"
    Attrs = GatherAttrs

    def check(self, op, tensors, consts):
        n_in = int(np.prod(shape_of(tensors, op.ins[0], "in")))
        n_out = int(np.prod(shape_of(tensors, op.outs[0], "out")))
        expect_const(consts, op.attrs["index_c"], "index_c", (n_out,), "uint16")
        if len(op.attrs["index"]) != n_out:
            fail("index", f"has {len(op.attrs['index'])} entries for {n_out} output values")
        if int(consts[op.attrs["index_c"]].max(initial=0)) >= n_in:
            fail("index_c", f"indexes beyond the {n_in} input values")

    def quantize(self, qc, op, stem):
        op.attrs["index_c"] = qc.add(f"{stem}_idx", np.asarray(op.attrs["index"], dtype=np.uint16))

    def run(self, ex, k, op, v):
        idx = np.asarray(op.attrs["index"]) if ex.mode == "float" else \
            ex.constants[k][op.attrs["index_c"]].astype(np.int64)
        v[op.outs[0]] = v[op.ins[0]][:, idx].reshape((-1,) + ex.tensors[k][op.outs[0]].shape)

    def c_context(self, e, op):
        return {"in": e.tensor(op.ins[0]), "out": e.tensor(op.outs[0]), "n": e.size(op.outs[0]),
                "index": e.const[op.attrs["index_c"]]}

    def const_bytes(self, op, tensors, cfg):
        return align4(2 * tensors[op.outs[0]].size)
