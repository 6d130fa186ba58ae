/* somegather over Mixer; see cisl_mixer_transport.h. */
#include "cisl_mixer_transport.h"

#include <stddef.h>
#include <string.h>

#include "cisl_log.h"
#include "cisl_node_api.h"

#define HEADER_BYTES 8u

/* A peer whose rows were due in this many consecutive rounds without a sign of life (docs/design/
 * dead-nodes.md) is declared dead: rounds stop waiting for it and its messages count as lost. */
#ifndef CISL_DEAD_AFTER_ROUNDS
#define CISL_DEAD_AFTER_ROUNDS 2u
#endif

/* One Mixer state, shared by all rounds (rounds run one at a time). */
static mx_state mixer;

/* Liveness of the other nodes, across rounds. */
static struct {
    uint8_t miss[MX_MAX_NODES]; /* consecutive rounds in which the node's rows were due but no sign came */
    uint32_t dead;              /* nodes declared dead */
} peers;

uint32_t cisl_mixer_dead_peers(void) { return peers.dead; }

/* The node that starts a round: the planned initiator, or the next live node after it. */
static uint8_t round_initiator(const cisl_mx_schedule *plan)
{
    for (uint8_t k = 0; k < plan->nodes; k++) {
        const uint8_t j = (uint8_t)((plan->initiator + k) % plan->nodes);
        if (!((peers.dead >> j) & 1u)) {
            return j;
        }
    }
    return cisl_node_id;
}

/* The nodes a round does not wait for: the dead ones — unless that is every other node. A node that
 * counts all the others dead (its radio was out for a while, or theirs) would otherwise end each round
 * at once, alone, and never listen long enough to hear them again; so it waits for them all, and
 * in-round silence ends the round if they really are gone (docs/design/dead-nodes.md, "Revival by
 * rows"). */
static uint32_t round_absent(const cisl_mx_schedule *plan)
{
    const uint32_t others = (plan->nodes >= 32u ? 0xFFFFFFFFu : (1u << plan->nodes) - 1u) & ~(1u << cisl_node_id);
    return (peers.dead & others) == others ? 0u : peers.dead;
}

/* The node that starts the round if `initiator` does not: the next live node after it. */
static uint8_t round_backup(const cisl_mx_schedule *plan, uint8_t initiator)
{
    for (uint8_t k = 1; k < plan->nodes; k++) {
        const uint8_t j = (uint8_t)((initiator + k) % plan->nodes);
        if (!((peers.dead >> j) & 1u)) {
            return j;
        }
    }
    return initiator; /* nobody else is alive: no backup */
}

static void peer_event(uint32_t inference, uint8_t j, const char *state, uint32_t rounds)
{
    cisl_line l;
    cisl_log_begin(&l, "peer");
    cisl_log_u32(&l, "inf", inference);
    cisl_log_u32(&l, "peer", j);
    cisl_log_str(&l, "state", state);
    cisl_log_u32(&l, "rounds", rounds);
    cisl_log_str(&l, "role", j == cisl_node.sink ? "sink" : j == cisl_mx_plan.initiator ? "initiator" : "node");
    cisl_log_end(&l);
}

/* After a round: `due` = nodes that had rows in it (senders, the initiator), `alive` = nodes this
 * node has a sign of life from (an intact packet, or one of their rows decoded). A node that heard
 * nothing at all (never synchronised) learns only that the initiator did not start the round. */
static void track_peers(uint32_t inference, uint32_t due, uint32_t alive, int synced, uint8_t initiator)
{
    if (!synced) {
        due = 1u << initiator;
    }
    for (uint8_t j = 0; j < cisl_mx_plan.nodes; j++) {
        const uint32_t b = 1u << j;
        if (j == cisl_node_id) {
            continue;
        }
        if (alive & b) {
            peers.miss[j] = 0;
            if (peers.dead & b) {
                peers.dead &= ~b;
                peer_event(inference, j, "alive", 0);
            }
        } else if ((due & b) && !(peers.dead & b) && ++peers.miss[j] >= CISL_DEAD_AFTER_ROUNDS) {
            peers.dead |= b;
            peer_event(inference, j, "dead", peers.miss[j]);
        }
    }
}

void cisl_mixer_peer_heard(uint32_t inference, uint8_t j)
{
    if (j >= cisl_mx_plan.nodes || j == cisl_node_id) {
        return;
    }
    peers.miss[j] = 0;
    if ((peers.dead >> j) & 1u) {
        peers.dead &= ~(1u << j);
        peer_event(inference, j, "alive", 0);
    }
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The header row identifies the round, so a node never takes rows of a stale or foreign round. */
static void header_of(uint8_t *h, uint32_t inference, uint16_t sg, uint8_t part)
{
    put_u32(h, inference);
    h[4] = (uint8_t)sg;
    h[5] = (uint8_t)(sg >> 8);
    h[6] = part;
    h[7] = 0xC5u; /* marker */
}

/* A control round's header (elastic images): the marker's low nibble is the initiator's mode for
 * the inference, which no node can predict, so only the other bytes must match. */
#define CONTROL_MARK 0xD0u
static int header_matches(const uint8_t *h, const uint8_t *want, int control)
{
    if (!control) {
        return memcmp(h, want, HEADER_BYTES) == 0;
    }
    return memcmp(h, want, HEADER_BYTES - 1u) == 0 && (h[HEADER_BYTES - 1u] & 0xF0u) == CONTROL_MARK;
}

/* The message being put together from its pieces. The schedule puts a split message's pieces in
 * consecutive rounds and starts no other message before it is complete (codegen/plan/
 * mixer_schedule.py check_pieces), so at most one is in flight, in cisl_mx_plan.reassembly. */
#define NO_MESSAGE 0xFFu

typedef struct {
    uint8_t node;     /* its sender, NO_MESSAGE when none is in flight */
    uint8_t complete; /* every fragment of its pieces so far decoded */
    uint16_t slot;    /* the slot its latest piece was complete in (of that piece's round) */
    uint32_t next;    /* bytes of it so far: the offset of its next piece */
} cisl_mx_rx;

/* Bytes of the message in a piece's rows (its last fragment is zero-padded). */
static uint32_t piece_end(const cisl_mx_frag *f, uint16_t payload)
{
    const uint32_t span = (uint32_t)f->rows * payload;
    return f->nbytes - f->offset < span ? f->nbytes : f->offset + span;
}

/* This node's rows of round r: the pieces of its `len`-byte message the round carries. */
static int write_pieces(const cisl_mx_round *r, const uint8_t *msg, uint32_t len)
{
    for (uint8_t i = 0; i < r->nsenders; i++) {
        const cisl_mx_frag *f = &r->senders[i];
        if (f->node != cisl_node_id) {
            continue;
        }
        if (len != f->nbytes || f->offset >= len) {
            return -1; /* the node's message does not have the size the plan says */
        }
        for (uint16_t k = 0; k < f->rows; k++) {
            const uint32_t off = f->offset + (uint32_t)k * r->payload;
            const uint32_t n = len - off < r->payload ? len - off : r->payload;
            if (mx_write(&mixer, (uint16_t)(f->first_row + k), msg + off, (uint16_t)n) != MX_OK) {
                return -1;
            }
        }
    }
    return 0;
}

/* After round r: copy every other sender's piece into the reassembly buffer and hand each message
 * whose last piece this was to on_rx, if all its fragments (in every round) decoded. `header_ok`:
 * the round's header arrived, so its rows are this round's; `lost`: a sender whose piece counts as
 * lost (NO_MESSAGE: none). < 0 if the plan breaks the order. */
static int take_pieces(const cisl_mx_round *r, int header_ok, uint8_t lost, cisl_mx_rx *rx, uint8_t *got,
                       uint16_t *slot, cisl_rx_fn on_rx, void *ctx)
{
    for (uint8_t i = 0; i < r->nsenders; i++) {
        const cisl_mx_frag *f = &r->senders[i];
        if (f->node == cisl_node_id) {
            continue;
        }
        if (f->offset == 0u) {
            if (rx->node != NO_MESSAGE) {
                return -1; /* a message starts before the split one in flight is complete */
            }
            rx->node = f->node;
            rx->complete = 1u;
            rx->next = 0u;
        } else if (rx->node != f->node || rx->next != f->offset) {
            return -1; /* a piece that continues no message in flight */
        }
        const uint32_t end = piece_end(f, r->payload);
        if (f->offset >= end || end > cisl_mx_plan.max_message) {
            return -1;
        }
        rx->complete = (uint8_t)(rx->complete && header_ok && f->node != lost);
        uint16_t last = mx_row_slot(&mixer, 0);
        for (uint16_t k = 0; k < f->rows && rx->complete; k++) {
            uint16_t plen = 0;
            const uint8_t *row = mx_read(&mixer, (uint16_t)(f->first_row + k), &plen);
            if (row == NULL || row == MX_WEAK_ZERO) {
                rx->complete = 0u;
                break;
            }
            const uint32_t off = f->offset + (uint32_t)k * r->payload;
            const uint32_t n = end - off < r->payload ? end - off : r->payload;
            memcpy(cisl_mx_plan.reassembly + off, row, n);
            const uint16_t at = mx_row_slot(&mixer, (uint16_t)(f->first_row + k));
            last = at > last ? at : last;
        }
        rx->slot = last;
        rx->next = end;
        if (end == f->nbytes) { /* the message's last piece */
            if (rx->complete) {
                got[f->node] = 1;
                slot[f->node] = rx->slot;
                if (on_rx != NULL) {
                    on_rx(ctx, f->node, cisl_mx_plan.reassembly, f->nbytes);
                }
            }
            rx->node = NO_MESSAGE;
        }
    }
    return 0;
}

/* control >= 0: the round is a control round and `control` the mode the header announces if this
 * node starts it; *heard (control rounds) gets the announced mode of the header this node decoded,
 * or -1. */
static int run_round(const cisl_mx_round *r, uint16_t sg, uint8_t part, uint32_t inference, const uint8_t *msg,
                     uint32_t len, cisl_mx_rx *rx, uint8_t *got, uint16_t *slot, cisl_rx_fn on_rx, void *ctx,
                     int control, int *heard)
{
    const cisl_mx_schedule *plan = &cisl_mx_plan;
    mx_config cfg;
    const uint8_t initiator = round_initiator(plan);
    memset(&cfg, 0, sizeof cfg);
    cfg.num_nodes = plan->nodes;
    cfg.initiator = initiator;
    cfg.generation_size = r->generation;
    cfg.payload_size = r->payload;
    cfg.round_length = r->deadline;
    cfg.features = MX_FEAT_DEFAULT;
    cfg.termination = plan->termination;
    cfg.linger_slots = r->linger;
    /* a different seed every round; every node derives the same from the schedule */
    cfg.seed = 0x9E3779B9u * (inference + 1u) ^ ((uint32_t)sg << 8) ^ part;
    const uint32_t absent = round_absent(plan);
    cfg.absent = absent;
    /* a dead initiator is taken over inside the round by the next live node (docs/design/dead-nodes.md) */
    const uint8_t backup = round_backup(plan, initiator);
    if (backup != initiator && r->takeover > 0u && r->takeover < r->deadline) {
        cfg.backup = backup;
        cfg.takeover_slots = r->takeover;
    }
    /* every sender owns as many slots of the round's first pass as it has rows (row 0, the header,
     * goes out in the initiator's slot 0): from the plan alone, so that every node, whatever its
     * view of who is dead, derives the same slot owners */
    for (uint8_t i = 0; i < r->nsenders; i++) {
        cfg.slot_shares[r->senders[i].node] = (uint8_t)(cfg.slot_shares[r->senders[i].node] + r->senders[i].rows);
    }
    if (mx_init(&mixer, &cfg, cisl_node_id) != MX_OK) {
        return -1;
    }
    /* every row's sender, so that a sender that died since the last round is declared silent inside
     * this one instead of holding it to its deadline (docs/design/dead-nodes.md) */
    if (mx_row_source(&mixer, 0, 1, initiator) != MX_OK) {
        return -1;
    }
    for (uint8_t i = 0; i < r->nsenders; i++) {
        const cisl_mx_frag *f = &r->senders[i];
        if (mx_row_source(&mixer, f->first_row, f->rows, f->node) != MX_OK) {
            return -1;
        }
    }
    uint8_t header[HEADER_BYTES];
    header_of(header, inference, sg, part);
    if (control >= 0) {
        header[HEADER_BYTES - 1u] = (uint8_t)(CONTROL_MARK | ((uint8_t)control & 0x0Fu));
    }
    if (cisl_node_id == initiator && mx_write(&mixer, 0, header, HEADER_BYTES) != MX_OK) {
        return -1;
    }
    /* the backup holds the same header (the plan's), in case it must start the round itself */
    if (cfg.takeover_slots && cisl_node_id == cfg.backup && mx_backup_header(&mixer, header, HEADER_BYTES) != MX_OK) {
        return -1;
    }

    uint32_t due = 1u << initiator;
    for (uint8_t i = 0; i < r->nsenders; i++) {
        const cisl_mx_frag *f = &r->senders[i];
        if ((absent >> f->node) & 1u) {
            /* a dead sender's rows are weak zeros at every node that knows it dead: nobody waits */
            for (uint16_t k = 0; k < f->rows; k++) {
                if (mx_write(&mixer, (uint16_t)(f->first_row + k), NULL, 0) != MX_OK) {
                    return -1;
                }
            }
            continue;
        }
        due |= 1u << f->node;
    }
    if (write_pieces(r, msg, len) != 0) { /* this node is never dead to itself */
        return -1;
    }
    if (mx_arm(&mixer, cisl_node_id == initiator ? MX_ARM_INITIATOR : MX_ARM_LISTENER) != MX_OK) {
        return -1;
    }
    if (cisl_board_mixer_round(&mixer, sg, part, inference, r->slot_us) < 0) {
        return -1;
    }
    /* heard directly, or its rows seen coded here (they travel: it is alive even where it is never
     * heard, and even where it counts as dead and its rows' packets are dropped) */
    uint32_t alive = mx_alive_map(&mixer);
    /* a round whose header did not arrive (or belongs to another round) delivers nothing */
    uint16_t hlen = 0;
    const uint8_t *h = mx_read(&mixer, 0, &hlen);
    const int header_ok = h != NULL && h != MX_WEAK_ZERO && hlen >= HEADER_BYTES && header_matches(h, header, control >= 0);
    if (heard != NULL) {
        *heard = header_ok ? (int)(h[HEADER_BYTES - 1u] & 0x0Fu) : -1;
    }
    const int taken = mx_taken_over(&mixer); /* the backup started it: its header is no sign of the initiator */
    if (header_ok && !taken) {
        alive |= 1u << initiator;
    }
    track_peers(inference, due & ~(1u << cisl_node_id), alive, mx_synced(&mixer) || cisl_node_id == initiator,
                initiator);
    /* a round whose header is not this round's delivers nothing, and loses the pieces it carried; a
     * round the backup started loses the initiator's (it was dead, late, or in another round) */
    return take_pieces(r, header_ok, taken ? initiator : NO_MESSAGE, rx, got, slot, on_rx, ctx);
}

int cisl_mixer_exchange(uint16_t sg, uint32_t inference, const uint8_t *msg, uint32_t len, cisl_rx_fn on_rx,
                        void *ctx)
{
    const cisl_mx_schedule *plan = &cisl_mx_plan;
    uint8_t got[MX_MAX_NODES];
    uint16_t slot[MX_MAX_NODES];
    memset(got, 0, sizeof got);
    for (uint8_t j = 0; j < MX_MAX_NODES; j++) {
        slot[j] = MX_NO_SLOT;
    }
    if (sg >= plan->nexchanges) {
        return -1;
    }
    const cisl_mx_exchange *ex = &plan->exchanges[sg];
    cisl_mx_rx rx = {NO_MESSAGE, 0u, 0u, 0u};
    int rc = 0;
    for (uint8_t part = 0; part < ex->nrounds && rc == 0; part++) {
        rc = run_round(&ex->rounds[part], sg, part, inference, msg, len, &rx, got, slot, on_rx, ctx, -1, NULL);
    }
    if (rc == 0 && rx.node != NO_MESSAGE) {
        rc = -1; /* the plan ends the exchange in the middle of a message */
    }
    cisl_board_mixer_delivery(sg, inference, got, slot, plan->nodes);
    return rc;
}

int cisl_mixer_control(uint32_t inference, uint8_t mode, const uint8_t *row, uint32_t len, cisl_rx_fn on_rx,
                       void *ctx)
{
    const cisl_mx_schedule *plan = &cisl_mx_plan;
    if (plan->control == NULL || mode > 0x0Fu) {
        return -2;
    }
    uint8_t got[MX_MAX_NODES];
    uint16_t slot[MX_MAX_NODES];
    memset(got, 0, sizeof got);
    cisl_mx_rx rx = {NO_MESSAGE, 0u, 0u, 0u};
    int heard = -1;
    const int rc = run_round(plan->control, plan->nexchanges, 0u, inference, row, len, &rx, got, slot, on_rx, ctx,
                             mode, &heard);
    if (rc != 0) {
        return -2;
    }
    return heard;
}
