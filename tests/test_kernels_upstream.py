"""Upstream CMSIS-NN against the numpy mirror (and so against nnref) on the same random cases.

Runs only when CMSIS_NN_ROOT points at a CMSIS-NN checkout; builds its integer
sources (host pure-C path) into a shared library. Nothing is downloaded.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import cmsis_harness as h
from clib import NNREF_INCLUDE, build_shared_lib, compile_objects, have_compiler, load
from test_kernels_c import write_api_use

ROOT = os.environ.get("CMSIS_NN_ROOT")

pytestmark = [
    pytest.mark.upstream,
    pytest.mark.skipif(not ROOT, reason="CMSIS_NN_ROOT not set"),
    pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not installed"),
]

CASES = settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def upstream_sources(root: Path) -> list[Path]:
    # The integer library, as upstream's CMake builds it without the float API.
    skip = ("_f16.c", "_f32.c", "_flt.c")
    return sorted(p for p in (root / "Source").rglob("*.c") if not p.name.endswith(skip))


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> h.CmsisApi:
    root = Path(str(ROOT))
    if not (root / "Include" / "arm_nnfunctions.h").is_file():
        pytest.fail(f"CMSIS_NN_ROOT={root} has no Include/arm_nnfunctions.h")
    out = tmp_path_factory.mktemp("upstream")
    lib = build_shared_lib(
        upstream_sources(root),
        out,
        name="libcmsis-nn.so",
        include_dirs=[root / "Include"],
        flags=("-std=c11", "-O2"),  # upstream is not -Werror clean under our flags; not ours to fix
    )
    return h.CmsisApi(load(lib))


def test_api_use_compiles_against_upstream_headers(tmp_path: Path) -> None:
    # The same translation unit compiles against both Include dirs, unchanged.
    src = write_api_use(tmp_path)
    for inc in (Path(str(ROOT)) / "Include", NNREF_INCLUDE):
        compile_objects([src], tmp_path / inc.parent.name, include_dirs=[inc], flags=("-std=c99", "-O2", "-Wall"))


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
    # The static inline building blocks of upstream's support header, on tie-heavy inputs.
    src = tmp_path / "shim.c"
    src.write_text(h.shim_source(h.UPSTREAM_HELPERS))
    root = Path(str(ROOT))
    lib = build_shared_lib([src], tmp_path, name="libshim.so", include_dirs=[root / "Include"],
                           flags=("-std=c11", "-O2"))  # fmt: skip
    h.check_helpers(load(lib))


def test_get_buffer_size_host(api: h.CmsisApi) -> None:
    assert api.get_buffer_size(n=17, depth=33) == 0  # non-MVE build


def test_library_is_upstream(api: h.CmsisApi) -> None:
    # Guard against silently testing nnref twice: an upstream-only symbol must be present.
    assert isinstance(api.lib, ctypes.CDLL) and hasattr(api.lib, "arm_vector_sum_s8")
