"""board.toml is checked when a board is loaded (codegen/boards.py BOARD_SCHEMA via codegen/config_schema.py):
the shipped boards pass; a typo, a wrong type or a missing key is one line naming file, table and key."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codegen.boards import available_boards, load_board, read_board
from codegen.errors import UserError
from codegen.resources import resource_dir

pytestmark = pytest.mark.unit


def test_every_shipped_board_is_valid():
    assert set(available_boards()) >= {"sim", "nrf52840dk", "qemu-m4"}
    for name in available_boards():
        b = load_board(name)
        assert b.name == name and b.ram_bytes > 0 and b.flash_bytes > 0 and b.build["cc"]


def broken(tmp_path: Path, old: str, new: str, board: str = "nrf52840dk") -> Path:
    """A copy of a shipped board's folder with one edit to its board.toml."""
    folder = tmp_path / "boards" / "broken"
    shutil.copytree(resource_dir("boards") / board, folder)
    text = (folder / "board.toml").read_text()
    assert old in text, old
    (folder / "board.toml").write_text(text.replace(old, new, 1))
    return folder


CASES = {
    "typo in [build]": ('cflags = ["-std=c99", "-Os"', 'cflag = ["-std=c99", "-Os"',
                        ("[build]", "unknown key 'cflag'", "did you mean 'cflags'?")),
    "unknown table": ("[serial]", "[serail]", ("unknown key 'serail'", "did you mean 'serial'?")),
    "wrong type": ("ram_bytes = 262144", 'ram_bytes = "256K"', ("[board] ram_bytes must be an integer", "'256K'")),
    "list of strings": ('sources = ["startup.c", "board.c", "radio.c"]', 'sources = "startup.c"',
                        ("[build] sources must be a list of strings",)),
    "nested inline table": ("flash_wait = { low = 0,", "flash_wait = { lo = 0,",
                            ("[timing.flash_wait]", "unknown key 'lo'", "did you mean 'low'?")),
    "figure": ('idle_ua = { central = 3.0', 'idle_ua = { centre = 3.0',
               ("[power.idle_ua]", "unknown key 'centre'", "did you mean 'central'?")),
    "open table of integers": ("softmax = 1", "softmax = 1.", ("[footprint.ops] softmax must be an integer",)),
    "missing required key": ('cc = "arm-none-eabi-gcc"\n', "", ("[build]", "no cc", "add cc (a string)")),
    "not toml": ("[board]", "[board", ("not valid TOML",)),
    "debug port": ('debug_port = "open"', 'debug_port = "opened"',
                   ('[security] debug_port must be "open" or "protected"', "'opened'")),
    # RADIO.TXPOWER has only its enumerated steps; -30 is not one of the nRF52840's (audit U, finding 8)
    "tx power not a step": ("txpower_dbm = 8 ", "txpower_dbm = 1 ",
                            ("[radio] txpower_dbm = 1 is not a TX power the nrf52840 has", "+8, +7", "-20, -40 dBm")),
    "tx power -30": ("txpower_dbm = 8 ", "txpower_dbm = -30 ", ("[radio] txpower_dbm = -30 is not a TX power",)),
    "timeout past the timer": ("scan_timeout_ms = 10000 ", "scan_timeout_ms = 200000 ",
                               ("[radio] scan_timeout_ms = 200000 is out of range; use 1..134217 ms", "2^31 ticks")),
    "negative guard": ("start_guard_us = 2000 ", "start_guard_us = -1 ",
                       ("[radio] start_guard_us = -1 is out of range; use 0..134217727 us",)),
    "frequency": ("frequency_mhz = 2450 ", "frequency_mhz = 2550 ",
                  ("[radio] frequency_mhz = 2550 is out of range; use 2400..2500 MHz",)),
    # a listener scans 10 s for a round's first packet without reloading the watchdog: it would reset
    "watchdog below a radio wait": ("timeout_ms = 12000", "timeout_ms = 10050",
                                    ("[watchdog] timeout_ms = 10050 is shorter than [radio] scan_timeout_ms + 100 ms",
                                     "use at least 10100, or 0 to turn it off")),
    "watchdog past its counter": ("timeout_ms = 12000", "timeout_ms = 200000000",
                                  ("[watchdog] timeout_ms = 200000000 is out of range", "2^32 ticks of 32.768 kHz")),
    "watchdog type": ("timeout_ms = 12000", 'timeout_ms = "12 s"', ("[watchdog] timeout_ms must be an integer",)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_broken_board_file_is_one_clear_line(tmp_path, case):
    old, new, needles = CASES[case]
    folder = broken(tmp_path, old, new)
    with pytest.raises(UserError) as e:
        read_board(folder)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(folder / "board.toml")), msg
    for n in needles:
        assert n in msg, msg


def test_the_unedited_copy_reads(tmp_path):  # so each case above fails only by its edit
    assert read_board(broken(tmp_path, "[board]", "[board]")).facts == load_board("nrf52840dk").facts


# `cisl fit` with the boards folder pointed at the temporary one (the loader has no path option).
FIT_WITH_BOARDS = textwrap.dedent("""
    import sys
    from pathlib import Path
    import codegen.boards as B

    real = B.resource_dir
    B.resource_dir = lambda name: Path(sys.argv[1]) if name == "boards" else real(name)
    from codegen.cli import main
    main(sys.argv[2:], prog_name="cisl")
""")


def test_a_watchdog_just_longer_than_the_longest_radio_wait_or_off_is_accepted(tmp_path):
    for ms in (0, 10100):
        folder = broken(tmp_path / str(ms), "timeout_ms = 12000", f"timeout_ms = {ms}")
        assert read_board(folder).facts["watchdog"]["timeout_ms"] == ms


def test_every_tx_power_step_of_the_part_is_accepted(tmp_path):
    for dbm in (-40, -20, -4, 0, 2, 8):
        folder = broken(tmp_path / str(dbm), "txpower_dbm = 8 ", f"txpower_dbm = {dbm} ")
        assert read_board(folder).facts["radio"]["txpower_dbm"] == dbm
    folder = broken(tmp_path / "52833", "txpower_dbm = 8 ", "txpower_dbm = -30 ", board="nrf52833dk")
    assert read_board(folder).facts["radio"]["txpower_dbm"] == -30


@pytest.mark.parametrize("old,new,says", [
    ("stack_bytes = 8192", "stack_bytes = true", "[build] stack_bytes must be an integer, got True"),
    ("txpower_dbm = 8 ", "txpower_dbm = -2 ", "txpower_dbm = -2 is not a TX power"),
])
def test_a_command_loading_a_broken_board_ends_with_one_line(tmp_path, old, new, says):
    folder = broken(tmp_path, old, new)
    p = subprocess.run([sys.executable, "-c", FIT_WITH_BOARDS, str(folder.parent), "fit", "--board", "broken",
                        "--devices", "2", "--no-build", "-q"], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert str(folder / "board.toml") in lines[0] and says in lines[0], lines


def test_a_watchdog_shorter_than_a_block_may_compute_is_refused_at_build(tmp_path):
    """The runtime reloads the watchdog as each block begins (and its rounds at every slot): a block that
    computes longer than timeout_ms would reset a healthy node at every inference. `cisl build` bounds each
    block by its MACs at 8 cycles per MAC and refuses such a timeout, naming the node, the block and the
    timeout that would do."""
    import dataclasses

    from codegen.build import check_watchdog_blocks
    from codegen.compile import CompileOptions, compile_model
    from codegen.plan.io import load_plan
    from codegen.randmodel import config_for_tokens, make_model_dir

    model = make_model_dir(tmp_path / "m", config_for_tokens(32, 128, layers=1), devices=1, keep_ratio=1.0, seed=0)
    compile_model(model, tmp_path / "b", CompileOptions(board="nrf52840dk"))
    plan, real = load_plan(tmp_path / "b"), load_board("nrf52840dk")
    assert check_watchdog_blocks(real, plan) == 12000

    def with_timeout(ms):
        return dataclasses.replace(real, facts=dict(real.facts, watchdog={"timeout_ms": ms}))
    with pytest.raises(UserError) as e:
        check_watchdog_blocks(with_timeout(100), plan)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(real.path / "board.toml")), msg
    assert "[watchdog] timeout_ms = 100 is shorter than node 0's block " in msg and " MACs: up to " in msg, msg
    enough = int(msg.split("raise timeout_ms to at least ")[1].split(",")[0])
    assert 100 < enough and check_watchdog_blocks(with_timeout(enough), plan) == enough
    with pytest.raises(UserError):
        check_watchdog_blocks(with_timeout(enough - 1), plan)
    assert check_watchdog_blocks(with_timeout(0), plan) == 0     # off: nothing to outlast
