/* Elastic modes across the nodes (docs/design/elastic.md): which mode every inference runs.
 *
 * An image that holds every mode of an elastic model starts each inference with a control round
 * (cisl_transport_control): every node sends the mode it ran the last inference with and its
 * pending request, and the round's starter announces in the header the mode this inference runs.
 * The starter announces its own request if it has one, else the request of the lowest-numbered
 * node it heard in the previous control round, else the current mode; so a request from any node
 * takes effect on every node at the same inference, one inference after it was sent. A node that
 * decoded no header keeps its mode (`mode` event, state "unheard"); a peer whose row says it ran
 * another mode than this node is reported (state "mixed"): a mixed-mode inference is never silent. */
#ifndef CISL_MODES_H
#define CISL_MODES_H

#include <stdint.h>

#include "cisl_mode_select.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CISL_NO_MODE 0xFFu

/* Forget every request; the next inference runs mode 0. */
void cisl_modes_reset(void);

/* Ask every node to switch to `mode` (from the host over this node's serial line, or an on-node
 * selector): sent in the next control round. `modes`: how many modes the image holds. Returns 0,
 * or CISL_ERR_ARG for a mode the image does not hold. Logs a `mode` event (state "request"). */
int cisl_modes_request(uint32_t inference, uint8_t mode, uint8_t modes);

/* Limits for the on-node selector (CISL_NO_LIMIT: none; all CISL_NO_LIMIT: the node does not
 * choose). Logs nothing; takes effect at the next inference. */
void cisl_modes_set_limits(uint32_t deadline_us, uint32_t energy_nj, uint32_t max_mse_u);

/* Before inference `inference`, with limits set: the best mode of `table` (len entries) within
 * them (cisl_mode_select); if it is not `current` and not already requested, request it. */
void cisl_modes_choose(uint32_t inference, const cisl_mode_profile *table, uint8_t len, uint8_t current,
                       uint8_t modes);

/* Before inference `inference`: run its control round and set *mode (the mode the previous
 * inference ran on entry) to the mode this one runs. Returns 0, or < 0 if the transport failed. */
int cisl_modes_agree(uint32_t inference, uint8_t *mode, uint8_t modes);

#ifdef __cplusplus
}
#endif

#endif /* CISL_MODES_H */
