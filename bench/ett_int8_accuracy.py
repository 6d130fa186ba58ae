"""Benchmark: int8 deployment vs float on ETTh2's whole test split, for D = 1..16 nodes.

Trains one dense (keep ratio 1) split model on ETTh2, compiles it for several node counts and
scores the int8 reference (bit-exact with the generated C) against the float model on all test
windows, on the StandardScaler scale. Writes docs/results/ett_int8_accuracy.{md,json}.

    python bench/ett_int8_accuracy.py [--data ../shared/data/ett/ETTh2.csv] [--epochs 4]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
import tempfile

import numpy as np

from codegen.compile import CompileOptions, compile_model
from codegen.evaluate import forecast_mse
from codegen.onnx_model import load_model
from codegen.plan.io import load_plan

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """
[model]
lookback = 336
patch_len = 16
stride = 8
d_model = {d_model}
heads = 16
layers = {layers}
mlp_hidden = {d_model}
horizon = 96
[split]
devices = 4
[train]
epochs = {epochs}
batch_size = 256
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "ett" / "ETTh2.csv")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()

    from codegen.train.api import build_data, run_train
    from codegen.train.config import load_config

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "cfg.toml").write_text(CONFIG.format(d_model=args.d_model, layers=args.layers, epochs=args.epochs))
        t0 = time.time()
        summary = run_train(tmp / "cfg.toml", args.data, tmp / "model", progress=True)
        train_s = time.time() - t0
        cfg = load_config(tmp / "cfg.toml", {"data.source": "csv", "data.path": str(args.data)})
        data, _ = build_data(cfg)
        x, y = data.test.take(np.arange(len(data.test)))
        weights = load_model(tmp / "model" / "model.onnx").weights
        rows = []
        for d in args.devices:
            compile_model(tmp / "model" / "model.onnx", tmp / f"build{d}", CompileOptions(devices=d))
            t0 = time.time()
            acc = forecast_mse(load_plan(tmp / f"build{d}"), weights, x, y)
            rows.append({"devices": d, "windows": acc.windows, "mse_float": acc.mse_float, "mse_int8": acc.mse_int8,
                         "relative_increase": acc.relative_increase, "eval_seconds": round(time.time() - t0, 1)})
            print(rows[-1], flush=True)

    result = {"dataset": args.data.name, "config": {"d_model": args.d_model, "layers": args.layers, "heads": 16,
                                                   "lookback": 336, "horizon": 96, "epochs": args.epochs},
              "torch_test_mse": summary["test_mse"], "train_seconds": round(train_s, 1), "params": summary["params"],
              "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ett_int8_accuracy.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "# int8 deployment vs float on ETTh2 (whole test split)",
        "",
        f"Model: PatchTST-style split transformer, look-back 336, horizon 96, patch 16/8 (42 tokens), "
        f"F = {args.d_model}, H = 16, {args.layers} layers, {summary['params']} parameters, trained "
        f"{args.epochs} epochs on ETTh2's training split in {train_s:.0f} s on this machine (2 cores). "
        f"Float torch test MSE: {summary['test_mse']:.4f}.",
        "",
        "The same trained (dense) model compiled for D nodes; int8 = the numpy reference, bit-exact with",
        "the generated C. MSE over all 19 495 channel windows of the test split, StandardScaler scale.",
        "",
        "| nodes D | float MSE | int8 MSE | relative increase |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['devices']} | {r['mse_float']:.4f} | {r['mse_int8']:.4f} | {100 * r['relative_increase']:+.2f} % |")
    lines += ["", "Reproduce: `python bench/ett_int8_accuracy.py` (needs ../shared/data/ett/ETTh2.csv)."]
    (args.out / "ett_int8_accuracy.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
