"""plan.json's JSON Schema, generated from the op kinds' attribute dataclasses, and the check of a
loaded plan against it and against every op's shape rules.

The committed copy is docs/plan.schema.json (a test keeps it equal to what this module
generates; regenerate with ``python -m codegen.ops.schema > docs/plan.schema.json``). A plan that
breaks it — a wrong type, a missing or unknown key, an unknown op kind, tensors and constants that
do not fit together — is refused with one line naming the node, the op and the field.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from functools import lru_cache
from typing import Any

from . import REGISTRY, kind_of, UnknownOp
from ..plan.format import PLAN_FORMAT, PLAN_VERSION

MIXER_MAXIMA = ("MX_MAX_NODES", "MX_MAX_G", "MX_MAX_P", "MX_POOL_WORDS")  # firmware/mixer/mixer.h
from .base import PlanShapeError, Ranges, Runs, json_name

SCHEMA_ID = "https://cisl.invalid/plan.schema.json"

# every integer of a plan is an int32 of the C (sizes, offsets, indices, multipliers): bounded, so a
# hand-edited 1e308 or 10**18 is refused here instead of overflowing (or looping over) later
_I32 = {"type": "integer", "minimum": -2 ** 31, "maximum": 2 ** 31 - 1}
_NAT = {"type": "integer", "minimum": 0, "maximum": 2 ** 31 - 1}
_RANGES = {"type": "array", "items": {"type": "array", "items": _NAT, "minItems": 2, "maxItems": 2}}
_RUNS = {"type": "array", "items": {"type": "array", "items": _NAT, "minItems": 3, "maxItems": 3}}


def _type_schema(tp: Any) -> dict:
    if tp is Ranges:
        return dict(_RANGES)
    if tp is Runs:
        return dict(_RUNS)
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return dict(_I32)
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        inner = _type_schema(rest[0]) if len(rest) == 1 else {"anyOf": [_type_schema(a) for a in rest]}
        return {"anyOf": [inner, {"type": "null"}]} if len(rest) < len(args) else inner
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])}
    if dataclasses.is_dataclass(tp):
        return _object_schema(tp, all_required=False)
    raise TypeError(f"no JSON Schema for attribute type {tp!r}")


def _object_schema(cls: type, all_required: bool) -> dict:
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    props, required = {}, []
    for f in dataclasses.fields(cls):
        name = json_name(f)
        props[name] = _type_schema(hints[f.name])
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if all_required or not has_default:
            required.append(name)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def op_schema(kind_name: str) -> dict:
    """The schema of one op of this kind as plan.json stores it: op, in, out and its attributes."""
    kind = REGISTRY[kind_name]
    attrs = _object_schema(kind.Attrs, all_required=True)
    names = {"type": "array", "items": {"type": "string"}}
    return {"type": "object",
            "properties": {"op": {"const": kind_name}, "in": names, "out": names, **attrs["properties"]},
            "required": ["op", "in", "out", *attrs["required"]], "additionalProperties": False}


_INT = _I32


def plan_schema() -> dict:
    """The whole plan.json (format version 1); ops are checked per kind (``allOf`` of if/then)."""
    op_any = {"type": "object", "properties": {"op": {"enum": sorted(REGISTRY)}}, "required": ["op"],
              "allOf": [{"if": {"properties": {"op": {"const": k}}}, "then": {"$ref": f"#/definitions/op_{k}"}}
                        for k in sorted(REGISTRY)]}
    tensor = {"type": "object", "properties": {"shape": {"type": "array", "items": _NAT},
                                               "dtype": {"enum": ["int8", "uint8", "int32"]},
                                               "qgroup": {"type": ["string", "null"]}, "offset": _NAT},
              "required": ["shape", "dtype", "qgroup", "offset"], "additionalProperties": False}
    constant = {"type": "object", "properties": {"dtype": {"enum": ["int8", "uint8", "uint16", "int32"]},
                                                 "shape": {"type": "array", "items": _NAT},
                                                 "offset": _NAT, "nbytes": _NAT},
                "required": ["dtype", "shape", "offset", "nbytes"], "additionalProperties": False}
    node = {"type": "object", "properties": {"device": _NAT, "arena_bytes": _NAT, "const_bytes": _NAT,
                                             "tensors": {"type": "object", "additionalProperties": tensor},
                                             "constants": {"type": "object", "additionalProperties": constant},
                                             "ops": {"type": "array", "items": {"$ref": "#/definitions/op"}}},
            "required": ["device", "arena_bytes", "const_bytes", "tensors", "constants", "ops"],
            "additionalProperties": False}
    somegather = {"type": "object", "properties": {"sg": _NAT, "name": {"type": "string"}, "layer": _INT,
                                                   "point": {"enum": ["x", "h", "y", "z", "head"]},
                                                   "dest": {"type": ["integer", "null"]},
                                                   "send_cols": {"type": "array", "items": _RANGES},
                                                   "msg_bytes": {"type": "array", "items": _NAT}},
                  "required": ["sg", "name", "layer", "point", "dest", "send_cols", "msg_bytes"],
                  "additionalProperties": False}
    # one sender's rows in a round: its message (nbytes long), or the piece of it from byte offset on
    sender = {"type": "object", "properties": {"node": _NAT, "first_row": _NAT, "rows": _NAT, "nbytes": _NAT,
                                               "offset": _NAT},
              "required": ["node", "first_row", "rows", "nbytes", "offset"]}
    mround = {"type": "object", "properties": {"exchange": _NAT, "part": _NAT, "parts": _NAT, "generation": _NAT,
                                               "payload": _NAT, "deadline_slots": _NAT, "slot_us": _NAT,
                                               "takeover_slots": _NAT,
                                               "senders": {"type": "array", "items": sender},
                                               "weak_rows": {"type": "array", "items": _NAT}},
              "required": ["exchange", "part", "parts", "generation", "payload", "deadline_slots", "slot_us",
                           "takeover_slots", "senders", "weak_rows"]}
    mixer = {"type": "object", "properties": {
        "initiator": _NAT,
        "policy": {"type": "object", "properties": {"kind": {"enum": ["done", "fixed"]}, "linger": _NAT,
                                                    "phy": {"enum": ["1M", "2M"]}},
                   "required": ["kind", "linger", "phy"]},
        "exchanges": {"type": "array", "items": {"type": "array", "items": mround}},
        # an image holding every elastic mode: Mixer's maxima and largest message over all modes' rounds
        "image": {"type": "object", "properties": {
            "maxima": {"type": "object", "properties": {k: _NAT for k in MIXER_MAXIMA},
                       "required": list(MIXER_MAXIMA), "additionalProperties": False},
            "max_message": _NAT}, "required": ["maxima", "max_message"]}},
        "required": ["initiator", "policy", "exchanges"]}
    model = {"type": "object", "properties": {k: _NAT for k in ("lookback", "patch_len", "stride", "d_model", "heads",
                                                               "layers", "mlp_hidden", "horizon", "tokens")},
             "required": ["lookback", "patch_len", "stride", "d_model", "heads", "layers", "mlp_hidden", "horizon",
                          "tokens"]}
    model["properties"].update(revin={"type": "boolean"}, ln_eps={"type": "number"}, padding={"type": "string"})
    qparam = {"type": "object", "properties": {"scale": {"type": "number", "exclusiveMinimum": 0}, "zero_point": _INT},
              "required": ["scale", "zero_point"], "additionalProperties": False}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#", "$id": SCHEMA_ID,
        "title": "cisl plan.json", "description": "A compiled cisl plan (codegen/plan/io.py); generated from "
                                                  "the op kinds of codegen/ops/ by codegen/ops/schema.py.",
        "type": "object",
        "properties": {"format": {"const": PLAN_FORMAT}, "format_version": {"const": PLAN_VERSION},
                       "tool_version": {"type": "string"}, "board": {"type": "string"},
                       # a mixed testbed: per node the board it is (or, virtual, stands in for)
                       "node_boards": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                       # a planned split (cisl compile --split): plan node k is testbed node testbed_nodes[k]
                       "testbed_nodes": {"type": "array", "items": _NAT, "minItems": 1},
                       "model": model,
                       "devices": {"type": "integer", "minimum": 1}, "sink": _NAT, "mixer": mixer,
                       "qparams": {"type": "object", "additionalProperties": qparam},
                       "somegather": {"type": "array", "items": somegather},
                       "nodes": {"type": "array", "items": node, "minItems": 1}},
        "required": ["format", "format_version", "board", "model", "devices", "sink", "mixer", "qparams",
                     "somegather", "nodes"],
        "definitions": {"op": op_any, **{f"op_{k}": op_schema(k) for k in sorted(REGISTRY)}},
    }


# -- checking a loaded plan ------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _validator(kind_name: str | None):
    """A compiled validator (fastjsonschema: the schema becomes Python code, fast enough to check
    every plan on every load) of the document, or of one op kind."""
    schema = plan_schema() if kind_name is None else op_schema(kind_name)
    if kind_name is None:  # ops are checked one by one below, with their node and index in the message
        schema["properties"]["nodes"]["items"]["properties"]["ops"] = {"type": "array",
                                                                         "items": {"type": "object"}}
        del schema["definitions"]
    return _compiled(schema)


def _compiled(schema: dict) -> Any:
    """fastjsonschema's validator of ``schema``. The Python it generates for the plan's schemas is
    ~0.6 MB and compiling it costs ~0.3 CPU-s, in every command that loads a plan; its bytecode is
    kept in ~/.cache/cisl/schema under a digest of the schema, fastjsonschema's and Python's versions,
    so a changed schema is a new file. A cache that cannot be read or written is only slower."""
    import hashlib
    import marshal
    import os
    from pathlib import Path

    import fastjsonschema

    key = hashlib.sha256("\0".join((fastjsonschema.VERSION, sys.version, json.dumps(schema, sort_keys=True)))
                         .encode()).hexdigest()
    path = Path.home() / ".cache" / "cisl" / "schema" / f"{key[:32]}.marshal"
    try:
        name, code = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        # the generated module defines one function per scope; the schema's own is named after its $id
        name = fastjsonschema.RefResolver.from_schema(schema).get_scope_name()
        code = compile(fastjsonschema.compile_to_code(schema), "<cisl plan schema>", "exec")
        try:  # a name of this process's own, then one rename: parallel commands may write it at once
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
            tmp.write_bytes(marshal.dumps((name, code)))
            os.replace(tmp, path)
        except OSError:
            pass
    scope: dict[str, Any] = {}
    exec(code, scope)  # noqa: S102 (fastjsonschema's code for cisl's own schema)
    return scope[name]


def _error(validator, doc, whole: str) -> str | None:
    """None if ``doc`` is valid, else what is wrong and where (``whole`` names the document)."""
    import fastjsonschema

    try:
        validator(doc)
    except fastjsonschema.JsonSchemaValueException as e:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.path[1:]).lstrip(".")
        at = f"field {where!r}" if where else whole
        value = e.value if isinstance(e.value, dict) else {}
        if e.rule == "required":
            missing = [k for k in e.rule_definition if k not in value]
            return f"{at}: missing key {missing[0]!r}" if missing else f"{at}: {e.message}"
        if e.rule == "additionalProperties":
            allowed = (e.definition or {}).get("properties", {})
            extra = sorted(k for k in value if k not in allowed)
            return f"{at}: unknown key {extra[0]!r}" if extra else f"{at}: {e.message}"
        return f"{at}: {json.dumps(e.value)[:40]} is not valid: {e.message.split(' ', 1)[-1]}"
    return None


def check_plan_doc(doc: Any, path) -> None:
    """Raise UserError (one line) unless ``doc`` (plan.json, parsed) has the plan's form: the
    document's schema, then every op against its kind's schema."""
    from ..errors import UserError

    hint = "recompile with `cisl compile` (or undo the edit)"
    err = _error(_validator(None), doc, "the document")
    if err is not None:
        raise UserError(f"{path}: {err}; {hint}")
    for nj in doc["nodes"]:
        for i, oj in enumerate(nj["ops"]):
            kind = oj.get("op")
            where = f"{path}: node {nj['device']} op {i}"
            if not isinstance(kind, str) or kind not in REGISTRY:
                ins, outs = oj.get("in", []), oj.get("out", [])
                shapes = ", ".join(f"{t} {nj['tensors'][t]['shape']}" for t in [*ins, *outs]
                                   if isinstance(t, str) and t in nj["tensors"])
                raise UserError(f"{where}: unknown op kind {kind!r} ({shapes or 'no tensors'}); this cisl knows "
                                f"{', '.join(sorted(REGISTRY))}; {hint}")
            err = _error(_validator(kind), oj, "the op")
            if err is not None:
                raise UserError(f"{where} ({kind}): {err}; {hint}")


def check_plan_ops(plan, path) -> None:
    """Raise UserError (one line) unless every op's tensors, constants and exchange fit together."""
    from ..errors import UserError

    hint = "recompile with `cisl compile` (or undo the edit)"
    if plan.devices != int(plan.meta["devices"]):
        raise UserError(f"{path}: 'devices' is {plan.meta['devices']} but the plan has {plan.devices} nodes; {hint}")
    if not 0 <= plan.sink < plan.devices:
        raise UserError(f"{path}: 'sink' {plan.sink} is not one of the nodes 0..{plan.devices - 1}; {hint}")
    sgs = {s.sg for s in plan.sgs}
    for k, node in enumerate(plan.nodes):
        if node.device != k:
            raise UserError(f"{path}: nodes[{k}] says it is device {node.device}; {hint}")
        for name, t in node.tensors.items():
            if node.offsets[name] + t.nbytes > node.arena_bytes:
                raise UserError(f"{path}: node {k} tensor {name} {list(t.shape)} at offset {node.offsets[name]} "
                                f"does not fit the arena of {node.arena_bytes} bytes; {hint}")
        for i, op in enumerate(node.ops):
            kind = kind_of(op)
            try:
                for t in [*op.ins, *op.outs]:
                    if t not in node.tensors:
                        raise PlanShapeError("in" if t in op.ins else "out", f"names tensor {t!r}, which the node "
                                                                             f"does not have")
                if kind.sync and op.attrs["sg"] not in sgs:
                    raise PlanShapeError("sg", f"exchange {op.attrs['sg']} is not in the plan's somegather list")
                kind.check(op, node.tensors, node.constants)
            except PlanShapeError as e:
                raise UserError(f"{path}: node {k} op {i} ({op.kind}): field {e.field!r}: {e}; {hint}") from None
            except UnknownOp as e:
                raise UserError(f"{path}: node {k} op {i}: {e}; {hint}") from None
            except IndexError:  # the check reads the op's tensors by position
                raise UserError(f"{path}: node {k} op {i} ({op.kind}): {len(op.ins)} input and {len(op.outs)} "
                                f"output tensors are not what a {op.kind} op takes; {hint}") from None


def main() -> None:
    json.dump(plan_schema(), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
