"""The virtual testbed's supervisor: a background process that plays the boards' serial ports.

It creates one pseudo-terminal per node and a symlink to it at the node's port path, so pyserial
opens a virtual node exactly like a board's /dev/serial/by-id/ port. On "reset" it starts the medium
(``python -m codegen.vtestbed.medium``, radio mode) and every node program (``node_NN/firmware.elf
MEDIUM_SOCKET``), and relays each node's standard output (its UART) to its pseudo-terminal. Like a
UART nobody listens to, output is dropped while no program has the port open (that is why
``cisl logs`` opens the ports before it resets the nodes); once a reader is there, nothing is lost.

A node program is started from run.json's ``node_command`` (default ``["{image}", "{socket}"]``) in
``node_cwd`` (default: inherited), so other virtual boards use the same supervisor with their own
command line: qemu-m4 nodes run on QEMU against their reference transcripts, with
``"medium": false`` (codegen/vtestbed/bed.py).

What a host writes to a port goes the other way, to the node program's standard input (the UART's
receive line: host commands such as ``mode 2``, firmware/runtime/cisl_host.h); a node that does not
read its input drops what does not fit, as a UART overrun would. QEMU nodes take no input.

Control: one JSON request per connection on a UNIX socket (``ping``, ``reset``, ``halt``,
``status``, ``stop``); state in the testbed's state folder (supervisor.json with pid and socket,
supervisor.log, the medium's files under run/, each node's stderr in node_NN.stderr).

Run as ``python -m codegen.vtestbed.supervisor --state DIR --config DIR/supervisor-config.json --daemon``.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tty
from pathlib import Path

from ..toolrun import enable_from_env, log_command


class Pty:
    """One node's serial port: we write the node's output into the master, readers open the slave."""

    def __init__(self, node: int, link: str, replace: str | None = None):
        """``replace``: the target of a symlink at ``link`` that this testbed's previous (killed)
        supervisor made, which is taken over; any other file there is refused (bed.ensure_supervisor
        checked before it started us: this is in case it changed since)."""
        self.node = node
        self.link = link
        self.master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no line discipline: bytes pass unchanged, as on a UART
        self.slave_name = os.ttyname(slave)
        os.close(slave)  # readers open it by name; with nobody holding it, the master reports POLLHUP
        _nonblocking(self.master)
        self.pending = bytearray()
        self.dropped = 0
        Path(link).parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(link):
            if not os.path.islink(link) or replace is None or os.readlink(link) != replace:
                os.close(self.master)
                raise RuntimeError(f"{link} exists and is not a port this virtual testbed made; it puts node {node}'s "
                                   "pseudo-terminal there: choose another port")
            os.unlink(link)
        os.symlink(self.slave_name, link)

    def has_reader(self) -> bool:
        p = select.poll()
        p.register(self.master, select.POLLOUT)
        ev = p.poll(0)
        return not (ev and ev[0][1] & select.POLLHUP)

    def feed(self, data: bytes) -> None:
        if not self.has_reader():
            self.dropped += len(data) + len(self.pending)
            self.pending.clear()
            return
        self.pending += data
        self.flush()

    def flush(self) -> None:
        while self.pending:
            try:
                n = os.write(self.master, self.pending)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EIO, errno.EAGAIN):
                    return
                raise
            del self.pending[:n]

    def read_input(self) -> bytes:
        """What a host wrote to the port since the last call (b"" if nothing or nobody has it open)."""
        try:
            return os.read(self.master, 4096)
        except OSError:  # BlockingIOError: nothing; EIO: no reader holds the port
            return b""

    def close(self) -> None:
        try:
            if os.path.islink(self.link) and os.readlink(self.link) == self.slave_name:
                os.unlink(self.link)
        except OSError:
            pass
        os.close(self.master)


# A run's medium socket lives in a folder of its own under the system's temp folder (AF_UNIX paths
# are short); the supervisor's pid in its name lets the next supervisor clear what a killed one left.
RUN_DIR_PREFIX = "cisl-tb-run-"


def _is_supervisor(pid: int) -> bool:
    try:
        return b"codegen.vtestbed.supervisor" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def sweep_stale_run_dirs(tmp_root: str | None = None) -> list[str]:
    """Remove the run folders of supervisors that are gone (killed by a signal, they could not remove
    their own). Only folders with cisl's prefix that hold nothing but a medium socket go: os.rmdir
    never removes other content."""
    root = Path(tmp_root or tempfile.gettempdir())
    removed = []
    for d in root.glob(f"{RUN_DIR_PREFIX}*-*"):
        pid = d.name[len(RUN_DIR_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _is_supervisor(int(pid)):
            continue
        if remove_run_dir(d):
            removed.append(str(d))
    return removed


def remove_run_dir(d: str | Path) -> bool:
    """Remove a run folder: its medium socket (left when the medium was killed), then the folder if
    that leaves it empty."""
    sock = Path(d) / "medium.sock"
    try:
        if sock.is_socket():
            sock.unlink()
        os.rmdir(d)
        return True
    except OSError:
        return False


class Run:
    """One reset: the medium and the node processes."""

    def __init__(self, number: int):
        self.number = number
        self.medium: subprocess.Popen | None = None
        self.nodes: dict[int, subprocess.Popen] = {}
        self.pipes: dict[int, int] = {}  # stdout fd -> node
        self.inputs: dict[int, int] = {}  # node -> its stdin's fd (the UART's receive line)
        self.input_dropped = 0  # bytes a node did not take in time
        self.problems: list[str] = []
        self.state = "running"
        self.tmp = tempfile.mkdtemp(prefix=f"{RUN_DIR_PREFIX}{os.getpid()}-")


class Supervisor:
    def __init__(self, state: Path, config: dict):
        self.state = state
        self.config = config
        self.ptys: dict[int, Pty] = {}
        try:
            for k, v in config["ports"].items():
                self.ptys[int(k)] = Pty(int(k), v, (config.get("replace") or {}).get(v))
        except BaseException:  # a port it may not take: the links made so far go again
            for pty in self.ptys.values():
                pty.close()
            raise
        self.run: Run | None = None
        self.runs = 0
        self.poller = select.poll()
        self.stopping = False

    # -- runs
    def log(self, msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)

    def start_run(self, host_lines: dict[str, list[int]] | None = None) -> dict:
        """Start the medium and every node program. ``host_lines``: node -> the inferences before which its
        host writes a line; the node waits for it there (CISL_SIM_HOST_LINES, boards/sim/hal_sim.c)."""
        self.end_run("halted")
        try:
            rc = json.loads((self.state / "run.json").read_text())
        except FileNotFoundError:
            return {"ok": False, "error": "nothing flashed yet; run `cisl flash BUILD --testbed FILE` first"}
        n = int(rc["nodes"])
        # plan node k runs on testbed node where[k] (a planned split); the run is keyed by testbed node,
        # as the ports, images and the host's commands are
        where = [int(t) for t in rc.get("testbed_nodes") or range(n)]
        images = [self.state / f"node_{t:02d}" / "firmware.elf" for t in where]
        missing = [t for t, p in zip(where, images) if not p.is_file()]
        if missing:
            return {"ok": False, "error": f"node {missing[0]} has no image; run `cisl flash` again"}
        no_port = [t for t in where if t not in self.ptys]
        if no_port:
            return {"ok": False, "error": f"node {no_port[0]} has no port in the testbed file"}
        self.runs += 1
        run = Run(self.runs)
        outdir = self.state / "run"
        outdir.mkdir(exist_ok=True)
        for f in outdir.iterdir():
            f.unlink()
        sock = os.path.join(run.tmp, "medium.sock")
        if rc.get("medium", True):  # QEMU nodes (board qemu-m4) replay transcripts and need no medium
            error = self.start_medium(run, rc, n, sock, outdir)
            if error:
                return {"ok": False, "error": error}
        # how a node program is started: the sim board's image takes the medium's socket; another
        # virtual board (e.g. QEMU) writes its own command line into run.json
        template = rc.get("node_command", ["{image}", "{socket}"])
        cwd = rc.get("node_cwd")
        for k, img in zip(where, images):
            fmt = {"image": img, "socket": sock, "node": k, "state": self.state}
            argv = [a.format(**fmt) for a in template]
            log_command(argv, cwd=cwd.format(**fmt) if cwd else None)
            with open(self.state / f"node_{k:02d}.stderr", "w") as err:
                # sim nodes read host commands on stdin; QEMU nodes (no medium) take none
                lines = (host_lines or {}).get(str(k))
                env = {**os.environ, "CISL_SIM_HOST_LINES": ",".join(str(int(i)) for i in lines)} if lines else None
                p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=cwd.format(**fmt) if cwd else None,
                                     env=env,
                                     stdin=subprocess.PIPE if run.medium is not None else subprocess.DEVNULL)
            fd = p.stdout.fileno()
            _nonblocking(fd)
            if p.stdin is not None:
                _nonblocking(p.stdin.fileno())
                run.inputs[k] = p.stdin.fileno()
            run.nodes[k] = p
            run.pipes[fd] = k
            self.poller.register(fd, select.POLLIN)
        self.run = run
        what = f"medium ({rc['topology']}) and {n} nodes" if run.medium else f"{n} nodes (no medium)"
        self.log(f"run {run.number}: {what} started")
        return {"ok": True, "run": run.number, "nodes": n}

    def start_medium(self, run: Run, rc: dict, n: int, sock: str, outdir: Path) -> str | None:
        """Start the medium process of a run; an error message if it did not come up."""
        cmd = [sys.executable, "-m", "codegen.vtestbed.medium", "--socket", sock, "--nodes", str(n),
               "--inputs", str(self.state / "inputs.npy"), "--transcript", str(outdir / "transcript.bin"),
               "--timeout", str(rc.get("timeout", 120)), "--loss-file", str(outdir / "losses.bin"),
               "--radio", rc["topology"], "--radio-seed", str(rc.get("seed", 0)),
               "--radio-stats", str(outdir / "radio.jsonl"), "--radio-phy", str(rc.get("phy", "2M"))]
        if rc.get("positions"):  # [sim] topology = "positions": the testbed file's own layout
            cmd += ["--radio-positions", json.dumps(rc["positions"])]
        log_command(cmd)
        with open(outdir / "medium.stderr", "w") as err:
            run.medium = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        r, _, _ = select.select([run.medium.stdout], [], [], 30.0)
        ready = run.medium.stdout.readline().decode().strip() if r else ""
        if ready == "ready":
            return None
        run.medium.kill()
        run.medium.wait()
        run.medium.stdout.close()
        run.medium = None
        remove_run_dir(run.tmp)
        err = (outdir / "medium.stderr").read_text().strip().splitlines()
        return f"the medium did not start: {err[-1] if err else 'no message'}"

    def end_run(self, state: str) -> None:
        run = self.run
        if run is None or run.state != "running":
            return
        for p in [*run.nodes.values(), run.medium]:
            if p is not None and p.poll() is None:
                p.kill()
        self.reap(run, final=True)
        run.state = state
        self.log(f"run {run.number}: {state}")

    def reap(self, run: Run, final: bool = False) -> None:
        for p in [*run.nodes.values(), run.medium]:
            if p is not None and final:
                p.wait()
        for fd, k in list(run.pipes.items()):
            if final:
                self.drain(fd, k)
                self.close_pipe(fd)
        if final:
            for k in list(run.inputs):
                run.nodes[k].stdin.close()
                del run.inputs[k]
            if run.medium is not None:
                run.medium.stdout.close()
            remove_run_dir(run.tmp)

    def drain(self, fd: int, k: int) -> bool:
        """Forward what the node wrote; False at end of file."""
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            self.ptys[k].feed(data)

    def forward_input(self) -> None:
        """A host's writes to a port, to that node's stdin (dropped while no run takes them)."""
        run = self.run
        for k, pty in self.ptys.items():
            data = pty.read_input()
            if not data:
                continue
            fd = run.inputs.get(k) if run is not None and run.state == "running" else None
            if fd is None:
                continue
            try:
                n = os.write(fd, data)
            except BlockingIOError:
                n = 0
            except OSError:  # the node has exited
                del run.inputs[k]
                continue
            run.input_dropped += len(data) - n

    def close_pipe(self, fd: int) -> None:
        run = self.run
        self.poller.unregister(fd)
        k = run.pipes.pop(fd)
        run.nodes[k].stdout.close()

    def check_run(self) -> None:
        run = self.run
        if run is None or run.state != "running":
            return
        failed = False
        for k, p in run.nodes.items():
            rc = p.poll()
            if rc not in (None, 0) and not any(s.startswith(f"node {k} ") for s in run.problems):
                err = _tail(self.state / f"node_{k:02d}.stderr")
                run.problems.append(f"node {k} exited with code {rc}" + (f": {err}" if err else ""))
                failed = True
        mrc = run.medium.poll() if run.medium is not None else 0
        if mrc not in (None, 0) and not any(s.startswith("medium") for s in run.problems):
            run.problems.insert(0, f"medium: {_tail(self.state / 'run' / 'medium.stderr') or f'exit code {mrc}'}")
            failed = True
        if failed:  # one node down ends the run: the others would only wait for it
            self.end_run("failed")
        elif all(p.poll() is not None for p in run.nodes.values()) and mrc is not None and not run.pipes:
            self.reap(run, final=True)
            run.state = "finished"
            self.log(f"run {run.number}: finished")

    def status(self) -> dict:
        run = self.run
        out = {"ok": True, "pid": os.getpid(), "ports": {k: p.link for k, p in self.ptys.items()},
               "dropped_bytes": {k: p.dropped for k, p in self.ptys.items()}}
        if run is None:
            return {**out, "state": "idle", "run": 0, "problems": []}
        nodes = {k: {"pid": p.pid, "returncode": p.poll()} for k, p in run.nodes.items()}
        medium = {"pid": run.medium.pid, "returncode": run.medium.poll()} if run.medium is not None else None
        return {**out, "state": run.state, "run": run.number, "nodes": nodes, "problems": run.problems,
                "medium": medium, "input_dropped_bytes": run.input_dropped}

    def owns_state(self) -> bool:
        """Still this testbed's supervisor? (Not if the state folder was deleted or a new one started.)"""
        try:
            return json.loads((self.state / "supervisor.json").read_text()).get("pid") == os.getpid()
        except (OSError, ValueError):
            return False

    # -- the loop
    def handle(self, conn: socket.socket) -> None:
        conn.settimeout(5.0)
        try:
            req = json.loads(read_line(conn) or b"{}")
            cmd = req.get("cmd")
            if cmd == "ping":
                resp = {"ok": True, "pid": os.getpid()}
            elif cmd == "reset":
                resp = self.start_run(req.get("host_lines") or {})
            elif cmd == "halt":
                self.end_run("halted")
                resp = {"ok": True}
            elif cmd == "status":
                self.check_run()
                resp = self.status()
            elif cmd == "stop":
                self.end_run("halted")
                self.stopping = True
                resp = {"ok": True}
            else:
                resp = {"ok": False, "error": f"unknown request {cmd!r}"}
        except (OSError, ValueError) as e:
            resp = {"ok": False, "error": f"bad request: {e}"}
        try:
            conn.sendall(json.dumps(resp).encode() + b"\n")
        except OSError:
            pass
        conn.close()

    def serve(self, server: socket.socket) -> None:
        self.poller.register(server.fileno(), select.POLLIN)
        writing: set[int] = set()
        last_check = time.monotonic()
        while not self.stopping:
            for k, p in self.ptys.items():  # wait for POLLOUT only while output is pending
                if p.pending and p.master not in writing:
                    self.poller.register(p.master, select.POLLOUT)
                    writing.add(p.master)
                elif not p.pending and p.master in writing:
                    self.poller.unregister(p.master)
                    writing.discard(p.master)
            for fd, ev in self.poller.poll(100):
                if fd == server.fileno():
                    conn, _ = server.accept()
                    self.handle(conn)
                elif fd in writing:
                    pty = next(p for p in self.ptys.values() if p.master == fd)
                    if ev & select.POLLHUP:  # the reader went away: the bytes go nowhere, as on a UART
                        pty.dropped += len(pty.pending)
                        pty.pending.clear()
                    else:
                        pty.flush()
                elif self.run is not None and fd in self.run.pipes:
                    if not self.drain(fd, self.run.pipes[fd]):  # end of file: the node closed its UART
                        self.close_pipe(fd)
            self.forward_input()  # at least every 100 ms: a host's command waits no longer than that
            self.check_run()
            if time.monotonic() - last_check > 2.0:
                last_check = time.monotonic()
                if not self.owns_state():
                    self.log("the state folder is gone or another supervisor took it over: stopping")
                    self.stopping = True


def _nonblocking(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


def read_line(conn: socket.socket) -> bytes:
    """One newline-terminated message of the control protocol (or what came before EOF)."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def _tail(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--state", required=True, help="the testbed's state folder")
    ap.add_argument("--config", required=True, help="JSON: ports (node -> port path), socket, nonce")
    ap.add_argument("--daemon", action="store_true", help="detach (double fork, new session)")
    args = ap.parse_args(argv)
    state = Path(args.state)
    config = json.loads(Path(args.config).read_text())
    if args.daemon:
        if os.fork() > 0:
            return 0
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        log = open(state / "supervisor.log", "a", buffering=1)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
    enable_from_env()  # `cisl -v` started it: the node and medium command lines go to supervisor.log
    sock_path = config["socket"]
    info = state / "supervisor.json"
    sup = None
    server = None
    try:
        if os.path.exists(sock_path):
            os.unlink(sock_path)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(sock_path)
        server.listen(8)
        sup = Supervisor(state, config)
        for d in sweep_stale_run_dirs():
            sup.log(f"removed {d}, left by a supervisor that was killed")
        signal.signal(signal.SIGTERM, lambda *_: setattr(sup, "stopping", True))
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        tmp = info.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "socket": sock_path, "nonce": config["nonce"],
                                   "config_hash": config["config_hash"], "started": time.time(),
                                   "ports": {k: v.link for k, v in sup.ptys.items()},
                                   "ptys": {k: v.slave_name for k, v in sup.ptys.items()}}) + "\n")
        tmp.replace(info)
        sup.log(f"supervisor {os.getpid()} ready: {len(sup.ptys)} ports, socket {sock_path}")
        sup.serve(server)
    except Exception as e:
        print(f"supervisor: {type(e).__name__}: {e}", flush=True)
        (state / "supervisor.error").write_text(f"{e}\n")
        return 1
    finally:
        if sup is not None:
            sup.end_run("halted")
            for p in sup.ptys.values():
                p.close()
        if server is not None:
            server.close()
        if os.path.exists(sock_path):
            os.unlink(sock_path)
        try:
            if json.loads(info.read_text()).get("pid") == os.getpid():
                info.unlink()
        except (OSError, ValueError):
            pass
    print(f"{time.strftime('%H:%M:%S')} supervisor {os.getpid()} stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
