/* Elastic modes across the nodes; see cisl_modes.h. */
#include "cisl_modes.h"

#include <stddef.h>

#include "cisl_log.h"
#include "cisl_node_api.h"
#include "cisl_runtime.h"
#include "cisl_transport.h"

#define ROW_BYTES 2u /* [mode it ran the last inference with, its pending request] */

static struct {
    uint8_t request;      /* this node's pending request, CISL_NO_MODE if none */
    uint8_t ran;          /* the mode of the last inference, CISL_NO_MODE before the first */
    uint8_t peer_request; /* the lowest-numbered peer's request heard in the last control round */
    uint8_t peer_from;
    uint32_t inference;   /* of the control round being run (for the events of its rows) */
    uint8_t modes;
} st = {CISL_NO_MODE, CISL_NO_MODE, CISL_NO_MODE, CISL_NO_MODE, 0u, 1u};

/* Firmware whose transport has no control round (it implements only cisl_transport_round) runs the
 * mode set on the node: this weak default says so; the cisl boards with Mixer define their own. */
__attribute__((weak)) int cisl_transport_control(uint32_t inference, uint8_t mode, const uint8_t *row, uint32_t len,
                                                 cisl_rx_fn on_rx, void *ctx)
{
    (void)inference, (void)mode, (void)row, (void)len, (void)on_rx, (void)ctx;
    return CISL_NO_CONTROL;
}

static void mode_event(uint32_t inference, const char *state, uint8_t mode)
{
    cisl_line l;
    cisl_log_begin(&l, "mode");
    cisl_log_u32(&l, "inf", inference);
    cisl_log_str(&l, "state", state);
    cisl_log_u32(&l, "mode", mode);
    cisl_log_end(&l);
}

void cisl_modes_reset(void)
{
    st.request = st.ran = st.peer_request = st.peer_from = CISL_NO_MODE;
}

int cisl_modes_request(uint32_t inference, uint8_t mode, uint8_t modes)
{
    if (mode >= modes) {
        return CISL_ERR_ARG;
    }
    st.request = mode;
    mode_event(inference, "request", mode);
    return CISL_OK;
}

static struct {
    uint32_t deadline_us, energy_nj, mse_u;
} limits = {CISL_NO_LIMIT, CISL_NO_LIMIT, CISL_NO_LIMIT};

void cisl_modes_set_limits(uint32_t deadline_us, uint32_t energy_nj, uint32_t max_mse_u)
{
    limits.deadline_us = deadline_us;
    limits.energy_nj = energy_nj;
    limits.mse_u = max_mse_u;
}

void cisl_modes_choose(uint32_t inference, const cisl_mode_profile *table, uint8_t len, uint8_t current,
                       uint8_t modes)
{
    if (limits.deadline_us == CISL_NO_LIMIT && limits.energy_nj == CISL_NO_LIMIT && limits.mse_u == CISL_NO_LIMIT) {
        return;
    }
    const int best = cisl_mode_select(table, len < modes ? len : modes, limits.deadline_us, limits.energy_nj,
                                      limits.mse_u);
    if (best >= 0 && (uint8_t)best != current && (uint8_t)best != st.request) {
        (void)cisl_modes_request(inference, (uint8_t)best, modes);
    }
}

static void on_row(void *ctx, uint8_t sender, const uint8_t *row, uint32_t len)
{
    (void)ctx;
    if (len != ROW_BYTES) {
        return;
    }
    if (row[0] != CISL_NO_MODE && st.ran != CISL_NO_MODE && row[0] != st.ran) {
        cisl_line l; /* the last inference ran mixed: that peer computed another mode */
        cisl_log_begin(&l, "mode");
        cisl_log_u32(&l, "inf", st.inference); /* seen in this inference's control round */
        cisl_log_str(&l, "state", "mixed");
        cisl_log_u32(&l, "mode", st.ran);
        cisl_log_u32(&l, "peer", sender);
        cisl_log_u32(&l, "peer_mode", row[0]);
        cisl_log_end(&l);
    }
    if (row[1] < st.modes && (st.peer_from == CISL_NO_MODE || sender < st.peer_from)) {
        st.peer_request = row[1];
        st.peer_from = sender;
    }
}

int cisl_modes_agree(uint32_t inference, uint8_t *mode, uint8_t modes)
{
    st.modes = modes;
    st.inference = inference;
    /* what this node announces if it starts the round */
    const uint8_t announce = st.request != CISL_NO_MODE ? st.request
                             : st.peer_request != CISL_NO_MODE ? st.peer_request : *mode;
    const uint8_t row[ROW_BYTES] = {st.ran, st.request};
    st.peer_request = st.peer_from = CISL_NO_MODE;
    const int heard = cisl_transport_control(inference, announce, row, ROW_BYTES, on_row, NULL);
    if (heard == CISL_NO_CONTROL) {
        st.ran = *mode; /* a transport without control rounds: the mode set on the node stays */
        return CISL_OK;
    }
    if (heard < -1) {
        return CISL_ERR_TRANSPORT;
    }
    if (heard < 0 || heard >= modes) {
        mode_event(inference, "unheard", *mode); /* runs its mode unconfirmed; peers report a mismatch */
    } else if ((uint8_t)heard != *mode) {
        *mode = (uint8_t)heard;
        mode_event(inference, "switch", *mode);
    }
    if (st.request == *mode) {
        st.request = CISL_NO_MODE; /* announced: done */
    }
    st.ran = *mode;
    return CISL_OK;
}
