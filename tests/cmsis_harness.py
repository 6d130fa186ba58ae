"""ctypes binding of the 7 CMSIS-NN functions cisl uses, random cases and checks.

Shared by test_kernels_c.py (nnref) and test_kernels_upstream.py (upstream
CMSIS-NN), so that both libraries are compared with the numpy mirror on the same
cases. A case is drawn by a hypothesis strategy; data arrays come from a numpy
generator seeded by a drawn integer (cheap, and deterministic under
``derandomize=True``).
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_bool, c_int8, c_int32, c_uint32, c_void_p
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from hypothesis import strategies as st

from clib import ptr
from codegen.quant import arith, kernels

I8 = npt.NDArray[np.int8]


class Context(Structure):
    _fields_ = [("buf", c_void_p), ("size", c_int32)]


class Dims(Structure):
    _fields_ = [("n", c_int32), ("h", c_int32), ("w", c_int32), ("c", c_int32)]


class Activation(Structure):
    _fields_ = [("min", c_int32), ("max", c_int32)]


class FcParams(Structure):
    _fields_ = [
        ("input_offset", c_int32),
        ("filter_offset", c_int32),
        ("output_offset", c_int32),
        ("activation", Activation),
    ]


class PerTensorQuant(Structure):
    _fields_ = [("multiplier", c_int32), ("shift", c_int32)]


class PerChannelQuant(Structure):
    _fields_ = [("multiplier", POINTER(c_int32)), ("shift", POINTER(c_int32))]


class BmmParams(Structure):
    _fields_ = [("adj_x", c_bool), ("adj_y", c_bool), ("fc_params", FcParams)]


class TransposeParams(Structure):
    _fields_ = [("num_dims", c_int32), ("permutations", POINTER(c_uint32))]


ARM_CMSIS_NN_SUCCESS = 0
ARM_CMSIS_NN_ARG_ERROR = -1


def _dims(*v: int) -> Dims:
    v4 = list(v) + [1] * (4 - len(v))
    return Dims(*v4)


class CmsisApi:
    """Typed wrappers around a shared library exporting the CMSIS-NN functions."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        p = POINTER
        lib.arm_fully_connected_s8.argtypes = [
            p(Context), p(FcParams), p(PerTensorQuant), p(Dims), p(c_int8), p(Dims), p(c_int8),
            p(Dims), p(c_int32), p(Dims), p(c_int8),
        ]  # fmt: skip
        lib.arm_fully_connected_s8.restype = c_int32
        lib.arm_fully_connected_per_channel_s8.argtypes = [
            p(Context), p(FcParams), p(PerChannelQuant), p(Dims), p(c_int8), p(Dims), p(c_int8),
            p(Dims), p(c_int32), p(Dims), p(c_int8),
        ]  # fmt: skip
        lib.arm_fully_connected_per_channel_s8.restype = c_int32
        lib.arm_fully_connected_s8_get_buffer_size.argtypes = [p(Dims)]
        lib.arm_fully_connected_s8_get_buffer_size.restype = c_int32
        lib.arm_batch_matmul_s8.argtypes = [
            p(Context), p(BmmParams), p(PerTensorQuant), p(Dims), p(c_int8), p(Dims), p(c_int8), p(Dims), p(c_int8),
        ]  # fmt: skip
        lib.arm_batch_matmul_s8.restype = c_int32
        lib.arm_softmax_s8.argtypes = [p(c_int8), c_int32, c_int32, c_int32, c_int32, c_int32, p(c_int8)]
        lib.arm_softmax_s8.restype = None
        lib.arm_elementwise_add_s8.argtypes = [p(c_int8), p(c_int8)] + [c_int32] * 7 + [p(c_int8)] + [c_int32] * 6
        lib.arm_elementwise_add_s8.restype = c_int32
        lib.arm_transpose_s8.argtypes = [p(c_int8), p(c_int8), p(Dims), p(Dims), p(TransposeParams)]
        lib.arm_transpose_s8.restype = c_int32

    def fully_connected(
        self,
        x: I8,
        w: I8,
        bias: npt.NDArray[np.int32] | None,
        in_off: int,
        w_off: int,
        out_off: int,
        mult: int | npt.NDArray[np.int32],
        shift: int | npt.NDArray[np.int32],
        act: tuple[int, int],
    ) -> I8:
        batch, depth = x.shape
        n = w.shape[0]
        out = np.zeros((batch, n), dtype=np.int8)
        ctx = Context(None, 0)
        fc = FcParams(in_off, w_off, out_off, Activation(*act))
        args = (
            _dims(batch, 1, 1, depth), ptr(x, c_int8), _dims(depth, 1, 1, n), ptr(w, c_int8),
            _dims(1, 1, 1, n), ptr(bias, c_int32), _dims(batch, 1, 1, n), ptr(out, c_int8),
        )  # fmt: skip
        if isinstance(mult, np.ndarray):
            assert isinstance(shift, np.ndarray)
            q = PerChannelQuant(ptr(mult, c_int32), ptr(shift, c_int32))  # type: ignore[arg-type]
            rc = self.lib.arm_fully_connected_per_channel_s8(ctypes.byref(ctx), ctypes.byref(fc), ctypes.byref(q),
                                                             *_byref_dims(args))  # fmt: skip
        else:
            qt = PerTensorQuant(int(mult), int(shift))
            rc = self.lib.arm_fully_connected_s8(ctypes.byref(ctx), ctypes.byref(fc), ctypes.byref(qt),
                                                 *_byref_dims(args))  # fmt: skip
        assert rc == ARM_CMSIS_NN_SUCCESS
        return out

    def get_buffer_size(self, n: int, depth: int) -> int:
        d = _dims(depth, 1, 1, n)
        return int(self.lib.arm_fully_connected_s8_get_buffer_size(ctypes.byref(d)))

    def batch_matmul(
        self, lhs: I8, rhs: I8, lhs_off: int, rhs_off: int, out_off: int, mult: int, shift: int, act: tuple[int, int]
    ) -> I8:
        assert lhs.ndim == 4 and rhs.ndim == 4
        out_n, out_h = max(lhs.shape[0], rhs.shape[0]), max(lhs.shape[1], rhs.shape[1])
        m, n = lhs.shape[2], rhs.shape[2]
        out = np.zeros((out_n, out_h, m, n), dtype=np.int8)
        ctx = Context(None, 0)
        bmm = BmmParams(False, False, FcParams(lhs_off, rhs_off, out_off, Activation(*act)))
        q = PerTensorQuant(mult, shift)
        ld, rd, od = Dims(*lhs.shape), Dims(*rhs.shape), Dims(out_n, out_h, m, n)
        rc = self.lib.arm_batch_matmul_s8(
            ctypes.byref(ctx), ctypes.byref(bmm), ctypes.byref(q),
            ctypes.byref(ld), ptr(lhs, c_int8), ctypes.byref(rd), ptr(rhs, c_int8), ctypes.byref(od), ptr(out, c_int8),
        )  # fmt: skip
        assert rc == ARM_CMSIS_NN_SUCCESS
        return out

    def softmax(self, x: I8, mult: int, shift: int, diff_min: int) -> I8:
        rows, size = x.shape
        out = np.zeros_like(x)
        self.lib.arm_softmax_s8(ptr(x, c_int8), rows, size, mult, shift, diff_min, ptr(out, c_int8))
        return out

    def add(self, a: I8, b: I8, p: dict[str, int]) -> I8:
        out = np.zeros_like(a)
        rc = self.lib.arm_elementwise_add_s8(
            ptr(a, c_int8), ptr(b, c_int8),
            p["in1_offset"], p["in1_mult"], p["in1_shift"], p["in2_offset"], p["in2_mult"], p["in2_shift"],
            p["left_shift"], ptr(out, c_int8), p["out_offset"], p["out_mult"], p["out_shift"],
            p["act_min"], p["act_max"], a.size,
        )  # fmt: skip
        assert rc == ARM_CMSIS_NN_SUCCESS
        return out

    def transpose(self, x: I8, perm: tuple[int, ...]) -> tuple[int, I8]:
        """Returns (status, output); output is shaped like np.transpose(x, perm)."""
        # (an out-of-range entry, used to provoke ARG_ERROR, gets extent 1)
        out_shape = tuple(x.shape[i] if i < x.ndim else 1 for i in perm) if len(perm) > 2 else x.shape[::-1]
        out = np.zeros(out_shape, dtype=np.int8)
        perm_arr = np.asarray(perm, dtype=np.uint32)
        tp = TransposeParams(len(perm), ptr(perm_arr, c_uint32))  # type: ignore[arg-type]
        ind, outd = Dims(*(list(x.shape) + [1] * (4 - x.ndim))), Dims(*(list(out_shape) + [1] * (4 - x.ndim)))
        rc = self.lib.arm_transpose_s8(ptr(x, c_int8), ptr(out, c_int8), ctypes.byref(ind), ctypes.byref(outd),
                                       ctypes.byref(tp))  # fmt: skip
        return int(rc), out


def _byref_dims(args: tuple[object, ...]) -> list[object]:
    return [ctypes.byref(a) if isinstance(a, Dims) else a for a in args]


# ---------------------------------------------------------------------------
# Random cases
# ---------------------------------------------------------------------------

SEEDS = st.integers(0, 2**32 - 1)
IN_OFFSETS = st.integers(-127, 128)  # -zero point of an int8 input
OUT_OFFSETS = st.integers(-128, 127)  # +zero point of an int8 output
MULTS = st.one_of(st.integers(1 << 30, (1 << 31) - 1), st.sampled_from([1 << 30, (1 << 31) - 1]))
# Mostly shifts that keep outputs in range, plus the whole legal range (negative and positive).
SHIFTS = st.one_of(st.integers(-14, -4), st.integers(-31, 30))


@st.composite
def activations(draw: st.DrawFn) -> tuple[int, int]:
    if draw(st.booleans()):
        return -128, 127
    lo = draw(st.integers(-128, 127))
    return lo, draw(st.integers(lo, 127))


# Tie-heavy requantisation: simple multipliers and small shifts on small accumulators.
TIE_MULTS = st.sampled_from([1 << 30, 3 << 29, (1 << 31) - 1, 1518500250])
TIE_SHIFTS = st.integers(-4, 1)


def near_zero_point(rng: np.random.Generator, shape: tuple[int, ...], offset: int) -> I8:
    """int8 values v with v + offset in [-3, 3] (small accumulators, unsaturated outputs)."""
    return np.clip(rng.integers(-3, 4, size=shape) - offset, -128, 127).astype(np.int8)


def rng_int8(rng: np.random.Generator, shape: tuple[int, ...], narrow: bool = False) -> I8:
    """Random int8 data: full range, or (narrow) a small random window to get ties and small variances."""
    if narrow:
        lo = int(rng.integers(-128, 124))
        return rng.integers(lo, lo + int(rng.integers(1, 5)), size=shape).astype(np.int8)
    return rng.integers(-128, 128, size=shape).astype(np.int8)


@dataclass
class FcCase:
    x: I8
    w: I8
    bias: npt.NDArray[np.int32] | None
    in_off: int
    w_off: int
    out_off: int
    mult: int | npt.NDArray[np.int32]
    shift: int | npt.NDArray[np.int32]
    act: tuple[int, int]


@st.composite
def fc_cases(draw: st.DrawFn) -> FcCase:
    rng = np.random.default_rng(draw(SEEDS))
    batch, depth, n = draw(st.integers(1, 5)), draw(st.integers(1, 45)), draw(st.integers(1, 23))
    per_channel = draw(st.booleans())
    w_off = draw(st.one_of(st.just(0), IN_OFFSETS))
    bias_kind = draw(st.sampled_from(["none", "small", "full"]))
    bias: npt.NDArray[np.int32] | None = None
    if bias_kind == "small":
        bias = rng.integers(-(1 << 16), 1 << 16, size=n).astype(np.int32)
    elif bias_kind == "full":  # exercises the int32 wrap of the accumulator
        bias = rng.integers(-(1 << 31), 1 << 31, size=n, dtype=np.int64).astype(np.int32)
    ties = draw(st.booleans())
    mults, shifts = (TIE_MULTS, TIE_SHIFTS) if ties else (MULTS, SHIFTS)
    if per_channel:
        mult: int | npt.NDArray[np.int32] = np.array([draw(mults) for _ in range(n)], dtype=np.int32)
        shift: int | npt.NDArray[np.int32] = np.array([draw(shifts) for _ in range(n)], dtype=np.int32)
    else:
        mult, shift = draw(mults), draw(shifts)
    in_off = draw(IN_OFFSETS)
    if ties:
        x, w = near_zero_point(rng, (batch, depth), in_off), near_zero_point(rng, (n, depth), w_off)
        bias = None if bias is None else (bias % 64 - 32).astype(np.int32)
    else:
        x, w = rng_int8(rng, (batch, depth)), rng_int8(rng, (n, depth))
    return FcCase(x, w, bias, in_off, w_off, draw(OUT_OFFSETS), mult, shift, draw(activations()))


def check_fc(api: CmsisApi, c: FcCase) -> None:
    got = api.fully_connected(c.x, c.w, c.bias, c.in_off, c.w_off, c.out_off, c.mult, c.shift, c.act)
    want = kernels.fully_connected_s8(c.x, c.w, c.bias, c.in_off, c.w_off, c.out_off, c.mult, c.shift, *c.act)
    np.testing.assert_array_equal(got, want)


@dataclass
class BmmCase:
    lhs: I8
    rhs: I8
    lhs_off: int
    rhs_off: int
    out_off: int
    mult: int
    shift: int
    act: tuple[int, int]


@st.composite
def bmm_cases(draw: st.DrawFn) -> BmmCase:
    rng = np.random.default_rng(draw(SEEDS))
    b, h = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    m, n, k = draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(st.integers(1, 37))
    # Either side may have 1 in a batch dimension (broadcast), as CMSIS-NN supports.
    lb, rb = draw(st.sampled_from([(b, b), (1, b), (b, 1)]))
    lh, rh = draw(st.sampled_from([(h, h), (1, h), (h, 1)]))
    lo, ro = draw(IN_OFFSETS), draw(IN_OFFSETS)
    if draw(st.booleans()):  # tie-heavy
        lhs, rhs = near_zero_point(rng, (lb, lh, m, k), lo), near_zero_point(rng, (rb, rh, n, k), ro)
        mult, shift = draw(TIE_MULTS), draw(TIE_SHIFTS)
    else:
        lhs, rhs = rng_int8(rng, (lb, lh, m, k)), rng_int8(rng, (rb, rh, n, k))
        mult, shift = draw(MULTS), draw(SHIFTS)
    return BmmCase(lhs, rhs, lo, ro, draw(OUT_OFFSETS), mult, shift, draw(activations()))


def check_bmm(api: CmsisApi, c: BmmCase) -> None:
    got = api.batch_matmul(c.lhs, c.rhs, c.lhs_off, c.rhs_off, c.out_off, c.mult, c.shift, c.act)
    want = kernels.batch_matmul_s8(c.lhs, c.rhs, c.lhs_off, c.rhs_off, c.out_off, c.mult, c.shift, *c.act)
    np.testing.assert_array_equal(got, want)


@dataclass
class SoftmaxCase:
    x: I8
    mult: int
    shift: int
    diff_min: int


@st.composite
def softmax_cases(draw: st.DrawFn) -> SoftmaxCase:
    rng = np.random.default_rng(draw(SEEDS))
    rows, size = draw(st.integers(1, 6)), draw(st.integers(1, 77))
    # Input scales from tiny (everything within diff_min) to large (most entries cut off).
    scale = draw(st.floats(1e-3, 2.0))
    beta = draw(st.sampled_from([1.0, 1.0, 0.125, 3.7]))
    mult, shift, diff_min = arith.softmax_params(scale, beta)
    return SoftmaxCase(rng_int8(rng, (rows, size), narrow=draw(st.booleans())), mult, shift, diff_min)


def check_softmax(api: CmsisApi, c: SoftmaxCase) -> None:
    got = api.softmax(c.x, c.mult, c.shift, c.diff_min)
    want = kernels.softmax_s8(c.x, c.mult, c.shift, c.diff_min)
    np.testing.assert_array_equal(got, want)


@dataclass
class AddCase:
    a: I8
    b: I8
    params: dict[str, int]


@st.composite
def add_cases(draw: st.DrawFn, any_left_shift: bool = False) -> AddCase:
    rng = np.random.default_rng(draw(SEEDS))
    size = draw(st.integers(1, 77))
    s1, s2 = draw(st.floats(1e-3, 1.0)), draw(st.floats(1e-3, 1.0))
    s_out = (s1 + s2) * draw(st.floats(0.3, 3.0))
    p = arith.add_params(s1, s2, s_out)
    if any_left_shift:  # the C path accepts any left shift (the M4 DSP path needs >= 16, see notes §10)
        p["left_shift"] = draw(st.integers(0, 22))
    act_min, act_max = draw(activations())
    p.update(in1_offset=draw(IN_OFFSETS), in2_offset=draw(IN_OFFSETS), out_offset=draw(OUT_OFFSETS),
             act_min=act_min, act_max=act_max)  # fmt: skip
    return AddCase(rng_int8(rng, (size,)), rng_int8(rng, (size,)), p)


def check_add(api: CmsisApi, c: AddCase) -> None:
    got = api.add(c.a, c.b, c.params)
    want = kernels.elementwise_add_s8(c.a, c.b, **c.params)
    np.testing.assert_array_equal(got, want)


@dataclass
class TransposeCase:
    x: I8
    perm: tuple[int, ...]


@st.composite
def transpose_cases(draw: st.DrawFn) -> TransposeCase:
    rng = np.random.default_rng(draw(SEEDS))
    ndim = draw(st.sampled_from([2, 3, 4]))
    shape = tuple(draw(st.integers(1, 7)) for _ in range(ndim))
    perm = tuple(draw(st.permutations(range(ndim))))
    return TransposeCase(rng_int8(rng, shape), perm)


def check_transpose(api: CmsisApi, c: TransposeCase) -> None:
    rc, got = api.transpose(c.x, c.perm)
    assert rc == ARM_CMSIS_NN_SUCCESS
    # num_dims 2 is always the matrix transpose (upstream does not read the permutation).
    want = c.x.T if c.x.ndim == 2 else np.transpose(c.x, c.perm)
    np.testing.assert_array_equal(got, want)


def check_transpose_arg_error(api: CmsisApi) -> None:
    x = np.arange(24, dtype=np.int8).reshape(2, 3, 4)
    assert api.transpose(x, (0, 3, 1))[0] == ARM_CMSIS_NN_ARG_ERROR
    x4 = np.arange(24, dtype=np.int8).reshape(1, 2, 3, 4)
    assert api.transpose(x4, (0, 1, 4, 2))[0] == ARM_CMSIS_NN_ARG_ERROR


# ---------------------------------------------------------------------------
# Fixed-point building blocks, called through a small shim around the
# (static inline) helpers of a library's support header
# ---------------------------------------------------------------------------

SHIM_TEMPLATE = """
#include <stdint.h>
#include "{header}"
#define LOOP1(name, call) void shim_##name(const int32_t *a, int32_t *out, int32_t n) \\
    {{ int32_t i; for (i = 0; i < n; i++) out[i] = call; }}
#define LOOP2(name, call) void shim_##name(const int32_t *a, const int32_t *b, int32_t *out, int32_t n) \\
    {{ int32_t i; for (i = 0; i < n; i++) out[i] = call; }}
#define LOOP3(name, call) \\
    void shim_##name(const int32_t *a, const int32_t *b, const int32_t *c, int32_t *out, int32_t n) \\
    {{ int32_t i; for (i = 0; i < n; i++) out[i] = call; }}
LOOP2(srdhm, {srdhm}(a[i], b[i]))
LOOP2(srdhm_nosat, {srdhm_nosat}(a[i], b[i]))
LOOP2(rdbpot, {rdbpot}(a[i], b[i]))
LOOP2(sat_shl, {sat_shl}(a[i], b[i]))
LOOP3(requantize, {requantize}(a[i], b[i], c[i]))
LOOP1(exp, {exp}(a[i]))
LOOP1(one_over, {one_over}(a[i]))
"""

UPSTREAM_HELPERS = dict(
    header="arm_nnsupportfunctions.h",
    srdhm="arm_nn_doubling_high_mult",
    srdhm_nosat="arm_nn_doubling_high_mult_no_sat",
    rdbpot="arm_nn_divide_by_power_of_two",
    sat_shl="arm_nn_mult_by_power_of_two",
    requantize="arm_nn_requantize",
    exp="arm_nn_exp_on_negative_values",
    one_over="arm_nn_one_over_one_plus_x_for_x_in_0_1",
)

NNREF_HELPERS = dict(
    header="nnref_support.h",
    srdhm="nnref_srdhm",
    srdhm_nosat="nnref_srdhm_nosat",
    rdbpot="nnref_rdbpot",
    sat_shl="nnref_sat_shl",
    requantize="nnref_requantize",
    exp="nnref_exp_on_negative",
    one_over="nnref_one_over_one_plus_x",
)


def shim_source(names: dict[str, str]) -> str:
    return SHIM_TEMPLATE.format(**names)


def _call(lib: ctypes.CDLL, name: str, *args: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    arrs = [np.ascontiguousarray(a, dtype=np.int32) for a in args]
    out = np.zeros(arrs[0].shape, dtype=np.int32)
    getattr(lib, "shim_" + name)(*[ptr(a, c_int32) for a in arrs], ptr(out, c_int32), c_int32(out.size))
    return out.astype(np.int64)


def helper_values(rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
    """int32 values rich in rounding ties: random, k·2^j and k·2^j ± 1, and the extremes."""
    full = rng.integers(-(1 << 31), 1 << 31, n, dtype=np.int64)
    j = rng.integers(0, 31, n)
    k = rng.integers(-7, 8, n)
    pow2 = np.clip(k << j, -(1 << 31), (1 << 31) - 1) + rng.integers(-1, 2, n)
    small = rng.integers(-300, 301, n)
    edges = np.array([0, 1, -1, 2, -2, 3, -3, (1 << 31) - 1, -(1 << 31), -(1 << 31) + 1, 1 << 30, -(1 << 30)])
    v = np.concatenate([full, np.clip(pow2, -(1 << 31), (1 << 31) - 1), small, edges])
    return v


def check_helpers(lib: ctypes.CDLL, seed: int = 0, n: int = 20000) -> None:
    """Every fixed-point building block of the C library against codegen.quant (tie-heavy inputs)."""
    rng = np.random.default_rng(seed)
    a = helper_values(rng, n)
    b = rng.permutation(helper_values(rng, n))[: a.size]
    mults = np.concatenate([rng.integers(1 << 30, 1 << 31, a.size - 3), [1 << 30, 3 << 29, (1 << 31) - 1]])
    mults = rng.permutation(mults)

    np.testing.assert_array_equal(_call(lib, "srdhm", a, b), arith.srdhm(a, b))
    np.testing.assert_array_equal(_call(lib, "srdhm_nosat", a, mults), arith.srdhm(a, mults, saturate=False))
    ab_min = np.array([-(1 << 31)])
    np.testing.assert_array_equal(_call(lib, "srdhm", ab_min, ab_min), [(1 << 31) - 1])
    e = rng.integers(0, 32, a.size)
    np.testing.assert_array_equal(_call(lib, "rdbpot", a, e), arith.rdbpot(a, e))
    e12 = rng.integers(1, 3, a.size)
    np.testing.assert_array_equal(_call(lib, "sat_shl", a, e12), arith.sat_shl(a, e12))
    shifts = rng.integers(-31, 31, a.size)
    np.testing.assert_array_equal(_call(lib, "requantize", a, mults, shifts), arith.requantize(a, mults, shifts))
    small = rng.integers(-300, 301, a.size)  # typical accumulators: ties with small shifts
    np.testing.assert_array_equal(
        _call(lib, "requantize", small, mults, shifts % 5 - 4), arith.requantize(small, mults, shifts % 5 - 4)
    )
    neg = -np.abs(a)
    neg = np.where(neg < -(1 << 31), -(1 << 31), neg)
    np.testing.assert_array_equal(_call(lib, "exp", neg), kernels.exp_on_negative_values(neg))
    x01 = np.abs(a) & 0x7FFFFFFF
    np.testing.assert_array_equal(_call(lib, "one_over", x01), kernels.one_over_one_plus_x(x01))
