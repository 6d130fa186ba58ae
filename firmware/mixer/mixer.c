/* Mixer protocol core: configuration, GF(2) elimination, packets, TX decisions, slot steps.
 * See mixer.h for the API and docs/design/mixer.md for the protocol. */
#include "mixer.h"

#include <string.h>

/* The node sets are single words, the packet length a byte. */
typedef char mx_check_nodes[(MX_MAX_NODES >= 1u && MX_MAX_NODES <= 32u) ? 1 : -1];
typedef char mx_check_g[(MX_MAX_G >= 1u && MX_MAX_G < MX_NO_SLOT) ? 1 : -1];
typedef char mx_check_len[(MX_MAX_PACKET_LEN >= 8u && MX_MAX_PACKET_LEN <= 0xFFFFu) ? 1 : -1];
/* The documented size formula matches the layout (default pool only). */
typedef char mx_check_size[(MX_POOL_WORDS != MX_MAX_G * MX_ROW_WORDS(MX_MAX_G, MX_MAX_P) ||
                            sizeof(mx_state) == MX_STATE_BYTES(MX_MAX_NODES, MX_MAX_G, MX_MAX_P))
                               ? 1
                               : -1];

const uint8_t mx_weak_zero[1] = {0};

/* ---- tunables (slots, as functions of n and G) -------------------------------------------- */

/* For this many slots after synchronising, a node treats every node it has not heard yet as a
 * possible neighbour (keeps silent in its slots, counts it in the density estimate). */
#ifndef MX_DISCOVERY_SLOTS
#define MX_DISCOVERY_SLOTS(n) (2u * (n) > 16u ? 2u * (n) : 16u)
#endif
/* A row request is answered for this many slots after it was heard. */
#ifndef MX_REQUEST_TTL
#define MX_REQUEST_TTL(n) (2u * (n))
#endif
/* A node requests rows once it misses at most this many. */
#ifndef MX_REQUEST_MISSING
#define MX_REQUEST_MISSING(g) ((g) / 4u > 1u ? (g) / 4u : 1u)
#endif

/* In-round silence (mx_row_source): a node waits this many slots without progress, after the
 * first pass, before it declares the nodes it never heard of silent. A live node's rows are coded
 * into packets from its first owned slot on, so by then they have reached every node that has all
 * the other rows; the margin covers a few hops of relaying (docs/design/dead-nodes.md). */
#ifndef MX_SILENCE_SLOTS
#define MX_SILENCE_SLOTS(n, g) (2u * (n) + (g) / 4u)
#endif

enum { PH_IDLE = 0, PH_RX, PH_TX, PH_GOT };
#define MODE_NONE 0xFFu

/* ---- bits -------------------------------------------------------------------------------- */

static unsigned ctz32(uint32_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_ctz(x);
#else
    unsigned n = 0;
    while (!(x & 1u)) {
        x >>= 1;
        ++n;
    }
    return n;
#endif
}

static unsigned popcount32(uint32_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_popcount(x);
#else
    unsigned n = 0;
    while (x) {
        x &= x - 1u;
        ++n;
    }
    return n;
#endif
}

static int bit_get(const uint32_t *v, unsigned i) { return (int)((v[i >> 5] >> (i & 31u)) & 1u); }
static void bit_set(uint32_t *v, unsigned i) { v[i >> 5] |= 1u << (i & 31u); }
static void bit_clear(uint32_t *v, unsigned i) { v[i >> 5] &= ~(1u << (i & 31u)); }

static int words_zero(const uint32_t *v, unsigned n)
{
    unsigned i;
    for (i = 0; i < n; ++i)
        if (v[i])
            return 0;
    return 1;
}

static void xor_words(uint32_t *dst, const uint32_t *src, unsigned n)
{
    unsigned i;
    for (i = 0; i < n; ++i)
        dst[i] ^= src[i];
}

/* Words of a G-bit set with the bits >= G cleared in the last word. */
static uint32_t last_word_mask(unsigned bits)
{
    unsigned r = bits & 31u;
    return r ? ((1u << r) - 1u) : 0xFFFFFFFFu;
}

/* Byte-level (packet) <-> word-level (state) bit sets: bit i = byte i/8 bit i%8 = word i/32 bit i%32. */
static void bytes_to_words(uint32_t *w, unsigned nwords, const uint8_t *b, unsigned nbytes)
{
    unsigned i;
    for (i = 0; i < nwords; ++i)
        w[i] = 0;
    for (i = 0; i < nbytes; ++i)
        w[i >> 2] |= (uint32_t)b[i] << (8u * (i & 3u));
}

static void words_to_bytes(uint8_t *b, unsigned nbytes, const uint32_t *w)
{
    unsigned i;
    for (i = 0; i < nbytes; ++i)
        b[i] = (uint8_t)(w[i >> 2] >> (8u * (i & 3u)));
}

/* ---- PRNG: xoshiro128** seeded through a splitmix-style mixer ------------------------------ */

static uint32_t rotl32(uint32_t x, unsigned k) { return (x << k) | (x >> (32u - k)); }

static uint32_t mix32(uint32_t *x)
{
    uint32_t z = (*x += 0x9E3779B9u);
    z = (z ^ (z >> 16)) * 0x85EBCA6Bu;
    z = (z ^ (z >> 13)) * 0xC2B2AE35u;
    return z ^ (z >> 16);
}

static void rng_seed(mx_state *s, uint32_t seed, uint8_t id)
{
    uint32_t x = seed ^ (0x632BE5ABu * ((uint32_t)id + 1u));
    unsigned i;
    for (i = 0; i < 4; ++i)
        s->h.rng[i] = mix32(&x);
    if (!(s->h.rng[0] | s->h.rng[1] | s->h.rng[2] | s->h.rng[3]))
        s->h.rng[0] = 1u;
}

/* Word w of the combination mask of `slot`: a counter-based draw (a hash of key, slot and word), so
 * that mx_prepare and mx_slot draw the same mask whenever either runs. */
static uint32_t mask_word(const mx_state *s, unsigned slot, unsigned w)
{
    uint32_t x = s->h.mask_key ^ (slot * 0x9E3779B1u) ^ (w * 0x7FEB352Du);
    return mix32(&x);
}

static uint32_t rnd(mx_state *s)
{
    uint32_t *r = s->h.rng;
    uint32_t out = rotl32(r[1] * 5u, 7) * 9u;
    uint32_t t = r[1] << 9;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl32(r[3], 11);
    return out;
}

/* True with probability 1/k (k >= 1). */
static int chance(mx_state *s, unsigned k)
{
    if (k <= 1u)
        return 1;
    return rnd(s) < 0xFFFFFFFFu / k;
}

/* Uniformly random set bit of a word set (which must be non-empty). */
static unsigned pick_bit(mx_state *s, const uint32_t *set, unsigned nwords)
{
    unsigned total = 0, i, k;
    for (i = 0; i < nwords; ++i)
        total += popcount32(set[i]);
    k = (unsigned)(((uint64_t)rnd(s) * total) >> 32);
    for (i = 0; i < nwords; ++i) {
        uint32_t w = set[i];
        unsigned c = popcount32(w);
        if (k < c) {
            while (k--)
                w &= w - 1u;
            return i * 32u + ctz32(w);
        }
        k -= c;
    }
    return 0; /* not reached */
}

/* ---- configuration ------------------------------------------------------------------------ */

size_t mx_state_size(void) { return sizeof(mx_state); }

int mx_config_check(const mx_config *c)
{
    unsigned g, p;
    if (!c)
        return MX_E_NULL;
    g = c->generation_size;
    p = c->payload_size;
    if (c->num_nodes < 1u || c->num_nodes > MX_MAX_NODES)
        return MX_E_NODES;
    if (g < 1u || g > MX_MAX_G)
        return MX_E_GENERATION;
    if (p < 1u || p > MX_MAX_P)
        return MX_E_PAYLOAD;
    if (c->round_length < 1u || c->round_length >= MX_NO_SLOT)
        return MX_E_ROUND;
    if (c->initiator >= c->num_nodes)
        return MX_E_INITIATOR;
    if (MX_PACKET_LEN(c->num_nodes, g, p) > MX_MAX_PACKET_LEN)
        return MX_E_PACKET_LEN;
    if ((unsigned long)g * MX_ROW_WORDS(g, p) > (unsigned long)MX_POOL_WORDS)
        return MX_E_MEMORY;
    if (c->features & ~MX_FEAT_ALL)
        return MX_E_FEATURES;
    if (c->termination > MX_TERM_DONE || c->linger_slots >= c->round_length)
        return MX_E_TERMINATION;
    if ((c->num_nodes < 32u && (c->absent >> c->num_nodes) != 0u) || ((c->absent >> c->initiator) & 1u))
        return MX_E_ABSENT;
    if (c->takeover_slots && (c->takeover_slots >= c->round_length || c->backup >= c->num_nodes ||
                              c->backup == c->initiator || ((c->absent >> c->backup) & 1u)))
        return MX_E_BACKUP;
    {
        unsigned j, pass = 0;
        for (j = 0; j < MX_SHARE_NODES; ++j) {
            if (j >= c->num_nodes && c->slot_shares[j])
                return MX_E_SHARES;
            pass += c->slot_shares[j];
        }
        if (pass > MX_OWNER_SLOTS)
            return MX_E_SHARES;
    }
    return MX_OK;
}

/* The weighted first pass (slots 1..pass_len; slot 0 is the initiator's): node j owns
 * slot_shares[j] of its slots, spread evenly (smooth weighted round robin, ties to the lower id), so
 * that a node with many rows to send gets its turns early instead of one slot in n — a round that
 * carries only a few senders' messages would otherwise wait n slots per row. Every node derives the
 * same table from the same configuration. */
static void build_owner_table(mx_state *s)
{
    mx_header *h = &s->h;
    const unsigned n = h->cfg.num_nodes;
    int32_t cur[MX_MAX_NODES];
    unsigned j, t, pass = 0;
    for (j = 0; j < n; ++j) {
        cur[j] = 0;
        pass += h->cfg.slot_shares[j];
    }
    h->pass_len = (uint16_t)pass;
    for (t = 0; t < pass; ++t) {
        unsigned best = 0;
        for (j = 0; j < n; ++j) {
            cur[j] += h->cfg.slot_shares[j];
            if (cur[j] > cur[best])
                best = j;
        }
        cur[best] -= (int32_t)pass;
        s->owner_of[t] = (uint8_t)best;
    }
}

/* Owner of a slot: without shares slot s is node s mod n's; with them slot 0 is the initiator's, then
 * the weighted pass, then again node s mod n's (turns of n slots in id order). */
static unsigned slot_owner(const mx_state *s, unsigned slot)
{
    const mx_header *h = &s->h;
    if (!h->pass_len)
        return slot % h->cfg.num_nodes;
    if (slot == 0u)
        return h->cfg.initiator;
    if (slot <= h->pass_len)
        return s->owner_of[slot - 1u];
    return slot % h->cfg.num_nodes;
}

/* The first slot after `slot` that this node owns. */
static unsigned next_owned_slot(const mx_state *s, unsigned slot)
{
    const mx_header *h = &s->h;
    const unsigned n = h->cfg.num_nodes, base = h->pass_len ? h->pass_len + 1u : 0u;
    unsigned t = slot + 1u;
    for (; t < base; ++t)
        if (s->owner_of[t - 1u] == h->id)
            return t;
    return t + ((h->id + n - t % n) % n);
}

uint16_t mx_packet_len(const mx_config *c)
{
    if (mx_config_check(c) != MX_OK)
        return 0;
    return (uint16_t)MX_PACKET_LEN(c->num_nodes, c->generation_size, c->payload_size);
}

int mx_init(mx_state *s, const mx_config *cfg, uint8_t node_id)
{
    mx_header *h;
    unsigned i;
    int r;
    if (!s || !cfg)
        return MX_E_NULL;
    r = mx_config_check(cfg);
    if (r != MX_OK)
        return r;
    if (node_id >= cfg->num_nodes)
        return MX_E_NODE_ID;
    if ((cfg->absent >> node_id) & 1u)
        return MX_E_ABSENT;
    /* Everything but the row pool and the scratch rows: rows are written whole when they appear. */
    memset(s, 0, offsetof(mx_state, scratch));
    h = &s->h;
    h->cfg = *cfg;
    h->id = node_id;
    h->cvw = (uint16_t)MX_CV_WORDS(cfg->generation_size);
    h->pw = (uint16_t)MX_PAYLOAD_WORDS(cfg->payload_size);
    h->stride = (uint16_t)(h->cvw + h->pw);
    h->pkt_len = (uint16_t)MX_PACKET_LEN(cfg->num_nodes, cfg->generation_size, cfg->payload_size);
    h->cv_bytes = (uint16_t)MX_CV_BYTES(cfg->generation_size);
    h->info_bytes = (uint16_t)MX_INFO_BYTES(cfg->num_nodes, cfg->generation_size);
    h->node_all = cfg->num_nodes >= 32u ? 0xFFFFFFFFu : ((1u << cfg->num_nodes) - 1u);
    h->end_slot = (uint16_t)(cfg->round_length - 1u);
    h->sideload = MX_NO_SLOT;
    h->answer = MX_NO_SLOT;
    h->prep_slot = MX_NO_SLOT;
    h->fresh_pivot = MX_NO_SLOT;
    h->fresh_slot = MX_NO_SLOT;
    h->scan_left = cfg->round_length;
    h->mode = MODE_NONE;
    h->phase = PH_IDLE;
    for (i = 0; i < MX_MAX_NODES; ++i) {
        s->req_slot[i] = MX_NO_SLOT;
    }
    for (i = 0; i < sizeof(s->rank_up) / sizeof(s->rank_up[0]); ++i)
        s->rank_up[i] = MX_NO_SLOT;
    h->st.slot_synced = MX_NO_SLOT;
    h->st.slot_full_rank = MX_NO_SLOT;
    h->st.slot_all_full = MX_NO_SLOT;
    h->st.slot_done = MX_NO_SLOT;
    h->st.slot_linger = MX_NO_SLOT;
    build_owner_table(s);
    rng_seed(s, cfg->seed, node_id);
    {
        uint32_t x = cfg->seed ^ (0x2545F491u * ((uint32_t)node_id + 1u));
        h->mask_key = mix32(&x);
    }
    return MX_OK;
}

/* ---- rows and elimination ------------------------------------------------------------------ */

static uint32_t *row_ptr(mx_state *s, unsigned i) { return s->pool + (size_t)i * s->h.stride; }

/* The slot used for statistics: the current slot once synchronised, else 0 (before the round). */
static uint16_t stat_slot(const mx_state *s) { return s->h.synced ? s->h.cur_slot : 0u; }

/* MX_TERM_DONE: once every node has announced that it knows that all have full rank, and this
 * node has announced it too, nobody needs this node any more: end with the current slot. */
static void check_acks(mx_state *s)
{
    mx_header *h = &s->h;
    if (h->cfg.termination == MX_TERM_DONE && h->acked && (h->ack_map | h->cfg.absent) == h->node_all && h->synced &&
        h->cur_slot < h->end_slot)
        h->end_slot = h->cur_slot;
}

/* Full rank and "everyone has full rank" bookkeeping after the rank or the map changed. */
static void update_progress(mx_state *s)
{
    mx_header *h = &s->h;
    uint32_t me = 1u << h->id;
    if (h->rank == h->cfg.generation_size && !(h->fr_map & me)) {
        h->fr_map |= me;
        h->st.slot_full_rank = stat_slot(s);
    }
    if ((h->fr_map & me) && (h->fr_map | h->cfg.absent) == h->node_all && h->st.slot_all_full == MX_NO_SLOT) {
        h->st.slot_all_full = stat_slot(s);
        h->ack_map |= me;
    }
    /* The linger starts only once some other node is known to know this node's full rank: a node
     * whose packets all collided (or were lost) would otherwise leave while the others still wait
     * for its full-rank bit, and they would run to the deadline (issue 15). */
    if (h->cfg.termination == MX_TERM_DONE && h->st.slot_all_full != MX_NO_SLOT && h->st.slot_linger == MX_NO_SLOT &&
        (h->fr_known || (h->node_all & ~me & ~h->cfg.absent) == 0u)) {
        unsigned end = (unsigned)stat_slot(s) + h->cfg.linger_slots;
        h->st.slot_linger = stat_slot(s);
        if (end < h->end_slot)
            h->end_slot = (uint16_t)end;
    }
    check_acks(s);
}

static void add_pivot(mx_state *s, unsigned i)
{
    bit_set(s->pivots, i);
    s->h.rank++;
    s->h.st.rank = s->h.rank;
    s->h.dirty = 1;
    s->rank_up[i] = stat_slot(s);
}

/* Reduce the row v (coding vector + payload, stride words) against the stored rows in
 * row-echelon form. If it is innovative, store it at its pivot and return the pivot; else return
 * -1 (and v is garbage). The payload is only reduced when the row turns out innovative. */
static int insert_row(mx_state *s, uint32_t *v)
{
    const unsigned cvw = s->h.cvw, stride = s->h.stride;
    uint32_t used[MX_CV_WORDS(MX_MAX_G)];
    unsigned w, k;
    for (w = 0; w < cvw; ++w)
        used[w] = 0;
    for (w = 0; w < cvw; ++w) {
        while (v[w]) {
            unsigned b = ctz32(v[w]);
            unsigned i = w * 32u + b;
            const uint32_t *r;
            if (!((s->pivots[w] >> b) & 1u)) {
                /* innovative: apply the payload part of every row used, then store */
                unsigned uw;
                for (uw = 0; uw <= w; ++uw) {
                    uint32_t u = used[uw];
                    while (u) {
                        unsigned j = uw * 32u + ctz32(u);
                        u &= u - 1u;
                        xor_words(v + cvw, row_ptr(s, j) + cvw, stride - cvw);
                    }
                }
                memcpy(row_ptr(s, i), v, stride * sizeof(uint32_t));
                add_pivot(s, i);
                return (int)i;
            }
            r = row_ptr(s, i);
            for (k = w; k < cvw; ++k)
                v[k] ^= r[k];
            used[w] |= 1u << b;
        }
    }
    return -1;
}

/* Back substitution to the row-reduced echelon form; afterwards `decoded` holds the rows that
 * equal e_row (exactly the rows that can be isolated). The span does not change. */
static void reduce_full(mx_state *s)
{
    const unsigned g = s->h.cfg.generation_size, cvw = s->h.cvw, stride = s->h.stride;
    unsigned i, j, w;
    if (!s->h.dirty)
        return;
    s->h.prep_slot = MX_NO_SLOT; /* the rows change: a prepared combination would be stale */
    for (i = g; i-- > 0;) {
        const uint32_t *ri;
        unsigned wi = i >> 5;
        uint32_t bi = 1u << (i & 31u);
        if (!bit_get(s->pivots, i))
            continue;
        ri = row_ptr(s, i);
        for (j = 0; j < i; ++j) {
            uint32_t *rj;
            if (!bit_get(s->pivots, j))
                continue;
            rj = row_ptr(s, j);
            if (rj[wi] & bi) {
                for (w = wi; w < cvw; ++w)
                    rj[w] ^= ri[w];
                xor_words(rj + cvw, ri + cvw, stride - cvw);
            }
        }
    }
    for (w = 0; w < cvw; ++w)
        s->decoded[w] = 0;
    for (i = 0; i < g; ++i) {
        const uint32_t *ri;
        if (!bit_get(s->pivots, i))
            continue;
        ri = row_ptr(s, i);
        if (ri[i >> 5] == (1u << (i & 31u)) && words_zero(ri + (i >> 5) + 1u, cvw - (i >> 5) - 1u))
            bit_set(s->decoded, i);
    }
    s->h.dirty = 0;
}

/* Learn that `row` is a weak zero: its payload is zero by definition, so e_row with a zero
 * payload joins the span (if it is not in it already). */
static void learn_weak(mx_state *s, unsigned row)
{
    uint32_t *v = s->scratch[0];
    bit_set(s->weak, row);
    memset(v, 0, s->h.stride * sizeof(uint32_t));
    bit_set(v, row);
    (void)insert_row(s, v);
}

/* ---- writing and arming -------------------------------------------------------------------- */

int mx_write(mx_state *s, uint16_t row, const void *data, uint16_t len)
{
    mx_header *h;
    uint32_t *r;
    if (!s)
        return MX_E_NULL;
    h = &s->h;
    if (h->mode != MODE_NONE)
        return MX_E_STATE;
    if (row >= h->cfg.generation_size)
        return MX_E_ROW;
    if (bit_get(s->pivots, row))
        return MX_E_DUPLICATE;
    if (!data && !(h->cfg.features & MX_FEAT_WEAK_ZEROS))
        return MX_E_WEAK;
    if (data && len > h->cfg.payload_size)
        return MX_E_LEN;
    r = row_ptr(s, row);
    memset(r, 0, h->stride * sizeof(uint32_t));
    bit_set(r, row);
    if (!data) {
        bit_set(s->weak, row);
        h->wz_pending = 2;
    } else {
        memcpy((uint8_t *)(r + h->cvw), data, len);
        bit_set(s->own, row);
        bit_set(s->coded, row);
        bit_set(s->unsent, row);
    }
    add_pivot(s, row);
    update_progress(s);
    return MX_OK;
}

int mx_row_source(mx_state *s, uint16_t first_row, uint16_t rows, uint8_t node)
{
    unsigned i;
    if (!s)
        return MX_E_NULL;
    if (s->h.mode != MODE_NONE)
        return MX_E_STATE;
    if (node >= s->h.cfg.num_nodes)
        return MX_E_NODE_ID;
    if ((unsigned)first_row + rows > s->h.cfg.generation_size)
        return MX_E_ROW;
    for (i = first_row; i < (unsigned)first_row + rows; ++i)
        s->row_src[i] = (uint8_t)(node + 1u);
    s->h.has_src = 1;
    return MX_OK;
}

int mx_backup_header(mx_state *s, const void *data, uint16_t len)
{
    mx_header *h;
    uint32_t *r;
    if (!s || !data)
        return MX_E_NULL;
    h = &s->h;
    if (h->mode != MODE_NONE)
        return MX_E_STATE;
    if (!h->cfg.takeover_slots || h->id != h->cfg.backup)
        return MX_E_MODE;
    if (bit_get(s->pivots, 0u) || h->reserve)
        return MX_E_DUPLICATE;
    if (len > h->cfg.payload_size)
        return MX_E_LEN;
    /* row 0's place in the pool: no row can arrive there before the node has synchronised, and
     * once it has, the reserve is never used */
    r = row_ptr(s, 0u);
    memset(r, 0, h->stride * sizeof(uint32_t));
    memcpy((uint8_t *)(r + h->cvw), data, len);
    h->reserve = 1;
    return MX_OK;
}

/* The backup starts the round: slot 0 is now, the header it holds in reserve becomes its own row 0,
 * and the round ends takeover_slots slots earlier than its grid would allow, so that it keeps the
 * deadline. Its packets are marked MX_PKT_TAKEOVER, and no node takes packets of both kinds
 * (mx_receive): if the initiator was only late (or in another round) and starts a grid of its own,
 * each node stays on one grid, so two versions of row 0 never meet in one node's rows. */
static void take_over(mx_state *s)
{
    mx_header *h = &s->h;
    bit_set(row_ptr(s, 0u), 0u);
    bit_set(s->own, 0u);
    bit_set(s->coded, 0u);
    bit_set(s->unsent, 0u);
    h->reserve = 0;
    h->taken_over = 1;
    s->row_src[0] = 0; /* the header no longer comes from the planned initiator */
    h->mode = MX_ARM_INITIATOR;
    h->synced = 1;
    h->cur_slot = 0;
    h->sync_slot = 0;
    h->next_slot = 0;
    h->st.slot_synced = 0;
    h->end_slot = (uint16_t)(h->cfg.round_length - 1u - h->cfg.takeover_slots);
    add_pivot(s, 0u);
    update_progress(s);
}

int mx_arm(mx_state *s, uint8_t mode)
{
    mx_header *h;
    if (!s)
        return MX_E_NULL;
    h = &s->h;
    if (h->mode != MODE_NONE || h->cfg.num_nodes == 0u)
        return MX_E_STATE;
    switch (mode) {
    case MX_ARM_INITIATOR:
        if (h->id != h->cfg.initiator)
            return MX_E_MODE;
        h->synced = 1;
        h->sync_slot = 0;
        h->next_slot = 0;
        h->st.slot_synced = 0;
        break;
    case MX_ARM_LISTENER:
    case MX_ARM_PASSIVE:
        break;
    default:
        return MX_E_MODE;
    }
    h->mode = mode;
    return MX_OK;
}

/* ---- packets -------------------------------------------------------------------------------- */

static int info_bits_ok(const uint8_t *info, unsigned nbytes, unsigned nbits)
{
    unsigned i;
    for (i = nbits >> 3; i < nbytes; ++i) {
        uint8_t allowed = (i == (nbits >> 3)) ? (uint8_t)((1u << (nbits & 7u)) - 1u) : 0u;
        if (info[i] & (uint8_t)~allowed)
            return 0;
    }
    return 1;
}

static int all_zero(const uint8_t *b, unsigned n)
{
    unsigned i;
    for (i = 0; i < n; ++i)
        if (b[i])
            return 0;
    return 1;
}

static uint32_t node_set_from_info(const uint8_t *info, unsigned nbytes)
{
    uint32_t m = 0;
    unsigned i;
    for (i = 0; i < nbytes && i < 4u; ++i)
        m |= (uint32_t)info[i] << (8u * i);
    return m;
}

/* The structural packet check of a configuration known to be valid (a node's: mx_init checked it,
 * and only `absent` changes during a round — it may then name the initiator, after a takeover). */
static int check_packet(const mx_config *c, const uint8_t *p, uint16_t len)
{
    unsigned n, g, cvb, ib, slot, sender, flags, type;
    const uint8_t *cv, *pl, *info;
    n = c->num_nodes;
    g = c->generation_size;
    cvb = MX_CV_BYTES(g);
    ib = MX_INFO_BYTES(n, g);
    if (len != MX_PACKET_LEN(n, g, c->payload_size))
        return MX_E_PKT_LEN;
    slot = (unsigned)p[0] | ((unsigned)p[1] << 8);
    sender = p[2];
    flags = p[3];
    if (sender >= n)
        return MX_E_PKT_SENDER;
    if (slot >= c->round_length)
        return MX_E_PKT_SLOT;
    type = flags & MX_PKT_INFO_MASK;
    if ((flags & MX_PKT_TAKEOVER) && !c->takeover_slots)
        return MX_E_PKT_FLAGS;
    if (type > MX_INFO_WEAK_ZEROS)
        return MX_E_PKT_FLAGS;
    if (type == MX_INFO_REQUEST && (!(c->features & MX_FEAT_REQUESTS) || (flags & MX_PKT_FULL_RANK)))
        return MX_E_PKT_FLAGS;
    if (type == MX_INFO_WEAK_ZEROS && !(c->features & MX_FEAT_WEAK_ZEROS))
        return MX_E_PKT_FLAGS;
    if ((flags & MX_PKT_ALL_FULL) && !(flags & MX_PKT_FULL_RANK))
        return MX_E_PKT_FLAGS;
    cv = p + MX_PKT_HEADER_LEN;
    pl = cv + cvb;
    info = pl + c->payload_size;
    if ((g & 7u) && (cv[cvb - 1u] & (uint8_t)~((1u << (g & 7u)) - 1u)))
        return MX_E_PKT_CODING;
    if (all_zero(cv, cvb) && !all_zero(pl, c->payload_size))
        return MX_E_PKT_CODING;
    switch (type) {
    case MX_INFO_NONE:
        if (!all_zero(info, ib))
            return MX_E_PKT_INFO;
        break;
    case MX_INFO_REQUEST:
        if (!info_bits_ok(info, ib, g) || all_zero(info, ib))
            return MX_E_PKT_INFO;
        break;
    case MX_INFO_WEAK_ZEROS:
        if (!info_bits_ok(info, ib, g) || all_zero(info, ib))
            return MX_E_PKT_INFO;
        break;
    default: { /* MX_INFO_FULL_RANK */
        uint32_t m, all = n >= 32u ? 0xFFFFFFFFu : ((1u << n) - 1u);
        if (!info_bits_ok(info, ib, n))
            return MX_E_PKT_INFO;
        m = node_set_from_info(info, ib);
        if (((m >> sender) & 1u) != ((flags & MX_PKT_FULL_RANK) ? 1u : 0u))
            return MX_E_PKT_INFO;
        if ((flags & MX_PKT_ALL_FULL) && m != all)
            return MX_E_PKT_INFO;
        break;
    }
    }
    return MX_OK;
}

int mx_packet_check(const mx_config *c, const uint8_t *p, uint16_t len)
{
    if (!c || !p)
        return MX_E_NULL;
    if (mx_config_check(c) != MX_OK)
        return MX_E_STATE;
    return check_packet(c, p, len);
}

/* Union of the fresh row requests of active nodes (requests answered in this slot). */
static int fresh_requests(mx_state *s, uint32_t *u, uint32_t *requesters)
{
    const mx_header *h = &s->h;
    unsigned j, w, any = 0;
    uint32_t from = h->req_from & ~h->gone;
    for (w = 0; w < h->cvw; ++w)
        u[w] = 0;
    *requesters = 0;
    while (from) {
        j = ctz32(from);
        from &= from - 1u;
        if ((unsigned)(uint16_t)(h->cur_slot - s->req_slot[j]) > MX_REQUEST_TTL(h->cfg.num_nodes))
            continue;
        for (w = 0; w < h->cvw; ++w)
            u[w] |= s->req[j][w];
        *requesters |= 1u << j;
        any = 1;
    }
    return (int)any;
}

/* The rows a random combination of `slot` may take: those held before the reception of slot − 1
 * (the row that reception added joins as the sideload), each with probability 1/2. */
static void combination_mask(const mx_state *s, unsigned slot, uint32_t *m)
{
    const mx_header *h = &s->h;
    unsigned w;
    for (w = 0; w < h->cvw; ++w)
        m[w] = s->pivots[w] & ~s->weak[w] & mask_word(s, slot, w);
    if (h->fresh_slot != MX_NO_SLOT && h->fresh_slot + 1u == slot)
        bit_clear(m, h->fresh_pivot);
    m[h->cvw - 1u] &= last_word_mask(h->cfg.generation_size);
}

/* v ^= every row in m */
static void xor_rows(mx_state *s, uint32_t *v, const uint32_t *m)
{
    const unsigned cvw = s->h.cvw, stride = s->h.stride;
    unsigned w;
    for (w = 0; w < cvw; ++w) {
        uint32_t b = m[w];
        while (b) {
            unsigned j = w * 32u + ctz32(b);
            b &= b - 1u;
            xor_words(v, row_ptr(s, j), stride);
        }
    }
}

/* The weak-zero map a packet carries: the weak rows, except those of nodes this node was told are
 * dead when the round was armed (mx_config.absent). Every node decides who is dead from its own
 * evidence; spreading that view would make nodes that still hear a node drop its rows, so after an
 * outage it could never be seen alive again beyond its neighbours (docs/design/dead-nodes.md,
 * "Revival by rows"). The plan's weak rows and those of nodes declared silent in this round are
 * spread. Returns nonzero if the map is not empty. */
static int shared_weak(const mx_state *s, uint32_t *map)
{
    const mx_header *h = &s->h;
    const uint32_t dead = h->cfg.absent & ~h->silenced;
    unsigned w, any = 0;
    for (w = 0; w < h->cvw; ++w) {
        uint32_t bits = s->weak[w];
        map[w] = bits;
        while (dead && h->has_src && bits) {
            unsigned src = s->row_src[w * 32u + ctz32(bits)];
            if (src && ((dead >> (src - 1u)) & 1u))
                map[w] &= ~(bits & (0u - bits));
            bits &= bits - 1u;
        }
        any |= map[w] != 0u;
    }
    return (int)any;
}

/* Build this slot's packet into out. Returns 1 if there is something worth sending. */
static int build_packet(mx_state *s, uint8_t *out)
{
    mx_header *h = &s->h;
    const unsigned g = h->cfg.generation_size, cvw = h->cvw, stride = h->stride;
    uint32_t *v = s->scratch[1];
    uint32_t cand[MX_CV_WORDS(MX_MAX_G)], u[MX_CV_WORDS(MX_MAX_G)], wz[MX_CV_WORDS(MX_MAX_G)];
    unsigned w, type, flags = 0, have_cv = 0, full = (h->rank == g), have_wz;
    uint8_t *info;

    for (w = 0; w < cvw; ++w)
        cand[w] = s->pivots[w] & ~s->weak[w];

    if (!words_zero(s->unsent, cvw) && (slot_owner(s, h->cur_slot) == h->id || h->cur_slot == 0u)) {
        /* systematic start: an own row not sent yet, alone — only in an owned slot (or the
         * initiator's slot 0): in a contended slot it may collide, and a row only its owner holds
         * would then reach the others only inside random combinations, half of the time each */
        unsigned i = 0;
        for (w = 0; w < cvw; ++w)
            if (s->unsent[w]) {
                i = w * 32u + ctz32(s->unsent[w]);
                break;
            }
        bit_clear(s->unsent, i);
        memcpy(v, row_ptr(s, i), stride * sizeof(uint32_t));
        have_cv = 1;
    } else if (!words_zero(cand, cvw)) {
        if (h->answer != MX_NO_SLOT && bit_get(cand, h->answer)) {
            /* answer a request: the requested row leads, rows after it are mixed in at random, so
             * the packet is innovative for every requester that misses that row */
            unsigned p = h->answer;
            unsigned pw = p >> 5;
            memcpy(v, row_ptr(s, p), stride * sizeof(uint32_t));
            for (w = pw; w < cvw; ++w) {
                uint32_t m = cand[w] & rnd(s);
                if (w == pw)
                    m &= (p & 31u) == 31u ? 0u : ~((2u << (p & 31u)) - 1u);
                while (m) {
                    unsigned j = w * 32u + ctz32(m);
                    m &= m - 1u;
                    xor_words(v, row_ptr(s, j), stride);
                }
            }
        } else {
            /* random combination: each row held before the previous slot's reception with
             * probability 1/2 (mx_prepare may have combined them already), plus the sideload */
            uint32_t m[MX_CV_WORDS(MX_MAX_G)];
            int prepared = h->prep_slot == h->cur_slot;
            combination_mask(s, h->cur_slot, m);
            for (w = 0; w < cvw && prepared; ++w)
                prepared = m[w] == s->prep_mask[w];
            if (!prepared) { /* else v (scratch[1]) holds it already */
                memset(v, 0, stride * sizeof(uint32_t));
                xor_rows(s, v, m);
            }
            if (h->sideload != MX_NO_SLOT && bit_get(cand, h->sideload) && !bit_get(m, h->sideload)) {
                xor_words(v, row_ptr(s, h->sideload), stride);
                bit_set(m, h->sideload);
            }
            if (words_zero(m, cvw))
                xor_words(v, row_ptr(s, pick_bit(s, cand, cvw)), stride);
        }
        h->prep_slot = MX_NO_SLOT;
        h->sideload = MX_NO_SLOT;
        have_cv = 1;
    }

    /* info vector */
    have_wz = (h->cfg.features & MX_FEAT_WEAK_ZEROS) && shared_weak(s, wz);
    if (have_wz && h->wz_pending) {
        type = MX_INFO_WEAK_ZEROS;
        h->wz_pending--;
    } else if (!full && (h->cfg.features & MX_FEAT_REQUESTS) && g - h->rank <= MX_REQUEST_MISSING(g)) {
        type = MX_INFO_REQUEST;
    } else if (have_wz && (full ? (h->tx_count & 3u) == 3u : (h->tx_count & 1u) == 1u)) {
        type = MX_INFO_WEAK_ZEROS;
    } else if (h->fr_map) {
        type = MX_INFO_FULL_RANK;
    } else if (have_wz) {
        type = MX_INFO_WEAK_ZEROS;
    } else {
        type = MX_INFO_NONE;
    }
    if (!have_cv)
        memset(v, 0, stride * sizeof(uint32_t)); /* an info-only packet (or a beacon) */
    if (!have_cv && type == MX_INFO_NONE && !(h->mode == MX_ARM_INITIATOR && h->cur_slot == 0u))
        return 0;
    h->tx_count++;

    if (full)
        flags |= MX_PKT_FULL_RANK;
    if (full && (h->fr_map | h->cfg.absent) == h->node_all) {
        flags |= MX_PKT_ALL_FULL;
        h->acked = 1;
    }
    {
        /* forecast: will this node still be on in its next owned slot? */
        if (next_owned_slot(s, h->cur_slot) > h->end_slot)
            flags |= MX_PKT_SILENT;
    }
    if (h->taken_over)
        flags |= MX_PKT_TAKEOVER;
    flags |= type;

    out[0] = (uint8_t)(h->cur_slot & 0xFFu);
    out[1] = (uint8_t)(h->cur_slot >> 8);
    out[2] = h->id;
    out[3] = (uint8_t)flags;
    words_to_bytes(out + MX_PKT_HEADER_LEN, h->cv_bytes, v);
    memcpy(out + MX_PKT_HEADER_LEN + h->cv_bytes, (const uint8_t *)(v + cvw), h->cfg.payload_size);
    info = out + MX_PKT_HEADER_LEN + h->cv_bytes + h->cfg.payload_size;
    memset(info, 0, h->info_bytes);
    switch (type) {
    case MX_INFO_REQUEST:
        for (w = 0; w < cvw; ++w)
            u[w] = ~s->pivots[w];
        u[cvw - 1u] &= last_word_mask(g);
        words_to_bytes(info, h->cv_bytes, u);
        break;
    case MX_INFO_WEAK_ZEROS:
        words_to_bytes(info, h->cv_bytes, wz);
        break;
    case MX_INFO_FULL_RANK: {
        /* absent nodes count as full (the map must agree with ALL_FULL, which covers them) */
        uint32_t m = (h->fr_map | h->cfg.absent) & h->node_all;
        words_to_bytes(info, (h->cfg.num_nodes + 7u) / 8u, &m);
        break;
    }
    default:
        break;
    }
    return 1;
}

/* ---- transmit decision ---------------------------------------------------------------------- */

/* Discovery: after synchronising, a node treats an owner it has not heard yet as a possible
 * neighbour for two turns of n slots. */
static int discovering(const mx_state *s)
{
    const mx_header *h = &s->h;
    return (unsigned)(h->cur_slot - h->sync_slot) < MX_DISCOVERY_SLOTS(h->cfg.num_nodes);
}

static int owner_reserved(const mx_state *s, unsigned o)
{
    const mx_header *h = &s->h;
    uint32_t b = 1u << o;
    if ((h->gone | h->cfg.absent) & b)
        return 0;
    if (h->heard & b)
        return 1;
    /* a node without a share in the weighted first pass has its first turns only after it */
    if (h->pass_len && !h->cfg.slot_shares[o] && h->cur_slot <= h->pass_len + MX_DISCOVERY_SLOTS(h->cfg.num_nodes))
        return 1;
    return discovering(s);
}

/* Fresh requesters that miss row `row`. */
static uint32_t answer_lacking(const mx_state *s, unsigned row)
{
    const mx_header *h = &s->h;
    uint32_t from = h->req_from & ~h->gone, out = 0;
    while (from) {
        unsigned j = ctz32(from);
        from &= from - 1u;
        if ((unsigned)(uint16_t)(h->cur_slot - s->req_slot[j]) <= MX_REQUEST_TTL(h->cfg.num_nodes) &&
            bit_get(s->req[j], row))
            out |= 1u << j;
    }
    return out;
}

/* Pick the requested row this node answers in the current slot (if any): among the rows it can
 * supply, one that the most fresh requesters miss (ties broken at random). */
static void choose_answer(mx_state *s)
{
    mx_header *h = &s->h;
    uint32_t u[MX_CV_WORDS(MX_MAX_G)], best[MX_CV_WORDS(MX_MAX_G)], requesters;
    unsigned w, any = 0, best_count = 0;
    h->answer = MX_NO_SLOT;
    if (!(h->cfg.features & MX_FEAT_REQUESTS) || !fresh_requests(s, u, &requesters))
        return;
    for (w = 0; w < h->cvw; ++w) {
        u[w] &= s->pivots[w] & ~s->weak[w];
        best[w] = 0;
        any |= u[w] != 0u;
    }
    if (!any)
        return;
    for (w = 0; w < h->cvw; ++w) {
        uint32_t m = u[w];
        while (m) {
            unsigned b = ctz32(m), c = 0;
            uint32_t r = requesters;
            m &= m - 1u;
            while (r) {
                unsigned j = ctz32(r);
                r &= r - 1u;
                c += (s->req[j][w] >> b) & 1u;
            }
            if (c > best_count) {
                unsigned x;
                for (x = 0; x < h->cvw; ++x)
                    best[x] = 0;
                best_count = c;
            }
            if (c == best_count)
                best[w] |= 1u << b;
        }
    }
    h->answer = (uint16_t)pick_bit(s, best, h->cvw);
}

static int decide_tx(mx_state *s)
{
    mx_header *h = &s->h;
    const uint32_t me = 1u << h->id;
    unsigned owner, d, k;
    if (h->mode == MX_ARM_PASSIVE)
        return 0;
    choose_answer(s);
    if (h->mode == MX_ARM_INITIATOR && h->cur_slot == 0u)
        return 1;
    owner = slot_owner(s, h->cur_slot);
    if (h->cfg.features & MX_FEAT_COORDINATED_TX) {
        if (owner == h->id)
            return 1;
        /* An initiator that has heard nobody in its first four slots contends in every slot (1/n
         * during discovery): if all listeners missed slot 0, none is synchronised and its packets are
         * the only way in (3 nodes at 30 % loss: 1 round in 11 lost slot 0 at both listeners, and the
         * first pass went by in silence). Not sooner: where slot 0 arrived it would collide with the
         * pass's first owners. */
        if (owner_reserved(s, owner) && !(h->mode == MX_ARM_INITIATOR && !h->seen && h->cur_slot > 4u))
            return 0;
        /* Where this node has heard all but at most two other nodes, an owner it never heard is more
         * likely a neighbour it missed than a far node, so it keeps every other turn of its slots:
         * contenders that missed it during discovery would otherwise collide with each of its packets,
         * and the ones that had missed it kept missing it (16 nodes at 30 % loss: two owners heard by
         * one node each for the whole round, which then ran to the deadline). On a line, where unheard
         * owners are far, their slots stay free for reuse (with "half the network heard" instead, a
         * 16-node line lost 8 %; docs/design/mixer.md §5). */
        if (owner != h->id && !((h->heard | h->gone | h->cfg.absent) >> owner & 1u) &&
            popcount32(h->heard & ~h->gone & ~me) + 3u >= h->cfg.num_nodes &&
            ((h->cur_slot / h->cfg.num_nodes) & 1u))
            return 0;
    }
    d = popcount32(h->heard & ~h->gone & ~me);
    if (discovering(s)) {
        unsigned possible = popcount32(h->node_all & ~h->cfg.absent & ~me);
        if (d < possible)
            d = possible;
    }
    k = d + 1u;
    /* A node that has heard nobody never sends in every slot: a neighbour it missed may own this one
     * and would collide with each of its packets, so it would stay unheard (2 nodes at 10 % loss:
     * the initiator missed the other's first packets and took all its slots). */
    if (k < 2u && (h->node_all & ~h->cfg.absent & ~h->gone & ~me))
        k = 2u;
    if (h->answer != MX_NO_SLOT) {
        /* a supplier of a requested row: the other possible suppliers are the active neighbours
         * except the requesters that miss this row themselves */
        unsigned sup = 1u + popcount32(h->heard & ~h->gone & ~me & ~answer_lacking(s, h->answer));
        if (sup < k)
            k = sup;
    }
    return chance(s, k);
}

/* ---- step API ----------------------------------------------------------------------------- */

static void finish(mx_state *s, uint16_t last)
{
    s->h.finished = 1;
    s->h.phase = PH_IDLE;
    s->h.st.slot_done = last;
}

int mx_slot(mx_state *s, uint16_t slot, uint8_t *tx_packet, uint16_t *tx_len)
{
    mx_header *h;
    if (!s)
        return MX_E_NULL;
    h = &s->h;
    if (h->mode == MODE_NONE || h->phase != PH_IDLE)
        return MX_E_STATE;
    if (h->finished)
        return MX_ACT_OFF;
    h->st.slots++;
    h->st.radio_on_slots++;
    if (!h->synced) {
        h->scan_slot = 1;
        h->phase = PH_RX;
        return MX_ACT_RX;
    }
    h->scan_slot = 0;
    if (slot < h->next_slot) {
        h->st.slots--;
        h->st.radio_on_slots--;
        return MX_E_SLOT;
    }
    h->st.slots_missed += (uint32_t)(slot - h->next_slot);
    if (slot > h->end_slot) {
        h->st.slots--;
        h->st.radio_on_slots--;
        finish(s, h->end_slot);
        return MX_ACT_OFF;
    }
    h->cur_slot = slot;
    if (decide_tx(s)) {
        if (!tx_packet) {
            h->st.slots--;
            h->st.radio_on_slots--;
            return MX_E_NULL;
        }
        if (build_packet(s, tx_packet)) {
            if (tx_len)
                *tx_len = h->pkt_len;
            h->st.tx++;
            h->phase = PH_TX;
            return MX_ACT_TX;
        }
    }
    h->phase = PH_RX;
    return MX_ACT_RX;
}

static void note_dispute(mx_state *s, const uint32_t *map);

/* A packet that codes rows this node holds as weak zeros (their node is dead or silent in its view)
 * is dropped, but those rows exist at the sender: their node is alive (mx_alive_map). Only the weak
 * rows are looked at, so a node in step with the others pays nothing here. */
static void note_weak_coded(mx_state *s, const uint32_t *cv)
{
    unsigned w;
    for (w = 0; w < s->h.cvw; ++w) {
        uint32_t bits = cv[w] & s->weak[w];
        while (bits) {
            unsigned src = s->row_src[w * 32u + ctz32(bits)];
            if (src)
                s->h.coded_by |= 1u << (src - 1u);
            bits &= bits - 1u;
        }
    }
}

/* The nodes whose rows a weak-zero map names (the nodes its sender counts absent), or
 * MX_UNKNOWN_SOURCES if it names a row of this node or of a writer this node does not know. */
#define MX_UNKNOWN_SOURCES 0xFFFFFFFFu
static uint32_t named_sources(const mx_state *s, const uint32_t *map)
{
    uint32_t named = 0;
    unsigned i;
    for (i = 0; i < s->h.cfg.generation_size; ++i) {
        if (!bit_get(map, i))
            continue;
        if (bit_get(s->own, i) || !s->row_src[i])
            return MX_UNKNOWN_SOURCES;
        named |= 1u << (s->row_src[i] - 1u);
    }
    return named;
}

/* A packet dropped for contradicting this node (another view of who is silent or dead) still says
 * whether its sender has full rank and, once this node has full rank itself, which nodes the sender
 * knows to have it (its map, or ALL_FULL: all of them). Without it, nodes that had declared others
 * silent waited until the deadline for full-rank bits that only such packets carried (3 nodes at 30 %
 * loss; the 16-node line, 1 round in 3000). A disputed node's bit still comes only from itself, and
 * ``unvouched`` (the nodes the sender counts absent) get none: an ALL_FULL from a node that counts
 * another node absent still vouches for every other node. Ignoring it left half of the 16-node line
 * (G = 16, radio seed 22, round 21) without the far initiator's bit until the deadline, every node at
 * full rank by slot 79. */
static void note_full_sender(mx_state *s, uint32_t bit, unsigned flags, uint32_t map, uint32_t unvouched)
{
    mx_header *h = &s->h;
    uint32_t add = (flags & MX_PKT_FULL_RANK) ? bit : 0u;
    if (h->rank == h->cfg.generation_size) {
        add |= map & ~h->disputed & ~unvouched;
        if (flags & MX_PKT_ALL_FULL) {
            add |= ~h->disputed & ~unvouched;
            if (!unvouched) {
                h->ack_map |= bit;
                h->fr_known = 1;
            }
        }
    }
    add &= h->node_all & ~h->fr_map;
    if (add)
        h->fr_map |= add;
    update_progress(s);
}

int mx_receive(mx_state *s, uint16_t slot, const uint8_t *p, uint16_t len)
{
    mx_header *h;
    const unsigned cvb_off = MX_PKT_HEADER_LEN;
    unsigned g, cvw, pslot, sender, flags, type, w, rank0;
    const uint8_t *pl, *info;
    uint32_t bit, cv[MX_CV_WORDS(MX_MAX_G)], im[MX_CV_WORDS(MX_MAX_G)];
    int r;
    if (!s || !p)
        return MX_E_NULL;
    h = &s->h;
    if (h->phase != PH_RX || h->finished)
        return MX_E_STATE;
    if (!h->scan_slot && slot != h->cur_slot)
        return MX_E_SLOT;
    r = check_packet(&h->cfg, p, len);
    if (r != MX_OK) {
        h->st.rx_malformed++;
        return r;
    }
    g = h->cfg.generation_size;
    cvw = h->cvw;
    pslot = (unsigned)p[0] | ((unsigned)p[1] << 8);
    sender = p[2];
    flags = p[3];
    type = flags & MX_PKT_INFO_MASK;
    pl = p + cvb_off + h->cv_bytes;
    info = pl + h->cfg.payload_size;
    bit = 1u << sender;
    if (sender == h->id) {
        h->st.rx_malformed++;
        return MX_E_PKT_SENDER;
    }
    if (h->synced && !(flags & MX_PKT_TAKEOVER) != !h->taken_over) {
        /* a packet of the other grid (the backup's, or the late initiator's): never mixed in, so
         * that no node holds rows of two starters; nor a sign of life in this round */
        h->st.rx_malformed++;
        return MX_E_PKT_FLAGS;
    }
    h->seen |= bit; /* an intact packet of this network: the sender is alive */
    if (!h->scan_slot && pslot != h->cur_slot) {
        h->st.rx_wrong_slot++;
        return MX_E_PKT_WRONG_SLOT;
    }
    /* checks against what this node knows (all before any change) */
    bytes_to_words(cv, cvw, p + cvb_off, h->cv_bytes);
    for (w = 0; w < cvw; ++w)
        if (cv[w] & s->weak[w]) {
            note_weak_coded(s, cv);
            note_full_sender(s, bit, flags, type == MX_INFO_FULL_RANK ? node_set_from_info(info, h->info_bytes) : 0u,
                             0u);
            h->st.rx_malformed++;
            return MX_E_PKT_CODING;
        }
    /* A claim that this node has full rank while it has not (ALL_FULL, or a full-rank map with its
     * bit) comes from a node that counts it absent: it declared this node silent, or dead. The claim
     * is ignored, but the combination is kept: it holds none of this node's rows (they are weak
     * zeros at the sender, never coded), so it decodes right. Dropping the whole packet left a node
     * declared silent by every neighbour without the rows it still missed, and it ran to the
     * deadline (3 nodes at 30 % loss: 10 of 300 rounds). */
    if (h->rank != g) {
        flags &= ~(unsigned)MX_PKT_ALL_FULL;
        if (type == MX_INFO_FULL_RANK && ((node_set_from_info(info, h->info_bytes) >> h->id) & 1u))
            type = MX_INFO_NONE;
    }
    if (type == MX_INFO_WEAK_ZEROS) {
        /* A weak row is never coded into a packet, so a map naming a row this node has seen in a
         * coding vector (or wrote) contradicts it: it comes from a node with another view of who is
         * dead (docs/design/dead-nodes.md). Learning it would make the combinations that hold the
         * row decode to wrong values (found by the transport fuzzer), so the packet is dropped. */
        bytes_to_words(im, cvw, info, h->cv_bytes);
        for (w = 0; w < cvw; ++w)
            if (im[w] & ~s->weak[w] & (s->own[w] | s->coded[w])) {
                uint32_t named = named_sources(s, im);
                note_dispute(s, im);
                if (named == MX_UNKNOWN_SOURCES) /* this node's rows, or rows of unknown writers */
                    note_full_sender(s, bit, flags & MX_PKT_FULL_RANK, 0u, 0u);
                else /* another node counted absent: the sender still vouches for every other node */
                    note_full_sender(s, bit, flags, 0u, named);
                h->st.rx_malformed++;
                return MX_E_PKT_INFO;
            }
    }

    /* accepted */
    h->phase = PH_GOT;
    for (w = 0; w < cvw; ++w)
        s->coded[w] |= cv[w];
    if (!h->synced) {
        h->synced = 1;
        h->cur_slot = (uint16_t)pslot;
        h->sync_slot = (uint16_t)pslot;
        h->st.slot_synced = (uint16_t)pslot;
        h->reserve = 0;
        if (flags & MX_PKT_TAKEOVER) { /* the backup's round: it ends takeover_slots earlier on its grid */
            h->taken_over = 1;
            s->row_src[0] = 0; /* the header comes from the backup */
            h->end_slot = (uint16_t)(h->cfg.round_length - 1u - h->cfg.takeover_slots);
        }
    }
    rank0 = h->rank;
    h->st.rx_ok++;
    h->heard |= bit;
    h->heard_slot = (uint16_t)pslot;
    if (flags & MX_PKT_SILENT)
        h->gone |= bit;
    else
        h->gone &= ~bit;
    if (flags & MX_PKT_FULL_RANK) {
        h->fr_map |= bit;
        h->req_from &= ~bit;
    }
    if (!words_zero(cv, cvw) && h->rank == g) {
        /* at full rank nothing is innovative: skip the elimination, the most expensive reception
         * (issue 15, the M4 budget: about 14 % of the worst gap between packets at G = 256) */
        h->st.rx_non_innovative++;
    } else if (!words_zero(cv, cvw)) {
        uint32_t *v = s->scratch[0];
        int piv;
        memcpy(v, cv, cvw * sizeof(uint32_t));
        v[cvw + h->pw - 1u] = 0; /* payload tail bytes */
        memcpy((uint8_t *)(v + cvw), pl, h->cfg.payload_size);
        piv = insert_row(s, v);
        if (piv >= 0) {
            h->st.rx_innovative++;
            h->sideload = (uint16_t)piv;
            h->fresh_pivot = (uint16_t)piv;
            h->fresh_slot = (uint16_t)pslot;
        } else {
            h->st.rx_non_innovative++;
        }
    }
    if (type != MX_INFO_REQUEST)
        h->req_from &= ~bit; /* its last request is outdated */
    switch (type) {
    case MX_INFO_REQUEST:
        bytes_to_words(s->req[sender], cvw, info, h->cv_bytes);
        s->req_slot[sender] = (uint16_t)pslot;
        h->req_from |= bit;
        for (w = 0; w < cvw; ++w)
            if (s->req[sender][w] & s->weak[w])
                h->wz_pending = h->wz_pending ? h->wz_pending : 1u;
        break;
    case MX_INFO_FULL_RANK:
        h->fr_map |= node_set_from_info(info, h->info_bytes) & h->node_all & ~h->disputed;
        break;
    case MX_INFO_WEAK_ZEROS: {
        unsigned learned = 0;
        for (w = 0; w < cvw; ++w) {
            uint32_t nw = im[w] & ~s->weak[w];
            while (nw) {
                unsigned i = w * 32u + ctz32(nw);
                nw &= nw - 1u;
                if (i < g) {
                    learn_weak(s, i);
                    learned = 1;
                }
            }
        }
        if (learned) {
            h->wz_pending = 1;
            h->weak_new = 1;
        }
        break;
    }
    default:
        break;
    }
    if (h->disputed & bit)
        h->dispute_slot = (uint16_t)pslot;
    if (flags & MX_PKT_ALL_FULL) {
        h->fr_map |= h->node_all & ~h->disputed;
        h->ack_map |= bit;
        h->fr_known = 1; /* the sender knows that every node, this one too, has full rank */
    }
    if (type == MX_INFO_FULL_RANK && ((node_set_from_info(info, h->info_bytes) >> h->id) & 1u))
        h->fr_known = 1;
    update_progress(s);
    return h->rank > rank0 ? MX_RX_INNOVATIVE : MX_RX_OK;
}

/* Nodes that may be treated as absent: not this node, not the initiator (unless the backup started
 * the round: then the initiator is a sender like any other), not already absent, never heard (an
 * intact packet, accepted or not). */
static uint32_t silence_candidates(const mx_state *s)
{
    const mx_header *h = &s->h;
    const uint32_t initiator = h->taken_over ? 0u : 1u << h->cfg.initiator; /* it started the round */
    return h->node_all & ~h->cfg.absent & ~h->heard & ~h->seen & ~(1u << h->id) & ~initiator;
}

static void make_absent(mx_state *s, uint32_t nodes)
{
    s->h.cfg.absent |= nodes;
    s->h.silenced |= nodes;
    s->h.gone |= nodes;
}

/* A weak-zero map names rows this node has seen coded: the sender declared their node silent
 * (in-round silence, or a wrong dead declaration), but this node heard that node this round, so it is
 * alive. Another node's `ALL_FULL` or full-rank map then counts it as absent, not as done; if this
 * node took that, it and the live node's other neighbours would leave while the live node may still
 * miss rows, and it would run to the deadline. So a disputed node's full-rank bit counts only from
 * its own packets, until it has not been heard for MX_SILENCE_SLOTS (then it is taken as gone). */
static void note_dispute(mx_state *s, const uint32_t *map)
{
    mx_header *h = &s->h;
    unsigned i;
    for (i = 0; i < h->cfg.generation_size; ++i) {
        unsigned src = s->row_src[i];
        if (src && src - 1u != h->id && bit_get(map, i) && !bit_get(s->weak, i) && bit_get(s->coded, i) &&
            ((h->heard >> (src - 1u)) & 1u) && !((h->disputed >> (src - 1u)) & 1u)) {
            h->disputed |= 1u << (src - 1u);
            h->dispute_slot = h->cur_slot;
        }
    }
}

static void check_disputes(mx_state *s)
{
    mx_header *h = &s->h;
    if (!h->disputed || (unsigned)(uint16_t)(h->cur_slot - h->dispute_slot) <
                            MX_SILENCE_SLOTS(h->cfg.num_nodes, h->cfg.generation_size))
        return;
    if (h->ack_map & ~(1u << h->id)) /* an `ALL_FULL` was heard: it covers them now */
        h->fr_map |= h->disputed & h->node_all;
    h->disputed = 0;
    update_progress(s);
}

/* In-round silence (mx_row_source, MX_TERM_DONE). (1) A node whose rows this node learnt to be weak
 * zeros from another node's map, and that it never heard, is absent. (2) After the first pass and
 * MX_SILENCE_SLOTS without an innovative packet, while no other node is known to have full rank,
 * if the only rows missing are those of candidates whose rows appear in no coding vector seen
 * here, those nodes are declared silent: their rows become weak zeros (spread in the weak-zero
 * map) and they are absent. Never contradicts what the
 * node holds: a row in no seen coding vector is in no stored combination. */
static void check_silence(mx_state *s)
{
    mx_header *h = &s->h;
    const unsigned g = h->cfg.generation_size, n = h->cfg.num_nodes;
    const unsigned first_pass = h->pass_len ? h->pass_len : n;
    /* A node that has heard nobody at all cannot tell a late network from a dead one: the others may
     * still be in the previous round's quiet end or computing. That end comes MX_QUIET_SLOTS after
     * their last packet accepted, and that packet can itself come up to a run of lost ones (the same
     * MX_QUIET_SLOTS bound) before this node left: so twice that. One MX_QUIET_SLOTS was a race
     * (2 nodes, 30 % loss, emulated boards: the other arrived 40 slots late, in the slot this node
     * ended, stop 57). It costs only a round whose network is dead or late. */
    const unsigned wait = MX_SILENCE_SLOTS(n, g) + ((h->seen & ~(1u << h->id)) ? 0u : 2u * MX_QUIET_SLOTS(n));
    unsigned last, i;
    uint32_t cand, full = 0, partly = 0, missing = 0;
    if (!h->has_src || h->cfg.termination != MX_TERM_DONE || !h->synced)
        return;
    cand = silence_candidates(s);
    if (!cand)
        return;
    if (h->weak_new) { /* (1) */
        h->weak_new = 0;
        for (i = 0; i < g; ++i) {
            if (!s->row_src[i])
                continue;
            if (bit_get(s->weak, i))
                full |= 1u << (s->row_src[i] - 1u);
            else
                partly |= 1u << (s->row_src[i] - 1u);
        }
        if (full & ~partly & cand) {
            make_absent(s, full & ~partly & cand);
            update_progress(s);
            cand = silence_candidates(s);
        }
    }
    last = h->fresh_slot == MX_NO_SLOT ? h->sync_slot : h->fresh_slot;
    if (!cand || h->rank == g || h->cur_slot < first_pass + wait || h->cur_slot < last + wait)
        return;
    /* an owner not heard yet still counts as a neighbour during discovery (its slots are kept free
     * for it), so it is not declared silent before that ends either */
    if ((unsigned)(h->cur_slot - h->sync_slot) < MX_DISCOVERY_SLOTS(n))
        return;
    /* Another node has full rank: every row exists somewhere, so the missing ones are still on their
     * way (long chains) — or were declared weak there, and the weak-zero map brings them, (1). Without
     * this, 75 of 3000 rounds on a 16-node line at G = 8 declared a live sender silent. */
    if (h->fr_map & ~(1u << h->id) & ~h->cfg.absent)
        return;
    /* (2): which nodes' rows are missing, and are they all candidates never coded into a packet? */
    reduce_full(s);
    for (i = 0; i < g; ++i) {
        unsigned src;
        if (bit_get(s->decoded, i) || bit_get(s->weak, i))
            continue;
        src = s->row_src[i];
        if (!src || !((cand >> (src - 1u)) & 1u) || bit_get(s->coded, i) || bit_get(s->pivots, i))
            return; /* a row this node still waits for with reason */
        missing |= 1u << (src - 1u);
    }
    for (i = 0; i < g; ++i) /* a silent node's every row must be unseen, not only the missing ones */
        if (s->row_src[i] && ((missing >> (s->row_src[i] - 1u)) & 1u) && bit_get(s->coded, i))
            return;
    if (!missing)
        return;
    for (i = 0; i < g; ++i)
        if (s->row_src[i] && ((missing >> (s->row_src[i] - 1u)) & 1u) && !bit_get(s->weak, i))
            learn_weak(s, i);
    h->wz_pending = 2;
    make_absent(s, missing);
    update_progress(s);
}

/* Nodes known to be in the round: heard, known to have full rank, out of it (absent), or the
 * writer of a row seen in a coding vector. */
static uint32_t joined_nodes(const mx_state *s)
{
    const mx_header *h = &s->h;
    uint32_t m = h->heard | h->fr_map | h->cfg.absent | (1u << h->id);
    unsigned i;
    if (h->has_src)
        for (i = 0; i < h->cfg.generation_size && (m & h->node_all) != h->node_all; ++i)
            if (s->row_src[i] && bit_get(s->coded, i))
                m |= 1u << (s->row_src[i] - 1u);
    return m & h->node_all;
}

/* The quiet end (MX_QUIET_SLOTS): full rank, after the first pass, and nothing accepted for that
 * long, while every node is known to be in the round or to have full rank — the silence is then not
 * nodes that have not joined yet (on a board a node can reach a round late, and it would need this
 * one's packets). */
static void check_quiet(mx_state *s)
{
    mx_header *h = &s->h;
    unsigned since = h->heard_slot;
    if (h->cfg.termination != MX_TERM_DONE || h->rank != h->cfg.generation_size || h->cur_slot <= h->pass_len ||
        h->cur_slot >= h->end_slot)
        return;
    if (h->st.slot_full_rank > since)
        since = h->st.slot_full_rank;
    if (h->pass_len > since)
        since = h->pass_len;
    if ((unsigned)(h->cur_slot - since) < MX_QUIET_SLOTS(h->cfg.num_nodes))
        return;
    if (h->st.slot_all_full != MX_NO_SLOT || joined_nodes(s) == h->node_all)
        h->end_slot = h->cur_slot;
}

int mx_slot_end(mx_state *s, uint16_t slot)
{
    mx_header *h;
    if (!s)
        return MX_E_NULL;
    h = &s->h;
    if (h->phase == PH_IDLE)
        return h->finished ? MX_OK : MX_E_STATE;
    if (!h->scan_slot && slot != h->cur_slot)
        return MX_E_SLOT;
    if (h->phase == PH_RX)
        h->st.rx_timeout++;
    h->phase = PH_IDLE;
    if (!h->synced) {
        if (h->scan_left)
            h->scan_left--;
        if (h->reserve && h->mode == MX_ARM_LISTENER &&
            (unsigned)(h->cfg.round_length - h->scan_left) >= h->cfg.takeover_slots) {
            take_over(s); /* nothing heard: the initiator is dead (or far too late) */
            return MX_OK;
        }
        if (!h->scan_left)
            finish(s, MX_NO_SLOT);
        return MX_OK;
    }
    h->next_slot = (uint16_t)(h->cur_slot + 1u);
    check_silence(s);
    check_disputes(s);
    check_acks(s);
    check_quiet(s);
    if (h->cur_slot >= h->end_slot)
        finish(s, h->cur_slot);
    return MX_OK;
}

int mx_prepare(mx_state *s)
{
    mx_header *h;
    unsigned t;
    if (!s)
        return MX_E_NULL;
    h = &s->h;
    if (h->phase == PH_IDLE)
        return MX_E_STATE;
    t = (unsigned)h->cur_slot + 1u;
    if (!h->synced || h->finished || h->mode == MX_ARM_PASSIVE || t > h->end_slot)
        return MX_OK;
    if (!words_zero(s->unsent, h->cvw) && slot_owner(s, t) == h->id)
        return MX_OK; /* its next own packet is a systematic row: nothing to combine */
    combination_mask(s, t, s->prep_mask);
    memset(s->scratch[1], 0, h->stride * sizeof(uint32_t));
    xor_rows(s, s->scratch[1], s->prep_mask);
    h->prep_slot = (uint16_t)t;
    return MX_OK;
}

int mx_finished(const mx_state *s) { return s ? s->h.finished : 1; }
int mx_synced(const mx_state *s) { return s ? s->h.synced : 0; }
int mx_taken_over(const mx_state *s) { return s ? s->h.taken_over : 0; }
uint16_t mx_next_slot(const mx_state *s) { return s ? s->h.next_slot : 0u; }

void mx_slot_batch(mx_state *const *states, uint16_t count, uint16_t slot, int8_t *actions, uint8_t *packets,
                   uint16_t stride)
{
    unsigned i;
    for (i = 0; i < count; ++i) {
        uint16_t len = 0;
        const uint16_t t = slot == MX_NO_SLOT ? states[i]->h.next_slot : slot;
        actions[i] = (int8_t)mx_slot(states[i], t, packets + (size_t)i * stride, &len);
    }
}

uint16_t mx_deliver_batch(mx_state *const *states, uint16_t count, uint16_t slot, const uint8_t *packets,
                          uint16_t stride, const int16_t *from, int8_t *rx_status)
{
    unsigned i, finished = 0;
    for (i = 0; i < count; ++i) {
        mx_state *s = states[i];
        const uint16_t t = slot == MX_NO_SLOT ? s->h.cur_slot : slot;
        int r = 127;
        if (from && from[i] >= 0 && s->h.phase == PH_RX)
            r = mx_receive(s, t, packets + (size_t)from[i] * stride, s->h.pkt_len);
        if (rx_status)
            rx_status[i] = (int8_t)r;
        (void)mx_slot_end(s, t);
        finished += s->h.finished ? 1u : 0u;
    }
    return (uint16_t)finished;
}

/* ---- blocking loop -------------------------------------------------------------------------- */

int32_t mx_start(mx_state *s, const mx_radio_hal *hal, void *ctx)
{
    uint8_t buf[MX_MAX_PACKET_LEN];
    if (!s || !hal || !hal->wait_slot || !hal->transmit || !hal->receive || !hal->sync || !hal->off ||
        !hal->listen != !hal->tx_done)
        return MX_E_NULL;
    if (s->h.mode == MODE_NONE || s->h.phase != PH_IDLE)
        return MX_E_STATE;
    while (!s->h.finished) {
        uint16_t slot = 0, len = 0;
        int act, synced = s->h.synced;
        if (synced)
            slot = s->h.next_slot;
        /* decide and build the packet in the gap after the last packet, before waiting for the
         * slot: the time between the wait and the radio's start is far too short for it
         * (docs/results/mixer_budget.md) */
        act = mx_slot(s, slot, buf, &len);
        if (act < 0)
            return act;
        if (synced)
            hal->wait_slot(ctx, slot);
        if (act == MX_ACT_TX) {
            if (hal->transmit(ctx, buf, len) < 0)
                return MX_E_HAL;
            if (hal->tx_done) {
                (void)mx_prepare(s); /* while the packet goes out */
                if (hal->tx_done(ctx) < 0)
                    return MX_E_HAL;
            }
        } else if (act == MX_ACT_RX) {
            uint32_t t = 0;
            int n;
            if (hal->listen) {
                /* the receiver is armed: combine the next packet while this one is on the air */
                if (hal->listen(ctx, !synced) < 0)
                    return MX_E_HAL;
                (void)mx_prepare(s);
            }
            n = hal->receive(ctx, buf, (uint16_t)sizeof buf, !synced, &t);
            if (n < 0)
                return MX_E_HAL;
            if (n > 0 && mx_receive(s, slot, buf, (uint16_t)n) >= 0)
                hal->sync(ctx, s->h.cur_slot, t);
        }
        (void)mx_slot_end(s, s->h.cur_slot);
        if (!synced && s->h.synced && s->h.mode == MX_ARM_INITIATOR && hal->initiate)
            hal->initiate(ctx); /* the backup took over: slot 0 is next */
    }
    hal->off(ctx);
    /* a node that was never done (it heard too little) still ends its round normally: its last
     * slot, so that the caller can tell it from an error (all errors are < 0) */
    return s->h.st.slot_done == MX_NO_SLOT ? (int32_t)s->h.cur_slot : (int32_t)s->h.st.slot_done;
}

/* ---- results -------------------------------------------------------------------------------- */

int mx_row_status(mx_state *s, uint16_t row)
{
    if (!s)
        return MX_E_NULL;
    if (row >= s->h.cfg.generation_size)
        return MX_E_ROW;
    if (bit_get(s->weak, row))
        return MX_ROW_WEAK;
    reduce_full(s);
    return bit_get(s->decoded, row) ? MX_ROW_DECODED : MX_ROW_MISSING;
}

const uint8_t *mx_read(mx_state *s, uint16_t row, uint16_t *len)
{
    int st = mx_row_status(s, row);
    if (len)
        *len = 0;
    if (st == MX_ROW_WEAK)
        return MX_WEAK_ZERO;
    if (st != MX_ROW_DECODED)
        return NULL;
    if (len)
        *len = s->h.cfg.payload_size;
    return (const uint8_t *)(row_ptr(s, row) + s->h.cvw);
}

uint16_t mx_rank(const mx_state *s) { return s ? s->h.rank : 0u; }

int mx_coded_row(mx_state *s, uint16_t pivot, uint8_t *cv, uint8_t *payload)
{
    const uint32_t *r;
    if (!s)
        return MX_E_NULL;
    if (pivot >= s->h.cfg.generation_size)
        return MX_E_ROW;
    if (!bit_get(s->pivots, pivot))
        return 0;
    reduce_full(s);
    r = row_ptr(s, pivot);
    if (cv)
        words_to_bytes(cv, s->h.cv_bytes, r);
    if (payload)
        memcpy(payload, (const uint8_t *)(r + s->h.cvw), s->h.cfg.payload_size);
    return 1;
}

const mx_counters *mx_stats(const mx_state *s) { return s ? &s->h.st : NULL; }

uint16_t mx_row_slot(const mx_state *s, uint16_t row)
{
    if (!s || row >= s->h.cfg.generation_size)
        return MX_NO_SLOT;
    return s->rank_up[row];
}

uint32_t mx_full_rank_map(const mx_state *s) { return s ? s->h.fr_map : 0u; }
uint32_t mx_heard_map(const mx_state *s) { return s ? s->h.seen : 0u; }

uint32_t mx_alive_map(const mx_state *s)
{
    uint32_t m;
    unsigned i;
    if (!s)
        return 0u;
    m = s->h.seen | s->h.coded_by;
    if (s->h.has_src)
        for (i = 0; i < s->h.cfg.generation_size; ++i)
            if (s->row_src[i] && bit_get(s->coded, i) && !bit_get(s->own, i)) /* received, not written here */
                m |= 1u << (s->row_src[i] - 1u);
    return m & ~(1u << s->h.id);
}
uint32_t mx_silent_map(const mx_state *s) { return s ? s->h.silenced : 0u; }
