"""The node's host-command reader (firmware/runtime/cisl_host.c) on the host: every line written to
the serial line gets one `host` answer, and a line that is too long, damaged on the wire or not a
whole command is never carried out — not even in part (docs/serial-contract.md, "Host commands")."""

from __future__ import annotations

import ctypes

import pytest

from clib import FIRMWARE, RUNTIME_DIR, STRICT_FLAGS, build_shared_lib, have_compiler, load
from codegen.serial_contract import parse_text

pytestmark = [pytest.mark.hostc, pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not installed")]

# the board and the mode layer, as the test sees them: bytes in from a buffer, log lines out to one,
# and a record of what the reader asked the mode layer to do
STUBS = r"""
#include <string.h>
#include "cisl_board.h"
#include "cisl_modes.h"
#include "cisl_node_api.h"

static char in_buf[4096], out_buf[8192];
static unsigned in_len, in_pos, out_len, chunk = 7;
int requested = -1;
unsigned limits[3], limit_calls;

void test_feed(const char *bytes, unsigned n, unsigned read_chunk)
{
    memcpy(in_buf, bytes, n);
    in_len = n, in_pos = 0, out_len = 0, chunk = read_chunk, requested = -1, limit_calls = 0;
}
const char *test_output(void) { out_buf[out_len] = '\0'; return out_buf; }

uint32_t cisl_board_read(char *buf, uint32_t max)
{
    unsigned n = in_len - in_pos;
    if (n > chunk) n = chunk;
    if (n > max) n = max;
    memcpy(buf, in_buf + in_pos, n);
    in_pos += n;
    return n;
}
uint32_t cisl_board_time_us(void) { return 0u; }
uint32_t cisl_board_cycles(void) { return 0u; }
void cisl_board_write(const char *text, uint32_t n)
{
    if (out_len + n < sizeof out_buf) { memcpy(out_buf + out_len, text, n); out_len += n; }
}
uint8_t cisl_node_modes(void) { return 4u; }
uint8_t profiled = 4u;
uint8_t cisl_node_profiled_modes(void) { return profiled; }
int cisl_modes_request(uint32_t inference, uint8_t mode, uint8_t modes)
{
    (void)inference;
    if (mode >= modes) return -1;
    requested = mode;
    return 0;
}
void cisl_modes_set_limits(uint32_t deadline_us, uint32_t energy_nj, uint32_t max_mse_u)
{
    limits[0] = deadline_us, limits[1] = energy_nj, limits[2] = max_mse_u, limit_calls++;
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("host_commands")
    stubs = out / "stubs.c"
    stubs.write_text(STUBS)
    so = load(build_shared_lib([RUNTIME_DIR / "cisl_host.c", RUNTIME_DIR / "cisl_log.c", stubs], out,
                               name="libhost.so", include_dirs=[RUNTIME_DIR, FIRMWARE / "somegather"],
                               flags=(*STRICT_FLAGS, "-fPIC")))
    so.test_output.restype = ctypes.c_char_p
    return so


def poll(lib: ctypes.CDLL, data: bytes, chunk: int = 7) -> list[tuple[str, str]]:
    """Feed ``data`` to the node, poll once, return the (cmd, state) of every `host` line it printed."""
    lib.test_feed(data, len(data), chunk)
    lib.cisl_host_poll(5)
    records = parse_text(lib.test_output().decode())  # as the host reads them (the contract's checks)
    assert all(r.event == "host" and r.fields["inf"] == 5 for r in records), records
    return [(r.fields["cmd"], r.fields["state"]) for r in records]


def requested(lib: ctypes.CDLL) -> int:
    return ctypes.c_int.in_dll(lib, "requested").value


@pytest.mark.parametrize("chunk", [1, 7, 64])  # however the board hands the bytes over
def test_every_line_gets_one_answer_and_only_whole_commands_are_carried_out(lib: ctypes.CDLL, chunk: int) -> None:
    assert poll(lib, b"mode 2\r\n", chunk) == [("mode", "ok")] and requested(lib) == 2
    assert poll(lib, b"mode 9\n", chunk) == [("mode", "refused")] and requested(lib) == -1  # not in the image
    assert poll(lib, b"mode 2x\nmode\nmode 99999999999\n", chunk) == [("mode", "refused"), ("unknown", "unknown"),
                                                                    ("mode", "refused")]
    assert requested(lib) == -1
    assert poll(lib, b"limits 100 - 7\n", chunk) == [("limits", "ok")]
    assert list((ctypes.c_uint * 3).in_dll(lib, "limits")) == [100, 0xFFFFFFFF, 7]
    assert poll(lib, b"limits 100 7\n", chunk) == [("limits", "refused")]
    assert ctypes.c_uint.in_dll(lib, "limit_calls").value == 0
    assert poll(lib, b"reboot now\n\n", chunk) == [("unknown", "unknown")]  # an empty line is no command
    assert poll(lib, b"mode " + b"1" * 60 + b"\nmode 1\n", chunk) == [("unknown", "toolong"), ("mode", "ok")]


def test_limits_are_refused_by_an_image_whose_modes_are_not_profiled(lib: ctypes.CDLL) -> None:
    # flashed before `cisl modes` put the table in: "ok" would leave the limits silently unapplied
    profiled = ctypes.c_uint8.in_dll(lib, "profiled")
    profiled.value = 0
    try:
        assert poll(lib, b"limits 100 - 7\n") == [("limits", "refused")]
        assert ctypes.c_uint.in_dll(lib, "limit_calls").value == 0
    finally:
        profiled.value = 4
    assert poll(lib, b"limits 100 - 7\n") == [("limits", "ok")]


@pytest.mark.parametrize("noise", [b"\x00", b"\x80", b"\x1b", b"\xff"])
def test_a_line_with_a_byte_no_host_writes_is_dropped_whole(lib: ctypes.CDLL, noise: bytes) -> None:
    # a NUL would otherwise end the line early and "mode 1<NUL>3" would run mode 1
    line = b"mode 1" + noise + b"3\n"
    assert poll(lib, line) == [("unknown", "damaged")] and requested(lib) == -1
    assert poll(lib, noise + b"mode 3\nmode 3\n") == [("unknown", "damaged"), ("mode", "ok")]
    assert requested(lib) == 3


@pytest.mark.unit
def test_a_mode_command_that_arrived_as_another_mode_fails_the_nodes_run() -> None:
    """A lost digit can leave a valid command ("mode 12" read as "mode 1"): `cisl logs` compares the
    mode the node's request line names with the one it asked for."""
    from codegen.serial_contract import parse_text
    from codegen.testbed.capture import CaptureResult, HostCommand, NodeCapture
    from codegen.testbed.logs import _judge_commands

    def judged(took: int | None, infers: int = 3, switch: str = "CISL 0 mode inf=2 state=switch mode=12\n") -> str | None:
        cmd = HostCommand(node=0, before=1, text="mode 12", sent=1.0, answer="ok", answered_inf=1, took=took)
        node = NodeCapture(node=0, port="/dev/ttyACM0", records=parse_text(switch), infers=infers)
        r = CaptureResult({0: node}, 0.0, 1.0, "done", commands=[cmd])
        _judge_commands(r)
        return r.nodes[0].failed

    assert judged(12) is None
    assert "host command 'mode 12' reached the node as 'mode 1'" in judged(1)
    # taken, but the run ended before any inference in that mode: not the run asked for
    assert "the run ended before the nodes switched" in judged(12, infers=2, switch="")
    assert "after the node's last (0)" in judged(12, infers=1, switch="")


@pytest.mark.unit
def test_a_mode_command_taken_but_not_run_says_why_not_send_it_earlier() -> None:
    """audit R #2: a `mode` request the node took whose mode never ran was always "the run ended before the
    nodes switched ...: send it earlier", also when two requests raced and the nodes switched to the other
    mode, or when the switch never came although inferences followed: sending it earlier changes nothing."""
    from codegen.serial_contract import parse_text
    from codegen.testbed.capture import CaptureResult, HostCommand, NodeCapture
    from codegen.testbed.logs import _judge_commands

    def judged(lines: str, infers: int = 4) -> str | None:
        cmd = HostCommand(node=0, before=1, text="mode 1", sent=1.0, answer="ok", answered_inf=1, took=1)
        node = NodeCapture(node=0, port="/dev/ttyACM0", records=parse_text(lines), infers=infers)
        r = CaptureResult({0: node}, 0.0, 1.0, "done", commands=[cmd])
        _judge_commands(r)
        return r.nodes[0].failed

    other = judged("CISL 0 mode inf=2 state=switch mode=2\n")
    assert "the nodes switched to mode 2 at inference 2 instead (another request or the node's mode selector" in other
    assert "send it earlier" not in other and "run ended" not in other, other
    lost = judged("")
    assert "no switch followed although 2 more inferences ran" in lost and "control round" in lost, lost
    assert "changes nothing" in lost and "run ended" not in lost, lost
    assert "the run ended before the nodes switched" in judged("", infers=2)  # really too late: as before
    assert judged("CISL 0 mode inf=2 state=switch mode=1\n") is None
