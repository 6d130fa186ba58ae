"""Benchmark (issue 15): how early every node could know that all have full rank, on Mixer's own packets.

A node may end a `done` round safely only once it knows that every node has full rank (an end that
guesses strands nodes under loss: docs/design/mixer.md §9). That knowledge travels only in packets.
This plays the kept protocol's rounds (bench/mixer_rounds.py's setup: the initiator owns row 0, the
other nodes the rest, interleaved), records which packet every node received in every slot, and
replays that trace with *perfect gossip*: each packet carries everything its sender knows, and a node
knows its own full rank from the slot it reaches it. The slot at which every node knows is a lower
bound on the end of any round that keeps these transmissions and ends on knowledge, whatever its
packets carry; the round's real end also needs each node to be heard once more (or a guess).

Writes docs/results/mixer_knowledge_bound.md.

    python bench/mixer_knowledge_bound.py [--rounds 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from codegen.fsutil import write_text_atomic
from codegen.radio.channel import Channel
from codegen.radio.mixer_network import MixerNetwork
from codegen.radio.physics import ChannelParams
from codegen.radio.topology import topology

ROOT = Path(__file__).resolve().parents[1]
CELLS = [(128, 64, 1.0), (64, 64, 0.25), (32, 64, 0.25)]  # (G, P, share of --rounds)


class TraceChannel:
    """The channel, recording {receiver: sender} of every slot of the round (empty where nobody sent)."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.slots: list[dict[int, int]] = []

    def begin_round(self) -> None:
        self.slots = []
        self.channel.begin_round()

    def note_slot(self, slot: int) -> None:
        assert slot == len(self.slots)
        self.slots.append({})

    def slot(self, tx: dict[int, int], rx: list[int]) -> dict[int, int]:
        got = self.channel.slot(tx, rx)
        self.slots[-1] = dict(got)
        return got

    def __getattr__(self, name: str):
        return getattr(self.channel, name)


def all_know_slot(trace: list[dict[int, int]], full_rank_slot: np.ndarray) -> int | None:
    """The first slot after which every node knows every node's full rank, with perfect gossip."""
    n = len(full_rank_slot)
    everyone = (1 << n) - 1
    known = [0] * n
    for t, got in enumerate(trace):
        for i in range(n):
            if 0 <= full_rank_slot[i] <= t:
                known[i] |= 1 << i
        before = list(known)
        for receiver, sender in got.items():
            known[receiver] |= before[sender]
        if all(k == everyone for k in known):
            return t
    return None


def run(g: int, payload: int, rounds: int, seed: int) -> dict:
    topo = topology("hallway16", None, seed)
    trace = TraceChannel(Channel(topo, ChannelParams.for_phy("2M"), seed=seed))
    net = MixerNetwork(trace, g, payload)
    n = topo.n
    owners = [0] + [1 + (i % (n - 1)) for i in range(g - 1)]
    ends, last_full, know = [], [], []
    for r in range(rounds):
        res = net.run_round(owners, seed=(seed << 16) + r)
        at = all_know_slot(trace.slots, res.full_rank_slot)
        ends.append(res.slots)
        last_full.append(res.full_rank_slot.max() if (res.full_rank_slot >= 0).all() else res.deadline)
        know.append(res.deadline if at is None else at + 1)  # slots, counted like the round's
    deadline = 3 * g + 200
    return {"G": g, "P": payload, "rounds": rounds, "deadline": deadline, "target": 0.3 * deadline,
            "end": (np.mean(ends), np.quantile(ends, 0.999)),
            "last_full": (np.mean(last_full) + 1, np.quantile(last_full, 0.999) + 1),
            "know": (np.mean(know), np.quantile(know, 0.999))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2000, help="rounds of the G = 128 cell (others: a quarter)")
    ap.add_argument("--seed", type=int, default=0, help="placement, shadowing and round seed (mixer_rounds uses 0)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    t0 = time.time()
    rows = []
    for g, payload, share in CELLS:
        rows.append(run(g, payload, max(1, int(args.rounds * share)), args.seed))
        r = rows[-1]
        print(f"hallway16 G={g}: end {r['end'][1]:.0f}, everyone knows (perfect gossip) {r['know'][1]:.0f} slots "
              f"at p99.9; target {r['target']:.1f}")
    lines = ["# Mixer: how early every node could know that all have full rank (issue 15)", "",
             ("`python bench/mixer_knowledge_bound.py` (hallway16, BLE 2M, the kept protocol's packets, perfect "
              "gossip on them; bench/mixer_knowledge_bound.py says how). Slots are counted like the round's "
              "(the slot after the event); p99.9 over the rounds."), "",
             ("| G | P | rounds | last node at full rank: mean / p99.9 | everyone knows, perfect gossip: mean / p99.9 "
              "| the round's end (kept): mean / p99.9 | p99.9 target (0.30 × (3G + 200)) |"),
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['G']} | {r['P']} | {r['rounds']} | {r['last_full'][0]:.1f} / {r['last_full'][1]:.0f} | "
                     f"{r['know'][0]:.1f} / {r['know'][1]:.0f} | {r['end'][0]:.1f} / {r['end'][1]:.0f} | "
                     f"{r['target']:.1f} |")
    lines += ["", ("An end that keeps these transmissions and waits for knowledge cannot come before the "
                   "*everyone knows* column; ending there would still leave the last learners unheard (each needs one "
                   "more packet for the others to know it may go, or a guess that strands nodes under loss)."),
              "", f"({time.time() - t0:.0f} s)", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "mixer_knowledge_bound.md", "\n".join(lines))
    print(f"-> {args.out / 'mixer_knowledge_bound.md'}")


if __name__ == "__main__":
    main()
