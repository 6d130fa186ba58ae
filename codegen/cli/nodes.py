"""Node image commands: build, qemu, estimate, sim."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import CheckFailed
from .app import main
from .options import FiniteRange, build_dir_argument, loss_options, loss_rates, say
from .options import mode_limits as parse_mode_limits
from .options import mode_requests as parse_mode_requests


@main.command(name="build")
@build_dir_argument
@click.option("-b", "--board", default=None, help="Board to build for (default: the board the plan was compiled for).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: CPUs).")
@click.option("--node", "nodes", type=click.IntRange(min=0), multiple=True,
              help="Build only this node (repeatable). Default: every node.")
@click.option("--board-time/--no-board-time", default=True, show_default=True,
              help="sim and qemu-m4 plans: also model the plan's ARM images so the virtual testbed's nodes "
                   "print nRF52840 time.")
@click.option("--profile-ops", is_flag=True,
              help="Every op prints its CPU cycles (`op inf= i= cycles=` lines: DWT on boards, the board time "
                   "table's on the virtual testbed) for `cisl profile --logs`; slower images, for profiling runs only.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def build_cmd(build_dir: Path, board: str | None, jobs: int | None, nodes: tuple[int, ...], profile_ops: bool,
              quiet: bool, board_time: bool) -> None:
    """Compile every node in BUILD_DIR into a firmware image (node_NN/firmware.elf), in parallel.

    Uses upstream CMSIS-NN when CMSIS_NN_ROOT points at a checkout, else the bundled nnref.
    Warnings are errors. For boards with a memory budget (nrf52840dk, nrf52833dk, qemu-m4) every node's flash
    and RAM are read from its ELF and printed next to the planner's estimate (node_NN/size.json);
    a node that does not fit fails the build. --board qemu-m4 also builds a plan compiled for
    nrf52840dk (same code and flags); its images go to node_NN/qemu-m4/.

    For a sim plan (the virtual testbed) the plan's ARM images are built too, when the ARM
    toolchain is installed, and run on the nRF52840 cycle model: node_NN/board_time.txt then makes
    the sim nodes print nRF52840 time (--no-board-time: host time, a faster build). A qemu-m4 plan's
    images get the same table, so its nodes on the virtual testbed print nRF52840 time too
    (--no-board-time: QEMU instruction counts).
    """
    from ..timing.boardtime import build_with_board_time

    s, board_time_line = build_with_board_time(build_dir, board, jobs, say(quiet), list(nodes) if nodes else None,
                                               board_time, profile_ops)
    where = f"{build_dir}/node_NN/" + ("" if s["board"] == s["plan_board"] else f"{s['board']}/")
    click.echo(f"built {len(s['nodes'])} node images for {s['board']} with {s['kernels']} -> {where}")
    if board_time_line is not None:
        click.echo(board_time_line)


@main.command(name="qemu")
@build_dir_argument
@click.option("--node", "nodes", type=click.IntRange(min=0), multiple=True,
              help="Run this node (repeatable). Default: every node.")
@click.option("--inputs", type=click.Path(path_type=Path), default=None,
              help="Input windows (.npy float [n, lookback], normalised). Default: BUILD_DIR/inputs.npy.")
@click.option("-n", "--count", type=click.IntRange(min=1), default=None, help="Run only the first N inputs.")
@loss_options
@click.option("--loss-seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the loss pattern.")
@click.option("--timeout", type=FiniteRange(min=1), default=300.0, show_default=True,
              help="Seconds before one node's emulation is stopped; that node fails, the others run on.")
@click.option("--keep", "keep_dir", type=click.Path(path_type=Path), default=None,
              help="Keep every node's transcript, sent messages and serial log in this folder: new, empty or an "
                   "earlier --keep's, replaced whole at the end of the run (an error or Ctrl-C leaves it as it was; a node "
                   "stopped by --timeout fails, and its log so far is kept).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Nodes emulated at once (default: CPUs).")
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
    from ..qemu import check_on_qemu

    run = check_on_qemu(build_dir, list(nodes) if nodes else None, inputs, count,
                        loss_rates(loss_q, loss_link, loss_receiver, loss_sender), loss_seed, timeout, jobs, keep_dir)
    results = run.results
    # the block lines' instructions (communication and the runtime between blocks taken out), not the
    # whole inference's: `cisl estimate`'s insns_per_inference counts those too (~1.5 % more)
    click.echo(f"{'node':>4} {'exit':>4} {'messages':>8} {'block insns/inference':>21} {'stack (B)':>9}  result")
    for r in results:
        insns = sum(int(b.get("cycles", 0)) for b in r.blocks()) // max(run.inferences, 1)
        click.echo(f"{r.node:>4} {r.exit_code:>4} {r.messages_checked:>8} {insns:>21} {r.stack_used or 0:>9}  "
                   f"{'bit-exact' if r.ok else 'FAILED: ' + (r.first_difference or 'see its log')}")
    bad = [r for r in results if not r.ok]
    click.echo(f"QEMU mps2-an386: {len(results) - len(bad)} of {len(results)} nodes bit-exact with the int8 reference "
               f"over {run.inferences} inferences")
    if bad:
        raise CheckFailed(bad[0].first_difference or f"node {bad[0].node} failed")


@main.command(name="estimate")
@build_dir_argument
@click.option("--topology", default=None,
              help="Radio topology for the Mixer rounds (default: what `cisl sim` picks for the node count).")
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=None,
              help="Price the Mixer rounds where this testbed file puts the nodes: the virtual testbed's layout, "
                   "the boards' positions; a planned split's nodes where `cisl plan` placed them.")
@click.option("--policy", type=click.Choice(["done", "fixed"]), default=None,
              help="Mixer round policy: cisl's early-terminating `done` or the published fixed 3G + 200 slots "
                   "(default: the plan's).")
@click.option("-n", "--inferences", type=click.IntRange(min=1), default=1, show_default=True,
              help="Input windows each node's image runs on the cycle model (averaged).")
@click.option("--radio-inferences", type=click.IntRange(min=1), default=4, show_default=True,
              help="Inferences of Mixer rounds simulated (min/mean/max of the air time).")
@click.option("--radio-seed", type=click.IntRange(min=0), default=None,
              help="Seed of topology and channel  [default: the testbed's [sim] seed, else 0]")
@click.option("--period-ms", type=FiniteRange(min=0, max=86_400_000, min_open=True), default=None,
              help="Inference period for the idle energy (default: back to back, the latency).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole estimate as JSON instead of the table.")
@click.option("-o", "--out", "out_file", type=click.Path(path_type=Path), default=None,
              help="Also write the JSON to this file.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Nodes modelled at once (default: CPUs).")
@click.option("--mode", type=click.IntRange(min=0), default=None,
              help="A build holding every elastic mode: estimate this mode (default 0).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def estimate_cmd(build_dir: Path, topology: str | None, testbed_file: Path | None, policy: str | None, inferences: int,
                 radio_inferences: int, radio_seed: int | None, period_ms: float | None, as_json: bool,
                 out_file: Path | None, jobs: int | None, mode: int | None, quiet: bool) -> None:
    """Board time and energy of one inference of BUILD_DIR (an nrf52840dk or qemu-m4 build, or a sim
    build whose ARM images `cisl build` made).

    Every node's real ARM image runs on the Cortex-M4 cycle model (TRM instruction timings plus the
    nRF52840's flash wait states and instruction cache, as ranges) and is checked bit-exact with the
    int8 reference; every Mixer round runs on the slot-level radio simulation; energy comes from
    the board's datasheet currents (board.toml [power]); --testbed places the nodes as that testbed
    does (a planned split: where `cisl plan` priced them). Prints per node and block: cycles, compute
    ms, communication ms, energy; per inference: bulk-synchronous latency, the network's energy and
    the share of communication. Figures are central [low..high].
    """
    import json

    from tqdm import tqdm

    from ..timing.estimate import format_table, run_estimate

    est = run_estimate(build_dir, topology, policy, inferences, radio_inferences, radio_seed, jobs, period_ms,
                       out_file, progress_bar=lambda total: tqdm(total=total, desc="cycle model", unit="node",
                                                                 leave=False, disable=quiet or None), mode=mode,
                       testbed=testbed_file, say=lambda line: click.echo(line, err=True))
    click.echo(json.dumps(est.to_json(), indent=1) if as_json else format_table(est))


@main.command()
@build_dir_argument
@click.option("--inputs", type=click.Path(path_type=Path), default=None,
              help="Input windows (.npy float [n, lookback], normalised). Default: BUILD_DIR/inputs.npy.")
@click.option("-n", "--count", type=click.IntRange(min=1), default=None, help="Run only the first N inputs.")
@click.option("--logs", type=click.Path(path_type=Path), default=None,
              help="Folder for the nodes' serial logs. Default: BUILD_DIR/logs.")
@click.option("--timeout", type=FiniteRange(min=1), default=120.0, show_default=True,
              help="Seconds before a stuck run is aborted.")
@loss_options
@click.option("--loss-seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the loss pattern.")
@click.option("--medium", type=click.Choice(["radio", "message"]), default="radio", show_default=True,
              help="radio: nodes run Mixer over the slot-level radio channel; message: an ideal message-level "
                   "medium (lossless, or with --loss*).")
@click.option("--topology", "radio_topology", default=None, metavar="TOPOLOGY",
              help="Radio topology: full_mesh, line, grid, random_geometric, hallway, hallway16 "
                   "(default: the paper's 35 m hallway, hallway16 for 16 nodes; a mesh below 4 nodes).")
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=None,
              help="Radio medium: the nodes where this testbed file puts them (its virtual testbed's layout, the "
                   "boards' positions; a planned split's nodes where `cisl plan` placed them).")
@click.option("--radio-seed", type=click.IntRange(min=0), default=None,
              help="Seed of the topology and channel  [default: the testbed's [sim] seed, else 0]")
@click.option("--radio-dead", type=int, multiple=True, metavar="NODE",
              help="Radio medium: this node's radio is dead (repeatable); it computes but nothing gets through.")
@click.option("--mode-request", "mode_requests", multiple=True, metavar="INF:NODE:MODE",
              help="An image with every elastic mode: NODE's host asks for MODE just before inference INF "
                   "(repeatable); every node switches together and each inference is checked in its mode.")
@click.option("--mode-limits", "mode_limits", multiple=True, metavar="INF:NODE:MS:UJ:MSE",
              help="From inference INF on, NODE (the sink, 0, as a rule) picks the best mode within a deadline "
                   "(ms), an energy per inference (uJ) and a validation MSE, '-' for none, from the table "
                   "`cisl modes` put into the images (repeatable).")
def sim(build_dir: Path, inputs: Path | None, count: int | None, logs: Path | None, timeout: float,
        loss_q: float | None, loss_link: float, loss_receiver: float, loss_sender: float, loss_seed: int,
        medium: str, radio_topology: str | None, testbed_file: Path | None, radio_seed: int | None,
        radio_dead: tuple[int, ...], mode_requests: tuple[str, ...], mode_limits: tuple[str, ...]) -> None:
    """Run every node of BUILD_DIR as its own process on the virtual testbed.

    A medium process carries the somegather messages; each node prints the serial log contract.
    Every message and the sink's forecast are compared with the numpy int8 reference; the first
    difference is named (inference, node, layer, tensor). With --loss*, the medium drops messages
    and the reference is run with exactly the same lost messages. Exit code 1 if not bit-exact.
    """
    from ..vtestbed.run import simulate

    asks, limits = parse_mode_requests(mode_requests), parse_mode_limits(mode_limits)
    r = simulate(build_dir, inputs, count, logs, timeout, loss_rates(loss_q, loss_link, loss_receiver, loss_sender),
                 loss_seed, medium, radio_topology, radio_seed, list(radio_dead), asks, limits, testbed_file)
    _print_sim(r, build_dir, logs)
    if limits:
        from ..modes import limits_conflict

        if conflict := limits_conflict(build_dir, limits):
            click.echo(f"note: {conflict}", err=True)
    if medium == "radio" and radio_topology is None and testbed_file is None:
        from ..plan.io import load_plan
        from ..timing.estimate import testbed_hint

        if hint := testbed_hint(load_plan(build_dir), build_dir, "ran", "run"):
            click.echo(hint, err=True)
    if count is not None and r.inferences < count:
        click.echo(f"note: -n {count}, but the inputs hold {r.inferences} window(s): ran {r.inferences} "
                   "(give more with --inputs)", err=True)
    if not r.ok:
        if r.kept is not None:
            click.echo(f"the run failed: the previous logs in {r.kept} are kept; this run's logs are in "
                       f"{r.logs_dir}", err=True)
        raise CheckFailed(r.first_difference or r.problems[0])


def _print_sim(r, build_dir: Path, logs: Path | None) -> None:
    ran = f"{r.inferences}" if r.completed >= r.inferences else f"{r.completed} of {r.inferences}"
    click.echo(f"virtual testbed: {len(r.bytes_sent)} nodes, {ran} inferences in {r.wall_seconds:.1f} s "
               f"(logs in {r.logs_dir or logs or Path(build_dir) / 'logs'})")
    for p in r.problems:
        click.echo(f"  problem: {p}")
    if r.radio_rounds:
        import numpy as np

        slots = [rr["slots"] for rr in r.radio_rounds]
        air, fixed = r.air_us("slots"), r.air_us("deadline")  # per inference that ran, not per one asked for
        click.echo(f"radio: {len(slots)} Mixer rounds, {np.mean(slots):.0f} slots on average (max {max(slots)}); "
                   f"air time {air / 1000:.1f} ms per inference vs {fixed / 1000:.1f} ms with fixed 3G+200 deadlines")
    if r.delivered != r.expected:
        click.echo(f"messages delivered: {r.delivered} of {r.expected} (reference run with the same losses)")
    from ..serial_contract import peer_summary

    for line in peer_summary(r.records, r.radio_dead):  # the run knows which radio it killed
        click.echo(f"peers: {line}")
    switches = sorted({(int(x.fields["inf"]), int(x.fields["mode"])) for x in r.records
                       if x.event == "mode" and x.fields.get("state") == "switch"})
    if switches:
        click.echo("modes: " + ", ".join(f"mode {m} from inference {i}" for i, m in switches)
                   + " (every inference checked against its mode's reference)")
    click.echo(f"bit-exact with the int8 reference: {'yes' if r.bit_exact else 'NO'}")
    if r.first_difference:
        click.echo(f"  first difference: {r.first_difference}")


@main.command(name="modes")
@build_dir_argument
@click.option("--deadline", "deadline_ms", type=FiniteRange(min=0), default=None, metavar="MS",
              help="Latest end of one inference (ms, the timing model's central estimate).")
@click.option("--energy", "energy_uj", type=FiniteRange(min=0), default=None, metavar="UJ",
              help="Largest energy of one inference, every node together (uJ).")
@click.option("--max-mse", type=FiniteRange(min=0), default=None, help="Largest validation MSE.")
@click.option("--profile", is_flag=True, help="Profile again even if BUILD_DIR/modes.json is this plan's.")
@click.option("--topology", default=None, metavar="TOPOLOGY",
              help="Radio topology of the profile (default: the plan's, as `cisl estimate`); a modes.json of another "
                   "topology is profiled again.")
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=None,
              help="Profile the Mixer rounds where this testbed file puts the nodes (as `cisl estimate --testbed`); "
                   "a modes.json of another layout is profiled again.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Nodes modelled at once (default: CPUs).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def modes_cmd(build_dir: Path, deadline_ms: float | None, energy_uj: float | None, max_mse: float | None,
              profile: bool, topology: str | None, testbed_file: Path | None, jobs: int | None, quiet: bool) -> None:
    """Every elastic mode of BUILD_DIR (a build holding every mode) and the one to run under limits.

    The first call (or --profile) runs each mode on the timing model — the real node images on the
    cycle model, the mode's Mixer rounds on the radio simulation — writes BUILD_DIR/modes.json and
    builds the node images again with the table in them (node_NN/cisl_mode_table.h), so that a
    node given limits (cisl sim --mode-limits) picks the mode this command names; later calls read
    the table. With --deadline, --energy and/or --max-mse it names the mode with the
    lowest validation MSE within every limit (the rule the node's cisl_mode_select applies), or
    exits with code 1 if no mode meets them.
    """
    from tqdm import tqdm

    from .. import modes as M
    from ..fsutil import output_lock
    from ..timing.estimate import layout_key, radio_of

    radio, seed = radio_of(M.load_plan(build_dir), topology, testbed_file)
    seed = seed or 0
    key = topology if testbed_file is None else layout_key(radio, seed)  # what modes.json says it was profiled on
    table = None if profile else M.read_table(build_dir, key)
    if table is None:
        plan_modes = (M.load_plan(build_dir).meta.get("elastic") or {}).get("modes", 0)
        with output_lock(build_dir):  # it writes modes.json and rebuilds the images: no other run of the folder meanwhile
            with tqdm(total=plan_modes, desc="profile modes", unit="mode", leave=False,
                      disable=quiet or None) as bar:
                table = M.profile_modes(build_dir, radio, seed=seed, jobs=jobs, progress=bar.update)
            path = M.write_table(build_dir, table, key)
            M.put_table_in_images(build_dir, table, say(quiet))
        if not quiet:
            click.echo(f"profiled {len(table)} modes -> {path}; the node images now hold the table "
                       f"(node_NN/cisl_mode_table.h) for their on-node selector")
    elif M.images_without_table(build_dir, M.load_plan(build_dir)):  # an earlier run stopped before it put the table in
        with output_lock(build_dir):
            M.put_table_in_images(build_dir, table, say(quiet))
        if not quiet:
            click.echo(f"the node images lacked the table of {M.TABLE} (an earlier `cisl modes` stopped before it put "
                       f"it in): they hold it now (node_NN/cisl_mode_table.h)")
    limits = [x is not None for x in (deadline_ms, energy_uj, max_mse)]
    chosen = None
    if any(limits):
        chosen = M.select_mode([(p.latency_us, p.energy_nj, p.mse_u) for p in table],
                               M.to_micro(deadline_ms / 1e3) if deadline_ms is not None else M.NO_LIMIT,
                               M.to_micro(energy_uj / 1e3) if energy_uj is not None else M.NO_LIMIT,
                               M.to_micro(max_mse) if max_mse is not None else M.NO_LIMIT)
    click.echo(M.format_table(table, chosen))
    if not quiet:
        sw = M.switch_cycles(build_dir)
        click.echo("switching from mode 0 (node 0, cycle model): " + ", ".join(
            f"mode {m} +{c - sw[0]:,.0f} cycles" for m, c in enumerate(sw) if m) + "; no weights are copied")
    if any(limits):
        if chosen < 0:  # the best each given limit can have, so the user sees which one to relax
            best = [f"fastest: mode {min(table, key=lambda p: p.latency_us).mode}" if deadline_ms is not None else "",
                    f"lowest energy: mode {min(table, key=lambda p: p.energy_nj).mode}" if energy_uj is not None else "",
                    f"lowest MSE: mode {min(table, key=lambda p: p.mse_u).mode}" if max_mse is not None else ""]
            raise CheckFailed(f"no mode meets the limits ({', '.join(b for b in best if b)})")
        click.echo(f"mode {chosen}")
