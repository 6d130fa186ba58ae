"""Benchmark (issue 15, item 2): a 16-node inference on the virtual testbed with one dead radio, each
node in turn, on the full mesh and the paper's hallway.

A random-weight 16-node model (N = 8, F = 64, keep 0.5) is compiled for the sim board and built; then,
for every node d and topology, `cisl sim --medium radio --radio-dead d` runs 4 inferences (Mixer
through mx_start over the medium, the transport's dead-node detection in the firmware). Per run: is
the sink's forecast bit-exact with the int8 reference fed the same losses; how many Mixer rounds
reached their deadline at a live node (the detection rounds, then any later one); the `peer`
events (every live node declares d dead once); messages delivered.

Then, at the Mixer level (codegen/radio's MixerNetwork over the simulated channel, G = 128 rows of
P = 64 bytes, one row block per sender, the initiator's header in row 0), rounds with one dead node —
the initiator or a sender — with and without the in-round mechanisms (silence, mx_row_source; the
backup initiator, takeover_slots as the planner sets them), and rounds without a dead node to count
false silences and takeovers, on hallway16, a 16-node line and a full mesh with 30 % extra loss.
Writes docs/results/dead_nodes.md.

    python bench/dead_nodes.py [--inferences 4] [--rounds 100] [--out docs/results]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.radio.channel import Channel
from codegen.radio.mixer_network import MixerNetwork
from codegen.radio.peers import DEAD_AFTER_ROUNDS
from codegen.plan.mixer_schedule import takeover_slots
from codegen.radio.physics import ChannelParams, GilbertElliott
from codegen.radio.topology import topology
from codegen.randmodel import config_for_tokens, make_model_dir
from codegen.vtestbed.run import run_sim

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = ("full_mesh", "hallway16")
# (label, topology, extra, G, iid loss, dead nodes to try): the Mixer-level silence study
SILENCE_CASES = [("hallway16", "hallway16", {}, 128, 0.0, (0, 5, 15)),
                 ("line16 (8 m)", "line", {"spacing": 8.0}, 128, 0.0, (0, 7, 15)),
                 ("full mesh, 30 % loss", "full_mesh", {}, 48, 0.3, (0, 3, 9))]


def silence_rounds(topo_name: str, extra: dict, g: int, loss: float, dead: int | None, rounds: int,
                   sources: bool, seed: int = 1) -> dict:
    """Rounds of G rows from all 16 nodes (row 0 the initiator's, node 0) with node ``dead``
    radio-dead; ``sources``: in-round silence and the backup initiator on. Slots until the last live
    node is done, rounds at the deadline, live nodes that miss a live row, false silences, rounds
    the backup took over."""
    topo = topology(topo_name, None if topo_name == "hallway16" else 16, 0, **extra)
    params = ChannelParams.for_phy("2M", **({"burst": GilbertElliott(0.0, 1.0, loss, loss)} if loss else {}))
    ch = Channel(topo, params, seed=seed)
    if dead is not None:
        ch.fail(dead)
    n = topo.n
    owners = sorted([0] + [i % n for i in range(g - 1)])  # node 0: the header and its own rows
    net = MixerNetwork(ch, g, 64, row_sources=sources)
    take = takeover_slots(n, 3 * g + 200) if sources else 0
    live = [k for k in range(n) if k != dead]
    rows = [r for r in range(g) if owners[r] != dead]
    slots, late, incomplete, false, taken = [], 0, 0, 0, 0
    for r in range(rounds):
        res = net.run_round(owners, seed=r, takeover=take)
        taken += bool(res.taken_over[live].any())
        end = int(max(res.done_slot[k] for k in live)) + 1
        slots.append(end)
        late += end >= res.deadline
        incomplete += sum(not res.decoded[k, rows].all() for k in live)
        expect = 0 if dead is None else 1 << dead
        false += sum(int(res.silent[k]) & ~expect != 0 for k in live)
    a = np.array(slots)
    return {"mean": float(a.mean()), "p999": float(np.quantile(a, 0.999)), "late": late, "rounds": rounds,
            "incomplete": incomplete, "false": false, "taken": taken, "deadline": 3 * g + 200}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inferences", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1, help="radio seed (topology and channel)")
    ap.add_argument("--rounds", type=int, default=100, help="Mixer rounds per cell of the silence study")
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
    late_all = sum(len(r["late"]) for r in rows)
    late_other = sum(len(r["late"]) for r in rows if r["dead"] != 0)
    lines += ["", f"All runs bit-exact: {'yes' if all(r['bit_exact'] for r in rows) else 'NO'}. Rounds that "
              f"reached the deadline at a live node: {late_all} of {sum(r['rounds'] for r in rows)} — "
              f"{late_other} with a dead node other than node 0 (in-round silence), "
              f"{late_all - late_other} with node 0 dead (the initiator and sink: its backup starts the rounds "
              "until it is declared dead, docs/design/dead-nodes.md). Rounds after detection that reached the "
              f"deadline: {after} of {total}."]
    lines += ["", "## In-round silence at the Mixer level", "",
              f"`MixerNetwork` over the simulated channel (BLE 2M, radio seed {a.seed}), all 16 nodes send, P = 64; "
              f"{a.rounds} rounds per cell; node 0 is the initiator. *In-round*: silence (mx_row_source) and "
              f"the backup initiator (node 1, after takeover_slots = {takeover_slots(16, 584)} scan slots at G = 128), "
              "both on or both off. *Slots*: until the last live node is done. *Late*: rounds in which a "
              "live node reached the 3G + 200 deadline. *Incomplete*: live nodes missing a live node's row, "
              "summed over rounds. *False silences*: live nodes that declared a live node silent, summed over "
              "rounds. *Taken over*: rounds the backup started (only right when node 0 is dead).", "",
              "| channel | G | dead node | in-round | slots mean / p99.9 | late | incomplete | false silences | "
              "taken over |",
              "|---|---|---|---|---|---|---|---|---|"]
    for label, name, extra, g, loss, deads in SILENCE_CASES:
        for d, sources in [(None, True)] + [(d, s) for d in deads for s in (False, True)]:
            rounds = a.rounds if sources else max(a.rounds // 10, 3)  # without silence every round is long
            c = silence_rounds(name, extra, g, loss, d, rounds, sources, a.seed)
            lines.append(f"| {label} | {g} | {'none' if d is None else d} | {'on' if sources else 'off'} | "
                         f"{c['mean']:.1f} / {c['p999']:.0f} | {c['late']} of {c['rounds']} | {c['incomplete']} | "
                         f"{c['false']} | {c['taken']} |")
            print(lines[-1], flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / "dead_nodes.md"
    tmpf = out.with_suffix(".md.tmp")
    tmpf.write_text("\n".join(lines) + "\n")
    tmpf.replace(out)
    print("\n".join(lines[-1:]))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
