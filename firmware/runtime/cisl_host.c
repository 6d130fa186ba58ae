/* Commands from the node's host over its serial line; see cisl_host.h. */
#include "cisl_host.h"

#include <stddef.h>

#include "cisl_board.h"
#include "cisl_log.h"
#include "cisl_mode_select.h"
#include "cisl_modes.h"
#include "cisl_node_api.h"
#include "cisl_runtime.h"

/* Boards without a receive path deliver nothing. */
__attribute__((weak)) uint32_t cisl_board_read(char *buf, uint32_t max)
{
    (void)buf, (void)max;
    return 0u;
}

static struct {
    char buf[CISL_HOST_LINE_MAX + 1u];
    uint32_t len;
    uint8_t overlong; /* the line being read no longer fits: dropped up to its newline */
    uint8_t damaged;  /* it holds a byte no host writes (a NUL, a control or non-ASCII byte: noise or
                       * a framing error on the wire): dropped whole, never parsed */
} rx;

static void host_event(uint32_t inference, const char *cmd, const char *state)
{
    cisl_line l;
    cisl_log_begin(&l, "host");
    cisl_log_u32(&l, "inf", inference);
    cisl_log_str(&l, "cmd", cmd);
    cisl_log_str(&l, "state", state);
    cisl_log_end(&l);
}

static const char *skip_spaces(const char *p)
{
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    return p;
}

/* A decimal of at most 10 digits that fits 32 bits, or "-" (CISL_NO_LIMIT when dash_ok), ending at
 * a space or the line's end. Returns the text after it, or NULL. */
static const char *parse_u32(const char *p, uint32_t *out, int dash_ok)
{
    p = skip_spaces(p);
    if (dash_ok && *p == '-') {
        *out = CISL_NO_LIMIT;
        p++;
    } else {
        uint64_t v = 0u;
        const char *start = p;
        while (*p >= '0' && *p <= '9') {
            v = v * 10u + (uint64_t)(*p - '0');
            if (v > 0xFFFFFFFFull || p - start >= 10) {
                return NULL;
            }
            p++;
        }
        if (p == start) {
            return NULL;
        }
        *out = (uint32_t)v;
    }
    return (*p == '\0' || *p == ' ' || *p == '\t') ? p : NULL;
}

/* `word` followed by a space: the rest of the line, else NULL. */
static const char *command_word(const char *line, const char *word)
{
    while (*word != '\0') {
        if (*line++ != *word++) {
            return NULL;
        }
    }
    return (*line == ' ' || *line == '\t') ? line : NULL;
}

int cisl_host_command(uint32_t inference, const char *line)
{
    const char *p;
    uint32_t v[3];
    line = skip_spaces(line);
    if ((p = command_word(line, "mode")) != NULL) {
        p = parse_u32(p, &v[0], 0);
        if (p == NULL || *skip_spaces(p) != '\0' || v[0] > 255u ||
            cisl_modes_request(inference, (uint8_t)v[0], cisl_node_modes()) != CISL_OK) {
            host_event(inference, "mode", "refused");
            return -1;
        }
        host_event(inference, "mode", "ok");
        return 0;
    }
    if ((p = command_word(line, "limits")) != NULL) {
        for (uint32_t i = 0u; i < 3u && p != NULL; i++) {
            p = parse_u32(p, &v[i], 1);
        }
        /* without a profiled table the selector cannot honour limits: refused, not a silent "ok"
         * (an image flashed before `cisl modes` profiled its modes) */
        if (p == NULL || *skip_spaces(p) != '\0' || cisl_node_profiled_modes() == 0u) {
            host_event(inference, "limits", "refused");
            return -1;
        }
        cisl_modes_set_limits(v[0], v[1], v[2]);
        host_event(inference, "limits", "ok");
        return 0;
    }
    host_event(inference, "unknown", "unknown");
    return -1;
}

void cisl_host_poll(uint32_t inference)
{
    char chunk[32];
    uint32_t n;
    while ((n = cisl_board_read(chunk, (uint32_t)sizeof chunk)) > 0u) {
        for (uint32_t i = 0u; i < n; i++) {
            const char c = chunk[i];
            if (c == '\n') {
                if (rx.overlong) {
                    host_event(inference, "unknown", "toolong");
                } else if (rx.damaged) {
                    host_event(inference, "unknown", "damaged");
                } else if (rx.len > 0u) {
                    rx.buf[rx.len] = '\0';
                    (void)cisl_host_command(inference, rx.buf);
                }
                rx.len = 0u;
                rx.overlong = 0u;
                rx.damaged = 0u;
            } else if (c == '\r') {
                /* CR LF from terminals */
            } else if ((c < ' ' && c != '\t') || c > '~') {
                rx.damaged = 1u;
            } else if (rx.len < CISL_HOST_LINE_MAX) {
                rx.buf[rx.len++] = c;
            } else {
                rx.overlong = 1u;
            }
        }
    }
}
