"""Per-slot cost of the channel on hallway16: ``python -m codegen.radio.bench [--slots N]``.

Reports CPU time (process time, so that other load on the machine inflates it less than wall time)
per ``Channel.slot`` call with all 16 nodes listening, the best of a few repeats.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from .channel import Channel
from .physics import ChannelParams, GilbertElliott
from .topology import topology

CASES = {
    "1 tx": (1, None, False),
    "3 tx": (3, None, False),
    "6 tx": (6, None, False),
    "1 tx + bursts": (1, GilbertElliott(), False),
    "3 tx + bursts": (3, GilbertElliott(), False),
    "3 tx + trace": (3, None, True),
}


def measure(slots: int = 20000, repeats: int = 5, length: int = 162) -> dict[str, float]:
    """Microseconds of CPU per slot for each case."""
    topo = topology("hallway16", seed=0)
    listeners = set(range(topo.n))
    out = {}
    for name, (ntx, burst, trace) in CASES.items():
        rng = np.random.default_rng(0)
        pattern = [{int(s): length for s in rng.choice(topo.n, ntx, replace=False)} for _ in range(1000)]
        best = float("inf")
        for _ in range(repeats):
            ch = Channel(topo, ChannelParams(burst=burst), seed=1, trace=trace)
            t0 = time.process_time()
            for k in range(slots):
                ch.slot(pattern[k % 1000], listeners)
            best = min(best, time.process_time() - t0)
        out[name] = best / slots * 1e6
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--slots", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    for name, us in measure(args.slots, args.repeats).items():
        print(f"{name:>15}: {us:6.1f} µs/slot")


if __name__ == "__main__":
    main()
