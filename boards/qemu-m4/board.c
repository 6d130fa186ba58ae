/* QEMU mps2-an386 (Cortex-M4 with DSP and FPU): one node's whole schedule on an emulated core.
 *
 * The node runs alone; its peers are replaced by a *transcript* the host recorded from the numpy
 * int8 reference (codegen/qemu.py): for every inference the input window, and for every exchange
 * the messages this node received. The transport hands those messages to the node in the recorded
 * order and writes every message the node sends to a second file, which the host compares byte for
 * byte with the reference. Serial output (the log contract) goes to QEMU's standard output.
 *
 * Command line (semihosting): "<name> <transcript file> <sent file>".
 *
 * Time: SysTick on the 25 MHz SYSCLK; run QEMU with -icount shift=0 so that one instruction is
 * 1 ns of virtual time: cisl_board_cycles() then counts instructions (in steps of 40) and the
 * block lines carry deterministic instruction counts (boot line clock=icount).
 *
 * Board time (clock=model, the virtual testbed): given a fourth argument naming a board time table
 * that exists (codegen/timing/boardtime.py, written by `cisl flash` from the cycle model of this
 * very image and the slot-level Mixer simulation of the testbed's radio), the node keeps a virtual
 * nRF52840 clock instead: every finished op advances it by that op's modelled cycles, every
 * exchange by its air time and the node's receive work, every inference by the runtime around the
 * ops; the radio's TX/RX-on time goes into the sg lines. The table stays in the host file and is
 * read entry by entry (semihosting seek + read), so the node's RAM is the nRF52840's budget. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cisl_board.h"
#include "cisl_log.h"
#include "cisl_mixer_transport.h"
#include "cisl_node_api.h"
#include "cisl_runtime.h"
#include "cisl_transport.h"
#include "qemu_m4.h"
#include "semihost.h"

#define TAG_INPUT 0x504E4931u    /* "1INP" little-endian: u32 inference, u32 len, then len bytes */
#define TAG_EXCHANGE 0x48435831u /* "1XCH": u32 inference, u32 sg, u32 count, then count messages */
#define TAG_END 0x444E4531u      /* "1END" */
#define TAG_SENT 0x544E5331u     /* "1SNT": u32 inference, u32 sg, u32 len, then len bytes */
#define TRANSCRIPT_MAGIC "CISLQT01"

#define BT_MAGIC "CISLBT01"
#define BT_VERSION 1u

static int32_t console = -1;
static int32_t transcript = -1;
static int32_t sent = -1;

/* board time: the table's handle and header, the virtual clock, the radio's on-time */
static int32_t bt_file = -1;
static struct {
    uint32_t version, clock_hz, runtime, nops, nsg, ninf;
} bt;
static uint64_t bt_cycles;
static uint32_t bt_radio_tx_us, bt_radio_rx_us;

const char *cisl_board_name(void) { return "qemu-m4"; }

const char *cisl_board_clock(void) { return bt_file >= 0 ? "model" : "icount"; }

uint32_t cisl_board_time_us(void)
{
    if (bt_file >= 0) {
        return (uint32_t)(bt_cycles * 1000000u / bt.clock_hz);
    }
    return (uint32_t)(cisl_qemu_ticks() / (QEMU_SYSCLK_HZ / 1000000u));
}

uint32_t cisl_board_cycles(void)
{
    return bt_file >= 0 ? (uint32_t)bt_cycles : (uint32_t)(cisl_qemu_ticks() * QEMU_INSNS_PER_TICK);
}

void cisl_board_write(const char *text, uint32_t n) { (void)cisl_sh_write(console, text, n); }

static void fail(const char *where, int32_t code)
{
    cisl_line l;
    cisl_log_begin(&l, "error");
    cisl_log_u32(&l, "inf", 0u);
    cisl_log_str(&l, "where", where);
    cisl_log_i32(&l, "code", code);
    cisl_log_end(&l);
    cisl_sh_exit(3);
}

static void read_exact(void *dst, uint32_t n)
{
    if (n > 0u && cisl_sh_read(transcript, dst, n) != 0) {
        fail("transcript_short", (int32_t)n);
    }
}

/* ---- board time ---------------------------------------------------------------------------- */

#define BT_HEADER_BYTES (8u + 6u * 4u)

static uint32_t bt_read_u32(uint32_t offset, uint32_t *out, uint32_t n)
{
    if (cisl_sh_seek(bt_file, offset) != 0 || cisl_sh_read(bt_file, out, 4u * n) != 0) {
        fail("board_time_table", (int32_t)offset);
    }
    return out[0];
}

static void bt_open(const char *path)
{
    const int32_t f = cisl_sh_open(path, SH_OPEN_RB);
    if (f < 0) {
        return; /* no table: QEMU instructions */
    }
    char magic[8];
    if (cisl_sh_read(f, magic, sizeof magic) != 0 || memcmp(magic, BT_MAGIC, sizeof magic) != 0 ||
        cisl_sh_read(f, &bt, sizeof bt) != 0 || bt.version != BT_VERSION || bt.clock_hz == 0u) {
        fail("board_time_table", 0);
    }
    bt_file = f;
}

void cisl_board_op_end(uint32_t index)
{
    if (bt_file >= 0 && index < bt.nops) {
        uint32_t c;
        bt_cycles += bt_read_u32(BT_HEADER_BYTES + 4u * index, &c, 1u);
    }
}

/* The exchange's air time and receive work on the clock, its radio-on time on the counters. */
static void bt_exchange(uint16_t sg, uint32_t inference)
{
    if (bt_file < 0 || sg >= bt.nsg || bt.ninf == 0u) {
        return;
    }
    uint32_t rx;
    bt_cycles += bt_read_u32(BT_HEADER_BYTES + 4u * (bt.nops + sg), &rx, 1u);
    uint32_t r[3]; /* air, TX-on, RX-on µs */
    const uint32_t i = inference % bt.ninf;
    (void)bt_read_u32(BT_HEADER_BYTES + 4u * (bt.nops + bt.nsg + 3u * (i * bt.nsg + sg)), r, 3u);
    bt_cycles += (uint64_t)r[0] * bt.clock_hz / 1000000u;
    bt_radio_tx_us += r[1];
    bt_radio_rx_us += r[2];
}

int cisl_board_radio_on_us(uint32_t *tx_us, uint32_t *rx_us)
{
    *tx_us = bt_radio_tx_us;
    *rx_us = bt_radio_rx_us;
    return bt_file >= 0;
}

int cisl_board_next_input(int8_t *dst, uint32_t len)
{
    uint32_t h[3];
    read_exact(h, 4u);
    if (h[0] == TAG_END) {
        return 0;
    }
    read_exact(h + 1, 8u);
    if (h[0] != TAG_INPUT || h[2] != len) {
        fail("transcript_input", (int32_t)h[0]);
    }
    read_exact(dst, len);
    bt_cycles += bt.runtime; /* the input loop, reports and checksums between two inferences */
    return 1;
}

int cisl_transport_round(uint16_t sg, uint32_t inference, const uint8_t *msg, uint32_t len, uint8_t dest,
                         cisl_rx_fn on_rx, void *ctx)
{
    (void)dest;
    const uint32_t s[4] = {TAG_SENT, inference, sg, len};
    if (cisl_sh_write(sent, s, sizeof s) != 0 || (len > 0u && cisl_sh_write(sent, msg, len) != 0)) {
        fail("sent_file", (int32_t)sg);
    }
    uint32_t h[4];
    read_exact(h, sizeof h);
    if (h[0] != TAG_EXCHANGE || h[1] != inference || h[2] != sg) {
        fail("transcript_exchange", (int32_t)sg);
    }
    for (uint32_t i = 0; i < h[3]; i++) {
        uint32_t m[2];
        read_exact(m, sizeof m);
        if (m[1] > cisl_mx_plan.max_message) {
            fail("transcript_message", (int32_t)m[1]);
        }
        read_exact(cisl_mx_plan.reassembly, m[1]);
        if (on_rx != NULL) {
            on_rx(ctx, (uint8_t)m[0], cisl_mx_plan.reassembly, m[1]);
        }
    }
    bt_exchange(sg, inference);
    return 0;
}

/* The transcript replaces Mixer: these hooks are never called on this board. */
int32_t cisl_board_mixer_round(mx_state *s, uint16_t sg, uint8_t part, uint32_t inference, uint32_t slot_us)
{
    (void)s;
    (void)sg;
    (void)part;
    (void)inference;
    (void)slot_us;
    return -1;
}

void cisl_board_mixer_delivery(uint16_t sg, uint32_t inference, const uint8_t *got, const uint16_t *slot,
                               uint8_t nodes)
{
    (void)sg;
    (void)inference;
    (void)got;
    (void)slot;
    (void)nodes;
}

static void report_stack(void)
{
    extern uint32_t __cisl_stack_bottom[], __cisl_stack_top[];
    const uint32_t *p = __cisl_stack_bottom;
    while (p < __cisl_stack_top && *p == CISL_STACK_PAINT) {
        p++;
    }
    cisl_line l;
    cisl_log_begin(&l, "stack");
    cisl_log_u32(&l, "used", (uint32_t)((uintptr_t)__cisl_stack_top - (uintptr_t)p));
    cisl_log_u32(&l, "size", (uint32_t)((uintptr_t)__cisl_stack_top - (uintptr_t)__cisl_stack_bottom));
    cisl_log_end(&l);
}

int main(void)
{
    cisl_qemu_systick_start();
    console = cisl_sh_open(":tt", SH_OPEN_W);
    cisl_log_set_node(cisl_node_id);

    static char cmdline[512];
    if (cisl_sh_cmdline(cmdline, sizeof cmdline) != 0) {
        fail("cmdline", -1);
    }
    /* "<name> <transcript> <sent> [<board time table>]": split at spaces (the host passes paths
     * without spaces) */
    char *arg[4] = {NULL, NULL, NULL, NULL};
    int n = 0;
    for (char *p = cmdline; *p != '\0' && n < 4;) {
        while (*p == ' ') {
            *p++ = '\0';
        }
        if (*p == '\0') {
            break;
        }
        arg[n++] = p;
        while (*p != '\0' && *p != ' ') {
            p++;
        }
    }
    if (n < 3) {
        fail("cmdline", n);
    }
    transcript = cisl_sh_open(arg[1], SH_OPEN_RB);
    sent = cisl_sh_open(arg[2], SH_OPEN_WB);
    if (transcript < 0 || sent < 0) {
        fail("open", transcript < 0 ? 1 : 2);
    }
    char magic[8];
    uint32_t who[2];
    read_exact(magic, sizeof magic);
    read_exact(who, sizeof who);
    if (memcmp(magic, TRANSCRIPT_MAGIC, sizeof magic) != 0 || who[0] != cisl_node_id) {
        fail("transcript_node", (int32_t)who[0]);
    }
    if (n == 4) {
        bt_open(arg[3]);
    }
    const int rc = cisl_run();
    report_stack();
    (void)cisl_sh_close(sent);
    (void)cisl_sh_close(transcript);
    if (bt_file >= 0) {
        (void)cisl_sh_close(bt_file);
    }
    return rc;
}
