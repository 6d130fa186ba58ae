"""The `cisl` group: the one place where errors become one line and an exit code, and where -v lives.

Mistakes in the user's input end with one line on stderr and exit code 2; a check that fails (not
bit-exact, a node that crashed) ends with exit code 1; Ctrl-C and SIGTERM end with "interrupted"
and exit code 130. Commands raise UserError/CheckFailed (codegen/errors.py) and never print
tracebacks for them.
"""

from __future__ import annotations

import contextlib
import os
import sys

import click

from .. import __version__
from ..errors import CheckFailed, UserError


def one_line_errors(fn, *args, **kwargs):
    """Run fn; UserError/CheckFailed, file-system and text errors, Ctrl-C become one line and an exit code.
    The bench scripts run their main() through it too."""
    from .. import interrupts

    try:
        try:
            result = fn(*args, **kwargs)
            interrupts.check()  # a Ctrl-C that Python swallowed in a callback still ends the command as one
            return result
        except BaseException:
            interrupts.finishing()  # how it ended is decided: a signal now must not cut the report below
            raise
    except UserError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except BrokenPipeError:  # whoever read cisl's output stopped (`cisl sim B | head`): no error of the user's
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not fail
        sys.exit(141)  # as a tool killed by SIGPIPE
    except OSError as e:  # the one error boundary for the file system: the path and the reason
        import errno

        if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):  # a write that ran out of room
            # a copy's error names its source first (shutil): the file that could not be written is the second
            where = e.filename2 or e.filename
            click.echo(f"error: {where or 'writing the output'}: {e.strerror or e}; free some space (or raise the "
                       f"file size limit, `ulimit -f`) or write the output elsewhere", err=True)
            sys.exit(2)
        where = e.filename or "a file"
        click.echo(f"error: {where}: {e.strerror or e}; check that the path exists, is of the right kind "
                   f"(file or folder) and is writable", err=True)
        sys.exit(2)
    except UnicodeDecodeError as e:
        click.echo(f"error: a file that should be text is not ({e.reason} at byte {e.start}); check the "
                   f"files given", err=True)
        sys.exit(2)
    except EOFError:  # click would report it as Ctrl-C ("interrupted", 130)
        click.echo("error: a file ended early (empty or cut short); check the files given", err=True)
        sys.exit(2)
    except CheckFailed as e:
        click.echo(f"FAILED: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt as e:  # a command may say what it kept (cisl train: its checkpoint and --resume)
        click.echo(str(e) or "interrupted", err=True)
        sys.exit(130)


def _verbose(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from ..toolrun import enable

        enable()


def verbose_option(fn):
    """-v/--verbose: log every external command cisl runs (compiler, QEMU, flash tools) to stderr."""
    return click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_verbose,
                        help="Log every external command cisl runs (compiler, linker, QEMU, flash tools) on "
                             "stderr, as a line you can rerun.")(fn)


class CislCommand(click.Command):
    """A cisl command: takes -v/--verbose like the group does (`cisl build -v` = `cisl -v build`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not any("--verbose" in p.opts for p in self.params):
            verbose_option(self)


class CislGroup(click.Group):
    """Usage mistakes (unknown option, bad value) as one line, like every other input error; the
    subcommands' UserError/CheckFailed/OSError/Ctrl-C as one line too (see one_line_errors)."""

    command_class = CislCommand

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not any("--verbose" in p.opts for p in self.params):  # nested groups: `cisl testbed -v flash ...`
            verbose_option(self)

    def invoke(self, ctx: click.Context):
        if ctx.parent is not None:  # a nested group (radio, testbed): the top-level group already guards it
            return super().invoke(ctx)
        return one_line_errors(super().invoke, ctx)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from .. import interrupts

        interrupts.install()  # SIGTERM ends cisl like Ctrl-C: outputs and temporary files cleaned up
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.UsageError as e:
            names = []
            ctx = e.ctx
            while ctx is not None and ctx.parent is not None:  # the subcommand names, whatever the program is called
                names.insert(0, ctx.info_name)
                ctx = ctx.parent
            where = " ".join(["cisl", *names])
            click.echo(f"error: {e.format_message()} (see `{where} --help`)", err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)


CislGroup.group_class = CislGroup


@click.group(cls=CislGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cisl")
@verbose_option
def main() -> None:
    """cisl: split a time-series transformer across ultra-low-power wireless nodes.

    \b
    The pipeline:
      cisl train CONFIG.toml -o model/      train; writes model.onnx + calibration set
      cisl compile model/model.onnx -o build/ --devices 4
                                            quantise to int8, partition, emit C per node
      cisl build build/                     compile every node's firmware
      cisl sim build/                       run all nodes on the virtual testbed, check bit-exactness
    `cisl demo` does all of this on built-in synthetic data. On boards (or the virtual testbed):
      cisl flash build/ --testbed testbed.toml    program, verify, reset every node
      cisl logs --testbed testbed.toml -o logs/   record their serial logs
      cisl report logs/ -o report/                latency, speedup, memory tables and figures
    For nRF52840 boards (cisl compile --board nrf52840dk):
      cisl build build/ --board qemu-m4; cisl qemu build/   each node on an emulated Cortex-M4
      cisl fit --devices 16                       the largest model whose every node image fits
    Add -v (`cisl -v build build/`) to see every compiler, QEMU and flash tool command cisl runs.
    """
