"""Diagnostic for bench/split_training.py (issue 16): should a model trained *without* message
dropout rescale what arrives (expected / delivered columns, the plan's `rescale` ops and the head's
scaled reduction) or leave lost columns at zero when it meets loss?

Rescaling makes the consumers' input mass independent of the loss, which is what a model trained
with dropout learned (inverted dropout). A model trained without loss never saw either; after a
LayerNorm a lost column's best guess is its mean (about 0), which zero-filling gives, while
rescaling multiplies every received column. This scores the cached dense models of the study
(bench/work/split_training/) both ways under sampled loss on the whole test and validation splits
and writes docs/results/split_training_rescale.md.

    python bench/split_training_rescale.py [--devices 8] [--seeds 0 1 2] [--rates 0 0.1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import split_training as st  # noqa: E402

from codegen.fsutil import write_text_atomic  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                    help="dense models to score (each must be cached by split_training.py)")
    ap.add_argument("--rates", type=float, nargs="+", default=[0.0, 0.1], help="deployed loss rates q")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads; also the --threads the models were trained with (part of their id)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    st.THREADS = args.threads
    t0 = time.time()
    rows = []  # (seed, split, q, zero-filled, rescaled)
    for seed in args.seeds:
        s, model = st.cached_dense(args.devices, seed)
        for split in ("test", "val"):
            for q in args.rates:
                got = {}
                for rescale in (False, True):  # without loss both are the same model
                    model.rescale = rescale
                    got[rescale] = got[False] if q == 0 and rescale else s.test_mse(model, q, loss_seed=seed,
                                                                                     split=split)
                rows.append((seed, split, q, got[False], got[True]))
                print(f"seed {seed} {split} q={q:g}: zero-filled {got[False]:.4f}, rescaled {got[True]:.4f}",
                      flush=True)
    secs = round(time.time() - t0)
    lines = ["# Rescaling for a model trained without message dropout? (diagnostic for split_training.md)", "",
             f"The dense models `fig7-D{args.devices}-s{{{','.join(map(str, args.seeds))}}}-dense` (the reduced "
             "protocol of bench/split_training.py, trained without loss), deployed under sampled loss at rate q "
             "in all three modes (the same patterns both ways, seeded by the model's seed): lost columns left at "
             "zero (and a lost head partial left out) vs what arrived rescaled by expected / delivered. MSE on the "
             "StandardScaler scale over whole splits. "
             f"`python bench/split_training_rescale.py --seeds {' '.join(map(str, args.seeds))} --rates "
             f"{' '.join(f'{q:g}' for q in args.rates)}` ({secs} s).", "",
             "| seed | split | deployed q | zero-filled | rescaled | rescaled vs zero-filled |",
             "|---|---|---|---|---|---|"]
    for seed, split, q, zero, resc in rows:
        lines.append(f"| {seed} | {'validation' if split == 'val' else split} | {q:g} | {zero:.4f} | {resc:.4f} | "
                     f"{100 * (resc / zero - 1):+.1f} % |")
    lossy = [(zero, resc) for _, _, q, zero, resc in rows if q > 0]  # without loss both are one model
    worse = sum(resc > zero for zero, resc in lossy)
    lines += ["", f"Rescaling is worse in {worse} of the {len(lossy)} lossy cells (without loss the two are the "
              "same model)."]
    write_text_atomic(st.ROOT / "docs" / "results" / "split_training_rescale.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
