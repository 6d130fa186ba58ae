"""Model commands: train, eval, compile, fit."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UserError
from .app import main
from .options import FiniteRange, loss_options, loss_rates, say, sweep_values


@main.command()
@click.argument("config", required=False, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("model"), show_default=True,
              help="Output folder for model.onnx, calibration.npy, test windows and train.json.")
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Train on this data instead of the config's: an ETT-format .csv (a date column and numeric "
                   "columns), a Monash .tsf file, or a folder of ICD recordings (MM-DDTHHMMSS_NNN_modeK.csv).")
@click.option("--resume", is_flag=True,
              help="Continue the interrupted run from its checkpoint, after its last epoch or pruning stage "
                   "(same config and data; same bytes as an uninterrupted run).")
@click.option("--work", "work_dir", type=click.Path(path_type=Path), default=None,
              help="Folder for the checkpoints (every epoch, every pruning stage). Default: .OUT.cisl-train next "
                   "to the output folder.")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Override [train] epochs.")
@click.option("--devices", type=click.IntRange(min=1), default=None, help="Override [split] devices.")
@click.option("--prune", "prune", type=click.Choice(["somegather", "normal", "none"]), default=None,
              help="Override [prune] method: somegather = the paper's communication-aware pruning (trained masks, "
                   "each node keeps using its own pruned columns); normal = the baseline that removes whole columns; "
                   "none = no pruning.")
@click.option("--keep", type=FiniteRange(0.0, 1.0, min_open=True), default=None,
              help="Override [prune] keep: the network-wide share of an allgather's columns the nodes still send "
                   "(needs --prune; realised as exactly as whole columns allow and printed).")
@click.option("--random-keep", type=FiniteRange(0.0, 1.0, min_open=True), default=None,
              help="Override [split] random_keep: RANDOM untrained masks sending this share (an ablation, not the "
                   "paper's pruning).")
@click.option("--keep-ratio", hidden=True, default=None, expose_value=True,
              help="Removed: it drew random masks; see --prune/--keep and --random-keep.")
@click.option("--seed", type=click.IntRange(min=0, max=2 ** 64 - 1), default=None,
              help="Override [train] seed (0 to 2**64 - 1).")
@click.option("--dropout", "dropout_file", type=click.Path(path_type=Path), default=None,
              help="Take [dropout] from this TOML file, e.g. the one `cisl radio loss -o` writes; its loss rates "
                   "replace the config's (q, q_link, q_recv, q_send, q_max).")
@click.option("--split", "split_file", type=click.Path(path_type=Path), default=None,
              help="Override [split] file: train for the split `cisl plan -o` wrote (heads and MLP hidden units per "
                   "node; the devices follow it). Needed for a pruned model on a planned split.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def train(config: Path | None, out_dir: Path, data: Path | None, resume: bool, work_dir: Path | None,
          epochs: int | None, devices: int | None, prune: str | None, keep: float | None, random_keep: float | None,
          keep_ratio: str | None, seed: int | None, dropout_file: Path | None, split_file: Path | None,
          quiet: bool) -> None:
    """Train the split model described by CONFIG (TOML; omit it for the defaults).

    Writes OUT/model.onnx (float, cisl metadata in metadata_props), OUT/calibration.npy,
    OUT/test_windows.npy, OUT/test_targets.npy, OUT/test_scale.npy and OUT/train.json. Without --data and without a
    [data] section it trains on built-in synthetic multivariate series. A checkpoint is saved after
    every epoch and pruning stage (see --work); after an interruption, the same command with --resume
    continues.
    With --split (or [split] file) the model is trained for the uneven split `cisl plan` chose.
    With [elastic] modes > 1 it becomes elastic: nested modes in one set of weights, each printed
    with its share of the MACs and its validation MSE (build one with `cisl compile --mode`).
    """
    from ..train.launch import train_from_options

    if keep_ratio is not None:
        raise click.UsageError("--keep-ratio was removed: it drew RANDOM masks. For the paper's pruning use "
                               "--prune somegather --keep K; for random masks --random-keep K")
    s = train_from_options(config, data, out_dir, resume=resume, work_dir=work_dir, epochs=epochs, devices=devices,
                           prune=prune, keep=keep, random_keep=random_keep, seed=seed, dropout_file=dropout_file,
                           split_file=split_file, progress=not quiet, note=say(quiet))
    if s.get("stopped"):
        where = (f"after {s['prune_stages_done']} pruning stage(s)" if "prune_stages_done" in s
                 else f"after epoch {s['epochs_done']} of {s['epochs']}")
        # not a finished run: exit code 2, as `cisl sweep` ends a unit stopped so, so that `cisl train CFG -o m &&
        # cisl compile m/model.onnx` does not go on with whatever model an earlier run left in -o
        click.echo(f"stopped {where} ([train] stop_after_epochs): no model written ({out_dir} unchanged); checkpoint "
                   f"{s['checkpoint']}; continue with the same command and --resume", err=True)
        raise SystemExit(2)
    target = out_dir / "model.onnx"
    data = s.get("data", {})
    if data.get("source") == "synthetic":  # the default without [data]: say so, it is easy to miss
        on = (f"built-in synthetic data ({data['channels']} channels x {data['length']} steps; "
              f"[data] or --data for yours)")
    else:
        on = data.get("file") or data.get("path") or data.get("source", "?")
    click.echo(f"trained {s['params']} parameters on {on} in {s['seconds']:.1f} s: "
               f"val MSE {s['val_mse']:.4f}, test MSE {s['test_mse']:.4f} -> {target}")
    for w in data.get("warnings", []):  # what makes those scores doubtful (also in train.json's data)
        click.echo(f"warning: {on}: {w}", err=True)
    for w in s.get("warnings", []):  # the model's settings (train.json's summary)
        click.echo(f"warning: {config or 'config'}: {w}", err=True)
    comm, drop, pr = s["communication"], s["dropout"], s["prune"]
    if pr["masks"] != "full" and comm["allgather_columns"]:
        what = f"{pr['method']} pruning" if pr["method"] != "none" else "random masks"
        click.echo(f"{what}: keep {pr['keep']:g} requested, realised {pr['realised_keep']:.4f} -- the nodes send "
                   f"{comm['broadcast_columns']} of an allgather's {comm['allgather_columns']} columns per inference")
    if "elastic" in s:
        el = s["elastic"]
        click.echo(f"{el['modes']} elastic modes (0 = largest): " + ", ".join(
            f"mode {m} {100 * share:.0f} % of the MACs, val MSE {v:.4f}"
            for m, (share, v) in enumerate(zip(el["macs_share"], el["val_mse"]))))
    if "test_mse_lossy" in s:
        rate = (f"loss drawn per window up to q = {drop['q_max']:g} (scored at q_max)" if "q_max" in drop else
                f"message loss {drop['q_link']:g}/{drop['q_recv']:g}/{drop['q_send']:g} (link/receiver/sender)")
        click.echo(f"test MSE under {rate}: {s['test_mse_lossy']:.4f}")
        if not comm["allgather_columns"]:  # one device: no messages to lose
            click.echo("note: one node sends no messages, so message dropout changed nothing: this is the loss-free "
                       "test MSE (train with more devices for the loss to apply)", err=True)
    split = s.get("split", {})
    if split.get("protocol"):  # chosen by the row count: an ETT file with a row missing is cut 70/10/20
        w = s["windows"]
        click.echo(f"splits: {split['protocol']} ({w['train']} / {w['val']} / {w['test']} windows)")


@main.command(name="compile")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("build"), show_default=True,
              help="Output folder: plan.json, constants.bin and node_NN/ with the generated C.")
@click.option("--devices", type=click.IntRange(min=1), default=None,
              help="Number of nodes. Default: as the model was trained. A dense model (keep ratio 1) can be "
                   "split any number of ways up to its head count.")
@click.option("-b", "--board", default=None,
              help="Target board (a folder under boards/). Default: sim, or with --testbed node 0's board (sim or "
                   "qemu-m4 on a virtual testbed).")
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=None,
              help="Testbed file whose [[node]] boards (virtual nodes: `models`) the nodes are planned for: a mixed "
                   "testbed's nodes each get their own flash and RAM budget and are built for their own board.")
@click.option("--split", "split_file", type=click.Path(path_type=Path), default=None,
              help="Split file from `cisl plan`: each node's heads and hidden units and board (an unpruned model "
                   "compiles for any split; a pruned one only for the split it was trained for).")
@click.option("--calibration", type=click.Path(path_type=Path), default=None,
              help="Calibration windows (.npy float32 [n, lookback]). Default: calibration.npy next to MODEL.")
@click.option("--max-calibration", type=click.IntRange(min=1), default=256, show_default=True,
              help="Use at most this many calibration windows (evenly spaced).")
@click.option("--round-policy", type=click.Choice(["done", "fixed"]), default="done", show_default=True,
              help="Mixer round length: end once every node has full rank, or the published fixed 3G+200 slots.")
@click.option("--phy", type=click.Choice(["2M", "1M"]), default="2M", show_default=True,
              help="BLE PHY the Mixer slots are timed for.")
@click.option("--max-generation", type=click.IntRange(2, 256), default=256, show_default=True,
              help="Rows per Mixer round (bounds Mixer's RAM); larger exchanges and messages run as several rounds.")
@click.option("--mode", type=click.IntRange(min=0), default=None,
              help="An elastic model's mode to build alone (0 = the largest); without it every mode goes "
                   "into one image and the nodes switch at run time (`cisl modes`).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def compile_cmd(model: Path, out_dir: Path, devices: int | None, board: str | None, testbed_file: Path | None,
                split_file: Path | None, calibration: Path | None, max_calibration: int, round_policy: str, phy: str, max_generation: int,
                mode: int | None, quiet: bool) -> None:
    """Quantise MODEL (ONNX from `cisl train`) to int8, partition it and emit C for every node.

    Writes OUT/plan.json (the partition plan: who holds and sends what, every quantisation
    parameter and every node's schedule), OUT/constants.bin, OUT/node_NN/*.c|h and OUT/compile.json.
    """
    from ..compile import CompileOptions, compile_model

    if board is None:
        board = "sim"
        if testbed_file is not None:
            from ..testbed.config import load_testbed

            tb = load_testbed(testbed_file)
            board = tb.nodes[0].board
    s = compile_model(model, out_dir, CompileOptions(devices, board, calibration, max_calibration, round_policy, phy,
                                                     max_generation, testbed=testbed_file, split=split_file,
                                                     mode=mode),
                      say(quiet))
    _print_resources(s)
    for w in s.get("warnings", []):
        click.echo(f"warning: {w}", err=True)
    for n in s.get("notes", []):
        click.echo(f"note: {n}", err=True)
    mixed = sorted({n["board"] for n in s["nodes"] if "board" in n})
    click.echo(f"compiled {s['devices']} nodes for board {s['board']}"
               + (f" (nodes of {', '.join(mixed)})" if mixed else "") + f" -> {out_dir / 'plan.json'}")


def _print_resources(summary: dict) -> None:
    est = "estimated_flash" in summary["nodes"][0]
    click.echo(f"{'node':>4} {'params (B)':>11} {'arena (B)':>10} {'sent/inf (B)':>13}"
               + (f" {'est. flash (B)':>15} {'est. RAM (B)':>13}" if est else ""))
    for n in summary["nodes"]:
        click.echo(f"{n['node']:>4} {n['param_bytes']:>11} {n['arena_bytes']:>10} {n['bytes_sent_per_inference']:>13}"
                   + (f" {n['estimated_flash']:>15} {n['estimated_ram']:>13}" if est else ""))
    acc = summary.get("accuracy")
    if acc:
        click.echo(f"int8 vs float on {acc['windows']} test windows: MSE {acc['mse_int8']:.4f} vs "
                   f"{acc['mse_float']:.4f} ({100 * acc['relative_mse_increase']:+.2f} %)")


@main.command(name="eval")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Score the whole test split of this data set (same loader and split as `cisl train --data`). "
                   "Default: the test windows `cisl train` saved next to MODEL ([train] test_samples of them).")
@click.option("--split", "which", type=click.Choice(["test", "val"]), default=None,
              help="Which split of --data to score  [default: test].")
@click.option("--int8", is_flag=True, help="Score the int8 deployment (bit-exact reference) instead of float.")
@click.option("--devices", type=click.IntRange(min=1), default=None,
              help="Node count to split for (default: as trained).")
@click.option("--calibration", type=click.Path(path_type=Path), default=None,
              help="Calibration windows for --int8 (default: calibration.npy next to MODEL).")
@loss_options
@click.option("--sweep", default=None, metavar="Q1,Q2,...",
              help="Score at each of these loss probabilities (each applied to all three modes), e.g. "
                   "0,0.05,0.1,0.2: a table of MSE against loss (the paper's Fig. 8 for this model).")
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Number of loss samplings (seeds 0..N-1); the MSE is reported per seed and as mean/std.")
@click.option("--max-windows", type=click.IntRange(min=1), default=None,
              help="Score at most this many windows, evenly spaced as `cisl train` picks its saved test windows.")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None, help="Also write the result here.")
def eval_cmd(model: Path, data: Path | None, which: str, int8: bool, devices: int | None, calibration: Path | None,
             loss_q: float | None, loss_link: float, loss_receiver: float, loss_sender: float, sweep: str | None,
             seeds: int, max_windows: int | None, json_out: Path | None) -> None:
    """Test MSE of MODEL (on the data's StandardScaler scale), float or int8, under sampled message loss.

    Without --data it scores the test windows `cisl train` saved next to MODEL ([train] test_samples,
    evenly spaced: a sample of the test split, not train.json's whole-split test MSE); --data with the
    training data scores the whole test split. An elastic model is scored in mode 0 (train.json has
    every mode's MSE).

    Losses follow the paper's three modes, drawn independently for every communication round and
    window; a lost message's columns contribute nothing, exactly as on the nodes.
    """
    from tqdm import tqdm

    from ..evaluate import eval_json_ours, run_eval
    from ..fsutil import check_output_file

    check_output_file(json_out, eval_json_ours, "--json")  # before the work, not after it
    if which == "val" and data is None:
        raise UserError("--split val needs --data: the windows saved next to MODEL are its test split only")
    which = which or "test"
    rates = loss_rates(loss_q, loss_link, loss_receiver, loss_sender)
    sweep_q = sweep_values(sweep) if sweep is not None else None
    run = run_eval(model, data, which, int8, devices, calibration, rates, sweep_q, seeds, max_windows,
                   progress=lambda it: tqdm(it, desc="eval", unit="batch", leave=False, disable=None))
    results = run.results
    on = data if data is not None else f"{model}'s training data"
    for w in run.warnings:  # what makes the scores doubtful, as `cisl train` said (audit P F15)
        click.echo(f"warning: {on}: {w}", err=True)
    if run.devices == 1 and (rates.any or sweep_q is not None):
        click.echo("note: one node sends no messages, so message loss changes nothing here: every MSE is the "
                   "loss-free one (split the model with --devices for loss to apply)", err=True)
    if sweep_q is None:
        r = results[0]
        click.echo(f"{r.mode} model, {run.windows} windows, loss link/receiver/sender = {rates.link}/{rates.receiver}/"
                   f"{rates.sender} (effective per-link loss {100 * rates.effective_link_loss:.1f} %)")
        for seed, mse in zip(r.seeds, r.mse):
            click.echo(f"  seed {seed}: MSE {mse:.5f}")
        click.echo(f"MSE {r.mean:.5f} +- {r.std:.5f}")
    else:
        base = results[0].mean if sweep_q[0] == 0.0 else None
        click.echo(f"{results[0].mode} model, {run.windows} windows, {seeds} seed(s); q applies to all three modes")
        click.echo(f"{'q':>6} {'link loss':>9} {'MSE':>9} {'+-':>8}" + (f" {'vs q = 0':>9}" if base else ""))
        for q, r in zip(sweep_q, results):
            click.echo(f"{100 * q:5.1f}% {100 * r.rates.effective_link_loss:8.1f}% {r.mean:9.5f} {r.std:8.5f}"
                       + (f" {100 * (r.mean - base) / base:+8.1f}%" if base else ""))
    if json_out:
        run.save(json_out)


@main.command(name="fit")
@click.option("-b", "--board", default="nrf52840dk", show_default=True,
              help="Board whose flash and RAM bound every node.")
@click.option("--devices", type=click.IntRange(min=1), required=True, help="Number of nodes.")
@click.option("--heads", type=click.IntRange(min=1), default=16, show_default=True, help="Attention heads H.")
@click.option("--keep", "keep_ratio", type=FiniteRange(0.0, 1.0, min_open=True), default=1.0, show_default=True,
              help="somegather keep ratio (fraction of its columns a node broadcasts).")
@click.option("--tokens", "token_grid", type=click.IntRange(1, 511), multiple=True,
              help="Token counts N to try (repeatable). Default: 16 24 32 48 64 96 128 192 256 384 511.")
@click.option("--layers", "layer_grid", type=click.IntRange(1, 64), multiple=True,
              help="Layer counts T to try (repeatable). Default: 1..12.")
@click.option("--no-build", is_flag=True, help="Estimate only: skip the confirming compile and build of every node.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random weights and masks.")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None, help="Also write the result here.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Parallel jobs: the estimate's search over token counts, and the confirming compiles (default: CPUs).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def fit_cmd(board: str, devices: int, heads: int, keep_ratio: float, token_grid: tuple[int, ...],
            layer_grid: tuple[int, ...], no_build: bool, seed: int, json_out: Path | None, jobs: int | None, quiet: bool) -> None:
    """The largest model (dense-equivalent parameters) whose every node image fits the board.

    Searches F (multiples of H), N and T with the planner's estimate, then confirms the winner by
    compiling a random-weight model of that size for DEVICES nodes and building every node image
    (the paper's Fig. 5 in numbers; compare --devices 1).
    """
    from ..fitrun import run_fit

    run = run_fit(board, devices, heads, keep_ratio, seed, not no_build, token_grid, layer_grid, json_out, jobs,
                  say(quiet))
    click.echo(run.text)
    if json_out:
        run.save(json_out)
    run.check()
