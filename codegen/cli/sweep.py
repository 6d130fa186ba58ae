"""`cisl sweep`: train a grid of models on this machine (joblib) or on a SLURM cluster (submitit)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from ..errors import UserError
from .app import main
from .options import say


def _values(option: str, text: str | None, kind, low: float, high: float, high_open: bool = False) -> list | None:
    if text is None:
        return None
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"{option} {text!r}: expected comma-separated numbers such as "
                        f"{'0,1,2' if kind is int else '1,0.5,0.1'}") from None
    bad = [v for v in values if not (low <= v < high if high_open else low <= v <= high)]
    if not values or bad:
        raise UserError(f"{option} {text!r}: every value must be in [{low:g}, {high:g}{')' if high_open else ']'}")
    return list(dict.fromkeys(values))


@main.command()
@click.argument("config", required=False, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("sweep"), show_default=True,
              help="Sweep folder: records/<id>.json (one per finished unit) and work/<id>/model. New, empty, or one "
                   "cisl sweep made (it resumes).")
@click.option("--data", type=click.Path(path_type=Path), default=None, help="As for `cisl train`.")
@click.option("--seeds", default=None, metavar="S1,S2,...", help="Training seeds ([train] seed), e.g. 0,1,2.")
@click.option("--keep", default=None, metavar="K1,K2,...",
              help="Network-wide keep ratios ([prune] keep) with --prune, e.g. 1,0.5,0.1.")
@click.option("--prune", type=click.Choice(["somegather", "normal"]), default=None,
              help="Pruning method of every unit whose keep (--keep, else [prune] keep) is below 1.")
@click.option("--q", "rates", default=None, metavar="Q1,Q2,...", help="Message dropout rates ([dropout] q), e.g. 0,0.1.")
@click.option("--devices", type=click.IntRange(min=1), default=None, help="Override [split] devices.")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Override [train] epochs.")
@click.option("--backend", type=click.Choice(["joblib", "local", "slurm"]), default="joblib", show_default=True,
              help="joblib: processes here; local: submitit's local executor; slurm: a SLURM job array per wave.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Units at a time (joblib, local) or the job array's parallelism (slurm).")
@click.option("--slurm-partition", default=None, help="slurm: partition.")
@click.option("--slurm-time", type=click.IntRange(min=1), default=240, show_default=True,
              help="slurm: minutes per job; a unit still running then is requeued (up to 3 times) and resumes "
                   "from its checkpoints.")
@click.option("--slurm-cpus", type=click.IntRange(min=1), default=2, show_default=True, help="slurm: CPUs per unit.")
@click.option("--dry-run", is_flag=True,
              help="List the units, their ids and states (done, started: stopped and resumes, todo, damaged: a unit's record that is not its result); run nothing.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def sweep(config: Path | None, out_dir: Path, data: Path | None, seeds: str | None, keep: str | None,
          prune: str | None, rates: str | None, devices: int | None, epochs: int | None, backend: str, jobs: int,
          slurm_partition: str | None, slurm_time: int, slurm_cpus: int, dry_run: bool, quiet: bool) -> None:
    """Train CONFIG (as `cisl train` would) at every point of a grid of seeds, keep ratios and loss rates.

    Every point is a unit with a content-addressed id (the content of the config and of the data it
    reads, overrides, thread count, training code version); its record OUT/records/<id>.json is written
    atomically when it finishes, and a finished id is skipped, so an interrupted sweep continues where it stopped and the same records
    come out on every backend; a stopped unit resumes from its last epoch or pruning stage
    (checkpoints in OUT/work/<id>/train). Prints one line per unit: its grid point, MSEs and realised keep.
    """
    from ..sweep import check_sweep_folder, claim_sweep_folder, other_units, pinned, record_path, run_sweep, unit_id, \
        unit_state
    from ..train.config import load_config
    from ..train.sweep import check_units, grid_units

    axes: dict[str, list] = {}
    for option, key, text, kind, lo, hi, open_ in (("--seeds", "train.seed", seeds, int, 0, 2 ** 31, False),
                                                   ("--keep", "prune.keep", keep, float, 1e-9, 1.0, False),
                                                   ("--q", "dropout.q", rates, float, 0.0, 1.0, True)):
        values = _values(option, text, kind, lo, hi, open_)
        if values is not None:
            axes[key] = values
    fixed = {k: v for k, v in (("split.devices", devices), ("train.epochs", epochs)) if v is not None}
    units = grid_units(config, data, axes, fixed)  # reads the config: a mistake in it is one line here
    base = load_config(config).prune  # a unit's keep is --keep's, else the config's [prune] keep
    if "prune.keep" in axes and prune is None and base.method == "none" and any(k < 1 for k in axes["prune.keep"]):
        raise UserError("--keep below 1 needs --prune somegather (the paper's pruning) or --prune normal")
    if prune is not None:  # keep 1 means no pruning: no method, so it is the same unit as the unpruned run
        pruned = [u.params["overrides"].get("prune.keep", base.keep) < 1 for u in units]
        if not any(pruned):
            why = ("every --keep is 1" if "prune.keep" in axes else
                   f"there is no --keep and {config or 'the default config'} has [prune] keep = 1")
            raise UserError(f"--prune {prune} applies to no unit: every unit keeps all columns ({why}); add --keep "
                            "values below 1 (e.g. --keep 1,0.5) or drop --prune")
        units = [dataclasses.replace(u, params={**u.params, "overrides": {**u.params["overrides"],
                                                                            "prune.method": prune}})
                 if p else u for u, p in zip(units, pruned)]
    check_units(units)
    units = [pinned(u) for u in units]  # their ids from here on, whatever is edited on disk while they train
    if "dropout.q" in axes:  # --q replaces the config's loss setting as `cisl train --dropout` does
        from ..train.launch import config_loss_keys

        dropped = config_loss_keys(config, ("q",))
        if dropped:
            click.echo(f"note: --q sets [dropout] q of every unit; it replaces the loss {config} sets ([dropout] "
                       f"{', '.join(dropped)} dropped), so a unit at q = 0 trains without message loss", err=True)
    records, work = out_dir / "records", out_dir / "work"
    check_sweep_folder(out_dir)  # before any unit runs, not once each unit has failed on it
    done, stopped = other_units(out_dir, units)
    if done or stopped:
        what = " and ".join(x for x in (f"{done} record{'s' * (done != 1)}" if done else "",
                                         f"the checkpoints of {stopped} stopped unit{'s' * (stopped != 1)}"
                                         if stopped else "") if x)
        listed = f", and {records} lists them beside this sweep's" if done else ""
        click.echo(f"note: {out_dir} holds {what} that none of this sweep's units are (another grid, or these "
                   f"points before the config, the data or cisl changed: a unit's id covers them all); they stay as "
                   f"they are{listed}: move them away to keep only this sweep's", err=True)
    if dry_run:
        for u in units:
            click.echo(f"{unit_id(u)}  {unit_state(records, work, u):7s}  {u.label}")
        return
    from ..fsutil import use_lock

    # one sweep per folder at a time: a second one ran into the first's units ("another cisl run is writing
    # it") and reported them failed although they finished; refused at once instead
    with use_lock(out_dir, f"{out_dir}: another `cisl sweep` is running in this folder; wait for it to end (it "
                           "skips what is done when run again)"):
        claim_sweep_folder(out_dir)
        slurm = {"partition": slurm_partition, "timeout_min": slurm_time, "cpus_per_task": slurm_cpus}
        results = run_sweep(units, records, work, backend, jobs, {k: v for k, v in slurm.items() if v is not None},
                            say(quiet))
    lines = []  # all before any is printed: a damaged record is one line, not a traceback halfway
    for u, rec in zip(units, results):
        path = record_path(records, u)
        try:
            s = rec["result"]["summary"]
            pr = s["prune"]
            lines.append(f"{u.label}: val MSE {float(s['val_mse']):.4f}, test MSE {float(s['test_mse']):.4f}, keep "
                         f"{float(pr['realised_keep']):.4f} ({pr['masks']} masks) -> {path}")
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{path}: a damaged sweep record (no training summary with val_mse, test_mse and "
                            f"prune); delete it and run the sweep again to redo that unit") from None
    for line in lines:
        click.echo(line)
