/* Commands from the node's host over its serial line (docs/serial-contract.md, "Host commands").
 *
 * The host writes ASCII lines to the node's UART; the node reads what has arrived before each
 * inference (cisl_host_poll, called by cisl_run) and answers every line with one `host` event:
 *
 *   mode M                     ask every node to run elastic mode M (cisl_modes_request)
 *   limits DEADLINE_US ENERGY_NJ MSE_U
 *                              limits for the on-node selector (cisl_modes_set_limits); a field
 *                              "-" is no limit, all three "-" stops the node choosing
 *
 * A line that does not parse as a whole is answered `state=refused` or `state=unknown`, one longer
 * than CISL_HOST_LINE_MAX `state=toolong`, one holding a byte no host writes (NUL, control,
 * non-ASCII: noise or a framing error) `state=damaged`; none of them is carried out in part. A byte
 * lost inside a number ("mode 12" arriving as "mode 1") still parses: the host checks the answer's
 * `mode` line (`cisl logs` does). */
#ifndef CISL_HOST_H
#define CISL_HOST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CISL_HOST_LINE_MAX 48u

/* Read what the host sent since the last call (cisl_board_read) and carry out every complete
 * line, before inference `inference`. */
void cisl_host_poll(uint32_t inference);

/* Carry out one command line (no newline) before inference `inference`; logs its `host` event.
 * Returns 0 if it was carried out, < 0 if refused or not understood. */
int cisl_host_command(uint32_t inference, const char *line);

#ifdef __cplusplus
}
#endif

#endif /* CISL_HOST_H */
