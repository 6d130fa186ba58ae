"""Check the cycle model (codegen/timing) on upstream CMSIS-NN's arm_nn_vec_mat_mult_t_s8.

Compiles the kernel from CMSIS_NN_ROOT with the board's cpu_flags + upstream_cflags (as
`cisl build` does for upstream kernels), links it with a small harness (weights `const`, so in
flash as in the node images; input and output in RAM) for the nRF52840's memory map, runs one call
on the emulator and reports the model's cycles per MAC (low/central/high), whole call and inner
loop, plus the inner loop's instructions with their model cost, for comparison with the
hand-worked TRM figure (docs/results/cycle_model_validation.md). Also runs the same shape with
the weights in RAM (zero wait states). Checks the int8 outputs against a numpy reference.

    CMSIS_NN_ROOT=/path/to/CMSIS-NN .venv/bin/python bench/cycle_model_fc.py [--rows 512 --cols 512]

Needs arm-none-eabi-gcc; downloads nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen.boards import load_board  # noqa: E402
from codegen.timing.engine import Image  # noqa: E402
from codegen.timing.native import new_emulator  # noqa: E402
from codegen.timing.memsystem import MemoryModel  # noqa: E402
from unicorn import UC_HOOK_BLOCK  # noqa: E402

LINKER = """MEMORY { FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 1024K
         RAM (rwx)  : ORIGIN = 0x20000000, LENGTH = 256K }
SECTIONS {
  .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) . = ALIGN(4); } > FLASH
  .data : { *(.data*) . = ALIGN(4); } > RAM AT > FLASH
  .bss (NOLOAD) : { *(.bss*) *(COMMON) } > RAM
}
"""

MULT, SHIFT, IN_OFF, OUT_OFF = 1288490189, -9, 3, -5   # a typical requantisation


def harness(rows: int, cols: int, w: np.ndarray, x: np.ndarray, b: np.ndarray, weights_const: bool) -> str:
    def arr(a):
        return ",".join(str(int(v)) for v in a.ravel())
    q = "const " if weights_const else ""
    return f"""#include <stdint.h>
#include "arm_nnsupportfunctions.h"
__attribute__((section(".vectors"), used)) const uint32_t vectors[2] = {{0x20040000u, 0u}};
{q}int8_t weights[{rows * cols}] __attribute__((aligned(4))) = {{{arr(w)}}};
const int32_t bias[{rows}] = {{{arr(b)}}};
int8_t input[{cols}] __attribute__((aligned(4))) = {{{arr(x)}}};
int8_t output[{rows}];
int fc_run(void)
{{
    return (int)arm_nn_vec_mat_mult_t_s8(input, weights, 0, bias, output, {IN_OFF}, {OUT_OFF}, {MULT}, {SHIFT},
                                         {cols}, {rows}, -128, 127, 1, 0);
}}
"""


def reference(w, x, b):
    """arm_nn_requantize (CMSIS-NN default: doubling high multiply, then rounding right shift)."""
    acc = (w.astype(np.int64) @ (x.astype(np.int64) + IN_OFF)) + b
    left, right = max(SHIFT, 0), max(-SHIFT, 0)
    v = acc * (1 << left)
    prod = v * MULT
    nudge = np.where(prod >= 0, 1 << 30, 1 - (1 << 30))
    hi = (prod + nudge)
    hi = np.where(hi >= 0, hi >> 31, -((-hi) >> 31))  # truncating division by 2^31
    mask = (1 << right) - 1
    rem = hi & mask
    thr = (mask >> 1) + (hi < 0)
    res = (hi >> right) + (rem > thr)
    return np.clip(res + OUT_OFF, -128, 127).astype(np.int8)


def build(root: Path, board, work: Path, src: str, name: str) -> Path:
    cc = board.build.get("cc", "arm-none-eabi-gcc")
    flags = list(board.build["cpu_flags"]) + list(board.build["upstream_cflags"])
    inc = [f"-I{root / 'Include'}"]
    (work / f"{name}.c").write_text(src)
    (work / "link.ld").write_text(LINKER)
    kobj = work / "arm_nn_vec_mat_mult_t_s8.o"
    if not kobj.exists():
        subprocess.run([cc, *flags, *inc, "-c", str(root / "Source/NNSupportFunctions/arm_nn_vec_mat_mult_t_s8.c"),
                        "-o", str(kobj)], check=True)
    elf = work / f"{name}.elf"
    subprocess.run([cc, *flags, *inc, str(work / f"{name}.c"), str(kobj), "-nostartfiles", "--specs=nano.specs",
                    "-Wl,--gc-sections", "-Wl,-efc_run", f"-T{work / 'link.ld'}", "-o", str(elf)], check=True)
    return elf


def run(elf: Path, board, rows: int, cols: int, wait=None) -> dict:
    img = Image.load(elf)
    mem = MemoryModel.for_board(board, flash_wait=wait)
    em = new_emulator(img, mem)
    execs: Counter = Counter()
    em.uc.hook_add(UC_HOOK_BLOCK, lambda uc, a, s, u: execs.__setitem__(a, execs[a] + 1))
    em.call("fc_run")
    out = np.frombuffer(em.read(img.symbols["output"], rows), dtype=np.int8)
    t = em.total()
    macs = rows * cols
    lo, ce, hi = t.cycles(mem)
    # the inner loop: the kernel's most executed blocks (one pass of the possibly unrolled loop body;
    # unicorn splits a body that crosses a 1 KB page into two blocks executed equally often)
    kern = img.symbols["arm_nn_vec_mat_mult_t_s8"]
    ksize = img.sizes["arm_nn_vec_mat_mult_t_s8"]
    hot = max((a for a in execs if kern <= a < kern + ksize), key=lambda a: execs[a])
    last = em.blocks[hot].insns[-1]
    branch = next(em.decoder.cs.disasm(em.read(last.address, last.size), last.address))
    target = branch.operands[0].imm          # the back-branch's target: the loop head
    loop, a = [], target
    while True:
        b = em.blocks[a]
        loop.append(b)
        if a == hot:
            break
        a = b.address + b.size
    n_iter = execs[hot]
    insns = [i for b in loop for i in b.insns]
    head = loop[0]
    n_smlad = sum(1 for i in insns if i.mnemonic == "smlad")
    macs_per_iter = 2 * n_smlad
    # the taken back-branch's refill as the engine computes it (target = the loop head)
    refill = 1 if (head.address % 4 == 0 or head.insns[0].size == 2) else 2
    wait = mem.flash_wait
    w_addr = img.symbols["weights"]
    in_flash = w_addr < mem.flash_range[1]
    # flash data reads of one pass: the weight loads (one load in three reads the input, in RAM)
    n_load = sum(1 for i in insns if i.cls == "load")
    n_wload = (2 * n_load) // 3 if in_flash else 0
    lows, cents, highs = (sum(b.low for b in loop), sum(b.central for b in loop), sum(b.high for b in loop))
    per_iter = {
        "low": lows + 1 + wait[0] * n_wload,
        # the model's central: one buffered flash line for all data reads; the two weight rows
        # alternate, so every weight load changes line and pays the central wait states
        "central": cents + refill + wait[1] * n_wload,
        "high": highs + 3 + wait[2] * n_wload,
    }
    return {
        "elf": str(elf), "weights_at": hex(w_addr), "weights_in_flash": in_flash,
        "outputs_match_reference": None, "out": out,
        "insns": t.insns, "taken_branches": t.taken_branches, "flash_reads": t.flash_reads,
        "flash_line_changes": t.flash_line_changes, "icache_misses": t.icache_misses,
        "cycles": [lo, ce, hi], "cycles_per_mac": [lo / macs, ce / macs, hi / macs],
        "inner_loop": {"address": hex(head.address), "blocks": [hex(b.address) for b in loop], "passes": n_iter, "macs_per_pass": macs_per_iter,
                       "insns": [(hex(i.address), i.mnemonic, i.cls, i.low, i.central, i.high) for i in insns],
                       "static_per_pass": [lows, cents, highs], "refill_central": refill,
                       "weight_loads_per_pass": n_wload,
                       "cycles_per_pass": per_iter,
                       "cycles_per_mac": {k: v / macs_per_iter for k, v in per_iter.items()},
                       "share_of_macs": n_iter * macs_per_iter / macs},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=os.environ.get("CMSIS_NN_ROOT"), help="CMSIS-NN checkout")
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--cols", type=int, default=512)
    ap.add_argument("--board", default="nrf52840dk")
    ap.add_argument("--keep", type=Path, default=None, help="keep the ELFs in this directory")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.root is None or not (Path(args.root) / "Include" / "arm_nnfunctions.h").is_file():
        ap.error("set CMSIS_NN_ROOT (or --root) to a CMSIS-NN checkout")
    board = load_board(args.board)
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (args.rows, args.cols), dtype=np.int8)
    x = rng.integers(-128, 128, args.cols, dtype=np.int8)
    b = rng.integers(-5000, 5000, args.rows, dtype=np.int32)
    ref = reference(w, x, b)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        # the RAM variant must fit the 256 KB of RAM: at most 128 KB of weights
        ram_rows = min(args.rows, (128 * 1024 // args.cols) // 2 * 2)
        for name, const, rows, wait in (("fc_flash", True, args.rows, None),
                                        ("fc_flash_zero_wait", True, args.rows, (0.0, 0.0, 0.0)),
                                        ("fc_ram", False, ram_rows, None)):
            elf = build(Path(args.root), board, work, harness(rows, args.cols, w[:rows], x, b[:rows], const),
                        name.replace("_zero_wait", ""))
            r = run(elf, board, rows, args.cols, wait)
            out = r.pop("out")
            r["rows"], r["cols"] = rows, args.cols
            r["outputs_match_reference"] = bool(np.array_equal(out, ref[:rows]))
            r["outputs_mismatches"] = int(np.sum(out != ref[:rows]))
            results[name] = r
    for name, r in results.items():
        il = r["inner_loop"]
        print(f"== {name}: weights at {r['weights_at']}, {r['rows']}x{r['cols']}, outputs match numpy: "
              f"{r['outputs_match_reference']}")
        print(f"  whole call: {r['insns']} insns, cycles low/central/high {r['cycles'][0]:.0f} / {r['cycles'][1]:.0f} /"
              f" {r['cycles'][2]:.0f}; cycles/MAC {r['cycles_per_mac'][0]:.3f} / {r['cycles_per_mac'][1]:.3f} / "
              f"{r['cycles_per_mac'][2]:.3f}")
        print(f"  flash data reads {r['flash_reads']}, line changes {r['flash_line_changes']}, icache misses "
              f"{r['icache_misses']}, taken branches {r['taken_branches']}")
        print(f"  inner loop at {il['address']}: {il['passes']} passes x {il['macs_per_pass']} MACs "
              f"({100 * il['share_of_macs']:.1f} % of the MACs); static per pass {il['static_per_pass']}, "
              f"+ refill {il['refill_central']}, weight loads {il['weight_loads_per_pass']}")
        print("  inner loop cycles/MAC low/central/high: " +
              " / ".join(f"{il['cycles_per_mac'][k]:.3f}" for k in ("low", "central", "high")))
        for ins in il["insns"]:
            print("    " + "  ".join(str(v) for v in ins))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
