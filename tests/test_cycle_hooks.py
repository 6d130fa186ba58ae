"""The cycle model's hooks in C (codegen/timing/native.py) count what the Python hooks count, exactly.

Every board time, estimate and planner profile comes from these counts; the C hooks only make them
sooner (a node's inference 6.7 s -> 0.8 s on the cycle model). So each node of real images is run
both ways and everything the model reports must be equal to the last bit: per-op counts, the
callbacks' counts, the cycle counter the image reads, the instruction count and the serial lines.
"""

from __future__ import annotations

import json
import shutil

import pytest
from models import config_for_tokens, make_model_dir

from codegen.compile import CompileOptions, compile_model
from codegen.timing import compute, cycle_cache, native
from codegen.timing.engine import EmulationError, Emulator, Image
from codegen.timing.memsystem import MemoryModel

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
pytestmark = [pytest.mark.arm, pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """A 2-node model built for nrf52840dk (instruction cache, flash wait states) and for qemu-m4
    (the memory model the virtual testbed's board time uses for sim plans)."""
    from codegen.build import build

    if native.library() is None:
        pytest.skip(f"the C hooks cannot be built here: {native.unavailable()}")
    root = tmp_path_factory.mktemp("hooks")
    model = make_model_dir(root / "m", config_for_tokens(8, 64, layers=1), devices=2, keep_ratio=1.0, seed=3,
                           tests=2)
    for name, board in (("hw", "nrf52840dk"), ("m4", "qemu-m4")):
        compile_model(model, root / name, CompileOptions(devices=2, board=board))
        build(root / name)
    return root


def node_both_ways(monkeypatch, build_dir, device, inferences=2) -> tuple[dict, dict]:
    monkeypatch.setattr(cycle_cache, "lookup", lambda *a, **k: None)
    monkeypatch.setattr(cycle_cache, "store", lambda *a, **k: None)
    out, made = {}, []

    def spy(*a, **k):
        made.append(native.new_emulator(*a, **k))
        return made[-1]
    monkeypatch.setattr("codegen.timing.node.new_emulator", spy)
    for hooks in ("python", "native"):
        monkeypatch.setenv("CISL_CYCLE_HOOKS", hooks)
        made.clear()
        result = compute.node_to_json(compute._run_one((build_dir, device, inferences, None, None, None)))
        em = made[0]
        assert type(em) is (native.NativeEmulator if hooks == "native" else Emulator)
        # the emulator's own tables too, in the order the regions were met
        result["emulator"] = {name: [(str(k), c.to_json()) for k, c in getattr(em, name).items()]
                              for name in ("counts", "comm_counts")}
        result["emulator"]["totals"] = [em.insns_total, em.central_total]
        out[hooks] = result
    return out["python"], out["native"]


@pytest.mark.parametrize("build,device", [("hw", 0), ("hw", 1), ("m4", 1)])
def test_the_c_hooks_count_what_the_python_hooks_count(builds, monkeypatch, build, device):
    py, c = node_both_ways(monkeypatch, builds / build, device)
    assert py["messages_checked"] > 0 and py["insns_per_inference"] > 100_000
    assert json.dumps(c, sort_keys=True) == json.dumps(py, sort_keys=True)


def test_regions_added_beyond_the_first_table_keep_their_counts(builds, monkeypatch):
    """The C side keeps a fixed table of regions that grows as ops are met; growing it must move
    every count (and the order the regions were met in) along."""
    py, _ = node_both_ways(monkeypatch, builds / "hw", 1, inferences=1)
    monkeypatch.setattr(native.NativeEmulator, "INITIAL_REGIONS", 2)
    _, c = node_both_ways(monkeypatch, builds / "hw", 1, inferences=1)
    assert len(py["op_cycles"]) > 4
    assert json.dumps(c) == json.dumps(py)


def standalone(cls, image: Image, memory: MemoryModel, **kw) -> Emulator:
    """An emulator of a node image whose board and transport do nothing (no peripherals modelled)."""
    em = cls(image, memory, **kw)
    for name in image.symbols:
        if name.startswith(("cisl_board_", "cisl_transport_")):
            em.replace(name, lambda e: 0)
    return em


def test_errors_in_the_c_hooks_are_the_python_hooks_errors(builds):
    from codegen.boards import load_board

    image = Image.load(builds / "hw" / "node_00" / "firmware.elf")
    memory = MemoryModel.for_board(load_board("nrf52840dk"))

    def gone(e):
        raise ValueError("the input is gone")

    # a replaced function that fails: its exception, not a crash or a silent stop
    for cls in (Emulator, native.NativeEmulator):
        em = standalone(cls, image, memory)
        em.replace("cisl_board_next_input", gone)
        with pytest.raises(ValueError, match="the input is gone"):
            em.call("cisl_run")
    # runaway code: the instruction limit, as with the Python hooks
    for cls in (Emulator, native.NativeEmulator):
        em = standalone(cls, image, memory, max_insns=5_000)
        em.replace("cisl_board_next_input", lambda e: 1)
        with pytest.raises(EmulationError, match="more than 5000 instructions"):
            em.call("cisl_run")
        assert 5_000 < em.insns_total < 5_200


def test_ctrl_c_stops_code_that_never_calls_the_board(builds):
    """The C hooks call into Python every 16384 blocks, so that Python's signal handler runs even in
    code that never reaches a replaced board function (a runaway loop: its instruction limit is
    minutes away). Without it, Ctrl-C waited for that limit."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os, signal, sys, threading, time
        from codegen import interrupts
        from codegen.boards import load_board
        from codegen.timing import engine, native
        from codegen.timing.memsystem import MemoryModel

        em = native.NativeEmulator(engine.Image.load(sys.argv[1]), MemoryModel.for_board(load_board("nrf52840dk")),
                                   max_insns=10**12)
        loop = engine.TRAMPOLINE + 0x100   # `b .`, never a hook's address
        interrupts.install()
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t = time.monotonic()
        try:
            with interrupts.deferred(em.uc.emu_stop):
                em.resume(loop | 1, engine.EXIT)
        except KeyboardInterrupt:
            print("stopped after", round(time.monotonic() - t, 2), "s; instructions", em.insns_total)
        """)
    p = subprocess.run([sys.executable, "-c", code, str(builds / "hw" / "node_00" / "firmware.elf")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("stopped after"), (p.stdout, p.stderr)
    assert float(p.stdout.split()[2]) < 1.5 and int(p.stdout.split()[-1]) > 10_000, p.stdout


def test_without_gcc_the_python_hooks_run(builds, monkeypatch):
    """No compiler (or a build that fails): the cycle model still runs, on the Python hooks, and says
    why through native.unavailable()."""
    from codegen.boards import load_board
    from codegen.errors import UserError

    def no_gcc(*a, **k):
        raise UserError("gcc not found; it is needed for the cycle model's C hooks (apt-get install gcc)")

    monkeypatch.setattr(native, "shared_library", no_gcc)
    monkeypatch.setattr(native, "_LIB", None)
    monkeypatch.setattr(native, "_UNAVAILABLE", None)
    assert not native.hooks_in_c() and "gcc not found" in native.unavailable()
    em = native.new_emulator(Image.load(builds / "hw" / "node_00" / "firmware.elf"),
                             MemoryModel.for_board(load_board("nrf52840dk")))
    assert type(em) is Emulator
