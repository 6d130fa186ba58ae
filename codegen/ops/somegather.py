"""somegather: the pruned allgather — broadcast the node's selected columns, assemble what arrives.

Lost messages are handled as on the device: their columns keep the fill value (the gathered
tensor's zero point; 0.0 in float) and are marked invalid, so LayerNorm skips them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .base import OpKind, RecvFrom, Runs, c_ident, expect_runs, fail, quant, shape_of, tensor_ref

SG_DESC_BYTES, COL_RUN_BYTES, SG_RECV_BYTES = 40, 6, 16  # sizeof in firmware/somegather/cisl_somegather.h


@dataclass(frozen=True)
class SomegatherAttrs:
    sg: int
    name: str
    gathered: str = tensor_ref()
    valid: str | None = tensor_ref(optional=True)
    send: str | None = tensor_ref(optional=True)
    pack_runs: Runs = None
    own_runs: Runs = None
    recv: list[RecvFrom] = None
    fill: int = quant()


def apply_runs(dst: np.ndarray, src: np.ndarray, runs) -> np.ndarray:
    for s, d, n in runs:
        dst[..., d:d + n] = src[..., s:s + n]
    return dst


def c_runs(runs) -> str:
    return ", ".join(f"{{{s}u, {d}u, {n}u}}" for s, d, n in runs)


@register
class Somegather(OpKind):
    name = "somegather"
    Attrs = SomegatherAttrs
    sync = True

    def check(self, op, tensors, consts):
        a = op.attrs
        rows, own = shape_of(tensors, op.ins[0], "in", 2)
        grows, gcols = shape_of(tensors, a["gathered"], "gathered", 2)
        if grows != rows:
            fail("gathered", f"tensor {a['gathered']} has {grows} rows, the node's own {op.ins[0]} {rows}")
        if a["valid"] is not None and shape_of(tensors, a["valid"], "valid", 1) != (gcols,):
            fail("valid", f"the valid mask {a['valid']} must have {gcols} entries")
        expect_runs(a["own_runs"], own, gcols, "own_runs")
        if a["send"] is not None:
            srows, scols = shape_of(tensors, a["send"], "send", 2)
            if srows != rows:
                fail("send", f"tensor {a['send']} has {srows} rows, the node's own {op.ins[0]} {rows}")
            expect_runs(a["pack_runs"], own, scols, "pack_runs")
        for r in a["recv"]:
            if r["bytes"] != rows * r["cols"]:
                fail("recv", f"sender {r['from']}: {r['bytes']} bytes for {r['cols']} columns of {rows} rows")
            expect_runs(r["runs"], r["cols"], gcols, "recv")

    def quantize(self, qc, op, stem):
        op.attrs["fill"] = qc.qp[op.attrs["gathered"]].zero_point

    def message(self, ex, k, op, v, batch):
        a = op.attrs
        if not a["send"]:
            return None
        own = v[op.ins[0]]
        msg = apply_runs(np.zeros((batch,) + ex.tensors[k][a["send"]].shape, own.dtype), own, a["pack_runs"])
        v[a["send"]] = msg
        return msg

    def receive(self, ex, k, op, v, messages, got, batch):
        a = op.attrs
        t_out = ex.tensors[k][a["gathered"]]
        own = v[op.ins[0]]
        fill = a.get("fill", 0) if ex.mode == "int8" else 0.0
        out = apply_runs(np.full((batch,) + t_out.shape, fill, dtype=own.dtype), own, a["own_runs"])
        valid = np.ones((batch, t_out.shape[-1]), dtype=bool)
        for r in a["recv"]:
            ok = got(r["from"])
            msg = messages[r["from"]]
            for s, dcol, n in r["runs"]:
                if ok.all():
                    out[..., dcol:dcol + n] = msg[..., s:s + n]
                else:
                    out[..., dcol:dcol + n] = np.where(ok[:, None, None], msg[..., s:s + n], out[..., dcol:dcol + n])
                valid[:, dcol:dcol + n] &= ok[:, None]
        v[a["gathered"]] = out
        if a["valid"]:
            v[a["valid"]] = valid
        ex.note(k, a["gathered"], out)

    def senders(self, op):
        return [r["from"] for r in op.attrs["recv"]]

    def c_context(self, e, op):
        a = op.attrs
        sg = e.sg_by_id[a["sg"]]
        c = f"cisl_sg_{e.prefix}{c_ident(a['name'])}"
        own_shape = e.shape(op.ins[0])
        e.somegathers.append({
            "c": c, "name": a["name"], "sg": e.exchange_base + sg.sg, "layer": sg.layer, "point": sg.point,
            "rows": own_shape[0], "own_cols": own_shape[1], "out_cols": e.shape(a["gathered"])[1],
            "send_cols": e.shape(a["send"])[1] if a["send"] else 0,
            "pack_runs": c_runs(a["pack_runs"]), "npack": len(a["pack_runs"]),
            "own_runs": c_runs(a["own_runs"]), "nown": len(a["own_runs"]),
            "recv": [{"from": r["from"], "cols": r["cols"], "bytes": r["bytes"], "runs": c_runs(r["runs"]),
                      "nruns": len(r["runs"])} for r in a["recv"]],
            "fill": a["fill"]})
        return dict(desc=c, sg=e.exchange_base + sg.sg, own=e.tensor(op.ins[0]), send=e.tensor(a["send"]), out=e.tensor(a["gathered"]),
                    valid=e.tensor(a["valid"]))

    def table_bytes(self, op):
        return SG_DESC_BYTES  # its run and reception tables are shared (shared_tables)

    def shared_tables(self, op):
        """The column runs and receptions, as codegen/emit/cnode.py _sg_tables stores them: once per content."""
        a = op.attrs

        def runs(r) -> tuple:
            return ("runs", tuple(map(tuple, r)))

        out = [(runs(a["pack_runs"]), COL_RUN_BYTES * len(a["pack_runs"]))] if a["pack_runs"] else []
        out.append((runs(a["own_runs"]), COL_RUN_BYTES * len(a["own_runs"])))
        out += [(runs(r["runs"]), COL_RUN_BYTES * len(r["runs"])) for r in a["recv"]]
        if a["recv"]:
            key = ("recv", tuple((r["from"], r["cols"], r["bytes"], runs(r["runs"])) for r in a["recv"]))
            out.append((key, SG_RECV_BYTES * len(a["recv"])))
        return out
