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


def _schedule(plan: Plan, node: NodeData, cname: dict[str, str], sg_prefix: str = "", exchange_base: int = 0,
              stored: dict | None = None, strided: frozenset = frozenset()) -> dict[str, Any]:
    """One schedule's C context: its tensor macros (arena offsets), its ops, its somegather descriptors."""
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

    def T(name: str | None) -> str:
        return macros[name] if name else "NULL"

    ec = EmitContext(node, T, cname, {s.sg: s for s in plan.sgs}, [], sg_prefix, exchange_base, stored, strided)
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
    return {"tensors": tensors, "ops": ops, "somegathers": ec.somegathers, "desc_tables": [],
            "input_macro": macros["input"]}


def _constants(node: NodeData) -> list[dict[str, Any]]:
    out = []
    for name in sorted(node.constants):
        arr = node.constants[name]
        out.append({"name": name, "cname": f"cisl_c_{name}", "ctype": CTYPE[str(arr.dtype)],
                    "shape": list(arr.shape) or [1], "size": max(arr.size, 1), "body": _format_array(arr)})
    return out


def _mixer_exchanges(plan: Plan) -> list[dict[str, Any]]:
    mixer = plan.meta["mixer"]
    linger = mixer["policy"]["linger"]
    return [{"sg": sg.sg, "name": sg.name, "rounds": [{**r, "linger": linger} for r in mixer["exchanges"][sg.sg]]}
            for sg in plan.sgs]


def _mixer_tables(exchanges: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """The Mixer schedule's fragment and round tables, each once (exchanges of equal messages, e.g.
    one point in every layer, or in every elastic mode, share them); sets each exchange's
    ``rounds_name`` (None without rounds)."""
    senders: dict[str, str] = {}
    rounds: dict[str, str] = {}
    s_tables: list[dict] = []
    r_tables: list[dict] = []
    for ex in exchanges:
        entries = []
        for r in ex["rounds"]:
            body = ",\n".join(f"    {{ .node = {f['node']}u, .first_row = {f['first_row']}u, .rows = {f['rows']}u, "
                              f".nbytes = {f['nbytes']}u, .offset = {f['offset']}u }}" for f in r["senders"])
            if body not in senders:
                senders[body] = f"cisl_mx_e{ex['sg']}_r{r['part']}_senders"
                s_tables.append({"name": senders[body], "body": body})
            entries.append(f"    {{ .generation = {r['generation']}u, .payload = {r['payload']}u, .deadline = "
                           f"{r['deadline_slots']}u /* slots */, .linger = {r['linger']}u, .slot_us = {r['slot_us']}u, "
                           f".senders = {senders[body]}, .nsenders = {len(r['senders'])}u, "
                           f".takeover = {r['takeover_slots']}u /* scan slots */ }}")
        body = ",\n".join(entries)
        if not entries:
            ex["rounds_name"] = None
            continue
        if body not in rounds:
            rounds[body] = f"cisl_mx_e{ex['sg']}_rounds"
            r_tables.append({"name": rounds[body], "body": body})
        ex["rounds_name"] = rounds[body]
    return s_tables, r_tables


def _sg_tables(descs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Give every somegather descriptor the names of its run and reception tables, one table per
    distinct content (the layers of a model place their columns alike); returns the tables."""
    tables: list[dict[str, str]] = []
    names: dict[tuple[str, str], str] = {}

    def table(ctype: str, body: str, name: str) -> str:
        key = (ctype, body)
        if key not in names:
            names[key] = name
            tables.append({"ctype": ctype, "name": name, "body": body})
        return names[key]

    for d in descs:
        d["pack_name"] = table("cisl_col_run", d["pack_runs"], f"{d['c']}_pack") if d["pack_runs"] else None
        d["own_name"] = table("cisl_col_run", d["own_runs"], f"{d['c']}_own")
        rows = []
        for r in d["recv"]:
            runs = table("cisl_col_run", r["runs"], f"{d['c']}_from{r['from']}")
            rows.append(f"{{ .from = {r['from']}u, .cols = {r['cols']}u, .bytes = {r['bytes']}u, .runs = {runs}, "
                        f".nruns = {r['nruns']}u }}")
        d["recv_name"] = table("cisl_sg_recv", ", ".join(rows), f"{d['c']}_recv") if rows else None
    return tables


def _write(plan: Plan, node: NodeData, out_dir: Path, input_hash: str, env: jinja2.Environment,
           sched: dict[str, Any], exchanges: list[dict[str, Any]], arena_bytes: int, modes: int = 1,
           mode_values: list[list[int]] | None = None) -> list[Path]:
    constants = _constants(node)
    common = {
        "tool_version": __version__, "node": node.device, "nodes": plan.devices, "sink": plan.sink,
        "input_hash": input_hash, "plan_hash": plan.sha256[:16],
        "input_len": plan.cfg.lookback, "output_len": plan.cfg.horizon, "modes_count": modes,
        "arena_bytes": max(arena_bytes, 4), "const_bytes": sum(c.nbytes for c in node.constants.values()),
    }
    mixer = plan.meta["mixer"]
    control = mixer.get("control") if modes > 1 else None
    max_message = max([f["nbytes"] for ex in exchanges for r in ex["rounds"] for f in r["senders"]] +
                      [f["nbytes"] for f in (control or {}).get("senders", [])] + [1])
    values = mode_values or [[0]]
    sg_tables = _sg_tables(sched["somegathers"])
    mx_senders, mx_rounds = _mixer_tables(exchanges)
    files = {
        "cisl_node.h": env.get_template("node.h.j2").render(**common),
        "cisl_weights.h": env.get_template("weights.h.j2").render(constants=constants, **common),
        "cisl_weights.c": env.get_template("weights.c.j2").render(constants=constants, **common),
        "cisl_node.c": env.get_template("node.c.j2").render(
            **sched, sg_tables=sg_tables, mode_values=values, mv_ctype="uint16_t" if max(map(max, values)) < 65536 else "uint32_t",
            **common),
        "cisl_mixer.c": env.get_template("mixer.c.j2").render(
            exchanges=exchanges, mx_senders=mx_senders, mx_rounds=mx_rounds, max_message=max_message,
            initiator=mixer["initiator"],
            control={**control, "linger": mixer["policy"]["linger"]} if control else None,
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


def emit_node(plan: Plan, node: NodeData, out_dir: Path, input_hash: str, env: jinja2.Environment) -> list[Path]:
    """Write cisl_node.h, cisl_weights.h, cisl_weights.c, cisl_node.c and cisl_mixer.c for ``node``."""
    cname = {name: f"cisl_c_{name}" for name in node.constants}
    return _write(plan, node, out_dir, input_hash, env, _schedule(plan, node, cname), _mixer_exchanges(plan),
                  node.arena_bytes)


_TOKEN = re.compile(r"\d+u?|[A-Za-z_]\w*|\s+|.", re.S)
_LITERAL = re.compile(r"\d+u?")


class _ModeValues:
    """The numbers that differ between modes: one column per distinct per-mode tuple."""

    def __init__(self, modes: int) -> None:
        self.modes = modes
        self.columns: dict[tuple[int, ...], int] = {}

    def ref(self, values: tuple[int, ...], unsigned: bool) -> str:
        j = self.columns.setdefault(values, len(self.columns))
        return f"(({'uint32_t' if unsigned else 'int32_t'})CISL_MV({j}))"

    def rows(self) -> list[list[int]]:
        cols = sorted(self.columns, key=self.columns.get)
        return [[c[m] for c in cols] for m in range(self.modes)] if cols else [[0] for _ in range(self.modes)]


def _merge(texts: list[str], mv: _ModeValues) -> str:
    """One piece of C for every mode's version of it: where the versions differ only in integer
    literals, those become CISL_MV lookups (and the block's statics automatic, as their initialisers
    are no longer constant); otherwise a switch over the modes."""
    if all(t == texts[0] for t in texts):
        return texts[0]
    toks = [_TOKEN.findall(t) for t in texts]
    same_shape = all(len(t) == len(toks[0]) for t in toks)
    out = []
    for col in (zip(*toks) if same_shape else []):
        if all(c == col[0] for c in col):
            out.append(col[0])
        elif all(_LITERAL.fullmatch(c) for c in col) and len({c.endswith("u") for c in col}) == 1:
            out.append(mv.ref(tuple(int(c.rstrip("u")) for c in col), col[0].endswith("u")))
        else:
            same_shape = False
            break
    if same_shape:
        return re.sub(r"\bstatic const\b", "const", "".join(out))
    cases = "".join(f"    case {m}u:\n    {{\n{t}    }}\n        break;\n" for m, t in enumerate(texts) if m)
    return f"    switch (cisl_mode) {{\n{cases}    default:\n    {{\n{texts[0]}    }}\n        break;\n    }}\n"


MODE_TABLE = "cisl_mode_table.h"


def emit_mode_table(plan: Plan, k: int, out_dir: Path, env: jinja2.Environment, rows: list[dict] | None = None) -> Path:
    """node_NN/cisl_mode_table.h of an every-mode image: the selector's table (``rows``: per mode
    latency_us, energy_nj, mse_u; none before `cisl modes --profile`)."""
    text = env.get_template("mode_table.h.j2").render(
        tool_version=__version__, node=plan.nodes[k].device, nodes=plan.devices, input_hash=plan.meta["input_hash"],
        plan_hash=plan.sha256[:16], modes_count=int(plan.meta["elastic"]["modes"]), rows=rows or [])
    path = Path(out_dir) / MODE_TABLE
    path.write_text(text)
    return path


def _shared_constants(plans: list[Plan], k: int) -> list[tuple[dict[str, str], dict[str, tuple]]]:
    """Per mode: each of node k's constants as the C symbol of mode 0's it is a prefix of, and the
    shape that one is stored with (checked: rows a prefix; columns a prefix only for fc weights)."""
    base = plans[0].nodes[k]
    stored = {name: tuple(arr.shape) for name, arr in base.constants.items()}
    out = []
    for m, plan in enumerate(plans):
        node = plan.nodes[k]
        if len(plan.sgs) != len(plans[0].sgs) or len(node.ops) != len(base.ops) or set(node.tensors) != set(base.tensors):
            raise AssertionError(f"node {k}: mode {m} does not run mode 0's schedule")
        cname, shapes = {}, {}
        for op0, op in zip(base.ops, node.ops):
            for attr, name in op.attrs.items():
                if attr.endswith("_c") and isinstance(name, str) and name in node.constants:
                    big, own = stored[op0.attrs[attr]], node.constants[name].shape
                    # a row prefix is contiguous; a column prefix only an fc reads (with a row stride)
                    if len(own) != len(big) or any(s > t for s, t in zip(own, big)) or \
                            (len(own) > 1 and tuple(own[1:]) != big[1:] and not (op.kind == "fc" and attr == "weight_c")):
                        raise AssertionError(f"node {k} mode {m} {op.kind} {attr}: {tuple(own)} is no prefix of {big}")
                    cname[name], shapes[name] = f"cisl_c_{op0.attrs[attr]}", big
        out.append((cname, shapes))
    return out


def _one_descriptor_per_content(scheds: list[dict]) -> tuple[list[dict], list[dict]]:
    """Somegather descriptors, one per distinct content (x and y, which no mode shrinks, have one for
    every mode); an op whose modes differ reads its mode's through a table of pointers. Rewrites
    every mode's op contexts to name them; returns the descriptors and the pointer tables."""
    descs: list[dict] = []
    by_content: dict[str, str] = {}
    tables: list[dict] = []
    for i, op in enumerate(scheds[0]["ops"]):
        if op["kind"] != "somegather":
            continue
        names = []
        for sc in scheds:
            d = next(x for x in sc["somegathers"] if x["c"] == sc["ops"][i]["desc"])
            key = repr(sorted((k, v) for k, v in d.items() if k not in ("c", "sg")))
            if key not in by_content:
                by_content[key] = d["c"]
                descs.append(d)
            names.append(by_content[key])
        if len(set(names)) == 1:
            desc = names[0]
        else:
            tables.append({"c": f"{names[0]}_by_mode", "descs": names})
            desc = f"(*{names[0]}_by_mode[cisl_mode])"
        for sc in scheds:
            sc["ops"][i]["desc"] = desc
    return descs, tables


def emit_node_modes(plans: list[Plan], k: int, out_dir: Path, input_hash: str, env: jinja2.Environment) -> list[Path]:
    """Node ``k`` of an elastic image holding every mode (``plans``: mode 0 first, each mode's plan as
    codegen/plan/elastic.py builds them, all with mode 0's arena layout). The weights are mode 0's,
    stored once; mode m reads a prefix of each (its rows; in W_O and W_2 the first columns of each
    row, through cisl_fc_strided_s8 in every mode) and runs its own exchanges, numbered after the
    smaller modes' in one Mixer schedule, so that a round of one mode is never taken for another's.
    One schedule serves every mode: what differs is a row of numbers per mode (sizes, exchange
    numbers; _merge), selected when the mode changes."""
    base = plans[0].nodes[k]
    nsg = len(plans[0].sgs)
    shared = _shared_constants(plans, k)
    # the fc layers whose weight rows some mode reads only in part use the strided kernel in every mode
    strided0 = {op0.attrs["weight_c"] for (cname, shapes), plan in zip(shared, plans)
                for op0, op in zip(base.ops, plan.nodes[k].ops)
                if op.kind == "fc" and shapes[op.attrs["weight_c"]][1] != plan.nodes[k].constants[op.attrs["weight_c"]].shape[1]}
    scheds = []
    for m, (plan, (cname, shapes)) in enumerate(zip(plans, shared)):
        node = plan.nodes[k]
        strided = frozenset(op.attrs["weight_c"] for op0, op in zip(base.ops, node.ops)
                            if op.kind == "fc" and op0.attrs["weight_c"] in strided0)
        scheds.append(_schedule(plan, node, cname, f"m{m}_" if m else "", m * nsg, shapes, strided))
    descs, tables = _one_descriptor_per_content(scheds)
    mv = _ModeValues(len(plans))
    ops = []
    for i, op in enumerate(scheds[0]["ops"]):
        texts = [env.get_template(f"ops/{op['kind']}.c.j2").render(op=sc["ops"][i]) for sc in scheds]
        ops.append({**op, "code": _merge(texts, mv)})
    tensors = []
    for t in scheds[0]["tensors"]:
        offs = tuple(next(u["offset"] for u in sc["tensors"] if u["name"] == t["name"]) for sc in scheds)
        tensors.append({**t, "offset": offs[0] if len(set(offs)) == 1 else mv.ref(offs, True)})
    sched = {"tensors": tensors, "ops": ops, "somegathers": descs, "desc_tables": tables,
             "input_macro": scheds[0]["input_macro"]}
    exchanges = []
    for m, plan in enumerate(plans):
        for ex in _mixer_exchanges(plan):  # equal rounds share their tables (_mixer_tables)
            exchanges.append({**ex, "sg": m * nsg + ex["sg"], "name": f"{ex['name']} (mode {m})"})
    written = _write(plans[0], base, out_dir, input_hash, env, sched, exchanges,
                     max(p.nodes[k].arena_bytes for p in plans), len(plans), mv.rows())
    return [*written, emit_mode_table(plans[0], k, out_dir, env)]
