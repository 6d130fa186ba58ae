"""Benchmark (issue 17): the heterogeneous planner against the even split, MoDNN's speed-proportional
split and CoEdge's method, on three mixed 16-node testbeds and two models.

Testbeds (virtual, `cisl testbed sim --nodes 16` on hallway16's positions):

* ``memory``: 8 × nRF52840 + 8 × nRF52833, alternating along the hallway;
* ``energy``: 16 × nRF52840, every third node (5 of them) on a small harvest budget per inference;
* ``far``: 16 × nRF52840, node 15 moved 30 m further down the hallway.

Models (random weights; only shapes matter to the plan and bit-exactness):

* ``fits``: F = 128, H = 16, 2 layers, N = 16 tokens: an even split fits every node;
* ``nofit``: F = 512, H = 16, 5 layers, N = 8: 7.9 M parameters, an even split gives every node
  ~0.5 MB of weights, more than an nRF52833 holds.

For each testbed and model: the node profiles (`cisl profile`: the cycle model on a reference build
per board), the fastest plan (MILP, --objective latency), then at one deadline (``--slack`` × the
fastest) the MILP's least-energy plan and the three baselines, each evaluated exactly (structure,
footprint, profiled cycles, the firmware's Mixer rounds simulated on the testbed's positions).
Every plan that meets its constraints is then compiled (once for the virtual testbed, once for the
nodes' own boards), linked for each node's own board (the footprint confirmed by the linker) and
run on the virtual testbed, bit-exact against the int8 reference. Writes
docs/results/heterogeneous.md (and .json).

Relays: each MILP plan is also evaluated with every left-out node as its only relay (in every
Mixer round, computing nothing) and with all of them relaying, to show whether the planner loses
anything by not offering relays.

The virtual testbed's runs play the radio medium (Mixer, slot by slot) on the testbed's own
positions of the nodes taking part, the far node's distance included.

With ``--trained`` the nofit model is also planned from its training config, trained (small) for
that split (`cisl train --split`), compiled for both boards, linked, run bit-exact and estimated
with `cisl estimate --testbed` (its rounds at the planned nodes' positions) against its deadline.

    python bench/heterogeneous.py [--slack 1.5] [--only memory-nofit ...] [--no-run] [--trained]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from codegen.modelspec import ModelConfig
from codegen.planner.costs import Evaluation
from codegen.planner.problem import Assignment, build_problem, exact, model_cost
from codegen.planner.profile import Profile, measure_board, node_profile
from codegen.planner.plan import polish, solve_checked
from codegen.planner.solve import coedge_plan, even_plan, proportional_plan, solve_milp
from codegen.planner.split import SplitFile, write_split
from codegen.radio.topology import topology
from codegen.randmodel import config_for_tokens, make_model_dir

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "heterogeneous"
OUT = ROOT / "docs" / "results"
HARVEST_UJ = {"fits": 9000.0, "nofit": 60000.0}  # the small budget of the energy testbed's harvest nodes

MODELS = {
    "fits": config_for_tokens(16, 128, heads=16, layers=2, horizon=24),
    "nofit": config_for_tokens(8, 512, heads=16, layers=5, horizon=24),
}


def testbeds(model: str) -> dict[str, list[tuple[str, tuple[float, float], float | None]]]:
    pos = [tuple(float(v) for v in p) for p in topology("hallway16", None, 0).positions]
    mem = [("nrf52840dk" if k % 2 == 0 else "nrf52833dk", pos[k], None) for k in range(16)]
    energy = [("nrf52840dk", pos[k], HARVEST_UJ[model] if k % 3 == 2 else None) for k in range(16)]
    far = [("nrf52840dk", (pos[k][0] + (30.0 if k == 15 else 0.0), pos[k][1]), None) for k in range(16)]
    return {"memory": mem, "energy": energy, "far": far}


def make_profile(cfg: ModelConfig, nodes, boards_cache: dict, work: Path, say) -> Profile:
    boards = {}
    for b in sorted({n[0] for n in nodes}):
        if b not in boards_cache:
            t0 = time.perf_counter()
            boards_cache[b] = measure_board(cfg, b, work / f"ref-{b}", say=say)
            say(f"  profiled {b} in {time.perf_counter() - t0:.0f} s")
        boards[b] = boards_cache[b]
    nps = [node_profile(k, b, "harvest" if e else "battery", e, p) for k, (b, p, e) in enumerate(nodes)]
    return Profile(cfg, boards, nps, None, 0)


def run_plan(cfg, profile: Profile, a: Assignment, model_dir: Path, work: Path, label: str, say) -> dict:
    """Compile the plan for the virtual testbed and for the nodes' boards, link, run bit-exact."""
    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from codegen.vtestbed.run import run_sim

    part = a.taking_part
    sf = SplitFile(cfg, 1.0, [profile.nodes[k].id for k in part], [profile.nodes[k].board for k in part],
                   [a.heads[k] for k in part], [a.hidden[k] for k in part], {"bench": label})
    d = work / label.replace(" + ", "-")  # "milp + polish": a folder name without spaces
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    write_split(d / "split.json", sf)
    out: dict = {}
    t0 = time.perf_counter()
    hw_board = sf.boards[0]
    compile_model(model_dir / "model.onnx", d / "hw", CompileOptions(board=hw_board, split=d / "split.json"))
    try:
        s = build(d / "hw")
        out["linked"] = True
        out["flash"] = [n["flash"] for n in s["nodes"]]
        out["ram"] = [n["ram"] for n in s["nodes"]]
    except Exception as e:  # a node that does not fit its board: the linker says so
        out["linked"] = False
        out["link_error"] = str(e).splitlines()[0]
    compile_model(model_dir / "model.onnx", d / "sim", CompileOptions(board="sim", split=d / "split.json"))
    build(d / "sim")
    # the radio medium on the testbed's own positions of the nodes taking part (plan order)
    positions = [list(profile.nodes[k].position)[:2] for k in part]
    r = run_sim(d / "sim", timeout=600, radio="positions" if len(part) > 1 else None,
                radio_positions=positions if len(part) > 1 else None)
    out["bit_exact"] = bool(r.bit_exact)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    say(f"  {label}: linked {out['linked']}, bit-exact {out['bit_exact']} ({out['seconds']} s)")
    shutil.rmtree(d / "hw" / "_obj", ignore_errors=True)
    shutil.rmtree(d / "sim" / "_obj", ignore_errors=True)
    return out


def one(testbed: str, model: str, args, say) -> dict:
    cache = WORK / "results" / f"{testbed}-{model}-s{args.slack}.json"
    if cache.is_file() and not args.force:
        return json.loads(cache.read_text())
    cfg = MODELS[model]
    work = WORK / f"{testbed}-{model}"
    work.mkdir(parents=True, exist_ok=True)
    bc = args.board_cache.setdefault(model, {})
    prof = make_profile(cfg, testbeds(model)[testbed], bc, WORK / f"profile-{model}", say)
    t0 = time.perf_counter()
    p = build_problem(prof, cfg, [n.id for n in prof.nodes], 1.0, True, say=say)
    build_s = time.perf_counter() - t0
    fast = solve_milp(p, None, "latency", energy_limits=True)
    if fast.assignment is None:
        fast = solve_milp(p, None, "latency", energy_limits=False)
    fastest = exact(p, fast.assignment)
    deadline = round(args.slack * fastest.latency_ms, 1)
    row: dict = {"testbed": testbed, "model": model, "deadline_ms": deadline, "fastest_ms": fastest.latency_ms,
                 "fastest_nodes": len(fastest.node_ids), "tables_seconds": round(build_s, 2), "methods": {}}
    milp, milp_ev = solve_checked(p, deadline, "energy")  # re-checked exactly, tightened where the model was optimistic
    # what `cisl plan` then writes: the shares swapped and moved between nodes where that is better exactly
    polished, _, _ = polish(p, milp, milp_ev, deadline, "energy", say=say)
    polish_row = {"milp + polish": polished} if polished.assignment != milp.assignment else {}
    sols = {"milp": milp, **polish_row, "even": even_plan(p), "proportional": proportional_plan(p),
            "coedge": coedge_plan(p, deadline)}
    model_dir = WORK / f"model-{model}"
    if not (model_dir / "model.onnx").is_file():
        make_model_dir(model_dir, cfg, 16, 1.0, seed=1, calibration=16, tests=8, rescale=True)
    for name, sol in sols.items():
        entry: dict = {"status": sol.status, "solve_seconds": round(sol.seconds, 3)}
        if sol.assignment is not None:
            ev: Evaluation = exact(p, sol.assignment, deadline)
            mc = model_cost(p, sol.assignment, deadline)
            entry.update({"nodes": len(ev.node_ids), "latency_ms": ev.latency_ms, "energy_uj": ev.energy_total_uj,
                          "model_latency_ms": mc.latency_ms, "model_energy_uj": mc.energy_uj,
                          "violations": ev.violations, "heads": ev.heads, "hidden": ev.hidden,
                          "node_ids": ev.node_ids, "max_flash": max(ev.flash), "max_ram": max(ev.ram)})
            if not args.no_run:
                entry["run"] = run_plan(cfg, prof, sol.assignment, model_dir, work, name, say)
        else:
            entry["message"] = sol.message
        row["methods"][name] = entry
    if milp.assignment is not None:
        row["relays"] = relay_study(p, milp.assignment, deadline, say)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(row, indent=1))
    return row


METHODS = ("milp", "milp + polish", "even", "proportional", "coedge")


def written(row: dict) -> str:
    """The method whose plan `cisl plan` writes for this row (the baselines aside)."""
    return "milp + polish" if "milp + polish" in row["methods"] else "milp"


def relay_study(p, a: Assignment, deadline: float, say) -> dict:
    """What relays (nodes in every Mixer round that compute nothing) would change for the MILP plan:
    every left-out node as the only relay, and all of them together, evaluated exactly (the rounds
    simulated with the relays on their positions; each relay pays the rounds' radio and CPU)."""
    base = exact(p, a, deadline)
    out_nodes = [p.nodes[k] for k in range(len(p.nodes)) if k not in a.taking_part]
    trials = [[k] for k in out_nodes] + ([out_nodes] if len(out_nodes) > 1 else [])
    rows = []
    for relays in trials:
        ev = exact(p, a, deadline, relays=relays)
        rows.append({"relays": relays, "latency_ms": ev.latency_ms, "energy_uj": ev.energy_total_uj,
                     "relay_energy_uj": ev.relay_energy_uj, "violations": ev.violations})
    say(f"  relays: {len(trials)} variants, fastest {min(r['latency_ms'] for r in rows):.1f} ms "
        f"(plan {base.latency_ms:.1f} ms)" if rows else "  relays: every node takes part")
    return {"plan_latency_ms": base.latency_ms, "plan_energy_uj": base.energy_total_uj, "trials": rows}


def trained(args, say) -> dict:
    """The must-show chain on the memory testbed: the nofit model trained (small: synthetic data, one
    epoch), planned, compiled for both boards, linked, run bit-exact on the virtual testbed, and its
    latency from `cisl estimate` (the cycle model of every node's image) against the deadline."""
    import subprocess
    import sys

    cache = WORK / "results" / f"trained-s{args.slack}.json"
    if cache.is_file() and not args.force:
        return json.loads(cache.read_text())
    cfg = MODELS["nofit"]
    work = WORK / "trained"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    model_keys = {k: v for k, v in cfg.to_json().items() if k != "tokens"}
    (work / "train.toml").write_text(
        "[model]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in model_keys.items()) + "\n\n"
        "[data]\nsynthetic_length = 2000\nsynthetic_channels = 2\n\n"
        "[train]\nepochs = 1\nbatch_size = 32\nmax_train_windows = 64\ncalibration_samples = 16\n"
        "test_samples = 8\nthreads = 2\n")

    def cisl(*a: str, timeout: float = 7200) -> str:
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "codegen.cli", *a], cwd=work, capture_output=True, text=True,
                           timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"cisl {' '.join(a)}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
        say(f"  cisl {a[0]}: {time.perf_counter() - t0:.0f} s")
        return p.stdout

    tb = work / "tb.toml"
    models = ",".join("nrf52840dk" if k % 2 == 0 else "nrf52833dk" for k in range(16))
    cisl("testbed", "sim", "--nodes", "16", "--models", models, "-o", str(tb))
    # the order a pruned model needs (and any model may use): plan from the config, train for the split
    cisl("profile", "train.toml", "--testbed", str(tb), "-o", "profile.json", "-q")
    cisl("plan", "train.toml", "--testbed", str(tb), "--objective", "latency", "-o", "fast.json", "-q")
    fastest = json.loads((work / "fast.json").read_text())["planner"]["predicted"]["latency_ms"]
    deadline = round(args.slack * fastest, 1)
    out = cisl("plan", "train.toml", "--testbed", str(tb), "--deadline", str(deadline), "-o", "split.json",
               "--compare", "-q")
    sf = json.loads((work / "split.json").read_text())
    cisl("train", "train.toml", "--split", "split.json", "-o", "model", "-q")
    even_link = subprocess.run([sys.executable, "-m", "codegen.cli", "compile", "model/model.onnx", "--testbed",
                                str(tb), "--devices", "16", "-b", "nrf52840dk", "-o", "even-hw", "-q"], cwd=work,
                               capture_output=True, text=True)
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "build", "even-hw", "-q"], cwd=work,
                       capture_output=True, text=True)
    even = {"compile_warnings": [ln for ln in even_link.stderr.splitlines() if ln.startswith("warning")][:2],
            "build_exit": p.returncode, "build_error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""}
    cisl("compile", "model/model.onnx", "--split", "split.json", "-b", "nrf52840dk", "-o", "hw", "-q")
    cisl("build", "hw", "-q")
    hw = json.loads((work / "hw" / "build.json").read_text())
    cisl("compile", "model/model.onnx", "--split", "split.json", "-o", "sim", "-q")
    cisl("build", "sim", "-q")  # with board time: every node's image on the cycle model of its own board
    sim = cisl("sim", "sim")
    cisl("estimate", "sim", "--testbed", "tb.toml", "-o", "estimate.json")  # its rounds where the plan put its nodes
    est = json.loads((work / "estimate.json").read_text())
    row = {"deadline_ms": deadline, "fastest_ms": fastest, "split": {k: sf[k] for k in ("nodes", "boards",
                                                                                      "heads_per_device",
                                                                                      "hidden_per_device")},
           "planned_latency_ms": sf["planner"]["predicted"]["latency_ms"],
           "planned_energy_uj": sf["planner"]["predicted"]["energy_uj"], "compare": out,
           "even_hw": even, "linked": {b: n for b, n in hw.get("boards", {hw["board"]: []}).items()},
           "max_flash": {b: max(n["flash"] for n in hw["nodes"] if n["node"] in nodes)
                         for b, nodes in hw.get("boards", {hw["board"]: [n["node"] for n in hw["nodes"]]}).items()},
           "bit_exact": "bit-exact with the int8 reference: yes" in sim,
           "estimate_latency_ms": est["latency_ms"], "estimate_energy_uj": est["network_energy_uj"],
           "estimate_topology": est["topology"]}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(row, indent=1))
    return row


def _fmt(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def report(rows: list[dict], args) -> str:
    lines = ["# Heterogeneous testbeds: the MILP planner against the even, speed-proportional and CoEdge splits",
             "", "Generated by `python bench/heterogeneous.py` (issue 17); the method is in the script's docstring "
             "and docs/design/heterogeneous.md. Deadline = "
             f"{args.slack} × the fastest plan's latency for that testbed and model. Energy and latency are the "
             "exact evaluation (profiled cycles of every op, the footprint model, the firmware's Mixer rounds "
             "simulated on the testbed's positions); *meets* = every node within its flash, RAM and energy "
             "budget and the latency within the deadline; *linked* = every node's image links for its own "
             "board; *bit-exact* = the virtual testbed's run (the radio medium on the testbed's positions) "
             "against the int8 reference, fed the messages that radio lost.", ""]
    lines.append("| testbed | model | deadline ms | method | nodes | latency ms | energy µJ | vs even | meets | "
                 "linked | bit-exact | solve s |")
    lines.append("|---|---|---:|---|---:|---:|---:|---:|---|---|---|---:|")
    for r in rows:
        even = r["methods"]["even"]
        for name in [k for k in METHODS if k in r["methods"]]:
            m = r["methods"][name]
            meets = "yes" if m.get("energy_uj") is not None and not m.get("violations") else (
                "no: " + (m["violations"][0] if m.get("violations") else m.get("message") or m["status"]))
            vs = "-"  # against the even split's energy, whether or not that split meets the constraints
            if m.get("energy_uj") is not None and even.get("energy_uj"):
                vs = f"{100 * (m['energy_uj'] / even['energy_uj'] - 1):+.1f} %"
            run = m.get("run", {})
            lines.append(f"| {r['testbed']} | {r['model']} | {r['deadline_ms']:g} | {name} | {m.get('nodes', '-')} | "
                         f"{_fmt(m.get('latency_ms'), 2)} | {_fmt(m.get('energy_uj'))} | {vs} | {meets} | "
                         f"{run.get('linked', '-') if run else '-'} | {run.get('bit_exact', '-') if run else '-'} | "
                         f"{m['solve_seconds']:.2f} |")
    lines += ["", "**Energy against the even split at the same deadline** (the issue's target: at least 25 % less "
              "on the energy-mixed testbed; CoEdge reports 25.5–66.9 % against its baselines):", ""]
    for r in rows:
        m, e = r["methods"][written(r)], r["methods"]["even"]
        if m.get("energy_uj") and e.get("energy_uj"):
            saved = 1 - m["energy_uj"] / e["energy_uj"]
            lines.append(f"* {r['testbed']}, {r['model']}: {100 * saved:.1f} % less ({m['energy_uj']:,.0f} vs "
                         f"{e['energy_uj']:,.0f} µJ){'' if not e.get('violations') else '; the even split does not even meet the constraints (' + e['violations'][0] + ')'}")
    lines += ["", "Why so much: every node that takes part in a Mixer round is on air (and its CPU polls) for the "
              "whole round, so each node costs the round's energy whatever its share; the compute is nearly the "
              "same in total however it is split. Below the deadline the plan therefore uses as few nodes as the "
              "memory and the deadline allow. The radio and CPU currents are the boards' datasheet figures "
              "(board.toml [power]); with the firmware sleeping between slots instead of polling the gap would "
              "shrink (docs/design/timing.md, \"Energy\").", ""]
    lines += ["", "Splits of the plans `cisl plan` writes (the MILP's, polished by swaps and moves where that row exists; "
              "node: heads/hidden units; nodes left out are not listed):", ""]
    for r in rows:
        m = r["methods"][written(r)]
        if m.get("node_ids"):
            share = ", ".join(f"{n}: {h}/{u}" for n, h, u in zip(m["node_ids"], m["heads"], m["hidden"]))
            lines.append(f"* {r['testbed']}, {r['model']}: {share}")
    lines += relay_report(rows)
    t = getattr(args, "trained_row", None)
    if t:
        e = t["estimate_latency_ms"]
        lines += ["", "## The nofit model planned, trained, compiled for both boards, linked, run", "",
                  f"`cisl profile` and `cisl plan --deadline {t['deadline_ms']:g}` ({args.slack} × the fastest "
                  f"plan, {t['fastest_ms']:.1f} ms) from the training config on the memory testbed, `cisl train "
                  f"--split` (synthetic data, one epoch, the planned split), `cisl compile --split` for the "
                  f"nodes' boards and for the virtual testbed.", "",
                  f"* the even split (`cisl compile --testbed --devices 16`): {'; '.join(t['even_hw']['compile_warnings']) or 'no warning'}; "
                  f"`cisl build` exit {t['even_hw']['build_exit']}: {t['even_hw']['build_error']}",
                  f"* the plan: nodes {t['split']['nodes']}, boards {t['split']['boards']}, heads "
                  f"{t['split']['heads_per_device']}, hidden units {t['split']['hidden_per_device']}",
                  f"* linked for their own boards (plan node numbers per board): {t['linked']}; largest image flash per board: {t['max_flash']} B",
                  f"* virtual testbed bit-exact: {t['bit_exact']}",
                  f"* latency: planned {t['planned_latency_ms']:.1f} ms; `cisl estimate --testbed` (radio: "
                  f"{t.get('estimate_topology', '?')}) {e['central']:.1f} ms [{e['low']:.1f}..{e['high']:.1f}] "
                  f"against the deadline of {t['deadline_ms']:g} ms "
                  f"({'within' if e['central'] <= t['deadline_ms'] else 'OVER'}); energy planned "
                  f"{t['planned_energy_uj']:,.1f} µJ, estimated {t['estimate_energy_uj']['central']:,.1f} µJ",
                  "", "```", t["compare"].strip(),
                  "```"]
    lines += ["", "Solve time: the MILP over 16 nodes (272 one-hot head variables, 16 integer hidden counts, "
              "the products for the radio energy) is the `solve s` column; building its tables (structures, "
              "footprints, 32 Mixer simulations) took " + ", ".join(f"{r['testbed']}/{r['model']} "
                                                                   f"{r['tables_seconds']:.0f} s" for r in rows) + "."]
    return "\n".join(lines) + "\n"


def relay_report(rows: list[dict]) -> list[str]:
    """Whether a relay (a left-out node kept in the Mixer rounds, computing nothing) would have helped
    any MILP plan: the best single relay and all left-out nodes relaying, against the plan."""
    rows = [r for r in rows if r.get("relays") and r["relays"]["trials"]]
    if not rows:
        return []
    out = ["", "## Relays: would a node that only relays have helped?", "",
           "The planner leaves a node out rather than making it a relay (docs/design/heterogeneous.md). Here "
           "each MILP plan is re-evaluated exactly with every left-out node as its only relay, and with all of "
           "them relaying (the rounds simulated with the relays on their positions; a relay pays the rounds' "
           "radio and polling CPU, no compute).", "",
           "| testbed | model | plan ms | plan µJ | best single relay | its ms | its µJ | all relay ms | all relay µJ | "
           "any relay faster | any relay less energy |", "|---|---|---:|---:|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        rl = r["relays"]
        singles = [t for t in rl["trials"] if len(t["relays"]) == 1]
        many = [t for t in rl["trials"] if len(t["relays"]) > 1]
        best = min(singles, key=lambda t: (t["latency_ms"], t["energy_uj"]))
        every = many[0] if many else None
        faster = any(t["latency_ms"] < rl["plan_latency_ms"] for t in rl["trials"])
        cheaper = any(t["energy_uj"] < rl["plan_energy_uj"] for t in rl["trials"])
        out.append(f"| {r['testbed']} | {r['model']} | {rl['plan_latency_ms']:.1f} | {rl['plan_energy_uj']:,.0f} | "
                   f"{best['relays'][0]} | {best['latency_ms']:.1f} | {best['energy_uj']:,.0f} | "
                   f"{_fmt(every and every['latency_ms'])} | {_fmt(every and every['energy_uj'], 0)} | "
                   f"{'yes' if faster else 'no'} | {'yes' if cheaper else 'no'} |")
    helped = [r for r in rows if any(t["latency_ms"] < r["relays"]["plan_latency_ms"] or
                                     t["energy_uj"] < r["relays"]["plan_energy_uj"] for t in r["relays"]["trials"])]
    out += ["", ("No relay made any plan faster or cheaper: a Mixer round waits for every node's full rank, "
                 "so a relay lengthens the rounds and adds its own radio energy." if not helped else
                 "A relay helped on: " + ", ".join(f"{r['testbed']}/{r['model']}" for r in helped) +
                 " — the planner should offer relays there.")]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slack", type=float, default=1.5)
    ap.add_argument("--only", nargs="*", default=None, help="testbed-model pairs, e.g. memory-nofit")
    ap.add_argument("--no-run", action="store_true", help="plan and evaluate only (no compile, link, sim)")
    ap.add_argument("--force", action="store_true", help="recompute cached results")
    ap.add_argument("--trained", action="store_true", help="also train the nofit model and run it end to end")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    args.board_cache = {}
    say = print
    pairs = [(t, m) for m in MODELS for t in ("memory", "energy", "far")]
    if args.only:
        pairs = [(t, m) for t, m in pairs if f"{t}-{m}" in args.only]
    rows = []
    for t, m in pairs:
        say(f"== {t} testbed, {m} model")
        rows.append(one(t, m, args, say))
    if args.trained:
        say("== the nofit model trained and run end to end")
        args.trained_row = trained(args, say)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "heterogeneous.md").write_text(report(rows, args))
    (args.out / "heterogeneous.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"-> {args.out / 'heterogeneous.md'}")


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
