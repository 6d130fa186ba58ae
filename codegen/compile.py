"""`cisl compile`: ONNX model + calibration set -> plan.json, constants.bin and per-node C.

Never imports torch. Pure function of its inputs and options: compiling twice gives byte-identical
output folders.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import __version__
from .boards import load_board, shared_board
from .emit.cnode import emit_node, emit_node_modes, environment
from .errors import UserError
from .executor import PlanExecutor
from .fsutil import atomic_output_dir, check_output_dir, output_lock, sha256_file
from .inputs import load_npy
from .onnx_model import CislModel, load_model
from .partition import Split, full_masks, masks_are_full, realised_keep
from .planner.split import read_split
from .plan.io import PLAN_FORMAT, PLAN_VERSION, NodeData, load_plan, write_plan
from .plan.memory import buffers_of, check_plan, format_plan, plan_arena
from .plan.mixer_layout import image_section
from .plan.mixer_schedule import MAX_GENERATION, RoundPolicy, schedule_exchange, schedule_plan
from .plan.quantize import calibrate, quantize
from .elastic import KINDS
from .plan.elastic import MODES_DIR, alignment_problem, mode_structures, quantize_modes, sharing_problem
from .plan.structure import SINK, build_structure
from .resources import runtime_fingerprint

OUTPUT_KIND = "build"
_BUILD_ENTRY = re.compile(r"^(plan\.json|constants\.bin|compile\.json|inputs\.npy|build(-[a-z0-9-]+)?\.json|_obj|"
                          r"logs|modes|modes\.json|node_\d\d)$")
CONTROL_ROW_BYTES = 2  # an elastic image's control row: the mode a node ran, its request (cisl_modes.c)


def build_entry(name: str) -> bool:
    """What cisl writes into a build folder (compile, build, sim's default logs)."""
    return _BUILD_ENTRY.match(name) is not None


def legacy_build(target: Path) -> bool:
    """A build folder of a cisl version before the owner file: its plan.json is a cisl plan."""
    try:
        return json.loads((Path(target) / "plan.json").read_text()).get("format") == PLAN_FORMAT
    except (OSError, ValueError, AttributeError):
        return False
MAX_CALIBRATION = 256
SIM_INPUTS = 4


@dataclass
class CompileOptions:
    devices: int | None = None  # None: as the model was trained
    board: str = "sim"
    calibration: Path | None = None  # None: calibration.npy next to the model
    max_calibration: int = MAX_CALIBRATION
    round_policy: str = "done"  # Mixer round length: "done" (end when all have full rank) or "fixed" (3G+200)
    phy: str = "2M"  # BLE PHY the Mixer slots are timed for
    max_generation: int = 256  # rows per Mixer round; larger exchanges (and messages) span several rounds
    # per node, the board it runs on (a mixed testbed; `cisl compile --testbed`), or for a virtual
    # board (sim, qemu-m4) the board it stands in for; None: every node is ``board``
    node_boards: list[str] | None = None
    testbed: Path | None = None  # a testbed file: node_boards from its [[node]] boards (or `models`)
    split: Path | None = None  # a split file (`cisl plan`): heads and hidden units per node, and their boards
    mode: int | None = None  # an elastic model's mode to build (0 = the largest); None: not elastic


def _load_windows(path: Path, lookback: int, what: str) -> np.ndarray:
    if not path.is_file():
        raise UserError(f"{path}: {what} not found; pass --calibration FILE.npy (float32 [n, {lookback}] "
                        f"normalised windows, as `cisl train` writes)")
    arr = load_npy(path, f"the {what} must be float32 [n, {lookback}]")
    if arr.ndim != 2 or arr.shape[1] != lookback or arr.shape[0] < 1 or not np.issubdtype(arr.dtype, np.floating):
        raise UserError(f"{path}: {what} has shape {arr.shape} and dtype {arr.dtype}; "
                        f"expected float [n, {lookback}] (lookback of the model)")
    with np.errstate(over="ignore"):  # checked after the cast: 1e300 is finite in float64, inf in float32
        arr = arr.astype(np.float32)
    if not np.all(np.isfinite(arr)):
        raise UserError(f"{path}: {what} contains NaN, infinite or out-of-float32-range values")
    return arr


def check_companion(path: Path, model: CislModel, fix: str) -> None:
    """``path`` (next to the model) must be the file `cisl train` wrote with this model: a model copied
    beside another training's files was scored or calibrated on that training's windows without a word.
    The model records their hashes (cisl.training companions; older models record none)."""
    companions = model.training.get("companions")
    want = companions.get(path.name) if isinstance(companions, dict) else None
    if want is not None and path.is_file() and sha256_file(path) != want:
        raise UserError(f"{path}: not the file `cisl train` wrote with this model (another training's, or changed "
                        f"since); {fix}")


def load_test_set(here: Path, model: CislModel, elsewhere: str = "") -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The test windows, targets and (if there) per-window scales `cisl train` wrote next to the model,
    each checked: shape, finite (a NaN would print an MSE of nan as if it were a result), and written
    with this model."""
    lookback, horizon = model.config.lookback, model.config.horizon
    tw, tt, ts = here / "test_windows.npy", here / "test_targets.npy", here / "test_scale.npy"
    for path in (tw, tt, ts):
        check_companion(path, model, "keep a model beside the files its own training wrote, or train again"
                                     + elsewhere)
    x = _load_windows(tw, lookback, "test windows")
    y = _load_array(tt, "test targets", (len(x), horizon))
    scale = _load_array(ts, "test scales", (len(x),)) if ts.is_file() else None
    if scale is not None and not np.all(scale > 0):
        raise UserError(f"{ts}: the test scales must be positive; train again to write them")
    return x, y, scale


def _load_array(path: Path, what: str, shape: tuple[int, ...]) -> np.ndarray:
    if not path.is_file():
        raise UserError(f"{path}: not found; train again to write the {what}, or pass --data with the data set")
    arr = load_npy(path, f"train again to write the {what}")
    if arr.shape != shape or not np.issubdtype(arr.dtype, np.number):
        raise UserError(f"{path}: {what} of shape {arr.shape}, expected {shape}; train again to write them")
    if not np.all(np.isfinite(arr)):
        raise UserError(f"{path}: the {what} contain NaN or infinite values; train again to write them")
    return arr.astype(np.float32)


def choose_split(model: CislModel, devices: int | None) -> tuple[Split, list]:
    """The split and somegather masks `cisl compile --devices` runs ``model`` on (None: as trained);
    also what `cisl eval` runs the float model on."""
    cfg = model.config
    D = model.devices if devices is None else devices
    if D < 1:
        raise UserError(f"--devices {D}: must be at least 1")
    if D > cfg.heads:
        raise UserError(f"--devices {D}: more devices than heads ({cfg.heads}); each device needs at least one "
                        f"head, use --devices {cfg.heads} or fewer")
    if D > cfg.mlp_hidden or D > cfg.d_model:
        narrow = min(cfg.mlp_hidden, cfg.d_model)
        raise UserError(f"--devices {D}: the model's MLP hidden width ({cfg.mlp_hidden}) or feature width "
                        f"({cfg.d_model}) is smaller than the device count, and every device needs at least one "
                        f"hidden unit and column; use --devices {narrow} or fewer")
    trained = model.split
    if D == model.devices:
        return trained, model.masks
    if not masks_are_full(trained, model.masks):
        raise UserError(f"{model.path}: trained for {model.devices} devices with somegather masks (keep ratio "
                        f"{model.keep_ratio}); its pruned split holds only for {model.devices} nodes: use --devices {model.devices}, or "
                        f"retrain for {D} (`cisl train ... --devices {D}`)")
    split = Split.even(D, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    return split, full_masks(split, cfg.layers)


def planned_split(model: CislModel, planned, where: Path) -> tuple[Split, list]:
    """The split of a split file for ``model``: any split of an unpruned model (it computes the same
    function), a pruned model's only if it is the split it was trained for."""
    cfg = model.config
    if planned.model != cfg:
        raise UserError(f"{where}: a split of another model (planned for {planned.model.to_json()}); plan this "
                        f"model with `cisl plan {model.path}`")
    split = planned.split
    trained = model.split
    if masks_are_full(trained, model.masks):
        return split, full_masks(split, cfg.layers)
    if split != trained:
        raise UserError(f"{model.path}: pruned (keep {model.keep_ratio:g}) for another split "
                        f"(heads {list(trained.heads_per_device)}, hidden {list(trained.hidden_per_device)}); its "
                        f"somegather masks hold only there, so {where} needs retraining for it: "
                        f"`cisl train --split {where}`")
    return split, model.masks


def _mode_units(model: CislModel, split: Split, mode: int | None, where: Path) -> list[dict] | None:
    """The units of the elastic mode to build (None: the model is not elastic, or every mode)."""
    modes = model.modes
    if modes is None:
        if mode is not None:
            raise UserError(f"{where} has no elastic modes; drop --mode (train with [elastic] modes for them)")
        return None
    if mode is not None and not 0 <= mode < modes.count:
        raise UserError(f"--mode {mode}: {where} has modes 0 to {modes.count - 1}")
    if split != model.split:
        raise UserError(f"{where}: an elastic model's modes hold for the split it was trained on "
                        f"({model.devices} devices, heads {model.heads_per_device}); drop --devices/--split")
    if mode is None:
        return None  # every mode in one image
    return [{kind: modes.units(mode, kind, l) for kind in KINDS} for l in range(model.config.layers)]


def _check_kernel_limits(model: CislModel, split: Split) -> None:
    """Shapes the kernels cannot take: refuse them up front with the fix."""
    cfg = model.config
    if cfg.tokens > 511:
        raise UserError(f"{model.path}: {cfg.tokens} tokens; CMSIS-NN softmax rows must stay below 512 "
                        f"(its sum overflows beyond), so reduce lookback or increase stride")
    if cfg.d_model > 32767 or cfg.mlp_hidden > 32767:
        raise UserError(f"{model.path}: layer width above 32767 is not supported by the int8 kernels")
    widest = max(split.model_cols(k)[1] - split.model_cols(k)[0] for k in range(split.devices))
    if cfg.tokens * widest > 65535:
        raise UserError(f"{model.path}: the head's partial sum over {cfg.tokens} tokens x {widest} columns exceeds "
                        f"65535 inputs per node; use more devices or a smaller model")


def compile_model(model_path: Path, out_dir: Path, opts: CompileOptions,
                  say: Callable[[str], None] = lambda s: None) -> dict:
    """Compile ``model_path`` into ``out_dir``; return the summary written to compile.json."""
    check_output_dir(Path(out_dir), OUTPUT_KIND, build_entry, legacy_build)
    with output_lock(Path(out_dir)):  # before any work: a second compile of this folder is refused at once
        return _compile(model_path, out_dir, opts, say)


def _compile(model_path: Path, out_dir: Path, opts: CompileOptions, say: Callable[[str], None]) -> dict:
    model = load_model(Path(model_path))
    board = load_board(opts.board)
    cfg = model.config
    planned = None
    if opts.split is not None:
        if opts.devices is not None:
            raise UserError("--split gives the node count (its nodes); drop --devices")
        planned = read_split(opts.split)
        split, masks = planned_split(model, planned, opts.split)
    else:
        split, masks = choose_split(model, opts.devices)
    _check_kernel_limits(model, split)
    units = _mode_units(model, split, opts.mode, Path(model_path))
    cal_path = Path(opts.calibration) if opts.calibration else Path(model_path).parent / "calibration.npy"
    if not opts.calibration:  # a file given on purpose is the user's choice
        check_companion(cal_path, model, "keep a model beside the files its own training wrote, or train "
                                           "again")
    cal = _load_windows(cal_path, cfg.lookback, "calibration set")
    if len(cal) > opts.max_calibration:  # evenly spaced subset: deterministic and representative
        cal = cal[np.linspace(0, len(cal) - 1, opts.max_calibration).round().astype(int)]
    test_x = test_y = test_scale = None
    here = Path(model_path).parent
    if (here / "test_windows.npy").is_file() and (here / "test_targets.npy").is_file():
        test_x, test_y, test_scale = load_test_set(here, model)
    sim_inputs = (test_x if test_x is not None else cal)[:SIM_INPUTS]

    wanted = opts.node_boards
    if planned is not None:
        wanted = planned.boards  # a split file names each node's board
        if opts.testbed is not None:
            from .testbed.config import load_testbed

            tb = load_testbed(opts.testbed)
            have = [tb.node(k).hardware if k in tb.ids else "(none)" for k in planned.nodes]
            if have != planned.boards:
                raise UserError(f"{opts.split}: planned for nodes {planned.nodes} on boards {planned.boards}, but "
                                f"{opts.testbed} has {have}; plan again with `cisl plan --testbed {opts.testbed}`")
    elif opts.testbed is not None:
        from .testbed.config import load_testbed, node_boards as testbed_boards

        wanted = testbed_boards(load_testbed(opts.testbed), split.devices)
    node_boards = check_node_boards(wanted, board, split.devices)
    options = {"devices": split.devices, "board": board.name, "max_calibration": opts.max_calibration,
               "round_policy": opts.round_policy, "phy": opts.phy, "max_generation": opts.max_generation,
               **({"node_boards": node_boards} if node_boards else {}),
               **({"mode": opts.mode} if units is not None else {}),
               **({"split": {"nodes": planned.nodes, "heads": planned.heads, "hidden": planned.hidden}}
                  if planned is not None else {})}
    # the input windows are compiled into the board images and fed to the virtual testbed: they count
    # (two builds whose test_windows.npy differ printed the same input and plan hashes)
    inputs_sha = hashlib.sha256(np.ascontiguousarray(sim_inputs, dtype=np.float32).tobytes()).hexdigest()
    input_hash = hashlib.sha256(json.dumps(
        {"model": model.sha256, "calibration": sha256_file(cal_path), "inputs": inputs_sha, "options": options,
         "tool": __version__}, sort_keys=True).encode()).hexdigest()

    realised = realised_keep(split, masks)
    say(f"partition: {split.devices} devices, heads {list(split.heads_per_device)}, keep {model.keep_ratio:g} "
        f"(realised {realised:.4f} of an allgather's columns)")
    if units is not None:
        say(f"elastic mode {opts.mode} of {model.modes.count}")
    every_mode = model.modes is not None and units is None
    if every_mode:
        say(f"elastic: every one of {model.modes.count} modes in one image")
        structs = mode_structures(cfg, split, masks, model.keep_ratio, model.modes)
        problem = alignment_problem(structs)
        if problem is not None:
            raise AssertionError(f"the elastic modes do not run the same schedule: {problem}")
        say(f"calibrate: {len(cal)} windows, every mode")
        q, mode_consts = quantize_modes(structs, model.weights, cal)
        problem = sharing_problem(structs, mode_consts)
        if problem is not None:
            raise AssertionError(f"the elastic modes cannot share mode 0's constants: {problem}")
    else:
        structs = [build_structure(cfg, split, masks, model.keep_ratio, rescale=model.rescale,
                                   prune_own=model.prune_own, units=units)]
        say(f"calibrate: {len(cal)} windows")
        q = calibrate(structs[0], model.weights, cal)
        mode_consts = [quantize(structs[0], model.weights, q)]
    st = structs[0]
    control = len(structs) * len(st.sgs) if every_mode else None  # the control round's exchange number
    mixer_sections = [mixer_section(sm, opts, control) for sm in structs]
    if every_mode:  # one image runs every mode's rounds: its Mixer is built for the largest of them all
        image = image_section(split.devices, mixer_sections)
        mixer_sections = [{**sec, "image": image} for sec in mixer_sections]

    def elastic_meta(m: int) -> dict:
        if every_mode:  # this plan is mode m of an image holding every mode; profile: what training measured
            el = model.elastic
            profile = [{"mode": i, "macs": int(el["macs"][i]), "val_mse": float(el["val_mse"][i]),
                        "test_mse": float(el["test_mse"][i])} for i in range(model.modes.count)]
            return {"elastic": {"mode": m, "modes": model.modes.count, "image": "every mode", "profile": profile}}
        return {"elastic": {"mode": opts.mode, "modes": model.modes.count}} if units is not None else {}

    meta = {
        "format": PLAN_FORMAT, "format_version": PLAN_VERSION, "tool_version": __version__, "input_hash": input_hash,
        "source": {"model": Path(model_path).name, "model_sha256": model.sha256, "calibration": cal_path.name,
                   "calibration_samples": int(len(cal))},
        "board": board.name, **({"node_boards": node_boards} if node_boards else {}),
        # a planned split: plan node k is testbed node testbed_nodes[k]
        **({"testbed_nodes": planned.nodes} if planned is not None else {}),
        "model": cfg.to_json(), "devices": split.devices, "sink": SINK,
        # an elastic model's mode this plan computes, of how many
        **elastic_meta(0),
        "keep_ratio": model.keep_ratio, "realised_keep": realised, "rescale": st.rescale, "prune_own": st.prune_own,
        "partition": {"heads_per_device": list(split.heads_per_device),
                      "model_cols": [list(split.model_cols(k)) for k in range(split.devices)],
                      "hidden_cols": [list(split.hidden_cols(k)) for k in range(split.devices)]},
        "mixer": mixer_sections[0],
        "input_windows": int(len(sim_inputs)),  # rows of inputs.npy (boards compile them into the image)
    }
    # `cisl sim`'s default logs live in the build folder and go with the build it ran; say so when a
    # recompile replaces them (they are cisl's own output, but a user may not expect them gone)
    old_logs = (Path(out_dir) / "logs").is_dir()
    with atomic_output_dir(Path(out_dir), OUTPUT_KIND, build_entry, legacy_build) as tmp:
        plans = []
        for m, (sm, cm) in enumerate(zip(structs, mode_consts)):
            where = tmp if m == 0 else tmp / MODES_DIR / f"mode_{m}"
            where.mkdir(parents=True, exist_ok=True)
            write_plan(where, meta if m == 0 else {**meta, **elastic_meta(m), "mixer": mixer_sections[m]},
                       sm.sgs, _arena_nodes(sm, cm, plans[0].nodes if m else None), q)
            plans.append(load_plan(where))  # emit from what is on disk: plan.json is the source of truth
            if split.devices == model.devices:
                _check_metadata_against_graph(model, plans[m], cal, m if every_mode else (opts.mode if units is not None else None))
        plan = plans[0]
        env = environment()
        say(f"emit C: {plan.devices} nodes" + (f", {len(plans)} modes each" if every_mode else ""))
        for k, node in enumerate(plan.nodes):
            d = tmp / f"node_{node.device:02d}"
            if every_mode:
                emit_node_modes(plans, k, d, input_hash, env)
            else:
                emit_node(plan, node, d, input_hash, env)
            (d / "memory.txt").write_text("\n".join(
                (f"mode {m}:\n" if every_mode else "") + format_plan(buffers_of(p.nodes[k]), p.nodes[k].offsets,
                                                                     p.nodes[k].arena_bytes)
                for m, p in enumerate(plans)) + "\n")
        np.save(tmp / "inputs.npy", sim_inputs.astype(np.float32))
        summary = _summary(plan, board, model, test_x, test_y, test_scale)
        if every_mode:
            summary["modes"] = [_summary(p, board, model, test_x, test_y, test_scale) for p in plans]
        _budget_check(plan, board, summary, say)
        _calibration_check(cal, summary)
        summary["runtime"] = runtime_fingerprint()  # `cisl build` links this folder only with that firmware
        (tmp / "compile.json").write_text(json.dumps(summary, indent=1) + "\n")
    if old_logs:
        summary["notes"] = [f"{Path(out_dir) / 'logs'} (the previous build's `cisl sim` logs) went with that build; "
                            f"run `cisl sim --logs DIR` to keep a run's logs outside the build folder"]
    return summary


def _arena_nodes(st, consts: list[dict], like: list[NodeData] | None = None) -> list[NodeData]:
    """Every node of ``st`` with its constants and its arena planned (checked). ``like``: take these
    nodes' arena offsets (an elastic mode takes mode 0's: its tensors are no larger and live as long,
    and one layout for every mode keeps a mode switch to different sizes)."""
    nodes = []
    for i, (node, c) in enumerate(zip(st.nodes, consts)):
        nd = NodeData(node.device, node.tensors, {}, 0, node.ops, c)
        bufs = buffers_of(nd)
        if like is not None:
            offsets, arena = {n: like[i].offsets[n] for n in node.tensors}, like[i].arena_bytes
        else:
            offsets, arena = plan_arena(bufs)
        problems = check_plan(bufs, offsets, arena)
        if problems:
            raise AssertionError(f"memory plan of node {node.device} is wrong: {problems[0]}")
        nd.offsets, nd.arena_bytes = offsets, arena
        nodes.append(nd)
    return nodes


def check_node_boards(node_boards: list[str] | None, board, devices: int) -> list[str] | None:
    """The per-node boards of a mixed testbed, checked: one known real board per node, each with
    memory budgets and the target's CPU (its images must run the same generated code)."""
    if not node_boards:
        return None
    if len(node_boards) != devices:
        raise UserError(f"{len(node_boards)} node boards for {devices} nodes; name one board per node "
                        f"(the testbed file's [[node]] tables, ids 0..{devices - 1})")
    out = []
    for k, name in enumerate(node_boards):
        nb = load_board(name)
        if nb.models is not None:
            raise UserError(f"node {k}: board '{name}' is a virtual board; a node board names the hardware the node "
                            f"is (or, on the virtual testbed, stands in for), e.g. nrf52840dk or nrf52833dk")
        if not nb.build.get("size_check"):
            raise UserError(f"node {k}: board '{name}' has no memory budget to plan against")
        target = load_board(board.models) if board.models else board
        if nb.build.get("cpu_flags") != target.build.get("cpu_flags"):
            raise UserError(f"node {k}: board '{name}' has another CPU than '{board.name}' ({nb.build.get('cpu_flags')}"
                            f" vs {target.build.get('cpu_flags')}); a mixed testbed's boards must share the core")
        out.append(nb.name)
    if board.models is None and board.name not in out:
        raise UserError(f"--board {board.name} is none of the testbed's boards ({', '.join(sorted(set(out)))}); "
                        f"compile with --board {out[0]} or --board sim for the virtual testbed")
    return out


def _budget_check(plan, board, summary: dict, say: Callable[[str], None]) -> None:
    """Boards with memory budgets: the planner's estimate per node, and a warning for each node that
    is estimated not to fit (`cisl build` then measures the linked images and fails on them)."""
    if not board.build.get("size_check") and not plan.meta.get("node_boards"):
        return
    from .kernel_library import kernel_library
    from .footprint import estimate_plan

    try:
        kernels = kernel_library().kind
    except UserError:
        kernels = "nnref"
    # each node against its own board (a mixed testbed's differ); one estimate per board
    node_boards = {k: load_board(plan.meta["node_boards"][k]) if plan.meta.get("node_boards") else board
                   for k in range(plan.devices)}
    est = {b.name: estimate_plan(plan, b, kernels) for b in {nb.name: nb for nb in node_boards.values()}.values()}
    warnings = []
    for n in summary["nodes"]:
        nb = node_boards[n["node"]]
        e = est[nb.name][n["node"]]
        n["estimated_flash"], n["estimated_ram"] = e.flash, e.ram
        for region, used, budget in (("flash", e.flash, nb.flash_bytes), ("RAM", e.ram, nb.ram_bytes)):
            if used > budget:
                warnings.append(f"node {n['node']} is estimated at {used} B of {region}, over the {budget} B of "
                                f"{nb.name} by {used - budget} B")
    if warnings:
        summary.setdefault("warnings", []).extend(warnings)


def _calibration_check(cal: np.ndarray, summary: dict) -> None:
    """A calibration set too small or without variation fixes the activations' int8 ranges poorly:
    say so, with the int8 error it gave on the test windows when there are some."""
    problems = []
    if len(cal) < 8:
        problems.append(f"only {len(cal)} calibration window{'s' if len(cal) != 1 else ''}")
    # Only a set without variation is degenerate: real series hold flat stretches (ETTh2's default
    # 256 windows hold 13 constant ones), and the other windows set the ranges.
    if float(np.ptp(cal)) == 0.0 or float(np.max(np.ptp(cal, axis=1))) == 0.0:
        problems.append("constant calibration windows")
    if not problems:
        return
    acc = summary.get("accuracy")
    measured = (f"; int8 vs float on {acc['windows']} test windows: {100 * acc['relative_mse_increase']:+.2f} % MSE, "
                f"relative RMS error {acc['relative_rms_float_vs_int8']:.3f}" if acc else
                "; no test windows next to the model to measure the int8 error on")
    summary.setdefault("warnings", []).append(
        f"degenerate calibration set ({', '.join(problems)}): the int8 ranges may not cover real inputs{measured}; "
        f"calibrate with more representative windows (--calibration FILE.npy)")


def _per_packet_us(board_name: str) -> tuple[float, float, float, float, float] | None:
    """The board CPU's worst Mixer work per packet (board.toml [mixer] per_packet_cycles), in µs:
    (base, per_row, per_row_byte, per_byte, per_row_row), safety applied."""
    board = shared_board(board_name)
    c = board.facts.get("mixer", {}).get("per_packet_cycles")
    if not c:
        if "radio" in board.facts:
            # a radio runs Mixer's per-packet work on the board's CPU between packets: without a
            # measured bound the planner could pick slots that are late (docs/design/mixer.md §10)
            raise UserError(f"board '{board.name}' has a [radio] but no [mixer] per_packet_cycles: the compiler "
                            f"cannot size Mixer slots for its CPU; measure the per-packet work on the cycle model "
                            f"(bench/mixer_budget_grid.py --fit) and add it to its board.toml")
        return None
    return _cycles_to_us(board, c)


def _cycles_to_us(board, c: dict) -> tuple[float, float, float, float, float]:
    k = float(c.get("safety", 1.0)) * 1e6 / float(board.facts["board"]["clock_hz"])
    return tuple(k * float(c.get(t, 0.0)) for t in ("base", "per_row", "per_row_byte", "per_byte", "per_row_row"))


def _slot_work_us(board_name: str) -> tuple[float, float, float, float, float] | None:
    """The board CPU's Mixer work in a whole slot (board.toml [mixer] slot_cycles), in µs: the next
    packet's combination runs while this slot's packet is on the air, so it bounds the slot as a whole
    (docs/design/mixer.md §10)."""
    board = shared_board(board_name)
    mixer = board.facts.get("mixer", {})
    c = mixer.get("slot_cycles")
    if not c:
        if mixer.get("per_packet_cycles"):
            raise UserError(f"board '{board.name}' has [mixer] per_packet_cycles but no slot_cycles: the compiler "
                            f"cannot bound the work Mixer overlaps with the air time; fit both with "
                            f"bench/mixer_budget_grid.py --fit")
        return None
    return _cycles_to_us(board, c)


def _slowest(terms: list) -> tuple[float, ...] | None:
    """Per coefficient the largest of several boards' Mixer work models: a bound for every node."""
    terms = [t for t in terms if t is not None]
    return tuple(max(t[i] for t in terms) for i in range(len(terms[0]))) if terms else None


def round_policy(board_name: str | list[str], devices: int, kind: str = "done", phy: str = "2M") -> RoundPolicy:
    """The round policy `cisl compile` plans with for ``devices`` nodes of a board, or of a mixed
    testbed's boards (every slot must fit the slowest node's CPU work); `cisl fit` too."""
    names = [board_name] if isinstance(board_name, str) else sorted(set(board_name))
    # a node lingers at least n slots after learning that all have full rank, so that each slot
    # owner gets one chance to tell the others (firmware/mixer/mixer.h, MX_TERM_DONE)
    guard = max(int(shared_board(b).facts.get("radio", {}).get("start_guard_us", 0)) for b in names)
    return RoundPolicy(kind=kind, phy=phy, linger=max(4, devices),
                       per_packet_us=_slowest([_per_packet_us(b) for b in names]),
                       slot_work_us=_slowest([_slot_work_us(b) for b in names]), round_guard_us=guard)


def mixer_section(st, opts: CompileOptions, control: int | None = None) -> dict:
    """How every exchange runs over Mixer (codegen/plan/mixer_schedule.py), for radio transports.
    ``control``: an elastic image's control round (docs/design/elastic.md) is exchange ``control``,
    one 2-byte row per node."""
    # a virtual board's nodes stand in for boards (node_boards, else the one its timing models): their
    # rounds are planned as those boards' — slot lengths for their CPU work, the start guard — so the
    # virtual testbed's board time is what the boards would take (it was the air time alone)
    policy = round_policy(opts.node_boards or shared_board(opts.board).models or opts.board, st.split.devices,
                          opts.round_policy, opts.phy)
    try:
        rounds = schedule_plan([sg.msg_bytes for sg in st.sgs], policy, opts.max_generation)
    except ValueError as e:
        hint = ("allow a larger --max-generation" if opts.max_generation < MAX_GENERATION else
                "use more nodes, fewer tokens or a lower keep ratio")
        raise UserError(f"{e}: {hint}") from None
    ctl = schedule_exchange(control, [CONTROL_ROW_BYTES] * st.split.devices, policy, opts.max_generation) \
        if control is not None else []
    if len(ctl) > 1:
        raise UserError(f"--max-generation {opts.max_generation}: the elastic control round of {st.split.devices} nodes "
                        f"({st.split.devices + 1} rows) must fit one Mixer round; give at least "
                        f"{st.split.devices + 1}, or compile one mode with --mode")
    return {"initiator": SINK, "policy": {"kind": policy.kind, "linger": policy.linger, "phy": policy.phy,
                                          "margin_us": policy.margin_us,
                                          **({"per_packet_us": list(policy.per_packet_us)}
                                             if policy.per_packet_us else {}),
                                          **({"slot_work_us": list(policy.slot_work_us)}
                                             if policy.slot_work_us else {}),
                                          **({"round_guard_us": policy.round_guard_us}
                                             if policy.round_guard_us else {})},
            "max_generation": opts.max_generation,
            "exchanges": [[r.to_json() for r in ex] for ex in rounds],
            **({"control": ctl[0].to_json()} if ctl else {}),
            "estimated_us_per_inference": int(sum(r.estimated_us for ex in [*rounds, ctl] for r in ex))}


def _check_metadata_against_graph(model: CislModel, plan, windows: np.ndarray, mode: int | None = None) -> None:
    """The plan is built from the model's cisl metadata (split, masks) and weights; the ONNX graph is
    what was trained and exported. They must compute the same forecast: metadata that contradicts
    the graph (hand-edited masks, another model's metadata) is refused, not compiled into nodes that
    would then agree with a wrong float reference. ``mode``: the elastic mode the plan computes."""
    import onnxruntime as ort

    x = np.ascontiguousarray(windows[:8], dtype=np.float32)
    feed = {"window": x, **({"mode": np.array(mode, dtype=np.int64)} if mode is not None else {})}
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 3  # errors only: an elastic graph's `mode` input with a default is meant
        ref = ort.InferenceSession(str(model.path), so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    except Exception as e:  # a graph ONNX Runtime cannot run is no cisl model
        raise UserError(f"{model.path}: ONNX Runtime cannot run the model ({type(e).__name__}); re-export it "
                        f"with `cisl train`") from None
    got = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "float",
                       weights=model.weights).run(x).output
    diff = float(np.max(np.abs(got - ref)))
    if not diff <= 1e-3 * (1.0 + float(np.max(np.abs(ref)))):
        raise UserError(f"{model.path}: its cisl metadata (split, somegather masks) contradicts the graph: the "
                        f"plan's forecast differs from the ONNX model's by up to {diff:.3g}; re-export the model "
                        f"with `cisl train` instead of editing its metadata")


def _summary(plan, board, model: CislModel, test_x, test_y, test_scale) -> dict:
    """Per-node resources and, when test windows came with the model, the float-vs-int8 error."""
    nodes = []
    for node in plan.nodes:
        sent = sum(s.msg_bytes[node.device] for s in plan.sgs)
        nodes.append({"node": node.device, "param_bytes": int(sum(c.nbytes for c in node.constants.values())),
                      "arena_bytes": node.arena_bytes, "bytes_sent_per_inference": int(sent),
                      **({"board": plan.meta["node_boards"][node.device]} if plan.meta.get("node_boards") else {})})
    out = {"devices": plan.devices, "board": board.name, "plan_sha256": plan.sha256, "nodes": nodes,
           **({"elastic": plan.meta["elastic"]} if "elastic" in plan.meta else {})}
    if test_x is not None:
        x = test_x[:256]
        y = test_y[:256]
        fl = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "float",
                          weights=model.weights).run(x.astype(np.float32)).output
        q8 = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "int8",
                          constants=[n.constants for n in plan.nodes]).run(plan.quantize_input(x)).output
        deq = plan.dequantize_output(q8)
        # errors on the data's scale (undoing RevIN), where training reports its MSE
        w = (test_scale[:256, None] ** 2) if test_scale is not None else 1.0
        mse_f = float(np.mean((fl - y) ** 2 * w))
        mse_q = float(np.mean((deq - y) ** 2 * w))
        out["accuracy"] = {"windows": int(len(x)), "space": "data" if test_scale is not None else "normalised",
                           "mse_float": mse_f, "mse_int8": mse_q,
                           "relative_mse_increase": (mse_q - mse_f) / mse_f if mse_f > 0 else 0.0,
                           "max_abs_float_vs_int8": float(np.max(np.abs(deq - fl))),
                           "relative_rms_float_vs_int8": float(np.sqrt(np.mean((deq - fl) ** 2) / np.mean(fl ** 2)))}
    return out
