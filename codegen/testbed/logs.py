"""`cisl logs --testbed FILE -o logs/`: open every node's port, reset the nodes, record the run.

Writes ``node_NN.log`` (the raw bytes of the port), ``node_NN.jsonl`` (its contract records with
host timestamps), ``merged.jsonl`` (all records in host-time order) and ``summary.json``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import UserError
from ..fsutil import (OWNER_FILE, check_output_dir, discard_output, missing_parents, output_lock, output_target,
                      replace_dir, stamp_output, temp_sibling)
from .capture import CaptureResult, HostCommand, PortSpec, _brief, capture
from .config import Testbed, check_state_claim, testbed_in_use
from .flash import read_flashed, resolve_serials
from .runners import RUNNERS, Runner

OUR_FILES = ("node_*.log", "node_*.jsonl", "merged.jsonl", "summary.json")


@dataclass
class LogsResult:
    out_dir: Path
    capture: CaptureResult
    problems: list[str] = field(default_factory=list)  # what the virtual testbed said about the run
    notes: list[str] = field(default_factory=list)  # what the run's checks could not cover (no flash record, ...)
    kept: Path | None = None  # a failed run: the previous logs, left where they were

    @property
    def ok(self) -> bool:
        return self.capture.ok


def run_logs(testbed: Testbed, out_dir: Path, **kwargs) -> LogsResult:
    """Record a run into ``out_dir`` (see the module's docstring); one run at a time per folder."""
    out_dir = output_target(Path(out_dir))  # `-o .`, a link to the folder: the folder itself
    with output_lock(out_dir), testbed_in_use(testbed):
        return _run_logs(testbed, out_dir, **kwargs)


def _run_logs(testbed: Testbed, out_dir: Path, *, inferences: int | None = None, duration: float | None = None,
             timeout: float = 300.0, reset: bool = True, node_ids: list[int] | None = None,
             open_timeout: float = 10.0, say: Callable[[str], None] | None = None,
             commands: list[HostCommand] | None = None) -> LogsResult:
    say = say or (lambda s: None)
    check_state_claim(testbed)  # another testbed file's flash record and nodes are not this one's
    flashed = read_flashed(testbed)
    known = set(testbed.ids)
    if node_ids:
        unknown = [k for k in node_ids if k not in known]
        if unknown:
            raise UserError(f"--node {unknown[0]}: {testbed.path} has no such node (nodes: "
                            f"{', '.join(map(str, testbed.ids))})")
        ids = sorted(set(node_ids))
    elif flashed and set(flashed.get("nodes", [])) <= known:
        ids = list(flashed["nodes"])  # the nodes the last `cisl flash` programmed
    else:
        ids = testbed.ids
    for cmd in commands or []:
        if cmd.node not in ids:
            raise UserError(f"a host command for node {cmd.node} ({cmd.text!r}): this run records only nodes "
                            f"{', '.join(map(str, ids))}")
    nodes = [testbed.node(k) for k in ids]
    _check_distinct_ports(testbed, nodes)
    # --node records some nodes, but the run is the whole build's: every node of the flashed build is reset
    # (a node left idle would be a dead peer, another experiment), as the virtual testbed restarts them all;
    # without a flash record the build's nodes are not known, so every node of the testbed file
    if flashed and set(flashed.get("nodes", [])) <= known:
        build_ids = list(flashed["nodes"])
    else:
        build_ids = testbed.ids
    resets = [testbed.node(k) for k in sorted(set(ids) | set(build_ids))]
    runners: dict[str, Runner] = {}
    for n in resets:
        if n.runner not in runners:
            # a reset takes seconds; a hung tool must not hold the run past --timeout (it waited 60 s)
            runners[n.runner] = RUNNERS[n.runner](testbed, lambda node, msg: say(f"{node.label}: {msg}"),
                                                  timeout=min(60.0, timeout))
    if "sim" in runners:
        from ..vtestbed import bed

        bed.request(testbed, {"cmd": "ping"})  # a clear error when the virtual testbed is not running
    serials: dict[int, str | None] = {}
    pre_errors = {}
    if reset:
        for r in runners.values():
            r.check_tools()
        serials, pre_errors = resolve_serials(testbed, resets, runners, allow_single_probe=False)

    # the previous logs stay where they are until this run has succeeded: record into a sibling
    check_output_dir(out_dir, "logs", _logs_entry, _legacy_logs)
    failed_dir = Path(out_dir).with_name(Path(out_dir).name + ".failed")  # where a failed run would go
    if failed_dir.exists():  # checked before the run, not after it (the run's logs would be lost)
        check_output_dir(failed_dir, "logs", _logs_entry, _legacy_logs, option=f"-o (a failed run goes to {failed_dir})")
    if flashed:
        bad = [r for r in flashed.get("results", []) if r.get("node") in ids and not r.get("ok", True)]
        if bad:
            raise UserError(f"node {bad[0]['node']}: the last `cisl flash` failed on it ({bad[0].get('error')}), so "
                            f"it may run another build's image; fix that and flash again before recording")
    final_dir = Path(out_dir)
    made = missing_parents(final_dir)  # made here, and removed again if the run ends without logs (as sim's)

    def discard(tmp: Path) -> None:
        discard_output(tmp, made)

    out_dir = temp_sibling(final_dir)
    try:
        final_dir.parent.mkdir(parents=True, exist_ok=True)
        out_dir.mkdir()  # the umask's mode, as the folder it becomes
    except OSError as e:
        discard(out_dir)
        raise UserError(f"{final_dir}: cannot write there ({e.strerror}); choose another output with -o") from None
    except BaseException:
        discard(out_dir)
        raise
    run_id = uuid.uuid4().hex[:12]
    (out_dir / OWNER_FILE).write_text("cisl logs\n")
    unrecorded_errors: dict[int, str] = {}  # nodes reset but not recorded whose reset failed

    def do_reset() -> dict[int, str]:
        errors = {k: str(e) for k, e in pre_errors.items()}
        for name, runner in runners.items():
            mine = [n for n in resets if n.runner == name and n.id not in errors]
            say(f"resetting {len(mine)} node{'s' if len(mine) != 1 else ''} ({name})")
            runner.host_lines = {n.id: sorted(c.before for c in commands or [] if c.node == n.id) for n in mine}
            for k, err in runner.reset(mine, serials).items():
                if err is not None:
                    errors[k] = str(err)
        unrecorded_errors.update({k: e for k, e in errors.items() if k not in ids})
        return errors

    run_status = None
    if set(runners) == {"sim"}:
        run_status = runners["sim"].run_status
    problems: list[str] = []

    def status():
        st = run_status()
        if st:
            problems[:] = st.get("problems", [])
        return st

    try:
        # a planned split runs plan node k on testbed node testbed_nodes[k]: its lines say k (the flash record)
        prints = {int(t): int(k) for t, k in ((flashed or {}).get("plan_nodes") or {}).items()}
        images = (flashed or {}).get("images") or {}
        result = capture([PortSpec(n.id, n.port_path, n.baud, prints.get(n.id), images.get(str(n.id)))
                          for n in nodes], out_dir,
                         reset=do_reset if reset else None, inferences=inferences, duration=duration,
                         timeout=timeout, open_timeout=open_timeout,
                         run_status=status if run_status and reset else None,
                         expected_plan=(flashed or {}).get("plan"), progress=say, commands=commands)
    except OSError as e:
        discard(out_dir)
        raise UserError(f"{e}; {_attached_ports_hint(runners)}") from None
    except BaseException:
        discard(out_dir)
        raise
    _judge_commands(result)
    notes = _judge_inferences(result, flashed)
    if problems:  # the virtual testbed knows why a node went silent: say it with the node's failure
        for k, c in result.nodes.items():
            mine = [p for p in problems if p.startswith(f"node {k} ")]
            if c.failed and mine:
                c.failed += f" ({mine[0]})"
            elif c.failed:
                c.failed += f" (the run ended: {problems[0]})"
    notes += _run_notes(result, flashed, ids, [n.id for n in resets] if reset else [], unrecorded_errors)
    try:
        _write(testbed, out_dir, result, flashed, inferences, duration, problems, run_id, notes,
               [n.id for n in resets] if reset else [])
    except BaseException:
        discard(out_dir)
        raise
    # a good run replaces the previous logs; a failed one goes next to them (they stay), or takes
    # OUT itself when there were no logs to keep
    previous = final_dir.exists() and any(final_dir.iterdir())
    dest = final_dir if result.ok or not previous else final_dir.with_name(final_dir.name + ".failed")
    if not result.ok and dest.exists():
        try:
            check_output_dir(dest, "logs", _logs_entry, _legacy_logs)
        except UserError:  # it changed during the run: keep this run's logs where they are, and say so
            raise UserError(f"{dest}: holds files cisl did not write, so this failed run's logs stay in {out_dir}; "
                            f"move them and the files away") from None
    replace_dir(out_dir, dest)
    stamp_output(dest)  # the lock stamps OUT; OUT.failed is stamped here, or its own files would look the user's
    return LogsResult(dest, result, problems, notes, kept=final_dir if dest != final_dir else None)


def _run_notes(r: CaptureResult, flashed: dict | None, ids: list[int], reset: list[int],
               unrecorded_errors: dict[int, str]) -> list[str]:
    """What the run's checks did not cover: with no flash record the plan the nodes ran was compared with
    no build (only with each other); nodes reset for the run but not recorded whose reset failed. And what
    they left out: a node's lines after its run ended (a board that booted again after its `end`)."""
    notes = []
    for k, c in sorted(r.nodes.items()):
        if c.after_end and c.late is not None:
            again = (": it started again (a watchdog, a brown-out, the reset button?)" if c.late.event == "boot"
                     else "")
            notes.append(f"node {k} printed {c.after_end} contract line{'s' if c.after_end > 1 else ''} after its run "
                         f"ended (first: {c.late.event}{' ' + _brief(c.late) if c.late.fields else ''}){again}: left "
                         f"out of its records (node_{k:02d}.jsonl, merged.jsonl; the raw node_{k:02d}.log keeps them)")
    if flashed is None:
        ran = sorted({str(rec.fields.get("plan")) for c in r.nodes.values() for rec in c.records
                      if rec.event == "boot" and c.failed is None})
        which = f"the plan the nodes ran ({', '.join(ran)})" if ran else "the plan the nodes ran"
        notes.append(f"no flash record (no flashed.json in the testbed's state folder: a fresh clone, another "
                     f"machine, the folder deleted): {which} was checked against no build, only the nodes against "
                     f"each other; check it with `cisl report LOGS --build BUILD` (it refuses logs of another plan), "
                     f"or flash the build again (`cisl flash BUILD --testbed FILE`)")
    if set(reset) - set(ids):
        others = sorted(set(reset) - set(ids))
        failed = {k: e for k, e in unrecorded_errors.items() if k in others}
        if failed:
            k, e = sorted(failed.items())[0]
            notes.append(f"node{'s' if len(failed) > 1 else ''} {', '.join(map(str, sorted(failed)))} of the build, "
                         f"not recorded (--node), did not reset (node {k}: {e}): the recorded nodes may have run "
                         f"without {'them' if len(failed) > 1 else 'it'}, another experiment than the build's")
    return notes


def _check_distinct_ports(testbed: Testbed, nodes) -> None:
    """Two nodes whose ports are one device (a by-id link and its /dev/ttyACM name, two links): the
    testbed file passes, and the second reader failed after --open-timeout with 'could not exclusively
    lock port', or two nodes would share one board's lines."""
    seen: dict[str, object] = {}
    for n in nodes:
        real = os.path.realpath(n.port_path)
        if real in seen:
            m = seen[real]
            raise UserError(f"{testbed.path}: node {n.id}'s port {n.port} and node {m.id}'s port {m.port} are the same "
                            f"device ({real}); every node needs its own serial port: fix port for one of them")
        seen[real] = n


def _logs_entry(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pat) for pat in OUR_FILES)


def _legacy_logs(target: Path) -> bool:
    """A logs folder of a cisl version before the owner file: summary.json of `cisl logs`."""
    try:
        return "stop_reason" in json.loads((Path(target) / "summary.json").read_text())
    except (OSError, ValueError, TypeError):
        return False


def _attached_ports_hint(runners: dict[str, Runner]) -> str:
    if set(runners) == {"sim"}:
        return "is the virtual testbed running? (`cisl flash BUILD --testbed FILE` starts it)"
    try:
        from .probes import serial_ports

        ports = serial_ports()
    except Exception:
        return "check the testbed file's ports"
    return "attached serial ports: " + (", ".join(p.path for p in ports) if ports else "none")


def _modes_run(records, inferences: int) -> list[int]:
    """The mode a node ran each of its inferences in, from its `mode state=switch` lines (mode 0 first)."""
    modes, mode = [], 0
    switches = {int(r.fields["inf"]): int(r.fields["mode"]) for r in records
                if r.event == "mode" and r.fields.get("state") == "switch"}
    for i in range(inferences):
        mode = switches.get(i, mode)
        modes.append(mode)
    return modes


def _judge_commands(r: CaptureResult) -> None:
    """A host command that was not carried out fails its node's run: the user asked for it."""
    for cmd in r.commands:
        c = r.nodes[cmd.node]
        if c.failed is not None:
            continue
        if cmd.answer == "ok":
            words = cmd.text.split()
            if words[0] == "mode" and cmd.took is not None and str(cmd.took) != words[1]:
                c.failed = (f"host command {cmd.text!r} reached the node as 'mode {cmd.took}' (it took mode {cmd.took}; "
                            "a byte was lost on the serial line): request the mode again")
            elif cmd.answered_inf is not None and cmd.answered_inf >= c.infers:
                c.failed = (f"host command {cmd.text!r} was taken before inference {cmd.answered_inf}, after the "
                            f"node's last ({c.infers - 1}): it had no effect; send it earlier")
            elif words[0] == "mode" and cmd.answered_inf is not None and \
                    int(words[1]) not in _modes_run(c.records, c.infers)[cmd.answered_inf:]:
                c.failed = _no_switch(cmd, c)
            continue
        if cmd.sent is None:
            c.failed = (f"host command {cmd.text!r} was never sent: the node did not reach inference {cmd.before}"
                        if c.infers < cmd.before else f"host command {cmd.text!r} could not be written to {c.port}")
        elif cmd.answer is None:
            c.failed = (f"host command {cmd.text!r} got no answer (the node takes host commands before each "
                        f"inference; it ended first, or its board has no receive path)")
        else:
            c.failed = f"host command {cmd.text!r} was not carried out: the node answered state={cmd.answer}"


def _no_switch(cmd: HostCommand, c) -> str:
    """Why a `mode M` command the node took (``ok``) left no inference in mode M: the run ended before the
    switch (it follows one inference later: send it earlier), the nodes switched to another mode instead
    (another request or the selector went first), or no switch came although inferences followed (the
    control round announcing it was not heard: sending it earlier changes nothing)."""
    taken = f"host command {cmd.text!r} was taken before inference {cmd.answered_inf}"
    due = cmd.answered_inf + 1  # the inference by which the switch comes (the control round after the request)
    other = min(((int(x.fields["inf"]), int(x.fields["mode"])) for x in c.records
                 if x.event == "mode" and x.fields.get("state") == "switch" and int(x.fields["inf"]) >= cmd.answered_inf),
                default=None)
    if other is not None:
        inf, mode = other
        return (f"{taken}, but the nodes switched to mode {mode} at inference {inf} instead (another "
                f"request or the node's mode selector went first), and never to it: request "
                f"it again after the other switch, or alone")
    if due >= c.infers:
        return (f"{taken}, but the run ended before the nodes switched (a switch follows one inference later): "
                f"send it earlier")
    follow = c.infers - cmd.answered_inf - 1
    return (f"{taken}, but no switch followed although {follow} more inference{'s' if follow != 1 else ''} ran "
            f"(no `mode state=switch` line: the control round that announces it was not heard, or the request "
            f"was lost; see the nodes' `mode` lines), so sending it earlier changes nothing: request it again")


def _flashed_plan(flashed: dict | None) -> dict | None:
    """The flashed build's plan.json, if it is still the plan that was flashed (None otherwise)."""
    build, plan = (flashed or {}).get("build"), (flashed or {}).get("plan")
    if not build or not plan:
        return None
    try:
        doc = json.loads((Path(build) / "plan.json").read_bytes())
        compiled = json.loads((Path(build) / "compile.json").read_text()).get("plan_sha256", "")
    except (OSError, ValueError, AttributeError):
        return None
    return doc if isinstance(doc, dict) and str(compiled)[:16] == plan else None


def _judge_inferences(r: CaptureResult, flashed: dict | None) -> list[str]:
    """Name each node's inferences that are not complete (codegen/serial_contract.py
    `incomplete_inferences`: lines lost, a line that did not parse, the port reopened, the first one of a
    capture without the nodes' reset, the last one of a capture that stopped inside it). A warning, not a
    failure: the node's other inferences are good data, and `cisl report` leaves these out. An elastic
    image's inferences the nodes computed in different modes (`mixed_mode_inferences`: the nodes' `switch`
    lines disagree, a node missed the control round, `mode state=mixed`; the rule the virtual testbed
    applies) are named the same way on every node that ran them: never good data. Returns the
    run's notes: nodes whose boot line did not come (`--no-reset`), so nothing checked their plan and image."""
    from ..serial_contract import incomplete_inferences, mixed_mode_inferences, plan_lines

    plan = _flashed_plan(flashed)
    for k, c in r.nodes.items():
        expected = plan_lines(plan, c.node if c.prints is None else c.prints) if plan else None
        c.incomplete = incomplete_inferences(c.records, expected, c.marks)
    mixed = mixed_mode_inferences([rec for c in r.nodes.values() for rec in c.records])
    for c in r.nodes.values():
        ran = {int(x.fields["inf"]) for x in c.records if isinstance(x.fields.get("inf"), int)}
        for inf, why in mixed.items():
            if inf in ran:
                c.incomplete[inf] = f"{c.incomplete[inf]}; {why}" if inf in c.incomplete else why
    bootless = [k for k, c in sorted(r.nodes.items()) if c.failed is None and c.records
                and not any(x.event == "boot" for x in c.records)]
    if not bootless:
        return []
    who = f"node{'s' if len(bootless) > 1 else ''} {', '.join(map(str, bootless))}"
    return [f"no boot line from {who} (the capture started mid-run, without the nodes' reset): the plan and image "
            f"they ran were not checked{' against the flashed build' if flashed else ''}, and each one's first "
            f"inference seen is partial (left out by `cisl report`)"]


def incomplete_status(c) -> str:
    """The status line's words for a node's incomplete inferences ('' if none)."""
    from ..serial_contract import MIXED

    if not c.incomplete:
        return ""
    items = sorted(c.incomplete.items())
    said = "; ".join(f"{inf}: {why}" for inf, why in items[:3]) + ("; ..." if len(items) > 3 else "")
    mixed = sum(1 for _, why in items if MIXED in why)
    what = "incomplete" if not mixed else "ran mixed modes" if mixed == len(items) else "incomplete or mixed-mode"
    return f", {len(items)} inference{'s' if len(items) > 1 else ''} {what}, left out by `cisl report` ({said})"


def _write(testbed: Testbed, out_dir: Path, r: CaptureResult, flashed: dict | None, inferences: int | None,
           duration: float | None, problems: list[str], run_id: str, notes: list[str], reset: list[int]) -> None:
    for k, c in r.nodes.items():
        with open(out_dir / f"node_{k:02d}.jsonl", "w") as f:
            for rec in c.records:
                f.write(json.dumps({**rec.to_json(), "run": run_id}) + "\n")
    merged = r.merged()
    with open(out_dir / "merged.jsonl", "w") as f:
        for rec in merged:
            f.write(json.dumps({**rec.to_json(), "run": run_id}) + "\n")
    summary = {
        "run_id": run_id, "testbed": str(testbed.path.resolve()), "started": r.started, "ended": r.ended, "stop_reason": r.stop_reason,
        "inferences": inferences, "duration": duration, "ok": r.ok, "records": len(merged),
        "flashed": flashed, "problems": problems, "notes": notes,
        "reset_nodes": reset,  # every node of the build is reset, recorded or not (--node)
        "commands": [{"node": c.node, "before": c.before, "text": c.text, "sent": c.sent, "answer": c.answer,
                      "answered_inf": c.answered_inf, **({"took_mode": c.took} if c.took is not None else {})}
                     for c in r.commands],
        "nodes": {str(k): {"port": c.port, "bytes": c.bytes, "lines": c.lines, "records": len(c.records),
                           "inferences": c.infers, "ended": c.ended, "reopens": c.reopens, "failed": c.failed,
                           "after_end": c.after_end,
                           "incomplete": {str(i): why for i, why in sorted(c.incomplete.items())}}
                  for k, c in r.nodes.items()},
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
