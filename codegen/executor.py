"""Execute a plan in numpy: in float (for calibration) or in int8 (the bit-exact oracle).

Both modes walk the same per-node schedules that the C emitter turns into code, and run all nodes
in lock step: every node runs until its next communication op, then the messages are exchanged.
Values carry a leading batch dimension, so one call evaluates many input windows at once.

Lost messages: ``lost[sg]`` is an optional boolean array [batch, receiver, sender]; a lost message
is handled exactly as on the device: its columns are filled with the zero point (0.0 in float) and
marked invalid, so they contribute nothing and LayerNorm statistics skip them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .plan.structure import Op, SomegatherPoint, Tensor
from .quant import arith
from .quant import kernels as K

SYNC_OPS = ("somegather", "send", "reduce_recv")


@dataclass
class RunResult:
    output: np.ndarray  # [batch, horizon]: int8 (int8 mode) or float
    payloads: dict[tuple[int, int], np.ndarray]  # (sg, sender) -> [batch, nbytes] uint8 (int8 mode) / float
    delivered: dict[tuple[int, int, int], np.ndarray] = field(default_factory=dict)  # (sg, recv, send) -> [batch] bool
    tensors: list[dict[str, np.ndarray]] | None = None  # per node, when recorded


class PlanExecutor:
    """Runs the schedules of all nodes. ``mode`` is "float" or "int8".

    ``tensors[k]``/``ops[k]`` describe node k. In float mode ``weights`` are the model's float
    weights (sliced per op as the op's attributes say); in int8 mode ``constants`` holds the
    quantised constants the ops refer to by name.
    """

    def __init__(self, tensors: list[dict[str, Tensor]], ops: list[list[Op]], sgs: list[SomegatherPoint],
                 mode: str, weights: dict[str, np.ndarray] | None = None,
                 constants: list[dict[str, np.ndarray]] | None = None):
        if mode not in ("float", "int8"):
            raise ValueError(mode)
        self.tensors, self.ops, self.sgs, self.mode = tensors, ops, sgs, mode
        self.weights = weights or {}
        self.constants = constants or [{} for _ in ops]
        self.devices = len(ops)
        self._wcache: dict[tuple, np.ndarray] = {}

    # ------------------------------------------------------------------ public
    def run(self, x: np.ndarray, lost: dict[int, np.ndarray] | None = None, record: bool = False,
            observe: Callable[[int, str, np.ndarray], None] | None = None) -> RunResult:
        """Run a batch of input windows ``x`` [batch, lookback] (int8 or float)."""
        B = x.shape[0]
        vals: list[dict[str, np.ndarray]] = [{"input": x} for _ in range(self.devices)]
        pcs = [0] * self.devices
        payloads: dict[tuple[int, int], np.ndarray] = {}
        delivered: dict[tuple[int, int, int], np.ndarray] = {}
        output = None
        while True:
            for k in range(self.devices):
                ops = self.ops[k]
                while pcs[k] < len(ops) and ops[pcs[k]].kind not in SYNC_OPS:
                    op = ops[pcs[k]]
                    self._exec(k, op, vals[k], observe)
                    if op.kind == "output":
                        output = vals[k][op.ins[0]]
                    pcs[k] += 1
            if all(pcs[k] == len(self.ops[k]) for k in range(self.devices)):
                break
            sync = [self.ops[k][pcs[k]] for k in range(self.devices)]
            sg_ids = {op.attrs["sg"] for op in sync}
            if len(sg_ids) != 1:
                raise AssertionError(f"nodes disagree on the next communication: {sorted(sg_ids)}")
            sg = self.sgs[sg_ids.pop()]
            self._exchange(sg, sync, vals, B, lost.get(sg.sg) if lost else None, payloads, delivered, observe)
            for k in range(self.devices):
                pcs[k] += 1
        if output is None:
            raise AssertionError("no node produced the output")
        return RunResult(output, payloads, delivered, vals if record else None)

    # --------------------------------------------------------------- exchange
    def _exchange(self, sg: SomegatherPoint, sync: list[Op], vals: list[dict[str, np.ndarray]], B: int,
                  lost: np.ndarray | None, payloads: dict, delivered: dict, observe) -> None:
        messages: dict[int, np.ndarray] = {}
        for k, op in enumerate(sync):
            if op.kind == "somegather" and op.attrs["send"]:
                own = vals[k][op.ins[0]]
                msg = _apply_runs(np.zeros((B,) + self.tensors[k][op.attrs["send"]].shape, own.dtype),
                                  own, op.attrs["pack_runs"])
                vals[k][op.attrs["send"]] = msg
                messages[k] = msg
            elif op.kind == "send":
                messages[k] = vals[k][op.ins[0]]
        for j, msg in messages.items():
            payloads[(sg.sg, j)] = _as_bytes(msg) if self.mode == "int8" else msg.reshape(B, -1)
        for k, op in enumerate(sync):
            if op.kind == "send":
                continue

            def got(j: int) -> np.ndarray:
                ok = np.ones(B, dtype=bool) if lost is None else ~lost[:, k, j]
                delivered[(sg.sg, k, j)] = ok
                return ok

            if op.kind == "reduce_recv":
                acc = vals[k][op.ins[0]].copy()
                for j in op.attrs["senders"]:
                    ok = got(j)
                    part = np.where(ok[:, None], messages[j], 0)
                    acc = arith.wrap32(acc.astype(np.int64) + part) if self.mode == "int8" else acc + part
                vals[k][op.outs[0]] = acc.astype(np.int32) if self.mode == "int8" else acc
                continue
            # somegather: own columns, then every sender's message or the fill value
            t_out = self.tensors[k][op.attrs["gathered"]]
            own = vals[k][op.ins[0]]
            fill = op.attrs.get("fill", 0) if self.mode == "int8" else 0.0
            out = np.full((B,) + t_out.shape, fill, dtype=own.dtype)
            out = _apply_runs(out, own, op.attrs["own_runs"])
            valid = np.ones((B, t_out.shape[-1]), dtype=bool)
            for r in op.attrs["recv"]:
                j = r["from"]
                ok = got(j)
                msg = messages[j]
                for s, dcol, n in r["runs"]:
                    if ok.all():
                        out[..., dcol:dcol + n] = msg[..., s:s + n]
                    else:
                        out[..., dcol:dcol + n] = np.where(ok[:, None, None], msg[..., s:s + n], out[..., dcol:dcol + n])
                    valid[:, dcol:dcol + n] &= ok[:, None]
            vals[k][op.attrs["gathered"]] = out
            if op.attrs["valid"]:
                vals[k][op.attrs["valid"]] = valid
            if observe:
                observe(k, op.attrs["gathered"], out)

    # -------------------------------------------------------------- one op
    def _exec(self, k: int, op: Op, v: dict[str, np.ndarray], observe) -> None:
        a = op.attrs
        C = self.constants[k]
        f = self.mode == "float"
        kind = op.kind
        if kind in ("block_begin", "block_end", "output", "finish"):
            return
        if kind == "gather":
            idx = np.asarray(a["index"]) if f else C[a["index_c"]].astype(np.int64)
            v[op.outs[0]] = v[op.ins[0]][:, idx].reshape((-1,) + self.tensors[k][op.outs[0]].shape)
        elif kind == "fc":
            x = v[op.ins[0]]
            if f:
                w = self._wslice(a["weight"])
                y = x @ w.T + self._wslice(a["bias"])
                v[op.outs[0]] = np.maximum(y, 0) if a["relu"] else y
            else:
                v[op.outs[0]] = K.fully_connected_s8(
                    x, C[a["weight_c"]], C[a["bias_c"]], a["in_offset"], 0,
                    a["out_offset"], C[a["mult_c"]], C[a["shift_c"]],
                    a["act_min"], a["act_max"])
        elif kind in ("add", "add_const"):
            x = v[op.ins[0]]
            other = v[op.ins[1]] if kind == "add" else (
                self._wslice(a["const"]) if f else np.broadcast_to(C[a["const_c"]], x.shape))
            if f:
                v[op.outs[0]] = x + other
            else:
                v[op.outs[0]] = K.elementwise_add_s8(
                    x, other, a["in1_offset"], a["in1_mult"], a["in1_shift"], a["in2_offset"], a["in2_mult"],
                    a["in2_shift"], a["left_shift"], a["out_offset"], a["out_mult"], a["out_shift"],
                    a["act_min"], a["act_max"])
        elif kind == "layernorm":
            x, valid = v[op.ins[0]], v[op.ins[1]]
            if f:
                v[op.outs[0]] = _float_layernorm(x, valid, self._wslice(a["gamma"]), self._wslice(a["beta"]), a["eps"])
            else:
                v[op.outs[0]] = K.layernorm_s8(x, valid, a["zp_in"], a["zp_out"], a["eps_q"],
                                               C[a["gamma_c"]], C[a["beta_c"]])
        elif kind == "bmm":
            lhs, rhs = v[op.ins[0]], v[op.ins[1]]
            if f:
                v[op.outs[0]] = a["alpha"] * (lhs @ np.swapaxes(rhs, -1, -2))
            else:
                v[op.outs[0]] = K.batch_matmul_s8(lhs, rhs, a["lhs_offset"], a["rhs_offset"], a["out_offset"],
                                                  a["mult"], a["shift"], a["act_min"], a["act_max"])
        elif kind == "softmax":
            x = v[op.ins[0]]
            if f:
                e = np.exp(x - x.max(axis=-1, keepdims=True))
                v[op.outs[0]] = e / e.sum(axis=-1, keepdims=True)
            else:
                v[op.outs[0]] = K.softmax_s8(x, a["mult"], a["shift"], a["diff_min"])
        elif kind == "transpose":
            v[op.outs[0]] = np.ascontiguousarray(np.swapaxes(v[op.ins[0]], -1, -2))
        elif kind == "copy_cols":
            src = v[op.ins[0]]
            name = op.outs[0]
            if name not in v:
                v[name] = np.zeros((src.shape[0],) + self.tensors[k][name].shape, src.dtype)
            c = a["dst_col"]
            v[name][..., c:c + src.shape[-1]] = src
        elif kind == "fc_s32":
            x = v[op.ins[0]].reshape(v[op.ins[0]].shape[0], -1)
            if f:
                v[op.outs[0]] = x @ self._wslice(a["weight"]).T
            else:
                v[op.outs[0]] = K.fc_s8_s32(x, C[a["weight_c"]], a["in_offset"])
        elif kind == "reduce_requant":
            part = v[op.ins[0]]
            if f:
                v[op.outs[0]] = part + self._wslice(a["bias"])
            else:
                v[op.outs[0]] = K.reduce_requant_s32_s8(
                    [part], None, C[a["bias_c"]], C[a["mult_c"]],
                    C[a["shift_c"]], a["out_offset"])
        else:
            raise AssertionError(f"unknown op kind {kind}")
        if observe:
            for name in op.outs:
                observe(k, name, v[name])

    def _wslice(self, ref: dict) -> np.ndarray:
        """The float weight slice an op attribute refers to (rows, and cols for matrices)."""
        key = (ref["name"], tuple(ref["rows"]), tuple(ref.get("cols", ())))
        w = self._wcache.get(key)
        if w is None:
            full = np.asarray(self.weights[ref["name"]], dtype=np.float32)
            w = full[np.ix_(ref["rows"], ref["cols"])] if "cols" in ref else full[ref["rows"]]
            self._wcache[key] = w
        return w


def _apply_runs(dst: np.ndarray, src: np.ndarray, runs: list[list[int]]) -> np.ndarray:
    for s, d, n in runs:
        dst[..., d:d + n] = src[..., s:s + n]
    return dst


def _as_bytes(a: np.ndarray) -> np.ndarray:
    """Message bytes as they go on air: row-major, int32 little-endian."""
    B = a.shape[0]
    if a.dtype == np.int32:
        return np.ascontiguousarray(a.astype("<i4")).view(np.uint8).reshape(B, -1)
    return np.ascontiguousarray(a).view(np.uint8).reshape(B, -1)


def _float_layernorm(x: np.ndarray, valid: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the valid columns only; invalid columns give 0 (they contribute nothing)."""
    m = valid[:, None, :].astype(x.dtype)
    n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
    mean = (x * m).sum(axis=-1, keepdims=True) / n
    var = (((x - mean) * m) ** 2).sum(axis=-1, keepdims=True) / n
    return ((x - mean) / np.sqrt(var + eps) * gamma + beta) * m
