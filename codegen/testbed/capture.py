"""Serial capture: one reader thread per port, contract lines parsed with host timestamps.

Every port is opened (pyserial) before ``reset`` is called, so a node's boot lines are not lost; what a
node already running prints before the reset (flashing starts it) is its old run's and left out.
Each thread appends the raw bytes to the node's ``.log``, splits lines, and hands the parsed records
(see codegen/serial_contract.py) to the main thread. Garbage, partial lines and ``\\r`` are
tolerated; a port that drops (USB re-enumeration on reset, an unplugged cable) is reopened with
backoff, and the fragment of the line it was in is discarded rather than glued to the next one.
A port that is a link to a pseudo-terminal (a virtual testbed's) is reopened only once the link has
been made again: a pty that went away is gone for good, and its number goes to the next pty opened on
the machine — a killed supervisor's stale link would otherwise read another program's terminal.
The capture stops when every node has printed its final line (``end``, or the N-th ``infer`` with
``inferences=N``), after ``duration`` seconds, or at ``timeout``; a node whose final line never
came has failed, and so has a node that printed ``error``. What a node prints after its ``end`` (a board
that boots again and plays a second run) is left out of its records and counted (``after_end``). After a reset a node's run starts at its
``boot`` line, the only line that names the plan it runs: a node that prints contract lines but no
boot line after the reset has failed too (it did not reset and runs its old image on, or its boot
line was garbled on the wire: either way nothing confirms that it runs the flashed build). Without a
reset (``--no-reset``) no boot line is expected: the run is taken from its first line. The nodes of
one build all print its plan and node count in their boot lines (one plan.json for every node, a
planned split's too): nodes whose boot lines disagree ran different builds, and those outside the
most common plan fail (all of them on a tie), with or without a flash record to compare with. A
failed node's records end with the line that failed it; what it printed after that is left out (the
raw ``.log`` keeps it).

Host commands (``commands``: e.g. ``mode 2``, firmware/runtime/cisl_host.h) are written to a node's
port once it has printed the line before the inference they are for (``infer inf=I-1``, or ``boot``
for the first); the node takes them at the start of its next inference and answers each with one
``host`` line, which the capture pairs with the command (a node that is past that point when the
bytes arrive takes them one inference later: a UART is asynchronous).
"""

from __future__ import annotations

import os
import queue
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..serial_contract import LOOKS_LIKE_CONTRACT, Record, SequenceChecker, parse_line

MAX_LINE = 4096  # longer runs without a newline are noise (contract lines are at most 511 characters)


@dataclass
class PortSpec:
    node: int
    port: str
    baud: int = 115200
    prints: int | None = None  # the node id its image prints (a planned split's plan node); None: ``node``
    image: str | None = None  # the flashed image's id (its boot line's `image`); None: not known


@dataclass
class HostCommand:
    """A line for a node's host to write: ``text`` before inference ``before`` (at its boot for 0)."""
    node: int
    before: int
    text: str
    sent: float | None = None  # host time it was written
    answer: str | None = None  # the node's `host` line's state (ok, refused, ...), None if none came
    answered_inf: int | None = None
    took: int | None = None  # `mode M` answered ok: the mode of the node's `mode state=request` line


@dataclass
class NodeCapture:
    node: int
    port: str
    prints: int | None = None  # the node id its lines must carry (PortSpec.prints); None: ``node``
    records: list[Record] = field(default_factory=list)
    lines: int = 0  # complete lines read (contract or not)
    bytes: int = 0
    reopens: int = 0
    opened: bool = False
    open_error: str | None = None
    done: bool = False
    failed: str | None = None  # why the node failed, None if it did not
    infers: int = 0
    ended: bool = False
    pre_reset: int = 0  # contract lines read before the reset (a previous run's), left out
    booted: bool = False  # its boot line came (after the reset, when there was one)
    bootless: int = 0  # after the reset, contract lines that no boot line of its own came before: left out
    image: str | None = None  # the flashed image's id (PortSpec.image); None: not checked
    marks: dict[int, str] = field(default_factory=dict)  # inference -> what the capture saw lost inside it
    after_end: int = 0  # contract lines after its run ended (`end`, or a boot line after -n's last infer): left out
    late: Record | None = None  # the first of them
    incomplete: dict[int, str] = field(default_factory=dict)  # inference -> why it is not complete (logs.py)


@dataclass
class LineLost:
    """Queued by a reader in place of lines it lost: a contract line that did not parse (``garbled``,
    its text) or the port dropped and reopened (``garbled`` None). The inference in progress is damaged."""
    garbled: str | None
    host_time: float


def pty_link_id(port: str) -> tuple[int, int] | None:
    """The identity of ``port`` if it is a symlink to a pseudo-terminal (the link's own inode and change
    time: a link made again differs), else None."""
    try:
        st = os.lstat(port)
        if not stat.S_ISLNK(st.st_mode) or not os.path.realpath(port).startswith("/dev/pts/"):
            return None
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


class PortReader(threading.Thread):
    def __init__(self, spec: PortSpec, out: queue.Queue, raw_path: Path | None, stop: threading.Event,
                 read_timeout: float = 0.05):
        super().__init__(daemon=True, name=f"serial-{spec.node}")
        self.spec = spec
        self.out = out
        self.raw_path = raw_path
        self.stop = stop
        self.read_timeout = read_timeout
        self.opened = threading.Event()
        self.open_error: str | None = None
        self._ser = None  # the open port, for send()
        self._send_lock = threading.Lock()
        self.reopens = 0
        self.bytes = 0
        self.lines = 0
        self.lost_at: float | None = None  # time.monotonic() the port dropped, while it has not come back

    def _open(self):
        import serial

        # exclusive: a second reader of the same port (another `cisl logs`) would steal lines; it fails instead
        return serial.Serial(self.spec.port, self.spec.baud, timeout=self.read_timeout, exclusive=True)

    def run(self) -> None:
        import serial

        raw = open(self.raw_path, "wb") if self.raw_path else None
        backoff = 0.05
        ever_open = False
        gone_pty = None  # the identity of the pty link lost: not reopened until the link is made again
        try:
            while not self.stop.is_set():
                if gone_pty is not None and pty_link_id(self.spec.port) == gone_pty:
                    self.stop.wait(backoff)
                    backoff = min(2 * backoff, 1.0)
                    continue
                link = pty_link_id(self.spec.port)
                try:
                    ser = self._open()
                except (serial.SerialException, OSError, ValueError, OverflowError) as e:
                    self.open_error = str(e) or type(e).__name__
                    self.stop.wait(backoff)
                    backoff = min(2 * backoff, 1.0)
                    continue
                with self._send_lock:
                    self._ser = ser
                if ever_open:
                    self.reopens += 1
                    # what the node printed while the port was away is lost: the inference in progress lacks it
                    self.out.put((self.spec.node, LineLost(None, time.time()), self.lines))
                ever_open = True
                self.open_error = None
                self.lost_at = None
                self.opened.set()
                backoff = 0.05
                buf = b""
                drain_until = None
                try:
                    while True:
                        waiting = ser.in_waiting
                        if self.stop.is_set():
                            drain_until = drain_until or time.monotonic() + 0.5
                            if not waiting or time.monotonic() > drain_until:
                                break  # what the port still held has been read
                        chunk = ser.read(max(1, waiting))
                        if not chunk:
                            continue
                        t = time.time()
                        self.bytes += len(chunk)
                        if raw is not None:
                            raw.write(chunk)
                        buf += chunk
                        if b"\n" not in chunk:
                            if len(buf) > MAX_LINE:
                                buf = buf[-MAX_LINE:]
                            continue
                        *lines, buf = buf.split(b"\n")
                        for line in lines:
                            self.lines += 1
                            text = line.decode("ascii", errors="replace").rstrip("\r")
                            rec = parse_line(text, host_time=t)
                            if rec is not None:
                                self.out.put((self.spec.node, rec, self.lines))
                            elif LOOKS_LIKE_CONTRACT.search(text):  # a whole contract line, garbled on the wire
                                self.out.put((self.spec.node, LineLost(text, t), self.lines))
                except (serial.SerialException, OSError, TypeError) as e:
                    # TypeError: pyserial on a port that vanished mid-read; the partial line is dropped
                    self.open_error = f"dropped: {e}"
                    self.lost_at = time.monotonic()
                    gone_pty = link
                finally:
                    with self._send_lock:
                        self._ser = None
                    try:
                        ser.close()
                    except Exception:
                        pass
                if not self.stop.is_set():
                    self.stop.wait(backoff)
        finally:
            if raw is not None:
                raw.close()

    def send(self, data: bytes) -> bool:
        """Write to the port (the node's receive line); False if it is not open."""
        with self._send_lock:
            if self._ser is None:
                return False
            try:
                self._ser.write(data)
                self._ser.flush()
                return True
            except Exception:  # a port that vanished: the command is not sent, and reported so
                return False


@dataclass
class CaptureResult:
    nodes: dict[int, NodeCapture]
    started: float
    ended: float
    stop_reason: str
    reset_errors: dict[int, str] = field(default_factory=dict)
    commands: list[HostCommand] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.failed is None for c in self.nodes.values())

    def merged(self) -> list[Record]:
        """All records ordered by host time (ties: by node, then the order a node printed them)."""
        rows = [(r.host_time or 0.0, k, i, r) for k, c in self.nodes.items() for i, r in enumerate(c.records)]
        rows.sort(key=lambda t: t[:3])
        return [t[3] for t in rows]


def capture(ports: list[PortSpec], raw_dir: Path | None = None, *, reset: Callable[[], dict[int, str]] | None = None,
            inferences: int | None = None, duration: float | None = None, timeout: float = 300.0,
            open_timeout: float = 10.0, run_status: Callable[[], dict | None] | None = None,
            on_record: Callable[[int, Record], None] | None = None, expected_plan: str | None = None,
            progress: Callable[[str], None] | None = None, commands: list[HostCommand] | None = None
            ) -> CaptureResult:
    """Read every port until every node printed its final line (or ``duration``/``timeout``).

    ``reset`` is called once all ports are open (it returns per-node reset errors). ``run_status``
    (virtual testbeds) says when the node processes have all ended, so a crashed run is not waited
    out to the timeout. Raises OSError naming the ports that could not be opened in ``open_timeout``.
    ``commands`` are written and paired with their answers as the module's docstring says.
    """
    say = progress or (lambda s: None)
    stop = threading.Event()
    q: queue.Queue = queue.Queue()
    readers = {p.node: PortReader(p, q, (raw_dir / f"node_{p.node:02d}.log") if raw_dir else None, stop)
               for p in ports}
    caps = {p.node: NodeCapture(p.node, p.port, p.prints, image=p.image) for p in ports}
    rules = {p.node: SequenceChecker() for p in ports}
    for r in readers.values():
        r.start()
    deadline = time.monotonic() + open_timeout
    for r in readers.values():
        r.opened.wait(max(0.0, deadline - time.monotonic()))
    closed = [r for r in readers.values() if not r.opened.is_set()]
    if closed:
        stop.set()
        for r in readers.values():
            r.join(2.0)
        raise OSError("could not open " + "; ".join(f"node {r.spec.node}: {r.spec.port} ({r.open_error})"
                                                      for r in closed))
    say(f"{len(readers)} ports open")
    started = time.time()
    t0 = time.monotonic()
    reset_at = None
    if reset:
        # a node already running (flashing starts it) prints its old run's lines as its port opens:
        # let them arrive and leave them out, so the reset's boot line starts the run
        _drain_old_run(q, caps)
        reset_at = time.time()
    reset_errors = reset() if reset else {}
    # every node's reset tool has returned: its boot line is due now (the grace is not counted from
    # reset_at, or a slow tool's node, still printing its old run, would be judged before its reset)
    boot_due = time.time() + BOOT_GRACE_S if reset else None
    for k, err in reset_errors.items():
        if err and k in caps:
            caps[k].failed, caps[k].done = _reset_failed(str(err)), True
    reason = "timeout"
    finished_at = None
    last_status = 0.0
    commands = list(commands or [])
    unanswered: dict[int, list[HostCommand]] = {}  # per node, sent and not yet answered, in order
    requested: dict[int, int] = {}  # per node, the mode of its latest `mode state=request` line

    def host_side(k: int, rec: Record) -> None:
        """Write the commands this line is the cue for; pair a `host` line with the oldest unanswered
        (and a `mode M` command with the request line the node logs just before its `ok`)."""
        if rec.event == "mode" and rec.fields.get("state") == "request":
            requested[k] = int(rec.fields["mode"])
        if rec.event == "host" and unanswered.get(k):
            cmd = unanswered[k].pop(0)
            cmd.answer, cmd.answered_inf = str(rec.fields["state"]), int(rec.fields["inf"])
            if cmd.answer == "ok" and rec.fields.get("cmd") == "mode":
                cmd.took = requested.pop(k, None)
        cue = 0 if rec.event == "boot" else int(rec.fields["inf"]) + 1 if rec.event == "infer" else None
        for cmd in commands:
            if cmd.node == k and cmd.before == cue and cmd.sent is None:
                if readers[k].send(cmd.text.encode("ascii") + b"\n"):
                    cmd.sent = time.time()
                    unanswered.setdefault(k, []).append(cmd)

    held: dict[int, list[tuple[Record, int]]] = {}  # per node: its lines after the reset, before its boot line

    def account(k: int, rec: Record, line: int) -> None:
        if isinstance(rec, LineLost):
            _mark_lost(caps[k], rules[k], rec, line)
            return
        _account(caps[k], rec, inferences, expected_plan, rules[k], line)
        if commands:
            host_side(k, rec)
        if on_record:
            on_record(k, rec)

    def judge_bootless(final: bool = False) -> None:
        """A node that printed contract lines after the reset but no boot line within BOOT_GRACE_S of the
        resets' end fails: nothing says it runs the flashed build (see the module's docstring). Its
        lines are left out of its records (the raw .log keeps them)."""
        if boot_due is None or not (final or time.time() >= boot_due):
            return
        for k in list(held):
            c, lines = caps[k], held.pop(k)
            c.bootless += len(lines)
            if c.failed is None:
                c.failed, c.done = _no_boot_line([rec for rec, _ in lines]), True

    def consume(block: float) -> None:
        try:
            item = q.get(timeout=block)
        except queue.Empty:
            return
        while True:
            k, rec, line = item
            c = caps[k]
            if isinstance(rec, LineLost) and reset_at is not None and (not c.booted or rec.host_time < reset_at):
                pass  # before its boot line: lost with the previous run's lines, which are left out anyway
            elif reset_at is not None and rec.host_time is not None and rec.host_time < reset_at:
                c.pre_reset += 1  # read before any node was reset: the old run's
            elif reset_at is None or c.booted:
                account(k, rec, line)
            elif c.failed is not None:  # its reset failed, or its boot line never came: nothing is its run's
                c.bootless += 1
            elif rec.event == "boot":  # the run starts here: what came between the reset and it was the old run's
                c.pre_reset += len(held.pop(k, []))
                c.booted = True
                account(k, rec, line)
            else:  # held until the boot line decides (an old run's lines still arriving after the reset)
                held.setdefault(k, []).append((rec, line))
                judge_bootless()
            try:
                item = q.get_nowait()
            except queue.Empty:
                return

    while True:
        consume(0.02)
        judge_bootless()
        now = time.monotonic()
        if all(c.done for c in caps.values()):
            reason = "all nodes done"
            break
        if duration is not None and now - t0 >= duration:
            reason = f"duration {duration:g} s"
            break
        if now - t0 >= timeout:
            reason = f"timeout {timeout:g} s"
            break
        if run_status is not None and now - last_status > 0.25:
            last_status = now
            st = run_status()
            if st and st.get("finished"):
                finished_at = finished_at or now
                if now - finished_at > 1.0:  # the processes are gone; their last bytes have drained
                    reason = "the virtual testbed's run ended"
                    for p in st.get("problems", []):
                        say(f"virtual testbed: {p}")
                    break
    stop.set()
    for r in readers.values():
        r.join(5.0)
    consume(0.0)
    while not q.empty():
        consume(0.0)
    judge_bootless(final=True)
    _judge_boots(caps)
    ended = time.time()
    for k, c in caps.items():
        rd = readers[k]
        c.lines, c.bytes, c.reopens, c.opened = rd.lines, rd.bytes, rd.reopens, True
        if c.failed is None and not c.done:
            # nothing at all, or only noise: say what to check, not only what is missing
            silent = (f"nothing arrived on {c.port} (is the board powered, flashed and on this port?)" if not rd.bytes
                      else f"{rd.bytes} bytes on {c.port} but no contract line (is {rd.spec.baud} baud the board's rate?)")
            if rd.lost_at is not None:  # the reason the lines stopped: say it, not only what is missing
                silent = (f"its port {c.port} went away {rd.lost_at - t0:.0f} s into the run and did not come back "
                          f"(unplugged, a loose USB cable, or the board lost power?); "
                          + (f"last line: {c.records[-1].event} {_brief(c.records[-1])}" if c.records else silent))
            if duration is not None and reason.startswith("duration"):
                if not c.records:
                    c.failed = f"printed no contract line in {duration:g} s: {silent}"
            else:
                want = f"infer inf={inferences - 1} (the {inferences}th inference)" if inferences else "'end'"
                last = c.records[-1] if c.records else None
                c.failed = (f"its final line {want} never came ({reason}); "
                            + (f"last line: {last.event} {_brief(last)}" if last and rd.lost_at is None else silent))
        c.done = True
    return CaptureResult(caps, started, ended, reason, {k: v for k, v in reset_errors.items() if v}, commands)


def _reset_failed(err: str) -> str:
    """A node's failure for its reset's error, said once ("reset failed (pyocd ...)" and "reset: `nrfjprog` did
    not finish ..." already say it was the reset: not "reset failed: reset failed ...")."""
    if err.startswith("reset failed"):
        return err
    return "reset failed: " + err.removeprefix("reset: ")


def _brief(r: Record) -> str:
    return " ".join(f"{k}={v}" for k, v in list(r.fields.items())[:3])


BOOT_GRACE_S = 3.0  # after the resets, lines before a node's boot line are held this long (then it fails)
OLD_RUN_QUIET_S, OLD_RUN_LIMIT_S = 0.1, 1.0  # how long the ports must be quiet before the reset, at most


def _no_boot_line(lines: list[Record]) -> str:
    """Why a node that printed ``lines`` after the reset, and no boot line, failed."""
    err = next((r for r in lines if r.event == "error"), None)
    if err is not None:  # a board that refuses to start says why before any boot line (nrf52840dk uicr_node_id)
        return (f"it reported an error at {err.fields.get('where')} (code {err.fields.get('code')}) and printed no "
                "boot line after the reset")
    first = lines[0]
    return (f"no boot line after the reset, but {len(lines)} contract line{'s' if len(lines) != 1 else ''} "
            f"(first: {first.event} {_brief(first)}): nothing confirms it runs the flashed build; either it did not "
            "reset and runs its old image on (check its probe, cable and runner), or its boot line was garbled on "
            "the wire; flash it again (`cisl flash BUILD --testbed FILE`) and record again")


def _judge_boots(caps: dict[int, NodeCapture]) -> None:
    """Fail the nodes whose boot lines name another plan or node count than the others' (see the
    module's docstring). Nodes that failed already are left out: with a flash record, those that
    booted another plan than it did."""
    ran: dict[tuple[str, object], list[int]] = {}
    for k, c in sorted(caps.items()):
        boot = next((r for r in c.records if r.event == "boot"), None)
        if boot is not None and c.failed is None:
            ran.setdefault((str(boot.fields.get("plan")), boot.fields.get("nodes")), []).append(k)
    if len(ran) < 2:
        return
    sizes = sorted((len(ks) for ks in ran.values()), reverse=True)
    most = max(ran, key=lambda x: len(ran[x])) if sizes[0] > sizes[1] else None
    said = "; ".join(f"plan {plan} nodes={n} on node{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))}"
                     for (plan, n), ks in ran.items())
    for ident, ks in ran.items():
        for k in ks if ident != most else ():
            caps[k].failed = (f"the nodes' boot lines disagree ({said}): the nodes of one build all print its plan "
                              "and node count, so they ran different builds; flash one build on every node "
                              "(`cisl flash BUILD --testbed FILE`) and record again")
            caps[k].done = True


def _drain_old_run(q: queue.Queue, caps: dict) -> None:
    """Take the lines the ports deliver before the reset (until they are quiet for OLD_RUN_QUIET_S,
    at most OLD_RUN_LIMIT_S) out of the queue: they are a previous run's (the raw logs keep them)."""
    end = time.monotonic() + OLD_RUN_LIMIT_S
    while time.monotonic() < end:
        try:
            k, _, _ = q.get(timeout=OLD_RUN_QUIET_S)
        except queue.Empty:
            return
        caps[k].pre_reset += 1


def _mark_lost(c: NodeCapture, rules: SequenceChecker, lost: LineLost, line: int) -> None:
    """Mark the inference in progress damaged: lines of it were lost (see :class:`LineLost`). Before the
    node's first line, after its last, or once it failed, no inference of the run is in progress."""
    if c.failed is not None or rules.next_inf is None or rules.ended or c.done:
        return
    inf = rules.next_inf
    why = (f"line {line} of its log did not parse ({lost.garbled.strip()[:60]!r})" if lost.garbled is not None
           else "its port dropped and was reopened: lines printed meanwhile are lost")
    c.marks[inf] = f"{c.marks[inf]}; {why}" if inf in c.marks else why


def _account(c: NodeCapture, rec: Record, inferences: int | None, expected_plan: str | None,
             rules: SequenceChecker | None = None, line: int = 0) -> None:
    if c.failed is not None:
        return  # its last record is the line that failed it: later ones are not a good run's (the raw .log keeps them)
    inf = str(rec.fields.get("inf", ""))
    if c.done and inferences is not None and inf.isdigit() and int(inf) >= inferences:
        return  # the start of an inference after the N asked for (the raw .log keeps its bytes)
    if c.done:
        # after its `end` nothing is the run's: a board that boots again (a watchdog, a brown-out, the reset
        # button) plays a second run, which the contract's checks would never see (the raw .log keeps it);
        # after -n's last infer only what keeps the contract (its `end`), and never a boot line
        if c.ended or c.late is not None or rec.event == "boot":
            c.late = c.late or rec
            c.after_end += 1
        elif rules is None or rules.check(rec) is None:
            c.records.append(rec)
        return
    c.records.append(rec)
    broken = rules.check(rec) if rules is not None else None
    if broken:
        c.failed = f"line {line} of its log breaks the serial contract: {broken}"
        c.done = True
        return
    expected = c.node if c.prints is None else c.prints
    if rec.node != expected:
        runs = "" if c.prints is None else f" (it was flashed with plan node {c.prints})"
        # the board this port reads got node rec.node's image: its probe is that node's, so either the ports or
        # the probes of the two nodes are swapped (either way each probe programs the board the other's port reads)
        c.failed = (f"its port printed node {rec.node}'s lines{runs}: the board on its port got that node's image, so "
                    f"the testbed file's ports or probes are swapped or wrong (a node's probe and port must be one "
                    f"board's: a J-Link's /dev/serial/by-id/ port name holds its probe's serial number, and `cisl "
                    f"testbed scan` pairs them); keep whichever names the board at node {c.node}'s place and fix the "
                    f"other, port or probe, for node {c.node} and the node that runs {rec.node}")
        c.done = True
        return
    if rec.event == "boot" and expected_plan and rec.fields.get("plan") != expected_plan:
        c.failed = (f"it runs plan {rec.fields.get('plan')}, not the flashed build's {expected_plan}; "
                    "flash it again (`cisl flash BUILD --testbed FILE`)")
        c.done = True
    elif rec.event == "boot" and c.image and rec.fields.get("image") != c.image:
        # the same plan, another image: built again since (other kernels, flags, cisl version) or an older one
        c.failed = (f"it runs image {rec.fields.get('image', '(none named: an older cisl image)')} of that plan, not "
                    f"the flashed {c.image}; flash it again (`cisl flash BUILD --testbed FILE`)")
        c.done = True
    elif rec.event == "error":
        c.failed = f"it reported an error at {rec.fields.get('where')} (code {rec.fields.get('code')})"
        c.done = True
    elif rec.event == "infer":
        c.infers += 1
        if inferences is not None and c.infers >= inferences:
            c.done = True
    elif rec.event == "end":
        c.ended = True
        c.done = True
        if inferences is not None and c.infers < inferences:
            c.failed = f"it ended after {c.infers} of the {inferences} inferences asked for"
