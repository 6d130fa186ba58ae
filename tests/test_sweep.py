"""Sweeps (issue 16): content-addressed unit records, skipped when done, the same on joblib and on
submitit's local executor; `cisl sweep` trains a grid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codegen import __version__
from codegen.errors import UserError
from codegen.sweep import Unit, is_done, key_id, record_path, run_sweep, same_record, unit_id, waves
from models import tiny_train_config

FNS = str(Path(__file__).resolve().parent / "sweep_fns.py")


def unit(tmp: Path, x: int, **extra) -> Unit:
    return Unit(f"{FNS}:square", {"x": x, "calls": str(tmp / "calls.txt"), **extra}, label=f"x={x}")


def calls(tmp: Path) -> list[str]:
    p = tmp / "calls.txt"
    return p.read_text().split() if p.is_file() else []


@pytest.mark.unit
def test_ids_follow_content_not_names(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("a,b\n1,2\n")
    a = Unit(f"{FNS}:square", {"x": 1}, data=(str(data),), label="one")
    assert unit_id(a) == unit_id(Unit(f"{FNS}:square", {"x": 1}, data=(str(data),), label="another label"))
    assert unit_id(a) != unit_id(Unit(f"{FNS}:square", {"x": 2}, data=(str(data),)))
    copy = tmp_path / "sub"
    copy.mkdir()
    (copy / "d.csv").write_text("a,b\n1,2\n")
    assert unit_id(a) == unit_id(Unit(f"{FNS}:square", {"x": 1}, data=(str(copy / "d.csv"),)))  # same content
    data.write_text("a,b\n1,3\n")
    assert unit_id(a) != unit_id(Unit(f"{FNS}:square", {"x": 1}, data=(str(copy / "d.csv"),)))
    assert a.key()["code"].startswith(__version__ + "+")


@pytest.mark.unit
def test_ids_do_not_depend_on_where_the_files_lie(tmp_path: Path) -> None:
    """The same study in another clone or on a cluster's file system finds its records: the function's
    file and the data files enter the id by name and content, not by path."""
    here, there = tmp_path / "laptop", tmp_path / "cluster" / "scratch"
    for root in (here, there):
        root.mkdir(parents=True)
        (root / "sweep_fns.py").write_bytes(Path(FNS).read_bytes())
        (root / "d.csv").write_text("a,b\n1,2\n")

    def at(root: Path, **params) -> Unit:
        return Unit(f"{root / 'sweep_fns.py'}:square", {"x": 1, "data": str(root / "d.csv"), **params},
                    data=(str(root / "d.csv"),))

    assert unit_id(at(here)) == unit_id(at(there))
    assert unit_id(at(here)) != unit_id(at(here, x=2))
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "sweep_fns.py").write_text(Path(FNS).read_text() + "\n# changed\n")
    (changed / "d.csv").write_text("a,b\n1,2\n")
    assert unit_id(at(here)) != unit_id(at(changed))  # the function's file enters by content


@pytest.mark.unit
def test_committed_study_records_are_found_from_any_clone() -> None:
    """The records under docs/results are named by the hash of the key they keep, with no path in it,
    so a clone at the study's code version finds them (`split_training.py status` says done, `run`
    does not retrain) and the units that need one find it."""
    records = Path(__file__).resolve().parents[1] / "docs" / "results" / "split_training" / "records"
    files = sorted(records.glob("*.json"))
    assert files
    for path in files:
        record = json.loads(path.read_text())
        key = record["unit"]
        assert path.stem == record["id"] == key_id(key), path.name
        assert "/" not in key["fn"], f"{path.name}: the unit's function is named by a path"
        assert all((records / f"{need}.json").is_file() for need in key["needs"]), path.name


@pytest.mark.unit
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_edited_while_its_unit_runs_does_not_lose_the_units_record(tmp_path: Path, jobs: int) -> None:
    """A unit's id is what the sweep computed when it started: a data or code file edited while the unit
    trains (in this process or in a worker, which computed the id anew) used to move its record to another
    id, and the sweep reported the finished unit failed ("no record written")."""
    data = tmp_path / "d.csv"
    data.write_text("a,b\n1,2\n")
    u = Unit(f"{FNS}:edit_input", {"edit": str(data), "x": 1}, data=(str(data),), label="edits")
    v = Unit(f"{FNS}:edit_input", {"edit": str(data), "x": 2}, data=(str(data),), label="edits too")
    recs = run_sweep([u, v], tmp_path / "r", tmp_path / "w", jobs=jobs, say=lambda s: None)
    assert [r["result"]["edited"] for r in recs] == [str(data)] * 2
    assert sorted(p.stem for p in (tmp_path / "r").glob("*.json")) == sorted(r["id"] for r in recs)
    # the next sweep sees the edited file: other units, run again
    assert unit_id(u) not in [r["id"] for r in recs]


@pytest.mark.unit
def test_a_unit_that_makes_its_need_again_finds_what_the_sweep_made(tmp_path: Path) -> None:
    """The bench studies make the unit they need again to find its record and folder: after a file that
    enters the id was edited while the need ran, that new unit had another id, and the unit failed."""
    data = tmp_path / "d.csv"
    data.write_text("a,b\n1,2\n")
    need = Unit(f"{FNS}:edit_input", {"edit": str(data), "x": 1}, data=(str(data),), label="edits")
    top = Unit(f"{FNS}:needs_remade", {"need": {"edit": str(data), "x": 1}}, needs=(need,), label="top")
    recs = run_sweep([top], tmp_path / "r", tmp_path / "w", say=lambda s: None)
    assert recs[0]["result"]["need"] == {"edited": str(data)}
    assert (tmp_path / "r" / f"{recs[0]['result']['folder']}.json").is_file()  # the need's own id


@pytest.mark.unit
def test_finished_units_are_skipped_and_needs_run_first(tmp_path: Path) -> None:
    base = unit(tmp_path, 3)
    top = unit(tmp_path, 4, base=1, base_unit=None)
    top = Unit(top.fn, {**top.params, "base_unit": base}, needs=(base,), label="x=4")
    assert [[u.label for u in w] for w in waves([top, unit(tmp_path, 5)])] == [["x=3", "x=5"], ["x=4"]]
    recs = run_sweep([top, unit(tmp_path, 5)], tmp_path / "r", tmp_path / "w", say=lambda s: None)
    assert recs[0]["result"] == {"x": 4, "square": 16, "plus_base": 25} and recs[1]["result"]["square"] == 25
    assert (tmp_path / "w" / unit_id(base) / "artefact.txt").read_text() == "9"
    assert len(calls(tmp_path)) == 3
    again = run_sweep([top, unit(tmp_path, 5)], tmp_path / "r", tmp_path / "w", say=lambda s: None)
    assert len(calls(tmp_path)) == 3 and again == recs  # nothing ran twice
    rec = json.loads(record_path(tmp_path / "r", base).read_text())
    assert rec["id"] == unit_id(base) and rec["unit"]["params"]["x"] == 3 and rec["run"]["backend"] == "joblib"
    assert rec["run"]["cpu"]  # a rerun on another machine that differs in the last digits can say why
    assert not list((tmp_path / "r").glob("*.tmp*"))


@pytest.mark.unit
@pytest.mark.parametrize("damage", ['{"format": 1, "res', "{}", '{"result": {"x": 3, "square": 9}}', "another unit's"],
                         ids=["cut short", "empty", "hand-written result", "another unit's record"])
def test_a_damaged_record_is_named_before_any_unit_runs(tmp_path: Path, damage: str) -> None:
    from codegen.errors import UserError
    from codegen.sweep import is_done, unit_state

    u, other = unit(tmp_path, 3), unit(tmp_path, 4)
    run_sweep([u], tmp_path / "r", tmp_path / "w", say=lambda s: None)
    if damage == "another unit's":  # a record whose id and unit are not those of its name was printed as u's result
        damage = json.dumps(run_sweep([unit(tmp_path, 5)], tmp_path / "r5", tmp_path / "w", say=lambda s: None)[0])
    record_path(tmp_path / "r", u).write_text(damage)  # cut short, not a record, or not this unit's
    assert not is_done(tmp_path / "r", u) and unit_state(tmp_path / "r", tmp_path / "w", u) == "damaged"
    with pytest.raises(UserError, match="damaged sweep record.*delete it"):
        run_sweep([other, u], tmp_path / "r", tmp_path / "w", say=lambda s: None)
    assert not record_path(tmp_path / "r", other).exists()  # refused before any unit ran, not after


@pytest.mark.unit
def test_a_failed_unit_writes_nothing_blocks_what_needs_it_and_is_retried(tmp_path: Path) -> None:
    bad = unit(tmp_path, 2, fail=True)
    needy = Unit(bad.fn, {"x": 7, "calls": bad.params["calls"]}, needs=(bad,), label="x=7")
    good = unit(tmp_path, 6)
    lines: list[str] = []
    with pytest.raises(UserError, match=r"2 unit\(s\) failed .*told to fail"):
        run_sweep([bad, needy, good], tmp_path / "r", tmp_path / "w", jobs=2, say=lines.append)
    assert is_done(tmp_path / "r", good) and not is_done(tmp_path / "r", bad) and not is_done(tmp_path / "r", needy)
    assert any(line.startswith("sweep: FAILED x=2: RuntimeError: unit 2 was told to fail") for line in lines)
    with pytest.raises(UserError, match="backend 'pbs'"):
        run_sweep([good], tmp_path / "r", tmp_path / "w", backend="pbs")


@pytest.mark.unit
def test_submitit_local_executor_writes_the_same_records_as_joblib(tmp_path: Path) -> None:
    units = [unit(tmp_path, x) for x in (1, 2, 3)]
    a = run_sweep(units, tmp_path / "ra", tmp_path / "wa", backend="joblib", jobs=2, say=lambda s: None)
    b = run_sweep(units, tmp_path / "rb", tmp_path / "wb", backend="local", jobs=2, say=lambda s: None)
    assert all(same_record(x, y) for x, y in zip(a, b)) and [r["run"]["backend"] for r in b] == ["local"] * 3
    assert sorted(p.name for p in (tmp_path / "ra").iterdir()) == sorted(p.name for p in (tmp_path / "rb").iterdir())


@pytest.mark.faults
def test_a_unit_at_its_time_limit_is_requeued_and_resumes(tmp_path: Path) -> None:
    """submitit signals a job shortly before its time limit; the sweep's job is checkpointable, so it
    is requeued with the same call and the unit continues from its work folder (here the local
    executor with a 1-minute limit signalled 55 s early, so every start gets ~5 s)."""
    pytest.importorskip("submitit")
    u = Unit(f"{FNS}:slow_count", {"to": 8}, label="count")
    rec = run_sweep([u], tmp_path / "r", tmp_path / "w", backend="local", jobs=1,
                    slurm={"timeout_min": 1, "signal_delay_s": 55}, say=lambda s: None)[0]
    assert rec["result"]["count"] == 8 and rec["result"]["starts"] >= 2, rec["result"]


TINY = tiny_train_config(devices=2)


def cisl(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.train
def test_cisl_sweep_smoke_grid_is_the_same_on_joblib_and_submitit_local(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "c.toml").write_text(TINY)
    grid = ["sweep", "c.toml", "--seeds", "0,1", "--keep", "1,0.5", "--prune", "somegather", "-j", "2", "-q"]
    j = cisl(tmp_path, *grid, "-o", "j")
    assert j.returncode == 0, j.stderr
    lines = j.stdout.splitlines()
    assert len(lines) == 4 and lines[1].startswith("seed=0 keep=0.5: val MSE") and "keep 0.5000 (trained masks)" in lines[1]
    assert "keep 1.0000 (full masks)" in lines[0]
    # submitit starts a process per unit: seed 0's row of the grid is enough to compare the backends
    loc = cisl(tmp_path, *[a if a != "0,1" else "0" for a in grid], "-o", "l", "--backend", "local")
    assert loc.returncode == 0, loc.stderr
    names = sorted(p.name for p in (tmp_path / "l" / "records").iterdir())
    assert len(names) == 2 and set(names) < {p.name for p in (tmp_path / "j" / "records").iterdir()}
    assert len(list((tmp_path / "j" / "records").iterdir())) == 4
    for n in names:
        a, b = (json.loads((tmp_path / d / "records" / n).read_text()) for d in ("j", "l"))
        assert same_record(a, b), n
        assert (tmp_path / "j" / "work" / a["result"]["model_dir"] / "model.onnx").is_file()
    dry = cisl(tmp_path, *grid, "-o", "j", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.count(" done ") == 4


@pytest.mark.train
def test_a_stopped_sweep_unit_resumes_to_the_model_of_an_uninterrupted_one(tmp_path: Path) -> None:
    """A unit that a time limit (here [train] stop_after_epochs) stops writes no record, shows as
    started, and the next run of the sweep continues from its checkpoints: its MSEs are those of the
    same training run without a stop."""
    pytest.importorskip("torch")
    train = "epochs = 2\nbatch_size = 64\nmax_train_windows = 64\ncalibration_samples = 8\ntest_samples = 4\nthreads = 1"
    (tmp_path / "whole.toml").write_text(tiny_train_config(devices=2, train=train))
    (tmp_path / "stopped.toml").write_text(tiny_train_config(devices=2, train=train + "\nstop_after_epochs = 1"))
    first = cisl(tmp_path, "sweep", "stopped.toml", "-o", "s", "-q")
    assert first.returncode == 2 and "stopped after epoch 1 of 2" in first.stderr and "Traceback" not in first.stderr
    assert not list((tmp_path / "s" / "records").glob("*.json"))
    assert (tmp_path / "s" / ".cisl-output").read_text() == "cisl sweep\n"  # cisl's: the next run resumes it
    dry = cisl(tmp_path, "sweep", "stopped.toml", "-o", "s", "--dry-run")
    assert dry.returncode == 0 and " started " in dry.stdout, dry.stdout
    again = cisl(tmp_path, "sweep", "stopped.toml", "-o", "s", "-q")
    whole = cisl(tmp_path, "sweep", "whole.toml", "-o", "w", "-q")
    assert again.returncode == 0 and whole.returncode == 0, again.stderr + whole.stderr
    mse = [line.split(": ", 1)[1].split(" -> ")[0] for line in (again.stdout, whole.stdout)]
    assert mse[0] == mse[1] and "val MSE" in mse[0]
    # the same record's result: it held the epoch the resumed call started from (audit P D2)
    results = [json.loads(next((tmp_path / d / "records").glob("*.json")).read_text())["result"] for d in "sw"]
    assert results[0]["summary"] == results[1]["summary"]


@pytest.mark.unit
@pytest.mark.parametrize("args,needle", [
    (["--keep", "1,0.5"], "--keep below 1 needs --prune somegather"),
    (["--seeds", "0,x"], "--seeds '0,x': expected comma-separated numbers"),
    (["--q", "0,1.5"], "--q '0,1.5': every value must be in [0, 1)"),
    (["--prune", "normal"], "--prune normal applies to no unit: every unit keeps all columns (there is no --keep"),
    (["--prune", "normal", "--keep", "1"], "--prune normal applies to no unit: every unit keeps all columns (every"),
])
def test_sweep_mistakes_are_one_line_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    p = cisl(tmp_path, "sweep", *args, "-o", "s")
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.unit
@pytest.mark.parametrize("text,args,needle", [
    ("[train\n", [], "bad.toml: not valid TOML"),
    ("[train]\nepochs = 0\n", ["--seeds", "0,1"], "bad.toml: [train] epochs must be >= 1, got 0"),
    ("[split]\ndevices = 2\n", ["--devices", "99"], "(with overrides)"),
])
def test_a_config_mistake_is_one_line_before_any_unit_runs(tmp_path: Path, text: str, args: list[str],
                                                           needle: str) -> None:
    # each unit used to start a worker, fail on the same config and end with "N unit(s) failed ... run the
    # sweep again to retry them", which no rerun could fix
    (tmp_path / "bad.toml").write_text(text)
    p = cisl(tmp_path, "sweep", "bad.toml", *args, "-o", "s")
    assert p.returncode == 2 and needle in p.stderr, p.stderr
    assert "unit" not in p.stderr + p.stdout and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


@pytest.mark.unit
def test_the_slurm_backend_off_a_cluster_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    # PATH without sbatch or srun, even on a cluster login node: nothing is submitted
    env = {**os.environ, "PATH": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "sweep", "--seeds", "0", "--epochs", "1", "--backend",
                        "slurm", "-o", "s", "-q"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "--backend slurm: sbatch and srun not found" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "s").rglob("*.json"))  # no record of a unit that never ran


@pytest.mark.unit
def test_a_sweep_folder_that_is_a_file_is_refused_before_any_unit_runs(tmp_path: Path) -> None:
    # each unit used to start, fail on the file and report "1 unit(s) failed"
    (tmp_path / "afile").write_text("mine")
    p = cisl(tmp_path, "sweep", "--seeds", "0", "--epochs", "1", "-o", "afile")
    assert p.returncode == 2 and "afile: is a file, not a sweep folder" in p.stderr
    assert "unit" not in p.stderr + p.stdout and (tmp_path / "afile").read_text() == "mine"


def _model_folder(folder: Path) -> None:
    folder.mkdir()
    (folder / ".cisl-output").write_text("cisl model\n")
    (folder / "model.onnx").write_bytes(b"a model")


@pytest.mark.unit
@pytest.mark.parametrize("make,needle", [
    (lambda d: d.mkdir() or (d / "notes.txt").write_text("mine"), "d: exists and was not made by cisl sweep"),
    (lambda d: d.mkdir() or (d / "records").mkdir(), "d: exists and was not made by cisl sweep"),  # a user's records/
    (_model_folder, "d: is a cisl model folder, not a sweep folder"),
], ids=["a folder of the user's", "the user's empty records folder", "a cisl model folder"])
def test_a_sweep_writes_only_into_a_folder_of_its_own(tmp_path: Path, make, needle: str) -> None:
    """records/ and work/ used to be written into any existing folder: the user's, or a model folder."""
    make(tmp_path / "d")
    before = sorted((str(p.relative_to(tmp_path)), p.is_file() and p.read_bytes()) for p in (tmp_path / "d").rglob("*"))
    for dry in ([], ["--dry-run"]):
        p = cisl(tmp_path, "sweep", "--seeds", "0", "--epochs", "1", "-o", "d", "-q", *dry)
        assert p.returncode == 2 and needle in p.stderr and "-o" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert sorted((str(p.relative_to(tmp_path)), p.is_file() and p.read_bytes())
                  for p in (tmp_path / "d").rglob("*")) == before


@pytest.mark.unit
def test_a_sweep_folder_of_an_older_cisl_without_owner_file_is_still_resumable(tmp_path: Path) -> None:
    uid = "0123456789abcdef"
    (tmp_path / "s" / "records").mkdir(parents=True)
    (tmp_path / "s" / "records" / f"{uid}.json").write_text("{}")
    (tmp_path / "s" / "work" / uid / "train").mkdir(parents=True)
    p = cisl(tmp_path, "sweep", "--seeds", "0", "--epochs", "1", "-o", "s", "--dry-run")
    assert p.returncode == 0 and " todo " in p.stdout, p.stderr


@pytest.fixture(scope="module")
def one_unit_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with c.toml and the sweep `cisl sweep c.toml -o s` made of it (one unit)."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("sweep")
    (root / "c.toml").write_text(TINY)
    assert cisl(root, "sweep", "c.toml", "-o", "s", "-q").returncode == 0
    return root


@pytest.mark.train
@pytest.mark.parametrize("damage", [lambda r: r.update(result={}), lambda r: r["result"]["summary"].pop("prune"),
                                    lambda r: r["result"]["summary"].update(val_mse="x")])
def test_a_record_without_a_training_summary_is_one_line(tmp_path: Path, one_unit_sweep: Path, damage) -> None:
    # a record read back (the unit skipped as done) without the summary cisl sweep prints was a
    # KeyError / TypeError / format ValueError traceback
    shutil.copytree(one_unit_sweep, tmp_path, dirs_exist_ok=True)
    (path,) = (tmp_path / "s" / "records").glob("*.json")
    rec = json.loads(path.read_text())
    damage(rec)
    path.write_text(json.dumps(rec))
    p = cisl(tmp_path, "sweep", "c.toml", "-o", "s", "-q")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "damaged sweep record" in p.stderr and path.name in p.stderr
    assert p.stdout == ""


def _csv(path: Path, seed: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(400)
    a, b = np.sin(t / 7) + 0.1 * rng.standard_normal(400), np.cos(t / 11) + 0.1 * rng.standard_normal(400)
    path.write_text("date,a,b\n" + "".join(f"{i},{x:.5f},{y:.5f}\n" for i, x, y in zip(t, a, b)))


@pytest.mark.train
def test_a_changed_data_file_named_by_the_config_runs_the_unit_again(tmp_path: Path) -> None:
    """The id covered --data only: a sweep of a config whose [data] path named a changed file reused
    the old records and printed the old MSEs (exit 0)."""
    pytest.importorskip("torch")
    _csv(tmp_path / "x.csv", 0)
    (tmp_path / "c.toml").write_text(tiny_train_config(2, data='source = "csv"\npath = "x.csv"'))
    first = cisl(tmp_path, "sweep", "c.toml", "--seeds", "0", "-o", "s", "-q")
    assert first.returncode == 0, first.stderr
    (rec,) = [json.loads(p.read_text()) for p in (tmp_path / "s" / "records").glob("*.json")]
    assert "x.csv" in rec["unit"]["data"]
    dry = cisl(tmp_path, "sweep", "c.toml", "--seeds", "0", "-o", "s", "--dry-run")
    assert dry.returncode == 0 and " done " in dry.stdout and "note:" not in dry.stderr, (dry.stdout, dry.stderr)
    _csv(tmp_path / "x.csv", 1)  # other values, same name, same size class
    dry = cisl(tmp_path, "sweep", "c.toml", "--seeds", "0", "-o", "s", "--dry-run")
    assert dry.returncode == 0 and " todo " in dry.stdout and rec["id"] not in dry.stdout, dry.stdout
    # the old record stays, and the sweep says so (audit V F6: records/ counted both without a word)
    assert "s holds 1 record that none of this sweep's units are" in dry.stderr and "move them away" in dry.stderr, dry.stderr


@pytest.mark.unit
def test_unit_ids_cover_the_data_folder_manifest_and_split_file_a_config_names(tmp_path: Path) -> None:
    from codegen.train.sweep import grid_units

    icd = tmp_path / "icd"
    icd.mkdir()
    (icd / "01-01T000000_001_mode1.csv").write_text("timestamp,s\n0,1\n")
    (tmp_path / "m.csv").write_text("filename,size_bytes,sha256\n")
    (tmp_path / "c.toml").write_text('[data]\nsource = "icd"\npath = "icd"\nmanifest = "m.csv"\n')
    ids = [unit_id(grid_units(tmp_path / "c.toml", None, {})[0])]
    (icd / "01-01T000000_001_mode1.csv").write_text("timestamp,s\n0,2\n")
    ids.append(unit_id(grid_units(tmp_path / "c.toml", None, {})[0]))
    (tmp_path / "m.csv").write_text("filename,size_bytes,sha256\n# another\n")
    ids.append(unit_id(grid_units(tmp_path / "c.toml", None, {})[0]))
    assert len(set(ids)) == 3
    (tmp_path / "c.toml").write_text('[data]\nsource = "csv"\npath = "gone.csv"\n')
    with pytest.raises(UserError, match=r"gone.csv: not found \(the \[data\] path of .*c.toml\)"):
        grid_units(tmp_path / "c.toml", None, {})


@pytest.mark.unit
def test_prune_applies_to_units_whose_keep_comes_from_the_config(tmp_path: Path) -> None:
    """--prune read only --keep's ratio (a missing one counted as 1): with the keep in the config's
    [prune] section, --prune normal was ignored and the somegather units (same ids, same records)
    were printed as the normal baseline."""
    import dataclasses

    (tmp_path / "k.toml").write_text(tiny_train_config(2, prune='method = "somegather"\nkeep = 0.5'))
    ids = {}
    for method in ([], ["--prune", "normal"]):
        p = cisl(tmp_path, "sweep", "k.toml", "--seeds", "0", *method, "-o", "s", "--dry-run")
        assert p.returncode == 0, p.stderr
        ids[" ".join(method)] = p.stdout.split()[0]
    assert ids[""] != ids["--prune normal"]
    from codegen.train.sweep import grid_units  # the normal unit trains with method normal at the config's keep

    (u,) = grid_units(tmp_path / "k.toml", None, {"train.seed": [0]})
    normal = dataclasses.replace(u, params={**u.params,
                                            "overrides": {**u.params["overrides"], "prune.method": "normal"}})
    assert unit_id(normal) == ids["--prune normal"]
    # a --keep below 1 needs no --prune when the config names the method
    p = cisl(tmp_path, "sweep", "k.toml", "--keep", "0.3", "-o", "s", "--dry-run")
    assert p.returncode == 0 and "keep=0.3" in p.stdout, p.stderr


@pytest.mark.faults
def test_ctrl_c_of_a_local_backend_sweep_prints_no_submitit_traceback(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the whole process group, submitit's local controllers included:
    each printed a KeyboardInterrupt traceback after the sweep's "interrupted"."""
    import signal
    import time

    pytest.importorskip("submitit")
    # the child starts with Python's own Ctrl-C handling, as from a terminal, whatever the test worker left
    script = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
              "from codegen.sweep import Unit, run_sweep\n"
              f"u = [Unit({FNS!r} + ':slow_count', {{'to': 60, 'k': k}}) for k in range(2)]\n"
              "try:\n"
              f"    run_sweep(u, {str(tmp_path / 'r')!r}, {str(tmp_path / 'w')!r}, backend='local', jobs=2,"
              " say=lambda s: None)\n"
              "except KeyboardInterrupt:\n"
              "    print('interrupted', file=sys.stderr)\n")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.time() + 60
        while len(list((tmp_path / "w").glob("*/starts"))) < 2 and time.time() < deadline:
            time.sleep(0.2)
        assert len(list((tmp_path / "w").glob("*/starts"))) == 2, "the units never started"
        time.sleep(0.5)
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        _, err = p.communicate(timeout=30)  # until every process holding its stderr (the controllers) ended
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert err.strip() == "interrupted", err


@pytest.mark.unit
def test_a_second_sweep_on_one_folder_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    """Two `cisl sweep -o C` at once ran into each other's units ("another cisl run is writing it") and both
    reported units failed that had finished (audit M). The second is refused at once, in one line."""
    from codegen.fsutil import use_lock

    with use_lock(tmp_path / "C", "held"):  # what a running sweep holds
        p = cisl(tmp_path, "sweep", "--seeds", "0", "--epochs", "1", "-o", "C")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "another `cisl sweep` is running in this folder" in p.stderr and "unit" not in p.stdout, p.stderr


@pytest.mark.train
def test_q_replaces_the_configs_loss_setting_as_train_dropout_does(tmp_path: Path) -> None:
    """--q overrode [dropout] q only: a config with q_link = 0.1 trained its q = 0 unit under 10 % link
    loss and labelled it q=0 (the paper's loss-free baseline, silently lossy)."""
    pytest.importorskip("torch")
    (tmp_path / "c.toml").write_text(tiny_train_config(2, dropout="q_link = 0.1\nq_max = 0.0\nclean = 0.2"))
    p = cisl(tmp_path, "sweep", "c.toml", "--q", "0", "-o", "s", "-q")
    assert p.returncode == 0, p.stderr
    assert "note: --q sets [dropout] q" in p.stderr and "q_link = 0.1 dropped" in p.stderr, p.stderr
    (rec,) = [json.loads(f.read_text()) for f in (tmp_path / "s" / "records").glob("*.json")]
    drop = rec["result"]["summary"]["dropout"]
    assert rec["label"] == "q=0" and drop["q_link"] == 0.0 and drop["effective_link_loss"] == 0.0, drop
    assert "test_mse_lossy" not in rec["result"]["summary"]


@pytest.mark.unit
def test_a_failed_units_reason_is_printed_whole(tmp_path: Path) -> None:
    """The reason was cut at 200 characters per unit and 300 in the final line: the end of a UserError,
    which says how to fix it (e.g. "set CISL_THREADS=1 to resume"), never showed."""
    why = ", because " + "of a long reason " * 20 + "; fix it by doing THE-FIX-AT-THE-END"
    lines: list[str] = []
    with pytest.raises(UserError) as err:
        run_sweep([unit(tmp_path, 2, fail=True, why=why)], tmp_path / "r", tmp_path / "w", say=lines.append)
    assert "THE-FIX-AT-THE-END); run the sweep again" in str(err.value)
    assert any(line.endswith("THE-FIX-AT-THE-END") for line in lines), lines


@pytest.mark.unit
def test_a_units_id_covers_the_thread_count_and_only_the_training_code(tmp_path: Path) -> None:
    """The bytes depend on the effective thread count ([train] threads capped by CISL_THREADS): a unit
    started under CISL_THREADS=1 could never finish without it (its checkpoint refused to resume, "run
    the sweep again" failed the same way forever). And an edit anywhere in codegen (the planner, say)
    orphaned every record and stopped unit's checkpoint: the id names only the training code, the one
    definition bench/split_training.py uses too."""
    import importlib.util

    from codegen.sweep import code_version
    from codegen.train.sweep import TRAINING_CODE

    (tmp_path / "c.toml").write_text(tiny_train_config(2, train="epochs = 1\nthreads = 2"))
    ids = []
    for cap in ("1", ""):
        env = {**os.environ, "CISL_THREADS": cap}
        p = subprocess.run([sys.executable, "-m", "codegen.cli", "sweep", "c.toml", "-o", "s", "--dry-run"],
                           cwd=tmp_path, capture_output=True, text=True, env=env)
        assert p.returncode == 0, p.stderr
        ids.append(p.stdout.split()[0])
    assert ids[0] != ids[1]
    from codegen.train.sweep import grid_units

    (u,) = grid_units(tmp_path / "c.toml", None, {})
    assert u.code == TRAINING_CODE and u.key()["code"] == code_version(u.fn, TRAINING_CODE)
    assert not any(part.startswith(("planner/plan", "emit", "radio", "testbed")) for part in u.code)
    spec = importlib.util.spec_from_file_location("split_training_study",
                                                  Path(__file__).resolve().parents[1] / "bench" / "split_training.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    assert study.TRAINING_CODE is TRAINING_CODE


@pytest.mark.unit
def test_bad_data_is_one_line_before_any_unit_runs(tmp_path: Path) -> None:
    """A data error was found by every unit after the workers started, each failing with the same line,
    and left an empty sweep folder behind (audit P F16)."""
    rows = [f"{i},{i % 7},{i % 5}" for i in range(300)]
    rows[40] = "40,nan,1"
    (tmp_path / "bad.csv").write_text("date,a,b\n" + "\n".join(rows) + "\n")
    (tmp_path / "c.toml").write_text(tiny_train_config(2))
    p = cisl(tmp_path, "sweep", "c.toml", "--data", "bad.csv", "--seeds", "0,1", "-o", "s")
    assert p.returncode == 2 and "bad.csv: column 'a' has 1 empty, NaN" in p.stderr, p.stderr
    assert "unit" not in p.stderr + p.stdout and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()
