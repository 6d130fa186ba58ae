"""docs/usage.md and the real command line agree: every synopsis heading parses with cisl.

Each heading's `cisl ...` synopsis is turned into argument lists (every optional group included;
each alternative of `[A | B]` tried once; placeholders such as N, S or EST.json filled with a
value the option's type accepts) and parsed by the command's own click context, without running
it. An option the synopsis names that the command lacks, a value for a flag, a flag written with a
value, or a value that is not one of a choice's (`--policy done|fixed`) fails the test.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from codegen.cli import main

pytestmark = pytest.mark.unit

USAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


def synopses() -> list[str]:
    out = []
    for line in USAGE.read_text().splitlines():
        if line.startswith("#"):
            out += [s for s in re.findall(r"`([^`]*)`", line) if s.startswith("cisl ")]
    return out


def tokens(text: str) -> list[str]:
    out = []
    for word in text.split():
        while word.startswith("["):
            out.append("[")
            word = word[1:]
        tail = []
        while word.endswith("]"):
            tail.append("]")
            word = word[:-1]
        if word.endswith("...") and word != "..." and not word.endswith(",..."):
            out += [word[:-3], "..."]  # LOGS... : the argument repeats
        elif word:
            out.append(word)
        out += tail
    return out


def parse(toks: list[str], i: int = 0) -> tuple[list, int]:
    """[[...], ...]: a sequence of words and groups; a group is a list of alternatives (sequences)."""
    seq: list = []
    while i < len(toks) and toks[i] not in ("]", "|"):
        if toks[i] == "[":
            alts = []
            i += 1
            while True:
                alt, i = parse(toks, i)
                alts.append(alt)
                if toks[i] == "|":
                    i += 1
                    continue
                assert toks[i] == "]", toks
                i += 1
                break
            seq.append(alts)
        else:
            seq.append(toks[i])
            i += 1
    return seq, i


def groups(seq: list) -> list[list]:
    return [g for item in seq if isinstance(item, list) for g in [item] + [x for alt in item for x in groups(alt)]]


def flatten(seq: list, pick: dict[int, int]) -> list[str]:
    out = []
    for item in seq:
        if isinstance(item, list):
            out += flatten(item[pick.get(id(item), 0)], pick)
        else:
            out.append(item)
    return out


def variants(seq: list) -> list[list[str]]:
    out = [flatten(seq, {})]
    for g in groups(seq):
        out += [flatten(seq, {id(g): k}) for k in range(1, len(g))]
    return out


def is_placeholder(word: str) -> bool:
    return re.fullmatch(r"[A-Z][A-Z0-9_]*(\.[a-z]+)?|Q1,Q2,\.\.\.", word) is not None


def option_of(cmd: click.Command, name: str) -> tuple[click.Option, bool]:
    for p in cmd.params:
        if isinstance(p, click.Option):
            if name in p.opts:
                return p, True
            if name in p.secondary_opts:
                return p, False
    raise AssertionError(f"`{cmd.name}` has no option {name}")


def fill(opt: click.Option, word: str, where: str) -> str:
    values = word.split("|") if "|" in word else [word]
    if isinstance(opt.type, click.Choice):
        for v in values:
            assert v in opt.type.choices or is_placeholder(v), f"{where}: {opt.opts[0]} {v}: not one of {opt.type.choices}"
        return values[0] if values[0] in opt.type.choices else str(opt.type.choices[0])
    if is_placeholder(word) and not isinstance(opt.type, (click.Path, click.types.StringParamType)):
        for v in ("1", "0.5", "0", "2"):
            try:
                opt.type.convert(v, None, None)
                return v
            except click.BadParameter:
                pass
        raise AssertionError(f"{where}: no value found for {opt.opts[0]} {word}")
    return values[0]


def argv_for(cmd: click.Command, words: list[str], where: str) -> list[str]:
    argv: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w == "...":
            continue
        if w.startswith("-") and len(w) > 1:
            opt, primary = option_of(cmd, w)
            argv.append(w)
            if opt.is_flag or opt.count or not primary:
                continue
            for _ in range(opt.nargs):
                assert i < len(words) and not words[i].startswith("-") and words[i] != "...", \
                    f"{where}: {w} takes a value, the synopsis gives none"
                argv.append(fill(opt, words[i], where))
                i += 1
        else:
            argv.append(w)
    return argv


def check(synopsis: str) -> None:
    words = synopsis.split()[1:]
    cmd: click.Command = main
    ctx = main.make_context("cisl", [], resilient_parsing=True)
    path = []
    while isinstance(cmd, click.Group) and words and not words[0].startswith(("-", "[")):
        sub = cmd.get_command(ctx, words[0])
        if sub is None:
            break
        path.append(words.pop(0))
        ctx = sub.make_context(" ".join(["cisl", *path]), [], parent=ctx, resilient_parsing=True)
        cmd = sub
    assert path, f"{synopsis}: no such command"
    if not words:
        return  # a bare command name in a heading (e.g. `cisl flash` in a section title)
    seq, end = parse(tokens(" ".join(words)))
    assert end == len(tokens(" ".join(words))), f"{synopsis}: unbalanced [ ]"
    parent = ctx.parent
    for words_v in variants(seq):
        argv = argv_for(cmd, words_v, synopsis)
        try:
            cmd.make_context(path[-1], argv, parent=parent)
        except click.UsageError as e:
            raise AssertionError(f"{synopsis}: `cisl {' '.join(path + argv)}` does not parse: "
                                 f"{e.format_message()}") from None


SYNOPSES = synopses()


def test_usage_md_has_synopses():
    assert len(SYNOPSES) >= 15, SYNOPSES


@pytest.mark.parametrize("synopsis", SYNOPSES)
def test_synopsis_parses_with_the_real_cli(synopsis):
    check(synopsis)


def test_every_command_is_documented():
    text = USAGE.read_text()

    def leaves(group: click.Group, prefix: str):
        for name, sub in group.commands.items():
            if isinstance(sub, click.Group):
                yield from leaves(sub, f"{prefix} {name}")
            else:
                yield f"{prefix} {name}"

    missing = [c for c in leaves(main, "cisl") if f"`{c}" not in text]
    assert not missing, f"docs/usage.md does not mention {missing}"


@pytest.mark.parametrize("bad", [
    "cisl sim [build/] [--radio TOPOLOGY]",            # an option the command does not have
    "cisl estimate [build/] [--policy done|slow]",     # a value that is not a choice
    "cisl qemu [build/] [--keep]",                     # an option's value left out
    "cisl build [build/] [--no-board-time OFF]",       # a flag given a value
    "cisl frobnicate [build/]",                        # no such command
])
def test_the_check_catches_drift(bad):
    with pytest.raises(AssertionError):
        check(bad)


def test_the_config_block_names_every_key_with_its_default():
    """usage.md's config block is where users learn the keys: one the loader accepts but the block
    leaves out (or gives another default) is a setting nobody can find, or a wrong promise."""
    import dataclasses
    import tomllib

    from codegen.train.config import SECTIONS, load_config

    text = USAGE.read_text()
    start = text.index("The config (TOML; every key is optional):")
    block = text[text.index("```toml\n", start) + 8:text.index("```", text.index("```toml\n", start) + 8)]
    documented = tomllib.loads(block)
    defaults = load_config(None)
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            assert f.name in documented.get(section, {}), f"[{section}] {f.name} is not in docs/usage.md's config block"
            doc, real = documented[section][f.name], getattr(getattr(defaults, section), f.name)
            assert doc == (list(real) if isinstance(real, tuple) else real), (section, f.name, doc, real)
