"""Benchmark (issue 3): training for the split on ETTh2 — the paper's Fig. 7 and Fig. 8.

Units of work run on `codegen.sweep` (joblib here, or a SLURM job array through submitit): each
writes one content-addressed record docs/results/split_training/records/<id>.json (the id covers the
unit, the protocol, the torch threads, the code version and the ETTh2 file's content) and is skipped
when its record exists, so the study can be interrupted and continued, locally or on a cluster:

* ``fig7-D{D}-s{seed}-dense``: the unpruned (allgather) model.
* ``fig7-D{D}-s{seed}-{method}``: stepwise pruning from that dense model (its record's ``start`` holds
  the test and validation MSE of the model it pruned, which the report compares with), method ``somegather``
  (prune only what is sent to other devices) or ``normal`` (prune whole columns: the allgather model
  narrowed to the same communication). One trajectory per method: every stage prunes ``step`` of each
  device's columns and retrains one epoch; when the trajectory reaches a reported keep ratio, the
  model is fine-tuned and scored, and the trajectory continues from there.
* ``fig8-D{D}-s{seed}-q{q}``: a model trained with message dropout at loss rate q in all three modes
  (q = 0: the dense model of fig7), scored under sampled loss at every deployment rate.
* ``fig8-D{D}-s{seed}-qmax{q}``: the same, trained with a loss rate per window drawn from [0, q]
  (``[dropout] q_max``): one model for every deployed rate up to q.
  A trajectory saves its state after every stage in its work folder and resumes there when it was
  stopped (a SLURM time limit); ``CISL_STUDY_STOP_AFTER=K`` stops it after K stages and scores, as
  a time limit would (the tests use it). The dense and dropout trainings keep a checkpoint per
  epoch there, and the deployed model's `cisl train` its own: every unit resumes. ``status`` lists
  every unit as done, started (with how far it got) or todo.
* ``deploy-D8``: a somegather-pruned (keep 0.1), dropout-hardened model exported to ONNX, scored
  in int8 through the bit-exact reference, and run on the virtual testbed.

The protocol is the paper's model (6 layers, F = 128, H = 16, F_h = 128, ReLU, patch 16/8, look-back
336, horizon 96; Adam lr 1e-3, cosine) with a reduced budget for a 2-core CPU: batch 256, a fixed
random subset of the training windows and few epochs (see PROTOCOL). MSE is on the StandardScaler
scale over the whole ETTh2 test split (19 495 channel windows).

    python bench/split_training.py run [--only fig7-D8-s0-dense ...] [--seeds 0 1 2]
    python bench/split_training.py run --jobs 2 --threads 1      # two units at a time (2 cores)
    python bench/split_training.py run --devices 8 16 --all-rates   # + Fig. 7 at D = 16, Fig. 8 at every seed
    python bench/split_training.py run --backend slurm --jobs 16 --slurm-partition cpu   # on a cluster
    python bench/split_training.py report          # tables and plots into docs/results/
    python bench/split_training.py run --smoke /tmp/st --seeds 0 --only fig7-D8-s0-dense ...  # plumbing check
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
import zlib
from pathlib import Path

import numpy as np

from codegen.train.sweep import TRAINING_CODE  # one definition with `cisl sweep`'s (no torch imported)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "split_training"
RUNS = RESULTS / "runs"  # records of the study before issue 16 (one file per unit name), read by the report
RECORDS = RESULTS / "records"  # codegen.sweep records (<id>.json)
WORK = ROOT / "bench" / "work" / "split_training"
SELF = str(Path(__file__).resolve())
# what a training unit's result depends on (its code version; codegen.sweep Unit.code): one definition with
# `cisl sweep`'s (codegen.train.sweep.TRAINING_CODE); the deploy unit compiles and runs the testbed, so it
# depends on everything
ETTH2 = ROOT.parent / "shared" / "data" / "ett" / "ETTh2.csv"

PROTOCOL = {
    "model": {"lookback": 336, "patch_len": 16, "stride": 8, "padding": "end", "d_model": 128, "heads": 16,
              "layers": 6, "mlp_hidden": 128, "horizon": 96},
    "batch_size": 256, "lr": 1e-3, "max_train_windows": 16384, "dense_epochs": 8,
    "prune_step": 0.1, "epochs_per_stage": 1, "finetune_epochs": 2, "dropout_epochs": 8,
    "keeps": [0.75, 0.5, 0.25, 0.1], "loss_rates": [0.0, 0.025, 0.05, 0.1, 0.2],
}
# torch threads per run (--threads): a run setting, not part of the protocol. On this 2-core
# machine two 1-thread runs side by side did 1.15 s per batch each (1.74 batches/s together),
# one 2-thread run 0.62 s (1.6/s): about 9 % more work per hour, and two units at once.
THREADS = 2

# message dropout over a range of rates (a rate per window from [0, q_max]): beyond the paper's
# Fig. 8, which trains at one rate; these rows answer "one model for any loss up to q_max?"
LOSS_RANGES = [0.2]


def _config(devices: int, seed: int, epochs: int, q: float = 0.0):
    from codegen.train.config import load_config

    p = PROTOCOL
    return load_config(None, {
        "model": dict(p["model"]), "split": {"devices": devices},
        "data": {"source": "csv", "path": str(ETTH2)},
        "train": {"epochs": epochs, "batch_size": p["batch_size"], "lr": p["lr"], "seed": seed,
                  "max_train_windows": p["max_train_windows"], "threads": THREADS},
        "dropout": {"q": q},
    })


class _Evenly:
    """``count`` evenly spaced windows of a split (--smoke checks the plumbing, not the numbers)."""

    def __init__(self, windows, count: int):
        self.windows, self.pick = windows, windows.evenly_spaced(count)

    def __len__(self) -> int:
        return len(self.pick)

    def take(self, idx: np.ndarray):
        return self.windows.take(self.pick[idx])


class Session:
    """Data, the training subset and helpers shared by every unit of one (devices, seed)."""

    def __init__(self, devices: int, seed: int):
        from codegen.train.api import build_data

        self.devices, self.seed = devices, seed
        self.cfg = _config(devices, seed, PROTOCOL["dense_epochs"])
        self.data, _ = build_data(self.cfg)
        if PROTOCOL.get("eval_windows"):
            n = PROTOCOL["eval_windows"]
            self.data = dataclasses.replace(self.data, val=_Evenly(self.data.val, n), test=_Evenly(self.data.test, n))
        n = len(self.data.train)
        self.train_idx = np.sort(np.random.default_rng([seed, 1]).choice(n, PROTOCOL["max_train_windows"],
                                                                         replace=False))

    def new_model(self, q: float = 0.0, rescale: bool | None = None):
        """A fresh model trained at loss q; it rescales what arrived as the product's [dropout] rescale
        default decides unless ``rescale`` says otherwise, and, as the product
        does, trains a share [dropout] clean of its windows loss-free."""
        import torch

        from codegen.lossmodel import LossRates
        from codegen.partition import Split, full_masks
        from codegen.train.config import DropoutConfig
        from codegen.train.model import SplitPatchTST

        m = self.cfg.model
        split = Split.even(self.devices, m.heads, m.d_model, m.mlp_hidden)
        torch.manual_seed(self.seed)
        model = SplitPatchTST(cfg=m, split=split, masks=full_masks(split, m.layers),
                              rescale=DropoutConfig(q=q).rescaled() if rescale is None else rescale)
        model.set_message_dropout(LossRates.uniform(q), clean=DropoutConfig().clean)
        return model

    def fit(self, model, epochs: int, tag: str, checkpoint: Path | None = None) -> dict:
        """Train ``model`` for ``epochs``; with ``checkpoint`` the training state is saved there after every
        epoch, and a fit stopped part way (a time limit) resumes from it with the same result."""
        from codegen.train.loop import fit, load_checkpoint

        opts = dataclasses.replace(self.cfg.train, epochs=epochs, seed=self.seed * 1000 + zlib.crc32(tag.encode()) % 997)
        t0 = time.time()
        resume = load_checkpoint(checkpoint) if checkpoint is not None and checkpoint.is_file() else None
        if checkpoint is not None:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
        res = fit(model, self.data.train, self.train_idx, self.data.val, opts, self.cfg.model.revin, progress=True,
                  checkpoint=checkpoint, resume=resume)
        model.load_state_dict(res.best_state)
        if checkpoint is not None:
            checkpoint.unlink(missing_ok=True)
        return {"epochs": epochs, "best_epoch": res.best_epoch, "val_mse": res.best_val,
                "seconds": round(time.time() - t0, 1)}

    def test_mse(self, model, q: float = 0.0, loss_seed: int = 0, split: str = "test") -> float:
        from codegen.lossmodel import LossRates
        from codegen.train.dropout import evaluate_with_loss
        from codegen.train.loop import evaluate

        windows = getattr(self.data, split)
        if q == 0.0:
            return float(evaluate(model, windows, self.cfg.model.revin))
        return float(evaluate_with_loss(model, windows, self.cfg.model.revin, LossRates.uniform(q), loss_seed))


def cached_dense(devices: int, seed: int):
    """The dense model of (devices, seed) the study cached (bench/work/split_training/<id>/dense.pt),
    for the diagnostics; exits with one line if `run` has not trained it under this code version."""
    import torch

    from codegen.sweep import unit_id

    name = f"fig7-D{devices}-s{seed}-dense"
    state = WORK / unit_id(sweep_unit(name)) / "dense.pt"
    if not state.is_file():
        raise SystemExit(f"{state} missing: run `python bench/split_training.py run --seeds {seed} --only {name}` "
                         "first (with this code version)")
    s = Session(devices, seed)
    model = s.new_model()
    model.load_state_dict(torch.load(state))
    return s, model


def _dense(s: Session, ctx, dense_unit=None):
    """The unpruned model of (devices, seed), saved in the dense unit's work folder for the units that
    start from it. Retrained if that folder was cleaned; the retrained model must then score exactly what
    the dense unit's record says, or the unit fails: a retraining in another process has been seen to
    differ in the last digits (seed 2: 0.3014533 recorded, 0.3014354 retrained in two later runs alike),
    and 8 epochs can grow that to 0.7 %."""
    import torch

    from codegen.train.loop import save_checkpoint

    state = (ctx.work if dense_unit is None else ctx.work_of(dense_unit)) / "dense.pt"
    model = s.new_model()
    if state.is_file():
        model.load_state_dict(torch.load(state))
        return model, None
    rec = s.fit(model, PROTOCOL["dense_epochs"], "dense", checkpoint=state.parent / "dense-checkpoint.pt")
    if dense_unit is not None:  # retrained for a unit that starts from it: it must be the model its record scored
        want = ctx.record_of(dense_unit)["result"]["test_mse"]
        if s.test_mse(model) != want:
            raise RuntimeError(f"the dense model retrained into {state.parent} scores {s.test_mse(model)!r}, its "
                               f"record {want!r}: not the same model (threads or code changed?)")
    save_checkpoint(state, model.state_dict())
    return model, rec


def dense_unit(s: Session, ctx) -> dict:
    model, rec = _dense(s, ctx)
    if rec is None:  # the state was there already (a rerun after the record was removed): score it again
        rec = {"epochs": PROTOCOL["dense_epochs"], "note": "state reused", "val_mse": s.test_mse(model, split="val")}
    return {"devices": s.devices, "seed": s.seed, "train": rec, "test_mse": s.test_mse(model)}


def trajectory_actions(split, layers: int, start, method: str) -> list[tuple[str, float, object]]:
    """One stepwise pass through every keep in turn, as a list of actions: ("stage", keep, counts) prunes
    to those counts and retrains; ("score", keep, None) fine-tunes and scores at that keep. The first
    stage starts from ``start`` (the dense model's counts), each later one from the stage before."""
    from codegen.train.pruning import stage_counts

    actions: list[tuple[str, float, object]] = []
    for keep in sorted(PROTOCOL["keeps"], reverse=True):
        for counts in stage_counts(split, layers, keep, PROTOCOL["prune_step"], method, start=start):
            actions.append(("stage", keep, counts))
            start = counts
        actions.append(("score", keep, None))
    return actions


def fig7_method(s: Session, method: str, ctx, dense) -> dict:
    """A pruning trajectory. It takes hours, so its state is saved after every stage (the model, its
    masks, torch's RNG, the points so far) in the unit's work folder: a unit that was stopped (a
    SLURM time limit, a closed session) resumes after the last finished stage and ends with the record
    an uninterrupted run writes."""
    import torch

    from codegen.train.loop import save_checkpoint
    from codegen.train.model import state_to_numpy
    from codegen.train.pruning import column_counts, communication, drop_pruned_weights, prune_step

    name = f"fig7-D{s.devices}-s{s.seed}-{method}"
    model, _ = _dense(s, ctx, dense)
    # the model this trajectory prunes, scored: the report compares with it, not only with the dense
    # unit's record (a dense model retrained elsewhere need not be bit-identical to the recorded one)
    start = {"test_mse": s.test_mse(model), "val_mse": s.test_mse(model, split="val")}
    dense_comm = communication(model.split, model.masks, s.cfg.model.tokens, s.cfg.model.horizon)
    split = model.split
    layers = s.cfg.model.layers
    actions = trajectory_actions(split, layers, column_counts(model.masks), method)
    progress = ctx.work / f"{method}-trajectory.pt"
    points, done = [], 0
    if progress.is_file():
        state = torch.load(progress, weights_only=False)
        model.set_masks(state["masks"], prune_own=method == "normal")
        model.load_state_dict(state["model"])
        torch.set_rng_state(state["torch_rng"])
        points, done = state["points"], state["done"]
        print(f"   {name}: resuming after action {done} of {len(actions)}", flush=True)
    for k, (action, keep, counts) in enumerate(actions, start=1):
        stage = sum(1 for a in actions[:k] if a[0] == "stage")
        if k <= done:
            continue
        if action == "stage":
            weights = drop_pruned_weights(state_to_numpy(model), split, model.masks, method)
            masks = prune_step(method, weights, split, model.masks, counts)
            model.set_masks(masks, prune_own=method == "normal")
            if column_counts(model.masks) != counts:
                raise RuntimeError(f"{name}: stage {stage} reached other counts than planned")
            model.load_numpy(drop_pruned_weights(weights, split, masks, method))
            s.fit(model, PROTOCOL["epochs_per_stage"], f"{method} stage {stage}")
        else:
            ft = s.fit(model, PROTOCOL["finetune_epochs"], f"{method} finetune {keep}")
            comm = communication(split, model.masks, s.cfg.model.tokens, s.cfg.model.horizon)
            points.append({"keep": keep, "realised_keep": comm["ratio_to_allgather"], "stage": stage,
                           "finetune": ft, "test_mse": s.test_mse(model), "communication": comm})
            if keep == min(PROTOCOL["keeps"]):
                points[-1]["deployment"] = deployment(s, model, method, keep, ctx.work / f"deploy-{keep:g}")
            print(f"   {name} keep {keep} (realised {comm['ratio_to_allgather']:.4f}): test MSE "
                  f"{points[-1]['test_mse']:.4f}", flush=True)
        save_checkpoint(progress, {"done": k, "masks": model.masks, "model": model.state_dict(),
                                  "torch_rng": torch.get_rng_state(), "points": points})
        if k == int(os.environ.get("CISL_STUDY_STOP_AFTER", "0")) < len(actions):
            raise RuntimeError(f"stopped after action {k} of {len(actions)} (CISL_STUDY_STOP_AFTER, as a time limit would)")
    return {"devices": s.devices, "seed": s.seed, "method": method, "start": start,
            "dense_communication": dense_comm, "points": points}


def deployment(s: Session, model, method: str, keep: float, work: Path) -> dict:
    """Fig. 7 beyond MSE (issue 16): the pruned model exported, compiled for nRF52840 DK boards and
    linked; flash and RAM of the largest node from its ELF, latency and energy per inference from
    `cisl estimate` (central values of the cycle model and the radio simulation, policy done)."""
    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from codegen.onnx_model import build_onnx, save_onnx
    from codegen.timing.estimate import estimate
    from codegen.train.api import model_inputs
    from codegen.train.model import state_to_numpy
    from codegen.train.pruning import drop_pruned_weights

    split = model.split
    weights = drop_pruned_weights(state_to_numpy(model), split, model.masks, method)
    if work.exists():  # this study's own scratch, left by a run stopped while deploying
        shutil.rmtree(work)
    work.mkdir(parents=True)
    save_onnx(build_onnx(s.cfg.model, weights, split, model.masks, keep, {"source": "bench/split_training.py"},
                         rescale=model.rescale, prune_own=method == "normal"), work / "model.onnx")
    cal, _, _ = model_inputs(s.data.train, s.data.train.evenly_spaced(64), s.cfg.model.revin)
    np.save(work / "calibration.npy", cal)
    compile_model(work / "model.onnx", work / "build", CompileOptions(board="nrf52840dk", max_calibration=64))
    build(work / "build")
    sizes = [json.loads(p.read_text())["elf"] for p in sorted((work / "build").glob("node_*/size.json"))]
    est = estimate(work / "build")
    return {"board": "nrf52840dk", "flash_bytes_max": max(z["flash"] for z in sizes),
            "ram_bytes_max": max(z["ram"] for z in sizes), "latency_ms": est.latency_ms[1],
            "latency_ms_range": [est.latency_ms[0], est.latency_ms[2]], "comm_ms": est.comm_ms[1],
            "energy_uj": est.network_energy_uj[1]}


def fig8(s: Session, q: float, ctx, dense, q_max: float = 0.0) -> dict:
    """Train at loss rate q (0: the dense model), or at a rate per window from [0, q_max]; score at every rate."""
    from codegen.train.config import DropoutConfig
    from codegen.train.dropout import LossRange

    if q_max:
        model = s.new_model(rescale=DropoutConfig(q_max=q_max).rescaled())
        model.set_message_dropout(LossRange(q_max), clean=DropoutConfig().clean)
        train = s.fit(model, PROTOCOL["dropout_epochs"], f"dropout range {q_max}", checkpoint=ctx.work / "checkpoint.pt")
    elif q == 0.0:
        model, _ = _dense(s, ctx, dense)
        train = ctx.record_of(dense)["result"]["train"]
    else:
        model = s.new_model(q)
        train = s.fit(model, PROTOCOL["dropout_epochs"], f"dropout {q}", checkpoint=ctx.work / "checkpoint.pt")
    clean = model.loss_clean  # how it trained: the share of loss-free windows, and rescaled or not
    model.set_message_dropout(None)
    deploy = {f"{qd:g}": s.test_mse(model, qd, loss_seed=s.seed) for qd in PROTOCOL["loss_rates"]}
    # the validation split too: on ETTh2's test split a damped forecast scores better (see
    # split_training_shrinkage.py), which flatters every model that loses messages
    val = {f"{qd:g}": s.test_mse(model, qd, loss_seed=s.seed, split="val") for qd in PROTOCOL["loss_rates"]}
    return {"devices": s.devices, "seed": s.seed, "q_train": q, **({"q_max_train": q_max} if q_max else {}),
            "rescale": bool(model.rescale), "clean": clean, "train": train, "test_mse_at_q": deploy, "val_mse_at_q": val}


def deploy_unit(ctx) -> dict:
    """Prune (somegather, keep 0.1) + dropout (q = 0.1) through `cisl train`, then int8 and the testbed.
    The training keeps its checkpoints in the unit's work folder, so a stopped unit resumes there."""
    import tempfile

    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from codegen.evaluate import forecast_mse
    from codegen.onnx_model import load_model
    from codegen.plan.io import load_plan
    from codegen.vtestbed.run import run_sim
    from codegen.train.api import CHECKPOINT_NAME, build_data, run_train

    p = PROTOCOL
    overrides = {"model": dict(p["model"]), "split": {"devices": 8},
                 "train": {"epochs": p["dense_epochs"], "batch_size": p["batch_size"], "lr": p["lr"], "seed": 0,
                           "max_train_windows": p["max_train_windows"], "threads": THREADS},
                 "prune": {"method": "somegather", "keep": 0.1, "step": p["prune_step"],
                           "epochs_per_step": p["epochs_per_stage"], "finetune_epochs": p["finetune_epochs"]},
                 "dropout": {"q": 0.1}}
    train_work = ctx.work / "train"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        summary = run_train(None, ETTH2, tmp / "model", overrides, progress=True,
                            resume=(train_work / CHECKPOINT_NAME).is_file(), work_dir=train_work)
        compile_model(tmp / "model" / "model.onnx", tmp / "build", CompileOptions())
        cfg = _config(8, 0, p["dense_epochs"])
        data, _ = build_data(cfg)
        x, y = data.test.take(np.arange(len(data.test)))
        acc = forecast_mse(load_plan(tmp / "build"), load_model(tmp / "model" / "model.onnx").weights, x, y)
        build(tmp / "build")
        sim = run_sim(tmp / "build", np.load(tmp / "model" / "test_windows.npy")[:4])
        plan = load_plan(tmp / "build")
        sent = {}
        for r in sim.records:
            if r.event == "sg" and r.fields["point"] != "head":
                sent[r.node] = sent.get(r.node, 0) + int(r.fields["tx"]) // sim.inferences
        allgather = {k: sum(plan.cfg.tokens * (hi - lo) for sg in plan.sgs if sg.point != "head"
                            for lo, hi in [plan.meta["partition"]["hidden_cols" if sg.point == "z" else "model_cols"][k]])
                     for k in range(plan.devices)}
    summary = {k: v for k, v in summary.items() if k != "seconds"}  # wall time: the record's run.seconds
    return {"train": summary, "int8": {"mse_float": acc.mse_float, "mse_int8": acc.mse_int8,
                                       "relative_increase": acc.relative_increase},
            "sim": {"bit_exact": sim.bit_exact, "problems": sim.problems, "inferences": sim.inferences,
                    "bytes_sent_per_inference": {str(k): v for k, v in sent.items()},
                    "allgather_bytes_per_inference": {str(k): v for k, v in allgather.items()}}}


def units_in_order(seeds: list[int], devices: tuple[int, ...] = (8,), all_rates: bool = False) -> list[tuple[str, int]]:
    """Every unit of the study for these seeds, as (name, seed), in the order `run` takes them: what
    the issue's claims rest on first (the q = 10 % dropout models, the dense models and their Fig. 8
    row, the pruning trajectories, the deployed model), then the other loss rates — trained for the
    first seed only unless ``all_rates`` — and Fig. 7 for the other ``devices``."""
    first = seeds[0]
    out = [(f"fig8-D8-s{s}-q0.1", s) for s in seeds] if 8 in devices else []
    for d in devices:
        out += [(f"fig7-D{d}-s{s}-dense", s) for s in seeds]
        if d == 8:
            out += [(f"fig8-D8-s{s}-q0", s) for s in seeds]
        out += [(f"fig7-D{d}-s{s}-{m}", s) for s in seeds for m in ("somegather", "normal")]
        if d == 8:
            out.append(("deploy-D8", first))
            out += [(f"fig8-D8-s{s}-{r}", s) for s in (seeds if all_rates else [first])
                    for r in ("q0.05", "q0.2", "q0.025", *(f"qmax{q:g}" for q in LOSS_RANGES))]
    return out


def _dense_name(unit: str) -> str | None:
    """The unit whose model this one starts from: pruning and the q = 0 row start from the dense model."""
    if unit.startswith("fig7-") and not unit.endswith("-dense") or unit.startswith("fig8-") and unit.endswith("-q0"):
        d, s = unit.split("-")[1:3]
        return f"fig7-{d}-{s}-dense"
    return None


def sweep_unit(name: str):
    """The codegen.sweep unit of a study unit: the protocol and thread count are part of its id."""
    from codegen.sweep import Unit

    dense = _dense_name(name)
    return Unit(f"{SELF}:unit_fn", {"name": name, "protocol": PROTOCOL, "threads": THREADS,
                                   "smoke": bool(PROTOCOL.get("eval_windows"))},
                data=(str(ETTH2),), needs=(sweep_unit(dense),) if dense else (), label=name,
                code=() if name.startswith("deploy") else TRAINING_CODE)


def unit_fn(params: dict, ctx) -> dict:
    """One study unit in a worker process (joblib, submitit): the protocol comes with the unit."""
    global THREADS
    import torch

    PROTOCOL.clear()
    PROTOCOL.update(params["protocol"])
    THREADS = params["threads"]
    torch.set_num_threads(THREADS)
    u = params["name"]
    print(f"== {u}", flush=True)
    if u == "deploy-D8":
        return {"unit": u, "threads": THREADS, **deploy_unit(ctx)}
    devices, seed = int(u.split("-")[1][1:]), int(u.split("-")[2][1:])
    s = Session(devices, seed)
    dense = sweep_unit(_dense_name(u)) if _dense_name(u) else None
    if u.endswith("-dense"):
        out = dense_unit(s, ctx)
    elif u.startswith("fig7-"):
        out = fig7_method(s, u.rsplit("-", 1)[1], ctx, dense)
    elif "-qmax" in u:
        out = fig8(s, 0.0, ctx, dense, q_max=float(u.rsplit("-qmax", 1)[1]))
    else:
        out = fig8(s, float(u.rsplit("-q", 1)[1]), ctx, dense)
    return {"unit": u, "protocol": PROTOCOL, "threads": THREADS, **out}


def run(seeds: list[int], only: list[str] | None, backend: str, jobs: int, slurm: dict,
        devices: tuple[int, ...] = (8,), all_rates: bool = False) -> None:
    from codegen.errors import UserError
    from codegen.sweep import run_sweep

    names = [u for u, _ in units_in_order(seeds, devices, all_rates)]
    unknown = [u for u in only or () if u not in names]
    if unknown:  # a silent no-op would look like "already done"
        raise UserError(f"--only {' '.join(unknown)}: not a unit of this study with these options; `status` "
                        f"lists them (--seeds, --devices and --all-rates decide which exist: Fig. 8's other "
                        f"rates need --all-rates beyond the first seed)")
    units = [sweep_unit(u) for u in names if not only or u in only]
    run_sweep(units, RECORDS, WORK, backend, jobs, slurm)


def status(seeds: list[int], devices: tuple[int, ...] = (8,), all_rates: bool = False) -> None:
    """One line per unit of the study: done, started (and how far: the trajectory's saved actions and
    the keeps scored, or the newest checkpoint) or todo."""
    import datetime

    import torch

    from codegen.sweep import unit_id, unit_state

    by_label: dict[str, list[str]] = {}  # records of this study under other ids (another code version)
    for path in sorted(RECORDS.glob("*.json")) if RECORDS.is_dir() else []:
        by_label.setdefault(json.loads(path.read_text()).get("label", ""), []).append(path.stem)
    for name, _ in units_in_order(seeds, devices, all_rates):
        u = sweep_unit(name)
        state, detail = unit_state(RECORDS, WORK, u), ""
        if state == "todo" and by_label.get(name):
            detail = f"recorded under other id(s) {', '.join(by_label[name])} (other code or protocol)"
        if state == "started":
            folder = WORK / unit_id(u)
            files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime)
            trajectory = [p for p in files if p.name.endswith("-trajectory.pt")]
            if trajectory:
                saved = torch.load(trajectory[0], weights_only=False)
                detail = (f"{saved['done']} pruning action(s) saved, keeps scored: "
                          f"{[p['keep'] for p in saved['points']] or 'none yet'}")
            elif files:
                when = datetime.datetime.fromtimestamp(files[-1].stat().st_mtime).strftime("%Y-%m-%d %H:%M")
                detail = f"newest checkpoint {files[-1].relative_to(folder)} ({when})"
        print(f"{unit_id(u)}  {state:7s}  {name}" + (f"  {detail}" if detail else ""))


def main() -> None:
    global RECORDS, WORK, THREADS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--only", nargs="*", default=None)
    r.add_argument("--devices", type=int, nargs="+", default=[8], choices=[8, 16],
                   help="Fig. 7 for these device counts (Fig. 8 and the deployed model are D = 8)")
    r.add_argument("--all-rates", action="store_true",
                   help="train Fig. 8's other loss rates for every seed, not only the first")
    r.add_argument("--backend", choices=["joblib", "local", "slurm"], default="joblib",
                   help="joblib: processes here; local: submitit's local executor; slurm: a job array per wave")
    r.add_argument("--jobs", type=int, default=1,
                   help="units at once (use --threads 1 with 2 on 2 cores); slurm: the array's parallelism")
    r.add_argument("--slurm-partition", default=None)
    r.add_argument("--slurm-time", type=int, default=12 * 60, help="slurm: minutes per unit")
    r.add_argument("--threads", type=int, default=THREADS,
                   help="torch threads of this run (on 2 cores, two 1-thread runs side by side do ~9 %% more than one 2-thread run)")
    r.add_argument("--smoke", type=Path, default=None,
                   help="check the script end to end with a tiny model, writing results to this folder")
    st = sub.add_parser("status", help="each unit's state: done, started (how far) or todo")
    st.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    st.add_argument("--devices", type=int, nargs="+", default=[8], choices=[8, 16])
    st.add_argument("--all-rates", action="store_true")
    st.add_argument("--threads", type=int, default=THREADS, help="the thread count of the runs (part of the ids)")
    st.add_argument("--smoke", type=Path, default=None, help="the state of a `run --smoke` study in this folder")
    rep = sub.add_parser("report")
    rep.add_argument("--runs", type=Path, default=None, help="legacy per-name records (default: the committed ones)")
    rep.add_argument("--records", type=Path, default=None, help="sweep records (default: the committed ones)")
    rep.add_argument("--out", type=Path, default=None, help="folder for the tables and plots")
    args = ap.parse_args()
    if args.cmd == "run":
        import torch

        THREADS = args.threads
        torch.set_num_threads(THREADS)  # Session.fit calls the training loop directly
    if args.cmd in ("run", "status") and args.smoke:
        RECORDS, WORK = args.smoke / "records", args.smoke / "work"
        # a short look-back too: 11 tokens instead of 42, so the deployed nodes' cycle model (a third
        # of the smoke test's time with 42) runs a fraction of the attention
        PROTOCOL.update(model={**PROTOCOL["model"], "lookback": 96, "layers": 1, "d_model": 32, "mlp_hidden": 32},
                        max_train_windows=512, dense_epochs=1, dropout_epochs=1, finetune_epochs=1,
                        keeps=[0.5, 0.25], loss_rates=[0.0, 0.1], eval_windows=256)
    if args.cmd == "status":
        THREADS = args.threads
        status(args.seeds, tuple(args.devices), args.all_rates)
        return
    if args.cmd == "run":
        slurm = {"timeout_min": args.slurm_time, "cpus_per_task": max(1, args.threads),
                 **({"partition": args.slurm_partition} if args.slurm_partition else {})}
        run(args.seeds, args.only, args.backend, args.jobs, slurm, tuple(args.devices), args.all_rates)
    else:
        from split_training_report import report  # noqa: PLC0415 (bench-local module)

        report(args.runs or RUNS, args.out or RESULTS.parent, args.records or RECORDS)


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
