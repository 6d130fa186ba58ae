"""Memory and communication scaling against the baselines (the paper's Fig. 4), from real plans and ELFs.

For D = 1..16 nodes and keep ratios 1, 0.5 and 0.1, a random-weight model (N = 64 tokens, F = 128,
H = 16, F_h = F, T = 2 layers; the paper's Fig. 4 shape) is compiled for nrf52840dk and every node
is built; per node we take the activation arena (plan), the linked ELF's RAM and flash (all of
it: weights, code, Mixer's state, stack) and the bytes communicated per layer (plan.json
somegather message sizes: each broadcast counted once, i.e. the network volume, and the largest
node's own share). The baselines as integrated into Mixer (every collective a Mixer flood) come from
the formulas of shared/notes/baselines.md §3 with the same N, F, H, F_h and T:

* Hu & Li (Voltage): tokens split, weights replicated; activation RAM
  NF + (N/D)(F/H) + 2N F/H + 2(N/D)F + (N/D)F_h + 4N; one allgather of NF per layer.
* Liu et al. (ASTRA): tokens split, non-local tokens as 5-bit codes (the CISL authors' b_q/8 = 5/8);
  n_x = (N/D)F + ((D-1)/D) NF 5/8, RAM n_x + (N/D)(F/H) + 2 n_x/H + 2(N/D)F + (N/D)F_h + 4N;
  NF 5/8 per layer.
* Bochem et al.: heads and FFN slices, two all-reduces per layer (each node floods its full NxF
  partial); RAM max(NF + 3N F/H + H_l, H_l + NF + (D-1)NF, N F_h/D + D NF), H_l = (NF/H) ceil(H/D);
  2 D N F per layer.

Flash for the baselines counts the int8 weights only (no code): replicated (Hu & Li, Liu) or split
D ways (Bochem). Writes docs/results/memory_scaling.{json,md,png}.

    python bench/memory_scaling.py [--max-devices 16] [--out docs/results/memory_scaling]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.fit import dense_params
from codegen.plan.io import load_plan
from codegen.randmodel import config_for_tokens, make_model_dir

N, F, H, T, HZ = 64, 128, 16, 2, 24
FH = F
KEEPS = (1.0, 0.5, 0.1)


def baselines(D: int) -> dict[str, dict[str, float]]:
    d_h = F / H
    hl = N * F / H * math.ceil(H / D)
    n_x = N / D * F + (D - 1) / D * N * F * 5 / 8
    dense_w = dense_params(config_for_tokens(N, F, layers=T))
    return {
        "Hu & Li": {"ram": N * F + N / D * d_h + 2 * N * d_h + 2 * N / D * F + N / D * FH + 4 * N,
                    "flash": dense_w, "comm": N * F, "tx": N * F / D},
        "Liu et al.": {"ram": n_x + N / D * d_h + 2 * n_x / H + 2 * N / D * F + N / D * FH + 4 * N,
                       "flash": dense_w, "comm": N * F * 5 / 8, "tx": N * F * 5 / 8 / D},
        "Bochem et al.": {"ram": max(N * F + 3 * N * d_h + hl, hl + N * F + (D - 1) * N * F, N * FH / D + D * N * F),
                          "flash": dense_w / D, "comm": 2 * D * N * F, "tx": 2 * N * F},
    }


def cisl_formula(D: int, keep: float) -> float:
    """cisl's own activation-RAM model (baselines.md §2.4, uniform split, head-sequential, one score
    row, no Mixer): max(R_att, R_O, R_1, R_2)."""
    s = a = F / D
    c = FH / D
    t = math.ceil(keep * F / D) if D > 1 else 0
    th = math.ceil(keep * FH / D) if D > 1 else 0
    f_in = s + (D - 1) * t
    fh_in = c + (D - 1) * th
    r_att = N * s + N * (D - 1) * t + 3 * N * (F / H) + N * a + 4 * N
    r_o = N * a + N * (D - 1) * t + N * s
    return max(r_att, r_o, N * s + N * f_in + N * c, N * s + N * fh_in + N * s)


def measure(D: int, keep: float, work: Path) -> dict:
    cfg = config_for_tokens(N, F, layers=T)
    model = make_model_dir(work / "model", cfg, D, keep, seed=D, calibration=8, tests=4)
    compile_model(model, work / "build", CompileOptions(board="nrf52840dk", max_calibration=8))
    s = build(work / "build")
    plan = load_plan(work / "build")
    layer0 = [sg for sg in plan.sgs if sg.layer == 0]
    sizes = [json.loads((work / "build" / f"node_{k:02d}" / "size.json").read_text()) for k in range(D)]
    return {
        "devices": D, "keep": keep,
        "arena": max(n.arena_bytes for n in plan.nodes),
        "weights": max(sum(c.nbytes for c in n.constants.values()) for n in plan.nodes),
        "elf_ram": max(n["ram"] for n in s["nodes"]), "elf_flash": max(n["flash"] for n in s["nodes"]),
        "mixer_ram": max(z["estimate"]["ram_parts"].get("mixer", 0) for z in sizes),
        "estimate_error": max(max(abs(z["error"]["flash"]), abs(z["error"]["ram"])) for z in sizes),
        "comm": sum(sum(sg.msg_bytes) for sg in layer0),
        "tx": max(sum(sg.msg_bytes[k] for sg in layer0) for k in range(D)),
    }


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Ds = sorted({r["devices"] for r in rows})
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.5))
    style = {1.0: "-", 0.5: "--", 0.1: ":"}
    for keep in KEEPS:
        rs = [next(r for r in rows if r["devices"] == d and r["keep"] == keep) for d in Ds]
        lab = f"cisl keep {keep:g}"
        ax[0].plot(Ds, [r["arena"] for r in rs], "o" + style[keep], color="C0", label=lab + " (arena)")
        ax[0].plot(Ds, [cisl_formula(d, keep) for d in Ds], style[keep], color="C4", alpha=0.7,
                   label=lab + " (§2.4 formula)")
        ax[1].plot(Ds, [r["elf_flash"] for r in rs], "o" + style[keep], color="C0", label=lab + " (ELF)")
        ax[1].plot(Ds, [r["weights"] for r in rs], style[keep], color="C4", alpha=0.7, label=lab + " (weights)")
        ax[2].plot(Ds[1:], [r["comm"] for r in rs[1:]], "o" + style[keep], color="C0", label=lab)  # D = 1 sends nothing
    rs = [next(r for r in rows if r["devices"] == d and r["keep"] == 1.0) for d in Ds]
    ax[0].plot(Ds, [r["elf_ram"] for r in rs], "s-", color="C0", alpha=0.4, label="cisl keep 1 (whole ELF RAM)")
    for i, name in enumerate(("Hu & Li", "Liu et al.", "Bochem et al.")):
        b = [baselines(d)[name] for d in Ds]
        for j, key in enumerate(("ram", "flash", "comm")):
            ax[j].plot(Ds, [x[key] for x in b], "^-", color=f"C{i + 1}", label=name)
    titles = ("activation RAM per node (B)", "flash per node (B)", "bytes communicated per layer (network)")
    for a, t in zip(ax, titles):
        a.set_title(t)
        a.set_xlabel("nodes D")
        a.set_yscale("log")
        a.grid(True, which="both", alpha=0.3)
    ax[0].axhline(256 * 1024, color="k", lw=0.8)
    ax[1].axhline(1024 * 1024, color="k", lw=0.8)
    for a in ax:
        a.legend(fontsize=7)
    fig.suptitle(f"N = {N}, F = {F}, H = {H}, F_h = F, T = {T} on nrf52840dk (cisl: real plans and linked ELFs; "
                 f"baselines: formulas, Mixer-integrated)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-devices", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("docs/results/memory_scaling"))
    ap.add_argument("--from-json", type=Path, default=None, help="re-render the tables and plot from a result")
    args = ap.parse_args()
    rows = []
    t0 = time.monotonic()
    if args.from_json:
        old = json.loads(args.from_json.read_text())
        rows, seconds = old["cisl"], old["seconds"]
    else:
        with tempfile.TemporaryDirectory(prefix="cisl-scaling-") as tmp:
            for keep in KEEPS:
                for D in range(1, args.max_devices + 1):
                    rows.append(measure(D, keep, Path(tmp) / f"k{keep}-d{D}"))
                    print(f"keep {keep} D {D}: {rows[-1]}", flush=True)
        seconds = time.monotonic() - t0
    doc = {"config": {"tokens": N, "width": F, "heads": H, "mlp_hidden": FH, "layers": T, "board": "nrf52840dk"},
           "cisl": rows, "baselines": {D: baselines(D) for D in range(1, args.max_devices + 1)},
           "cisl_formula": {D: {k: cisl_formula(D, k) for k in KEEPS} for D in range(1, args.max_devices + 1)},
           "seconds": seconds}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(rows, args.out.with_suffix(".png"))
    Ds = range(1, args.max_devices + 1)

    def cell(D, keep, key):
        return next(r[key] for r in rows if r["devices"] == D and r["keep"] == keep)

    md = ["# Memory and communication scaling vs the baselines (the paper's Fig. 4)", "",
          f"N = {N}, F = {F}, H = {H}, F_h = F, T = {T}; nrf52840dk. cisl numbers come from real plans and linked ELFs "
          f"(largest node); baselines from the formulas of shared/notes/baselines.md §3 as integrated into Mixer. "
          f"`python bench/memory_scaling.py` ({doc['seconds']:.0f} s on 2 shared cores). Plot: memory_scaling.png.", "",
          "## Activation RAM per node (B): cisl arena (whole ELF RAM for keep 1) vs baselines", "",
          "The measured arena holds more than the formulas count: the whole input window and its patches, and per "
          f"head the full N x N score and probability matrices (2 N^2 = {2 * N * N:,} B, where the formulas count "
          "one score row); the §2.4 columns are cisl's own formula, comparable with the baselines' formulas.", "",
          "| D | keep 1 | keep 0.5 | keep 0.1 | keep 1, ELF RAM (arena + Mixer + stack + statics) | §2.4 keep 1 | "
          "§2.4 keep 0.5 | §2.4 keep 0.1 | Hu & Li | Liu et al. | Bochem et al. |", "|" + "---|" * 11]
    for D in Ds:
        b = baselines(D)
        md.append(f"| {D} | {cell(D, 1.0, 'arena'):,} | {cell(D, 0.5, 'arena'):,} | {cell(D, 0.1, 'arena'):,} | "
                  f"{cell(D, 1.0, 'elf_ram'):,} | {cisl_formula(D, 1.0):,.0f} | {cisl_formula(D, 0.5):,.0f} | "
                  f"{cisl_formula(D, 0.1):,.0f} | {b['Hu & Li']['ram']:,.0f} | {b['Liu et al.']['ram']:,.0f} | "
                  f"{b['Bochem et al.']['ram']:,.0f} |")
    md += ["", "## Flash per node (B): cisl linked ELF (weights + code) and weights alone vs baselines' weights", "",
           "| D | keep 1 ELF | keep 0.5 ELF | keep 0.1 ELF | keep 1 weights | keep 0.1 weights | Hu & Li, Liu et al. | "
           "Bochem et al. |", "|" + "---|" * 8]
    for D in Ds:
        b = baselines(D)
        md.append(f"| {D} | {cell(D, 1.0, 'elf_flash'):,} | {cell(D, 0.5, 'elf_flash'):,} | "
                  f"{cell(D, 0.1, 'elf_flash'):,} | {cell(D, 1.0, 'weights'):,} | {cell(D, 0.1, 'weights'):,} | "
                  f"{b['Hu & Li']['flash']:,.0f} | {b['Bochem et al.']['flash']:,.0f} |")
    md += ["", "## Bytes communicated per layer (network volume; largest node's own share in brackets)", "",
           "| D | keep 1 | keep 0.5 | keep 0.1 | Hu & Li | Liu et al. | Bochem et al. |", "|" + "---|" * 7]
    for D in Ds:
        b = baselines(D)
        md.append(f"| {D} | {cell(D, 1.0, 'comm'):,} ({cell(D, 1.0, 'tx'):,}) | {cell(D, 0.5, 'comm'):,} "
                  f"({cell(D, 0.5, 'tx'):,}) | {cell(D, 0.1, 'comm'):,} ({cell(D, 0.1, 'tx'):,}) | "
                  f"{b['Hu & Li']['comm']:,.0f} ({b['Hu & Li']['tx']:,.0f}) | {b['Liu et al.']['comm']:,.0f} "
                  f"({b['Liu et al.']['tx']:,.0f}) | {b['Bochem et al.']['comm']:,.0f} ({b['Bochem et al.']['tx']:,.0f}) |")
    worst = max(r["estimate_error"] for r in rows)
    md += ["", f"Planner estimate vs linked ELF over all {sum(range(1, args.max_devices + 1)) * len(KEEPS)} node images "
           f"of this study: worst error {100 * worst:.2f} % (flash or RAM).", ""]
    args.out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
