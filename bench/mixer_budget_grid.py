"""The Mixer's per-packet CPU budget on the nRF52840 for every (G, P) the planner may choose (issue 15).

For G in codegen.timing.mixer_budget.GRID_G and P in GRID_P (clipped to P ≤ min(240, 255 − packet
overhead), plus that largest P), three rounds run with one node on the cycle model
(codegen/timing/mixer_budget.py, GRID_ROUNDS: 16 nodes under the done and the fixed policy, 2 nodes
fixed), with the features deployed rounds use (mixer.h MX_FEAT_DEFAULT, read from the image). Per
point: the worst per-packet work (low / central / high cycles), the shortest slot in which no
measured slot is late, both against the plain slot on BLE 2M and 1M, and what `cisl compile` does
with the point: the slot RoundPolicy gives it from board.toml's [mixer] per_packet_cycles (the gap) and
slot_cycles (the whole slot). Off-grid
points with other seeds and other node counts check the fit. Writes docs/results/mixer_budget_grid.{md,json}.

    python bench/mixer_budget_grid.py              # measure everything (about 10 minutes)
    python bench/mixer_budget_grid.py --fit        # board.toml's per_packet_cycles and slot_cycles from the .json
    python bench/mixer_budget_grid.py --render     # the compiler columns again, for the current board.toml
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from codegen.compile import _per_packet_us, _slot_work_us
from codegen.fsutil import write_text_atomic
from codegen.plan.mixer_schedule import RoundPolicy, packet_length
from codegen.radio import mixer_network
from codegen.timing.mixer_budget import (BOARD, GRID_NODES, GRID_ROUNDS, PHYS, evaluate, grid_points,
                                         measure_point, required_cycles, required_slot_cycles, required_us,
                                         work_bounds)

ROOT = Path(__file__).resolve().parents[1]


# off the grid (between its G and P values), measured with other seeds: the fit must hold there too
CHECK_POINTS = ((3, 50), (10, 230), (20, 120), (40, 200), (56, 100), (80, 150), (112, 40), (144, 200),
                (200, 120), (240, 60), (250, 150))
CHECK_SEED = 101
# the node count: the same points with 8 and 32 nodes in place of 16 (32 = MX_MAX_NODES)
NODE_POINTS = ((8, 240), (64, 235), (256, 187))
NODE_COUNTS = (8, 32)


def point(g: int, p: int, seed: int, rounds: tuple = GRID_ROUNDS) -> dict:
    """Measure (G, P): the cycle-model part of a row, independent of the board's fitted model."""
    t = time.time()
    traces = measure_point(g, p, seed, rounds)
    seconds = time.time() - t
    wb = work_bounds(traces)
    length = packet_length(traces[0].nodes, g, p)
    row = {"G": g, "P": p, "nodes": traces[0].nodes, "length": length, "seconds": round(seconds, 2),
           "decoded_ok": all(t.verify_missing == 0 and t.verify_wrong == 0 for t in traces),
           "features": traces[0].features, "work": wb,
           "rounds": [{"nodes": t.nodes, "termination": term, "slots": len(t.slots)}
                      for t, (_, term) in zip(traces, rounds)]}
    for phy in PHYS:
        b = evaluate(traces, phy)
        us = 1e6 / b.clock_hz
        row[phy] = {"air_us": b.air_us, "plain_slot_us": b.slot_us, "gap_us": b.gap_us,
                    "work_us": [x * us for x in wb["gap"]], "decoupled_us_high": wb["decoupled"][2] * us,
                    "tail_us": wb["tail"] * us, "late_central": b.late_slots, "late_high": b.late_slots_high,
                    "needed_slot_us": list(b.needed_slot_us), "slot_work_us": wb["slot_work"] * us,
                    "ahead_us_high": wb["ahead"][2] * us}
    return row


TERMS = ("base", "per_row", "per_row_byte", "per_byte", "per_row_row")


MODELS = {"per_packet_cycles": required_cycles, "slot_cycles": required_slot_cycles}


def fitted_cycles(g: int, p: int, name: str = "per_packet_cycles") -> float:
    """board.toml's [mixer] model `name` at (G, P), safety applied."""
    from codegen.boards import load_board

    c = load_board(BOARD).facts["mixer"][name]
    return float(c.get("safety", 1.0)) * (c["base"] + c["per_row"] * g + c["per_row_byte"] * g * p +
                                          c["per_byte"] * p + c.get("per_row_row", 0.0) * g * g)


def fit_model(rows: list[dict], headroom: float = 1.05, name: str = "per_packet_cycles") -> dict:
    """board.toml [mixer] `name` (per_packet_cycles: the gap's work; slot_cycles: the whole slot's,
    the combination overlapped with the air time included) from the grid: base + per_row·G + per_row_byte·G·P +
    per_byte·P + per_row_row·G² (the G² term: a reception reduces its coding vector against up to G
    rows of ⌈G/32⌉ words, a packet XORs up to G rows that carry their coding vectors too), fitted to
    the required cycles with the smallest largest relative error (Lawson's iteratively reweighted
    least squares); ``safety`` = the largest required/fit ratio × ``headroom`` (off-grid (G, P),
    other seeds), rounded up to 0.01."""
    import numpy as np

    g = np.array([r["G"] for r in rows], float)
    p = np.array([r["P"] for r in rows], float)
    y = np.array([MODELS[name](r) for r in rows])
    x = np.stack([np.ones_like(g), g, g * p, p, g * g], 1)
    w = np.full(len(y), 1.0 / len(y))
    for _ in range(300):
        sw = np.sqrt(w) / y
        c, *_ = np.linalg.lstsq(x * sw[:, None], y * sw, rcond=None)
        e = np.abs(x @ c - y) / y
        w = w * e
        w /= w.sum()
    ratio = y / (x @ c)
    digits = (0, 2, 4, 3, 4)
    model = {k: round(float(v), d) for k, v, d in zip(TERMS, c, digits)}
    model["base"] = int(model["base"])
    fitted = x @ np.array([model[k] for k in TERMS])
    worst = float((y / fitted).max())
    model["safety"] = float(np.ceil(worst * headroom * 100) / 100)
    return {"model": model, "ratio": [float(ratio.min()), float(ratio.max())], "worst_ratio": worst}


def decide(row: dict) -> dict:
    """What `cisl compile` does with the point under the current board.toml: its slot, or a refusal."""
    cpu, whole = _per_packet_us(BOARD), _slot_work_us(BOARD)
    for phy in PHYS:
        policy = RoundPolicy(phy=phy, per_packet_us=cpu, slot_work_us=whole)
        x = row[phy]
        slot = policy.slot_us(row["length"], row["G"], row["P"])
        x.update({"planner_slot_us": slot, "lengthening_us": slot - x["plain_slot_us"],
                  "fit_us": policy.processing_us(row["G"], row["P"]),
                  "required_slot_us": required_us(row, phy), "holds": slot >= required_us(row, phy)})
    row["fit_ratio"] = max(f(row) / fitted_cycles(row["G"], row["P"], name) for name, f in MODELS.items())
    return row


def fmt(r: dict) -> str:
    w = r["work"]["gap"]
    a, b = r["2M"], r["1M"]

    def fits(x: dict) -> str:
        if x["late_high"] == 0:
            return "yes"
        return "**no**" if x["late_central"] else "high: no"

    def compiler(x: dict) -> str:
        hold = "" if x["holds"] else " **does not hold**"
        return (f"{x['planner_slot_us']}" if x["lengthening_us"] == 0 else
                f"{x['planner_slot_us']} (+{x['lengthening_us']})") + hold

    return (f"| {r['G']} | {r['P']} | {w[0]:.0f} / {w[1]:.0f} / {w[2]:.0f} | {a['work_us'][1]:.0f} / {a['work_us'][2]:.0f} | "
            f"{r['work']['ahead'][2]:.0f} | {r['work']['slot_work']:.0f} | "
            f"{a['plain_slot_us']} | {a['gap_us']} | {fits(a)} | {math.ceil(a['required_slot_us'])} | {compiler(a)} | "
            f"{b['plain_slot_us']} | {b['gap_us']} | {fits(b)} | {math.ceil(b['required_slot_us'])} | {compiler(b)} | "
            f"{r['fit_ratio']:.2f} |")


HEADER = ("| G | P | worst cycles per gap low / central / high | µs central / high | combination ahead, cycles high | "
          "slot work, cycles high | 2M plain slot | 2M gap | fits 2M | 2M needs | 2M compiler slot | "
          "1M plain slot | 1M gap | fits 1M | 1M needs | 1M compiler slot | required / model |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def _ranges(rows: list[dict], phy: str, key: str) -> str:
    """Per G, the payloads whose key ('late_central' or 'late_high') is non-zero, as 'G: P ≥ p'."""
    out = []
    for g in sorted({r["G"] for r in rows}):
        bad = [r["P"] for r in rows if r["G"] == g and r[phy][key]]
        good = [r["P"] for r in rows if r["G"] == g and not r[phy][key]]
        if not bad:
            continue
        if good and max(good) > min(bad):  # not a clean threshold: list them
            out.append(f"{g}: P ∈ {{{', '.join(map(str, bad))}}}")
        else:
            out.append(f"{g}: all P" if not good else f"{g}: P ≥ {min(bad)}")
    return "; ".join(out) if out else "none"


def write_md(path: Path, data: dict) -> None:
    rows, checks, nodes = data["rows"], data.get("check", []), data.get("nodes_check", [])
    board = _per_packet_cycles_text()
    lines = [
        "# Mixer per-packet budget on the nRF52840 for every (G, P) the planner may choose",
        "",
        f"Generated by `bench/mixer_budget_grid.py` ({len(rows)} grid points + {len(checks)} off-grid checks + "
        f"{len(nodes)} node-count checks, {data['seconds']:.0f} s of measuring; `--render` recomputes the compiler "
        "columns for the current board.toml). Cycle model of the project's `mixer.c` as `cisl build` builds it "
        "(-O2, the board's flash wait states and instruction cache), with the features deployed rounds run "
        f"(mixer.h `MX_FEAT_DEFAULT` = 0x{rows[0]['features']:02x}: coordinated TX + weak zeros, read from the "
        "image). Every grid point runs three rounds with node 1 on the emulated M4 and the others on the host: "
        f"{GRID_NODES} nodes under the `done` policy, {GRID_NODES} nodes under `fixed` (the node keeps sending at "
        "full rank up to 3G + 200 slots) and 2 nodes under `fixed` (the node sends every other slot: the packet "
        "build's tail). 16 nodes: the largest network of the Fig. 6 builds, the longest packets for G < 16 "
        "(the info vector carries node sets, ⌈max(G, n)/8⌉ B) and the most expensive receptions (15 senders' "
        "random combinations; with 2 nodes half the rows arrive systematically). With 8 or 32 nodes "
        "(MX_MAX_NODES) the worst work differs by at most "
        f"{max((abs(c['ratio'] - 1) for c in nodes), default=0) * 100:.1f} % and stays within the model "
        f"(at most {max((c['cycles'] / fitted_cycles(c['G'], c['P']) for c in nodes), default=0):.2f} of it; "
        "\"Node count\" below).",
        "",
        "## Headline",
        "",
    ]
    for phy in PHYS:
        lengthened = [r for r in rows if r[phy]["lengthening_us"] > 0]
        big = max(rows, key=lambda r: r[phy]["lengthening_us"])
        over = max(rows, key=lambda r: r[phy]["planner_slot_us"] / r[phy]["required_slot_us"]
                   if r[phy]["lengthening_us"] > 0 else 0)
        lines += [
            f"* **BLE {phy}, plain slot** (airtime.slot_us_for_length + 50 µs, before the compiler lengthens it): "
            f"late slots at the central estimate for G = {_ranges(rows, phy, 'late_central')}; at the high bound for "
            f"G = {_ranges(rows, phy, 'late_high')}. "
            f"{sum(1 for r in rows if r[phy]['late_high'])} of {len(rows)} points do not fit at the high bound.",
            f"* **BLE {phy}, the compiler's slot**: {len(lengthened)} points lengthened; the largest lengthening is "
            f"(G, P) = ({big['G']}, {big['P']}): {big[phy]['plain_slot_us']} → {big[phy]['planner_slot_us']} µs "
            f"(+{big[phy]['lengthening_us']} µs, ×{big[phy]['planner_slot_us'] / big[phy]['plain_slot_us']:.2f}); "
            f"the slot holds the required work at {sum(1 for r in rows if r[phy]['holds'])} of {len(rows)} grid "
            f"points and {sum(1 for r in checks if r[phy]['holds'])} of {len(checks)} off-grid checks, and exceeds "
            f"it by up to {over[phy]['planner_slot_us'] - over[phy]['required_slot_us']:.0f} µs "
            f"({over[phy]['planner_slot_us'] / over[phy]['required_slot_us'] * 100 - 100:.0f} %, at "
            f"({over['G']}, {over['P']})): one safety factor has to cover the model's shape error everywhere "
            f"(required / model {min(r['fit_ratio'] for r in rows):.2f}..{max(r['fit_ratio'] for r in rows):.2f}); "
            f"{sum(1 for r in rows if r[phy]['lengthening_us'] > 0 and not r[phy]['late_high'])} points are "
            "lengthened although their measured work would fit the plain slot.",
        ]
    ratios = [r["fit_ratio"] for r in rows]
    cratios = [r["fit_ratio"] for r in checks]
    lines += [
        f"* **Model** (board.toml `[mixer] {board}`): required / model "
        f"{min(ratios):.2f}..{max(ratios):.2f} on the grid, "
        f"{min(cratios, default=0):.2f}..{max(cratios, default=0):.2f} off it (≤ 1: the model bounds the work).",
        _refused_text(rows + checks),
        "",
        HEADER,
        *[fmt(r) for r in rows],
        "",
        "## Columns",
        "",
        "* *worst cycles per gap*: the CPU work between the end of one packet and the radio start of the next "
        "slot, as `mx_start` + boards/nrf52840dk/radio.c run it: the RX work after slot s (copy out of the PDU, "
        "`mx_receive` with the GF(2) elimination, `mx_slot_end`) plus `mx_slot` of slot s + 1 (decision, the "
        "sideload, serialising, copy into the PDU) — the row combination itself (`mx_prepare`) ran while slot s's "
        "packet was on the air; the worst gap of the three rounds, low / central / high bound of the cycle model; "
        "µs at 64 MHz.",
        "* *combination ahead*: the worst `mx_prepare` (high bound), which runs from the radio's arming for slot s "
        "(the HAL's listen / tx_done) alongside the air time; *slot work*: the larger of its worst and its 1e-6 "
        "quantile at full rank (mean + min(4.75, √G) sd: the number of rows combined is binomial) + the worst "
        "reception + the worst `mx_slot`: what one slot's CPU must hold.",
        "* *plain slot* / *gap*: the slot without processing lengthening, and its gap slot − air − 40 µs ramp-up.",
        "* *fits*: no slot of the measured rounds is late on the driver's timeline (TX compare at start − 40 µs, "
        "RX at start − half window − 40 µs; an RX slot without a packet ends at the address timeout); "
        "**no** = late at the central estimate, *high: no* = only at the high bound.",
        "* *needs*: the slot the point requires at the high bound — the largest of the shortest slot without a late "
        "slot in the measured rounds (the driver's timeline with the combination overlapped), air + ramp-up + "
        "(worst reception + worst `mx_slot` anywhere in the rounds), and ramp-up + the slot work.",
        "* *compiler slot*: `RoundPolicy.slot_us` with board.toml's per_packet_cycles (the gap) and slot_cycles (the "
        "whole slot), what `cisl compile` puts into the plan for a round of (G, P) (+ the lengthening over the plain "
        "slot).",
        "* *required / model*: the larger of required gap work / per_packet_cycles and required slot work / "
        "slot_cycles, each with its safety factor.",
        "",
        "## Off-grid checks (seed " + str(data.get("check_seed", "")) + ")",
        "",
        HEADER,
        *[fmt(r) for r in checks],
        "",
        "## Node count",
        "",
        "Worst reception + worst packet build (high bound, cycles) of the n-node `done` and `fixed` rounds "
        "(the same seeds), against 16 nodes and against board.toml's model. The differences are which rounds "
        "draw the largest binomial combination for the packet build (the grid's tail term covers that), "
        "not the node count: the protocol's per-node work (full-rank maps, owner bookkeeping) is a few cycles.",
        "",
        "| G | P | n | cycles | vs 16 nodes | vs model |",
        "|---|---|---|---|---|---|",
        *[f"| {c['G']} | {c['P']} | {c['n']} | {c['cycles']:.0f} | {c['ratio']:.3f} | "
          f"{c['cycles'] / fitted_cycles(c['G'], c['P']):.2f} |" for c in nodes],
        "",
        "## The combination ahead",
        "",
        "`mx_start` calls `mx_prepare` once the HAL has armed the radio for slot s (`listen`, or `transmit` with "
        "`tx_done`): the row combination of slot s + 1's packet is computed while slot s's packet is on the air, "
        "and the gap after it holds only the reception and `mx_slot`'s last touches (docs/design/mixer.md §10). "
        + _ahead_summary(rows),
        "",
    ]
    write_text_atomic(path, "\n".join(lines))


def _refused_text(rows: list[dict]) -> str:
    short = [f"({r['G']}, {r['P']}) on {phy}" for r in rows for phy in PHYS if not r[phy]["holds"]]
    if short:
        return ("* **Not held**: the compiler's slot is shorter than the required one at " + ", ".join(short) +
                " — board.toml's model must be refitted (`--fit`).")
    return ("* **Refused**: no (G, P). Every point fits once its slot is lengthened, the compiler's slot holds "
            "every measured point, and nothing in the radio driver or the protocol limits the slot length "
            "(docs/design/mixer.md §10); the planner already avoids lengthened slots wherever smaller generations "
            "deliver the exchange sooner. What the compiler refuses is a board with a radio and no measured "
            "per-packet model: it could not size the slots.")


def _ahead_summary(rows: list[dict]) -> str:
    out = []
    for phy in PHYS:
        needs = sum(1 for r in rows if r[phy]["required_slot_us"] <= r[phy]["plain_slot_us"])
        plain = sum(1 for r in rows if r[phy]["lengthening_us"] == 0)
        big = max(rows, key=lambda r: r[phy]["lengthening_us"])
        out.append(f"On {phy}, {needs} of {len(rows)} points need no more than the plain slot at the high bound and the "
                   f"compiler leaves {plain} unlengthened; the largest lengthening is +{big[phy]['lengthening_us']} µs, "
                   f"at ({big['G']}, {big['P']})")
    return ". ".join(out) + "."


def _per_packet_cycles_text() -> str:
    from codegen.boards import load_board

    mixer = load_board(BOARD).facts["mixer"]
    return "; ".join(f"{name} = {{ " + ", ".join(f"{k} = {v}" for k, v in mixer[name].items()) + " }"
                     for name in MODELS if name in mixer)


def measure_all(seed: int, points: list[tuple[int, int]] | None) -> dict:
    t = time.time()
    rows = []
    for g, p in points or grid_points():
        rows.append(point(g, p, seed))
        r = rows[-1]
        print(f"G={g} P={p}: {r['work']['gap'][2]:.0f} cycles high, 2M needs {r['2M']['needed_slot_us'][2]} µs, "
              f"{r['seconds']} s", flush=True)
    checks = [] if points else [point(g, p, CHECK_SEED) for g, p in CHECK_POINTS]
    nodes = []
    for g, p in ([] if points else NODE_POINTS):
        by_n = {}
        for n in (GRID_NODES, *NODE_COUNTS):
            tr = measure_point(g, p, seed, ((n, mixer_network.TERM_DONE), (n, mixer_network.TERM_DEADLINE)))
            by_n[n] = work_bounds(tr)["decoupled"][2]
        nodes += [{"G": g, "P": p, "n": n, "cycles": c, "ratio": c / by_n[GRID_NODES]} for n, c in by_n.items()]
    return {"seed": seed, "check_seed": CHECK_SEED, "nodes": GRID_NODES, "rounds": [list(x) for x in GRID_ROUNDS],
            "seconds": round(time.time() - t, 1), "rows": rows, "check": checks, "nodes_check": nodes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "mixer_budget_grid")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--points", help="comma-separated G:P pairs instead of the whole grid (for a quick look)")
    ap.add_argument("--fit", action="store_true",
                    help="no measuring: print board.toml's [mixer] per_packet_cycles fitted to <out>.json")
    ap.add_argument("--render", action="store_true",
                    help="no measuring: recompute the compiler's columns of <out>.json for the current board.toml")
    a = ap.parse_args()
    js = a.out.with_suffix(".json")
    if a.fit:
        rows = json.loads(js.read_text())["rows"]
        for name in MODELS:
            f = fit_model(rows, name=name)
            m = f["model"]
            print(f"{name}: required/fit {f['ratio'][0]:.3f}..{f['ratio'][1]:.3f} (rounded: {f['worst_ratio']:.3f})")
            print(f"{name} = {{ " + ", ".join(f"{k} = {m[k]}" for k in (*TERMS, "safety")) + " }")
        return
    if a.render:
        data = json.loads(js.read_text())
    else:
        pts = [tuple(int(x) for x in s.split(":")) for s in a.points.split(",")] if a.points else None
        data = measure_all(a.seed, pts)
    data["rows"] = [decide(r) for r in data["rows"]]
    data["check"] = [decide(r) for r in data["check"]]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(js, json.dumps(data, indent=1) + "\n")
    write_md(a.out.with_suffix(".md"), data)


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
