"""Flash runners with fakes, no hardware: the exact nrfutil/nrfjprog command lines, the exact pyocd API
calls, boards chosen only by serial number, and failures reported per node with the next step."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from intelhex import IntelHex
from models import config_for_tokens, make_model_dir

from codegen.cli import main
from codegen.compile import CompileOptions, compile_model
from codegen.errors import UserError
from codegen.fsutil import sha256_file
from codegen.plan.io import load_plan
from codegen.testbed.config import load_testbed
from codegen.testbed.flash import flash_testbed
from codegen.testbed.runners import FlashError, NrfJprogRunner, NrfUtilRunner, PyOCDRunner, Runner, image_segments

pytestmark = pytest.mark.unit

SEGMENTS = {0x0: bytes(range(256)) * 4, 0x8000: b"\x5a" * 100}


@pytest.fixture(scope="module")
def nrf_build(tmp_path_factory) -> Path:
    """A 2-node build for board nrf52840dk: a real plan, and small Intel HEX images."""
    root = tmp_path_factory.mktemp("nrfbuild")
    model = make_model_dir(root / "m", config_for_tokens(8, 64), devices=2, keep_ratio=1.0, seed=1)
    build = root / "build"
    compile_model(model, build, CompileOptions())
    plan = json.loads((build / "plan.json").read_text())
    plan["board"] = "nrf52840dk"
    (build / "plan.json").write_text(json.dumps(plan))
    nodes = []
    for k in range(2):
        ih = IntelHex()
        for addr, data in SEGMENTS.items():
            ih.puts(addr, data)
        (build / f"node_{k:02d}").mkdir(exist_ok=True)
        ih.write_hex_file(str(build / f"node_{k:02d}" / "firmware.hex"))
        nodes.append({"node": k, "image": f"node_{k:02d}/firmware.hex", "bytes": 1124,
                      "sha256": sha256_file(build / f"node_{k:02d}" / "firmware.hex")})
    # what `cisl build` records: the plan the images were made from, and each image's hash
    (build / "build.json").write_text(json.dumps({"board": "nrf52840dk", "plan": load_plan(build).sha256[:16],
                                                  "nodes": nodes}))
    return build


def write_testbed(tmp_path: Path, runner: str, probes: list[str | None]) -> Path:
    text = f'[defaults]\nboard = "nrf52840dk"\nrunner = "{runner}"\n'
    for k, p in enumerate(probes):
        text += f'\n[[node]]\nid = {k}\nport = "/dev/serial/by-id/usb-node{k}-if00"\n'
        if p is not None:
            text += f'probe = "{p}"\n'
    (tmp_path / "tb.toml").write_text(text)
    return tmp_path / "tb.toml"


class FakeTools:
    """Stands in for subprocess.run and shutil.which: records every command, answers --ids/list."""

    def __init__(self, attached: list[str], fail: dict[str, tuple[int, str]] | None = None):
        self.attached = attached
        self.fail = fail or {}  # serial -> (exit code, output) for its program step
        self.calls: list[list[str]] = []

    def run(self, cmd, **kw):
        cmd = list(cmd)
        if cmd == ["nrfjprog", "--ids"]:
            return subprocess.CompletedProcess(cmd, 0, "".join(s + "\n" for s in self.attached), "")
        if cmd == ["nrfutil", "device", "list", "--json"]:
            devs = [{"serialNumber": s, "traits": {"jlink": True}} for s in self.attached]
            return subprocess.CompletedProcess(
                cmd, 0, json.dumps({"type": "task_end", "data": {"data": {"devices": devs}}}) + "\n", "")
        self.calls.append(cmd)
        serial = next((cmd[i + 1] for i, a in enumerate(cmd) if a in ("-s", "--serial-number")), None)
        if ("--program" in cmd or "program" in cmd) and serial in self.fail:
            code, err, *out = self.fail[serial]  # (exit code, stderr[, stdout])
            return subprocess.CompletedProcess(cmd, code, "".join(out), err)
        return subprocess.CompletedProcess(cmd, 0, "", "")


@pytest.fixture
def tools(monkeypatch):
    def install(attached, fail=None, missing=()):
        fake = FakeTools(attached, fail)
        monkeypatch.setattr("codegen.testbed.probes.run_in_group", lambda cmd, timeout: fake.run(cmd))  # probe lists
        monkeypatch.setattr(Runner, "_call", lambda self, cmd: fake.run(cmd))  # the runners' tool calls
        monkeypatch.setattr(shutil, "which", lambda name: None if name in missing else f"/usr/bin/{name}")
        return fake
    return install


# -- exact command lines ---------------------------------------------------------------------------------

def test_nrfutil_command_lines(tmp_path, tools, nrf_build):
    fake = tools(["683000001"])
    tb = load_testbed(write_testbed(tmp_path, "nrfutil", ["683000001"]))
    r = NrfUtilRunner(tb)
    img = nrf_build / "node_00" / "firmware.hex"
    r.flash(tb.nodes[0], img, "683000001", verify=True, recover=False)
    r.reset_one(tb.nodes[0], "683000001")
    r.flash(tb.nodes[0], img, "683000001", verify=False, recover=True)
    assert fake.calls == [
        ["nrfutil", "device", "program", "--firmware", str(img), "--serial-number", "683000001",
         "--options", "chip_erase_mode=ERASE_RANGES_TOUCHED_BY_FIRMWARE,verify=VERIFY_READ"],
        ["nrfutil", "device", "reset", "--serial-number", "683000001"],
        ["nrfutil", "device", "recover", "--serial-number", "683000001"],
        ["nrfutil", "device", "program", "--firmware", str(img), "--serial-number", "683000001",
         "--options", "chip_erase_mode=ERASE_RANGES_TOUCHED_BY_FIRMWARE,verify=VERIFY_NONE"],
    ]


def test_nrfjprog_command_lines(tmp_path, tools, nrf_build):
    fake = tools(["683000001"])
    tb = load_testbed(write_testbed(tmp_path, "nrfjprog", ["683000001"]))
    r = NrfJprogRunner(tb)
    img = nrf_build / "node_00" / "firmware.hex"
    r.flash(tb.nodes[0], img, "683000001", verify=True, recover=False)
    r.reset_one(tb.nodes[0], "683000001")
    r.flash(tb.nodes[0], img, "683000001", verify=True, recover=True)
    assert fake.calls == [
        ["nrfjprog", "-f", "NRF52", "--program", str(img), "--sectorerase", "--verify", "-s", "683000001"],
        ["nrfjprog", "-f", "NRF52", "--reset", "-s", "683000001"],
        ["nrfjprog", "-f", "NRF52", "--recover", "-s", "683000001"],
        ["nrfjprog", "-f", "NRF52", "--program", str(img), "--sectorerase", "--verify", "-s", "683000001"],
    ]


@pytest.mark.parametrize("runner,fail", [("nrfjprog", (16, "ERROR: The operation attempted is unavailable due "
                                                            "to readback protection in your device.")),
                                         ("nrfutil", (1, "Error: Failed to program, device is protected "
                                                         "(ApprotectEnabled)"))])
def test_protected_device_suggests_recover(tmp_path, tools, nrf_build, runner, fail):
    tools(["683000001"], {"683000001": fail})
    tb = load_testbed(write_testbed(tmp_path, runner, ["683000001"]))
    cls = NrfJprogRunner if runner == "nrfjprog" else NrfUtilRunner
    with pytest.raises(FlashError) as e:
        cls(tb).flash(tb.nodes[0], nrf_build / "node_00" / "firmware.hex", "683000001", True, False)
    assert e.value.kind == "protected" and "--recover" in str(e.value) and "APPROTECT" in str(e.value)


class FakeTarget:
    def __init__(self, flash: dict[int, bytes], locked: bool = False):
        self.mem = dict(flash)
        self.locked = locked
        self.calls: list[tuple] = []

    def is_locked(self):
        return self.locked

    def read_memory_block8(self, addr, size):
        self.calls.append(("read_memory_block8", addr, size))
        return list(self.mem[addr][:size])

    def reset(self):
        self.calls.append(("reset",))


class FakeSession:
    def __init__(self, target):
        self.target = target

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fake_pyocd(monkeypatch, target, probes=("0240000034544e45",)):
    from pyocd.core.helpers import ConnectHelper
    from pyocd.flash import file_programmer

    calls = []

    class Probe:
        def __init__(self, uid):
            self.unique_id, self.description = uid, "DAPLink CMSIS-DAP"

    def session_with_chosen_probe(**kw):
        calls.append(("session_with_chosen_probe", kw))
        return FakeSession(target) if kw["unique_id"] in probes else None

    class FileProgrammer:
        def __init__(self, session, progress=None, chip_erase=None):
            calls.append(("FileProgrammer", session.target is target, chip_erase))
            self.progress = progress

        def program(self, path):
            calls.append(("program", path))
            self.progress(0.5)
            self.progress(1.0)

    monkeypatch.setattr(ConnectHelper, "session_with_chosen_probe", staticmethod(session_with_chosen_probe))
    monkeypatch.setattr(ConnectHelper, "get_all_connected_probes",
                        staticmethod(lambda **kw: [Probe(u) for u in probes]))
    monkeypatch.setattr(file_programmer, "FileProgrammer", FileProgrammer)
    return calls


def test_pyocd_api_calls(tmp_path, monkeypatch, nrf_build):
    target = FakeTarget(SEGMENTS)
    calls = fake_pyocd(monkeypatch, target)
    tb = load_testbed(write_testbed(tmp_path, "pyocd", ["0240000034544e45"]))
    img = nrf_build / "node_00" / "firmware.hex"
    said = []
    r = PyOCDRunner(tb, say=lambda n, m: said.append(m))
    r.flash(tb.nodes[0], img, "0240000034544e45", verify=True, recover=False)
    r.reset_one(tb.nodes[0], "0240000034544e45")
    opts = {"target_override": "nrf52840", "auto_unlock": False, "hide_programming_progress": True}
    assert calls == [
        ("session_with_chosen_probe", {"blocking": False, "unique_id": "0240000034544e45", "options": opts}),
        ("FileProgrammer", True, "sector"),
        ("program", str(img)),
        ("session_with_chosen_probe", {"blocking": False, "unique_id": "0240000034544e45", "options": opts}),
    ]
    assert target.calls == [("read_memory_block8", 0x0, 1024), ("read_memory_block8", 0x8000, 100), ("reset",)]
    assert "program 50 %" in said and "program 100 %" in said
    assert image_segments(img) == sorted(SEGMENTS.items())


def test_pyocd_verify_mismatch_locked_and_missing_probe(tmp_path, monkeypatch, nrf_build):
    tb = load_testbed(write_testbed(tmp_path, "pyocd", ["0240000034544e45"]))
    img = nrf_build / "node_00" / "firmware.hex"
    bad = dict(SEGMENTS)
    bad[0x8000] = b"\x5a" * 50 + b"\xff" * 50
    fake_pyocd(monkeypatch, FakeTarget(bad))
    with pytest.raises(FlashError, match="verify failed at 0x00008032") as e:
        PyOCDRunner(tb).flash(tb.nodes[0], img, "0240000034544e45", True, False)
    assert e.value.kind == "verify"
    calls = fake_pyocd(monkeypatch, FakeTarget(SEGMENTS, locked=True))
    with pytest.raises(FlashError, match="--recover") as e:
        PyOCDRunner(tb).flash(tb.nodes[0], img, "0240000034544e45", True, False)
    assert e.value.kind == "protected"
    PyOCDRunner(tb).flash(tb.nodes[0], img, "0240000034544e45", True, True)  # --recover: auto unlock + chip erase
    assert calls[-3][1]["options"]["auto_unlock"] is True and calls[-2] == ("FileProgrammer", True, "chip")
    with pytest.raises(FlashError, match="no probe 9999") as e:
        PyOCDRunner(tb).flash(tb.nodes[0], img, "9999", True, False)
    assert e.value.kind == "probe"


@pytest.mark.faults
def test_a_pyocd_call_that_hangs_stops_at_the_timeout_and_at_ctrl_c(tmp_path, monkeypatch, nrf_build):
    """pyocd's calls cannot be stopped, and PyOCDRunner ignored --timeout: a probe that stopped answering
    mid-program held `cisl flash` (and Ctrl-C) for good. Now the node fails at --timeout, naming the
    step, and Ctrl-C ends the wait at once."""
    import threading
    import time

    from pyocd.flash import file_programmer

    tb = load_testbed(write_testbed(tmp_path, "pyocd", ["0240000034544e45"]))
    img = nrf_build / "node_00" / "firmware.hex"
    fake_pyocd(monkeypatch, FakeTarget(SEGMENTS))
    release = threading.Event()

    class Wedged:
        def __init__(self, session, progress=None, chip_erase=None):
            pass

        def program(self, path):
            release.wait(60)  # a USB transfer that never completes

    monkeypatch.setattr(file_programmer, "FileProgrammer", Wedged)
    try:
        t0 = time.monotonic()
        with pytest.raises(FlashError, match=r"^program: pyocd did not finish within 1 s") as e:
            PyOCDRunner(tb, timeout=1.0).flash(tb.nodes[0], img, "0240000034544e45", True, False)
        assert e.value.kind == "timeout" and time.monotonic() - t0 < 20  # not the transfer's 60 s

        runner = PyOCDRunner(tb, timeout=60.0)
        threading.Timer(0.3, runner.cancel).start()
        t0 = time.monotonic()
        with pytest.raises(FlashError) as e:
            runner.flash(tb.nodes[0], img, "0240000034544e45", True, False)
        assert e.value.kind == "interrupted" and time.monotonic() - t0 < 20
    finally:
        release.set()


# -- choosing boards: by serial number only ------------------------------------------------------------

def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_two_probes_and_no_serial_is_a_clear_error_listing_both(tmp_path, tools, nrf_build):
    fake = tools(["683000001", "683000002"])
    tb = write_testbed(tmp_path, "nrfjprog", ["683000001", None])
    r = invoke("flash", str(nrf_build), "--testbed", str(tb))
    assert r.exit_code == 2, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "node 1 has no probe serial number" in line and "683000001" in line and "683000002" in line
    assert "refusing to guess" in line and "probe =" in line
    assert not any("--program" in c for c in fake.calls)  # nothing was flashed


def test_one_probe_and_no_serial_needs_allow_single_probe(tmp_path, tools, nrf_build):
    tools(["683000007"])
    tb_path = write_testbed(tmp_path, "nrfutil", [None, None])
    plan = json.loads((nrf_build / "plan.json").read_text())
    assert plan["devices"] == 2
    tb = load_testbed(tb_path)
    with pytest.raises(UserError, match="--allow-single-probe"):
        flash_testbed(nrf_build, tb)
    with pytest.raises(UserError, match="does not guess"):  # two nodes without a serial: still no
        flash_testbed(nrf_build, tb, allow_single_probe=True)


def test_single_probe_allowed(tmp_path, tools, nrf_build, monkeypatch):
    fake = tools(["683000007", "683000008"])
    tb = load_testbed(write_testbed(tmp_path, "nrfutil", ["683000008", None]))
    with pytest.raises(UserError, match="2 probes are attached"):
        flash_testbed(nrf_build, tb, allow_single_probe=True)
    fake.attached = ["683000007"]
    tb = load_testbed(write_testbed(tmp_path, "nrfutil", [None, "683000009"]))
    rep = flash_testbed(nrf_build, tb, allow_single_probe=True)
    assert rep.results[0].ok and rep.results[0].probe == "683000007"
    # node 1's probe is not attached: its own flash error, listing what is attached
    assert not rep.results[1].ok and rep.results[1].kind == "probe"
    assert "683000009 is not attached" in rep.results[1].error and "683000007" in rep.results[1].error


@pytest.mark.faults
@pytest.mark.parametrize("runner", ["nrfjprog", "nrfutil"])
def test_two_probes_with_one_serial_number_are_never_flashed(tmp_path, tools, nrf_build, runner):
    """Two attached probes that report the same serial number (clones without their own): the tool would
    program one of them, maybe not node 1's board; cisl flashed it and said ok."""
    from codegen.testbed.probes import discover

    fake = tools(["683000001", "683000002", "683000002"])
    tb = write_testbed(tmp_path, runner, ["683000001", "683000002"])
    r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q")
    assert r.exit_code == 1, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "node 1: 2 attached probes report serial number 683000002" in line and "unplug" in line, line
    assert not [c for c in fake.calls if "683000002" in c]  # neither programmed nor reset
    assert [c for c in fake.calls if "683000001" in c]
    notes = discover((runner,)).notes  # and `cisl testbed scan` says so in its draft
    assert any("2 probes with serial number 683000002" in n for n in notes), notes


# -- a failing node: a flash error for it, the others' results still reported, exit code 1 -----------------

def test_failing_flash_is_reported_as_a_flash_error(tmp_path, tools, nrf_build):
    fake = tools(["683000001", "683000002"], fail={"683000002": (33, "ERROR: Unable to connect to a debugger.")})
    tb = write_testbed(tmp_path, "nrfjprog", ["683000001", "683000002"])
    r = invoke("flash", str(nrf_build), "--testbed", str(tb))
    assert r.exit_code == 1, r.output
    rows = {ln.split()[1]: ln for ln in r.stdout.splitlines() if ln.startswith("node ")}
    assert rows["00"].endswith("ok")
    assert "FLASH ERROR" in rows["01"] and "exit code 33" in rows["01"] and "Unable to connect" in rows["01"]
    assert "timeout" not in r.output.lower()
    assert "FAILED: 1 of 2 nodes failed to flash (first: node 1" in r.stderr
    # node 0 was programmed and reset; node 1 was not reset
    assert ["nrfjprog", "-f", "NRF52", "--reset", "-s", "683000001"] in fake.calls
    assert ["nrfjprog", "-f", "NRF52", "--reset", "-s", "683000002"] not in fake.calls
    flashed = json.loads((tmp_path / ".cisl-testbed" / "flashed.json").read_text())
    assert [x["ok"] for x in flashed["results"]] == [True, False]


@pytest.mark.faults
@pytest.mark.parametrize("runner, stdout, stderr, shown", [
    ("nrfjprog", "Parsing image file.\n", "ERROR: JLinkARM DLL reported an error. Try again.\n", None),
    ("nrfutil", "[00:00:00] ###### 100% [683000002] Programing\n", "Error: One or more program tasks failed\n", None),
    # a warning after the error on stderr, or the error on stdout and only a warning on stderr (audit T #8)
    ("nrfjprog", "Parsing image file.\n", "ERROR: The device is protected.\nWARNING: nrfjprog is deprecated\n",
     "ERROR: The device is protected."),
    ("nrfjprog", "ERROR: The --family option given does not match the device.\n",
     "WARNING: nrfjprog is deprecated\n", "ERROR: The --family option given does not match the device."),
])
def test_a_failed_tools_error_line_is_shown_not_its_last_progress_line(tmp_path, tools, nrf_build, runner, stdout,
                                                                       stderr, shown):
    """audit R #4: nrfjprog and nRF Util print progress on stdout and the error on stderr; the FLASH ERROR
    showed the last line of both together, stdout's ("Parsing image file."), and dropped the error. The line
    that says error wins over a warning on either stream."""
    tools(["683000001", "683000002"], fail={"683000002": (33, stderr, stdout)})
    r = invoke("flash", str(nrf_build), "--testbed", str(write_testbed(tmp_path, runner, ["683000001", "683000002"])))
    assert r.exit_code == 1, r.output
    rows = {ln.split()[1]: ln for ln in r.stdout.splitlines() if ln.startswith("node ")}
    assert rows["01"].endswith(f"FLASH ERROR: program + verify failed: `{runner}` exit code 33: "
                               f"{shown or stderr.strip()}"), rows["01"]


NO_DEVICE_COMMAND = ("Error: nrfutil command `device` not found. See `nrfutil search` for available commands.\n\n"
                     "Caused by:\n    Subcommand nrfutil-device not found\n")


@pytest.mark.faults
@pytest.mark.parametrize("command", ["flash", "logs"])
def test_nrfutil_without_its_device_command_is_one_line_with_the_install_hint(tmp_path, tools, nrf_build,
                                                                            monkeypatch, command):
    """audit R #5: nRF Util installed without `nrfutil install device`: every node failed "nrfutil did not
    find probe ..." (exit 1), though the probes were fine."""
    fake = tools(["683000001", "683000002"])
    monkeypatch.setattr("codegen.testbed.probes.run_in_group",
                        lambda cmd, timeout: subprocess.CompletedProcess(cmd, 1, "", NO_DEVICE_COMMAND))
    tb = write_testbed(tmp_path, "nrfutil", ["683000001", "683000002"])
    args = [str(nrf_build)] if command == "flash" else ["-o", str(tmp_path / "logs")]
    r = invoke(command, *args, "--testbed", str(tb), "-q")
    assert r.exit_code == 2, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "runner nrfutil: nRF Util is installed without its `device` command (Subcommand nrfutil-device not " \
           "found); run `nrfutil install device`" in line, line
    assert "did not find probe" not in r.output and fake.calls == []  # nothing ran on any node


def test_missing_tool_is_an_install_hint(tmp_path, tools, nrf_build):
    tools(["683000001"], missing=("nrfutil",))
    r = invoke("flash", str(nrf_build), "--testbed", str(write_testbed(tmp_path, "nrfutil", ["683000001", "1"])))
    assert r.exit_code == 2
    assert "`nrfutil` not found on PATH" in r.stderr and "nrfutil install device" in r.stderr


def test_build_for_another_board_is_refused(tmp_path, tools, nrf_build):
    tools(["683000001"])
    text = write_testbed(tmp_path, "nrfutil", ["1", "2"]).read_text().replace("nrf52840dk", "nrf52833dk")
    (tmp_path / "tb.toml").write_text(text)
    r = invoke("flash", str(nrf_build), "--testbed", str(tmp_path / "tb.toml"))
    assert r.exit_code == 2 and "nrf52833dk board but" in r.stderr and "--board nrf52833dk" in r.stderr


# -- protected devices and --recover, with fake tools on PATH ------------------------------------------
#
# The fakes are executables (nrfjprog, nrfutil) that append their argv to a log and keep one state per
# serial number: "protected" (a rev-3 part after a reset without an open image, or one locked by
# UICR.APPROTECT) until a recover runs, then "open". A protected device answers programming and reset
# the way the tools do: nrfjprog exit code 16 with "...unavailable due to readback protection...",
# nrfutil exit code 1 with "... readback protection ..." and the `recover` subcommand hint. The
# recover command lines are the documented ones: `nrfjprog --recover` (nRF Command Line Tools:
# "erases all user flash and disables readback protection"), `nrfutil device recover`.

FAKE_TOOL = r'''#!{python}
import json, os, sys
argv = sys.argv[1:]
log, state_dir = os.environ["FAKE_TOOL_LOG"], os.environ["FAKE_TOOL_STATE"]
# another fake may be writing its device's state (nodes flash in parallel): skip its temporary file
state = {{s: open(os.path.join(state_dir, s)).read() for s in sorted(os.listdir(state_dir)) if ".tmp" not in s}}
tool = os.path.basename(sys.argv[0])
if tool == "nrfjprog" and argv == ["--ids"]:
    print("\n".join(state)); sys.exit(0)
if tool == "nrfutil" and argv == ["device", "list", "--json"]:
    devs = [{{"serialNumber": s, "traits": {{"jlink": True}}}} for s in state]
    print(json.dumps({{"type": "task_end", "data": {{"data": {{"devices": devs}}}}}})); sys.exit(0)
with open(log, "a") as f:
    f.write(json.dumps([tool] + argv) + "\n")
serial = next(argv[i + 1] for i, a in enumerate(argv) if a in ("-s", "--serial-number"))
if "--recover" in argv or argv[:2] == ["device", "recover"]:
    if state[serial] == "stays-protected":  # the recover "succeeds" but the part is locked again
        sys.exit(0)
    with open(os.path.join(state_dir, serial + ".tmp"), "w") as f:
        f.write("open")
    os.replace(os.path.join(state_dir, serial + ".tmp"), os.path.join(state_dir, serial))
    sys.exit(0)
step = "reset" if "--reset" in argv or argv[:2] == ["device", "reset"] else "program"
if state[serial].startswith(step + ":"):  # "reset:STATE": the device misbehaves only in that step
    state[serial] = state[serial].split(":", 1)[1]
if state[serial] == "garbled":  # output that is not UTF-8 (a J-Link DLL message in Latin-1), and success
    sys.stdout.buffer.write(b"Programming device \xb5C \xff\xfe... done\n"); sys.exit(0)
if state[serial] == "garbled-fail":
    sys.stdout.buffer.write(b"\xff\xfe J-Link \xe9chec\n"); sys.exit(2)
if state[serial] == "flood":  # megabytes of progress, the last "line" without an end
    sys.stdout.write(("#" * 199 + "\n") * 5000 + "Error: " + "#" * 2_000_000); sys.exit(1)
if state[serial] == "hang-helper":  # the work hangs in a child process (nrfutil runs its subcommands so)
    import subprocess
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(os.path.join(state_dir, "..", "helper.pid.tmp"), "w") as f:
        f.write(str(helper.pid))
    os.replace(os.path.join(state_dir, "..", "helper.pid.tmp"), os.path.join(state_dir, "..", "helper.pid"))
    helper.wait()
if state[serial] == "hang-stubborn":  # hangs and ignores SIGINT and SIGTERM
    import signal, time
    signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("started", flush=True); time.sleep(60)
if state[serial] == "hang":  # a probe that stopped answering: the tool never returns
    import time; time.sleep(60)
if state[serial] == "killed":  # the tool crashed (or the OOM killer took it)
    import signal; os.kill(os.getpid(), signal.SIGKILL)
if state[serial] in ("protected", "stays-protected"):
    if tool == "nrfjprog":
        sys.stderr.write("ERROR: The operation attempted is unavailable due to readback protection in\n"
                         "ERROR: your device. Please use --recover to unlock the device.\n")
        sys.exit(16)
    sys.stderr.write("[00:00:01] ------   0% [" + serial + "] Failed, [jlink] The operation is unavailable due to "
                     "readback protection\nError: One or more program tasks failed\n")
    sys.exit(1)
sys.exit(0)
'''


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """Fake nrfjprog and nrfutil first on PATH; returns (set the devices' states, read the calls)."""
    import os
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("nrfjprog", "nrfutil"):
        (bin_dir / tool).write_text(FAKE_TOOL.format(python=sys.executable))
        (bin_dir / tool).chmod(0o755)
    log, state = tmp_path / "calls.jsonl", tmp_path / "state"
    log.write_text("")
    state.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TOOL_LOG", str(log))
    monkeypatch.setenv("FAKE_TOOL_STATE", str(state))

    def devices(states: dict[str, str]) -> None:  # one file per device: the nodes flash in parallel
        for serial, st in states.items():
            (state / serial).write_text(st)

    def calls() -> list[list[str]]:
        return [json.loads(ln) for ln in log.read_text().splitlines()]

    return devices, calls


RECOVER = {"nrfjprog": ["nrfjprog", "-f", "NRF52", "--recover", "-s", "683000002"],
           "nrfutil": ["nrfutil", "device", "recover", "--serial-number", "683000002"]}


def program(runner: str, build: Path, serial: str) -> list[str]:
    img = str(build / "node_01" / "firmware.hex")
    if runner == "nrfjprog":
        return ["nrfjprog", "-f", "NRF52", "--program", img, "--sectorerase", "--verify", "-s", serial]
    return ["nrfutil", "device", "program", "--firmware", img, "--serial-number", serial, "--options",
            "chip_erase_mode=ERASE_RANGES_TOUCHED_BY_FIRMWARE,verify=VERIFY_READ"]


@pytest.mark.parametrize("runner", ["nrfjprog", "nrfutil"])
def test_protected_device_then_recover_with_fake_tools(tmp_path, fake_bin, nrf_build, runner):
    devices, calls = fake_bin
    devices({"683000001": "open", "683000002": "protected"})
    tb = write_testbed(tmp_path, runner, ["683000001", "683000002"])
    r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q")
    assert r.exit_code == 1, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line.startswith("FAILED: 1 of 2 nodes failed to flash (first: node 1: ")
    assert "protected (APPROTECT)" in line and "--recover" in line and "683000002" in line
    assert not any(c == RECOVER[runner] for c in calls())  # nothing is erased without --recover
    before = len(calls())
    r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q", "--recover")
    assert r.exit_code == 0, r.output
    node1 = [c for c in calls()[before:] if "683000002" in c]
    reset = (["nrfjprog", "-f", "NRF52", "--reset", "-s", "683000002"] if runner == "nrfjprog"
             else ["nrfutil", "device", "reset", "--serial-number", "683000002"])
    assert node1 == [RECOVER[runner], program(runner, nrf_build, "683000002"), reset]
    assert (tmp_path / "state" / "683000002").read_text() == "open"


@pytest.mark.faults
@pytest.mark.parametrize("runner", ["nrfjprog", "nrfutil"])
def test_a_device_still_protected_after_recover_does_not_suggest_recover_again(tmp_path, fake_bin, nrf_build,
                                                                               runner):
    """A part that the recover did not leave open (a tool older than the part): the error said "run
    `cisl flash` again with --recover", which the user had just done."""
    devices, calls = fake_bin
    devices({"683000001": "open", "683000002": "stays-protected"})
    tb = write_testbed(tmp_path, runner, ["683000001", "683000002"])
    r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q", "--recover")
    assert r.exit_code == 1, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "683000002 is still protected (APPROTECT) after the recover" in line, line
    assert "again with --recover" not in line and "will not help" in line and "update" in line
    assert RECOVER[runner] in calls()


@pytest.mark.parametrize("runner", ["nrfjprog", "nrfutil"])
def test_a_hung_or_killed_tool_fails_its_node_only(tmp_path, fake_bin, nrf_build, runner):
    """A tool that never returns (a probe that stopped answering) is stopped after --timeout and its node
    fails with the next step; a tool killed by a signal says so; the other node is flashed and reset."""
    devices, calls = fake_bin
    tb = write_testbed(tmp_path, runner, ["683000001", "683000002"])
    for state, says in [("hang", "did not finish within 2 s"), ("killed", "killed by signal SIGKILL")]:
        devices({"683000001": "open", "683000002": state})
        r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q", "--timeout", "2")
        assert r.exit_code == 1, r.output
        [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert line.startswith("FAILED: 1 of 2 nodes failed to flash (first: node 1: ") and says in line, line
        reset0 = (["nrfjprog", "-f", "NRF52", "--reset", "-s", "683000001"] if runner == "nrfjprog"
                  else ["nrfutil", "device", "reset", "--serial-number", "683000001"])
        assert reset0 in calls()
        flashed = json.loads((tmp_path / ".cisl-testbed" / "flashed.json").read_text())
        assert [x["ok"] for x in flashed["results"]] == [True, False]


@pytest.mark.faults
@pytest.mark.parametrize("runner", ["nrfjprog", "nrfutil"])
def test_tool_output_that_is_not_utf8_or_floods_stays_one_line(tmp_path, fake_bin, nrf_build, runner):
    """Bytes that are not UTF-8 made a tool that succeeded a FLASH ERROR (UnicodeDecodeError), and in the
    reset step ended the whole flash with "a file that should be text is not" (exit 2, no flashed.json);
    a tool's multi-megabyte last line became the error line."""
    devices, calls = fake_bin
    tb = write_testbed(tmp_path, runner, ["683000001", "683000002"])
    devices({"683000001": "garbled", "683000002": "reset:garbled-fail"})
    r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q")
    assert r.exit_code == 1, r.output
    rows = {ln.split()[1]: ln for ln in r.stdout.splitlines() if ln.startswith("node ")}
    assert rows["00"].endswith("ok")
    assert "RESET ERROR: reset failed: " in rows["01"] and "exit code 2" in rows["01"] and "chec" in rows["01"]
    flashed = json.loads((tmp_path / ".cisl-testbed" / "flashed.json").read_text())
    assert [(x["ok"], x["stage"]) for x in flashed["results"]] == [(True, "flash"), (False, "reset")]
    devices({"683000001": "open", "683000002": "flood"})
    r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q")
    assert r.exit_code == 1, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "exit code 1: Error: ####" in line and "2000007 characters" in line and len(line) < 600, line[:1000]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"  # a zombie is dead
    except OSError:
        return False


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text in (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


@pytest.mark.faults
def test_a_hung_tools_helper_process_is_stopped_with_it(tmp_path, fake_bin, nrf_build):
    """On --timeout only the tool's own process was killed: a helper it started (nrfutil runs its work in
    a child process) kept running, and holding the probe, after `cisl flash` had ended."""
    import time

    devices, _ = fake_bin
    devices({"683000001": "open", "683000002": "hang-helper"})
    tb = write_testbed(tmp_path, "nrfutil", ["683000001", "683000002"])
    r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q", "--timeout", "1")
    assert r.exit_code == 1 and "did not finish within 1 s" in r.stderr, r.output
    helper = int((tmp_path / "helper.pid").read_text())
    end = time.monotonic() + 2
    while _alive(helper) and time.monotonic() < end:
        time.sleep(0.02)
    assert not _alive(helper), "the tool's helper process outlived cisl flash"


@pytest.mark.faults
def test_ctrl_c_stops_parallel_flashing_at_once_and_records_what_was_flashed(tmp_path, fake_bin, nrf_build):
    """SIGINT or SIGTERM to cisl while a tool hangs (ignoring signals) waited for the tool's --timeout
    (180 s per step by default) and left the previous flash's record, all nodes ok, in place."""
    import signal
    import sys
    import time

    devices, calls = fake_bin
    devices({"683000001": "open", "683000002": "hang-stubborn"})
    tb = write_testbed(tmp_path, "nrfjprog", ["683000001", "683000002"])
    record = tmp_path / ".cisl-testbed" / "flashed.json"
    p = subprocess.Popen([sys.executable, "-m", "codegen.cli", "flash", str(nrf_build), "--testbed", str(tb), "-q",
                          "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 20
        while not any("683000002" in c for c in calls()) and time.monotonic() < end:
            time.sleep(0.02)
        time.sleep(0.2)  # the tool is running now (and ignoring signals)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)  # to cisl alone, as `kill -INT`: the tools run in their own sessions
        out, err = p.communicate(timeout=20)
    finally:
        p.kill()
    took = time.monotonic() - t0
    assert p.returncode == 130 and err.strip().splitlines()[-1] == "interrupted", (p.returncode, err)
    assert took < 15, took  # SIGTERM, then SIGKILL after 2 s; not the 60 s timeout
    tools = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and _cmdline_has(d, str(tmp_path / "bin"))]
    assert not [pid for pid in tools if _alive(pid)], "a flash tool outlived cisl"
    results = json.loads(record.read_text())["results"]
    assert [(x["ok"], x["kind"]) for x in results] == [(True, None), (False, "interrupted")], results
    assert "flash it again" in results[1]["error"]
    # and `cisl logs` will not record a board that may hold part of an image
    r = invoke("logs", "--testbed", str(tb), "-o", str(tmp_path / "logs"))
    assert r.exit_code == 2 and "node 1: the last `cisl flash` failed on it" in r.stderr, r.output
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("runner", ["nrfjprog", "nrfutil"])
def test_a_reset_of_a_protected_device_names_recover(tmp_path, fake_bin, nrf_build, runner):
    """A node whose image left the port protected (debug_port = "protected", or a rev-3 part without the
    open image) can be programmed after a recover but relocks on its reset: the reset error says so."""
    devices, _ = fake_bin
    devices({"683000001": "protected"})
    tb = load_testbed(write_testbed(tmp_path, runner, ["683000001"]))
    cls = NrfJprogRunner if runner == "nrfjprog" else NrfUtilRunner
    with pytest.raises(FlashError) as e:
        cls(tb).reset_one(tb.nodes[0], "683000001")
    assert e.value.kind == "protected" and "--recover" in str(e.value) and "debug_port" in str(e.value)


class LockedNrf52Session(FakeSession):
    """What pyocd 0.46 does with a locked nRF52 (pyocd/target/family/target_nRF52.py, read in place):
    opening the session checks CTRL-AP.APPROTECTSTATUS; with auto_unlock it mass-erases through CTRL-AP
    ERASEALL and writes UICR.APPROTECT = HwDisabled (0x5A), without it it only logs a warning and
    the AHB-AP stays shut, so discovery fails with "No cores were discovered!"."""

    def __init__(self, target, options, device):
        super().__init__(target)
        self.options, self.device = options, device

    def __enter__(self):
        import logging

        from pyocd.core.exceptions import DebugError

        if self.device["locked"]:
            log = logging.getLogger("pyocd.target.family.target_nRF52")
            if not self.options["auto_unlock"]:
                log.warning("nRF52840 APPROTECT enabled: not automatically unlocking")
                raise DebugError("No cores were discovered!")
            log.warning("nRF52840 APPROTECT enabled: will try to unlock via mass erase")
            self.device["locked"] = False
            self.device["ops"] += ["mass_erase (CTRL-AP ERASEALL)", "write_uicr 0x10001208 = 0x5A"]
        return self


def test_pyocd_protected_then_recover(tmp_path, monkeypatch, nrf_build):
    from pyocd.core.helpers import ConnectHelper

    uids = ("0240000034544e45", "0240000034544e46")
    target = FakeTarget(SEGMENTS)
    calls = fake_pyocd(monkeypatch, target, probes=uids)
    devices = {uids[0]: {"locked": False, "ops": []}, uids[1]: {"locked": True, "ops": []}}

    def session_with_chosen_probe(**kw):
        calls.append(("session_with_chosen_probe", kw))
        return LockedNrf52Session(target, kw["options"], devices[kw["unique_id"]])

    monkeypatch.setattr(ConnectHelper, "session_with_chosen_probe", staticmethod(session_with_chosen_probe))
    tb = write_testbed(tmp_path, "pyocd", list(uids))
    r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q")
    assert r.exit_code == 1, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line.startswith("FAILED: 1 of 2 nodes failed to flash (first: node 1: ")
    assert "protected (APPROTECT)" in line and "--recover" in line and "No cores" not in line
    assert devices[uids[1]] == {"locked": True, "ops": []}  # nothing erased without --recover
    assert [c[2] for c in calls if c[0] == "FileProgrammer"] == ["sector"]  # node 0 only
    del calls[:]
    del target.calls[:]
    r = invoke("flash", str(nrf_build), "--testbed", str(tb), "-q", "--recover")
    assert r.exit_code == 0, r.output
    assert devices[uids[1]]["ops"] == ["mass_erase (CTRL-AP ERASEALL)", "write_uicr 0x10001208 = 0x5A"]
    opened = sorted((c[1]["unique_id"], c[1]["options"]["auto_unlock"]) for c in calls
                    if c[0] == "session_with_chosen_probe")
    assert opened == [(uids[0], False), (uids[0], True), (uids[1], False), (uids[1], True)]  # flash, then reset
    assert [c for c in calls if c[0] == "FileProgrammer"] == [("FileProgrammer", True, "chip")] * 2
    reads = [c for c in target.calls if c[0] == "read_memory_block8"]
    assert sorted(reads) == sorted([("read_memory_block8", 0x0, 1024), ("read_memory_block8", 0x8000, 100)] * 2)
    devices[uids[1]]["locked"] = True  # it relocked at a reset (an image that does not open the port)
    bed = load_testbed(tb)
    with pytest.raises(FlashError) as e:
        PyOCDRunner(bed).reset_one(bed.nodes[1], uids[1])
    assert e.value.kind == "protected" and "debug_port" in str(e.value)


@pytest.mark.faults
def test_a_pyocd_error_of_many_lines_or_kilobytes_stays_one_short_line(tmp_path, monkeypatch, nrf_build):
    """pyocd's exception text went into the error whole: 100 kB, line breaks and all."""
    from pyocd.core.exceptions import ProbeError
    from pyocd.flash import file_programmer

    uids = ("0240000034544e45", "0240000034544e46")
    fake_pyocd(monkeypatch, FakeTarget(SEGMENTS), probes=uids)
    programmer = file_programmer.FileProgrammer

    class Failing(programmer):
        def program(self, path):
            if "node_01" in path:
                raise ProbeError("USB transfer failed\n" + "x" * 100_000)
            return super().program(path)

    monkeypatch.setattr(file_programmer, "FileProgrammer", Failing)
    r = invoke("flash", str(nrf_build), "--testbed", str(write_testbed(tmp_path, "pyocd", list(uids))), "-q")
    assert r.exit_code == 1, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "program failed (pyocd ProbeError: USB transfer failed xxx" in line and len(line) < 500, line[:600]


def test_images_of_another_plan_are_never_flashed(tmp_path, tools, nrf_build):
    build = tmp_path / "build"
    shutil.copytree(nrf_build, build)
    plan = json.loads((build / "plan.json").read_text())
    plan["note"] = "edited after the build"
    (build / "plan.json").write_text(json.dumps(plan))
    fake = tools(["683000001", "683000002"])
    tb = write_testbed(tmp_path, "nrfjprog", ["683000001", "683000002"])
    r = invoke("flash", str(build), "--testbed", str(tb))
    assert r.exit_code == 2 and "built from another plan.json; run `cisl build" in r.output, r.output
    assert not [c for c in fake.calls if "--program" in c]


def test_a_planned_split_flashes_each_plan_node_onto_its_testbed_node(tmp_path, tools, nrf_build):
    """`cisl compile --split` of a plan for testbed nodes [0, 2] (node 1 left out): plan node 1's image
    goes to testbed node 2's probe; node 1 is not touched."""
    build = tmp_path / "build"
    shutil.copytree(nrf_build, build)
    plan = json.loads((build / "plan.json").read_text())
    plan["testbed_nodes"] = [0, 2]
    (build / "plan.json").write_text(json.dumps(plan))
    summary = json.loads((build / "build.json").read_text())  # the images as `cisl build` made them for it
    (build / "build.json").write_text(json.dumps({**summary, "plan": load_plan(build).sha256[:16]}))
    fake = tools(["683000001", "683000002", "683000003"])
    tb = write_testbed(tmp_path, "nrfjprog", ["683000001", "683000002", "683000003"])
    r = invoke("flash", str(build), "--testbed", str(tb))
    assert r.exit_code == 0, r.output
    programs = [c for c in fake.calls if "--program" in c]
    image_of = {c[c.index("-s") + 1]: c[c.index("--program") + 1] for c in programs}
    assert image_of == {"683000001": str(build / "node_00" / "firmware.hex"),
                        "683000003": str(build / "node_01" / "firmware.hex")}
    assert json.loads((tmp_path / ".cisl-testbed" / "flashed.json").read_text())["nodes"] == [0, 2]
    assert "testbed node 1 is not in this build and runs what it ran before" in r.stderr  # it may still send


def test_a_probe_list_that_hangs_is_stopped_with_its_helpers(tmp_path, monkeypatch):
    # nrfutil lists probes in a child process; subprocess.run's timeout killed only the launcher and left
    # the child holding the J-Link
    import os
    import time

    from codegen.testbed.probes import nrfjprog_probes

    tool = tmp_path / "nrfjprog"
    tool.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {tmp_path}/child.pid\nwait\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(subprocess.TimeoutExpired):
        nrfjprog_probes(timeout=1.0)
    child = int((tmp_path / "child.pid").read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        raise AssertionError("the tool's helper process outlived the timeout")


def test_a_hex_next_to_the_checked_elf_is_never_flashed_in_its_place(tmp_path):
    # load_build checks firmware.elf against build.json; a firmware.hex copied or remade after the build
    # (another node's, say) was programmed because it was newer
    from codegen.testbed.flash import _image_for
    from codegen.testbed.runners import image_segments

    elf = tmp_path / "node_01" / "firmware.elf"
    elf.parent.mkdir()
    shutil.copyfile("/bin/true", elf)  # any ELF with loaded segments
    (elf.parent / "firmware.hex").write_text(":00000001FF\n")  # newer, and not this image
    tb = load_testbed(write_testbed(tmp_path, "nrfjprog", ["683000001", "683000002"]))
    flashed = _image_for(NrfJprogRunner(tb), tb, tb.nodes[1], elf)
    assert flashed != elf.parent / "firmware.hex"
    ih = IntelHex(str(flashed))
    assert all(bytes(ih.tobinarray(start=a, size=len(d))) == d for a, d in image_segments(elf))
