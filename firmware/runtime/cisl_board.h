/* cisl board interface: what the portable runtime needs from a board.
 *
 * Every board (boards/<name>/) implements these functions once; the runtime, the somegather layer
 * and the generated node code use nothing else of the hardware. */
#ifndef CISL_BOARD_H
#define CISL_BOARD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Board name as printed in the boot line (e.g. "sim", "nrf52840dk"). */
const char *cisl_board_name(void);

/* Microseconds since an arbitrary start; wraps at 2^32. */
uint32_t cisl_board_time_us(void);

/* CPU cycles since an arbitrary start, or 0 on boards without a cycle counter. */
uint32_t cisl_board_cycles(void);

/* What cisl_board_cycles and cisl_board_time_us count, printed as the boot line's `clock` key:
 * "dwt" (the core's cycle counter), "model" (the cycle model of the node's image, virtual testbed),
 * "host" (host wall-clock time), "icount" (QEMU instructions). Optional: boards that do not define
 * it get a weak default that omits the key (cisl_runtime.c). */
const char *cisl_board_clock(void);
/* The image's identity as hex (the first 8 bytes of the linker's build id), or 0 when the board does
 * not know it (weak default); the boot line's `image` key. */
const char *cisl_board_image_id(void);
/* Why the part last reset, as a bit mask the host names (nRF: POWER.RESETREAS), for the boot line's
 * `reset` key: returns 1 and sets *bits, or 0 when the board cannot tell (weak default: the key is left
 * out). Called once, at the boot line. */
int cisl_board_reset_reason(uint32_t *bits);

/* The node is making progress: reload the board's watchdog, if it has one (nrf52840dk: board.toml
 * [watchdog]). The runtime calls it at every block; the board at its own waits. Weak default: nothing. */
void cisl_board_watchdog_reload(void);

/* The radio's on-time so far, TX and RX separately, in microseconds (wrapping at 2^32): the `sg`
 * lines' tx_on_us/rx_on_us. Returns 1 if the board counts it, 0 if not (then the keys are left
 * out). Optional: boards that do not define it get a weak default that returns 0 (cisl_runtime.c). */
int cisl_board_radio_on_us(uint32_t *tx_us, uint32_t *rx_us);

/* Write n bytes of serial output (the log lines of the serial contract). */
void cisl_board_write(const char *text, uint32_t n);

/* Copy up to max bytes the host sent on the serial line since the last call into buf; returns how
 * many (0: nothing new). Never blocks. Optional: boards without a receive path get a weak default
 * that returns 0 (cisl_host.c); their nodes take no host commands. */
uint32_t cisl_board_read(char *buf, uint32_t max);

/* Called once after the boot line, before the first inference: what the board must do before the
 * node computes (nrf52840dk: the start barrier that lets nodes reset at different times start
 * together). Returns the inference to run first: 0, or the one a network the node booted into mid-run
 * is at (the node then skips to it and has printed a `resync` line). Optional: a weak default
 * returns 0 (cisl_runtime.c). */
uint32_t cisl_board_start(void);

/* Called before every inference after the first, outside its timed span: a board whose nodes can
 * fall apart (nrf52840dk: declared each other dead, or a round behind for good) brings them back
 * together here (docs/design/dead-nodes.md, "Split networks"). Returns the inference to run next:
 * `inference`, or a later one the network is already at (the node then skips the inputs in between
 * and has printed a `resync` line). Optional: a weak default returns `inference`. */
uint32_t cisl_board_resync(uint32_t inference);

/* Fetch the next input window (len int8 values) into dst. Returns 1 if one was delivered,
 * 0 when there are no more inputs (the node then reports and stops). */
int cisl_board_next_input(int8_t *dst, uint32_t len);

#ifdef __cplusplus
}
#endif

#endif /* CISL_BOARD_H */
