"""Board time and energy (issue 12): `cisl estimate` on real ARM images, the virtual testbed in
nRF52840 time, and `cisl report` next to the prediction.

The cycle model runs every node's image bit-exact against the int8 reference; the virtual testbed's
sim nodes count the model's cycles and the radio's air time, so `cisl testbed sim` -> `cisl flash`
-> `cisl logs` -> `cisl report` gives the per-block latencies `cisl estimate` predicts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clirun import cisl, ok
from models import config_for_tokens, make_model_dir

from codegen.plan.io import load_plan
from codegen.compile import CompileOptions, compile_model

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
pytestmark = [pytest.mark.arm, pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """One 4-node model compiled for nrf52840dk and for sim (the sim build with its board time)."""
    root = tmp_path_factory.mktemp("estimate")
    model = make_model_dir(root / "m", config_for_tokens(8, 64, heads=8, layers=1), devices=4, keep_ratio=1.0,
                           seed=5, tests=3)
    compile_model(model, root / "hw", CompileOptions(devices=4, board="nrf52840dk"))
    ok(cisl("build", "hw", "-q", cwd=root))
    compile_model(model, root / "sim4", CompileOptions(devices=4))
    p = ok(cisl("build", "sim4", "-q", cwd=root))
    assert "board time: 4 nodes on the nRF52840 cycle model" in p.stdout
    return root


def test_estimate_of_an_nrf52840_build(builds):
    p = ok(cisl("estimate", "hw", "-q", "-o", "est.json", cwd=builds))
    for word in ("embed", "attn0", "mlp0", "head", "per inference: latency", "energy of the network"):
        assert word in p.stdout
    doc = json.loads((builds / "est.json").read_text())
    assert doc["devices"] == 4 and doc["model_board"] == "nrf52840dk" and doc["policy"] == "done"
    # the plan the images' boot lines name (`cisl report` refuses the estimate for logs of another)
    assert doc["plan"] == load_plan(builds / "hw").sha256[:16] and doc["mode"] is None
    for node in doc["nodes"]:
        assert node["messages_checked"] > 0  # every message the image sent was the reference's
        for b in node["blocks"]:
            c = b["cycles"]
            assert 0 < c["low"] <= c["central"] <= c["high"], b
        e = node["energy"]["total_uj"]
        assert 0 < e["low"] <= e["central"] <= e["high"]
    blocks = {b["block"]: b for b in doc["blocks"]}
    assert blocks["attn0"]["comm_ms"]["central"] > 0 and blocks["embed"]["comm_ms"]["central"] == 0
    lat = doc["latency_ms"]["central"]
    # the blocks, bulk-synchronous, and the slowest node's work outside them (input loop, reports, output)
    outside = doc["outside_blocks_ms"]["central"]
    assert lat == pytest.approx(sum(b["latency_ms"]["central"] for b in doc["blocks"]) + outside)
    assert outside == pytest.approx(max(n["runtime_cycles"]["central"] for n in doc["nodes"]) / doc["clock_hz"] * 1e3,
                                    abs=1e-6)  # est.json rounds to the nanosecond
    assert 0 < doc["comm_share"] < 1 and 0 < doc["radio_energy_share"] < 1
    # the published fixed round length (3G + 200 slots) is slower than cisl's early-terminating rounds
    fixed = json.loads(ok(cisl("estimate", "hw", "-q", "--json", "--policy", "fixed", cwd=builds)).stdout)
    assert fixed["comm_ms"]["central"] > doc["comm_ms"]["central"]
    assert fixed["network_energy_uj"]["central"] > doc["network_energy_uj"]["central"]


def test_a_period_shorter_than_one_inference_with_the_work_outside_the_blocks_is_refused(builds):
    """The latency was the blocks' sum alone: `--period-ms` accepted a period ~0.2 ms shorter than one
    inference (the nodes' input loop, block and infer lines, output), and every node's own busy time
    (t_cpu + t_comm) came out longer than the back-to-back period it was priced at."""
    doc = json.loads(ok(cisl("estimate", "hw", "-q", "--json", cwd=builds)).stdout)
    blocks = sum(b["latency_ms"]["central"] for b in doc["blocks"])
    assert doc["outside_blocks_ms"]["central"] > 0.05
    p = cisl("estimate", "hw", "-q", "--period-ms", f"{blocks + 0.01:.3f}", cwd=builds)
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "shorter than one inference" in p.stderr and "outside the blocks" in p.stderr, p.stderr
    for n in doc["nodes"]:
        e = n["energy"]
        assert e["t_cpu_us"]["central"] + e["t_comm_us"]["central"] <= e["period_us"] + 1e-6, (n["node"], e)
    ok(cisl("estimate", "hw", "-q", "--period-ms", f"{doc['latency_ms']['central'] + 0.01:.3f}", cwd=builds))


def test_the_tables_comm_column_is_each_nodes_own(builds):
    """Each node row's "comm ms" printed the block's slowest receiver's, not the node's own."""
    doc = json.loads(ok(cisl("estimate", "hw", "-q", "--json", cwd=builds)).stdout)
    table = ok(cisl("estimate", "hw", "-q", cwd=builds)).stdout.splitlines()
    start = next(i for i, ln in enumerate(table) if ln.split()[:2] == ["node", "block"]) + 1
    seen = 0
    for ln in table[start:]:
        if not ln.strip():
            break
        f = ln.split()
        block = next(b for b in doc["blocks"] if b["block"] == f[1])
        # node, block, cycles (2 words), compute (2), comm (2)[, energy (2)]
        comm = float(f[6])
        assert comm == pytest.approx(block["node_comm_ms"][f[0]]["central"], abs=6e-4), (ln, block["node_comm_ms"])
        seen += 1
    assert seen == 4 * len(doc["blocks"])


def test_estimate_refuses_what_it_cannot_model(builds, tmp_path):
    p = cisl("estimate", str(tmp_path), cwd=builds)
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    bare = builds / "sim_bare"
    compile_model(builds / "m" / "model.onnx", bare, CompileOptions(devices=4))
    ok(cisl("build", "sim_bare", "-q", "--no-board-time", cwd=builds))
    p = cisl("estimate", "sim_bare", cwd=builds)
    assert p.returncode == 2 and "--board qemu-m4" in p.stderr and "Traceback" not in p.stderr


def run_and_compare_with_the_estimate(root: Path, build: str, board: str, tag: str) -> None:
    """testbed sim -> flash -> logs -> report on ``build``, then the report against `cisl estimate`
    of the same build and topology: per-block latencies (board time), radio-on times, energy."""
    tb, state, logs, est_path, rep = f"tb{tag}.toml", f".cisl-tb{tag}", f"logs{tag}", f"est{tag}.json", f"rep{tag}"
    ok(cisl("testbed", "sim", "--nodes", "4", "--board", board, "-o", tb, "--state", state, cwd=root))
    try:
        ok(cisl("flash", build, "--testbed", tb, cwd=root))
        ok(cisl("logs", "--testbed", tb, "-o", logs, "--inferences", "3", cwd=root, timeout=300))
    finally:
        cisl("testbed", "stop", "--testbed", tb, cwd=root)
    lines = [json.loads(x) for x in (root / logs / "merged.jsonl").read_text().splitlines()]
    assert {b["clock"] for b in lines if b["event"] == "boot"} == {"model"}
    inferences = sum(1 for b in lines if b["event"] == "infer" and b["node"] == 0)
    ok(cisl("estimate", build, "-q", "--testbed", tb, "--radio-inferences", str(inferences), "-o", est_path,
            cwd=root))
    p = ok(cisl("report", logs, "-o", rep, "--estimate", est_path, "--no-plots", cwd=root))
    assert "[model time]" in p.stdout
    # the radio is priced from the nodes' own radio-on times, and the summary says so (not "CPU only")
    assert "energy per inference of the network" in p.stdout and "radio from the nodes' radio-on times" in p.stdout, \
        p.stdout
    rows = (root / rep / "block_latency.csv").read_text().splitlines()
    head = rows[0].split(",")
    seen = set()
    for row in rows[1:]:
        r = dict(zip(head, row.split(",")))
        seen.add(r["block"])
        assert r["clock"] == "model"
        # the nodes print whole microseconds per block line: equal to the estimate within that rounding
        assert float(r["slowest_compute_us"]) == pytest.approx(float(r["predicted_compute_us"]), abs=1.5), r
        assert float(r["comm_us"]) == pytest.approx(float(r["predicted_comm_us"]), abs=1.5), r
        assert float(r["latency_us"]) == pytest.approx(float(r["predicted_latency_us"]), abs=2.5), r
    assert seen == {"embed", "attn0", "mlp0", "head"}
    # every sg line carries the node's radio TX/RX-on time: per node and exchange (mean over the
    # inferences) exactly the estimate's slot-level simulation
    est = json.loads((root / est_path).read_text())
    by_point = {(x["layer"], x["point"]): x for x in est["exchanges"].values()}
    logged: dict[tuple, list] = {}
    for r in lines:
        if r["event"] == "sg":
            logged.setdefault((r["node"], r["layer"], r["point"]), []).append((r["tx_on_us"], r["rx_on_us"]))
    assert len(logged) == 4 * len(by_point)
    for (node, layer, point), v in logged.items():
        want = by_point[(layer, point)]["nodes"][node]
        assert sum(t for t, _ in v) / len(v) == pytest.approx(want["tx_on_us"]["mean"], abs=1e-6), (node, point)
        assert sum(r for _, r in v) / len(v) == pytest.approx(want["rx_on_us"]["mean"], abs=1e-6), (node, point)
    assert any(t > 0 for v in logged.values() for t, _ in v)
    # energy per node from the log alone (board time and the radio's on-time) = the estimate's
    erows = (root / rep / "energy.csv").read_text().splitlines()
    eh = erows[0].split(",")
    assert len(erows) == 5
    for row in erows[1:]:
        e = dict(zip(eh, row.split(",")))
        assert e["radio_source"] == "log" and float(e["radio_uj"]) > 0
        assert float(e["total_uj"]) == pytest.approx(float(e["predicted_total_uj"]), rel=0.0005), e


def test_the_virtual_testbed_speaks_board_time_equal_to_the_estimate(builds):
    """sim nodes count the cycle model's nRF52840 cycles and the radio medium's air and radio-on
    time: the report's latencies and energy equal `cisl estimate`'s."""
    run_and_compare_with_the_estimate(builds, "sim4", "sim", "s")


def test_the_virtual_testbed_prices_rounds_as_the_boards_it_stands_in_for(builds):
    """A sim plan's Mixer rounds are the nrf52840dk plan's (slot lengths, start guard), and its board
    time counts the 2 ms start guard of every round: the virtual testbed's latency is the boards'.
    A sim plan used to have its own round policy without the guard, so `cisl report` on the virtual
    testbed came out 2 ms per round below `cisl estimate` of the boards (18 ms of 167 on a 3-node split)."""
    hw, sim = load_plan(builds / "hw").meta["mixer"], load_plan(builds / "sim4").meta["mixer"]
    assert sim["policy"] == hw["policy"] and sim["policy"]["round_guard_us"] == 2000
    assert sim["exchanges"] == hw["exchanges"]
    assert "guard_us 2000" in (builds / "sim4" / "node_00" / "board_time.txt").read_text().splitlines()
    est = {b: json.loads(ok(cisl("estimate", b, "-q", "--json", cwd=builds)).stdout) for b in ("hw", "sim4")}
    rounds = sum(e["rounds"] for e in est["sim4"]["exchanges"].values())
    assert rounds > 0 and sum(e["guard_us"] for e in est["sim4"]["exchanges"].values()) == 2000 * rounds
    for a, b in zip(est["hw"]["blocks"], est["sim4"]["blocks"]):  # (receive work: the two images' code layout)
        assert a["comm_ms"]["central"] == pytest.approx(b["comm_ms"]["central"], abs=0.005), (a["block"], a, b)


def test_calibration_recovers_the_flash_wait_states(builds, tmp_path):
    """A 'board' whose flash has 3 wait states (the model's central is 2): report --calibrate finds 3."""
    from codegen.timing.boardtime import write_tables
    from codegen.timing.compute import compute_build

    work = tmp_path / "sim4"
    shutil.copytree(builds / "sim4", work)
    write_tables(work, compute_build(work, flash_wait=(3.0, 3.0, 3.0)))
    ok(cisl("sim", str(work), cwd=tmp_path))
    ok(cisl("estimate", str(work), "-q", "-o", "est.json", cwd=tmp_path))
    # the virtual testbed counts the cycle model's own cycles (clock=model): no calibration of the model
    p = cisl("report", str(work / "logs"), "-o", "rep", "--estimate", "est.json", "--calibrate", "--no-plots",
             cwd=tmp_path)
    assert p.returncode == 2 and "clock=model" in p.stderr and "clock=dwt" in p.stderr, p.stderr
    # as a board's DWT would count them (the boot lines say so): the fit finds the 3 wait states
    logs = work / "logs" / "records.jsonl"
    recs = [json.loads(x) for x in logs.read_text().splitlines()]
    assert {r["clock"] for r in recs if r["event"] == "boot"} == {"model"}
    logs.write_text("".join(json.dumps({**r, "clock": "dwt"} if r["event"] == "boot" else r) + "\n" for r in recs))
    p = ok(cisl("report", str(work / "logs"), "-o", "rep", "--estimate", "est.json", "--calibrate", "--no-plots",
                cwd=tmp_path))
    row = (tmp_path / "rep" / "calibration.csv").read_text().splitlines()[1].split(",")
    assert float(row[1]) == pytest.approx(3.0, abs=0.05), p.stdout
    assert "fitted flash wait states 3.0" in p.stdout and "put it in board.toml [timing] flash_wait" in p.stdout
    # the estimate of another build of 4 nodes (the nrf52840dk plan) is no prediction of these logs
    ok(cisl("estimate", str(builds / "hw"), "-q", "-o", "est-hw.json", cwd=tmp_path))
    p = cisl("report", str(work / "logs"), "-o", "rep2", "--estimate", "est-hw.json", "--calibrate", cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"plan {load_plan(builds / 'hw').sha256[:16]}" in p.stderr and f"ran plan {load_plan(work).sha256[:16]}" \
        in p.stderr and f"`cisl estimate {work} -o est-hw.json`" in p.stderr, p.stderr


def test_the_cycle_model_runs_an_image_once_and_never_reuses_another_images_result(builds, tmp_path, monkeypatch):
    """`cisl build` ran every node image on the cycle model for its board time table; `cisl estimate` of
    the same images reuses those results (node_NN/qemu-m4/cycles.json) instead of running them again,
    prints what a fresh run prints, and never takes a result measured on another image, memory model
    or cisl version, or from a damaged file."""
    from codegen.timing import compute, cycle_cache

    work = tmp_path / "sim4"
    shutil.copytree(builds / "sim4", work)
    stores = [work / f"node_{d:02d}" / "qemu-m4" / cycle_cache.CACHE_FILE for d in range(4)]
    assert all(f.is_file() for f in stores)
    kept = ok(cisl("estimate", str(work), "-q", "--json", cwd=tmp_path)).stdout
    ran: list[int] = []
    run_node = compute.run_node
    monkeypatch.setattr(compute, "run_node", lambda *a, **kw: ran.append(a[2]) or run_node(*a, **kw))
    reused = compute.compute_build(work, jobs=1)
    assert ran == []
    stores[1].write_text("{not json")  # damaged: run again, no error
    shutil.copyfile(stores[0], stores[2])  # node 0's results are not node 2's
    assert compute.compute_build(work, jobs=1) == reused and ran == [1, 2]
    slow = compute.compute_build(work, jobs=1, nodes=[0], flash_wait=(3.0, 3.0, 3.0))  # another memory model
    assert ran[2:] == [0] and slow[0].blocks[0].cycles[1] > reused[0].blocks[0].cycles[1]
    monkeypatch.setattr(cycle_cache, "code_digest", lambda: "another cisl version")
    assert compute.compute_build(work, jobs=1, nodes=[3]) == reused[3:] and ran[3:] == [3]
    for f in stores:
        f.unlink()
    assert ok(cisl("estimate", str(work), "-q", "--json", cwd=tmp_path)).stdout == kept
    assert all(f.is_file() for f in stores)


def test_a_period_shorter_than_one_inference_is_refused(builds, tmp_path):
    p = cisl("estimate", str(builds / "sim4"), "-q", "--period-ms", "0.001", cwd=tmp_path)
    assert p.returncode == 2 and "shorter than one inference" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_estimate_never_times_images_of_another_plan(builds, tmp_path):
    work = tmp_path / "sim4"
    shutil.copytree(builds / "sim4", work)
    plan = json.loads((work / "plan.json").read_text())
    plan["mixer"]["policy"]["linger"] = 8  # the radio settings changed after the build
    (work / "plan.json").write_text(json.dumps(plan))
    p = cisl("estimate", str(work), "-q", cwd=tmp_path)
    assert p.returncode == 2 and "built from another plan.json; run `cisl build" in p.stderr, p.stderr


def test_a_stale_board_time_table_is_never_used(builds, tmp_path):
    work = tmp_path / "sim4"
    shutil.copytree(builds / "sim4", work)
    table = work / "node_01" / "board_time.txt"
    text = table.read_text().replace("image ", "image 0", 1)
    table.write_text(text)
    p = cisl("sim", str(work), cwd=tmp_path)
    assert p.returncode == 2 and "stale" in p.stderr and "Traceback" not in p.stderr


def test_no_board_time_says_so_and_drops_the_tables_an_earlier_build_made(builds, tmp_path):
    work = tmp_path / "sim4"
    shutil.copytree(builds / "sim4", work)
    p = ok(cisl("build", str(work), "-q", "--no-board-time", cwd=tmp_path))
    assert "board time: off (--no-board-time), so the nodes will print host time (clock=host)" in p.stdout
    assert not list(work.glob("node_*/board_time.txt"))  # they would still give board time: not what was asked


@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="qemu-system-arm not installed")
def test_qemu_nodes_speak_board_time_equal_to_the_estimate(builds):
    """qemu-m4 nodes on the virtual testbed count the cycle model's nRF52840 time of their own image
    (op by op, read from the table `cisl build` wrote) and the radio of the testbed's topology: the
    report's per-block latencies, radio-on times and energy equal `cisl estimate`'s."""
    compile_model(builds / "m" / "model.onnx", builds / "q4", CompileOptions(devices=4, board="qemu-m4"))
    p = ok(cisl("build", "q4", "-q", cwd=builds))
    assert "board time: 4 nodes on the nRF52840 cycle model" in p.stdout
    run_and_compare_with_the_estimate(builds, "q4", "qemu-m4", "q")
