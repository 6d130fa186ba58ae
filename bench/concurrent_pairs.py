"""Benchmark (issue 15): how many receivers two concurrent Mixer packets serve, by capture alone.

Mixer sends one packet per slot unless a node cannot hear the slot's owner. Whether a channel has
room for two decodable senders per slot bounds what an end of round (or a schedule) can gain: on the
channel model of codegen/radio a receiver decodes the strongest of several senders when it is
`capture_db` above the noise plus the others (docs/design/radio.md). For every pair of nodes this
plays slots in which both send a G = 128, P = 64 packet through `Channel.slot` (seeded shadowing as in
bench/mixer_rounds.py) and counts, per receiver, how often it decodes either packet; a single sender
is the reference.

Writes docs/results/concurrent_pairs.md.

    python bench/concurrent_pairs.py [--slots 500] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import numpy as np

from codegen.fsutil import write_text_atomic
from codegen.radio.channel import Channel
from codegen.radio.physics import ChannelParams
from codegen.radio.topology import topology

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = [("hallway16", None, {}), ("full_mesh", 16, {}), ("grid", 16, {"rows": 4, "spacing": 10.0}),
              ("line", 16, {"spacing": 8.0})]
PACKET = 4 + 128 // 8 + 64 + 16 // 8  # header + coding vector (G = 128) + P = 64 + info (n = 16)
SERVED = 0.9  # a receiver counts as served by a slot where it decodes a packet at least this often


def decode_rates(ch: Channel, senders: list[int], slots: int) -> np.ndarray:
    """[receiver, sender index]: fraction of slots in which the receiver decoded that sender."""
    n = ch.n
    listeners = [r for r in range(n) if r not in senders]
    counts = np.zeros((n, len(senders)))
    for _ in range(slots):
        for r, s in ch.slot({s: PACKET for s in senders}, listeners).items():
            counts[r, senders.index(s)] += 1
    return counts / slots


def study(name: str, n: int | None, extra: dict, slots: int, seed: int) -> dict:
    topo = topology(name, n, seed, **extra)
    ch = Channel(topo, ChannelParams.for_phy("2M"), seed=seed)
    nn = topo.n
    single = {i: decode_rates(ch, [i], slots)[:, 0] for i in range(nn)}
    pairs = {}
    for i, j in itertools.combinations(range(nn), 2):
        pairs[(i, j)] = decode_rates(ch, [i, j], slots)
    served_single = {i: int((q >= SERVED).sum()) for i, q in single.items()}
    served_pair = {p: int((r.sum(1) >= SERVED).sum()) for p, r in pairs.items()}
    both = {p: bool(((r[:, 0] >= SERVED).any()) and ((r[:, 1] >= SERVED).any())) for p, r in pairs.items()}
    return {"topology": name, "n": nn, "single": single, "pairs": pairs, "served_single": served_single,
            "served_pair": served_pair, "both": both}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=500, help="slots played per sender set")
    ap.add_argument("--seed", type=int, default=0, help="placement and shadowing seed (mixer_rounds uses 0)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    t0 = time.time()
    results = []
    for name, n, extra in TOPOLOGIES:
        results.append(study(name, n, extra, args.slots, args.seed))
        print(f"{name}: done ({time.time() - t0:.0f} s)", flush=True)
    lines = ["# Two concurrent Mixer packets on the simulated channel (issue 15)", "",
             f"Every pair of the 16 nodes sends a {PACKET}-byte packet (G = 128, P = 64) in the same slot, "
             f"{args.slots} slots per pair, through `codegen.radio.Channel.slot` (BLE 2M, capture "
             f"threshold and seeded shadowing as in bench/mixer_rounds.py, seed {args.seed}). A receiver is "
             f"*served* when it decodes one of the packets in ≥ {SERVED:.0%} of the slots. One sender serves "
             "at most 15 receivers, a pair at most 14.", "",
             "| topology | one sender: receivers served (mean / max) | pairs: receivers served (mean / max) | "
             "pairs that serve ≥ 12 receivers, each packet at least one | best pair |",
             "|---|---|---|---|---|"]
    for r in results:
        ss, sp = list(r["served_single"].values()), r["served_pair"]
        good = [p for p, v in sp.items() if v >= 12 and r["both"][p]]
        best = max(sp, key=lambda p: (sp[p], -abs(p[0] - p[1])))
        lines.append(f"| {r['topology']} | {np.mean(ss):.1f} / {max(ss)} | {np.mean(list(sp.values())):.1f} / "
                     f"{max(sp.values())} | {len(good)} of {len(sp)} | {best[0]} + {best[1]}: {sp[best]} |")
    hall = results[0]
    lines += ["", "hallway16, the pairs (i, i + 8): per receiver, which sender it decodes (≥ 90 % of slots; "
              "`.` neither, `-` a sender):", "",
              "| pair | " + " | ".join(str(k) for k in range(hall["n"])) + " | served |",
              "|---|" + "---|" * (hall["n"] + 1)]
    for i in range(hall["n"] // 2):
        p = (i, i + hall["n"] // 2)
        rates = hall["pairs"][p]
        cells = []
        for k in range(hall["n"]):
            if k in p:
                cells.append("-")
            elif rates[k, 0] >= SERVED:
                cells.append(str(p[0]))
            elif rates[k, 1] >= SERVED:
                cells.append(str(p[1]))
            else:
                cells.append(".")
        lines.append(f"| {p[0]} + {p[1]} | " + " | ".join(cells) + f" | {hall['served_pair'][p]} |")
    lines += ["", f"_{time.time() - t0:.0f} s on this machine: `python bench/concurrent_pairs.py`_", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "concurrent_pairs.md", "\n".join(lines))
    print(f"-> {args.out / 'concurrent_pairs.md'}")


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
