/* somegather over Mixer: one exchange (a somegather point or the head reduction) as one or more
 * Mixer rounds, following the schedule that `cisl compile` puts into plan.json ("mixer") and into
 * the generated node code (cisl_mx_schedule).
 *
 * In every round row 0 is the initiator's header (inference, exchange, part) and each sender's
 * message takes consecutive rows (fragments, the last zero-padded). A message larger than a round
 * is split into pieces over consecutive rounds of the exchange (each piece: consecutive rows from a
 * byte offset of the message on); at most one split message is in flight at a time, so receivers
 * put it together in one buffer of the largest message's size. A message is delivered only if all
 * its fragments decode, in every round it spans; otherwise it is lost as a whole, which is what
 * training simulates. */
#ifndef CISL_MIXER_TRANSPORT_H
#define CISL_MIXER_TRANSPORT_H

#include <stdint.h>

#include "cisl_transport.h"
#include "mixer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint8_t node;       /* sender */
    uint16_t first_row; /* its first row in the generation */
    uint16_t rows;      /* fragments */
    uint32_t nbytes;    /* message length (the whole message, also for a piece) */
    uint32_t offset;    /* the piece's first byte in the message (0: the message starts here) */
} cisl_mx_frag;

typedef struct {
    uint16_t generation;  /* G */
    uint16_t payload;     /* P */
    uint16_t deadline;    /* hard deadline in slots */
    uint16_t linger;      /* MX_TERM_DONE linger */
    uint32_t slot_us;     /* slot length on the PHY */
    const cisl_mx_frag *senders;
    uint8_t nsenders;
    uint16_t takeover;    /* scan slots after which the backup starts the round (mx_config.takeover_slots) */
} cisl_mx_round;

typedef struct {
    const cisl_mx_round *rounds;
    uint8_t nrounds;
} cisl_mx_exchange;

typedef struct {
    uint8_t nodes;       /* n */
    uint8_t initiator;   /* node that starts every round */
    uint8_t termination; /* MX_TERM_DONE or MX_TERM_DEADLINE */
    uint32_t max_message; /* largest message of any exchange, bytes */
    uint8_t *reassembly;  /* max_message bytes, where received fragments are put together */
    const cisl_mx_exchange *exchanges; /* indexed by exchange (plan.json "sg") */
    uint16_t nexchanges;
    /* elastic images (every mode in one image): the control round each inference starts with, its
     * exchange number nexchanges; NULL otherwise */
    const cisl_mx_round *control;
} cisl_mx_schedule;

/* The schedule of this node's plan (generated, cisl_node.c). */
extern const cisl_mx_schedule cisl_mx_plan;

/* Run exchange `sg` of inference `inference` over Mixer: send `len` bytes of `msg` (this node's
 * message; len 0 if it sends nothing) and hand every message that arrived complete to on_rx.
 * `dest` is ignored: Mixer floods every message to every node. Returns 0 or < 0. */
int cisl_mixer_exchange(uint16_t sg, uint32_t inference, const uint8_t *msg, uint32_t len, cisl_rx_fn on_rx,
                        void *ctx);

/* Elastic images: the control round of inference `inference` (docs/design/elastic.md). Every node
 * sends its `len`-byte control row; the header, if this node starts the round, announces `mode`
 * (0..15) as the inference's mode. on_rx gets every other node's row that arrived. Returns the mode
 * the header this node decoded announces, -1 if it decoded none, -2 on error. */
int cisl_mixer_control(uint32_t inference, uint8_t mode, const uint8_t *row, uint32_t len, cisl_rx_fn on_rx,
                       void *ctx);

/* Resynchronisation between inferences (boards with a radio barrier, nrf52840dk: docs/design/
 * dead-nodes.md, "Split networks"). The nodes this node has declared dead (bit j = node j). */
uint32_t cisl_mixer_dead_peers(void);

/* A sign of life from node j outside a round (a resynchronisation beacon or reply): rounds wait for
 * it again from the next one on; prints `peer state=alive` if it was dead. */
void cisl_mixer_peer_heard(uint32_t inference, uint8_t j);

/* Board hook: run one armed Mixer round to its end (on hardware: mx_start over the RADIO HAL; on
 * the virtual testbed: the slot-level medium). The round is part `part` of exchange `sg` of
 * `inference`; `slot_us` is its slot length. Returns >= 0 or < 0 on error. */
int32_t cisl_board_mixer_round(mx_state *s, uint16_t sg, uint8_t part, uint32_t inference, uint32_t slot_us);

/* Board hook: which senders' messages of exchange `sg` arrived (got[j] != 0) and in which slot of
 * its round the last fragment of each became available (slot[j], MX_NO_SLOT if never; for a message
 * split over rounds, the slot in the round of its last piece), called once per exchange after the
 * last round; boards that do not record it do nothing. */
void cisl_board_mixer_delivery(uint16_t sg, uint32_t inference, const uint8_t *got, const uint16_t *slot,
                               uint8_t nodes);

#ifdef __cplusplus
}
#endif

#endif /* CISL_MIXER_TRANSPORT_H */
