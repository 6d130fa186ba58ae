"""Options several commands share, and the small conversions from options to library arguments."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import click

from ..errors import UserError


class FiniteRange(click.FloatRange):
    """click.FloatRange that also refuses nan and infinity (FloatRange lets nan through every bound)."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def say(quiet: bool):
    """The progress callback of a command: lines on stderr, or nothing with -q."""
    return (lambda s: None) if quiet else (lambda s: click.echo(s, err=True))


def build_dir_argument(fn):
    """The build folder: positional BUILD_DIR (default build/) or, west-style, -d/--build-dir."""

    @functools.wraps(fn)
    def wrapper(*args, build_dir_arg: Path | None, build_dir_opt: Path | None, **kwargs):
        if build_dir_arg is not None and build_dir_opt is not None and build_dir_arg != build_dir_opt:
            raise click.UsageError(f"the build folder is given twice ({build_dir_arg} and -d {build_dir_opt}); "
                                   "give it once", ctx=click.get_current_context())
        return fn(*args, build_dir=build_dir_opt or build_dir_arg or Path("build"), **kwargs)

    wrapper = click.option("-d", "--build-dir", "build_dir_opt", type=click.Path(path_type=Path), default=None,
                           metavar="BUILD_DIR",
                           help="The build folder (instead of the BUILD_DIR argument; default: build).")(wrapper)
    return click.argument("build_dir_arg", metavar="[BUILD_DIR]", required=False,
                          type=click.Path(path_type=Path))(wrapper)


def loss_options(fn):
    """The three message-loss modes as options (codegen/lossmodel.py), shared by sim, qemu and eval."""
    fn = click.option("--loss-sender", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
                      help="Probability that nobody gets a sender's message in a round.")(fn)
    fn = click.option("--loss-receiver", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0,
                      show_default=True, help="Probability that a receiver gets nothing in a round.")(fn)
    fn = click.option("--loss-link", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
                      help="Probability that one sender->receiver message of a round is lost.")(fn)
    return click.option("--loss", "loss_q", type=click.FloatRange(0.0, 1.0, max_open=True), default=None,
                        help="Message loss probability for each of the three modes (link, receiver, sender).")(fn)


def loss_rates(loss_q: float | None, link: float, receiver: float, sender: float):
    from ..lossmodel import LossRates

    if loss_q is not None and (link or receiver or sender):  # --loss 0 --loss-link 0.3 scored loss-free
        raise UserError(f"--loss {loss_q:g} sets all three loss modes; give either --loss or --loss-link, "
                        "--loss-receiver and --loss-sender")
    return LossRates.uniform(loss_q) if loss_q is not None else LossRates(link, receiver, sender)


def sweep_values(text: str) -> list[float]:
    """--sweep "0,0.05,0.1" -> sorted unique loss probabilities in [0, 1)."""
    try:
        values = sorted({float(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise UserError(f"--sweep {text!r}: expected comma-separated probabilities such as 0,0.05,0.1") from None
    if not values or not all(0.0 <= v < 1.0 for v in values):
        raise UserError(f"--sweep {text!r}: every probability must be in [0, 1), e.g. 0,0.05,0.1")
    return values


def mode_requests(texts: tuple[str, ...]) -> list[tuple[int, int, int]]:
    """--mode-request INF:NODE:MODE values as (inference, node, mode)."""
    out = []
    for text in texts:
        parts = text.split(":")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise UserError(f"--mode-request {text}: expected INF:NODE:MODE, three whole numbers (e.g. 4:2:1)")
        out.append(tuple(int(p) for p in parts))
    return out


def mode_limits(texts: tuple[str, ...]) -> list[tuple[int, int, int, int, int]]:
    """--mode-limits INF:NODE:MS:UJ:MSE values as (inference, node, deadline µs, energy nJ, MSE × 10⁶):
    the integers node and host compare (codegen.modes; NO_LIMIT for '-')."""
    from ..modes import NO_LIMIT, to_micro

    out = []
    for text in texts:
        parts = text.split(":")
        try:
            if len(parts) != 5:
                raise ValueError
            inf, node = int(parts[0]), int(parts[1])
            vals = [NO_LIMIT if p == "-" else to_micro(float(p) / scale) for p, scale in zip(parts[2:], (1e3, 1e3, 1))]
        except ValueError:
            raise UserError(f"--mode-limits {text}: expected INF:NODE:MS:UJ:MSE (whole INF and NODE; '-' for no "
                            f"limit), e.g. 10:0:80:-:-") from None
        out.append((inf, node, *vals))
    return out
