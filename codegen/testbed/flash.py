"""`cisl flash BUILD --testbed FILE`: program every node of a build onto its board, in parallel.

Before anything is written: the build's board must be every node's board, each runner's tool must be
installed, and every node must name its probe by serial number (a node without one is refused when
several probes are attached, and also with one unless ``allow_single_probe``). Then all nodes flash
in parallel (program, verify) and reset; a node that fails is reported with its error while the
others finish. ``flashed.json`` in the testbed's state folder records what was flashed, so
`cisl logs` knows the nodes and the plan hash their boot lines must show.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import UserError
from ..fsutil import reads_build
from ..plan.io import Plan, load_plan
from .config import NodeEntry, Testbed, claim_state_dir, testbed_in_use
from .probes import Probe
from .runners import RUNNERS, FlashError, Runner, elf_to_hex


@dataclass
class BuildInfo:
    dir: Path
    plan: Plan
    images: dict[int, Path]


@dataclass
class NodeResult:
    node: int
    runner: str
    probe: str | None
    ok: bool = False
    error: str | None = None
    kind: str | None = None  # FlashError kind: failed, probe, protected, verify, timeout, tool
    stage: str = "flash"  # where it failed: flash or reset
    seconds: float = 0.0


@dataclass
class FlashReport:
    build: Path
    results: list[NodeResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)


def load_build(build_dir: Path) -> BuildInfo:
    build_dir = Path(build_dir)
    if not (build_dir / "plan.json").is_file():
        raise UserError(f"{build_dir}: no plan.json; compile first (`cisl compile MODEL -o {build_dir}`)")
    plan = load_plan(build_dir)
    images: dict[int, Path] = {}
    try:
        built = {int(n["node"]): build_dir / n["image"]
                 for n in json.loads((build_dir / "build.json").read_text())["nodes"]}
    except (OSError, ValueError, KeyError):
        built = {}
    for n in plan.nodes:
        img = built.get(n.device, build_dir / f"node_{n.device:02d}" / "firmware.elf")
        if not img.is_file():
            raise UserError(f"{img}: node image not built; run `cisl build {build_dir}` first")
        images[n.device] = img
    from ..build import check_images

    check_images(build_dir, plan, images)  # never flash an image of another plan.json
    return BuildInfo(build_dir, plan, images)


def describe(probes: list[Probe]) -> str:
    return ", ".join(str(p) for p in probes) if probes else "none"


def resolve_serials(testbed: Testbed, nodes: list[NodeEntry], runners: dict[str, Runner],
                    allow_single_probe: bool) -> tuple[dict[int, str | None], dict[int, FlashError]]:
    """The probe serial number of every node, never guessed. Returns (serials, per-node errors for
    probes that are not attached); a node without a serial number is a UserError unless exactly one
    probe is attached and ``allow_single_probe``."""
    serials: dict[int, str | None] = {}
    errors: dict[int, FlashError] = {}
    attached: dict[str, list[Probe] | None] = {}
    why: dict[str, str] = {}
    for name, runner in runners.items():
        if not runner.capabilities().probe:
            continue
        try:
            attached[name] = runner.list_probes()
        except UserError:  # the tool cannot work at all (nrfutil without its `device` command): say it once
            raise
        except Exception as e:  # the tool could not list: flash by the serial numbers given, refuse the rest
            attached[name] = None
            why[name] = f"{type(e).__name__}: {e}"
    for n in nodes:
        if not runners[n.runner].capabilities().probe:
            serials[n.id] = None
            continue
        probes = attached[n.runner]
        if n.probe is not None:
            match = [p for p in probes or [] if p.key == _key(n.probe)]
            if probes is not None and not match:
                errors[n.id] = FlashError(f"probe {n.probe} is not attached (attached probes: {describe(probes)}); "
                                          f"plug it in or fix probe in {testbed.path}", "probe")
            elif len(match) > 1:  # the tool would pick one of them: maybe another board than this node's
                errors[n.id] = FlashError(f"{len(match)} attached probes report serial number {n.probe} ({n.runner} "
                                          f"lists {describe(match)}), so cisl cannot tell which board is node {n.id}; "
                                          "unplug the others (a probe clone without its own serial number?)", "probe")
            serials[n.id] = match[0].serial if match else n.probe
            continue
        fix = f"set probe = \"SERIAL\" for node {n.id} in {testbed.path} (`cisl testbed scan` lists them)"
        if probes is None:
            raise UserError(f"node {n.id} has no probe serial number and {n.runner} could not list the attached "
                            f"probes ({why[n.runner]}); {fix}")
        if not probes:
            raise UserError(f"node {n.id} has no probe serial number and no probe is attached; connect the board "
                            f"and {fix}")
        if len(probes) > 1:
            raise UserError(f"node {n.id} has no probe serial number and {len(probes)} probes are attached: "
                            f"{describe(probes)}; refusing to guess: {fix}")
        others = [m.id for m in nodes if m.id != n.id and m.probe is None and m.runner == n.runner]
        taken = [m.id for m in nodes if m.probe is not None and _key(m.probe) == probes[0].key]
        if not allow_single_probe or others or taken:
            raise UserError(f"node {n.id} has no probe serial number; one probe is attached ({describe(probes)}) but "
                            f"cisl does not guess: {fix}, or pass --allow-single-probe to use it")
        serials[n.id] = probes[0].serial
    return serials, errors


def _key(serial: str) -> str:
    from .config import normalize_serial

    return normalize_serial(serial)


@reads_build
def flash_testbed(build_dir: Path, testbed: Testbed, *, verify: bool = True, reset: bool = True,
                  recover: bool = False, allow_single_probe: bool = False, timeout: float = 180.0,
                  say: Callable[[str], None] | None = None) -> FlashReport:
    with testbed_in_use(testbed):
        return _flash_testbed(build_dir, testbed, verify=verify, reset=reset, recover=recover,
                              allow_single_probe=allow_single_probe, timeout=timeout, say=say)


def _flash_testbed(build_dir: Path, testbed: Testbed, *, verify: bool, reset: bool, recover: bool,
                   allow_single_probe: bool, timeout: float, say: Callable[[str], None] | None) -> FlashReport:
    say = say or (lambda s: None)
    build = load_build(build_dir)
    claim_state_dir(testbed)  # flash records and images go there under fixed names: never over the user's files
    board = build.plan.meta["board"]
    by_id = {n.id: n for n in testbed.nodes}
    # a planned split (`cisl compile --split`) runs plan node k on testbed node testbed_nodes[k]
    where = build.plan.testbed_nodes
    missing = [t for t in where if t not in by_id]
    if missing:
        raise UserError(f"the build has {build.plan.devices} nodes but {testbed.path} has no node {missing[0]}; add "
                        f"[[node]] id = {missing[0]} or compile for fewer devices")
    nodes = [by_id[t] for t in where]
    plan_node = {t: k for k, t in enumerate(where)}
    if where != list(range(len(where))):
        build.images = {t: build.images[k] for k, t in enumerate(where)}
    from ..build import node_target

    for n in nodes:
        own = node_target(build.plan, plan_node[n.id])  # a mixed testbed's plan: each node's own board
        if n.board != own:
            raise UserError(f"{testbed.path}: node {n.id} is a {n.board} board but {build.dir} was compiled for "
                            f"{own} there; compile with --board {n.board} (a mixed testbed: --testbed "
                            f"{testbed.path}), or use a testbed file for {own}")
        if n.runner == "sim" and n.hardware != build.plan.node_board(plan_node[n.id]):
            raise UserError(f"{testbed.path}: virtual node {n.id} stands in for {n.hardware} but {build.dir} was "
                            f"planned for a {build.plan.node_board(plan_node[n.id])} there; compile with --testbed "
                            f"{testbed.path}")
    lock = threading.Lock()
    t0 = time.monotonic()

    def node_say(node: NodeEntry, msg: str) -> None:
        with lock:
            say(f"{node.label} [{node.runner}{' ' + node.probe if node.probe else ''}] {msg} "
                f"({time.monotonic() - t0:.1f} s)")

    runners: dict[str, Runner] = {}
    for n in nodes:
        if n.runner not in runners:
            cls = RUNNERS[n.runner]
            caps = cls.capabilities()
            if caps.boards is not None and board not in caps.boards:
                raise UserError(f"runner {cls.name} runs {', '.join(sorted(caps.boards))} builds, not {board}")
            if recover and not caps.recover:
                raise UserError(f"--recover: runner {cls.name} has nothing to recover (node {n.id}); drop --recover")
            runners[n.runner] = cls(testbed, node_say, timeout)
            runners[n.runner].check_tools()
    serials, pre_errors = resolve_serials(testbed, nodes, runners, allow_single_probe)
    for name, runner in runners.items():
        runner.prepare([n for n in nodes if n.runner == name], build)

    results = {n.id: NodeResult(n.id, n.runner, serials.get(n.id)) for n in nodes}

    def flash_one(n: NodeEntry) -> None:
        r = results[n.id]
        start = time.monotonic()
        try:
            if n.id in pre_errors:
                raise pre_errors[n.id]
            runner = runners[n.runner]
            image = _image_for(runner, testbed, n, build.images[n.id])
            runner.flash(n, image, serials.get(n.id), verify, recover)
            r.ok = True
            node_say(n, "flashed" + (" and verified" if verify else ""))
        except FlashError as e:
            r.error, r.kind = str(e), e.kind
            node_say(n, f"FLASH ERROR: {e}")
        except UserError as e:  # e.g. a stale image: its message already says what to do
            r.error, r.kind = str(e), "failed"
            node_say(n, f"FLASH ERROR: {e}")
        except Exception as e:  # a bug or an unexpected tool behaviour: still this node's failure only
            r.error, r.kind = f"{type(e).__name__}: {e}", "failed"
            node_say(n, f"FLASH ERROR: {r.error}")
        r.seconds = time.monotonic() - start

    pool = ThreadPoolExecutor(max_workers=max(1, min(32, len(nodes))))
    try:
        list(pool.map(flash_one, nodes))
    except KeyboardInterrupt:  # before the pool is joined: its threads wait for the tools
        _interrupted(runners, pool, results, testbed, build, nodes)
        raise
    pool.shutdown()
    if reset:
        try:
            for name, runner in runners.items():
                ok = [n for n in nodes if n.runner == name and results[n.id].ok]
                for k, err in runner.reset(ok, serials).items():
                    if err is not None:
                        r = results[k]
                        r.ok, r.error, r.kind, r.stage = False, str(err), err.kind, "reset"
                        node_say(by_id[k], f"RESET ERROR: {err}")
        except KeyboardInterrupt:  # the images are in; only the reset was cut short (`cisl logs` resets)
            _interrupted(runners, None, results, testbed, build, nodes)
            raise
    report = FlashReport(build.dir, [results[n.id] for n in nodes])
    _record(testbed, build, report, reset)
    return report


def _interrupted(runners: dict[str, Runner], pool: ThreadPoolExecutor | None, results: dict[int, NodeResult],
                 testbed: Testbed, build: BuildInfo, nodes: list[NodeEntry]) -> None:
    """Ctrl-C/SIGTERM: stop the tools at once (cisl waited for every tool's --timeout), and record which
    nodes were flashed and which were not, so `cisl logs` refuses boards that may hold part of an image
    instead of trusting the previous flash's record."""
    for runner in runners.values():
        runner.cancel()
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
    for r in results.values():
        if not r.ok and r.error is None:
            r.error = "not flashed: `cisl flash` was interrupted before this node; flash it again"
            r.kind = "interrupted"
    _record(testbed, build, FlashReport(build.dir, [results[n.id] for n in nodes]), reset=False)


def _image_for(runner: Runner, testbed: Testbed, node: NodeEntry, image: Path) -> Path:
    if runner.capabilities().image == "elf" or image.suffix == ".hex":
        return image
    # always from the ELF load_build checked against build.json: the build's firmware.hex is not checked,
    # and a hex copied or remade after the build would be flashed as this node's image
    return elf_to_hex(image, testbed.state_dir / "images" / f"node_{node.id:02d}.hex")


def _record(testbed: Testbed, build: BuildInfo, report: FlashReport, reset: bool) -> None:
    testbed.state_dir.mkdir(parents=True, exist_ok=True)
    where = build.plan.testbed_nodes
    doc = {"build": str(build.dir.resolve()), "plan_sha256": build.plan.sha256, "plan": build.plan.sha256[:16],
           "board": build.plan.meta["board"], "nodes": [r.node for r in report.results], "time": time.time(),
           # testbed node -> the plan node its image is (they differ for a planned split): what its lines say
           "plan_nodes": {str(t): k for k, t in enumerate(where)},
           "reset": reset, "results": [asdict(r) for r in report.results],
           # testbed node -> its image's build id, which a board prints as `image` in its boot line: the same
           # plan rebuilt (other kernels, flags, cisl version) is another image (the virtual testbed checks SHA-256)
           "images": _image_ids(build, report)}
    tmp = testbed.state_dir / "flashed.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(testbed.state_dir / "flashed.json")


def _image_ids(build: BuildInfo, report: FlashReport) -> dict[str, str]:
    from ..elfsize import image_id

    ids = {}
    for r in report.results:
        image = build.images.get(r.node)
        found = image_id(image) if r.runner != "sim" and image is not None else None
        if found:
            ids[str(r.node)] = found
    return ids


def read_flashed(testbed: Testbed) -> dict | None:
    try:
        return json.loads((testbed.state_dir / "flashed.json").read_text())
    except (OSError, ValueError):
        return None


def flashed_modes(testbed: Testbed) -> tuple[Path, int] | None:
    """(build, number of elastic modes its images hold; 1 for an image without modes) of the last
    `cisl flash`, or None when that is no longer known (nothing flashed, the build folder gone or
    compiled again since): then only the nodes can answer a mode command."""
    flashed = read_flashed(testbed)
    if not isinstance(flashed, dict) or not isinstance(flashed.get("build"), str):
        return None
    build = Path(flashed["build"])
    try:
        plan = load_plan(build)
    except (UserError, OSError):
        return None
    if plan.sha256 != flashed.get("plan_sha256"):
        return None
    el = plan.meta.get("elastic") or {}
    return build, int(el["modes"]) if el.get("image") == "every mode" else 1
