"""The C kernels (firmware/nnref and firmware/runtime/cisl_kernels.c) against the numpy
mirror (codegen/quant/kernels.py), bit for bit, on random hypothesis cases."""

from __future__ import annotations

import ctypes
import math
import zlib
from ctypes import POINTER, Structure, c_int8, c_int32, c_size_t, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cmsis_harness as h
from clib import (
    CISL_KERNEL_SOURCES,
    NNREF_INCLUDE,
    NNREF_SOURCES,
    RUNTIME_DIR,
    STRICT_FLAGS,
    build_shared_lib,
    compile_objects,
    have_compiler,
    load,
    ptr,
)
from codegen.quant import kernels

pytestmark = [
    pytest.mark.hostc,
    pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not installed"),
]

CASES = settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

I8 = npt.NDArray[np.int8]


class ColRun(Structure):
    _fields_ = [("src_col", c_uint16), ("dst_col", c_uint16), ("count", c_uint16)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("kernels_c")
    path = build_shared_lib(
        [*NNREF_SOURCES, *CISL_KERNEL_SOURCES],
        out,
        name="libcislkernels.so",
        include_dirs=[NNREF_INCLUDE, RUNTIME_DIR],
    )
    cl = load(path)
    p = POINTER
    cl.cisl_layernorm_s8.argtypes = [p(c_int8), p(c_int8), c_uint16, c_uint16, p(c_uint8), c_int32, c_int32,
                                     c_int32, p(c_int32), p(c_int32)]  # fmt: skip
    cl.cisl_layernorm_s8.restype = None
    cl.cisl_fc_s8_s32.argtypes = [p(c_int8), p(c_int8), c_int32, c_uint16, c_uint16, p(c_int32)]
    cl.cisl_fc_s8_s32.restype = None
    cl.cisl_fc_strided_s8.argtypes = [p(c_int8), c_uint16, c_uint16, p(c_int8), c_uint16, c_uint16, p(c_int32),
                                      p(c_int32), p(c_int32), c_int32, c_int32, c_int32, c_int32, p(c_int8)]  # fmt: skip
    cl.cisl_fc_strided_s8.restype = None
    cl.cisl_reduce_requant_s32_s8.argtypes = [p(p(c_int32)), p(c_uint8), c_uint16, p(c_int32), p(c_int32),
                                              p(c_int32), c_int32, c_uint16, p(c_int8)]  # fmt: skip
    cl.cisl_reduce_requant_s32_s8.restype = None
    cl.cisl_gather_s8.argtypes = [p(c_int8), p(c_int8), p(c_uint16), c_uint32]
    cl.cisl_gather_s8.restype = None
    cl.cisl_pack_cols_s8.argtypes = [p(c_int8), c_uint16, p(c_int8), c_uint16, c_uint16, p(ColRun), c_uint16]
    cl.cisl_pack_cols_s8.restype = None
    cl.cisl_fill_cols_s8.argtypes = [p(c_int8), c_uint16, c_uint16, c_uint16, c_uint16, c_int8]
    cl.cisl_fill_cols_s8.restype = None
    cl.cisl_crc32.argtypes = [c_void_p, c_size_t]
    cl.cisl_crc32.restype = c_uint32
    cl.cisl_crc32_update.argtypes = [c_uint32, c_void_p, c_size_t]
    cl.cisl_crc32_update.restype = c_uint32
    cl.cisl_isqrt_u64.argtypes = [c_uint64]
    cl.cisl_isqrt_u64.restype = c_uint32
    return cl


@pytest.fixture(scope="module")
def api(lib: ctypes.CDLL) -> h.CmsisApi:
    return h.CmsisApi(lib)


# ---------------------------------------------------------------------------
# Build hygiene
# ---------------------------------------------------------------------------

API_USE_C = r"""
#include "arm_nnfunctions.h"
/* Uses the types the way generated code does: designated initialisers, const members. */
int8_t in[4], w[8], out[2];
int32_t bias[2] = {1, -1};
int32_t mults[2] = {1 << 30, 1 << 30}, shifts[2] = {-2, -3};
static const uint32_t perm[3] = {0, 2, 1};
int cisl_api_use(void)
{
    const cmsis_nn_context ctx = {NULL, 0};
    const cmsis_nn_fc_params fc = {.input_offset = 1, .filter_offset = 0, .output_offset = -3,
                                   .activation = {.min = -128, .max = 127}};
    const cmsis_nn_per_tensor_quant_params qt = {.multiplier = 1 << 30, .shift = -1};
    const cmsis_nn_per_channel_quant_params qc = {.multiplier = mults, .shift = shifts};
    const cmsis_nn_dims id = {.n = 1, .h = 1, .w = 1, .c = 4}, fd = {.n = 4, .h = 1, .w = 1, .c = 2};
    const cmsis_nn_dims od = {.n = 1, .h = 1, .w = 1, .c = 2};
    const cmsis_nn_bmm_params bmm = {.adj_x = false, .adj_y = false, .fc_params = fc};
    const cmsis_nn_transpose_params tp = {.num_dims = 3, .permutations = perm};
    arm_cmsis_nn_status s = arm_fully_connected_s8(&ctx, &fc, &qt, &id, in, &fd, w, &od, bias, &od, out);
    s |= arm_fully_connected_per_channel_s8(&ctx, &fc, &qc, &id, in, &fd, w, &od, NULL, &od, out);
    s |= arm_batch_matmul_s8(&ctx, &bmm, &qt, &id, in, &id, in, &id, out);
    s |= arm_elementwise_add_s8(in, in, 0, 1 << 30, 0, 0, 1 << 30, 0, 20, out, 0, 1 << 30, -20, -128, 127, 2);
    s |= arm_transpose_s8(in, out, &id, &id, &tp);
    arm_softmax_s8(in, 1, 2, 1 << 30, 23, -248, out);
    return (int)s + arm_fully_connected_s8_get_buffer_size(&fd) + (s == ARM_CMSIS_NN_ARG_ERROR);
}
"""


def write_api_use(tmp: Path) -> Path:
    src = tmp / "api_use.c"
    src.write_text(API_USE_C)
    return src


def test_sources_are_strict_c99_clean(tmp_path: Path) -> None:
    # -pedantic -Werror C99 for the project's own C, plus a translation unit using the API.
    compile_objects(
        [*NNREF_SOURCES, *CISL_KERNEL_SOURCES, write_api_use(tmp_path)],
        tmp_path / "objs",
        include_dirs=[NNREF_INCLUDE, RUNTIME_DIR],
        flags=(*STRICT_FLAGS, "-Wshadow", "-Wconversion", "-Wno-sign-conversion"),
    )


@pytest.mark.skipif(not have_compiler("arm-none-eabi-gcc"), reason="arm-none-eabi-gcc not installed")
@pytest.mark.parametrize("dsp", [True, False], ids=["dsp", "nodsp"])
def test_sources_cross_compile_cortex_m4(tmp_path: Path, dsp: bool) -> None:
    cpu = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
    if not dsp:
        cpu.append("-U__ARM_FEATURE_DSP")
    compile_objects(
        [*NNREF_SOURCES, *CISL_KERNEL_SOURCES, write_api_use(tmp_path)],
        tmp_path / "objs",
        include_dirs=[NNREF_INCLUDE, RUNTIME_DIR],
        flags=(*STRICT_FLAGS, *cpu),
        cc="arm-none-eabi-gcc",
        pic=False,
    )


def test_cisl_kernels_build_alone(tmp_path: Path) -> None:
    # cisl_kernels.c must not need nnref (with CMSIS_NN_ROOT set, nnref is not linked).
    lib = build_shared_lib(
        CISL_KERNEL_SOURCES,
        tmp_path,
        name="libcisl.so",
        include_dirs=[RUNTIME_DIR],  # not the nnref Include dir
        link_flags=["-Wl,--no-undefined"],  # only libc may remain unresolved
    )
    assert hasattr(load(lib), "cisl_layernorm_s8")


# ---------------------------------------------------------------------------
# CMSIS-NN subset (nnref)
# ---------------------------------------------------------------------------


@CASES
@given(h.fc_cases())
def test_fully_connected(api: h.CmsisApi, case: h.FcCase) -> None:
    h.check_fc(api, case)


@CASES
@given(h.bmm_cases())
def test_batch_matmul(api: h.CmsisApi, case: h.BmmCase) -> None:
    h.check_bmm(api, case)


@CASES
@given(h.softmax_cases())
def test_softmax(api: h.CmsisApi, case: h.SoftmaxCase) -> None:
    h.check_softmax(api, case)


@CASES
@given(h.add_cases(any_left_shift=True))
def test_elementwise_add(api: h.CmsisApi, case: h.AddCase) -> None:
    h.check_add(api, case)


@CASES
@given(h.transpose_cases())
def test_transpose(api: h.CmsisApi, case: h.TransposeCase) -> None:
    h.check_transpose(api, case)


def test_transpose_arg_error(api: h.CmsisApi) -> None:
    h.check_transpose_arg_error(api)


def test_fixed_point_helpers(tmp_path: Path) -> None:
    src = tmp_path / "shim.c"
    src.write_text(h.shim_source(h.NNREF_HELPERS))
    lib = build_shared_lib([src], tmp_path, name="libshim.so", include_dirs=[NNREF_INCLUDE, NNREF_SOURCES[0].parent])
    h.check_helpers(load(lib))


def test_get_buffer_size_is_zero(api: h.CmsisApi) -> None:
    assert api.get_buffer_size(n=17, depth=33) == 0


@pytest.mark.parametrize("size", [511, 512, 700, 4095])
def test_softmax_long_uniform_rows(api: h.CmsisApi, size: int) -> None:
    # Uniform rows of >= 512 make the final division 2^32 or more, undefined upstream; nnref and
    # the mirror both use the exact quotient (-128 + round(256 / size)).
    x = np.zeros((2, size), dtype=np.int8)
    x[1, ::3] = 5
    mult, shift, diff_min = 1717986918, 23, -248
    got = api.softmax(x, mult, shift, diff_min)
    np.testing.assert_array_equal(got, kernels.softmax_s8(x, mult, shift, diff_min))
    assert np.all(got[0] == -128 + round(256 / size))


def test_fc_mirror_vectorises_leading_dims(api: h.CmsisApi) -> None:
    rng = np.random.default_rng(1)
    x = h.rng_int8(rng, (3, 4, 19))
    w = h.rng_int8(rng, (11, 19))
    bias = rng.integers(-5000, 5000, 11).astype(np.int32)
    want = kernels.fully_connected_s8(x, w, bias, 7, 0, -3, 1288490189, -9, -128, 127)
    got = api.fully_connected(x.reshape(12, 19), w, bias, 7, 0, -3, 1288490189, -9, (-128, 127))
    np.testing.assert_array_equal(want.reshape(12, 11), got)


# float32 is exact while depth·(128+|in_off|)·(128+|w_off|) < 2^24, i.e. depth <= 511 here
@pytest.mark.parametrize(("depth", "in_off", "w_off"), [(511, 128, 0), (512, 128, 0), (1500, 128, 128)])
def test_fc_float64_sum_path(api: h.CmsisApi, depth: int, in_off: int, w_off: int) -> None:
    # Around and beyond the depth where float32 sums stop being exact the mirror must switch to float64.
    rng = np.random.default_rng(depth)
    x = np.where(rng.random((3, depth)) < 0.95, 127, -128).astype(np.int8)  # sums near the bound
    w = np.where(rng.random((5, depth)) < 0.9, 127, -128).astype(np.int8)
    got = api.fully_connected(x, w, None, in_off, w_off, 0, 1 << 30, -20, (-128, 127))
    np.testing.assert_array_equal(got, kernels.fully_connected_s8(x, w, None, in_off, w_off, 0, 1 << 30, -20))
    s32 = np.zeros(5, dtype=np.int32)
    api.lib.cisl_fc_s8_s32(ptr(x[0], c_int8), ptr(w, c_int8), in_off, depth, 5, ptr(s32, c_int32))
    np.testing.assert_array_equal(s32, kernels.fc_s8_s32(x[0], w, in_off))


def test_mirrors_across_chunks(api: h.CmsisApi) -> None:
    # Inputs larger than one processing chunk of the mirrors.
    rng = np.random.default_rng(5)
    x, w = h.rng_int8(rng, (3000, 37)), h.rng_int8(rng, (23, 37))
    mult = rng.integers(1 << 30, 1 << 31, 23).astype(np.int32)
    shift = rng.integers(-12, -6, 23).astype(np.int32)
    np.testing.assert_array_equal(
        api.fully_connected(x, w, None, 5, 0, -7, mult, shift, (-128, 127)),
        kernels.fully_connected_s8(x, w, None, 5, 0, -7, mult, shift),
    )
    lhs, rhs = h.rng_int8(rng, (1000, 1, 9, 11)), h.rng_int8(rng, (1, 1, 9, 11))
    np.testing.assert_array_equal(
        api.batch_matmul(lhs, rhs, 3, -4, 2, 1518500250, -9, (-128, 127)),
        kernels.batch_matmul_s8(lhs, rhs, 3, -4, 2, 1518500250, -9),
    )
    sm = h.rng_int8(rng, (2000, 77))
    np.testing.assert_array_equal(api.softmax(sm, 1717986918, 23, -248), kernels.softmax_s8(sm, 1717986918, 23, -248))


def test_softmax_mirror_vectorises_leading_dims(api: h.CmsisApi) -> None:
    x = h.rng_int8(np.random.default_rng(2), (2, 3, 5, 9))
    mult, shift, diff_min = 1717986918, 23, -248
    got = api.softmax(x.reshape(-1, 9), mult, shift, diff_min)
    np.testing.assert_array_equal(kernels.softmax_s8(x, mult, shift, diff_min).reshape(-1, 9), got)


# ---------------------------------------------------------------------------
# cisl kernels
# ---------------------------------------------------------------------------


def c_layernorm(
    lib: ctypes.CDLL,
    x: I8,
    valid: npt.NDArray[np.bool_] | None,
    zp_in: int,
    zp_out: int,
    eps_q: int,
    gamma_q: npt.NDArray[np.int32],
    beta_q: npt.NDArray[np.int32],
    in_place: bool = False,
) -> I8:
    rows, cols = x.shape
    v8 = None if valid is None else valid.astype(np.uint8)
    y = x.copy() if in_place else np.full_like(x, 99)
    src = y if in_place else x
    lib.cisl_layernorm_s8(ptr(src, c_int8), ptr(y, c_int8), rows, cols, ptr(v8, c_uint8), zp_in, zp_out, eps_q,
                          ptr(gamma_q, c_int32), ptr(beta_q, c_int32))  # fmt: skip
    return y


@st.composite
def layernorm_cases(draw: st.DrawFn) -> tuple[object, ...]:
    rng = np.random.default_rng(draw(h.SEEDS))
    rows, cols = draw(st.integers(1, 6)), draw(st.integers(1, 70))
    x = h.rng_int8(rng, (rows, cols), narrow=draw(st.booleans()))
    if draw(st.booleans()):
        x[0, :] = x[0, 0]  # a constant row: zero variance
    kind = draw(st.sampled_from(["none", "random", "random", "all_invalid", "one"]))
    valid: npt.NDArray[np.bool_] | None = None
    if kind == "random":
        valid = rng.random(cols) < draw(st.floats(0.2, 0.95))
    elif kind == "all_invalid":
        valid = np.zeros(cols, dtype=bool)
    elif kind == "one":
        valid = np.zeros(cols, dtype=bool)
        valid[int(rng.integers(cols))] = True
    eps_q = draw(st.one_of(st.just(0), st.integers(0, 1 << 16), st.integers(0, (1 << 31) - 1)))
    wide = draw(st.booleans())  # full int32 constants saturate the output; small ones keep it in range
    bound = 1 << 31 if wide else 1 << 21
    gamma_q = rng.integers(-bound, bound, cols, dtype=np.int64).astype(np.int32)
    beta_q = rng.integers(-bound, bound, cols, dtype=np.int64).astype(np.int32)
    zp_in, zp_out = draw(st.integers(-128, 127)), draw(st.integers(-128, 127))
    return x, valid, zp_in, zp_out, eps_q, gamma_q, beta_q


@CASES
@given(layernorm_cases(), st.booleans())
def test_layernorm(lib: ctypes.CDLL, case: tuple[object, ...], in_place: bool) -> None:
    x, valid, zp_in, zp_out, eps_q, gamma_q, beta_q = case
    got = c_layernorm(lib, *case, in_place=in_place)  # type: ignore[arg-type]
    want = kernels.layernorm_s8(x, valid, zp_in, zp_out, eps_q, gamma_q, beta_q)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, want)
    if valid is not None:
        assert np.all(got[:, ~valid] == zp_out)  # type: ignore[index]


def test_layernorm_extreme_rows(lib: ctypes.CDLL) -> None:
    # The C kernel keeps t (normalised * 2^12) in 32 bits: the largest |t| comes from one outlier in
    # the longest row the compiler allows (|x - mean| = sqrt(n - 1) * std).
    rng = np.random.default_rng(5)
    for cols in (2, 255, 4096, 32767):
        x = np.full((2, cols), -128, dtype=np.int8)
        x[0, cols // 2] = 127
        x[1, :] = 127
        x[1, 0] = -128
        for eps_q in (0, 1, (1 << 31) - 1):
            for bound in (1 << 31, 1 << 21):
                gamma_q = rng.integers(-bound, bound, cols, dtype=np.int64).astype(np.int32)
                beta_q = rng.integers(-bound, bound, cols, dtype=np.int64).astype(np.int32)
                case = (x, None, -128, 3, eps_q, gamma_q, beta_q)
                np.testing.assert_array_equal(c_layernorm(lib, *case), kernels.layernorm_s8(*case))  # type: ignore[arg-type]


def test_layernorm_mirror_per_sample_masks(lib: ctypes.CDLL) -> None:
    # One vectorised call with a mask per sample equals one C call per sample.
    rng = np.random.default_rng(3)
    x = h.rng_int8(rng, (5, 4, 13))
    valid = rng.random((5, 13)) < 0.6
    valid[2] = False
    gamma_q = rng.integers(-(1 << 20), 1 << 20, 13).astype(np.int32)
    beta_q = rng.integers(-(1 << 20), 1 << 20, 13).astype(np.int32)
    want = kernels.layernorm_s8(x, valid, -3, 5, 1234, gamma_q, beta_q)
    for b in range(5):
        got = c_layernorm(lib, np.ascontiguousarray(x[b]), valid[b], -3, 5, 1234, gamma_q, beta_q)
        np.testing.assert_array_equal(got, want[b])
    # more samples than one processing chunk of the mirror
    x = h.rng_int8(rng, (2500, 5, 13))
    valid = rng.random((2500, 13)) < 0.6
    want = kernels.layernorm_s8(x, valid, -3, 5, 1234, gamma_q, beta_q)
    for b in range(0, 2500, 7):
        got = c_layernorm(lib, np.ascontiguousarray(x[b]), valid[b], -3, 5, 1234, gamma_q, beta_q)
        np.testing.assert_array_equal(got, want[b])


def test_layernorm_extreme_values(lib: ctypes.CDLL) -> None:
    # Widest intermediates: maximal spread, cols at the documented limit's order, full-range constants.
    cols = 4000
    x = np.where(np.arange(cols) % 2 == 0, -128, 127).astype(np.int8).reshape(1, cols)
    x[0, 0] = 127
    gamma_q = np.full(cols, (1 << 31) - 1, dtype=np.int32)
    beta_q = np.full(cols, -(1 << 31), dtype=np.int32)
    for eps_q in (0, (1 << 31) - 1):
        got = c_layernorm(lib, x, None, 127, -128, eps_q, gamma_q, beta_q)
        np.testing.assert_array_equal(got, kernels.layernorm_s8(x, None, 127, -128, eps_q, gamma_q, beta_q))


@CASES
@given(h.SEEDS, st.integers(1, 300), st.integers(1, 25), h.IN_OFFSETS)
def test_fc_s8_s32(lib: ctypes.CDLL, seed: int, k: int, n_out: int, in_offset: int) -> None:
    rng = np.random.default_rng(seed)
    x, w = h.rng_int8(rng, (k,)), h.rng_int8(rng, (n_out, k))
    out = np.zeros(n_out, dtype=np.int32)
    lib.cisl_fc_s8_s32(ptr(x, c_int8), ptr(w, c_int8), in_offset, k, n_out, ptr(out, c_int32))
    np.testing.assert_array_equal(out, kernels.fc_s8_s32(x, w, in_offset))


def test_fc_s8_s32_wraps(lib: ctypes.CDLL) -> None:
    k = 65535  # 65535 * 255 * 128 > 2^31: the sum wraps
    x = np.full(k, 127, dtype=np.int8)
    w = np.full((2, k), -128, dtype=np.int8)
    w[1] = 127
    out = np.zeros(2, dtype=np.int32)
    lib.cisl_fc_s8_s32(ptr(x, c_int8), ptr(w, c_int8), 128, k, 2, ptr(out, c_int32))
    want = kernels.fc_s8_s32(x, w, 128)
    np.testing.assert_array_equal(out, want)
    assert int(want[0]) == ((k * 255 * -128 + (1 << 31)) % (1 << 32)) - (1 << 31)


@CASES
@given(h.SEEDS, st.integers(1, 5), st.integers(1, 30), st.data())
def test_reduce_requant(lib: ctypes.CDLL, seed: int, nparts: int, n: int, data: st.DataObject) -> None:
    rng = np.random.default_rng(seed)
    wide = data.draw(st.booleans())
    bound = 1 << 31 if wide else 1 << 20
    parts = rng.integers(-bound, bound, (nparts, n), dtype=np.int64).astype(np.int32)
    delivered = None if data.draw(st.booleans()) else rng.random(nparts) < 0.7
    null_part = data.draw(st.integers(-1, nparts - 1))  # a NULL pointer is also "not delivered"
    bias = None if data.draw(st.booleans()) else rng.integers(-bound, bound, n, dtype=np.int64).astype(np.int32)
    mult = np.array([data.draw(h.MULTS) for _ in range(n)], dtype=np.int32)
    shift = np.array([data.draw(h.SHIFTS) for _ in range(n)], dtype=np.int32)
    out_zp = data.draw(h.OUT_OFFSETS)

    row_ptrs = (POINTER(c_int32) * nparts)(
        *[POINTER(c_int32)() if p == null_part else ptr(parts[p], c_int32) for p in range(nparts)]  # type: ignore[misc]
    )
    d8 = None if delivered is None else delivered.astype(np.uint8)
    y = np.zeros(n, dtype=np.int8)
    lib.cisl_reduce_requant_s32_s8(row_ptrs, ptr(d8, c_uint8), nparts, ptr(bias, c_int32), ptr(mult, c_int32),
                                   ptr(shift, c_int32), out_zp, n, ptr(y, c_int8))  # fmt: skip
    eff = np.ones(nparts, dtype=bool) if delivered is None else delivered.copy()
    if null_part >= 0:
        eff[null_part] = False
    np.testing.assert_array_equal(y, kernels.reduce_requant_s32_s8(parts, eff, bias, mult, shift, out_zp))
    # the list form and per-sample masks of the mirror agree with the array form
    both = kernels.reduce_requant_s32_s8(
        [np.stack([parts[p], parts[p]]) for p in range(nparts)], np.stack([eff, eff], axis=1), bias, mult, shift,
        out_zp,
    )  # fmt: skip
    np.testing.assert_array_equal(both, np.stack([y, y]))


@CASES
@given(h.SEEDS, st.integers(1, 300), st.integers(0, 200))
def test_gather(lib: ctypes.CDLL, seed: int, src_len: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    src = h.rng_int8(rng, (src_len,))
    idx = rng.integers(0, src_len, n).astype(np.uint16)
    dst = np.zeros(max(n, 1), dtype=np.int8)
    lib.cisl_gather_s8(ptr(dst, c_int8), ptr(src, c_int8), ptr(idx, c_uint16), n)
    np.testing.assert_array_equal(dst[:n], src[idx])


@CASES
@given(h.SEEDS, st.integers(1, 7), st.integers(1, 40), st.integers(1, 40), st.data())
def test_pack_and_fill_cols(
    lib: ctypes.CDLL, seed: int, rows: int, src_cols: int, dst_cols: int, data: st.DataObject
) -> None:
    rng = np.random.default_rng(seed)
    src = h.rng_int8(rng, (rows, src_cols))
    dst = h.rng_int8(rng, (rows, dst_cols))
    want = dst.copy()
    runs = []
    for _ in range(data.draw(st.integers(0, 4))):
        count = data.draw(st.integers(0, min(src_cols, dst_cols)))
        s0 = data.draw(st.integers(0, src_cols - count))
        d0 = data.draw(st.integers(0, dst_cols - count))
        runs.append((s0, d0, count))
        want[:, d0 : d0 + count] = src[:, s0 : s0 + count]
    run_arr = (ColRun * max(len(runs), 1))(*[ColRun(*r) for r in runs])
    lib.cisl_pack_cols_s8(ptr(dst, c_int8), dst_cols, ptr(src, c_int8), src_cols, rows, run_arr, len(runs))
    np.testing.assert_array_equal(dst, want)

    col = data.draw(st.integers(0, dst_cols - 1))
    count = data.draw(st.integers(0, dst_cols - col))
    value = data.draw(st.integers(-128, 127))
    lib.cisl_fill_cols_s8(ptr(dst, c_int8), dst_cols, rows, col, count, value)
    want[:, col : col + count] = value
    np.testing.assert_array_equal(dst, want)


@CASES
@given(st.binary(min_size=0, max_size=300), st.integers(0, 300))
def test_crc32(lib: ctypes.CDLL, data: bytes, cut: int) -> None:
    cut = min(cut, len(data))
    buf = ctypes.create_string_buffer(data, len(data))
    whole = lib.cisl_crc32(buf, len(data))
    assert whole == zlib.crc32(data) == kernels.crc32(data)
    head = lib.cisl_crc32(buf, cut)
    assert lib.cisl_crc32_update(head, ctypes.byref(buf, cut), len(data) - cut) == whole


def test_crc32_known_value(lib: ctypes.CDLL) -> None:
    assert lib.cisl_crc32(b"123456789", 9) == 0xCBF43926  # the standard CRC-32 check value
    assert kernels.crc32(np.arange(10, dtype=np.int8)) == zlib.crc32(bytes(range(10)))


@CASES
@given(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 2**32).map(lambda r: r * r + (r % 3) - 1)))
def test_isqrt(lib: ctypes.CDLL, v: int) -> None:
    v = min(max(v, 0), 2**64 - 1)
    assert lib.cisl_isqrt_u64(v) == math.isqrt(v)
    if v < 2**63:
        assert int(kernels.isqrt_u64(np.array([v]))[0]) == math.isqrt(v)


def test_isqrt_edges(lib: ctypes.CDLL) -> None:
    for v in [0, 1, 2, 3, 4, 2**62, 2**63 - 1, 2**64 - 1, (2**32 - 1) ** 2, (2**32 - 1) ** 2 - 1]:
        assert lib.cisl_isqrt_u64(v) == math.isqrt(v)
    edges = np.array([0, 1, 3, 2**62, 2**63 - 1, 3037000499**2, 3037000499**2 - 1], dtype=np.int64)
    assert kernels.isqrt_u64(edges).tolist() == [math.isqrt(int(v)) for v in edges]


@CASES
@given(rows=st.integers(1, 9), k=st.integers(1, 40), extra=st.integers(0, 17), n=st.integers(1, 12),
       in_off=st.integers(-127, 128), out_off=st.integers(-128, 127), relu=st.booleans(), seed=st.integers(0, 2**31))
def test_fc_strided_matches_its_mirror(api: h.CmsisApi, rows: int, k: int, extra: int, n: int, in_off: int,
                                       out_off: int, relu: bool, seed: int) -> None:
    """cisl_fc_strided_s8 (an elastic mode's prefix of longer weight rows) equals the fully
    connected layer on w[:, :k], bit for bit; the entries beyond k are never read into the sum."""
    rng = np.random.default_rng(seed)
    x, w = h.rng_int8(rng, (rows, k)), h.rng_int8(rng, (n, k + extra))
    bias = rng.integers(-(1 << 20), 1 << 20, n).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, n).astype(np.int32)
    shift = rng.integers(-14, 2, n).astype(np.int32)
    act_min = max(-128, out_off) if relu else -128
    got = np.zeros((rows, n), dtype=np.int8)
    api.lib.cisl_fc_strided_s8(ptr(x, c_int8), rows, k, ptr(w, c_int8), k + extra, n, ptr(bias, c_int32),
                               ptr(mult, c_int32), ptr(shift, c_int32), in_off, out_off, act_min, 127,
                               ptr(got, c_int8))
    want = kernels.fc_strided_s8(x, w, k, bias, in_off, out_off, mult, shift, act_min, 127)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, kernels.fully_connected_s8(x, w[:, :k], bias, in_off, 0, out_off, mult, shift,
                                                                   act_min, 127))
