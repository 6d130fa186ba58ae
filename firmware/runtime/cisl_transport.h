/* cisl transport interface: one communication round of a somegather point.
 *
 * A board provides the transport (an ideal medium on the virtual testbed, Mixer over the radio on
 * hardware). The somegather layer above it knows the plan; the transport only moves bytes. */
#ifndef CISL_TRANSPORT_H
#define CISL_TRANSPORT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CISL_BROADCAST 0xFFu

/* Called once for every message received in a round. `data` is valid only during the call. */
typedef void (*cisl_rx_fn)(void *ctx, uint8_t sender, const uint8_t *data, uint32_t len);

/* Take part in round `sg` of inference `inference`: send `len` bytes of `msg` (len may be 0:
 * the node only listens) to `dest` (a node id or CISL_BROADCAST), and hand every message received
 * from the other nodes to `on_rx`. Returns 0, or a negative value if the round failed as a whole
 * (messages that are merely lost are simply not delivered). */
int cisl_transport_round(uint16_t sg, uint32_t inference, const uint8_t *msg, uint32_t len, uint8_t dest,
                         cisl_rx_fn on_rx, void *ctx);

/* Elastic images (cisl_modes.h): the control round that starts inference `inference`. Send the
 * `len`-byte control row, announce `mode` (0..15) if this node starts the round, hand every other
 * node's row to on_rx. Returns the mode the round's header announced, -1 if this node heard none,
 * CISL_NO_CONTROL if the transport has no control round (every node keeps its mode), -2 if the
 * round failed as a whole. */
#define CISL_NO_CONTROL (-3)
int cisl_transport_control(uint32_t inference, uint8_t mode, const uint8_t *row, uint32_t len, cisl_rx_fn on_rx,
                           void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* CISL_TRANSPORT_H */
