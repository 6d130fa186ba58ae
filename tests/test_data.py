"""Data: synthetic generator, ETT-format CSV loading, the LTSF protocol and RevIN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codegen.data import (
    StandardScaler, Windows, load_csv, make_splits, revin_denormalize, revin_normalize, split_borders,
    synthetic_series,
)
from codegen.errors import UserError

ETTH2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "ett" / "ETTh2.csv"


# --------------------------------------------------------------------------------------------
# Synthetic data
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
def test_synthetic_is_deterministic_float32() -> None:
    a, names = synthetic_series(3000, 5, seed=3)
    b, _ = synthetic_series(3000, 5, seed=3)
    c, _ = synthetic_series(3000, 5, seed=4)
    assert a.shape == (3000, 5) and a.dtype == np.float32 and names == ["ch0", "ch1", "ch2", "ch3", "ch4"]
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.isfinite(a).all() and (a.std(axis=0) > 0).all()


@pytest.mark.unit
def test_synthetic_has_daily_cycles_and_correlated_channels() -> None:
    x, _ = synthetic_series(8000, 4, seed=0)
    z = (x - x.mean(0)) / x.std(0)
    d = np.diff(z, axis=0)  # differencing removes trend and level shifts, keeps the cycles

    def autocorr(lag: int) -> float:
        return float(np.mean([np.corrcoef(d[:-lag, c], d[lag:, c])[0, 1] for c in range(4)]))

    assert autocorr(24) > autocorr(11) + 0.2
    corr = np.corrcoef(z.T)
    assert np.abs(corr[np.triu_indices(4, 1)]).max() > 0.2


# --------------------------------------------------------------------------------------------
# Protocol
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
def test_split_borders() -> None:
    assert split_borders(17420, 336) == [(0, 8640), (8640 - 336, 11520), (11520 - 336, 14400)]
    assert split_borders(69680, 96) == [(0, 34560), (34560 - 96, 46080), (46080 - 96, 57600)]
    assert split_borders(1000, 50) == [(0, 700), (650, 800), (750, 1000)]


def test_the_split_says_which_protocol_cut_it() -> None:
    # chosen by the row count alone: an ETT file with one row lost is cut 70/10/20, and train.json says so
    rng = np.random.default_rng(0)
    assert make_splits(rng.normal(size=(17420, 2)), 96, 24, "x").protocol == "ETT 12/4/4 months"
    assert make_splits(rng.normal(size=(17419, 2)), 96, 24, "x").protocol == "70/10/20 by time"


@pytest.mark.unit
def test_scaler_uses_train_rows_and_population_std() -> None:
    series = np.arange(200, dtype=np.float32).reshape(100, 2) ** 1.5
    sp = make_splits(series, 5, 3, "test")
    train = series[:70].astype(np.float64)
    np.testing.assert_allclose(sp.scaler.mean, train.mean(0))
    np.testing.assert_allclose(sp.scaler.std, train.std(0, ddof=0))
    const = StandardScaler.fit(np.ones((4, 1)))
    assert const.std[0] == 1.0


@pytest.mark.unit
def test_windows_are_channel_independent_stride_one() -> None:
    series = np.arange(30, dtype=np.float32).reshape(10, 3)  # value = 3 * row + channel
    w = Windows(series, lookback=4, horizon=2)
    assert w.per_channel == 5 and len(w) == 15
    x, y = w.arrays()
    assert x.shape == (15, 4) and y.shape == (15, 2)
    # sample i = channel i // 5, start i % 5
    np.testing.assert_array_equal(x[7], series[2:6, 1])
    np.testing.assert_array_equal(y[7], series[6:8, 1])
    idx = w.evenly_spaced(4)
    assert list(idx) == sorted(set(idx)) and len(idx) == 4 and idx[0] == 0
    assert list(w.evenly_spaced(99)) == list(range(15))


@pytest.mark.unit
def test_val_and_test_inputs_reach_back_but_targets_do_not() -> None:
    series = np.arange(1000, dtype=np.float32)[:, None]
    sp = make_splits(series, 50, 10, "test")
    # first val window: inputs rows 650..699, targets 700..709 (the first val rows)
    x, y = sp.val.take(np.array([0]))
    assert sp.scaler.inverse(y)[0, 0] == pytest.approx(700) and sp.scaler.inverse(x)[0, 0] == pytest.approx(650)
    x, y = sp.test.take(np.array([len(sp.test) - 1]))
    assert sp.scaler.inverse(y)[0, -1] == pytest.approx(999)
    assert len(sp.train) == 700 - 60 + 1 and len(sp.val) == 100 - 10 + 1 and len(sp.test) == 200 - 10 + 1


@pytest.mark.unit
def test_too_few_rows() -> None:
    with pytest.raises(UserError, match="too few rows"):
        make_splits(np.zeros((100, 1), np.float32), 96, 24, "tiny.csv")


@pytest.mark.unit
def test_revin_round_trip() -> None:
    x = np.random.default_rng(0).standard_normal((5, 40)).astype(np.float32) * 7 + 3
    xn, mean, std = revin_normalize(x)
    np.testing.assert_allclose(xn.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(std[:, 0], np.sqrt(x.var(-1) + 1e-5), rtol=1e-6)
    np.testing.assert_allclose(revin_denormalize(xn, mean, std), x, atol=1e-4)


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------

def write_csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "data.csv"
    path.write_text(text)
    return path


@pytest.mark.unit
def test_a_stray_word_in_a_number_column_is_an_error_not_a_dropped_channel(tmp_path: Path) -> None:
    rows = ["date,a,b,site"] + [f"2020-01-01 00:{i:02d}:00,{i},{2 * i},north" for i in range(40)]
    rows[7] = "2020-01-01 00:06:00,abc,12,north"
    path = tmp_path / "x.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(UserError, match=r"column 'a' holds numbers but data row 7 has 'abc'"):
        load_csv(path)
    rows[7] = "2020-01-01 00:06:00,6,12,north"  # fixed: the text column 'site' is skipped as before
    path.write_text("\n".join(rows) + "\n")
    x, names = load_csv(path)
    assert names == ["a", "b"] and x.shape == (40, 2)


def test_a_numeric_time_column_is_never_a_channel(tmp_path: Path) -> None:
    # an ICD recording's `timestamp` (seconds) was trained on as a signal
    path = write_csv(tmp_path, "timestamp,a,b\n0.008,1,2\n0.016,3,4\n0.024,5,6\n")
    x, names = load_csv(path)
    assert names == ["a", "b"] and x.tolist() == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(UserError, match="'timestamp' is the time column"):
        load_csv(path, ["timestamp"])


def test_a_bom_does_not_hide_the_time_column(tmp_path: Path) -> None:
    # Excel's "CSV UTF-8" starts with a BOM: the header read '\ufefftimestamp', so the time was trained
    # on as a channel and rows out of order passed
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufefftimestamp,a\n0.008,1\n0.016,3\n0.024,5\n".encode())
    x, names = load_csv(path)
    assert names == ["a"] and x[:, 0].tolist() == [1, 3, 5]
    path.write_bytes("\ufefftimestamp,a\n0.016,1\n0.008,3\n".encode())
    with pytest.raises(UserError, match="'timestamp' column goes back in time"):
        load_csv(path)


def test_numbers_with_commas_are_refused_not_dropped(tmp_path: Path) -> None:
    # "1,296.5" (a thousands separator) or "5,83" (a decimal comma) made the column text: skipped, exit 0
    for cell, shown in (('"1,296.5"', "'1,296.5'"), ('"5,83"', "'5,83'")):
        text = "date,a,b\n" + "".join(f"2020-01-0{i + 1},{i},{cell}\n" for i in range(3))
        with pytest.raises(UserError, match=f"column 'b' holds numbers written with ',' \\(data row 1: {shown}\\)"):
            load_csv(write_csv(tmp_path, text))


def test_a_pandas_index_column_is_not_a_channel(tmp_path: Path) -> None:
    # pandas reads an unnamed index back as "Unnamed: 0" and writes it so
    x, names = load_csv(write_csv(tmp_path, "Unnamed: 0,date,a\n0,2020-01-01,1.5\n1,2020-01-02,2.5\n"))
    assert names == ["a"] and x[:, 0].tolist() == [1.5, 2.5]


def test_integer_column_names_are_names(tmp_path: Path) -> None:
    """pandas writes an unnamed index and integer column names (`,0,1`): a header, not data."""
    x, names = load_csv(write_csv(tmp_path, ",0,1\n0,1.5,2\n1,2.5,3\n2,3.5,4\n"))
    assert names == ["0", "1"] and x[:, 0].tolist() == [1.5, 2.5, 3.5]


@pytest.mark.unit
def test_a_channel_constant_in_training_but_not_later_is_warned_about(tmp_path: Path) -> None:
    """Only centred (std 1), such a channel's errors are on its raw scale: the ICD sample's
    pSpintor::VAX_speed (1380 in training, down to 1200 later) gave val MSE 222 without a word."""
    from codegen.data.dataset import load_data

    rows = 200
    t = np.arange(rows)
    speed = np.where(t < 150, 1380.0, 1200.0)  # constant over the first 70 % (140 rows)
    lines = ["date,wave,speed,flat"] + [f"2020-01-01 {i // 60:02d}:{i % 60:02d}:00,{np.sin(i / 5):.4f},{speed[i]:g},7"
                                        for i in range(rows)]
    path = tmp_path / "d.csv"
    path.write_text("\n".join(lines) + "\n")
    _, desc = load_data("csv", path, None, 16, 4)
    assert len(desc["warnings"]) == 1, desc  # "flat" is constant everywhere: nothing to warn about
    assert "'speed' is constant (1380) over the training rows but ranges 1200..1380" in desc["warnings"][0]
    _, fine = load_data("csv", path, ["wave", "flat"], 16, 4)
    assert "warnings" not in fine


def test_load_csv_picks_columns(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "date,a,b,label\n2020-01-01,1,2.5,x\n2020-01-02,3,4e0,y\n2020-01-03,5,6,z\n")
    x, names = load_csv(path)
    assert names == ["a", "b"] and x.dtype == np.float64 and x.tolist() == [[1, 2.5], [3, 4], [5, 6]]
    x, names = load_csv(path, ["b"])
    assert names == ["b"] and x[:, 0].tolist() == [2.5, 4, 6]


@pytest.mark.unit
def test_rows_out_of_time_order_are_refused(tmp_path: Path) -> None:
    # shuffled rows trained without a word (test MSE 1.13 against 0.39 in order); equal times pass
    ok = "date,x\n2016-07-01 00:00:00,1\n2016-07-01 00:00:00,2\n2016-07-01 01:00:00,3\n"
    assert load_csv(write_csv(tmp_path, ok))[0].shape == (3, 1)
    bad = "date,x\n2016-07-01 00:00:00,1\n2016-07-01 02:00:00,2\n2016-07-01 01:00:00,3\n"
    with pytest.raises(UserError, match="'date' column goes back in time at data row 3"):
        load_csv(write_csv(tmp_path, bad))
    assert load_csv(write_csv(tmp_path, "date,x\n07/01/2016,1\n06/01/2016,2\n"))[0].shape == (2, 1)  # unread


@pytest.mark.unit
def test_a_large_offset_does_not_flatten_the_signal_before_scaling(tmp_path: Path) -> None:
    # 1e8 + a wave of amplitude 10: float32 (spacing 8 there) kept 3 distinct values and a std 3 % low
    wave = 10 * np.sin(np.arange(2000) / 7)
    path = write_csv(tmp_path, "date,x\n" + "".join(f"{i},{1e8 + v:.4f}\n" for i, v in enumerate(wave)))
    splits = make_splits(load_csv(path)[0], 96, 24, "x")
    assert splits.scaler.std[0] == pytest.approx(wave[:1400].std(), rel=1e-6)


@pytest.mark.unit
@pytest.mark.parametrize("text, columns, expected", [
    ("date,label\n2020,x\n2021,y\n", None, "no numeric columns"),
    ("date,HUFL,OT\n1,2,3\n2,3,4\n", ["OTT"], "did you mean 'OT'?"),
    ("date,a,label\n1,2,x\n2,3,y\n", ["label"], "not numeric"),
    ("date,a,b\n1,2,3\n2,,4\n3,4,5\n", None, "NaN"),
    ("date,a\n1,2\n2,nan\n", None, "NaN"),
    ("date,a\n1,2\n", None, "data rows"),
    ("", None, "empty"),
    ("date,a\n1,2,3\n", None, "fields"),
    ("date,a,b,a\n1,2,3,4\n2,3,4,5\n3,4,5,6\n", None, "columns 2 and 4 are both named 'a'"),
    ("2016-07-01 00:00:00,5.827,2.009\n2016-07-01 01:00:00,5.693,2.076\n2016-07-01 02:00:00,5.157,1.741\n", None,
     "is data, not column names"),
    ("5.827,2.009\n5.693,2.076\n5.157,1.741\n", None, "is data, not column names"),
    ("date;a;b\n2020-01-01;1;2\n2020-01-02;3;4\n", None, "its fields are separated by ';'"),
    ("date,a,b\n1,2,3\n2,3,4\n3,4,5\n", ["a", "a"], "names 'a' twice"),
])
def test_load_csv_errors(tmp_path: Path, text: str, columns: list[str] | None, expected: str) -> None:
    path = write_csv(tmp_path, text)
    with pytest.raises(UserError) as err:
        load_csv(path, columns)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and expected in msg, msg


@pytest.mark.unit
def test_load_csv_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        load_csv(tmp_path / "nope.csv")


# --------------------------------------------------------------------------------------------
# The real ETTh2 file: repeat-last-value reproduces the published protocol number
# --------------------------------------------------------------------------------------------

@pytest.mark.data
@pytest.mark.skipif(not ETTH2.is_file(), reason="../shared/data/ett/ETTh2.csv is absent")
def test_etth2_repeat_last_value_protocol() -> None:
    series, names = load_csv(ETTH2)
    assert names == ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]
    sp = make_splits(series, 336, 96, str(ETTH2))
    assert (len(sp.train), len(sp.val), len(sp.test)) == (8209 * 7, 2785 * 7, 2785 * 7)
    np.testing.assert_allclose(sp.scaler.mean, [41.5368, 12.2735, 46.6098, 10.5262, 1.1870, -2.3732, 26.8720],
                               atol=1e-4)
    x, y = sp.test.arrays()
    mse = float(np.mean((np.repeat(x[:, -1:], 96, axis=1).astype(np.float64) - y) ** 2))
    assert abs(mse - 0.4317) <= 0.0005
