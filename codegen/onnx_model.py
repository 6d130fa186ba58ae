"""Export and load `model.onnx`: the explicit D-way split graph plus the cisl metadata.

The graph mirrors docs/design/decisions.md §2-§3 device by device, so that any ONNX runtime
computes exactly the split model (device-local LayerNorm, pruned columns contribute nothing).
`cisl compile` reads only the dense initializers named as in `weight_shapes` and the metadata
(§4); the slicing of the dense weights is done in the graph by Gather nodes with constant
`idx.*` tables. numpy + onnx only: `cisl compile` must not need torch.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from codegen import __version__
from codegen.elastic import Modes, check_counts, full_order
from codegen.errors import UserError
from codegen.modelspec import ModelConfig, patch_index, weight_shapes
from codegen.partition import (POINTS, Masks, Split, gathered_cols, realised_keep, residual_problem, uneven_problem,
                               validate_masks)

FORMAT = "cisl-model"
FORMAT_VERSION = 1
OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17; fixed so the bytes do not depend on the onnx release

META_KEYS = (
    "cisl.format", "cisl.format_version", "cisl.tool_version", "cisl.config", "cisl.devices",
    "cisl.heads_per_device", "cisl.masks", "cisl.training",
)
# a model may also carry cisl.hidden_per_device; without it the hidden units are spread evenly (as in
# every model exported before uneven splits)


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------

class _GraphBuilder:
    """Collects nodes and initializers; every node's single output is named after the node."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._init_names: set[str] = set()

    def init(self, name: str, value: np.ndarray) -> str:
        if name not in self._init_names:  # index tables are shared between layers and devices
            self.inits.append(numpy_helper.from_array(np.require(value, requirements="C"), name))  # 0-d stays 0-d
            self._init_names.add(name)
        return name

    def idx(self, name: str, cols: list[int] | range) -> str:
        return self.init(name, np.asarray(list(cols), dtype=np.int64))

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def gather(self, data: str, index: str, axis: int, name: str) -> str:
        return self.op("Gather", [data, index], name, axis=axis)

    def linear(self, x: str, weight: str, bias: str, rows: str, cols: str, name: str) -> str:
        """x @ W[rows][:, cols]^T + b[rows]: a device's slice of a dense nn.Linear weight."""
        w = self.gather(self.gather(weight, rows, 0, name + ".w_rows"), cols, 1, name + ".w")
        wt = self.op("Transpose", [w], name + ".wT", perm=[1, 0])
        b = self.gather(bias, rows, 0, name + ".b")
        return self.op("Add", [self.op("MatMul", [x, wt], name + ".mm"), b], name)


def _check_inputs(cfg: ModelConfig, weights: dict[str, np.ndarray], split: Split, masks: Masks) -> None:
    problems = cfg.problems()
    if problems:
        raise ValueError("invalid ModelConfig: " + "; ".join(problems))
    if (split.heads, split.d_model, split.mlp_hidden) != (cfg.heads, cfg.d_model, cfg.mlp_hidden):
        raise ValueError("split does not match the model config")
    for name, shape in weight_shapes(cfg).items():
        if name not in weights:
            raise ValueError(f"weight {name!r} is missing")
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"weight {name!r} has shape {weights[name].shape}, expected {shape}")
    problem = validate_masks(split, masks, cfg.layers)
    if problem:
        raise ValueError("invalid masks: " + problem)


def _device_attention(g: _GraphBuilder, q: str, k: str, v: str, heads: int, d: int, scale: str, name: str) -> str:
    """softmax(Q_h K_h^T / sqrt(d)) V_h for each of a device's heads, heads concatenated."""
    split_shape = g.init(f"shape.heads{heads}", np.array([0, 0, heads, d], dtype=np.int64))
    merge_shape = g.init(f"shape.merge{heads}", np.array([0, 0, heads * d], dtype=np.int64))

    def per_head(t: str, perm: list[int], tag: str) -> str:
        return g.op("Transpose", [g.op("Reshape", [t, split_shape], f"{name}.{tag}4")], f"{name}.{tag}h", perm=perm)

    qh = per_head(q, [0, 2, 1, 3], "q")  # [B, h, N, d]
    kt = per_head(k, [0, 2, 3, 1], "k")  # [B, h, d, N]
    vh = per_head(v, [0, 2, 1, 3], "v")  # [B, h, N, d]
    scores = g.op("Mul", [g.op("MatMul", [qh, kt], f"{name}.qk"), scale], f"{name}.scores")
    probs = g.op("Softmax", [scores], f"{name}.probs", axis=-1)
    ctx = g.op("MatMul", [probs, vh], f"{name}.ctx")
    ctx = g.op("Transpose", [ctx], f"{name}.ctxT", perm=[0, 2, 1, 3])
    return g.op("Reshape", [ctx, merge_shape], f"{name}.out")


def _layer(g: _GraphBuilder, cfg: ModelConfig, split: Split, masks: Masks, l: int, x: str,
           prune_own: bool = False, modes: Modes | None = None) -> str:
    """One pre-norm layer, device by device; returns the name of the global output X'.
    ``prune_own`` (normal pruning): a device holds only the broadcast ones of its own columns.
    ``modes`` (an elastic model, every mode a prefix of every group): the graph input ``mode``
    picks the units the layer keeps; a dropped unit's Q/K/V dimension or hidden unit is 0."""
    p = f"layers.{l}."
    D = split.devices

    def keep(kind: str, rows: str, name: str) -> str | None:
        """The mode's 0/1 mask of ``kind`` over a device's rows (None: not an elastic model)."""
        if modes is None:
            return None
        if kind not in per_mode:  # the layer's mask of this mode, once for all devices
            table = np.stack([modes.alive(m, split)[l][kind] for m in range(modes.count)]).astype(np.float32)
            per_mode[kind] = g.gather(g.init(f"elastic.l{l}.{kind}", table), "mode", 0, f"l{l}.mode.{kind}")
        return g.gather(per_mode[kind], rows, 0, name)

    per_mode: dict[str, str] = {}

    def masked(t: str, mask: str | None, name: str) -> str:
        return t if mask is None else g.op("Mul", [t, mask], name)

    def cols(point: str, k: int) -> str:
        return g.idx(f"idx.l{l}.{point}.d{k}", gathered_cols(split, masks, l, point, k, prune_own))

    def model_rows(k: int) -> str:
        return g.idx(f"idx.model.d{k}", range(*split.model_cols(k)))

    def hidden_rows(k: int) -> str:
        return g.idx(f"idx.hidden.d{k}", range(*split.hidden_cols(k)))

    def local_ln(src: str, ln: str, idx: str, name: str) -> str:
        """LayerNorm over exactly the columns the device holds, with gamma/beta of those columns."""
        held = g.gather(src, idx, 2, name + ".in")
        gamma = g.gather(p + ln + ".weight", idx, 0, name + ".gamma")
        beta = g.gather(p + ln + ".bias", idx, 0, name + ".beta")
        return g.op("LayerNormalization", [held, gamma, beta], name, axis=-1, epsilon=cfg.ln_eps)

    scale = g.init("const.attn_scale", np.array(1.0 / math.sqrt(cfg.d_head), dtype=np.float32))

    # x-point -> device-local LN1 -> Q, K, V of the device's own heads -> attention
    heads_out = []
    for k in range(D):
        n = f"l{l}.d{k}"
        gx = cols("x", k)
        xn = local_ln(x, "ln1", gx, f"{n}.ln1")
        q, kk, v = (g.linear(xn, p + w + ".weight", p + w + ".bias", model_rows(k), gx, f"{n}.{w}")
                    for w in ("wq", "wk", "wv"))
        mqk, mv = keep("qk", model_rows(k), f"{n}.keep_qk"), keep("v", model_rows(k), f"{n}.keep_v")
        q, kk, v = masked(q, mqk, f"{n}.wq.kept"), masked(kk, mqk, f"{n}.wk.kept"), masked(v, mv, f"{n}.wv.kept")
        heads_out.append(_device_attention(g, q, kk, v, split.heads_per_device[k], cfg.d_head, scale, f"{n}.attn"))
    h = g.op("Concat", heads_out, f"l{l}.H", axis=2) if D > 1 else heads_out[0]

    # h-point -> W_O (own model columns) -> residual, local per device
    y_parts = []
    for k in range(D):
        n = f"l{l}.d{k}"
        o = g.linear(g.gather(h, cols("h", k), 2, f"{n}.h"), p + "wo.weight", p + "wo.bias", model_rows(k),
                     cols("h", k), f"{n}.wo")
        y_parts.append(g.op("Add", [g.gather(x, model_rows(k), 2, f"{n}.x_own"), o], f"{n}.Y"))
    y = g.op("Concat", y_parts, f"l{l}.Y", axis=2) if D > 1 else y_parts[0]

    # y-point -> device-local LN2 -> W_1 (own hidden columns) -> ReLU
    z_parts = []
    for k in range(D):
        n = f"l{l}.d{k}"
        gy = cols("y", k)
        yn = local_ln(y, "ln2", gy, f"{n}.ln2")
        zk = g.op("Relu", [g.linear(yn, p + "w1.weight", p + "w1.bias", hidden_rows(k), gy, f"{n}.w1")],
                  f"{n}.Z" if modes is None else f"{n}.Zall")
        z_parts.append(masked(zk, keep("z", hidden_rows(k), f"{n}.keep_z"), f"{n}.Z"))
    z = g.op("Concat", z_parts, f"l{l}.Z", axis=2) if D > 1 else z_parts[0]

    # z-point -> W_2 (own model columns) -> residual
    out_parts = []
    for k in range(D):
        n = f"l{l}.d{k}"
        gz = cols("z", k)
        o2 = g.linear(g.gather(z, gz, 2, f"{n}.z"), p + "w2.weight", p + "w2.bias", model_rows(k), gz, f"{n}.w2")
        out_parts.append(g.op("Add", [g.gather(y, model_rows(k), 2, f"{n}.y_own"), o2], f"{n}.X"))
    return g.op("Concat", out_parts, f"l{l}.X", axis=2) if D > 1 else g.op("Identity", out_parts, f"l{l}.X")


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def build_onnx(cfg: ModelConfig, weights: dict[str, np.ndarray], split: Split, masks: Masks,
               keep_ratio: float, training: dict, rescale: bool = False, prune_own: bool = False,
               elastic: dict | None = None) -> onnx.ModelProto:
    """The split model as an ONNX graph with dense weights and the cisl metadata (decisions.md §4).

    ``elastic`` (an elastic model: {"counts": per mode, kind, layer and group, ...}, the weights
    permuted so that every mode keeps the first units of every group, codegen.elastic.permute):
    the graph takes an optional int64 input ``mode`` (default 0, the largest) and the metadata
    key cisl.elastic holds the record."""
    _check_inputs(cfg, weights, split, masks)
    modes = None
    if elastic is not None:
        problem = check_counts(elastic.get("counts"), split, cfg.layers)
        if problem:
            raise ValueError(f"invalid elastic counts: {problem}")
        modes = Modes(full_order(split, cfg.layers), elastic["counts"])
    g = _GraphBuilder()
    for name in weight_shapes(cfg):  # dense weights first, in the contract's order
        g.init(name, np.asarray(weights[name], dtype=np.float32))

    patches = g.gather("window", g.init("idx.patch", patch_index(cfg)), 1, "patches")  # [B, N, P]
    emb_t = g.op("Transpose", ["embed.weight"], "embed.wT", perm=[1, 0])
    x = g.op("Add", [g.op("MatMul", [patches, emb_t], "embed.mm"), "embed.bias"], "embed")
    x = g.op("Add", [x, "pos"], "X0")
    if modes is not None:  # a graph input with a default: runtimes may feed it or not
        g.init("mode", np.array(0, dtype=np.int64))
    for l in range(cfg.layers):
        x = _layer(g, cfg, split, masks, l, x, prune_own, modes)

    flat = g.op("Reshape", [x, g.init("shape.flatten", np.array([0, -1], dtype=np.int64))], "head.flat")
    head_t = g.op("Transpose", ["head.weight"], "head.wT", perm=[1, 0])
    g.op("Add", [g.op("MatMul", [flat, head_t], "head.mm"), "head.bias"], "forecast")

    graph = helper.make_graph(
        g.nodes, "cisl",
        inputs=[helper.make_tensor_value_info("window", TensorProto.FLOAT, ["batch", cfg.lookback])]
        + ([helper.make_tensor_value_info("mode", TensorProto.INT64, [])] if modes is not None else []),
        outputs=[helper.make_tensor_value_info("forecast", TensorProto.FLOAT, ["batch", cfg.horizon])],
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                              producer_name="cisl", producer_version=__version__)
    broadcast = [[{pt: [int(c) for c in entry[pt]] for pt in POINTS} for entry in layer] for layer in masks]
    meta = {
        "cisl.format": _json(FORMAT),
        "cisl.format_version": _json(FORMAT_VERSION),
        "cisl.tool_version": _json(__version__),
        "cisl.config": _json(cfg.to_json()),
        "cisl.devices": _json(split.devices),
        "cisl.heads_per_device": _json(list(split.heads_per_device)),
        "cisl.hidden_per_device": _json(list(split.hidden_per_device)),
        "cisl.masks": _json({"keep_ratio": float(keep_ratio), "realised_keep": realised_keep(split, masks),
                             "broadcast": broadcast, **({"rescale": True} if rescale else {}),
                             **({"prune_own": True} if prune_own else {})}),
        "cisl.training": _json(training),
        **({"cisl.elastic": _json(elastic)} if elastic is not None else {}),
    }
    helper.set_model_props(model, meta)
    return model


def save_onnx(model: onnx.ModelProto, path: Path) -> None:
    """Write the model bytes (SerializeToString is deterministic for our protos: no maps)."""
    Path(path).write_bytes(model.SerializeToString())


# --------------------------------------------------------------------------------------------
# Load
# --------------------------------------------------------------------------------------------

@dataclass
class CislModel:
    """What `cisl compile` needs from a model.onnx: the dense weights and the split metadata."""

    path: Path
    sha256: str
    config: ModelConfig
    devices: int
    heads_per_device: list[int]
    masks: Masks
    keep_ratio: float
    weights: dict[str, np.ndarray]
    training: dict
    rescale: bool = False  # cisl.masks.rescale: received columns scaled by expected / delivered
    prune_own: bool = False  # cisl.masks.prune_own: normal pruning, unbroadcast columns dead for their owner

    hidden_per_device: list[int] | None = None  # None: spread evenly (models without the key)
    elastic: dict | None = None  # cisl.elastic: the modes' counts (every mode a prefix of every group) and record

    @property
    def modes(self) -> Modes | None:
        """The elastic modes (None: one model)."""
        if self.elastic is None:
            return None
        return Modes(full_order(self.split, self.config.layers), self.elastic["counts"])

    @property
    def split(self) -> Split:
        """The split the model was trained and exported for (even or planned)."""
        cfg = self.config  # Split spreads the hidden units evenly when the model names none
        return Split(self.devices, cfg.heads, cfg.d_model, cfg.mlp_hidden, tuple(self.heads_per_device),
                     tuple(self.hidden_per_device or ()))


_REEXPORT = "re-export it with `cisl train`"
Fail = Callable[[str], NoReturn]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_config(fail: Fail, raw: Any) -> ModelConfig:
    if not isinstance(raw, dict):
        fail("metadata cisl.config is not a JSON object")
    expected = {"lookback": int, "patch_len": int, "stride": int, "padding": str, "d_model": int, "heads": int,
                "layers": int, "mlp_hidden": int, "horizon": int, "revin": bool, "ln_eps": float}
    for key, typ in expected.items():
        if key not in raw:
            fail(f"metadata cisl.config has no {key!r}")
        v = raw[key]
        ok = (_is_int(v) if typ is int else isinstance(v, bool) if typ is bool
              else isinstance(v, (int, float)) and not isinstance(v, bool) if typ is float else isinstance(v, str))
        if not ok:
            fail(f"metadata cisl.config {key!r} must be {typ.__name__}, got {v!r}")
    cfg = ModelConfig.from_json(raw)
    problems = cfg.problems()
    if problems:
        fail("metadata cisl.config is invalid: " + "; ".join(problems))
    if "tokens" in raw and raw["tokens"] != cfg.tokens:
        fail(f"metadata cisl.config says tokens={raw['tokens']!r} but the config implies {cfg.tokens}")
    return cfg


def _parse_masks(fail: Fail, raw: Any, split: Split, layers: int) -> tuple[Masks, float, bool, bool]:
    if not isinstance(raw, dict) or "keep_ratio" not in raw or "broadcast" not in raw:
        fail('metadata cisl.masks must be an object with "keep_ratio" and "broadcast"')
    keep = raw["keep_ratio"]
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0.0 < keep <= 1.0:
        fail(f"metadata cisl.masks keep_ratio must be a number in (0, 1], got {keep!r}")
    bc = raw["broadcast"]
    shape_ok = isinstance(bc, list) and all(
        isinstance(layer, list) and all(
            isinstance(e, dict) and all(isinstance(c, list) and all(_is_int(i) for i in c) for c in e.values())
            for e in layer)
        for layer in bc)
    if not shape_ok:
        fail("metadata cisl.masks broadcast must be [layer][device]{point: [column, ...]} with integer columns")
    problem = validate_masks(split, bc, layers)
    if problem:
        fail(f"metadata cisl.masks is invalid: {problem}")
    flags = {}
    for key in ("rescale", "prune_own"):
        flags[key] = raw.get(key, False)
        if not isinstance(flags[key], bool):
            fail(f"metadata cisl.masks {key} must be true or false, got {flags[key]!r}")
    out = [[{p: list(e[p]) for p in POINTS} for e in layer] for layer in bc]
    if flags["prune_own"]:
        problem = residual_problem(out)
        if problem:
            fail(f"metadata cisl.masks prune_own: {problem}")
    return out, float(keep), flags["rescale"], flags["prune_own"]


def load_model(path: str | Path) -> CislModel:
    """Read and validate a cisl model.onnx; every problem is a one-line UserError."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file; pass the model.onnx written by `cisl train`")
    if path.is_dir():
        hint = f" (did you mean {path / 'model.onnx'}?)" if (path / "model.onnx").is_file() else ""
        raise UserError(f"{path} is a directory; pass the model.onnx file written by `cisl train`{hint}")
    data = path.read_bytes()

    def fail(problem: str) -> NoReturn:
        raise UserError(f"{path}: {problem}; {_REEXPORT}")

    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
        parse_ok = True
    except Exception:  # protobuf raises DecodeError (and sometimes others) on garbage
        parse_ok = False
    if not parse_ok or len(model.graph.node) == 0:
        raise UserError(f"{path} is not an ONNX model (cannot parse it or its graph is empty); "
                        "pass the model.onnx written by `cisl train`")

    props = {p.key: p.value for p in model.metadata_props}
    if "cisl.format" not in props:
        raise UserError(f"{path} has no cisl metadata (cisl.format); it was not exported by `cisl train` — "
                        "export it with cisl train or add the metadata")
    meta: dict[str, Any] = {}
    for key in META_KEYS:
        if key not in props:
            fail(f"metadata key {key!r} is missing")
        try:
            meta[key] = json.loads(props[key])
        except ValueError:
            if key in ("cisl.format", "cisl.tool_version"):  # tolerate bare strings for the plain-text keys
                meta[key] = props[key]
            else:
                fail(f"metadata {key} is not valid JSON")
    if meta["cisl.format"] != FORMAT:
        fail(f"metadata cisl.format is {meta['cisl.format']!r}, expected {FORMAT!r}")
    version = meta["cisl.format_version"]
    if version != FORMAT_VERSION or not _is_int(version):
        raise UserError(f"{path}: unsupported cisl.format_version {version!r} (this cisl "
                        f"{__version__} reads version {FORMAT_VERSION}); re-export it with this cisl's "
                        "`cisl train` or use a matching cisl version")

    cfg = _parse_config(fail, meta["cisl.config"])
    devices = meta["cisl.devices"]
    if not _is_int(devices) or not 1 <= devices <= cfg.heads:
        fail(f"metadata cisl.devices must be an integer in [1, heads={cfg.heads}], got {devices!r}")
    hpd = meta["cisl.heads_per_device"]
    hidden = None
    if "cisl.hidden_per_device" in props:
        try:
            hidden = json.loads(props["cisl.hidden_per_device"])
        except ValueError:
            fail("metadata cisl.hidden_per_device is not valid JSON")
    even = Split.even(devices, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    counts_ok = (isinstance(hpd, list) and len(hpd) == devices and all(_is_int(h) for h in hpd)
                 and (hidden is None or (isinstance(hidden, list) and len(hidden) == devices
                                         and all(_is_int(h) for h in hidden))))
    problem = (uneven_problem(hpd, hidden if hidden is not None else list(even.hidden_per_device), cfg.heads,
                              cfg.mlp_hidden) if counts_ok else "")
    if problem is not None:
        fail(f"metadata cisl.heads_per_device {hpd!r} / cisl.hidden_per_device {hidden!r} is not a split of "
             f"{cfg.heads} heads and {cfg.mlp_hidden} hidden units over {devices} devices"
             + (f" ({problem})" if problem else ""))
    split = Split.uneven(hpd, hidden if hidden is not None else even.hidden_per_device, cfg.d_model)
    masks, keep, rescale, prune_own = _parse_masks(fail, meta["cisl.masks"], split, cfg.layers)
    training = meta["cisl.training"]
    if not isinstance(training, dict):
        fail("metadata cisl.training must be a JSON object")

    inits = {t.name: t for t in model.graph.initializer}
    weights: dict[str, np.ndarray] = {}
    for name, shape in weight_shapes(cfg).items():
        if name not in inits:
            fail(f"weight {name!r} is missing (expected shape {shape})")
        t = inits[name]
        if t.data_type != TensorProto.FLOAT:
            fail(f"weight {name!r} is not float32")
        if tuple(t.dims) != shape:
            fail(f"weight {name!r} has shape {tuple(t.dims)}, expected {shape} for the model in cisl.config")
        try:
            weights[name] = numpy_helper.to_array(t).astype(np.float32, copy=False)
        except Exception as e:  # e.g. external data that is not next to the file
            fail(f"weight {name!r} cannot be read ({type(e).__name__})")
        bad = int(np.size(weights[name]) - np.count_nonzero(np.isfinite(weights[name])))
        if bad:
            fail(f"weight {name!r} holds {bad} NaN or infinite values")

    elastic = None
    if "cisl.elastic" in props:
        try:
            elastic = json.loads(props["cisl.elastic"])
        except ValueError:
            fail("metadata cisl.elastic is not valid JSON")
        problem = check_counts(elastic.get("counts") if isinstance(elastic, dict) else None, split, cfg.layers)
        if problem:
            fail(f"metadata cisl.elastic counts {problem}")
    return CislModel(path=path, sha256=hashlib.sha256(data).hexdigest(), config=cfg, devices=devices,
                     heads_per_device=list(hpd), masks=masks, keep_ratio=keep, weights=weights, training=training,
                     rescale=rescale, prune_own=prune_own, hidden_per_device=hidden, elastic=elastic)
