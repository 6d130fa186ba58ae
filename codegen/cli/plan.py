"""`cisl profile` and `cisl plan`: heterogeneous testbeds (docs/design/heterogeneous.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .app import main
from .options import FiniteRange, say


@main.command(name="profile")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), default=None,
              help="Profile every node of this testbed file (its boards, energy sources and budgets, positions).")
@click.option("-b", "--board", default=None, help="Profile one node of this board instead of a testbed.")
@click.option("--logs", "logs_dir", type=click.Path(path_type=Path), default=None,
              help="Rates from real boards instead: a `cisl logs` folder of a --build made with "
                   "`cisl build --profile-ops` (its `op` lines, DWT cycles).")
@click.option("--build", "build_dir", type=click.Path(path_type=Path), default=None,
              help="The build the --logs ran (for the ops' shapes).")
@click.option("-o", "--out", "out_file", type=click.Path(path_type=Path), default=Path("profile.json"),
              show_default=True, help="The profile to write.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel jobs (default: CPUs).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def profile_cmd(model: Path, testbed_file: Path | None, board: str | None, logs_dir: Path | None,
                build_dir: Path | None, out_file: Path, jobs: int | None, quiet: bool) -> None:
    """What every node can do, for `cisl plan`: cycles per unit of work of every op class (a
    reference build of MODEL's shapes on each board, run on the cycle model), free flash and RAM,
    CPU and radio currents, energy budget.

    MODEL is a model.onnx or a training config (.toml): only its shapes matter.
    """
    from ..fsutil import check_output_file, json_format
    from ..planner.plan import model_shape
    from ..planner.profile import FORMAT, make_profile, write_profile

    from ..errors import UserError

    check_output_file(out_file, json_format(FORMAT))
    if (logs_dir is None) != (build_dir is None):
        raise UserError("--logs and --build go together: the logs of a run of that build")
    shape = model_shape(model)
    prof = make_profile(shape.cfg, testbed_file, board, jobs, say(quiet),
                        (build_dir, logs_dir) if logs_dir is not None else None)
    write_profile(out_file, prof)
    for name, bp in sorted(prof.boards.items()):
        fc = bp.rates.get("fc")
        click.echo(f"{name}: {len(bp.rates)} op classes from the {prof.meta['rates'][name]}"
                   + (f", fc {fc.per_unit:.2f} cycles/MAC + {fc.per_out:.1f} per output + {fc.per_op:.0f} per call"
                      if fc else ""))
    click.echo(f"profiled {len(prof.nodes)} node(s) -> {out_file}")


@main.command(name="plan")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--testbed", "testbed_file", type=click.Path(path_type=Path), required=True,
              help="The testbed file: its nodes, boards and energy budgets (energy_uj).")
@click.option("--profile", "profile_file", type=click.Path(path_type=Path), default=Path("profile.json"),
              show_default=True, help="The testbed's profile (`cisl profile MODEL --testbed T`).")
@click.option("--deadline", "deadline_ms", type=FiniteRange(min=0, min_open=True), default=None,
              help="Latency per inference, ms.")
@click.option("--objective", type=click.Choice(["energy", "latency"]), default=None,
              help="Minimise the network's energy per inference (within --deadline) or the latency.  "
                   "[default: energy with --deadline, latency without]")
@click.option("--without", default=None, metavar="IDS", help="Nodes to leave out, e.g. 3,7 (dead or reserved).")
@click.option("-o", "--out", "out_file", type=click.Path(path_type=Path), default=Path("split.json"),
              show_default=True, help="The split file to write (`cisl compile --split` reads it).")
@click.option("--all-nodes", is_flag=True,
              help="Every node (but --without's) takes part: re-plan around dead nodes keeping the survivors busy.")
@click.option("--compare", is_flag=True, help="Also evaluate the even, speed-proportional and CoEdge splits.")
@click.option("--search-seconds", type=FiniteRange(min=0), default=60.0, show_default=True,  # POLISH_SECONDS
              help="Time for the search after the MILP (shares swapped and moved between nodes, each step "
                   "evaluated exactly); 0 skips it. Big models on many nodes use all of it.")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None, help="Also write the result here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def plan_cmd(model: Path, testbed_file: Path, profile_file: Path, deadline_ms: float | None, objective: str | None,
             without: str | None, out_file: Path, all_nodes: bool, compare: bool, search_seconds: float,
             json_out: Path | None, quiet: bool) -> None:
    """Choose each node's heads and hidden units (or leave it out) to meet --deadline at least energy.

    Without --deadline the plan is the fastest one (energy breaks ties).

    An exact mixed-integer program (scipy.optimize.milp, HiGHS) over the profiled nodes' shares:
    per block the slowest node's compute plus the Mixer rounds of the nodes taking part, every
    node's flash and RAM (the footprint model) and energy budget. The plan is re-checked exactly
    (structure, footprint, cycles, simulated Mixer rounds) before it is written.
    """
    from ..errors import UserError
    from ..fsutil import check_output_file, json_format, json_with, write_output_file
    from ..planner import split
    from ..planner.plan import format_plan, make_plan, parse_without, write_plan_file

    if json_out is not None and json_out.resolve() == out_file.resolve():  # one would overwrite the other
        raise UserError(f"-o and --json both name {json_out}: the split and the plan report are different files; "
                        "give --json another file")
    check_output_file(out_file, json_format(split.FORMAT))
    check_output_file(json_out, json_with("plan"), "--json")  # both before the work
    if objective is None:  # the least energy needs a deadline to stay within (else one node does everything)
        objective = "energy" if deadline_ms is not None else "latency"
    r = make_plan(model, testbed_file, profile_file, deadline_ms, objective, parse_without(without), say=say(quiet),
                  all_nodes=all_nodes, search_seconds=search_seconds)
    write_plan_file(out_file, r)
    click.echo(format_plan(r))
    for n in r.notes:
        click.echo(f"note: {n}", err=True)
    doc = {"plan": r.split.to_json()}
    if compare:  # every candidate was evaluated over as many simulated inferences as the written plan
        every = len(r.problem.nodes)
        w = max(16, len(r.solution.method) + 1)  # a polished plan's name: "milp + 1 swap and 2 moves"

        def row(name: str, ev) -> str:
            written = "  (written)" if ev is r.evaluation else ""
            meets = (f"no: {ev.violations[0]}" if ev.violations else
                     f"no: uses {len(ev.node_ids)} of the {every} nodes (--all-nodes)"
                     if all_nodes and len(ev.node_ids) < every else "yes")
            return (f"{name:<{w}} {len(ev.node_ids):>5} {ev.latency_ms:>11.2f} {ev.energy_total_uj:>11.1f}  "
                    + meets + written)

        click.echo(f"{'split':<{w}} {'nodes':>5} {'latency ms':>11} {'energy uJ':>11}  meets the constraints")
        click.echo(row("milp", r.milp) if r.milp is not None else f"{'milp':<{w}} {'-':>5} {'-':>11} {'-':>11}  no plan")
        doc["baselines"] = {}
        shown = [r.milp]
        for name, (sol, mc, ev) in r.baselines.items():
            if ev is None:  # (the solver's own message is HiGHS's status text: the status says it)
                click.echo(f"{name:<{w}} {'-':>5} {'-':>11} {'-':>11}  no solution ({sol.status})")
                doc["baselines"][name] = None
                continue
            click.echo(row(name, ev))
            shown.append(ev)
            doc["baselines"][name] = ev.to_json()
        if not any(ev is r.evaluation for ev in shown):  # polished, repaired, or a loosened MILP's: its own row
            click.echo(row(r.solution.method, r.evaluation))
    if json_out:
        write_output_file(json_out, json.dumps(doc, indent=1) + "\n", json_with("plan"))
    click.echo(f"split of {len(r.split.nodes)} nodes -> {out_file}")
