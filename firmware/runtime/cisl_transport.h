/* cisl transport interface: one communication round of a somegather point.
 *
 * A board provides the transport (an ideal medium on the virtual testbed, Mixer over the radio on
 * hardware). The somegather layer above it knows the plan; the transport only moves bytes. */
#ifndef CISL_TRANSPORT_H
#define CISL_TRANSPORT_H

#include <stdint.h>

#define CISL_BROADCAST 0xFFu

/* Called once for every message received in a round. `data` is valid only during the call. */
typedef void (*cisl_rx_fn)(void *ctx, uint8_t sender, const uint8_t *data, uint32_t len);

/* Take part in round `sg` of inference `inference`: send `len` bytes of `msg` (len may be 0:
 * the node only listens) to `dest` (a node id or CISL_BROADCAST), and hand every message received
 * from the other nodes to `on_rx`. Returns 0, or a negative value if the round failed as a whole
 * (messages that are merely lost are simply not delivered). */
int cisl_transport_round(uint16_t sg, uint32_t inference, const uint8_t *msg, uint32_t len, uint8_t dest,
                         cisl_rx_fn on_rx, void *ctx);

#endif /* CISL_TRANSPORT_H */
