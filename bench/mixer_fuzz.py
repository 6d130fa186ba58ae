"""Long fuzzing run of the Mixer harnesses under AddressSanitizer and UBSan (issue 15, item 8).

Builds firmware/mixer/fuzz/fuzz_mixer.c (one node, crafted packets, reference decoder),
fuzz_mixer_net.c (whole rounds of up to 16 nodes at the full G and P) and
firmware/somegather/fuzz/fuzz_transport.c (the somegather transport: split messages, dead peers) with
``clang -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all``, runs libFuzzer workers on
copies of the committed corpora, and writes docs/results/mixer_fuzz.md: executions, time, coverage
(libFuzzer's cov/ft of each worker's last status line) and crashes (artifacts left by libFuzzer).

    python bench/mixer_fuzz.py --runs 10000000 --jobs 2            # until 10 M executions in all
    python bench/mixer_fuzz.py --seconds 1200 --jobs 2             # or for 20 minutes
    python bench/mixer_fuzz.py --harness net --seconds 60 --no-write

The time is split between the harnesses in proportion to --share (default: 2 parts net, 1 part
transport, 1 part single node). --runs and --seconds both bound the run; whichever ends first. Crashing inputs are
copied to --artifacts (default /tmp/cisl-mixer-fuzz/artifacts); minimise one with
``./fuzz_X -minimize_crash=1 -runs=100000 crash-...``, fix the bug, and add it to the corpus.

Trace-cmp instrumentation is off by default (--trace-cmp turns it on): with it the GF(2)
elimination loops run about 5 times slower and the harness has no magic constants to find.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIXER = ROOT / "firmware" / "mixer"
TRANSPORT = ROOT / "firmware" / "somegather" / "fuzz"
HARNESSES = {  # name -> (source, corpus, -max_len, extra include folders)
    "single": (MIXER / "fuzz" / "fuzz_mixer.c", MIXER / "fuzz" / "corpus", 1024, []),
    "net": (MIXER / "fuzz" / "fuzz_mixer_net.c", MIXER / "fuzz" / "corpus_net", 512, []),
    "transport": (TRANSPORT / "fuzz_transport.c", TRANSPORT / "corpus_transport", 1024, [ROOT / "firmware" / "runtime"]),
}
RESULT = ROOT / "docs" / "results" / "mixer_fuzz.md"
FLAGS = ["-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-DMX_FUZZ_LIBFUZZER",
         "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all"]
STATUS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/")


def find_clang() -> str:
    for cc in ("clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14"):
        if shutil.which(cc):
            return cc
    sys.exit("clang not found (./dev.sh setup installs it)")


def build(cc: str, name: str, out: Path, trace_cmp: bool) -> Path:
    src = HARNESSES[name][0]
    exe = out / f"fuzz_{name}"
    extra = [] if trace_cmp else ["-fno-sanitize-coverage=trace-cmp"]
    incs = [f"-I{d}" for d in HARNESSES[name][3]]
    subprocess.run([cc, *FLAGS, *extra, f"-I{MIXER}", *incs, str(src), str(MIXER / "mixer.c"), "-o", str(exe)],
                   check=True)
    return exe


def run_workers(exe: Path, corpus: Path, max_len: int, jobs: int, runs: int, seconds: int,
                artifacts: Path, logs: Path, seed0: int) -> dict:
    procs = []
    for j in range(jobs):
        log = logs / f"{exe.name}.{j}.log"
        cmd = [str(exe), f"-runs={max(1, runs // jobs)}", f"-max_total_time={seconds}", f"-max_len={max_len}",
               f"-seed={seed0 + j}", "-print_final_stats=1", "-reload=30",
               f"-artifact_prefix={artifacts}/", str(corpus)]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w")), log))
    execs, cov, ft, rc = 0, 0, 0, 0
    for p, log in procs:
        rc = p.wait() or rc
        text = log.read_text(errors="replace")
        m = re.search(r"stat::number_of_executed_units: (\d+)", text)
        execs += int(m.group(1)) if m else 0
        for line in text.splitlines():
            s = STATUS.match(line)
            if s:
                cov, ft = max(cov, int(s.group(2))), max(ft, int(s.group(3)))
    return {"execs": execs, "cov": cov, "ft": ft, "rc": rc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10_000_000, help="executions in all (default 10 M)")
    ap.add_argument("--seconds", type=int, default=3600, help="wall-clock bound in all")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--harness", choices=["all", "net", "transport", "single"], default="all")
    ap.add_argument("--share", default="2:1:1", help="net:transport:single split of runs and time")
    ap.add_argument("--trace-cmp", action="store_true")
    ap.add_argument("--work", type=Path, default=Path("/tmp/cisl-mixer-fuzz"))
    ap.add_argument("--artifacts", type=Path, default=None)
    ap.add_argument("--no-write", action="store_true", help="do not write docs/results/mixer_fuzz.md")
    a = ap.parse_args()
    cc = find_clang()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    a.work.mkdir(parents=True, exist_ok=True)
    artifacts = a.artifacts or a.work / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    before = set(artifacts.iterdir())
    names = ["net", "transport", "single"] if a.harness == "all" else [a.harness]
    try:
        sn, st, ss = (int(x) for x in a.share.split(":"))
    except ValueError:
        sys.exit(f"--share {a.share!r}: give three whole numbers net:transport:single, e.g. 2:1:1")
    share = {"net": sn, "transport": st, "single": ss} if a.harness == "all" else {a.harness: 1}
    total = sum(share[n] for n in names)
    rows = []
    for name in names:
        exe = build(cc, name, a.work, a.trace_cmp)
        corpus = a.work / f"corpus_{name}"
        if corpus.exists():
            shutil.rmtree(corpus)
        shutil.copytree(HARNESSES[name][1], corpus)
        n0 = sum(1 for _ in corpus.iterdir())
        t0 = time.time()
        r = run_workers(exe, corpus, HARNESSES[name][2], a.jobs, a.runs * share[name] // total,
                        max(1, a.seconds * share[name] // total), artifacts, a.work, 1 + 100 * len(rows))
        r.update(name=name, seconds=time.time() - t0, corpus=f"{n0} → {sum(1 for _ in corpus.iterdir())}")
        rows.append(r)
        print(f"{name}: {r['execs']:,} executions in {r['seconds']:.0f} s, cov {r['cov']} ft {r['ft']}, rc {r['rc']}")
    crashes = sorted(p.name for p in set(artifacts.iterdir()) - before)
    print(f"crashes: {len(crashes)} {crashes[:10]}")
    if a.no_write:
        return
    lines = [
        "# Mixer fuzzing (bench/mixer_fuzz.py)",
        "",
        f"`python bench/mixer_fuzz.py --runs {a.runs} --seconds {a.seconds} --jobs {a.jobs} --share {a.share}` on "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}; {version}; "
        f"`-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all`"
        f"{'' if a.trace_cmp else ', trace-cmp off'}; {a.jobs} libFuzzer workers per harness on a "
        "shared 2-core machine. Coverage: the largest cov/ft a worker reported.",
        "",
        "| harness | executions | time (s) | exec/s | cov | ft | corpus (files) | exit |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | {r['execs']:,} | {r['seconds']:.0f} | {r['execs'] / max(r['seconds'], 1):,.0f} "
                     f"| {r['cov']} | {r['ft']} | {r['corpus']} | {r['rc']} |")
    ex = sum(r["execs"] for r in rows)
    sec = sum(r["seconds"] for r in rows)
    lines += ["", f"In all {ex:,} executions in {sec:.0f} s; crashes: {len(crashes)}"
              + (" (" + ", ".join(crashes) + ")" if crashes else "") + "."]
    if ex < a.runs:
        lines.append(f"The {a.runs:,}-execution target was not reached in the time given; at this rate it "
                     f"takes about {a.runs / max(ex / max(sec, 1), 1) / 3600:.1f} h.")
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULT.relative_to(ROOT)}")


if __name__ == "__main__":
    from codegen.cli.app import one_line_errors

    one_line_errors(main)
