"""The main job: `cisl demo` trains, compiles, builds and runs on the virtual testbed, bit-exact."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.sim, pytest.mark.train]


def test_demo_runs_end_to_end_and_keeps_every_artifact(tmp_path):
    out = tmp_path / "demo"
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "demo", "-o", str(out), "--epochs", "1"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "bit-exact" in p.stdout and ": yes" in p.stdout
    for path in ("model/model.onnx", "model/calibration.npy", "build/plan.json", "build/node_03/cisl_node.c",
                 "build/node_03/firmware.elf", "logs/node_00.log", "logs/records.jsonl", "report.txt"):
        assert (out / path).is_file(), path
    report = json.loads((out / "report.json").read_text())
    assert report["sim"]["bit_exact"] and report["devices"] == 4
    assert all(n["bytes_sent_measured_per_inference"] == n["bytes_sent_per_inference"] for n in report["nodes"])
    # the logs name the build where it is now, not the temporary folder it was made in: the report has memory
    assert json.loads((out / "logs" / "summary.json").read_text())["build"] == str((out / "build").resolve())
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "report", str(out / "logs"), "-o", str(tmp_path / "rep"),
                        "--no-plots"], capture_output=True, text=True)
    assert p.returncode == 0 and (tmp_path / "rep" / "memory.csv").is_file(), p.stderr[-2000:]
    # a second run replaces the folder it made before: nothing of the 4-node run is left
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "demo", "-o", str(out), "--epochs", "1", "--devices", "2"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((out / "report.json").read_text())["devices"] == 2
    assert (out / "build" / "node_01" / "firmware.elf").is_file() and not (out / "build" / "node_03").exists()
