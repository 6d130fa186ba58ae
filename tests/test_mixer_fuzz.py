"""The Mixer fuzz harnesses (firmware/mixer/fuzz/): fuzz_mixer.c (one node, crafted packets, a
reference decoder) and fuzz_mixer_net.c (whole rounds of up to 16 nodes at the full G and P); and
firmware/somegather/fuzz/fuzz_transport.c (the somegather transport over Mixer: messages split over
rounds, dead peers, initiator handover, with the other nodes played in-process).

Every file of each corpus (fuzz/corpus/, fuzz/corpus_net/) is replayed under gcc with
AddressSanitizer and UBSan and under clang's libFuzzer build; then libFuzzer fuzzes each harness
for a short bounded run. Any crash, sanitizer report or failed invariant fails the test. The long
run is bench/mixer_fuzz.py (docs/results/mixer_fuzz.md). dev.sh installs clang; without it the
clang tier skips."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from clib import run_cc
from mixer_lib import MIXER_DIR

pytestmark = [pytest.mark.hostc]

FUZZ = MIXER_DIR / "fuzz"
FIRMWARE = MIXER_DIR.parent
TRANSPORT_FUZZ = FIRMWARE / "somegather" / "fuzz"
# harness -> (source, corpus, libFuzzer -max_len, runs of the short fuzz run, extra clang flags)
HARNESSES = {
    "single": (FUZZ / "fuzz_mixer.c", FUZZ / "corpus", 1024, 10000, []),
    # whole rounds are slower; trace-cmp instrumentation would slow the GF(2) loops fivefold
    "net": (FUZZ / "fuzz_mixer_net.c", FUZZ / "corpus_net", 512, 1500, ["-fno-sanitize-coverage=trace-cmp"]),
    # the somegather transport over Mixer (pieces of split messages, dead peers) with n nodes played
    "transport": (TRANSPORT_FUZZ / "fuzz_transport.c", TRANSPORT_FUZZ / "corpus_transport", 1024, 1500,
                  ["-fno-sanitize-coverage=trace-cmp"]),
}
# include folders a harness needs besides firmware/mixer
INCLUDES = {"transport": [FIRMWARE / "runtime"]}
STRICT = ["-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
FUZZER = ["-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all"]


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


def corpus_files(name: str) -> list[Path]:
    files = sorted(p for p in HARNESSES[name][1].iterdir() if p.is_file())
    assert len(files) >= 20
    return files


def gcc_replay(tmp: Path, name: str, defines: tuple[str, ...] = ()) -> Path:
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    if not compiles("gcc", SANITIZE, tmp):
        pytest.skip("gcc cannot link AddressSanitizer/UBSan here")
    exe = tmp / f"replay_{name}"
    run_cc(["gcc", *STRICT, "-pedantic", *SANITIZE, *defines, f"-I{MIXER_DIR}",
            *(f"-I{d}" for d in INCLUDES.get(name, [])), HARNESSES[name][0],
            MIXER_DIR / "mixer.c", "-o", exe])
    return exe


def libfuzzer(tmp: Path, name: str) -> Path:
    cc = find_clang()
    if cc is None:
        pytest.skip("clang not installed (./dev.sh setup installs it)")
    if not compiles(cc, FUZZER, tmp):
        pytest.skip(f"{cc} has no libFuzzer runtime (Debian/Ubuntu: libclang-rt-dev)")
    exe = tmp / f"fuzz_{name}"
    run_cc([cc, *STRICT, "-DMX_FUZZ_LIBFUZZER", *FUZZER, *HARNESSES[name][4], f"-I{MIXER_DIR}",
            *(f"-I{d}" for d in INCLUDES.get(name, [])),
            HARNESSES[name][0], MIXER_DIR / "mixer.c", "-o", exe])
    return exe


def assert_clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "ERROR" not in proc.stderr and "runtime error" not in proc.stderr
    assert "check failed" not in proc.stderr


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_corpus_replays_clean_under_gcc_sanitizers(tmp_path: Path, name: str) -> None:
    exe = gcc_replay(tmp_path, name)
    files = corpus_files(name)
    proc = subprocess.run([exe, *files], capture_output=True, text=True, timeout=600)
    assert_clean(proc)
    assert f"replayed {len(files)} inputs" in proc.stdout


@pytest.mark.parametrize("name", ["net", "transport"])
def test_harness_notices_a_wrong_message(tmp_path: Path, name: str) -> None:
    """The invariants bite: with its own copy of a message altered, the network harness (at a decoded
    row) and the transport harness (at a delivery) abort."""
    exe = gcc_replay(tmp_path, name, ("-DFZ_SELFTEST_WRONG_MESSAGE",))
    proc = subprocess.run([exe, *corpus_files(name)], capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert f"{HARNESSES[name][0].name}:" in proc.stderr and "check failed" in proc.stderr


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_libfuzzer_replays_the_corpus_then_fuzzes_clean(tmp_path: Path, name: str) -> None:
    exe = libfuzzer(tmp_path, name)  # one build for both (each takes seconds under the sanitizers)
    files = corpus_files(name)
    proc = subprocess.run([exe, *files], capture_output=True, text=True, timeout=600)
    assert_clean(proc)
    assert proc.stderr.count("Executed ") == len(files)
    # then a short bounded run from the committed corpus
    _, corpus, max_len, runs, _ = HARNESSES[name]
    work = tmp_path / "corpus"
    shutil.copytree(corpus, work)  # the fuzzer adds to its corpus; keep the committed one as it is
    proc = subprocess.run(
        [exe, f"-runs={runs}", f"-max_len={max_len}", "-seed=1", f"-artifact_prefix={tmp_path}/", str(work)],
        capture_output=True, text=True, timeout=600,
    )
    assert_clean(proc)
    assert f"Done {runs} runs" in proc.stderr
