"""`cisl profile` → `cisl plan` → `cisl compile --split` → `cisl build` → `cisl sim`, as users run it.

A planned split of an unpruned model compiles without retraining and runs bit-exact on the virtual
testbed, on a mixed testbed and around dead nodes (`--without`); `cisl estimate` of the build
meets the deadline the plan was made for; bad input is one line and exit code 2.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from clirun import cisl, ok
from codegen.modelspec import ModelConfig
from codegen.ops import REGISTRY
from codegen.planner.profile import BoardProfile, Profile, Rate, node_profile, write_profile
from codegen.randmodel import make_model_dir

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
arm = pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")

SMALL = ModelConfig(lookback=64, patch_len=8, stride=8, padding="none", d_model=32, heads=8, layers=2, mlp_hidden=32,
                    horizon=8)
WIDE16 = ModelConfig(lookback=64, patch_len=8, stride=8, padding="none", d_model=32, heads=16, layers=1,
                     mlp_hidden=32, horizon=8)


def _harvest(tb: Path, node: int, budget: float) -> None:
    """Give one node of a `cisl testbed sim` file an energy budget."""
    text = tb.read_text()
    port = f'port = ".cisl-testbed/node_{node:02d}.tty"\n'
    assert port in text
    tb.write_text(text.replace(port, port + f'energy_source = "harvest"\nenergy_uj = {budget}\n', 1))


@pytest.mark.sim
@pytest.mark.arm
@arm
def test_a_planned_mixed_split_compiles_and_runs_bit_exact_within_its_deadline(tmp_path):
    model = make_model_dir(tmp_path / "model", SMALL, 4, 1.0, seed=3, rescale=True)
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "6", "--models", "nrf52840dk*3,nrf52833dk*3", "-o", str(tb), cwd=tmp_path))
    _harvest(tb, 4, 2000.0)
    p = ok(cisl("profile", str(model), "--testbed", str(tb), "-o", "profile.json", "-q", cwd=tmp_path, timeout=600))
    assert "profiled 6 node(s)" in p.stdout
    prof = json.loads((tmp_path / "profile.json").read_text())
    assert sorted(prof["boards"]) == ["nrf52833dk", "nrf52840dk"]
    assert prof["nodes"][4]["energy_uj"] == 2000.0 and prof["nodes"][3]["board"] == "nrf52833dk"
    assert prof["boards"]["nrf52840dk"]["rates"]["fc"]["per_unit"] > 1.0  # the cycle model's, not a default
    ok(cisl("plan", str(model), "--testbed", str(tb), "-o", "fast.json", "-q", cwd=tmp_path, timeout=600))
    planner = json.loads((tmp_path / "fast.json").read_text())["planner"]
    assert planner["objective"] == "latency"  # without --deadline the default is the fastest plan
    fastest = planner["predicted"]["latency_ms"]
    deadline = round(1.3 * fastest, 1)
    p = ok(cisl("plan", str(model), "--testbed", str(tb), "--deadline", str(deadline), "-o", "split.json",
                "--compare", "--json", "plan.json", "-q", cwd=tmp_path, timeout=600))
    assert "re-checked exactly" in p.stdout and "even" in p.stdout and "coedge" in p.stdout
    sf = json.loads((tmp_path / "split.json").read_text())
    assert 4 not in sf["nodes"] or sf["planner"]["predicted"]["node_energy_uj"][sf["nodes"].index(4)] <= 2000.0
    assert sf["planner"]["predicted"]["latency_ms"] <= deadline
    doc = json.loads((tmp_path / "plan.json").read_text())
    even = doc["baselines"]["even"]
    assert doc["plan"]["planner"]["predicted"]["energy_uj"] <= even["energy_uj"] or even["violations"]
    out = tmp_path / "b"
    ok(cisl("compile", str(model), "--split", "split.json", "-o", str(out), "-q", cwd=tmp_path))
    plan = json.loads((out / "plan.json").read_text())
    assert plan["testbed_nodes"] == sf["nodes"] and plan["node_boards"] == sf["boards"]
    assert plan["partition"]["heads_per_device"] == sf["heads_per_device"]
    assert [hi - lo for lo, hi in plan["partition"]["hidden_cols"]] == sf["hidden_per_device"]
    ok(cisl("build", str(out), "-q", cwd=tmp_path, timeout=600))
    p = ok(cisl("sim", str(out), cwd=tmp_path, timeout=600))
    assert "bit-exact with the int8 reference: yes" in p.stdout
    ok(cisl("estimate", str(out), "-o", "est.json", cwd=tmp_path, timeout=600))
    est = json.loads((tmp_path / "est.json").read_text())
    assert est["latency_ms"]["central"] <= deadline
    # the plan counts the work outside the blocks as `cisl estimate` does (it left out ~0.28 ms, and a plan
    # at 107.51 ms for a 107.6 ms deadline estimated at 107.70; audit L)
    pred = sf["planner"]["predicted"]
    assert pred["outside_blocks_ms"] > 0 and pred["outside_blocks_ms"] == pytest.approx(
        est["outside_blocks_ms"]["central"], rel=0.25), (pred["outside_blocks_ms"], est["outside_blocks_ms"])
    assert pred["latency_ms"] == pytest.approx(
        sum(b["compute_ms"] + b["comm_ms"] for b in pred["blocks"]) + pred["outside_blocks_ms"], abs=1e-3)
    # every block's compute near the cycle model's: the embedding's 16-deep fc was priced at the rate of the
    # deeper ones (MACs alone), its block 22 % under the estimate; outputs are priced too now (1 %; the
    # rest within 3 %, the head's few small ops 7.5 %)
    est_blocks = {b["block"]: b["slowest_compute_ms"]["central"] for b in est["blocks"]}
    for b in pred["blocks"]:
        assert b["compute_ms"] == pytest.approx(est_blocks[b["block"]], rel=0.08), (b, est_blocks)


@pytest.mark.sim
@pytest.mark.arm
@arm
def test_replanning_without_dead_nodes_runs_bit_exact(tmp_path):
    model = make_model_dir(tmp_path / "model", WIDE16, 16, 1.0, seed=3, rescale=True)
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "16", "-o", str(tb), cwd=tmp_path))
    ok(cisl("profile", str(model), "--testbed", str(tb), "-q", cwd=tmp_path, timeout=600))
    ok(cisl("plan", str(model), "--testbed", str(tb), "--objective", "latency", "--without", "3,7", "--all-nodes",
            "--search-seconds", "0", "-o", "s14.json", "-q", cwd=tmp_path, timeout=600))  # (the polish: elsewhere)
    sf = json.loads((tmp_path / "s14.json").read_text())
    assert sf["nodes"] == [k for k in range(16) if k not in (3, 7)] and not sf["planner"]["needs_retraining"]
    out = tmp_path / "b14"
    ok(cisl("compile", str(model), "--split", "s14.json", "-o", str(out), "-q", cwd=tmp_path))
    ok(cisl("build", str(out), "-q", cwd=tmp_path, timeout=600))
    # `cisl sim --testbed` runs the rounds where the plan placed its nodes (bit-exact); without it they run on a
    # hallway made for 14 nodes, and the user is told so
    p = ok(cisl("sim", str(out), "--testbed", str(tb), "-n", "3", cwd=tmp_path, timeout=600))
    assert "14 nodes, 3 inferences" in p.stdout and "bit-exact with the int8 reference: yes" in p.stdout
    assert "note:" not in p.stderr, p.stderr
    sim_air = float(re.search(r"air time ([0-9.]+) ms per inference", p.stdout).group(1))
    p = ok(cisl("sim", str(out), "-n", "1", cwd=tmp_path, timeout=600))
    assert "bit-exact with the int8 reference: yes" in p.stdout
    assert "is a split planned for testbed nodes 0, 1, 2, 4," in p.stderr, p.stderr
    assert "rounds ran on hallway for 14 nodes: pass --testbed FILE to run" in p.stderr, p.stderr
    # `cisl estimate --testbed` prices the rounds where the plan placed its nodes, the planner's radio: each
    # block's air time and start guards are the planner's to the microsecond, and the air time is the one
    # `cisl sim --testbed` ran (the same rounds). Without it the rounds ran on a hallway made for 14 nodes
    # (2591.8 against a planned 2409.4 ms on bench/heterogeneous.py's split), and the user is told so
    p = ok(cisl("estimate", str(out), "--testbed", str(tb), "--radio-inferences", "3", "--json", "-q",
                cwd=tmp_path, timeout=600))
    est = json.loads(p.stdout)
    assert sum(x["air_us"]["mean"] for x in est["exchanges"].values()) / 1e3 == pytest.approx(sim_air, abs=0.051)
    assert est["topology"].startswith("positions of testbed nodes 0,1,2,4,5,6,8,"), est["topology"]
    # the written plan's predictions are over CHECK_INFERENCES simulated inferences (the search's, over 3,
    # favoured lucky rounds): the estimate over as many prices the very same rounds
    from codegen.planner.costs import CHECK_INFERENCES

    p = ok(cisl("estimate", str(out), "--testbed", str(tb), "--radio-inferences", str(CHECK_INFERENCES), "--json",
                "-q", cwd=tmp_path, timeout=600))
    est = json.loads(p.stdout)
    air = {sg: x["air_us"]["mean"] + x["guard_us"] for sg, x in est["exchanges"].items()}
    priced = [sum(air[str(sg)] for sg in b["exchanges"]) / 1e3 for b in est["blocks"]]
    assert priced == pytest.approx([b["comm_ms"] for b in sf["planner"]["predicted"]["blocks"]], abs=1e-3)
    assert est["latency_ms"]["central"] == pytest.approx(sf["planner"]["predicted"]["latency_ms"], rel=0.02)
    p = ok(cisl("estimate", str(out), "-q", cwd=tmp_path, timeout=600))
    assert "is a split planned for testbed nodes 0, 1, 2, 4," in p.stderr and "pass --testbed FILE" in p.stderr
    for cmd in ("estimate", "sim"):
        p = cisl(cmd, str(out), "--topology", "line", "--testbed", str(tb), cwd=tmp_path)
        assert p.returncode == 2 and "give one of them" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    # the survivors where the testbed file puts them, one far away: messages are lost, never wrong
    from codegen.vtestbed.run import run_sim

    far = [[3.0 * k, 0.0] for k in range(13)] + [[80.0, 0.0]]
    r = run_sim(out, radio="positions", radio_positions=far, timeout=300, logs_dir=tmp_path / "far-logs")
    assert r.bit_exact and not r.problems and r.delivered < r.expected


def _nominal_profile(path: Path, cfg: ModelConfig, boards: list[str]) -> None:
    rates = {k: Rate(4.0 if REGISTRY[k].work_unit == "MAC" else 10.0, 300.0) for k in REGISTRY}
    write_profile(path, Profile(cfg, {b: BoardProfile(b, 64e6, rates, "nnref") for b in set(boards)},
                                [node_profile(k, b, position=(3.0 * k, 0.0)) for k, b in enumerate(boards)]))


def _toml(path: Path, cfg: ModelConfig) -> Path:
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in cfg.to_json().items() if k not in ("tokens",))
    path.write_text(f"[model]\n{body}\n")
    return path


@pytest.fixture(scope="module")
def all3(tmp_path_factory) -> tuple[Path, object]:
    """SMALL on 3 nominal nRF52840 nodes (`cisl testbed sim --nodes 3`), planned without a deadline with
    --all-nodes --compare (which writes the split it writes without --compare): the folder (tb.toml,
    small.toml, profile.json, split.json, plan.json) and the run. Tests copy the folder before writing."""
    root = tmp_path_factory.mktemp("all3")
    ok(cisl("testbed", "sim", "--nodes", "3", "-o", str(root / "tb.toml"), cwd=root))
    small = _toml(root / "small.toml", SMALL)
    _nominal_profile(root / "profile.json", SMALL, ["nrf52840dk"] * 3)
    p = ok(cisl("plan", str(small), "--testbed", str(root / "tb.toml"), "--all-nodes", "--compare", "--json",
                "plan.json", "-o", "split.json", "-q", cwd=root, timeout=300))
    return root, p


@pytest.mark.faults
def test_bad_input_is_one_line(tmp_path):
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "2", "--models", "nrf52833dk*2", "-o", str(tb), cwd=tmp_path))
    small = _toml(tmp_path / "small.toml", SMALL)
    _nominal_profile(tmp_path / "small.json", SMALL, ["nrf52833dk"] * 2)
    big_cfg = ModelConfig(lookback=128, patch_len=8, stride=8, padding="none", d_model=320, heads=4, layers=2,
                          mlp_hidden=320, horizon=8)
    big = _toml(tmp_path / "big.toml", big_cfg)
    _nominal_profile(tmp_path / "big.json", big_cfg, ["nrf52833dk"] * 2)
    tbpos = tmp_path / "tbpos.toml"  # placed by positions, node 1 without one: `cisl plan` gave a traceback
    tbpos.write_text(re.sub(r"(id = 1\n(?:.*\n)*?)position = \[[^]]*\]\n", r"\1",
                            tb.read_text().replace("[sim]\n", '[sim]\ntopology = "positions"\n', 1), count=1))
    tb6 = tmp_path / "tb6.toml"  # more nodes than big_cfg's 4 heads: --all-nodes blamed memory or the deadline
    ok(cisl("testbed", "sim", "--nodes", "6", "-o", str(tb6), cwd=tmp_path))
    _nominal_profile(tmp_path / "big6.json", big_cfg, ["nrf52840dk"] * 6)
    unrated = json.loads((tmp_path / "small.json").read_text())
    unrated["boards"] = {}  # edited by hand, or cut short: the nodes' board has no rates
    (tmp_path / "unrated.json").write_text(json.dumps(unrated))
    cases = {
        "profile without its boards' rates": (["plan", str(small), "--testbed", str(tb), "--profile", "unrated.json",
                                               "--objective", "latency"], "no rates for board(s) nrf52833dk"),
        "deadline nothing meets": (["plan", str(small), "--testbed", str(tb), "--profile", "small.json",
                                    "--deadline", "0.5"], "the fastest achievable is"),
        "nodes cannot hold the model": (["plan", str(big), "--testbed", str(tb), "--profile", "big.json",
                                         "--objective", "latency"], "the nodes together cannot hold the model"),
        "profile of another model": (["plan", str(small), "--testbed", str(tb), "--profile", "big.json",
                                      "--objective", "latency"], "a profile of another model"),
        "profile is a folder": (["plan", str(small), "--testbed", str(tb), "--profile", str(tmp_path),
                                 "--objective", "latency"], "is a folder; give the profile file itself"),
        "unknown board": (["profile", str(small), "--board", "nrf52832dk"], "unknown board 'nrf52832dk'"),
        "all nodes, more nodes than heads": (["plan", str(big), "--testbed", str(tb6), "--profile", "big6.json",
                                              "--all-nodes", "--deadline", "400"],
                                             "--all-nodes: 6 nodes, but the model has 4 heads"),
        "unknown node": (["plan", str(small), "--testbed", str(tb), "--profile", "small.json", "--objective",
                          "latency", "--without", "5"], "the testbed has no node 5"),
        "energy without deadline": (["plan", str(small), "--testbed", str(tb), "--profile", "small.json",
                                     "--objective", "energy"], "needs --deadline"),
        "infinite deadline": (["plan", str(small), "--testbed", str(tb), "--profile", "small.json",
                               "--deadline", "inf"], "is not a finite number"),  # it wrote Infinity, not JSON
        "plan: placed by positions, a node has none": (["plan", str(small), "--testbed", str(tbpos), "--profile",
                                                        "small.json"], "node 1 has none"),
        "profile: placed by positions, a node has none": (["profile", str(small), "--testbed", str(tbpos)],
                                                          "node 1 has none"),
    }
    for name, (args, msg) in cases.items():
        p = cisl(*args, "-o", "out.json", "-q", cwd=tmp_path, timeout=300)
        assert p.returncode == 2, (name, p.stdout, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr, (name, p.stderr)
        assert not (tmp_path / "out.json").exists(), name
    # the split was written, then --json refused as "choose another output file with -o"; exit 2
    p = cisl("plan", str(small), "--testbed", str(tb), "--profile", "small.json", "-o", "same.json", "--json",
             "./same.json", "-q", cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "-o and --json both name" in p.stderr, p.stderr
    assert not (tmp_path / "same.json").exists()
    # budgets nothing meets and no deadline: the message blamed "the deadline" all the same
    tbe = tmp_path / "tbe.toml"
    tbe.write_text(tb.read_text().replace("[sim]\n", '[defaults]\nenergy_source = "harvest"\nenergy_uj = 1.0\n\n[sim]\n'))
    p = cisl("plan", str(small), "--testbed", str(tbe), "--profile", "small.json", "-o", "out.json", "-q",
             cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "energy_uj binds" in p.stderr, p.stderr
    assert "deadline" not in p.stderr and not (tmp_path / "out.json").exists(), p.stderr
    p = cisl("testbed", "check", str(tbpos), cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "node 1 has none" in p.stderr, p.stderr
    # a profile and a split file both carry boards and nodes: neither command writes over the other's file
    (tmp_path / "split.json").write_text(json.dumps({"format": "cisl-split", "heads_per_device": [2, 2]}))
    for args, other in ((["profile", str(small), "--testbed", str(tb), "-o", "split.json"], "cisl-split"),
                        (["plan", str(small), "--testbed", str(tb), "--profile", "small.json", "-o", "small.json"],
                         "cisl-profile")):
        before = (tmp_path / args[-1]).read_text()
        p = cisl(*args, "-q", cwd=tmp_path, timeout=300)
        assert p.returncode == 2 and f"holds a {other} file" in p.stderr, (args, p.stderr)
        assert (tmp_path / args[-1]).read_text() == before


@pytest.mark.faults
def test_the_plan_places_the_nodes_where_the_testbed_file_says_not_the_profile(tmp_path):
    """A node moved 150 m away after profiling: `cisl plan` used the profile's old position, said "no
    constraint broken" and wrote a split whose rounds then took 3.9x as long (`cisl sim --testbed`:
    the far node declared dead). The testbed file's layout counts, as its energy budgets do."""
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "3", "-o", str(tb), cwd=tmp_path))
    small = _toml(tmp_path / "small.toml", SMALL)
    _nominal_profile(tmp_path / "profile.json", SMALL, ["nrf52840dk"] * 3)  # nodes 3 m apart
    # the range check is the exact evaluation's, before the search (polished elsewhere): without it
    args = ["plan", str(small), "--testbed", str(tb), "--all-nodes", "--search-seconds", "0", "-o", "split.json", "-q"]
    ok(cisl(*args, cwd=tmp_path, timeout=300))
    text = tb.read_text()
    at = text.index("id = 2\n")
    tb.write_text(text[:at] + re.sub(r"position = \[[^]]*\]", "position = [150.0, 0.0]", text[at:], count=1))
    (tmp_path / "split.json").unlink()
    p = cisl(*args, cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (p.stdout, p.stderr)
    assert "out of each other's radio range" in p.stderr and "node 2" in p.stderr, p.stderr
    assert not (tmp_path / "split.json").exists()


@pytest.mark.faults
def test_the_written_plan_is_the_best_candidate_evaluated_exactly(tmp_path, all3):
    """The MILP optimises a linear model of the radio: on 3 nodes `--all-nodes --compare` printed the even
    split faster than the written MILP plan (71.75 against 72.01 ms), both meeting every constraint, and a
    deadline between the model's fastest (9.57 ms) and the exact one (9.22) was refused with advice ("at
    least 9.2") that was refused too. The best exactly evaluated candidate is written, and the note says which."""
    shutil.copytree(all3[0], tmp_path, dirs_exist_ok=True)  # `cisl plan --all-nodes --compare` of 3 nodes
    tb, small, p = tmp_path / "tb.toml", tmp_path / "small.toml", all3[1]
    doc = json.loads((tmp_path / "plan.json").read_text())
    written = doc["plan"]["planner"]["predicted"]
    rivals = [b for b in doc["baselines"].values() if b and not b["violations"] and len(b["nodes"]) == 3]
    assert rivals and all(written["latency_ms"] <= b["latency_ms"] for b in rivals), (written, rivals)
    solver, *swaps = doc["plan"]["planner"]["solver"].split(" + ")  # "even + 1 swap": polished (test_planner.py)
    assert solver == "milp" or f"the {solver} split beats the MILP's plan on latency" in p.stderr, p.stderr
    assert not swaps or "the shares swapped or moved between nodes are better on latency" in p.stderr, p.stderr
    assert "(written)" in p.stdout
    # a baseline on fewer nodes cannot be the --all-nodes plan: its row said "yes"
    header = next(ln for ln in p.stdout.splitlines() if ln.startswith("split "))
    col = slice(header.index(" nodes"), header.index(" nodes") + 6)  # the names are as wide as the longest
    rows = [ln for ln in p.stdout.splitlines() if re.match(r"^(milp|even|proportional|coedge)\b", ln)
            and ln[col].strip() != "-"]
    assert rows and all("  no: " in ln for ln in rows if int(ln[col]) < 3), rows
    assert all(int(ln[col]) < 3 for ln in rows if "no: uses" in ln), rows
    # budgets the MILP's model refuses (it puts the one-node plan at ~179 uJ) but a plan meets exactly (~174)
    tbe = tmp_path / "tbe.toml"
    tbe.write_text(tb.read_text().replace("[sim]\n", '[defaults]\nenergy_source = "harvest"\nenergy_uj = 175.5\n\n[sim]\n'))
    ok(cisl("plan", str(small), "--testbed", str(tbe), "--deadline", "30", "-o", "split.json", "-q", cwd=tmp_path))
    got = json.loads((tmp_path / "split.json").read_text())["planner"]["predicted"]
    assert max(got["node_energy_uj"]) <= 175.5 and got["latency_ms"] <= 30 and not got["violations"], got
    p = cisl("plan", str(small), "--testbed", str(tb), "--deadline", "5", "-o", "split.json", "-q", cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    advice = re.search(r"relax --deadline to at least ([0-9.]+)", p.stderr).group(1)
    p = ok(cisl("plan", str(small), "--testbed", str(tb), "--deadline", advice, "-o", "split.json", "-q", cwd=tmp_path))
    assert json.loads((tmp_path / "split.json").read_text())["planner"]["predicted"]["latency_ms"] <= float(advice)


@pytest.mark.faults
def test_the_written_plan_is_the_best_of_the_compared_rows_over_the_same_inferences(tmp_path):
    """The search picks among hundreds of candidates on 3 simulated inferences each, so its pick can be a
    lucky one: on 8 mixed nodes the polish kept 2 moves (75.56 ms over 3 inferences) that took 77.77 ms
    over 16, while `--compare` showed the MILP's plan at 76.19 ms (over 3). The finalists are now weighed
    over 16 inferences each, and every row of `--compare` is over 16."""
    n = 8
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", str(n), "--models", f"nrf52840dk*{n // 2},nrf52833dk*{n // 2}", "-o",
            str(tb), cwd=tmp_path))
    _nominal_profile(tmp_path / "profile.json", WIDE16, ["nrf52840dk"] * (n // 2) + ["nrf52833dk"] * (n // 2))
    wide = _toml(tmp_path / "wide.toml", WIDE16)
    # 10 s of search find the lucky pair of moves too (checked on the code before the fix): the test is that
    # the finalists are weighed over 16
    p = ok(cisl("plan", str(wide), "--testbed", str(tb), "--all-nodes", "--compare", "--json", "plan.json", "-o",
                "split.json", "--search-seconds", "10", "-q", cwd=tmp_path, timeout=300))
    doc = json.loads((tmp_path / "plan.json").read_text())
    written = doc["plan"]["planner"]["predicted"]
    rows = [b for b in doc["baselines"].values() if b and not b["violations"]]
    assert rows and all(written["latency_ms"] <= b["latency_ms"] + 1e-9 for b in rows), (written, rows)
    shown = [float(m.group(1)) for m in re.finditer(r" \d+ +([0-9.]+) +[0-9.]+  yes", p.stdout)]
    assert shown and min(shown) == pytest.approx(written["latency_ms"], abs=0.006), (p.stdout, written)
    # the search after the MILP takes the time it is given: none
    p = ok(cisl("plan", str(wide), "--testbed", str(tb), "--all-nodes", "--search-seconds", "0", "-o", "quick.json",
                cwd=tmp_path, timeout=300))
    assert "trying the shares" not in p.stderr and "steps evaluated exactly" not in p.stderr, p.stderr
    assert " + " not in json.loads((tmp_path / "quick.json").read_text())["planner"]["solver"]


@pytest.mark.faults
def test_a_pruned_model_replanned_says_it_needs_retraining(tmp_path):
    model = make_model_dir(tmp_path / "model", SMALL, 4, 0.5, seed=2, rescale=True)
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "4", "-o", str(tb), cwd=tmp_path))
    _nominal_profile(tmp_path / "profile.json", SMALL, ["nrf52840dk"] * 4)
    p = ok(cisl("plan", str(model), "--testbed", str(tb), "--objective", "latency", "--without", "1", "--all-nodes",
                "--search-seconds", "0", "-o", "split.json", "-q", cwd=tmp_path, timeout=300))  # (the polish: elsewhere)
    assert "needs retraining" in p.stderr
    sf = json.loads((tmp_path / "split.json").read_text())
    assert sf["planner"]["needs_retraining"] and sf["nodes"] == [0, 2, 3]
    p = cisl("compile", str(model), "--split", "split.json", "-o", "b", "-q", cwd=tmp_path)
    assert p.returncode == 2 and "needs retraining" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


def _train_toml(path: Path, cfg: ModelConfig, extra: str) -> Path:
    _toml(path, cfg)
    path.write_text(path.read_text() + "\n[data]\nsynthetic_length = 1200\nsynthetic_channels = 2\n\n[train]\n"
                    "epochs = 1\nbatch_size = 32\nmax_train_windows = 64\ncalibration_samples = 8\n"
                    "test_samples = 4\nthreads = 1\n" + extra)
    return path


@pytest.mark.sim
@pytest.mark.faults
def test_a_pruned_model_trained_for_its_planned_split_runs_bit_exact(tmp_path):
    """The order a pruned model needs: plan its split from the config, train for that split
    (`cisl train --split`), compile the split: the masks hold there, and the nodes run bit-exact."""
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "3", "-o", str(tb), cwd=tmp_path))
    cfg = _train_toml(tmp_path / "train.toml", SMALL, '\n[prune]\nmethod = "somegather"\nkeep = 0.5\nstep = 0.25\n'
                      "epochs_per_step = 0\n")
    _nominal_profile(tmp_path / "profile.json", SMALL, ["nrf52840dk"] * 3)
    ok(cisl("plan", str(cfg), "--testbed", str(tb), "--profile", "profile.json", "--objective", "latency",
            "--all-nodes", "--search-seconds", "0", "-o", "split.json", "-q",
            cwd=tmp_path, timeout=300))  # (the polish: elsewhere)
    sf = json.loads((tmp_path / "split.json").read_text())
    assert sf["keep_ratio"] == 0.5 and len(sf["nodes"]) == 3
    # a split for another keep ratio, and --devices against the file: one line each, nothing written
    for args, msg in ((["--keep", "0.25"], "planned for keep 0.5"), (["--devices", "2"], "disagree")):
        p = cisl("train", str(cfg), "--split", "split.json", *args, "-o", "bad", "-q", cwd=tmp_path, timeout=300)
        assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not (tmp_path / "bad").exists()
    p = ok(cisl("train", str(cfg), "--split", "split.json", "-o", "model", "-q", cwd=tmp_path, timeout=600))
    assert "train: epoch" not in p.stderr  # -q: no line per epoch either (test_run_train checks the lines)
    train = json.loads((tmp_path / "model" / "train.json").read_text())
    assert train["config"]["split"]["devices"] == 3 and train["config"]["split"]["file"] == "split.json"
    from codegen.onnx_model import load_model

    m = load_model(tmp_path / "model" / "model.onnx")
    assert (m.heads_per_device, m.hidden_per_device) == (sf["heads_per_device"], sf["hidden_per_device"])
    assert m.training["split"]["nodes"] == sf["nodes"] and m.keep_ratio == 0.5
    ok(cisl("compile", "model/model.onnx", "--split", "split.json", "-o", "b", "-q", cwd=tmp_path))
    plan = json.loads((tmp_path / "b" / "plan.json").read_text())
    assert plan["partition"]["heads_per_device"] == sf["heads_per_device"]
    ok(cisl("build", "b", "-q", "--no-board-time", cwd=tmp_path, timeout=600))
    p = ok(cisl("sim", "b", cwd=tmp_path, timeout=600))
    assert "bit-exact with the int8 reference: yes" in p.stdout


@pytest.mark.sim
@pytest.mark.arm
@arm
def test_profile_of_a_model_too_large_for_the_board_at_the_reference_node_count(tmp_path):
    """The profile's reference build only measures cycles: its nodes need not fit the part (the
    heterogeneous benchmark's 7.9 M-parameter model on nRF52833s stopped with "node 0 does not fit
    nrf52833dk, the board it stands in for" once virtual nodes were size-checked against their boards)."""
    big = ModelConfig(lookback=64, patch_len=8, stride=8, padding="none", d_model=448, heads=4, layers=2,
                      mlp_hidden=448, horizon=8)  # 2.5 M parameters: 4 reference nodes of ~660 KB each
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "4", "--models", "nrf52833dk*4", "-o", str(tb), cwd=tmp_path))
    ok(cisl("profile", str(_toml(tmp_path / "big.toml", big)), "--testbed", str(tb), "-o", "p.json", "-q",
            cwd=tmp_path, timeout=300))
    doc = json.loads((tmp_path / "p.json").read_text())
    assert "nrf52833dk" in doc["boards"] and doc["boards"]["nrf52833dk"]["rates"], doc.keys()


@pytest.mark.sim
@pytest.mark.arm
@arm
def test_profile_from_the_op_lines_of_real_boards(tmp_path):
    """`cisl profile --logs L --build B`: rates fitted to the DWT cycles the boards printed (`op` lines of
    a `--profile-ops` build), one board profile per board of the build; logs of another build refused."""
    from codegen.ops import kind_of
    from codegen.plan.io import load_plan
    from codegen.planner.profile import op_units

    model = make_model_dir(tmp_path / "model", SMALL, 2, 1.0, seed=3, rescale=True)
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "2", "--models", "nrf52840dk,nrf52833dk", "-o", str(tb), cwd=tmp_path))
    ok(cisl("compile", str(model), "--testbed", str(tb), "-o", "b", "-q", cwd=tmp_path))
    plan = load_plan(tmp_path / "b")
    logs = tmp_path / "logs"
    logs.mkdir()
    rec = []
    for k, node in enumerate(plan.nodes):
        rec.append({"event": "boot", "node": k, "fw": "0.1.0", "plan": plan.sha256[:16], "board": "nrf52840dk",
                    "nodes": len(plan.nodes), "clock": "dwt"})
        shapes = {t: node.tensors[t].shape for t in node.tensors}
        per = 3.0 if k == 0 else 5.0  # the nRF52833 node is made slower, to see each board's own fit
        for i, op in enumerate(node.ops):
            if not kind_of(op).block_marker:
                rec.append({"event": "op", "node": k, "inf": 0, "i": i,
                            "cycles": int(per * op_units(op, shapes) + 50)})
        # each inference's blocks and rounds, and 200 / 300 µs outside them (what plans add as outside_blocks_ms)
        rec.append({"event": "block", "node": k, "inf": 0, "layer": -1, "block": "embed", "us": 1000, "comm_us": 0})
        rec.append({"event": "block", "node": k, "inf": 0, "layer": 0, "block": "attn", "us": 2000, "comm_us": 700})
        rec.append({"event": "infer", "node": k, "inf": 0, "us": 3700 + (200 if k == 0 else 300), "crc": "00"})
    (logs / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rec))
    p = ok(cisl("profile", str(model), "--testbed", str(tb), "--logs", "logs", "--build", "b", "-o", "p.json", "-q",
                cwd=tmp_path))
    assert "from the logs" in p.stdout
    prof = json.loads((tmp_path / "p.json").read_text())
    assert prof["boards"]["nrf52840dk"]["rates"]["fc"]["per_unit"] == pytest.approx(3.0, rel=0.01)
    assert prof["boards"]["nrf52833dk"]["rates"]["fc"]["per_unit"] == pytest.approx(5.0, rel=0.01)
    assert prof["boards"]["nrf52840dk"]["rates"]["fc"]["per_op"] == pytest.approx(50.0, abs=2.0)
    assert prof["boards"]["nrf52840dk"]["runtime_cycles"] == pytest.approx(200 * 64)  # 64 MHz: µs × 64
    assert prof["boards"]["nrf52833dk"]["runtime_cycles"] == pytest.approx(300 * 64)
    # communication ops are the cycle model's (a board's line for them includes the wait for the radio,
    # which plans count as the rounds), and so are kinds a board's nodes did not run (node 1 has no output
    # op): every kind the model has is priced for both boards
    for board, per in (("nrf52840dk", 3.0), ("nrf52833dk", 5.0)):
        rates = prof["boards"][board]["rates"]
        assert {"somegather", "send", "output", "fc"} <= set(rates), (board, sorted(rates))
        sg = rates["somegather"]  # not the logged `per` cycles per unit + 50
        assert abs(sg["per_unit"] - per) > 0.5 or abs(sg["per_op"] - 50) > 5, (board, sg)
    # a run `cisl logs` failed: its summary.json says so, and its rates are not a good run's
    (logs / "summary.json").write_text(json.dumps({"ok": False, "nodes": {"1": {"failed": "it ended early"}}}))
    p = cisl("profile", str(model), "--testbed", str(tb), "--logs", "logs", "--build", "b", "-o", "p1.json", "-q",
             cwd=tmp_path)
    assert p.returncode == 2 and "`cisl logs` failed this run (node 1: it ended early)" in p.stderr, p.stderr
    (logs / "summary.json").unlink()
    (logs / "records.jsonl").write_text((logs / "records.jsonl").read_text().replace(plan.sha256[:16], "0" * 16))
    p = cisl("profile", str(model), "--testbed", str(tb), "--logs", "logs", "--build", "b", "-o", "p2.json", "-q",
             cwd=tmp_path)
    assert p.returncode == 2 and "logs of another build" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    # op lines that do not fit the build (an edited file): one line, not an IndexError
    timed = next(i for i, op in enumerate(plan.nodes[0].ops) if not kind_of(op).block_marker)
    for bad, says in [({"i": len(plan.nodes[0].ops) + 3}, "has no op"), ({"node": 7}, "nodes 0..1"),
                      ({"cycles": -5}, "negative")]:
        line = {"event": "op", "node": 0, "inf": 0, "i": timed, "cycles": 10, **bad}
        (logs / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rec + [line]))
        p = cisl("profile", str(model), "--testbed", str(tb), "--logs", "logs", "--build", "b", "-o", "p3.json",
                 "-q", cwd=tmp_path)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, (bad, p.stderr)
        assert not (tmp_path / "p3.json").exists()


@pytest.mark.sim
@pytest.mark.arm
@arm
def test_profile_from_the_op_lines_of_a_virtual_testbed_with_board_time(tmp_path):
    """`cisl build --profile-ops` on a sim build keeps its board time: every compute op's `op` line
    prints the cycle model's cycles of that op (communication ops add the wait for the radio, as a
    board's DWT does), and `cisl profile --logs` fits rates to them. The ops printed 0 cycles before."""
    from codegen.ops import kind_of
    from codegen.plan.io import load_plan
    from codegen.serial_contract import parse_text
    from codegen.timing.compute import compute_build

    model = make_model_dir(tmp_path / "model", SMALL, 2, 1.0, seed=3, rescale=True)
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "2", "-o", str(tb), cwd=tmp_path))
    ok(cisl("compile", str(model), "--devices", "2", "-o", "b", "-q", cwd=tmp_path))
    p = ok(cisl("build", "b", "--profile-ops", cwd=tmp_path, timeout=600))
    assert "board time: 2 nodes" in p.stdout + p.stderr, p.stdout + p.stderr
    ok(cisl("sim", "b", "-n", "1", "--logs", "logs", cwd=tmp_path, timeout=300))
    plan = load_plan(tmp_path / "b")
    model_cycles = {nc.device: nc for nc in compute_build(tmp_path / "b")}
    checked = 0
    for k, node in enumerate(plan.nodes):
        nc = model_cycles[k]
        for r in parse_text((tmp_path / "logs" / f"node_{k:02d}.log").read_text()):
            if r.event != "op":
                continue
            i = int(r.fields["i"])
            kind = kind_of(node.ops[i])
            if kind.block_marker or kind.sync or node.ops[i].kind == "reduce_recv":
                continue
            want = nc.op_cycles.get(i, (0, 0, 0))[1] + nc.rx_op_cycles.get(i, (0, 0, 0))[1]
            assert abs(int(r.fields["cycles"]) - want) <= 1, (k, i, node.ops[i].kind, r.fields, want)
            checked += 1
    assert checked > 40
    p = ok(cisl("profile", str(model), "--testbed", str(tb), "--logs", "logs", "--build", "b", "-o", "p.json", "-q",
                cwd=tmp_path))
    assert "from the logs" in p.stdout
    prof = json.loads((tmp_path / "p.json").read_text())["boards"]["nrf52840dk"]
    assert prof["rates"]["fc"]["per_unit"] > 1.0
    # the work outside the blocks, as the nodes measured it (an inference beyond its blocks and rounds): the
    # cycle model's, less the printing of the log lines, which the nodes take out of every time they print
    model = max(nc.runtime_cycles[1] for nc in model_cycles.values())
    assert 0.6 * model < prof["runtime_cycles"] < model, (prof["runtime_cycles"], model)


def _set(*path_and_value):
    *path, key, value = path_and_value

    def edit(doc):
        for k in path:
            doc = doc[k]
        doc[key] = value
    return edit


@pytest.mark.faults
@pytest.mark.parametrize("edit,words", [
    (_set("model", "stride", "8"), "model stride must be int, got '8'"),
    (_set("boards", "nrf52833dk", "rates", "fc", "per_unit", float("inf")), "rate fc needs per_unit and per_op"),
    (_set("boards", "nrf52833dk", "rates", "fc", "per_op", 1e308), "rate fc needs per_unit and per_op"),
    (_set("nodes", 0, "flash_bytes", 1), "do not match board nrf52833dk"),
    (_set("nodes", 1, "ram_bytes", float("inf")), "ram_bytes must be a whole number"),
    (_set("nodes", 1, "position", [1.0]), "position must be [x, y]"),
    (_set("seed", -1), "seed must be a whole number"),
])
def test_a_hand_edited_profile_is_one_line(tmp_path, edit, words):
    # values of the right JSON shape but unusable used to end in a traceback (the MILP's "`c` must be
    # finite", the re-check's AssertionError, numpy's "inhomogeneous shape", OverflowError)
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "2", "--models", "nrf52833dk*2", "-o", str(tb), cwd=tmp_path))
    small = _toml(tmp_path / "small.toml", SMALL)
    _nominal_profile(tmp_path / "p.json", SMALL, ["nrf52833dk"] * 2)
    doc = json.loads((tmp_path / "p.json").read_text())
    edit(doc)
    (tmp_path / "p.json").write_text(json.dumps(doc))
    p = cisl("plan", str(small), "--testbed", str(tb), "--profile", "p.json", "--objective", "latency", "-o",
             "out.json", "-q", cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "p.json" in p.stderr and words in p.stderr, p.stderr
    assert not (tmp_path / "out.json").exists()


@pytest.mark.faults
@pytest.mark.parametrize("edit,words", [
    (_set("model", "lookback", "64"), "model lookback must be int, got '64'"),
    (_set("heads_per_device", [4.0, float("inf")]), "heads_per_device must be a list of whole numbers"),
    (_set("nodes", [0, 1.5]), "nodes must be a list of whole numbers"),
    (_set("keep_ratio", float("nan")), "keep_ratio must be a number in (0, 1]"),
])
def test_a_hand_edited_split_file_is_one_line(tmp_path, edit, words):
    # int() of Infinity (OverflowError) and a model value of the wrong type (TypeError deep in the
    # patching arithmetic) used to be tracebacks; 1.5 was read as node 1
    model = make_model_dir(tmp_path / "model", SMALL, 2, 1.0, seed=1)
    doc = {"format": "cisl-split", "version": 1, "model": SMALL.to_json(), "keep_ratio": 1.0, "nodes": [0, 1],
           "boards": ["nrf52840dk", "nrf52840dk"], "heads_per_device": [4, 4], "hidden_per_device": [16, 16],
           "planner": {}}
    (tmp_path / "split.json").write_text(json.dumps(doc))
    ok(cisl("compile", str(model), "--split", "split.json", "-o", "good", "-q", cwd=tmp_path))
    edit(doc)
    (tmp_path / "split.json").write_text(json.dumps(doc))
    p = cisl("compile", str(model), "--split", "split.json", "-o", "b", "-q", cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "split.json" in p.stderr and words in p.stderr, p.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.faults
def test_a_deadline_the_written_fastest_plan_meets_is_not_refused(tmp_path, all3):
    """The MILP's linear model can put the fastest plan above one the exact evaluation finds: `cisl plan`
    without a deadline wrote 707.77 ms, and `--deadline 710` was refused as below "the fastest achievable,
    719.1 ms" (audit O). When no candidate meets the constraints, shares are moved from the nearest one,
    each step evaluated exactly, until one does."""
    for nodes, flags in ((3, ["--all-nodes"]), (3, [])):
        tb = tmp_path / f"tb{nodes}{len(flags)}.toml"
        ok(cisl("testbed", "sim", "--nodes", str(nodes), "-o", str(tb), cwd=tmp_path))
        small = _toml(tmp_path / "small.toml", SMALL)
        _nominal_profile(tmp_path / "profile.json", SMALL, ["nrf52840dk"] * nodes)
        if flags:  # the same testbed, model and profile, planned with --all-nodes by the fixture
            assert [f.read_text() for f in (tb, small, tmp_path / "profile.json")] == \
                [(all3[0] / f).read_text() for f in ("tb.toml", "small.toml", "profile.json")]
            shutil.copyfile(all3[0] / "split.json", tmp_path / "fast.json")
        else:
            ok(cisl("plan", str(small), "--testbed", str(tb), *flags, "-o", "fast.json", "-q", cwd=tmp_path,
                    timeout=300))
        fastest = json.loads((tmp_path / "fast.json").read_text())["planner"]["predicted"]["latency_ms"]
        for objective in ("latency", "energy"):
            deadline = round(fastest + 0.05, 2)
            p = cisl("plan", str(small), "--testbed", str(tb), *flags, "--deadline", str(deadline), "--objective",
                     objective, "-o", "d.json", "-q", cwd=tmp_path, timeout=300)
            assert p.returncode == 0, (flags, objective, deadline, p.stderr)
            got = json.loads((tmp_path / "d.json").read_text())["planner"]["predicted"]["latency_ms"]
            assert got <= deadline, (flags, objective, got, deadline)
