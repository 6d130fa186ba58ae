"""The elastic-mode selector: the node's cisl_mode_select (C) and the host's `cisl modes` rule
(codegen.modes.select_mode) give the same mode on every table and constraint set."""

from __future__ import annotations

import ctypes
from ctypes import Structure, c_uint32

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clib import RUNTIME_DIR, build_shared_lib, have_compiler, load
from codegen.modes import NO_LIMIT, select_mode

pytestmark = [pytest.mark.hostc, pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not installed")]


class Profile(Structure):
    _fields_ = [("latency_us", c_uint32), ("energy_nj", c_uint32), ("mse_u", c_uint32)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("mode_select")
    so = load(build_shared_lib([RUNTIME_DIR / "cisl_mode_select.c"], out, name="libmodeselect.so",
                               include_dirs=[RUNTIME_DIR], flags=("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror",
                                                                  "-pedantic", "-fPIC")))
    so.cisl_mode_select.restype = ctypes.c_int
    so.cisl_mode_select.argtypes = [ctypes.POINTER(Profile), ctypes.c_uint8, c_uint32, c_uint32, c_uint32]
    return so


def c_select(lib: ctypes.CDLL, table: list[tuple[int, int, int]], *limits: int) -> int:
    arr = (Profile * len(table))(*[Profile(*row) for row in table])
    return lib.cisl_mode_select(arr, len(table), *limits)


# small value ranges so that ties and exact boundary hits are common
VALUE = st.integers(min_value=0, max_value=20)
LIMIT = st.one_of(st.just(NO_LIMIT), VALUE)


@settings(max_examples=400, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(VALUE, VALUE, VALUE), min_size=1, max_size=8), LIMIT, LIMIT, LIMIT)
def test_node_and_host_choose_the_same_mode(lib: ctypes.CDLL, table, deadline, energy, mse) -> None:
    want = select_mode(table, deadline, energy, mse)
    assert c_select(lib, table, deadline, energy, mse) == want
    if want >= 0:  # the choice meets every limit, and no feasible mode has a lower MSE
        lat, en, err = table[want]
        assert lat <= deadline and en <= energy and err <= mse
        assert all(r[2] >= err for r in table if r[0] <= deadline and r[1] <= energy and r[2] <= mse)
    else:
        assert not any(r[0] <= deadline and r[1] <= energy and r[2] <= mse for r in table)


def test_no_table_and_no_limits(lib: ctypes.CDLL) -> None:
    assert lib.cisl_mode_select(None, 3, NO_LIMIT, NO_LIMIT, NO_LIMIT) == -1
    table = [(30, 50, 7), (20, 40, 9), (10, 30, 12)]
    assert c_select(lib, table, NO_LIMIT, NO_LIMIT, NO_LIMIT) == select_mode(table) == 0
    assert c_select(lib, table, 25, NO_LIMIT, NO_LIMIT) == 1
    assert c_select(lib, table, NO_LIMIT, 29, NO_LIMIT) == -1
