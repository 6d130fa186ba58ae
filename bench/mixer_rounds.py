"""Benchmark (issue 4): Mixer rounds on simulated topologies — slots to completion, delivery, round time.

Runs the firmware's Mixer C (through codegen/radio/mixer_network.py) on the slot-level channel for every
topology and generation size G, with the "done" round policy (a node ends once it knows every node
has full rank, after a short linger) and reports, per cell:

* slots until every node was done (mean, 99.9th percentile) and until all had full rank;
* delivery: the fraction of (node, row) pairs decoded, and of rounds complete at every node;
* round time on BLE 2M (and 1M for the hallway) against the published fixed deadline 3G + 200;
* the done policy's linger (how long a node stays after it knows all have full rank): shorter
  lingers against the n slots the compiler plans, on the hallway and on channels that strand nodes.

Writes docs/results/mixer_rounds.{md,json,png}.

    python bench/mixer_rounds.py [--rounds 2000] [--payload 64]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from codegen.fsutil import write_text_atomic
from codegen.radio.channel import Channel
from codegen.radio.physics import ChannelParams, GilbertElliott
from codegen.radio.mixer_network import FEAT_ALL, FEAT_DEFAULT, MixerNetwork, owner_schedule_limit, slot_shares
from codegen.radio.airtime import slot_us_for_length
from codegen.radio.topology import topology

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = [("full_mesh", 16, {}), ("line", 16, {"spacing": 8.0}), ("grid", 16, {"rows": 4, "spacing": 10.0}),
              ("random_geometric", 16, {}), ("hallway16", None, {})]
GENERATIONS = [8, 16, 32, 64, 128]


def packet_len(n: int, g: int, p: int) -> int:
    return 4 + (g + 7) // 8 + p + (max(g, n) + 7) // 8


def run_cell(name: str, n: int | None, extra: dict, g: int, payload: int, rounds: int, seed: int, phy: str,
             features: int = FEAT_DEFAULT, senders: int = 0, weighted: bool = True, linger: int | None = None,
             loss: float = 0.0) -> dict:
    topo = topology(name, n, seed, **extra)
    params = ChannelParams.for_phy(phy, **({"burst": GilbertElliott(0.0, 1.0, loss, loss)} if loss else {}))
    ch = Channel(topo, params, seed=seed)
    net = MixerNetwork(ch, g, payload, features=features, weighted=weighted, linger=linger)
    nn = topo.n
    if senders:  # a somegather round: nodes 1..senders each send a message of consecutive rows
        owners = [0] + [1 + (i * senders) // (g - 1) for i in range(g - 1)]
    else:  # every node but the initiator sends, rows interleaved
        owners = [0] + [1 + (i % (nn - 1)) for i in range(g - 1)] if nn > 1 else [0] * g
    slots, full, complete, decoded, late = [], [], 0, 0.0, 0
    for r in range(rounds):
        res = net.run_round(owners, seed=(seed << 16) + r)
        slots.append(res.slots)
        late += res.slots >= res.deadline
        full.append(res.full_rank_slot.max() if (res.full_rank_slot >= 0).all() else res.deadline)
        complete += res.complete
        decoded += res.decoded.mean()
    # lower bound on all-full-rank: a node needs G minus its own rows innovative packets, received one
    # per slot while it does not send, so the node owning the fewest rows (the initiator: row 0) sets it
    bound = g - min(owners.count(i) for i in range(nn))
    # where the nodes cannot all hear each other, the slots of owners a node does not hear are lost to it:
    # the slot by which the last node's expected receptions from the owners reach what it needs
    limit = max(owner_schedule_limit(topo.link_quality(params), owners,
                                     slot_shares(nn, owners) if weighted else [0] * nn))
    slot_us = slot_us_for_length(packet_len(nn, g, payload), phy, 50)
    deadline = 3 * g + 200
    mean_slots = float(np.mean(slots))
    return {"topology": name, "nodes": nn, "G": g, "payload": payload, "phy": phy, "rounds": rounds,
            "slots_mean": mean_slots, "slots_p999": float(np.quantile(slots, 0.999)),
            "full_rank_mean": float(np.mean(full)), "features": features, "bound": bound,
            "owner_limit": limit,
            "senders": senders, "weighted": weighted, "full_rank_p999": float(np.quantile(full, 0.999)),
            "full_rank_over_bound": (float(np.mean(full)) + 1) / bound, "full_rank_over_g": float(np.mean(full)) / g,
            "p999_over_fixed": float(np.quantile(slots, 0.999)) / deadline, "complete_fraction": complete / rounds,
            "delivery_ratio": decoded / rounds, "slot_us": slot_us, "deadline_slots": deadline,
            "round_ms": mean_slots * slot_us / 1000, "fixed_ms": deadline * slot_us / 1000,
            "ratio_to_fixed": mean_slots / deadline, "late": late, "linger": net.cfg.linger_slots, "loss": loss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--payload", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    rows = []
    t0 = time.time()
    cells = [(t, n, e, g, "2M") for t, n, e in TOPOLOGIES for g in GENERATIONS]
    cells += [("hallway16", None, {}, g, "1M") for g in GENERATIONS]
    cells = [c + (FEAT_DEFAULT,) for c in cells]
    # the issue-15 comparison: every feature (requests on) on the hallway
    cells += [("hallway16", None, {}, g, "2M", FEAT_ALL) for g in GENERATIONS]
    for name, n, extra, g, phy, feats in cells:
        rounds = args.rounds if name == "hallway16" else max(200, args.rounds // 4)
        rows.append(run_cell(name, n, extra, g, args.payload, rounds, args.seed, phy, feats))
        r = rows[-1]
        print(f"{name:17s} {phy} G={g:3d}: {r['slots_mean']:6.1f} slots (p99.9 {r['slots_p999']:5.0f}), complete "
              f"{100 * r['complete_fraction']:6.2f} %, {r['round_ms']:6.1f} ms = {r['ratio_to_fixed']:.2f} x fixed",
              flush=True)
    lines = ["# Mixer rounds on simulated topologies (issue 4)", "",
             f"firmware/mixer (cisl's Mixer) over codegen/radio's slot-level channel, 16 nodes, P = {args.payload} B, "
             "\"done\" round policy (a node ends once it knows every node has full rank, after lingering n slots); "
             f"{args.rounds} rounds per cell on the hallway, {max(200, args.rounds // 4)} elsewhere. Slot lengths "
             "from the nRF52840 timing model (+50 µs margin). Fixed deadline = the published 3G + 200 slots. "
             "Features: default = coordinated TX + weak zeros (MX_FEAT_DEFAULT); all = also row requests. "
             "Bound = max over nodes of G − its own rows (it must receive the rest, one per slot). Owner only = "
             "the slot by which the last node's expected receptions would reach what it needs if only each slot's "
             "owner sent (codegen.radio.mixer_network.owner_schedule_limit, median link PRRs): a node loses the "
             "slots of owners it cannot hear. Nodes that cannot hear an owner contend in its slot, so where "
             "owners are out of range of many nodes (line, grid, random_geometric) Mixer beats it; where only "
             "a few links are missing (hallway16) it is what one sender per slot allows.", "",
             "| topology | features | PHY | G | slots (mean / p99.9) | all full rank at | bound G − own rows | "
             "(full rank + 1) / bound | owner only | rounds complete at every node | "
             "delivery | round time | fixed 3G+200 | ratio (mean / p99.9) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        feats = "default" if r["features"] == FEAT_DEFAULT else "all (+requests)"
        lines.append(f"| {r['topology']} | {feats} | {r['phy']} | {r['G']} | {r['slots_mean']:.1f} / {r['slots_p999']:.0f} | "
                     f"{r['full_rank_mean']:.1f} | {r['bound']} | {r['full_rank_over_bound']:.2f} | "
                     f"{r['owner_limit']} | {100 * r['complete_fraction']:.2f} % | "
                     f"{100 * r['delivery_ratio']:.3f} % | {r['round_ms']:.1f} ms | {r['fixed_ms']:.1f} ms | "
                     f"{r['ratio_to_fixed']:.2f} / {r['p999_over_fixed']:.2f} |")
    # the slot schedule (issue 15): the weighted first pass against plain turns (slot s owned by s mod n)
    sched = []
    for name, n, extra in [t for t in TOPOLOGIES if t[0] in ("full_mesh", "line", "hallway16")]:
        for g, senders in [(32, 0), (128, 0), (64, 4), (128, 4)]:
            for weighted in (False, True):
                rounds = max(100, args.rounds // 10)
                sched.append(run_cell(name, n, extra, g, args.payload, rounds, args.seed, "2M", senders=senders,
                                      weighted=weighted))
    lines += ["", "## Slot schedule: the weighted first pass (issue 15)", "",
              "Plain = slot s owned by node s mod n (before issue 15's third pass); weighted = slot 0 the initiator's, "
              "then a pass in which every sender owns as many slots as it has rows, then slot s is node s mod n's again "
              "(mx_config.slot_shares, set by the somegather transport). Senders: \"all\" = the 15 non-initiator "
              "nodes, rows interleaved (the table above); 4 = a somegather round carrying 4 nodes' messages. "
              f"{max(100, args.rounds // 10)} rounds per cell, BLE 2M, P = {args.payload} B.", "",
              "| topology | G | senders | schedule | slots (mean / p99.9) | all full rank (mean / p99.9) | "
              "full rank / G | rounds complete |", "|---|---|---|---|---|---|---|---|"]
    for r in sched:
        lines.append(f"| {r['topology']} | {r['G']} | {r['senders'] or 'all'} | "
                     f"{'weighted' if r['weighted'] else 'plain'} | {r['slots_mean']:.1f} / {r['slots_p999']:.0f} | "
                     f"{r['full_rank_mean']:.1f} / {r['full_rank_p999']:.0f} | {r['full_rank_over_g']:.2f} | "
                     f"{100 * r['complete_fraction']:.1f} % |")
    # the done policy's linger: the compiler plans max(4, n) slots (codegen/compile.py round_policy)
    linger_rows = []
    for name, n, extra, g, loss in [("hallway16", None, {}, 128, 0.0), ("line", 16, {"spacing": 8.0}, 64, 0.0),
                                    ("grid", 16, {"rows": 4, "spacing": 10.0}, 128, 0.0),
                                    ("full_mesh", 16, {}, 48, 0.3)]:
        for linger in (4, 8, 16):
            linger_rows.append(run_cell(name, n, extra, g, args.payload, max(100, args.rounds // 7), args.seed, "2M",
                                        linger=linger, loss=loss))
            r = linger_rows[-1]
            print(f"linger {linger:2d} {name:10s} G={g}: {r['slots_mean']:.1f} / {r['slots_p999']:.0f}, late {r['late']}",
                  flush=True)
    lines += ["", "## The done policy's linger", "",
              "A node that knows every node has full rank stays `linger` slots (or until every node has said it "
              "knows) so that the others learn it too; the compiler plans max(4, n) = 16 for 16 nodes. Shorter "
              f"lingers, {max(100, args.rounds // 7)} rounds per cell, BLE 2M, P = {args.payload} B (the full mesh "
              "with 30 % extra i.i.d. loss). *Late*: rounds that ran to the 3G + 200 deadline because some node "
              "never learnt that all had full rank (the others had left).", "",
              "| topology | G | linger | slots (mean / p99.9) | p99.9 / fixed | late | rounds complete |",
              "|---|---|---|---|---|---|---|"]
    for r in linger_rows:
        label = r["topology"] + (" (30 % loss)" if r["loss"] else "")
        lines.append(f"| {label} | {r['G']} | {r['linger']} | {r['slots_mean']:.1f} / {r['slots_p999']:.0f} | "
                     f"{r['p999_over_fixed']:.2f} | {r['late']} of {r['rounds']} | {100 * r['complete_fraction']:.1f} % |")
    hall = {r["linger"]: r for r in linger_rows if r["topology"] == "hallway16"}
    stranded = sorted({r["topology"] + (" (30 % loss)" if r["loss"] else "") for r in linger_rows
                       if r["linger"] < 16 and r["late"]})
    lines += ["", f"On the hallway, linger 4 gives p99.9 {hall[4]['slots_p999']:.0f} slots "
              f"({hall[4]['p999_over_fixed']:.2f} × the deadline) against {hall[16]['slots_p999']:.0f} "
              f"({hall[16]['p999_over_fixed']:.2f} ×) with 16; a shorter linger strands nodes on "
              f"{', '.join(stranded) or 'none of these channels'}."]
    # the smallest networks under heavy loss (stop 45): where nothing else contends, a missed node,
    # a lost acknowledgement or a false silence used to leave a round running to the deadline
    small = []
    for n in (2, 3, 4, 8):
        for g in (8, 32):
            small.append(run_cell("full_mesh", n, {}, g, args.payload, 300, args.seed, "2M", loss=0.3))
            r = small[-1]
            print(f"small n={n} G={g}: {r['slots_mean']:.1f} / {r['slots_p999']:.0f}, late {r['late']}", flush=True)
    lines += ["", "## Small networks under heavy loss", "",
              "2-8 nodes on a full mesh with 30 % extra i.i.d. loss, 300 rounds per cell, BLE 2M, "
              f"P = {args.payload} B. Before the fixes of stop 45 (docs/design/mixer.md §5-§6), 151 / 46 / 23 of "
              "300 rounds of 2 / 3 / 4 nodes at G = 8 ran to the deadline. *Late*: rounds at the 3G + 200 deadline.",
              "", "| nodes | G | slots (mean / p99.9) | p99.9 / fixed | late | rounds complete |",
              "|---|---|---|---|---|---|"]
    for r in small:
        lines.append(f"| {r['nodes']} | {r['G']} | {r['slots_mean']:.1f} / {r['slots_p999']:.0f} | "
                     f"{r['p999_over_fixed']:.2f} | {r['late']} of {r['rounds']} | {100 * r['complete_fraction']:.1f} % |")
    lines += ["", "![slots vs G](mixer_rounds.png)", "",
              "Reproduce: `python bench/mixer_rounds.py` "
              f"({round(time.time() - t0)} s on this machine)."]
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "mixer_rounds.json",
                 json.dumps({"rows": rows, "schedule": sched, "linger": linger_rows, "small": small, "seconds": round(time.time() - t0)},
                            indent=1) + "\n")
    write_text_atomic(args.out / "mixer_rounds.md", "\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name in {r["topology"] for r in rows}:
        pts = [r for r in rows if r["topology"] == name and r["phy"] == "2M" and r["features"] == FEAT_DEFAULT]
        ax.plot([r["G"] for r in pts], [r["slots_mean"] for r in pts], "o-", label=name)
    ax.plot(GENERATIONS, [3 * g + 200 for g in GENERATIONS], "k--", label="fixed 3G+200")
    ax.set_xlabel("generation size G")
    ax.set_ylabel("slots per round")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out / "mixer_rounds.png", dpi=120)
    print("\n".join(lines))


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
