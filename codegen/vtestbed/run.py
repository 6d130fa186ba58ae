"""`cisl sim`: run every node of a build as its own process on the virtual testbed and check it.

A medium process carries the messages; each node's standard output is its serial port. After the
run, every message the medium carried and the sink's forecast are compared byte for byte with the
numpy int8 reference executing the same plan, and the first difference is named (inference, node,
layer, tensor, position).
"""

from __future__ import annotations

import json
import re
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CheckFailed, UserError
from ..build import check_images
from ..inputs import load_build_inputs
from ..fsutil import atomic_run_dir, reads_build
from ..executor import PlanExecutor
from ..lossmodel import LossRates
from ..plan.elastic import elastic_plans
from ..plan.io import Plan, load_plan
from ..serial_contract import Record, SequenceChecker, outputs_by_inference, parse_line
from ..toolrun import log_command
from . import frames as P

TENSOR_NAMES = {"x": "layer input X (x-somegather)", "h": "head outputs H (h-somegather)",
                "y": "block output Y (y-somegather)", "z": "hidden activation Z (z-somegather)"}


@dataclass
class SimResult:
    inferences: int
    bit_exact: bool
    first_difference: str | None
    problems: list[str]
    bytes_sent: dict[int, int]  # per node, per inference
    forecast: np.ndarray  # [inferences, horizon] de-quantised, from the sink's serial output
    reference: np.ndarray  # same, from the reference
    records: list[Record] = field(default_factory=list)
    wall_seconds: float = 0.0
    delivered: int = 0  # messages the nodes received, over all rounds and inferences
    expected: int = 0  # messages the plan says they should receive
    radio_rounds: list[dict] = field(default_factory=list)  # radio mode: one record per Mixer round
    completed: int = 0  # inferences every node finished (an aborted run: fewer than ``inferences``)
    radio_dead: list[int] = field(default_factory=list)  # the nodes whose radio the run killed (--radio-dead)
    logs_dir: Path | None = None  # where the logs went: LOGS, or LOGS.failed/ for a failed run after good logs
    kept: Path | None = None  # a failed run: the earlier logs, left where they were

    def air_us(self, key: str = "slots") -> float:
        """Radio air time per completed inference (µs): the Mixer rounds' ``key`` (slots used, or the
        fixed deadline) × slot length, over the inferences every node finished — an aborted run's
        partial inference and the inferences that never ran do not count."""
        rounds = [rr for rr in self.radio_rounds if rr.get("inference", 0) < self.completed]
        return sum(rr[key] * rr["slot_us"] for rr in rounds) / max(self.completed, 1)

    @property
    def ok(self) -> bool:
        return self.bit_exact and not self.problems


def _pump(stream, node: int, log_path: Path, sink: list[Record], raw: list[str]) -> None:
    """Copy a node's standard output (bytes: a broken node may print anything) to its log, parse lines."""
    with open(log_path, "wb") as log:
        for line in iter(stream.readline, b""):
            log.write(line)
            text = line.decode("ascii", errors="replace")  # the contract is ASCII; the rest is noise
            raw.append(text)
            rec = parse_line(text.rstrip("\r\n"), host_time=time.time())
            if rec is not None:
                sink.append(rec)


def run_sim(build_dir: Path, inputs: np.ndarray | None = None, logs_dir: Path | None = None,
            timeout: float = 120.0, loss: LossRates | None = None, loss_seed: int = 0,
            radio: str | None = None, radio_seed: int = 0, radio_dead: list[int] | None = None,
            radio_fail: list[tuple[int, int, int]] | None = None,
            radio_positions: list[list[float]] | None = None,
            mode_requests: list[tuple[int, int, int]] | None = None,
            mode_limits: list[tuple[int, int, int, int, int]] | None = None,
            build_named: Path | None = None) -> SimResult:
    """Run every node of ``build_dir`` on the virtual testbed and compare with the reference.

    ``build_named``: the path the logs' summary.json gives for the build (default ``build_dir``); a
    caller writing the build into a temporary folder names where it will be (`cisl demo`).

    ``mode_requests`` (an image holding every elastic mode): (inference, node, mode) — that node's
    host asks for the mode just before that inference; every inference is then compared with the
    reference of the mode the nodes' `mode` lines say it ran, and the nodes must agree.
    ``mode_limits``: (inference, node, deadline_us, energy_nj, max_mse_u; NO_LIMIT: none) — from that
    inference on that node's selector asks for the best mode within the limits (`cisl modes`).

    ``radio_positions`` (with ``radio`` a label, e.g. "positions"): the nodes' [x, y] in metres
    instead of a named topology (a testbed's own layout).

    With ``loss``, the medium drops messages by the three loss modes (seeded by ``loss_seed``) and
    the reference runs with exactly the same lost messages, so the comparison stays bit for bit.
    With ``radio`` (a topology name), the nodes run Mixer and the medium plays the radio channel slot
    by slot; the reference then replays exactly the messages each node reported as delivered.
    ``radio_dead``: nodes whose radio is dead for the whole run; ``radio_fail``: (node, first round,
    rounds) — the node's radio is dead for that many Mixer rounds of the run, counted from 0 in the
    order the nodes run them (codegen.timing.comm.comm_schedule's ``fail`` plays the same).
    """
    if radio is not None and loss is not None and loss.any:
        raise UserError("choose either message loss (--loss*) or the radio (--radio), not both")
    loss = loss or LossRates()
    build_dir = Path(build_dir)
    plan = load_plan(build_dir)
    images = [build_dir / f"node_{n.device:02d}" / "firmware.elf" for n in plan.nodes]
    missing = [str(p) for p in images if not p.is_file()]
    if missing:
        raise UserError(f"{missing[0]}: node image not built; run `cisl build {build_dir}` first")
    mode_plans = elastic_plans(build_dir, plan)
    if mode_limits:
        for inf, node, *_ in mode_limits:
            if not 0 <= node < plan.devices:
                raise UserError(f"mode limits for node {node}: the build has nodes 0 to {plan.devices - 1}")
        mode_requests = list(mode_requests or [])
    if (mode_requests or mode_limits) and mode_plans is None:
        what = "--mode-request" if mode_requests and not mode_limits else "--mode-limits"
        raise UserError(f"{build_dir}: {what} needs an image with every elastic mode (cisl compile of an "
                        f"elastic model without --mode)")
    for inf, node, mode in mode_requests or []:
        if not 0 <= node < plan.devices or not 0 <= mode < len(mode_plans):
            raise UserError(f"mode request {inf}:{node}:{mode}: the build has nodes 0 to {plan.devices - 1} and "
                            f"modes 0 to {len(mode_plans) - 1}")
    if (mode_requests or mode_limits) and radio is None:
        raise UserError("mode requests travel in Mixer's control round: use the radio medium")
    if plan.meta["board"] != "sim":
        raise UserError(f"{build_dir}: compiled for board '{plan.meta['board']}'; the virtual testbed runs "
                        f"board 'sim' builds (cisl compile --board sim)")
    check_images(build_dir, plan, images)  # never a stale image
    from ..timing.boardtime import TABLE, check_table

    for img in images:  # a node counts board time only with its own table (never a stale one)
        check_table(img.parent / TABLE, img, plan)
    if inputs is None:
        inputs = load_build_inputs(build_dir, lookback=plan.cfg.lookback)
    if inputs.ndim != 2 or inputs.shape[1] != plan.cfg.lookback:
        raise UserError(f"inputs have shape {inputs.shape}; expected [n, {plan.cfg.lookback}]")
    xq = plan.quantize_input(np.asarray(inputs, dtype=np.float64))
    _check_mode_timing(mode_requests or [], mode_limits or [], len(xq), radio_dead or [])
    if mode_limits:  # limits need the table `cisl modes` puts in (requests name their mode: no table needed)
        from ..modes import no_table_problem

        if problem := no_table_problem(build_dir, plan):
            raise UserError(problem)
    final_logs = Path(logs_dir) if logs_dir else build_dir / "logs"
    run_id = uuid.uuid4().hex[:12]
    # a failed run never replaces earlier logs: it goes to LOGS.failed/ then, as `cisl logs` does
    with atomic_run_dir(final_logs, "sim-logs", _sim_logs_entry, _legacy_sim_logs, option="--logs") as out:
        result = _run(plan, images, xq, out.path, timeout, loss, loss_seed, radio, radio_seed, radio_dead, run_id,
                      radio_fail, radio_positions, mode_plans, mode_requests or [], mode_limits or [])
        # which build ran, for `cisl report` (its memory table), as `cisl logs` records the flashed build; and
        # whether the run was good (`cisl report` never reports a failed run as one)
        (out.path / "summary.json").write_text(json.dumps(
            {"run_id": run_id, "build": str(Path(build_named or build_dir).resolve()), "plan": plan.sha256[:16],
             "ok": result.ok, "bit_exact": result.bit_exact, "inferences": result.inferences,
             "completed": result.completed, "problems": result.problems, "radio_dead": sorted(set(radio_dead or [])),
             "first_difference": result.first_difference}, indent=1) + "\n")
        out.failed = not result.ok
    result.logs_dir, result.kept = out.dest, out.kept
    result.radio_dead = sorted(set(radio_dead or []))
    return result


def _check_mode_timing(requests: list, limits: list, inferences: int, radio_dead: list[int]) -> None:
    """A request or limits whose switch would come after the run's last inference would go unused,
    silently: the control round's starter (node 0, unless its radio is dead) switches every node at the
    inference it asks before, any other node's ask one inference later."""
    starter = 0 if 0 not in radio_dead else None
    for what, asks in (("mode request", requests), ("mode limits", limits)):
        for inf, node, *_ in asks:
            switch = inf if node == starter else inf + 1
            if switch >= inferences:
                later = "" if node == starter else f", and node {node}'s ask switches the nodes one inference later"
                raise UserError(f"{what} for inference {inf} on node {node}: the run has inferences 0 to "
                                f"{inferences - 1}{later}; ask earlier or give more input windows (--inputs)")
    if starter is not None:  # requests queue: one is served per inference
        switches = _queued_switches(requests, inferences)
        for (inf, node, mode), switch in switches.items():
            if switch is None or switch >= inferences:
                earliest = inf if node == starter else inf + 1
                ahead = sorted((at, r) for r, at in switches.items() if at is not None and earliest <= at
                               and (switch is None or at < switch))
                first = f"node {ahead[0][1][1]}'s request for inference {ahead[0][1][0]}" if ahead else "another request"
                raise UserError(f"mode request for inference {inf} on node {node} (mode {mode}) would switch the nodes "
                                + (f"only at inference {switch}" if switch is not None else "never")
                                + f", after the run's last inference {inferences - 1}: one request is served per "
                                f"inference and {first} goes first; ask earlier or give more input windows (--inputs)")


def _queued_switches(requests: list, inferences: int) -> dict[tuple[int, int, int], int | None]:
    """The inference each host request switches the nodes at (None: never), as
    firmware/somegather/cisl_modes.c agrees on modes with node 0 starting every control round and no
    message lost: a node's row carries its pending request; the starter announces its own pending
    request, else the request in the lowest-numbered peer's row of the previous round, else the
    current mode; a request is done once the agreed mode is it; a node's later request replaces its
    pending one (left out, unless its row switched the nodes before). Simulated past the run, to say
    when a late one would come."""
    pending: dict[int, tuple[int, int, int]] = {}  # node -> its pending request
    rows: dict[int, tuple[int, int, int]] = {}  # the previous round's rows that carried a request
    out: dict[tuple[int, int, int], int | None] = {tuple(r): None for r in requests}
    mode, replaced = 0, set()
    for i in range(inferences + len(requests) + 1):
        for r in requests:
            if r[0] == i:
                if r[1] in pending:
                    replaced.add(pending[r[1]])
                pending[r[1]] = tuple(r)
        peers = [n for n in rows if n != 0]
        pick = pending.get(0) or (rows[min(peers)] if peers else None)
        if pick is not None:
            mode = pick[2]
            if out[pick] is None:  # (its node may have replaced it since: the row still switched the nodes)
                out[pick] = i
        rows = dict(pending)  # sent before this round's agreement clears them
        for n, r in list(pending.items()):
            if r[2] == mode:
                out[r] = i if out[r] is None else out[r]
                del pending[n]
    return {r: at for r, at in out.items() if at is not None or r not in replaced}


def _run(plan: Plan, images: list[Path], xq: np.ndarray, logs_dir: Path, timeout: float, loss: LossRates,
         loss_seed: int, radio: str | None, radio_seed: int, radio_dead: list[int] | None, run_id: str,
         radio_fail: list[tuple[int, int, int]] | None = None,
         radio_positions: list[list[float]] | None = None, mode_plans: list[Plan] | None = None,
         mode_requests: list[tuple[int, int, int]] = (),
         mode_limits: list[tuple[int, int, int, int, int]] = ()) -> "SimResult":

    t_start = time.monotonic()
    _clean_stale_runs()
    with tempfile.TemporaryDirectory(prefix=f"cisl-sim-{os.getpid()}-") as tmp:
        sock = os.path.join(tmp, "medium.sock")
        np.save(os.path.join(tmp, "inputs.npy"), xq)
        transcript = os.path.join(tmp, "transcript.bin")
        loss_file = os.path.join(tmp, "losses.bin")
        medium_cmd = (
            [sys.executable, "-m", "codegen.vtestbed.medium", "--socket", sock, "--nodes", str(plan.devices),
             "--inputs", os.path.join(tmp, "inputs.npy"), "--transcript", transcript, "--timeout", str(timeout),
             "--loss", str(loss.link), str(loss.receiver), str(loss.sender), "--loss-seed", str(loss_seed),
             "--loss-file", loss_file]
            + (["--radio", radio, "--radio-seed", str(radio_seed), "--radio-stats", os.path.join(tmp, "radio.jsonl"),
                "--radio-dead", *map(str, radio_dead or []), "--radio-phy", plan.phy]
               + [a for f in radio_fail or [] for a in ("--radio-fail", *map(str, f))]
               + (["--radio-positions", json.dumps(radio_positions)] if radio_positions else []) if radio else []))
        log_command(medium_cmd)
        medium = subprocess.Popen(
            medium_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        up, _, _ = select.select([medium.stdout], [], [], min(timeout, 30.0))
        ready = medium.stdout.readline().strip() if up else ""
        if not up:
            _kill_group(medium)
            raise CheckFailed(f"the medium did not start within {min(timeout, 30.0):.0f} s")
        if ready != "ready":
            err = medium.communicate(timeout=10)[1].strip().splitlines()
            if medium.returncode is not None and medium.returncode < 0:
                raise CheckFailed(f"the medium died before it was ready (signal {-medium.returncode})")
            # the medium checks its options (topology, node count) before it starts: a user error
            raise UserError(f"the medium did not start: {err[-1] if err else 'no message'}")
        procs, threads, records, raw = [], [], [], []
        for n, img in zip(plan.nodes, images):
            try:
                # its own process group: the timeout ends the node and whatever it started
                log_command([str(img), sock])
                asks = ",".join(f"{i}:{m}" for i, k, m in mode_requests if k == n.device)
                limits = ",".join(":".join(str(v) for v in (i, *rest)) for i, k, *rest in mode_limits if k == n.device)
                env = {**os.environ, **({"CISL_SIM_MODE_REQUESTS": asks} if asks else {}),
                       **({"CISL_SIM_MODE_LIMITS": limits} if limits else {})} if asks or limits else None
                p = subprocess.Popen([str(img), sock], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True, env=env)
            except OSError as e:
                for q in procs:
                    _kill_group(q)
                _kill_group(medium)
                raise UserError(f"{img}: cannot be started ({e.strerror}); run `cisl build` again") from None
            t = threading.Thread(target=_pump, args=(p.stdout, n.device, logs_dir / f"node_{n.device:02d}.log",
                                                     records, raw), daemon=True)
            t.start()
            procs.append(p)
            threads.append(t)
        try:
            problems = _supervise(plan, procs, medium, timeout)
        except BaseException:  # Ctrl-C, SIGTERM: no node or medium outlives the run
            for q in (*procs, medium):
                _kill_group(q)
            raise
        for t in threads:
            t.join(timeout=5)
        for proc in (*procs, medium):
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        carried = P.read_transcript(transcript) if os.path.exists(transcript) else {}
        dropped = P.read_losses(loss_file) if os.path.exists(loss_file) else {}
        radio_rounds, radio_deliveries = [], []
        if radio and os.path.exists(os.path.join(tmp, "radio.jsonl")):
            with open(os.path.join(tmp, "radio.jsonl")) as f:
                records_ = [json.loads(line) for line in f]
            radio_rounds = [rr for rr in records_ if "slots" in rr]
            radio_deliveries = [rr for rr in records_ if "delivered" in rr]
    wall = time.monotonic() - t_start
    records.sort(key=lambda r: (r.host_time or 0.0))
    with open(logs_dir / "records.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps({**r.to_json(), "run": run_id}) + "\n")
    wrong = sorted({r.node for r in records if r.event == "boot" and r.fields.get("plan") != plan.sha256[:16]})

    # -- the reference, on exactly the same int8 inputs
    modes = [0] * len(xq)
    if mode_plans is not None:
        modes, disagree = inference_modes(records, plan.devices, len(xq))
        problems += disagree
    ref = _reference(mode_plans or [plan], modes, xq, dropped if (loss.any or radio) else None)
    first = _first_payload_difference(mode_plans or [plan], modes, ref.payloads, carried, len(xq))
    outputs = outputs_by_inference([r for r in records if r.node == plan.sink])
    forecast = np.full((len(xq), plan.cfg.horizon), np.nan)
    for i in range(len(xq)):
        got = outputs.get(i)
        want = ref.output[i].astype(np.int8).tobytes()
        if got is None:
            problems.append(f"the sink printed no complete forecast for inference {i}")
            continue
        forecast[i] = plan.dequantize_output(np.frombuffer(got, dtype=np.int8))
        if got != want and first is None:
            pos = next(j for j in range(len(want)) if got[j] != want[j])
            first = (f"inference {i}, node {plan.sink} (sink), forecast value {pos}: "
                     f"got {np.frombuffer(got, np.int8)[pos]}, reference {np.frombuffer(want, np.int8)[pos]}")
    rules: dict[int, SequenceChecker] = {}
    for r in records:  # sorted by host time; each node's lines stay in the order it printed them
        if r.node in rules and rules[r.node] is None:
            continue
        broken = rules.setdefault(r.node, SequenceChecker()).check(r)
        if broken:
            problems.append(f"node {r.node} broke the serial contract: {broken}")
            rules[r.node] = None  # type: ignore[assignment]
    for k in wrong:
        problems.append(f"node {k} runs the firmware of another plan (its boot line's plan hash is not "
                        f"{plan.sha256[:16]}); run `cisl build` again")
    for r in records:
        if r.event == "error":
            problems.append(f"node {r.node} reported an error at {r.fields.get('where')} (code {r.fields.get('code')})")
    ends = {r.node for r in records if r.event == "end"}
    for n in plan.nodes:
        if n.device not in ends:
            problems.append(f"node {n.device} never printed its 'end' line")
        crcs = [r for r in records if r.node == n.device and r.event == "infer"]
        if len(crcs) != len(xq):
            problems.append(f"node {n.device} reported {len(crcs)} of {len(xq)} inferences")
    sent = {n.device: sum(s.msg_bytes[n.device] for s in plan.sgs) for n in plan.nodes}
    delivered = sum(int(r.fields["delivered"]) for r in records if r.event == "sg")
    expected = sum(int(r.fields["expected"]) for r in records if r.event == "sg")
    reference = plan.dequantize_output(ref.output)
    if radio_rounds:
        with open(logs_dir / "radio_rounds.jsonl", "w") as f:
            for rr in radio_rounds:
                f.write(json.dumps(rr) + "\n")
        with open(logs_dir / "radio_deliveries.jsonl", "w") as f:
            for rr in radio_deliveries:
                f.write(json.dumps(rr) + "\n")
    problems = _summarise(problems, len(xq))
    if first is not None and any(" exited with code " in p or "did not finish" in p for p in problems):
        first += " (a consequence of the failure above)"
    done = min((sum(1 for r in records if r.node == n.device and r.event == "infer") for n in plan.nodes), default=0)
    return SimResult(len(xq), first is None and not wrong and not any("forecast" in p for p in problems), first,
                     problems,
                     sent, forecast, reference, records, wall, delivered, expected, radio_rounds, min(done, len(xq)))


def _clean_stale_runs() -> None:
    """Remove the temporary folders (medium socket, transcript) of sims that were killed (SIGKILL)
    before they could: their folder names the process, which is gone."""
    for d in Path(tempfile.gettempdir()).glob("cisl-sim-*-*"):
        try:
            pid = int(d.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            pass  # another user's run


def _kill_group(p: subprocess.Popen) -> None:
    """SIGKILL the process group a run's process leads (it and everything it started)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _summarise(problems: list[str], inferences: int) -> list[str]:
    """The cause first (a node that exited or crashed, a medium that failed, the timeout), then the
    consequences, each kind once: not one line per inference a dead node did not finish."""
    missing = [p for p in problems if p.startswith("the sink printed no complete forecast for inference ")]
    unfinished: dict[tuple[str, bool], list[int]] = {}  # (reported, no end line) -> nodes
    rest = []
    no_end = {int(m.group(1)) for p in problems if (m := re.match(r"node (\d+) never printed its 'end' line$", p))}
    for p in problems:
        if p in missing or re.match(r"node \d+ never printed its 'end' line$", p):
            continue
        m = re.match(r"node (\d+) reported (\d+ of \d+) inferences$", p)
        if m:
            unfinished.setdefault((m.group(2), int(m.group(1)) in no_end), []).append(int(m.group(1)))
            continue
        rest.append(p)
    reported = {k for nodes in unfinished.values() for k in nodes}
    for k in sorted(no_end - reported):
        rest.append(f"node {k} never printed its 'end' line")
    for (count, end_missing), nodes in sorted(unfinished.items(), key=lambda kv: min(kv[1])):
        who = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {', '.join(map(str, sorted(nodes)))}"
        rest.append(f"{who} finished {count} inferences" + (" and printed no 'end' line" if end_missing else ""))
    cause = [p for p in rest if " exited with code " in p or "did not finish" in p or p.startswith("the medium")]
    out = cause + [p for p in rest if p not in cause]
    if missing:
        first = missing[0].rsplit(" ", 1)[-1]
        out.append(f"the sink printed no complete forecast for {len(missing)} of {inferences} inferences "
                   f"(from inference {first} on)" if len(missing) > 1 else missing[0])
    return out


def _sim_logs_entry(name: str) -> bool:
    return name in ("records.jsonl", "radio_rounds.jsonl", "radio_deliveries.jsonl", "summary.json") or \
        (name.startswith("node_") and name.endswith(".log"))


def _legacy_sim_logs(target: Path) -> bool:
    """A logs folder of `cisl sim` from before the owner file."""
    return (Path(target) / "records.jsonl").is_file()


def _supervise(plan: Plan, procs: list[subprocess.Popen], medium: subprocess.Popen, timeout: float) -> list[str]:
    """Wait for the run to end. A node that fails ends the whole run at once (the others would only
    wait for it), and so does a failing medium or the timeout; every process is reaped."""
    problems: list[str] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    running = dict(zip([n.device for n in plan.nodes], procs))
    while running:
        for k, p in list(running.items()):
            rc = p.poll()
            if rc is None:
                continue
            del running[k]
            if rc != 0:
                err = p.stderr.read().decode("utf-8", errors="replace").strip()
                problems.append(f"node {k} exited with code {rc}" + (f": {err.splitlines()[-1]}" if err else ""))
        if problems or medium.poll() not in (None, 0) or time.monotonic() > deadline:
            if time.monotonic() > deadline:
                timed_out = True
                problems.append(f"the run did not finish within {timeout:.0f} s (nodes still running: "
                                f"{sorted(running)})")
            for p in running.values():
                _kill_group(p)
            for p in running.values():
                p.wait()
            break
        time.sleep(0.02)
    killed_medium = False
    try:
        medium.wait(timeout=5 if not problems else 0.5)
    except subprocess.TimeoutExpired:
        _kill_group(medium)
        medium.wait()
        killed_medium = True
    for p in procs:  # what the nodes started (their process groups) ends with the run
        _kill_group(p)
    merr = medium.stderr.read().strip()
    if timed_out and merr and not merr.splitlines()[-1].startswith("medium:"):
        pass  # the nodes it served were ended by the timeout: its complaint (a broken pipe) is no cause
    elif medium.returncode not in (0, None) and merr:
        problems.insert(0, merr.splitlines()[-1])  # the medium says why the nodes lost it: the cause first
    elif killed_medium:
        pass  # the run was over for the nodes; the medium was ended with them
    elif medium.returncode is not None and medium.returncode < 0:
        problems.insert(0, f"the medium died (signal {-medium.returncode}): the nodes lost the radio")
    elif medium.returncode not in (0, None):
        problems.insert(0, f"the medium exited with code {medium.returncode}")
    return problems


def inference_modes(records: list[Record], nodes: int, inferences: int) -> tuple[list[int], list[str]]:
    """The mode each inference ran, from the nodes' `mode` lines (every node starts in mode 0 and
    switches where it prints state=switch), and a problem per inference the nodes computed in mixed
    modes (codegen/serial_contract.py `mixed_mode_inferences`, the rule `cisl logs` and `cisl report`
    apply to boards' logs too)."""
    from ..serial_contract import mixed_mode_inferences, node_modes

    modes = node_modes(records, range(nodes), inferences)
    mixed = mixed_mode_inferences(records, range(nodes), inferences)
    return ([modes[0].get(i, 0) for i in range(inferences)] if nodes else [0] * inferences,
            [f"inference {i} ran {why}" for i, why in sorted(mixed.items())])


@dataclass
class _Ref:
    output: np.ndarray
    payloads: dict  # (inference, exchange of the image, sender) -> bytes


def _reference(plans: list[Plan], modes: list[int], xq: np.ndarray, dropped: dict | None) -> _Ref:
    """The int8 reference of every inference in its mode; exchange numbers as the image numbers them
    (mode m's exchange sg is m * exchanges + sg)."""
    base = plans[0]
    nsg = len(base.sgs)
    out = np.zeros((len(xq), base.cfg.horizon), dtype=np.int64)
    payloads: dict = {}
    none = np.zeros((base.devices, base.devices), dtype=bool)
    for m, plan in enumerate(plans):
        idx = [i for i in range(len(xq)) if modes[i] == m]
        if not idx:
            continue
        lost = None
        if dropped is not None:
            lost = {sg.sg: np.stack([dropped.get((i, m * nsg + sg.sg), none) for i in idx]) for sg in plan.sgs}
        r = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "int8",
                         constants=[n.constants for n in plan.nodes]).run(xq[idx], lost=lost)
        out[idx] = r.output
        for (sg, j), arr in r.payloads.items():
            for t, i in enumerate(idx):
                payloads[(i, m * nsg + sg, j)] = arr[t]
    return _Ref(out, payloads)


def _first_payload_difference(plans: list[Plan], modes: list[int], ref: dict, carried: dict,
                              inferences: int) -> str | None:
    """Describe the first message (in schedule order) whose bytes differ from the reference."""
    nsg = len(plans[0].sgs)
    for i in range(inferences):
        plan = plans[modes[i]]
        for sg in plan.sgs:
            ex = modes[i] * nsg + sg.sg
            for j in range(plan.devices):
                if sg.msg_bytes[j] == 0:
                    continue
                want = ref[(i, ex, j)].tobytes()
                got = carried.get((i, ex, j))
                if got is None:
                    return f"inference {i}, node {j}: never sent its {_where(sg)} message"
                if got != want:
                    b = next((t for t in range(min(len(got), len(want))) if got[t] != want[t]), min(len(got), len(want)))
                    return f"inference {i}, node {j}, {_where(sg)}: {_position(plan, sg, j, b)}"
    return None


def _where(sg) -> str:
    if sg.point == "head":
        return "head partial sums"
    return f"layer {sg.layer}, {TENSOR_NAMES[sg.point]}"


def _position(plan: Plan, sg, sender: int, b: int) -> str:
    if sg.point == "head":
        return f"partial sum {b // 4} differs"
    cols = sg.send_cols[sender]
    return f"token {b // len(cols)}, column {cols[b % len(cols)]} differs (byte {b})"


def crc32_of(values: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(values).tobytes())


@reads_build
def simulate(build_dir: Path, inputs_file: Path | None = None, count: int | None = None,
             logs_dir: Path | None = None, timeout: float = 120.0, loss: LossRates | None = None, loss_seed: int = 0,
             medium: str = "radio", topology: str | None = None, radio_seed: int | None = None,
             radio_dead: list[int] | None = None, mode_requests: list[tuple[int, int, int]] | None = None,
             mode_limits: list[tuple[int, int, int, int, int]] | None = None,
             testbed: Path | None = None) -> SimResult:
    """`cisl sim`: check the options of the chosen medium, pick the radio topology (default: the
    paper's hallway for the plan's node count) and the input windows, then :func:`run_sim`.

    ``medium`` "radio": Mixer over the slot-level channel (``topology``, ``radio_dead``; or
    ``testbed``, a testbed file: the nodes where it puts them, as its virtual testbed and `cisl
    estimate --testbed` do, with its [sim] seed unless ``radio_seed``); "message": an ideal
    message-level medium, lossless or with ``loss``.
    """
    from ..inputs import load_input_windows
    from ..radio.topology import TOPOLOGIES, default_topology

    loss = loss or LossRates()
    x = load_input_windows(inputs_file)
    plan = load_plan(build_dir)
    if count is not None:
        if x is None:
            x = load_build_inputs(build_dir, required=False, lookback=plan.cfg.lookback)
        if x is not None:
            x = x[:count]
    positions = None
    if medium == "message":
        if topology is not None or radio_dead or testbed is not None:
            raise UserError("--topology/--testbed/--radio-dead are options of the radio medium; drop --medium message")
    else:
        if loss.any:
            raise UserError("--loss* drops messages on the message-level medium; add --medium message "
                            "(on the radio, loss comes from the channel: --topology, --radio-dead)")
        bad = [d for d in radio_dead or [] if not 0 <= d < plan.devices]
        if bad:
            raise UserError(f"--radio-dead {bad[0]}: the build has nodes 0 to {plan.devices - 1}")
        if testbed is not None:
            from .bed import BOTH_LAYOUTS, plan_layout

            if topology is not None:
                raise UserError(BOTH_LAYOUTS)

            layout = plan_layout(testbed, plan)
            topology, positions = layout["topology"], layout.get("positions")
            radio_seed = layout["seed"] if radio_seed is None else radio_seed
        elif topology is not None and topology not in TOPOLOGIES:
            raise UserError(f"--topology {topology}: unknown; choose one of {', '.join(TOPOLOGIES)}")
        topology = topology or default_topology(plan.devices)
    return run_sim(build_dir, x, logs_dir, timeout, loss, loss_seed, topology if medium == "radio" else None,
                   radio_seed or 0, list(radio_dead or []), radio_positions=positions, mode_requests=mode_requests,
                   mode_limits=mode_limits)
