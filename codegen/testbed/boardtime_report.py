"""The report's board-time view: per block, the bulk-synchronous latency a testbed logged, next to
the cycle model's prediction (`cisl estimate -o EST.json`), and the fit of the memory wait states.

Per block (embed, attn0, mlp0, ..., head) and run: the slowest node's compute (mean over the
inferences of its `block` lines' ``us``), the communication (the largest ``comm_us``: all nodes
leave a round together, the slowest receiver's own work included), and their sum — the same
quantities `cisl estimate` predicts, so a virtual testbed with board time (boot lines
``clock=model``) reproduces them exactly and a real one (``clock=dwt``) is compared with them.

Calibration (``--calibrate``): a board's measured block cycles are modelled as
``core + w · events`` per node and block, where ``core`` (cycles at zero wait states) and
``events`` (flash accesses that pay the wait states at the central value) come from the estimate;
the least-squares ``w`` is the part's flash wait states, the number board.toml carries as a range.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from ..errors import UserError

BLOCK_LATENCY_COLS = ["run", "nodes", "clock", "block", "inferences", "slowest_compute_us", "comm_us", "latency_us",
                      "comm_share", "predicted_compute_us", "predicted_comm_us", "predicted_latency_us",
                      "latency_error_pct"]


def clock_of(run) -> str:
    """What the run's times count: model, dwt, host, icount, or unknown (old firmware)."""
    kinds = {str(r.get("clock", "unknown")) for r in run.of("boot")}
    if not kinds:
        return "unknown"
    return kinds.pop() if len(kinds) == 1 else "mixed(" + ",".join(sorted(kinds)) + ")"


# what the times of each clock are, and how to get board time instead
_CLOCKS = {
    "host": ("host time", "build the sim plan with the ARM toolchain installed (without --no-board-time) for "
                          "nRF52840 time"),
    "icount": ("QEMU instruction counts", "build the qemu-m4 plan without --no-board-time for nRF52840 time"),
    "model": ("the cycle model's nRF52840 time (the virtual testbed's board time)", ""),
    "unknown": ("times of no named clock (no boot line says what they count: logs recorded without the nodes' "
                "reset, or firmware older than the boot line's clock)", "record the run again with the nodes' reset"),
}


def clock_words(clock: str) -> tuple[str, str]:
    """(what a run's times count, in words; what to do for board time)."""
    if clock in _CLOCKS:
        return _CLOCKS[clock]
    return (f"different clocks on different nodes ({clock})", "flash one build on every node and record again")


def board_time(clock: str) -> bool:
    """Times the cycle model's prediction can be compared with: a board's DWT, the virtual testbed's
    board time, or logs that do not say (no boot line: a board recorded without reset)."""
    return clock in ("model", "dwt", "unknown")


def calibration_problem(run) -> str | None:
    """Why a run's block cycles cannot calibrate the cycle model (None: boards' DWT cycles, they can).
    Only a board's cycle counter measures what the model predicts; QEMU's instruction counts, host
    time and the virtual testbed's board time (the model's own cycles) do not."""
    clock = clock_of(run)
    if clock == "dwt":
        return None
    what = clock_words(clock)[0]
    return (f"{run.label}'s nodes counted {what} (clock={clock}), not a board's cycle counter; the fit needs the "
            f"block cycles of boards' DWT (clock=dwt): record the run on nRF52840 boards with `cisl logs`, or "
            f"drop --calibrate")


def _label(r: dict) -> str:
    layer = int(r["layer"])
    return str(r["block"]) if layer < 0 else f"{r['block']}{layer}"


def node_blocks(run) -> dict[tuple[int, str], dict[str, float]]:
    """(node, block label) -> mean us, comm_us, cycles over the inferences the node finished."""
    acc: dict[tuple[int, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    order: list[str] = []
    for r in run.of("block"):
        key = (int(r["node"]), _label(r))
        if key[1] not in order:
            order.append(key[1])
        acc[key]["us"].append(float(r["us"]))
        acc[key]["comm_us"].append(float(r["comm_us"]))
        if "cycles" in r:
            acc[key]["cycles"].append(float(r["cycles"]))
    out = {}
    for key, d in acc.items():
        out[key] = {k: sum(v) / len(v) for k, v in d.items() if v}
        out[key]["inferences"] = len(d["us"])
    out["__order__"] = order  # type: ignore[assignment]
    return out


def load_estimate(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: not found; write it with `cisl estimate BUILD -o {path}`") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path}: not a JSON file of `cisl estimate -o`") from None
    if not isinstance(doc, dict) or "blocks" not in doc or "nodes" not in doc:
        raise UserError(f"{path}: not a `cisl estimate -o` file (no blocks/nodes); write it with `cisl estimate`")
    problem = _estimate_problem(doc)
    if problem:
        raise UserError(f"{path}: {problem}, not what `cisl estimate -o` writes; write it again with `cisl estimate`")
    if "plan" not in doc:  # written before estimates named their plan: it cannot be checked against the logs
        raise UserError(f"{path}: an estimate that names no plan (written by an older cisl), so it cannot be "
                        f"checked against the plan the logs ran; write it again with `cisl estimate BUILD -o {path}` "
                        f"from the build the logs ran")
    return doc


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _triple(v) -> bool:
    return isinstance(v, dict) and _num(v.get("central"))


def _estimate_problem(doc: dict) -> str | None:
    """What of an estimate file `cisl report` reads is missing or of another type (None: all usable)."""
    if "devices" in doc and not (isinstance(doc["devices"], int) and not isinstance(doc["devices"], bool)):
        return f"devices = {doc['devices']!r}"
    if "plan" in doc and not isinstance(doc["plan"], str):
        return f"plan = {doc['plan']!r}"
    if doc.get("phy", "2M") not in ("1M", "2M"):
        return f"phy = {doc['phy']!r}"
    if not isinstance(doc["blocks"], list) or not isinstance(doc["nodes"], list):
        return "blocks or nodes not a list"
    for b in doc["blocks"]:
        if not (isinstance(b, dict) and isinstance(b.get("block"), str) and _triple(b.get("slowest_compute_ms"))
                and _triple(b.get("comm_ms"))):
            return f"block {b!r:.60}"
    for n in doc["nodes"]:
        if not (isinstance(n, dict) and isinstance(n.get("node"), int) and isinstance(n.get("blocks"), list)):
            return f"node {n!r:.60}"
        for b in n["blocks"]:
            if not (isinstance(b, dict) and isinstance(b.get("block"), str) and _num(b.get("core_cycles"))
                    and _num(b.get("mem_events"))):
                return f"node {n['node']}'s block {b!r:.60}"
        e = n.get("energy")
        if e is not None and not (isinstance(e, dict) and _triple(e.get("radio_uj")) and _triple(e.get("total_uj"))):
            return f"node {n['node']}'s energy"
        if "model_board" in n and not isinstance(n["model_board"], str):
            return f"node {n['node']}'s model_board"
    return None


def block_latency(run, estimate: dict | None) -> list[dict]:
    nb = node_blocks(run)
    order = nb.pop("__order__")  # type: ignore[arg-type]
    clock = clock_of(run)
    # host time or instruction counts are no board time: next to the estimate they would read as errors
    pred = {b["block"]: b for b in estimate["blocks"]} if estimate and board_time(clock) else {}
    rows = []
    for label in order:
        per = [v for (n, lab), v in nb.items() if lab == label]
        comp = max(v["us"] for v in per)
        comm = max(v["comm_us"] for v in per)
        row = {"run": run.label, "nodes": run.nodes, "clock": clock, "block": label,
               "inferences": min(int(v["inferences"]) for v in per), "slowest_compute_us": round(comp, 1),
               "comm_us": round(comm, 1), "latency_us": round(comp + comm, 1),
               "comm_share": round(comm / (comp + comm), 4) if comp + comm > 0 else "",
               "predicted_compute_us": "", "predicted_comm_us": "", "predicted_latency_us": "",
               "latency_error_pct": ""}
        p = pred.get(label)
        if p is not None:
            pc = p["slowest_compute_ms"]["central"] * 1e3
            pm = p["comm_ms"]["central"] * 1e3
            row.update(predicted_compute_us=round(pc, 1), predicted_comm_us=round(pm, 1),
                       predicted_latency_us=round(pc + pm, 1),
                       latency_error_pct=round(100 * (comp + comm - pc - pm) / (pc + pm), 2) if pc + pm else "")
        rows.append(row)
    return rows


def plans_of(run) -> set[str]:
    """The plan hashes the run's boot lines name (empty for logs without boot lines: `cisl logs --no-reset`)."""
    return {str(b["plan"]) for b in run.of("boot") if b.get("plan")}


def match_estimate(run, estimates: list[dict]) -> dict | None:
    """The estimate for a run: one of the plan its boot lines name (of an elastic image, estimates of
    any of its modes name the image's plan); logs without boot lines by node count."""
    ran = plans_of(run)
    same = [e for e in estimates if (e["plan"] in ran if ran else int(e.get("devices", -1)) == run.nodes)]
    mode = getattr(run, "mode", None)
    if mode is not None:  # a run's inferences of one mode (report.split_by_mode): an estimate of that mode
        same = [e for e in same if (e.get("mode") or 0) == mode]
    return same[0] if same else None


def check_estimates_ran(runs, estimates: list[tuple[Path, dict]], build_of=lambda run: None) -> None:
    """Every --estimate must be of a plan one of the runs ran: an estimate of another model or split
    with the same node count would be compared with these logs as if it predicted them.
    ``build_of(run)``: the build the run's logs came from, if known (named in the advice)."""
    ran = set().union(*(plans_of(r) for r in runs))
    blind = {r.nodes for r in runs if not plans_of(r)}  # runs matched by node count only
    for path, e in estimates:
        if e["plan"] in ran or not ran or int(e.get("devices", -1)) in blind:
            continue
        of = f" ({e['build']})" if isinstance(e.get("build"), str) else ""
        # the run it was meant for: the one of its node count, else the first
        run = next((r for r in runs if r.nodes == e.get("devices")), runs[0])
        raise UserError(f"--estimate {path}: an estimate of plan {e['plan']}{of}, but the logs ran plan "
                        f"{', '.join(sorted(ran))}; estimate the build the logs ran: "
                        f"`cisl estimate {build_of(run) or 'BUILD'} -o {path}`")


# the mean error (%) of the fitted model above which a fit, even in range, is not advised for board.toml:
# the flash wait states then do not explain the measured cycles
FIT_ERROR_PCT = 10.0


def calibrate(run, estimate: dict) -> dict:
    """Fit the flash wait states from the run's measured block cycles (least squares, w ≥ 0)."""
    nb = node_blocks(run)
    nb.pop("__order__")
    num = den = 0.0
    points = []
    for node in estimate["nodes"]:
        for b in node["blocks"]:
            m = nb.get((int(node["node"]), b["block"]))
            if not m or "cycles" not in m:
                continue
            core, ev = float(b["core_cycles"]), float(b["mem_events"])
            points.append((m["cycles"], core, ev))
            num += ev * (m["cycles"] - core)
            den += ev * ev
    if not points:
        raise UserError(f"{run.path}: no block line carries `cycles`; calibration needs a board with a cycle "
                        f"counter (nrf52840dk: DWT)")
    if den == 0:
        raise UserError("the estimate's blocks make no flash access that pays wait states; nothing to calibrate")
    w = max(0.0, num / den)
    rel = [abs(mc - (core + w * ev)) / mc for mc, core, ev in points if mc > 0]
    rng = estimate.get("flash_wait")
    # a fit outside the board's documented range is no setting: the model does not explain the cycles
    known = isinstance(rng, list) and len(rng) == 3 and all(_num(x) for x in rng)
    in_range = ("yes" if min(rng) <= round(w, 3) <= max(rng) else "no") if known else ""
    return {"flash_wait": round(w, 3), "points": len(points), "max_error_pct": round(100 * max(rel), 2),
            "mean_error_pct": round(100 * sum(rel) / len(rel), 2), "model_range": rng, "in_range": in_range}


ENERGY_COLS = ["run", "nodes", "clock", "node", "inferences", "period_us", "compute_us", "comm_us", "tx_on_us",
               "rx_on_us", "cpu_uj", "radio_uj", "idle_uj", "total_uj", "radio_source", "predicted_total_uj"]


def energy(run, estimate: dict | None, plan=None) -> tuple[list[dict], str | None]:
    """Energy per inference per node from the logged board time (central currents, board.toml
    [power] of the part the nodes are or stand for): the CPU runs through the whole inference, compute,
    rounds (the board code polls) and the work outside the blocks. The radio's on-time
    comes from the `sg` lines' ``tx_on_us``/``rx_on_us`` where the board counts it (radio_source
    "log": the virtual testbed's radio medium); otherwise, with --estimate, from the cycle model's
    prediction for the same rounds ("estimate"); otherwise the radio is left out ("none").

    Each node is priced as `cisl estimate` prices it (:func:`codegen.timing.energy.plan_pricing`):
    the board it is or stands in for and the BLE PHY of ``plan``, the plan the logs ran (from their
    build); else the estimate's boards and PHY; else the board its boot line names (a virtual board's
    default stand-in) at BLE 2M, and the second value is a note saying so (None otherwise)."""
    from ..boards import available_boards, load_board
    from ..timing.energy import load_power, node_energy, plan_pricing

    clock = clock_of(run)
    if clock not in ("model", "dwt"):
        return [], None  # host time or instruction counts are no board time to price
    booted = {int(r["node"]): str(r.get("board")) for r in run.of("boot") if "node" in r}
    note = None
    if plan is not None:
        pricing = plan_pricing(plan)
        stands_in, phy = pricing.boards, pricing.phy
    elif estimate is not None:
        stands_in = {int(n["node"]): n["model_board"] for n in estimate["nodes"] if "model_board" in n}
        phy = str(estimate.get("phy", "2M"))
    else:
        stands_in, phy = {}, "2M"
    guessed = set()

    def power_of(k: int):
        if k in stands_in:
            return load_power(stands_in[k])
        name = booted.get(k, "nrf52840dk")
        board = load_board(name) if name in available_boards() else load_board("nrf52840dk")
        if board.models or name != board.name:
            guessed.add(board.models or board.name)
        return load_power(board.models or board.name)

    pred = {int(n["node"]): n.get("energy") for n in estimate["nodes"]} if estimate else {}
    rows = []
    for k in run.node_ids:
        infer = [float(r["us"]) for r in run.of("infer", k)]
        if not infer:
            continue
        n = len(infer)
        period = sum(infer) / n
        compute = sum(float(r["us"]) for r in run.of("block", k)) / n
        comm = sum(float(r["comm_us"]) for r in run.of("block", k)) / n
        sgs = run.of("sg", k)
        p = pred.get(k)
        if sgs and all("tx_on_us" in r and "rx_on_us" in r for r in sgs):
            source = "log"
            tx_on = sum(float(r["tx_on_us"]) for r in sgs) / n
            rx_on = sum(float(r["rx_on_us"]) for r in sgs) / n
        else:
            source = "estimate" if p else "none"
            tx_on = rx_on = 0.0
        # the CPU also runs the work outside the blocks (the rest of the inference, `other_us` of the latency
        # table), as `cisl estimate` prices it; its µs as "cycles" of a 1 MHz clock: node_energy wants cycles
        cpu_us = max(compute, period - comm)
        e = node_energy(power_of(k), cpu_us, 1e6, tx_on, rx_on, period, comm_us=comm, phy=phy)
        radio = e.radio_uj.central if source == "log" else (p["radio_uj"]["central"] if p else 0.0)
        cpu = e.cpu_uj.central + e.comm_cpu_uj.central
        idle = e.idle_uj.central
        rows.append({"run": run.label, "nodes": run.nodes, "clock": clock, "node": k, "inferences": n,
                     "period_us": round(period, 1), "compute_us": round(compute, 1), "comm_us": round(comm, 1),
                     "tx_on_us": round(tx_on, 1) if source == "log" else "",
                     "rx_on_us": round(rx_on, 1) if source == "log" else "",
                     "cpu_uj": round(cpu, 2), "radio_uj": round(radio, 2), "idle_uj": round(idle, 3),
                     "total_uj": round(cpu + radio + idle, 2), "radio_source": source,
                     "predicted_total_uj": round(p["total_uj"]["central"], 2) if p else ""})
    if rows and plan is None and estimate is None:
        unknown = ("the boards the virtual nodes stand in for and the plan's PHY are" if guessed
                   else "the plan's PHY is")
        boards = f"the virtual nodes as {', '.join(sorted(guessed))} (their default) and " if guessed else ""
        note = (f"energy priced with {boards}BLE 2M radio currents: the build these logs ran was not found, so "
                f"{unknown} unknown; give --build BUILD or --estimate EST.json")
    return rows, note
