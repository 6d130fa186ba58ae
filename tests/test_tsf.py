"""Monash .tsf files: parsing, missing values, per-series splits, and one-line errors for bad files."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from codegen.data.dataset import load_data
from codegen.data.tsf import fill_missing, read_tsf, tsf_splits
from codegen.errors import UserError

pytestmark = pytest.mark.unit

HEADER = """# Monash-style test file
@relation test_series
@attribute series_name string
@attribute start_timestamp date
@frequency hourly
@horizon 4
@missing {missing}
@equallength {equal}

@data
"""


def series_line(name: str, values: list[str]) -> str:
    return f"{name}:2020-01-01 00-00-00:{','.join(values)}\n"


def write(tmp_path: Path, text: str, name: str = "data.tsf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def coded(k: int, n: int) -> list[str]:
    """Series k: value 1000 k + t, so a window tells which series and time steps it holds."""
    return [str(1000 * k + t) for t in range(n)]


def test_equal_length(tmp_path: Path) -> None:
    text = HEADER.format(missing="false", equal="true") + "".join(series_line(f"T{k}", coded(k, 50)) for k in range(3))
    tsf = read_tsf(write(tmp_path, text))
    assert tsf.relation == "test_series" and tsf.frequency == "hourly" and tsf.horizon == 4
    assert tsf.missing is False and tsf.equal_length is True
    assert tsf.attributes == [("series_name", "string"), ("start_timestamp", "date")]
    assert [v["series_name"] for v in tsf.values] == ["T0", "T1", "T2"]
    assert tsf.values[0]["start_timestamp"] == datetime(2020, 1, 1)
    assert tsf.lines == [11, 12, 13]
    for k, s in enumerate(tsf.series):
        assert s.dtype == np.float64 and s.tolist() == [1000 * k + t for t in range(50)]


def test_unequal_length_and_missing_values(tmp_path: Path) -> None:
    a = coded(0, 80)
    a[0], a[1], a[40], a[41] = "?", "?", "?", " ? "  # leading gap (backward fill) and inner gap (forward fill)
    text = HEADER.format(missing="true", equal="false") + series_line("A", a) + series_line("B", coded(1, 120)) \
        + series_line("C", coded(2, 20))  # C is too short for lookback 16 + horizon 8
    path = write(tmp_path, text)
    tsf = read_tsf(path)
    assert [len(s) for s in tsf.series] == [80, 120, 20] and np.isnan(tsf.series[0]).sum() == 4

    filled = fill_missing(tsf.series[0])
    assert filled[:3].tolist() == [2, 2, 2] and filled[40:43].tolist() == [39, 39, 42]

    lookback, horizon = 16, 8
    sp, desc = tsf_splits(path, lookback, horizon)
    assert desc["series"] == 3 and desc["series_used"] == 2 and desc["skipped_short"] == 1
    assert desc["missing_values_filled"] == 4 and "forward fill" in desc["missing_policy"]
    assert "70/10/20" in desc["split"] and desc["source"] == "tsf" and len(desc["sha256"]) == 64

    # per series by time 70/10/20; validation/test inputs reach lookback rows back
    def windows(rows: int) -> int:
        return max(0, rows - lookback - horizon + 1)
    assert len(sp.train) == windows(int(80 * .7)) + windows(int(120 * .7))
    assert len(sp.test) == windows(int(80 * .2) + lookback) + windows(int(120 * .2) + lookback)
    assert sp.scaler.mean.shape == (1,)  # one scaler for the pooled univariate series

    used = {0: filled, 1: tsf.series[1]}
    for part in (sp.train, sp.val, sp.test):  # every window is a consecutive stretch of one (filled) series
        x, y = part.arrays()
        raw = np.concatenate([sp.scaler.inverse(x), sp.scaler.inverse(y)], axis=1).round()
        for row in raw:
            stretches = np.lib.stride_tricks.sliding_window_view(used[int(row[-1] // 1000)], len(row))
            assert (stretches == row).all(axis=1).any(), row
    # the last test target of series B is its last value
    _, y = sp.test.take(np.array([len(sp.test) - 1]))
    assert sp.scaler.inverse(y)[0, -1] == pytest.approx(1119, abs=1e-2)


def test_a_split_mostly_filled_in_is_warned_about(tmp_path: Path) -> None:
    """A long '?' gap near a series' end made the whole validation split a forward-filled flat line
    (val MSE 0.0000, best epoch chosen on it) and nothing was printed; now the description (train.json,
    and `cisl train` prints it) says so. A few gaps say nothing."""
    a = coded(0, 100)
    a[60:90] = ["?"] * 30  # validation rows 70..90 all missing, and some of train and test
    path = write(tmp_path, HEADER.format(missing="true", equal="true") + series_line("A", a) + series_line("B", coded(1, 100)))
    _, desc = load_data("tsf", path, None, 10, 5)
    assert any("of the validation split's values were missing" in w and "best epoch" in w for w in desc["warnings"])
    assert not any("training split" in w for w in desc["warnings"]), desc["warnings"]  # 10 of 140 rows
    b = coded(0, 100)
    b[75] = "?"
    _, quiet = load_data("tsf", write(tmp_path, HEADER.format(missing="true", equal="true") + series_line("A", b),
                                      "few.tsf"), None, 10, 5)
    assert "warnings" not in quiet


def test_pooled_scaler_uses_train_parts_only(tmp_path: Path) -> None:
    text = HEADER.format(missing="false", equal="true") + series_line("A", coded(0, 100)) \
        + series_line("B", coded(1, 100))
    sp, _ = tsf_splits(write(tmp_path, text), 10, 5)
    train = np.concatenate([np.arange(70), 1000 + np.arange(70)]).astype(np.float64)
    np.testing.assert_allclose(sp.scaler.mean, [train.mean()])
    np.testing.assert_allclose(sp.scaler.std, [train.std()])


def test_attributes_are_optional_and_types_parse(tmp_path: Path) -> None:
    text = "@relation r\n@attribute id numeric\n@data\n3:1.5,2e1,-4\n"
    tsf = read_tsf(write(tmp_path, text))
    assert tsf.values == [{"id": 3.0}] and tsf.series[0].tolist() == [1.5, 20.0, -4.0]
    tsf = read_tsf(write(tmp_path, "@relation r\n@data\n1,2,3\n"))
    assert tsf.attributes == [] and tsf.series[0].tolist() == [1, 2, 3]


def test_all_series_too_short(tmp_path: Path) -> None:
    text = HEADER.format(missing="false", equal="false") + series_line("A", coded(0, 10)) \
        + series_line("B", coded(1, 12))
    with pytest.raises(UserError) as err:
        tsf_splits(write(tmp_path, text), 16, 8)
    msg = str(err.value)
    assert "\n" not in msg and "no series is long enough" in msg and "lengths 10..12" in msg


MALFORMED = [
    # (file text, line number in the message or None, words)
    ("@relation r\n@attribute name string\n", None, "no @data line"),
    ("@relation r\n@attribute name string\nT1:1,2,3\n@data\n", 3, "before the @data line"),
    ("@relation r\n@attribute name strng\n@data\nT1:1,2\n", 2, "unknown attribute type 'strng'"),
    ("@relation r\n@attribute name\n@data\nT1:1,2\n", 2, "@attribute NAME TYPE"),
    ("@relation r\n@attribute name string\n@attribute n numeric\n@data\nT1:1,2,3\n", 5,
     "1 attribute field(s) before the values, expected 2"),
    ("@relation r\n@attribute name string\n@data\nT1:x:1,2,3\n", 4, "2 attribute field(s)"),
    ("@relation r\n@attribute name string\n@data\n# ok\nT1:1,2\nT2:1,abc,3\n", 6, "value 2 of the series 'abc'"),
    ("@relation r\n@attribute name string\n@data\nT1:1,,3\n", 4, "value 2 of the series is empty"),
    ("@relation r\n@attribute name string\n@data\nT1:1,inf\n", 4, "'inf' is not a finite number"),
    ("@relation r\n@attribute name string\n@data\nT1:1,1e39\n", 4, "'1e39' is not a finite number within float32"),
    ("@relation r\n@attribute name string\n@data\nT1:\n", 4, "no values"),
    ("@relation r\n@attribute n numeric\n@data\nabc:1,2\n", 4, "attribute 'n' = 'abc' is not a number"),
    ("@relation r\n@attribute t date\n@data\n2020-01-01 00:00:00:1,2\n", 4, "attribute field(s)"),
    ("@relation r\n@attribute t date\n@data\n2020-13-01 00-00-00:1,2\n", 4, "is not a date"),
    ("@relation r\n@horizon soon\n@data\n1,2\n", 2, "@horizon 'soon' is not an integer"),
    ("@relation r\n@missing maybe\n@data\n1,2\n", 2, "@missing 'maybe' is neither true nor false"),
    ("@relation r\n@colour blue\n@data\n1,2\n", 2, "unknown header line"),
    ("@relation r\n@data\n1,2\n@horizon 3\n", 4, "after @data"),
    ("@relation r\n@data\n\n", None, "no series after @data"),
]


@pytest.mark.parametrize("text, line, words", MALFORMED)
def test_malformed_files_give_one_line_with_the_line_number(tmp_path: Path, text: str, line: int | None,
                                                           words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(UserError) as err:
        read_tsf(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and words in msg, msg
    if line is not None:
        assert f"{path}:{line}: " in msg, msg
    assert ";" in msg  # ... what is wrong; how to fix it


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        read_tsf(tmp_path / "nope.tsf")


def test_a_file_whose_series_are_all_missing_says_so(tmp_path: Path) -> None:
    """It said "no series is long enough ... use a shorter lookback/horizon" for a long series of '?'
    (audit P F13), and counted the empty series' lengths."""
    text = HEADER.format(missing="true", equal="false") + series_line("A", ["?"] * 300)
    with pytest.raises(UserError) as err:
        tsf_splits(write(tmp_path, text), 16, 8)
    msg = str(err.value)
    assert "\n" not in msg and "every series is all missing" in msg and "shorter" not in msg, msg
    text += series_line("B", coded(1, 12))
    with pytest.raises(UserError, match=r"lengths 12\.\.12, 1 all missing"):
        tsf_splits(write(tmp_path, text), 16, 8)
