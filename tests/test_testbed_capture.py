"""Serial capture on pseudo-terminals: 16 ports written at full speed with garbage and torn lines lose and
merge no record; a port that drops and comes back is reopened; a missing final line is a failure."""

from __future__ import annotations

import csv
import json
import os
import random
import select
import threading
import time
import tty
from pathlib import Path

import pytest

from codegen.testbed.capture import PortSpec, capture

pytestmark = pytest.mark.unit


def make_pty(link: Path) -> tuple[int, str]:
    """A pty whose slave is reachable at ``link`` (like the supervisor's ports); returns (master, slave)."""
    master, slave = os.openpty()
    tty.setraw(slave)
    name = os.ttyname(slave)
    os.close(slave)
    if link.is_symlink():
        link.unlink()
    link.symlink_to(name)
    return master, name


def unplug(master: int, link: Path) -> None:
    """The board's USB device goes away: its stable name first (udev removes the by-id link), then the
    pty. Closing only the pty frees its /dev/pts number for the next pty opened anywhere on the machine
    (a test on another xdist worker), and a reader reopening the old name would read that one's lines."""
    link.unlink()
    os.close(master)


def wait_for_reader(master: int, timeout: float = 10.0) -> None:
    """Until somebody has the slave open (the master stops reporting POLLHUP)."""
    p = select.poll()
    p.register(master, select.POLLOUT)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ev = p.poll(0)
        if ev and not ev[0][1] & select.POLLHUP:
            return
        time.sleep(0.005)
    raise TimeoutError("no reader opened the port")


GARBAGE = [b"\x00\xff\xfe garbage \x1b[0m", b"\r\n", b"\xde\xad\xbe\xef\n", b"CISL", b"CIS", b"booting...\r\n",
           b"CISL 99 bogus line with spaces\n", b"CISL 3 infer inf=\n"]


def writer(master: int, node: int, count: int, seed: int) -> None:
    """Contract lines at full speed, with garbage between them, some lines torn into pieces, \r\n endings."""
    rng = random.Random(seed)
    out = bytearray(f"CISL {node} boot fw=0.1.0 plan=abc board=x node={node} nodes=16\n".encode())
    for i in range(count):
        if rng.random() < 0.3:
            out += rng.choice(GARBAGE)
            if not out.endswith(b"\n") and rng.random() < 0.5:
                out += b"\n"
        out += (f"CISL {node} sg inf={i} layer={i % 3} point=x us={rng.randrange(10**6)} tx=128 rx=384 "
                f"delivered=3 expected=3\r\n").encode()
        out += f"CISL {node} infer inf={i} us={rng.randrange(10**6)} crc=00\n".encode()  # the contract's order
    out += f"CISL {node} end inferences={count}\n".encode()
    pos = 0
    while pos < len(out):  # torn writes: pieces of random length, sometimes mid-line with a pause
        n = rng.choice([1, 7, 64, 300, 4096])
        pos += os.write(master, bytes(out[pos:pos + n]))
        if rng.random() < 0.01:
            time.sleep(0.001)


def test_sixteen_ports_at_full_speed_lose_and_merge_nothing(tmp_path):
    nodes, count = 16, 4000
    masters = {}
    for k in range(nodes):
        masters[k], _ = make_pty(tmp_path / f"node_{k:02d}.tty")
    threads = []

    def reset():  # like a board reset: the writers start only once every port is open
        for k, m in masters.items():
            wait_for_reader(m)
            t = threading.Thread(target=writer, args=(m, k, count, k), daemon=True)
            t.start()
            threads.append(t)
        return {}

    (tmp_path / "logs").mkdir()
    t0 = time.monotonic()
    r = capture([PortSpec(k, str(tmp_path / f"node_{k:02d}.tty")) for k in range(nodes)], tmp_path / "logs",
                reset=reset, timeout=60.0)
    took = time.monotonic() - t0
    for t in threads:
        t.join(5)
    for m in masters.values():
        os.close(m)
    assert r.ok, {k: c.failed for k, c in r.nodes.items() if c.failed}
    assert r.stop_reason == "all nodes done"
    for k, c in r.nodes.items():
        sg = [rec for rec in c.records if rec.event == "sg"]
        assert [int(rec.fields["inf"]) for rec in sg] == list(range(count)), f"node {k}"
        assert all(rec.node == k and rec.fields["expected"] == 3 for rec in sg)
        assert c.records[-1].event == "end" and c.ended
        assert len(c.records) == 2 * count + 2  # the garbage made no record (not even "CISL 99 ...")
        raw = (tmp_path / "logs" / f"node_{k:02d}.log").read_bytes()
        assert raw.count(b"\n") >= 2 * count + 2 and raw.endswith(f"CISL {k} end inferences={count}\n".encode())
    merged = r.merged()
    assert len(merged) == nodes * (2 * count + 2)
    times = [rec.host_time for rec in merged]
    assert times == sorted(times)
    assert took < 60


def test_a_port_that_drops_is_reopened(tmp_path):
    link = tmp_path / "node_00.tty"
    m1, _ = make_pty(link)
    done = threading.Event()
    got_first = threading.Event()

    def board():
        wait_for_reader(m1)
        os.write(m1, b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\n"
                     b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 inf")
        got_first.wait(10)
        time.sleep(0.1)
        unplug(m1, link)  # the USB device goes away mid-line ...
        time.sleep(0.3)
        m2, _ = make_pty(link)  # ... and comes back (same stable name)
        wait_for_reader(m2)
        os.write(m2, b"er inf=9 us=1 crc=00\nCISL 0 infer inf=1 us=6 crc=01\nCISL 0 end inferences=2\n")
        done.wait(10)
        os.close(m2)

    t = threading.Thread(target=board, daemon=True)
    r = capture([PortSpec(0, str(link))], None, reset=lambda: (t.start(), {})[1], timeout=20.0,
                on_record=lambda k, rec: got_first.set() if rec.event == "infer" else None)
    done.set()
    t.join(5)
    c = r.nodes[0]
    assert r.ok and c.ended and c.reopens >= 1
    # the torn line ("CISL 0 inf" + "er inf=9 ...") was dropped with the port, not glued into a record
    assert [(x.event, x.fields.get("inf")) for x in c.records] == [("boot", None), ("infer", 0), ("infer", 1),
                                                                   ("end", None)]
    # what the node printed while the port was away is lost: the inference then in progress is marked
    assert list(c.marks) == [1] and "reopened" in c.marks[1], c.marks


def test_missing_final_line_is_a_failure_not_a_success(tmp_path):
    m0, _ = make_pty(tmp_path / "a.tty")
    m1, _ = make_pty(tmp_path / "b.tty")

    def reset():
        wait_for_reader(m0)
        wait_for_reader(m1)
        os.write(m0, b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=2\n"
                     b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 infer inf=1 us=5 crc=00\n")
        os.write(m1, b"CISL 1 boot fw=0.1.0 plan=abc board=x node=1 nodes=2\n"
                     b"CISL 1 infer inf=0 us=5 crc=00\n")  # node 1 stops after one inference
        return {}

    r = capture([PortSpec(0, str(tmp_path / "a.tty")), PortSpec(1, str(tmp_path / "b.tty"))], None, reset=reset,
                inferences=2, timeout=1.5)
    assert r.nodes[0].failed is None and r.nodes[0].infers == 2
    assert r.nodes[1].failed is not None and "inf=1" in r.nodes[1].failed and "never came" in r.nodes[1].failed
    assert not r.ok
    os.close(m0)
    os.close(m1)


def test_records_stop_at_the_inferences_asked_for(tmp_path):
    # lines of the next inference that arrive before the stop used to be recorded (and reported) too
    m0, _ = make_pty(tmp_path / "a.tty")

    def reset():
        wait_for_reader(m0)
        os.write(m0, b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\n"
                     b"CISL 0 block inf=0 layer=-1 block=embed us=5 comm_us=0\nCISL 0 infer inf=0 us=5 crc=00\n"
                     b"CISL 0 block inf=1 layer=-1 block=embed us=5 comm_us=0\n")
        return {}

    r = capture([PortSpec(0, str(tmp_path / "a.tty"))], None, reset=reset, inferences=1, timeout=1.5)
    assert r.ok and [(x.event, x.fields.get("inf")) for x in r.nodes[0].records] == [("boot", None), ("block", 0),
                                                                                   ("infer", 0)]
    os.close(m0)


def test_an_old_runs_lines_that_arrive_after_the_reset_are_left_out(tmp_path):
    # after a killed `cisl logs` the nodes kept printing: their buffered lines (even the old run's
    # `end`) came after the reset and were recorded as this run's, which then passed
    m0, _ = make_pty(tmp_path / "a.tty")
    boot = b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\n"

    def reset():
        wait_for_reader(m0)
        os.write(m0, b"CISL 0 sg inf=39 layer=0 point=y us=5 tx=1 rx=1 delivered=1 expected=1\n"
                     b"CISL 0 infer inf=39 us=5 crc=00\nCISL 0 end inferences=40\n")
        time.sleep(0.2)
        os.write(m0, boot + b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 end inferences=1\n")
        return {}

    r = capture([PortSpec(0, str(tmp_path / "a.tty"))], None, reset=reset, timeout=10)
    assert r.ok and r.nodes[0].pre_reset == 3, (r.nodes[0].failed, r.nodes[0].pre_reset)
    assert [(x.event, x.fields.get("inf")) for x in r.nodes[0].records] == [("boot", None), ("infer", 0),
                                                                           ("end", None)]
    os.close(m0)


def test_swapped_ports_and_errors_fail_the_node(tmp_path):
    m0, _ = make_pty(tmp_path / "a.tty")

    def reset():
        wait_for_reader(m0)
        os.write(m0, b"CISL 1 boot fw=0.1.0 plan=abc board=x node=1 nodes=2\n")
        return {}

    r = capture([PortSpec(0, str(tmp_path / "a.tty"))], None, reset=reset, timeout=3.0)
    assert "node 1's lines" in r.nodes[0].failed
    os.close(m0)


def test_a_port_another_reader_holds_is_refused(tmp_path):
    import serial

    m0, _ = make_pty(tmp_path / "a.tty")
    with serial.Serial(str(tmp_path / "a.tty"), exclusive=True):  # e.g. a second `cisl logs`, a terminal
        with pytest.raises(OSError, match="node 0.*a.tty.*lock"):
            capture([PortSpec(0, str(tmp_path / "a.tty"))], None, open_timeout=0.3)
    os.close(m0)


def capture_one_port(tmp_path, lines: bytes):
    """Capture one node whose port prints `lines` once `cisl logs` has reset it."""
    m0, _ = make_pty(tmp_path / "a.tty")

    def reset():
        wait_for_reader(m0)
        os.write(m0, lines)
        return {}

    r = capture([PortSpec(0, str(tmp_path / "a.tty"))], None, reset=reset, timeout=3.0)
    os.close(m0)
    return r


@pytest.mark.parametrize("lines,why", [
    (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\nCISL 0 infer inf=0 us=5 crc=00\n"
     b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\nCISL 0 infer inf=0 us=5 crc=00\n"
     b"CISL 0 end inferences=1\n", "booted again"),
    (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\nCISL 0 infer inf=0 us=5 crc=00\n"
     b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 end inferences=2\n", "repeated"),
    (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\nCISL 0 infer inf=0 us=-40 crc=00\n"
     b"CISL 0 end inferences=1\n", "us=-40"),
    (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\nCISL 0 infer inf=0 us=5 crc=00\n"
     b"CISL 0 end inferences=-3\n", "inferences=-3"),
    (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\nCISL 0 infer inf=0 us=99999999999 crc=00\n"
     b"CISL 0 end inferences=1\n", "out of range"),
    (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=2 nodes=4\nCISL 0 infer inf=0 us=5 crc=00\n"
     b"CISL 0 end inferences=1\n", "boot node=2 on a line of node 0"),
    (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=2\nCISL 0 peer inf=0 peer=0 state=dead rounds=2 role=sink\n"
     b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 end inferences=1\n", "names the node itself"),
    (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=2\nCISL 0 peer inf=0 peer=5 state=dead rounds=2 role=node\n"
     b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 end inferences=1\n", "peer=5 is no node of the run"),
    (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\nCISL 0 output inf=0 crc=d202ef8d n=1 off=0 q=00\n"
     b"CISL 0 infer inf=0 us=5 crc=deadbeef\nCISL 0 end inferences=1\n", "not its output lines' crc=d202ef8d"),
])
def test_a_node_that_breaks_the_sequence_rules_is_failed_with_its_line(tmp_path, lines, why):
    """A reboot mid-run, a repeated `infer`, negative or absurd times, a negative count: never "ok"."""
    r = capture_one_port(tmp_path, lines)
    assert not r.ok and why in r.nodes[0].failed and "line " in r.nodes[0].failed, r.nodes[0].failed


@pytest.mark.faults
def test_an_old_run_delivered_after_the_reset_boot_line_first_is_named_as_a_cause(tmp_path):
    """audit R #6: a port that delivers its previous run's lines after the reset, starting with the old boot
    line, then the new run: the node failed "the node reset mid-run" only, sending the user after a reset
    that never happened. The lines cannot be told apart (the same plan and image), so both causes are named."""
    boot = b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\n"
    r = capture_one_port(tmp_path, boot + b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 infer inf=1 us=5 crc=00\n"
                         + boot + b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 end inferences=1\n")
    assert not r.ok and "booted again" in r.nodes[0].failed, r.nodes[0].failed
    assert "buffered lines of its previous run, boot line first" in r.nodes[0].failed, r.nodes[0].failed


@pytest.mark.parametrize("reset,said", [
    ("00000008", "it booted again mid-run: reset=00000008 (a CPU lock-up, e.g. a stack overflow"),
    ("0000000a", "it booted again mid-run: reset=0000000a (the watchdog: the node hung or faulted for "
                 "board.toml [watchdog] timeout_ms; a CPU lock-up"),
    ("00000000", "it booted again mid-run: reset=00000000 (power-on or brown-out: check the node's supply)"),
    ("00000004", "buffered lines of its previous run, boot line first, before the new run's); its boot line says "
                 "reset=00000004 (a software or debugger reset)"),
    ("00000020", "buffered lines of its previous run, boot line first, before the new run's)"),
])
def test_a_node_that_booted_again_is_failed_with_the_cause_its_boot_line_reads(tmp_path, reset, said):
    """nRF boards read POWER.RESETREAS into the boot line's `reset`. A cause no host reset gives (a lock-up,
    the watchdog, power) is a reset mid-run for certain, and the node fails saying so; after a debugger's
    or pin reset the line could still be the previous run's, so both causes stay named, with the reading."""
    boot = b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1 reset=00000004\n"
    again = f"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1 reset={reset}\n".encode()
    r = capture_one_port(tmp_path, boot + b"CISL 0 infer inf=0 us=5 crc=00\n" + again
                         + b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 end inferences=1\n")
    assert not r.ok and said in r.nodes[0].failed, r.nodes[0].failed


def test_a_node_that_rejoins_the_network_later_keeps_the_contract(tmp_path):
    """A board left behind by its network skips to the network's inference (nrf52840dk resync,
    docs/design/dead-nodes.md "Split networks"): `cisl logs` records it as a good run, the skipped
    inferences having no `infer` line; a resync that does not follow the inference in progress fails."""
    boot = b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=2\n"
    good = (boot + b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 resync inf=3 skipped=2 peer=0\n"
            b"CISL 0 peer inf=3 peer=1 state=alive rounds=0 role=node\nCISL 0 infer inf=3 us=5 crc=00\n"
            b"CISL 0 end inferences=2\n")
    bad = boot + b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 resync inf=3 skipped=1 peer=0\nCISL 0 end inferences=1\n"
    for lines, ok in ((good, True), (bad, False)):
        r = capture_one_port(tmp_path, lines)
        if ok:
            assert r.ok, r.nodes[0].failed
            assert r.nodes[0].infers == 2 and [x.event for x in r.nodes[0].records].count("resync") == 1
        else:
            assert not r.ok and "resync to inference 3 skipping 1" in r.nodes[0].failed, r.nodes[0].failed


def opened_within(master: int, seconds: float) -> bool:
    """Whether anybody opens the pty's slave within ``seconds``."""
    try:
        wait_for_reader(master, seconds)
        return True
    except TimeoutError:
        return False


def test_a_stale_link_to_a_pty_that_went_away_is_not_reopened(tmp_path):
    """A killed supervisor leaves its ports' links behind, and the /dev/pts number they name goes to the
    next pty opened on the machine (another program's terminal, or another test's port): the reader
    does not open that pty (it waits for the link to be made again, as a new supervisor does:
    test_a_port_that_drops_is_reopened), and the node fails with its port gone."""
    alias = tmp_path / "pts-number"  # stands in for /dev/pts/N, which the kernel gives to the next pty
    m0, _ = make_pty(alias)
    port = tmp_path / "node_00.tty"
    port.symlink_to(alias)
    stranger_read = threading.Event()
    strangers = []

    def run():
        wait_for_reader(m0)
        os.write(m0, b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\nCISL 0 infer inf=0 us=5 crc=00\n")
        time.sleep(0.2)
        os.close(m0)  # the supervisor is killed: its pty goes, the links stay
        stranger, _ = make_pty(alias)  # the number now names a stranger's pty
        strangers.append(stranger)
        if opened_within(stranger, 2.0):
            stranger_read.set()

    t = threading.Thread(target=run, daemon=True)
    r = capture([PortSpec(0, str(port))], None, reset=lambda: (t.start(), {})[1], timeout=4.0)
    t.join(5)
    for m in strangers:
        os.close(m)
    assert not stranger_read.is_set(), "the reader opened the pty its stale link named"
    c = r.nodes[0]
    assert not r.ok and "went away" in c.failed and "did not come back" in c.failed, c.failed
    assert [(x.event, x.fields.get("inf")) for x in c.records] == [("boot", None), ("infer", 0)]


def test_a_node_already_running_when_the_ports_open_starts_at_its_reset(tmp_path, monkeypatch):
    """Flashing starts a node, so its port may print the old run's lines before `cisl logs` resets it:
    those are left out (counted), and the reset's boot line starts the run (not "booted again")."""
    import threading

    from codegen.testbed import capture as cap

    # generous: the writer thread below may be slow to see the reader on a loaded machine (with a 1 s
    # limit it once wrote after the drain had ended, and the old run's lines were taken as the new one's)
    monkeypatch.setattr(cap, "OLD_RUN_QUIET_S", 2.0)
    monkeypatch.setattr(cap, "OLD_RUN_LIMIT_S", 10.0)
    m0, _ = make_pty(tmp_path / "a.tty")
    boot = b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\n"

    def old_run():
        wait_for_reader(m0)
        os.write(m0, boot + b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 infer inf=1 us=5 crc=00\n")

    t = threading.Thread(target=old_run)
    t.start()

    def reset():
        t.join()
        os.write(m0, boot + b"CISL 0 infer inf=0 us=5 crc=00\nCISL 0 end inferences=1\n")
        return {}

    r = capture([PortSpec(0, str(tmp_path / "a.tty"))], None, reset=reset, timeout=5.0)
    os.close(m0)
    assert r.ok, r.nodes[0].failed
    assert r.nodes[0].pre_reset == 3 and r.nodes[0].infers == 1
    assert [x.event for x in r.nodes[0].records] == ["boot", "infer", "end"]


def test_a_boot_after_lines_of_a_run_breaks_the_sequence_rules():
    """Without a reset (`--no-reset`), or in logs recorded before the capture held pre-boot lines:
    lines of a run, then a boot line, are a reset mid-run or two runs mixed, never one good run."""
    from codegen.serial_contract import SequenceChecker, parse_text

    checker = SequenceChecker()
    lines = parse_text("CISL 0 sg inf=39 layer=0 point=y us=5 tx=1 rx=1 delivered=1 expected=1\n"
                       "CISL 0 infer inf=39 us=5 crc=00\nCISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\n")
    verdicts = [checker.check(r) for r in lines]
    assert verdicts[:2] == [None, None] and "booted after lines of inference 39" in verdicts[2], verdicts


def test_a_line_longer_than_any_contract_line_is_noise_not_a_stall(tmp_path):
    """20 kB without a newline (a board printing binary, a baud-rate mismatch) is dropped as noise; the
    contract lines after it are recorded and the node is ok."""
    run = (b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\n" + bytes(range(1, 256)) * 80 +
           b"\nCISL 0 infer inf=0 us=5 crc=00\nCISL 0 end inferences=1\n")
    r = capture_one_port(tmp_path, run)
    assert r.ok, r.nodes[0].failed
    assert [rec.event for rec in r.nodes[0].records] == ["boot", "infer", "end"]


@pytest.mark.parametrize("text,says", [(b"", "nothing arrived on "), (b"\xff\x13\x80" * 50, "150 bytes on ")])
def test_a_node_that_prints_nothing_or_only_noise_says_what_to_check(tmp_path, text, says):
    """A board that printed nothing (unpowered, not flashed, another port) or only noise (a wrong baud
    rate): the failure names the port and what to check, not only the missing final line."""
    r = capture_one_port(tmp_path, text)
    assert not r.ok
    failed = r.nodes[0].failed
    assert says in failed and str(tmp_path / "a.tty") in failed, failed
    assert ("powered" if not text else "baud") in failed


def write_board_testbed(tmp_path: Path, ports: list[str]) -> Path:
    """A testbed file of nrf52840dk boards on the given ports (probes named; `--no-reset` needs no tool)."""
    text = '[defaults]\nboard = "nrf52840dk"\nrunner = "nrfjprog"\n'
    for k, port in enumerate(ports):
        text += f'\n[[node]]\nid = {k}\nprobe = "68300000{k + 1}"\nport = "{port}"\n'
    (tmp_path / "tb.toml").write_text(text)
    return tmp_path / "tb.toml"


@pytest.mark.faults
def test_two_nodes_on_one_device_are_refused_before_any_port_opens(tmp_path):
    """Two port paths of one device (a by-id link and its tty name): `cisl logs` waited --open-timeout and
    then said only 'could not exclusively lock port'. The testbed file itself is now refused (ports are
    compared as the paths they resolve to), by every command that reads it."""
    from click.testing import CliRunner

    from codegen.cli import main

    m0, name = make_pty(tmp_path / "a.tty")
    (tmp_path / "b.tty").symlink_to(name)
    tb = write_board_testbed(tmp_path, [str(tmp_path / "a.tty"), str(tmp_path / "b.tty")])
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["logs", "--testbed", str(tb), "-o", str(tmp_path / "logs"), "--no-reset",
                                  "--open-timeout", "20"])
    os.close(m0)
    assert r.exit_code == 2, r.output
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "node 1: port" in line and "is also node 0's" in line and "own serial port" in line, line
    assert time.monotonic() - t0 < 10 and not (tmp_path / "logs").exists()  # not the 20 s open wait


@pytest.mark.faults
def test_a_port_that_goes_away_for_good_is_named_as_the_reason(tmp_path):
    """A board unplugged mid-run (the pty's master closed, never back): the node failed only with 'its
    final line never came; last line: ...', not that its port had gone."""
    m0, _ = make_pty(tmp_path / "a.tty")

    def reset():
        wait_for_reader(m0)
        os.write(m0, b"CISL 0 boot fw=0.1.0 plan=abc board=x node=0 nodes=1\nCISL 0 infer inf=0 us=5 crc=00\nCISL 0 in")
        time.sleep(0.2)
        unplug(m0, tmp_path / "a.tty")
        return {}

    r = capture([PortSpec(0, str(tmp_path / "a.tty"))], None, reset=reset, timeout=1.5)
    failed = r.nodes[0].failed
    assert not r.ok and "never came" in failed, failed
    assert f"its port {tmp_path / 'a.tty'} went away" in failed and "did not come back" in failed, failed
    assert "last line: infer inf=0" in failed


@pytest.mark.faults
def test_a_hung_reset_tool_is_bounded_by_the_logs_timeout(tmp_path, monkeypatch):
    """A reset tool that never returns held `cisl logs --timeout 2` for 60 s (the reset's own limit)."""
    import sys

    from click.testing import CliRunner

    from codegen.cli import main

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nrfjprog"
    tool.write_text(f"#!{sys.executable}\nimport sys, time\n"
                    "if sys.argv[1:] == ['--ids']:\n    print('683000001')\n    sys.exit(0)\ntime.sleep(60)\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    m0, _ = make_pty(tmp_path / "a.tty")
    tb = write_board_testbed(tmp_path, [str(tmp_path / "a.tty")])
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["logs", "--testbed", str(tb), "-o", str(tmp_path / "logs"), "--timeout", "2", "-q"])
    os.close(m0)
    assert r.exit_code == 1, r.output
    # audit R #7: said once ("reset failed: reset: ...", "reset failed: reset failed (pyocd ...)" before)
    assert "node 0: reset failed: `nrfjprog` did not finish within 2 s" in r.stderr, r.stderr
    assert "reset failed: reset" not in r.stderr, r.stderr
    assert time.monotonic() - t0 < 20  # the tool's 60 s, not waited out


@pytest.mark.faults
def test_a_reset_error_that_says_reset_failed_is_not_said_twice(tmp_path):
    """audit R #7: pyocd's reset error read "reset failed: reset failed (pyocd ProbeError: No ACK received)"."""
    m0, _ = make_pty(tmp_path / "a.tty")
    r = capture([PortSpec(0, str(tmp_path / "a.tty"))], None, timeout=3.0,
                reset=lambda: {0: "reset failed (pyocd ProbeError: No ACK received)"})
    os.close(m0)
    assert r.nodes[0].failed == "reset failed (pyocd ProbeError: No ACK received)", r.nodes[0].failed


class ResetBoards:
    """nrf52840dk boards on pseudo-terminals for `cisl logs` through the CLI: a fake nrfjprog on PATH lists
    probes 683000001, 683000002, ... and, when it resets probe S, appends S to a file; on that, the board
    of node k (probe 68300000{k+1}) plays ``after[k]`` — what its image printed after the reset."""

    def __init__(self, tmp_path: Path, monkeypatch, after: list[bytes]):
        import sys

        self.tmp_path, self.after = tmp_path, after
        self.serials = [f"68300000{k + 1}" for k in range(len(after))]
        self.resets = tmp_path / "resets.txt"
        self.resets.touch()
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        tool = bin_dir / "nrfjprog"
        tool.write_text(f"#!{sys.executable}\nimport sys\nargs = sys.argv[1:]\n"
                        f"if args == ['--ids']:\n    print({chr(10).join(self.serials)!r})\n    sys.exit(0)\n"
                        f"if '--reset' in args:\n    with open({str(self.resets)!r}, 'a') as f:\n"
                        "        f.write(args[args.index('-s') + 1] + '\\n')\n")
        tool.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        self.masters = [make_pty(tmp_path / f"node_{k:02d}.tty")[0] for k in range(len(after))]
        self.testbed = write_board_testbed(tmp_path, [str(tmp_path / f"node_{k:02d}.tty") for k in range(len(after))])
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._board, args=(k,), daemon=True) for k in range(len(after))]
        for t in self.threads:
            t.start()

    def _board(self, k: int) -> None:
        while not self.stop.wait(0.01):
            if self.serials[k] in self.resets.read_text().split():
                os.write(self.masters[k], self.after[k])
                return

    def logs(self, *args: str):
        from click.testing import CliRunner

        from codegen.cli import main

        return CliRunner().invoke(main, ["logs", "--testbed", str(self.testbed), "-o", str(self.tmp_path / "logs"),
                                         "--timeout", "20", "-q", *args])

    def logs_once(self, *args: str):
        """One `cisl logs` run, then the boards stop."""
        try:
            return self.logs(*args)
        finally:
            self.close()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)
        for m in self.masters:
            os.close(m)


def board_run(node: int, plan: str = "abc", nodes: int = 2, infs=range(4), boot: bool = True,
              end: int | None = None, ended: bool = True) -> bytes:
    """The lines a node prints: its boot line (naming ``plan``), an `infer` line per inference, `end`."""
    lines = [f"CISL {node} boot fw=0.1.0 plan={plan} board=nrf52840dk node={node} nodes={nodes}"] if boot else []
    lines += [f"CISL {node} infer inf={i} us=170000 crc=00000000" for i in infs]
    if ended:
        lines.append(f"CISL {node} end inferences={len(infs) if end is None else end}")
    return "".join(ln + "\n" for ln in lines).encode()


def one_stderr_line(r) -> str:
    # without a flash record `cisl logs` also notes that the plan was checked against no build
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note: no flash record")]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.faults
@pytest.mark.parametrize("after1, args, first", [
    # the reset did nothing (a tool that exits 0 without resetting): the old image's inferences 200.. go on
    (b"".join(f"CISL 1 infer inf={i} us=170000 crc=00000000\n".encode() for i in range(200, 204)), ["-n", "4"],
     "infer inf=200"),
    # it ignored the reset: the end of an old run (whose `end` counts its inference 0, not seen)
    (board_run(1, infs=range(1, 4), boot=False, end=4), [], "infer inf=1"),
    # it reset, but its boot line was garbled on the wire (and it runs an older plan: nothing tells)
    (board_run(1, plan="1111111111111111", boot=False), [], "infer inf=0"),
], ids=["reset-did-nothing", "reset-ignored", "boot-line-lost"])
def test_a_node_without_a_boot_line_after_the_reset_fails(tmp_path, monkeypatch, after1, args, first):
    """After the reset `cisl logs` took a node's lines without a boot line as its run (BOOT_GRACE_S
    later): the old image's inferences, of any plan, recorded as this run's, exit 0 and "ok"."""
    bed = ResetBoards(tmp_path, monkeypatch, [board_run(0), after1])
    r = bed.logs_once(*args)
    assert r.exit_code == 1, r.output
    line = one_stderr_line(r)
    assert "node 1: no boot line after the reset" in line and f"(first: {first}" in line, line
    assert "nothing confirms it runs the flashed build" in line and "garbled on the wire" in line, line
    assert "cisl flash" in line
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert summary["ok"] is False and summary["nodes"]["0"]["failed"] is None
    assert "no boot line" in summary["nodes"]["1"]["failed"]
    # its lines are none of this run's records (the raw .log keeps them)
    assert (tmp_path / "logs" / "node_01.jsonl").read_text() == ""
    assert b"CISL 1 infer" in (tmp_path / "logs" / "node_01.log").read_bytes()
    assert all(json.loads(ln)["node"] == 0 for ln in (tmp_path / "logs" / "merged.jsonl").read_text().splitlines())


@pytest.mark.faults
def test_a_board_that_refuses_to_start_is_named_by_its_error_not_its_missing_boot_line(tmp_path, monkeypatch):
    """A board whose UICR label names another node prints `error where=uicr_node_id` and no boot line."""
    bed = ResetBoards(tmp_path, monkeypatch, [board_run(0), b"CISL 1 error inf=0 where=uicr_node_id code=3\n"])
    r = bed.logs_once()
    assert r.exit_code == 1, r.output
    line = one_stderr_line(r)
    assert "node 1: it reported an error at uicr_node_id (code 3) and printed no boot line" in line, line


def _listen_without_reset(tmp_path: Path, printed: bytes):
    """`cisl logs --no-reset` of one board that prints ``printed`` once the capture listens."""
    from click.testing import CliRunner

    from codegen.cli import main

    m0, _ = make_pty(tmp_path / "a.tty")
    tb = write_board_testbed(tmp_path, [str(tmp_path / "a.tty")])

    def board():
        wait_for_reader(m0)
        time.sleep(0.2)
        os.write(m0, printed)

    t = threading.Thread(target=board, daemon=True)
    t.start()
    r = CliRunner().invoke(main, ["logs", "--testbed", str(tb), "-o", str(tmp_path / "logs"), "--no-reset",
                                  "--timeout", "10", "-q"])
    t.join(5)
    os.close(m0)
    return r


@pytest.mark.faults
@pytest.mark.parametrize("infs, end, broken", [
    (range(40, 44), 44, None),  # the capture caught inferences 40..43 of a 44-inference run
    (range(1, 4), 4, None),  # it missed inference 0
    (range(3), 4, "end inferences=4 but it reported 3 inferences"),  # from inference 0: all of them seen
    (range(40, 44), 45, "end inferences=45 but it reported 4 inferences from inference 40 on (at most 44"),
    (range(40, 44), 3, "end inferences=3 but it reported 4 inferences"),
])
def test_without_a_reset_no_boot_line_is_expected_but_the_end_count_is_checked(tmp_path, infs, end, broken):
    """`--no-reset` only listens: a run caught mid-way has no boot line and is good; its `end inferences=N`
    counts the inferences before the first one seen too, but no more than there were (the check was
    skipped without a boot line: `end inferences=4` after inferences 0..2 passed)."""
    r = _listen_without_reset(tmp_path, board_run(0, nodes=1, infs=infs, boot=False, end=end))
    if broken is None:
        assert r.exit_code == 0, r.output
        assert "ok (end)" in r.stdout
    else:
        assert r.exit_code == 1, r.output
        line = one_stderr_line(r)
        assert "breaks the serial contract" in line and broken in line, line


@pytest.mark.faults
@pytest.mark.parametrize("runs, bad", [
    ([board_run(0, plan="2222222222222222"), board_run(1, plan="1111111111111111")], [0, 1]),
    ([board_run(0, nodes=3), board_run(1, nodes=3), board_run(2, plan="1111111111111111", nodes=3)], [2]),
    ([board_run(0, nodes=3), board_run(1, nodes=3), board_run(2, nodes=2)], [2]),
], ids=["two-plans", "one-node-on-an-older-plan", "another-node-count"])
def test_nodes_whose_boot_lines_disagree_fail_without_a_flash_record(tmp_path, monkeypatch, runs, bad):
    """No flash record (a fresh clone, the state folder deleted, another machine): `cisl logs` compared
    nothing, so nodes running two builds were one good run. One build's nodes all print its plan and
    node count: those outside the most common one fail (all of them on a tie)."""
    bed = ResetBoards(tmp_path, monkeypatch, runs)
    r = bed.logs_once()
    assert r.exit_code == 1, r.output
    line = one_stderr_line(r)
    assert f"{len(bad)} of {len(runs)} nodes" in line and f"node {bad[0]}: the nodes' boot lines disagree (" in line, line
    assert "ran different builds" in line and "cisl flash" in line, line
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert [k for k, n in summary["nodes"].items() if n["failed"]] == [str(k) for k in bad]


@pytest.mark.faults
def test_a_failed_nodes_records_end_with_the_line_that_failed_it(tmp_path, monkeypatch):
    """Node 1 boots another plan than the flashed one: it failed, but its later lines (the stale image's
    inferences) still went into node_01.jsonl and merged.jsonl, where `cisl report` tabulated them."""
    bed = ResetBoards(tmp_path, monkeypatch, [board_run(0, plan="2222222222222222"),
                                              board_run(1, plan="deadbeefdeadbeef")])
    state = tmp_path / ".cisl-testbed"
    state.mkdir()
    (state / "flashed.json").write_text(json.dumps({
        "build": str(tmp_path / "build"), "plan_sha256": "2" * 64, "plan": "2222222222222222", "board": "nrf52840dk",
        "nodes": [0, 1], "plan_nodes": {"0": 0, "1": 1}, "reset": True,
        "results": [{"node": 0, "ok": True}, {"node": 1, "ok": True}]}))
    r = bed.logs_once()
    assert r.exit_code == 1, r.output
    assert "node 1: it runs plan deadbeefdeadbeef, not the flashed build's 2222222222222222" in one_stderr_line(r)
    node1 = [json.loads(ln) for ln in (tmp_path / "logs" / "node_01.jsonl").read_text().splitlines()]
    assert [(x["event"], x.get("plan")) for x in node1] == [("boot", "deadbeefdeadbeef")]
    assert b"CISL 1 end inferences=4" in (tmp_path / "logs" / "node_01.log").read_bytes()  # the raw log keeps all
    merged = [json.loads(ln) for ln in (tmp_path / "logs" / "merged.jsonl").read_text().splitlines()]
    assert [x["event"] for x in merged if x["node"] == 1] == ["boot"]
    # and `cisl report` refuses these logs: their boot lines name two plans
    from click.testing import CliRunner

    from codegen.cli import main

    rep = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert rep.exit_code == 2, rep.output
    line = one_stderr_line(rep)
    assert "boot lines name 2 plans (plan 2222222222222222 on node 0; plan deadbeefdeadbeef on node 1)" in line, line
    assert not (tmp_path / "rep").exists()


@pytest.mark.faults
@pytest.mark.parametrize("image, ok", [("1111222233334444", True), ("aaaabbbbccccdddd", False), (None, False)])
def test_a_board_on_another_image_of_the_flashed_plan_fails(tmp_path, monkeypatch, image, ok):
    """The plan hash alone let an image of the same plan built otherwise (other kernels, flags, an older
    cisl) pass as the flashed one; boards now print their image's build id."""
    def run(node: int, image: str | None) -> bytes:
        text = board_run(node, plan="2222222222222222").decode()
        return text.replace("nodes=2", "nodes=2" + (f" image={image}" if image else ""), 1).encode()

    bed = ResetBoards(tmp_path, monkeypatch, [run(0, "9999888877776666"), run(1, image)])
    state = tmp_path / ".cisl-testbed"
    state.mkdir()
    (state / "flashed.json").write_text(json.dumps({
        "build": str(tmp_path / "build"), "plan_sha256": "2" * 64, "plan": "2222222222222222", "board": "nrf52840dk",
        "nodes": [0, 1], "plan_nodes": {"0": 0, "1": 1}, "reset": True,
        "results": [{"node": 0, "ok": True}, {"node": 1, "ok": True}],
        "images": {"0": "9999888877776666", "1": "1111222233334444"}}))
    r = bed.logs_once()
    if ok:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 1, r.output
    said = image or "(none named: an older cisl image)"
    assert f"node 1: it runs image {said} of that plan, not the flashed 1111222233334444" in one_stderr_line(r)


@pytest.mark.faults
def test_the_report_of_a_failed_run_says_so(tmp_path, monkeypatch):
    """The logs of a failed run stay reportable (for inspection), but `cisl report` never read
    summary.json's verdict: a failed run's tables came out as a good run's, exit 0, without a word."""
    bed = ResetBoards(tmp_path, monkeypatch, [board_run(0), board_run(1, ended=False)])
    r = bed.logs_once("--timeout", "4")
    assert r.exit_code == 1, r.output
    from click.testing import CliRunner

    from codegen.cli import main

    rep = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert rep.exit_code == 0, rep.output
    notes = [ln for ln in rep.stderr.splitlines() if "FAILED" in ln]
    assert len(notes) == 1 and notes[0].startswith("note: logs: `cisl logs` FAILED this run"), rep.stderr
    assert "node 1: its final line 'end' never came" in notes[0] and "not a good run's results" in notes[0]
    assert (tmp_path / "rep" / "latency.csv").is_file()


def inference_lines(node: int, inf: int, drop: str | None = None, garble: str | None = None) -> list[str]:
    """The lines a node of a 2-node build prints per inference: embed, attn with two rounds, head with its
    round, infer. ``drop``: a line left out (lost on the wire); ``garble``: a line with a noise byte in it."""
    lines = [f"CISL {node} block inf={inf} layer=-1 block=embed us=100 comm_us=0",
             f"CISL {node} sg inf={inf} layer=0 point=x us=500 tx=8 rx=8 delivered=1 expected=1",
             f"CISL {node} sg inf={inf} layer=0 point=h us=500 tx=8 rx=8 delivered=1 expected=1",
             f"CISL {node} block inf={inf} layer=0 block=attn us=900 comm_us=1000",
             f"CISL {node} sg inf={inf} layer=-1 point=head us=400 tx=8 rx=0 delivered=0 expected=0",
             f"CISL {node} block inf={inf} layer=-1 block=head us=50 comm_us=400",
             f"CISL {node} infer inf={inf} us=2500 crc=00000000"]
    out = []
    for ln in lines:
        if drop and drop in ln:
            continue
        out.append(ln.replace(garble, garble[:3] + "\xff" + garble[3:]) if garble and garble in ln else ln)
    return out


def run_with(node: int, damage: dict[int, dict], boot: bool = True, infs=range(4)) -> bytes:
    lines = [f"CISL {node} boot fw=0.1.0 plan=abc board=nrf52840dk node={node} nodes=2"] if boot else []
    for i in infs:
        lines += inference_lines(node, i, **damage.get(i, {}))
    lines.append(f"CISL {node} end inferences={infs[-1] + 1}")
    return "".join(ln + "\n" for ln in lines).encode("latin-1")


@pytest.mark.faults
@pytest.mark.parametrize("damage, why", [
    ({1: {"drop": "block=attn"}}, "damaged: lines lost (block attn layer 0)"),
    ({2: {"drop": "point=h "}}, "damaged: lines lost (sg h layer 0)"),
    ({1: {"garble": "block=attn"}}, "damaged: line 12 of its log did not parse"),
], ids=["lost-block", "lost-sg", "garbled-line"])
def test_an_inference_that_lost_a_line_is_named_incomplete(tmp_path, monkeypatch, damage, why):
    """A `block` or `sg` line lost inside an inference (a USB drop, a line garbled on the wire and dropped
    by the reader) left that inference with fewer lines: `cisl logs` said `ok (end)`, summary.json named
    nothing, and `cisl report` averaged the rest as a whole inference. Now the node's status line and
    summary.json name it (a warning: the node's other inferences are good data)."""
    bed = ResetBoards(tmp_path, monkeypatch, [run_with(0, {}), run_with(1, damage)])
    r = bed.logs_once()
    assert r.exit_code == 0, r.output
    [inf] = damage
    [row1] = [ln for ln in r.stdout.splitlines() if ln.split()[:1] == ["1"]]
    assert "ok (end), 1 inference incomplete, left out by `cisl report`" in row1 and f"{inf}: {why}" in row1, row1
    [row0] = [ln for ln in r.stdout.splitlines() if ln.split()[:1] == ["0"]]
    assert "incomplete" not in row0, row0
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert summary["ok"] is True and summary["nodes"]["0"]["incomplete"] == {}
    assert list(summary["nodes"]["1"]["incomplete"]) == [str(inf)]
    assert summary["nodes"]["1"]["incomplete"][str(inf)].startswith(why)
    # the report leaves it out of every table and says so
    rep = tmp_path / "rep"
    from click.testing import CliRunner

    from codegen.cli import main

    r = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(rep), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "logs: 1 incomplete inference left out of the tables (node 1;" in r.stdout, r.stdout
    with open(rep / "latency.csv") as f:
        lat = {row["node"]: row for row in csv.DictReader(f)}
    assert lat["1"]["inferences"] == "3" and lat["0"]["inferences"] == "4"
    assert float(lat["1"]["other_us"]) == float(lat["0"]["other_us"]) == 50.0, lat
    assert f"node 1: inference {inf} ({why}" in (rep / "notes.txt").read_text()


@pytest.mark.faults
def test_without_a_reset_the_first_inference_seen_is_partial_and_the_plan_unchecked(tmp_path):
    """`--no-reset` starts listening mid-inference: its first inference was seen in part but counted
    whole (compute 32 % low), and nothing said that no boot line came, so the plan and image the node ran
    were never checked."""
    lines = run_with(0, {}, boot=False, infs=range(5, 8)).split(b"\n")
    r = _listen_without_reset(tmp_path, b"\n".join(lines[4:]))  # the capture starts at inference 5's attn block
    assert r.exit_code == 0, r.output
    assert "ok (end), 1 inference incomplete" in r.stdout and "5: partial" in r.stdout, r.stdout
    note = one_stderr_line(r)
    assert note.startswith("note: no boot line from node 0") and "plan and image" in note and "not checked" in note
    assert "flashed build" not in note  # there is no flash record here (its own note says so): nothing was flashed
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert list(summary["nodes"]["0"]["incomplete"]) == ["5"] and note[len("note: "):] in summary["notes"]


@pytest.mark.faults
def test_a_board_printing_another_nodes_lines_names_ports_or_probes(tmp_path, monkeypatch):
    """audit Q #8: swapped probe serials (each node's image flashed onto the other's board) were reported as
    "the testbed file's ports are swapped or wrong (fix port ...)": following that made the run pass with
    every node id on the other physical board."""
    bed = ResetBoards(tmp_path, monkeypatch, [board_run(1), board_run(0)])
    r = bed.logs_once()
    assert r.exit_code == 1, r.output
    line = one_stderr_line(r)
    assert "node 0: its port printed node 1's lines: the board on its port got that node's image" in line, line
    assert "ports or probes are swapped or wrong" in line and "/dev/serial/by-id/" in line, line
    assert "cisl testbed scan" in line and "port or probe, for node 0 and the node that runs 1" in line, line


def write_flash_record(tmp_path: Path, nodes: list[int], plan: str = "2222222222222222") -> None:
    state = tmp_path / ".cisl-testbed"
    state.mkdir()
    (state / "flashed.json").write_text(json.dumps({
        "build": str(tmp_path / "build"), "plan_sha256": plan * 4, "plan": plan, "board": "nrf52840dk",
        "nodes": nodes, "plan_nodes": {str(k): k for k in nodes}, "reset": True,
        "results": [{"node": k, "ok": True} for k in nodes]}))


@pytest.mark.faults
def test_logs_of_some_nodes_reset_every_node_of_the_flashed_build(tmp_path, monkeypatch):
    """audit Q #5: `cisl logs --node 0` reset only board 0; board 1 stayed idle (its run had ended), so node 0
    ran the 2-node plan with a dead peer — another experiment, recorded ok — while the virtual testbed
    restarts every node."""
    bed = ResetBoards(tmp_path, monkeypatch, [board_run(0, plan="2222222222222222"),
                                              board_run(1, plan="2222222222222222")])
    write_flash_record(tmp_path, [0, 1])
    r = bed.logs_once("--node", "0")
    assert r.exit_code == 0, r.output
    assert sorted(bed.resets.read_text().split()) == ["683000001", "683000002"]  # both boards reset
    assert sorted(p.name for p in (tmp_path / "logs").glob("node_*.jsonl")) == ["node_00.jsonl"]  # one recorded
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert list(summary["nodes"]) == ["0"] and summary["reset_nodes"] == [0, 1] and summary["notes"] == []
    assert "note:" not in r.stderr, r.stderr


@pytest.mark.faults
def test_logs_without_a_flash_record_say_the_plan_was_checked_against_no_build(tmp_path, monkeypatch):
    """audit Q #6: with no flashed.json (a fresh clone, the state folder deleted) boards that all ran
    another plan passed as `ok (end)`, exit 0, without a word that nothing was compared."""
    bed = ResetBoards(tmp_path, monkeypatch, [board_run(0, plan="0123456789abcdef"),
                                              board_run(1, plan="0123456789abcdef")])
    r = bed.logs_once()
    assert r.exit_code == 0, r.output
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1, r.stderr
    assert notes[0].startswith("note: no flash record (no flashed.json in the testbed's state folder"), notes[0]
    assert "the plan the nodes ran (0123456789abcdef) was checked against no build" in notes[0], notes[0]
    assert "`cisl report LOGS --build BUILD`" in notes[0] and "cisl flash BUILD" in notes[0], notes[0]
    assert json.loads((tmp_path / "logs" / "summary.json").read_text())["notes"] == [notes[0][len("note: "):]]


@pytest.mark.faults
def test_a_build_node_left_out_by_node_that_cannot_be_reset_is_noted(tmp_path, monkeypatch):
    """The other nodes of the build are reset for the run too: one whose reset fails is not recorded, so
    its failure is a note (the recorded nodes may have run without it), not lost."""
    plan = "2222222222222222"
    bed = ResetBoards(tmp_path, monkeypatch, [board_run(k, plan=plan, nodes=3) for k in range(3)])
    bed.testbed.write_text(bed.testbed.read_text().replace('probe = "683000003"', 'probe = "683000009"'))
    write_flash_record(tmp_path, [0, 1, 2], plan)
    r = bed.logs_once("--node", "0", "--node", "1")
    assert r.exit_code == 0, r.output
    assert sorted(bed.resets.read_text().split()) == ["683000001", "683000002"]
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith("note: node 2 of the build, not recorded (--node), did not reset "
                                                   "(node 2: probe 683000009 is not attached"), r.stderr
    assert "may have run without it" in notes[0]


def elastic_run(node: int, switch_at: int | None = 2, unheard: bool = False, mixed_peer: int | None = None,
                infs=range(5)) -> bytes:
    """An elastic image's node over 5 inferences: mode 0, then mode 2 from ``switch_at`` (its `switch`
    line), each inference a block line whose time says its mode (mode 2 is faster). ``unheard``: it missed
    the announcing control round (`unheard` there, switches one inference later); ``mixed_peer``: it saw
    in the next control round that that peer ran mode 0 (`mode state=mixed`)."""
    lines = [f"CISL {node} boot fw=0.1.0 plan=abc board=nrf52840dk node={node} nodes=2"]
    mode = 0
    for i in infs:
        if switch_at is not None and i == switch_at and unheard:
            lines.append(f"CISL {node} mode inf={i} state=unheard mode=0")
        elif switch_at is not None and i == switch_at + int(unheard):
            mode = 2
            lines.append(f"CISL {node} mode inf={i} state=switch mode=2")
        if mixed_peer is not None and switch_at is not None and i == switch_at + 1:
            lines.append(f"CISL {node} mode inf={i} state=mixed mode=2 peer={mixed_peer} peer_mode=0")
        us = 1000 if mode == 0 else 400
        lines += [f"CISL {node} block inf={i} layer=-1 block=embed us={us} comm_us=0",
                  f"CISL {node} infer inf={i} us={us + 100} crc=00000000"]
    lines.append(f"CISL {node} end inferences={len(infs)}")
    return "".join(ln + "\n" for ln in lines).encode()


@pytest.mark.faults
def test_an_inference_a_node_ran_in_another_mode_is_never_reported_good(tmp_path, monkeypatch):
    """audit R #1: node 1 missed the control round announcing mode 2 (`mode state=unheard`), so inference 2
    ran with node 0 in mode 2 and node 1 in mode 0 (node 0 says so: `mode state=mixed`). `cisl logs` said
    `ok (end)` for both, and `cisl report` averaged all 5 inferences, modes 0 and 2 together, with no note.
    Now `cisl logs` names inference 2 on both nodes, and the report leaves it out and has rows per mode."""
    from click.testing import CliRunner

    from codegen.cli import main

    bed = ResetBoards(tmp_path, monkeypatch, [elastic_run(0, mixed_peer=1), elastic_run(1, unheard=True)])
    r = bed.logs_once()
    assert r.exit_code == 0, r.output
    for k in (0, 1):
        [row] = [ln for ln in r.stdout.splitlines() if ln.split()[:1] == [str(k)]]
        assert "ok (end), 1 inference ran mixed modes, left out by `cisl report` (2: mixed modes: node 0 mode 2, " \
               "node 1 mode 0" in row, row
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert [list(summary["nodes"][k]["incomplete"]) for k in ("0", "1")] == [["2"], ["2"]], summary["nodes"]
    assert "node 0 reports that node 1 ran mode 0 in it" in summary["nodes"]["1"]["incomplete"]["2"]

    rep = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert rep.exit_code == 0, rep.output
    with open(tmp_path / "rep" / "latency.csv") as f:
        rows = {(row["run"], row["node"]): row for row in csv.DictReader(f)}
    # inferences 0-1 in mode 0, 3-4 in mode 2; inference 2 in none: mixed
    assert set(rows) == {("logs mode 0", "0"), ("logs mode 0", "1"), ("logs mode 2", "0"), ("logs mode 2", "1")}, rows
    assert {row["inferences"] for row in rows.values()} == {"2"}
    assert {rows[("logs mode 0", k)]["compute_us"] for k in "01"} == {"1000.0"}
    assert {rows[("logs mode 2", k)]["compute_us"] for k in "01"} == {"400.0"}
    notes = (tmp_path / "rep" / "notes.txt").read_text()
    assert "node 1: inference 2 (mixed modes: node 0 mode 2, node 1 mode 0" in notes, notes
    assert "logs: its complete inferences ran in 2 elastic modes (mode 0: inferences 0-1; mode 2: inferences 3-4)" \
        in notes and "never a mean over modes" in notes, notes


@pytest.mark.faults
def test_a_board_that_boots_again_after_its_end_keeps_its_first_run_and_is_noted(tmp_path, monkeypatch):
    """audit R #3: node 1's board rebooted after its `end` (a watchdog, a brown-out, the reset button) and
    played a second run: `cisl logs` stored both runs unchecked and said ok, then `cisl report` refused the
    logs (a boot line after its end line). Now the first run is the node's records, a note names the rest,
    and the report takes the logs `cisl logs` called good."""
    from click.testing import CliRunner

    from codegen.cli import main

    bed = ResetBoards(tmp_path, monkeypatch, [board_run(0), board_run(1) + board_run(1)])
    r = bed.logs_once()
    assert r.exit_code == 0, r.output
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note: node 1 ")]
    assert len(notes) == 1 and "note: node 1 printed 6 contract lines after its run ended (first: boot" in notes[0], \
        r.stderr
    assert "it started again" in notes[0] and "the raw node_01.log keeps them" in notes[0], notes[0]
    node1 = [json.loads(ln) for ln in (tmp_path / "logs" / "node_01.jsonl").read_text().splitlines()]
    assert [x["event"] for x in node1] == ["boot", "infer", "infer", "infer", "infer", "end"]
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert summary["ok"] is True and summary["nodes"]["1"]["after_end"] == 6 and notes[0][6:] in summary["notes"]
    assert (tmp_path / "logs" / "node_01.log").read_bytes().count(b"boot") == 2
    rep = CliRunner().invoke(main, ["report", str(tmp_path / "logs"), "-o", str(tmp_path / "rep"), "--no-plots"])
    assert rep.exit_code == 0, rep.output  # logs and report agree
    with open(tmp_path / "rep" / "latency.csv") as f:
        assert [row["inferences"] for row in csv.DictReader(f)] == ["4", "4"]
