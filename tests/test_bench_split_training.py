"""bench/split_training.py end to end with a tiny model (`--smoke`): units, records and the report.

The study itself runs for hours; this keeps its plumbing (pruning trajectories, dropout units,
the per-seed tables and plots) from rotting between runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ETTH2 = ROOT.parent / "shared" / "data" / "ett" / "ETTh2.csv"

pytestmark = [pytest.mark.data, pytest.mark.train, pytest.mark.arm,
              pytest.mark.skipif(not ETTH2.is_file(), reason="needs ../shared/data/ett/ETTh2.csv"),
              pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None,
                                 reason="the pruned models are deployed for nrf52840dk: needs arm-none-eabi-gcc")]

UNITS = ["fig7-D8-s0-dense", "fig7-D8-s0-somegather", "fig7-D8-s0-normal", "fig8-D8-s0-q0", "fig8-D8-s0-q0.1",
         "fig8-D8-s0-qmax0.2"]


def bench(*args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "split_training.py"), *args], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_smoke_run_writes_every_unit_and_the_report(tmp_path: Path) -> None:
    out = bench("run", "--smoke", str(tmp_path), "--jobs", "2", "--threads", "1", "--seeds", "0", "--only", *UNITS)
    lines = out.stdout.splitlines()
    # codegen.sweep runs the units in waves: the dense model and the dropout models first, then what
    # starts from the dense model (pruning and the q = 0 row)
    waves = [ln for ln in lines if ln.startswith("sweep: ") and "unit(s) to run" in ln]
    assert waves == ["sweep: 3 unit(s) to run on joblib, 2 at a time"] * 2
    done = [ln.split()[2] for ln in lines if ln.startswith("sweep: done ")]
    assert sorted(done) == sorted(UNITS)
    assert set(done[:3]) == {"fig7-D8-s0-dense", "fig8-D8-s0-q0.1", "fig8-D8-s0-qmax0.2"}
    records = [json.loads(p.read_text()) for p in (tmp_path / "records").glob("*.json")]
    assert all(r["format"] == "cisl-sweep-record" and (tmp_path / "records" / f"{r['id']}.json").is_file()
               for r in records)
    runs = {r["label"]: r["result"] for r in records}
    assert sorted(runs) == sorted(UNITS)
    for method in ("somegather", "normal"):
        pts = runs[f"fig7-D8-s0-{method}"]["points"]
        assert [p["keep"] for p in pts] == [0.5, 0.25]
        assert [p["communication"]["ratio_to_allgather"] for p in pts] == [0.5, 0.25] == [p["realised_keep"] for p in pts]
        # the last keep is deployed: compiled for nRF52840 DK boards, linked and estimated (issue 16)
        dep = pts[-1]["deployment"]
        assert dep["board"] == "nrf52840dk" and 0 < dep["flash_bytes_max"] < 1 << 20 and dep["latency_ms"] > 0
        assert "deployment" not in pts[0]
    # each trajectory records the model it pruned: the dense unit's own model
    dense = runs["fig7-D8-s0-dense"]
    for method in ("somegather", "normal"):
        assert runs[f"fig7-D8-s0-{method}"]["start"] == {"test_mse": dense["test_mse"], "val_mse": dense["train"]["val_mse"]}
    # the dropout models train as the product does: half the windows clean, nothing rescaled
    assert runs["fig8-D8-s0-q0.1"]["clean"] == 0.5 and runs["fig8-D8-s0-q0.1"]["rescale"] is False
    rng = runs["fig8-D8-s0-qmax0.2"]
    assert rng["q_max_train"] == 0.2 and set(rng["test_mse_at_q"]) == {"0", "0.1"} and rng["threads"] == 1
    # a trajectory stopped part way (a SLURM time limit) resumes after its last stage and writes the
    # record an uninterrupted run writes
    record = next(p for p in (tmp_path / "records").glob("*.json") if json.loads(p.read_text())["label"] == UNITS[1])
    record.unlink()
    shutil.rmtree(tmp_path / "work" / record.stem)
    cmd = [sys.executable, str(ROOT / "bench" / "split_training.py"), "run", "--smoke", str(tmp_path), "--threads", "1",
           "--seeds", "0", "--only", UNITS[1]]
    stopped = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "CISL_STUDY_STOP_AFTER": "3"})
    assert stopped.returncode != 0 and "stopped after action 3 of 5" in stopped.stdout + stopped.stderr
    assert not record.exists()
    state = bench("status", "--smoke", str(tmp_path), "--threads", "1", "--seeds", "0").stdout
    assert f"{record.stem}  started  {UNITS[1]}  3 pruning action(s) saved, keeps scored: [0.5]" in state, state
    assert f"  done     {UNITS[0]}" in state
    resumed = bench("run", "--smoke", str(tmp_path), "--threads", "1", "--seeds", "0", "--only", UNITS[1])
    assert "resuming after action 3 of 5" in resumed.stdout

    def without_seconds(points: list) -> list:
        return [{**p, "finetune": {k: v for k, v in p["finetune"].items() if k != "seconds"}} for p in points]
    again_pts = json.loads(record.read_text())["result"]["points"]
    assert without_seconds(again_pts) == without_seconds(runs[UNITS[1]]["points"])
    # a second run finds every record and trains nothing
    again = bench("run", "--smoke", str(tmp_path), "--threads", "1", "--seeds", "0", "--only", *UNITS)
    assert "train" not in again.stderr and "== " not in again.stdout and "sweep:" not in again.stdout

    bench("report", "--runs", str(tmp_path / "none"), "--records", str(tmp_path / "records"), "--out", str(tmp_path))
    md = (tmp_path / "split_training.md").read_text()
    assert "Paired by seed" in md and "| 0.25 | " in md
    assert "| 8 | normal | 0.25 | 0 |" in md and "| 8 | somegather | 0.25 | 0 |" in md  # deployed
    assert "## Message dropout after issue 16, next to before" in md
    assert "| 0–20 % per window (1 seed(s)) |" in md and "| 10 % (1 seed(s)) |" in md
    assert "* D = 8, keep 0.25, vs the unpruned model (1 seed(s)): somegather " in md
    assert "Seed(s) trained at every rate: [0]" in md
    criterion = md.split("**The q = 10 % criterion, per seed**", 1)[1]
    assert "\n| 0 | " in criterion and "| mean | " in criterion
    assert "One model for every loss rate" in md
    assert "MIXED" not in md
    claims = md.split("## The paper's accuracy claims and what holds here", 1)[1].split("\n## ", 1)[0]
    assert '| somegather "maintains an almost constant error' in claims and "vs unpruned at keep 0.5, 0.25 (1 seed(s))" in claims
    assert '"still fall short of the original, loss-free network' in claims
    assert "Code version(s) of the training results: Fig. 7 at D = 8: 0.1.0" in md and "; Fig. 8: 0.1.0" in md
    assert (tmp_path / "fig7_pruning.png").stat().st_size > 10_000
    # a seed not trained at every rate stays out of Fig. 8's tables (its rows would average other
    # seeds) but is named, not dropped without a word
    q01 = next(p for p in (tmp_path / "records").glob("*.json") if json.loads(p.read_text())["label"] == "fig8-D8-s0-q0.1")
    other = json.loads(q01.read_text())
    other["label"], other["result"]["seed"] = "fig8-D8-s1-q0.1", 1
    (tmp_path / "records" / "0000000000000001.json").write_text(json.dumps(other))
    bench("report", "--runs", str(tmp_path / "none"), "--records", str(tmp_path / "records"), "--out", str(tmp_path))
    md1 = (tmp_path / "split_training.md").read_text()
    assert "Recorded, not yet in these tables (their seed is not trained at every rate): seed 1 trained at 10 %." in md1
    assert "| 10 % (1 seed(s)) |" in md1 and "Seed(s) trained at every rate: [0]" in md1
    (tmp_path / "records" / "0000000000000001.json").unlink()
    # a trajectory that pruned another model than its seed's dense record scored (a dense model
    # retrained elsewhere) is named, and compared with the model it started from
    dense_record = next(p for p in (tmp_path / "records").glob("*.json") if json.loads(p.read_text())["label"] == UNITS[0])
    rec = json.loads(dense_record.read_text())
    rec["result"]["test_mse"] *= 1.01
    dense_record.write_text(json.dumps(rec))
    bench("report", "--runs", str(tmp_path / "none"), "--records", str(tmp_path / "records"), "--out", str(tmp_path))
    md2 = (tmp_path / "split_training.md").read_text()
    assert "**MIXED: fig7-D8-s0-normal started from a model scoring" in md2
    claim = next(ln for ln in md.splitlines() if ln.startswith("* D = 8, keep 0.25"))
    assert claim in md2  # same relative numbers: they are against the recorded start
    assert (tmp_path / "fig8_dropout.png").stat().st_size > 10_000


def test_a_unit_that_is_not_in_the_study_is_one_line_not_a_silent_no_op(tmp_path: Path) -> None:
    """`--only` with a name these options do not produce (Fig. 8's other rates exist for seeds > 0 only
    with --all-rates) ran nothing and said nothing: it looked like 'already done'."""
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "split_training.py"), "run", "--smoke", str(tmp_path),
                        "--seeds", "0", "1", "--only", "fig8-D8-s1-q0.025"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "fig8-D8-s1-q0.025" in p.stderr
    assert "--all-rates" in p.stderr and not any(tmp_path.iterdir())
