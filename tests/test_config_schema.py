"""codegen/config_schema.py is the one checker of board.toml, testbed.toml and the training config: the three
loaders read, name unknown keys and reject wrong types the same way, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.boards import read_board
from codegen.errors import UserError
from codegen.config_schema import INT, NUMBER, STR_LIST, Table, check_value, validate
from codegen.testbed.config import load_testbed
from codegen.train.config import load_config

pytestmark = pytest.mark.unit


def _board(path: Path) -> None:
    read_board(path.parent)


LOADERS = {"board.toml": _board, "testbed.toml": load_testbed, "train.toml": load_config}


@pytest.mark.parametrize("name", sorted(LOADERS))
@pytest.mark.parametrize("content, words", [(b"[x\n", ("not valid TOML", "line 1")),
                                            (b"\xff\xfe[x]\n", ("not a text file", "TOML text"))])
def test_every_loader_reads_toml_the_same_way(tmp_path, name, content, words):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError) as e:
        LOADERS[name](path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    assert all(w in msg for w in words), msg


def test_validate_walks_nested_and_open_tables():
    schema = Table({"a": Table({"n": INT, "x": NUMBER}, required=("n",)), "m": Table(values=STR_LIST)})
    validate("f.toml", {"a": {"n": 1, "x": 2}, "m": {"any": ["s"]}}, schema)
    for doc, expected in [
        ({"a": {"x": 1.0}}, "f.toml: [a]: no n; add n (an integer)"),
        ({"a": {"n": 1, "y": 1}}, "f.toml: [a]: unknown key 'y'; known keys: n, x"),
        ({"a": {"n": 1.5}}, "f.toml: [a] n must be an integer, got 1.5"),
        ({"a": 3}, "f.toml a must be a table ([a] or a = { ... }), got 3"),
        ({"m": {"k": [1]}}, "f.toml: [m] k must be a list of strings, got [1]"),
        ({"mm": {}}, "f.toml: unknown key 'mm'; did you mean 'm'?"),
    ]:
        with pytest.raises(UserError) as e:
            validate("f.toml", doc, schema)
        assert str(e.value) == expected


def test_numbers_must_be_finite_and_booleans_are_not_integers():
    with pytest.raises(UserError, match="must be a finite number"):
        check_value("f:", "x", float("nan"), NUMBER)
    with pytest.raises(UserError, match="must be an integer, got True"):
        check_value("f:", "n", True, INT)
