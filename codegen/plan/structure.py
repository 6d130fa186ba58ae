"""Build the structure of the plan: every node's tensors and straight-line schedule.

The structure is derived once, here, from the model's split (codegen.partition); the float
executor calibrates on it, the quantiser fills in integer parameters, and the C emitter, the int8
reference executor and the simulator read the result from plan.json. Nobody re-derives the split.

Tensor names are ``<layer>.<what>`` with an ``@<device>`` suffix for device-local pieces, e.g.
``l0.x@2`` (device 2's own columns of layer 0's input) or ``l0.xg@2`` (what it holds after the
x-somegather). ``qgroup`` names the logical tensor whose quantisation parameters a piece shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..modelspec import ModelConfig, patch_index
from ..ops import kind_of
from ..partition import POINTS, Masks, Split, gathered_cols

SINK = 0
"""The node that reduces the head's partial sums and prints the forecast."""


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "int8", "int32" or "uint8" on the device
    qgroup: str | None  # None for tensors without int8 quantisation (int32 partials, masks)

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))  # (numpy's prod on a tuple this small costs 30x as much)

    @property
    def nbytes(self) -> int:
        return self.size * {"int8": 1, "uint8": 1, "int32": 4}[self.dtype]


@dataclass
class Op:
    """One step of a node's schedule. ``attrs`` holds kind-specific fields (JSON-serialisable)."""

    kind: str
    ins: list[str]
    outs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class SomegatherPoint:
    """A somegather: which columns every device sends, and how receivers place them."""

    sg: int
    name: str  # e.g. "l0.x" or "head"
    layer: int  # -1 for the head reduction
    point: str  # x, h, y, z or "head"
    dest: int | None  # None = broadcast; else the only receiver (the sink)
    send_cols: list[list[int]]  # per device: ascending global columns it broadcasts
    msg_bytes: list[int]  # per device: payload bytes of its message (0 = sends nothing)


@dataclass
class NodePlan:
    device: int
    tensors: dict[str, Tensor]
    ops: list[Op]


@dataclass
class Structure:
    cfg: ModelConfig
    split: Split
    masks: Masks
    keep_ratio: float
    sgs: list[SomegatherPoint]
    nodes: list[NodePlan]
    rescale: bool = False  # received columns scaled by expected / delivered (the `rescale` op)
    prune_own: bool = False  # normal pruning: unbroadcast columns are dead for their owner too


def runs_from_pairs(pairs: list[tuple[int, int]]) -> list[list[int]]:
    """Merge (src_pos, dst_pos) column moves into copy runs [src_pos, dst_pos, count]."""
    runs: list[list[int]] = []
    for s, d in pairs:
        if runs and runs[-1][0] + runs[-1][2] == s and runs[-1][1] + runs[-1][2] == d:
            runs[-1][2] += 1
        else:
            runs.append([s, d, 1])
    return runs


def runs_between(src_cols: list[int], dst_at: dict[int, int]) -> list[list[int]]:
    """Copy runs that place every column of ``src_cols`` (ascending global column indices) at its
    position in the destination, ``dst_at[column]`` (built once per destination: every sender's
    message goes into the same gathered tensor)."""
    return runs_from_pairs([(s, dst_at[c]) for s, c in enumerate(src_cols)])


class _NodeBuilder:
    def __init__(self, device: int):
        self.device = device
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []

    def tensor(self, name: str, shape: tuple[int, ...], dtype: str = "int8", qgroup: str | None = None) -> str:
        if name in self.tensors:
            raise AssertionError(f"tensor {name} defined twice")
        self.tensors[name] = Tensor(name, tuple(int(s) for s in shape), dtype, qgroup)
        return name

    def op(self, kind: str, ins: list[str], outs: list[str], **attrs: Any) -> None:
        # the kind's attribute dataclass says which attributes the op may and must have
        kind_of(kind).Attrs(**{("sender" if k == "from" else k): v for k, v in attrs.items()})
        self.ops.append(Op(kind, ins, outs, attrs))


def build_structure(cfg: ModelConfig, split: Split, masks: Masks, keep_ratio: float, rescale: bool = False,
                    prune_own: bool = False, units: list[dict[str, list[int]]] | None = None,
                    levels: list[dict[str, dict[int, int]]] | None = None) -> Structure:
    """Derive every node's tensors and schedule from the split and the somegather masks.

    ``rescale`` (models trained with it, cisl.masks.rescale): what arrived from the other nodes is
    scaled by expected / delivered columns before its consumer (the `rescale` op). ``prune_own``
    (normal pruning, cisl.masks.prune_own): a column nobody broadcasts is dead for its owner too:
    no node holds it after a somegather, so LayerNorm statistics and consumers leave it out (its
    producers' weights are zero, so the own tensors hold 0 there). ``units`` (one mode of an
    elastic model, codegen.elastic): per layer the Q/K dimensions ("qk"), V dimensions / head-output
    columns ("v") and hidden units ("z") that are computed at all; the others are neither computed
    nor sent nor consumed. ``levels`` (an elastic model's modes in one image): per layer, for "v"
    and "z", the last mode that keeps each unit; the gathered h and z columns are then ordered by
    level, highest first (the core's columns of every node, then those the next mode adds, ...), so
    that every mode's columns are a prefix of every W_O and W_2 row."""

    def live(l: int, point: str) -> set[int] | None:
        if units is None or point not in ("h", "z"):
            return None
        return set(units[l]["v" if point == "h" else "z"])

    def held(l: int, point: str, k: int) -> list[int]:
        cols, keep = gathered_cols(split, masks, l, point, k, prune_own), live(l, point)
        cols = cols if keep is None else [c for c in cols if c in keep]
        if levels is not None and point in ("h", "z"):
            level = levels[l]["v" if point == "h" else "z"]
            cols = sorted(cols, key=lambda c: (-level[c], c))
        return cols

    def own(l: int, point: str, k: int) -> list[int]:
        lo, hi = split.own_cols(k, point)
        keep = live(l, point)
        return [c for c in range(lo, hi) if keep is None or c in keep]

    def dims(l: int, kind: str, h: int) -> list[int]:
        """The head's Q/K ("qk") or V ("v") dimensions that are computed (global columns)."""
        cols = range(h * cfg.d_head, (h + 1) * cfg.d_head)
        return list(cols) if units is None else [c for c in cols if c in set(units[l][kind])]
    rescaled = rescale and split.devices > 1

    def scale(b: _NodeBuilder, t: str, valid: str, point: str, l: int, k: int) -> None:
        if rescaled:
            G = held(l, point, k)
            lo, hi = split.own_cols(k, point)
            own_lo = sum(c < lo for c in G)  # own columns are contiguous in G (the others lie outside [lo, hi))
            b.op("rescale", [t, valid], [t], own_lo=own_lo, own_hi=own_lo + sum(lo <= c < hi for c in G))

    N, d, D = cfg.tokens, cfg.d_head, split.devices
    sgs: list[SomegatherPoint] = []
    for l in range(cfg.layers):
        for p in POINTS:
            keep = live(l, p)
            cols = [[c for c in masks[l][j][p] if keep is None or c in keep] if D > 1 else [] for j in range(D)]
            sgs.append(SomegatherPoint(len(sgs), f"l{l}.{p}", l, p, None, cols, [N * len(c) for c in cols]))
    head_bytes = [4 * cfg.horizon if j != SINK else 0 for j in range(D)]
    sgs.append(SomegatherPoint(len(sgs), "head", -1, "head", SINK, [[] for _ in range(D)], head_bytes))
    sg_of = {s.name: s for s in sgs}

    nodes = []
    for k in range(D):
        b = _NodeBuilder(k)
        mlo, mhi = split.model_cols(k)
        own_model = list(range(mlo, mhi))
        s_k = mhi - mlo

        # -- embedding: every node has the whole window and computes its own columns of X_1.
        b.op("block_begin", [], [], block="embed", layer=-1)
        b.tensor("input", (cfg.lookback,), qgroup="input")
        b.tensor("patches", (N, cfg.patch_len), qgroup="input")
        b.op("gather", ["input"], ["patches"], index=patch_index(cfg).reshape(-1).tolist())
        b.tensor(f"emb@{k}", (N, s_k), qgroup="emb")
        b.op("fc", ["patches"], [f"emb@{k}"],
             weight={"name": "embed.weight", "rows": own_model, "cols": list(range(cfg.patch_len))},
             bias={"name": "embed.bias", "rows": own_model}, relu=False)
        b.tensor(f"l0.x@{k}", (N, s_k), qgroup="l0.x")
        b.op("add_const", [f"emb@{k}"], [f"l0.x@{k}"],
             const={"name": "pos", "rows": list(range(N)), "cols": own_model}, const_qgroup="pos")
        b.op("block_end", [], [], block="embed", layer=-1)

        for l in range(cfg.layers):
            x = f"l{l}.x@{k}"
            # -- attention block (its communication counts towards the block, as in the paper's Fig. 6)
            b.op("block_begin", [], [], block="attn", layer=l)
            G = held(l, "x", k)
            gx = _somegather(b, cfg, split, sg_of[f"l{l}.x"], k, x, own(l, "x", k), G, with_valid=True)
            ln1 = b.tensor(f"l{l}.ln1@{k}", (N, len(G)), qgroup=f"l{l}.ln1@{k}")
            b.op("layernorm", [gx, f"l{l}.xv@{k}"], [ln1],
                 gamma={"name": f"layers.{l}.ln1.weight", "rows": G},
                 beta={"name": f"layers.{l}.ln1.bias", "rows": G}, eps=cfg.ln_eps)
            scale(b, ln1, f"l{l}.xv@{k}", "x", l, k)
            own_h = own(l, "h", k)
            hbuf = b.tensor(f"l{l}.h@{k}", (N, len(own_h)), qgroup=f"l{l}.h")
            h0, h1 = split.head_range(k)
            at = 0  # where the head's output columns start in hbuf
            for h in range(h0, h1):
                for w in ("q", "k", "v"):
                    hcols = dims(l, "v" if w == "v" else "qk", h)
                    t = b.tensor(f"l{l}.{w}{h}", (N, len(hcols)), qgroup=f"l{l}.{w}{h}")
                    b.op("fc", [ln1], [t],
                         weight={"name": f"layers.{l}.w{w}.weight", "rows": hcols, "cols": G},
                         bias={"name": f"layers.{l}.w{w}.bias", "rows": hcols}, relu=False)
                dv = len(dims(l, "v", h))
                s = b.tensor(f"l{l}.s{h}", (N, N), qgroup=f"l{l}.s{h}")
                b.op("bmm", [f"l{l}.q{h}", f"l{l}.k{h}"], [s], alpha=1.0 / math.sqrt(d))
                pr = b.tensor(f"l{l}.p{h}", (N, N), qgroup="softmax")
                b.op("softmax", [s], [pr])
                vt = b.tensor(f"l{l}.vt{h}", (dv, N), qgroup=f"l{l}.v{h}")
                b.op("transpose", [f"l{l}.v{h}"], [vt])
                o = b.tensor(f"l{l}.o{h}", (N, dv), qgroup=f"l{l}.h")
                b.op("bmm", [pr, vt], [o], alpha=1.0)
                b.op("copy_cols", [o], [hbuf], dst_col=at)
                at += dv
            Gh = held(l, "h", k)
            gh = _somegather(b, cfg, split, sg_of[f"l{l}.h"], k, hbuf, own_h, Gh, with_valid=rescaled)
            scale(b, gh, f"l{l}.hv@{k}", "h", l, k)
            ao = b.tensor(f"l{l}.ao@{k}", (N, s_k), qgroup=f"l{l}.ao@{k}")
            b.op("fc", [gh], [ao], weight={"name": f"layers.{l}.wo.weight", "rows": own_model, "cols": Gh},
                 bias={"name": f"layers.{l}.wo.bias", "rows": own_model}, relu=False)
            y = b.tensor(f"l{l}.y@{k}", (N, s_k), qgroup=f"l{l}.y")
            b.op("add", [x, ao], [y])
            b.op("block_end", [], [], block="attn", layer=l)

            # -- MLP block
            b.op("block_begin", [], [], block="mlp", layer=l)
            Gy = held(l, "y", k)
            gy = _somegather(b, cfg, split, sg_of[f"l{l}.y"], k, y, own(l, "y", k), Gy, with_valid=True)
            ln2 = b.tensor(f"l{l}.ln2@{k}", (N, len(Gy)), qgroup=f"l{l}.ln2@{k}")
            b.op("layernorm", [gy, f"l{l}.yv@{k}"], [ln2],
                 gamma={"name": f"layers.{l}.ln2.weight", "rows": Gy},
                 beta={"name": f"layers.{l}.ln2.bias", "rows": Gy}, eps=cfg.ln_eps)
            scale(b, ln2, f"l{l}.yv@{k}", "y", l, k)
            own_z = own(l, "z", k)
            z = b.tensor(f"l{l}.z@{k}", (N, len(own_z)), qgroup=f"l{l}.z")
            b.op("fc", [ln2], [z], weight={"name": f"layers.{l}.w1.weight", "rows": own_z, "cols": Gy},
                 bias={"name": f"layers.{l}.w1.bias", "rows": own_z}, relu=True)
            Gz = held(l, "z", k)
            gz = _somegather(b, cfg, split, sg_of[f"l{l}.z"], k, z, own_z, Gz, with_valid=rescaled)
            scale(b, gz, f"l{l}.zv@{k}", "z", l, k)
            mo = b.tensor(f"l{l}.mo@{k}", (N, s_k), qgroup=f"l{l}.mo@{k}")
            b.op("fc", [gz], [mo], weight={"name": f"layers.{l}.w2.weight", "rows": own_model, "cols": Gz},
                 bias={"name": f"layers.{l}.w2.bias", "rows": own_model}, relu=False)
            xn = b.tensor(f"l{l + 1}.x@{k}", (N, s_k), qgroup=f"l{l + 1}.x")
            b.op("add", [y, mo], [xn])
            b.op("block_end", [], [], block="mlp", layer=l)

        # -- head: partial sums over the own columns, reduced exactly at the sink.
        b.op("block_begin", [], [], block="head", layer=-1)
        xT = f"l{cfg.layers}.x@{k}"
        flat_cols = (np.arange(N)[:, None] * cfg.d_model + np.asarray(own_model, dtype=np.int64)).ravel().tolist()
        part = b.tensor(f"head.part@{k}", (cfg.horizon,), dtype="int32")
        head = sg_of["head"]
        own_part = part
        if k == SINK and rescaled:  # the received partials are scaled apart from the own one
            own_part = b.tensor(f"head.own@{k}", (cfg.horizon,), dtype="int32")
        b.op("fc_s32", [xT], [own_part],
             weight={"name": "head.weight", "rows": list(range(cfg.horizon)), "cols": flat_cols})
        if k == SINK:
            senders = [j for j in range(D) if head.msg_bytes[j] > 0]
            weights = [split.own_cols(j, "x")[1] - split.own_cols(j, "x")[0] for j in senders] if rescaled else []
            b.op("reduce_recv", [own_part], [part], sg=head.sg, name="head", senders=senders, weights=weights)
            b.tensor("output", (cfg.horizon,), qgroup="output")
            b.op("reduce_requant", [part], ["output"], bias={"name": "head.bias", "rows": list(range(cfg.horizon))})
            b.op("block_end", [], [], block="head", layer=-1)
            b.op("output", ["output"], [])
        else:
            b.op("send", [part], [], sg=head.sg, name="head", dest=SINK)
            b.op("block_end", [], [], block="head", layer=-1)
        b.op("finish", [part] if k != SINK else ["output"], [])
        nodes.append(NodePlan(k, b.tensors, b.ops))
    return Structure(cfg, split, masks, keep_ratio, sgs, nodes, rescaled, prune_own)


def _somegather(b: _NodeBuilder, cfg: ModelConfig, split: Split, sg: SomegatherPoint, k: int, own: str,
                own_cols: list[int], held: list[int], with_valid: bool) -> str:
    """Emit the somegather op of device k at point ``sg``: pack own broadcast columns into the
    message, exchange, and assemble the gathered tensor (own + received columns, ascending).
    ``own_cols``: the global columns of the own tensor, in its order; ``held``: those after it."""
    N = cfg.tokens
    G = held if split.devices > 1 or held != sorted(held) else own_cols  # one node: its own, unless reordered
    where = {c: i for i, c in enumerate(own_cols)}
    qgroup = f"l{sg.layer}.{sg.point}"
    out = b.tensor(f"l{sg.layer}.{sg.point}g@{k}", (N, len(G)), qgroup=qgroup)
    ins = [own]
    send = None
    if sg.msg_bytes[k] > 0:
        send = b.tensor(f"l{sg.layer}.{sg.point}m@{k}", (N, len(sg.send_cols[k])), qgroup=qgroup)
    valid = None
    if with_valid:
        valid = b.tensor(f"l{sg.layer}.{sg.point}v@{k}", (len(G),), dtype="uint8")
    recv = []
    at = {c: i for i, c in enumerate(G)}
    for j in range(split.devices):
        if j == k or sg.msg_bytes[j] == 0:
            continue
        recv.append({"from": j, "cols": len(sg.send_cols[j]), "bytes": sg.msg_bytes[j],
                     "runs": runs_between(sg.send_cols[j], at)})
    outs = [out] + ([valid] if valid else []) + ([send] if send else [])
    b.op("somegather", ins, outs, sg=sg.sg, name=sg.name, gathered=out, valid=valid, send=send,
         pack_runs=runs_from_pairs([(where[c], i) for i, c in enumerate(sg.send_cols[k])]) if send else [],
         own_runs=runs_from_pairs([(where[c], i) for i, c in enumerate(G) if c in where]), recv=recv)
    return out
