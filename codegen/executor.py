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

from .ops import REGISTRY, kind_of
from .plan.structure import Op, SomegatherPoint, Tensor

SYNC_OPS = tuple(sorted(name for name, k in REGISTRY.items() if k.sync))
"""The communication op kinds: every node stops at its next one and the messages are exchanged."""


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
    quantised constants the ops refer to by name. What an op computes is its kind's
    (codegen/ops/, :meth:`OpKind.run`); this class schedules and exchanges.
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
        self._kinds = [[kind_of(op) for op in node_ops] for node_ops in ops]
        self._observe: Callable[[int, str, np.ndarray], None] | None = None
        self.output_value: np.ndarray | None = None

    # ------------------------------------------------------------------ public
    def run(self, x: np.ndarray, lost: dict[int, np.ndarray] | None = None, record: bool = False,
            observe: Callable[[int, str, np.ndarray], None] | None = None) -> RunResult:
        """Run a batch of input windows ``x`` [batch, lookback] (int8 or float)."""
        B = x.shape[0]
        vals: list[dict[str, np.ndarray]] = [{"input": x} for _ in range(self.devices)]
        pcs = [0] * self.devices
        payloads: dict[tuple[int, int], np.ndarray] = {}
        delivered: dict[tuple[int, int, int], np.ndarray] = {}
        self._observe, self.output_value = observe, None
        while True:
            for k in range(self.devices):
                ops, kinds = self.ops[k], self._kinds[k]
                while pcs[k] < len(ops) and not kinds[pcs[k]].sync:
                    op = ops[pcs[k]]
                    kinds[pcs[k]].run(self, k, op, vals[k])
                    for name in op.outs:
                        self.note(k, name, vals[k][name])
                    pcs[k] += 1
            if all(pcs[k] == len(self.ops[k]) for k in range(self.devices)):
                break
            sync = [self.ops[k][pcs[k]] for k in range(self.devices)]
            sg_ids = {op.attrs["sg"] for op in sync}
            if len(sg_ids) != 1:
                raise AssertionError(f"nodes disagree on the next communication: {sorted(sg_ids)}")
            sg = self.sgs[sg_ids.pop()]
            self._exchange(sg, sync, vals, B, lost.get(sg.sg) if lost else None, payloads, delivered)
            for k in range(self.devices):
                pcs[k] += 1
        if self.output_value is None:
            raise AssertionError("no node produced the output")
        return RunResult(self.output_value, payloads, delivered, vals if record else None)

    def note(self, k: int, name: str, value: np.ndarray) -> None:
        """An op of node k produced tensor ``name`` (calibration observes every one)."""
        if self._observe:
            self._observe(k, name, value)

    def weight_slice(self, ref: dict) -> np.ndarray:
        """The float weight slice an op attribute refers to (rows, and cols for matrices)."""
        key = (ref["name"], tuple(ref["rows"]), tuple(ref.get("cols", ())))
        w = self._wcache.get(key)
        if w is None:
            full = np.asarray(self.weights[ref["name"]], dtype=np.float32)
            w = full[np.ix_(ref["rows"], ref["cols"])] if "cols" in ref else full[ref["rows"]]
            self._wcache[key] = w
        return w

    # --------------------------------------------------------------- exchange
    def _exchange(self, sg: SomegatherPoint, sync: list[Op], vals: list[dict[str, np.ndarray]], B: int,
                  lost: np.ndarray | None, payloads: dict, delivered: dict) -> None:
        messages: dict[int, np.ndarray] = {}
        for k, op in enumerate(sync):
            msg = kind_of(op).message(self, k, op, vals[k], B)
            if msg is not None:
                messages[k] = msg
        for j, msg in messages.items():
            payloads[(sg.sg, j)] = _as_bytes(msg) if self.mode == "int8" else msg.reshape(B, -1)
        for k, op in enumerate(sync):

            def got(j: int, k: int = k) -> np.ndarray:
                ok = np.ones(B, dtype=bool) if lost is None else ~lost[:, k, j]
                delivered[(sg.sg, k, j)] = ok
                return ok

            kind_of(op).receive(self, k, op, vals[k], messages, got, B)


def _as_bytes(a: np.ndarray) -> np.ndarray:
    """Message bytes as they go on air: row-major, int32 little-endian."""
    B = a.shape[0]
    if a.dtype == np.int32:
        return np.ascontiguousarray(a.astype("<i4")).view(np.uint8).reshape(B, -1)
    return np.ascontiguousarray(a).view(np.uint8).reshape(B, -1)
