"""Benchmark (robustness): radio outages of a few Mixer rounds, and whether the network heals after them.

A random-weight 16-node model (N = 8, F = 64, one layer) is compiled for the nRF52840 DK; then
`codegen.timing.comm.comm_schedule` — the slot-level Mixer simulation with the transport's dead-node
detection, which plays exactly what the virtual testbed's radio medium plays (tests/test_timing_comm.py)
— runs 7 inferences per case on hallway16 and on the full mesh, optionally with 30 % i.i.d. loss. In
each case some nodes' radios are dead for a few rounds (`fail`: node, first round, rounds), long
enough for the others to declare them dead and for them to declare everyone dead. Per inference:
messages delivered of those expected, and rounds that ran to their deadline. A network that heals
delivers every message again from the second inference after the outage on (docs/design/dead-nodes.md,
"Revival by rows"). Writes docs/results/outages.md.

    python bench/outages.py [--inferences 7] [--out docs/results]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from codegen.compile import CompileOptions, compile_model
from codegen.plan.io import load_plan
from codegen.radio.physics import ChannelParams, GilbertElliott
from codegen.randmodel import config_for_tokens, make_model_dir
from codegen.timing.comm import comm_schedule

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = ("hallway16", "full_mesh")
LOSSY = ChannelParams.for_phy("2M", burst=GilbertElliott(0.0, 1.0, 0.3, 0.3))
# (label, failures (node, first round, rounds), lossy channel); the plan has 5 rounds per inference
CASES = [
    ("no outage, 30 % loss", [], True),
    ("node 15 (an end of the hallway), 4 rounds", [(15, 2, 4)], False),
    ("node 15, 4 rounds, 30 % loss", [(15, 2, 4)], True),
    ("node 0 (initiator and sink), 4 rounds", [(0, 2, 4)], False),
    ("node 0, 4 rounds, 30 % loss", [(0, 2, 4)], True),
    ("node 1 (the backup initiator), 8 rounds", [(1, 2, 8)], False),
    ("nodes 0 and 15, 4 rounds", [(0, 2, 4), (15, 2, 4)], False),
    ("nodes 3, 7, 11, 4 rounds", [(k, 2, 4) for k in (3, 7, 11)], False),
    ("nodes 8-15 (half the network), 4 rounds", [(k, 2, 4) for k in range(8, 16)], False),
    ("node 15, then node 0, 4 rounds each", [(15, 2, 4), (0, 12, 4)], False),
]


def per_inference(rounds, inferences: int) -> list[tuple[int, int, int]]:
    """(delivered, expected, rounds at the deadline) per inference."""
    out = []
    for inf in range(inferences):
        samples = [(rt, s) for rt in rounds for s in rt.samples if s.inference == inf]
        out.append((sum(n.delivered for _, s in samples for n in s.nodes),
                    sum(n.expected for _, s in samples for n in s.nodes),
                    sum(s.slots >= rt.deadline_slots for rt, s in samples)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inferences", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    a = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="cisl-outages-") as tmp:
        onnx = make_model_dir(Path(tmp) / "m", config_for_tokens(8, 64, layers=1), 16, 1.0, seed=2)
        compile_model(onnx, Path(tmp) / "b", CompileOptions(board="nrf52840dk"))
        plan = load_plan(Path(tmp) / "b")
    per = len(comm_schedule(plan, topology="hallway16"))
    rows = []
    for topo in TOPOLOGIES:
        for label, fail, lossy in CASES:
            rounds = comm_schedule(plan, topology=topo, inferences=a.inferences, fail=fail,
                                   params=LOSSY if lossy else None)
            cells = per_inference(rounds, a.inferences)
            last = max((first + n - 1 for _, first, n in fail), default=-1) // per  # the outage's last inference
            # the round after the outage revives the nodes; if it ends an inference, the next one still pays
            healed = all(d == e and late == 0 for d, e, late in cells[last + 2:]) if last + 2 < a.inferences else None
            rows.append((topo, label, cells, healed))
            print(f"{topo:9s} {label:42s}", " ".join(f"{d}/{e}" + (f" L{late}" if late else "") for d, e, late in cells),
                  "healed" if healed else "NOT HEALED", flush=True)
    secs = round(time.time() - t0)
    head = " | ".join(f"inf {i}" for i in range(a.inferences))
    lines = ["# Radio outages and healing (robustness)", "",
             f"`python bench/outages.py --inferences {a.inferences}` ({secs} s). A random-weight 16-node model "
             f"(N = 8, F = 64, one layer, nRF52840 DK; {per} Mixer rounds per inference) through "
             "`comm_schedule` (the slot-level simulation with the transport's dead-node detection; the virtual "
             "testbed plays the same). Outages: the nodes' radios are dead for the rounds given (counted from 0 "
             "over the run; round 2 is in inference 0). Each cell: messages delivered / expected in that "
             "inference, `L k`: k rounds ran to their deadline (in the outage these include the deaf nodes' own "
             "rounds). *Healed*: every message delivered and no round at the deadline in every inference from "
             "the second after the one in which the outage ends (the first round after an outage revives the "
             "nodes; when the outage ends an inference, the next one still loses that round's messages).", "",
             f"| channel | outage | {head} | healed |",
             "|---|---|" + "---|" * a.inferences + "---|"]
    for topo, label, cells, healed in rows:
        lines.append(f"| {topo} | {label} | " + " | ".join(f"{d} / {e}" + (f" L {late}" if late else "")
                                                         for d, e, late in cells)
                     + f" | {'yes' if healed else 'NO' if healed is not None else '–'} |")
    lines += ["", f"Healed: {sum(1 for r in rows if r[3])} of {sum(1 for r in rows if r[3] is not None)} cases."]
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / "outages.md"
    tmpf = out.with_suffix(".md.tmp")
    tmpf.write_text("\n".join(lines) + "\n")
    tmpf.replace(out)
    print(lines[-1])


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
