"""An elastic model's modes through `cisl compile --mode`, int8 and the virtual testbed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from test_elastic_train import ELASTIC_TOML  # noqa: E402

pytestmark = [pytest.mark.train, pytest.mark.sim]


@pytest.fixture(scope="module")
def elastic_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from codegen.train.api import run_train

    root = tmp_path_factory.mktemp("elastic")
    (root / "train.toml").write_text(ELASTIC_TOML)
    run_train(root / "train.toml", None, root / "m", progress=False)
    return root / "m"


def test_each_mode_compiles_runs_bit_exact_and_matches_onnx_runtime(elastic_model: Path, tmp_path: Path) -> None:
    """`cisl compile --mode M` builds mode M alone: the float plan computes what ONNX Runtime
    computes for that mode, the int8 images run bit-exact on the virtual testbed, and a smaller
    mode holds fewer weights and sends fewer bytes."""
    import onnxruntime as ort

    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from codegen.executor import PlanExecutor
    from codegen.onnx_model import load_model
    from codegen.plan.io import load_plan
    from codegen.vtestbed.run import run_sim

    x = np.load(elastic_model / "test_windows.npy").astype(np.float32)
    sess = ort.InferenceSession(str(elastic_model / "model.onnx"))
    weights = load_model(elastic_model / "model.onnx").weights
    params, sent = [], []
    for mode in range(3):
        out = tmp_path / f"mode{mode}"
        summary = compile_model(elastic_model / "model.onnx", out, CompileOptions(mode=mode))
        plan = load_plan(out)
        ex = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "float", weights)
        want = sess.run(["forecast"], {"window": x, "mode": np.array(mode, dtype=np.int64)})[0]
        np.testing.assert_allclose(ex.run(x).output, want, rtol=0, atol=1e-4)
        build(out)
        sim = run_sim(out, x[:3])
        assert sim.bit_exact and not sim.problems, sim.problems
        params.append(sum(n["param_bytes"] for n in summary["nodes"]))
        sent.append(sum(n["bytes_sent_per_inference"] for n in summary["nodes"]))
        assert json.loads((out / "compile.json").read_text())["elastic"] == {"mode": mode, "modes": 3}
    assert params[0] > params[1] > params[2] and sent[0] > sent[1] > sent[2]


def test_compile_refuses_a_mode_the_model_lacks_and_another_split(elastic_model: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from codegen.cli import main

    for args, message in ((["--mode", "3"], "--mode 3: "), (["--devices", "1"], "modes hold for the split it was trained on"),
                          (["--mode", "0", "--devices", "1"], "modes hold for the split it was trained on"),
                          (["--max-generation", "2"], "control round of 2 nodes (3 rows) must fit one Mixer round; "
                                                      "give at least 3")):
        res = CliRunner().invoke(main, ["compile", str(elastic_model / "model.onnx"), "-o", str(tmp_path / "b"),
                                        "--quiet", *args])
        assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output
        assert not (tmp_path / "b").exists()


def _switch_lines(records) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for r in records:
        if r.event == "mode" and r.fields["state"] == "switch":
            out.setdefault(r.node, []).append((int(r.fields["inf"]), int(r.fields["mode"])))
    return out


@pytest.fixture(scope="module")
def every_mode_build(elastic_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model

    out = tmp_path_factory.mktemp("every") / "b"
    compile_model(elastic_model / "model.onnx", out, CompileOptions())
    build(out)
    build(out, "qemu-m4")  # the ARM images the cycle model runs (`cisl build` makes both)
    return out


@pytest.fixture(scope="module")
def profiled_build(every_mode_build: Path) -> Path:
    """every_mode_build after `cisl modes`: its images hold the profile table, so nodes take limits (the
    tests that give limits used to rely on a test before them in the same worker having run it)."""
    from click.testing import CliRunner

    from codegen.cli import main

    res = CliRunner().invoke(main, ["modes", str(every_mode_build), "--topology", "full_mesh", "--quiet"])
    assert res.exit_code == 0, res.output
    return every_mode_build


def test_one_image_switches_mode_network_wide_bit_exact_per_mode(every_mode_build: Path, elastic_model: Path) -> None:
    """Without --mode an elastic model compiles into one image per node holding every mode. Requests
    from two different nodes' hosts switch every node at the same inference (one inference after a
    peer's request, at once for the control round's starter), and every inference is bit-exact with
    the int8 reference of the mode it ran."""
    from codegen.plan.io import load_plan
    from codegen.vtestbed.run import run_sim

    plan = load_plan(every_mode_build)
    el = plan.meta["elastic"]
    assert (el["mode"], el["modes"], el["image"]) == (0, 3, "every mode")
    assert [p["mode"] for p in el["profile"]] == [0, 1, 2] and el["profile"][0]["macs"] > el["profile"][2]["macs"]
    assert [load_plan(every_mode_build / "modes" / f"mode_{m}").meta["elastic"]["mode"] for m in (1, 2)] == [1, 2]
    x = np.load(elastic_model / "test_windows.npy").astype(np.float32)[:8]
    sim = run_sim(every_mode_build, x, radio="full_mesh", mode_requests=[(1, 1, 2), (3, 0, 1), (5, 1, 0), (6, 1, 2)])
    assert sim.bit_exact and not sim.problems, (sim.problems, sim.first_difference)
    lines = _switch_lines(sim.records)
    assert lines[0] == lines[1] == [(2, 2), (3, 1), (6, 0), (7, 2)], lines
    requests = sorted((int(r.fields["inf"]), r.node, int(r.fields["mode"])) for r in sim.records
                      if r.event == "mode" and r.fields["state"] == "request")
    assert requests == [(1, 1, 2), (3, 0, 1), (5, 1, 0), (6, 1, 2)]


def test_a_mode_request_after_the_last_inference_is_refused_not_ignored(every_mode_build: Path,
                                                                        elastic_model: Path) -> None:
    from codegen.errors import UserError
    from codegen.vtestbed.run import run_sim

    x = np.load(elastic_model / "test_windows.npy").astype(np.float32)[:4]
    with pytest.raises(UserError, match="mode request for inference 4 on node 0: the run has inferences 0 to 3"):
        run_sim(every_mode_build, x, radio="full_mesh", mode_requests=[(1, 1, 2), (4, 0, 1)])
    # node 1's ask at the last inference would switch the nodes after the run
    with pytest.raises(UserError, match="inference 3 on node 1: .* one inference later"):
        run_sim(every_mode_build, x, radio="full_mesh", mode_requests=[(3, 1, 2)])
    with pytest.raises(UserError, match="mode limits for inference 9"):
        run_sim(every_mode_build, x, radio="full_mesh", mode_limits=[(9, 0, 10, 10, 10)])
    # each in time on its own, but node 0's own request goes first and pushes node 1's past the run (it
    # used to run without it, "bit-exact: yes")
    with pytest.raises(UserError, match=r"inference 2 on node 1 \(mode 2\) would switch the nodes only at inference 4, "
                                        r"after the run's last inference 3: .* node 0's request for inference 3 goes first"):
        run_sim(every_mode_build, x, radio="full_mesh", mode_requests=[(2, 1, 2), (3, 0, 1)])


def test_a_node_that_misses_a_switch_is_reported_not_silently_mixed(every_mode_build: Path, elastic_model: Path) -> None:
    """Node 1's radio is dead for the control round that announces a switch: it runs the old mode
    while node 0 runs the new one. The run fails naming the mixed modes; nothing is reported as
    bit-exact."""
    from codegen.plan.io import load_plan
    from codegen.vtestbed.run import run_sim

    plan = load_plan(every_mode_build)
    per_inference = 1 + sum(len(ex) for ex in plan.meta["mixer"]["exchanges"])  # control round + data rounds
    x = np.load(elastic_model / "test_windows.npy").astype(np.float32)[:6]
    sim = run_sim(every_mode_build, x, radio="full_mesh", mode_requests=[(3, 0, 2)],
                  radio_fail=[(1, 3 * per_inference, 1)], timeout=60)
    assert not sim.bit_exact
    assert any("inference 3 ran mixed modes: node 0 mode 2, node 1 mode 0" in p for p in sim.problems), sim.problems
    assert any("different rounds" in p for p in sim.problems), sim.problems


def test_the_every_mode_image_stores_the_weights_once(elastic_model: Path, tmp_path: Path) -> None:
    """nRF52840 images: every mode together costs less flash than one more copy of mode 1's weights
    on top of mode 0 alone, and much less than the bag of one image per mode."""
    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model

    flash = {}
    for mode in (None, 0, 1, 2):
        out = tmp_path / f"m{mode}"
        summary = compile_model(elastic_model / "model.onnx", out, CompileOptions(board="nrf52840dk", mode=mode))
        flash[mode] = [n["flash"] for n in build(out)["nodes"]]
        if mode == 1:
            mode1_params = [n["param_bytes"] for n in summary["nodes"]]
    for k in range(2):
        assert flash[None][k] - flash[0][k] < mode1_params[k]
        assert flash[None][k] < 0.6 * (flash[0][k] + flash[1][k] + flash[2][k])


def test_every_mode_shares_mode_0s_constants(elastic_model: Path) -> None:
    """The modes planned side by side (level-ordered h and z columns, one calibration over every
    mode, mode 0's weight scales): the same ops in the same order, every constant of every mode a
    prefix of mode 0's, so one image can store the weights once; each mode's int8 forecast stays
    close to its float one."""
    from codegen.executor import PlanExecutor
    from codegen.onnx_model import load_model
    from codegen.plan.elastic import alignment_problem, mode_structures, quantize_modes, sharing_problem

    model = load_model(elastic_model / "model.onnx")
    structs = mode_structures(model.config, model.split, model.masks, model.keep_ratio, model.modes)
    assert alignment_problem(structs) is None
    cal = np.load(elastic_model / "calibration.npy").astype(np.float32)
    q, consts = quantize_modes(structs, model.weights, cal)
    assert sharing_problem(structs, consts) is None
    stored = [sum(v.nbytes for node in c for v in node.values()) for c in consts]
    assert stored[0] > stored[1] > stored[2]  # what each mode uses of the one copy
    x = np.load(elastic_model / "test_windows.npy").astype(np.float32)
    qi, qo = q["input"], q["output"]
    x8 = np.clip(np.sign(x / qi.scale) * np.floor(np.abs(x / qi.scale) + 0.5) + qi.zero_point, -128, 127).astype(np.int8)
    for st, c in zip(structs, consts):
        f = PlanExecutor([n.tensors for n in st.nodes], [n.ops for n in st.nodes], st.sgs, "float",
                         weights=model.weights).run(x).output
        y8 = PlanExecutor([n.tensors for n in st.nodes], [n.ops for n in st.nodes], st.sgs, "int8",
                          constants=c).run(x8).output
        err = (y8.astype(np.float64) - qo.zero_point) * qo.scale - f
        assert np.mean(err ** 2) < 0.05 * np.mean(f ** 2)
    # a deliberately broken plan is caught: mode 1 quantised with its own weight scales
    from codegen.plan.quantize import calibrate, quantize

    own = quantize(structs[1], model.weights, calibrate(list(structs), model.weights, cal))
    assert "values are not mode 0's" in sharing_problem(structs[:2], [consts[0], own])


def test_mode_limits_without_the_mode_table_are_refused_before_any_node_starts(elastic_model: Path,
                                                                             tmp_path: Path) -> None:
    """Images built before `cisl modes` (or after one stopped early) hold an empty mode table: limits
    given to them were ignored — the run stayed in mode 0, missed the deadline and still said
    "bit-exact: yes". `cisl sim` and `cisl logs` refuse them up front; explicit mode requests need no table."""
    from clirun import cisl, ok

    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from codegen.emit.cnode import emit_mode_table, environment
    from codegen.modes import ModeProfile, write_table
    from codegen.plan.io import load_plan

    b = tmp_path / "b"
    compile_model(elastic_model / "model.onnx", b, CompileOptions())
    build(b)
    assert "0 of 3 modes profiled" in (b / "node_00" / "cisl_mode_table.h").read_text()
    p = cisl("sim", "b", "-n", "3", "--mode-limits", "0:0:60:-:-", cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "b hold no mode table" in p.stderr and "run `cisl modes b`" in p.stderr, p.stderr
    assert not (b / "logs").exists()  # no node started
    p = ok(cisl("sim", "b", "-n", "3", "--mode-request", "0:0:1", cwd=tmp_path))  # explicit modes need no table
    assert "bit-exact" in p.stdout and "mode 1 from inference 0" in p.stdout, p.stdout

    # `cisl logs` on the images `cisl flash` programmed from it: refused before the run
    ok(cisl("testbed", "sim", "--nodes", "2", "-o", "tb.toml", cwd=tmp_path))
    try:
        ok(cisl("flash", "b", "--testbed", "tb.toml", "--no-reset", cwd=tmp_path))
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", "--mode-limits", "0:0:60:-:-", cwd=tmp_path)
        assert p.returncode == 2 and "hold no mode table" in p.stderr and "`cisl modes" in p.stderr, p.stderr
        assert "cisl flash" in p.stderr and not (tmp_path / "logs").exists(), p.stderr
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)

    # `cisl modes` stopped between writing modes.json and the last node's table: node 1's is still empty,
    # and `cisl modes` (which reuses modes.json) puts the table into every image
    rows = [ModeProfile(mode=m, macs=1, val_mse=0.5, test_mse=0.5, latency_us=60000 - 1000 * m,
                        latency_range_us=(1, 2), energy_nj=100, energy_range_nj=(1, 2)) for m in range(3)]
    write_table(b, rows, None)
    emit_mode_table(load_plan(b), 0, b / "node_00", environment(),
                    [{"latency_us": r.latency_us, "energy_nj": r.energy_nj, "mse_u": r.mse_u} for r in rows])
    p = cisl("sim", "b", "-n", "3", "--mode-limits", "0:0:60:-:-", cwd=tmp_path)
    assert p.returncode == 2 and "node_01/cisl_mode_table.h: 0 of 3 modes profiled" in p.stderr, p.stderr
    p = ok(cisl("modes", "b", "-q", cwd=tmp_path))
    assert "CISL_MODE_TABLE_LEN 3u" in (b / "node_01" / "cisl_mode_table.h").read_text()
    p = ok(cisl("sim", "b", "-n", "3", "--mode-limits", "0:0:59.5:-:-", cwd=tmp_path))
    assert "mode 1 from inference 0" in p.stdout, p.stdout  # mode 0 (60 ms) misses 59.5 ms; 1 and 2 tie: 1


def test_cisl_modes_profiles_every_mode_and_picks_under_limits(every_mode_build: Path) -> None:
    """`cisl modes` runs each mode on the timing model (the images on the cycle model: a smaller
    mode is faster and needs less energy), writes modes.json, and under each constraint set names
    the mode the selector rule gives on that table (exit 1 when none fits)."""
    import json

    from click.testing import CliRunner

    from codegen.cli import main
    from codegen.modes import NO_LIMIT, select_mode

    res = CliRunner().invoke(main, ["modes", str(every_mode_build), "--topology", "full_mesh", "--quiet"])
    assert res.exit_code == 0, res.output
    rows = rows_full = json.loads((every_mode_build / "modes.json").read_text())["modes"]
    assert [r["mode"] for r in rows] == [0, 1, 2]
    assert rows[0]["latency_us"] > rows[1]["latency_us"] > rows[2]["latency_us"]
    assert rows[0]["energy_nj"] > rows[2]["energy_nj"]
    table = [(r["latency_us"], r["energy_nj"], int(r["val_mse"] * 1e6 + 0.5)) for r in rows]
    cases = [(None, None, None)] + [(r["latency_us"] / 1e3, None, None) for r in rows] + \
            [(None, r["energy_nj"] / 1e3, None) for r in rows] + [(rows[2]["latency_us"] / 1e3 - 1, None, None),
                                                                (None, None, rows[1]["val_mse"])]
    for deadline, energy, mse in cases:
        args = [*(["--deadline", repr(deadline)] if deadline is not None else []),
                *(["--energy", repr(energy)] if energy is not None else []),
                *(["--max-mse", repr(mse)] if mse is not None else [])]
        res = CliRunner().invoke(main, ["modes", str(every_mode_build), *args])
        if not args:
            assert res.exit_code == 0 and "<- chosen" not in res.output
            continue
        want = select_mode(table, round(deadline * 1e3) if deadline is not None else NO_LIMIT,
                           round(energy * 1e3) if energy is not None else NO_LIMIT,
                           int(mse * 1e6 + 0.5) if mse is not None else NO_LIMIT)
        if want < 0:
            assert res.exit_code == 1 and "no mode meets the limits" in res.output, res.output
        else:
            assert res.exit_code == 0 and res.output.strip().splitlines()[-1] == f"mode {want}", res.output
    # an MSE no mode reaches: the hint names the best MSE, not the fastest and cheapest modes (it did)
    res = CliRunner().invoke(main, ["modes", str(every_mode_build), "--max-mse", "1e-6"])
    best = min(rows, key=lambda r: r["val_mse"])["mode"]
    assert res.exit_code == 1 and f"no mode meets the limits (lowest MSE: mode {best})" in res.output, res.output
    # the table is reused for its own topology (or none named), profiled again for another one
    from codegen.modes import read_table

    assert read_table(every_mode_build, "full_mesh") and read_table(every_mode_build)
    assert read_table(every_mode_build, "line") is None
    # --testbed: profiled where the testbed file puts the nodes, once per layout (a moved node profiles again)
    from codegen.plan.io import load_plan

    tb = every_mode_build.parent / "modes-tb.toml"
    rows = '[defaults]\nboard = "nrf52840dk"\nrunner = "pyocd"\n\n' + "".join(
        f'[[node]]\nid = {k}\nprobe = "6830{k}"\nport = "/dev/ttyACM{k}"\nposition = [{9.0 * k}, 0.0]\n\n'
        for k in range(load_plan(every_mode_build).devices))
    tb.write_text(rows)
    res = CliRunner().invoke(main, ["modes", str(every_mode_build), "--testbed", str(tb)])
    assert res.exit_code == 0 and "profiled 3 modes" in res.output, res.output
    doc = json.loads((every_mode_build / "modes.json").read_text())
    assert doc["topology"].startswith("positions of testbed nodes 0,1 (modes-tb.toml) "), doc["topology"]
    far = [r["latency_us"] for r in doc["modes"]]
    assert far != [r["latency_us"] for r in rows_full], "9 m apart and next to each other: the same rounds?"
    res = CliRunner().invoke(main, ["modes", str(every_mode_build), "--testbed", str(tb)])
    assert res.exit_code == 0 and "profiled" not in res.output, res.output  # the table of this layout: reused
    from codegen.timing.estimate import layout_key, testbed_topology

    tb.write_text(rows.replace("position = [9.0, 0.0]", "position = [2.0, 0.0]"))
    moved = layout_key(*testbed_topology(tb, load_plan(every_mode_build)))
    assert moved != doc["topology"] and read_table(every_mode_build, moved) is None
    res = CliRunner().invoke(main, ["modes", str(every_mode_build), "--testbed", str(tb), "--topology", "line"])
    assert res.exit_code == 2 and "give one of them" in res.output, res.output


def test_the_sinks_selector_picks_what_cisl_modes_picks(profiled_build: Path, elastic_model: Path) -> None:
    """After `cisl modes` the images hold the profile table; the sink, given a constraint set per
    inference, switches every node to the mode the host's rule gives for it (no fitting mode: it
    stays), at that inference, bit-exact throughout."""
    import json

    from click.testing import CliRunner

    from codegen.cli import main
    from codegen.modes import NO_LIMIT, select_mode
    from codegen.vtestbed.run import run_sim

    every_mode_build = profiled_build
    assert "CISL_MODE_TABLE_LEN 3u" in (every_mode_build / "node_00" / "cisl_mode_table.h").read_text()
    rows = json.loads((every_mode_build / "modes.json").read_text())["modes"]
    table = [(r["latency_us"], r["energy_nj"], int(r["val_mse"] * 1e6 + 0.5)) for r in rows]
    N = NO_LIMIT
    sets = [(table[1][0], N, N), (N, table[2][1], N), (table[2][0] - 1, N, N), (N, N, table[0][2]),
            (table[0][0], table[1][1], N), (N, N, table[1][2]), (table[2][0], N, table[1][2])]
    x = np.load(elastic_model / "test_windows.npy").astype(np.float32)[:len(sets)]
    sim = run_sim(every_mode_build, x, radio="full_mesh", mode_limits=[(i, 0, *s) for i, s in enumerate(sets)])
    assert sim.bit_exact and not sim.problems, (sim.problems, sim.first_difference)
    want, mode = [], 0
    for s in sets:
        pick = select_mode(table, *s)
        mode = pick if pick >= 0 else mode
        want.append(mode)
    ran = [0] * len(sets)
    for r in sim.records:
        if r.node == 1 and r.event == "mode" and r.fields["state"] == "switch":
            ran[int(r.fields["inf"]):] = [int(r.fields["mode"])] * (len(sets) - int(r.fields["inf"]))
    assert ran == want and len(set(want)) == 3, (ran, want)
    # the host answers the same for each set (exit 1 where nothing fits)
    for s in sets:
        args = [*(["--deadline", repr(s[0] / 1e3)] if s[0] != N else []),
                *(["--energy", repr(s[1] / 1e3)] if s[1] != N else []),
                *(["--max-mse", repr(s[2] / 1e6)] if s[2] != N else [])]
        res = CliRunner().invoke(main, ["modes", str(every_mode_build), *args])
        pick = select_mode(table, *s)
        if pick >= 0:
            assert res.exit_code == 0 and res.output.strip().splitlines()[-1] == f"mode {pick}", res.output
        else:
            assert res.exit_code == 1 and "no mode meets the limits" in res.output, res.output


def test_limits_on_two_nodes_that_pick_different_modes_get_a_note(profiled_build: Path) -> None:
    """Two nodes whose limits pick different modes each ask for theirs whenever the network runs the
    other's: the modes alternate (2, 0, 2, 0 in an audit run), bit-exact and without a word before."""
    import json

    from codegen.modes import NO_LIMIT, limits_conflict

    rows = json.loads((profiled_build / "modes.json").read_text())["modes"]
    N = NO_LIMIT
    best_mse = (0, 0, N, N, int(rows[0]["val_mse"] * 1e6 + 0.5))  # node 0: mode 0 only
    fastest = (0, 1, min(r["latency_us"] for r in rows), N, N)  # node 1: the fastest mode only
    note = limits_conflict(profiled_build, [best_mse, fastest])
    assert note and "node 0's limits pick mode 0 and node 1's mode" in note and "alternate" in note, note
    assert limits_conflict(profiled_build, [best_mse, (0, 1, *best_mse[2:])]) is None  # the same pick
    assert limits_conflict(profiled_build, [best_mse, (3, 0, *fastest[2:])]) is None  # one node


def test_a_virtual_node_waits_for_a_slow_hosts_command(profiled_build: Path, tmp_path: Path, monkeypatch) -> None:
    """A virtual node runs an inference in milliseconds; a host that reacts to the cue line 0.4 s late
    (a loaded machine: CI ran the test above with "got no answer (... it ended first ...)") still has
    its command taken before the very inference it was meant for, because `cisl logs` tells the
    virtual testbed where host lines come and the node waits for them there."""
    import time

    from clirun import cisl, ok

    from codegen.testbed import capture
    from codegen.testbed.capture import HostCommand
    from codegen.testbed.config import load_testbed
    from codegen.testbed.logs import run_logs

    ok(cisl("testbed", "sim", "--nodes", "2", "--inferences", "6", "-o", "tb.toml", cwd=tmp_path))
    try:
        ok(cisl("flash", str(profiled_build), "--testbed", "tb.toml", "--no-reset", cwd=tmp_path))
        send = capture.PortReader.send
        monkeypatch.setattr(capture.PortReader, "send", lambda self, data: (time.sleep(0.4), send(self, data))[1])
        cmds = [HostCommand(1, 2, "mode 1"), HostCommand(0, 4, "limits - - -")]
        r = run_logs(load_testbed(tmp_path / "tb.toml"), tmp_path / "logs", commands=cmds)
        assert r.ok, [c.failed for c in r.capture.nodes.values()]
        assert [(c.answer, c.answered_inf) for c in cmds] == [("ok", 2), ("ok", 4)]
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)


def test_the_host_switches_modes_over_a_nodes_serial_line(profiled_build: Path, tmp_path: Path) -> None:
    """`cisl logs --mode-request/--mode-limits` on the virtual testbed: the commands go out on the
    nodes' serial ports (pseudo-terminals, opened like a board's USB port), each node answers its
    command with a `host` line, and every node switches to the requested mode at the same
    inference, the one after the request went out in a control round. A mode the image lacks is
    answered `refused` and fails the run."""
    from clirun import cisl, ok

    from codegen.serial_contract import parse_text

    ok(cisl("testbed", "sim", "--nodes", "2", "--inferences", "16", "-o", "tb.toml", cwd=tmp_path))
    try:
        ok(cisl("flash", str(profiled_build), "--testbed", "tb.toml", "--no-reset", cwd=tmp_path))
        p = ok(cisl("logs", "--testbed", "tb.toml", "-o", "logs", "--mode-request", "1:1:2", "--mode-limits",
                    "2:0:-:-:-", cwd=tmp_path))
        assert "host command to node 1 ('mode 2', cue: inference 1): ok" in p.stdout, p.stdout
        summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
        assert [n["inferences"] for n in summary["nodes"].values()] == [16, 16]  # [sim] inferences: windows cycled
        cmds = {c["text"]: c for c in summary["commands"]}
        assert {c["answer"] for c in cmds.values()} == {"ok"} and set(cmds) == {"mode 2", "limits - - -"}
        assert all(c["answered_inf"] == c["before"] for c in cmds.values())  # virtual nodes wait for the host
        assert cmds["mode 2"]["took_mode"] == 2 and "took_mode" not in cmds["limits - - -"]  # checked against the text
        records = [r for k in (0, 1) for r in parse_text((tmp_path / "logs" / f"node_{k:02d}.log").read_text())]
        # node 1's request goes out in the control round of the inference it was taken before; node 0,
        # which starts the rounds, announces it in the next one, and every node switches there
        want = [(cmds["mode 2"]["answered_inf"] + 1, 2)]
        lines = _switch_lines(records)
        assert lines[0] == lines[1] == want, (lines, want)
        hosts = [(r.node, r.fields["cmd"], r.fields["state"]) for r in records if r.event == "host"]
        assert sorted(hosts) == [(0, "limits", "ok"), (1, "mode", "ok")]

        # a mode the flashed images lack is refused before the run ...
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs-bad", "--mode-request", "1:1:7", cwd=tmp_path)
        assert p.returncode == 2 and "hold modes 0 to 2" in p.stderr, (p.stdout, p.stderr)
        assert not (tmp_path / "logs-bad").exists()
        # ... and by the node itself where the host no longer knows the flashed build (moved, compiled again)
        flashed = tmp_path / ".cisl-testbed" / "flashed.json"
        flashed.write_text(flashed.read_text().replace(str(profiled_build.resolve()), str(tmp_path / "moved")))
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs-bad", "--mode-request", "1:1:7", cwd=tmp_path)
        assert p.returncode == 1 and "host command 'mode 7' was not carried out: the node answered state=refused" \
            in p.stdout + p.stderr, (p.stdout, p.stderr)
        # a request so late that the run ends before the switch is not a run in the mode asked for:
        # taken before the last inference (or, the UART being asynchronous, not taken at all)
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs-late", "--mode-request", "15:1:1", cwd=tmp_path)
        said = p.stdout + p.stderr
        assert p.returncode == 1 and ("host command 'mode 1' was taken before inference" in said
                                      and "send it earlier" in said or "host command 'mode 1' got no answer" in said), said
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)


@pytest.mark.arm
def test_an_estimate_of_a_mode_is_an_estimate_of_the_image_that_holds_it(every_mode_build: Path,
                                                                        tmp_path: Path) -> None:
    """Every mode runs in the one image of plan.json, whose hash the boot lines print: `cisl estimate
    --mode 1` names that plan (not mode 1's own), so `cisl report` takes it for the image's logs.
    On a copy with board time, as `cisl build` leaves it (the module's build has none; the test passed
    only after another test had run `cisl modes` on it in the same worker)."""
    import shutil

    from clirun import cisl, ok

    from codegen.plan.io import load_plan
    from codegen.timing.boardtime import refresh

    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("the estimate needs the ARM images (arm-none-eabi-gcc)")
    every_mode_build = shutil.copytree(every_mode_build, tmp_path / "b")
    refresh(every_mode_build)
    ok(cisl("estimate", str(every_mode_build), "-q", "--mode", "1", "-o", "est1.json", cwd=tmp_path))
    doc = json.loads((tmp_path / "est1.json").read_text())
    plan = load_plan(every_mode_build).sha256[:16]
    assert (doc["plan"], doc["mode"]) == (plan, 1) and plan != load_plan(every_mode_build / "modes" / "mode_1").sha256[:16]
    ok(cisl("sim", str(every_mode_build), "-n", "3", "--logs", "logs", "--mode-request", "0:0:1", cwd=tmp_path))
    p = ok(cisl("report", "logs", "-o", "rep", "--estimate", "est1.json", "--no-plots", cwd=tmp_path))
    assert "predicted" in p.stdout, p.stdout


@pytest.mark.arm
def test_sim_nodes_count_the_board_time_of_the_mode_they_run(every_mode_build: Path, elastic_model: Path,
                                                             tmp_path: Path) -> None:
    """With board time, the nodes of an every-mode sim image count the cycle model's cycles of the mode
    each inference runs: every block line's cycles equal that mode's cycle model (each op rounded to
    whole cycles), so a smaller mode prints a shorter block than mode 0."""
    import shutil

    from codegen.timing.boardtime import read_table, refresh
    from codegen.timing.compute import compute_build
    from codegen.vtestbed.run import run_sim

    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("board time needs the ARM images (arm-none-eabi-gcc)")
    work = tmp_path / "b"
    shutil.copytree(every_mode_build, work)
    assert "each of 3 modes" in refresh(work)
    assert sorted(read_table(work / "node_00" / "board_time.txt")["modes"]) == [1, 2]
    model = {m: {nc.device: {(b.key.block, b.key.layer): b for b in nc.blocks}
                 for nc in compute_build(work, mode=m if m else None)} for m in range(3)}
    x = np.load(elastic_model / "test_windows.npy").astype(np.float32)[:4]
    sim = run_sim(work, x, radio="full_mesh", mode_requests=[(1, 0, 2), (2, 0, 1)])
    assert sim.bit_exact and not sim.problems, sim.problems
    mode_at: dict[tuple[int, int], int] = {}
    for node, switches in _switch_lines(sim.records).items():
        for inf in range(len(x)):
            mode_at[node, inf] = max([(i, m) for i, m in switches if i <= inf], default=(0, 0))[1]
    seen_modes, checked = set(), 0
    for r in sim.records:
        if r.event != "block":
            continue
        node, inf = r.node, int(r.fields["inf"])
        m = mode_at.get((node, inf), 0)
        b = model[m][node][(r.fields["block"], int(r.fields["layer"]))]
        assert int(r.fields["cycles"]) == pytest.approx(b.cycles[1], abs=len(b.ops)), (node, inf, m, r.fields)
        seen_modes.add(m)
        checked += 1
    assert seen_modes == {0, 1, 2} and checked > 0


def test_every_mode_of_a_3_node_image_runs_though_a_smaller_mode_has_larger_rounds(tmp_path: Path) -> None:
    """Mixer's buffers were sized from mode 0's rounds alone. A round's payload is chosen per exchange,
    so a smaller mode can have larger rounds: in this 3-node model mode 1's payload is 40 B where mode
    0's largest is 32, and every node stopped with `error where=l0.hg code=-2` once mode 1 ran (mode 1
    compiled alone ran fine). The image's maxima now cover every mode's rounds and the control round."""
    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from codegen.plan.elastic import elastic_plans
    from codegen.plan.io import load_plan
    from codegen.plan.mixer_layout import mixer_maxima, section_rounds
    from codegen.train.api import run_train
    from codegen.vtestbed.run import _queued_switches, run_sim

    (tmp_path / "train.toml").write_text(ELASTIC_TOML.replace("devices = 2", "devices = 3"))
    run_train(tmp_path / "train.toml", None, tmp_path / "m", progress=False)
    compile_model(tmp_path / "m" / "model.onnx", tmp_path / "b", CompileOptions())
    plan = load_plan(tmp_path / "b")
    maxima = mixer_maxima(plan)
    rounds = [r for p in elastic_plans(tmp_path / "b", plan) for r in section_rounds(p.meta["mixer"])]
    assert max(r["payload"] for r in rounds) == maxima["MX_MAX_P"]
    assert max(r["generation"] for r in rounds) == maxima["MX_MAX_G"]
    build(tmp_path / "b")
    x = np.load(tmp_path / "m" / "test_windows.npy").astype(np.float32)[:6]
    # two peers ask at once: one request is served per inference, and the served one's row is heard once
    # more (the queue `cisl sim` checks requests against before the run: _queued_switches)
    requests = [(0, 0, 1), (2, 1, 2), (2, 2, 0)]
    sim = run_sim(tmp_path / "b", x, radio="full_mesh", mode_requests=requests)
    assert sim.bit_exact and not sim.problems, (sim.problems, sim.first_difference)
    assert _switch_lines(sim.records)[0] == [(0, 1), (3, 2), (5, 0)]
    assert _queued_switches(requests, len(x)) == {(0, 0, 1): 0, (2, 1, 2): 3, (2, 2, 0): 5}
