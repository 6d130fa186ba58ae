"""`cisl report` on hand-made logs: latency split per block, speedup over the 1-node run, delivery per
round, forecast checksums, memory from the build; and one-line errors for folders that are no logs."""

from __future__ import annotations

import csv
import json
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from codegen.cli import main
from codegen.testbed.report import make_report

pytestmark = pytest.mark.unit


def edit_records(logs: Path, edit) -> None:
    """Apply ``edit`` to every record of ``logs``/merged.jsonl, in place (a hand-edited log)."""
    f = logs / "merged.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    for r in recs:
        edit(r)
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))


def write_run(folder: Path, nodes: int, compute_us: int, comm_us: int, delivered: int, name: str = "merged.jsonl",
              inferences: int = 2) -> None:
    """Contract records as `cisl logs` writes them: every node computes compute_us per block and waits
    comm_us in its sg round; the sink (node 0) prints its forecast."""
    recs, t = [], 0.0
    q = bytes(range(24))
    for k in range(nodes):
        recs.append({"node": k, "event": "boot", "fw": "0.1.0", "plan": "ab", "board": "sim",
                     "nodes": nodes})
    for i in range(inferences):
        for k in range(nodes):
            total = 0
            for layer, block in ((-1, "embed"), (0, "attn"), (0, "mlp"), (-1, "head")):
                comm = comm_us if nodes > 1 and block != "embed" else 0
                if comm:
                    recs.append({"node": k, "event": "sg", "inf": i, "layer": layer, "point": block[0], "us": comm,
                                 "tx": 8, "rx": 8 * (nodes - 1), "delivered": min(delivered, nodes - 1),
                                 "expected": nodes - 1})
                recs.append({"node": k, "event": "block", "inf": i, "layer": layer, "block": block,
                             "us": compute_us, "comm_us": comm})
                total += compute_us + comm
            crc = "00"  # the CRC-32 of the node's result: the sink's is its forecast's, as its output lines say
            if k == 0:
                crc = f"{zlib.crc32(q):08x}"
                recs.append({"node": 0, "event": "output", "inf": i, "crc": crc, "n": 24, "off": 0, "q": q.hex()})
            recs.append({"node": k, "event": "infer", "inf": i, "us": total + 10, "crc": crc})
    for r in recs:
        t += 0.001
        r["host_time"] = t
    folder.mkdir(parents=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in recs))


def read_csv(p: Path) -> list[dict]:
    with open(p) as f:
        return list(csv.DictReader(f))


def test_a_build_whose_plan_the_logs_did_not_run_is_refused(tmp_path):
    import pytest as _pytest

    from codegen.errors import UserError

    write_run(tmp_path / "logs-4", 4, compute_us=1000, comm_us=500, delivered=2)  # its nodes boot plan "ab"
    build = tmp_path / "other"
    build.mkdir()
    (build / "compile.json").write_text(json.dumps({"devices": 2, "board": "sim", "plan_sha256": "f" * 64, "nodes": [
        {"node": k, "param_bytes": 1, "arena_bytes": 1, "bytes_sent_per_inference": 1} for k in range(2)]}))
    with _pytest.raises(UserError, match="ran in none of the logs given"):
        make_report([tmp_path / "logs-4"], tmp_path / "rep", [build])
    assert not (tmp_path / "rep").exists()


def test_report_compares_runs_by_node_count(tmp_path):
    write_run(tmp_path / "logs-1", 1, compute_us=4000, comm_us=0, delivered=0)
    write_run(tmp_path / "logs-4", 4, compute_us=1000, comm_us=500, delivered=2)
    write_run(tmp_path / "sim-logs", 2, compute_us=2000, comm_us=100, delivered=1, name="records.jsonl")
    build = tmp_path / "build"
    build.mkdir()
    (build / "compile.json").write_text(json.dumps({"devices": 2, "board": "sim", "nodes": [
        {"node": k, "param_bytes": 1000 + k, "arena_bytes": 256, "bytes_sent_per_inference": 64} for k in range(2)]}))
    r = make_report([tmp_path / "logs-4", tmp_path / "logs-1", tmp_path / "sim-logs"], tmp_path / "rep", [build])
    names = {f.name for f in r.files}
    assert {"latency.csv", "blocks.csv", "rounds.csv", "delivery.csv", "speedup.csv", "forecasts.csv", "memory.csv",
            "latency_blocks.png", "latency_nodes.png", "speedup.png", "delivery.png", "memory.png"} <= names
    speed = read_csv(tmp_path / "rep" / "speedup.csv")
    assert [(s["run"], s["nodes"]) for s in speed] == [("logs-1", "1"), ("sim-logs", "2"), ("logs-4", "4")]
    # 1 node: 4 blocks x 4000 + 10 us; 4 nodes: 4 x 1000 + 3 x 500 + 10 us
    assert float(speed[0]["infer_us"]) == 16010 and float(speed[2]["infer_us"]) == 5510
    assert float(speed[2]["speedup"]) == round(16010 / 5510, 3) and float(speed[0]["speedup"]) == 1.0
    lat = {(x["run"], x["node"]): x for x in read_csv(tmp_path / "rep" / "latency.csv")}
    assert float(lat[("logs-4", "3")]["compute_us"]) == 4000 and float(lat[("logs-4", "3")]["comm_us"]) == 1500
    assert float(lat[("logs-4", "3")]["other_us"]) == 10
    blocks = [b for b in read_csv(tmp_path / "rep" / "blocks.csv") if b["run"] == "logs-4" and b["node"] == "0"]
    assert [(b["block"], float(b["compute_us"]), float(b["comm_us"])) for b in blocks] == [
        ("embed", 1000, 0), ("attn", 1000, 500), ("mlp", 1000, 500), ("head", 1000, 500)]
    dl = [d for d in read_csv(tmp_path / "rep" / "delivery.csv") if d["run"] == "logs-4"]
    assert len(dl) == 2 * 3 and all((d["delivered"], d["expected"], d["ratio"]) == ("8", "12", "0.6667") for d in dl)
    fc = read_csv(tmp_path / "rep" / "forecasts.csv")
    assert len(fc) == 6 and all(f["crc_ok"] == "yes" and f["q"] == bytes(range(24)).hex() for f in fc)
    mem = read_csv(tmp_path / "rep" / "memory.csv")
    assert [(m["node"], m["param_bytes"]) for m in mem] == [("0", "1000"), ("1", "1001")]


@pytest.mark.parametrize("summary", [lambda b: {"flashed": {"build": str(b)}}, lambda b: {"build": str(b)}],
                         ids=["cisl-logs", "cisl-sim"])
def test_the_memory_table_comes_from_the_build_the_logs_name_while_it_holds_their_plan(tmp_path, summary):
    write_run(tmp_path / "logs", 4, compute_us=1000, comm_us=500, delivered=2)  # its nodes boot plan "ab"
    build = tmp_path / "build"
    build.mkdir()
    compile_json = {"devices": 4, "board": "sim", "plan_sha256": "ab", "nodes": [
        {"node": k, "param_bytes": 100 + k, "arena_bytes": 1, "bytes_sent_per_inference": 1} for k in range(4)]}
    (build / "compile.json").write_text(json.dumps(compile_json))
    (tmp_path / "logs" / "summary.json").write_text(json.dumps(summary(build)))
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert f"memory table from {build}, the build these logs ran" in r.stderr
    assert [m["param_bytes"] for m in read_csv(tmp_path / "rep" / "memory.csv")] == ["100", "101", "102", "103"]
    # compiled again since the run (another plan): not the build that ran, so no memory table
    (build / "compile.json").write_text(json.dumps({**compile_json, "plan_sha256": "cd"}))
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0 and "no memory table: give --build" in r.stderr, r.output
    assert not (tmp_path / "rep" / "memory.csv").exists()


def test_without_a_one_node_run_there_is_no_speedup(tmp_path):
    write_run(tmp_path / "logs-4", 4, 1000, 500, 3)
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs-4"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "no 1-node run" in r.stderr and "no memory table: give --build" in r.stderr
    assert not list((tmp_path / "rep").glob("*.png"))
    assert read_csv(tmp_path / "rep" / "speedup.csv")[0]["speedup"] == ""


def test_one_logs_folder_given_twice_is_one_line(tmp_path):
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), str(tmp_path / "x" / ".." / "logs"),
                                  "-o", str(tmp_path / "rep")])
    assert r.exit_code == 2 and "given twice" in r.stderr, r.output
    assert not (tmp_path / "rep").exists()


def test_a_copy_of_a_logs_folder_or_a_build_given_twice_is_one_line(tmp_path):
    """audit Q #9: a `cp -r` of a logs folder beside it was reported as two runs, and `--build B --build B`
    listed every node's memory twice."""
    import shutil

    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    edit_records(tmp_path / "logs", lambda r: r.update(run="0123456789ab"))
    shutil.copytree(tmp_path / "logs", tmp_path / "copy")
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), str(tmp_path / "copy"), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"{tmp_path / 'copy'} and {tmp_path / 'logs'} hold the same run (run id 0123456789ab)" \
        in lines[0] and "give it once" in lines[0], r.stderr
    assert not (tmp_path / "rep").exists()
    build = tmp_path / "build"
    build.mkdir()
    (build / "compile.json").write_text(json.dumps({"devices": 2, "board": "sim", "plan_sha256": "ab", "nodes": [
        {"node": k, "param_bytes": 1, "arena_bytes": 1, "bytes_sent_per_inference": 1} for k in range(2)]}))
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--build", str(build),
                                  "--build", str(tmp_path / "x" / ".." / "build")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "given twice" in lines[0] and "give each build once" in lines[0], r.stderr
    assert not (tmp_path / "rep").exists()


def test_a_folder_without_logs_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(main, ["report", str(tmp_path / "empty"), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 2 and "no merged.jsonl" in r.stderr and "cisl logs" in r.stderr
    r = CliRunner().invoke(main, ["report", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "not a folder" in r.stderr


@pytest.mark.parametrize("edit, said", [
    (lambda r: r.pop("us") if r["event"] == "block" else None, "a `block` record without `us`"),
    (lambda r: r.update(tx="8") if r["event"] == "sg" else None, "`tx` = '8' in a `sg` record"),
    (lambda r: r.update(inf=float("nan")) if r["event"] == "infer" else None, "`inf` = nan in a `infer` record"),
    (lambda r: r.update(us=[1]) if r["event"] == "block" else None, "`us` = [1] in a `block` record"),
    (lambda r: r.update(point={"a": 1}) if r["event"] == "sg" else None, "in a `sg` record"),
])
def test_a_hand_edited_record_is_one_line_naming_it(tmp_path, edit, said):
    """Found by fuzzing records.jsonl: a missing key or a value of another type was a KeyError,
    TypeError or ValueError deep in the tables (346 of 1,122 mutations)."""
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    edit_records(tmp_path / "logs", edit)
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 2, r.output
    assert said in r.stderr and "merged.jsonl:" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("edit", [
    lambda d: d.update(devices="2"),
    lambda d: d.update(phy="3M"),
    lambda d: d["blocks"][0].update(comm_ms={"central": None}),
    lambda d: d["nodes"][0]["blocks"][0].update(core_cycles="x"),
    lambda d: d["nodes"][1].update(energy={"radio_uj": 1}),
    lambda d: d.update(nodes={"0": {}}),
    lambda d: d.update(plan=5),
])
def test_a_hand_edited_estimate_is_one_line(tmp_path, edit):
    """Found by fuzzing `--estimate EST.json`: a wrong type or a missing figure was a traceback (69 of
    812 mutations); the estimate is checked where `cisl report` reads it."""
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    third = {"low": 1.0, "central": 1.0, "high": 1.0}
    doc = {"devices": 2, "phy": "2M", "plan": "ab",
           "blocks": [{"block": b, "slowest_compute_ms": third, "comm_ms": third} for b in ("embed", "attn0")],
           "nodes": [{"node": k, "model_board": "nrf52840dk", "energy": {"radio_uj": third, "total_uj": third},
                      "blocks": [{"block": "embed", "core_cycles": 1.0, "mem_events": 0.0}]} for k in range(2)]}
    edit(doc)
    (tmp_path / "est.json").write_text(json.dumps(doc))
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--estimate",
                                  str(tmp_path / "est.json"), "--no-plots"])
    assert r.exit_code == 2, r.output
    assert "not what `cisl estimate -o` writes" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "rep").exists()


BLOCK_LABELS = ("embed", "attn0", "mlp0", "head")


def estimate_doc(nodes: int, plan: str, core: float = 60000.0, events: float = 1000.0) -> dict:
    """A `cisl estimate -o` file as `cisl report` reads it: 1 ms per block and round, per node and block
    ``core`` cycles at zero wait states and ``events`` flash accesses; the board's range 0..3."""
    third = {"low": 1.0, "central": 1.0, "high": 1.0}
    return {"build": "b", "plan": plan, "devices": nodes, "phy": "2M", "flash_wait": [0.0, 2.0, 3.0],
            "blocks": [{"block": b, "slowest_compute_ms": third, "comm_ms": third} for b in BLOCK_LABELS],
            "nodes": [{"node": k, "model_board": "nrf52840dk", "energy": None,
                       "blocks": [{"block": b, "core_cycles": core, "mem_events": events} for b in BLOCK_LABELS]}
                      for k in range(nodes)]}


def report(tmp_path: Path, doc: dict, *args: str):
    (tmp_path / "est.json").write_text(json.dumps(doc))
    return CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--estimate",
                                     str(tmp_path / "est.json"), "--no-plots", *args])


@pytest.mark.parametrize("calibrate", [[], ["--calibrate"]], ids=["estimate", "calibrate"])
def test_an_estimate_of_another_plan_is_refused(tmp_path, calibrate):
    """An estimate of another model's 4-node build, given with the logs of a 4-node run, was taken as
    theirs (matched by node count): "predicted 21.872 ms (+110 %)" and a fitted flash wait of 298."""
    write_run(tmp_path / "logs", 4, compute_us=1000, comm_us=500, delivered=3)  # its nodes boot plan "ab"
    r = report(tmp_path, estimate_doc(4, "cd"), *calibrate)
    assert r.exit_code == 2, r.output
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in r.output, r.output
    assert "est.json" in line and "plan cd" in line and "ran plan ab" in line and "cisl estimate" in line, line
    assert not (tmp_path / "rep").exists()
    r = report(tmp_path, estimate_doc(4, "ab"))  # the plan the logs ran: compared
    assert r.exit_code == 0 and "predicted 2.000 ms" in r.stdout, r.output
    # logs without boot lines (`cisl logs --no-reset`) name no plan: matched by node count, and said so
    f = tmp_path / "logs" / "merged.jsonl"
    f.write_text("".join(x + "\n" for x in f.read_text().splitlines() if '"boot"' not in x))
    r = report(tmp_path, estimate_doc(4, "cd"))
    assert r.exit_code == 0 and "predicted 2.000 ms" in r.stdout and "matched by node count only" in r.stderr, r.output


def test_an_estimate_that_names_no_plan_is_refused(tmp_path):
    """An estimate written before estimates named their plan cannot be checked against the logs:
    written again, it can (the cycle model keeps its results, so that is quick)."""
    write_run(tmp_path / "logs", 4, compute_us=1000, comm_us=500, delivered=3)
    doc = estimate_doc(4, "ab")
    del doc["plan"]
    r = report(tmp_path, doc)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
    assert "names no plan" in r.stderr and "cisl estimate BUILD -o" in r.stderr, r.stderr


def with_cycles(folder: Path, doc: dict, wait: float) -> None:
    """Block lines with the DWT's cycles of a board whose flash has ``wait`` wait states."""
    f = folder / "merged.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    b = doc["nodes"][0]["blocks"][0]
    for r in recs:
        if r["event"] == "block":
            r["cycles"] = round(b["core_cycles"] + wait * b["mem_events"])
        if r["event"] == "boot":
            r["clock"] = "dwt"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_calibration_recommends_only_a_wait_state_count_in_the_boards_range(tmp_path):
    """A fit inside board.toml's range is advice for board.toml; one outside it (298 wait states on a
    part documented for 0..3) is no setting, and the report says what it suggests instead."""
    doc = estimate_doc(2, "ab")
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    with_cycles(tmp_path / "logs", doc, 2.5)
    r = report(tmp_path, doc, "--calibrate")
    assert r.exit_code == 0, r.output
    assert "fitted flash wait states 2.5" in r.stdout and "put it in board.toml [timing] flash_wait" in r.stdout
    assert read_csv(tmp_path / "rep" / "calibration.csv")[0]["in_range"] == "yes"
    (tmp_path / "logs" / "merged.jsonl").unlink()
    (tmp_path / "logs").rmdir()
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    with_cycles(tmp_path / "logs", doc, 298.11)
    r = report(tmp_path, doc, "--calibrate")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if "fitted flash wait states" in x)
    assert "298.11" in line and "outside the board's range 0..3" in line and "put it in board.toml" not in line, line
    assert "not of the images estimated" in line, line
    assert read_csv(tmp_path / "rep" / "calibration.csv")[0]["in_range"] == "no"


@pytest.mark.parametrize("edit, said", [
    (lambda r: r.update(plan="cd") if r["node"] == 3 and r["event"] == "boot" else None,
     "boot lines name 2 plans (plan ab on nodes 0, 1, 2; plan cd on node 3)"),
    (lambda r: r.update(nodes=2) if r["node"] == 1 and r["event"] == "boot" else None,
     "boot lines name 2 node counts (nodes=2 on node 1; nodes=4 on nodes 0, 2, 3)"),
], ids=["plan", "nodes"])
def test_logs_whose_boot_lines_name_two_builds_are_refused(tmp_path, edit, said):
    """One build's nodes all print its plan and node count: logs naming two are no one run (a stale
    board, nodes flashed from two builds), yet they were tabulated as one, exit 0."""
    write_run(tmp_path / "logs", 4, compute_us=1000, comm_us=500, delivered=2)
    edit_records(tmp_path / "logs", edit)
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 2, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert said in line and "ran different builds" in line and "cisl flash" in line, line
    assert not (tmp_path / "rep").exists()


def test_the_report_of_a_run_cisl_logs_failed_names_the_failed_nodes(tmp_path):
    """A failed run's logs (OUT.failed/, or OUT when there were none to keep) stay reportable for
    inspection, but summary.json's `ok: false` was never read: its tables came out as a good run's."""
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    (tmp_path / "logs" / "summary.json").write_text(json.dumps({"stop_reason": "timeout 20 s", "ok": False, "nodes": {
        "0": {"failed": None}, "1": {"failed": "host command 'mode 1' got no answer"}}}))
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0, r.output
    notes = r.stderr.splitlines()
    assert notes[0] == ("note: logs: `cisl logs` FAILED this run (summary.json ok: false; node 1: host command "
                        "'mode 1' got no answer): its tables hold what the nodes printed up to their failure, not a "
                        "good run's results; record the run again for those"), r.stderr
    assert len(read_csv(tmp_path / "rep" / "latency.csv")) == 2
    # a good run's summary: no such note
    (tmp_path / "logs" / "summary.json").write_text(json.dumps({"ok": True, "nodes": {"0": {"failed": None}}}))
    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0 and "FAILED" not in r.stderr, r.output


def set_clock(folder: Path, clock: str) -> None:
    """The nodes' boot lines say their times count ``clock`` (model, dwt, host, icount)."""
    edit_records(folder, lambda r: r.update(clock=clock) if r["event"] == "boot" else None)


@pytest.mark.parametrize("clock, said", [
    ("icount", "QEMU instruction counts (clock=icount)"),
    ("host", "host time (clock=host)"),
    ("model", "the cycle model's nRF52840 time (the virtual testbed's board time) (clock=model)"),
    (None, "no boot line says what they count"),
], ids=["icount", "host", "model", "no-boot-lines"])
def test_calibration_refuses_logs_that_count_no_board_cycles(tmp_path, clock, said):
    """QEMU's instruction counts were fitted as DWT cycles (wait states 0.0, "in range", 48 % off, "put it
    in board.toml"); the virtual testbed's board time fitted the model's own cycles back to its own
    setting. Only boards' cycle counters calibrate the model: the rest is one line, exit code 2."""
    doc = estimate_doc(2, "ab")
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    with_cycles(tmp_path / "logs", doc, 0.0)
    if clock is None:  # `cisl logs --no-reset`: no boot lines, so no clock
        f = tmp_path / "logs" / "merged.jsonl"
        f.write_text("".join(x + "\n" for x in f.read_text().splitlines() if '"boot"' not in x))
    else:
        set_clock(tmp_path / "logs", clock)
    r = report(tmp_path, doc, "--calibrate")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "--calibrate: logs's nodes counted" in line, line
    assert said in line and "not a board's cycle counter" in line and "clock=dwt" in line, line
    assert "board.toml" not in r.output and not (tmp_path / "rep").exists()


def test_calibration_skips_runs_of_other_clocks_next_to_a_boards_run(tmp_path):
    doc = estimate_doc(2, "ab")
    for name, clock in (("board", "dwt"), ("virtual", "model")):
        write_run(tmp_path / name, 2, compute_us=1000, comm_us=500, delivered=1)
        with_cycles(tmp_path / name, doc, 2.0)
        set_clock(tmp_path / name, clock)
    (tmp_path / "est.json").write_text(json.dumps(doc))
    r = CliRunner().invoke(main, ["report", str(tmp_path / "board"), str(tmp_path / "virtual"), "-o",
                                  str(tmp_path / "rep"), "--estimate", str(tmp_path / "est.json"), "--calibrate",
                                  "--no-plots"])
    assert r.exit_code == 0, r.output
    assert [c["run"] for c in read_csv(tmp_path / "rep" / "calibration.csv")] == ["board"]
    assert "note: virtual: not calibrated: virtual's nodes counted the cycle model's nRF52840 time" in r.stderr, r.stderr


@pytest.mark.parametrize("clock, said", [("icount", "QEMU instruction counts"), ("host", "host time")])
def test_no_prediction_is_set_against_host_time_or_instruction_counts(tmp_path, clock, said):
    """block_latency.csv compared QEMU instruction-count "µs" with nRF52840 milliseconds: -95 %."""
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    set_clock(tmp_path / "logs", clock)
    r = report(tmp_path, estimate_doc(2, "ab"))
    assert r.exit_code == 0, r.output
    assert "predicted" not in r.stdout, r.stdout
    rows = read_csv(tmp_path / "rep" / "block_latency.csv")
    assert rows and all(x["clock"] == clock and x["predicted_latency_us"] == x["latency_error_pct"] == "" for x in rows)
    assert f"note: logs: the nodes counted {said} (clock={clock}), not nRF52840 time: no energy and no predicted " \
           f"column" in r.stderr, r.stderr
    set_clock(tmp_path / "logs", "dwt")  # a board's time: compared
    r = report(tmp_path, estimate_doc(2, "ab"))
    assert r.exit_code == 0 and "predicted 2.000 ms" in r.stdout, r.output


def test_speedup_only_over_a_one_node_run_of_the_same_clock(tmp_path):
    """A 1-node run in host time over a 2-node run in nRF52840 time printed "speedup 0.047x"."""
    write_run(tmp_path / "one-host", 1, compute_us=700, comm_us=0, delivered=0)
    set_clock(tmp_path / "one-host", "host")
    write_run(tmp_path / "two", 2, compute_us=16000, comm_us=500, delivered=1)
    set_clock(tmp_path / "two", "model")
    r = CliRunner().invoke(main, ["report", str(tmp_path / "one-host"), str(tmp_path / "two"), "-o",
                                  str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    speed = {s["run"]: s for s in read_csv(tmp_path / "rep" / "speedup.csv")}
    assert speed["two"]["speedup"] == "" and speed["two"]["clock"] == "model", speed
    assert speed["one-host"]["speedup"] == "1.0" and speed["one-host"]["clock"] == "host"
    assert "speedup" not in next(x for x in r.stdout.splitlines() if x.startswith("two: 2 nodes")), r.stdout
    assert ("note: two: its nodes counted the cycle model's nRF52840 time (the virtual testbed's board time) (clock=model), "
            "but no 1-node run did (one-host counted host time): speedup not computed across clocks") in r.stderr
    # with a 1-node run of the same clock too, that one is the base
    write_run(tmp_path / "one", 1, compute_us=64000, comm_us=0, delivered=0)
    set_clock(tmp_path / "one", "model")
    r = CliRunner().invoke(main, ["report", str(tmp_path / "one-host"), str(tmp_path / "one"), str(tmp_path / "two"),
                                  "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0 and "across clocks" not in r.stderr, r.output
    speed = {s["run"]: s for s in read_csv(tmp_path / "rep" / "speedup.csv")}
    assert float(speed["two"]["speedup"]) == round((4 * 64000 + 10) / (4 * 16000 + 3 * 500 + 10), 3), speed


def test_energy_without_an_estimate_prices_each_node_as_the_build_the_logs_ran(tmp_path):
    """Without --estimate, a mixed testbed's nRF52833 stand-in was priced with the nRF52840's currents
    and a BLE 1M build's radio at the 2M RX current, although the report had found the build the logs
    ran (its plan names both): now every node is priced as `cisl estimate` prices it."""
    from codegen.compile import CompileOptions, compile_model
    from codegen.plan.io import load_plan
    from codegen.randmodel import config_for_tokens, make_model_dir
    from codegen.timing.energy import load_power, node_energy

    model = make_model_dir(tmp_path / "m", config_for_tokens(8, 64, heads=8, layers=1), 2, 1.0)
    build = tmp_path / "b"
    compile_model(model, build, CompileOptions(devices=2, node_boards=["nrf52840dk", "nrf52833dk"], phy="1M"))
    plan = load_plan(build).sha256[:16]
    logs = tmp_path / "logs"
    write_run(logs, 2, compute_us=1000, comm_us=500, delivered=1)

    def as_ran(r):  # the virtual testbed's records: board time, radio-on times in the sg lines
        if r["event"] == "boot":
            r.update(plan=plan, clock="model")
        if r["event"] == "sg":
            r.update(tx_on_us=120, rx_on_us=300)
    edit_records(logs, as_ran)
    (logs / "summary.json").write_text(json.dumps({"build": str(build)}))
    r = CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0, r.output
    rows = {int(e["node"]): e for e in read_csv(tmp_path / "rep" / "energy.csv")}
    for k, board in ((0, "nrf52840dk"), (1, "nrf52833dk")):
        e = rows[k]
        # the CPU runs through the whole inference: compute, rounds and the 10 µs outside the blocks
        cpu_us = float(e["period_us"]) - float(e["comm_us"])
        assert cpu_us == float(e["compute_us"]) + 10, e
        want = node_energy(load_power(board), cpu_us, 1e6, float(e["tx_on_us"]), float(e["rx_on_us"]),
                           float(e["period_us"]), comm_us=float(e["comm_us"]), phy="1M")
        assert float(e["cpu_uj"]) == round(want.cpu_uj.central + want.comm_cpu_uj.central, 2), (board, e)
        assert float(e["radio_uj"]) == round(want.radio_uj.central, 2), (board, e)
        assert float(e["total_uj"]) == pytest.approx(want.total_uj.central, abs=0.02), (board, e)
        assert float(e["idle_uj"]) == 0, e  # back to back: no idle time within the inference
    assert float(rows[0]["cpu_uj"]) != float(rows[1]["cpu_uj"])  # the two parts' CPU currents differ
    assert "energy priced with" not in r.stderr, r.stderr
    # the build cannot be found: priced as the default stand-in at BLE 2M, and the report says so
    (logs / "summary.json").unlink()
    r = CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert ("note: logs: energy priced with the virtual nodes as nrf52840dk (their default) and BLE 2M radio "
            "currents: the build these logs ran was not found") in r.stderr and "--build BUILD" in r.stderr, r.stderr
    # --build names it again
    r = CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep2"), "--no-plots", "--build",
                                  str(build)])
    assert r.exit_code == 0 and "energy priced with" not in r.stderr, r.output
    assert read_csv(tmp_path / "rep2" / "energy.csv") == list(rows.values())


def test_memory_table_image_bytes_are_the_images_flash_not_the_elf_files_size(tmp_path):
    """image_bytes was build.json's `bytes`, the ELF file's size with its symbols and debug information
    (327616 for an image of 56200 B of flash)."""
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)  # its nodes boot plan "ab"
    build = tmp_path / "build"
    build.mkdir()
    (build / "compile.json").write_text(json.dumps({"devices": 2, "board": "sim", "plan_sha256": "ab", "nodes": [
        {"node": k, "param_bytes": 1, "arena_bytes": 1, "bytes_sent_per_inference": 1} for k in range(2)]}))

    def summary(name: str, plan: str, sizes: bool) -> None:
        (build / name).write_text(json.dumps({"plan": plan, "nodes": [
            {"node": k, "bytes": 327616 + k, **({"flash": 56200 + k, "ram": 12152} if sizes else {})}
            for k in range(2)]}))

    def image_columns() -> list[tuple[str, str]]:
        r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots",
                                      "--build", str(build)])
        assert r.exit_code == 0, r.output
        return [(m["image_bytes"], m["image_ram_bytes"]) for m in read_csv(tmp_path / "rep" / "memory.csv")]

    summary("build.json", "ab", sizes=True)  # a board's build: the linked image's flash and RAM
    assert image_columns() == [("56200", "12152"), ("56201", "12152")]
    summary("build.json", "ab", sizes=False)  # a sim build: host programs, measured as their ARM images
    assert image_columns() == [("", ""), ("", "")]
    summary("build-qemu-m4.json", "ab", sizes=True)
    assert image_columns() == [("56200", "12152"), ("56201", "12152")]
    summary("build-qemu-m4.json", "cd", sizes=True)  # ARM images of another plan: not these nodes'
    assert image_columns() == [("", ""), ("", "")]


def _insert_after(logs: Path, match, new: dict | None = None, edit=None) -> None:
    """Insert ``new`` (the matched record's host time and run) after the first record ``match`` accepts,
    or apply ``edit`` to it."""
    f = logs / "merged.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    i = next(j for j, r in enumerate(recs) if match(r))
    if edit is not None:
        edit(recs[i])
    if new is not None:
        recs.insert(i + 1, {**new, "host_time": recs[i]["host_time"] + 1e-6})
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _is(event: str, node: int = 0, inf: int | None = 0):
    return lambda r: r["event"] == event and r["node"] == node and (inf is None or r.get("inf") == inf)


@pytest.mark.parametrize("case,said", [
    ("infer_crc", "infer crc=deadbeef of inference 0 is not its output lines' crc="),
    ("output_twice", "output line of inference 0 repeats off=0"),
    ("second_end", "end line after its end line"),
    ("infer_after_end", "infer line after its end line"),
    ("peer_self", "peer line names the node itself (peer=1)"),
    ("peer_outside", "peer line's peer=9 is no node of the run (nodes=2: 0 to 1)"),
    ("node_outside", "a record of node 7 (`infer`), but the run has nodes 0..1 (its boot lines say nodes=2)"),
    ("no_host_time", "a record without `host_time` (`infer`)"),
])
def test_records_that_break_the_contract_are_refused_naming_file_and_line(tmp_path, case, said):
    """`cisl report` reported these as a good run: an infer crc the sink's output lines do not have (with
    crc_ok=yes), a second output line of one offset (the later one silently won), lines after `end`, a
    peer line naming the node itself or a node outside the run, a record of node 7 in a 2-node run; a
    record without host_time was sorted first and refused for the wrong reason."""
    import zlib as z

    logs = tmp_path / "logs"
    write_run(logs, 2, compute_us=1000, comm_us=500, delivered=1)
    other = bytes(24)
    peer = {"node": 1, "event": "peer", "inf": 0, "state": "dead", "rounds": 2, "role": "node"}
    cases = {  # (the record it follows, the record inserted after it, an edit of it)
        "infer_crc": (_is("infer"), None, lambda r: r.update(crc="deadbeef")),
        "output_twice": (_is("output"), {"node": 0, "event": "output", "inf": 0, "n": 24, "off": 0,
                                         "crc": f"{z.crc32(other):08x}", "q": other.hex()}, None),
        "second_end": (_is("end", 1, None), {"node": 1, "event": "end", "inferences": 2}, None),
        "infer_after_end": (_is("end", 1, None), {"node": 1, "event": "infer", "inf": 2, "us": 5, "crc": "00"}, None),
        "peer_self": (_is("block", 1, 0), {**peer, "peer": 1}, None),
        "peer_outside": (_is("block", 1, 0), {**peer, "peer": 9}, None),
        "node_outside": (_is("infer", 1, 0), {"node": 7, "event": "infer", "inf": 0, "us": 5, "crc": "00"}, None),
        "no_host_time": (_is("infer", 1, 1), None, lambda r: r.pop("host_time")),
    }
    if case in ("second_end", "infer_after_end"):  # write_run prints no end line: give both nodes theirs
        for k in (0, 1):
            _insert_after(logs, _is("infer", k, 1), {"node": k, "event": "end", "inferences": 2})
    match, after, edit = cases[case]
    _insert_after(logs, match, after, edit)
    r = CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and said in lines[0] and "merged.jsonl:" in lines[0] and "Traceback" not in r.output, \
        r.stderr
    assert "record the run again" in lines[0]
    assert not (tmp_path / "rep").exists()


def test_a_boot_lines_node_key_never_replaces_the_lines_node():
    """`CISL 1 boot ... node=2` was recorded in the JSONL as node 2's boot."""
    from codegen.serial_contract import parse_line

    assert parse_line("CISL 1 boot fw=0.1.0 plan=ab board=sim node=2 nodes=4").to_json()["node"] == 1


def test_calibration_does_not_advise_an_in_range_fit_that_leaves_the_cycles_unexplained(tmp_path):
    """A fit inside board.toml's range whose model still misses the measured cycles by far (here every
    block line 40 % slower and the next 40 % faster than any wait-state count makes it) is no setting for
    board.toml."""
    doc = estimate_doc(2, "ab")
    write_run(tmp_path / "logs", 2, compute_us=1000, comm_us=500, delivered=1)
    with_cycles(tmp_path / "logs", doc, 1.0)
    f = tmp_path / "logs" / "merged.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    blocks = [r for r in recs if r["event"] == "block"]
    for k, r in enumerate(blocks):
        r["cycles"] = round(r["cycles"] * (1.4 if k % 2 else 0.6))
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = report(tmp_path, doc, "--calibrate")
    assert r.exit_code == 0, r.output
    row = read_csv(tmp_path / "rep" / "calibration.csv")[0]
    assert row["in_range"] == "yes" and float(row["mean_error_pct"]) > 10, row
    line = next(x for x in r.stdout.splitlines() if "fitted flash wait states" in x)
    assert "put it in board.toml" not in line and "no setting for board.toml" in line, line


def _drop(logs: Path, match) -> None:
    """Take the first record ``match`` accepts out of ``logs``/merged.jsonl (a line lost on the wire)."""
    f = logs / "merged.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    recs.pop(next(j for j, r in enumerate(recs) if match(r)))
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.mark.parametrize("lost, node", [
    (lambda r: r["event"] == "block" and r["node"] == 1 and r["inf"] == 1 and r["block"] == "attn", 1),
    (lambda r: r["event"] == "sg" and r["node"] == 1 and r["inf"] == 1 and r["point"] == "m", 1),
    (lambda r: r["event"] == "output" and r["inf"] == 1, 0),
], ids=["block", "sg", "output"])
def test_an_inference_with_a_lost_line_is_left_out_of_every_table(tmp_path, lost, node):
    """Logs of an older cisl (no `incomplete` in summary.json) in which a node lost a line inside inference
    1: the report averaged the rest as a whole inference (other_us 27x too high on a board), counted the
    round as delivered by the nodes left, and marked the forecast incomplete without a word."""
    logs = tmp_path / "logs"
    write_run(logs, 3, compute_us=1000, comm_us=500, delivered=2, inferences=3)
    _drop(logs, lost)
    r = CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert f"logs: 1 incomplete inference left out of the tables (node {node};" in r.stdout, r.stdout
    lat = {row["node"]: row for row in read_csv(tmp_path / "rep" / "latency.csv")}
    assert lat[str(node)]["inferences"] == "2" and lat["2"]["inferences"] == "3"
    assert {float(row["other_us"]) for row in lat.values()} == {10.0}, lat
    assert {float(row["compute_us"]) for row in lat.values()} == {4000.0}, lat
    blocks = read_csv(tmp_path / "rep" / "blocks.csv")
    assert {float(b["compute_us"]) for b in blocks} == {1000.0}, blocks
    rounds = read_csv(tmp_path / "rep" / "delivery.csv")
    assert {row["inference"] for row in rounds} == {"0", "2"} and {row["reporting_nodes"] for row in rounds} == {"3"}
    assert [f["inference"] for f in read_csv(tmp_path / "rep" / "forecasts.csv")] == (
        ["0", "2"] if node == 0 else ["0", "1", "2"])
    notes = (tmp_path / "rep" / "notes.txt").read_text()
    assert f"node {node}: inference 1 (damaged: lines lost (" in notes, notes
    assert "delivery.csv leaves out the rounds of inference 1" in notes
    assert ("forecasts.csv leaves out the sink's (node 0) forecast of inference 1" in notes) == (node == 0)


def test_what_cisl_logs_saw_lost_is_left_out_too(tmp_path):
    """A line that did not parse, or a reopened port, leaves no gap a record shows when the lost line was
    one the inference holds twice or more; `cisl logs` names it in summary.json's `incomplete`."""
    logs = tmp_path / "logs"
    write_run(logs, 2, compute_us=1000, comm_us=500, delivered=1, inferences=3)
    (logs / "summary.json").write_text(json.dumps({"stop_reason": "all nodes done", "ok": True, "nodes": {
        "0": {"failed": None, "incomplete": {}},
        "1": {"failed": None, "incomplete": {"2": "damaged: its port dropped and was reopened"}}}}))
    r = CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0, r.output
    lat = {row["node"]: row["inferences"] for row in read_csv(tmp_path / "rep" / "latency.csv")}
    assert lat == {"0": "3", "1": "2"}
    assert "node 1: inference 2 (damaged: its port dropped and was reopened)" in (tmp_path / "rep" / "notes.txt"
                                                                                  ).read_text()


def test_the_first_inference_of_a_capture_without_the_reset_is_partial(tmp_path):
    """`cisl logs --no-reset` caught inference 0 from its attn block on (no boot line): its compute was
    counted as a whole inference's (32 % low on boards)."""
    logs = tmp_path / "logs"
    write_run(logs, 2, compute_us=1000, comm_us=500, delivered=1, inferences=3)
    f = logs / "merged.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    recs = [r for r in recs if r["event"] != "boot" and not (r.get("inf") == 0 and r.get("block") == "embed")]
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0, r.output
    lat = read_csv(tmp_path / "rep" / "latency.csv")
    assert {row["inferences"] for row in lat} == {"2"} and {float(row["compute_us"]) for row in lat} == {4000.0}
    notes = (tmp_path / "rep" / "notes.txt").read_text()
    assert "2 incomplete inferences left out" in notes and "node 0: inference 0 (partial: the capture started" in notes


def test_the_plans_schedule_names_the_lines_even_when_most_inferences_lost_one(tmp_path):
    """The lines an inference must hold come from plan.json's schedule when the build is known: two of
    three inferences that lost the same line are not the norm the third is judged by."""
    logs = tmp_path / "logs"
    write_run(logs, 2, compute_us=1000, comm_us=500, delivered=1, inferences=3)
    for inf in (0, 1):
        _drop(logs, lambda r: r["event"] == "block" and r["node"] == 1 and r["inf"] == inf and r["block"] == "head")
    plan = {"somegather": [], "nodes": [
        {"device": k, "ops": [{"op": "block_begin", "block": b, "layer": l}
                              for l, b in ((-1, "embed"), (0, "attn"), (0, "mlp"), (-1, "head"))]} for k in (0, 1)]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))  # the build beside the logs, of the plan they ran
    (tmp_path / "compile.json").write_text(json.dumps({"plan_sha256": "ab" + "0" * 62, "devices": 2, "nodes": [
        {"node": k, "param_bytes": 1, "arena_bytes": 1, "bytes_sent_per_inference": 1} for k in range(2)]}))
    edit_records(logs, lambda r: r.update(plan="ab" + "0" * 14) if r["event"] == "boot" else None)
    r = CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 0, r.output
    lat = {row["node"]: row["inferences"] for row in read_csv(tmp_path / "rep" / "latency.csv")}
    assert lat == {"0": "3", "1": "1"}, lat
    notes = (tmp_path / "rep" / "notes.txt").read_text()
    assert "node 1: inference 0 (damaged: lines lost (block head)), inference 1 (damaged: lines lost (block head))" \
        in notes, notes


def test_logs_without_a_complete_inference_are_refused_in_one_line(tmp_path):
    """`cisl logs --no-reset` caught only the end of each node's last inference: nothing to average."""
    logs = tmp_path / "logs"
    write_run(logs, 2, compute_us=1000, comm_us=500, delivered=1, inferences=1)
    f = logs / "merged.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    f.write_text("".join(json.dumps(r) + "\n" for r in recs if r["event"] != "boot" and r.get("block") != "embed"))
    r = CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 2, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "no inference of the run is complete (first: node 0's inference 0, partial: the capture started" in line
    assert "nothing to report" in line
    assert not (tmp_path / "rep").exists()


def write_elf(path: Path, build_id: bytes) -> None:
    """A minimal 32-bit ARM ELF holding only a GNU build-id note (what boards print as the boot line's `image`)."""
    import struct

    note = struct.pack("<III", 4, len(build_id), 3) + b"GNU\0" + build_id
    names = b"\0.note.gnu.build-id\0.shstrtab\0"
    note_off = 52
    names_off = note_off + len(note)
    sh_off = (names_off + len(names) + 3) & ~3
    header = (b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)
              + struct.pack("<HHIIIIIHHHHHH", 2, 40, 1, 0, 0, sh_off, 0, 52, 0, 0, 40, 3, 2))
    sections = (bytes(40)
                + struct.pack("<IIIIIIIIII", 1, 7, 2, 0, note_off, len(note), 0, 0, 4, 0)
                + struct.pack("<IIIIIIIIII", 20, 3, 0, 0, names_off, len(names), 0, 0, 1, 0))
    body = header + note + names
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body + bytes(sh_off - len(body)) + sections)


def test_the_memory_table_is_never_of_images_built_again_after_the_run(tmp_path):
    """audit Q #3: `cisl build hw --profile-ops` after the run (the same plan, new images): the report still said
    "memory table from hw, the build these logs ran" with the new images' sizes; only the plan was compared,
    while the boards' boot lines name their image's build id."""
    from codegen.elfsize import image_id

    logs, build = tmp_path / "logs", tmp_path / "build"
    write_run(logs, 2, compute_us=1000, comm_us=500, delivered=1)  # its nodes boot plan "ab"
    ran = {k: bytes([0xa7, 0x10, k]) * 7 for k in range(2)}
    for k in range(2):
        write_elf(build / f"node_{k:02d}" / "firmware.elf", ran[k])
    assert image_id(build / "node_01" / "firmware.elf") == ran[1].hex()[:16]
    edit_records(logs, lambda r: r.update(image=ran[r["node"]].hex()[:16]) if r["event"] == "boot" else None)
    (build / "compile.json").write_text(json.dumps({"devices": 2, "board": "nrf52840dk", "plan_sha256": "ab",
                                                    "nodes": [{"node": k, "param_bytes": 1, "arena_bytes": 1,
                                                               "bytes_sent_per_inference": 1} for k in range(2)]}))
    (build / "build.json").write_text(json.dumps({"plan": "ab", "nodes": [
        {"node": k, "image": f"node_{k:02d}/firmware.elf", "flash": 31024 + k, "ram": 9000} for k in range(2)]}))
    (logs / "summary.json").write_text(json.dumps({"flashed": {"build": str(build)}}))

    def report(*args):
        return CliRunner().invoke(main, ["report", str(logs), "-o", str(tmp_path / "rep"), "--no-plots", *args])

    r = report()
    assert r.exit_code == 0 and f"memory table from {build}, the build these logs ran" in r.stderr, r.output
    assert [m["image_bytes"] for m in read_csv(tmp_path / "rep" / "memory.csv")] == ["31024", "31025"]
    assert report("--build", str(build)).exit_code == 0
    # built again with other flags: node 1's image is another one
    write_elf(build / "node_01" / "firmware.elf", bytes([0x5e]) * 20)
    r = report()
    assert r.exit_code == 0, r.output
    assert "the build these logs ran" not in r.stderr, r.stderr
    said = (f"note: logs: no memory table from {build}: it holds the plan these logs ran, but was built again since "
            f"(node 1's boot line names image {ran[1].hex()[:16]}, the build's node 1 has image {'5e' * 8})")
    assert said in r.stderr, r.stderr
    assert not (tmp_path / "rep" / "memory.csv").exists()
    # --build naming it is refused, as a build of another plan is
    r = report("--build", str(build))
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"--build {build}: its images are not the ones the logs ran (node 1's boot line" \
        in lines[0] and "built again since the run" in lines[0], r.stderr


def test_speedup_only_over_a_one_node_run_of_the_same_model(tmp_path):
    """audit Q #4: a 2-node run of one model over a 1-node run of another architecture printed "speedup 0.309x"
    without a word, and of two 1-node runs that could be the base the first was used silently."""
    from codegen.compile import CompileOptions, compile_model
    from codegen.plan.io import load_plan
    from codegen.randmodel import config_for_tokens, make_model_dir

    a = make_model_dir(tmp_path / "a", config_for_tokens(8, 64, heads=8, layers=1), 2, 1.0)
    b = make_model_dir(tmp_path / "b", config_for_tokens(8, 32, heads=8, layers=1), 1, 1.0)
    runs = {}
    for name, model, devices, compute in (("two-a", a, 2, 1000), ("one-b", b, 1, 1500), ("one-a", a, 1, 4000),
                                          ("one-a-again", a, 1, 4000)):
        build = tmp_path / f"build-{name}"
        compile_model(model, build, CompileOptions(devices=devices))
        plan = load_plan(build).sha256[:16]
        write_run(tmp_path / name, devices, compute_us=compute, comm_us=500, delivered=1)
        edit_records(tmp_path / name, lambda r: r.update(plan=plan) if r["event"] == "boot" else None)
        (tmp_path / name / "summary.json").write_text(json.dumps({"build": str(build)}))
        runs[name] = tmp_path / name

    def report(*names):
        r = CliRunner().invoke(main, ["report", *(str(runs[n]) for n in names), "-o", str(tmp_path / "rep"),
                                      "--no-plots"])
        assert r.exit_code == 0, r.output
        return {s["run"]: s["speedup"] for s in read_csv(tmp_path / "rep" / "speedup.csv")}, r.stderr

    speed, err = report("two-a", "one-b")
    assert speed == {"one-b": "1.0", "two-a": ""}, speed
    assert ("note: two-a: one-b is not its speedup base: it ran another model (d_model 32 against 64" in err
            and "speedup is over a 1-node run of the same model only" in err), err
    speed, err = report("two-a", "one-b", "one-a")
    assert speed["two-a"] == str(round((4 * 4000 + 10) / (4 * 1000 + 3 * 500 + 10), 3)), speed
    assert "one-b is not its speedup base" in err and "could be its base" not in err, err
    speed, err = report("two-a", "one-a", "one-a-again")
    assert ("note: two-a: speedup over one-a, the first of the 1-node runs that could be its base (one-a, "
            "one-a-again)") in err, err
