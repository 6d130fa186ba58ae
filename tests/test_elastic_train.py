"""Elastic modes in training (codegen.train.elastic): nested modes from compress and grow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from codegen.modelspec import ModelConfig  # noqa: E402
from codegen.partition import Split, full_masks, random_masks  # noqa: E402
from codegen.elastic import KINDS, Modes, mode_macs, plan_modes  # noqa: E402
from codegen.train.elastic import compress, grow, unit_tensors  # noqa: E402
from codegen.train.model import SplitPatchTST  # noqa: E402

SMALL = ModelConfig(lookback=32, patch_len=8, stride=4, padding="end", d_model=32, heads=4, layers=2,
                    mlp_hidden=24, horizon=8)
PAPER = ModelConfig(lookback=336, patch_len=16, stride=8, padding="end", d_model=128, heads=16, layers=6,
                    mlp_hidden=128, horizon=96)


def _retrain(model: SplitPatchTST, seed: int):
    """A few real Adam steps on random data (what `cisl train`'s fit does, without the data plumbing)."""
    def retrain(tag: str, epochs: int) -> dict:
        g = torch.Generator().manual_seed(seed + len(tag))
        x = torch.randn(16, SMALL.lookback, generator=g)
        y = torch.randn(16, SMALL.horizon, generator=g)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        model.train()
        for _ in range(3 * epochs):
            opt.zero_grad()
            torch.mean((model(x) - y) ** 2).backward()
            opt.step()
        return {"epochs": epochs}
    return retrain


@pytest.mark.unit
def test_the_paper_models_core_needs_at_most_30_percent_of_the_macs() -> None:
    """D = 8: every device has 2 heads of 8 dimensions and 16 hidden units; 4 modes, core ≤ 30 %."""
    split = Split.even(8, PAPER.heads, PAPER.d_model, PAPER.mlp_hidden)
    masks = full_masks(split, PAPER.layers)
    modes, share = plan_modes(PAPER, split, masks, 4, 0.30, ("qk", "v", "z"))
    macs = [mode_macs(PAPER, split, masks, modes, m) for m in range(4)]
    assert macs == sorted(macs, reverse=True) and len(set(macs)) == 4
    assert macs[3] <= 0.30 * macs[0] and macs[3] > 0.2 * macs[0]  # as close to the target as whole units allow
    assert 0 < share < 1
    for m in range(1, 4):  # nested: never more units than the mode above
        for kind in KINDS:
            for l in range(PAPER.layers):
                assert all(a <= b for a, b in zip(modes.counts[m][kind][l], modes.counts[m - 1][kind][l]))
    # hidden units alone cannot get there: the attention is most of the MACs
    with pytest.raises(ValueError, match="needs .* of the MACs, more than core_macs = 0.3"):
        plan_modes(PAPER, split, masks, 4, 0.30, ("z",))


@pytest.mark.train
@pytest.mark.parametrize("keep", [1.0, 0.5])
def test_compress_and_grow_give_nested_modes_that_share_their_weights(keep: float) -> None:
    """Every mode computes, with the final weights, exactly what it computed when it was trained:
    growing a mode freezes everything the smaller modes use. Somegather-pruned bases too."""
    torch.manual_seed(0)
    split = Split.even(2, SMALL.heads, SMALL.d_model, SMALL.mlp_hidden)
    masks = full_masks(split, SMALL.layers) if keep == 1.0 else random_masks(split, SMALL.layers, keep, seed=1)
    model = SplitPatchTST(SMALL, split, masks)
    planned, _ = plan_modes(SMALL, split, masks, 3, 0.4, ("qk", "v", "z"))
    retrain = _retrain(model, 7)
    x = torch.randn(5, SMALL.lookback)
    modes, snapshots, _ = compress(model, planned, retrain, 1)
    assert len(snapshots) == 3
    model.eval()
    model.set_units(unit_tensors(modes, 2, split))
    with torch.no_grad():
        at_training = {2: model(x)}
    shared = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("layers.")}

    seen = {}

    def retrain_and_record(tag: str, epochs: int) -> dict:
        out = retrain(tag, epochs)
        m = int(tag.rsplit(" ", 1)[1])
        model.eval()
        with torch.no_grad():
            seen[m] = model(x)
        return out

    grow(model, modes, snapshots, retrain_and_record, 1, clip=1.0)
    at_training.update(seen)
    assert sorted(at_training) == [0, 1, 2]
    model.eval()
    with torch.no_grad():
        for m in range(3):
            model.set_units(unit_tensors(modes, m, split) if m else None)
            assert torch.equal(model(x), at_training[m]), f"mode {m} changed after it was trained"
        model.set_units(None)
        assert not torch.equal(model(x), at_training[2])
    # the embedding, positions and head were frozen from the core on
    assert all(torch.equal(model.state_dict()[k], v) for k, v in shared.items())
    # every mode is a prefix of every group's rank order, and the modes nest
    for m in range(3):
        for kind in KINDS:
            for l in range(SMALL.layers):
                assert set(modes.units(m, kind, l)) >= set(modes.units(min(m + 1, 2), kind, l))
    assert Modes.from_json(modes.to_json()) == modes


@pytest.mark.unit
def test_permuting_for_prefix_modes_leaves_every_mode_unchanged() -> None:
    """Export reorders every group's units so that a mode is a prefix; each mode still computes the
    same forecast (somegather masks and W_O / W_2 columns move with the units)."""
    from codegen.elastic import permute
    from codegen.train.model import state_to_numpy

    torch.manual_seed(3)
    split = Split.even(2, SMALL.heads, SMALL.d_model, SMALL.mlp_hidden)
    masks = random_masks(split, SMALL.layers, 0.5, seed=2)
    model = SplitPatchTST(SMALL, split, masks).eval()
    planned, _ = plan_modes(SMALL, split, masks, 3, 0.4, ("qk", "v", "z"))
    rng = np.random.default_rng(0)  # a rank order that is not the natural one
    order = {k: [[list(rng.permutation(g)) for g in layer] for layer in planned.order[k]] for k in KINDS}
    modes = Modes(order, planned.counts)
    weights, pmasks, natural = permute(state_to_numpy(model), masks, modes, split)
    twin = SplitPatchTST(SMALL, split, pmasks).eval()
    twin.load_numpy(weights)
    x = torch.randn(4, SMALL.lookback)
    with torch.no_grad():
        for m in range(3):
            model.set_units(unit_tensors(modes, m, split))
            twin.set_units(unit_tensors(natural, m, split))
            torch.testing.assert_close(twin(x), model(x), rtol=0, atol=1e-5)
    assert all(natural.units(2, k, 0) != modes.units(2, k, 0) for k in KINDS)  # it did move units


@pytest.mark.train
def test_cisl_train_exports_every_mode_and_onnx_runtime_runs_each(tmp_path: Path) -> None:
    """`cisl train` with [elastic]: one model.onnx, an optional `mode` input (default 0); ONNX
    Runtime reproduces torch in every mode (≤ 1e-4); the modes' MACs and MSE are recorded."""
    import onnxruntime as ort
    from click.testing import CliRunner

    from codegen.cli import main
    from codegen.onnx_model import load_model

    cfg = tmp_path / "train.toml"
    cfg.write_text(ELASTIC_TOML)
    res = CliRunner().invoke(main, ["train", str(cfg), "--out", str(tmp_path / "m"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "3 elastic modes (0 = largest): mode 0 100 % of the MACs" in res.output
    model = load_model(tmp_path / "m" / "model.onnx")
    modes = model.modes
    assert modes.count == 3 and model.training["elastic"]["macs_share"][2] <= 0.4
    assert len(model.training["elastic"]["val_mse"]) == 3
    twin = SplitPatchTST(model.config, model.split, model.masks).eval()
    twin.load_numpy(model.weights)
    sess = ort.InferenceSession(str(tmp_path / "m" / "model.onnx"))
    x = np.load(tmp_path / "m" / "test_windows.npy").astype(np.float32)
    outs = []
    for m in range(3):
        twin.set_units(unit_tensors(modes, m, model.split) if m else None)
        with torch.no_grad():
            ref = twin(torch.from_numpy(x)).numpy()
        got = sess.run(["forecast"], {"window": x, "mode": np.array(m, dtype=np.int64)})[0]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)
        outs.append(got)
    np.testing.assert_array_equal(sess.run(["forecast"], {"window": x})[0], outs[0])  # mode defaults to 0
    assert not np.allclose(outs[0], outs[2])


@pytest.mark.unit
@pytest.mark.parametrize("change, message", [
    ("modes = 9", "[elastic] modes must be in [1, 8]"),
    ('modes = 3\nshrink = ["heads"]', '[elastic] shrink must list "attention" and/or "hidden"'),
    ("modes = 3\ncore_macs = 0.01", "[elastic] the smallest possible mode"),
    ("modes = 3\n[prune]\nmethod = \"normal\"\nkeep = 0.5", "[elastic] modes need a model whose own columns"),
    ("modes = 3\n[dropout]\nq = 0.1\nrescale = true", "[elastic] modes do not support [dropout] rescale"),
])
def test_bad_elastic_settings_are_one_line(tmp_path: Path, change: str, message: str) -> None:
    from click.testing import CliRunner

    from codegen.cli import main

    cfg = tmp_path / "train.toml"
    cfg.write_text(ELASTIC_TOML.replace("modes = 3\ncore_macs = 0.4", change))
    res = CliRunner().invoke(main, ["train", str(cfg), "--out", str(tmp_path / "m"), "--quiet"])
    assert res.exit_code == 2, res.output
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "m").exists()


ELASTIC_TOML = """[model]
lookback = 32
patch_len = 8
stride = 4
d_model = 32
heads = 4
layers = 2
mlp_hidden = 24
horizon = 8
[split]
devices = 2
[data]
synthetic_length = 600
synthetic_channels = 2
[train]
epochs = 1
batch_size = 64
max_train_windows = 192
calibration_samples = 16
test_samples = 8
threads = 1
[elastic]
modes = 3
core_macs = 0.4
"""
