"""model.onnx: the explicit split graph, its metadata, byte-stability and load_model's errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from codegen import __version__
from codegen.errors import UserError
from codegen.modelspec import ModelConfig, weight_shapes
from codegen.onnx_model import build_onnx, load_model, save_onnx
from codegen.partition import Split, full_masks, random_masks, realised_keep

# 16 heads so that D = 16 is possible; mlp_hidden 24 splits unevenly over 16 and 3 devices.
CFG = ModelConfig(lookback=32, patch_len=8, stride=4, d_model=32, heads=16, layers=2, mlp_hidden=24, horizon=8)


def random_weights(cfg: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in weight_shapes(cfg).items()}


def build(cfg: ModelConfig = CFG, devices: int = 3, keep: float = 0.5, seed: int = 0) -> onnx.ModelProto:
    split = Split.even(devices, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    return build_onnx(cfg, random_weights(cfg, seed), split, random_masks(split, cfg.layers, keep, seed), keep,
                      {"note": "test"})


def windows(n: int = 64, lookback: int = CFG.lookback) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((n, lookback)).astype(np.float32)


def run_ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["forecast"], {"window": x})[0]


# --------------------------------------------------------------------------------------------
# ONNX Runtime == torch split model
# --------------------------------------------------------------------------------------------

UNEVEN = Split.uneven([7, 1, 3, 5], [2, 13, 1, 8], CFG.d_model)
"""A planner-style split: heads and hidden units per device far from even."""


@pytest.mark.unit
@pytest.mark.parametrize("devices", [1, 3, 4, 16, "uneven"])
@pytest.mark.parametrize("keep", [1.0, 0.5, 0.1])
def test_onnxruntime_matches_torch_split_model(devices, keep: float) -> None:
    torch = pytest.importorskip("torch")
    from codegen.train.api import make_untrained
    from codegen.train.model import SplitPatchTST

    split = UNEVEN if devices == "uneven" else Split.even(devices, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    devices = split.devices
    masks = random_masks(split, CFG.layers, keep, seed=devices)
    weights = make_untrained(CFG, split, masks, seed=devices)
    model = build_onnx(CFG, weights, split, masks, keep, {})
    onnx.checker.check_model(model, full_check=True)

    net = SplitPatchTST(CFG, split, masks).eval()
    net.load_numpy(weights)
    x = windows()
    with torch.no_grad():
        expected = net(torch.from_numpy(x)).numpy()
    got = run_ort(model, x)
    assert got.shape == (len(x), CFG.horizon)
    assert np.abs(got - expected).max() <= 1e-4


@pytest.mark.unit
@pytest.mark.parametrize("padding", ["end", "none"])
def test_dynamic_batch_and_padding(padding: str) -> None:
    cfg = ModelConfig(lookback=30, patch_len=8, stride=5, padding=padding, d_model=16, heads=4, layers=1,
                      mlp_hidden=8, horizon=5)
    model = build(cfg, devices=2, keep=0.5)
    onnx.checker.check_model(model, full_check=True)
    for batch in (1, 7):
        assert run_ort(model, windows(batch, cfg.lookback)).shape == (batch, cfg.horizon)


@pytest.mark.unit
def test_pruned_columns_change_the_output() -> None:
    """Sanity: masks are really applied (keep 0.1 differs from the dense allgather)."""
    x = windows()
    split = Split.even(4, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    w = random_weights(CFG)
    dense = run_ort(build_onnx(CFG, w, split, full_masks(split, CFG.layers), 1.0, {}), x)
    pruned = run_ort(build_onnx(CFG, w, split, random_masks(split, CFG.layers, 0.1, 0), 0.1, {}), x)
    assert np.abs(dense - pruned).max() > 1e-3


# --------------------------------------------------------------------------------------------
# Contract: initializers, metadata, determinism
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
def test_dense_weights_and_metadata_follow_the_contract() -> None:
    split = Split.even(3, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    masks = random_masks(split, CFG.layers, 0.5, 7)
    w = random_weights(CFG)
    model = build_onnx(CFG, w, split, masks, 0.5, {"epochs": 2})
    assert model.opset_import[0].version == 17
    assert model.producer_name == "cisl"
    inits = {t.name: t for t in model.graph.initializer}
    for name, shape in weight_shapes(CFG).items():
        assert tuple(inits[name].dims) == shape
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(inits[name]), w[name])
    others = set(inits) - set(weight_shapes(CFG))
    assert all(n.startswith(("idx.", "shape.", "const.")) for n in others)

    meta = {p.key: json.loads(p.value) for p in model.metadata_props}
    assert list(meta) == ["cisl.format", "cisl.format_version", "cisl.tool_version", "cisl.config", "cisl.devices",
                          "cisl.heads_per_device", "cisl.hidden_per_device", "cisl.masks", "cisl.training"]
    assert meta["cisl.format"] == "cisl-model" and meta["cisl.format_version"] == 1
    assert meta["cisl.tool_version"] == __version__
    assert meta["cisl.config"] == CFG.to_json() and meta["cisl.config"]["tokens"] == CFG.tokens
    assert meta["cisl.devices"] == 3 and meta["cisl.heads_per_device"] == [6, 5, 5]
    assert meta["cisl.hidden_per_device"] == [8, 8, 8]
    assert meta["cisl.masks"] == {"keep_ratio": 0.5, "realised_keep": realised_keep(split, masks), "broadcast": masks}
    assert abs(meta["cisl.masks"]["realised_keep"] - 0.5) <= 0.5 / (CFG.layers * (3 * CFG.d_model + CFG.mlp_hidden))
    assert meta["cisl.training"] == {"epochs": 2}

    inp, out = model.graph.input[0], model.graph.output[0]
    assert (inp.name, out.name) == ("window", "forecast")
    assert inp.type.tensor_type.shape.dim[0].dim_param == "batch"
    assert inp.type.tensor_type.shape.dim[1].dim_value == CFG.lookback


@pytest.mark.unit
def test_same_inputs_give_identical_bytes(tmp_path: Path) -> None:
    a, b = build(seed=3), build(seed=3)
    assert a.SerializeToString() == b.SerializeToString()
    save_onnx(a, tmp_path / "a.onnx")
    save_onnx(b, tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert build(seed=4).SerializeToString() != a.SerializeToString()


@pytest.mark.unit
def test_load_model_round_trip(tmp_path: Path) -> None:
    split = Split.even(4, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    masks = random_masks(split, CFG.layers, 0.25, 1)
    w = random_weights(CFG)
    path = tmp_path / "model.onnx"
    save_onnx(build_onnx(CFG, w, split, masks, 0.25, {"seed": 1}), path)
    m = load_model(path)
    assert m.config == CFG and m.devices == 4 and m.heads_per_device == [4, 4, 4, 4]
    assert m.masks == masks and m.keep_ratio == 0.25 and m.training == {"seed": 1}
    assert m.split == split
    assert list(m.weights) == list(weight_shapes(CFG))
    for k in w:
        assert m.weights[k].dtype == np.float32
        np.testing.assert_array_equal(m.weights[k], w[k])
    import hashlib
    assert m.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.unit
def test_uneven_split_round_trips_and_old_models_read_as_even(tmp_path: Path) -> None:
    masks = random_masks(UNEVEN, CFG.layers, 0.5, 2)
    path = tmp_path / "uneven.onnx"
    save_onnx(build_onnx(CFG, random_weights(CFG), UNEVEN, masks, 0.5, {}), path)
    m = load_model(path)
    assert m.split == UNEVEN and m.masks == masks and m.hidden_per_device == [2, 13, 1, 8]
    # a model exported before uneven splits has no cisl.hidden_per_device: its hidden units are even
    old = _set_meta(build(devices=3), "cisl.hidden_per_device", None)
    save_onnx(old, tmp_path / "old.onnx")
    assert load_model(tmp_path / "old.onnx").split == Split.even(3, CFG.heads, CFG.d_model, CFG.mlp_hidden)


# --------------------------------------------------------------------------------------------
# load_model errors: one line, naming the file
# --------------------------------------------------------------------------------------------

def _good_model() -> onnx.ModelProto:
    return build(devices=2, keep=0.5)


def _set_meta(model: onnx.ModelProto, key: str, value: str | None) -> onnx.ModelProto:
    props = [(p.key, p.value) for p in model.metadata_props if p.key != key]
    if value is not None:
        props.append((key, value))
    del model.metadata_props[:]
    for k, v in props:
        model.metadata_props.add(key=k, value=v)
    return model


def _drop_init(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    keep = [t for t in model.graph.initializer if t.name != name]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    return model


def _reshape_init(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    for i, t in enumerate(model.graph.initializer):
        if t.name == name:
            model.graph.initializer[i].CopyFrom(onnx.numpy_helper.from_array(np.zeros((3, 3), np.float32), name))
    return model


def _plain_onnx() -> onnx.ModelProto:
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    return onnx.helper.make_model(graph)


def _masks_meta(mutate) -> str:
    model = _good_model()
    meta = json.loads({p.key: p.value for p in model.metadata_props}["cisl.masks"])
    mutate(meta)
    return json.dumps(meta)


def _bad_column(meta: dict) -> None:
    meta["broadcast"][0][0]["x"] = [31]  # device 0 does not own column 31


BROKEN_MODELS = {
    "no cisl metadata": (lambda: _plain_onnx(), "has no cisl metadata (cisl.format)"),
    "future version": (lambda: _set_meta(_good_model(), "cisl.format_version", "2"), "format_version"),
    "wrong format": (lambda: _set_meta(_good_model(), "cisl.format", '"other"'), "cisl.format"),
    "missing key": (lambda: _set_meta(_good_model(), "cisl.masks", None), "cisl.masks"),
    "bad json": (lambda: _set_meta(_good_model(), "cisl.config", "{lookback: 3"), "cisl.config"),
    "config field missing": (lambda: _set_meta(_good_model(), "cisl.config", '{"lookback": 32}'), "cisl.config"),
    "bad config": (lambda: _set_meta(_good_model(), "cisl.config",
                                     json.dumps({**CFG.to_json(), "heads": 5})), "multiple of heads"),
    "devices > heads": (lambda: _set_meta(_good_model(), "cisl.devices", "17"), "cisl.devices"),
    "heads_per_device": (lambda: _set_meta(_good_model(), "cisl.heads_per_device", "[9, 9]"), "heads_per_device"),
    "hidden_per_device": (lambda: _set_meta(_good_model(), "cisl.hidden_per_device", "[24, 0]"), "node 1"),
    "hidden not json": (lambda: _set_meta(_good_model(), "cisl.hidden_per_device", "[24,"), "hidden_per_device"),
    "masks not a list": (lambda: _set_meta(_good_model(), "cisl.masks", _masks_meta(
        lambda m: m.update(broadcast="x"))), "cisl.masks"),
    "masks bad column": (lambda: _set_meta(_good_model(), "cisl.masks", _masks_meta(_bad_column)), "own columns"),
    "keep ratio": (lambda: _set_meta(_good_model(), "cisl.masks", _masks_meta(
        lambda m: m.update(keep_ratio=2))), "keep_ratio"),
    "training not object": (lambda: _set_meta(_good_model(), "cisl.training", "[1]"), "cisl.training"),
    "weight missing": (lambda: _drop_init(_good_model(), "layers.1.wq.weight"), "layers.1.wq.weight"),
    "weight shape": (lambda: _reshape_init(_good_model(), "head.weight"), "head.weight"),
}


@pytest.mark.unit
@pytest.mark.parametrize("case", list(BROKEN_MODELS))
def test_load_model_errors_are_one_line(tmp_path: Path, case: str) -> None:
    make, expected = BROKEN_MODELS[case]
    path = tmp_path / "broken.onnx"
    path.write_bytes(make().SerializeToString())
    with pytest.raises(UserError) as err:
        load_model(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and expected in msg


@pytest.mark.unit
def test_load_model_file_errors(tmp_path: Path) -> None:
    cases = {
        tmp_path / "missing.onnx": "no such file",
        tmp_path: "is a directory",
    }
    (tmp_path / "text.onnx").write_text("this is not a protobuf \x00\xff at all\n")
    cases[tmp_path / "text.onnx"] = "not an ONNX model"
    (tmp_path / "empty.onnx").write_bytes(b"")
    cases[tmp_path / "empty.onnx"] = "not an ONNX model"
    for path, expected in cases.items():
        with pytest.raises(UserError) as err:
            load_model(path)
        msg = str(err.value)
        assert "\n" not in msg and str(path) in msg and expected in msg, msg
