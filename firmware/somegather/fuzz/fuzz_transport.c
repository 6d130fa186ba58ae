/* Fuzz harness for the somegather-over-Mixer transport (firmware/somegather/cisl_mixer_transport.c):
 * whole exchanges, messages split over several Mixer rounds, dead and revived peers.
 *
 * libFuzzer (clang -fsanitize=fuzzer,address,undefined -DMX_FUZZ_LIBFUZZER): the fuzzer calls
 * LLVMFuzzerTestOneInput. Without -DMX_FUZZ_LIBFUZZER this file builds (gcc or clang) as a replay
 * driver: main() runs every file named on the command line (the tests replay fuzz/corpus_transport/).
 * Build: -Ifirmware/somegather -Ifirmware/runtime -Ifirmware/mixer, this file and mixer.c.
 *
 * The transport is included into this translation unit, so the harness reaches its static state
 * (`mixer`, the observed node's Mixer state; `peers`, reset per input) and provides the symbols the
 * generated node code normally provides (cisl_mx_plan, cisl_node_id, cisl_node) as mutable copies:
 * the macros below turn the header's `extern const cisl_mx_schedule cisl_mx_plan;` into a pointer
 * declaration that this file defines. The transport's code is compiled unchanged.
 *
 * One input: a plan for n = 2..16 nodes, one of them the observed node (whose transport runs), a
 * planned initiator, a sink, 1..3 exchanges, each with P (8..240: the header row needs 8 bytes),
 * a largest generation (2..40 rows), a message size per node (0..382 bytes), a deadline and a
 * linger; the harness packs the pieces exactly as codegen/plan/mixer_schedule.py `_pack` does
 * (row 0 the header, senders in node order, a message that does not fit is split: its first piece
 * fills the current round, whole rounds follow, its last piece shares its round with the next
 * senders), both termination policies; then, per node, whether and when its radio is dead (from
 * some exchange on, for good or for a while). Then the inferences run every exchange through
 * cisl_mixer_exchange; the rest of the input is consumed round by round (losses, the other nodes'
 * view of who is dead, a stale initiator) and call by call (a wrong message length).
 *
 * cisl_board_mixer_round plays the other n - 1 nodes: Mixer instances with the observed node's
 * configuration and their own ids (absent: an input-chosen view), each writes the header if it is
 * the round's initiator and its piece rows from its true message (a function of node, exchange,
 * inference and byte), and all n are stepped slot by slot through the step API with input-driven
 * losses and capture until all are finished or the deadline. A node whose radio is dead is not
 * stepped (the observed node is, but hears nothing and reaches nobody).
 *
 * Checked, per round (before and after it runs): the configuration the transport derived (n,
 * initiator = the planned one or the next live one in the dead set its `peer` events announced,
 * absent = that dead set, G, P, deadline, linger, termination, slot length), the rows it wrote (its
 * own pieces with its message, zero-padded; weak zeros for the senders it thinks dead; the header
 * if it is the initiator; nothing else), every row it decoded equals what its writer wrote;
 * per `peer` log event: peer < n and not the observed node, dead and alive alternate per peer,
 * `rounds` is CISL_DEAD_AFTER_ROUNDS for dead and 0 for alive, the role, and exactly the events
 * the detection rule of docs/design/dead-nodes.md gives (a peer due in CISL_DEAD_AFTER_ROUNDS
 * rounds in a row without a sign of life is declared dead; a sign of life revives it); per
 * exchange: on_rx delivers exactly the true message of its sender (all nbytes, bit for bit), never
 * the observed node's own, at most once, and exactly the messages every fragment of whose every
 * piece the observed node decoded in rounds whose header matched; the delivery report (once per
 * exchange, after its last round) says the same, with the slot of the last piece; the return code
 * is 0 for a valid call and < 0 for a message of the wrong length; and a synchronised node never
 * rejects an intact packet in a round in which all nodes agree on who is dead.
 *
 * -DFZ_AGREED_VIEWS: the other nodes always share the observed node's view of the dead (no node
 * holds a row that another node thinks weak). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define cisl_mx_plan (*fz_plan)
#define cisl_node_id (*fz_node_id)
#define cisl_node (*fz_node)
#include "../cisl_mixer_transport.c"

#define FZ_MAX_N 16u
#define FZ_MAX_EX 3u
#define FZ_MAX_ROUNDS 12u /* Mixer rounds per exchange (the plan's sizes are halved until they fit) */
#define FZ_MAX_G 40u
#define FZ_MAX_CALLS 18u  /* exchanges run per input: inferences x exchanges */
/* Work budget per input, in G * (coding vector + payload bytes) per node stepped per slot: about
 * 130 slots of a 16-node round at G = 40, P = 240, or a dozen small rounds; once it is spent,
 * rounds are not stepped and no further exchange starts, which keeps an execution within about
 * 5 ms under ASan/UBSan. */
#ifndef FZ_BUDGET
#define FZ_BUDGET 20000000u
#endif

#if FZ_MAX_N > MX_MAX_NODES || FZ_MAX_G > MX_MAX_G
#error "the harness exceeds the Mixer build's maxima"
#endif

#include "../../mixer/fuzz/fuzz_input.h"

/* What the generated node code provides, per input. */
static cisl_mx_schedule PLAN;
static cisl_node_info INFO;
static uint8_t OBS;
const cisl_mx_schedule *fz_plan = &PLAN;
const uint8_t *fz_node_id = &OBS;
const cisl_node_info *fz_node = &INFO;

/* The plan. */
static struct {
    unsigned n, obs, nex, ninf;
    uint32_t inf0;
    uint16_t size[FZ_MAX_EX][FZ_MAX_N]; /* message bytes of each node in each exchange */
    uint8_t dead_from[FZ_MAX_N], dead_for[FZ_MAX_N], dies[FZ_MAX_N]; /* radio deaths, in exchange calls */
    cisl_mx_frag frag[FZ_MAX_EX][FZ_MAX_ROUNDS][FZ_MAX_N];
    cisl_mx_round round[FZ_MAX_EX][FZ_MAX_ROUNDS];
    cisl_mx_exchange ex[FZ_MAX_EX];
} F;

/* The exchange under way and what the harness knows of the observed node. */
static struct {
    int active, reported;
    uint16_t sg;
    uint32_t inf;
    unsigned call, parts;
    uint8_t ok[FZ_MAX_N];          /* the sender's message so far: every row decoded, headers matched */
    uint8_t deliverable[FZ_MAX_N]; /* ... up to its last piece */
    uint16_t slot[FZ_MAX_N];       /* the slot the transport must report for it */
    uint8_t delivered[FZ_MAX_N];
    /* peer tracking: the dead set the events announced, the detection rule's miss counters, the
     * events the last round must produce */
    uint32_t dead, expect_dead, expect_alive;
    uint8_t miss[FZ_MAX_N];
    unsigned events, deliveries, rounds, rejected, takeovers;
} X;

static mx_state NODE[FZ_MAX_N]; /* the other nodes (NODE[obs] unused: the transport's `mixer`) */
static uint8_t TXB[FZ_MAX_N][MX_MAX_PACKET_LEN];
static uint32_t WORK, RNG;

static uint32_t rnd(void)
{
    RNG ^= RNG << 13;
    RNG ^= RNG >> 17;
    RNG ^= RNG << 5;
    return RNG;
}

/* Byte i of node j's true message in exchange sg of inference inf. */
static uint8_t true_byte(unsigned j, unsigned sg, uint32_t inf, uint32_t i)
{
    uint32_t x = (j + 1u) * 0x9E3779B1u ^ (sg + 1u) * 0x85EBCA77u ^ inf * 0xC2B2AE3Du ^ (i + 1u) * 0x27D4EB2Fu;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    return (uint8_t)(x ^ (x >> 8));
}

static int radio_dead(unsigned j, unsigned call)
{
    return F.dies[j] && call >= F.dead_from[j] && (F.dead_for[j] == 0u || call < (unsigned)F.dead_from[j] + F.dead_for[j]);
}

/* ---- the plan (codegen/plan/mixer_schedule.py _pack) ---------------------------------------- */

static void add_piece(unsigned e, unsigned r, unsigned j, unsigned first, unsigned rows, unsigned nbytes,
                      unsigned offset)
{
    cisl_mx_round *rr = &F.round[e][r];
    cisl_mx_frag *f = &F.frag[e][r][rr->nsenders++];
    f->node = (uint8_t)j;
    f->first_row = (uint16_t)first;
    f->rows = (uint16_t)rows;
    f->nbytes = nbytes;
    f->offset = offset;
}

/* Exchange e's rounds at payload p and at most g rows a round: their number, 0 if nobody sends,
 * FZ_MAX_ROUNDS + 1 if they do not fit. */
static unsigned pack(unsigned e, unsigned p, unsigned g)
{
    unsigned nr = 1, used = 1, j;
    F.round[e][0].nsenders = 0;
    for (j = 0; j < F.n; ++j) {
        unsigned m = F.size[e][j], r = (m + p - 1u) / p, done = 0;
        if (r == 0u)
            continue;
        if (r <= g - 1u) { /* a whole message, in this round or the next */
            if (used + r > g) {
                if (nr == FZ_MAX_ROUNDS)
                    return FZ_MAX_ROUNDS + 1u;
                F.round[e][nr++].nsenders = 0;
                used = 1;
            }
            add_piece(e, nr - 1u, j, used, r, m, 0);
            used += r;
            continue;
        }
        while (done < r) { /* pieces: the rest of this round, whole rounds, then the rest */
            unsigned take;
            if (used == g) {
                if (nr == FZ_MAX_ROUNDS)
                    return FZ_MAX_ROUNDS + 1u;
                F.round[e][nr++].nsenders = 0;
                used = 1;
            }
            take = g - used < r - done ? g - used : r - done;
            add_piece(e, nr - 1u, j, used, take, m, done * p);
            used += take;
            done += take;
        }
    }
    return F.round[e][0].nsenders ? nr : 0u; /* only the first round can be empty: nobody sends */
}

/* ---- the log (firmware/runtime/cisl_log.h): `peer` events ---------------------------------- */

static struct {
    int open;
    char event[16], state[16], role[16];
    uint32_t inf, peer, rounds;
    unsigned have;
} L;

static void copy_str(char *dst, const char *src)
{
    size_t k = strlen(src);
    CHECK(k < 16u);
    memcpy(dst, src, k + 1u);
}

void cisl_log_set_node(uint32_t node) { (void)node; }

void cisl_log_begin(cisl_line *l, const char *event)
{
    CHECK(!L.open && X.active);
    memset(&L, 0, sizeof L);
    L.open = 1;
    copy_str(L.event, event);
    l->len = 0;
}

void cisl_log_u32(cisl_line *l, const char *key, uint32_t value)
{
    (void)l;
    CHECK(L.open);
    if (strcmp(key, "inf") == 0) {
        L.inf = value;
        L.have |= 1u;
    } else if (strcmp(key, "peer") == 0) {
        L.peer = value;
        L.have |= 2u;
    } else {
        CHECK(strcmp(key, "rounds") == 0);
        L.rounds = value;
        L.have |= 4u;
    }
}

void cisl_log_str(cisl_line *l, const char *key, const char *value)
{
    (void)l;
    CHECK(L.open);
    if (strcmp(key, "state") == 0) {
        copy_str(L.state, value);
        L.have |= 8u;
    } else {
        CHECK(strcmp(key, "role") == 0);
        copy_str(L.role, value);
        L.have |= 16u;
    }
}

/* The transport logs nothing else. */
void cisl_log_i32(cisl_line *l, const char *key, int32_t value)
{
    (void)l, (void)key, (void)value;
    CHECK(0);
}

void cisl_log_hex32(cisl_line *l, const char *key, uint32_t value)
{
    (void)l, (void)key, (void)value;
    CHECK(0);
}

void cisl_log_hexbytes(cisl_line *l, const char *key, const uint8_t *data, uint32_t n)
{
    (void)l, (void)key, (void)data, (void)n;
    CHECK(0);
}

void cisl_log_end(cisl_line *l)
{
    uint32_t b;
    (void)l;
    CHECK(L.open);
    L.open = 0;
    CHECK(strcmp(L.event, "peer") == 0 && L.have == 31u);
    CHECK(L.inf == X.inf && X.parts > 0u); /* after a round of this exchange */
    CHECK(L.peer < F.n && L.peer != F.obs);
    b = 1u << L.peer;
    CHECK(strcmp(L.role, L.peer == INFO.sink ? "sink" : L.peer == PLAN.initiator ? "initiator" : "node") == 0);
    if (strcmp(L.state, "dead") == 0) {
        CHECK(!(X.dead & b) && (X.expect_dead & b));
        CHECK(L.rounds == CISL_DEAD_AFTER_ROUNDS);
        X.dead |= b;
        X.expect_dead &= ~b;
    } else {
        CHECK(strcmp(L.state, "alive") == 0);
        CHECK((X.dead & b) && (X.expect_alive & b));
        CHECK(L.rounds == 0u);
        X.dead &= ~b;
        X.expect_alive &= ~b;
    }
    X.events++;
}

/* ---- the board ------------------------------------------------------------------------------ */

/* The round initiator the transport must pick: the planned one, or the next live one. */
/* The nodes a round does not wait for, as the transport arms it (round_absent): the dead ones,
 * unless that is every other node — then none. */
static uint32_t absent_of(uint32_t dead, unsigned me)
{
    const uint32_t others = ((1u << F.n) - 1u) & ~(1u << me);
    return (dead & others) == others ? 0u : dead;
}

static unsigned expected_initiator(void)
{
    unsigned k;
    for (k = 0; k < F.n; ++k) {
        unsigned j = (PLAN.initiator + k) % F.n;
        if (!((X.dead >> j) & 1u))
            return j;
    }
    return F.obs;
}

/* The backup the transport must arm: the next live node after the round's initiator. */
static unsigned expected_backup(unsigned init)
{
    unsigned k;
    for (k = 1; k < F.n; ++k) {
        unsigned j = (init + k) % F.n;
        if (!((X.dead >> j) & 1u))
            return j;
    }
    return init;
}

/* Row k of piece f as its sender wrote it from its message of inference inf: P bytes, zero-padded. */
static void check_piece_row(const uint8_t *p, uint16_t len, const cisl_mx_frag *f, unsigned k, unsigned P,
                            unsigned sg, uint32_t inf)
{
    uint32_t off = f->offset + k * P, i;
    CHECK(p != NULL && p != MX_WEAK_ZERO && len == P);
    for (i = 0; i < P; ++i)
        CHECK(p[i] == (off + i < f->nbytes ? true_byte(f->node, sg, inf, off + i) : 0u));
}

static void check_header_row(const uint8_t *p, uint16_t len, const uint8_t *h, unsigned P)
{
    unsigned i;
    CHECK(p != NULL && p != MX_WEAK_ZERO && len == P);
    CHECK(memcmp(p, h, HEADER_BYTES) == 0);
    for (i = HEADER_BYTES; i < P; ++i)
        CHECK(p[i] == 0u);
}

/* Whether any node knows the round was taken over by the backup. */
static int taken_any(mx_state *const *st)
{
    unsigned i;
    for (i = 0; i < F.n; ++i)
        if (mx_taken_over(st[i]))
            return 1;
    return 0;
}

/* Step the n nodes slot by slot: `stepped` nodes run; only `radio` nodes are heard and hear. */
static void step_round(const mx_config *cfg, uint32_t stepped, uint32_t radio, int agree, unsigned loss,
                       unsigned obs_loss)
{
    mx_state *st[FZ_MAX_N];
    const uint16_t plen = mx_packet_len(cfg);
    const uint32_t unit = cfg->generation_size * (MX_CV_BYTES(cfg->generation_size) + cfg->payload_size);
    unsigned i, t;
    for (i = 0; i < F.n; ++i)
        st[i] = i == F.obs ? &mixer : &NODE[i];
    for (t = 0; t <= cfg->round_length + 1u && WORK < FZ_BUDGET; ++t) {
        int act[FZ_MAX_N];
        unsigned txs[FZ_MAX_N], ntx = 0, live = 0;
        for (i = 0; i < F.n; ++i) {
            uint16_t len = 0;
            act[i] = -1;
            if (!((stepped >> i) & 1u) || mx_finished(st[i]))
                continue;
            live++;
            act[i] = mx_slot(st[i], (uint16_t)t, TXB[i], &len);
            CHECK(act[i] == MX_ACT_OFF || act[i] == MX_ACT_RX || act[i] == MX_ACT_TX);
            if (act[i] == MX_ACT_TX) {
                CHECK(len == plen && mx_packet_check(cfg, TXB[i], len) == MX_OK);
                if ((radio >> i) & 1u)
                    txs[ntx++] = i;
            }
        }
        if (live == 0u)
            break;
        for (i = 0; i < F.n; ++i) {
            unsigned src, l;
            int synced0, r;
            if (act[i] != MX_ACT_RX || !((radio >> i) & 1u) || ntx == 0u)
                continue;
            src = txs[rnd() % ntx]; /* capture: one of the slot's transmitters */
            l = i == F.obs ? obs_loss : loss;
            if (l && (rnd() & 255u) < l)
                continue;
            synced0 = mx_synced(st[i]);
            r = mx_receive(st[i], (uint16_t)t, TXB[src], plen);
            if (r < 0) {
                uint32_t silenced = 0;
                unsigned q;
                for (q = 0; q < F.n; ++q)
                    silenced |= mx_silent_map(st[q]);
                X.rejected++;
                /* an intact packet is dropped only where views of the dead differ: a node holds a
                 * row the sender thinks weak or the reverse, or the sender counts a node as done
                 * that the receiver waits for (MX_PKT_ALL_FULL before the receiver's full rank) */
                /* in-round silence differs between nodes too, and so does row 0 once the backup started
                 * the round while the initiator was alive (weak at one node, coded at another) */
                CHECK(!synced0 || !agree || silenced || taken_any(st));
                CHECK(!synced0 || r == MX_E_PKT_CODING || r == MX_E_PKT_INFO || r == MX_E_PKT_FLAGS);
            }
        }
        for (i = 0; i < F.n; ++i)
            if (act[i] >= 0)
                CHECK(mx_slot_end(st[i], (uint16_t)t) == MX_OK);
        WORK += live * unit;
    }
}

int32_t cisl_board_mixer_round(mx_state *s, uint16_t sg, uint8_t part, uint32_t inference, uint32_t slot_us);
void cisl_board_mixer_delivery(uint16_t sg, uint32_t inference, const uint8_t *got, const uint16_t *slot,
                               uint8_t nodes);

static reader *IN;

int32_t cisl_board_mixer_round(mx_state *s, uint16_t sg, uint8_t part, uint32_t inference, uint32_t slot_us)
{
    const mx_config *cfg = &s->h.cfg;
    const cisl_mx_round *r;
    const unsigned P = cfg->payload_size;
    uint8_t header[HEADER_BYTES], written[HEADER_BYTES];
    uint32_t all = (1u << F.n) - 1u, radio = 0, stepped, view[FZ_MAX_N] = {0}, weak_somewhere, life, due, b;
    unsigned i, j, k, b0, b1, b2, mode, stale, hkind, obs_loss, loss, init;
    uint32_t rows_inf = inference;
    int agree = 1, has_header, hdr_ok, synced, taken;
    uint16_t len;
    const uint8_t *p;

    CHECK(X.active && s == &mixer && sg == X.sg && inference == X.inf && part == X.parts);
    CHECK(part < F.ex[sg].nrounds);
    CHECK(X.expect_dead == 0u && X.expect_alive == 0u); /* the previous round's events all came */
    r = &F.ex[sg].rounds[part];
    CHECK(slot_us == r->slot_us);
    X.parts++;
    X.rounds++;

    /* the configuration: the plan's round, the transport's view of the dead */
    init = expected_initiator();
    CHECK(cfg->num_nodes == F.n && cfg->initiator == init && cfg->generation_size == r->generation);
    CHECK(cfg->payload_size == r->payload && cfg->round_length == r->deadline && cfg->linger_slots == r->linger);
    CHECK(cfg->termination == PLAN.termination && cfg->features == MX_FEAT_DEFAULT);
    CHECK(cfg->absent == absent_of(X.dead, F.obs));
    if (r->takeover && expected_backup(init) != init && r->takeover < r->deadline)
        CHECK(cfg->takeover_slots == r->takeover && cfg->backup == expected_backup(init));
    else
        CHECK(cfg->takeover_slots == 0u);
    CHECK(mx_config_check(cfg) == MX_OK);
    { /* the weighted first pass: every sender's rows in this round, from the plan alone */
        unsigned share[MX_SHARE_NODES] = {0};
        for (i = 0; i < r->nsenders; ++i)
            share[r->senders[i].node] += r->senders[i].rows;
        for (i = 0; i < MX_SHARE_NODES; ++i)
            CHECK(cfg->slot_shares[i] == share[i]);
    }

    /* what the transport wrote: its header if it starts the round, its own pieces, weak zeros for
     * the senders it thinks dead, nothing else */
    header_of(header, inference, sg, part);
    p = mx_read(s, 0, &len);
    if (init == F.obs)
        check_header_row(p, len, header, P);
    else
        CHECK(p == NULL && mx_row_status(s, 0) == MX_ROW_MISSING);
    for (i = 0; i < r->nsenders; ++i) {
        const cisl_mx_frag *f = &r->senders[i];
        for (k = 0; k < f->rows; ++k) {
            const uint16_t row = (uint16_t)(f->first_row + k);
            p = mx_read(s, row, &len);
            if (f->node == F.obs)
                check_piece_row(p, len, f, k, P, sg, inference);
            else if ((absent_of(X.dead, F.obs) >> f->node) & 1u)
                CHECK(p == MX_WEAK_ZERO && mx_row_status(s, row) == MX_ROW_WEAK);
            else
                CHECK(p == NULL && mx_row_status(s, row) == MX_ROW_MISSING);
        }
    }

    /* this round: losses (everywhere, and extra at the observed node), the seed of the loss and
     * capture draws, the other nodes' view of the dead, a stale initiator */
    b0 = rd(IN);
    b1 = rd(IN);
    b2 = rd(IN);
    loss = (b0 & 7u) < 4u ? 0u : ((b0 & 7u) - 3u) * 40u;
    obs_loss = (b0 >> 3) & 7u;
    obs_loss = obs_loss < 5u ? loss : obs_loss == 5u ? 100u : obs_loss == 6u ? 200u : 256u;
    RNG = (b1 + 1u) * 0x9E3779B9u ^ X.rounds * 0x85EBCA6Bu;
    if (RNG == 0u)
        RNG = 1u;
#ifdef FZ_AGREED_VIEWS /* the other nodes share the observed node's view of the dead */
    mode = 0u;
#else
    mode = b2 & 3u;
#endif
    /* a stale network: only where the observed node can check it, as a listener of the initiator's
     * header; a node that starts the round (the initiator, or the backup taking over) writes the
     * header itself and cannot tell stale rows from current ones */
    stale = init != F.obs && !(cfg->takeover_slots && cfg->backup == F.obs) ? (b2 >> 2) & 3u : 0u;
    hkind = b2 >> 4;
    b = mode == 2u ? rd16(IN) : 0u;

    for (j = 0; j < F.n; ++j)
        if (!radio_dead(j, X.call))
            radio |= 1u << j;
    stepped = radio | (1u << F.obs);
    memcpy(written, header, HEADER_BYTES);
    if (stale >= 2u) { /* the initiator is in another round: its header (and maybe its rows) differ */
        uint32_t hinf = inference;
        uint16_t hsg = sg;
        uint8_t hpart = part;
        switch (hkind & 3u) {
        case 0:
            hinf = inference + 1u + (hkind >> 2);
            break;
        case 1:
            hinf = inference - 1u;
            break;
        case 2:
            hsg = (uint16_t)(sg + 1u + (hkind >> 2));
            break;
        default:
            hpart = (uint8_t)(part + 1u + (hkind >> 2));
            break;
        }
        header_of(written, hinf, hsg, hpart);
        if (hkind == 15u)
            written[7] ^= 0x40u; /* a foreign marker */
        CHECK(memcmp(written, header, HEADER_BYTES) != 0);
        if (stale == 3u)
            rows_inf = inference + 1u + (hkind >> 2);
    }
    has_header = init == F.obs || ((stepped >> init) & 1u);

    /* the other nodes: the observed node's configuration, their own ids and view of the dead */
    weak_somewhere = X.dead;
    view[F.obs] = absent_of(X.dead, F.obs);
    for (j = 0; j < F.n; ++j) {
        mx_config c = *cfg;
        if (j == F.obs || !((stepped >> j) & 1u))
            continue;
        view[j] = absent_of((mode == 0u ? X.dead : mode == 1u ? all & ~radio : mode == 2u ? b : 0u) & all &
                            ~(1u << j) & ~(1u << init), j);
        weak_somewhere |= view[j];
        c.absent = view[j];
        if ((view[j] >> c.backup) & 1u)
            c.takeover_slots = 0; /* it thinks the backup dead: it has none (and drops TAKEOVER packets) */
        CHECK(mx_init(&NODE[j], &c, (uint8_t)j) == MX_OK);
        CHECK(mx_row_source(&NODE[j], 0, 1, (uint8_t)init) == MX_OK); /* as the transport names them */
        for (i = 0; i < r->nsenders; ++i)
            CHECK(mx_row_source(&NODE[j], r->senders[i].first_row, r->senders[i].rows, r->senders[i].node) == MX_OK);
        if (j == init)
            CHECK(mx_write(&NODE[j], 0, written, HEADER_BYTES) == MX_OK);
        if (c.takeover_slots && j == c.backup) /* in the same round as the initiator: its header */
            CHECK(mx_backup_header(&NODE[j], written, HEADER_BYTES) == MX_OK);
        for (i = 0; i < r->nsenders; ++i) {
            const cisl_mx_frag *f = &r->senders[i];
            for (k = 0; k < f->rows; ++k) {
                const uint16_t row = (uint16_t)(f->first_row + k);
                if (f->node == j) {
                    uint8_t buf[MX_MAX_P];
                    const uint32_t off = f->offset + k * P;
                    uint32_t q, n = f->nbytes - off < P ? f->nbytes - off : P;
                    for (q = 0; q < n; ++q)
                        buf[q] = true_byte(j, sg, rows_inf, off + q);
                    CHECK(mx_write(&NODE[j], row, buf, (uint16_t)n) == MX_OK);
                } else if ((view[j] >> f->node) & 1u) {
                    CHECK(mx_write(&NODE[j], row, NULL, 0) == MX_OK);
                }
            }
        }
        CHECK(mx_arm(&NODE[j], j == init ? MX_ARM_INITIATOR : MX_ARM_LISTENER) == MX_OK);
    }
    /* agreement: every stepped node with a radio has the same view of the others, and none of them
     * is in it (then no intact packet contradicts what a node knows) */
    for (i = 0; i < F.n; ++i)
        for (j = 0; j < F.n; ++j)
            if (i != j && ((radio & stepped) >> i & 1u) && ((radio & stepped) >> j & 1u) &&
                (((view[i] >> j) & 1u) || ((view[i] ^ view[j]) & radio & stepped & ~(1u << i) & ~(1u << j))))
                agree = 0;

    if (WORK < FZ_BUDGET) {
        /* the configuration as armed: the state's own copy changes in the round (silence adds to
         * absent, which may then name the initiator: no longer a configuration mx_packet_check takes) */
        const mx_config armed = *cfg;
        step_round(&armed, stepped, radio, agree, loss, obs_loss);
    }

    /* nodes declared silent inside the round (by any node) may have weak rows anywhere */
    weak_somewhere |= mx_silent_map(s);
    for (j = 0; j < F.n; ++j)
        if (j != F.obs && ((stepped >> j) & 1u))
            weak_somewhere |= mx_silent_map(&NODE[j]);

    /* what the observed node has: the header, every sender's rows as their writer wrote them */
    p = mx_read(s, 0, &len);
    CHECK(p != MX_WEAK_ZERO);
    taken = mx_taken_over(s);
    if (p != NULL) {
        CHECK(has_header || taken);
        /* the backup's copy is the observed node's own if it took over, else the network's view */
        check_header_row(p, len, init == F.obs || (taken && cfg->backup == F.obs) ? header : written, P);
    }
    hdr_ok = p != NULL && memcmp(p, header, HEADER_BYTES) == 0;
    synced = mx_synced(s) || init == F.obs;
    /* a sign of life only from a node that ran this round (no node that is not there is revived) */
    CHECK((mx_alive_map(s) & ~stepped) == 0u);
    CHECK((mx_heard_map(s) & ~mx_alive_map(s)) == 0u);
    life = mx_alive_map(s) | (hdr_ok && !taken ? 1u << init : 0u); /* the backup's header: no sign of it */
    X.takeovers += (unsigned)taken;
    due = 1u << init;
    for (i = 0; i < r->nsenders; ++i) {
        const cisl_mx_frag *f = &r->senders[i];
        const unsigned jn = f->node;
        int piece = 1;
        uint16_t last = mx_row_slot(s, 0);
        if (synced)
            due |= 1u << jn;
        for (k = 0; k < f->rows; ++k) {
            const uint16_t row = (uint16_t)(f->first_row + k);
            const int status = mx_row_status(s, row);
            p = mx_read(s, row, &len);
            if (status == MX_ROW_DECODED) {
                CHECK((stepped >> jn) & 1u);
                check_piece_row(p, len, f, k, P, sg, jn == F.obs ? inference : rows_inf);
                CHECK(jn == F.obs || ((mx_alive_map(s) >> jn) & 1u)); /* a decoded row is a sign of life */
                last = mx_row_slot(s, row) > last ? mx_row_slot(s, row) : last;
            } else {
                CHECK(jn != F.obs);
                CHECK(status == MX_ROW_MISSING ? p == NULL : status == MX_ROW_WEAK && p == MX_WEAK_ZERO);
                if (status == MX_ROW_WEAK)
                    CHECK((weak_somewhere >> jn) & 1u);
                piece = 0;
            }
        }
        if (jn == F.obs)
            continue;
        if (f->offset == 0u)
            X.ok[jn] = 1;
        X.ok[jn] = (uint8_t)(X.ok[jn] && piece && hdr_ok && !(taken && jn == init)); /* lost when taken over */
        if (f->nbytes - f->offset <= (uint32_t)f->rows * P) { /* its last piece */
            X.deliverable[jn] = X.ok[jn];
            X.slot[jn] = X.ok[jn] ? last : MX_NO_SLOT;
        }
    }

    /* the detection rule (docs/design/dead-nodes.md): the events this round must produce */
    for (j = 0; j < F.n; ++j) {
        const uint32_t bj = 1u << j;
        if (j == F.obs)
            continue;
        if (life & bj) {
            X.miss[j] = 0;
            if (X.dead & bj)
                X.expect_alive |= bj;
        } else if ((due & bj) && !(X.dead & bj) && ++X.miss[j] >= CISL_DEAD_AFTER_ROUNDS) {
            X.expect_dead |= bj;
        }
    }
    return 0;
}

static void on_rx(void *ctx, uint8_t sender, const uint8_t *data, uint32_t len)
{
    uint32_t i;
    CHECK(ctx == &X && X.active && !X.reported);
    CHECK(sender < F.n && sender != F.obs);
    CHECK(!X.delivered[sender]);
    CHECK(X.deliverable[sender]);
    CHECK(len > 0u && len == F.size[X.sg][sender]);
    for (i = 0; i < len; ++i) {
        uint8_t want = true_byte(sender, X.sg, X.inf, i);
#ifdef FZ_SELFTEST_WRONG_MESSAGE /* the tests check that the harness notices a wrong message */
        want ^= (uint8_t)(i == len / 2u);
#endif
        CHECK(data[i] == want);
    }
    X.delivered[sender] = 1;
    X.deliveries++;
}

void cisl_board_mixer_delivery(uint16_t sg, uint32_t inference, const uint8_t *got, const uint16_t *slot,
                               uint8_t nodes)
{
    unsigned j;
    CHECK(X.active && !X.reported);
    CHECK(sg == X.sg && inference == X.inf && nodes == F.n);
    X.reported = 1;
    for (j = 0; j < F.n; ++j) {
        CHECK((got[j] != 0u) == (X.delivered[j] != 0u));
        CHECK(X.delivered[j] == X.deliverable[j]);
        CHECK(slot[j] == (got[j] ? X.slot[j] : MX_NO_SLOT));
    }
}

/* Exchange sg of inference inf at the observed node; `wrong`: hand it a message of the wrong length. */
static void run_exchange(unsigned sg, uint32_t inf, int wrong)
{
    const unsigned len = F.size[sg][F.obs];
    const unsigned ulen = wrong ? (len ? len + 1u : 5u) : len;
    uint8_t *msg = ulen ? (uint8_t *)malloc(ulen) : NULL; /* exactly its size: ASan sees over-reads */
    unsigned i;
    int rc;
    CHECK(ulen == 0u || msg != NULL);
    for (i = 0; i < ulen; ++i)
        msg[i] = true_byte(F.obs, sg, inf, i);
    X.active = 1;
    X.reported = 0;
    X.sg = (uint16_t)sg;
    X.inf = inf;
    X.parts = 0;
    memset(X.ok, 0, sizeof X.ok);
    memset(X.deliverable, 0, sizeof X.deliverable);
    memset(X.delivered, 0, sizeof X.delivered);
    rc = cisl_mixer_exchange((uint16_t)sg, inf, msg, ulen, on_rx, &X);
    X.active = 0;
    CHECK(X.reported);
    CHECK(X.expect_dead == 0u && X.expect_alive == 0u);
    if (wrong && len) {
        CHECK(rc == -1); /* the round with its first piece refuses it */
    } else {
        CHECK(rc == 0);
        CHECK(X.parts == F.ex[sg].nrounds);
    }
    free(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader in = {data, size, 0};
    unsigned b, e, j, c, max_message = 0;
    uint8_t *reassembly;

    memset(&F, 0, sizeof F);
    memset(&X, 0, sizeof X);
    memset(&L, 0, sizeof L);
    memset(&peers, 0, sizeof peers); /* the transport's state across rounds */
    memset(&mixer, 0, sizeof mixer);
    IN = &in;
    WORK = 0;

    /* header: n, observed node, planned initiator, sink, then exchanges / inferences / termination
     * (and a large first inference number: the seed and header arithmetic wrap) */
    F.n = 2u + rd(&in) % 15u;
    F.obs = rd(&in) % F.n;
    OBS = (uint8_t)F.obs;
    PLAN.nodes = (uint8_t)F.n;
    PLAN.initiator = (uint8_t)(rd(&in) % F.n);
    memset(&INFO, 0, sizeof INFO);
    INFO.plan_hash = "fuzz";
    INFO.node = F.obs;
    INFO.nodes = F.n;
    INFO.sink = rd(&in) % F.n;
    b = rd(&in);
    F.nex = 1u + (b & 3u) % 3u;
    F.ninf = 1u + ((b >> 2) & 7u) % 6u;
    PLAN.termination = ((b >> 5) & 3u) == 3u ? MX_TERM_DEADLINE : MX_TERM_DONE;
    if (b & 0x80u) {
        F.inf0 = rd16(&in);
        F.inf0 |= (uint32_t)rd16(&in) << 16;
    }

    /* per exchange: P, the largest generation, the deadline and linger, every node's message size */
    for (e = 0; e < F.nex; ++e) {
        unsigned pb = rd(&in), gb = rd(&in), db = rd(&in), lb = rd(&in), p, g, nr, k;
        p = 8u + pb % ((gb & 0x40u) ? 233u : 57u);
        g = 2u + (gb & 63u) % (FZ_MAX_G - 1u);
        for (j = 0; j < F.n; ++j) {
            unsigned s = rd(&in);
            F.size[e][j] = (uint16_t)(s < 64u ? 0u : (s - 64u) * ((gb & 0x80u) ? 2u : 1u));
        }
        while ((nr = pack(e, p, g)) > FZ_MAX_ROUNDS) /* too many rounds: smaller messages */
            for (j = 0; j < F.n; ++j)
                F.size[e][j] = (uint16_t)(F.size[e][j] / 2u);
        for (k = 0; k < nr; ++k) {
            cisl_mx_round *rr = &F.round[e][k];
            const cisl_mx_frag *last = &F.frag[e][k][rr->nsenders - 1u];
            rr->generation = (uint16_t)(last->first_row + last->rows);
            rr->payload = (uint16_t)p;
            /* the planner's 3G + 200, or a shorter one (rounds that end before all have full rank) */
            rr->deadline = (uint16_t)((db & 3u) == 0u ? 3u * rr->generation + 200u : rr->generation + 8u + (db >> 2));
            rr->linger = (uint16_t)(lb % 16u < rr->deadline ? lb % 16u : rr->deadline - 1u); /* < R */
            rr->slot_us = 300u + 4u * p + 17u * k;
            /* bit 4 of the linger byte: a backup initiator, after the planner's 2n + 8 scan slots or
             * (bit 5) after 1..4 (it then often starts the round although the initiator is alive) */
            if (lb & 0x10u) {
                const unsigned t = (lb & 0x20u) ? 1u + (lb >> 6) : 2u * F.n + 8u;
                rr->takeover = (uint16_t)(t < rr->deadline ? t : rr->deadline - 1u);
            }
            rr->senders = F.frag[e][k];
        }
        F.ex[e].rounds = nr ? F.round[e] : NULL;
        F.ex[e].nrounds = (uint8_t)nr;
        for (j = 0; j < F.n; ++j)
            max_message = F.size[e][j] > max_message ? F.size[e][j] : max_message;
    }
    /* per node: its radio dies (bit 7) at exchange call `from` for `for` calls (0: for good) */
    for (j = 0; j < F.n; ++j) {
        b = rd(&in);
        F.dies[j] = (uint8_t)(b >> 7);
        F.dead_from[j] = (uint8_t)(b & 15u);
        F.dead_for[j] = (uint8_t)((b >> 4) & 7u);
    }
    reassembly = (uint8_t *)malloc(max_message ? max_message : 1u); /* exactly the largest message */
    CHECK(reassembly != NULL);
    PLAN.max_message = max_message;
    PLAN.reassembly = reassembly;
    PLAN.exchanges = F.ex;
    PLAN.nexchanges = (uint16_t)F.nex;

    /* the inferences, every exchange of each; per call a byte (low nibble 15: wrong length) */
    for (c = 0; c < F.ninf * F.nex && c < FZ_MAX_CALLS && WORK < FZ_BUDGET; ++c) {
        X.call = c;
        run_exchange(c % F.nex, F.inf0 + c / F.nex, (rd(&in) & 15u) == 15u);
    }
    CHECK(cisl_mixer_exchange((uint16_t)F.nex, F.inf0, NULL, 0, on_rx, &X) == -1); /* no such exchange */
#ifdef FZ_VERBOSE /* -DFZ_VERBOSE: one line per input (what a corpus entry exercises) */
    fprintf(stderr, "n=%u obs=%u init=%u sink=%u term=%u calls=%u rounds=%u", F.n, F.obs, PLAN.initiator,
            INFO.sink, PLAN.termination, c, X.rounds);
    for (e = 0; e < F.nex; ++e)
        fprintf(stderr, " ex%u:P=%u,rounds=%u", e, F.ex[e].nrounds ? F.round[e][0].payload : 0u, F.ex[e].nrounds);
    fprintf(stderr, " delivered=%u events=%u dead=%#x rejected=%u taken=%u work=%u\n", X.deliveries, X.events,
            X.dead, X.rejected, X.takeovers, WORK);
#endif
    free(reassembly);
    return 0;
}

#ifndef MX_FUZZ_LIBFUZZER
#include "../../mixer/fuzz/fuzz_replay.h"
#endif
