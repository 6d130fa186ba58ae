/* cisl serial log: one event per line, "CISL <node> <event> key=value ...\n", ASCII.
 *
 * Lines are built in a fixed buffer and written with one cisl_board_write call, so they never
 * interleave within a node. The grammar is in docs/serial-contract.md. */
#ifndef CISL_LOG_H
#define CISL_LOG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CISL_LOG_LINE_MAX 512u

typedef struct {
    char buf[CISL_LOG_LINE_MAX];
    uint32_t len;
} cisl_line;

/* Set the node id printed in every line. */
void cisl_log_set_node(uint32_t node);

void cisl_log_begin(cisl_line *l, const char *event);
void cisl_log_u32(cisl_line *l, const char *key, uint32_t value);
void cisl_log_i32(cisl_line *l, const char *key, int32_t value);
void cisl_log_str(cisl_line *l, const char *key, const char *value);
void cisl_log_hex32(cisl_line *l, const char *key, uint32_t value);
/* Bytes as lower-case hex, two digits per byte, truncated to what fits in the line. */
void cisl_log_hexbytes(cisl_line *l, const char *key, const uint8_t *data, uint32_t n);
/* Terminate the line and write it out. */
void cisl_log_end(cisl_line *l);

/* Running totals of the time spent writing lines out (cisl_board_write). A board's UART may block:
 * at 115200 baud a line of 80 characters takes 7 ms, longer than many blocks' compute. Every span
 * the node reports (block, exchange, inference) takes out what accrued inside it, so the serial
 * log measures the node's work, not its own printing (docs/serial-contract.md). */
typedef struct {
    uint32_t us;
    uint32_t cycles;
} cisl_log_clock;
void cisl_log_spent(cisl_log_clock *c);

#ifdef __cplusplus
}
#endif

#endif /* CISL_LOG_H */
