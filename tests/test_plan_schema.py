"""plan.json has a schema (docs/plan.schema.json, generated from the op registry) and every load
checks it: a hand-edited plan gives one line naming the node, the op and the field, and exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fastjsonschema
import pytest
from clirun import cisl
from models import config_for_tokens, make_model_dir

from codegen.compile import CompileOptions, compile_model
from codegen.ops import REGISTRY
from codegen.ops.schema import _compiled, plan_schema

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("schema")
    model = make_model_dir(root / "m", config_for_tokens(8, 32, heads=4, layers=1), devices=2, keep_ratio=0.5,
                           seed=3, tests=2, rescale=True)
    compile_model(model, root / "b", CompileOptions(devices=2))
    return root / "b"


def test_the_committed_schema_is_the_generated_one_and_accepts_a_compiled_plan(plan_dir):
    committed = json.loads((ROOT / "docs" / "plan.schema.json").read_text())
    assert committed == plan_schema(), "regenerate: python -m codegen.ops.schema > docs/plan.schema.json"
    doc = json.loads((plan_dir / "plan.json").read_text())
    fastjsonschema.compile(committed)(doc)
    kinds = {op["op"] for node in doc["nodes"] for op in node["ops"]}
    assert kinds == set(REGISTRY)  # the test plan exercises every op kind the registry knows


def test_the_validator_kept_between_commands_checks_as_a_fresh_one(plan_dir, tmp_path, monkeypatch):
    # every command that loads a plan checks it; the compiled validator is kept in ~/.cache/cisl/schema
    monkeypatch.setenv("HOME", str(tmp_path))
    schema = plan_schema()
    good = json.loads((plan_dir / "plan.json").read_text())
    bad = json.loads(json.dumps(good))
    bad["nodes"][0]["arena_bytes"] = "x"

    def verdicts(validate) -> tuple:
        validate(good)
        with pytest.raises(fastjsonschema.JsonSchemaValueException) as e:
            validate(bad)
        return e.value.message, e.value.path, e.value.rule

    expected = verdicts(fastjsonschema.compile(schema))
    assert verdicts(_compiled(schema)) == expected  # compiled, then kept
    kept = list((tmp_path / ".cache" / "cisl" / "schema").iterdir())
    assert len(kept) == 1 and kept[0].suffix == ".marshal"
    assert verdicts(_compiled(schema)) == expected  # read back
    kept[0].write_bytes(kept[0].read_bytes()[:100])  # a damaged file is compiled again and replaced
    assert verdicts(_compiled(schema)) == expected
    assert len(kept[0].read_bytes()) > 100


def _first(doc: dict, kind: str, node: int = 0) -> dict:
    return next(op for op in doc["nodes"][node]["ops"] if op["op"] == kind)


def _wrong_type(doc):
    _first(doc, "fc")["in_offset"] = "x"


def _missing_key(doc):
    del _first(doc, "bmm")["act_max"]


def _unknown_key(doc):
    _first(doc, "softmax")["diff_max"] = 3


def _unknown_kind(doc):
    _first(doc, "softmax")["op"] = "gelu"


def _inconsistent_shape(doc):
    fc = _first(doc, "fc")
    doc["nodes"][0]["tensors"][fc["out"][0]]["shape"][-1] += 1


def _missing_constant(doc):
    _first(doc, "layernorm")["gamma_c"] = "no_such_constant"


def _run_outside(doc):
    sg = _first(doc, "somegather")
    sg["recv"][0]["runs"][0][2] += 1000


def _huge_shape(doc):  # finite, "integer" to JSON Schema, and used to overflow int() (OverflowError)
    fc = _first(doc, "fc")
    doc["nodes"][0]["tensors"][fc["out"][0]]["shape"][0] = 1e308


def _huge_columns(doc):  # a range of 10**18 columns: unpacking it used to hang cisl
    doc["somegather"][0]["send_cols"][0][0][1] = 10 ** 18


def _op_without_output(doc):  # the op's check read out[0]: IndexError
    _first(doc, "gather")["out"] = []


@pytest.mark.parametrize("edit, words", [
    (_huge_shape, ["shape.0", "1e+308", "2147483647"]),
    (_huge_columns, ["send_cols", "1000000000000000000", "2147483647"]),
    (_op_without_output, ["(gather)", "0 output tensors"]),
    (_wrong_type, ["node 0 op", "(fc)", "in_offset", "integer"]),
    (_missing_key, ["(bmm)", "act_max"]),
    (_unknown_key, ["(softmax)", "diff_max"]),
    (_unknown_kind, ["unknown op kind 'gelu'", "softmax"]),
    (_inconsistent_shape, ["(fc)", "weight_c"]),
    (_missing_constant, ["(layernorm)", "gamma_c", "no_such_constant"]),
    (_run_outside, ["(somegather)", "recv", "outside"]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_hand_edited_plan_gives_one_line_and_exit_2(plan_dir, tmp_path, edit, words):
    b = tmp_path / "b"
    shutil.copytree(plan_dir, b)
    doc = json.loads((b / "plan.json").read_text())
    edit(doc)
    (b / "plan.json").write_text(json.dumps(doc, indent=1))
    p = cisl("build", str(b), "-q", cwd=tmp_path, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "plan.json" in lines[0] and "cisl compile" in lines[0]
    assert not (b / "node_00" / "firmware.elf").exists()  # nothing was built from the broken plan
