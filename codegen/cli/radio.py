"""The simulated radio: `cisl radio loss`."""

from __future__ import annotations

from pathlib import Path

import click

from .options import FiniteRange

from .app import main


@main.group()
def radio() -> None:
    """The simulated radio: Mixer over slot-level channel models (codegen/radio)."""


@radio.command(name="loss")
@click.option("--topology", "topo", default="hallway16", show_default=True,
              help="full_mesh, line, grid, random_geometric, hallway or hallway16.")
@click.option("--nodes", type=click.IntRange(2, 32), default=None, help="Node count (not for hallway16).")
@click.option("--message-bytes", type=click.IntRange(min=1), default=336, show_default=True,
              help="Bytes every node sends per exchange (tokens x broadcast columns; see plan.json msg_bytes).")
@click.option("--exchanges", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--policy", type=click.Choice(["done", "fixed"]), default="done", show_default=True,
              help="Round length: end when all have full rank, or the fixed 3G+200 deadline.")
@click.option("--deadline", type=click.IntRange(min=1), default=None,
              help="Override the rounds' hard deadline in slots (tight deadlines trade loss for latency; more than "
                   "max(4, nodes), the slots a node lingers).")
@click.option("--exponent", type=FiniteRange(min=1.0, max=10.0), default=None,
              help="Path-loss exponent, 1 to 10 (default 4.0; 2 is free space, indoor links 2-6).")
@click.option("--shadowing", type=FiniteRange(min=0.0, max=30.0), default=None, help="Shadowing sigma in dB, 0 to 30 (default 4).")
@click.option("--burst", nargs=3, type=FiniteRange(0.0, 1.0), default=None, metavar="P_GB P_BG LOSS_BAD",
              help="Gilbert-Elliott bursty links: good->bad and bad->good transition probabilities per slot "
                   "and the loss probability in the bad state.")
@click.option("--fail-prob", type=FiniteRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
              help="Probability that a node is down for a whole exchange (crash, reboot).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("-o", "--out", "out", type=click.Path(path_type=Path), default=None,
              help="Write the [dropout] section (TOML) for `cisl train` here.")
def radio_loss(topo: str, nodes: int | None, message_bytes: int, exchanges: int, policy: str, deadline: int | None,
               exponent: float | None, shadowing: float | None, burst, fail_prob: float, seed: int,
               out: Path | None) -> None:
    """Measure somegather's message loss over Mixer on a topology, split into the three loss modes.

    Prints (and with -o writes) the per-mode probabilities that `[dropout]` in a training config
    takes, so message dropout trains for the network the model will run on.
    """
    from tqdm import tqdm

    from ..radio.lossstats import measure_loss, save_dropout

    s = measure_loss(topo, nodes, message_bytes, exchanges, seed, policy, deadline, exponent, shadowing, burst,
                     fail_prob, out, progress=lambda it: tqdm(it, desc="exchanges", unit="ex", leave=False,
                                                                disable=None))
    click.echo(f"{s.topology}: {s.nodes} nodes, {s.exchanges} exchanges of {s.message_bytes} B per node, "
               f"policy {s.policy}; rounds {s.slots_mean:.0f} slots on average (99.9 %: {s.slots_p999:.0f}, "
               f"deadline {s.deadline})")
    click.echo(f"exchanges complete at every node: {100 * s.complete_fraction:.2f} %; lost messages "
               f"{100 * s.effective_link_loss:.3f} % (the three modes below give {100 * s.model_link_loss:.3f} %)")
    click.echo(s.toml().rstrip())
    if out is not None:
        save_dropout(s, out)
