"""Ctrl-C, SIGTERM and kill -9 at the worst moments, and two runs on one folder spelt two ways.

Found by an audit that interrupted every command: the replace of an output folder was two renames
(a signal between them left no output, and the next run deleted the previous one), the output lock
was keyed by the path as typed (`../x` or a link to x ran beside x), a Ctrl-C that Python swallowed in
a callback let the command commit its output and exit 0, and one in the cycle model's hooks printed
a traceback and kept emulating. Each case runs in a fresh process, as the command line does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.faults


def run_script(code: str, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def try_lock(target: Path, tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    """Another process taking the output lock of ``target``: exit 0, or 2 with the refusal on stdout."""
    return run_script("""
        import sys, tempfile
        if len(sys.argv) > 2:
            tempfile.tempdir = sys.argv[2]
        from codegen.errors import UserError
        from codegen.fsutil import output_lock
        try:
            with output_lock(sys.argv[1]):
                sys.exit(0)
        except UserError as e:
            print(e)
            sys.exit(2)
        """, str(target), *([str(tmpdir)] if tmpdir else []))


def make_output(path: Path, text: str) -> None:
    path.mkdir()
    (path / "result.txt").write_text(text)
    (path / ".cisl-output").write_text("cisl test\n")  # last: its time stamps what cisl wrote


@pytest.mark.parametrize("exchange", [True, False])
def test_ctrl_c_during_the_swap_leaves_one_whole_output(tmp_path, exchange):
    make_output(tmp_path / "out", "old")
    make_output(tmp_path / ".out.tmp-0123456789ab", "new")
    p = run_script("""
        import os, signal, sys
        from pathlib import Path
        from codegen import fsutil, interrupts

        interrupts.install()
        if sys.argv[2] == "False":
            fsutil._exchange = lambda a, b: False  # the two-rename path of systems without an exchange
        real = Path.rename
        def rename(self, target):
            out = real(self, target)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C right after the first rename
            return out
        Path.rename = rename
        real_exchange = fsutil._exchange
        def exchange(a, b):
            out = real_exchange(a, b)
            os.kill(os.getpid(), signal.SIGINT)  # ... or right after the exchange
            return out
        fsutil._exchange = exchange
        try:
            fsutil.replace_dir(Path(sys.argv[1]) / ".out.tmp-0123456789ab", Path(sys.argv[1]) / "out")
        except KeyboardInterrupt:
            sys.exit(130)
        """, str(tmp_path), str(exchange))
    assert p.returncode == 130, p.stderr
    assert (tmp_path / "out" / "result.txt").read_text() == "new"  # the swap ran whole, then the signal


def test_a_run_killed_between_the_two_renames_gets_its_previous_output_back(tmp_path):
    from codegen.fsutil import output_lock

    make_output(tmp_path / ".out.old-abcdef012345", "old")  # out renamed away, the new one not yet in place
    make_output(tmp_path / ".out.tmp-def012345678", "half")
    with output_lock(tmp_path / "out"):
        assert (tmp_path / "out" / "result.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_one_lock_per_folder_however_it_is_spelt(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from codegen.fsutil import output_lock
        with output_lock(sys.argv[1]):
            print("held", flush=True)
            time.sleep(30)
        """), str(tmp_path / "out")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for spelt in (tmp_path / "sub" / ".." / "out", tmp_path / "link" / "out"):
            p = try_lock(spelt)
            assert p.returncode == 2 and "another cisl run is writing it" in p.stdout, (spelt, p.stdout, p.stderr)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_lock_files_do_not_pile_up_and_a_lock_removed_under_a_run_is_taken_afresh(tmp_path, monkeypatch):
    """Every output folder ever written used to leave its lock file in $TMPDIR/cisl-locks/. The holder
    now removes it, so a run that opened the file just before must not lock the removed file: the
    holder's removal is forced between our open and our flock, then a second run is tried beside us."""
    import fcntl
    import tempfile

    from codegen import fsutil

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.delenv("CISL_LOCK_DIR", raising=False)  # the tests' own (conftest.py)
    with fsutil.output_lock(tmp_path / "out"):
        assert len(list((tmp_path / "tmp" / "cisl-locks").iterdir())) == 1
    assert list((tmp_path / "tmp" / "cisl-locks").iterdir()) == []

    real_flock, raced = fcntl.flock, []

    def flock_after_the_holder_left(fd, op):
        if not raced:  # the previous holder unlinks the file we just opened
            raced.append(1)
            for f in (tmp_path / "tmp" / "cisl-locks").iterdir():
                f.unlink()
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_the_holder_left)
    with fsutil.output_lock(tmp_path / "out"):
        monkeypatch.setattr(fcntl, "flock", real_flock)
        p = try_lock(tmp_path / "out", tmp_path / "tmp")
        assert raced and p.returncode == 2 and "another cisl run is writing it" in p.stdout, (p.stdout, p.stderr)


def test_a_ctrl_c_python_swallowed_still_stops_the_command_before_it_commits(tmp_path):
    make_output(tmp_path / "out", "old")
    p = run_script("""
        import os, signal, sys, weakref
        from pathlib import Path
        from codegen import fsutil, interrupts
        from codegen.cli.app import one_line_errors

        class Thing:
            pass

        def command():
            with fsutil.atomic_output_dir(Path(sys.argv[1]) / "out", "test", lambda name: True) as tmp:
                (tmp / "result.txt").write_text("new")
                # the signal comes while a weakref callback runs: Python prints "Exception ignored"
                # and goes on (as in `cisl report`'s plotting)
                thing = Thing()
                weakref.finalize(thing, os.kill, os.getpid(), signal.SIGINT)
                del thing
                for _ in range(1000):
                    pass
            print("committed")

        interrupts.install()
        one_line_errors(command)
        """, str(tmp_path))
    assert p.returncode == 130 and p.stderr.strip() == "interrupted", (p.returncode, p.stdout, p.stderr)
    assert "committed" not in p.stdout
    assert (tmp_path / "out" / "result.txt").read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out"]


@pytest.mark.arm
@pytest.mark.parametrize("hooks", ["python", "c"])
def test_ctrl_c_in_the_cycle_models_hooks_stops_the_emulation_at_once(tmp_path, hooks):
    """The signal lands inside a unicorn hook (a callback from C): no "Exception ignored" traceback,
    the emulation stops at once, and the command ends "interrupted" (exit 130). With the C hooks
    (codegen/timing/native.py) whole inferences run without Python code, in which alone Python's
    handler can run: they call into Python every 16384 blocks for it."""
    import shutil

    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from codegen.timing import native
    from models import config_for_tokens, make_model_dir

    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("needs arm-none-eabi-gcc")
    if hooks == "c" and native.library() is None:
        pytest.skip(f"the C hooks cannot be built here: {native.unavailable()}")
    model = make_model_dir(tmp_path / "m", config_for_tokens(8, 64, heads=4, layers=1), devices=2, keep_ratio=1.0,
                           seed=5, tests=2)
    compile_model(model, tmp_path / "hw", CompileOptions(devices=2, board="nrf52840dk"))
    build(tmp_path / "hw", None, 1, lambda s: None, None)
    started = time.monotonic()
    p = run_script("""
        import os, signal, sys, threading, time
        from pathlib import Path
        from codegen import interrupts
        from codegen.cli.app import one_line_errors
        from codegen.timing import engine, native
        from codegen.timing.compute import compute_build

        blocks = {"n": 0, "after": 0}
        real = engine.Emulator._on_block
        def on_block(self, uc, address, size, user):
            blocks["n"] += 1
            if blocks["n"] == 20000:
                os.kill(os.getpid(), signal.SIGINT)
            elif blocks["n"] > 20000:
                blocks["after"] += 1
            return real(self, uc, address, size, user)
        engine.Emulator._on_block = on_block

        # the C hooks: the signal comes from another thread while a long run computes in C
        sent = []
        real_replace = native.NativeEmulator.replace
        def replace(self, symbol, fn):
            if not sent:
                sent.append(None)
                def kill():
                    sent.append(time.monotonic())
                    os.kill(os.getpid(), signal.SIGINT)
                threading.Timer(1.0, kill).start()
            return real_replace(self, symbol, fn)
        native.NativeEmulator.replace = replace

        def command():
            try:
                compute_build(Path(sys.argv[1]), jobs=1, inferences=200)
            finally:
                late = time.monotonic() - sent[-1] if sent and sent[-1] else None
                print("blocks after the signal:", blocks["after"], "seconds after it:", late, flush=True)

        interrupts.install()
        one_line_errors(command)
        """, str(tmp_path / "hw"), timeout=300, env={**os.environ, "CISL_CYCLE_HOOKS": hooks})
    assert p.returncode == 130 and p.stderr.strip() == "interrupted", (p.returncode, p.stdout, p.stderr)
    if hooks == "python":
        after = int(p.stdout.split("blocks after the signal:")[1].split()[0])
        assert after < 50, (after, time.monotonic() - started)
    else:
        assert float(p.stdout.split("seconds after it:")[1].split()[0]) < 0.5, p.stdout


def test_a_second_training_into_the_same_folder_is_refused_at_its_start(tmp_path):
    # both used to train (for hours, on real data); the second to finish replaced the first's model
    cfg = tmp_path / "tiny.toml"
    cfg.write_text("[model]\nlookback = 32\npatch_len = 8\nstride = 8\nd_model = 16\nheads = 4\nlayers = 1\n"
                   "mlp_hidden = 16\nhorizon = 8\n[split]\ndevices = 2\n[train]\nepochs = 500\n")
    first = subprocess.Popen([sys.executable, "-m", "codegen.cli", "train", str(cfg), "-o", "m"], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60  # training: its first checkpoint is written
        while time.monotonic() < end and first.poll() is None and not (tmp_path / ".m.cisl-train").is_dir():
            time.sleep(0.05)
        assert first.poll() is None, "the first training ended early"
        p = subprocess.run([sys.executable, "-m", "codegen.cli", "train", str(cfg), "-o", str(tmp_path / "x" / ".." / "m")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "another cisl run is writing it" in p.stderr, p.stderr
    finally:
        first.kill()
        first.wait()
        first.stderr.close()


def test_a_reader_that_writes_too_takes_the_folder_alone_or_is_refused(tmp_path):
    """A run that reads a build and then writes it (its lock made exclusive in place) gets it only while
    no other run reads it, and leaves it readable by others again."""
    from codegen.errors import UserError
    from codegen.fsutil import output_lock, reading

    out = tmp_path / "b"
    out.mkdir()
    reader = """
        import sys, time
        from codegen.fsutil import reading
        with reading(sys.argv[1]):
            print("reading", flush=True)
            time.sleep(30)
        """
    with reading(out):
        with output_lock(out):  # alone: made exclusive, then shared again
            p = run_script("import sys\nfrom codegen.fsutil import reading\nwith reading(sys.argv[1]): pass", str(out))
            assert p.returncode != 0 and "another cisl run is writing it" in p.stderr, p.stderr
        other = subprocess.Popen([sys.executable, "-c", textwrap.dedent(reader), str(out)], stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert other.stdout.readline().strip() == "reading"  # shared again: a second reader gets in
            with pytest.raises(UserError, match="another cisl run is reading it"):
                with output_lock(out):
                    pass
        finally:
            other.kill()
            other.wait()
            other.stdout.close()
    assert try_lock(out).returncode == 0


def test_a_signal_while_the_error_line_is_printed_is_no_traceback():
    """A SIGTERM that came while cisl printed its one error line raised inside that report: a traceback
    from the signal handler and exit 1 instead of the line and exit 2 (audit M, seen once in 280 tries;
    here the signal is sent from inside the print)."""
    p = run_script("""
        import os, signal
        import click
        from codegen import interrupts
        from codegen.cli import app
        from codegen.errors import UserError

        interrupts.install()
        real = click.echo
        def echo(*a, **k):
            os.kill(os.getpid(), signal.SIGTERM)
            real(*a, **k)
        app.click.echo = echo
        def fail():
            raise UserError("the input is bad")
        app.one_line_errors(fail)
        """)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip() == "error: the input is bad", p.stderr
