"""plan.json + constants.bin: the compiled plan on disk, and loading it back.

plan.json is the single source of truth for the split; constants.bin holds every node's quantised
constants (weights, biases, multipliers) back to back, located by offsets in plan.json. Both are
written deterministically: the same plan gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from ..modelspec import ModelConfig
from ..ops.schema import check_plan_doc, check_plan_ops
from .format import PLAN_FORMAT, PLAN_VERSION
from ..quant.scheme import QParams
from .structure import Op, SomegatherPoint, Tensor

INDEX_KEYS = ("rows", "cols")  # index lists stored compactly as [[lo, hi), ...] ranges


def to_ranges(idx: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in idx:
        if out and out[-1][1] == i:
            out[-1][1] += 1
        else:
            out.append([i, i + 1])
    return out


def from_ranges(r: list[list[int]]) -> list[int]:
    return [i for lo, hi in r for i in range(lo, hi)]


def _encode_attr(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: (to_ranges(x) if k in INDEX_KEYS else _encode_attr(x)) for k, x in v.items()}
    if isinstance(v, (np.integer,)):
        return int(v)
    return v


def _decode_attr(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: (from_ranges(x) if k in INDEX_KEYS else _decode_attr(x)) for k, x in v.items()}
    return v


@dataclass
class NodeData:
    device: int
    tensors: dict[str, Tensor]
    offsets: dict[str, int]  # arena offset per activation tensor
    arena_bytes: int
    ops: list[Op]
    constants: dict[str, np.ndarray]


@dataclass
class Plan:
    meta: dict[str, Any]  # everything in plan.json except nodes/somegather
    cfg: ModelConfig
    sgs: list[SomegatherPoint]
    nodes: list[NodeData]
    qparams: dict[str, QParams]
    sha256: str = ""

    @property
    def devices(self) -> int:
        return len(self.nodes)

    @property
    def sink(self) -> int:
        return int(self.meta["sink"])

    @property
    def phy(self) -> str:
        """The BLE PHY of the plan's Mixer rounds (its round policy); 2M for plans without rounds."""
        return str((self.meta.get("mixer") or {}).get("policy", {}).get("phy", "2M"))

    @property
    def testbed_nodes(self) -> list[int]:
        """The testbed node each plan node runs on: a planned split's (`cisl compile --split`, which may
        leave testbed nodes out), else plan node k on testbed node k."""
        return [int(t) for t in self.meta.get("testbed_nodes") or range(self.devices)]

    def node_board(self, device: int) -> str:
        """The board node ``device`` runs on or, in a plan for a virtual board (sim, qemu-m4), the
        board it stands in for: its budgets, cycles and power (docs/design/heterogeneous.md). A plan
        compiled for one board names it for every node; a mixed testbed's plan lists one per node."""
        boards = self.meta.get("node_boards")
        if boards:
            return str(boards[device])
        from ..boards import load_board

        return load_board(self.meta["board"]).models or str(self.meta["board"])

    @property
    def mixed_boards(self) -> bool:
        """True if the nodes are not all the same board (a heterogeneous testbed)."""
        return len(set(self.meta.get("node_boards") or [])) > 1

    def quantize_input(self, x: np.ndarray) -> np.ndarray:
        q = self.qparams["input"]
        v = np.sign(x / q.scale) * np.floor(np.abs(x / q.scale) + 0.5) + q.zero_point
        return np.clip(v, -128, 127).astype(np.int8)

    def dequantize_output(self, y: np.ndarray) -> np.ndarray:
        q = self.qparams["output"]
        return (y.astype(np.float64) - q.zero_point) * q.scale


def write_plan(out_dir: Path, meta: dict[str, Any], sgs: list[SomegatherPoint], nodes: list[NodeData],
               qparams: dict[str, QParams]) -> str:
    """Write plan.json and constants.bin into out_dir; return the sha256 of plan.json."""
    blob = bytearray()
    node_json = []
    for n in nodes:
        cindex = {}
        for name in sorted(n.constants):
            arr = np.ascontiguousarray(n.constants[name])
            pad = (-len(blob)) % 8
            blob.extend(b"\0" * pad)
            cindex[name] = {"dtype": str(arr.dtype), "shape": list(arr.shape), "offset": len(blob), "nbytes": arr.nbytes}
            blob.extend(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
        node_json.append({
            "device": n.device,
            "arena_bytes": n.arena_bytes,
            "const_bytes": sum(v["nbytes"] for v in cindex.values()),
            "tensors": {name: {"shape": list(t.shape), "dtype": t.dtype, "qgroup": t.qgroup, "offset": n.offsets[name]}
                        for name, t in n.tensors.items()},
            "constants": cindex,
            "ops": [{"op": op.kind, "in": op.ins, "out": op.outs, **_encode_attr(op.attrs)} for op in n.ops],
        })
    doc = dict(meta)
    doc["qparams"] = {g: {"scale": p.scale, "zero_point": p.zero_point} for g, p in sorted(qparams.items())}
    doc["somegather"] = [{"sg": s.sg, "name": s.name, "layer": s.layer, "point": s.point, "dest": s.dest,
                          "send_cols": [to_ranges(c) for c in s.send_cols], "msg_bytes": s.msg_bytes} for s in sgs]
    doc["nodes"] = node_json
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    (out_dir / "plan.json").write_text(text)
    (out_dir / "constants.bin").write_bytes(bytes(blob))
    return hashlib.sha256(text.encode()).hexdigest()


def load_plan(build_dir: Path) -> Plan:
    """Load build_dir/plan.json and constants.bin; one-line UserError if they are not usable."""
    path = Path(build_dir) / "plan.json"
    if Path(build_dir).is_file():
        raise UserError(f"{build_dir}: a file, not a build folder; give the folder `cisl compile -o` wrote")
    if not path.is_file():
        raise UserError(f"{path}: no plan found; run `cisl compile MODEL.onnx -o {build_dir}` first")
    raw = path.read_bytes()
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON (line {e.lineno}); recompile with `cisl compile`") from None
    again = f"compile the model again: cisl compile MODEL.onnx -o {shlex.quote(str(build_dir))}"
    if isinstance(doc, dict) and doc.get("format") == PLAN_FORMAT and doc.get("format_version") != PLAN_VERSION:
        raise UserError(f"{path}: a plan of another cisl version (format {json.dumps(doc.get('format_version'))}; "
                        f"this cisl reads format {PLAN_VERSION}); {again}")
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise UserError(f"{path}: not a cisl plan (no \"format\": \"{PLAN_FORMAT}\"); {again}")
    check_plan_doc(doc, path)  # the schema (docs/plan.schema.json): every key, every type, every op kind
    blob_path = Path(build_dir) / "constants.bin"
    if not blob_path.is_file():
        raise UserError(f"{blob_path}: missing; recompile with `cisl compile`")
    blob = blob_path.read_bytes()
    for nj in doc["nodes"]:
        for name, c in nj["constants"].items():
            size = int(np.prod(c["shape"])) * np.dtype(c["dtype"]).itemsize
            if c["nbytes"] != size or c["offset"] + size > len(blob):
                raise UserError(f"{path}: node {nj['device']} constant {name}: {c['nbytes']} bytes at offset "
                                f"{c['offset']} do not match its shape {c['shape']} {c['dtype']} or "
                                f"{blob_path.name} ({len(blob)} bytes); recompile with `cisl compile`")
    nodes = []
    for nj in doc["nodes"]:
        tensors = {name: Tensor(name, tuple(t["shape"]), t["dtype"], t["qgroup"]) for name, t in nj["tensors"].items()}
        offsets = {name: t["offset"] for name, t in nj["tensors"].items()}
        ops = []
        for oj in nj["ops"]:
            attrs = {k: _decode_attr(v) for k, v in oj.items() if k not in ("op", "in", "out")}
            ops.append(Op(oj["op"], list(oj["in"]), list(oj["out"]), attrs))
        consts = {}
        for name, c in nj["constants"].items():
            dt = np.dtype(c["dtype"]).newbyteorder("<")
            consts[name] = np.frombuffer(blob, dtype=dt, count=c["nbytes"] // dt.itemsize,
                                         offset=c["offset"]).reshape(c["shape"]).astype(np.dtype(c["dtype"]))
        nodes.append(NodeData(nj["device"], tensors, offsets, nj["arena_bytes"], ops, consts))
    sgs = [SomegatherPoint(s["sg"], s["name"], s["layer"], s["point"], s["dest"],
                           [from_ranges(c) for c in s["send_cols"]], s["msg_bytes"]) for s in doc["somegather"]]
    qparams = {g: QParams(p["scale"], p["zero_point"]) for g, p in doc["qparams"].items()}
    meta = {k: v for k, v in doc.items() if k not in ("nodes", "somegather", "qparams")}
    plan = Plan(meta, ModelConfig.from_json(doc["model"]), sgs, nodes, qparams, hashlib.sha256(raw).hexdigest())
    check_plan_ops(plan, path)  # every op's tensors, constants and exchange fit together
    return plan
