"""testbed.toml: a good file parses; each mistake is one line naming file, node, key and fix (exit 2).
Also `cisl testbed sim` (the virtual testbed's file) and `cisl testbed scan` with faked probes and ports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codegen.errors import UserError
from codegen.testbed import probes as P
from codegen.testbed.config import load_testbed, normalize_serial
from codegen.testbed.scan import scan

pytestmark = pytest.mark.unit

GOOD = """
[testbed]
name = "lab"

[defaults]
board = "nrf52840dk"
runner = "nrfutil"

[[node]]
id = 0
probe = "683123456"
port = "/dev/serial/by-id/usb-SEGGER_J-Link_000683123456-if00"
position = [0.0, 1.5]

[[node]]
id = 1
runner = "pyocd"
probe = "0240000034544e45"
port = "/dev/ttyACM1"
baud = 1000000
"""


def cisl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_good_file_parses_with_defaults_and_notes(tmp_path):
    (tmp_path / "tb.toml").write_text(GOOD)
    tb = load_testbed(tmp_path / "tb.toml")
    assert [n.id for n in tb.nodes] == [0, 1]
    n0, n1 = tb.nodes
    assert (n0.board, n0.runner, n0.baud, n0.position) == ("nrf52840dk", "nrfutil", 115200, (0.0, 1.5))
    assert (n1.runner, n1.baud, n1.target) == ("pyocd", 1000000, "nrf52840")
    assert tb.state_dir == tmp_path / ".cisl-testbed"
    assert len(tb.notes) == 1 and "/dev/ttyACM1" in tb.notes[0] and "by-id" in tb.notes[0]
    assert normalize_serial("000683123456") == normalize_serial("683123456")


BAD = {
    "duplicate node id": (GOOD.replace("id = 1", "id = 0"), ("tb.toml", "node id 0", "twice", "own id")),
    "unknown runner": (GOOD.replace('runner = "pyocd"', 'runner = "jlinkexe"'),
                       ("tb.toml", "node 1", "runner 'jlinkexe'", "pyocd")),
    "missing port": (GOOD.replace('port = "/dev/ttyACM1"\n', ""), ("tb.toml", "node 1", "no 'port'", "port = ")),
    "unknown key": (GOOD.replace("baud = 1000000", "baudrate = 1000000"),
                    ("tb.toml", "node 1", "unknown key 'baudrate'", "did you mean 'baud'")),
    "probe as a number": (GOOD.replace('probe = "683123456"', "probe = 683123456"),
                          ("tb.toml", "node 0", "probe must be a string", '"683123456"')),
    "two nodes on one port": (GOOD.replace('port = "/dev/ttyACM1"',
                                           'port = "/dev/serial/by-id/usb-SEGGER_J-Link_000683123456-if00"'),
                              ("tb.toml", "node 1", "also node 0's", "own serial port")),
    "unknown top-level table": (GOOD + "\n[nodes]\nx = 1\n", ("tb.toml", "unknown key 'nodes'", "did you mean 'node'")),
    "not toml": ("[[node]\nid = 0\n", ("tb.toml", "not valid TOML")),
    # a typo surfaced only at flash time, as advice to compile for a board that does not exist
    "unknown board": (GOOD.replace('board = "nrf52840dk"', 'board = "nrf5284dk"', 1),
                      ("tb.toml", "board 'nrf5284dk' is unknown", "did you mean 'nrf52840dk'")),
    # pyserial raised OverflowError in the reader thread: a traceback, then "(None)"
    "impossible baud": (GOOD.replace("baud = 1000000", "baud = 99999999999"),
                        ("tb.toml", "node 1", "baud must be", "1000000")),
    # accepted here and by `cisl profile`; `cisl plan` then stopped with a ValueError traceback
    "placed by positions, a node without one": (
        GOOD.replace("[[node]]", '[sim]\ntopology = "positions"\n\n[[node]]', 1),
        ("tb.toml", 'topology = "positions"', "node 1 has none", "position = [x, y]")),
    "a named topology for another node count": (
        GOOD.replace("[[node]]", '[sim]\ntopology = "hallway16"\n\n[[node]]', 1),
        ("tb.toml", "hallway16 has 16 nodes", "the testbed has 2")),
    # audit K (stop 60): each passed `cisl testbed check`, then ended in a traceback, a misleading failure
    # or every message lost without a word
    "a negative seed": (GOOD.replace("[[node]]", "[sim]\nseed = -1\n\n[[node]]", 1),
                        ("tb.toml", "[sim] seed must be a whole number from 0 to 4294967295", "not -1")),
    "a timeout that is not a number": (GOOD.replace("[[node]]", "[sim]\ntimeout = nan\n\n[[node]]", 1),
                                       ("tb.toml", "[sim] timeout must be a positive number of seconds",)),
    "an infinite timeout": (GOOD.replace("[[node]]", "[sim]\ntimeout = inf\n\n[[node]]", 1),
                            ("tb.toml", "[sim] timeout must be a positive number",)),
    "more inferences than the virtual testbed holds": (
        GOOD.replace("[[node]]", "[sim]\ninferences = 100000000000000000\n\n[[node]]", 1),
        ("tb.toml", "[sim] inferences must be a whole number of inferences from 1 to 100000", "several `cisl logs`")),
    "a position that is not a number": (GOOD.replace("position = [0.0, 1.5]", "position = [nan, 1.5]"),
                                        ("tb.toml", "node 0", "position must be", "within ±1e+06")),
    # finite, but the path loss overflowed (a flood of numpy warnings before a refusal further on)
    "a position beyond any radio's reach": (GOOD.replace("position = [0.0, 1.5]", "position = [1e308, 1.5]"),
                                            ("tb.toml", "node 0", "position must be", "within ±1e+06")),
    "an infinite energy budget in [defaults]": (
        GOOD.replace('runner = "nrfutil"\n', 'runner = "nrfutil"\nenergy_uj = inf\n', 1),
        ("tb.toml: [defaults]: energy_uj must be a positive, finite number",)),
    "an empty node array": ("node = []\n", ("tb.toml", "no nodes", "[[node]]")),
    "one port written two ways": (GOOD.replace('port = "/dev/ttyACM1"', 'port = "/dev//serial/by-id/x/../'
                                               'usb-SEGGER_J-Link_000683123456-if00"'),
                                  ("tb.toml", "node 1", "also node 0's", "own serial port")),
    # audit Q (stop 62): accepted by `cisl testbed check`; the port failed at open ("Is a directory"), and
    # nrfjprog got -f NRF52 for any target while pyocd would open another chip
    "a port that is a folder": (GOOD.replace('port = "/dev/ttyACM1"', 'port = "/dev"'),
                                ("tb.toml", "node 1", "port /dev is a folder, not a serial port", "cisl testbed scan")),
    "a target of another part": (GOOD.replace('baud = 1000000', 'baud = 1000000\ntarget = "stm32f4"'),
                                 ("tb.toml", "node 1", "target 'stm32f4' is not the part of board nrf52840dk",
                                  'target = "nrf52840"')),
    "a target of another part in [defaults]": (
        GOOD.replace('runner = "nrfutil"\n', 'runner = "nrfutil"\ntarget = "nrf52833"\n', 1),
        ("tb.toml: [defaults]: target 'nrf52833' is not the part of board nrf52840dk",)),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_testbed_file_is_one_clear_line(tmp_path, case):
    text, needles = BAD[case]
    (tmp_path / "tb.toml").write_text(text)
    with pytest.raises(UserError) as e:  # the library says it ...
        load_testbed(tmp_path / "tb.toml")
    for n in needles:
        assert n in str(e.value), str(e.value)


@pytest.mark.parametrize("case", ["duplicate node id", "unknown runner", "missing port", "unknown key",
                                  "a port that is a folder", "a target of another part"])
def test_bad_testbed_file_on_the_command_line(tmp_path, case):
    text, needles = BAD[case]
    (tmp_path / "tb.toml").write_text(text)
    one_line_error(cisl("flash", "build", "--testbed", "tb.toml", cwd=tmp_path), *needles)  # ... and so do
    one_line_error(cisl("logs", "--testbed", "tb.toml", cwd=tmp_path), *needles)  # the commands


def test_missing_testbed_file_says_how_to_make_one(tmp_path):
    one_line_error(cisl("logs", "--testbed", "nope.toml", cwd=tmp_path), "nope.toml", "cisl testbed scan",
                   "cisl testbed sim")


def test_testbed_sim_writes_a_valid_file(tmp_path):
    p = cisl("testbed", "sim", "--nodes", "4", "-o", "tb.toml", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    tb = load_testbed(tmp_path / "tb.toml")
    assert [(n.id, n.runner, n.board) for n in tb.nodes] == [(k, "sim", "sim") for k in range(4)]
    assert tb.nodes[3].port == ".cisl-testbed/node_03.tty"
    assert tb.nodes[3].port_path == str(tmp_path / ".cisl-testbed" / "node_03.tty")
    assert all(n.position is not None for n in tb.nodes)
    one_line_error(cisl("testbed", "sim", "--nodes", "4", "-o", "tb.toml", cwd=tmp_path), "tb.toml", "--force")
    one_line_error(cisl("testbed", "sim", "--nodes", "4", "--topology", "hallway16", "-o", "x.toml", cwd=tmp_path),
                   "hallway16")


def test_two_testbed_files_never_share_a_state_folder(tmp_path):
    """Two testbed files next to each other both defaulted to .cisl-testbed: flashing one and recording
    with the other read the first one's nodes (a 4-node file recorded 4 of the 16 running nodes, "ok")."""
    from codegen.testbed.config import claim_state_dir

    assert cisl("testbed", "sim", "--nodes", "4", "-o", "a.toml", cwd=tmp_path).returncode == 0
    p = cisl("testbed", "sim", "--nodes", "2", "-o", "b.toml", cwd=tmp_path)
    assert p.returncode == 0 and "ports under .cisl-testbed-b" in p.stdout, p.stdout + p.stderr
    assert load_testbed(tmp_path / "b.toml").state_dir == tmp_path / ".cisl-testbed-b"
    # a file written by hand with the same state as a.toml: refused once a.toml has used the folder
    (tmp_path / "c.toml").write_text((tmp_path / "a.toml").read_text())
    claim_state_dir(load_testbed(tmp_path / "a.toml"))
    with pytest.raises(UserError, match="belongs to the testbed file .*a.toml.*state = \".cisl-testbed-c\""):
        claim_state_dir(load_testbed(tmp_path / "c.toml"))
    for args in (["logs", "--testbed", "c.toml", "-o", "logs"], ["testbed", "stop", "--testbed", "c.toml"],
                 ["testbed", "check", "c.toml"]):
        one_line_error(cisl(*args, cwd=tmp_path), "c.toml", "belongs to the testbed file")
    assert not (tmp_path / "logs").exists()
    # a.toml moved to a folder of its own: c.toml may take the old one over
    (tmp_path / "a.toml").write_text((tmp_path / "a.toml").read_text().replace('state = ".cisl-testbed"',
                                                                              'state = ".cisl-testbed-a"'))
    assert claim_state_dir(load_testbed(tmp_path / "c.toml")) == tmp_path / ".cisl-testbed"


def test_a_testbed_in_use_is_refused_to_a_second_flash_or_logs(tmp_path):
    """A second `cisl logs` on a running testbed reset its nodes in the middle of the first one's run
    and read the same pseudo-terminals; both said ok."""
    from codegen.testbed.config import testbed_in_use

    assert cisl("testbed", "sim", "--nodes", "2", "-o", "tb.toml", cwd=tmp_path).returncode == 0
    with testbed_in_use(load_testbed(tmp_path / "tb.toml")):
        for args in (["logs", "--testbed", "tb.toml", "-o", "logs"], ["flash", "build", "--testbed", "tb.toml"]):
            one_line_error(cisl(*args, cwd=tmp_path), "tb.toml: another `cisl flash` or `cisl logs` is using")
    assert not (tmp_path / "logs").exists()
    p = cisl("flash", "build", "--testbed", "tb.toml", cwd=tmp_path)  # free again: on to the next check
    assert p.returncode == 2 and "another" not in p.stderr and "build" in p.stderr, p.stderr


def _lab_file(path: Path, state: str, nodes: list[tuple[int, str, str]]) -> Path:
    path.write_text(f'[testbed]\nstate = "{state}"\n[defaults]\nboard = "nrf52840dk"\nrunner = "pyocd"\n'
                    + "".join(f'[[node]]\nid = {i}\nprobe = "{probe}"\nport = "{port}"\n' for i, probe, port in nodes))
    return path


@pytest.mark.parametrize("other,needle", [
    ([(0, "000683000002", "/dev/serial/by-id/usb-J7")], "node 0: another `cisl flash` or `cisl logs` is using its probe 000683000002"),
    ([(5, "683000009", "/dev/serial/by-id/usb-J1")], "node 5: another `cisl flash` or `cisl logs` is using its port /dev/serial/by-id/usb-J1"),
], ids=["the same probe", "the same port"])
def test_two_testbed_files_cannot_drive_the_same_board_at_once(tmp_path, other, needle):
    """The lock was per state folder, so a lab's full testbed file and a small one naming some of the same
    boards could flash and reset them at once (one run's images, the other's logs)."""
    from codegen.testbed.config import testbed_in_use

    lab = _lab_file(tmp_path / "lab.toml", ".cisl-lab", [(0, "683000001", "/dev/serial/by-id/usb-J0"),
                                                          (1, "683000002", "/dev/serial/by-id/usb-J1")])
    _lab_file(tmp_path / "quick.toml", ".cisl-quick", other)
    with testbed_in_use(load_testbed(lab)):
        for args in (["logs", "--testbed", "quick.toml", "-o", "logs"], ["flash", "build", "--testbed", "quick.toml"]):
            one_line_error(cisl(*args, cwd=tmp_path), "quick.toml: " + needle)
        assert not (tmp_path / "logs").exists()
    p = cisl("flash", "build", "--testbed", "quick.toml", cwd=tmp_path)  # free again: on to the next check
    assert p.returncode == 2 and "another" not in p.stderr, p.stderr


class FakePort:
    def __init__(self, device, serial_number, vid=0x1366, pid=0x1015, location=None, description="J-Link"):
        self.device, self.serial_number, self.vid, self.pid = device, serial_number, vid, pid
        self.location, self.description, self.interface = location, description, None


def test_scan_pairs_probes_with_their_ports_and_comments_the_rest(tmp_path, monkeypatch):
    probes = [P.Probe("683000001", "J-Link OB", "pyocd"), P.Probe("683000002", "J-Link OB", "pyocd"),
              P.Probe("0240000034544e45", "DAPLink", "pyocd")]
    ports = [FakePort("/dev/ttyACM0", "000683000001", location="1-1.1:1.0"),
             FakePort("/dev/ttyACM1", "000683000001", location="1-1.1:1.2"),  # a second CDC of probe 1
             FakePort("/dev/ttyACM2", "0240000034544E45", vid=0x0D28, pid=0x0204, location="1-1.3:1.1"),
             FakePort("/dev/ttyUSB0", "A50285BI", vid=0x0403, pid=0x6001, description="FT232R")]
    monkeypatch.setattr(P, "discover", lambda tools=(): P.Discovery(probes, []))
    from serial.tools import list_ports

    monkeypatch.setattr(list_ports, "comports", lambda: ports)
    by_id = {"/dev/ttyACM0": "/dev/serial/by-id/usb-SEGGER_J-Link_000683000001-if00"}
    monkeypatch.setattr(P, "by_id_links", lambda root=None: by_id)
    monkeypatch.setattr("shutil.which", lambda name: None)  # no nrfutil/nrfjprog: J-Links go to pyocd
    s = scan()
    assert (s.matched, s.unmatched_probes, s.unmatched_ports) == (2, 1, 1)
    (tmp_path / "tb.toml").write_text(s.text)
    tb = load_testbed(tmp_path / "tb.toml")  # the draft is a valid file ...
    got = {n.probe: n.port for n in tb.nodes}
    assert got == {"683000001": "/dev/serial/by-id/usb-SEGGER_J-Link_000683000001-if00",
                   "0240000034544e45": "/dev/ttyACM2"}
    # ... and what it could not match is there, commented: probe 2 without a port, the FTDI port,
    # the second CDC port of probe 1
    assert '# probe = "683000002"' in s.text and "no serial port of this probe" in s.text
    assert "/dev/ttyUSB0" in s.text and "belong to no probe" in s.text
    assert "/dev/ttyACM1" in s.text and "another port" in s.text


def test_scan_with_nothing_attached_writes_nothing_and_says_so(tmp_path, monkeypatch):
    # it used to write a template with no node, which `cisl testbed check` then refused
    from click.testing import CliRunner
    from serial.tools import list_ports

    from codegen.cli.app import main

    monkeypatch.setattr(P, "discover", lambda tools=(): P.Discovery([], []))
    monkeypatch.setattr(list_ports, "comports", lambda: [])
    r = CliRunner().invoke(main, ["testbed", "scan", "-o", str(tmp_path / "tb.toml")])
    assert r.exit_code == 2 and "no debug probe or serial port found" in r.output, r.output
    assert not (tmp_path / "tb.toml").exists()
    # a probe without its port is worth a draft (its serial is in it), flagged as not usable yet
    monkeypatch.setattr(P, "discover", lambda tools=(): P.Discovery([P.Probe("683000002", "J-Link OB", "pyocd")], []))
    r = CliRunner().invoke(main, ["testbed", "scan", "-o", str(tmp_path / "tb.toml")])
    assert r.exit_code == 0 and "no usable node yet" in r.output, r.output
    assert '# probe = "683000002"' in (tmp_path / "tb.toml").read_text()
    # next to another testbed file using the default state folder, the draft gets a folder of its own
    (tmp_path / "sim.toml").write_text('[[node]]\nid = 0\nboard = "sim"\nrunner = "sim"\nport = "p"\n')
    r = CliRunner().invoke(main, ["testbed", "scan", "-o", str(tmp_path / "lab.toml")])
    assert r.exit_code == 0 and 'state = ".cisl-testbed-lab"' in (tmp_path / "lab.toml").read_text(), r.output


@pytest.mark.faults
def test_scan_drafts_no_nrfutil_runner_when_nrfutil_lacks_its_device_command(tmp_path, monkeypatch):
    """audit R #5: nRF Util without `nrfutil install device` could not list the probes, yet the draft named
    runner = "nrfutil" for every J-Link (then every node failed to flash)."""
    from serial.tools import list_ports

    monkeypatch.setattr(P, "pyocd_probes", lambda: [P.Probe("683000001", "J-Link OB", "pyocd")])
    monkeypatch.setattr(P, "run_in_group", lambda cmd, timeout: subprocess.CompletedProcess(
        cmd, 1, "", "Error: nrfutil command `device` not found.\n\nCaused by:\n    Subcommand nrfutil-device not found\n"))
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}" if name == "nrfutil" else None)
    monkeypatch.setattr(list_ports, "comports", lambda: [FakePort("/dev/ttyACM0", "000683000001")])
    monkeypatch.setattr(P, "by_id_links", lambda root=None: {})
    s = scan()
    (tmp_path / "tb.toml").write_text(s.text)
    [node] = load_testbed(tmp_path / "tb.toml").nodes
    assert node.runner == "pyocd", s.text
    assert any("nrfutil install device" in n for n in s.notes), s.notes


def test_nrfutil_list_json_gives_probes_and_their_ports(monkeypatch):
    out = "\n".join([
        '{"type":"task_begin","data":{"task":{"id":"1","description":"List"}}}',
        '{"type":"task_end","data":{"result":"success","data":{"devices":[{"serialNumber":"001050012345",'
        '"traits":{"jlink":true,"seggerUsb":true,"serialPorts":true},"serialPorts":[{"comName":"/dev/ttyACM3",'
        '"vcom":0}],"jlink":{"boardVersion":"PCA10056"}}]}}}'])

    def fake_run(cmd, timeout):
        assert cmd == ["nrfutil", "device", "list", "--json"]
        return subprocess.CompletedProcess(cmd, 0, out, "")

    monkeypatch.setattr(P, "run_in_group", fake_run)
    [probe] = P.nrfutil_probes()
    assert (probe.serial, probe.description, probe.ports) == ("001050012345", "PCA10056", ("/dev/ttyACM3",))
    matches, spare = P.match_ports([probe], [P.SerialPort("/dev/ttyACM3", None, "001050012345")])
    assert matches[0].port.device == "/dev/ttyACM3" and "nrfutil" in matches[0].how and not spare


def test_scan_refuses_a_board_name_it_would_draft_for_every_node(tmp_path):
    one_line_error(cisl("testbed", "scan", "-b", "nrf5284dk", "-o", "tb.toml", cwd=tmp_path),
                   "board 'nrf5284dk' is unknown", "did you mean 'nrf52840dk'")
    assert not (tmp_path / "tb.toml").exists()
    # a virtual board is known; it has nothing to scan ("--board board 'sim' is unknown" before)
    one_line_error(cisl("testbed", "scan", "-b", "sim", cwd=tmp_path), "--board sim: a virtual board has no debug probe",
                   "cisl testbed sim --nodes N")


def test_a_node_without_target_gets_its_boards_pyocd_target(tmp_path):
    # every node defaulted to nrf52840: pyocd opened nrf52833dk boards with another part's flash and memory map
    text = GOOD.replace('board = "nrf52840dk"', 'board = "nrf52833dk"')
    (tmp_path / "tb.toml").write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("target")))
    assert {n.target for n in load_testbed(tmp_path / "tb.toml").nodes} == {"nrf52833"}
