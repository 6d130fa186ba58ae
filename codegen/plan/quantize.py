"""Post-training int8 quantisation of a plan (TFLite/CMSIS-NN scheme).

Weights: per-channel symmetric int8 in [-127, 127]. Activations: per-tensor asymmetric int8 from
min/max over the calibration set. Biases: int32 at scale s_in·s_w. Multipliers: TFLite
QuantizeMultiplier with double rounding. A logical tensor shared across devices (its ``qgroup``)
gets one set of parameters for all of them (docs/design/decisions.md §5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..executor import PlanExecutor
from ..quant import arith
from .structure import Structure

SOFTMAX_SCALE, SOFTMAX_ZP = 1.0 / 256.0, -128


@dataclass(frozen=True)
class QParams:
    scale: float
    zero_point: int


def qparams_from_range(lo: float, hi: float) -> QParams:
    """Asymmetric int8 parameters covering [lo, hi] widened to include 0."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-8:
        hi = lo + 1e-8
    scale = (hi - lo) / 255.0
    zp = int(np.clip(round_half_away(-128.0 - lo / scale), -128, 127))
    return QParams(scale, zp)


def round_half_away(x):
    """Round half away from zero (std::round), as TFLite's quantiser does."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def calibrate(st: Structure, weights: dict[str, np.ndarray], windows: np.ndarray,
              batch: int = 64) -> dict[str, QParams]:
    """Run the float plan on the calibration windows and derive every qgroup's parameters."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
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
    q = {g: qparams_from_range(lo[g], hi[g]) for g in lo}
    q["softmax"] = QParams(SOFTMAX_SCALE, SOFTMAX_ZP)
    pos = weights["pos"]
    q["pos"] = qparams_from_range(pos.min(), pos.max())
    return q


def quantize_weight_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8: returns (int8 weights, float scales). All-zero rows get scale 1."""
    amax = np.abs(w).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    q = np.clip(round_half_away(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def _int32(x) -> np.ndarray:
    return np.clip(round_half_away(np.asarray(x, dtype=np.float64)), -2**31, 2**31 - 1).astype(np.int32)


def c_name(tensor: str) -> str:
    """A C-identifier stem for constants belonging to the op producing ``tensor`` (node-local)."""
    return re.sub(r"[^A-Za-z0-9]", "_", tensor.split("@")[0])


def quantize(st: Structure, weights: dict[str, np.ndarray], q: dict[str, QParams]) -> list[dict[str, np.ndarray]]:
    """Fill every op's integer attributes in place; return each node's constants by name."""
    consts: list[dict[str, np.ndarray]] = []

    def W(ref: dict) -> np.ndarray:
        full = np.asarray(weights[ref["name"]], dtype=np.float64)
        return full[np.ix_(ref["rows"], ref["cols"])] if "cols" in ref else full[ref["rows"]]

    # The head's per-channel scales are global (over the whole row), so partial sums from every
    # device share one scale per output channel and add exactly.
    _, head_scale = quantize_weight_rows(np.asarray(weights["head.weight"], dtype=np.float64))

    for node in st.nodes:
        c: dict[str, np.ndarray] = {}
        qp = {name: q[t.qgroup] for name, t in node.tensors.items() if t.qgroup}
        for op in node.ops:
            a = op.attrs
            out = op.outs[0] if op.outs else None
            stem = c_name(out) if out else ""
            if op.kind == "gather":
                c[f"{stem}_idx"] = np.asarray(a["index"], dtype=np.uint16)
                a["index_c"] = f"{stem}_idx"
            elif op.kind == "fc":
                si, so = qp[op.ins[0]], qp[out]
                wq, sw = quantize_weight_rows(W(a["weight"]))
                c[f"{stem}_w"], c[f"{stem}_b"] = wq, _int32(W(a["bias"]) / (si.scale * sw))
                m, s = arith.quantize_multiplier_array(si.scale * sw / so.scale)
                c[f"{stem}_mult"], c[f"{stem}_shift"] = m.astype(np.int32), s.astype(np.int32)
                a.update(weight_c=f"{stem}_w", bias_c=f"{stem}_b", mult_c=f"{stem}_mult", shift_c=f"{stem}_shift",
                         in_offset=-si.zero_point, out_offset=so.zero_point,
                         act_min=max(-128, so.zero_point) if a["relu"] else -128, act_max=127)
            elif op.kind in ("add", "add_const"):
                s1, so = qp[op.ins[0]], qp[out]
                if op.kind == "add":
                    s2 = qp[op.ins[1]]
                else:
                    s2 = q[a["const_qgroup"]]
                    cq = np.clip(round_half_away(W(a["const"]) / s2.scale) + s2.zero_point, -128, 127)
                    c[f"{stem}_c"] = cq.astype(np.int8)
                    a["const_c"] = f"{stem}_c"
                p = arith.add_params(s1.scale, s2.scale, so.scale)
                a.update(in1_offset=-s1.zero_point, in1_mult=p["in1_mult"], in1_shift=p["in1_shift"],
                         in2_offset=-s2.zero_point, in2_mult=p["in2_mult"], in2_shift=p["in2_shift"],
                         left_shift=p["left_shift"], out_offset=so.zero_point, out_mult=p["out_mult"],
                         out_shift=p["out_shift"], act_min=-128, act_max=127)
            elif op.kind == "layernorm":
                si, so = qp[op.ins[0]], qp[out]
                eps_q, gq, bq = arith.layernorm_params(si.scale, so.scale, W(a["gamma"]), W(a["beta"]), a["eps"])
                c[f"{stem}_gamma"], c[f"{stem}_beta"] = gq.astype(np.int32), bq.astype(np.int32)
                a.update(zp_in=si.zero_point, zp_out=so.zero_point, eps_q=int(eps_q),
                         gamma_c=f"{stem}_gamma", beta_c=f"{stem}_beta")
            elif op.kind == "bmm":
                sl, sr, so = qp[op.ins[0]], qp[op.ins[1]], qp[out]
                m, s = arith.quantize_multiplier(sl.scale * sr.scale * a["alpha"] / so.scale)
                a.update(lhs_offset=-sl.zero_point, rhs_offset=-sr.zero_point, out_offset=so.zero_point,
                         mult=int(m), shift=int(s), act_min=-128, act_max=127)
            elif op.kind == "softmax":
                m, s, dmin = arith.softmax_params(qp[op.ins[0]].scale)
                a.update(mult=int(m), shift=int(s), diff_min=int(dmin))
            elif op.kind == "somegather":
                a["fill"] = qp[a["gathered"]].zero_point
            elif op.kind == "fc_s32":
                si = qp[op.ins[0]]
                w = W(a["weight"])
                c[f"{stem}_w"] = np.clip(round_half_away(w / head_scale[:, None]), -127, 127).astype(np.int8)
                a.update(weight_c=f"{stem}_w", in_offset=-si.zero_point)
            elif op.kind == "reduce_requant":
                last_x = q[f"l{st.cfg.layers}.x"]
                so = qp[out]
                c[f"{stem}_b"] = _int32(W(a["bias"]) / (last_x.scale * head_scale))
                m, s = arith.quantize_multiplier_array(last_x.scale * head_scale / so.scale)
                c[f"{stem}_mult"], c[f"{stem}_shift"] = m.astype(np.int32), s.astype(np.int32)
                a.update(bias_c=f"{stem}_b", mult_c=f"{stem}_mult", shift_c=f"{stem}_shift", out_offset=so.zero_point)
        consts.append(c)
    return consts
