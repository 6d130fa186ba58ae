"""The `cisl` command line: train -> compile -> build -> sim, and `demo` for all of it at once.

Mistakes in the user's input end with one line on stderr and exit code 2; a check that fails (not
bit-exact, a node that crashed) ends with exit code 1. Heavy modules (torch, onnx) are imported
only by the commands that need them, so `cisl compile` never loads torch.
"""

from __future__ import annotations

import functools
import sys
import threading
from pathlib import Path

import click

from . import __version__
from .errors import CheckFailed, UserError


def _friendly(fn):
    """Turn UserError/CheckFailed into one line and an exit code instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)
        except OSError as e:  # the one error boundary for the file system: the path and the reason
            where = e.filename or "a file"
            click.echo(f"error: {where}: {e.strerror or e}; check that the path exists, is of the right kind "
                       f"(file or folder) and is writable", err=True)
            sys.exit(2)
        except UnicodeDecodeError as e:
            click.echo(f"error: a file that should be text is not ({e.reason} at byte {e.start}); check the "
                       f"files given", err=True)
            sys.exit(2)
        except CheckFailed as e:
            click.echo(f"FAILED: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


def _loss_options(fn):
    """The three message-loss modes as options (codegen/lossmodel.py), shared by sim and eval."""
    fn = click.option("--loss-sender", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
                      help="Probability that nobody gets a sender's message in a round.")(fn)
    fn = click.option("--loss-receiver", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0,
                      show_default=True, help="Probability that a receiver gets nothing in a round.")(fn)
    fn = click.option("--loss-link", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
                      help="Probability that one sender->receiver message of a round is lost.")(fn)
    return click.option("--loss", "loss_q", type=click.FloatRange(0.0, 1.0, max_open=True), default=None,
                        help="Message loss probability for each of the three modes (link, receiver, sender).")(fn)


def _loss_rates(loss_q: float | None, link: float, receiver: float, sender: float):
    from .lossmodel import LossRates

    return LossRates.uniform(loss_q) if loss_q is not None else LossRates(link, receiver, sender)


def _sweep_values(text: str) -> list[float]:
    """--sweep "0,0.05,0.1" -> sorted unique loss probabilities in [0, 1)."""
    try:
        values = sorted({float(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise UserError(f"--sweep {text!r}: expected comma-separated probabilities such as 0,0.05,0.1") from None
    if not values or not all(0.0 <= v < 1.0 for v in values):
        raise UserError(f"--sweep {text!r}: every probability must be in [0, 1), e.g. 0,0.05,0.1")
    return values


def _input_windows(inputs: Path | None):
    """The --inputs windows (.npy), or None when not given; one-line errors for a bad file."""
    import numpy as np

    if inputs is None:
        return None
    if not inputs.is_file():
        raise UserError(f"{inputs}: input file not found")
    try:
        x = np.load(inputs, allow_pickle=False)
    except Exception:
        raise UserError(f"{inputs}: not a .npy array of input windows") from None
    if not np.issubdtype(x.dtype, np.number) or not np.all(np.isfinite(x)):
        raise UserError(f"{inputs}: the input windows must be finite numbers (found NaN, infinity or non-numbers)")
    return x


def _say(quiet: bool):
    return (lambda s: None) if quiet else (lambda s: click.echo(s, err=True))


class _OneLineErrors(click.Group):
    """Usage mistakes (unknown option, bad value) as one line, like every other input error."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        import signal

        def terminated(signum, frame):  # SIGTERM ends cisl like Ctrl-C: outputs and temporary files cleaned up
            raise KeyboardInterrupt

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, terminated)
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.UsageError as e:
            names = []
            ctx = e.ctx
            while ctx is not None and ctx.parent is not None:  # the subcommand names, whatever the program is called
                names.insert(0, ctx.info_name)
                ctx = ctx.parent
            where = " ".join(["cisl", *names])
            click.echo(f"error: {e.format_message()} (see `{where} --help`)", err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cisl")
def main() -> None:
    """cisl: split a time-series transformer across ultra-low-power wireless nodes.

    \b
    The pipeline:
      cisl train CONFIG.toml -o model/      train; writes model.onnx + calibration set
      cisl compile model/model.onnx -o build/ --devices 4
                                            quantise to int8, partition, emit C per node
      cisl build build/                     compile every node's firmware
      cisl sim build/                       run all nodes on the virtual testbed, check bit-exactness
    `cisl demo` does all of this on built-in synthetic data. On boards (or the virtual testbed):
      cisl flash build/ --testbed testbed.toml    program, verify, reset every node
      cisl logs --testbed testbed.toml -o logs/   record their serial logs
      cisl report logs/ -o report/                latency, speedup, memory tables and figures
    For nRF52840 boards (cisl compile --board nrf52840dk):
      cisl build build/ --board qemu-m4; cisl qemu build/   each node on an emulated Cortex-M4
      cisl fit --devices 16                       the largest model whose every node image fits
    """


@main.command()
@click.argument("config", required=False, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("model"), show_default=True,
              help="Output folder for model.onnx, calibration.npy, test windows and train.json.")
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Train on this data instead of the config's: an ETT-format .csv (a date column and numeric "
                   "columns), a Monash .tsf file, or a folder of ICD recordings (MM-DDTHHMMSS_NNN_modeK.csv).")
@click.option("--resume", is_flag=True,
              help="Continue the interrupted run from its checkpoint (same config and data; same bytes as an "
                   "uninterrupted run).")
@click.option("--work", "work_dir", type=click.Path(path_type=Path), default=None,
              help="Folder for the per-epoch checkpoint. Default: .OUT.cisl-train next to the output folder.")
@click.option("--epochs", type=click.IntRange(min=0), default=None, help="Override [train] epochs.")
@click.option("--devices", type=click.IntRange(min=1), default=None, help="Override [split] devices.")
@click.option("--keep-ratio", type=click.FloatRange(0.0, 1.0, min_open=True), default=None,
              help="Override [split] keep_ratio (fraction of own columns each device broadcasts).")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Override [train] seed.")
@click.option("--dropout", "dropout_file", type=click.Path(path_type=Path), default=None,
              help="Take [dropout] from this TOML file, e.g. the one `cisl radio loss -o` writes.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@_friendly
def train(config: Path | None, out_dir: Path, data: Path | None, resume: bool, work_dir: Path | None,
          epochs: int | None, devices: int | None, keep_ratio: float | None, seed: int | None,
          dropout_file: Path | None, quiet: bool) -> None:
    """Train the split model described by CONFIG (TOML; omit it for the defaults).

    Writes OUT/model.onnx (float, cisl metadata in metadata_props), OUT/calibration.npy,
    OUT/test_windows.npy, OUT/test_targets.npy and OUT/train.json. Without --data and without a
    [data] section it trains on built-in synthetic multivariate series. A checkpoint is saved after
    every epoch (see --work); after an interruption, the same command with --resume continues.
    """
    if config is not None and not config.is_file():
        raise UserError(f"{config}: config file not found; give a TOML file or omit it for the defaults")
    if data is not None and not data.exists():
        raise UserError(f"{data}: not found; give an ETT-format .csv, a Monash .tsf file or a folder of ICD "
                        "recordings")
    from .train.api import CHECKPOINT_NAME, default_work_dir, run_train  # torch is imported only here

    checkpoint = (work_dir or default_work_dir(out_dir)) / CHECKPOINT_NAME
    if not resume and checkpoint.is_file() and not quiet:
        click.echo(f"note: starting from scratch; the checkpoint of an earlier run in {checkpoint.parent} will be "
                   "overwritten (pass --resume to continue that run instead)", err=True)

    overrides: dict = {}
    if epochs is not None:
        overrides["train.epochs"] = epochs
    if devices is not None:
        overrides["split.devices"] = devices
    if keep_ratio is not None:
        overrides["split.keep_ratio"] = keep_ratio
    if seed is not None:
        overrides["train.seed"] = seed
    if dropout_file is not None:
        import tomllib

        try:
            with open(dropout_file, "rb") as f:
                section = tomllib.load(f).get("dropout")
        except FileNotFoundError:
            raise UserError(f"{dropout_file}: not found; write it with `cisl radio loss -o FILE`") from None
        except tomllib.TOMLDecodeError as e:
            raise UserError(f"{dropout_file}: not valid TOML ({e})") from None
        if not isinstance(section, dict):
            raise UserError(f"{dropout_file}: no [dropout] section; write it with `cisl radio loss -o FILE`")
        for key, value in section.items():
            overrides[f"dropout.{key}"] = value
    s = run_train(config, data, out_dir, overrides or None, progress=not quiet, resume=resume, work_dir=work_dir)
    if s.get("stopped"):
        click.echo(f"stopped after epoch {s['epochs_done']} of {s['epochs']} ([train] stop_after_epochs); "
                   f"checkpoint {s['checkpoint']}; continue with the same command and --resume")
        return
    target = out_dir / "model.onnx" if s["onnx"] else out_dir / "train.json"
    click.echo(f"trained {s['params']} parameters in {s['seconds']:.1f} s: "
               f"val MSE {s['val_mse']:.4f}, test MSE {s['test_mse']:.4f} -> {target}")
    comm, drop = s["communication"], s["dropout"]
    if s["prune"]["method"] != "none":
        click.echo(f"{s['prune']['method']} pruning: the nodes send {100 * comm['ratio_to_allgather']:.1f} % of an "
                   f"allgather's columns ({comm['broadcast_columns']} of {comm['allgather_columns']} per inference)"
                   + ("" if s["onnx"] else "; normal pruning is scored in float only, no model.onnx"))
    if "test_mse_lossy" in s:
        rate = (f"loss drawn per window up to q = {drop['q_max']:g} (scored at q_max)" if "q_max" in drop else
                f"message loss {drop['q_link']:g}/{drop['q_recv']:g}/{drop['q_send']:g} (link/receiver/sender)")
        click.echo(f"test MSE under {rate}: {s['test_mse_lossy']:.4f}")


@main.command(name="compile")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("build"), show_default=True,
              help="Output folder: plan.json, constants.bin and node_NN/ with the generated C.")
@click.option("--devices", type=click.IntRange(min=1), default=None,
              help="Number of nodes. Default: as the model was trained. A dense model (keep ratio 1) can be "
                   "split any number of ways up to its head count.")
@click.option("--board", default="sim", show_default=True, help="Target board (a folder under boards/).")
@click.option("--calibration", type=click.Path(path_type=Path), default=None,
              help="Calibration windows (.npy float32 [n, lookback]). Default: calibration.npy next to MODEL.")
@click.option("--max-calibration", type=click.IntRange(min=1), default=256, show_default=True,
              help="Use at most this many calibration windows (evenly spaced).")
@click.option("--round-policy", type=click.Choice(["done", "fixed"]), default="done", show_default=True,
              help="Mixer round length: end once every node has full rank, or the published fixed 3G+200 slots.")
@click.option("--phy", type=click.Choice(["2M", "1M"]), default="2M", show_default=True,
              help="BLE PHY the Mixer slots are timed for.")
@click.option("--max-generation", type=click.IntRange(2, 256), default=256, show_default=True,
              help="Rows per Mixer round (bounds Mixer's RAM); larger exchanges run as several rounds.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@_friendly
def compile_cmd(model: Path, out_dir: Path, devices: int | None, board: str, calibration: Path | None,
                max_calibration: int, round_policy: str, phy: str, max_generation: int, quiet: bool) -> None:
    """Quantise MODEL (ONNX from `cisl train`) to int8, partition it and emit C for every node.

    Writes OUT/plan.json (the partition plan: who holds and sends what, every quantisation
    parameter and every node's schedule), OUT/constants.bin, OUT/node_NN/*.c|h and OUT/compile.json.
    """
    from .compile import CompileOptions, compile_model

    s = compile_model(model, out_dir, CompileOptions(devices, board, calibration, max_calibration, round_policy, phy,
                                                     max_generation), _say(quiet))
    _print_resources(s)
    for w in s.get("warnings", []):
        click.echo(f"warning: {w}", err=True)
    click.echo(f"compiled {s['devices']} nodes for board {s['board']} -> {out_dir / 'plan.json'}")


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


@main.command(name="build")
@click.argument("build_dir", type=click.Path(path_type=Path), default=Path("build"), required=False)
@click.option("--board", default=None, help="Board to build for (default: the board the plan was compiled for).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: CPUs).")
@click.option("--node", "nodes", type=click.IntRange(min=0), multiple=True,
              help="Build only this node (repeatable). Default: every node.")
@click.option("--board-time/--no-board-time", default=True, show_default=True,
              help="sim and qemu-m4 plans: also model the plan's ARM images so the virtual testbed's nodes "
                   "print nRF52840 time.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@_friendly
def build_cmd(build_dir: Path, board: str | None, jobs: int | None, nodes: tuple[int, ...], quiet: bool,
              board_time: bool) -> None:
    """Compile every node in BUILD_DIR into a firmware image (node_NN/firmware.elf), in parallel.

    Uses upstream CMSIS-NN when CMSIS_NN_ROOT points at a checkout, else the bundled nnref.
    Warnings are errors. For boards with a memory budget (nrf52840dk, qemu-m4) every node's flash
    and RAM are read from its ELF and printed next to the planner's estimate (node_NN/size.json);
    a node that does not fit fails the build. --board qemu-m4 also builds a plan compiled for
    nrf52840dk (same code and flags); its images go to node_NN/qemu-m4/.

    For a sim plan (the virtual testbed) the plan's ARM images are built too, when the ARM
    toolchain is installed, and run on the nRF52840 cycle model: node_NN/board_time.txt then makes
    the sim nodes print nRF52840 time (--no-board-time: host time, a faster build). A qemu-m4 plan's
    images get the same table, so its nodes on the virtual testbed print nRF52840 time too
    (--no-board-time: QEMU instruction counts).
    """
    from .build import build

    s = build(build_dir, board, jobs, _say(quiet), list(nodes) if nodes else None)
    where = f"{build_dir}/node_NN/" + ("" if s["board"] == s["plan_board"] else f"{s['board']}/")
    click.echo(f"built {len(s['nodes'])} node images for {s['board']} with {s['kernels']} -> {where}")
    if board_time and (s["board"] == "sim" or s["board"] == s["plan_board"] == "qemu-m4"):
        from .timing.boardtime import refresh

        click.echo(refresh(build_dir, list(nodes) if nodes else None, jobs, _say(quiet)))


@main.command(name="qemu")
@click.argument("build_dir", type=click.Path(path_type=Path), default=Path("build"), required=False)
@click.option("--node", "nodes", type=click.IntRange(min=0), multiple=True,
              help="Run this node (repeatable). Default: every node.")
@click.option("--inputs", type=click.Path(path_type=Path), default=None,
              help="Input windows (.npy float [n, lookback], normalised). Default: BUILD_DIR/inputs.npy.")
@click.option("-n", "--count", type=click.IntRange(min=1), default=None, help="Run only the first N inputs.")
@_loss_options
@click.option("--loss-seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the loss pattern.")
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Seconds before one node's emulation is aborted.")
@click.option("--keep", "keep_dir", type=click.Path(path_type=Path), default=None,
              help="Keep every node's transcript, sent messages and serial log in this folder.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Nodes emulated at once (default: CPUs).")
@_friendly
def qemu_cmd(build_dir: Path, nodes: tuple[int, ...], inputs: Path | None, count: int | None, loss_q: float | None,
             loss_link: float, loss_receiver: float, loss_sender: float, loss_seed: int, timeout: float,
             keep_dir: Path | None, jobs: int | None) -> None:
    """Run nodes' whole schedules on an emulated Cortex-M4 (QEMU mps2-an386), bit-exact checked.

    Each node runs alone: its peers are replaced by a transcript of the messages it receives, which
    the numpy int8 reference records (with --loss*, exactly those that survive the sampled loss
    pattern). Every message the node sends and, for the sink, the forecast are compared byte for
    byte with the reference. Needs `cisl build BUILD_DIR --board qemu-m4`. Instruction counts per
    inference come from SysTick under -icount shift=0 (1 tick = 40 instructions).
    """
    import numpy as np

    from .plan.io import load_plan
    from .qemu import run_qemu

    plan = load_plan(build_dir)
    x = _input_windows(inputs)
    if x is None:
        x = np.load(Path(build_dir) / "inputs.npy")
    if count is not None:
        x = x[:count]
    rates = _loss_rates(loss_q, loss_link, loss_receiver, loss_sender)
    lost = None
    if rates.any:
        from .lossmodel import sample_rounds

        lost = sample_rounds(np.random.default_rng(loss_seed), len(plan.sgs), len(x), plan.devices, rates)
    results = run_qemu(build_dir, list(nodes) if nodes else None, x, lost, timeout, jobs, keep_dir)
    click.echo(f"{'node':>4} {'exit':>4} {'messages':>8} {'insns/inference':>16} {'stack (B)':>9}  result")
    for r in results:
        insns = sum(int(b.get("cycles", 0)) for b in r.blocks()) // max(len(x), 1)
        click.echo(f"{r.node:>4} {r.exit_code:>4} {r.messages_checked:>8} {insns:>16} {r.stack_used or 0:>9}  "
                   f"{'bit-exact' if r.ok else 'FAILED'}")
    bad = [r for r in results if not r.ok]
    click.echo(f"QEMU mps2-an386: {len(results) - len(bad)} of {len(results)} nodes bit-exact with the int8 reference "
               f"over {len(x)} inferences")
    if bad:
        raise CheckFailed(bad[0].first_difference or f"node {bad[0].node} failed")


@main.command(name="estimate")
@click.argument("build_dir", type=click.Path(path_type=Path), default=Path("build"), required=False)
@click.option("--topology", default=None,
              help="Radio topology for the Mixer rounds (default: what `cisl sim` picks for the node count).")
@click.option("--policy", type=click.Choice(["done", "fixed"]), default=None,
              help="Mixer round policy: cisl's early-terminating `done` or the published fixed 3G + 200 slots "
                   "(default: the plan's).")
@click.option("-n", "--inferences", type=click.IntRange(min=1), default=1, show_default=True,
              help="Input windows each node's image runs on the cycle model (averaged).")
@click.option("--radio-inferences", type=click.IntRange(min=1), default=4, show_default=True,
              help="Inferences of Mixer rounds simulated (min/mean/max of the air time).")
@click.option("--radio-seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of topology and channel.")
@click.option("--period-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Inference period for the idle energy (default: back to back, the latency).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole estimate as JSON instead of the table.")
@click.option("-o", "--out", "out_file", type=click.Path(path_type=Path), default=None,
              help="Also write the JSON to this file.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Nodes modelled at once (default: CPUs).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@_friendly
def estimate_cmd(build_dir: Path, topology: str | None, policy: str | None, inferences: int, radio_inferences: int,
                 radio_seed: int, period_ms: float | None, as_json: bool, out_file: Path | None, jobs: int | None,
                 quiet: bool) -> None:
    """Board time and energy of one inference of BUILD_DIR (an nrf52840dk or qemu-m4 build).

    Every node's real ARM image runs on the Cortex-M4 cycle model (TRM instruction timings plus the
    nRF52840's flash wait states and instruction cache, as ranges) and is checked bit-exact with the
    int8 reference; every Mixer round runs on the slot-level radio simulation; energy comes from
    the board's datasheet currents (board.toml [power]). Prints per node and block: cycles, compute
    ms, communication ms, energy; per inference: bulk-synchronous latency, the network's energy and
    the share of communication. Figures are central [low..high].
    """
    import json

    from tqdm import tqdm

    from .fsutil import check_output_file, json_with, write_output_file
    from .plan.io import load_plan
    from .timing.estimate import estimate, format_table

    check_output_file(out_file, json_with("images", "latency_ms", "nodes"))

    plan = load_plan(build_dir)
    with tqdm(total=plan.devices, desc="cycle model", unit="node", leave=False, disable=quiet or None) as bar:
        est = estimate(build_dir, topology, policy, inferences, radio_inferences, radio_seed, jobs, period_ms,
                       progress=bar.update)
    doc = est.to_json()
    if out_file is not None:
        write_output_file(out_file, json.dumps(doc, indent=1) + "\n", json_with("images", "latency_ms", "nodes"))
    click.echo(json.dumps(doc, indent=1) if as_json else format_table(est))


@main.command(name="fit")
@click.option("--board", default="nrf52840dk", show_default=True, help="Board whose flash and RAM bound every node.")
@click.option("--devices", type=click.IntRange(min=1), required=True, help="Number of nodes.")
@click.option("--heads", type=click.IntRange(min=1), default=16, show_default=True, help="Attention heads H.")
@click.option("--keep", "keep_ratio", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0, show_default=True,
              help="somegather keep ratio (fraction of its columns a node broadcasts).")
@click.option("--tokens", "token_grid", type=click.IntRange(1, 511), multiple=True,
              help="Token counts N to try (repeatable). Default: 16 24 32 48 64 96 128 192 256 384 511.")
@click.option("--layers", "layer_grid", type=click.IntRange(1, 64), multiple=True,
              help="Layer counts T to try (repeatable). Default: 1..12.")
@click.option("--no-build", is_flag=True, help="Estimate only: skip the confirming compile and build of every node.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random weights and masks.")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None, help="Also write the result here.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: CPUs).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@_friendly
def fit_cmd(board: str, devices: int, heads: int, keep_ratio: float, token_grid: tuple[int, ...],
            layer_grid: tuple[int, ...], no_build: bool, seed: int, json_out: Path | None, jobs: int | None, quiet: bool) -> None:
    """The largest model (dense-equivalent parameters) whose every node image fits the board.

    Searches F (multiples of H), N and T with the planner's estimate, then confirms the winner by
    compiling a random-weight model of that size for DEVICES nodes and building every node image
    (the paper's Fig. 5 in numbers; compare --devices 1).
    """
    import dataclasses
    import json

    from .boards import load_board
    from .fit import N_GRID, T_GRID, fit, format_result

    from .fsutil import check_output_file, json_with

    check_output_file(json_out, json_with("frontier", "devices"))
    r = fit(board, devices, heads, keep_ratio, seed, not no_build, tuple(token_grid) or N_GRID,
            tuple(layer_grid) or T_GRID, jobs=jobs, progress=_say(quiet))
    click.echo(format_result(r, load_board(board)))
    if json_out:
        doc = {"board": r.board, "devices": r.devices, "heads": r.heads, "keep": r.keep,
               "frontier": [dataclasses.asdict(c) for c in r.frontier],
               "best": dataclasses.asdict(r.best) if r.best else None, "confirm": r.tried}
        from .fsutil import json_with, write_output_file

        write_output_file(json_out, json.dumps(doc, indent=1) + "\n", json_with("frontier", "devices"))
    if r.best is None:
        raise CheckFailed(f"no model of the grid fits {board} with {devices} node(s)")


@main.command()
@click.argument("build_dir", type=click.Path(path_type=Path), default=Path("build"), required=False)
@click.option("--inputs", type=click.Path(path_type=Path), default=None,
              help="Input windows (.npy float [n, lookback], normalised). Default: BUILD_DIR/inputs.npy.")
@click.option("-n", "--count", type=click.IntRange(min=1), default=None, help="Run only the first N inputs.")
@click.option("--logs", type=click.Path(path_type=Path), default=None,
              help="Folder for the nodes' serial logs. Default: BUILD_DIR/logs.")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="Seconds before a stuck run is aborted.")
@_loss_options
@click.option("--loss-seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the loss pattern.")
@click.option("--medium", type=click.Choice(["radio", "message"]), default="radio", show_default=True,
              help="radio: nodes run Mixer over the slot-level radio channel; message: an ideal message-level "
                   "medium (lossless, or with --loss*).")
@click.option("--topology", "radio_topology", default=None, metavar="TOPOLOGY",
              help="Radio topology: full_mesh, line, grid, random_geometric, hallway, hallway16 "
                   "(default: the paper's 35 m hallway, hallway16 for 16 nodes; a mesh below 4 nodes).")
@click.option("--radio-seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the topology and channel.")
@click.option("--radio-dead", type=int, multiple=True, metavar="NODE",
              help="Radio medium: this node's radio is dead (repeatable); it computes but nothing gets through.")
@_friendly
def sim(build_dir: Path, inputs: Path | None, count: int | None, logs: Path | None, timeout: float,
        loss_q: float | None, loss_link: float, loss_receiver: float, loss_sender: float, loss_seed: int,
        medium: str, radio_topology: str | None, radio_seed: int, radio_dead: tuple[int, ...]) -> None:
    """Run every node of BUILD_DIR as its own process on the virtual testbed.

    A medium process carries the somegather messages; each node prints the serial log contract.
    Every message and the sink's forecast are compared with the numpy int8 reference; the first
    difference is named (inference, node, layer, tensor). With --loss*, the medium drops messages
    and the reference is run with exactly the same lost messages. Exit code 1 if not bit-exact.
    """
    rates = _loss_rates(loss_q, loss_link, loss_receiver, loss_sender)
    import numpy as np

    from .sim.runner import run_sim

    x = _input_windows(inputs)
    if count is not None:
        if x is None:
            x = np.load(Path(build_dir) / "inputs.npy") if (Path(build_dir) / "inputs.npy").is_file() else None
        if x is not None:
            x = x[:count]
    from .radio.topology import TOPOLOGIES, default_topology

    if medium == "message":
        if radio_topology is not None or radio_dead:
            raise UserError("--topology/--radio-dead are options of the radio medium; drop --medium message")
    else:
        if rates.any:
            raise UserError("--loss* drops messages on the message-level medium; add --medium message "
                            "(on the radio, loss comes from the channel: --topology, --radio-dead)")
        if radio_topology is not None and radio_topology not in TOPOLOGIES:
            raise UserError(f"--topology {radio_topology}: unknown; choose one of {', '.join(TOPOLOGIES)}")
        from .plan.io import load_plan

        radio_topology = radio_topology or default_topology(load_plan(build_dir).devices)
    r = run_sim(build_dir, x, logs, timeout, rates, loss_seed, radio_topology if medium == "radio" else None,
                radio_seed, list(radio_dead))
    _print_sim(r, build_dir, logs)
    if not r.ok:
        raise CheckFailed(r.first_difference or r.problems[0])


def _print_sim(r, build_dir: Path, logs: Path | None) -> None:
    click.echo(f"virtual testbed: {len(r.bytes_sent)} nodes, {r.inferences} inferences in {r.wall_seconds:.1f} s "
               f"(logs in {logs or Path(build_dir) / 'logs'})")
    for p in r.problems:
        click.echo(f"  problem: {p}")
    if r.radio_rounds:
        import numpy as np

        slots = [rr["slots"] for rr in r.radio_rounds]
        air = sum(rr["slots"] * rr["slot_us"] for rr in r.radio_rounds) / max(r.inferences, 1)
        fixed = sum(rr["deadline"] * rr["slot_us"] for rr in r.radio_rounds) / max(r.inferences, 1)
        click.echo(f"radio: {len(slots)} Mixer rounds, {np.mean(slots):.0f} slots on average (max {max(slots)}); "
                   f"air time {air / 1000:.1f} ms per inference vs {fixed / 1000:.1f} ms with fixed 3G+200 deadlines")
    if r.delivered != r.expected:
        click.echo(f"messages delivered: {r.delivered} of {r.expected} (reference run with the same losses)")
    click.echo(f"bit-exact with the int8 reference: {'yes' if r.bit_exact else 'NO'}")
    if r.first_difference:
        click.echo(f"  first difference: {r.first_difference}")


@main.command(name="eval")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Score the test split of this data set (same loader and split as `cisl train --data`). "
                   "Default: the test windows `cisl train` saved next to MODEL.")
@click.option("--split", "which", type=click.Choice(["test", "val"]), default="test", show_default=True,
              help="Which split of --data to score.")
@click.option("--int8", is_flag=True, help="Score the int8 deployment (bit-exact reference) instead of float.")
@click.option("--devices", type=click.IntRange(min=1), default=None,
              help="Node count to split for (default: as trained).")
@click.option("--calibration", type=click.Path(path_type=Path), default=None,
              help="Calibration windows for --int8 (default: calibration.npy next to MODEL).")
@_loss_options
@click.option("--sweep", default=None, metavar="Q1,Q2,...",
              help="Score at each of these loss probabilities (each applied to all three modes), e.g. "
                   "0,0.05,0.1,0.2: a table of MSE against loss (the paper's Fig. 8 for this model).")
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Number of loss samplings (seeds 0..N-1); the MSE is reported per seed and as mean/std.")
@click.option("--max-windows", type=click.IntRange(min=1), default=None,
              help="Score at most this many windows (evenly spaced).")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None, help="Also write the result here.")
@_friendly
def eval_cmd(model: Path, data: Path | None, which: str, int8: bool, devices: int | None, calibration: Path | None,
             loss_q: float | None, loss_link: float, loss_receiver: float, loss_sender: float, sweep: str | None,
             seeds: int, max_windows: int | None, json_out: Path | None) -> None:
    """Test MSE of MODEL (on the data's StandardScaler scale), float or int8, under sampled message loss.

    Losses follow the paper's three modes, drawn independently for every communication round and
    window; a lost message's columns contribute nothing, exactly as on the nodes.
    """
    import json

    import numpy as np
    from tqdm import tqdm

    from .evaluate import EvalSet, evaluate_sweep
    from .lossmodel import LossRates
    from .onnx_model import load_model

    rates = _loss_rates(loss_q, loss_link, loss_receiver, loss_sender)
    sweep_q = _sweep_values(sweep) if sweep is not None else None
    if sweep_q is not None and rates.any:
        raise UserError("--sweep sets the loss rates itself; drop --loss/--loss-link/--loss-receiver/--loss-sender")
    m = load_model(model)
    if data is not None:
        from .data.dataset import load_dataset

        splits = load_dataset(data, m.config, m.training.get("config", {}).get("data", {}).get("columns") or None)
        windows = splits.test if which == "test" else splits.val
        x, y = windows.take(np.arange(len(windows)))
        es = EvalSet.from_raw(x, y, m.config.revin)
    else:
        here = Path(model).parent
        try:
            es = EvalSet(np.load(here / "test_windows.npy"), np.load(here / "test_targets.npy"),
                         np.load(here / "test_scale.npy") if (here / "test_scale.npy").is_file()
                         else np.ones(len(np.load(here / "test_windows.npy")), np.float32))
        except FileNotFoundError as e:
            raise UserError(f"{e.filename}: not found; pass --data with the data set to score") from None
    if max_windows is not None and max_windows < len(es.x):
        pick = np.linspace(0, len(es.x) - 1, max_windows).round().astype(int)
        es = EvalSet(es.x[pick], es.y[pick], es.scale[pick])
    all_rates = [LossRates.uniform(q) for q in sweep_q] if sweep_q is not None else [rates]
    results = evaluate_sweep(m, es, int8, all_rates, range(seeds), devices, calibration,
                             progress=lambda it: tqdm(it, desc="eval", unit="batch", leave=False, disable=None))
    records = [{"mode": r.mode, "windows": len(es.x), "loss": vars(r.rates),
                "effective_link_loss": r.rates.effective_link_loss, "seeds": r.seeds, "mse": r.mse, "mean": r.mean,
                "std": r.std} for r in results]
    if sweep_q is None:
        r = results[0]
        click.echo(f"{r.mode} model, {len(es.x)} windows, loss link/receiver/sender = {rates.link}/{rates.receiver}/"
                   f"{rates.sender} (effective per-link loss {100 * rates.effective_link_loss:.1f} %)")
        for seed, mse in zip(r.seeds, r.mse):
            click.echo(f"  seed {seed}: MSE {mse:.5f}")
        click.echo(f"MSE {r.mean:.5f} +- {r.std:.5f}")
    else:
        base = results[0].mean if sweep_q[0] == 0.0 else None
        click.echo(f"{results[0].mode} model, {len(es.x)} windows, {seeds} seed(s); q applies to all three modes")
        click.echo(f"{'q':>6} {'link loss':>9} {'MSE':>9} {'+-':>8}" + (f" {'vs q = 0':>9}" if base else ""))
        for q, r in zip(sweep_q, results):
            click.echo(f"{100 * q:5.1f}% {100 * r.rates.effective_link_loss:8.1f}% {r.mean:9.5f} {r.std:8.5f}"
                       + (f" {100 * (r.mean - base) / base:+8.1f}%" if base else ""))
    if json_out:
        from .fsutil import write_output_file

        write_output_file(json_out, json.dumps(records[0] if sweep_q is None else {"sweep": records}, indent=1) + "\n",
                          lambda old: old.lstrip().startswith("{") and ('"sweep"' in old or '"mse' in old))


@main.group()
def radio() -> None:
    """The simulated radio: Mixer over slot-level channel models (codegen/radio)."""


@radio.command(name="loss")
@click.option("--topology", "topo", default="hallway16", show_default=True,
              help="full_mesh, line, grid, random_geometric, hallway or hallway16.")
@click.option("--nodes", type=click.IntRange(1, 32), default=None, help="Node count (not for hallway16).")
@click.option("--message-bytes", type=click.IntRange(min=1), default=336, show_default=True,
              help="Bytes every node sends per exchange (tokens x broadcast columns; see plan.json msg_bytes).")
@click.option("--exchanges", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--policy", type=click.Choice(["done", "fixed"]), default="done", show_default=True,
              help="Round length: end when all have full rank, or the fixed 3G+200 deadline.")
@click.option("--deadline", type=click.IntRange(min=1), default=None,
              help="Override the rounds' hard deadline in slots (tight deadlines trade loss for latency).")
@click.option("--exponent", type=click.FloatRange(min=1.0), default=None, help="Path-loss exponent (default 4.0).")
@click.option("--shadowing", type=click.FloatRange(min=0.0), default=None, help="Shadowing sigma in dB (default 4).")
@click.option("--burst", nargs=3, type=float, default=None, metavar="P_GB P_BG LOSS_BAD",
              help="Gilbert-Elliott bursty links: good->bad and bad->good transition probabilities per slot "
                   "and the loss probability in the bad state.")
@click.option("--fail-prob", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
              help="Probability that a node is down for a whole exchange (crash, reboot).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("-o", "--out", "out", type=click.Path(path_type=Path), default=None,
              help="Write the [dropout] section (TOML) for `cisl train` here.")
@_friendly
def radio_loss(topo: str, nodes: int | None, message_bytes: int, exchanges: int, policy: str, deadline: int | None,
               exponent: float | None, shadowing: float | None, burst, fail_prob: float, seed: int,
               out: Path | None) -> None:
    """Measure somegather's message loss over Mixer on a topology, split into the three loss modes.

    Prints (and with -o writes) the per-mode probabilities that `[dropout]` in a training config
    takes, so message dropout trains for the network the model will run on.
    """
    from tqdm import tqdm

    from .radio.physics import ChannelParams, GilbertElliott
    from .fsutil import check_output_file
    from .radio.lossstats import measure

    check_output_file(out, lambda old: old.startswith("# message loss measured by `cisl radio loss`"))
    from .radio.topology import TOPOLOGIES

    if topo not in TOPOLOGIES:
        raise UserError(f"--topology {topo}: unknown; choose one of {', '.join(TOPOLOGIES)}")
    if topo != "hallway16" and nodes is None:
        raise UserError(f"--topology {topo} needs --nodes")
    params = ChannelParams()
    if exponent is not None:
        params = params.replace(pl_exponent=exponent)
    if shadowing is not None:
        params = params.replace(shadowing_sigma_db=shadowing)
    if burst is not None:
        params = params.replace(burst=GilbertElliott(burst[0], burst[1], 0.0, burst[2]))
    try:
        s = measure(topo, nodes, message_bytes, exchanges, seed, policy, params, deadline, fail_prob,
                    progress=lambda it: tqdm(it, desc="exchanges", unit="ex", leave=False, disable=None))
    except ValueError as e:
        raise UserError(str(e)) from None
    click.echo(f"{s.topology}: {s.nodes} nodes, {s.exchanges} exchanges of {s.message_bytes} B per node, "
               f"policy {s.policy}; rounds {s.slots_mean:.0f} slots on average (99.9 %: {s.slots_p999:.0f}, "
               f"deadline {s.deadline})")
    click.echo(f"exchanges complete at every node: {100 * s.complete_fraction:.2f} %; lost messages "
               f"{100 * s.effective_link_loss:.3f} % (the three modes below give {100 * s.model_link_loss:.3f} %)")
    click.echo(s.toml().rstrip())
    if out is not None:
        from .fsutil import write_output_file

        write_output_file(out, s.toml(), lambda old: old.startswith("# message loss measured by `cisl radio loss`"))


@main.command()
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("cisl-demo"),
              show_default=True, help="Folder for every artifact of the demo.")
@click.option("--devices", type=click.IntRange(min=1), default=4, show_default=True, help="Number of nodes.")
@click.option("--epochs", type=click.IntRange(min=0), default=None, help="Training epochs (default: the demo's).")
@_friendly
def demo(out_dir: Path, devices: int, epochs: int | None) -> None:
    """The whole pipeline on built-in synthetic data: train, compile, build, run on the virtual testbed.

    Keeps model/ (model.onnx, calibration set), build/ (plan.json, generated C, images) and logs/
    under OUT and prints a short report.
    """
    from .demo import run_demo

    ok = run_demo(out_dir, devices, epochs, click.echo)
    if not ok:
        raise CheckFailed("the demo did not run bit-exact; see the report above")


# -- testbed host tools: flash boards (or the virtual testbed) and pull their serial logs ---------------


@main.group(name="testbed")
def testbed_group() -> None:
    """The testbed file (testbed.toml): which node is which board, probe and serial port.

    \b
      cisl testbed scan -o testbed.toml       draft one from the attached probes and ports
      cisl testbed sim --nodes 4 -o tb.toml   a virtual testbed (runner sim, pseudo-terminals)
      cisl testbed check testbed.toml         check a file, list its nodes
      cisl testbed stop --testbed tb.toml     end the virtual testbed's background supervisor
    """


def _write_new(out: Path, text: str, force: bool) -> None:
    if out.exists() and not force:
        raise UserError(f"{out}: exists; pass --force to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


@testbed_group.command(name="scan")
@click.option("-o", "--out", type=click.Path(path_type=Path), default=None,
              help="Write the draft here (default: print it).")
@click.option("--board", default="nrf52840dk", show_default=True, help="Board name for every node found.")
@click.option("--runner", type=click.Choice(["pyocd", "nrfutil", "nrfjprog"]), default=None,
              help="Flash runner for every node (default: nrfutil, else nrfjprog for J-Link probes; pyocd otherwise).")
@click.option("--baud", type=click.IntRange(min=1), default=115200, show_default=True, help="UART baud rate.")
@click.option("--force", is_flag=True, help="Overwrite OUT if it exists.")
@_friendly
def testbed_scan(out: Path | None, board: str, runner: str | None, baud: int, force: bool) -> None:
    """Draft a testbed file from the attached debug probes and serial ports.

    Probes come from pyocd (and `nrfutil device list --json` / `nrfjprog --ids` when installed),
    ports from pyserial; a probe and a port are paired only when they are the same USB device.
    What could not be matched is written as comments, never guessed.
    """
    from .testbed.scan import scan

    s = scan(board, runner, baud)
    if out is None:
        click.echo(s.text, nl=False)
    else:
        _write_new(out, s.text, force)
    click.echo(f"{s.matched} probe(s) paired with a port, {s.unmatched_probes} probe(s) without a port, "
               f"{s.unmatched_ports} port(s) without a probe" + (f" -> {out}" if out else ""), err=True)


@testbed_group.command(name="sim")
@click.option("--nodes", type=click.IntRange(1, 255), required=True, help="Number of virtual nodes.")
@click.option("-o", "--out", type=click.Path(path_type=Path), default=Path("testbed.toml"), show_default=True,
              help="The testbed file to write.")
@click.option("--topology", default=None, metavar="TOPOLOGY",
              help="Radio topology of the medium (default: as `cisl sim`, the hallway for the node count flashed).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the topology and channel.")
@click.option("--state", default=".cisl-testbed", show_default=True,
              help="State folder (relative to the file): ports, images, the supervisor's files.")
@click.option("--board", type=click.Choice(["sim", "qemu-m4"]), default="sim", show_default=True,
              help="sim: native node processes over the simulated radio; qemu-m4: every node on QEMU "
                   "mps2-an386 against the reference's transcript of what it receives.")
@click.option("--force", is_flag=True, help="Overwrite OUT if it exists.")
@_friendly
def testbed_sim(nodes: int, out: Path, topology: str | None, seed: int, state: str, board: str, force: bool) -> None:
    """Write a testbed file for the virtual testbed: runner sim, one pseudo-terminal port per node.

    `cisl flash BUILD --testbed OUT` then starts a background supervisor that gives every node
    process a pseudo-terminal as its UART; `cisl logs` reads them like boards. With --board qemu-m4
    the build must be compiled with --board qemu-m4; each node then runs on its own QEMU.
    """
    from .radio.topology import TOPOLOGIES
    from .testbed.simbed import sim_testbed_text

    if topology is not None and topology not in TOPOLOGIES:
        raise UserError(f"--topology {topology}: unknown; choose one of {', '.join(TOPOLOGIES)}")
    _write_new(out, sim_testbed_text(nodes, topology, seed, state, board), force)
    click.echo(f"virtual testbed of {nodes} nodes -> {out} (ports under {out.parent / state})")


@testbed_group.command(name="check")
@click.argument("testbed_file", type=click.Path(path_type=Path), default=Path("testbed.toml"), required=False)
@_friendly
def testbed_check(testbed_file: Path) -> None:
    """Check TESTBED_FILE and list its nodes (and whether its virtual testbed is running)."""
    from .testbed.config import load_testbed

    tb = load_testbed(testbed_file)
    click.echo(f"{'node':>4}  {'board':<12} {'runner':<9} {'probe':<14} {'baud':>7}  port")
    for n in tb.nodes:
        click.echo(f"{n.id:>4}  {n.board:<12} {n.runner:<9} {n.probe or '-':<14} {n.baud:>7}  {n.port}")
    for note in tb.notes:
        click.echo(f"note: {note}", err=True)
    if any(n.runner == "sim" for n in tb.nodes):
        from .testbed.simbed import running

        info = running(tb)
        click.echo(f"virtual testbed: {'running (supervisor pid ' + str(info['pid']) + ')' if info else 'not running'}")


@testbed_group.command(name="stop")
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=Path("testbed.toml"),
              show_default=True, help="The virtual testbed's file.")
@_friendly
def testbed_stop(testbed_file: Path) -> None:
    """End the virtual testbed's supervisor (its nodes, medium and pseudo-terminals with it)."""
    from .testbed.config import load_testbed
    from .testbed.simbed import stop

    pid = stop(load_testbed(testbed_file))
    click.echo(f"virtual testbed stopped (supervisor pid {pid})" if pid else "the virtual testbed was not running")


@main.command(name="flash")
@click.argument("build_dir", type=click.Path(path_type=Path), default=Path("build"), required=False)
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=Path("testbed.toml"),
              show_default=True, help="Testbed file: which board (probe serial number) runs which node.")
@click.option("--verify/--no-verify", default=True, show_default=True, help="Read every image back after programming.")
@click.option("--reset/--no-reset", default=True, show_default=True,
              help="Reset the nodes after flashing (virtual testbed: --no-reset keeps them halted until `cisl logs`).")
@click.option("--recover", is_flag=True,
              help="Unlock protected (APPROTECT) devices first: erases the whole chip, then programs it.")
@click.option("--allow-single-probe", is_flag=True,
              help="A node without a probe serial number may use the only attached probe.")
@click.option("--timeout", type=click.FloatRange(min=1), default=180.0, show_default=True,
              help="Seconds each tool call may take (per node and step).")
@click.option("-q", "--quiet", is_flag=True, help="No per-node progress.")
@_friendly
def flash_cmd(build_dir: Path, testbed_file: Path, verify: bool, reset: bool, recover: bool,
              allow_single_probe: bool, timeout: float, quiet: bool) -> None:
    """Flash every node of BUILD_DIR onto its board of the testbed, in parallel; verify and reset.

    Boards are chosen by their probe's serial number, never guessed. Runners: pyocd, nrfutil,
    nrfjprog, and sim (the virtual testbed: starts its background supervisor). A node that fails is
    reported as a flash error with the next step, the others still finish; exit code 1 if any failed.
    """
    from .testbed.config import load_testbed
    from .testbed.flash import flash_testbed

    tb = load_testbed(testbed_file)
    for note in tb.notes:
        click.echo(f"note: {note}", err=True)
    rep = flash_testbed(build_dir, tb, verify=verify, reset=reset, recover=recover,
                        allow_single_probe=allow_single_probe, timeout=timeout, say=_say(quiet))
    for r in rep.results:
        status = "ok" if r.ok else f"{r.stage.upper()} ERROR: {r.error}"
        click.echo(f"node {r.node:02d}  {r.runner:<8} {r.probe or '-':<14} {r.seconds:6.1f} s  {status}")
    failed = [r for r in rep.results if not r.ok]
    if failed:
        raise CheckFailed(f"{len(failed)} of {len(rep.results)} nodes failed to flash (first: node {failed[0].node}: "
                          f"{failed[0].error})")
    click.echo(f"flashed {len(rep.results)} nodes from {build_dir}" + (" and reset them" if reset else ""))


@main.command(name="logs")
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=Path("testbed.toml"),
              show_default=True, help="Testbed file: the nodes' serial ports and how to reset them.")
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("logs"), show_default=True,
              help="Folder for node_NN.log/.jsonl, merged.jsonl and summary.json.")
@click.option("-n", "--inferences", type=click.IntRange(min=1), default=None,
              help="Stop once every node printed this many `infer` lines (default: until every node prints `end`).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop after this many seconds (or once every node printed `end`).")
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Give up on nodes whose final line has not come after this many seconds.")
@click.option("--no-reset", is_flag=True, help="Only listen; do not reset the nodes after opening the ports.")
@click.option("--node", "node_ids", type=int, multiple=True, metavar="ID",
              help="Record only this node (repeatable; default: the nodes `cisl flash` programmed).")
@click.option("--open-timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds to wait for every port to open.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@_friendly
def logs_cmd(testbed_file: Path, out_dir: Path, inferences: int | None, duration: float | None, timeout: float,
             no_reset: bool, node_ids: tuple[int, ...], open_timeout: float, quiet: bool) -> None:
    """Record a run: open every node's serial port, reset the nodes, parse their log lines.

    The ports are opened before the reset, so boot lines are not lost. Writes OUT/node_NN.log (raw),
    OUT/node_NN.jsonl (records with host timestamps and the run's id), OUT/merged.jsonl (host-time
    order) and OUT/summary.json. A node whose final line (`end`, or the N-th `infer`) never came has
    failed: exit code 1, and the logs of the failed run go to OUT.failed/ when OUT holds a previous
    run's logs (they stay). OUT is replaced only if cisl wrote it and it holds nothing else.
    """
    from .testbed.config import load_testbed
    from .testbed.logs import run_logs

    if inferences is not None and duration is not None:
        raise UserError("--inferences and --duration: choose one way to stop")
    tb = load_testbed(testbed_file)
    r = run_logs(tb, out_dir, inferences=inferences, duration=duration, timeout=timeout, reset=not no_reset,
                 node_ids=list(node_ids) or None, open_timeout=open_timeout, say=_say(quiet))
    c = r.capture
    click.echo(f"{'node':>4} {'bytes':>8} {'lines':>6} {'records':>7} {'infer':>5} {'mean us':>9}  status")
    for k, n in sorted(c.nodes.items()):
        us = [int(x.fields["us"]) for x in n.records if x.event == "infer"]
        mean = f"{sum(us) / len(us):.0f}" if us else "-"
        status = "ok" + (" (end)" if n.ended else "") if n.failed is None else f"FAILED: {n.failed}"
        click.echo(f"{k:>4} {n.bytes:>8} {n.lines:>6} {len(n.records):>7} {n.infers:>5} {mean:>9}  {status}"
                   + (f" [port reopened {n.reopens}x]" if n.reopens else ""))
    click.echo(f"stopped: {c.stop_reason}; {sum(len(n.records) for n in c.nodes.values())} records in "
               f"{c.ended - c.started:.1f} s -> {r.out_dir}/merged.jsonl")
    if r.kept is not None:
        click.echo(f"the run failed: the previous logs in {r.kept} are kept; this run's logs are in {r.out_dir}")
    failed = [(k, n) for k, n in sorted(c.nodes.items()) if n.failed]
    if failed:
        raise CheckFailed(f"{len(failed)} of {len(c.nodes)} nodes did not finish (first: node {failed[0][0]}: "
                          f"{failed[0][1].failed})")


@main.command(name="report")
@click.argument("logs_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("report"), show_default=True,
              help="Folder for the CSV tables and PNG figures.")
@click.option("--build", "builds", type=click.Path(path_type=Path), multiple=True,
              help="A build folder (compile.json) for the per-node memory table (repeatable, one per run).")
@click.option("--no-plots", is_flag=True, help="Only the CSV tables.")
@click.option("--estimate", "estimates", type=click.Path(path_type=Path), multiple=True,
              help="The cycle model's prediction for a run (`cisl estimate BUILD -o EST.json`; repeatable, matched "
                   "to runs by node count): predicted next to measured per block.")
@click.option("--calibrate", is_flag=True,
              help="Fit the flash wait states from the boards' measured block cycles (needs --estimate).")
@_friendly
def report_cmd(logs_dirs: tuple[Path, ...], out_dir: Path, builds: tuple[Path, ...], no_plots: bool,
               estimates: tuple[Path, ...], calibrate: bool) -> None:
    """Latency, speedup, memory, delivery and forecast tables (CSV) and figures (PNG) from LOGS_DIRS.

    Each LOGS_DIR is a folder of `cisl logs` (or `cisl sim --logs`). Give several to compare node
    counts (e.g. logs-1/ logs-4/ logs-16/); with a 1-node run, speedup over central execution.
    """
    from .testbed.report import make_report

    r = make_report(list(logs_dirs), out_dir, list(builds), plots=not no_plots, estimates=list(estimates),
                    calibrate=calibrate)
    for b in r.block_latency:
        pred = (f", predicted {b['predicted_latency_us'] / 1000:.3f} ms ({b['latency_error_pct']:+.2f} %)"
                if b["predicted_latency_us"] != "" else "")
        click.echo(f"{b['run']}: {b['block']:<6} latency {b['latency_us'] / 1000:.3f} ms = slowest compute "
                   f"{b['slowest_compute_us'] / 1000:.3f} + communication {b['comm_us'] / 1000:.3f} "
                   f"[{b['clock']} time]{pred}")
    by_run: dict[str, list[dict]] = {}
    for e in r.energy:
        by_run.setdefault(e["run"], []).append(e)
    for run, rows in by_run.items():
        total = sum(e["total_uj"] for e in rows)
        radio = sum(e["radio_uj"] for e in rows)
        src = ("radio from --estimate" if all(e["radio_source"] == "estimate" for e in rows)
               else "CPU only: add --estimate for the radio")
        pred = [e["predicted_total_uj"] for e in rows if e["predicted_total_uj"] != ""]
        click.echo(f"{run}: energy per inference of the network {total:,.1f} uJ ({src}; radio {radio:,.1f} uJ)"
                   + (f", predicted {sum(pred):,.1f} uJ" if len(pred) == len(rows) else ""))
    for c in r.calibration:
        click.echo(f"{c['run']}: fitted flash wait states {c['flash_wait']} (board.toml range {c['model_range']}), "
                   f"{c['points']} node blocks, model error mean {c['mean_error_pct']} % / max "
                   f"{c['max_error_pct']} %; put it in board.toml [timing] flash_wait")
    for s in r.speedup:
        click.echo(f"{s['run']}: {s['nodes']} nodes, {s['infer_us'] / 1000:.1f} ms per inference at the sink "
                   f"(compute {s['compute_us'] / 1000:.1f} ms, communication {s['comm_us'] / 1000:.1f} ms)"
                   + (f", speedup {s['speedup']}x" if s["speedup"] != "" else ""))
    for note in r.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"{len(r.files)} files -> {out_dir}: " + ", ".join(f.name for f in r.files))



if __name__ == "__main__":
    main()
