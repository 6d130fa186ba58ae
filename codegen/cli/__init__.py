"""The `cisl` command line: train -> compile -> build -> sim, and `demo` for all of it at once.

One module per group of commands; each command parses its options, calls one library function and
prints the result. Errors become one line and an exit code in one place (app.CislGroup): mistakes
in the user's input exit with 2, a check that fails (not bit-exact, a node that crashed) with 1.
Heavy modules (torch, onnx) are imported only by the commands that need them, so `cisl compile`
never loads torch.

    app.py      the `cisl` group: errors, SIGTERM, -v/--verbose
    model.py    train, eval, compile, fit
    sweep.py    sweep (cisl train over a grid, on joblib or SLURM)
    nodes.py    build, qemu, estimate, sim
    radio.py    radio loss
    plan.py     profile, plan (heterogeneous testbeds)
    testbed.py  testbed scan/sim/check/stop, flash, logs, report
    demo.py     demo
"""

from __future__ import annotations

from . import demo, model, nodes, plan, radio, sweep, testbed  # noqa: F401  (they add their commands to main)
from .app import main

__all__ = ["main"]
