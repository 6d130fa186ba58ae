"""Tables and plots of the split-training study (bench/split_training.py) into docs/results/.

    python bench/split_training_report.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _load(runs: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(runs.glob("*.json"))}


def _ms(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{np.mean(values):.4f} ± {np.std(values):.4f}"


def fig7(runs: dict[str, dict], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["## Fig. 7 — MSE vs communication saving: somegather vs normal pruning", ""]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, D in zip(axes, (8, 16)):
        dense = [r["test_mse"] for k, r in runs.items() if k.startswith(f"fig7-D{D}-") and k.endswith("-dense")]
        seeds = sorted({r["seed"] for k, r in runs.items() if k.startswith(f"fig7-D{D}-")})
        if not dense:
            continue
        lines += [f"**D = {D}** ({len(dense)} seed(s): {seeds}); unpruned (allgather) test MSE {_ms(dense)}", "",
                  "| keep ratio | saving | somegather MSE | vs unpruned | normal pruning MSE | vs unpruned |",
                  "|---|---|---|---|---|---|"]
        curves = {}
        for method in ("somegather", "normal"):
            per_keep: dict[float, list[float]] = {}
            for k, r in runs.items():
                if k.startswith(f"fig7-D{D}-") and k.endswith(f"-{method}"):
                    for pt in r["points"]:
                        per_keep.setdefault(pt["keep"], []).append(pt["test_mse"])
            curves[method] = per_keep
        base = float(np.mean(dense))
        keeps = sorted({kp for c in curves.values() for kp in c} | {1.0}, reverse=True)
        for keep in keeps:
            sg = curves["somegather"].get(keep, dense if keep == 1.0 else [])
            nm = curves["normal"].get(keep, dense if keep == 1.0 else [])
            rel = lambda v: f"{100 * (np.mean(v) - base) / base:+.1f} %" if v else "–"  # noqa: E731
            lines.append(f"| {keep:g} | {100 * (1 - keep):.0f} % | {_ms(sg)} | {rel(sg)} | {_ms(nm)} | {rel(nm)} |")
        lines.append("")
        for method, style in (("somegather", "o-"), ("normal", "s--")):
            xs = [0.0] + [100 * (1 - kp) for kp in sorted(curves[method], reverse=True)]
            ys = [dense] + [curves[method][kp] for kp in sorted(curves[method], reverse=True)]
            ax.errorbar(xs, [np.mean(y) for y in ys], yerr=[np.std(y) for y in ys], fmt=style, capsize=3,
                        label="somegather" if method == "somegather" else "normal pruning")
        ax.set_title(f"ETTh2, D = {D}")
        ax.set_xlabel("communication saving (%)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test MSE")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "fig7_pruning.png", dpi=120)
    plt.close(fig)
    lines += ["![Fig. 7](fig7_pruning.png)", ""]
    return lines


def fig8(runs: dict[str, dict], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codegen.lossmodel import LossRates

    rows = [r for k, r in runs.items() if k.startswith("fig8-")]
    if not rows:
        return []
    q_train = sorted({r["q_train"] for r in rows})
    q_dep = sorted({float(q) for r in rows for q in r["test_mse_at_q"]})
    lines = ["## Fig. 8 — MSE vs message loss, trained with and without message dropout", "",
             "q applies to all three loss modes (link, receiver, sender); the effective per-link loss is "
             "1 − (1 − q)³. Rows: loss rate during training (0 = no dropout); columns: deployed loss rate.", "",
             "| trained at q | " + " | ".join(f"deploy q = {100 * q:g} % (link loss {100 * LossRates.uniform(q).effective_link_loss:.1f} %)"
                                            for q in q_dep) + " | rise at 10 % |",
             "|---|" + "---|" * (len(q_dep) + 1)]
    fig, ax = plt.subplots(figsize=(6, 4))
    for qt in q_train:
        mine = [r for r in rows if r["q_train"] == qt]
        means = [np.mean([r["test_mse_at_q"][f"{q:g}"] for r in mine if f"{q:g}" in r["test_mse_at_q"]]) for q in q_dep]
        cells = [_ms([r["test_mse_at_q"][f"{q:g}"] for r in mine if f"{q:g}" in r["test_mse_at_q"]]) for q in q_dep]
        rise = "–"
        if 0.0 in q_dep and 0.1 in q_dep:
            rises = [(r["test_mse_at_q"]["0.1"] - r["test_mse_at_q"]["0"]) / r["test_mse_at_q"]["0"] for r in mine]
            rise = f"{100 * np.mean(rises):+.1f} %"
        lines.append(f"| {100 * qt:g} % ({len(mine)} seed(s)) | " + " | ".join(cells) + f" | {rise} |")
        ax.plot([100 * q for q in q_dep], means, "o-", label="no dropout" if qt == 0 else f"dropout q = {100 * qt:g} %")
    ax.set_xlabel("deployed message loss q (%), each mode")
    ax.set_ylabel("test MSE")
    ax.set_title("ETTh2, D = 8")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig8_dropout.png", dpi=120)
    plt.close(fig)
    lines += ["", "![Fig. 8](fig8_dropout.png)", ""]
    return lines


def deploy(runs: dict[str, dict]) -> list[str]:
    r = runs.get("deploy-D8")
    if not r:
        return []
    i8, sim = r["int8"], r["sim"]
    sent = sim["bytes_sent_per_inference"]
    full = sim["allgather_bytes_per_inference"]
    ratios = [sent[k] / full[k] for k in sent]
    return ["## A pruned, dropout-hardened model deployed", "",
            "somegather keep 0.1 + message dropout q = 10 %, D = 8, through `cisl train` -> `cisl compile`:",
            f"float test MSE {i8['mse_float']:.4f}, int8 (bit-exact reference) {i8['mse_int8']:.4f} "
            f"({100 * i8['relative_increase']:+.2f} %); virtual testbed bit-exact: "
            f"{'yes' if sim['bit_exact'] else 'NO'}; somegather bytes sent per node and inference "
            f"{sorted(set(sent.values()))} of {sorted(set(full.values()))} for allgather "
            f"(ratio {min(ratios):.3f}–{max(ratios):.3f}).", ""]


def report(runs_dir: Path, out: Path) -> None:
    runs = _load(runs_dir)
    proto = next(iter(runs.values()))["protocol"] if runs else {}
    lines = ["# Training for the split on ETTh2 (issue 3)", "",
             "Produced by `python bench/split_training.py run` and `python bench/split_training_report.py` "
             "from the per-run records in `split_training/runs/`.", "",
             f"Protocol: {json.dumps(proto)}", ""]
    lines += fig7(runs, out) + fig8(runs, out) + deploy(runs)
    (out / "split_training.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    report(ROOT / "docs" / "results" / "split_training" / "runs", ROOT / "docs" / "results")
