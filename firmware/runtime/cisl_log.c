/* cisl serial log line formatting (no printf: small, identical on every board). */
#include "cisl_log.h"

#include "cisl_board.h"

static uint32_t log_node;

void cisl_log_set_node(uint32_t node) { log_node = node; }

static void put_char(cisl_line *l, char c)
{
    /* keep one byte for the terminating newline */
    if (l->len + 1u < CISL_LOG_LINE_MAX) {
        l->buf[l->len++] = c;
    }
}

static void put_str(cisl_line *l, const char *s)
{
    while (*s != '\0') {
        put_char(l, *s++);
    }
}

static void put_u32(cisl_line *l, uint32_t v)
{
    char digits[10];
    int n = 0;
    do {
        digits[n++] = (char)('0' + (v % 10u));
        v /= 10u;
    } while (v != 0u);
    while (n > 0) {
        put_char(l, digits[--n]);
    }
}

static void put_hex(cisl_line *l, uint32_t v, int digits)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = digits - 1; i >= 0; i--) {
        put_char(l, hex[(v >> (4 * i)) & 0xFu]);
    }
}

static void put_key(cisl_line *l, const char *key)
{
    put_char(l, ' ');
    put_str(l, key);
    put_char(l, '=');
}

void cisl_log_begin(cisl_line *l, const char *event)
{
    l->len = 0;
    put_str(l, "CISL ");
    put_u32(l, log_node);
    put_char(l, ' ');
    put_str(l, event);
}

void cisl_log_u32(cisl_line *l, const char *key, uint32_t value)
{
    put_key(l, key);
    put_u32(l, value);
}

void cisl_log_i32(cisl_line *l, const char *key, int32_t value)
{
    put_key(l, key);
    if (value < 0) {
        put_char(l, '-');
        put_u32(l, (uint32_t)(-(value + 1)) + 1u);
    } else {
        put_u32(l, (uint32_t)value);
    }
}

void cisl_log_str(cisl_line *l, const char *key, const char *value)
{
    put_key(l, key);
    put_str(l, value);
}

void cisl_log_hex32(cisl_line *l, const char *key, uint32_t value)
{
    put_key(l, key);
    put_hex(l, value, 8);
}

void cisl_log_hexbytes(cisl_line *l, const char *key, const uint8_t *data, uint32_t n)
{
    put_key(l, key);
    for (uint32_t i = 0; i < n && l->len + 3u < CISL_LOG_LINE_MAX; i++) {
        put_hex(l, data[i], 2);
    }
}

static cisl_log_clock log_spent;

void cisl_log_end(cisl_line *l)
{
    l->buf[l->len++] = '\n';
    const uint32_t t0 = cisl_board_time_us();
    const uint32_t c0 = cisl_board_cycles();
    cisl_board_write(l->buf, l->len);
    log_spent.us += cisl_board_time_us() - t0;
    log_spent.cycles += cisl_board_cycles() - c0;
}

void cisl_log_spent(cisl_log_clock *c) { *c = log_spent; }
