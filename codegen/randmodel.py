"""cisl model folders (model.onnx + calibration + test windows) made fast, without torch.

Weights are random but shaped like a trained model's (fan-in scaled, non-trivial LayerNorm and
biases), and the windows are RevIN-normalised windows of the built-in synthetic series, so the
int8 pipeline sees realistic value ranges. `cisl fit` sizes models with these (what fits does not
depend on the weights' values), and the tests use them (tests/models.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codegen.data.revin import revin_normalize
from codegen.data.synthetic import synthetic_series
from codegen.modelspec import ModelConfig, weight_shapes
from codegen.onnx_model import build_onnx, save_onnx
from codegen.partition import Split, full_masks, random_masks


def config_for_tokens(tokens: int, d_model: int, heads: int = 16, layers: int = 2, horizon: int = 24) -> ModelConfig:
    """N = 42 is PatchTST/42 (look-back 336, patch 16, stride 8, end padding); N = 8 is look-back 72."""
    if tokens == 42:
        return ModelConfig(lookback=336, patch_len=16, stride=8, padding="end", d_model=d_model, heads=heads,
                           layers=layers, mlp_hidden=d_model, horizon=horizon)
    lookback = (tokens - 1) * 8 + 16
    return ModelConfig(lookback=lookback, patch_len=16, stride=8, padding="none", d_model=d_model, heads=heads,
                       layers=layers, mlp_hidden=d_model, horizon=horizon)


def random_weights(cfg: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = {}
    for name, shape in weight_shapes(cfg).items():
        if name.endswith("ln1.weight") or name.endswith("ln2.weight"):
            w[name] = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            w[name] = 0.1 * rng.standard_normal(shape)
        elif name == "pos":
            w[name] = 0.1 * rng.standard_normal(shape)
        else:
            w[name] = rng.standard_normal(shape) / np.sqrt(shape[-1])
    return {k: v.astype(np.float32) for k, v in w.items()}


def windows(cfg: ModelConfig, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """RevIN-normalised (window, target) pairs from the synthetic series."""
    series, _ = synthetic_series(length=4 * (cfg.lookback + cfg.horizon) + count * 7, channels=2, seed=seed)
    xs, ys = [], []
    rng = np.random.default_rng(seed)
    for _ in range(count):
        c = rng.integers(series.shape[1])
        t = rng.integers(0, len(series) - cfg.lookback - cfg.horizon)
        xs.append(series[t:t + cfg.lookback, c])
        ys.append(series[t + cfg.lookback:t + cfg.lookback + cfg.horizon, c])
    x, y = np.array(xs), np.array(ys)
    xn, mean, std = revin_normalize(x)
    return xn.astype(np.float32), ((y - mean) / std).astype(np.float32)


def make_model_dir(out: Path, cfg: ModelConfig, devices: int, keep_ratio: float, seed: int = 0,
                   calibration: int = 48, tests: int = 16, rescale: bool = False) -> Path:
    """Write out/model.onnx, calibration.npy, test_windows.npy, test_targets.npy; return the onnx path."""
    split = Split.even(devices, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    masks = full_masks(split, cfg.layers) if keep_ratio >= 1.0 else random_masks(split, cfg.layers, keep_ratio, seed)
    out.mkdir(parents=True, exist_ok=True)
    save_onnx(build_onnx(cfg, random_weights(cfg, seed), split, masks, keep_ratio, {"source": "tests/models.py"},
                         rescale=rescale),
              out / "model.onnx")
    cal, _ = windows(cfg, calibration, seed + 1)
    tx, ty = windows(cfg, tests, seed + 2)
    np.save(out / "calibration.npy", cal)
    np.save(out / "test_windows.npy", tx)
    np.save(out / "test_targets.npy", ty)
    return out / "model.onnx"
