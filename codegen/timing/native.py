"""The cycle model's block and flash-read hooks in C: the same counts as engine.Emulator's, 3-4x sooner.

:class:`engine.Emulator` counts cycles in two Python hooks that unicorn calls for every translation
block and every data read from flash. For one inference of a 4-node split that is 1.6 M + 0.8 M calls
and about 80 % of the node's time on the cycle model. :class:`NativeEmulator` registers the C versions
of those hooks (``cycle_hooks.c``, built once with gcc like the Mixer library) and keeps its counters
in a C struct; Python still decodes and costs each new block once, runs the replaced board functions
and the call-back trampolines (the C hook hands those addresses back to it), and reads the counters
through the same attributes as before (``central_total``, ``counts``, ...). Every count is the Python
hooks' exactly (tests/test_cycle_hooks.py compares them on real images).

:func:`new_emulator` gives the C hooks where they can be built and loaded, the Python ones otherwise
(no gcc, another unicorn binding) or when ``CISL_CYCLE_HOOKS=python``. The emulated SoC
(nrf52840_soc.py) uses them too: the C hook stops at its quantum's end (``stop_at``) and, while
``python_first`` is set, hands each block to its loop skips first (``pre``); else it records a clock
loop's path blocks for them (``path``).
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import weakref
from ctypes import POINTER, Structure, c_double, c_int32, c_int64, c_uint8, c_uint32, c_uint64, c_void_p
from pathlib import Path
from collections.abc import Callable, Iterator, Mapping

from unicorn import UC_HOOK_BLOCK, UC_HOOK_MEM_READ

from ..errors import UserError
from ..hostlib import shared_library
from .engine import CALLBACK_RETURN, EXIT, Counts, Emulator, Image
from .m4cost import Block
from .memsystem import MemoryModel

_COUNT_FIELDS = ("insns", "low", "central", "high", "taken_branches", "flash_reads", "flash_line_changes",
                 "icache_misses")


class _Counts(Structure):
    _fields_ = [("insns", c_int64), ("low", c_double), ("central", c_double), ("high", c_double),
                ("taken_branches", c_int64), ("flash_reads", c_int64), ("flash_line_changes", c_int64),
                ("icache_misses", c_int64)]


PATH_MAX_BLOCKS = 16   # cycle_hooks.c's: clock-loop path blocks it records for the SoC's Python, at most


class _State(Structure):
    """cycle_hooks.c's cy_state, field for field."""
    _fields_ = [("central_total", c_double), ("wait_central", c_double),
                ("insns_total", c_int64), ("max_insns", c_int64),
                ("region", c_int32), ("in_callback", c_int32), ("over_limit", c_int32), ("prev_valid", c_int32),
                ("prev_address", c_uint64), ("prev_fallthrough", c_uint64), ("prev_branch", c_int32),
                ("capacity", c_int32), ("n_touched", c_int32),
                ("counts", POINTER(_Counts)), ("touched", POINTER(c_uint8)), ("touch_log", POINTER(c_int32)),
                ("flash_line_bits", c_int32), ("last_flash_line", c_int64),
                ("ic_on", c_int32), ("ic_line_bits", c_int32), ("ic_sets", c_int32), ("ic_ways", c_int32),
                ("ic_lines", POINTER(c_int64)), ("ic_fill", POINTER(c_int32)),
                ("ic_hits", c_int64), ("ic_misses", c_int64),
                ("table", c_void_p), ("table_mask", c_uint64), ("table_used", c_uint64),
                ("slow", c_void_p), ("stop", c_void_p),
                ("stop_at", c_double), ("python_first", c_int32), ("pre", c_void_p),
                ("tick", c_void_p), ("tick_left", c_int64),
                ("path_room", c_int32), ("path_len", c_int32), ("path", c_uint64 * PATH_MAX_BLOCKS)]


# One region's counts, and the two totals, as bytes: the SoC's loop skips read them at every pass they
# compare (~10^5 a second), and one struct unpack is ~7x sooner than the fields' ctypes getattrs.
_COUNTS_BYTES = struct.Struct("=qdddqqqq")   # _Counts, field for field
_TOTALS_BYTES = struct.Struct("=d8xq")       # _State.central_total, (wait_central), insns_total: read only
assert _COUNTS_BYTES.size == ctypes.sizeof(_Counts) and _State.insns_total.offset == 16

_SLOW = ctypes.CFUNCTYPE(None, c_uint64, c_uint32)
PRE_HOOK = ctypes.CFUNCTYPE(c_int32, c_uint64, c_uint32)
_TICK = ctypes.CFUNCTYPE(None)
_LIB: ctypes.CDLL | None = None
_UNAVAILABLE: str | None = None


def library() -> ctypes.CDLL | None:
    """cycle_hooks.c as a shared library, or None where it cannot be built or loaded (say why:
    :func:`unavailable`)."""
    global _LIB, _UNAVAILABLE
    if _LIB is not None or _UNAVAILABLE is not None:
        return _LIB
    src = Path(__file__).with_name("cycle_hooks.c")
    try:
        lib = ctypes.CDLL(str(shared_library("cislcycles", [src], purpose="for the cycle model's C hooks")))
    except (UserError, OSError, subprocess.CalledProcessError) as e:
        _UNAVAILABLE = str(e)
        return None
    st = POINTER(_State)
    for fn, res, args in [
        ("cy_init_table", c_int32, [st, c_uint64]), ("cy_free_table", None, [st]),
        ("cy_add_block", c_int32, [st, c_uint64, c_uint32, c_uint32, c_double, c_double, c_double, c_int32, c_uint64,
                                   c_int32, c_int32, c_int32]),
        ("cy_counts_of", POINTER(_Counts), [st, c_int32, c_int32]),
    ]:
        f = getattr(lib, fn)
        f.restype, f.argtypes = res, args
    _LIB = lib
    return lib


def unavailable() -> str | None:
    """Why the C hooks are not used, or None."""
    library()
    return _UNAVAILABLE


def _uc_internals():
    """unicorn's C library and its hook-handle type (what registering C hooks needs), or None with
    another binding."""
    try:
        from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
    except ImportError:
        return None
    return (uclib, uc_hook_h) if hasattr(uclib, "uc_hook_add") and hasattr(uclib, "uc_emu_stop") else None


def hooks_in_c() -> bool:
    """Whether the cycle model runs on the C hooks here (else on the Python ones)."""
    return os.environ.get("CISL_CYCLE_HOOKS", "") != "python" and library() is not None and _uc_internals() is not None


def new_emulator(image: Image, memory: MemoryModel, max_insns: int = 2_000_000_000) -> Emulator:
    """The cycle model's emulator: C hooks where available, else Python ones (identical counts)."""
    return NativeEmulator(image, memory, max_insns) if hooks_in_c() else Emulator(image, memory, max_insns)


class StateField:
    """An emulator attribute kept in the C hooks' struct (``obj._st``) under the same name."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(obj._st, self.name)

    def __set__(self, obj, value) -> None:
        setattr(obj._st, self.name, value)


class _CountsView(Mapping):
    """An emulator's ``counts`` (or ``comm_counts``) read from the C side: the regions met so far, in
    the order they were met (as the Python hooks' defaultdict), each a fresh :class:`Counts`."""

    def __init__(self, em: "NativeEmulator", comm: bool):
        self._em, self._comm = em, comm

    def _slot(self, region: object) -> int | None:
        em = self._em
        i = em._region_index.get(region)
        if i is None:
            return None
        i += em._st.capacity if self._comm else 0
        return i if em._touched_arr[i] else None

    def __getitem__(self, region: object) -> Counts:
        i = self._slot(region)
        if i is None:
            raise KeyError(region)
        c = self._em._counts_arr[i]
        return Counts(*(getattr(c, f) for f in _COUNT_FIELDS))

    def __contains__(self, region: object) -> bool:
        return self._slot(region) is not None

    def __iter__(self) -> Iterator[object]:
        em = self._em
        cap = em._st.capacity
        for k in range(em._st.n_touched):
            i = em._touch_log_arr[k]
            if (i >= cap) == self._comm:
                yield em._regions[i - cap if self._comm else i]

    def __len__(self) -> int:
        return sum(1 for _ in self)


class NativeEmulator(Emulator):
    """:class:`Emulator` with its block and flash-read hooks in C (cycle_hooks.c)."""

    INITIAL_REGIONS = 64   # the regions' table doubles when more are met
    IC_ON = {True: 1, False: 2}   # cy_state.ic_on for a present cache, on / off (IC_DISABLED)

    def _init_accounting(self) -> None:
        lib = library()
        if lib is None:
            raise RuntimeError(f"the cycle model's C hooks are unavailable: {_UNAVAILABLE}")
        self._lib = lib
        self._st = _State()
        self._st_bytes = memoryview(self._st).cast("B")
        self._hook_error: BaseException | None = None
        self._mmio_fns: list[tuple] = []   # map_mmio's callbacks
        self._regions: list[object] = [None]
        self._region_index: dict[object, int] = {None: 0}
        self._grow_regions(self.INITIAL_REGIONS)
        self._st.max_insns = min(self.max_insns, (1 << 63) - 1)
        self._st.wait_central = self._wait_central
        self._st.flash_line_bits = self.memory.flash_line_bits
        ic = self.memory.icache
        if ic is not None:
            self._ic_lines = (c_int64 * (ic.sets * ic.ways))()
            self._ic_fill = (c_int32 * ic.sets)()
            st = self._st
            st.ic_on, st.ic_line_bits, st.ic_sets, st.ic_ways = self.IC_ON[ic.enabled], ic.line_bits, ic.sets, ic.ways
            st.ic_lines = ctypes.cast(self._ic_lines, POINTER(c_int64))
            st.ic_fill = ctypes.cast(self._ic_fill, POINTER(c_int32))
        if lib.cy_init_table(ctypes.byref(self._st), 1 << 12) != 0:
            raise MemoryError("cycle model: no memory for the block table")
        weakref.finalize(self, lib.cy_free_table, ctypes.pointer(self._st))
        self._slow_fn = _SLOW(self._slow)   # kept: the C side holds only its address
        self._st.slow = ctypes.cast(self._slow_fn, c_void_p).value
        self._st.stop = ctypes.cast(_uc_internals()[0].uc_emu_stop, c_void_p).value
        self._tick_fn = _TICK(self._tick)
        self._st.tick = ctypes.cast(self._tick_fn, c_void_p).value
        self._st.stop_at = float("inf")
        self._load_memory_state()
        self._switch(None)

    def _attach_hooks(self) -> None:
        uclib, uc_hook_h = _uc_internals()
        if getattr(self.uc, "_uch", None) is None:
            raise RuntimeError("this unicorn binding has no engine handle for the C hooks")
        lo, hi = self.memory.flash_range
        user = ctypes.cast(ctypes.pointer(self._st), c_void_p)
        for kind, fn, begin, end in ((UC_HOOK_BLOCK, self._lib.cy_on_block, 1, 0),
                                     (UC_HOOK_MEM_READ, self._lib.cy_on_flash_read, lo, hi - 1)):
            handle = uc_hook_h()
            status = uclib.uc_hook_add(self.uc._uch, ctypes.byref(handle), kind, ctypes.cast(fn, c_void_p), user,
                                       c_uint64(begin), c_uint64(end))
            if status != 0:
                raise RuntimeError(f"unicorn refused the cycle model's C hook (error {status})")

    # -- the counters, kept in C --------------------------------------------------------------

    def _grow_regions(self, capacity: int) -> None:
        old_cap = self._st.capacity
        counts = (_Counts * (2 * capacity))()
        touched = (c_uint8 * (2 * capacity))()
        log = (c_int32 * (2 * capacity))()
        if old_cap:
            def moved(i: int) -> int:
                return i if i < old_cap else i - old_cap + capacity
            for i in range(2 * old_cap):
                counts[moved(i)] = self._counts_arr[i]
                touched[moved(i)] = self._touched_arr[i]
            for k in range(self._st.n_touched):
                log[k] = moved(self._touch_log_arr[k])
        self._counts_arr, self._touched_arr, self._touch_log_arr = counts, touched, log
        self._counts_bytes = memoryview(counts).cast("B")
        self._st.counts = ctypes.cast(counts, POINTER(_Counts))
        self._st.touched = ctypes.cast(touched, POINTER(c_uint8))
        self._st.touch_log = ctypes.cast(log, POINTER(c_int32))
        self._st.capacity = capacity

    def _index(self, region: object) -> int:
        i = self._region_index.get(region)
        if i is None:
            i = len(self._regions)
            if i >= self._st.capacity:
                self._grow_regions(2 * self._st.capacity)
            self._regions.append(region)
            self._region_index[region] = i
        return i

    @property
    def counts(self) -> Mapping[object, Counts]:  # type: ignore[override]
        return _CountsView(self, False)

    @property
    def comm_counts(self) -> Mapping[object, Counts]:  # type: ignore[override]
        return _CountsView(self, True)

    # counters the C hooks keep: read and written in the C struct
    central_total = StateField("central_total")
    insns_total = StateField("insns_total")
    in_callback = StateField("in_callback")

    @property
    def region(self) -> object:  # type: ignore[override]
        return self._regions[self._st.region]

    @region.setter
    def region(self, region: object) -> None:
        self._st.region = self._index(region)

    @property
    def _prev(self) -> Block | None:  # type: ignore[override]
        return self.blocks.get(self._st.prev_address) if self._st.prev_valid else None

    @_prev.setter
    def _prev(self, blk: Block | None) -> None:
        self._st.prev_valid = 0 if blk is None else 1
        if blk is not None:
            self._st.prev_address, self._st.prev_fallthrough, self._st.prev_branch = \
                blk.address, blk.fallthrough, blk.branch

    def _switch(self, region: object) -> None:
        self._st.region = self._index(region)
        self._current_counts()

    def _current_counts(self) -> _Counts:  # type: ignore[override]
        return self._lib.cy_counts_of(ctypes.byref(self._st), 1 if self._st.in_callback else 0,
                                      self._st.region).contents

    def _current_slot(self) -> int:
        """The index of :meth:`_current_counts` in the counts array (touched as cy_counts_of touches it)."""
        st = self._st
        i = (st.capacity if st.in_callback else 0) + st.region
        if not self._touched_arr[i]:
            self._current_counts()
        return i

    def count_values(self) -> tuple:
        """central_total, insns_total and the current counts (_COUNT_FIELDS order), read at once."""
        return (_TOTALS_BYTES.unpack_from(self._st_bytes)
                + _COUNTS_BYTES.unpack_from(self._counts_bytes, _COUNTS_BYTES.size * self._current_slot()))

    def set_count_values(self, values: tuple) -> None:
        """The reverse of :meth:`count_values` (its first ten values)."""
        st = self._st
        st.central_total, st.insns_total = values[0], values[1]
        _COUNTS_BYTES.pack_into(self._counts_bytes, _COUNTS_BYTES.size * self._current_slot(), *values[2:10])

    def replace(self, symbol: str, fn: Callable[[Emulator], int | None]) -> None:
        super().replace(symbol, fn)
        address = self.image.symbols[symbol]
        self._lib.cy_add_block(ctypes.byref(self._st), address, 0, 0, 0.0, 0.0, 0.0, 0, 0, 0, -1, 1)

    # -- the Python side of the hooks ---------------------------------------------------------

    def _slow(self, address: int, size: int) -> None:
        """What the C block hook hands back: a replaced function, a trampoline, or a block not yet
        decoded (decoded, costed and registered here; the C hook then counts it)."""
        try:
            if address in self._hle or address in (CALLBACK_RETURN, EXIT):
                super()._on_block(self.uc, address, size, None)
                return
            blk = self.decoder.block(bytes(self.uc.mem_read(address, size)), address)
            self.blocks[address] = blk
            region = self._region_lookup(address)
            self._region_map[address] = region
            if self._lib.cy_add_block(ctypes.byref(self._st), address, size, blk.count, float(blk.low),
                                      float(blk.central), float(blk.high), blk.branch, blk.fallthrough,
                                      1 if blk.insns[0].size == 4 else 0,
                                      -1 if region is None else self._index(region), 0) != 0:
                raise MemoryError("cycle model: no memory for the block table")
        except BaseException as e:  # noqa: BLE001 - raised again once emu_start returns
            self.stop_for(e)

    def map_mmio(self, base: int, size: int, read: Callable[[int], int], write: Callable[[int, int], None]) -> None:
        """As :meth:`Emulator.map_mmio`, with ``read`` and ``write`` called by unicorn straight: the
        binding's mmio_map wraps every access in two more Python calls (~5 % of an emulated network's
        time). An exception stops the emulation and is raised once emu_start returns, as the binding's."""
        try:
            from unicorn.unicorn_py3.unicorn import MMIO_READ_CFUNC, MMIO_WRITE_CFUNC
        except ImportError:  # another binding
            super().map_mmio(base, size, read, write)
            return

        def on_read(handle, offset: int, n: int, user) -> int:
            try:
                return read(base + offset)
            except BaseException as e:  # noqa: BLE001 - raised again once emu_start returns
                self.stop_for(e)
                return 0

        def on_write(handle, offset: int, n: int, value: int, user) -> None:
            try:
                write(base + offset, value)
            except BaseException as e:  # noqa: BLE001 - raised again once emu_start returns
                self.stop_for(e)

        fns = (MMIO_READ_CFUNC(on_read), MMIO_WRITE_CFUNC(on_write))
        self._mmio_fns.append(fns)   # kept: the C side holds only their addresses
        status = _uc_internals()[0].uc_mmio_map(self.uc._uch, base, size, fns[0], None, fns[1], None)
        if status != 0:
            raise RuntimeError(f"unicorn refused the MMIO range at 0x{base:08x} (error {status})")

    def stop_for(self, e: BaseException) -> None:
        """An exception in Python called from a C hook: stop, and raise it once emu_start returns
        (ctypes would only print it)."""
        if self._hook_error is None:
            self._hook_error = e
        self.uc.emu_stop()

    def _load_memory_state(self) -> None:
        """The memory model's flash line and cache contents into the C side (a model may be shared:
        it is synchronised around every run, whole-array copies to keep that cheap)."""
        st, mem = self._st, self.memory
        st.last_flash_line = mem.last_flash_line
        ic = mem.icache
        if ic is not None:
            w, sets = ic.ways, ic.lines()
            flat = [-1] * (ic.sets * w)
            for s, lines in enumerate(sets):
                flat[s * w:s * w + len(lines)] = lines
            self._ic_lines[:] = flat
            self._ic_fill[:] = [len(lines) for lines in sets]
            st.ic_hits, st.ic_misses = ic.hits, ic.misses
            st.ic_on = self.IC_ON[ic.enabled]

    def set_icache_enabled(self, on: bool) -> None:
        """NVMC.ICACHECNF.CACHEEN written mid-run: the model's cache and the C side at once."""
        ic = self.memory.icache
        if ic is not None:
            ic.enabled = bool(on)
            self._st.ic_on = self.IC_ON[ic.enabled]

    def _save_memory_state(self) -> None:
        st, mem = self._st, self.memory
        mem.last_flash_line = st.last_flash_line
        ic = mem.icache
        if ic is not None:
            w, flat, fill = ic.ways, self._ic_lines[:], self._ic_fill[:]
            ic.set_lines([flat[s * w:s * w + n] for s, n in enumerate(fill)], st.ic_hits, st.ic_misses)

    @staticmethod
    def _tick() -> None:
        """Called every few thousand blocks. Entering Python runs a pending signal's handler: within
        ``interrupts.deferred`` (engine.call, the SoC's quanta) Ctrl-C stops the emulation at once, as
        inside the Python hooks. Nothing else to do."""

    def _run(self, start: int) -> None:
        self._load_memory_state()
        try:
            self.resume(start, EXIT)
        finally:
            self._save_memory_state()

    def resume(self, begin: int, until: int) -> None:
        """unicorn's emu_start, then what the C hooks' Python side raised or the instruction limit."""
        self._hook_error = None
        self.uc.emu_start(begin, until)
        if self._hook_error is not None:
            e, self._hook_error = self._hook_error, None
            raise e
        if self._st.over_limit:
            self.fault = f"more than {self.max_insns} instructions; the code does not terminate"
