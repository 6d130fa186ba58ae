"""ICD recordings: split by recording in time order, windows within recordings, manifest checks."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from codegen.data.dataset import load_dataset, source_for_path
from codegen.data.icd import icd_splits, read_recording, recording_files
from codegen.data.protocol import SegmentWindows
from codegen.errors import UserError
from codegen.modelspec import ModelConfig

ICD = Path(__file__).resolve().parents[2] / "shared" / "data" / "icd"
REAL = ICD / "01-04T184148_000_mode1.csv"
MANIFEST = ICD / "manifest_full_dataset.csv"

# Ten recordings, named as in the data set; listed out of time order on purpose.
NAMES = ["02-01T090000_005_mode1.csv", "01-04T184148_000_mode1.csv", "01-04T184424_001_mode2.csv",
         "12-30T235959_009_mode8.csv", "01-10T120000_002_mode1.csv", "03-15T101010_006_mode3.csv",
         "01-20T080000_003_mode1.csv", "01-31T235959_004_mode5.csv", "04-01T000000_007_mode1.csv",
         "11-11T111111_008_mode2.csv"]
TIME_ORDER = sorted(NAMES)  # MM-DDTHHMMSS sorts by time


def write_recordings(folder: Path, names: list[str], rows: int = 120) -> dict[str, int]:
    """Recording r (by time order) holds a = 1000 r + t, b = -a, so every value says where it came from."""
    folder.mkdir(parents=True, exist_ok=True)
    index = {}
    for name in names:
        r = TIME_ORDER.index(name) if name in TIME_ORDER else len(index)
        index[name] = r
        t = np.arange(rows)
        lines = ["timestamp,a,b"] + [f"{0.004 * (i + 1):.3f},{1000 * r + i},{-(1000 * r + i)}" for i in t]
        (folder / name).write_text("\n".join(lines) + "\n")
    return index


def raw_windows(part: SegmentWindows, scaler) -> np.ndarray:
    """Every window (inputs then targets) on the recordings' scale, undoing each sample's channel scaler."""
    x, y = part.arrays()
    ch = part.channel_of(np.arange(len(part)))
    xy = np.concatenate([x, y], axis=1).astype(np.float64)
    return xy * scaler.std[ch][:, None] + scaler.mean[ch][:, None]


@pytest.mark.unit
def test_split_by_recording_in_time_order_and_windows_stay_inside(tmp_path: Path) -> None:
    write_recordings(tmp_path / "icd", NAMES)
    (tmp_path / "icd" / "notes.csv").write_text("x\n1\n")  # not a recording: ignored, and said so
    lookback, horizon = 20, 10
    sp, desc = icd_splits(tmp_path / "icd", None, lookback, horizon)
    assert desc["columns"] == ["a", "b"] and desc["recordings"] == 10 and desc["ignored_files"] == ["notes.csv"]
    by = desc["recordings_by_split"]
    assert by["train"] == TIME_ORDER[:7] and by["val"] == TIME_ORDER[7:8] and by["test"] == TIME_ORDER[8:]
    assert "by recording" in desc["split"] and sp.protocol == "70/10/20 by recording"  # said "by time, per series"

    per_recording = (120 - lookback - horizon + 1) * 2  # two channels
    assert (len(sp.train), len(sp.val), len(sp.test)) == (7 * per_recording, per_recording, 2 * per_recording)

    # scaler: population statistics of the training recordings' rows
    train_a = np.concatenate([1000 * r + np.arange(120) for r in range(7)]).astype(np.float64)
    np.testing.assert_allclose(sp.scaler.mean, [train_a.mean(), -train_a.mean()])
    np.testing.assert_allclose(sp.scaler.std, [train_a.std(), train_a.std()])

    for part, recs in ((sp.train, range(7)), (sp.val, [7]), (sp.test, [8, 9])):
        raw = np.abs(raw_windows(part, sp.scaler)).round()  # channel b is -a
        rec = raw // 1000
        assert (rec == rec[:, :1]).all()  # never across two recordings
        assert set(np.unique(rec).astype(int)) == set(recs)
        assert (np.diff(raw % 1000, axis=1) == 1).all()  # consecutive rows of one recording


@pytest.mark.unit
def test_fewer_than_three_recordings_split_each_by_time(tmp_path: Path) -> None:
    write_recordings(tmp_path / "two", NAMES[:2], rows=200)
    sp, desc = icd_splits(tmp_path / "two", None, 20, 10)
    assert "fewer than 3 recordings (2)" in desc["split"] and "70/10/20" in desc["split"]
    assert len(sp.train) == 2 * 2 * (140 - 30 + 1)  # 2 recordings x 2 channels, first 70 % of the rows
    raw = np.abs(raw_windows(sp.test, sp.scaler)).round()
    assert (raw // 1000 == (raw // 1000)[:, :1]).all() and (raw % 1000).max() == 199


@pytest.mark.unit
def test_columns_and_single_file(tmp_path: Path) -> None:
    write_recordings(tmp_path / "icd", NAMES[:3])
    sp, desc = icd_splits(tmp_path / "icd", ["b"], 20, 10)
    assert desc["columns"] == ["b"] and sp.scaler.mean.shape == (1,)
    sp, desc = icd_splits(tmp_path / "icd" / NAMES[0], None, 20, 10)  # one recording: split by time
    assert desc["recordings"] == 1 and "fewer than 3" in desc["split"]
    with pytest.raises(UserError, match=r"no column 'B'; did you mean 'b'\?"):
        icd_splits(tmp_path / "icd", ["B"], 20, 10)
    with pytest.raises(UserError) as err:  # the time column is never a channel: not offered as one (audit P F12)
        icd_splits(tmp_path / "icd", ["OT"], 20, 10)
    assert "columns are: " in str(err.value) and "timestamp" not in str(err.value).split("columns are: ")[1]


@pytest.mark.unit
def test_short_recordings_are_skipped_and_counted(tmp_path: Path) -> None:
    write_recordings(tmp_path / "icd", NAMES[:4])
    write_recordings(tmp_path / "icd", NAMES[4:5], rows=25)  # shorter than lookback + horizon
    _, desc = icd_splits(tmp_path / "icd", None, 20, 10)
    assert desc["recordings"] == 5 and desc["recordings_used"] == 4 and desc["skipped_short"] == 1
    with pytest.raises(UserError, match="every recording is shorter than"):
        icd_splits(tmp_path / "icd", None, 100, 50)


@pytest.mark.unit
def test_manifest_verification(tmp_path: Path) -> None:
    folder = tmp_path / "icd"
    write_recordings(folder, NAMES[:3])
    lines = ["filename,size_bytes,sha256"] + [
        f"{n},{(folder / n).stat().st_size},{hashlib.sha256((folder / n).read_bytes()).hexdigest()}" for n in NAMES[:3]]
    lines += [f"{n},1000,{'ab' * 32}" for n in NAMES[3:]]  # listed but absent: fine
    good = tmp_path / "manifest.csv"
    good.write_text("\n".join(lines) + "\n")  # lists more files than present: fine
    _, desc = icd_splits(folder, None, 20, 10, good)
    assert desc["manifest"] == {"file": "manifest.csv", "entries": 10, "verified": 3}

    damaged = folder / NAMES[1]
    damaged.write_text(damaged.read_text().replace(",5,", ",6,", 1))  # same size, other content
    with pytest.raises(UserError) as err:
        icd_splits(folder, None, 20, 10, good)
    msg = str(err.value)
    assert "\n" not in msg and NAMES[1] in msg and "sha256" in msg

    (folder / "12-31T000000_010_mode1.csv").write_text((folder / NAMES[0]).read_text())
    damaged.write_text(damaged.read_text().replace(",6,", ",5,", 1))
    with pytest.raises(UserError, match="12-31T000000_010_mode1.csv: not listed in the manifest"):
        icd_splits(folder, None, 20, 10, good)


@pytest.mark.unit
def test_bad_folders_and_files(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "other.csv").write_text("a\n1\n")
    with pytest.raises(UserError, match="no ICD recordings named MM-DDTHHMMSS_NNN_modeK.csv.*found other.csv"):
        recording_files(tmp_path / "empty")
    with pytest.raises(UserError, match="no such file or folder"):
        recording_files(tmp_path / "nope")
    bad = tmp_path / "01-01T000000_000_mode1.csv"
    bad.write_text("timestamp,a\n0.004,1\n0.008,x\n")
    with pytest.raises(UserError, match=r"column 'a', data row 2: 'x' is not a finite number"):
        read_recording(bad)


@pytest.mark.unit
def test_source_for_path(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for name in ("a.csv", "b.tsf", "c.txt"):
        (tmp_path / name).write_text("")
    assert source_for_path(tmp_path / "a.csv") == "csv" and source_for_path(tmp_path / "a.csv", "icd") == "icd"
    assert source_for_path(tmp_path / "b.tsf") == "tsf" and source_for_path(tmp_path / "d") == "icd"
    with pytest.raises(UserError, match="cannot tell the data format"):
        source_for_path(tmp_path / "c.txt")


@pytest.mark.data
@pytest.mark.skipif(not REAL.is_file(), reason="../shared/data/icd is absent")
def test_real_recording_with_manifest() -> None:
    data, names = read_recording(REAL)
    assert data.shape == (2048, 8) and data.dtype == np.float64
    assert names[0] == "pCut::Motor_Torque" and names[-1] == "pSpintor::VAX_speed"
    assert data[0, 2] == 628392628  # a position counter, exact in float64

    sp, desc = icd_splits(ICD, None, 336, 96, MANIFEST)
    assert desc["recordings"] == 1 and desc["manifest"]["entries"] == 519 and desc["manifest"]["verified"] == 1
    assert desc["ignored_files"] == ["manifest_full_dataset.csv"] and "fewer than 3" in desc["split"]
    assert len(sp.train) == 8 * (1433 - 432 + 1)
    np.testing.assert_allclose(raw_windows(sp.train, sp.scaler)[0], data[:432, 0], rtol=1e-5, atol=1e-5)
    assert sp.scaler.std[-1] == 1.0  # VAX_speed is constant in the training rows: only centred

    splits = load_dataset(ICD, ModelConfig(lookback=336, horizon=96), ["pCut::Motor_Torque"])
    assert len(splits.train) == 1433 - 432 + 1


@pytest.mark.unit
def test_one_segment_is_the_plain_windows() -> None:
    from codegen.data.protocol import Windows

    series = np.random.default_rng(0).standard_normal((50, 3)).astype(np.float32)
    a, b = Windows(series, 8, 4), SegmentWindows([series], 8, 4)
    assert len(a) == len(b)
    for u, v in zip(a.arrays(), b.arrays()):
        np.testing.assert_array_equal(u, v)
    assert list(b.channel_of(np.array([0, 38, 39, len(b) - 1]))) == [0, 0, 1, 2]
    empty = SegmentWindows([series[:5], series], 8, 4)  # a too-short segment gives no window
    assert len(empty) == len(a)


@pytest.mark.unit
def test_a_bom_and_values_beyond_float32_in_a_recording(tmp_path: Path) -> None:
    rec = tmp_path / "11-03T101010_000_mode1.csv"
    rec.write_bytes(("\ufefftimestamp,a\n" + "".join(f"{0.004 * (i + 1):.3f},{i}\n" for i in range(40))).encode())
    x, names = read_recording(rec)
    assert names == ["a"] and x.shape == (40, 1)  # the BOM made '\ufefftimestamp' a channel
    rec.write_text("timestamp,a\n0.004,1\n0.008,1e39\n")
    with pytest.raises(UserError, match=r"data row 2: '1e39' is not a finite number within float32's range"):
        read_recording(rec)  # trained with MSE 0.0000


@pytest.mark.unit
def test_a_recording_out_of_time_order_is_refused(tmp_path: Path) -> None:
    # trained without a word (the CSV loader refused the same rows)
    rec = tmp_path / "11-03T101010_000_mode1.csv"
    rec.write_text("timestamp,a\n" + "".join(f"{0.004 * (40 - i):.3f},{i}\n" for i in range(40)))
    with pytest.raises(UserError, match="'timestamp' column goes back in time at data row 2"):
        read_recording(rec)
