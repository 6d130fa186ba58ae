"""Emit one node's C from the plan: Jinja2 templates (StrictUndefined) fed with per-op context.

Python decides *what* (names, dims, parameters); the templates in ``templates/`` decide how the C
looks. Every symbol is prefixed ``cisl_``; every file carries the generated banner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from .. import __version__
from ..ops import kind_of
from ..ops.base import EmitContext, c_ident
from ..plan.io import NodeData, Plan
from ..plan.memory import buffers_of
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


def emit_node(plan: Plan, node: NodeData, out_dir: Path, input_hash: str, env: jinja2.Environment) -> list[Path]:
    """Write cisl_node.h, cisl_weights.h, cisl_weights.c and cisl_node.c for ``node``."""
    k = node.device
    bufs = {b.name: b for b in buffers_of(node)}
    macros: dict[str, str] = {}
    tensors = []
    for name, t in node.tensors.items():
        macro = "CISL_T_" + c_ident(name).upper()
        if macro in macros.values():
            raise AssertionError(f"two tensors map to {macro}")
        macros[name] = macro
        tensors.append({"name": name, "macro": macro, "ctype": CTYPE[t.dtype], "offset": node.offsets[name],
                        "shape": list(t.shape), "first": bufs[name].first, "last": bufs[name].last})
    tensors.sort(key=lambda t: (t["offset"], t["first"]))
    cname = {name: f"cisl_c_{name}" for name in node.constants}

    def T(name: str | None) -> str:
        return macros[name] if name else "NULL"

    ec = EmitContext(node, T, cname, {s.sg: s for s in plan.sgs}, [])
    ops = []
    for i, op in enumerate(node.ops):
        kind = kind_of(op)
        a = op.attrs
        ctx: dict[str, Any] = {"index": i, "seq": i, "kind": op.kind,
                               "where": (op.outs or op.ins or ["-"])[0].split("@")[0]}
        ctx["comment"] = f"{op.kind} {', '.join(op.ins)} -> {', '.join(op.outs)}" if op.ins or op.outs else \
            f"{op.kind} {a.get('block', '')} layer {a.get('layer', '')}"
        ctx.update(kind.c_context(ec, op))
        ops.append(ctx)
    somegathers = ec.somegathers

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
