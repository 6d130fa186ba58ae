"""`cisl demo`: the whole pipeline on built-in synthetic data."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import CheckFailed
from .app import main


@main.command()
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("cisl-demo"),
              show_default=True, help="Folder for every artifact of the demo.")
@click.option("--devices", type=click.IntRange(min=1), default=4, show_default=True, help="Number of nodes.")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Training epochs (default: the demo's).")
def demo(out_dir: Path, devices: int, epochs: int | None) -> None:
    """The whole pipeline on built-in synthetic data: train, compile, build, run on the virtual testbed.

    Keeps model/ (model.onnx, calibration set), build/ (plan.json, generated C, images) and logs/
    under OUT and prints a short report.
    """
    from ..demo import run_demo

    ok = run_demo(out_dir, devices, epochs, click.echo)
    if not ok:
        raise CheckFailed("the demo did not run bit-exact; see the report above")
