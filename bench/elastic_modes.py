"""Benchmark (issue 18): elastic modes on ETTh2, D = 8 — every mode against a bag of models.

Units of work run on `codegen.sweep` (records in docs/results/elastic_modes/records/, skipped when
they exist, as bench/split_training.py's):

* ``elastic-D8-s{seed}``: `cisl train`'s path (run_train) with [elastic]: the split model of
  bench/split_training.py's reduced protocol, trained, compressed into 4 nested modes and grown back;
  every mode's validation and test MSE (whole splits) and MACs; the model as trained before the
  modes is the bag's largest member.
* ``twin-D8-s{seed}-m{m}``: the bag of models — a model of exactly mode m's size (the same unit
  counts per head and device), trained from scratch for as many epochs as the elastic model's
  first phase, independently of it.
* ``deploy-D8-s{seed}``: every mode compiled on its own for nRF52840 DK boards (`cisl compile
  --mode`) and linked: flash and RAM of the largest node; latency and energy per inference from
  `cisl estimate` (a bag of models stores all of these images); then the image holding every mode:
  its flash, each mode on the timing model in it (`cisl modes`), the cycles of a switch, and a
  virtual-testbed run switching modes on requests from two nodes.

    python bench/elastic_modes.py run [--seeds 0] [--jobs 2 --threads 1]
    python bench/elastic_modes.py report        # docs/results/elastic_modes.md
    python bench/elastic_modes.py deploy [MODEL_DIR]   # the deployment half only (default: a briefly trained
                                                       # model): docs/results/elastic_deploy.md
    python bench/elastic_modes.py run --smoke /tmp/em   # plumbing check with a tiny model
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import split_training as st  # noqa: E402  (bench-local: the same protocol and data)

ROOT = HERE.parent
RESULTS = ROOT / "docs" / "results" / "elastic_modes"
RECORDS = RESULTS / "records"
WORK = ROOT / "bench" / "work" / "elastic_modes"
SELF = str(Path(__file__).resolve())
ELASTIC = {"modes": 4, "core_macs": 0.3, "shrink": ["attention", "hidden"], "compress_epochs": 1, "grow_epochs": 2,
           "clip": 1.0}
CODE = st.TRAINING_CODE + ("elastic.py", "train/elastic.py")
DEPLOY_CODE = ()  # the deployment depends on the whole compiler: every codegen file
THREADS = 2
SMOKE = {"model": {"layers": 1, "d_model": 64, "mlp_hidden": 64}, "max_train_windows": 512, "dense_epochs": 1,
         "eval_windows": 256}


def _overrides(protocol: dict, seed: int, threads: int) -> dict:
    p = protocol
    return {"model": dict(p["model"]), "split": {"devices": 8},
            "train": {"epochs": p["dense_epochs"], "batch_size": p["batch_size"], "lr": p["lr"], "seed": seed,
                      "max_train_windows": p["max_train_windows"], "threads": threads,
                      "calibration_samples": 64, "test_samples": 64},
            "elastic": dict(p["elastic"])}


def _elastic(protocol: dict, threads: int, seed: int):
    """The unit that trains the elastic model (its work folder holds the model the others use)."""
    from codegen.sweep import Unit

    return Unit(f"{SELF}:elastic_unit", {"protocol": protocol, "threads": threads, "seed": seed,
                                         "name": f"elastic-D8-s{seed}"}, data=(str(st.ETTH2),),
                label=f"elastic-D8-s{seed}", code=CODE)


def _model_dir(params: dict, ctx) -> Path:
    return ctx.work_of(_elastic(params["protocol"], params["threads"], params["seed"])) / "model"


def _units(seeds: list[int], protocol: dict, threads: int):
    from codegen.sweep import Unit

    out = []
    for seed in seeds:
        base = {"protocol": protocol, "threads": threads, "seed": seed}
        el = _elastic(protocol, threads, seed)
        out.append(el)
        out += [Unit(f"{SELF}:twin_unit", {**base, "name": f"twin-D8-s{seed}-m{m}", "mode": m}, data=(str(st.ETTH2),),
                     needs=(el,), label=f"twin-D8-s{seed}-m{m}", code=CODE)
                for m in range(1, protocol["elastic"]["modes"])]
        out.append(Unit(f"{SELF}:deploy_unit", {**base, "name": f"deploy-D8-s{seed}"}, needs=(el,),
                        label=f"deploy-D8-s{seed}", code=DEPLOY_CODE))
    return out


def _setup(params: dict) -> None:
    import torch

    torch.set_num_threads(params["threads"])
    st.PROTOCOL.clear()
    st.PROTOCOL.update({k: v for k, v in params["protocol"].items() if k != "elastic"})
    st.THREADS = params["threads"]


def elastic_unit(params: dict, ctx) -> dict:
    """The elastic model through `cisl train`'s own path; its folder stays in the unit's work dir."""
    from codegen.train.api import run_train

    _setup(params)
    t0 = time.time()
    summary = run_train(None, st.ETTH2, ctx.work / "model", _overrides(params["protocol"], params["seed"],
                                                                      params["threads"]), progress=True)
    el = json.loads((ctx.work / "model" / "train.json").read_text())["summary"]["elastic"]
    meta = _elastic_meta(ctx.work / "model" / "model.onnx")
    return {"unit": params["name"], "seed": params["seed"], "elastic": {**el, "macs": meta["macs"],
                                                                         "before": meta["before"]},
            "train_seconds": round(time.time() - t0, 1), "val_mse": summary["val_mse"], "test_mse": summary["test_mse"]}


def _elastic_meta(path: Path) -> dict:
    from codegen.onnx_model import load_model

    return load_model(path).elastic


def twin_unit(params: dict, ctx) -> dict:
    """A model of mode m's size trained from scratch (the bag of models' member)."""
    import torch

    from codegen.onnx_model import load_model
    from codegen.train.elastic import unit_tensors
    from codegen.train.loop import evaluate

    _setup(params)
    elastic = load_model(_model_dir(params, ctx) / "model.onnx")
    s = st.Session(8, params["seed"])
    model = s.new_model()
    model.set_units(unit_tensors(elastic.modes, params["mode"], model.split))  # the same counts per group
    train = s.fit(model, st.PROTOCOL["dense_epochs"], f"twin {params['mode']}")
    with torch.no_grad():
        val = evaluate(model, s.data.val, s.cfg.model.revin)
        test = evaluate(model, s.data.test, s.cfg.model.revin)
    return {"unit": params["name"], "seed": params["seed"], "mode": params["mode"], "train": train,
            "val_mse": val, "test_mse": test}


def deploy_unit(params: dict, ctx) -> dict:
    """Every mode compiled alone for nrf52840dk, linked and estimated; then the image of every mode."""
    model_dir = _model_dir(params, ctx)
    modes = _alone_modes(model_dir, ctx.work, params["protocol"]["elastic"]["modes"])
    return {"unit": params["name"], "seed": params["seed"], "board": "nrf52840dk", "modes": modes,
            "every_mode": _every_mode(model_dir, ctx.work, len(modes))}


def _alone_modes(model_dir: Path, work: Path, count: int) -> list[dict]:
    """Each mode compiled on its own (`cisl compile --mode M`) for nrf52840dk, linked, estimated."""
    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from codegen.timing.estimate import estimate

    work.mkdir(parents=True, exist_ok=True)
    modes = []
    for m in range(count):
        out = work / f"mode{m}"
        s = compile_model(model_dir / "model.onnx", out, CompileOptions(board="nrf52840dk", max_calibration=64, mode=m))
        build(out)
        sizes = [json.loads(p.read_text())["elf"] for p in sorted(out.glob("node_*/size.json"))]
        est = estimate(out)
        modes.append({"mode": m, "flash_bytes": [z["flash"] for z in sizes],
                      "flash_bytes_max": max(z["flash"] for z in sizes),
                      "flash_bytes_total": sum(z["flash"] for z in sizes),
                      "ram_bytes_max": max(z["ram"] for z in sizes),
                      "param_bytes_total": sum(n["param_bytes"] for n in s["nodes"]),
                      "bytes_sent_per_inference": sum(n["bytes_sent_per_inference"] for n in s["nodes"]),
                      "latency_ms": est.latency_ms[1], "latency_ms_range": [est.latency_ms[0], est.latency_ms[2]],
                      "energy_uj": est.network_energy_uj[1], "int8": s.get("accuracy")})
    return modes


def _every_mode(model_dir: Path, work: Path, modes: int) -> dict:
    """The image holding every mode: its flash per node, each mode on the timing model in it, the
    cycles of a switch, and a virtual-testbed run that switches mode every few inferences on
    requests from two different nodes (bit-exact per mode, every node's `mode` lines agreeing)."""

    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from codegen.modes import profile_modes, switch_cycles
    from codegen.vtestbed.run import run_sim

    out = work / "every"
    compile_model(model_dir / "model.onnx", out, CompileOptions(board="nrf52840dk", max_calibration=64))
    build(out)
    sizes = [json.loads(p.read_text())["elf"] for p in sorted(out.glob("node_*/size.json"))]
    table = profile_modes(out, jobs=2)
    sim_dir = work / "every-sim"
    compile_model(model_dir / "model.onnx", sim_dir, CompileOptions(board="sim", max_calibration=64))
    build(sim_dir)
    x = np.load(model_dir / "test_windows.npy").astype(np.float32)[:12]
    asks = [(2, 3, modes - 1), (5, 6, 1), (8, 3, 0), (10, 6, modes - 1)]  # nodes 3 and 6 ask in turn
    sim = run_sim(sim_dir, x, radio="hallway", mode_requests=asks, timeout=1800)
    lines: dict[int, list] = {}
    for r in sim.records:
        if r.event == "mode" and r.fields["state"] == "switch":
            lines.setdefault(r.node, []).append([int(r.fields["inf"]), int(r.fields["mode"])])
    return {"flash_bytes": [z["flash"] for z in sizes], "ram_bytes": [z["ram"] for z in sizes],
            "profile": [{"mode": p.mode, "latency_ms": p.latency_us / 1e3, "energy_uj": p.energy_nj / 1e3}
                        for p in table],
            "switch_cycles": switch_cycles(out),
            "sim": {"requests": asks, "inferences": len(x), "bit_exact": sim.bit_exact, "problems": sim.problems,
                    "switches": lines.get(0, []), "agree": len({json.dumps(v) for v in lines.values()}) == 1
                    and len(lines) == sim_nodes(sim)}}


def sim_nodes(sim) -> int:
    return len({r.node for r in sim.records if r.event == "boot"})


def report(records: Path, out: Path) -> None:
    """docs/results/elastic_modes.md from the records."""
    from codegen.fsutil import write_text_atomic

    recs = [json.loads(p.read_text()) for p in sorted(records.glob("*.json"))] if records.is_dir() else []
    by = {r["label"]: r["result"] for r in recs}
    code_of = {r["label"]: r["unit"]["code"] for r in recs}
    versions = sorted({r["unit"]["code"] for r in recs})
    protocols = sorted({json.dumps(r["unit"]["params"]["protocol"], sort_keys=True) for r in recs})
    lines = ["# Elastic modes on ETTh2, D = 8 (issue 18)", "",
             "Produced by `python bench/elastic_modes.py run` and `report` from the records in "
             "`elastic_modes/records/`: bench/split_training.py's reduced protocol with [elastic]; MSE on whole "
             "splits (StandardScaler scale). Protocol: " + " / ".join(f"`{p}`" for p in protocols) + ".", "",
             f"Code version(s): {', '.join(versions) or 'none'}.", ""]
    for seed in sorted({r["seed"] for r in by.values() if "seed" in r}):
        el = by.get(f"elastic-D8-s{seed}")
        if el is None:
            continue
        e = el["elastic"]
        lines += [f"## Seed {seed}", "",
                  "| mode | MACs (share of mode 0) | elastic test / val MSE | bag of models: trained alone, test / val | "
                  "elastic vs alone (test / val) |", "|---|---|---|---|---|"]
        for m in range(e["modes"]):
            alone = e["before"] if m == 0 else by.get(f"twin-D8-s{seed}-m{m}")
            mine = (e["test_mse"][m], e["val_mse"][m])
            if alone is None:
                cmp, pair = "—", "—"
            else:
                pair = f"{alone['test_mse']:.4f} / {alone['val_mse']:.4f}"
                cmp = f"{100 * (mine[0] / alone['test_mse'] - 1):+.1f} % / {100 * (mine[1] / alone['val_mse'] - 1):+.1f} %"
            lines.append(f"| {m} | {e['macs'][m]:,} ({100 * e['macs'][m] / e['macs'][0]:.1f} %) | "
                         f"{mine[0]:.4f} / {mine[1]:.4f} | {pair} | {cmp} |")
        lines += ["", "Mode 0's bag member is the model as trained before it was made elastic.", ""]
        dep = by.get(f"deploy-D8-s{seed}")
        if dep:
            lines += ["Each mode compiled alone for nRF52840 DK (`cisl compile --mode M`), linked; `cisl estimate` "
                      "(central values):", "",
                      "| mode | flash, largest node (B) | flash, all nodes (B) | RAM, largest node (B) | sent per inference (B) | "
                      "latency (ms) | energy (µJ) |", "|---|---|---|---|---|---|---|"]
            for d in dep["modes"]:
                lines.append(f"| {d['mode']} | {d['flash_bytes_max']:,} | {d['flash_bytes_total']:,} | "
                             f"{d['ram_bytes_max']:,} | {d['bytes_sent_per_inference']:,} | {d['latency_ms']:.1f} | "
                             f"{d['energy_uj']:,.0f} |")
            lines += [""] + _every_mode_md(dep["modes"], dep.get("every_mode"))
            # the deployment unit re-runs only with its training units (hours); the compiler moves faster:
            # say which code measured these tables, and where today's sizes for this architecture are
            lines += ["", f"Deployment measured by code {code_of[f'deploy-D8-s{seed}']}; the sizes and times of the "
                      "current compiler for a model of this architecture (any training) are in "
                      "[elastic_deploy.md](elastic_deploy.md) (`python bench/elastic_modes.py deploy`, no retraining).", ""]
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "elastic_modes.md", "\n".join(lines) + "\n")


QUICK = {"epochs": 1, "batch_size": 64, "lr": 1e-3, "seed": 0, "max_train_windows": 256, "threads": 1,
         "calibration_samples": 32, "test_samples": 32}
QUICK_ELASTIC = {"modes": 4, "core_macs": 0.3, "shrink": ["attention", "hidden"], "compress_epochs": 1, "grow_epochs": 1,
                 "clip": 1.0}


def quick_model(out: Path) -> Path:
    """The protocol's model at D = 8 with 4 modes, trained briefly (256 windows, one epoch per phase):
    enough for sizes, times and switching, not for accuracy."""
    from codegen.train.api import run_train

    if not (out / "model.onnx").is_file():
        run_train(None, st.ETTH2, out, {"model": dict(st.PROTOCOL["model"]), "split": {"devices": 8},
                                         "train": dict(QUICK), "elastic": dict(QUICK_ELASTIC)}, progress=True)
    return out


def _every_mode_md(alone: list[dict], ev: dict | None) -> list[str]:
    """The flash of each mode alone, of the bag and of the image holding every mode (on each one's
    largest node), each mode's time and energy in that image, the switch cycles and the sim run."""
    bag = sum(d["flash_bytes_max"] for d in alone)
    lines = ["| | flash, largest node (B) | share of mode 0 alone |", "|---|---|---|"]
    lines += [f"| mode {d['mode']} alone (`--mode {d['mode']}`) | {d['flash_bytes_max']:,} | "
              f"{100 * d['flash_bytes_max'] / alone[0]['flash_bytes_max']:.1f} % |" for d in alone]
    lines.append(f"| bag of models (every mode's image) | {bag:,} | {100 * bag / alone[0]['flash_bytes_max']:.1f} % |")
    if ev is None:
        return lines + [""]
    big = max(ev["flash_bytes"])
    lines += [f"| **one image, every mode** (`cisl compile` without --mode) | **{big:,}** | "
              f"**{100 * big / alone[0]['flash_bytes_max']:.1f} %** (target ≤ 105 %) |", "",
              "Each mode in that image on the timing model (`cisl modes`; the control round included), and what a "
              "switch adds on node 0 (cycle model: the `mode` line and a pointer; nothing is copied):", "",
              "| mode | latency (ms) | vs the mode's own image | energy, every node (mJ) | vs its own image | "
              "switch from mode 0 (cycles) |", "|---|---|---|---|---|---|"]
    for p, c, a in zip(ev["profile"], ev["switch_cycles"], alone):
        lines.append(f"| {p['mode']} | {p['latency_ms']:,.1f} | {100 * (p['latency_ms'] / a['latency_ms'] - 1):+.1f} % | "
                     f"{p['energy_uj'] / 1e3:,.1f} | {100 * (p['energy_uj'] / a['energy_uj'] - 1):+.1f} % | "
                     f"{c - ev['switch_cycles'][0]:+,.0f} |")
    sm = ev["sim"]
    return lines + ["", f"Virtual testbed (hallway, 8 nodes), {sm['inferences']} inferences, mode requests (inference, "
                    f"node, mode) {sm['requests']} from nodes 3 and 6: every node switched at (inference, mode) "
                    f"{sm['switches']}; nodes agree: {'yes' if sm['agree'] else 'NO'}; every inference bit-exact with "
                    f"its mode's int8 reference: {'yes' if sm['bit_exact'] else 'NO'}"
                    + (f"; problems: {sm['problems']}" if sm["problems"] else "") + ".", ""]


def deploy_only(model_dir: Path, work: Path, out: Path) -> dict:
    """`deploy MODEL_DIR`: the deployment half of the study for an elastic model trained elsewhere
    (sizes, times, switching and the selector do not depend on how well it was trained): every mode
    alone for nRF52840 DK, then the image holding every mode; docs/results/elastic_deploy.{json,md}."""
    from codegen.fsutil import write_text_atomic
    from codegen.onnx_model import load_model

    el = load_model(model_dir / "model.onnx").elastic
    alone = _alone_modes(model_dir, work, int(el["modes"]))
    ev = _every_mode(model_dir, work, int(el["modes"]))
    res = {"model": model_dir.name, "modes": int(el["modes"]), "macs_share": el["macs_share"], "alone": alone,
           "every_mode": ev}
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "elastic_deploy.json", json.dumps(res, indent=1) + "\n")
    write_deploy_md(res, out)
    return res


def write_deploy_md(res: dict, out: Path) -> None:
    """docs/results/elastic_deploy.md from elastic_deploy.json (`deploy --report` redoes only this)."""
    from codegen.fsutil import write_text_atomic

    alone, ev = res["alone"], res["every_mode"]
    lines = ["# Elastic modes deployed: one image holding every mode (issue 18)", "",
             f"`python bench/elastic_modes.py deploy` — an elastic model with {res['modes']} modes (MACs of each mode as "
             f"a share of mode 0: {', '.join(f'{100 * x:.1f} %' for x in res['macs_share'])}), D = 8, nRF52840 DK "
             "images (nnref). Sizes, times and switching do not depend on how well the model was trained; its "
             "accuracy per mode is in elastic_modes.md.", "", *_every_mode_md(alone, ev)]
    write_text_atomic(out / "elastic_deploy.md", "\n".join(lines) + "\n")


def main() -> None:
    global RECORDS, WORK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", type=int, nargs="+", default=[0])
    r.add_argument("--jobs", type=int, default=1)
    r.add_argument("--threads", type=int, default=THREADS)
    r.add_argument("--backend", choices=["joblib", "local", "slurm"], default="joblib")
    r.add_argument("--smoke", type=Path, default=None, help="a tiny model, results into this folder")
    dep = sub.add_parser("deploy", help="the deployment half for an elastic model trained elsewhere")
    dep.add_argument("model_dir", type=Path, nargs="?", default=None,
                     help="an elastic model's folder (default: train the quick model into --work)")
    dep.add_argument("--work", type=Path, default=WORK / "deploy")
    dep.add_argument("--report", action="store_true", help="only rewrite elastic_deploy.md from elastic_deploy.json")
    rep = sub.add_parser("report")
    rep.add_argument("--records", type=Path, default=None)
    rep.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.cmd == "deploy" and args.report:
        write_deploy_md(json.loads((RESULTS.parent / "elastic_deploy.json").read_text()), RESULTS.parent)
        return
    if args.cmd == "deploy":
        deploy_only(args.model_dir or quick_model(args.work / "quick-model"), args.work, RESULTS.parent)
        return
    if args.cmd == "report":
        report(args.records or RECORDS, args.out or RESULTS.parent)
        return
    protocol = {**{k: v for k, v in st.PROTOCOL.items()}, "elastic": dict(ELASTIC)}
    if args.smoke:
        RECORDS, WORK = args.smoke / "records", args.smoke / "work"
        protocol.update({k: v for k, v in SMOKE.items() if k != "model"}, model={**protocol["model"], **SMOKE["model"]},
                        elastic={**ELASTIC, "grow_epochs": 1, "core_macs": 0.5})
    from codegen.sweep import run_sweep

    run_sweep(_units(args.seeds, protocol, args.threads), RECORDS, WORK, args.backend, args.jobs, {})


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
