"""Benchmark (issue 15, item 2): a 16-node inference on the virtual testbed with one dead radio, each
node in turn, on the full mesh and the paper's hallway.

A random-weight 16-node model (N = 8, F = 64, keep 0.5) is compiled for the sim board and built; then,
for every node d and topology, `cisl sim --medium radio --radio-dead d` runs 4 inferences (Mixer
through mx_start over the medium, the transport's dead-node detection in the firmware). Per run: is
the sink's forecast bit-exact with the int8 reference fed the same losses; how many Mixer rounds
reached their deadline at a live node (the detection rounds, then any later one); the `peer`
events (every live node declares d dead once); messages delivered. Writes docs/results/dead_nodes.md.

    python bench/dead_nodes.py [--inferences 4] [--out docs/results]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.radio.peers import DEAD_AFTER_ROUNDS
from codegen.randmodel import config_for_tokens, make_model_dir
from codegen.vtestbed.run import run_sim

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = ("full_mesh", "hallway16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inferences", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1, help="radio seed (topology and channel)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    a = ap.parse_args()
    t0 = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cisl-dead-") as tmp:
        root = Path(tmp)
        onnx = make_model_dir(root / "m", config_for_tokens(8, 64), 16, 0.5, seed=5)
        compile_model(onnx, root / "build", CompileOptions())
        build(root / "build")
        x = np.load(root / "m" / "test_windows.npy")[:a.inferences]
        for topo in TOPOLOGIES:
            for d in range(16):
                r = run_sim(root / "build", x, radio=topo, radio_seed=a.seed, radio_dead=[d])
                live = [k for k in range(16) if k != d]
                late = [i for i, rr in enumerate(r.radio_rounds) if max(rr["finished"][k] for k in live) >= rr["deadline"]]
                declared = sorted(rec.node for rec in r.records if rec.event == "peer" and rec.node != d
                                  and rec.fields["peer"] == d and rec.fields["state"] == "dead")
                rows.append({"topology": topo, "dead": d, "bit_exact": r.ok, "rounds": len(r.radio_rounds),
                             "late": late, "declared_by": len(declared), "delivered": r.delivered,
                             "expected": r.expected})
                print(f"{topo} dead {d:2d}: bit-exact {r.ok}, rounds at the deadline {late}, declared by "
                      f"{len(declared)}, delivered {r.delivered}/{r.expected}", flush=True)
    secs = round(time.time() - t0)
    lines = ["# One dead node, each in turn, on the virtual testbed (issue 15)", "",
             f"`python bench/dead_nodes.py --inferences {a.inferences} --seed {a.seed}` ({secs} s). A 16-node "
             "random-weight model (N = 8, F = 64, keep 0.5) on the sim board; `--medium radio --radio-dead d`: "
             "node d runs but its radio neither sends nor hears. *Late rounds*: Mixer rounds (in execution "
             "order, 0-based) in which some live node ran to the deadline; detection takes "
             f"{DEAD_AFTER_ROUNDS} rounds (docs/design/dead-nodes.md). *Declared by*: live nodes that printed "
             "`peer peer=d state=dead`. Bit-exact: the sink's forecast equals the int8 reference fed the "
             "same losses (for d = 0 the sink is the dead node: it computes alone, everything else lost).", "",
             "| topology | dead node | bit-exact | Mixer rounds | late rounds | declared by | messages delivered |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['topology']} | {r['dead']} | {'yes' if r['bit_exact'] else 'NO'} | {r['rounds']} | "
                     f"{', '.join(map(str, r['late'])) or '–'} | {r['declared_by']} of 15 | "
                     f"{r['delivered']} / {r['expected']} |")
    after = sum(1 for r in rows for i in r["late"] if i >= DEAD_AFTER_ROUNDS)
    total = sum(r["rounds"] - DEAD_AFTER_ROUNDS for r in rows)
    lines += ["", f"All runs bit-exact: {'yes' if all(r['bit_exact'] for r in rows) else 'NO'}. Rounds after "
              f"detection that reached the deadline at a live node: {after} of {total}."]
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / "dead_nodes.md"
    tmpf = out.with_suffix(".md.tmp")
    tmpf.write_text("\n".join(lines) + "\n")
    tmpf.replace(out)
    print("\n".join(lines[-1:]))


if __name__ == "__main__":
    main()
