"""Test helpers: random-weight cisl model folders (the product's codegen/randmodel.py), and the
smallest training config that still trains a split model in about a second."""

from codegen.randmodel import config_for_tokens, make_model_dir, random_weights, windows

TINY_MODEL = """
[model]
lookback = 32
patch_len = 8
stride = 4
d_model = 16
heads = 4
layers = 1
mlp_hidden = 12
horizon = 8
"""


def tiny_train_config(devices: int = 2, **sections: str) -> str:
    """TOML of a split model small enough to train in about a second on synthetic data; ``sections``
    adds or replaces whole sections, e.g. ``prune='method = "somegather"'``."""
    base = {"split": f"devices = {devices}",
            "data": "synthetic_length = 400\nsynthetic_channels = 2",
            "train": "epochs = 1\nbatch_size = 64\nmax_train_windows = 64\ncalibration_samples = 8\n"
                     "test_samples = 4\nthreads = 1"}
    base.update(sections)
    return TINY_MODEL + "".join(f"[{name}]\n{body}\n" for name, body in base.items())


def exported_mse(model_dir, config, split: str) -> float:
    """The MSE of the model in ``model_dir``/model.onnx (ONNX Runtime) over the whole ``split`` of the
    data ``config`` trains on, on the data's scale: what train.json reports as ``<split>_mse``."""
    import numpy as np
    import onnxruntime as ort

    from codegen.evaluate import EvalSet
    from codegen.train.api import build_data
    from codegen.train.config import load_config

    data, _ = build_data(load_config(config))
    windows = getattr(data, split)
    s = EvalSet.from_raw(*windows.take(np.arange(len(windows))))
    forecast = ort.InferenceSession(str(model_dir / "model.onnx")).run(None, {"window": s.x})[0]
    return float(np.mean(((forecast - s.y) * s.scale[:, None]).astype(np.float64) ** 2))


__all__ = ["TINY_MODEL", "exported_mse", "config_for_tokens", "make_model_dir", "random_weights", "tiny_train_config", "windows"]
