"""Emit one node's C from the plan: Jinja2 templates (StrictUndefined) fed with per-op context.

Python decides *what* (names, dims, parameters); the templates in ``templates/`` decide how the C
looks. Every symbol is prefixed ``cisl_``; every file carries the generated banner.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from .. import __version__
from ..plan.io import NodeData, Plan
from ..plan.memory import buffers_of
from ..plan.structure import SomegatherPoint
from ..resources import resource_dir

CTYPE = {"int8": "int8_t", "uint8": "uint8_t", "int32": "int32_t", "uint16": "uint16_t"}


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def ident(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name.split("@")[0])


def _format_array(arr: np.ndarray, per_line: int = 24) -> str:
    flat = arr.reshape(-1)
    if flat.dtype == np.int32:
        items = [str(int(v)) if v != -2**31 else "(-2147483647 - 1)" for v in flat]
    else:
        items = [str(int(v)) for v in flat]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return ",\n".join("    " + ln for ln in lines)


def _runs(runs: list[list[int]]) -> str:
    return ", ".join(f"{{{s}u, {d}u, {n}u}}" for s, d, n in runs)


def emit_node(plan: Plan, node: NodeData, out_dir: Path, input_hash: str, env: jinja2.Environment) -> list[Path]:
    """Write cisl_node.h, cisl_weights.h, cisl_weights.c and cisl_node.c for ``node``."""
    k = node.device
    bufs = {b.name: b for b in buffers_of(node)}
    macros: dict[str, str] = {}
    tensors = []
    for name, t in node.tensors.items():
        macro = "CISL_T_" + ident(name).upper()
        if macro in macros.values():
            raise AssertionError(f"two tensors map to {macro}")
        macros[name] = macro
        tensors.append({"name": name, "macro": macro, "ctype": CTYPE[t.dtype], "offset": node.offsets[name],
                        "shape": list(t.shape), "first": bufs[name].first, "last": bufs[name].last})
    tensors.sort(key=lambda t: (t["offset"], t["first"]))
    cname = {name: f"cisl_c_{name}" for name in node.constants}

    def T(name: str | None) -> str:
        return macros[name] if name else "NULL"

    sg_by_id = {s.sg: s for s in plan.sgs}
    somegathers = []
    ops = []
    for i, op in enumerate(node.ops):
        a = op.attrs
        shape = {n: node.tensors[n].shape for n in op.ins + op.outs if n in node.tensors}
        ctx: dict[str, Any] = {"index": i, "seq": i, "kind": op.kind,
                               "where": (op.outs or op.ins or ["-"])[0].split("@")[0]}
        ctx["comment"] = f"{op.kind} {', '.join(op.ins)} -> {', '.join(op.outs)}" if op.ins or op.outs else \
            f"{op.kind} {a.get('block', '')} layer {a.get('layer', '')}"
        if op.kind in ("block_begin", "block_end"):
            ctx.update(layer=a["layer"], block=a["block"])
        elif op.kind == "gather":
            ctx.update({"in": T(op.ins[0]), "out": T(op.outs[0]), "n": node.tensors[op.outs[0]].size,
                        "index": cname[a["index_c"]]})
        elif op.kind == "fc":
            rows, kk = shape[op.ins[0]]
            ctx.update({"in": T(op.ins[0]), "out": T(op.outs[0]), "rows": rows, "k": kk, "n": shape[op.outs[0]][1],
                        "weight": cname[a["weight_c"]], "bias": cname[a["bias_c"]], "mult": cname[a["mult_c"]],
                        "shift": cname[a["shift_c"]], "in_offset": a["in_offset"], "out_offset": a["out_offset"],
                        "act_min": a["act_min"], "act_max": a["act_max"]})
        elif op.kind in ("add", "add_const"):
            ctx.update(in1=T(op.ins[0]), in2=T(op.ins[1]) if op.kind == "add" else cname[a["const_c"]],
                       out=T(op.outs[0]), size=node.tensors[op.outs[0]].size,
                       **{key: a[key] for key in ("in1_offset", "in1_mult", "in1_shift", "in2_offset", "in2_mult",
                                                   "in2_shift", "left_shift", "out_offset", "out_mult", "out_shift",
                                                   "act_min", "act_max")})
        elif op.kind == "layernorm":
            rows, cols = shape[op.ins[0]]
            ctx.update({"in": T(op.ins[0]), "out": T(op.outs[0]), "rows": rows, "cols": cols, "valid": T(op.ins[1]),
                        "zp_in": a["zp_in"], "zp_out": a["zp_out"], "eps_q": a["eps_q"],
                        "gamma": cname[a["gamma_c"]], "beta": cname[a["beta_c"]]})
        elif op.kind == "bmm":
            m, kk = shape[op.ins[0]]
            n = shape[op.ins[1]][0]
            ctx.update(lhs=T(op.ins[0]), rhs=T(op.ins[1]), out=T(op.outs[0]), m=m, k=kk, n=n,
                       **{key: a[key] for key in ("lhs_offset", "rhs_offset", "out_offset", "mult", "shift",
                                                   "act_min", "act_max")})
        elif op.kind == "softmax":
            rows, row_size = shape[op.ins[0]]
            ctx.update({"in": T(op.ins[0]), "out": T(op.outs[0]), "rows": rows, "row_size": row_size,
                        "mult": a["mult"], "shift": a["shift"], "diff_min": a["diff_min"]})
        elif op.kind == "transpose":
            rows, cols = shape[op.ins[0]]
            ctx.update({"in": T(op.ins[0]), "out": T(op.outs[0]), "rows": rows, "cols": cols})
        elif op.kind == "copy_cols":
            rows, src_cols = shape[op.ins[0]]
            ctx.update({"in": T(op.ins[0]), "out": T(op.outs[0]), "rows": rows, "src_cols": src_cols,
                        "dst_cols": shape[op.outs[0]][1], "dst_col": a["dst_col"]})
        elif op.kind == "somegather":
            sg: SomegatherPoint = sg_by_id[a["sg"]]
            c = f"cisl_sg_{ident(a['name'])}"
            own_shape = shape[op.ins[0]]
            somegathers.append({
                "c": c, "name": a["name"], "sg": sg.sg, "layer": sg.layer, "point": sg.point,
                "rows": own_shape[0], "own_cols": own_shape[1], "out_cols": shape[a["gathered"]][1],
                "send_cols": shape[a["send"]][1] if a["send"] else 0,
                "pack_runs": _runs(a["pack_runs"]), "npack": len(a["pack_runs"]),
                "own_runs": _runs(a["own_runs"]), "nown": len(a["own_runs"]),
                "recv": [{"from": r["from"], "cols": r["cols"], "bytes": r["bytes"], "runs": _runs(r["runs"]),
                          "nruns": len(r["runs"])} for r in a["recv"]],
                "fill": a["fill"]})
            ctx.update(desc=c, own=T(op.ins[0]), send=T(a["send"]), out=T(a["gathered"]), valid=T(a["valid"]))
        elif op.kind == "fc_s32":
            kk = node.tensors[op.ins[0]].size
            ctx.update({"in": T(op.ins[0]), "out": T(op.outs[0]), "k": kk, "n": shape[op.outs[0]][0],
                        "weight": cname[a["weight_c"]], "in_offset": a["in_offset"]})
        elif op.kind == "send":
            ctx.update({"in": T(op.ins[0]), "n": shape[op.ins[0]][0], "sg": a["sg"], "dest": a["dest"]})
        elif op.kind == "reduce_recv":
            ctx.update({"out": T(op.outs[0]), "n": shape[op.outs[0]][0], "sg": a["sg"], "senders": a["senders"]})
        elif op.kind == "reduce_requant":
            ctx.update({"in": T(op.ins[0]), "out": T(op.outs[0]), "n": shape[op.outs[0]][0],
                        "bias": cname[a["bias_c"]], "mult": cname[a["mult_c"]], "shift": cname[a["shift_c"]],
                        "out_offset": a["out_offset"]})
        elif op.kind == "output":
            ctx.update({"in": T(op.ins[0]), "n": node.tensors[op.ins[0]].size})
        elif op.kind == "finish":
            ctx.update({"in": T(op.ins[0]), "nbytes": node.tensors[op.ins[0]].nbytes})
        else:
            raise AssertionError(f"no C emitter for op kind {op.kind}")
        ops.append(ctx)

    constants = []
    for name in sorted(node.constants):
        arr = node.constants[name]
        constants.append({"name": name, "cname": cname[name], "ctype": CTYPE[str(arr.dtype)],
                          "shape": list(arr.shape) or [1], "size": max(arr.size, 1), "body": _format_array(arr)})

    common = {
        "tool_version": __version__, "node": k, "nodes": plan.devices, "sink": plan.sink,
        "input_hash": input_hash, "plan_hash": plan.sha256[:16],
        "input_len": plan.cfg.lookback, "output_len": plan.cfg.horizon,
        "arena_bytes": max(node.arena_bytes, 4), "const_bytes": sum(c.nbytes for c in node.constants.values()),
    }
    mixer = plan.meta["mixer"]
    linger = mixer["policy"]["linger"]
    exchanges = [{"sg": sg.sg, "name": sg.name,
                  "rounds": [{**r, "linger": linger} for r in mixer["exchanges"][sg.sg]]} for sg in plan.sgs]
    max_message = max([f["nbytes"] for ex in mixer["exchanges"] for r in ex for f in r["senders"]] + [1])
    files = {
        "cisl_node.h": env.get_template("node.h.j2").render(**common),
        "cisl_weights.h": env.get_template("weights.h.j2").render(constants=constants, **common),
        "cisl_weights.c": env.get_template("weights.c.j2").render(constants=constants, **common),
        "cisl_node.c": env.get_template("node.c.j2").render(tensors=tensors, ops=ops, somegathers=somegathers,
                                                             input_macro=macros["input"], **common),
        "cisl_mixer.c": env.get_template("mixer.c.j2").render(
            exchanges=exchanges, max_message=max_message, initiator=mixer["initiator"],
            termination="MX_TERM_DONE" if mixer["policy"]["kind"] == "done" else "MX_TERM_DEADLINE",
            policy=f"{mixer['policy']['kind']}, {mixer['policy']['phy']}", **common),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, text in files.items():
        p = out_dir / fname
        p.write_text(text)
        written.append(p)
    return written
