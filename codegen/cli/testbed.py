"""Testbed host tools: the testbed file, flash the boards (or the virtual testbed), pull their serial
logs, report on them."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import CheckFailed, UserError
from .app import main
from .options import FiniteRange, build_dir_argument, say
from .options import mode_limits as parse_mode_limits
from .options import mode_requests as parse_mode_requests
from ..testbed.config import MAX_SEED, MAX_SIM_INFERENCES


@main.group(name="testbed")
def testbed_group() -> None:
    """The testbed file (testbed.toml): which node is which board, probe and serial port.

    \b
      cisl testbed scan -o testbed.toml       draft one from the attached probes and ports
      cisl testbed sim --nodes 4 -o tb.toml   a virtual testbed (runner sim, pseudo-terminals)
      cisl testbed check testbed.toml         check a file, list its nodes
      cisl testbed stop --testbed tb.toml     end the virtual testbed's background supervisor
    """


@testbed_group.command(name="scan")
@click.option("-o", "--out", type=click.Path(path_type=Path), default=None,
              help="Write the draft here (default: print it).")
@click.option("-b", "--board", default="nrf52840dk", show_default=True, help="Board name for every node found.")
@click.option("-r", "--runner", type=click.Choice(["pyocd", "nrfutil", "nrfjprog"]), default=None,
              help="Flash runner for every node (default: nrfutil, else nrfjprog for J-Link probes; pyocd otherwise).")
@click.option("--baud", type=click.IntRange(min=1, max=1_000_000), default=115200, show_default=True,
              help="UART baud rate (the nRF52840's UARTE goes up to 1000000).")
@click.option("--force", is_flag=True, help="Overwrite OUT if it exists.")
def testbed_scan(out: Path | None, board: str, runner: str | None, baud: int, force: bool) -> None:
    """Draft a testbed file from the attached debug probes and serial ports.

    Probes come from pyocd (and `nrfutil device list --json` / `nrfjprog --ids` when installed),
    ports from pyserial; a probe and a port are paired only when they are the same USB device.
    What could not be matched is written as comments, never guessed.
    """
    from ..boards import available_boards
    from ..config_schema import check_choice
    from ..fsutil import write_new_file
    from ..testbed.config import DEFAULT_STATE, VIRTUAL_BOARDS, free_state
    from ..testbed.scan import scan

    # a typo drafts a file every later command refuses; virtual boards have no probes to scan
    if board in VIRTUAL_BOARDS:
        raise UserError(f"--board {board}: a virtual board has no debug probe to scan; write its testbed file with "
                        f"`cisl testbed sim --nodes N`, or scan for a real board (e.g. --board nrf52840dk)")
    check_choice("--board:", "board", board, [b for b in available_boards() if b not in VIRTUAL_BOARDS])
    s = scan(board, runner, baud, free_state(out) if out is not None else DEFAULT_STATE)
    if s.matched + s.unmatched_probes + s.unmatched_ports == 0:  # a draft of nothing is only the template
        notes = "".join(f"; {n}" for n in s.notes)
        raise UserError("no debug probe or serial port found: connect the boards (and check USB permissions / "
                        f"udev rules){notes}; nothing written (docs/usage.md shows a testbed file to write by hand)")
    if out is None:
        click.echo(s.text, nl=False)
    else:
        write_new_file(out, s.text, force)
    click.echo(f"{s.matched} probe(s) paired with a port, {s.unmatched_probes} probe(s) without a port, "
               f"{s.unmatched_ports} port(s) without a probe" + (f" -> {out}" if out else ""), err=True)
    if not s.matched:
        click.echo("the draft has no usable node yet: give each probe its port (and an id), uncomment it, then "
                   "`cisl testbed check`", err=True)


@testbed_group.command(name="sim")
@click.option("--nodes", type=click.IntRange(1, 255), required=True, help="Number of virtual nodes.")
@click.option("-o", "--out", type=click.Path(path_type=Path), default=Path("testbed.toml"), show_default=True,
              help="The testbed file to write.")
@click.option("--topology", default=None, metavar="TOPOLOGY",
              help="Radio topology of the medium (default: `cisl sim`'s for N nodes: the hallway, a full mesh below 4 nodes; fixed when the file is written).")
@click.option("--seed", type=click.IntRange(min=0, max=MAX_SEED), default=0, show_default=True,
              help="Seed of the topology and channel.")
@click.option("--state", default=None,
              help="State folder (relative to the file): ports, images, the supervisor's files.  [default: "
                   ".cisl-testbed, or .cisl-testbed-NAME when another testbed file next to OUT uses that]")
@click.option("-b", "--board", type=click.Choice(["sim", "qemu-m4"]), default="sim", show_default=True,
              help="sim: native node processes over the simulated radio; qemu-m4: every node on QEMU "
                   "mps2-an386 against the reference's transcript of what it receives.")
@click.option("--models", default=None, metavar="BOARDS",
              help="The boards the virtual nodes stand in for, e.g. nrf52840dk*8,nrf52833dk*8 (a mixed testbed: "
                   "each node gets that board's flash, RAM, cycles and power). Default: nrf52840dk for all.")
@click.option("--inferences", type=click.IntRange(min=1, max=MAX_SIM_INFERENCES), default=None,
              help="Run this many inferences, inference i on the build's input window i mod count ([sim] inferences; "
                   "default: each window once).")
@click.option("--force", is_flag=True, help="Overwrite OUT if it exists.")
def testbed_sim(nodes: int, out: Path, topology: str | None, seed: int, state: str | None, board: str, models: str | None,
                inferences: int | None, force: bool) -> None:
    """Write a testbed file for the virtual testbed: runner sim, one pseudo-terminal port per node.

    `cisl flash BUILD --testbed OUT` then starts a background supervisor that gives every node
    process a pseudo-terminal as its UART; `cisl logs` reads them like boards. With --board qemu-m4
    the build must be compiled with --board qemu-m4; each node then runs on its own QEMU.
    """
    from ..testbed.config import free_state, parse_board_list
    from ..vtestbed.bed import write_sim_testbed

    if state is not None and not state.strip():
        raise click.BadParameter("give a folder path (relative to the testbed file), e.g. --state .cisl-testbed",
                                 param_hint="--state")
    state = state if state is not None else free_state(out)
    write_sim_testbed(out, nodes, topology, seed, state, board, force,
                      parse_board_list(models) if models else None, inferences)
    click.echo(f"virtual testbed of {nodes} nodes -> {out} (ports under {out.parent / state})")


@testbed_group.command(name="check")
@click.argument("testbed_file", type=click.Path(path_type=Path), default=Path("testbed.toml"), required=False)
def testbed_check(testbed_file: Path) -> None:
    """Check TESTBED_FILE and list its nodes (and whether its virtual testbed is running)."""
    from ..testbed.config import check_state_claim, load_testbed

    tb = load_testbed(testbed_file)
    check_state_claim(tb)  # a state folder another testbed file uses is this file's mistake too
    click.echo(f"{'node':>4}  {'board':<12} {'is/models':<12} {'runner':<9} {'probe':<14} {'baud':>7}  {'energy':<16} port")
    for n in tb.nodes:
        energy = f"{n.energy_source}" + (f" {n.energy_uj:g} uJ" if n.energy_uj is not None else "")
        click.echo(f"{n.id:>4}  {n.board:<12} {n.hardware:<12} {n.runner:<9} {n.probe or '-':<14} {n.baud:>7}  "
                   f"{energy:<16} {n.port}")
    for note in tb.notes:
        click.echo(f"note: {note}", err=True)
    if any(n.runner == "sim" for n in tb.nodes):
        from ..vtestbed.bed import running

        info = running(tb)
        click.echo(f"virtual testbed: {'running (supervisor pid ' + str(info['pid']) + ')' if info else 'not running'}")


@testbed_group.command(name="stop")
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=Path("testbed.toml"),
              show_default=True, help="The virtual testbed's file.")
def testbed_stop(testbed_file: Path) -> None:
    """End the virtual testbed's supervisor (its nodes, medium and pseudo-terminals with it)."""
    from ..testbed.config import load_testbed
    from ..vtestbed.bed import stop

    pid = stop(load_testbed(testbed_file))
    click.echo(f"virtual testbed stopped (supervisor pid {pid})" if pid else "the virtual testbed was not running")


@main.command(name="flash")
@build_dir_argument
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=Path("testbed.toml"),
              show_default=True, help="Testbed file: which board (probe serial number) runs which node.")
@click.option("-r", "--runner", type=click.Choice(["pyocd", "nrfutil", "nrfjprog"]), default=None,
              help="Flash every board with this runner instead of the testbed file's (not for the virtual testbed).")
@click.option("--verify/--no-verify", default=True, show_default=True, help="Read every image back after programming.")
@click.option("--reset/--no-reset", default=True, show_default=True,
              help="Reset the nodes after flashing (virtual testbed: --no-reset keeps them halted until `cisl logs`).")
@click.option("--recover", is_flag=True,
              help="Unlock protected (APPROTECT) devices first: erases the whole chip, then programs it.")
@click.option("--allow-single-probe", is_flag=True,
              help="A node without a probe serial number may use the only attached probe.")
@click.option("--timeout", type=FiniteRange(min=1), default=180.0, show_default=True,
              help="Seconds each tool call may take (per node and step).")
@click.option("-q", "--quiet", is_flag=True, help="No per-node progress.")
def flash_cmd(build_dir: Path, testbed_file: Path, runner: str | None, verify: bool, reset: bool, recover: bool,
              allow_single_probe: bool, timeout: float, quiet: bool) -> None:
    """Flash every node of BUILD_DIR onto its board of the testbed, in parallel; verify and reset.

    Boards are chosen by their probe's serial number, never guessed. Runners: pyocd, nrfutil,
    nrfjprog, and sim (the virtual testbed: starts its background supervisor). A node that fails is
    reported as a flash error with the next step, the others still finish; exit code 1 if any failed.
    """
    from ..testbed.config import load_testbed, with_runner
    from ..testbed.flash import flash_testbed

    tb = with_runner(load_testbed(testbed_file), runner)
    for note in tb.notes:
        click.echo(f"note: {note}", err=True)
    rep = flash_testbed(build_dir, tb, verify=verify, reset=reset, recover=recover,
                        allow_single_probe=allow_single_probe, timeout=timeout, say=say(quiet))
    for r in rep.results:
        status = "ok" if r.ok else f"{r.stage.upper()} ERROR: {r.error}"
        click.echo(f"node {r.node:02d}  {r.runner:<8} {r.probe or '-':<14} {r.seconds:6.1f} s  {status}")
    flashed = {r.node for r in rep.results}
    idle = [n.id for n in tb.nodes if n.id not in flashed and n.runner != "sim"]
    if idle:  # the virtual testbed stops such nodes; boards go on running whatever they ran before
        one = len(idle) == 1
        click.echo(f"note: testbed node{'' if one else 's'} {', '.join(map(str, idle))} "
                   f"{'is' if one else 'are'} not in this build and {'runs' if one else 'run'} what "
                   f"{'it' if one else 'they'} ran before: an older cisl image sends on the same radio channel; "
                   "power such boards off or erase them", err=True)
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
@click.option("--duration", type=FiniteRange(min=0, min_open=True), default=None,
              help="Stop after this many seconds (or once every node printed `end`).")
@click.option("--timeout", type=FiniteRange(min=1), default=300.0, show_default=True,
              help="Give up on nodes whose final line has not come after this many seconds.")
@click.option("--no-reset", is_flag=True, help="Only listen; do not reset the nodes after opening the ports.")
@click.option("--node", "node_ids", type=int, multiple=True, metavar="ID",
              help="Record only this node (repeatable; default: the nodes `cisl flash` programmed). Every node of "
                   "the flashed build is still reset: the run is the whole build's.")
@click.option("--open-timeout", type=FiniteRange(min=0.1), default=10.0, show_default=True,
              help="Seconds to wait for every port to open.")
@click.option("--mode-request", "mode_requests", multiple=True, metavar="INF:NODE:MODE",
              help="Elastic images: write `mode MODE` on NODE's serial line once it has printed inference INF-1 "
                   "(its boot line for 0); every node switches together, one or two inferences later (repeatable).")
@click.option("--mode-limits", "mode_limits", multiple=True, metavar="INF:NODE:MS:UJ:MSE",
              help="Elastic images: write `limits` on NODE's serial line (as --mode-request): from then on the node "
                   "picks the best mode within a deadline (ms), an energy per inference (uJ) and a validation MSE, "
                   "'-' for none (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def logs_cmd(testbed_file: Path, out_dir: Path, inferences: int | None, duration: float | None, timeout: float,
             no_reset: bool, node_ids: tuple[int, ...], open_timeout: float, mode_requests: tuple[str, ...],
             mode_limits: tuple[str, ...], quiet: bool) -> None:
    """Record a run: open every node's serial port, reset the nodes, parse their log lines.

    The ports are opened before the reset, so boot lines are not lost. Writes OUT/node_NN.log (raw),
    OUT/node_NN.jsonl (records with host timestamps and the run's id), OUT/merged.jsonl (host-time
    order) and OUT/summary.json. A node whose final line (`end`, or the N-th `infer`) never came has
    failed: exit code 1, and the logs of the failed run go to OUT.failed/ when OUT holds a previous
    run's logs (they stay). OUT is replaced only if cisl wrote it and it holds nothing else.

    --mode-request and --mode-limits are host commands written on a node's serial line during the
    run (docs/serial-contract.md); a command the node did not carry out fails that node.
    """
    from ..modes import NO_LIMIT
    from ..testbed.capture import HostCommand
    from ..testbed.config import load_testbed
    from ..testbed.logs import incomplete_status, run_logs

    if inferences is not None and duration is not None:
        raise UserError("--inferences and --duration: choose one way to stop")
    commands = [HostCommand(node, inf, f"mode {mode}") for inf, node, mode in parse_mode_requests(mode_requests)]
    commands += [HostCommand(node, inf, "limits " + " ".join("-" if v == NO_LIMIT else str(v) for v in vals))
                 for inf, node, *vals in parse_mode_limits(mode_limits)]
    if commands and no_reset:
        raise UserError("--mode-request/--mode-limits need the run from its start: leave out --no-reset")
    late = [c for c in commands if inferences is not None and c.before >= inferences]
    if late:
        raise UserError(f"a host command for inference {late[0].before} ({late[0].text!r}): -n {inferences} records "
                        f"inferences 0 to {inferences - 1}; send it earlier")
    tb = load_testbed(testbed_file)
    if commands:  # before the run, not after it: a mode the flashed images do not hold
        _check_mode_commands(tb, [mode for _, _, mode in parse_mode_requests(mode_requests)], bool(mode_limits),
                             testbed_file)
    r = run_logs(tb, out_dir, inferences=inferences, duration=duration, timeout=timeout, reset=not no_reset,
                 node_ids=list(node_ids) or None, open_timeout=open_timeout, say=say(quiet), commands=commands)
    c = r.capture
    # a planned split: testbed node k runs another plan node (the node id in its lines and in merged.jsonl)
    split = any(n.prints not in (None, k) for k, n in c.nodes.items())
    click.echo((f"{'node':>4} {'plan':>4} " if split else f"{'node':>4} ")
               + f"{'bytes':>8} {'lines':>6} {'records':>7} {'infer':>5} {'mean us':>9}  status")
    for k, n in sorted(c.nodes.items()):
        us = [int(x.fields["us"]) for x in n.records if x.event == "infer"]
        mean = f"{sum(us) / len(us):.0f}" if us else "-"
        status = ("ok" + (" (end)" if n.ended else "") if n.failed is None else f"FAILED: {n.failed}") + \
            incomplete_status(n)
        ids = f"{k:>4} {n.prints if n.prints is not None else k:>4} " if split else f"{k:>4} "
        click.echo(f"{ids}{n.bytes:>8} {n.lines:>6} {len(n.records):>7} {n.infers:>5} {mean:>9}  {status}"
                   + (f" [port reopened {n.reopens}x]" if n.reopens else ""))
    for cmd in c.commands:
        when = f"taken before inference {cmd.answered_inf}" if cmd.answered_inf is not None else "not taken"
        click.echo(f"host command to node {cmd.node} ({cmd.text!r}, cue: inference {cmd.before}): "
                   f"{cmd.answer or 'no answer'}, {when}")
    click.echo(f"stopped: {c.stop_reason}; {sum(len(n.records) for n in c.nodes.values())} records in "
               f"{c.ended - c.started:.1f} s -> {r.out_dir}/merged.jsonl")
    for note in r.notes:
        click.echo(f"note: {note}", err=True)
    if r.kept is not None:
        click.echo(f"the run failed: the previous logs in {r.kept} are kept; this run's logs are in {r.out_dir}")
    failed = [(k, n) for k, n in sorted(c.nodes.items()) if n.failed]
    if failed:
        raise CheckFailed(f"{len(failed)} of {len(c.nodes)} nodes failed (first: node {failed[0][0]}: "
                          f"{failed[0][1].failed})")


def _check_mode_commands(tb, modes: list[int], limits: bool, testbed_file: Path) -> None:
    from ..modes import load_plan, no_table_problem
    from ..testbed.flash import flashed_modes

    known = flashed_modes(tb)
    if known is None:
        return
    build, count = known
    if count == 1:
        raise UserError(f"--mode-request/--mode-limits: the images flashed from {build} hold no elastic modes; "
                        "flash a build of an elastic model compiled without --mode (every mode in the image)")
    beyond = [m for m in modes if m >= count]
    if beyond:
        raise UserError(f"--mode-request ...:{beyond[0]}: the images flashed from {build} hold modes 0 to {count - 1}")
    # the selector of an image without the table `cisl modes` puts in would answer `limits` ok and ignore them
    if limits and (problem := no_table_problem(build, load_plan(build))):
        raise UserError(f"{problem}, then flash them again (`cisl flash {build} --testbed {testbed_file}`)")


@main.command(name="report")
@click.argument("logs_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("report"), show_default=True,
              help="Folder for the CSV tables and PNG figures.")
@click.option("--build", "builds", type=click.Path(path_type=Path), multiple=True,
              help="A build folder (compile.json) for the per-node memory table (repeatable, one per run).")
@click.option("--no-plots", is_flag=True, help="Only the CSV tables.")
@click.option("--estimate", "estimates", type=click.Path(path_type=Path), multiple=True,
              help="The cycle model's prediction for a run (`cisl estimate BUILD -o EST.json`; repeatable, matched "
                   "to runs by the plan their boot lines name): predicted next to measured per block.")
@click.option("--calibrate", is_flag=True,
              help="Fit the flash wait states from the boards' measured block cycles (needs --estimate).")
def report_cmd(logs_dirs: tuple[Path, ...], out_dir: Path, builds: tuple[Path, ...], no_plots: bool,
               estimates: tuple[Path, ...], calibrate: bool) -> None:
    """Latency, speedup, memory, delivery and forecast tables (CSV) and figures (PNG) from LOGS_DIRS.

    Each LOGS_DIR is a folder of `cisl logs` (or `cisl sim --logs`). Give several to compare node
    counts (e.g. logs-1/ logs-4/ logs-16/); with a 1-node run, speedup over central execution.
    """
    from ..testbed import boardtime_report as BT
    from ..testbed.report import make_report

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
        sources = {e["radio_source"] for e in rows}
        src = ("radio from the nodes' radio-on times" if sources == {"log"}
               else "radio from --estimate" if sources == {"estimate"}
               else "CPU only: add --estimate for the radio" if sources == {"none"}
               else "radio from " + " and ".join(sorted(sources - {"none"})) + " (some nodes CPU only)")
        pred = [e["predicted_total_uj"] for e in rows if e["predicted_total_uj"] != ""]
        click.echo(f"{run}: energy per inference of the network {total:,.1f} uJ ({src}; radio {radio:,.1f} uJ)"
                   + (f", predicted {sum(pred):,.1f} uJ" if len(pred) == len(rows) else ""))
    for c in r.calibration:
        fit = (f"{c['run']}: fitted flash wait states {c['flash_wait']} (board.toml range {c['model_range']}), "
               f"{c['points']} node blocks, model error mean {c['mean_error_pct']} % / max {c['max_error_pct']} %; ")
        if c["in_range"] == "yes" and c["mean_error_pct"] > BT.FIT_ERROR_PCT:
            # a wait-state setting in range that still leaves the cycles unexplained is no setting either
            click.echo(fit + f"in range, but the model still misses the measured cycles by more than "
                       f"{BT.FIT_ERROR_PCT:g} % on average, so no setting for board.toml: the wait states are not "
                       "what the model gets wrong (the cycles are of other images, or stalls the model lacks)")
        elif c["in_range"] == "yes":
            click.echo(fit + "put it in board.toml [timing] flash_wait")
        elif c["in_range"] == "no":  # no wait-state setting of the part explains these cycles: never advise it
            lo, hi = min(c["model_range"]), max(c["model_range"])
            click.echo(fit + f"outside the board's range {lo:g}..{hi:g}, so no setting for board.toml: the model's "
                       "flash accesses do not explain the measured cycles (far outside: the cycles are not of the "
                       "images estimated, or counted at another clock; just outside: stalls the model lacks)")
        else:
            click.echo(fit + "the estimate names no board range to check it against: write it again with "
                       "`cisl estimate`")
    for s in r.speedup:
        click.echo(f"{s['run']}: {s['nodes']} nodes, {s['infer_us'] / 1000:.1f} ms per inference at the sink "
                   f"(compute {s['compute_us'] / 1000:.1f} ms, communication {s['comm_us'] / 1000:.1f} ms)"
                   + (f", speedup {s['speedup']}x" if s["speedup"] != "" else ""))
    for line in r.left_out:
        click.echo(line)
    for note in r.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"{len(r.files)} files -> {out_dir}: " + ", ".join(f.name for f in r.files))
