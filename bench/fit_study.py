"""`cisl fit` on the nRF52840 DK: 1 node vs 16 nodes at keep ratios 1, 0.5 and 0.1 (the paper's Fig. 5).

Runs codegen.fit for each case (estimate pre-filter over F, N, T, then a real compile and link of
every node of the winner) and writes docs/results/fit_nrf52840dk.{json,md}. Also the paper's
configuration family: T = 12 layers, F_h = F (its Fig. 5 sweep compiled a 12-block ViT).

    python bench/fit_study.py [--out docs/results/fit_nrf52840dk]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

from codegen.boards import load_board
from codegen.fit import N_GRID, T_GRID, fit, format_result
from codegen.kernel_library import kernel_library
from codegen.plan.io import load_plan
from codegen.plan.memory import align

def node_breakdown(work: Path, best: dict) -> dict:
    """Where the flash of the winner's largest node goes, from its confirming build (plan + linked ELF)."""
    build = work / f"N{best['tokens']}-F{best['width']}-T{best['layers']}" / "build"
    sizes = [json.loads(p.read_text()) for p in sorted(build.glob("node_*/size.json"))]
    size = max(sizes, key=lambda z: z["elf"]["flash"])
    node = next(n for n in load_plan(build).nodes if n.device == size["node"])
    parts = {"weights": 0, "layernorm": 0, "requant": 0, "other": 0}
    for name, c in node.constants.items():
        kind = ("weights" if name.endswith("_w") else "layernorm" if name.endswith(("_gamma", "_beta"))
                else "requant" if name.endswith(("_b", "_mult", "_shift")) else "other")
        parts[kind] += align(c.nbytes)
    est = size["estimate"]["flash_parts"]
    parts["tables_inputs"] = est.get("tables", 0) + est.get("inputs", 0)
    parts["code"] = size["elf"]["flash"] - sum(parts.values())  # the rest of the linked image
    return {"node": size["node"], "flash": size["elf"]["flash"], "gathered": node_gathered_columns(node), **parts}


def node_gathered_columns(node) -> int:
    """Columns whose LayerNorm parameters the node holds (γ and β of one LayerNorm, int32 each)."""
    return max((c.nbytes // 4 for name, c in node.constants.items() if name.endswith("_gamma")), default=0)


def why(best: dict, one: dict, b: dict, flash_bytes: int) -> list[str]:
    """The paragraph on the unpruned 16-node ceiling, from this run's winner and its build."""
    def kb(n: int) -> str:
        return f"{n / 1000:.1f} KB"

    rest = b["flash"] - b["weights"]
    return [
        "**Why not 16 M at keep 1.0.** Unpruned, the 16 nodes store every weight once (plus LayerNorm "
        "parameters on every node that gathers the columns), so 16 M int8 weights need 1,000,000 B of each "
        f"node's {flash_bytes:,} B of flash, leaving {kb(flash_bytes - 1_000_000)} for everything else. The winner's "
        f"largest node, node {b['node']} (N = {best['tokens']}, F = {best['width']}, T = {best['layers']}), holds "
        f"{b['weights']:,} B of weights and spends {kb(b['code'])} on code, {kb(b['layernorm'])} on the int32 "
        f"LayerNorm parameters of all {b['gathered']} gathered columns (kernels.md: γ and β as Q16 int32), "
        f"{kb(b['requant'])} on per-channel bias, multiplier and shift, and {kb(b['other'] + b['tables_inputs'])} on "
        f"other constants, tables and compiled-in inputs: {kb(rest)} besides the weights (its image: "
        f"{b['flash']:,} B), so {best['params'] / 1e6:.2f} M ({best['params'] / one['params']:.1f}x one node) is "
        "the ceiling of this design at 1 MB. With somegather pruning the cross-node weights that consume pruned "
        "columns are not stored, and the dense-equivalent size grows past it (keep 0.5 and 0.1 rows)."]


CASES = [  # (devices, keep, layers grid)
    (1, 1.0, T_GRID), (16, 1.0, T_GRID), (16, 0.5, T_GRID), (16, 0.1, T_GRID), (1, 1.0, (12,)), (16, 1.0, (12,)),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/results/fit_nrf52840dk"))
    args = ap.parse_args()
    board = load_board("nrf52840dk")
    results, breakdown = [], None
    for devices, keep, layers in CASES:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="cisl-fit-study-") as work:
            r = fit(board.name, devices, 16, keep, 0, True, N_GRID, layers, work=Path(work),
                    progress=lambda s: print(s, flush=True))
            dt = time.monotonic() - t0
            if (devices, keep, layers) == (16, 1.0, T_GRID) and r.best:
                breakdown = node_breakdown(Path(work), dataclasses.asdict(r.best))
        print(format_result(r, board), flush=True)
        results.append({"devices": devices, "keep": keep, "layers": list(layers), "seconds": dt,
                        "frontier": [c.to_json() for c in r.frontier],
                        "best": r.best.to_json() if r.best else None, "confirm": r.tried,
                        "table": format_result(r, board)})
    doc = {"board": board.name, "kernels": kernel_library().kind, "heads": 16, "cases": results,
           "largest_node_16_unpruned": breakdown}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")

    def best(devices, keep, layers):
        return next(c for c in results if c["devices"] == devices and c["keep"] == keep and
                    c["layers"] == list(layers))["best"]

    one = best(1, 1.0, T_GRID)
    md = ["# `cisl fit` on the nRF52840 DK: the largest model per node count (the paper's Fig. 5)", "",
          f"Board nrf52840dk (1 MB flash, 256 KB RAM per node), kernels {doc['kernels']}, H = 16, F_h = F, "
          f"horizon 24, look-back 8N + 8. Parameters are dense-equivalent (every weight and bias of the unsplit "
          f"model); 'stored' is what the nodes hold together (pruned cross-node weights are not stored). Every "
          f"winner was confirmed by compiling a random-weight model and linking every node image. "
          f"`python bench/fit_study.py`; single cases: `cisl fit --devices D --keep K`.", "",
          "| nodes | keep | T grid | largest model (N, F, T) | parameters | vs 1 node | stored | largest node flash | "
          "largest node RAM | search + build |", "|" + "---|" * 10]
    for c in results:
        b = c["best"]
        grid = "1..12" if c["layers"] == list(T_GRID) else ",".join(map(str, c["layers"]))
        ref = best(1, 1.0, c["layers"] if c["layers"] != list(T_GRID) else T_GRID)
        md.append(f"| {c['devices']} | {c['keep']} | {grid} | N={b['tokens']}, F={b['width']}, T={b['layers']} | "
                  f"{b['params']:,} ({b['params'] / 1e6:.2f} M) | {b['params'] / ref['params']:.1f}x | "
                  f"{b['stored']:,} | {b['flash']:,} | {b['ram']:,} | {c['seconds']:.0f} s |")
    md += ["", f"One node holds {one['params'] / 1e6:.2f} M parameters.", ""]
    if breakdown is not None:
        md += [*why(best(16, 1.0, T_GRID), one, breakdown, board.flash_bytes), ""]
    for c in results:
        md += [f"## {c['devices']} node(s), keep {c['keep']}, T in {c['layers'][0]}..{c['layers'][-1]}", "", "```",
               c["table"], "```", ""]
    args.out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
