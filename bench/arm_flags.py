"""-Os or -O2? Flash and instructions of one node image under four flag choices, nnref and CMSIS-NN.

Builds node 0 of a 16-node model (N = 42, F = 128, T = 2) for qemu-m4 with cisl's own code and the
kernels at -Os or -O2, runs it on QEMU (-icount shift=0) bit-exact against the reference, and
prints flash (linked ELF) and instructions per inference (sum of the block lines), with nnref and,
given --cmsis-nn-root (or CMSIS_NN_ROOT), with upstream CMSIS-NN too. The result chose
board.toml's flags; it is written to docs/results/arm_build.{json,md}.

    python bench/arm_flags.py [--cmsis-nn-root PATH] [--out docs/results/arm_build]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
from pathlib import Path

from codegen import build as build_mod
from codegen.boards import load_board
from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.kernel_library import kernel_library
from codegen.qemu import run_qemu
from codegen.randmodel import config_for_tokens, make_model_dir

CHOICES = [("-Os", "-O2"), ("-O2", "-O2"), ("-Os", "-Os"), ("-O2", "-Os")]  # (own code, kernels)


def with_opt(board, own: str, kern: str):
    b = json.loads(json.dumps(board.facts))
    for key, opt in (("cflags", own), ("kernel_cflags", kern), ("upstream_cflags", kern)):
        b["build"][key] = [opt if a in ("-Os", "-O2") else a for a in b["build"][key]]
    return dataclasses.replace(board, facts=b)


def measure(lib_root: str | None) -> list[dict]:
    """Every flag choice for one kernel library (nnref when lib_root is None)."""
    if lib_root:
        os.environ["CMSIS_NN_ROOT"] = lib_root
    else:
        os.environ.pop("CMSIS_NN_ROOT", None)
    lib = kernel_library().kind
    base = load_board("qemu-m4")
    rows = []
    with tempfile.TemporaryDirectory(prefix="cisl-flags-") as tmp:
        model = make_model_dir(Path(tmp) / "m", config_for_tokens(42, 128), 16, 1.0, seed=1)
        compile_model(model, Path(tmp) / "b", CompileOptions(board="qemu-m4"))
        for own, kern in CHOICES:
            board = with_opt(base, own, kern)
            build_mod.load_board = lambda name, _b=board: _b  # this build only
            try:
                build(Path(tmp) / "b", nodes=[0])
            finally:
                build_mod.load_board = load_board
            r = run_qemu(Path(tmp) / "b", [0])[0]
            assert r.ok, r.first_difference
            size = json.loads((Path(tmp) / "b" / "node_00" / "size.json").read_text())
            insns = sum(int(b["cycles"]) for b in r.blocks()) // len({b["inf"] for b in r.blocks()})
            rows.append({"kernels": lib, "own": own, "kernel_opt": kern, "flash": size["elf"]["flash"],
                         "insns_per_inference": insns})
            print(f"{lib:8} own {own} kernels {kern}: flash {size['elf']['flash']:>7} B, "
                  f"{insns:>9} instructions per inference", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cmsis-nn-root", default=os.environ.get("CMSIS_NN_ROOT"),
                    help="an upstream CMSIS-NN checkout, to measure it next to nnref")
    ap.add_argument("--out", type=Path, default=Path("docs/results/arm_build"))
    args = ap.parse_args()
    rows = measure(None) + (measure(args.cmsis_nn_root) if args.cmsis_nn_root else [])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    md = ["# Compiler flags for the ARM boards: flash and instructions of one node image", "",
          "Node 0 of a 16-node random-weight model (N = 42, F = 128, H = 16, T = 2, keep 1), built for qemu-m4 "
          "(the nrf52840dk flags: `-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16`) with cisl's own "
          "code and the kernels at `-Os` or `-O2`, run on QEMU mps2-an386 (`-icount shift=0`) bit-exact with the "
          "int8 reference. Instructions per inference are the sum of the node's `block` lines (compute only). "
          "`python bench/arm_flags.py --cmsis-nn-root PATH`.", "",
          "| kernels | own code | kernels at | flash (B) | instructions / inference | vs board default |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        ref = next(x for x in rows if x["kernels"] == r["kernels"] and x["own"] == "-Os" and x["kernel_opt"] == "-O2")
        md.append(f"| {r['kernels']} | {r['own']} | {r['kernel_opt']} | {r['flash']:,} | {r['insns_per_inference']:,} | "
                  f"flash {r['flash'] - ref['flash']:+,} B, instructions {r['insns_per_inference'] / ref['insns_per_inference'] - 1:+.1%} |")
    md += ["", "The board default (own code `-Os`, kernels `-O2`) keeps the kernels fast and the rest small."]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
