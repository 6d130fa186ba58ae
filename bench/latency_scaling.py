"""The paper's Fig. 6 on the cycle model: compute vs communication per block, speedup over central
execution, both Mixer round policies, energy per inference.

For F ∈ {256, 512}, D ∈ {1, 2, 4, 8, 16} and keep ratio 1.0 / 0.1, a model with random weights
(N tokens, H = 16 heads, one layer, MLP hidden = F; the times do not depend on the weights' values)
is compiled for nrf52840dk, every node image is built (CMSIS-NN when CMSIS_NN_ROOT is set, as the
paper used; else nnref) and run on the cycle model (bit-exact checked), and every Mixer round on the
slot-level radio simulation — the topology `cisl sim` picks for D nodes (hallway16, the paper's
35 m hallway, at D = 16) — under cisl's `done` policy and the published fixed 3G + 200 slots, each
with the plan `cisl compile --round-policy` makes for it (the planner picks (G, P) for the round
length the firmware runs).

A node that does not fit the nRF52840's 1 MB of flash (D = 1 at F = 512: 2.2 MB of weights) is
linked for a part with 4 MB of flash and the same memory system, and marked as such.

    CMSIS_NN_ROOT=/path/to/CMSIS-NN python bench/latency_scaling.py     # about 10 minutes on 2 cores

Writes <out>.json, <out>.md and <out>.png (default docs/results/latency_scaling).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.errors import CheckFailed
from codegen.kernel_library import kernel_library
from codegen.plan.io import load_plan
from codegen.randmodel import config_for_tokens, make_model_dir
from codegen.resources import resource_dir
from codegen.timing.compute import WORK_UNITS as KERNEL_UNITS, compute_build, op_work
from codegen.timing.estimate import estimate

HERE = Path(__file__).resolve().parent
BIG_FLASH = 4 * 1024 * 1024
BLOCKS = {"attn0": "attention", "mlp0": "residual (MLP)"}

# §5.3 of the paper (Gräfe et al.), Fig. 6: measured on nRF52840s with the original Mixer (3G + 200 slots)
PAPER = {
    "unpruned_speedup": {("attn0", 256): 1.27, ("attn0", 512): 2.51, ("mlp0", 256): 0.54, ("mlp0", 512): 1.38},
    "pruned_speedup_d16": {("attn0", 256): 3.8, ("attn0", 512): 10.96, ("mlp0", 256): 1.73, ("mlp0", 512): 6.45},
    "pruning_gain_d16": {("attn0", 256): 3.08, ("attn0", 512): 4.37, ("mlp0", 256): 3.21, ("mlp0", 512): 4.68},
    "comm_share": "69.42 % (attention, 4 devices) .. 91.4 % (residual, 16 devices), unpruned",
    "comm_reduction": "pruning 90 % reduces communication latency by up to 80 %",
}


def big_flash_script(work: Path) -> Path:
    src = (resource_dir("boards") / "nrf52840dk" / "nrf52840.ld").read_text()
    out = work / "nrf52840-2mb.ld"
    out.write_text(src.replace("LENGTH = 1024K", f"LENGTH = {BIG_FLASH // 1024}K", 1))
    return out


def one(F: int, D: int, keep: float, args, work: Path) -> dict:
    tag = f"F{F}-D{D}-k{keep}-N{args.tokens}-v2"
    done = work / tag / "row.json"
    if done.is_file():  # --work keeps finished configurations: a rerun continues
        return json.loads(done.read_text())
    row = _one(F, D, keep, args, work, tag)
    done.write_text(json.dumps(row))
    return row


def _build(onnx: Path, bdir: Path, D: int, policy: str, work: Path) -> bool:
    """Compile for nrf52840dk with the round policy and build; True if linked for the bigger flash."""
    compile_model(onnx, bdir, CompileOptions(devices=D, board="nrf52840dk", round_policy=policy))
    try:
        build(bdir)
        return False
    except CheckFailed as e:
        if "does not fit" not in str(e):
            raise
        build(bdir, link_script=big_flash_script(work))
        return True


def _one(F: int, D: int, keep: float, args, work: Path, tag: str) -> dict:
    cfg = config_for_tokens(args.tokens, F, heads=16, layers=1)
    onnx = make_model_dir(work / tag / "model", cfg, D, keep, seed=0, calibration=16, tests=2)
    row = {"F": F, "D": D, "keep": keep, "tokens": args.tokens, "heads": 16, "kernels": {}, "policies": {},
           "model_seconds": 0.0}
    nodes = plan = None
    for policy in ("done", "fixed"):
        # each policy gets the plan `cisl compile --round-policy` makes for it: the planner picks (G, P)
        # for the round length the firmware will run
        bdir = work / tag / f"build-{policy}"
        hypothetical = _build(onnx, bdir, D, policy, work)
        row["hypothetical_flash"] = hypothetical
        t0 = time.monotonic()
        nodes = compute_build(bdir, jobs=args.jobs, flash_bytes=BIG_FLASH if hypothetical else None)
        row["model_seconds"] += round(time.monotonic() - t0, 1)
        plan = load_plan(bdir)
        est = estimate(bdir, radio_inferences=args.radio_inferences, nodes=nodes)
        assert est.policy == policy
        blocks = {b.label: {"compute_ms": b.slowest_compute_ms, "comm_ms": b.comm_ms, "latency_ms": b.latency_ms}
                  for b in est.blocks}
        energy = {n: e.to_json() for n, e in est.energy.items()}
        row["policies"][policy] = {
            "topology": est.topology, "latency_ms": est.latency_ms, "comm_share": est.comm_share, "blocks": blocks,
            "network_energy_uj": est.network_energy_uj, "radio_share": est.radio_share,
            "cpu_uj": sum(e["cpu_uj"]["central"] + e["comm_cpu_uj"]["central"] for e in energy.values()),
            "radio_uj": sum(e["radio_uj"]["central"] for e in energy.values()),
            "idle_uj": sum(e["idle_uj"]["central"] for e in energy.values()),
            "rounds": [{"sg": r.sg, "part": r.part, "G": r.generation, "P": r.payload, "slot_us": r.slot_us,
                        "slots": r.slots.mean} for r in est.rounds],
        }
    for n in nodes:  # kernel classes: cycles per unit of work, summed over the node's ops
        for i, c in n.op_cycles.items():
            kind = n.op_kinds.get(i)
            if kind not in KERNEL_UNITS:
                continue
            u = op_work(plan, n.device, i)
            if u == 0:
                continue
            k = row["kernels"].setdefault(kind, [0.0, 0.0, 0.0, 0])
            for j in range(3):
                k[j] += c[j]
            k[3] += u
    return row


def speedup(rows, F, keep, D, block, policy="fixed"):
    base = next((r for r in rows if r["F"] == F and r["D"] == 1 and r["keep"] == 1.0), None)
    r = next((r for r in rows if r["F"] == F and r["D"] == D and r["keep"] == keep), None)
    if r is None or base is None:
        return None
    b0 = base["policies"][policy]["blocks"][block]["latency_ms"][1]
    b1 = r["policies"][policy]["blocks"][block]["latency_ms"][1]
    return b0 / b1


def write_md(rows: list[dict], out: Path, args, kernels_kind: str) -> None:
    L = ["# Latency and energy scaling on the nRF52840 (the paper's Fig. 6)", "",
         f"Written by `bench/latency_scaling.py` ({kernels_kind} kernels). Models: random weights, "
         f"N = {args.tokens} tokens, H = 16 heads, one layer, MLP hidden = F, horizon 24; compiled for nrf52840dk "
         f"(BLE 2M, slot margin 50 µs). Compute: the cycle model of every node's image (Cortex-M4 TRM timings, "
         f"nRF52840 flash wait states 0/2/3 and instruction cache; each run bit-exact with the int8 reference). "
         f"Communication: every Mixer round on the slot-level radio simulation, {args.radio_inferences} inferences, "
         f"the topology `cisl sim` picks for D nodes (hallway16, the paper's 35 m hallway, at D = 16), plus the "
         f"board's 2 ms start guard per round; policy `done` (cisl) and `fixed` (3G + 200 slots, the published "
         f"Mixer the paper ran), each compiled with `--round-policy` for it. A block's latency is bulk-synchronous: the slowest node's compute, then its "
         f"rounds. Central values; bounds in the JSON.", ""]
    if any(r["hypothetical_flash"] for r in rows):
        L += ["\\* does not fit the nRF52840's 1 MB of flash: its images are linked for 4 MB of flash with the same "
              "memory system (a hypothetical part), so that central execution can be timed.", ""]
    for F in sorted({r["F"] for r in rows}):
        for block, name in BLOCKS.items():
            L += [f"## F = {F}, {name} block", "",
                  "| D | keep | compute ms | comm ms (done) | comm ms (fixed) | latency ms (done) | latency ms (fixed) "
                  "| comm share (fixed) | speedup over D = 1 (done) | speedup (fixed) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
            for r in sorted((r for r in rows if r["F"] == F), key=lambda r: (-r["keep"], r["D"])):
                d, f = r["policies"]["done"]["blocks"][block], r["policies"]["fixed"]["blocks"][block]
                sd, sf = speedup(rows, F, r["keep"], r["D"], block, "done"), speedup(rows, F, r["keep"], r["D"], block)
                share = f["comm_ms"][1] / f["latency_ms"][1] if f["latency_ms"][1] else 0
                L.append(f"| {r['D']}{'*' if r['hypothetical_flash'] else ''} | {r['keep']} | {d['compute_ms'][1]:.2f} | "
                         f"{d['comm_ms'][1]:.2f} | {f['comm_ms'][1]:.2f} | {d['latency_ms'][1]:.2f} | "
                         f"{f['latency_ms'][1]:.2f} | {100 * share:.1f} % | {sd:.2f}x | {sf:.2f}x |")
            L.append("")
    L += ["## The paper's ratios beside ours", "",
          "The paper measured with the original Mixer (fixed 3G + 200 slots): compare with the *fixed* columns. "
          "Speedups are block latency at D = 1 (unpruned) over block latency at D = 16.", "",
          "| quantity | block | F | paper | cisl, fixed | cisl, done |", "|---|---|---|---|---|---|"]
    for key, what, keep in (("unpruned_speedup", "speedup, unpruned, 16 nodes vs central", 1.0),
                            ("pruned_speedup_d16", "speedup, keep 0.1, 16 nodes vs central", 0.1)):
        for (block, F), v in PAPER[key].items():
            if speedup(rows, F, keep, 16, block) is None:
                continue
            L.append(f"| {what} | {BLOCKS[block]} | {F} | {v}x | {speedup(rows, F, keep, 16, block):.2f}x | "
                     f"{speedup(rows, F, keep, 16, block, 'done'):.2f}x |")
    for (block, F), v in PAPER["pruning_gain_d16"].items():
        rr = {k: next((r for r in rows if r["F"] == F and r["D"] == 16 and r["keep"] == k), None) for k in (1.0, 0.1)}
        if rr[1.0] and rr[0.1]:
            g = [rr[1.0]["policies"][p]["blocks"][block]["latency_ms"][1] /
                 rr[0.1]["policies"][p]["blocks"][block]["latency_ms"][1] for p in ("fixed", "done")]
            L.append(f"| pruning 90 % speeds the 16-node block up | {BLOCKS[block]} | {F} | {v}x | {g[0]:.2f}x | "
                     f"{g[1]:.2f}x |")
    shares = [(r["policies"]["fixed"]["blocks"][b]["comm_ms"][1] / r["policies"]["fixed"]["blocks"][b]["latency_ms"][1],
               b, r["D"], r["F"]) for r in rows if r["keep"] == 1.0 and r["D"] > 1 for b in BLOCKS]
    if shares:
        lo, hi = min(shares), max(shares)
        L.append(f"| communication share of a block, unpruned | | | {PAPER['comm_share']} | {100 * lo[0]:.1f} % "
                 f"({BLOCKS[lo[1]]}, D = {lo[2]}, F = {lo[3]}) .. {100 * hi[0]:.1f} % ({BLOCKS[hi[1]]}, D = {hi[2]}, "
                 f"F = {hi[3]}) | |")
    red = []
    for F in sorted({r["F"] for r in rows}):
        for D in sorted({r["D"] for r in rows if r["D"] > 1}):
            rr = {k: next((r for r in rows if r["F"] == F and r["D"] == D and r["keep"] == k), None) for k in (1.0, 0.1)}
            if rr[1.0] and rr[0.1]:
                for b in BLOCKS:
                    c1 = rr[1.0]["policies"]["fixed"]["blocks"][b]["comm_ms"][1]
                    c0 = rr[0.1]["policies"]["fixed"]["blocks"][b]["comm_ms"][1]
                    red.append(1 - c0 / c1)
    if red:
        L.append(f"| communication latency saved by pruning 90 % | | | up to 80 % | up to {100 * max(red):.1f} % | |")
    L += ["", "## Energy per inference (the whole network)", "",
          "Board currents from boards/nrf52840dk/board.toml [power] (LDO regulator, as the board code runs; the CPU "
          "polls through the rounds). Inferences back to back (period = latency); central values, µJ.", "",
          "| F | D | keep | network µJ (done) | CPU share (done) | radio share (done) | network µJ (fixed) | "
          "radio share (fixed) |", "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["F"], -r["keep"], r["D"])):
        d, f = r["policies"]["done"], r["policies"]["fixed"]
        tot = d["network_energy_uj"][1]
        L.append(f"| {r['F']} | {r['D']} | {r['keep']} | {tot:,.0f} | {100 * d['cpu_uj'] / tot:.1f} % | "
                 f"{100 * d['radio_share']:.1f} % | {f['network_energy_uj'][1]:,.0f} | {100 * f['radio_share']:.1f} % |")
    L += ["", "## Kernel classes on the cycle model", "",
          "Cycles per unit of work over every op of that kind in all builds above (low / central / high):", "",
          "| op | unit | cycles per unit | ops' cycles (central) |", "|---|---|---|---|"]
    agg: dict[str, list[float]] = {}
    for r in rows:
        for kind, k in r["kernels"].items():
            a = agg.setdefault(kind, [0.0, 0.0, 0.0, 0])
            for j in range(4):
                a[j] += k[j]
    for kind, (lo, ce, hi, u) in sorted(agg.items()):
        L.append(f"| {kind} | {KERNEL_UNITS[kind]} | {lo / u:.2f} / **{ce / u:.2f}** / {hi / u:.2f} | {ce:,.0f} |")
    L += ["", "## What explains the differences", "",
          "See the section of the same name in docs/design/timing.md (kept by hand: the numbers above are "
          "regenerated, the reasoning is not)."]
    out.with_suffix(".md").write_text("\n".join(L) + "\n")


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Fs = sorted({r["F"] for r in rows})
    fig, axes = plt.subplots(len(Fs), 3, figsize=(15, 4.2 * len(Fs)), squeeze=False)
    for i, F in enumerate(Fs):
        for j, block in enumerate(BLOCKS):
            ax = axes[i][j]
            Ds = sorted({r["D"] for r in rows if r["F"] == F})
            for k, keep in enumerate((1.0, 0.1)):
                rs = sorted((r for r in rows if r["F"] == F and r["keep"] == keep), key=lambda r: r["D"])
                xs = [Ds.index(r["D"]) + (k - 0.5) * 0.38 for r in rs]
                comp = [r["policies"]["fixed"]["blocks"][block]["compute_ms"][1] for r in rs]
                comm = [r["policies"]["fixed"]["blocks"][block]["comm_ms"][1] for r in rs]
                done = [r["policies"]["done"]["blocks"][block]["latency_ms"][1] for r in rs]
                ax.bar(xs, comp, 0.36, color="#1f77b4" if keep == 1.0 else "#2ca02c",
                       label=f"compute, keep {keep}")
                ax.bar(xs, comm, 0.36, bottom=comp, color="#1f77b4" if keep == 1.0 else "#2ca02c", alpha=0.35,
                       hatch="//", label=f"communication (fixed 3G+200), keep {keep}")
                ax.plot(xs, done, "k_", markersize=14, label="latency with cisl's done rounds" if k == 0 else None)
            ax.set_xticks(range(len(Ds)))
            ax.set_xticklabels([f"D={d}" for d in Ds])
            ax.set_ylabel("ms (stacked: compute, then communication)")
            ax.set_title(f"F = {F}: {BLOCKS[block]} block")
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
        ax = axes[i][2]
        for keep, style in ((1.0, "o-"), (0.1, "s--")):
            rs = sorted((r for r in rows if r["F"] == F and r["keep"] == keep), key=lambda r: r["D"])
            for policy, color in (("done", "k"), ("fixed", "tab:red")):
                ax.plot([r["D"] for r in rs], [r["policies"][policy]["network_energy_uj"][1] / 1e3 for r in rs],
                        style, color=color, label=f"{policy}, keep {keep}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nodes D")
        ax.set_ylabel("mJ per inference (network)")
        ax.set_title(f"F = {F}: energy per inference")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replot", action="store_true", help="Only redraw <out>.md/.png from <out>.json.")
    ap.add_argument("--features", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--keep", type=float, nargs="+", default=[1.0, 0.1])
    ap.add_argument("--tokens", type=int, default=42, help="tokens N (42: PatchTST on a 336-step look-back, what docs/results/latency_scaling.md shows)")
    ap.add_argument("--radio-inferences", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--work", type=Path, default=None, help="Keep the builds here (default: a temporary folder).")
    ap.add_argument("--out", type=Path, default=HERE.parent / "docs" / "results" / "latency_scaling")
    args = ap.parse_args(argv)
    if args.replot:
        doc = json.loads(args.out.with_suffix(".json").read_text())
        args.tokens = doc["rows"][0]["tokens"]
        write_md(doc["rows"], args.out, args, doc["kernels"])
        plot(doc["rows"], args.out)
        return
    kinds = kernel_library().kind
    rows = []
    with tempfile.TemporaryDirectory(prefix="cisl-latency-") as tmp:
        work = args.work or Path(tmp)
        for F in args.features:
            for D in args.devices:
                for keep in args.keep:
                    if D == 1 and keep != 1.0:
                        continue  # one node sends nothing: pruning somegather changes nothing
                    t0 = time.monotonic()
                    rows.append(one(F, D, keep, args, work))
                    r = rows[-1]["policies"]
                    print(f"F={F} D={D} keep={keep}: latency done {r['done']['latency_ms'][1]:.1f} ms, fixed "
                          f"{r['fixed']['latency_ms'][1]:.1f} ms ({time.monotonic() - t0:.0f} s)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"kernels": kinds, "rows": rows}, indent=1) + "\n")
    write_md(rows, args.out, args, kinds)
    plot(rows, args.out)
    print(f"wrote {args.out}.json/.md/.png")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
