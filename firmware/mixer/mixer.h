/* Mixer: random linear network coding over GF(2) on synchronous transmissions.
 *
 * cisl's own implementation of the protocol of Herrmann, Mager and Zimmerling (SenSys 2018); see
 * docs/design/mixer.md for the packet layout, the round mechanics and what differs from the
 * published code. Every line here is cisl's.
 *
 * One round: n nodes share a generation of G messages ("rows") of P bytes each. A node writes the
 * rows it owns (mx_write), is armed as initiator or listener (mx_arm), then steps through slots;
 * in each slot it transmits a random GF(2) combination of the rows it holds, receives one, or
 * sleeps. Receptions are reduced on the fly (Gaussian elimination); at the end mx_read returns
 * every row the node can isolate.
 *
 * No dynamic allocation and no mutable globals: all state is one mx_state, so any number of
 * instances can live in one process. Sizes are bounded at compile time by MX_MAX_NODES, MX_MAX_G
 * and MX_MAX_P (override with -D); the actual n, G, P and round length are runtime configuration.
 *
 * Two ways to run a round:
 *   - the slot-level step API (mx_slot / mx_receive / mx_slot_end), which a radio driver or a
 *     simulator calls once per slot (mx_slot_batch / mx_deliver_batch step many instances);
 *   - mx_start, a blocking loop over the step API through a small radio HAL (mx_radio_hal). */
#ifndef MX_MIXER_H
#define MX_MIXER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- compile-time maxima (size the state) ------------------------------------------------ */

#ifndef MX_MAX_NODES
#define MX_MAX_NODES 32u /* at most 32: node sets are one 32-bit word */
#endif
#ifndef MX_MAX_G
#define MX_MAX_G 256u /* generation size (rows per round) */
#endif
#ifndef MX_MAX_P
#define MX_MAX_P 248u /* payload bytes per row */
#endif
#ifndef MX_MAX_PACKET_LEN
#define MX_MAX_PACKET_LEN 255u /* PHY payload limit: 255 on BLE, 127 on IEEE 802.15.4 */
#endif

#define MX_CV_WORDS(g) (((g) + 31u) / 32u)                     /* coding vector, 32-bit words */
#define MX_PAYLOAD_WORDS(p) (((p) + 3u) / 4u)                  /* payload, 32-bit words */
#define MX_ROW_WORDS(g, p) (MX_CV_WORDS(g) + MX_PAYLOAD_WORDS(p)) /* one stored row */

/* The row pool. Rows are stored with the runtime stride MX_ROW_WORDS(G, P), so a build may set a
 * smaller pool than the default (the largest G times the largest row) when the configurations it
 * serves need less; mx_init rejects a configuration whose G * stride does not fit. */
#ifndef MX_POOL_WORDS
#define MX_POOL_WORDS (MX_MAX_G * MX_ROW_WORDS(MX_MAX_G, MX_MAX_P))
#endif

/* Packet length for n nodes, generation size g and payload p (see docs/design/mixer.md §2):
 * 4 header bytes, coding vector ceil(g/8), payload p, info vector ceil(max(g, n)/8). */
#define MX_CV_BYTES(g) (((g) + 7u) / 8u)
#define MX_INFO_BYTES(n, g) ((((g) > (n) ? (g) : (n)) + 7u) / 8u)
#define MX_PACKET_LEN(n, g, p) (4u + MX_CV_BYTES(g) + (p) + MX_INFO_BYTES(n, g))

/* Quiet end (MX_TERM_DONE): a node with full rank that has accepted no packet for this many slots
 * ends, once every node is known to be in the round (or all are known to have full rank). Every node
 * still in the round sends in its own slot once per turn of n slots, so the silence means the others
 * have left (knowing that all, this node included, have full rank) or cannot be heard; without it a
 * node whose last acknowledgement was lost ran to the deadline (2 nodes, 10 % loss: 1 round in 5).
 * Eight turns, at least 32 slots: 16 packets of a lone neighbour lost in a row at 30 % loss is 4e-9
 * (docs/design/mixer.md §6). A compile-time tunable, like those at the top of mixer.c. */
#ifndef MX_QUIET_SLOTS
#define MX_QUIET_SLOTS(n) (8u * (n) > 32u ? 8u * (n) : 32u)
#endif

/* Packet layout (docs/design/mixer.md §2). Every packet of a round has MX_PACKET_LEN bytes:
 *   byte 0-1  slot number, little-endian
 *   byte 2    sender id
 *   byte 3    flags: bits 0-3 info type, bit 4 SILENT, bit 5 ALL_FULL (the two forecast bits),
 *             bit 6 FULL_RANK, bit 7 TAKEOVER (the round was started by the backup initiator)
 *   then      coding vector, MX_CV_BYTES(G): row i = byte i/8, bit i%8 (LSB first)
 *   then      payload, P bytes
 *   then      info vector, MX_INFO_BYTES(n, G): a row set (request, weak-zero map; bit i = row i)
 *             or a node set (full-rank map; bit j = node j), as the info type says */
#define MX_PKT_HEADER_LEN 4u
#define MX_PKT_INFO_MASK 0x0Fu
#define MX_INFO_NONE 0u       /* info vector all zero */
#define MX_INFO_REQUEST 1u    /* rows the sender is missing (needs MX_FEAT_REQUESTS) */
#define MX_INFO_FULL_RANK 2u  /* nodes the sender knows to have full rank */
#define MX_INFO_WEAK_ZEROS 3u /* rows the sender knows to be weak zeros (needs MX_FEAT_WEAK_ZEROS) */
#define MX_PKT_SILENT 0x10u   /* forecast: the sender's round ends before its next owned slot */
#define MX_PKT_ALL_FULL 0x20u /* forecast: the sender knows every node has full rank (it ends soon) */
#define MX_PKT_FULL_RANK 0x40u /* the sender has full rank */
#define MX_PKT_TAKEOVER 0x80u /* the round was started by cfg.backup (only with takeover_slots > 0) */

#define MX_NO_SLOT 0xFFFFu /* "never" in slot-valued statistics; also the largest round length + 1 */

/* ---- configuration ---------------------------------------------------------------------- */

/* Feature switches (mx_config.features). All nodes of a network must use the same. */
#define MX_FEAT_COORDINATED_TX 0x01u /* the slot owner sends; others stay silent if it is a neighbour */
#define MX_FEAT_REQUESTS 0x02u       /* row requests in the info vector; suppliers answer them */
#define MX_FEAT_WEAK_ZEROS 0x04u     /* mx_write(row, NULL, 0) marks a row unused; weak-zero maps */
#define MX_FEAT_ALL (MX_FEAT_COORDINATED_TX | MX_FEAT_REQUESTS | MX_FEAT_WEAK_ZEROS)
/* What deployed rounds use. Requests are off: on hallway16 and on lossy channels they made rounds
 * longer (G = 128: all full rank at 190.9 vs 157.3 slots) and no variant of answering measured
 * better than off (docs/design/mixer.md, "Feature evidence"). */
#define MX_FEAT_DEFAULT (MX_FEAT_COORDINATED_TX | MX_FEAT_WEAK_ZEROS)

/* Termination policy (mx_config.termination). */
#define MX_TERM_DEADLINE 0u /* every node runs until the hard deadline, slot round_length - 1 */
#define MX_TERM_DONE 1u     /* a node ends once it has full rank and knows every node has; it then
                             * lingers up to linger_slots more slots so others learn it too (it
                             * stops earlier once every node has announced that it knows); the
                             * hard deadline still applies. Use linger_slots >= n. */

#define MX_SHARE_NODES 32u /* slot_shares entries: the node-set width, whatever MX_MAX_NODES is */
#define MX_OWNER_SLOTS (((MX_MAX_G + MX_MAX_NODES) + 3u) & ~3u) /* longest first pass of owned slots */

typedef struct {
    uint8_t num_nodes;        /* n: 1..MX_MAX_NODES; node ids are 0..n-1 */
    uint8_t initiator;        /* id of the node that sends first (must be armed MX_ARM_INITIATOR) */
    uint16_t generation_size; /* G: 1..MX_MAX_G */
    uint16_t payload_size;    /* P: 1..MX_MAX_P */
    uint16_t round_length;    /* R: hard deadline in slots (slots 0..R-1), 1..MX_NO_SLOT-1 */
    uint8_t features;         /* MX_FEAT_* */
    uint8_t termination;      /* MX_TERM_* */
    uint16_t linger_slots;    /* MX_TERM_DONE: slots to stay after learning that all have full rank */
    uint32_t seed;            /* PRNG seed; each node mixes in its id. Vary it per round. */
    uint32_t absent;          /* nodes this node knows to be out of the round (dead, bit j = node j):
                               * counted as having full rank and as acknowledged by MX_TERM_DONE,
                               * their owned slots are free. Their rows must be written as weak zeros
                               * (or not exist). Never this node or the initiator. 0: everyone. */
    uint8_t slot_shares[MX_SHARE_NODES]; /* MX_FEAT_COORDINATED_TX: owned slots of node j in the
                               * round's first pass (its rows to inject, usually); the pass has
                               * sum(shares) <= MX_OWNER_SLOTS slots, spread evenly, then slot s is
                               * owned by (s - pass) mod n. All zero: slot s is owned by s mod n. */
    uint16_t takeover_slots;  /* > 0: a backup initiator starts the round if it has heard nothing of it
                               * after this many scan slots (the initiator is dead, docs/design/
                               * dead-nodes.md); < round_length. 0: no backup. The same at every node. */
    uint8_t backup;           /* the backup initiator (with takeover_slots): not the initiator, not
                               * absent; it must be given the header row (mx_backup_header) */
    uint8_t reserved;         /* 0 */
} mx_config;

/* ---- status codes ----------------------------------------------------------------------- */

typedef enum {
    MX_OK = 0,
    MX_E_NULL = -1,        /* a required pointer is NULL */
    MX_E_NODES = -2,       /* num_nodes out of range */
    MX_E_GENERATION = -3,  /* generation_size out of range */
    MX_E_PAYLOAD = -4,     /* payload_size out of range */
    MX_E_ROUND = -5,       /* round_length out of range */
    MX_E_INITIATOR = -6,   /* initiator >= num_nodes */
    MX_E_PACKET_LEN = -7,  /* the packet would exceed MX_MAX_PACKET_LEN */
    MX_E_MEMORY = -8,      /* G * row stride exceeds MX_POOL_WORDS */
    MX_E_FEATURES = -9,    /* unknown feature bits */
    MX_E_TERMINATION = -10, /* unknown termination policy, or linger_slots >= round_length */
    MX_E_NODE_ID = -11,    /* node_id >= num_nodes */
    MX_E_ROW = -12,        /* row >= G */
    MX_E_LEN = -13,        /* message longer than P */
    MX_E_STATE = -14,      /* call not allowed now (e.g. write after arm, receive outside an RX slot) */
    MX_E_SLOT = -15,       /* slot argument goes backwards or does not match the current slot */
    MX_E_WEAK = -16,       /* weak zero written without MX_FEAT_WEAK_ZEROS */
    MX_E_MODE = -17,       /* unknown arm mode, or initiator/listener role does not match the config */
    MX_E_DUPLICATE = -18,  /* row written twice */
    MX_E_HAL = -19,        /* the radio HAL reported an error */
    MX_E_ABSENT = -20,     /* absent names an unknown node, this node or the initiator */
    MX_E_SHARES = -21,     /* slot_shares: a share for a node >= n, or a pass longer than MX_OWNER_SLOTS */
    MX_E_BACKUP = -22,     /* takeover_slots >= round_length, or backup is >= n, the initiator or absent */
    /* mx_receive: the packet was dropped (counted in rx_malformed unless noted) */
    MX_E_PKT_LEN = -32,     /* length != mx_packet_len */
    MX_E_PKT_SENDER = -33,  /* sender >= n, or sender == own id */
    MX_E_PKT_SLOT = -34,    /* slot number >= round_length */
    MX_E_PKT_FLAGS = -35,   /* unknown or disabled info type, TAKEOVER without a backup, inconsistent flags;
                             * in mx_receive also a packet of the other starter's grid (TAKEOVER) */
    MX_E_PKT_CODING = -36,  /* coding vector bits >= G, bits on known weak rows, or payload without
                             * coding vector */
    MX_E_PKT_INFO = -37,    /* info vector out of range or contradicting what this node knows */
    MX_E_PKT_WRONG_SLOT = -38 /* valid packet of another slot (counted in rx_wrong_slot) */
} mx_status;

/* mx_receive results >= 0 */
#define MX_RX_OK 0         /* accepted, rank unchanged */
#define MX_RX_INNOVATIVE 1 /* accepted, rank increased */

/* ---- state ------------------------------------------------------------------------------ */

#define MX_NODE_WORDS 1u /* node sets: one word, MX_MAX_NODES <= 32 */

typedef struct {
    uint32_t slots;             /* slots stepped while armed (mx_slot calls, incl. scanning) */
    uint32_t slots_missed;      /* slots skipped by the driver after synchronisation */
    uint32_t tx;                /* packets sent */
    uint32_t rx_ok;             /* valid packets received */
    uint32_t rx_innovative;     /* ... that raised the rank */
    uint32_t rx_non_innovative; /* ... whose coding vector was already in the span */
    uint32_t rx_malformed;      /* packets dropped as malformed */
    uint32_t rx_wrong_slot;     /* valid-looking packets of another slot, dropped */
    uint32_t rx_timeout;        /* RX slots without a valid packet */
    uint32_t radio_on_slots;    /* RX and TX slots */
    uint16_t slot_synced;       /* first slot on the grid (MX_NO_SLOT: never synchronised) */
    uint16_t slot_full_rank;    /* slot in which the rank reached G */
    uint16_t slot_all_full;     /* slot in which the node knew that every node had full rank */
    uint16_t slot_done;         /* last slot of the round for this node (MX_NO_SLOT while running) */
    uint16_t rank;              /* current rank */
    uint16_t slot_linger;       /* MX_TERM_DONE: slot in which the linger began (all full, and its own
                                 * full rank known to another node); MX_NO_SLOT if never */
} mx_counters;

/* Internal state. Treat as opaque; its size is MX_STATE_SIZE (see mx_state_size). */
typedef struct {
    mx_config cfg;
    mx_counters st;
    uint32_t rng[4];        /* xoshiro128** */
    uint32_t node_all;      /* bit set of all node ids */
    uint32_t fr_map;        /* nodes known to have full rank */
    uint32_t heard;         /* nodes ever heard this round */
    uint32_t gone;          /* nodes that announced they leave before their next owned slot */
    uint32_t req_from;      /* nodes whose request map is stored */
    uint32_t ack_map;       /* nodes known to know that every node has full rank */
    uint32_t seen;          /* nodes whose intact packets of this round arrived, accepted or not */
    uint32_t silenced;      /* nodes made absent inside the round (in-round silence, mx_silent_map) */
    uint32_t disputed;      /* nodes heard this round that another node declared silent (its weak-zero
                             * map names their rows): their full-rank bit counts only from their own
                             * packets (docs/design/dead-nodes.md, "A live node declared silent far away") */
    uint32_t coded_by;      /* nodes whose rows this node holds as weak zeros, seen in a coding vector of a
                             * dropped packet this round: they are alive (mx_alive_map) */
    uint16_t cvw;           /* coding vector words */
    uint16_t pw;            /* payload words */
    uint16_t stride;        /* row words */
    uint16_t pkt_len;
    uint16_t cv_bytes;
    uint16_t info_bytes;
    uint16_t rank;
    uint16_t cur_slot;      /* slot of the last mx_slot call (valid when synced) */
    uint16_t sync_slot;     /* slot of the first reception / initiator start */
    uint16_t end_slot;      /* last slot of the round (R - 1, or earlier with MX_TERM_DONE) */
    uint16_t next_slot;     /* the slot mx_slot expects next (valid when synced) */
    uint16_t sideload;      /* pivot of the latest innovative reception, MX_NO_SLOT if none */
    uint16_t answer;        /* requested row this slot's packet answers, MX_NO_SLOT if none */
    uint16_t scan_left;     /* listener: slots left to scan before giving up */
    uint8_t id;
    uint8_t phase;          /* internal slot phase */
    uint8_t mode;           /* arm mode */
    uint8_t synced;
    uint8_t finished;
    uint8_t dirty;          /* rows changed since the last back substitution */
    uint8_t wz_pending;     /* transmissions that should carry the weak-zero map */
    uint8_t tx_count;       /* transmissions, wraps; rotates the info type */
    uint8_t scan_slot;      /* the current slot is a scan (not synchronised at mx_slot) */
    uint8_t acked;          /* this node has sent a packet with MX_PKT_ALL_FULL */
    uint8_t fr_known;       /* another node is known to know that this node has full rank */
    uint8_t has_src;        /* mx_row_source named row sources: in-round silence is on */
    uint8_t weak_new;       /* weak rows were learnt from a map since the last silence check */
    uint8_t taken_over;     /* this node is on the backup's grid: it took over, or synchronised to its packet */
    uint8_t reserve;        /* the backup holds the header row in reserve (mx_backup_header) */
    uint8_t pad[1];
    uint16_t pass_len;      /* slots of the weighted first pass (0: plain s mod n) */
    uint16_t prep_slot;     /* slot whose random combination mx_prepare built (MX_NO_SLOT: none) */
    uint16_t fresh_pivot;   /* pivot of the latest innovative reception ... */
    uint16_t fresh_slot;    /* ... and its slot (MX_NO_SLOT: none yet) */
    uint16_t dispute_slot;  /* last slot in which a disputed node was heard */
    uint16_t heard_slot;    /* slot of the last accepted packet of this round (any sender); the quiet end counts from it */
    uint32_t mask_key;      /* per node key of the combination masks (a counter-based draw per slot) */
} mx_header;

typedef struct {
    mx_header h;
    uint32_t pivots[MX_CV_WORDS(MX_MAX_G)];     /* rows present (pivot i stored at position i) */
    uint32_t own[MX_CV_WORDS(MX_MAX_G)];        /* rows written by this node (not weak) */
    uint32_t unsent[MX_CV_WORDS(MX_MAX_G)];     /* own rows not yet sent systematically */
    uint32_t weak[MX_CV_WORDS(MX_MAX_G)];       /* rows known to be weak zeros */
    uint32_t coded[MX_CV_WORDS(MX_MAX_G)];      /* rows named by an accepted coding vector or written with data */
    uint32_t decoded[MX_CV_WORDS(MX_MAX_G)];    /* rows equal to e_row (valid when !dirty) */
    uint32_t prep_mask[MX_CV_WORDS(MX_MAX_G)];  /* rows mx_prepare combined into scratch[1] */
    uint32_t req[MX_MAX_NODES][MX_CV_WORDS(MX_MAX_G)]; /* last row request of each node */
    uint16_t req_slot[(MX_MAX_NODES + 1u) & ~1u]; /* slot of that request (even: keeps words aligned) */
    uint16_t rank_up[(MX_MAX_G + 1u) & ~1u];    /* slot in which each row's pivot appeared */
    uint8_t owner_of[MX_OWNER_SLOTS];           /* owner of each slot of the first pass */
    uint8_t row_src[(MX_MAX_G + 3u) & ~3u];     /* node + 1 whose message each row carries, 0: unknown */
    uint32_t scratch[2][MX_ROW_WORDS(MX_MAX_G, MX_MAX_P)]; /* RX reduction, TX combination */
    uint32_t pool[MX_POOL_WORDS];               /* rows: G * stride words */
} mx_state;

/* Bytes of mx_state for given maxima (what -DMX_MAX_NODES=N -DMX_MAX_G=G -DMX_MAX_P=P with the
 * default pool gives). mx_state_size() returns sizeof(mx_state) of this build. */
#define MX_STATE_BYTES(N, G, P)                                                                   \
    (sizeof(mx_header) + 4u * (7u * MX_CV_WORDS(G) + (N)*MX_CV_WORDS(G)) + 2u * (((N) + 1u) & ~1u) +         \
     2u * (((G) + 1u) & ~1u) + ((((G) + (N)) + 3u) & ~3u) + (((G) + 3u) & ~3u) + 4u * 2u * MX_ROW_WORDS(G, P) + 4u * (G)*MX_ROW_WORDS(G, P))
#define MX_STATE_SIZE (sizeof(mx_state))

/* ---- API -------------------------------------------------------------------------------- */

/* Arm modes. */
#define MX_ARM_INITIATOR 0u /* send in slot 0 (only the configured initiator) */
#define MX_ARM_LISTENER 1u  /* scan until the first valid packet, adopt its slot; give up after
                             * round_length slots of scanning (the backup: see mx_backup_header) */
#define MX_ARM_PASSIVE 2u   /* like a listener but never transmits (monitor / sink / tests) */

/* Slot actions returned by mx_slot. */
#define MX_ACT_OFF 0
#define MX_ACT_RX 1
#define MX_ACT_TX 2

/* Row status (mx_row_status). */
#define MX_ROW_MISSING 0
#define MX_ROW_DECODED 1
#define MX_ROW_WEAK 2

size_t mx_state_size(void);
/* Packet length of every packet of a round with this configuration; 0 if the config is invalid. */
uint16_t mx_packet_len(const mx_config *cfg);
/* Check a configuration without a state: MX_OK or the first error found. */
int mx_config_check(const mx_config *cfg);

/* Reset `s` for a new round as node `node_id`. Call before every round. */
int mx_init(mx_state *s, const mx_config *cfg, uint8_t node_id);
/* Write message `row` as a systematic row (coding vector e_row), zero-padded to P. data == NULL
 * marks a weak zero (needs MX_FEAT_WEAK_ZEROS; len ignored). Only before mx_arm. */
int mx_write(mx_state *s, uint16_t row, const void *data, uint16_t len);
/* Name the node whose message row `row` carries (first_row..first_row+rows-1 from node `node`).
 * Only before mx_arm. With MX_TERM_DONE it enables in-round silence: a node that has every row
 * but those of nodes it never heard and never saw in a coding vector, and has gained nothing for
 * MX_SILENCE_SLOTS(n, G) slots after the first pass, while it knows of no other node with full rank
 * (whose rows would prove the missing ones exist), declares them silent — their rows weak zeros,
 * the nodes absent for the rest of the round (mx_silent_map) — and spreads the weak-zero map, so a
 * node that died since the last round does not hold the round to its deadline
 * (docs/design/dead-nodes.md). Every node must name the same sources. */
int mx_row_source(mx_state *s, uint16_t first_row, uint16_t rows, uint8_t node);
/* The backup initiator's header row (cfg.backup, with cfg.takeover_slots; only before mx_arm):
 * row 0 as the initiator writes it. It is held in reserve and becomes this node's own row only if
 * the backup, armed as a listener, has heard nothing of the round after takeover_slots scan slots
 * (the initiator is dead): it then starts the round itself (slot 0 of its own grid) and marks
 * every packet MX_PKT_TAKEOVER. A node takes packets of one kind only, those of the grid it
 * synchronised to (or started): if the initiator was only late and starts a grid of its own, no
 * node mixes rows of both, so a node can lose messages but never decode a wrong row, even if the
 * two headers differ. In a round the backup started the planned initiator can be declared silent
 * like any sender (mx_row_source), and every node ends takeover_slots slots earlier, so the round
 * keeps its deadline. */
int mx_backup_header(mx_state *s, const void *data, uint16_t len);
/* Arm as MX_ARM_INITIATOR, MX_ARM_LISTENER or MX_ARM_PASSIVE. */
int mx_arm(mx_state *s, uint8_t mode);

/* ---- step API: per slot, call mx_slot, then (for MX_ACT_RX and a packet with good CRC)
 * mx_receive, then mx_slot_end. Before synchronisation the slot argument is ignored (the node
 * scans); after it, slots must not go backwards (gaps are missed slots), and mx_receive and
 * mx_slot_end take the slot of the preceding mx_slot; in the slot in which a listener
 * synchronises it adopts the slot number of the packet. tx_packet must hold mx_packet_len bytes. */
int mx_slot(mx_state *s, uint16_t slot, uint8_t *tx_packet, uint16_t *tx_len);
int mx_receive(mx_state *s, uint16_t slot, const uint8_t *packet, uint16_t len);
int mx_slot_end(mx_state *s, uint16_t slot);
int mx_finished(const mx_state *s);
int mx_synced(const mx_state *s);
/* The slot the node steps next (after synchronisation). */
uint16_t mx_next_slot(const mx_state *s);

/* Step `count` instances through one slot (slot == MX_NO_SLOT: each synchronised instance its own
 * next slot, as mx_start does — instances on different grids, e.g. after a backup took over, step
 * together). Phase 1: actions[i] = mx_slot(states[i], slot,
 * packets + i * stride, ...) (packets of non-transmitters are left as they are). Phase 2: instance
 * i receives packets + from[i] * stride if from[i] >= 0 (and its action was MX_ACT_RX), then
 * mx_slot_end; rx_status[i] (may be NULL) is mx_receive's result, or 127 if nothing was received.
 * It returns how many of the instances have finished (the simulator's loop condition, without a call
 * per instance and slot). stride >= mx_packet_len; all instances must share one configuration's
 * packet length. */
void mx_slot_batch(mx_state *const *states, uint16_t count, uint16_t slot, int8_t *actions, uint8_t *packets,
                   uint16_t stride);
uint16_t mx_deliver_batch(mx_state *const *states, uint16_t count, uint16_t slot, const uint8_t *packets,
                          uint16_t stride, const int16_t *from, int8_t *rx_status);

/* ---- blocking loop over a radio HAL ------------------------------------------------------ */

typedef struct {
    /* Block until the start of `slot` on the grid (radio off meanwhile). Called once per slot
     * after synchronisation (and for the initiator's slot 0). */
    void (*wait_slot)(void *ctx, uint16_t slot);
    /* Send `len` bytes at the start of the current slot and return when done: 0, or < 0. */
    int (*transmit)(void *ctx, const uint8_t *packet, uint16_t len);
    /* Listen in the current slot's receive window, or, with scan != 0 (not synchronised), for
     * one slot length without a grid. Returns the length of a packet received with a good CRC
     * (copied to buf, at most max bytes), 0 if none, < 0 on error; *rx_time is the timestamp of
     * its address event in HAL ticks. */
    int (*receive)(void *ctx, uint8_t *buf, uint16_t max, int scan, uint32_t *rx_time);
    /* A valid packet of `slot` arrived at rx_time: align the grid to it (drift control). */
    void (*sync)(void *ctx, uint16_t slot, uint32_t rx_time);
    /* The round is over for this node: radio off. */
    void (*off)(void *ctx);
    /* Optional, both or neither (NULL: transmit and receive block until the slot's packet is over).
     * listen arms the receiver for the current slot (or starts a scan) and returns at once; receive
     * then only waits for the outcome. With tx_done, transmit only arms the transmission and returns;
     * tx_done waits until the packet is out (0, or < 0). In between mx_start runs mx_prepare, so the
     * next packet is combined while this slot's packet is on the air. */
    int (*listen)(void *ctx, int scan);
    int (*tx_done)(void *ctx);
    /* Optional: this node, the backup initiator, starts the round now (mx_backup_header): put
     * slot 0 on the grid as the board does before mx_start for the initiator. NULL: nothing to do. */
    void (*initiate)(void *ctx);
} mx_radio_hal;

/* Run the armed round to its end. Returns the node's last slot (>= 0: the slot it was done in, or,
 * if it never was, the last slot it stepped), or < 0 (an MX_E_* code) on error. */
int32_t mx_start(mx_state *s, const mx_radio_hal *hal, void *ctx);

/* Combine the next slot's random packet in advance (optional; issue 15, the M4 budget). Call it
 * during a slot, after mx_slot and before mx_receive — while that slot's packet is on the air — and
 * mx_slot of the next slot then only adds the sideload and serialises, instead of XORing about half of
 * the node's rows in the short gap between two packets. The packet is the same whether or not this
 * was called: its rows are drawn per slot from the rows held before the previous slot's reception
 * (mx_slot leaves out the row that reception added, which joins as the sideload), with a mask that
 * depends only on the seed, the node and the slot. Reading rows (mx_read, mx_row_status,
 * mx_coded_row) in between discards the prepared combination. MX_OK, or MX_E_STATE outside a slot. */
int mx_prepare(mx_state *s);

/* ---- results ---------------------------------------------------------------------------- */

/* Marker returned by mx_read for a weak-zero row (compare the pointer). */
extern const uint8_t mx_weak_zero[1];
#define MX_WEAK_ZERO (&mx_weak_zero[0])

/* Decoded payload of `row` (P bytes, valid until the next call that changes the state), NULL if
 * the row cannot be isolated, MX_WEAK_ZERO for a weak zero. Works below full rank (partial
 * decoding). *len (may be NULL) gets P, or 0 for NULL / MX_WEAK_ZERO. */
const uint8_t *mx_read(mx_state *s, uint16_t row, uint16_t *len);
int mx_row_status(mx_state *s, uint16_t row);
uint16_t mx_rank(const mx_state *s);
/* The reduced row (row-reduced echelon form) with pivot `pivot`: coding vector (ceil(G/8) bytes,
 * bit i = byte i/8 bit i%8) and payload (P bytes); either pointer may be NULL. Returns 1 if such
 * a row exists, 0 if not, < 0 on error. The reduced rows determine the span uniquely. */
int mx_coded_row(mx_state *s, uint16_t pivot, uint8_t *cv, uint8_t *payload);
/* Counters of the round so far (points into the state; ->rank is the current rank). */
const mx_counters *mx_stats(const mx_state *s);
/* Slot in which row `row` became available (its pivot appeared), MX_NO_SLOT if not (yet). */
uint16_t mx_row_slot(const mx_state *s, uint16_t row);
/* Nodes this node knows to have full rank (bit i = node i). */
uint32_t mx_full_rank_map(const mx_state *s);
/* Nodes from which an intact packet of this round arrived (it passed mx_packet_check; it may still
 * have been dropped for contradicting this node's knowledge): the sign of life the layer above uses
 * to detect dead nodes across rounds. */
uint32_t mx_heard_map(const mx_state *s);
/* Nodes with a sign of life this round: mx_heard_map, and every node whose rows (named by
 * mx_row_source) appeared in a coding vector this node received, accepted or dropped. A node that
 * is never heard directly (far down a hallway, behind a relay) is alive when its rows travel, even
 * at a node that counts it dead and so drops the packets that carry them
 * (docs/design/dead-nodes.md, "Revival by rows"). */
uint32_t mx_alive_map(const mx_state *s);
/* Nodes this node treated as absent for the rest of the round: declared silent (mx_row_source) or
 * learnt so from another node's weak-zero map. Not including mx_config.absent. */
uint32_t mx_silent_map(const mx_state *s);
/* 1 if this node is on the backup initiator's grid (it took over, or synchronised to a packet marked
 * MX_PKT_TAKEOVER), 0 if not: its row 0 is then the backup's copy of the header. */
int mx_taken_over(const mx_state *s);

/* Stateless structural check of a packet (what any node of this configuration would accept
 * before looking at its own state): MX_OK or the MX_E_PKT_* reason. */
int mx_packet_check(const mx_config *cfg, const uint8_t *packet, uint16_t len);

#ifdef __cplusplus
}
#endif

#endif /* MX_MIXER_H */
