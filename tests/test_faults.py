"""Hostile input and faults (issue 13): nothing lost, nothing stale, nothing silently wrong.

Every case drives the command line as a user would and asserts the contract: exit code 2 (bad
input) with one line and no traceback, and nothing the user owns deleted or overwritten.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clirun import cisl, vouch_for
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.faults


def one_line_error(p, *words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("faults")
    return make_model_dir(root / "m", config_for_tokens(8, 32, heads=4, layers=1), devices=2, keep_ratio=1.0,
                          seed=1, tests=2)


def test_compile_never_deletes_a_folder_because_it_holds_a_file_named_plan_json(model, tmp_path):
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "plan.json").write_text('{"my": "plan for the thesis"}')
    (out / "thesis.tex").write_text("\\\\documentclass{article}")
    p = cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path)
    one_line_error(p, str(out), "not written by cisl")
    assert (out / "thesis.tex").read_text() == "\\\\documentclass{article}"
    assert (out / "plan.json").read_text() == '{"my": "plan for the thesis"}'


def test_compile_keeps_a_users_file_inside_its_own_build_folder(model, tmp_path):
    out = tmp_path / "build"
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0  # its own
    (out / "notes.md").write_text("my notes")
    p = cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path)
    one_line_error(p, "notes.md", "cisl did not write")
    assert (out / "notes.md").read_text() == "my notes" and (out / "plan.json").is_file()


def test_a_users_file_deep_in_a_build_folder_is_never_deleted(model, tmp_path):
    out = tmp_path / "build"
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0
    assert cisl("build", str(out), "-q", "--no-board-time", cwd=tmp_path).returncode == 0  # cisl writes in place
    assert cisl("sim", str(out), "-n", "1", cwd=tmp_path).returncode == 0  # and its logs/ inside
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0  # all its own
    (out / "node_01").mkdir(exist_ok=True)
    (out / "node_01" / "cisl_node.c").write_text("/* my fix */\n")  # a generated file the user edited
    p = cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path)
    one_line_error(p, "node_01/cisl_node.c", "after cisl wrote this folder")
    assert (out / "node_01" / "cisl_node.c").read_text() == "/* my fix */\n"
    # a run that writes in place after the user's change (the build, the sim's logs) does not adopt it: its
    # stamp used to move past the user's files, and the next compile replaced them without a word
    (out / "node_01" / "cisl_node.c").unlink()
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0
    mine = out / "node_00" / "my\napp.c"  # any name: one with a newline is recorded (and named) escaped
    mine.write_text("int my_app(void) { return 42; }\n")
    assert cisl("build", str(out), "-q", "--no-board-time", cwd=tmp_path).returncode == 0
    assert cisl("sim", str(out), "-n", "1", cwd=tmp_path).returncode == 0
    p = cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path)
    one_line_error(p, '"node_00/my\\napp.c"', "after cisl wrote this folder")
    assert mine.read_text() == "int my_app(void) { return 42; }\n"
    mine.unlink()  # moved away: the folder is cisl's again
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0


def test_a_report_folder_keeps_a_users_csv(simbuild, tmp_path):
    assert cisl("sim", str(simbuild), "-n", "1", "--logs", str(tmp_path / "logs"), cwd=tmp_path).returncode == 0
    for _ in range(2):  # a report folder cisl wrote is replaced
        assert cisl("report", "logs", "-o", "rep", "--no-plots", cwd=tmp_path).returncode == 0
    (tmp_path / "rep" / "my_table.csv").write_text("a,b\n1,2\n")  # a name like cisl's own
    p = cisl("report", "logs", "-o", "rep", "--no-plots", cwd=tmp_path)
    one_line_error(p, "my_table.csv", "after cisl wrote this folder")
    assert (tmp_path / "rep" / "my_table.csv").read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize("mine", ["notes.txt", "model.onnx"])
def test_train_refuses_a_folder_it_did_not_write_before_training(tmp_path, mine):
    out = tmp_path / "mydir"
    out.mkdir()
    (out / mine).write_text("the user's")
    p = cisl("train", "-o", str(out), "--epochs", "1", cwd=tmp_path)
    one_line_error(p, "mydir", "not written by cisl")
    assert [x.name for x in out.iterdir()] == [mine] and (out / mine).read_text() == "the user's"


def test_a_build_folder_of_an_older_cisl_is_still_replaced(model, tmp_path):
    out = tmp_path / "build"
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0
    (out / ".cisl-output").unlink()  # as cisl wrote folders before the owner file
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0
    assert (out / ".cisl-output").read_text() == "cisl build\n"


def test_a_folder_of_the_versions_that_never_stamped_it_is_named_so_and_left_as_it_was(model, tmp_path):
    """cisl of 1-4 December 2026 wrote .cisl-output first and never stamped it (audit V F2, F3): every file
    in such a folder is newer than it, so this cisl blamed plan.json on the user ("move it away": the next
    refusal named the next of ~100 files), and a run writing in place (`cisl estimate`, `cisl build`)
    recorded every old file as the user's for good. Such a folder is named for what it is, and left as it was."""
    out = tmp_path / "build"
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0
    owner = out / ".cisl-output"
    first = min(f.stat().st_mtime_ns for f in out.rglob("*") if f.is_file() and f != owner)
    os.utime(owner, ns=(first - 10**6, first - 10**6))  # written before the rest, never stamped
    p = cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path)
    one_line_error(p, "1-4 December 2026", "rm -r")
    assert cisl("build", str(out), "-q", "--no-board-time", cwd=tmp_path).returncode == 0  # writes in place
    assert owner.read_text() == "cisl build\n" and owner.stat().st_mtime_ns == first - 10**6
    one_line_error(cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path), "1-4 December 2026")
    # a run refused under the folder's lock leaves the owner file as it was (it recorded the user's files)
    assert cisl("compile", str(model), "--devices", "2", "-o", str(tmp_path / "b2"), cwd=tmp_path).returncode == 0
    (tmp_path / "b2" / "node_00" / "mine.c").write_text("/* mine */\n")
    before = (tmp_path / "b2" / ".cisl-output").read_bytes(), (tmp_path / "b2" / ".cisl-output").stat().st_mtime_ns
    one_line_error(cisl("build", str(tmp_path / "b2"), "--node", "7", cwd=tmp_path), "--node 7")
    assert ((tmp_path / "b2" / ".cisl-output").read_bytes(), (tmp_path / "b2" / ".cisl-output").stat().st_mtime_ns) == before



def test_generated_c_of_another_cisl_is_refused_before_its_images_are_removed(model, tmp_path):
    """A build folder compiled by another cisl (audit V F1): `cisl build` removed the working images, then
    failed to link the old generated C with this runtime (undefined `cisl_node_skip`, exit 1), and
    `cisl sim` said "run `cisl build` first", which failed the same way. Now one line, exit 2, before
    anything is removed; the images that were built still run."""
    out = tmp_path / "build"
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0
    assert cisl("build", str(out), "-q", "--no-board-time", cwd=tmp_path).returncode == 0
    kept = {f: f.read_bytes() for f in (out / "build.json", out / "node_00" / "firmware.elf")}
    summary = json.loads((out / "compile.json").read_text())
    for older in ({**summary, "runtime": "0" * 16}, {k: v for k, v in summary.items() if k != "runtime"}):
        (out / "compile.json").write_text(json.dumps(older))
        p = cisl("build", str(out), "-q", "--no-board-time", cwd=tmp_path)
        one_line_error(p, "compiled by another cisl version", "cisl compile MODEL -o")
        assert {f: f.read_bytes() for f in kept} == kept
    assert cisl("sim", str(out), "-n", "1", cwd=tmp_path).returncode == 0
    # a plan of an older format says so (audit V F7: "not a cisl plan of format version 2")
    plan = json.loads((out / "plan.json").read_text())
    (out / "plan.json").write_text(json.dumps({**plan, "format_version": 1}))
    one_line_error(cisl("sim", str(out), "-n", "1", cwd=tmp_path), "a plan of another cisl version (format 1;",
                   "cisl compile MODEL.onnx -o")


LAB = """[[node]]
id = 0
board = "nrf52840dk"
runner = "pyocd"
probe = "0001"
port = "{port}"
"""


def test_a_failed_logs_run_keeps_the_previous_logs(tmp_path):
    """`cisl logs -o DIR` deleted the previous logs before it opened the ports."""
    (tmp_path / "tb.toml").write_text(LAB.format(port=tmp_path / "no-such-port"))
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "summary.json").write_text('{"stop_reason": "all nodes done", "ok": true}')
    (logs / "merged.jsonl").write_text('{"node": 0, "event": "end", "inferences": 4}\n')
    (logs / "node_00.log").write_text("CISL 0 end inferences=4\n")
    p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", "--no-reset", "--timeout", "5", "--open-timeout", "1",
             cwd=tmp_path)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    assert (logs / "node_00.log").read_text() == "CISL 0 end inferences=4\n"
    assert (logs / "merged.jsonl").is_file() and (logs / "summary.json").is_file()
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".logs.tmp-")], "a temporary folder was left"


def test_logs_refuse_a_folder_with_other_files(tmp_path):
    (tmp_path / "tb.toml").write_text(LAB.format(port=tmp_path / "no-such-port"))
    out = tmp_path / "results"
    out.mkdir()
    (out / "paper.pdf").write_bytes(b"%PDF")
    p = cisl("logs", "--testbed", "tb.toml", "-o", "results", "--no-reset", cwd=tmp_path)
    one_line_error(p, "results", "not written by cisl")
    assert (out / "paper.pdf").read_bytes() == b"%PDF"


@pytest.fixture(scope="module")
def simbuild(model, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("simbuild")
    assert cisl("compile", str(model), "--devices", "2", "-o", str(root / "build"), cwd=root).returncode == 0
    assert cisl("build", str(root / "build"), "-q", "--no-board-time", cwd=root).returncode == 0
    return root / "build"


def with_node_image(simbuild: Path, tmp_path: Path, node: int, image: bytes, executable: bool = True) -> Path:
    """A copy of the sim build in which ``node`` runs ``image`` (a script: broken, hanging, crashing),
    recorded in build.json as if `cisl build` had made it."""
    import shutil

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    img = b / f"node_{node:02d}" / "firmware.elf"
    img.write_bytes(image)
    if executable:
        img.chmod(0o755)
    vouch_for(b, node)
    return b


def test_sim_refuses_the_images_of_a_failed_build(simbuild, tmp_path):
    import shutil

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    assert cisl("sim", str(b), "-n", "1", cwd=tmp_path).returncode == 0
    src = b / "node_01" / "cisl_node.c"
    src.write_text(src.read_text() + "\nthis is not C;\n")  # the next build fails to compile
    assert cisl("build", str(b), "-q", "--no-board-time", cwd=tmp_path).returncode == 1
    p = cisl("sim", str(b), "-n", "1", cwd=tmp_path)
    one_line_error(p, "cisl build")


def test_sim_refuses_an_image_that_is_not_the_built_one(simbuild, tmp_path):
    import shutil

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    img = b / "node_00" / "firmware.elf"
    shutil.copyfile(b / "node_01" / "firmware.elf", img)  # a node 1 image where node 0's belongs
    p = cisl("sim", str(b), "-n", "1", cwd=tmp_path)
    one_line_error(p, "node_00", "firmware.elf")


def test_report_refuses_a_logs_folder_of_two_runs(simbuild, tmp_path):
    import shutil

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    assert cisl("sim", str(b), "-n", "1", "--logs", str(tmp_path / "a"), cwd=tmp_path).returncode == 0
    assert cisl("sim", str(b), "-n", "1", "--logs", str(tmp_path / "b"), cwd=tmp_path).returncode == 0
    mixed = tmp_path / "mixed"
    shutil.copytree(tmp_path / "a", mixed)
    with open(mixed / "records.jsonl", "a") as f:  # two sims stitched into one folder
        f.write((tmp_path / "b" / "records.jsonl").read_text())
    p = cisl("report", str(mixed), "-o", str(tmp_path / "rep"), "--no-plots", cwd=tmp_path)
    one_line_error(p, "2 different runs")
    assert not (tmp_path / "rep").exists(), "the report left an output folder behind"


def test_report_says_which_nodes_the_logs_lack(simbuild, tmp_path):
    import json
    import shutil

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    assert cisl("sim", str(b), "-n", "3", "--logs", str(tmp_path / "a"), cwd=tmp_path).returncode == 0
    recs = [json.loads(ln) for ln in (tmp_path / "a" / "records.jsonl").read_text().splitlines() if ln.strip()]
    cases = {"lost": [r for r in recs if r["node"] != 1],  # node 1's file lost: 100 % delivered, said nothing
             "cut": [r for r in recs if r["node"] != 1 or r.get("inf", 0) < 1 and r["event"] != "end"]}
    for name, kept in cases.items():
        logs = tmp_path / name
        shutil.copytree(tmp_path / "a", logs)
        (logs / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
        p = cisl("report", str(logs), "-o", str(tmp_path / f"rep-{name}"), "--no-plots", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        runs = sum(r["event"] == "infer" and r["node"] == 0 for r in recs)  # the build's windows, at most 3
        want = "no records of node 1 (the run had 2 nodes)" if name == "lost" else \
            f"node 1's records end after 1 of {runs} inferences"
        assert want in p.stdout + p.stderr, (name, p.stdout, p.stderr)
        assert want in (tmp_path / f"rep-{name}" / "notes.txt").read_text()  # with the tables, not only on screen


def test_sim_logs_never_replace_a_users_folder(simbuild, tmp_path):
    import shutil

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.csv").write_text("1,2,3")
    p = cisl("sim", str(b), "-n", "1", "--logs", str(mine), cwd=tmp_path)
    one_line_error(p, "mine", "not written by cisl")
    assert (mine / "data.csv").read_text() == "1,2,3"


@pytest.mark.parametrize("section,line,key", [
    ("train", "lr = inf", "lr"),
    ("model", "ln_eps = nan", "ln_eps"),
    ("train", "seed = -1", "seed"),
    ("split", "mask_seed = -5", "mask_seed"),
])
def test_non_finite_and_negative_settings_are_refused_by_name(tmp_path, section, line, key):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f"[{section}]\n{line}\n")
    p = cisl("train", str(cfg), "-o", str(tmp_path / "model"), cwd=tmp_path)
    one_line_error(p, key)
    assert not (tmp_path / "model").exists()


def test_a_model_too_large_for_the_machine_is_refused_before_training(tmp_path):
    # was killed by the OS (or a MemoryError traceback) once torch allocated the weights
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("[model]\nd_model = 1000000\nmlp_hidden = 1000000\n")
    p = cisl("train", str(cfg), "-o", str(tmp_path / "model"), "--epochs", "1", cwd=tmp_path, timeout=120)
    one_line_error(p, "d_model = 1000000", "GiB to train", "choose a smaller model")
    assert not (tmp_path / "model").exists()


def test_a_nan_weight_is_refused_by_name(model, tmp_path):
    import shutil

    import numpy as np
    import onnx
    from onnx import numpy_helper

    m = tmp_path / "m"
    shutil.copytree(model.parent, m)
    proto = onnx.load(str(m / "model.onnx"))
    init = next(t for t in proto.graph.initializer if t.name.endswith(".bias"))
    arr = numpy_helper.to_array(init).copy()
    arr[0] = np.nan
    init.CopyFrom(numpy_helper.from_array(arr, init.name))
    onnx.save(proto, str(m / "model.onnx"))
    p = cisl("compile", str(m / "model.onnx"), "--devices", "2", "-o", str(tmp_path / "build"), cwd=tmp_path)
    one_line_error(p, init.name, "NaN")
    assert not (tmp_path / "build").exists()


def test_nan_inputs_are_refused(simbuild, tmp_path):
    import numpy as np

    x = np.load(simbuild / "inputs.npy")[:2].copy()
    x[1, 3] = np.nan
    np.save(tmp_path / "x.npy", x)
    p = cisl("sim", str(simbuild), "--inputs", str(tmp_path / "x.npy"), cwd=tmp_path)
    one_line_error(p, "x.npy", "finite")


def test_report_refuses_logs_that_break_the_sequence_rules(simbuild, tmp_path):
    import json
    import shutil

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    assert cisl("sim", str(b), "-n", "2", "--logs", str(tmp_path / "logs"), cwd=tmp_path).returncode == 0
    recs = (tmp_path / "logs" / "records.jsonl").read_text().splitlines()
    infer = next(r for r in recs if json.loads(r)["event"] == "infer")
    i = recs.index(infer)
    (tmp_path / "logs" / "records.jsonl").write_text("\n".join(recs[:i + 1] + [infer] + recs[i + 1:]) + "\n")
    p = cisl("report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots", cwd=tmp_path)
    one_line_error(p, "breaks the serial contract", "repeated")


def test_an_output_under_a_file_is_one_line(model, tmp_path):
    (tmp_path / "afile").write_text("x")
    for args in (["compile", str(model), "--devices", "2", "-o", str(tmp_path / "afile" / "build")],
                 ["estimate", str(tmp_path / "afile")],
                 ["report", str(tmp_path / "afile")]):
        p = cisl(*args, cwd=tmp_path)
        assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, \
            (args, p.stderr)
    assert (tmp_path / "afile").read_text() == "x"


def test_the_mlp_narrower_than_the_device_count_is_one_line(tmp_path):
    import dataclasses

    cfg = dataclasses.replace(config_for_tokens(8, 32, heads=4, layers=1), mlp_hidden=2)
    onnx = make_model_dir(tmp_path / "m2", cfg, devices=2, keep_ratio=1.0)
    p = cisl("compile", str(onnx), "--devices", "4", "-o", str(tmp_path / "b"), cwd=tmp_path)
    one_line_error(p, "hidden")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])  # SIGHUP: the terminal closed, the ssh session dropped
def test_a_killed_compile_leaves_no_temporary_folder_and_the_next_run_cleans_up(model, tmp_path, sig):
    import os
    import signal
    import subprocess
    import sys
    import time

    big = make_model_dir(tmp_path / "big", config_for_tokens(8, 128, heads=8, layers=2), devices=2,
                         keep_ratio=1.0, seed=2, calibration=64)
    proc = subprocess.Popen([sys.executable, "-m", "codegen.cli", "compile", str(big), "--devices", "2", "-o",
                             str(tmp_path / "build")], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + 60
    while time.monotonic() < end and not list(tmp_path.glob(".build.tmp-*")) and proc.poll() is None:
        time.sleep(0.01)
    assert proc.poll() is None and list(tmp_path.glob(".build.tmp-*")), "compile finished before the signal"
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and b"Traceback" not in err, err
    assert not list(tmp_path.glob(".build.*")), f"{sig} left a temporary folder"
    assert not (tmp_path / "build").exists()
    # a SIGKILLed run cannot clean up: the next run on the same output does
    killed = tmp_path / ".build.tmp-0123456789ab"  # a temporary output, named and marked as cisl makes them
    killed.mkdir()
    (killed / ".cisl-output").write_text("cisl build\n")
    (killed / "plan.json").write_text("{}")
    os.utime(killed, (0, 0))
    # ... and the user's own folders that only look alike: never touched (audit M: `.build.tmp-mine` was removed,
    # `.build.old-v1` renamed into the output's place)
    for name in (".build.tmp-mine", ".build.old-v1", ".build.old-0123456789ab"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "data.txt").write_text("mine\n")
    assert cisl("compile", str(model), "--devices", "2", "-o", str(tmp_path / "build"), cwd=tmp_path).returncode == 0
    assert not killed.exists()
    for name in (".build.tmp-mine", ".build.old-v1", ".build.old-0123456789ab"):
        assert (tmp_path / name / "data.txt").read_text() == "mine\n", name


def test_two_runs_on_one_output_folder_are_serialised(model, tmp_path):
    from codegen.fsutil import output_lock

    with output_lock(tmp_path / "build"):  # another cisl process is writing build/
        p = cisl("compile", str(model), "--devices", "2", "-o", str(tmp_path / "build"), cwd=tmp_path)
    one_line_error(p, "another cisl")
    assert cisl("compile", str(model), "--devices", "2", "-o", str(tmp_path / "build"), cwd=tmp_path).returncode == 0
    with output_lock(tmp_path / "build"):
        p = cisl("build", str(tmp_path / "build"), "-q", "--no-board-time", cwd=tmp_path)
    one_line_error(p, "another cisl")


def test_a_build_being_read_is_never_compiled_over_and_one_being_written_is_never_read(model, tmp_path):
    """`cisl sim`, `flash`, `qemu` and `estimate` read a build folder for up to minutes. A compile of it
    meanwhile swapped the folder away: a 256-inference sim printed "logs in b/logs" and its logs were
    gone with the old folder (and a flash would program half the boards from each build). Readers
    now share the folder's lock; a writer excludes them, and each side is refused in one line."""
    import subprocess
    import sys

    from codegen.fsutil import _lock_path, output_lock, reading

    out = tmp_path / "build"
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0
    before = (out / "plan.json").read_bytes()
    with reading(out):  # a sim of build/ is running
        p = cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path)
        one_line_error(p, str(out), "another cisl run is reading it")
        one_line_error(cisl("build", str(out), "-q", "--no-board-time", cwd=tmp_path), "reading it")
        second = subprocess.run([sys.executable, "-c", "import sys\nfrom codegen.fsutil import reading\n"
                                 "with reading(sys.argv[1]): print('read')", str(out)],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 0 and second.stdout.strip() == "read", second.stderr  # readers share it
    assert (out / "plan.json").read_bytes() == before
    assert not _lock_path(str(out.resolve())).exists()  # the last reader took its lock file with it
    with output_lock(out):  # a compile or build of build/ is running
        for command in (["sim", str(out)], ["estimate", str(out)], ["qemu", str(out)]):
            one_line_error(cisl(*command, cwd=tmp_path), str(out), "another cisl run is writing it")
    # what a sim in progress (or killed) keeps inside the folder is its own, not the user's: a compile of
    # the folder is not refused for it (it used to say "holds .logs.tmp-…/node_00.log … move it away")
    (out / ".logs.tmp-0123456789ab").mkdir()
    (out / ".logs.tmp-0123456789ab" / ".cisl-output").write_text("cisl sim-logs\n")
    (out / ".logs.tmp-0123456789ab" / "node_00.log").write_text("CISL 1 boot\n")
    assert cisl("compile", str(model), "--devices", "2", "-o", str(out), cwd=tmp_path).returncode == 0


def test_a_node_printing_bytes_that_are_not_text_keeps_its_log(simbuild, tmp_path):
    script = b"#!/bin/sh\nprintf 'CISL 1 boot fw=x plan=y board=sim node=1 nodes=2\\n\\377\\376 bad\\n'\nexit 3\n"
    b = with_node_image(simbuild, tmp_path, 1, script)
    p = cisl("sim", str(b), "-n", "1", "--timeout", "20", cwd=tmp_path)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "node 1" in p.stdout + p.stderr
    assert (b / "logs" / "node_01.log").read_bytes().startswith(b"CISL 1 boot")


def test_an_image_that_is_not_an_executable_is_one_line(simbuild, tmp_path):
    b = with_node_image(simbuild, tmp_path, 0, b"\x7fELF this is not a program", executable=False)
    p = cisl("sim", str(b), "-n", "1", "--timeout", "20", cwd=tmp_path)
    one_line_error(p, "node_00")


def test_a_dead_node_is_named_first_in_one_line_not_one_per_missing_inference(simbuild, tmp_path):
    b = with_node_image(simbuild, tmp_path, 1,
                        b"#!/bin/sh\necho 'CISL 1 boot fw=x plan=y board=sim node=1 nodes=2'\nexit 3\n")
    p = cisl("sim", str(b), "-n", "6", "--timeout", "20", cwd=tmp_path)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    problems = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("problem:")]
    assert problems and "node 1 exited with code 3" in problems[0], p.stdout
    assert len(problems) <= 5, p.stdout


def test_the_sim_timeout_is_a_hard_limit_for_the_node_and_what_it_started(simbuild, tmp_path):
    import random
    import subprocess
    import time

    mark = random.randrange(10**6, 10**7)  # a unique duration: other runs' sleeps are not ours
    hang = f"#!/bin/sh\nsleep {mark}1 &\nsleep {mark}2\n".encode()  # hangs, with a child of its own
    b = with_node_image(simbuild, tmp_path, 1, hang)
    t0 = time.monotonic()
    p = cisl("sim", str(b), "-n", "1", "--timeout", "3", cwd=tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 1 and "Traceback" not in p.stderr
    # the run's deadline or the medium's (the same 3 s: whichever fires first) ends it
    assert "did not finish within 3 s" in p.stdout or "connected within 3 s" in p.stdout, p.stdout
    assert took < 20, took
    left = subprocess.run(["pgrep", "-f", f"sleep {mark}[12]"], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the timed-out node still run: {left}"


def _fs_fault_cases():
    """(name, argv) of every command against a file system that is not what it expects: a file where
    a folder should be, a path under a file, a folder where a file should be, a missing input."""
    F = "{file}"      # an existing regular file
    D = "{dir}"       # an existing empty folder
    U = "{file}/x"    # a path under a file
    M = "{missing}"   # nothing there
    return [
        ("train -o under a file", ["train", "-o", U, "--epochs", "1"]),
        ("train config is a folder", ["train", D, "-o", "{out}"]),
        ("compile a folder as model", ["compile", D, "-o", "{out}"]),
        ("compile missing model", ["compile", M, "-o", "{out}"]),
        ("compile -o is a file", ["compile", "{model}", "-o", F]),
        ("build a file", ["build", F]),
        ("build missing", ["build", M]),
        ("sim a file", ["sim", F]),
        ("sim --logs under a file", ["sim", "{build}", "--logs", U]),
        ("sim --inputs is a folder", ["sim", "{build}", "--inputs", D]),
        ("estimate a file", ["estimate", F]),
        ("estimate -o under a file", ["estimate", "{build}", "-o", U]),
        ("report a file", ["report", F, "-o", "{out}"]),
        ("report -o is a file", ["report", "{logs}", "-o", F]),
        ("report --estimate is a folder", ["report", "{logs}", "-o", "{out}", "--estimate", D]),
        ("eval a folder", ["eval", D]),
        ("eval missing", ["eval", M]),
        ("qemu a file", ["qemu", F]),
        ("testbed check a folder", ["testbed", "check", D]),
        ("testbed check missing", ["testbed", "check", M]),
        ("flash --testbed missing", ["flash", "{build}", "--testbed", M]),
        ("logs --testbed is a folder", ["logs", "--testbed", D, "-o", "{out}"]),
        ("fit --json under a file", ["fit", "--devices", "2", "--no-build", "--tokens", "8", "--layers", "1",
                                     "--json", U]),
        ("radio loss -o under a file", ["radio", "loss", "--topology", "full_mesh", "--nodes", "2", "-o", U]),
        ("demo -o under a file", ["demo", "-o", U, "--epochs", "1"]),
    ]


@pytest.mark.parametrize("name,argv", _fs_fault_cases(), ids=[c[0] for c in _fs_fault_cases()])
def test_every_command_meets_file_system_faults_with_one_line(model, simbuild, tmp_path, name, argv):
    (tmp_path / "afile").write_text("not what cisl expects\n")
    (tmp_path / "adir").mkdir()
    logs = tmp_path / "logs"
    if "{logs}" in " ".join(argv):
        assert cisl("sim", str(simbuild), "-n", "1", "--logs", str(logs), cwd=tmp_path).returncode == 0
    subst = {"{file}": str(tmp_path / "afile"), "{dir}": str(tmp_path / "adir"), "{missing}": str(tmp_path / "nope"),
             "{out}": str(tmp_path / "out"), "{build}": str(simbuild), "{logs}": str(logs),
             "{model}": str(model)}
    args = []
    for a in argv:
        for k, v in subst.items():
            a = a.replace(k, v)
        args.append(a)
    p = cisl(*args, cwd=tmp_path, timeout=300)
    assert p.returncode == 2, (name, p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr, (name, p.stderr[-2000:])
    last = [ln for ln in p.stderr.strip().splitlines() if ln.strip()][-1]
    assert last.startswith("error: "), (name, p.stderr[-2000:])
    assert (tmp_path / "afile").read_text() == "not what cisl expects\n"


def test_metadata_masks_that_contradict_the_graph_are_refused(tmp_path):
    import json

    import onnx

    onnx_path = make_model_dir(tmp_path / "m", config_for_tokens(8, 32, heads=4, layers=1), devices=2,
                               keep_ratio=0.5, seed=3)
    proto = onnx.load(str(onnx_path))
    kv = next(p for p in proto.metadata_props if p.key == "cisl.masks")
    masks = json.loads(kv.value)
    first = masks["broadcast"][0][0]
    own = sorted(set(range(16)) - set(first["x"]))  # device 0 owns columns 0..15: send others than trained
    first["x"] = own[:len(first["x"])]
    kv.value = json.dumps(masks)
    onnx.save(proto, str(onnx_path))
    p = cisl("compile", str(onnx_path), "-o", str(tmp_path / "b"), "-q", cwd=tmp_path)
    one_line_error(p, "contradicts the graph")
    assert not (tmp_path / "b").exists()


def test_a_degenerate_calibration_set_warns_with_the_measured_error(model, tmp_path):
    import numpy as np

    cal = np.load(model.parent / "calibration.npy")[:1]
    np.save(tmp_path / "one.npy", np.repeat(cal, 3, axis=0))  # three copies of one window
    p = cisl("compile", str(model), "--devices", "2", "--calibration", str(tmp_path / "one.npy"), "-o",
             str(tmp_path / "b"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    warn = [ln for ln in p.stderr.splitlines() if ln.startswith("warning: degenerate calibration set")]
    assert warn and "3 calibration windows" in warn[0] and "MSE" in warn[0], p.stderr


def test_flat_stretches_in_a_real_calibration_set_are_no_warning_but_a_flat_set_is(model, tmp_path):
    import numpy as np

    cal = np.load(model.parent / "calibration.npy")
    some_flat = cal.copy()
    some_flat[::8] = 0.25  # real series hold flat stretches (ETTh2 does): the other windows set the ranges
    np.save(tmp_path / "some.npy", some_flat)
    p = cisl("compile", str(model), "--devices", "2", "--calibration", str(tmp_path / "some.npy"), "-o",
             str(tmp_path / "b"), cwd=tmp_path)
    assert p.returncode == 0 and "degenerate calibration" not in p.stderr, p.stderr
    levels = np.repeat(np.linspace(-1.0, 1.0, len(cal), dtype=np.float32)[:, None], cal.shape[1], axis=1)
    np.save(tmp_path / "flat.npy", levels)  # every window constant, each at its own level
    p = cisl("compile", str(model), "--devices", "2", "--calibration", str(tmp_path / "flat.npy"), "-o",
             str(tmp_path / "c"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "warning: degenerate calibration set (constant calibration windows)" in p.stderr, p.stderr


@pytest.mark.parametrize("delay", [0.0, 0.3, 1.2])  # before, during and after the nodes connect
def test_a_medium_killed_mid_run_is_named_as_the_cause(simbuild, tmp_path, delay):
    import subprocess
    import sys
    import time

    b = with_node_image(simbuild, tmp_path, 1, b"#!/bin/sh\nsleep 30\n")  # a slow node keeps the run going
    sim = subprocess.Popen([sys.executable, "-m", "codegen.cli", "sim", str(b), "-n", "1", "--timeout", "60"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    medium = ""
    end = time.monotonic() + 20
    while not medium and time.monotonic() < end:
        medium = subprocess.run(["pgrep", "-P", str(sim.pid), "-f", "codegen.vtestbed.medium"], capture_output=True,
                                text=True).stdout.split()
        medium = medium[0] if medium else ""
        time.sleep(0.05)
    assert medium, "the medium never started"
    time.sleep(delay)
    subprocess.run(["kill", "-9", medium])
    out, err = sim.communicate(timeout=60)
    assert sim.returncode == 1 and "Traceback" not in err, err
    if "died before it was ready" in err:  # killed before it could serve the nodes
        assert err.strip().splitlines()[-1] == "FAILED: the medium died before it was ready (signal 9)", err
        return
    problems = [ln for ln in out.splitlines() if ln.strip().startswith("problem:")]
    assert problems and problems[0].strip() == "problem: the medium died (signal 9): the nodes lost the radio", out


def test_a_supervisor_killed_during_logs_ends_the_capture_and_is_named(simbuild, tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    b = with_node_image(simbuild, tmp_path, 1, b"#!/bin/sh\nsleep 30\n")
    assert cisl("testbed", "sim", "--nodes", "2", "-o", "tb.toml", cwd=tmp_path).returncode == 0
    try:
        assert cisl("flash", str(b), "--testbed", "tb.toml", "--no-reset", cwd=tmp_path).returncode == 0
        logs = subprocess.Popen([sys.executable, "-m", "codegen.cli", "logs", "--testbed", "tb.toml", "-o", "logs",
                                 "--timeout", "60"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        import glob
        import tempfile

        pid = json.loads((tmp_path / ".cisl-testbed" / "supervisor.json").read_text())["pid"]
        run_dirs = os.path.join(tempfile.gettempdir(), f"cisl-tb-run-{pid}-*")
        end = time.monotonic() + 20
        while not glob.glob(run_dirs) and time.monotonic() < end:  # the run has started
            time.sleep(0.05)
        left = glob.glob(run_dirs)
        assert left, "the run never started"
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        out, err = logs.communicate(timeout=60)
        assert time.monotonic() - t0 < 20, "the capture waited for its timeout"
        assert logs.returncode == 1 and "Traceback" not in err, err
        assert "supervisor" in (out + err), out + err
        # the killed supervisor could not remove its run folder; the next supervisor does (or, with
        # tests running in parallel, any other test's supervisor that starts first)
        assert cisl("flash", str(b), "--testbed", "tb.toml", "--no-reset", cwd=tmp_path).returncode == 0
        assert not [d for d in left if os.path.exists(d)], left
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)


def test_a_run_halted_while_its_medium_runs_leaves_no_folder_behind(simbuild, tmp_path):
    import glob
    import json
    import os
    import tempfile

    b = with_node_image(simbuild, tmp_path, 1, b"#!/bin/sh\nsleep 30\n")  # the run cannot finish
    assert cisl("testbed", "sim", "--nodes", "2", "-o", "tb.toml", cwd=tmp_path).returncode == 0
    try:
        assert cisl("flash", str(b), "--testbed", "tb.toml", "--no-reset", cwd=tmp_path).returncode == 0
        pid = json.loads((tmp_path / ".cisl-testbed" / "supervisor.json").read_text())["pid"]
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", "--timeout", "2", cwd=tmp_path)
        assert p.returncode == 1, p.stderr  # node 1 never ends: the run is halted with the medium running
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)
    # the medium is killed with its socket in the run folder; the supervisor removes both
    assert glob.glob(os.path.join(tempfile.gettempdir(), f"cisl-tb-run-{pid}-*")) == []


def test_flashing_a_stale_node_names_the_fix_without_a_python_class_name(simbuild, tmp_path):
    import shutil

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    from codegen.timing.boardtime import TABLE, VERSION

    # a board time table left by another build of this folder (its image hash is not this image's)
    (b / "node_01" / TABLE).write_text(f"cisl-board-time {VERSION}\nplan 0\nimage 0\n")
    assert cisl("testbed", "sim", "--nodes", "2", "-o", "tb.toml", cwd=tmp_path).returncode == 0
    try:
        p = cisl("flash", str(b), "--testbed", "tb.toml", "--no-reset", cwd=tmp_path)
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    line = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("FAILED:")]
    assert line and "node 1: " in line[0] and "stale" in line[0] and "run `cisl build" in line[0], p.stdout + p.stderr
    assert "UserError" not in p.stdout + p.stderr, p.stdout + p.stderr


@pytest.mark.parametrize("damage", [b"", b"\x93NUMPY garbage", "nan", "width"])
def test_a_damaged_inputs_npy_is_one_line(simbuild, tmp_path, damage):
    import shutil

    import numpy as np

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    if damage == "nan":
        np.save(b / "inputs.npy", np.full((2, np.load(simbuild / "inputs.npy").shape[1]), np.nan, np.float32))
    elif damage == "width":
        np.save(b / "inputs.npy", np.zeros((2, 5), np.float32))
    else:
        (b / "inputs.npy").write_bytes(damage)
    p = cisl("sim", str(b), "-n", "1", cwd=tmp_path)  # (a sim build does not read it; ARM builds compile it in)
    one_line_error(p, "inputs.npy", "cisl compile")


def test_an_npz_archive_given_as_inputs_or_calibration_is_one_line(model, simbuild, tmp_path):
    # np.load gives an NpzFile for an .npz: cisl sim --inputs and compile --calibration ended in an
    # AttributeError traceback
    import numpy as np

    np.savez(tmp_path / "w.npz", x=np.zeros((2, np.load(simbuild / "inputs.npy").shape[1]), np.float32))
    one_line_error(cisl("sim", str(simbuild), "--inputs", "w.npz", cwd=tmp_path), "w.npz", "an .npz archive")
    p = cisl("compile", str(model), "--calibration", "w.npz", "-o", "b2", cwd=tmp_path)
    one_line_error(p, "w.npz", "an .npz archive")
    assert not (tmp_path / "b2").exists()


def test_logs_refuse_to_record_after_a_flash_that_failed_on_a_node(simbuild, tmp_path):
    import json

    assert cisl("testbed", "sim", "--nodes", "2", "-o", "tb.toml", cwd=tmp_path).returncode == 0
    try:
        assert cisl("flash", str(simbuild), "--testbed", "tb.toml", "--no-reset", cwd=tmp_path).returncode == 0
        rec = tmp_path / ".cisl-testbed" / "flashed.json"
        doc = json.loads(rec.read_text())
        doc["results"][1].update(ok=False, error="verify failed")  # as a flash that failed on node 1 records it
        rec.write_text(json.dumps(doc))
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", "--timeout", "5", cwd=tmp_path)
        one_line_error(p, "node 1", "last `cisl flash` failed")
        assert not (tmp_path / "logs").exists()
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)


def test_sim_says_when_the_inputs_hold_fewer_windows_than_asked(simbuild, tmp_path):
    # -n 1000 used to run the build's few windows without a word
    import numpy as np

    windows = len(np.load(simbuild / "inputs.npy"))
    p = cisl("sim", str(simbuild), "-n", "1000", "--logs", str(tmp_path / "logs"), cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert f"note: -n 1000, but the inputs hold {windows} window(s): ran {windows}" in p.stderr


def test_logs_refuse_mode_commands_for_images_without_modes_before_the_run(simbuild, tmp_path):
    # the whole run used to be recorded first, then failed on the nodes' refusals
    assert cisl("testbed", "sim", "--nodes", "2", "-o", "tb.toml", cwd=tmp_path).returncode == 0
    try:
        assert cisl("flash", str(simbuild), "--testbed", "tb.toml", "--no-reset", cwd=tmp_path).returncode == 0
        for opt, value in (("--mode-request", "1:1:1"), ("--mode-limits", "1:0:-:-:-")):
            p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", opt, value, "--timeout", "30", cwd=tmp_path)
            one_line_error(p, "hold no elastic modes")
            assert not (tmp_path / "logs").exists()
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", "-n", "2", "--mode-request", "2:1:1", cwd=tmp_path)
        one_line_error(p, "inference 2", "-n 2 records inferences 0 to 1")
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)


def test_logs_run_again_after_a_failed_run(simbuild, tmp_path):
    # OUT.failed was never stamped, so its own files looked the user's: the same command was then
    # refused until the user deleted cisl's folder
    import stat

    assert cisl("testbed", "sim", "--nodes", "2", "--inferences", "5000", "-o", "tb.toml", cwd=tmp_path).returncode == 0
    try:
        assert cisl("flash", str(simbuild), "--testbed", "tb.toml", "--no-reset", cwd=tmp_path).returncode == 0
        assert cisl("logs", "--testbed", "tb.toml", "-o", "logs", "-n", "1", cwd=tmp_path).returncode == 0
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", "--timeout", "1", cwd=tmp_path)
        assert p.returncode == 1 and (tmp_path / "logs.failed" / "summary.json").is_file(), (p.stdout, p.stderr)
        assert stat.S_IMODE((tmp_path / "logs.failed").stat().st_mode) == stat.S_IMODE((tmp_path / "logs").stat().st_mode)
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", "-n", "1", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", "--timeout", "1", cwd=tmp_path)
        assert p.returncode == 1 and "written or changed after" not in p.stderr, p.stderr  # a second failure too
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=tmp_path)


def test_logs_check_the_failed_runs_folder_before_the_run(tmp_path):
    (tmp_path / "tb.toml").write_text(LAB.format(port=tmp_path / "no-such-port"))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "summary.json").write_text('{"stop_reason": "all nodes done", "ok": true}')
    (tmp_path / "logs.failed").mkdir()
    (tmp_path / "logs.failed" / "mine.txt").write_text("x")
    p = cisl("logs", "--testbed", "tb.toml", "-o", "logs", "--no-reset", "--timeout", "5", "--open-timeout", "1",
             cwd=tmp_path)
    one_line_error(p, "logs.failed", "not written by cisl")
    assert (tmp_path / "logs.failed" / "mine.txt").read_text() == "x"
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".logs.tmp-")]


def test_a_reader_that_stops_early_is_not_reported_as_a_bad_path(simbuild, tmp_path):
    import subprocess
    import sys

    # `cisl sim BUILD | head -1`: the pipe closes after one line; that is no error of the user's
    p = subprocess.run(f"{sys.executable} -m codegen.cli sim {simbuild} -n 1 --logs {tmp_path / 'l'} | head -c 1",
                       shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       executable="/bin/bash")
    assert "error" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_flash_never_writes_over_a_users_files_in_the_state_folder(simbuild, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "inputs.npy").write_text("mine")  # names the virtual testbed writes in its state folder
    (work / "run.json").write_text("mine")
    assert cisl("testbed", "sim", "--nodes", "2", "-o", "tb.toml", "--state", ".", cwd=work).returncode == 0
    try:
        p = cisl("flash", str(simbuild), "--testbed", "tb.toml", "--no-reset", cwd=work)
    finally:
        cisl("testbed", "stop", "--testbed", "tb.toml", cwd=work)
    one_line_error(p, "state folder", "was not made by cisl")
    assert (work / "inputs.npy").read_text() == "mine" and (work / "run.json").read_text() == "mine"


def test_eval_refuses_its_json_output_before_the_work(model, tmp_path):
    (tmp_path / "mine.json").write_text('{"my": "results"}')
    for out in ("mine.json", "."):  # a user's file, a folder
        p = cisl("eval", str(model), "--json", out, cwd=tmp_path)
        one_line_error(p, out)
        assert p.stdout == "", p.stdout  # no result printed: refused before the evaluation
    assert (tmp_path / "mine.json").read_text() == '{"my": "results"}'


def test_a_radio_dead_node_outside_the_build_is_one_line(simbuild, tmp_path):
    p = cisl("sim", str(simbuild), "-n", "1", "--radio-dead", "9", "--logs", str(tmp_path / "l"), cwd=tmp_path)
    one_line_error(p, "--radio-dead 9", "nodes 0 to 1")
    assert not (tmp_path / "l").exists()


@pytest.mark.parametrize("argv", [
    ["radio", "loss", "--nodes", "4", "--topology", "line", "--exchanges", "3", "--shadowing", "nan"],
    ["radio", "loss", "--nodes", "4", "--topology", "line", "--exchanges", "3", "--exponent", "inf"],
    ["radio", "loss", "--nodes", "1", "--topology", "line", "--exchanges", "3"],
    ["estimate", "{build}", "--period-ms", "1e308"],
    ["sim", "{build}", "--timeout", "nan"],
])
def test_non_finite_or_meaningless_numbers_are_refused_by_the_option(simbuild, tmp_path, argv):
    p = cisl(*[a.replace("{build}", str(simbuild)) for a in argv], cwd=tmp_path)
    one_line_error(p, "Invalid value for '--")


@pytest.mark.parametrize("damage", ["nan", "shape"])
def test_damaged_test_files_next_to_the_model_are_one_line(model, tmp_path, damage):
    import shutil

    import numpy as np

    m = tmp_path / "m"
    shutil.copytree(model.parent, m)
    n = len(np.load(m / "test_windows.npy"))
    np.save(m / "test_scale.npy", np.full(n, np.nan, np.float32) if damage == "nan" else np.ones((7, 3), np.float32))
    for args in (["compile", str(m / "model.onnx"), "-o", str(tmp_path / "b")], ["eval", str(m / "model.onnx")]):
        p = cisl(*args, cwd=tmp_path)
        one_line_error(p, "test_scale.npy", "train again")
    assert not (tmp_path / "b").exists()


def test_fit_with_more_heads_than_any_width_is_one_line(tmp_path):
    p = cisl("fit", "--devices", "1", "--heads", "100000", "--tokens", "16", "--layers", "1", "--no-build",
             cwd=tmp_path)
    one_line_error(p, "--heads 100000", "fewer heads")


@pytest.mark.parametrize("line", [b'{"node": "x", "event": "boot"}\n', b'{"node": 0, "event": "boot", "fw": "\xff"}\n'])
def test_report_on_a_record_with_a_bad_node_or_bytes_is_one_line(tmp_path, line):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "records.jsonl").write_bytes(line)
    p = cisl("report", str(logs), "-o", str(tmp_path / "rep"), cwd=tmp_path)
    one_line_error(p, "records.jsonl")
    assert not (tmp_path / "rep").exists()


def test_a_file_for_a_folder_and_a_folder_for_a_file_are_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    one_line_error(cisl("build", "afile", cwd=tmp_path), "afile", "not a build folder")
    for force in ([], ["--force"]):
        p = cisl("testbed", "sim", "--nodes", "2", "-o", "adir", *force, cwd=tmp_path)
        one_line_error(p, "adir", "is a folder; give a file name")


def test_only_empty_run_folders_of_dead_supervisors_are_swept(tmp_path):
    import os
    import socket
    import subprocess

    from codegen.vtestbed.supervisor import RUN_DIR_PREFIX, sweep_stale_run_dirs

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    dead_empty = tmp_path / f"{RUN_DIR_PREFIX}{gone.pid}-a1"
    dead_sock = tmp_path / f"{RUN_DIR_PREFIX}{gone.pid}-b2"
    dead_full = tmp_path / f"{RUN_DIR_PREFIX}{gone.pid}-c3"
    mine = tmp_path / f"{RUN_DIR_PREFIX}{os.getpid()}-d4"
    other = tmp_path / f"cisl-tb-{gone.pid}-e5"  # not a run folder's name
    for d in (dead_empty, dead_sock, dead_full, mine, other):
        d.mkdir()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(dead_sock / "medium.sock"))
    (dead_full / "notes.txt").write_text("the user's\n")
    removed = sweep_stale_run_dirs(str(tmp_path))
    assert sorted(removed) == sorted([str(dead_empty), str(dead_sock)])
    assert dead_full.is_dir() and (dead_full / "notes.txt").read_text() == "the user's\n"
    assert mine.is_dir() and other.is_dir()


@pytest.mark.parametrize("argv", [
    ["train", "--seed", "-1", "-o", "{out}"],
    ["sim", "{build}", "--radio-seed", "-3"],
    ["sim", "{build}", "--medium", "message", "--loss", "0.1", "--loss-seed", "-1"],
    ["estimate", "{build}", "--radio-seed", "-2"],
    ["fit", "--devices", "2", "--seed", "-1", "--no-build"],
])
def test_negative_seeds_are_one_line(simbuild, tmp_path, argv):
    args = [a.replace("{out}", str(tmp_path / "o")).replace("{build}", str(simbuild)) for a in argv]
    p = cisl(*args, cwd=tmp_path)
    one_line_error(p, "-")


def test_report_on_bad_jsonl_is_one_line_and_writes_nothing(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    boot = '{"node": 0, "event": "boot", "fw": "0.1.0", "plan": "ab", "board": "sim", "nodes": 1}'
    (logs / "records.jsonl").write_text(boot + '\n{"node": 0, "ev\n')
    p = cisl("report", str(logs), "-o", str(tmp_path / "rep"), cwd=tmp_path)
    one_line_error(p, "records.jsonl:2")
    assert not (tmp_path / "rep").exists()


def test_a_killed_sims_temporary_folder_is_removed_by_the_next_sim(simbuild, tmp_path):
    import tempfile

    dead_pid = 2**22 + 12345  # above any pid_max: no process has it (a reused pid would keep the folder)
    stale = Path(tempfile.gettempdir()) / f"cisl-sim-{dead_pid}-abcdef"
    stale.mkdir(exist_ok=True)
    (stale / "medium.sock").write_text("")
    assert cisl("sim", str(simbuild), "-n", "1", "--logs", str(tmp_path / "logs"), cwd=tmp_path).returncode == 0
    assert not stale.exists()


def test_single_file_outputs_never_overwrite_a_users_file(simbuild, tmp_path):
    mine = tmp_path / "results.json"
    mine.write_text('{"my": "results"}')
    for args in (["estimate", str(simbuild), "-q", "-o", str(mine)],
                 ["fit", "--devices", "2", "--no-build", "--tokens", "8", "--layers", "1", "--json", str(mine)],
                 ["radio", "loss", "--topology", "full_mesh", "--nodes", "2", "--exchanges", "5", "-o", str(mine)]):
        p = cisl(*args, cwd=tmp_path, timeout=300)
        assert p.returncode == 2 and "was not written by cisl" in p.stderr and "Traceback" not in p.stderr, \
            (args, p.returncode, p.stderr[-800:])
        assert mine.read_text() == '{"my": "results"}'


def test_an_interrupted_sim_leaves_the_previous_logs_whole(simbuild, tmp_path):
    import shutil
    import signal
    import subprocess
    import sys
    import time

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    assert cisl("sim", str(b), "-n", "1", cwd=tmp_path).returncode == 0
    before = {p.name: p.read_bytes() for p in (b / "logs").iterdir()}
    img = b / "node_01" / "firmware.elf"
    img.write_bytes(b"#!/bin/sh\necho 'CISL 1 boot fw=x plan=y board=sim node=1 nodes=2'\nsleep 30\n")
    img.chmod(0o755)
    vouch_for(b, 1)
    sim = subprocess.Popen([sys.executable, "-m", "codegen.cli", "sim", str(b), "-n", "1", "--timeout", "60"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 20
    while time.monotonic() < end and not list(b.glob(".logs.tmp-*/node_01.log")):
        time.sleep(0.05)
    time.sleep(0.3)
    sim.send_signal(signal.SIGTERM)
    out, err = sim.communicate(timeout=30)
    assert sim.returncode != 0 and "Traceback" not in err, err
    after = {p.name: p.read_bytes() for p in (b / "logs").iterdir()}
    assert after == before  # the first run's logs, whole: no file of the interrupted run mixed in
    assert not list(b.glob(".logs.*")), "the interrupted run left its temporary logs"


def _stops_after(simbuild: Path, tmp_path: Path, node: int, infers: int) -> Path:
    """A copy of the sim build whose ``node`` runs its real image but stops after ``infers`` inferences (its
    serial output is cut there, so the image ends on a broken pipe): an aborted run with work done."""
    import shutil

    b = tmp_path / "build"
    shutil.copytree(simbuild, b)
    real = b / f"node_{node:02d}" / "real.elf"
    shutil.copyfile(b / f"node_{node:02d}" / "firmware.elf", real)
    real.chmod(0o755)
    img = b / f"node_{node:02d}" / "firmware.elf"
    img.write_text(f'#!/bin/sh\n"{real}" "$@" | awk \'{{print; fflush()}} / infer /{{n++; if (n == {infers}) exit}}\'\n'
                   "sleep 30\n")
    img.chmod(0o755)
    vouch_for(b, node)
    return b


def _air_line(out: str) -> tuple[float, float]:
    import re

    m = re.search(r"air time ([\d.]+) ms per inference vs ([\d.]+) ms with fixed", out)
    assert m, out
    return float(m.group(1)), float(m.group(2))


def test_a_failed_sim_never_replaces_good_logs_and_report_says_it_failed(simbuild, tmp_path):
    """An aborted `cisl sim --logs L` replaced the good logs in L, its summary.json did not say it failed,
    and `cisl report L` reported its 2 inferences as a good run's; its output counted the 6 asked for."""
    import json

    import numpy as np

    good = cisl("sim", str(simbuild), "-n", "1", "--logs", str(tmp_path / "L"), cwd=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    before = {p.name: p.read_bytes() for p in (tmp_path / "L").iterdir()}
    assert json.loads(before["summary.json"])["ok"] is True
    b = _stops_after(simbuild, tmp_path, 1, 2)
    x = np.load(simbuild / "inputs.npy")
    np.save(tmp_path / "in6.npy", x[np.arange(6) % len(x)])
    p = cisl("sim", str(b), "--inputs", "in6.npy", "--timeout", "20", "--logs", "L", cwd=tmp_path)
    assert p.returncode == 1 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    assert p.stdout.splitlines()[0].startswith("virtual testbed: 2 nodes, 2 of 6 inferences in "), p.stdout
    assert "(logs in L.failed)" in p.stdout.splitlines()[0], p.stdout
    assert "previous logs in L are kept" in p.stderr, p.stderr
    assert {q.name: q.read_bytes() for q in (tmp_path / "L").iterdir()} == before  # the good logs, whole
    summary = json.loads((tmp_path / "L.failed" / "summary.json").read_text())
    assert summary["ok"] is False and summary["inferences"] == 6 and summary["completed"] == 2, summary
    assert summary["problems"], summary
    # the air time is per inference that ran: the fixed-deadline figure is the good run's, not 2/6 of it
    assert _air_line(p.stdout)[1] == _air_line(good.stdout)[1], (good.stdout, p.stdout)

    r = cisl("report", "L.failed", "-o", "rep", "--no-plots", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    notes = (tmp_path / "rep" / "notes.txt").read_text().splitlines()
    assert notes[0].startswith("L.failed: `cisl sim` FAILED this run (summary.json ok: false; ") and \
        "2 of 6 inferences ran" in notes[0], notes
    r = cisl("report", "L", "-o", "rep", "--no-plots", cwd=tmp_path)
    assert r.returncode == 0 and "FAILED" not in r.stdout + r.stderr, r.stdout + r.stderr

    # with no earlier logs the failed run takes the folder itself, and says it failed there too
    p = cisl("sim", str(b), "--inputs", "in6.npy", "--timeout", "20", "--logs", "M", cwd=tmp_path)
    assert p.returncode == 1 and not (tmp_path / "M.failed").exists(), p.stdout
    assert json.loads((tmp_path / "M" / "summary.json").read_text())["ok"] is False
    r = cisl("report", "M", "-o", "rep", "--no-plots", cwd=tmp_path)
    assert r.returncode == 0 and "`cisl sim` FAILED this run" in r.stdout + r.stderr, r.stdout + r.stderr


def test_sim_checks_the_failed_runs_folder_before_the_run(simbuild, tmp_path):
    assert cisl("sim", str(simbuild), "-n", "1", "--logs", str(tmp_path / "L"), cwd=tmp_path).returncode == 0
    (tmp_path / "L.failed").mkdir()
    (tmp_path / "L.failed" / "mine.txt").write_text("x")
    p = cisl("sim", str(simbuild), "-n", "1", "--logs", str(tmp_path / "L"), cwd=tmp_path)
    one_line_error(p, "L.failed", "not written by cisl")
    assert (tmp_path / "L.failed" / "mine.txt").read_text() == "x"


def test_the_virtual_testbed_never_takes_over_a_port_link_it_did_not_make(simbuild, tmp_path):
    """A second testbed file naming the same ports (a copy with another state folder) took over the first
    testbed's port links, silently, and its `testbed stop` deleted them; a user's own link at a port path
    was rewired and then deleted too."""
    import json
    import os
    import signal
    import time

    assert cisl("testbed", "sim", "--nodes", "2", "-o", "tA.toml", cwd=tmp_path).returncode == 0
    text = (tmp_path / "tA.toml").read_text()
    assert 'state = ".cisl-testbed"' in text and 'port = ".cisl-testbed/node_00.tty"' in text, text
    (tmp_path / "tB.toml").write_text(text.replace('state = ".cisl-testbed"', 'state = ".cisl-testbed-B"'))
    (tmp_path / "mine.txt").write_text("my data\n")
    os.symlink("mine.txt", tmp_path / "my_link")
    (tmp_path / "tC.toml").write_text(text.replace('state = ".cisl-testbed"', 'state = ".cisl-testbed-C"')
                                      .replace('port = ".cisl-testbed/node_00.tty"', 'port = "my_link"')
                                      .replace('port = ".cisl-testbed/node_01.tty"', 'port = ".cisl-testbed-C/n1.tty"'))
    links = [tmp_path / ".cisl-testbed" / f"node_{k:02d}.tty" for k in (0, 1)]
    try:
        assert cisl("flash", str(simbuild), "--testbed", "tA.toml", "--no-reset", cwd=tmp_path).returncode == 0
        before = [os.readlink(p) for p in links]
        p = cisl("flash", str(simbuild), "--testbed", "tB.toml", "--no-reset", cwd=tmp_path)
        one_line_error(p, "node_00.tty", "did not make", ".cisl-testbed-B/node_00.tty")  # a port of B's own
        assert [os.readlink(q) for q in links] == before  # A's ports, untouched
        assert not (tmp_path / ".cisl-testbed-B").exists()  # the refused run made B's state folder: gone again
        cisl("testbed", "stop", "--testbed", "tB.toml", cwd=tmp_path)
        assert [os.readlink(q) for q in links] == before
        assert not (tmp_path / ".cisl-testbed-B").exists()
        p = cisl("logs", "--testbed", "tA.toml", "-o", "LA", "-n", "1", "--timeout", "60", cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr

        p = cisl("flash", str(simbuild), "--testbed", "tC.toml", "--no-reset", cwd=tmp_path)
        one_line_error(p, "my_link", "did not make")
        cisl("testbed", "stop", "--testbed", "tC.toml", cwd=tmp_path)
        assert os.readlink(tmp_path / "my_link") == "mine.txt" and (tmp_path / "mine.txt").read_text() == "my data\n"

        # the links a killed supervisor of this testbed left are its own: the next flash takes them back
        pid = json.loads((tmp_path / ".cisl-testbed" / "supervisor.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < end:
            time.sleep(0.05)
        assert all(os.path.islink(q) for q in links)
        p = cisl("flash", str(simbuild), "--testbed", "tA.toml", "--no-reset", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
    finally:
        for tb in ("tA.toml", "tB.toml", "tC.toml"):
            cisl("testbed", "stop", "--testbed", tb, cwd=tmp_path)
    assert not any(os.path.lexists(q) for q in links)  # its own, removed at stop
    # a link of yours at this testbed's own port path: the advice was to use that very path
    os.symlink("/dev/null", links[0])
    p = cisl("flash", str(simbuild), "--testbed", "tA.toml", "--no-reset", cwd=tmp_path)
    cisl("testbed", "stop", "--testbed", "tA.toml", cwd=tmp_path)
    one_line_error(p, "node_00.tty", "did not make", "move that link away")
    assert os.readlink(links[0]) == "/dev/null"
    assert os.readlink(tmp_path / "my_link") == "mine.txt"


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupted_logs_run_removes_the_folders_it_made_above_its_output(tmp_path, sig):
    """Ctrl-C on `cisl logs -o new/sub/OUT` left the empty new/sub behind (cisl sim removes them)."""
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "tb.toml").write_text(LAB.format(port=tmp_path / "no-such-port"))
    p = subprocess.Popen([sys.executable, "-m", "codegen.cli", "logs", "--testbed", "tb.toml", "-o", "new/sub/OUT",
                          "--no-reset", "--timeout", "60", "--open-timeout", "60"], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 30
    while time.monotonic() < end and not list((tmp_path / "new" / "sub").glob(".OUT.tmp-*")):
        time.sleep(0.05)
    assert list((tmp_path / "new" / "sub").glob(".OUT.tmp-*")), "the run never started"
    time.sleep(0.2)
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and "Traceback" not in err, (p.returncode, err)
    assert not (tmp_path / "new").exists(), sorted(str(x) for x in (tmp_path / "new").rglob("*"))


@pytest.mark.parametrize("dead", [0, 1])
def test_with_two_nodes_the_dead_radio_is_the_one_named(simbuild, tmp_path, dead):
    """With two nodes each declares the other dead, so `--radio-dead 0` and `--radio-dead 1` printed the same
    lines, blaming the sink both times; `cisl sim` knows which radio it killed, and `cisl report` reads it."""
    p = cisl("sim", str(simbuild), "-n", "2", "--radio-dead", str(dead), "--logs", "L", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    peers = [ln for ln in p.stdout.splitlines() if ln.startswith("peers: ")]
    live = 1 - dead
    assert f"peers: node {dead} declared every other node dead (from inference 0): its radio is the dead one " \
           f"(--radio-dead {dead})" in peers, peers
    assert not any(f"node {live} declared dead" in ln for ln in peers), peers  # the live radio is not blamed
    assert any(f"node {dead} declared dead by 1 of 1 other nodes" in ln for ln in peers), peers
    assert ("no forecast reaches the host" in "".join(peers)) == (dead == 0), peers  # only a dead sink's radio
    r = cisl("report", "L", "-o", "rep", "--no-plots", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    notes = (tmp_path / "rep" / "notes.txt").read_text()
    assert f"node {live} declared dead" not in notes and f"its radio is the dead one (--radio-dead {dead})" in notes, \
        notes


def test_outputs_through_links_dots_and_lookalike_names_keep_the_users_data(model, tmp_path):
    """Audit M: `-o LINK` replaced the user's symlink with a new folder (the folder it named kept the old,
    stale output); a file of the user's named like cisl's leftovers inside an output was deleted without
    a word; `-o .` ran the whole job and then failed at the rename ("Device or resource busy")."""
    import os

    def compile_to(out, cwd=tmp_path):
        return cisl("compile", str(model), "--devices", "2", "-q", "-o", str(out), cwd=cwd)

    (tmp_path / "disk").mkdir()
    assert compile_to("disk/build").returncode == 0
    (tmp_path / "link").symlink_to("disk/build")
    old = (tmp_path / "disk" / "build" / "plan.json").stat().st_mtime_ns
    assert compile_to("link").returncode == 0
    assert os.readlink(tmp_path / "link") == "disk/build"  # the link stays, what it names is the new output
    assert (tmp_path / "disk" / "build" / "plan.json").stat().st_mtime_ns != old
    (tmp_path / "dangling").symlink_to("disk/other")
    assert compile_to("dangling").returncode == 0
    assert (tmp_path / "dangling").is_symlink() and (tmp_path / "disk" / "other" / "plan.json").is_file()

    (tmp_path / "disk" / "build" / ".analysis.old-v2").write_text("mine\n")
    one_line_error(compile_to("disk/build"), ".analysis.old-v2", "cisl did not write there")
    assert (tmp_path / "disk" / "build" / ".analysis.old-v2").read_text() == "mine\n"

    (tmp_path / "here").mkdir()
    for out in (".", "./", str(tmp_path / "here"), ".."):
        one_line_error(compile_to(out, cwd=tmp_path / "here"), "is the current folder or holds it")
    assert sorted(os.listdir(tmp_path / "here")) == []


@pytest.mark.unit
def test_files_cisl_writes_together_are_cisl_s_and_the_users_stay_the_users(tmp_path):
    """Parallel workers (`cisl estimate`'s, one cycle result per node) write into an output outside its
    lock; noted one at a time, each found the others newer than the stamp and recorded them as the
    user's, so the next compile refused cisl's own files. Noted together they are cisl's, and a file the
    user added before stays the user's."""
    import os
    import time

    from codegen.fsutil import OWNER_FILE, check_output_dir, note_written

    out = tmp_path / "b"
    (out / "node_00").mkdir(parents=True)
    (out / OWNER_FILE).write_text("cisl build\n")
    (out / "plan.json").write_text("{}\n")
    for f in (out / OWNER_FILE, out / "plan.json"):
        os.utime(f, ns=(1, 1))  # cisl finished writing it long ago
    (out / "notes.md").write_text("mine\n")  # the user's, before the run
    time.sleep(0.01)
    written = [out / f"node_0{d}" / "cycles.json" for d in range(2)]
    for w in written:  # the workers' results, both written before either is noted
        w.parent.mkdir(exist_ok=True)
        w.write_text("{}\n")
    note_written(*written)
    lines = (out / OWNER_FILE).read_text().splitlines()
    assert lines == ["cisl build", 'user "notes.md"'], lines
    (out / "notes.md").unlink()
    check_output_dir(out, "build", lambda name: True)  # all cisl's now: it may be replaced
