"""Benchmark (issue 15, item 9): Mixer rounds across placements, payload sizes, bursts and a dead node.

The firmware's Mixer C (codegen/radio/mixer_network.py) on the slot-level channel, 16 nodes, "done"
policy, deployed features (MX_FEAT_DEFAULT), for every cell of

* placement: hallway16 (its fixed plan, channel seeds 0..2), random_geometric (placement seeds 0..2),
  full_mesh;
* (G, P): G = 32 with P ∈ {64, 128, 240} (240 B is the planner's largest row; G = 32 is the largest
  generation whose packet still fits 255 B with it), and G = 128 with P = 64;
* condition: clean; bursts (Gilbert–Elliott per link: good→bad 2 %, bad→good 20 %, 90 % loss when
  bad: about 8 % of slots lost in bursts of ~5); one dead node — each of the 16 in turn, in the state
  after detection (docs/design/dead-nodes.md): its radio dead, the others' `absent` mask naming it,
  its rows weak zeros at the others, the next live node initiating when it was node 0.

Per cell: slots until every live node was done (mean, p99.9) and until all had full rank, the bound
(a live node must receive G minus its own rows minus the dead node's rows, one per slot while it does
not send: the worst node sets it), full rank / bound, the p99.9 round against the fixed 3G + 200, the
fraction of rounds in which some live node ran to the deadline, and the rounds complete at every
live node. Writes docs/results/mixer_robustness.{md,json}.

    python bench/mixer_robustness.py [--rounds 192] [--out docs/results]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from codegen.radio.airtime import slot_us_for_length
from codegen.radio.channel import Channel
from codegen.radio.mixer_network import FEAT_DEFAULT, MixerNetwork
from codegen.radio.physics import ChannelParams, GilbertElliott
from codegen.radio.topology import topology

ROOT = Path(__file__).resolve().parents[1]
N = 16
PLACEMENTS = [("hallway16", s) for s in (0, 1, 2)] + [("random_geometric", s) for s in (0, 1, 2)] + [("full_mesh", 0)]
SIZES = [(32, 64), (32, 128), (32, 240), (128, 64)]
CONDITIONS = ("clean", "bursts", "dead node")
BURSTS = GilbertElliott(0.02, 0.2, 0.0, 0.9)


def packet_len(n: int, g: int, p: int) -> int:
    return 4 + (g + 7) // 8 + p + (max(g, n) + 7) // 8


def run_cell(name: str, seed: int, g: int, p: int, condition: str, rounds: int) -> dict:
    params = ChannelParams.for_phy("2M")
    if condition == "bursts":
        params = dataclasses.replace(params, burst=BURSTS)
    topo = topology(name, None if name == "hallway16" else N, seed)
    slots, full, late, complete, bounds = [], [], 0, 0, []
    per_dead = max(1, rounds // N)
    deads = [None] if condition != "dead node" else list(range(N))
    for dead in deads:
        ch = Channel(topo, params, seed=seed)
        init = 0 if dead != 0 else 1
        if dead is not None:
            ch.fail(dead)
        net = MixerNetwork(ch, g, p, features=FEAT_DEFAULT, initiator=init)
        live = [k for k in range(N) if k != dead]
        # row 0 is the initiator's header; the others' rows round-robin, the dead node's too (the plan
        # gives it a message, which the others write as weak zeros)
        others = [k for k in range(N) if k != init]
        owners = [init] + [others[i % len(others)] for i in range(g - 1)]
        absent = [0 if (dead is None or k == dead) else 1 << dead for k in range(N)]
        inits = [init] * N
        dead_rows = owners.count(dead) if dead is not None else 0
        bounds.append(max(g - owners.count(k) - dead_rows for k in live))
        for r in range(rounds if dead is None else per_dead):
            res = net.run_round(owners, seed=(seed << 16) + r * 977 + (dead or 0), absent=absent, initiators=inits)
            done = int(res.done_slot[live].max()) + 1
            slots.append(done)
            fr = res.full_rank_slot[live]
            full.append(int(fr.max()) if (fr >= 0).all() else res.deadline)
            late += done >= res.deadline
            rows = [i for i, o in enumerate(owners) if o != dead]
            complete += bool(res.data[np.ix_(live, rows)].all() or res.decoded[np.ix_(live, rows)].all())
    n_rounds = len(slots)
    bound = max(bounds)
    deadline = 3 * g + 200
    slot_us = slot_us_for_length(packet_len(N, g, p), "2M", 50)
    return {"placement": name, "seed": seed, "G": g, "P": p, "condition": condition, "rounds": n_rounds,
            "slots_mean": float(np.mean(slots)), "slots_p999": float(np.quantile(slots, 0.999)),
            "full_rank_mean": float(np.mean(full)), "bound": bound,
            "full_over_bound": (float(np.mean(full)) + 1) / bound, "p999_over_fixed": float(np.quantile(slots, 0.999)) / deadline,
            "deadline_rounds": late / n_rounds, "complete": complete / n_rounds, "slot_us": slot_us,
            "round_ms_mean": float(np.mean(slots)) * slot_us / 1000,
            "round_ms_p999": float(np.quantile(slots, 0.999)) * slot_us / 1000, "deadline_slots": deadline}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=192, help="rounds per cell (the dead-node cells split them "
                                                             "over the 16 dead nodes)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    t0 = time.time()
    rows = []
    for name, seed in PLACEMENTS:
        for g, p in SIZES:
            for cond in CONDITIONS:
                r = run_cell(name, seed, g, p, cond, args.rounds)
                rows.append(r)
                print(f"{name:17s} s{seed} G={g:3d} P={p:3d} {cond:9s}: {r['slots_mean']:6.1f} / {r['slots_p999']:4.0f} "
                      f"slots, full {r['full_rank_mean']:6.1f} = {r['full_over_bound']:.2f} x bound, "
                      f"deadline {100 * r['deadline_rounds']:.1f} %, complete {100 * r['complete']:.1f} %", flush=True)
    secs = round(time.time() - t0)
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "mixer_robustness.json.tmp"
    tmp.write_text(json.dumps({"rows": rows, "seconds": secs, "rounds": args.rounds}, indent=1) + "\n")
    tmp.replace(args.out / "mixer_robustness.json")
    lines = ["# Mixer robustness: placements, payloads, bursts, a dead node (issue 15)", "",
             f"`python bench/mixer_robustness.py --rounds {args.rounds}` ({secs} s). 16 nodes, done policy, "
             "MX_FEAT_DEFAULT, BLE 2M slots (+50 µs margin). What each column means: the module docstring. "
             "*dead node*: each of the 16 in turn, after detection (absent mask, weak rows); slots and "
             "deadline rounds count the live nodes only. *bursts*: Gilbert–Elliott 2 % / 20 % / 90 % loss "
             "when bad.", "",
             "| placement | seed | G | P | condition | rounds | slots mean / p99.9 | all full rank | bound | "
             "full / bound | p99.9 / (3G+200) | round ms mean / p99.9 | deadline rounds | complete |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['placement']} | {r['seed']} | {r['G']} | {r['P']} | {r['condition']} | {r['rounds']} | "
                     f"{r['slots_mean']:.1f} / {r['slots_p999']:.0f} | {r['full_rank_mean']:.1f} | {r['bound']} | "
                     f"{r['full_over_bound']:.2f} | {r['p999_over_fixed']:.2f} | {r['round_ms_mean']:.1f} / "
                     f"{r['round_ms_p999']:.1f} | {100 * r['deadline_rounds']:.1f} % | {100 * r['complete']:.1f} % |")
    dead = [r for r in rows if r["condition"] == "dead node"]
    lines += ["", f"Dead node, all cells: rounds that ran to the deadline at a live node: "
              f"{sum(r['deadline_rounds'] * r['rounds'] for r in dead):.0f} of {sum(r['rounds'] for r in dead)}."]
    out = args.out / "mixer_robustness.md"
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(out)
    print("\n".join(lines))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
