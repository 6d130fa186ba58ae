"""Run single nodes' whole schedules on an emulated Cortex-M4 (QEMU mps2-an386), bit-exact checked.

A node cannot run alone: it waits for its peers' messages at every exchange. Here the peers are
replaced by a *transcript* that the numpy int8 reference records: for every inference the input
window and, for every exchange, exactly the messages the node received (all of them, or those
that survive a given loss pattern). The qemu-m4 board (boards/qemu-m4) reads the transcript over
semihosting, hands the messages to the node, and writes every message the node sends to a file.
The host then compares, byte for byte, every message the node sent with the reference's and, for
the sink, the forecast it printed (serial contract `output` lines).

QEMU runs with ``-icount shift=0``: one instruction is 1 ns of virtual time, so the SysTick-based
cycle counter of the board counts instructions (in steps of 40) and the `block` lines carry
deterministic per-block instruction counts (communication taken out).

The transcript and the sent file are codegen/transcript.py's (the virtual testbed's qemu-m4 nodes
read the same transcripts).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .boards import load_board
from .errors import UserError
from .fsutil import atomic_output_dir, check_output_dir, reads_build
from .inputs import load_build_inputs
from .executor import RunResult
from .plan.io import Plan, load_plan
from .serial_contract import Record, outputs_by_inference, parse_text
from .toolrun import log_command
from .transcript import MAGIC, node_exchanges, parse_sent, reference, transcript

QEMU_APT = "sudo apt-get install -y --no-install-recommends qemu-system-arm"
KEEP_KIND = "qemu-logs"  # the .cisl-output kind of a --keep folder


def _keep_entry(name: str) -> bool:
    """What `cisl qemu --keep` writes there, per node."""
    return re.fullmatch(r"node_\d{2,}\.(log|transcript\.bin|sent\.bin)", name) is not None


def _legacy_keep(target: Path) -> bool:
    """A --keep folder of a cisl version before the owner file: every node's files beside its transcript,
    which starts with the transcript's magic (a folder with only a node_00.log is the user's)."""
    try:
        names = [p.name for p in Path(target).iterdir()]
        transcripts = [n for n in names if n.endswith(".transcript.bin")]
        magic = all(_starts_with_magic(Path(target) / n) for n in transcripts)
    except OSError:
        return False
    nodes = {n.split(".")[0] for n in transcripts}
    return bool(transcripts) and magic and all(n.split(".")[0] in nodes for n in names)


def _starts_with_magic(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def check_keep(keep: Path) -> None:
    """Before any emulation: --keep must be new, empty or an earlier --keep folder (replaced whole)."""
    keep = Path(keep)
    if keep.exists() and not keep.is_dir():
        raise UserError(f"{keep}: is a file, not a folder; give --keep a new or empty folder (or an earlier --keep's)")
    check_output_dir(keep, KEEP_KIND, _keep_entry, _legacy_keep, option="--keep")


@dataclass
class NodeRun:
    node: int
    exit_code: int
    bit_exact: bool
    first_difference: str | None
    messages_checked: int
    records: list[Record] = field(default_factory=list)
    stack_used: int | None = None
    wall_seconds: float = 0.0
    stdout: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.bit_exact

    def blocks(self) -> list[dict]:
        """The node's `block` lines (with `cycles`: instructions, communication taken out)."""
        return [r.fields for r in self.records if r.event == "block"]


def qemu_command(elf: Path, transcript_name: str, sent_name: str, board_facts: dict, icount: bool = True,
                 board_time: str | None = None) -> list[str]:
    """The QEMU command line of one node; ``board_time``: the board time table the node reads if it
    exists (virtual testbed), so that it counts nRF52840 time instead of instructions."""
    q = board_facts.get("qemu", {})
    args = f"arg=cisl,arg={transcript_name},arg={sent_name}" + (f",arg={board_time}" if board_time else "")
    cmd = [q.get("system", "qemu-system-arm"), "-M", q.get("machine", "mps2-an386"), "-cpu", q.get("cpu", "cortex-m4"),
           "-nographic", "-monitor", "none", "-serial", "none",
           "-semihosting-config", f"enable=on,target=native,{args}"]
    if icount:
        cmd += ["-icount", "shift=0"]
    return cmd + ["-kernel", str(elf)]


def image_path(build_dir: Path, plan: Plan, device: int) -> Path:
    nd = Path(build_dir) / f"node_{device:02d}"
    return nd / "firmware.elf" if plan.meta["board"] == "qemu-m4" else nd / "qemu-m4" / "firmware.elf"


def run_node(build_dir: Path, plan: Plan, device: int, xq: np.ndarray, ref: RunResult, timeout: float = 300.0,
             keep: Path | None = None) -> NodeRun:
    """Run node ``device`` of ``build_dir`` (built for qemu-m4) on QEMU against the reference's transcript;
    ``keep``: an existing folder to copy the node's files into (run_qemu's temporary --keep folder)."""
    board = load_board("qemu-m4")
    elf = image_path(build_dir, plan, device)
    if not elf.is_file():
        raise UserError(f"{elf}: not built; run `cisl build {build_dir} --board qemu-m4` first")
    system = board.facts.get("qemu", {}).get("system", "qemu-system-arm")
    if shutil.which(system) is None:
        raise UserError(f"{system} not found; install it (Debian/Ubuntu: {QEMU_APT})")
    with tempfile.TemporaryDirectory(prefix="cisl-qemu-") as tmp:
        (Path(tmp) / "transcript.bin").write_bytes(transcript(plan, device, xq, ref))
        t0 = time.monotonic()
        cmd = qemu_command(elf.resolve(), "transcript.bin", "sent.bin", board.facts)
        log_command(cmd, cwd=tmp)
        hung = None
        try:
            p = subprocess.run(cmd, cwd=tmp, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:  # killed; a failed node, whose output so far is kept (--keep)
            hung = f"node {device} on QEMU did not finish within {timeout:.0f} s"
            p = subprocess.CompletedProcess(cmd, -signal.SIGKILL, e.stdout or b"", e.stderr or b"")
        wall = time.monotonic() - t0
        sent_path = Path(tmp) / "sent.bin"
        sent = parse_sent(sent_path.read_bytes()) if sent_path.is_file() else []
        if keep is not None:  # not made here: after a Ctrl-C a node finishing late must not bring it back
            for name in ("transcript.bin", "sent.bin"):
                if (Path(tmp) / name).is_file():
                    shutil.copyfile(Path(tmp) / name, keep / f"node_{device:02d}.{name}")
    text = p.stdout.decode(errors="replace")
    if keep is not None:
        (keep / f"node_{device:02d}.log").write_text(text + p.stderr.decode(errors="replace"))
    records = parse_text(text)
    first, checked = compare(plan, device, len(xq), ref, sent, records)
    stack = next((int(r.fields["used"]) for r in records if r.event == "stack" and "used" in r.fields), None)
    if hung is not None:
        first = hung
    elif p.returncode != 0 and first is None:
        err = next((f"{r.fields}" for r in records if r.event == "error"), p.stderr.decode(errors="replace").strip())
        first = f"node {device}: QEMU exited with code {p.returncode} ({err})"
    return NodeRun(device, p.returncode, first is None and p.returncode == 0, first, checked, records, stack, wall,
                   text)


def compare(plan: Plan, device: int, inferences: int, ref: RunResult, sent: list[tuple[int, int, bytes]],
            records: list[Record]) -> tuple[str | None, int]:
    """First difference between what the node sent/printed and the reference; messages compared."""
    sgs = {s.sg: s for s in plan.sgs}
    expected = [(i, sg) for i in range(inferences) for sg, _ in node_exchanges(plan, device)]
    checked = 0
    for k, (i, sg) in enumerate(expected):
        if k >= len(sent):
            return f"node {device} stopped before exchange {sgs[sg].name} of inference {i}", checked
        inf, got_sg, data = sent[k]
        if (inf, got_sg) != (i, sg):
            return f"node {device} ran exchange {got_sg} of inference {inf}, expected {sg} of {i}", checked
        want = ref.payloads.get((sg, device))
        want_bytes = want[i].tobytes() if want is not None else b""
        if data != want_bytes:
            if len(data) != len(want_bytes):
                return (f"inference {i}, node {device}, {sgs[sg].name}: sent {len(data)} bytes, the reference "
                        f"{len(want_bytes)}"), checked
            pos = next(b for b in range(len(data)) if data[b] != want_bytes[b])
            return (f"inference {i}, node {device}, {sgs[sg].name}: byte {pos} is {data[pos]}, the reference "
                    f"{want_bytes[pos]}"), checked
        checked += 1
    if device == plan.sink:
        outs = outputs_by_inference(records)
        for i in range(inferences):
            want = np.asarray(ref.output[i]).astype(np.int8).tobytes()
            got = outs.get(i)
            if got is None:
                return f"inference {i}: the sink printed no complete forecast", checked
            if got != want:
                pos = next(b for b in range(len(got)) if got[b] != want[b])
                return f"inference {i}: forecast value {pos} is {got[pos]}, the reference {want[pos]}", checked
    return None, checked


def run_qemu(build_dir: Path, nodes: list[int] | None = None, inputs: np.ndarray | None = None,
             lost: dict[int, np.ndarray] | None = None, timeout: float = 300.0, jobs: int | None = None,
             keep: Path | None = None) -> list[NodeRun]:
    """Run ``nodes`` (default: all) of ``build_dir`` on QEMU, each against the reference transcript.
    ``keep``: a folder for every node's files, written as a whole (a temporary sibling renamed into
    place once every node ran) so it never mixes two runs; an error or Ctrl-C leaves it as it was. A
    node that runs past ``timeout`` is killed and fails; its files so far are kept like any node's."""
    build_dir = Path(build_dir)
    if keep is not None:
        check_keep(keep)  # before any emulation
        with atomic_output_dir(Path(keep), KEEP_KIND, _keep_entry, _legacy_keep, option="--keep") as tmp:
            return _run_nodes(build_dir, nodes, inputs, lost, timeout, jobs, tmp)
    return _run_nodes(build_dir, nodes, inputs, lost, timeout, jobs, None)


def _run_nodes(build_dir: Path, nodes: list[int] | None, inputs: np.ndarray | None,
               lost: dict[int, np.ndarray] | None, timeout: float, jobs: int | None, keep: Path | None) -> list[NodeRun]:
    from concurrent.futures import ThreadPoolExecutor

    plan = load_plan(build_dir)
    runs = ["qemu-m4"] + [b for b in load_board("qemu-m4").facts["board"].get("builds_plans_for", []) if b != "sim"]
    if plan.meta["board"] not in runs:
        raise UserError(f"{build_dir}: compiled for board '{plan.meta['board']}'; QEMU runs qemu-m4 builds "
                        f"(compile with --board {' or --board '.join(runs)})")
    if inputs is None:
        inputs = load_build_inputs(build_dir, lookback=plan.cfg.lookback)
    xq = plan.quantize_input(np.asarray(inputs, dtype=np.float64))
    ref = reference(plan, xq, lost)
    todo = list(range(plan.devices)) if nodes is None else list(nodes)
    bad = [k for k in todo if not 0 <= k < plan.devices]
    if bad:
        raise UserError(f"--node {bad[0]}: the plan has nodes 0..{plan.devices - 1}")
    with ThreadPoolExecutor(jobs or os.cpu_count() or 2) as pool:
        return list(pool.map(lambda k: run_node(build_dir, plan, k, xq, ref, timeout, keep), todo))


@dataclass
class QemuCheck:
    """What `cisl qemu` ran: every node's result over ``inferences`` input windows."""

    results: list[NodeRun]
    inferences: int


@reads_build
def check_on_qemu(build_dir: Path, nodes: list[int] | None = None, inputs_file: Path | None = None,
                  count: int | None = None, rates=None, loss_seed: int = 0, timeout: float = 300.0,
                  jobs: int | None = None, keep: Path | None = None) -> QemuCheck:
    """`cisl qemu`: the input windows (``inputs_file``, default the build's inputs.npy; the first
    ``count``), the loss pattern sampled from ``rates`` with ``loss_seed``, then :func:`run_qemu`."""
    from .inputs import load_input_windows
    from .lossmodel import sample_rounds

    plan = load_plan(build_dir)
    x = load_input_windows(inputs_file)
    if x is None:
        x = load_build_inputs(build_dir, lookback=plan.cfg.lookback)
    if count is not None:
        x = x[:count]
    lost = None
    if rates is not None and rates.any:
        lost = sample_rounds(np.random.default_rng(loss_seed), len(plan.sgs), len(x), plan.devices, rates)
    return QemuCheck(run_qemu(build_dir, nodes, x, lost, timeout, jobs, keep), len(x))
