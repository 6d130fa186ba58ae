/* cisl node runtime: block timing and reports (serial contract, docs/serial-contract.md). */
#include "cisl_runtime.h"

#include "cisl_board.h"
#include "cisl_kernels.h"
#include "cisl_log.h"

void cisl_block_begin(cisl_block *b)
{
    cisl_board_watchdog_reload();
    b->comm_us = 0;
    b->comm_cycles = 0;
    cisl_log_spent(&b->log0);
    b->c0_cycles = cisl_board_cycles();
    b->t0_us = cisl_board_time_us();
}

void cisl_block_end(cisl_block *b, uint32_t inference, int32_t layer, const char *name)
{
    cisl_log_clock log;
    cisl_log_spent(&log);
    const uint32_t elapsed = cisl_board_time_us() - b->t0_us - (log.us - b->log0.us);
    const uint32_t total = cisl_board_cycles() - b->c0_cycles - (log.cycles - b->log0.cycles);
    const uint32_t cycles = total >= b->comm_cycles ? total - b->comm_cycles : 0u;
    cisl_line l;
    cisl_log_begin(&l, "block");
    cisl_log_u32(&l, "inf", inference);
    cisl_log_i32(&l, "layer", layer);
    cisl_log_str(&l, "block", name);
    cisl_log_u32(&l, "us", elapsed >= b->comm_us ? elapsed - b->comm_us : 0u);
    cisl_log_u32(&l, "comm_us", b->comm_us);
    if (cycles != 0u) {
        cisl_log_u32(&l, "cycles", cycles);
    }
    cisl_log_end(&l);
}

/* Boards that need nothing before the first inference: it is inference 0. */
__attribute__((weak)) uint32_t cisl_board_start(void) { return 0u; }

/* Boards whose nodes need no resynchronisation between inferences. */
__attribute__((weak)) uint32_t cisl_board_resync(uint32_t inference) { return inference; }

/* Boards that do not say what their clock counts print no `clock` key. */
__attribute__((weak)) const char *cisl_board_clock(void) { return 0; }

__attribute__((weak)) int cisl_board_radio_on_us(uint32_t *tx_us, uint32_t *rx_us)
{
    *tx_us = 0u;
    *rx_us = 0u;
    return 0;
}

/* Boards that know their image's identity (the linker's build id) print it in the boot line. */
__attribute__((weak)) const char *cisl_board_image_id(void)
{
    return 0;
}

/* Boards without a watchdog. */
__attribute__((weak)) void cisl_board_watchdog_reload(void) {}

/* Boards that can read their reset cause print it in the boot line. */
__attribute__((weak)) int cisl_board_reset_reason(uint32_t *bits)
{
    *bits = 0u;
    return 0;
}

void cisl_report_boot(const char *plan_hash, uint32_t node, uint32_t nodes)
{
    const char *clock = cisl_board_clock();
    const char *image = cisl_board_image_id();
    uint32_t reset = 0u;
    const int knows_reset = cisl_board_reset_reason(&reset);
    cisl_line l;
    cisl_log_set_node(node);
    cisl_log_begin(&l, "boot");
    cisl_log_str(&l, "fw", CISL_FW_VERSION);
    cisl_log_str(&l, "plan", plan_hash);
    cisl_log_str(&l, "board", cisl_board_name());
    cisl_log_u32(&l, "node", node);
    cisl_log_u32(&l, "nodes", nodes);
    if (clock != 0) {
        cisl_log_str(&l, "clock", clock);
    }
    if (image != 0) {
        cisl_log_str(&l, "image", image);
    }
    if (knows_reset) {
        cisl_log_hex32(&l, "reset", reset);
    }
#ifdef CISL_CMSIS_NN_COMMIT
    cisl_log_str(&l, "cmsis_nn", CISL_CMSIS_NN_COMMIT);
#endif
    cisl_log_end(&l);
}

void cisl_report_infer(uint32_t inference, uint32_t us, uint32_t crc)
{
    cisl_line l;
    cisl_log_begin(&l, "infer");
    cisl_log_u32(&l, "inf", inference);
    cisl_log_u32(&l, "us", us);
    cisl_log_hex32(&l, "crc", crc);
    cisl_log_end(&l);
}

void cisl_report_output(uint32_t inference, const int8_t *q, uint32_t n)
{
    const uint32_t crc = cisl_crc32((const uint8_t *)q, n);
    for (uint32_t off = 0; off < n; off += 64u) {
        const uint32_t chunk = (n - off) < 64u ? (n - off) : 64u;
        cisl_line l;
        cisl_log_begin(&l, "output");
        cisl_log_u32(&l, "inf", inference);
        cisl_log_hex32(&l, "crc", crc);
        cisl_log_u32(&l, "n", n);
        cisl_log_u32(&l, "off", off);
        cisl_log_hexbytes(&l, "q", (const uint8_t *)q + off, chunk);
        cisl_log_end(&l);
    }
}

void cisl_report_error(uint32_t inference, const char *where, int32_t code)
{
    cisl_line l;
    cisl_log_begin(&l, "error");
    cisl_log_u32(&l, "inf", inference);
    cisl_log_str(&l, "where", where);
    cisl_log_i32(&l, "code", code);
    cisl_log_end(&l);
}

void cisl_report_end(uint32_t inferences)
{
    cisl_line l;
    cisl_log_begin(&l, "end");
    cisl_log_u32(&l, "inferences", inferences);
    cisl_log_end(&l);
}

#ifdef CISL_PROFILE_OPS
void cisl_report_op(uint32_t inference, uint32_t index, uint32_t cycles)
{
    cisl_line l;
    cisl_log_begin(&l, "op");
    cisl_log_u32(&l, "inf", inference);
    cisl_log_u32(&l, "i", index);
    cisl_log_u32(&l, "cycles", cycles);
    cisl_log_end(&l);
}
#endif
