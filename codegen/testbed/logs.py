"""`cisl logs --testbed FILE -o logs/`: open every node's port, reset the nodes, record the run.

Writes ``node_NN.log`` (the raw bytes of the port), ``node_NN.jsonl`` (its contract records with
host timestamps), ``merged.jsonl`` (all records in host-time order) and ``summary.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import UserError
from .capture import CaptureResult, PortSpec, capture
from .config import Testbed
from .flash import read_flashed, resolve_serials
from .runners import RUNNERS, Runner

OUR_FILES = ("node_*.log", "node_*.jsonl", "merged.jsonl", "summary.json")


@dataclass
class LogsResult:
    out_dir: Path
    capture: CaptureResult
    problems: list[str] = field(default_factory=list)  # what the virtual testbed said about the run

    @property
    def ok(self) -> bool:
        return self.capture.ok


def run_logs(testbed: Testbed, out_dir: Path, *, inferences: int | None = None, duration: float | None = None,
             timeout: float = 300.0, reset: bool = True, node_ids: list[int] | None = None,
             open_timeout: float = 10.0, say: Callable[[str], None] | None = None) -> LogsResult:
    say = say or (lambda s: None)
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
    nodes = [testbed.node(k) for k in ids]
    runners: dict[str, Runner] = {}
    for n in nodes:
        if n.runner not in runners:
            runners[n.runner] = RUNNERS[n.runner](testbed, lambda node, msg: say(f"{node.label}: {msg}"), timeout=60.0)
    if "sim" in runners:
        from . import simbed

        simbed.request(testbed, {"cmd": "ping"})  # a clear error when the virtual testbed is not running
    serials: dict[int, str | None] = {}
    pre_errors = {}
    if reset:
        for r in runners.values():
            r.check_tools()
        serials, pre_errors = resolve_serials(testbed, nodes, runners, allow_single_probe=False)

    out_dir.mkdir(parents=True, exist_ok=True)
    for pattern in OUR_FILES:
        for f in out_dir.glob(pattern):
            f.unlink()

    def do_reset() -> dict[int, str]:
        errors = {k: str(e) for k, e in pre_errors.items()}
        for name, runner in runners.items():
            mine = [n for n in nodes if n.runner == name and n.id not in errors]
            say(f"resetting {len(mine)} node{'s' if len(mine) != 1 else ''} ({name})")
            for k, err in runner.reset(mine, serials).items():
                if err is not None:
                    errors[k] = str(err)
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
        result = capture([PortSpec(n.id, n.port_path, n.baud) for n in nodes], out_dir,
                         reset=do_reset if reset else None, inferences=inferences, duration=duration,
                         timeout=timeout, open_timeout=open_timeout,
                         run_status=status if run_status and reset else None,
                         expected_plan=(flashed or {}).get("plan"), progress=say)
    except OSError as e:
        raise UserError(f"{e}; {_attached_ports_hint(runners)}") from None
    if problems:  # the virtual testbed knows why a node went silent: say it with the node's failure
        for k, c in result.nodes.items():
            mine = [p for p in problems if p.startswith(f"node {k} ")]
            if c.failed and mine:
                c.failed += f" ({mine[0]})"
            elif c.failed:
                c.failed += f" (the run ended: {problems[0]})"
    _write(testbed, out_dir, result, flashed, inferences, duration, problems)
    return LogsResult(out_dir, result, problems)


def _attached_ports_hint(runners: dict[str, Runner]) -> str:
    if set(runners) == {"sim"}:
        return "is the virtual testbed running? (`cisl flash BUILD --testbed FILE` starts it)"
    try:
        from .probes import serial_ports

        ports = serial_ports()
    except Exception:
        return "check the testbed file's ports"
    return "attached serial ports: " + (", ".join(p.path for p in ports) if ports else "none")


def _write(testbed: Testbed, out_dir: Path, r: CaptureResult, flashed: dict | None, inferences: int | None,
           duration: float | None, problems: list[str]) -> None:
    for k, c in r.nodes.items():
        with open(out_dir / f"node_{k:02d}.jsonl", "w") as f:
            for rec in c.records:
                f.write(json.dumps(rec.to_json()) + "\n")
    merged = r.merged()
    with open(out_dir / "merged.jsonl", "w") as f:
        for rec in merged:
            f.write(json.dumps(rec.to_json()) + "\n")
    summary = {
        "testbed": str(testbed.path.resolve()), "started": r.started, "ended": r.ended, "stop_reason": r.stop_reason,
        "inferences": inferences, "duration": duration, "ok": r.ok, "records": len(merged),
        "flashed": flashed, "problems": problems,
        "nodes": {str(k): {"port": c.port, "bytes": c.bytes, "lines": c.lines, "records": len(c.records),
                           "inferences": c.infers, "ended": c.ended, "reopens": c.reopens, "failed": c.failed}
                  for k, c in r.nodes.items()},
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
