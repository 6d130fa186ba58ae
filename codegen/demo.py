"""`cisl demo`: the main job end to end on built-in synthetic data, on the virtual testbed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from .build import build
from .compile import CompileOptions, compile_model
from .fsutil import atomic_output_dir
from .radio.topology import default_topology
from .vtestbed.run import run_sim

MARKER = "report.json"


def run_demo(out_dir: Path, devices: int, epochs: int | None, echo: Callable[[str], None]) -> bool:
    """Train, compile, build and simulate into ``out_dir``; print and save a report. True if bit-exact.

    Training needs torch (the 'train' extra); without it this raises a one-line UserError first.
    """
    from .optional import require

    require("torch", feature="cisl demo", extra="train")
    from .train.api import run_train  # torch only here

    out_dir = Path(out_dir)
    t0 = time.monotonic()
    with atomic_output_dir(out_dir, "demo", _demo_entry, _legacy_demo) as tmp:
        overrides = {"split.devices": devices}
        if epochs is not None:
            overrides["train.epochs"] = epochs
        echo(f"[1/4] train a small model on synthetic data for {devices} devices")
        tr = run_train(None, None, tmp / "model", overrides, progress=True)
        echo(f"      {tr['params']} parameters, test MSE {tr['test_mse']:.4f} ({tr['seconds']:.1f} s)")
        echo(f"[2/4] compile: int8 quantisation, partition plan, C for {devices} nodes")
        comp = compile_model(tmp / "model" / "model.onnx", tmp / "build", CompileOptions(devices=devices),
                             lambda s: echo("      " + s))
        echo("[3/4] build every node (gcc -Wall -Wextra -Werror)")
        b = build(tmp / "build", say=lambda s: echo("      " + s))
        from .timing.boardtime import refresh

        echo("      " + refresh(tmp / "build", say=lambda s: None))
        topo = default_topology(devices)
        echo(f"[4/4] run on the virtual testbed: one process per node running Mixer, a radio medium ({topo})")
        r = run_sim(tmp / "build", logs_dir=tmp / "logs", radio=topo, build_named=out_dir / "build")
        measured_tx = {}
        for rec in r.records:
            if rec.event == "sg":
                measured_tx[rec.node] = measured_tx.get(rec.node, 0) + int(rec.fields["tx"])
        clock = next((rec.fields.get("clock", "host") for rec in r.records if rec.event == "boot"), "host")
        lat = _block_latency(r.records)
        report = {
            "devices": devices,
            "board_time": {"clock": clock, "latency_ms_per_inference": round(sum(lat.values()) / 1000, 2),
                           "blocks_ms": {k: round(v / 1000, 3) for k, v in lat.items()}},
            "train": {k: tr[k] for k in ("params", "train_mse", "val_mse", "test_mse", "seconds", "epochs")},
            "nodes": [{**n, "bytes_sent_measured_per_inference": measured_tx.get(n["node"], 0) // max(r.inferences, 1)}
                      for n in comp["nodes"]],
            "accuracy": comp.get("accuracy"),
            "kernels": b["kernels"],
            "sim": {"inferences": r.inferences, "bit_exact": r.bit_exact, "first_difference": r.first_difference,
                    "problems": r.problems, "wall_seconds": round(r.wall_seconds, 2), "topology": topo,
                    "delivered": r.delivered, "expected": r.expected,
                    "air_ms_per_inference": round(r.air_us("slots") / 1000, 1),
                    "fixed_deadline_ms_per_inference": round(r.air_us("deadline") / 1000, 1)},
            "total_seconds": round(time.monotonic() - t0, 1),
        }
        text = format_report(report, out_dir)
        (tmp / MARKER).write_text(json.dumps(report, indent=1) + "\n")
        (tmp / "report.txt").write_text(text + "\n")
    echo("")
    echo(text)
    return r.ok


def _demo_entry(name: str) -> bool:
    return name in ("model", "build", "logs", MARKER, "report.txt")


def _legacy_demo(target: Path) -> bool:
    """A demo folder of a cisl version before the owner file."""
    try:
        rep = json.loads((Path(target) / MARKER).read_text())
        return isinstance(rep, dict) and "sim" in rep and "devices" in rep
    except (OSError, ValueError):
        return False


def format_report(rep: dict, out_dir: Path) -> str:
    lines = [f"cisl demo: {rep['devices']} nodes on the virtual testbed ({rep['total_seconds']} s in all)", ""]
    lines.append(f"{'node':>4} {'parameters (B)':>15} {'activations (B)':>16} {'sent/inference (B)':>19}")
    for n in rep["nodes"]:
        lines.append(f"{n['node']:>4} {n['param_bytes']:>15} {n['arena_bytes']:>16} "
                     f"{n['bytes_sent_measured_per_inference']:>19}")
    lines.append("")
    acc = rep.get("accuracy")
    if acc:
        lines.append(f"forecast MSE on {acc['windows']} test windows: float {acc['mse_float']:.4f}, "
                     f"int8 {acc['mse_int8']:.4f} ({100 * acc['relative_mse_increase']:+.2f} %); "
                     f"max |int8 - float| {acc['max_abs_float_vs_int8']:.4f}")
    s = rep["sim"]
    lines.append(f"radio ({s['topology']}, Mixer over BLE 2M): {s['delivered']} of {s['expected']} messages delivered; "
                 f"air time {s['air_ms_per_inference']} ms per inference (fixed 3G+200 deadlines: "
                 f"{s['fixed_deadline_ms_per_inference']} ms)")
    bt = rep.get("board_time", {})
    if bt.get("clock") == "model":
        blocks = ", ".join(f"{k} {v:.2f}" for k, v in bt["blocks_ms"].items())
        lines.append(f"latency per inference on nRF52840s (cycle model of the nodes' ARM images + the radio): "
                     f"{bt['latency_ms_per_inference']:.1f} ms ({blocks} ms per block, slowest node + its rounds)")
    else:
        lines.append("latency: the nodes counted host time (no ARM toolchain for the nRF52840 cycle model)")
    lines.append(f"bit-exact (every node's messages and the forecast vs the numpy int8 reference, "
                 f"{s['inferences']} inferences, kernels: {rep['kernels']}): {'yes' if s['bit_exact'] else 'NO'}")
    if s["first_difference"]:
        lines.append(f"  first difference: {s['first_difference']}")
    for p in s["problems"]:
        lines.append(f"  problem: {p}")
    lines.append(f"artifacts: {out_dir}/model (model.onnx), {out_dir}/build (plan.json, node_NN/), {out_dir}/logs")
    return "\n".join(lines)


def _block_latency(records) -> dict[str, float]:
    """Per block (embed, attn0, ...): the slowest node's mean compute + the largest mean comm, µs."""
    acc: dict[str, dict[int, list[tuple[int, int]]]] = {}
    for rec in records:
        if rec.event != "block":
            continue
        f = rec.fields
        label = f["block"] if int(f["layer"]) < 0 else f"{f['block']}{f['layer']}"
        acc.setdefault(label, {}).setdefault(rec.node, []).append((int(f["us"]), int(f["comm_us"])))
    out = {}
    for label, per in acc.items():
        comp = max(sum(u for u, _ in v) / len(v) for v in per.values())
        comm = max(sum(c for _, c in v) / len(v) for v in per.values())
        out[label] = comp + comm
    return out
