"""The testbed commands on the virtual testbed, end to end: `cisl testbed sim` -> `cisl flash` (runner sim:
the background supervisor, one pseudo-terminal per node) -> `cisl logs` (pyserial on the ptys, exactly
as on boards) -> `cisl report`. The logged forecast equals the int8 reference run with the losses the
medium recorded; a node that crashes is a failure of the run, reported at once."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from clirun import cisl, ok
from models import config_for_tokens, make_model_dir

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.executor import PlanExecutor
from codegen.plan.io import load_plan
from codegen.serial_contract import Record, outputs_by_inference
from codegen.vtestbed import frames as P

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Builds of one model for 4 nodes and for 1 node, and a 4-node virtual testbed (stopped at the end)."""
    root = tmp_path_factory.mktemp("testbed")
    model = make_model_dir(root / "m", config_for_tokens(8, 64), devices=4, keep_ratio=1.0, seed=3, tests=3)
    for d in (4, 1):
        compile_model(model, root / f"build{d}", CompileOptions(devices=d))
        build(root / f"build{d}")
    ok(cisl("testbed", "sim", "--nodes", "4", "-o", "tb.toml", cwd=root))
    yield root
    cisl("testbed", "stop", "--testbed", "tb.toml", cwd=root)
    sup = root / ".cisl-testbed" / "supervisor.json"
    assert not sup.exists(), "the supervisor did not stop"


def reference(build_dir: Path, state: Path) -> np.ndarray:
    """The int8 reference forecast for the testbed's inputs, with the messages the medium lost."""
    plan = load_plan(build_dir)
    xq = np.load(state / "inputs.npy")
    dropped = P.read_losses(state / "run" / "losses.bin")
    none = np.zeros((plan.devices, plan.devices), dtype=bool)
    lost = {sg.sg: np.stack([dropped.get((i, sg.sg), none) for i in range(len(xq))]) for sg in plan.sgs}
    ref = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "int8",
                       constants=[n.constants for n in plan.nodes]).run(xq, lost=lost)
    return ref.output.astype(np.int8)


def logged_forecast(logs: Path, plan) -> dict[int, bytes]:
    recs = []
    for line in (logs / f"node_{plan.sink:02d}.jsonl").read_text().splitlines():
        d = json.loads(line)
        recs.append(Record(d.pop("node"), d.pop("event"), {k: v for k, v in d.items() if k != "host_time"}))
    return outputs_by_inference(recs)


def test_flash_logs_report_on_the_virtual_testbed(lab):
    t0 = time.monotonic()
    p = ok(cisl("flash", "build4", "--testbed", "tb.toml", "--no-reset", cwd=lab))
    assert p.stdout.count(" ok") == 4
    state = lab / ".cisl-testbed"
    assert all((state / f"node_{k:02d}.tty").is_symlink() for k in range(4))
    sup = json.loads((state / "supervisor.json").read_text())
    assert Path(f"/proc/{sup['pid']}").exists()  # it outlived `cisl flash`

    p = ok(cisl("logs", "--testbed", "tb.toml", "-o", "logs4", cwd=lab))
    assert "stopped: all nodes done" in p.stdout
    logs = lab / "logs4"
    for k in range(4):
        assert (logs / f"node_{k:02d}.log").read_text().startswith(f"CISL {k} boot ")  # opened before the reset
        assert (logs / f"node_{k:02d}.jsonl").is_file()
    merged = [json.loads(x) for x in (logs / "merged.jsonl").read_text().splitlines()]
    assert [m["host_time"] for m in merged] == sorted(m["host_time"] for m in merged)
    assert sum(1 for m in merged if m["event"] == "end") == 4
    summary = json.loads((logs / "summary.json").read_text())
    assert summary["ok"] and summary["flashed"]["nodes"] == [0, 1, 2, 3]

    # the forecast the sink printed = the int8 reference (with exactly the messages the radio lost)
    plan = load_plan(lab / "build4")
    ref = reference(lab / "build4", state)
    got = logged_forecast(logs, plan)
    assert sorted(got) == list(range(len(ref)))
    for i, want in enumerate(ref):
        assert got[i] == want.tobytes(), f"inference {i}"
        np.testing.assert_array_equal(plan.dequantize_output(np.frombuffer(got[i], np.int8)),
                                      plan.dequantize_output(want))

    # a second run stops after N inferences: the reset restarts the nodes
    p = ok(cisl("logs", "--testbed", "tb.toml", "-o", "logs4b", "--inferences", "2", cwd=lab))
    assert "stopped: all nodes done" in p.stdout

    # the same testbed runs the 1-node build (nodes 1-3 are erased); then report both runs
    ok(cisl("flash", "build1", "--testbed", "tb.toml", cwd=lab))
    ok(cisl("logs", "--testbed", "tb.toml", "-o", "logs1", cwd=lab))
    assert sorted(x.name for x in (lab / "logs1").glob("node_*.jsonl")) == ["node_00.jsonl"]
    p = ok(cisl("report", "logs1", "logs4", "-o", "report", "--build", "build1", "--build", "build4", cwd=lab))
    rep = lab / "report"
    for f in ("latency.csv", "blocks.csv", "rounds.csv", "delivery.csv", "speedup.csv", "forecasts.csv",
              "memory.csv", "latency_blocks.png", "latency_nodes.png", "delivery.png", "speedup.png", "memory.png"):
        assert (rep / f).is_file() and (rep / f).stat().st_size > 0, f
    assert (rep / "latency_blocks.png").read_bytes()[:4] == b"\x89PNG"
    speed = (rep / "speedup.csv").read_text().splitlines()
    assert speed[0] == "run,nodes,sink,infer_us,compute_us,comm_us,speedup,clock"
    assert speed[1].startswith("logs1,1,0,") and speed[1].endswith(",1.0,host") and speed[2].startswith("logs4,4,0,")
    fc = (rep / "forecasts.csv").read_text().splitlines()
    assert len(fc) == 1 + 2 * len(ref) and all(",yes," in row for row in fc[1:])
    rows4 = [r for r in fc[1:] if r.startswith("logs4,")]
    assert [r.split(",")[-1] for r in rows4] == [w.tobytes().hex() for w in ref]
    assert time.monotonic() - t0 < 90


def test_a_crashing_node_fails_the_run_at_once(lab):
    ok(cisl("flash", "build4", "--testbed", "tb.toml", "--no-reset", cwd=lab))
    img = lab / ".cisl-testbed" / "node_02" / "firmware.elf"
    img.write_text("#!/bin/sh\necho 'CISL 2 boot fw=0.1.0 plan=0 board=sim node=2 nodes=4'\n"
                   "echo 'segfault (simulated)' >&2\nexit 3\n")
    t0 = time.monotonic()
    p = cisl("logs", "--testbed", "tb.toml", "-o", "logs-crash", "--timeout", "60", cwd=lab)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert time.monotonic() - t0 < 20  # not waited out to the timeout
    row2 = next(ln for ln in p.stdout.splitlines() if ln.strip().startswith("2 "))
    assert "FAILED" in row2 and "exited with code 3" in row2 and "segfault (simulated)" in row2
    assert "plan" in row2 or "never came" in row2
    assert "FAILED:" in p.stderr


def test_a_testbed_laid_out_by_its_own_positions(lab):
    """[sim] topology = "positions": the medium places the nodes where the testbed file says (a lab's
    layout, a node far down the hallway); the run stays bit-exact with the messages that radio lost."""
    pos = lab / "pos"
    pos.mkdir(exist_ok=True)
    rows = "".join(f'[[node]]\nid = {k}\nport = "n{k}.tty"\nposition = [{x}, 0.0]\n'
                   for k, x in enumerate((0.0, 3.0, 6.0, 24.0)))
    tb = pos / "tb.toml"
    tb.write_text(f'[defaults]\nboard = "sim"\nrunner = "sim"\n\n[sim]\ntopology = "positions"\nseed = 1\n\n{rows}')
    ok(cisl("flash", "../build4", "--testbed", "tb.toml", "--no-reset", cwd=pos))
    run = json.loads((pos / ".cisl-testbed" / "run.json").read_text())
    assert run["topology"] == "positions" and run["positions"] == [[0.0, 0.0], [3.0, 0.0], [6.0, 0.0], [24.0, 0.0]]
    ok(cisl("logs", "--testbed", "tb.toml", "-o", "logs", cwd=pos))
    plan = load_plan(lab / "build4")
    ref = reference(lab / "build4", pos / ".cisl-testbed")
    got = logged_forecast(pos / "logs", plan)
    assert [got[i] for i in sorted(got)] == [w.tobytes() for w in ref]
    ok(cisl("testbed", "stop", "--testbed", "tb.toml", cwd=pos))
    # a node without a position: one line, before anything starts
    tb.write_text(tb.read_text().replace("position = [24.0, 0.0]\n", ""))
    p = cisl("flash", "../build4", "--testbed", "tb.toml", cwd=pos)
    assert p.returncode == 2 and "node 3 has none" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_planned_split_runs_on_the_testbed_nodes_it_was_planned_for(lab):
    """A split `cisl plan` made without testbed nodes 0 and 2 (`cisl compile --split`): plan node k runs on
    testbed node nodes[k], placed where the testbed file puts that node (as the planner priced it).
    `cisl flash` refused it on the virtual testbed ("run it with `cisl sim`"), and `cisl logs` failed
    the same build on boards: "its port printed node 0's lines; the testbed file's ports are swapped"."""
    from codegen.planner.split import SplitFile, write_split

    cfg = load_plan(lab / "build4").cfg
    half = [cfg.heads // 2, cfg.heads - cfg.heads // 2]
    write_split(lab / "split13.json", SplitFile(cfg, 1.0, [1, 3], ["nrf52840dk"] * 2, half,
                                                [cfg.mlp_hidden // 2, cfg.mlp_hidden - cfg.mlp_hidden // 2]))
    compile_model(lab / "m" / "model.onnx", lab / "build13", CompileOptions(split=lab / "split13.json"))
    build(lab / "build13")
    p = ok(cisl("flash", "build13", "--testbed", "tb.toml", cwd=lab))
    assert [ln.split()[1] for ln in p.stdout.splitlines() if ln.startswith("node ")] == ["01", "03"], p.stdout
    state = lab / ".cisl-testbed"
    assert not (state / "node_00" / "firmware.elf").exists() and not (state / "node_02" / "firmware.elf").exists()
    run = json.loads((state / "run.json").read_text())
    testbed = {n["id"]: n["position"] for n in __import__("tomllib").loads((lab / "tb.toml").read_text())["node"]}
    assert run["testbed_nodes"] == [1, 3] and run["positions"] == [testbed[1], testbed[3]]

    p = ok(cisl("logs", "--testbed", "tb.toml", "-o", "logs13", cwd=lab))
    rows = [ln.split() for ln in p.stdout.splitlines()]
    assert ["node", "plan"] == rows[0][:2] and [r[:2] for r in rows[1:3]] == [["1", "0"], ["3", "1"]], p.stdout
    assert all(r[-2:] == ["ok", "(end)"] for r in rows[1:3]), p.stdout
    logs = lab / "logs13"
    assert sorted(x.name for x in logs.glob("node_*.log")) == ["node_01.log", "node_03.log"]
    assert (logs / "node_03.log").read_text().startswith("CISL 1 boot ")  # testbed node 3 runs plan node 1
    summary = json.loads((logs / "summary.json").read_text())
    assert summary["ok"] and summary["flashed"]["plan_nodes"] == {"1": 0, "3": 1}
    recs = [json.loads(x) for x in (logs / "merged.jsonl").read_text().splitlines()]
    assert {r["node"] for r in recs} == {0, 1}  # the plan's nodes, as `cisl report` counts them
    sink = [Record(r.pop("node"), r.pop("event"), {k: v for k, v in r.items() if k != "host_time"})
            for r in recs if r["node"] == 0]
    got = outputs_by_inference(sink)
    ref = reference(lab / "build13", state)
    assert [got[i] for i in sorted(got)] == [w.tobytes() for w in ref]  # bit-exact, with the losses of that radio


def test_a_split_planned_for_the_first_testbed_nodes_runs_where_they_are(lab):
    """A planned split on testbed nodes 0 and 1 of the 4-node testbed runs at those nodes' positions, the
    layout `cisl plan` priced: it ran on a fresh full mesh for 2 nodes (the ids looked like an unplanned
    build's), and `cisl estimate`/`cisl sim` without --testbed gave no note about it."""
    from types import SimpleNamespace

    from codegen.planner.split import SplitFile, write_split
    from codegen.timing.estimate import testbed_hint

    cfg = load_plan(lab / "build4").cfg
    write_split(lab / "split01.json", SplitFile(cfg, 1.0, [0, 1], ["nrf52840dk"] * 2, [cfg.heads - 1, 1],
                                                [cfg.mlp_hidden - 2, 2]))
    compile_model(lab / "m" / "model.onnx", lab / "build01", CompileOptions(split=lab / "split01.json"))
    build(lab / "build01")
    ok(cisl("flash", "build01", "--testbed", "tb.toml", "--no-reset", cwd=lab))
    run = json.loads((lab / ".cisl-testbed" / "run.json").read_text())
    testbed = {n["id"]: n["position"] for n in __import__("tomllib").loads((lab / "tb.toml").read_text())["node"]}
    assert run["topology"] == "positions" and run["positions"] == [testbed[0], testbed[1]], run
    assert "planned for testbed nodes 0, 1;" in testbed_hint(load_plan(lab / "build01"), lab / "build01")
    assert testbed_hint(load_plan(lab / "build4"), lab / "build4") is None  # not planned: nothing to say
    one = SimpleNamespace(testbed_nodes=[3], devices=1, meta={"testbed_nodes": [3]})
    assert testbed_hint(one, lab / "b") is None  # one node has no rounds to place


@pytest.mark.qemu
@pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                    reason="arm toolchain or QEMU missing")
def test_qemu_nodes_behind_the_same_commands(tmp_path):
    """A qemu-m4 build on the virtual testbed: every node on its own QEMU against the reference's
    transcript of what it receives, its semihosting output on the node's pseudo-terminal."""
    model = make_model_dir(tmp_path / "m", config_for_tokens(8, 64), devices=2, keep_ratio=1.0, seed=5, tests=2)
    compile_model(model, tmp_path / "b", CompileOptions(devices=2, board="qemu-m4"))
    build(tmp_path / "b")
    ok(cisl("testbed", "sim", "--nodes", "2", "--board", "qemu-m4", "-o", "tb.toml", cwd=tmp_path))
    try:
        ok(cisl("flash", "b", "--testbed", "tb.toml", cwd=tmp_path))
        p = ok(cisl("logs", "--testbed", "tb.toml", "-o", "logs", cwd=tmp_path, timeout=300))
        assert "stopped: all nodes done" in p.stdout
        plan = load_plan(tmp_path / "b")
        xq = np.load(tmp_path / ".cisl-testbed" / "inputs.npy")
        ref = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "int8",
                           constants=[n.constants for n in plan.nodes]).run(xq).output.astype(np.int8)
        got = logged_forecast(tmp_path / "logs", plan)
        assert sorted(got) == list(range(len(ref)))
        assert all(got[i] == want.tobytes() for i, want in enumerate(ref))
        blocks = [json.loads(x) for x in (tmp_path / "logs" / "node_01.jsonl").read_text().splitlines()]
        assert any(b["event"] == "block" and int(b["cycles"]) > 0 for b in blocks)  # instructions under -icount
        # a board-sim build does not go onto qemu-m4 nodes
        compile_model(model, tmp_path / "s", CompileOptions(devices=2))
        build(tmp_path / "s")
        p = cisl("flash", "s", "--testbed", "tb.toml", cwd=tmp_path)
        assert p.returncode == 2 and "is a qemu-m4 board but" in p.stderr
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)
