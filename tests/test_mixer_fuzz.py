"""The Mixer fuzz harness (firmware/mixer/fuzz/fuzz_mixer.c): replay the committed corpus under gcc
with AddressSanitizer and UBSan, and, where clang with libFuzzer is installed, fuzz briefly."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from clib import run_cc
from mixer_lib import MIXER_DIR

pytestmark = [pytest.mark.hostc]

HARNESS = MIXER_DIR / "fuzz" / "fuzz_mixer.c"
CORPUS = MIXER_DIR / "fuzz" / "corpus"
SOURCES = [HARNESS, MIXER_DIR / "mixer.c"]
STRICT = ["-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]


def compiles(cc: str, flags: list[str], tmp: Path) -> bool:
    src = tmp / "probe.c"
    src.write_text(
        "#include <stdint.h>\n#include <stddef.h>\n"
        "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\n"
        "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n"
        + ("" if "fuzzer" in " ".join(flags) else "int main(void) { return 0; }\n")
    )
    try:
        run_cc([cc, *flags, src, "-o", tmp / "probe"])
    except Exception:
        return False
    return True


def find_clang() -> str | None:
    for cc in ("clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14"):
        if shutil.which(cc):
            return cc
    return None


def test_corpus_replays_clean_under_gcc_sanitizers(tmp_path: Path) -> None:
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    if not compiles("gcc", SANITIZE, tmp_path):
        pytest.skip("gcc cannot link AddressSanitizer/UBSan here")
    exe = tmp_path / "fuzz_replay"
    run_cc(["gcc", *STRICT, "-pedantic", *SANITIZE, f"-I{MIXER_DIR}", *SOURCES, "-o", exe])
    files = sorted(p for p in CORPUS.iterdir() if p.is_file())
    assert len(files) >= 20
    proc = subprocess.run([exe, *files], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"replayed {len(files)} inputs" in proc.stdout
    assert "runtime error" not in proc.stderr


def test_short_libfuzzer_run(tmp_path: Path) -> None:
    cc = find_clang()
    if cc is None:
        pytest.skip("clang not installed")
    flags = ["-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all"]
    if not compiles(cc, flags, tmp_path):
        pytest.skip(f"{cc} has no libFuzzer runtime")
    exe = tmp_path / "fuzz_mixer"
    run_cc([cc, *STRICT, "-DMX_FUZZ_LIBFUZZER", *flags, f"-I{MIXER_DIR}", *SOURCES, "-o", exe])
    work = tmp_path / "corpus"
    shutil.copytree(CORPUS, work)  # the fuzzer adds to its corpus; keep the committed one as it is
    proc = subprocess.run(
        [exe, "-runs=20000", "-max_len=1024", "-seed=1", str(work)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Done 20000 runs" in proc.stderr
    assert "ERROR" not in proc.stderr and "runtime error" not in proc.stderr
