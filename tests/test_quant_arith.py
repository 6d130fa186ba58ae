"""codegen.quant.arith: fixed-point building blocks and parameter derivation, on known values
and against straightforward Python-integer definitions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from codegen.quant import arith, kernels

pytestmark = pytest.mark.unit

MIN, MAX = -(1 << 31), (1 << 31) - 1


# ---------------------------------------------------------------------------
# Python-integer definitions (gemmlowp's forms), independent of the numpy code
# ---------------------------------------------------------------------------


def srdhm_ref(a: int, b: int) -> int:
    if a == b == MIN:
        return MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    q = abs(ab + nudge) // (1 << 31)  # truncating division
    return q if ab + nudge >= 0 else -q


def rdbpot_ref(x: int, e: int) -> int:
    q = Fraction(x, 1 << e)
    r = math.floor(abs(q) + Fraction(1, 2))  # round half away from zero
    return r if q >= 0 else -r


def wrap_ref(v: int) -> int:
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def requantize_ref(v: int, m: int, s: int) -> int:
    t = wrap_ref(v * (1 << max(s, 0)))
    return rdbpot_ref(wrap_ref(srdhm_ref(t, m)), max(-s, 0))


# ---------------------------------------------------------------------------
# QuantizeMultiplier
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("real", "expected"),
    [
        (0.0, (0, 0)),
        (1.0, (1 << 30, 1)),
        (0.5, (1 << 30, 0)),
        (0.25, (1 << 30, -1)),
        (2.0**-31, (1 << 30, -30)),
        (2.0**-32, (1 << 30, -31)),  # smallest shift kept
        (2.0**-33, (0, 0)),  # shift -32: everything would shift out
        (1e-12, (0, 0)),
        (0.75 * 2.0**-31, (3 << 29, -31)),
        (2.0**30, (1 << 30, 31)),
        (1 - 2.0**-31, (MAX, 0)),  # mantissa exactly 2^31 - 1: no rounding
        (1 - 2.0**-32, (1 << 30, 1)),  # q·2^31 = 2^31 - 0.5 rounds (half away) to 2^31
        (1 - 2.0**-40, (1 << 30, 1)),
        (0.1, (1717986918, -3)),
        (1 / 3, (1431655765, -1)),
    ],
)
def test_quantize_multiplier_edges(real: float, expected: tuple[int, int]) -> None:
    assert arith.quantize_multiplier(real) == expected
    m, s = arith.quantize_multiplier_array(np.array([real]))
    assert (int(m[0]), int(s[0])) == expected


def test_quantize_multiplier_array_matches_scalar() -> None:
    rng = np.random.default_rng(0)
    reals = np.concatenate([10.0 ** rng.uniform(-12, 3, 2000), [0.0, 1.0, 2.0**-32, 2.0**-33, 1 - 2.0**-32]])
    m, s = arith.quantize_multiplier_array(reals)
    for r, mi, si in zip(reals, m, s):
        assert arith.quantize_multiplier(float(r)) == (int(mi), int(si))
        if mi:
            assert (1 << 30) <= mi < (1 << 31)
            assert abs(int(mi) * 2.0 ** (int(si) - 31) - r) <= r * 2.0**-30


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_quantize_multiplier_rejects(bad: float) -> None:
    with pytest.raises(ValueError):
        arith.quantize_multiplier(bad)


# ---------------------------------------------------------------------------
# Parameter derivations
# ---------------------------------------------------------------------------


def test_softmax_params_notes_example() -> None:
    assert arith.softmax_params(0.1) == (1717986918, 23, -248)
    assert arith.softmax_params(0.1, beta=1.0) == arith.softmax_params(0.05, beta=2.0)


def test_softmax_params_ranges() -> None:
    for scale in (1e-6, 1e-3, 0.02, 0.5, 4.0, 100.0):
        mult, shift, diff_min = arith.softmax_params(scale)
        assert (1 << 30) <= mult < (1 << 31) and 0 <= shift <= 31
        assert diff_min == -math.floor(31 * 2**26 / 2**shift)
    with pytest.raises(ValueError):
        arith.softmax_params(1e-9)  # beta·scale·2^26 <= 1


def test_fc_params_per_tensor_and_per_channel() -> None:
    m, s = arith.fc_params(0.05, 0.002, 0.1)
    assert (m, s) == arith.quantize_multiplier(0.05 * 0.002 / 0.1)
    sw = np.array([0.002, 0.004, 1e-13])
    ma, sa = arith.fc_params(0.05, sw, 0.1)
    assert ma.dtype == np.int64 and ma.shape == (3,)
    assert (int(ma[0]), int(sa[0])) == (m, s)
    assert (int(ma[1]), int(sa[1])) == (m, s + 1)
    assert (int(ma[2]), int(sa[2])) == (0, 0)


def test_add_params() -> None:
    p = arith.add_params(0.02, 0.03, 0.05)
    assert p["left_shift"] == 20
    # the larger input scale is exactly 1/2 of twice_max
    assert (p["in2_mult"], p["in2_shift"]) == (1 << 30, 0)
    assert (p["in1_mult"], p["in1_shift"]) == arith.quantize_multiplier(0.02 / 0.06)
    assert (p["out_mult"], p["out_shift"]) == arith.quantize_multiplier(0.06 / (2**20 * 0.05))
    assert all(p[k] <= 0 for k in ("in1_shift", "in2_shift", "out_shift"))
    with pytest.raises(ValueError):
        arith.add_params(1.0, 1.0, 1e-9)  # output multiplier >= 1


def test_layernorm_params() -> None:
    eps_q, g, b = arith.layernorm_params(0.05, 0.1, [1.0, -0.5, 1e9], [0.25, -0.00000762939453125, -1e9], 1e-5)
    assert eps_q == round(1e-5 / 0.0025 * 65536)  # 262.144 -> 262
    assert g.tolist() == [655360, -327680, MAX]  # clipped to int32
    # -0.5 / 2^16 / 0.1 ... a negative half rounds away from zero
    assert b.tolist() == [163840, -5, MIN]
    assert arith.layernorm_params(1.0, 1.0, [0.0], [0.0], 0.0)[0] == 0


# ---------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (1 << 30, 1 << 30, 1 << 29),
        (1, 1 << 30, 1),  # +0.5 rounds up
        (-1, 1 << 30, 0),  # -0.5 rounds toward +inf
        (3, -(1 << 30), -1),  # -1.5 -> -1
        (-5, 1 << 30, -2),  # -2.5 -> -2
        (5, 1 << 30, 3),  # 2.5 -> 3
        (MIN, MIN, MAX),  # the one saturating case
        (MIN, MAX, MIN + 1),
        (MAX, MAX, MAX - 1),
        (0, MIN, 0),
    ],
)
def test_srdhm_known(a: int, b: int, expected: int) -> None:
    assert int(arith.srdhm(a, b)) == expected == srdhm_ref(a, b)


def test_srdhm_nosat_wraps() -> None:
    assert int(arith.srdhm(MIN, MIN, saturate=False)) == MIN


@pytest.mark.parametrize(
    ("x", "e", "expected"),
    [
        (5, 1, 3),
        (-5, 1, -3),  # -2.5 -> -3 (away from zero)
        (-3, 1, -2),
        (3, 1, 2),
        (-4, 2, -1),
        (-6, 2, -2),  # -1.5 -> -2
        (-5, 2, -1),  # -1.25 -> -1
        (-7, 2, -2),
        (6, 2, 2),  # 1.5 -> 2
        (123, 0, 123),
        (MIN, 31, -1),
        (MAX, 31, 1),
        (-(1 << 30), 31, -1),  # -0.5 -> -1
        (1 << 30, 31, 1),
        ((1 << 30) - 1, 31, 0),
    ],
)
def test_rdbpot_known(x: int, e: int, expected: int) -> None:
    assert int(arith.rdbpot(x, e)) == expected == rdbpot_ref(x, e)


def test_sat_shl_known() -> None:
    assert arith.sat_shl([1 << 29, 1 << 30, -(1 << 30), -(1 << 30) + 1, 3], [1, 1, 1, 1, 2]).tolist() == [
        1 << 30, MAX, MIN, -(1 << 31) + 2, 12,
    ]  # fmt: skip


def test_requantize_wraps_the_left_shift() -> None:
    # t = wrap32(2^30 · 2^2) = 0: the left shift is a wrapping multiply, not saturating.
    assert int(arith.requantize(1 << 30, 1 << 30, 2)) == 0
    assert int(arith.requantize((1 << 30) + 1, 1 << 30, 2)) == requantize_ref((1 << 30) + 1, 1 << 30, 2) == 2


def test_building_blocks_against_python_ints() -> None:
    rng = np.random.default_rng(1)
    n = 3000
    a = np.concatenate([rng.integers(MIN, MAX + 1, n), rng.integers(-40, 41, n) << rng.integers(0, 26, n)])
    b = rng.integers(MIN, MAX + 1, a.size)
    m = rng.integers(1 << 30, 1 << 31, a.size)
    e = rng.integers(0, 32, a.size)
    s = rng.integers(-31, 31, a.size)
    got_srdhm, got_rdbpot, got_req = arith.srdhm(a, b), arith.rdbpot(a, e), arith.requantize(a, m, s)
    for i in range(a.size):
        ai, bi, mi, ei, si = int(a[i]), int(b[i]), int(m[i]), int(e[i]), int(s[i])
        assert got_srdhm[i] == srdhm_ref(ai, bi)
        assert got_rdbpot[i] == rdbpot_ref(ai, ei)
        assert got_req[i] == requantize_ref(ai, mi, si)


def test_rdbpot_exact_beyond_31() -> None:
    # Extension used by softmax rows whose sum reaches 2^28: the exact rounded quotient.
    x = np.array([MAX, 1, 0, -1, MIN, MIN, MAX])
    e = np.array([32, 40, 33, 32, 32, 33, 62])
    assert arith.rdbpot(x, e).tolist() == [rdbpot_ref(int(v), int(k)) for v, k in zip(x, e)] == [0, 0, 0, 0, -1, 0, 0]


def test_requantize_approximates_real_scale() -> None:
    rng = np.random.default_rng(2)
    v = rng.integers(-(1 << 20), 1 << 20, 5000)
    for real in (0.0007, 0.3, 0.999, 3.5):
        m, s = arith.quantize_multiplier(real)
        got = arith.requantize(v, m, s)
        assert np.all(np.abs(got - v * real) <= 1.0)  # double rounding: within one unit


def test_exp_and_reciprocal_accuracy() -> None:
    # exp(a) for a in Q5.26 and 1/(1+x) for x in Q0.31 against float.
    a = -np.linspace(0, 31.9, 4001)
    got = kernels.exp_on_negative_values(np.round(a * 2**26).astype(np.int64)) / 2**31
    assert np.max(np.abs(got - np.exp(np.round(a * 2**26) / 2**26))) < 3e-7  # gemmlowp-level accuracy
    x = np.linspace(0, 1 - 2**-31, 4001)
    inv = kernels.one_over_one_plus_x(np.floor(x * 2**31).astype(np.int64)) / 2**31  # Q0.31, 1 saturates
    assert np.max(np.abs(inv - 1 / (1 + np.floor(x * 2**31) / 2**31))) < 1e-8


def test_clz32() -> None:
    assert arith.clz32([0, 1, 2, 3, MAX, -1, MIN, 1 << 28]).tolist() == [32, 31, 30, 30, 1, 0, 0, 3]
