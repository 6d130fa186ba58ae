/* somegather over the transport; see cisl_somegather.h. */
#include "cisl_somegather.h"

#include <stddef.h>

#include "cisl_board.h"
#include "cisl_log.h"
#include "cisl_transport.h"

/* Head partial sums go on the wire as the in-memory int32 array: little-endian on every target
 * cisl supports (x86-64 hosts, Cortex-M). */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__)
#error "cisl expects a little-endian target"
#endif

typedef struct {
    const cisl_sg_desc *d;
    int8_t *out;
    uint8_t *valid;
    uint8_t got[CISL_MAX_NODES];
    uint32_t delivered;
    uint32_t rx_bytes;
    uint32_t ignored;
} sg_rx_state;

static void sg_on_rx(void *ctx, uint8_t sender, const uint8_t *data, uint32_t len)
{
    sg_rx_state *s = (sg_rx_state *)ctx;
    const cisl_sg_desc *d = s->d;
    for (uint16_t i = 0; i < d->nrecv; i++) {
        const cisl_sg_recv *r = &d->recv[i];
        if (r->from != sender) {
            continue;
        }
        if (len != r->bytes || s->got[sender]) {
            break; /* wrong size or duplicate: not what the plan says this sender sends */
        }
        s->got[sender] = 1;
        s->delivered++;
        s->rx_bytes += len;
        cisl_pack_cols_s8(s->out, d->out_cols, (const int8_t *)data, r->cols, d->rows, r->runs, r->nruns);
        if (s->valid != NULL) {
            for (uint16_t k = 0; k < r->nruns; k++) {
                for (uint16_t c = 0; c < r->runs[k].count; c++) {
                    s->valid[r->runs[k].dst_col + c] = 1;
                }
            }
        }
        return;
    }
    s->ignored++;
}

/* The time and radio use of one exchange, measured around its transport call. */
typedef struct {
    uint32_t t0, c0, tx0, rx0;
    cisl_log_clock log0; /* lines printed inside the exchange (a board's `mx` line) are not its time */
    uint32_t us, tx_on_us, rx_on_us;
    int radio; /* the board counts its radio's on-time */
} sg_timer;

static void sg_timer_start(sg_timer *t)
{
    t->radio = cisl_board_radio_on_us(&t->tx0, &t->rx0);
    cisl_log_spent(&t->log0);
    t->t0 = cisl_board_time_us();
    t->c0 = cisl_board_cycles();
}

/* Stop the timer and charge the exchange to the block's communication time. */
static void sg_timer_stop(sg_timer *t, cisl_block *blk)
{
    cisl_log_clock log;
    cisl_log_spent(&log);
    t->us = cisl_board_time_us() - t->t0 - (log.us - t->log0.us);
    blk->comm_us += t->us;
    blk->comm_cycles += cisl_board_cycles() - t->c0 - (log.cycles - t->log0.cycles);
    uint32_t tx = 0u, rx = 0u;
    t->radio = t->radio && cisl_board_radio_on_us(&tx, &rx);
    t->tx_on_us = tx - t->tx0;
    t->rx_on_us = rx - t->rx0;
}

static void report_sg(uint32_t inference, int32_t layer, const char *point, const sg_timer *t, uint32_t tx,
                      uint32_t rx, uint32_t delivered, uint32_t expected, uint32_t ignored)
{
    cisl_line l;
    cisl_log_begin(&l, "sg");
    cisl_log_u32(&l, "inf", inference);
    cisl_log_i32(&l, "layer", layer);
    cisl_log_str(&l, "point", point);
    cisl_log_u32(&l, "us", t->us);
    cisl_log_u32(&l, "tx", tx);
    cisl_log_u32(&l, "rx", rx);
    cisl_log_u32(&l, "delivered", delivered);
    cisl_log_u32(&l, "expected", expected);
    if (ignored != 0u) {
        cisl_log_u32(&l, "ignored", ignored);
    }
    if (t->radio) {
        cisl_log_u32(&l, "tx_on_us", t->tx_on_us);
        cisl_log_u32(&l, "rx_on_us", t->rx_on_us);
    }
    cisl_log_end(&l);
}

int cisl_somegather(const cisl_sg_desc *d, uint16_t exchange, uint32_t inference, const int8_t *own, int8_t *send,
                    int8_t *out, uint8_t *valid, cisl_block *blk)
{
    sg_timer t;
    sg_timer_start(&t);
    sg_rx_state s;
    for (uint32_t i = 0; i < CISL_MAX_NODES; i++) {
        s.got[i] = 0;
    }
    s.d = d;
    s.out = out;
    s.valid = valid;
    s.delivered = 0;
    s.rx_bytes = 0;
    s.ignored = 0;

    /* Everything starts missing; own and delivered columns are then filled in. */
    cisl_fill_cols_s8(out, d->out_cols, d->rows, 0, d->out_cols, d->fill);
    if (valid != NULL) {
        for (uint16_t c = 0; c < d->out_cols; c++) {
            valid[c] = 0;
        }
        for (uint16_t k = 0; k < d->nown; k++) {
            for (uint16_t c = 0; c < d->own_runs[k].count; c++) {
                valid[d->own_runs[k].dst_col + c] = 1;
            }
        }
    }
    cisl_pack_cols_s8(out, d->out_cols, own, d->own_cols, d->rows, d->own_runs, d->nown);

    uint32_t tx = 0;
    if (d->send_cols != 0u && send != NULL) {
        cisl_pack_cols_s8(send, d->send_cols, own, d->own_cols, d->rows, d->pack_runs, d->npack);
        tx = (uint32_t)d->rows * d->send_cols;
    }
    const int rc = cisl_transport_round(exchange, inference, (const uint8_t *)send, tx, CISL_BROADCAST, sg_on_rx, &s);
    sg_timer_stop(&t, blk);
    report_sg(inference, d->layer, d->point, &t, tx, s.rx_bytes, s.delivered, d->nrecv, s.ignored);
    return rc == 0 ? CISL_OK : CISL_ERR_TRANSPORT;
}

int cisl_send_partial(uint16_t sg, uint32_t inference, const int32_t *part, uint32_t n, uint8_t dest,
                      cisl_block *blk)
{
    sg_timer t;
    sg_timer_start(&t);
    const int rc = cisl_transport_round(sg, inference, (const uint8_t *)part, 4u * n, dest, NULL, NULL);
    sg_timer_stop(&t, blk);
    report_sg(inference, -1, "head", &t, 4u * n, 0, 0, 0, 0);
    return rc == 0 ? CISL_OK : CISL_ERR_TRANSPORT;
}

typedef struct {
    int32_t *acc;
    uint32_t n;
    const uint8_t *senders;
    uint32_t nsenders;
    uint8_t got[CISL_MAX_NODES];
    uint32_t delivered;
    uint32_t rx_bytes;
    uint32_t ignored;
} reduce_state;

static void reduce_on_rx(void *ctx, uint8_t sender, const uint8_t *data, uint32_t len)
{
    reduce_state *s = (reduce_state *)ctx;
    int expected = 0;
    for (uint32_t i = 0; i < s->nsenders; i++) {
        expected |= s->senders[i] == sender;
    }
    if (!expected || len != 4u * s->n || s->got[sender]) {
        s->ignored++;
        return;
    }
    s->got[sender] = 1;
    s->delivered++;
    s->rx_bytes += len;
    for (uint32_t i = 0; i < s->n; i++) {
        const uint32_t v = (uint32_t)data[4u * i] | ((uint32_t)data[4u * i + 1u] << 8) |
                           ((uint32_t)data[4u * i + 2u] << 16) | ((uint32_t)data[4u * i + 3u] << 24);
        /* unsigned addition wraps like the int32 accumulators of the reference */
        s->acc[i] = (int32_t)((uint32_t)s->acc[i] + v);
    }
}

int cisl_reduce_partials(uint16_t sg, uint32_t inference, int32_t *acc, const int32_t *own, uint32_t n,
                         const uint8_t *senders, const uint16_t *weights, uint32_t nsenders, cisl_block *blk)
{
    sg_timer t;
    sg_timer_start(&t);
    reduce_state s;
    for (uint32_t i = 0; i < CISL_MAX_NODES; i++) {
        s.got[i] = 0;
    }
    if (own != NULL) {
        for (uint32_t i = 0; i < n; i++) {
            acc[i] = 0; /* the received partials are summed apart, then scaled */
        }
    }
    s.acc = acc;
    s.n = n;
    s.senders = senders;
    s.nsenders = nsenders;
    s.delivered = 0;
    s.rx_bytes = 0;
    s.ignored = 0;
    const int rc = cisl_transport_round(sg, inference, NULL, 0, CISL_BROADCAST, reduce_on_rx, &s);
    if (own != NULL) {
        int64_t expected = 0;
        int64_t arrived = 0;
        for (uint32_t i = 0; i < nsenders; i++) {
            expected += weights != NULL ? weights[i] : 1;
            arrived += s.got[senders[i]] ? (weights != NULL ? weights[i] : 1) : 0;
        }
        const int scale = arrived > 0 && arrived < expected;
        for (uint32_t i = 0; i < n; i++) {
            int64_t v = acc[i];
            if (scale) {
                const int64_t num = v * expected; /* |S| <= 2^31, E < 2^16: fits int64 */
                v = (num >= 0 ? num + arrived / 2 : num - arrived / 2) / arrived; /* half away from 0 */
            }
            acc[i] = (int32_t)((uint32_t)own[i] + (uint32_t)v); /* wraps like the reference */
        }
    }
    sg_timer_stop(&t, blk);
    report_sg(inference, -1, "head", &t, 0, s.rx_bytes, s.delivered, nsenders, s.ignored);
    return rc == 0 ? CISL_OK : CISL_ERR_TRANSPORT;
}
