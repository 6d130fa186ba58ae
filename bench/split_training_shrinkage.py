"""Diagnostic for bench/split_training.py: does damping a forecast lower the ETTh2 test MSE?

Under the reduced protocol, narrower models (normal pruning) and models that lose messages score
*better* than the dense model on ETTh2. If that is because the dense model over-fits and a damped
forecast (one that moves less far from the look-back mean) is simply closer on this test split,
scaling the dense model's forecast towards the look-back mean, y_a = m + a (y - m), must lower the
MSE for some a < 1. This scores the cached dense model of fig7 (bench/work/split_training/) for
several a on the whole test split and on the validation split, and writes
docs/results/split_training_shrinkage.md (atomically).

    python bench/split_training_shrinkage.py [--devices 8] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import split_training as st  # noqa: E402

from codegen.fsutil import write_text_atomic  # noqa: E402

ALPHAS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.0)


def mse_by_alpha(model, windows, revin: bool) -> dict[float, float]:
    import torch

    from codegen.train.loop import EVAL_BATCH, predict

    model.eval()
    tot = dict.fromkeys(ALPHAS, 0.0)
    count = 0
    with torch.no_grad():
        for lo in range(0, len(windows), EVAL_BATCH):
            x, y = windows.take(np.arange(lo, min(lo + EVAL_BATCH, len(windows))))
            pred = predict(model, torch.from_numpy(x), revin).double().numpy()
            m = x.mean(axis=-1, keepdims=True)  # the look-back mean (what RevIN removes)
            for a in ALPHAS:
                tot[a] += float((((m + a * (pred - m)) - y) ** 2).sum())
            count += y.size
    return {a: t / count for a, t in tot.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0],
                    help="dense models to score (each must be cached by split_training.py)")
    ap.add_argument("--threads", type=int, default=st.THREADS,
                    help="the --threads the models were trained with (part of their id)")
    args = ap.parse_args()
    st.THREADS = args.threads
    scores = {}
    for seed in args.seeds:
        s, model = st.cached_dense(args.devices, seed)
        scores[seed] = (mse_by_alpha(model, s.data.test, s.cfg.model.revin),
                        mse_by_alpha(model, s.data.val, s.cfg.model.revin))
    names = ", ".join(f"`fig7-D{args.devices}-s{seed}-dense`" for seed in args.seeds)
    lines = ["# Does a damped forecast score better on ETTh2? (diagnostic for split_training.md)", "",
             f"The dense model(s) {names} (the reduced protocol of bench/split_training.py), the forecast "
             "scaled towards the look-back mean m: y_a = m + a (y − m); a = 0 forecasts the mean. MSE on the "
             "StandardScaler scale over whole splits, relative to a = 1 per seed. "
             f"`python bench/split_training_shrinkage.py --seeds {' '.join(map(str, args.seeds))}`.", "",
             "| a | " + " | ".join(f"seed {seed}: test / validation" for seed in args.seeds) + " |",
             "|---|" + "---|" * len(args.seeds)]
    for a in ALPHAS:
        cells = [f"{test[a]:.4f} ({100 * (test[a] / test[1.0] - 1):+.1f} %) / {val[a]:.4f} "
                 f"({100 * (val[a] / val[1.0] - 1):+.1f} %)" for test, val in scores.values()]
        lines.append(f"| {a:g} | " + " | ".join(cells) + " |")
    write_text_atomic(st.ROOT / "docs" / "results" / "split_training_shrinkage.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
