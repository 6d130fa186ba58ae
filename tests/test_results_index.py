"""docs/results/README.md is the index of the studies: every result file in docs/results is listed
there, and every benchmark it names to reproduce one exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
INDEX = (RESULTS / "README.md").read_text()


def test_every_result_is_in_the_index():
    listed = set(re.findall(r"\]\(([^)]+\.md)\)", INDEX))
    missing = sorted(p.name for p in RESULTS.glob("*.md") if p.name != "README.md" and p.name not in listed)
    assert missing == [], f"add a row to docs/results/README.md for {missing}"


def test_every_benchmark_the_index_names_exists():
    named = set(re.findall(r"python (bench/[\w/]+\.py)", INDEX))
    assert named
    assert sorted(b for b in named if not (ROOT / b).is_file()) == []
