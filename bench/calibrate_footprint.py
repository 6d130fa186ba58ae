"""Calibrate the planner's flash/RAM estimate (codegen/footprint.py) for a board and kernel library.

Builds a spread of random-weight plans (D, tokens, width, layers, keep ratio), links node images,
and fits what the estimate cannot know from plan.json alone: the fixed code (kernels, runtime,
Mixer, board, C library), the code each op kind adds, and the fixed RAM (board statics). Prints the
[footprint] section for board.toml and the worst estimate error over the calibration builds.

    python bench/calibrate_footprint.py --board nrf52840dk            # nnref
    CMSIS_NN_ROOT=/path/to/CMSIS-NN python bench/calibrate_footprint.py --board nrf52840dk
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from codegen.boards import load_board
from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.footprint import estimate_node, op_counts
from codegen.kernel_library import kernel_library
from codegen.plan.io import load_plan
from codegen.plan.mixer_layout import mixer_maxima
from codegen.randmodel import config_for_tokens, make_model_dir

CASES = [  # devices, keep, tokens, width, layers
    (1, 1.0, 8, 64, 1), (1, 1.0, 42, 128, 2), (2, 1.0, 8, 64, 2), (2, 0.5, 42, 64, 1), (3, 1.0, 8, 128, 3),
    (4, 0.5, 42, 128, 2), (4, 1.0, 8, 64, 4), (8, 0.1, 42, 128, 2), (8, 1.0, 8, 128, 1), (16, 1.0, 42, 128, 2),
    (16, 0.5, 8, 64, 3), (16, 0.1, 42, 64, 1), (5, 1.0, 16, 80, 2), (12, 0.5, 24, 96, 2),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="nrf52840dk")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw points here")
    args = ap.parse_args()
    board = load_board(args.board)
    lib = kernel_library().kind
    plan_board = board.name if not board.facts["board"].get("builds_plans_for") else \
        board.facts["board"]["builds_plans_for"][0]
    points = []
    with tempfile.TemporaryDirectory(prefix="cisl-calib-") as tmp:
        for i, (d, keep, n, f, t) in enumerate(CASES):
            work = Path(tmp) / f"c{i}"
            cfg = config_for_tokens(n, f, layers=t)
            # models from cisl train rescale what arrives (D > 1); a few cases without, as older models
            model = make_model_dir(work / "model", cfg, d, keep, seed=i, calibration=8, tests=4,
                                   rescale=d > 1 and i % 4 != 3)
            compile_model(model, work / "build", CompileOptions(board=plan_board, max_calibration=8))
            plan = load_plan(work / "build")
            nodes = sorted({0, d - 1, d // 2})
            build(work / "build", board.name, nodes=nodes)
            for k in nodes:
                sub = "" if plan_board == board.name else board.name
                rep = json.loads((work / "build" / f"node_{k:02d}" / sub / "size.json").read_text())
                est = estimate_node(plan, plan.nodes[k], board, lib, mixer_maxima(plan))
                points.append({"case": [d, keep, n, f, t], "node": k, "counts": op_counts(plan.nodes[k]),
                               "known_flash": est.flash - est.flash_parts["code_fixed"] - est.flash_parts["code_ops"],
                               "known_ram": est.ram - est.ram_parts["fixed"],
                               "elf_flash": rep["elf"]["flash"], "elf_ram": rep["elf"]["ram"]})
            print(f"case {i + 1}/{len(CASES)} done", flush=True)
    # Many op kinds occur in fixed proportions (per layer, per node), so a plain least-squares fit is
    # ill-posed; ridge regression that shrinks every kind toward a common per-op size keeps the
    # coefficients physical (and extrapolation to deeper models sane).
    kinds = sorted({k for p in points for k in p["counts"]})
    C = np.array([[p["counts"].get(k, 0) for k in kinds] for p in points], dtype=float)
    X = np.hstack([np.ones((len(points), 1)), C.sum(axis=1, keepdims=True), C])
    y = np.array([p["elf_flash"] - p["known_flash"] for p in points], dtype=float)
    ridge = np.diag([0.0, 0.0] + [1.0] * len(kinds))
    full = np.linalg.solve(X.T @ X + ridge, X.T @ y)
    coef = np.concatenate([[full[0]], full[1] + full[2:]])
    X = np.hstack([np.ones((len(points), 1)), C])
    ram_fixed = [p["elf_ram"] - p["known_ram"] for p in points]
    print(f"\n[footprint.{lib}]")
    print(f"flash_fixed = {int(round(coef[0]))}")
    print(f"ram_fixed = {int(round(np.median(ram_fixed)))}   # observed {min(ram_fixed)}..{max(ram_fixed)}")
    print("\n[footprint.ops]  # code bytes per op of the schedule")
    for k, c in zip(kinds, coef[1:]):
        print(f"{k} = {int(round(c))}")
    pred = X @ coef
    err = [(pr + p["known_flash"] - p["elf_flash"]) / p["elf_flash"] for pr, p in zip(pred, points)]
    print(f"\nflash fit: worst relative error {100 * max(map(abs, err)):.2f} % over {len(points)} images")
    if args.json:
        args.json.write_text(json.dumps({"points": points, "kinds": kinds, "coef": coef.tolist()}, indent=1))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
