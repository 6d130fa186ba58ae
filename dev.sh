#!/usr/bin/env bash
# cisl developer entry point: sets the machine up (once) and runs a job.
#
#   ./dev.sh demo [cisl demo options]   set up, then run the demo on the virtual testbed
#   ./dev.sh test [pytest options]      set up, then run the test suite (4 workers; CISL_TEST_WORKERS)
#   ./dev.sh setup                      only set up
#
# Setup installs what is missing: Debian/Ubuntu packages with --no-install-recommends (gcc,
# python3-venv; the ARM cross toolchain and QEMU for the nRF52840 and emulated Cortex-M4 builds:
# gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm, about 1 GB; if those cannot be
# installed, their tests skip; clang and libclang-rt-dev (libFuzzer, ASan, UBSan) for the Mixer fuzz tier,
# skipped without them), then a virtual environment in .venv with torch (CPU build pinned to 2.13.0) and
# cisl itself (editable). Set CISL_TORCH_INDEX to a pip index URL (e.g. the PyTorch CPU index) if
# your machine would otherwise download a CUDA build of torch.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
PY=${PYTHON:-python3}
APT_PACKAGES=(gcc libc6-dev python3-venv)

log() { printf '[dev.sh] %s\n' "$*" >&2; }

need_apt() {
  local missing=()
  command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
  "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
  printf '%s\n' "${missing[@]}"
}

# the ARM toolchain (with newlib's nano C library) and QEMU: optional, their tests skip without them
need_apt_arm() {
  local missing=()
  command -v arm-none-eabi-gcc >/dev/null 2>&1 || missing+=(gcc-arm-none-eabi)
  if ! command -v arm-none-eabi-gcc >/dev/null 2>&1 ||
     [ ! -f "$(arm-none-eabi-gcc -mthumb -mcpu=cortex-m4 -mfloat-abi=hard -mfpu=fpv4-sp-d16 \
                 -print-file-name=libc_nano.a 2>/dev/null)" ]; then
    missing+=(libnewlib-arm-none-eabi)
  fi
  command -v qemu-system-arm >/dev/null 2>&1 || missing+=(qemu-system-arm)
  printf '%s\n' "${missing[@]}"
}

# clang with libFuzzer and the sanitizer runtimes for the Mixer fuzz tier (tests/test_mixer_fuzz.py):
# optional as well. Debian 12 / Ubuntu 24.04 ship the runtimes in libclang-rt-dev; older releases
# have them in clang's own dependencies (then only clang is installed).
fuzzer_links() {
  local cc dir ok=1
  dir=$(mktemp -d)
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' > "$dir/p.c"
  for cc in clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14; do
    if command -v "$cc" >/dev/null 2>&1 &&
       "$cc" -fsanitize=fuzzer,address,undefined "$dir/p.c" -o "$dir/p" >/dev/null 2>&1; then
      ok=0; break
    fi
  done
  rm -rf "$dir"
  return $ok
}

apt_install() {  # apt_install fatal|optional PACKAGE...
  local how=$1; shift
  if ! command -v apt-get >/dev/null 2>&1; then
    log "missing $* and no apt-get here: install them with your package manager"
    [ "$how" = fatal ] && exit 2
    return 0
  fi
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  log "installing $* (apt, --no-install-recommends)"
  if ! { $sudo apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@"; }; then
    [ "$how" = fatal ] && exit 2
    log "could not install $*: the tests that need them will be skipped"
  fi
}

setup_system() {
  mapfile -t missing < <(need_apt | sed '/^$/d')
  [ "${#missing[@]}" -eq 0 ] || apt_install fatal "${missing[@]}"
  mapfile -t missing < <(need_apt_arm | sed '/^$/d')
  [ "${#missing[@]}" -eq 0 ] || apt_install optional "${missing[@]}"
  if ! fuzzer_links; then
    apt_install optional clang libclang-rt-dev
    fuzzer_links || apt_install optional clang
  fi
}

setup_python() {
  if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    log "cisl needs Python 3.11 or newer; $PY is $("$PY" --version 2>&1)"; exit 2
  fi
  local stamp="$VENV/.cisl-setup"
  local want
  want=$(cat pyproject.toml dev.sh | sha256sum | cut -c1-16)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  [ -d "$VENV" ] || { log "creating $VENV"; "$PY" -m venv "$VENV"; }
  local pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  log "installing torch 2.13.0 (CPU) and cisl into $VENV"
  if [ -n "${CISL_TORCH_INDEX:-}" ]; then
    "${pip[@]}" --index-url "$CISL_TORCH_INDEX" torch==2.13.0
  else
    "${pip[@]}" torch==2.13.0
  fi
  "${pip[@]}" -e '.[train,test,sweep]'
  echo "$want" > "$stamp"
}

setup() { setup_system; setup_python; }

cmd=${1:-demo}
shift || true
case "$cmd" in
  setup) setup ;;
  demo)  setup; exec "$VENV/bin/cisl" demo "$@" ;;
  # four workers by default on two cores: many tests wait on node processes, serial lines and timeouts,
  # so workers beyond the cores fill the idle time (same machine and code: 2026-12-06, 631 s with 3
  # against 794-914 s with 2; 2026-12-07, 755 s with 4 against 837 s with 3);
  # CISL_TEST_WORKERS=0: one process, e.g. to debug; a later -n wins.
  # worksteal: a worker that runs out of tests takes queued ones from the others, instead of idling
  # while one works through a long tail (2026-12-06, one machine: 840 s against 1013 s with `load`).
  # each training in a test at one torch thread: workers at [train] threads = 2 would oversubscribe.
  # Bytecode is cached under .venv even where PYTHONDONTWRITEBYTECODE is set (this machine sets it): the
  # suite starts hundreds of Python processes, and each compiled every module it imported from source.
  test)  setup; CISL_THREADS="${CISL_THREADS:-1}" PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX="$PWD/$VENV/pycache" \
           exec "$VENV/bin/python" -m pytest -n "${CISL_TEST_WORKERS:-4}" --dist worksteal "$@" ;;
  *) log "unknown command '$cmd'; use demo, test or setup"; exit 2 ;;
esac
