"""Post-training int8 quantisation of a plan (TFLite/CMSIS-NN scheme, codegen/quant/scheme.py).

Weights: per-channel symmetric int8 in [-127, 127]. Activations: per-tensor asymmetric int8 from
min/max over the calibration set. Biases: int32 at scale s_in·s_w. Multipliers: TFLite
QuantizeMultiplier with double rounding. A logical tensor shared across devices (its ``qgroup``)
gets one set of parameters for all of them (docs/design/decisions.md §5). What each op needs is
its kind's business (codegen/ops/); this module calibrates and walks the schedules.
"""

from __future__ import annotations

import numpy as np

from ..executor import PlanExecutor
from ..ops import kind_of
from ..ops.base import QuantContext, c_ident
from ..quant.scheme import (SOFTMAX_SCALE, SOFTMAX_ZP, QParams, qparams_from_range, quantize_weight_rows,
                            round_half_away)
from .structure import Structure

__all__ = ["QParams", "calibrate", "qparams_from_range", "quantize", "quantize_weight_rows", "round_half_away"]


def calibrate(st: Structure | list[Structure], weights: dict[str, np.ndarray], windows: np.ndarray,
              batch: int = 64) -> dict[str, QParams]:
    """Run the float plan on the calibration windows and derive every qgroup's parameters. A list
    of structures (an elastic model's modes): each qgroup's range covers all of them, so every
    mode shares one set of parameters."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for one in st if isinstance(st, list) else [st]:
        _observe_ranges(one, weights, windows, batch, lo, hi)
    q = {g: qparams_from_range(lo[g], hi[g]) for g in lo}
    q["softmax"] = QParams(SOFTMAX_SCALE, SOFTMAX_ZP)
    pos = weights["pos"]
    q["pos"] = qparams_from_range(pos.min(), pos.max())
    return q


def _observe_ranges(st: Structure, weights: dict[str, np.ndarray], windows: np.ndarray, batch: int,
                    lo: dict[str, float], hi: dict[str, float]) -> None:
    """Widen lo/hi[qgroup] to what the float plan computes on ``windows``."""
    qgroup = [{n: t.qgroup for n, t in node.tensors.items()} for node in st.nodes]

    def observe(k: int, name: str, value: np.ndarray) -> None:
        g = qgroup[k].get(name)
        if g is None or value.dtype == bool:
            return
        lo[g] = min(lo.get(g, np.inf), float(value.min()))
        hi[g] = max(hi.get(g, -np.inf), float(value.max()))

    ex = PlanExecutor([n.tensors for n in st.nodes], [n.ops for n in st.nodes], st.sgs, "float", weights=weights)
    for i in range(0, len(windows), batch):
        x = np.asarray(windows[i:i + batch], dtype=np.float32)
        observe(0, "input", x)
        r = ex.run(x, observe=observe)
        lo["output"] = min(lo.get("output", np.inf), float(r.output.min()))
        hi["output"] = max(hi.get("output", -np.inf), float(r.output.max()))


def quantize(st: Structure, weights: dict[str, np.ndarray], q: dict[str, QParams],
             row_scale=None) -> list[dict[str, np.ndarray]]:
    """Fill every op's integer attributes in place; return each node's constants by name.
    ``row_scale(ref)``: the per-row weight scales an fc's rows must use (None: their own)."""
    consts: list[dict[str, np.ndarray]] = []

    def weight(ref: dict) -> np.ndarray:
        full = np.asarray(weights[ref["name"]], dtype=np.float64)
        return full[np.ix_(ref["rows"], ref["cols"])] if "cols" in ref else full[ref["rows"]]

    # The head's per-channel scales are global (over the whole row), so partial sums from every
    # device share one scale per output channel and add exactly.
    _, head_scale = quantize_weight_rows(np.asarray(weights["head.weight"], dtype=np.float64))

    for node in st.nodes:
        qc = QuantContext(st.cfg, q, {name: q[t.qgroup] for name, t in node.tensors.items() if t.qgroup}, weight,
                          head_scale, {}, **({"row_scale": row_scale} if row_scale is not None else {}))
        for op in node.ops:
            # constants are named after the tensor the op produces (node-local C names)
            kind_of(op).quantize(qc, op, c_ident(op.outs[0]) if op.outs else "")
        consts.append(qc.consts)
    return consts
