/* Fuzz harness for the Mixer receive path.
 *
 * libFuzzer (clang -fsanitize=fuzzer,address,undefined): the fuzzer calls LLVMFuzzerTestOneInput.
 * Without -DMX_FUZZ_LIBFUZZER this file also builds with gcc as a replay driver: main() runs every
 * file named on the command line through the same function (CI replays fuzz/corpus/ that way).
 *
 * One input is a configuration, some own rows, then a sequence of slot steps. Each step feeds the
 * node a raw packet, a structured packet (right length and slot, fuzzed contents), a packet
 * consistent with the true messages, or nothing; or skips slots. After every step the harness
 * checks the node against its own GF(2) reference decoder fed with the same accepted packets:
 * rank, every reduced row, which rows are readable and their payloads, weak rows. Every packet the
 * node transmits must pass mx_packet_check and be a combination in the span of what it holds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mixer.h"

#define FZ_MAX_G 40u
#define FZ_MAX_P 24u
#define FZ_MAX_N 8u

#include "fuzz_input.h"

/* ---- reference decoder: rows indexed by pivot (lowest set bit), Gauss-Jordan on demand ---- */

typedef struct {
    unsigned g, p;
    uint64_t cv[FZ_MAX_G];
    uint8_t pl[FZ_MAX_G][FZ_MAX_P];
    uint64_t have; /* pivots present */
    uint64_t weak;
} ref_dec;

static unsigned low_bit(uint64_t x)
{
    unsigned i = 0;
    while (!((x >> i) & 1u))
        ++i;
    return i;
}

/* Reduce (cv, pl) in place against the rows; returns the remaining coding vector. */
static uint64_t ref_reduce(const ref_dec *r, uint64_t cv, uint8_t *pl)
{
    while (cv) {
        unsigned i = low_bit(cv), k;
        if (!((r->have >> i) & 1u))
            break;
        cv ^= r->cv[i];
        for (k = 0; k < r->p; ++k)
            pl[k] ^= r->pl[i][k];
    }
    return cv;
}

static int ref_add(ref_dec *r, uint64_t cv, const uint8_t *payload)
{
    uint8_t pl[FZ_MAX_P];
    unsigned i;
    memcpy(pl, payload, r->p);
    cv = ref_reduce(r, cv, pl);
    if (!cv)
        return 0;
    i = low_bit(cv);
    r->cv[i] = cv;
    memcpy(r->pl[i], pl, r->p);
    r->have |= (uint64_t)1 << i;
    return 1;
}

static void ref_rref(ref_dec *r)
{
    unsigned i, j, k;
    for (i = r->g; i-- > 0;) {
        if (!((r->have >> i) & 1u))
            continue;
        for (j = 0; j < i; ++j) {
            if (((r->have >> j) & 1u) && ((r->cv[j] >> i) & 1u)) {
                r->cv[j] ^= r->cv[i];
                for (k = 0; k < r->p; ++k)
                    r->pl[j][k] ^= r->pl[i][k];
            }
        }
    }
}

static unsigned popcount64(uint64_t x)
{
    unsigned n = 0;
    while (x) {
        x &= x - 1u;
        ++n;
    }
    return n;
}

/* ---- input reader ---------------------------------------------------------------------------- */

static int more(const reader *r) { return r->i < r->n; }

/* ---- harness ----------------------------------------------------------------------------------- */

typedef struct {
    mx_state s; /* first: the state is large and wants alignment */
    mx_config cfg;
    ref_dec ref;
    uint8_t msg[FZ_MAX_G][FZ_MAX_P]; /* the true messages */
    uint8_t id;
    unsigned plen, cvb, ib;
} harness;

static uint64_t bytes_to_u64(const uint8_t *b, unsigned n)
{
    uint64_t v = 0;
    unsigned i;
    for (i = 0; i < n && i < 8u; ++i)
        v |= (uint64_t)b[i] << (8u * i);
    return v;
}

static void check_state(harness *h)
{
    ref_dec *r = &h->ref;
    const mx_counters *st = mx_stats(&h->s);
    unsigned row, k;
    CHECK(mx_rank(&h->s) == popcount64(r->have));
    CHECK(mx_rank(&h->s) <= h->cfg.generation_size);
    CHECK(st->rank == mx_rank(&h->s));
    ref_rref(r);
    for (row = 0; row < r->g; ++row) {
        uint8_t cv[8] = {0}, pl[FZ_MAX_P];
        uint16_t len = 99;
        int has = mx_coded_row(&h->s, (uint16_t)row, cv, pl);
        int status = mx_row_status(&h->s, (uint16_t)row);
        const uint8_t *p = mx_read(&h->s, (uint16_t)row, &len);
        int present = (int)((r->have >> row) & 1u);
        CHECK(has == present);
        if (present) {
            CHECK(bytes_to_u64(cv, h->cvb) == r->cv[row]);
            CHECK(memcmp(pl, r->pl[row], r->p) == 0);
        }
        if ((r->weak >> row) & 1u) {
            CHECK(status == MX_ROW_WEAK && p == MX_WEAK_ZERO && len == 0);
        } else if (present && r->cv[row] == (uint64_t)1 << row) {
            CHECK(status == MX_ROW_DECODED && p && len == r->p);
            for (k = 0; k < r->p; ++k)
                CHECK(p[k] == r->pl[row][k]);
        } else {
            CHECK(status == MX_ROW_MISSING && p == NULL && len == 0);
        }
    }
    CHECK(mx_row_status(&h->s, (uint16_t)r->g) == MX_E_ROW);
    CHECK(st->rx_innovative + st->rx_non_innovative <= st->rx_ok);
}

/* A packet the node transmitted: well formed, and its combination lies in the span. */
static void check_tx(harness *h, const uint8_t *pkt, uint16_t len, uint16_t slot)
{
    uint8_t pl[FZ_MAX_P];
    uint64_t cv;
    CHECK(len == h->plen);
    CHECK(mx_packet_check(&h->cfg, pkt, len) == MX_OK);
    CHECK((unsigned)pkt[0] + 256u * pkt[1] == slot);
    CHECK(pkt[2] == h->id);
    cv = bytes_to_u64(pkt + MX_PKT_HEADER_LEN, h->cvb);
    memcpy(pl, pkt + MX_PKT_HEADER_LEN + h->cvb, h->ref.p);
    CHECK((cv & h->ref.weak) == 0);
    cv = ref_reduce(&h->ref, cv, pl);
    CHECK(cv == 0);
    for (unsigned k = 0; k < h->ref.p; ++k)
        CHECK(pl[k] == 0);
    if (pkt[3] & MX_PKT_FULL_RANK)
        CHECK(mx_rank(&h->s) == h->cfg.generation_size);
}

/* Mirror an accepted packet into the reference. */
static void mirror(harness *h, const uint8_t *pkt)
{
    const uint8_t *cvp = pkt + MX_PKT_HEADER_LEN, *pl = cvp + h->cvb, *info = pl + h->cfg.payload_size;
    uint64_t cv = bytes_to_u64(cvp, h->cvb);
    if (cv)
        (void)ref_add(&h->ref, cv, pl);
    if ((pkt[3] & MX_PKT_INFO_MASK) == MX_INFO_WEAK_ZEROS) {
        uint64_t w = bytes_to_u64(info, h->cvb) & ~h->ref.weak;
        static const uint8_t zero[FZ_MAX_P] = {0};
        while (w) {
            unsigned i = low_bit(w);
            w &= w - 1u;
            h->ref.weak |= (uint64_t)1 << i;
            (void)ref_add(&h->ref, (uint64_t)1 << i, zero);
        }
    }
}

static void build_packet(harness *h, reader *in, uint8_t *pkt, unsigned kind, uint16_t slot)
{
    unsigned g = h->cfg.generation_size, n = h->cfg.num_nodes, k, i;
    uint8_t *cvp = pkt + MX_PKT_HEADER_LEN, *pl = cvp + h->cvb, *info = pl + h->cfg.payload_size;
    unsigned sel = rd(in);
    memset(pkt, 0, h->plen);
    pkt[0] = (uint8_t)slot;
    pkt[1] = (uint8_t)(slot >> 8);
    pkt[2] = (uint8_t)((h->id + 1u + rd(in) % (n > 1u ? n - 1u : 1u)) % n);
    pkt[3] = (uint8_t)rd(in);
    for (k = 0; k < h->cvb; ++k)
        cvp[k] = (uint8_t)rd(in);
    if (!(sel & 1u) && (g & 7u))
        cvp[h->cvb - 1u] &= (uint8_t)((1u << (g & 7u)) - 1u);
    if (kind == 2) {
        /* consistent with the true messages; flags and info from the valid set */
        uint64_t cv = bytes_to_u64(cvp, h->cvb) & ~h->ref.weak;
        for (k = 0; k < h->cvb; ++k)
            cvp[k] = (uint8_t)(cv >> (8u * k));
        for (i = 0; i < g; ++i)
            if ((cv >> i) & 1u)
                for (k = 0; k < h->cfg.payload_size; ++k)
                    pl[k] ^= h->msg[i][k];
        pkt[3] &= (uint8_t)(MX_PKT_INFO_MASK | MX_PKT_FULL_RANK);
        if ((pkt[3] & MX_PKT_INFO_MASK) > MX_INFO_WEAK_ZEROS)
            pkt[3] &= (uint8_t)~MX_PKT_INFO_MASK;
        switch (pkt[3] & MX_PKT_INFO_MASK) {
        case MX_INFO_REQUEST:
            pkt[3] &= (uint8_t)~MX_PKT_FULL_RANK;
            info[0] = (uint8_t)(1u + rd(in) % 127u);
            if (g < 8u)
                info[0] = (uint8_t)(info[0] & ((1u << g) - 1u) ? info[0] & ((1u << g) - 1u) : 1u);
            break;
        case MX_INFO_FULL_RANK: {
            uint32_t m = (uint32_t)rd(in) & ((1u << n) - 1u) & ~(1u << h->id);
            m = (pkt[3] & MX_PKT_FULL_RANK) ? (m | (1u << pkt[2])) : (m & ~(1u << pkt[2]));
            for (k = 0; k < 4u && k < h->ib; ++k)
                info[k] = (uint8_t)(m >> (8u * k));
            break;
        }
        case MX_INFO_WEAK_ZEROS: {
            /* only rows nobody wrote data to: the true message of a weak row is zero */
            unsigned row = rd(in) % g;
            for (k = 0; k < h->cfg.payload_size; ++k)
                if (h->msg[row][k])
                    break;
            if (k == h->cfg.payload_size)
                info[row >> 3] |= (uint8_t)(1u << (row & 7u));
            else
                pkt[3] &= (uint8_t)~MX_PKT_INFO_MASK;
            break;
        }
        default:
            break;
        }
        if (bytes_to_u64(cvp, h->cvb) == 0)
            memset(pl, 0, h->cfg.payload_size);
    } else {
        for (k = 0; k < h->cfg.payload_size; ++k)
            pl[k] = (uint8_t)rd(in);
        for (k = 0; k < h->ib; ++k)
            info[k] = (sel & 2u) ? (uint8_t)rd(in) : 0u;
    }
}

static harness H; /* the harness itself; mx_state has no globals of its own */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader in = {data, size, 0};
    harness *h = &H;
    unsigned b0, b3, b4, nwrites, i, k, steps = 0;
    uint8_t pkt[MX_MAX_PACKET_LEN + 8], tx[MX_MAX_PACKET_LEN];
    uint16_t slot = 0;
    uint8_t mode;
    int r;

    memset(&h->cfg, 0, sizeof h->cfg);
    memset(pkt, 0, sizeof pkt);
    b0 = rd(&in);
    h->cfg.num_nodes = (uint8_t)(1u + (b0 & 7u));
    h->cfg.generation_size = (uint16_t)(1u + rd(&in) % FZ_MAX_G);
    h->cfg.payload_size = (uint16_t)(1u + rd(&in) % FZ_MAX_P);
    b3 = rd(&in);
    h->cfg.features = (uint8_t)(b3 & MX_FEAT_ALL);
    h->cfg.termination = (uint8_t)((b3 >> 3) & 1u);
    b4 = rd(&in);
    h->id = (uint8_t)(b4 % h->cfg.num_nodes);
    h->cfg.initiator = (uint8_t)((b4 >> 4) % h->cfg.num_nodes);
    h->cfg.round_length = (uint16_t)(4u + rd(&in) * 2u);
    h->cfg.linger_slots = (uint16_t)(rd(&in) % h->cfg.round_length);
    h->cfg.seed = (uint32_t)rd(&in) * 0x01000193u;
    if (b3 & 0x10u) /* a weighted first pass, 0..3 slots per node drawn from the seed */
        for (i = 0; i < h->cfg.num_nodes; ++i)
            h->cfg.slot_shares[i] = (uint8_t)((h->cfg.seed >> (2u * i)) & 3u);
    if ((b3 & 0x20u) && (b0 >> 3) & 1u) /* a share for a node that does not exist: rejected */
        h->cfg.slot_shares[h->cfg.num_nodes] = 1u;
    if ((b0 >> 3) & 1u) /* now and then an invalid configuration */
        h->cfg.round_length = (uint16_t)(rd(&in) % 3u);
    r = mx_init(&h->s, &h->cfg, h->id);
    if (r != MX_OK) {
        CHECK(mx_config_check(&h->cfg) == r || r == MX_E_NODE_ID);
        return 0;
    }
    h->plen = mx_packet_len(&h->cfg);
    h->cvb = (h->cfg.generation_size + 7u) / 8u;
    h->ib = h->plen - MX_PKT_HEADER_LEN - h->cvb - h->cfg.payload_size;
    CHECK(h->plen == MX_PACKET_LEN(h->cfg.num_nodes, h->cfg.generation_size, h->cfg.payload_size));
    memset(&h->ref, 0, sizeof h->ref);
    h->ref.g = h->cfg.generation_size;
    h->ref.p = h->cfg.payload_size;
    /* true messages: row i belongs to node i % n; a few rows are weak zeros (message 0) */
    for (i = 0; i < h->ref.g; ++i)
        for (k = 0; k < h->ref.p; ++k)
            h->msg[i][k] = (uint8_t)((i * 131u + k * 7u + b0) | 1u);

    nwrites = rd(&in) & 7u;
    for (i = 0; i < nwrites; ++i) {
        unsigned row = rd(&in) % h->ref.g, weak = (row % 3u == 0u) && (h->cfg.features & MX_FEAT_WEAK_ZEROS);
        if (weak) {
            memset(h->msg[row], 0, h->ref.p);
            r = mx_write(&h->s, (uint16_t)row, NULL, 0);
            if (r == MX_OK) {
                static const uint8_t zero[FZ_MAX_P] = {0};
                h->ref.weak |= (uint64_t)1 << row;
                CHECK(ref_add(&h->ref, (uint64_t)1 << row, zero));
            }
        } else {
            r = mx_write(&h->s, (uint16_t)row, h->msg[row], (uint16_t)h->ref.p);
            if (r == MX_OK)
                CHECK(ref_add(&h->ref, (uint64_t)1 << row, h->msg[row]));
        }
        CHECK(r == MX_OK || r == MX_E_DUPLICATE);
    }
    mode = (uint8_t)((b3 >> 4) % 3u);
    if (mode == MX_ARM_INITIATOR && h->id != h->cfg.initiator) {
        CHECK(mx_arm(&h->s, mode) == MX_E_MODE);
        mode = MX_ARM_LISTENER;
    }
    CHECK(mx_arm(&h->s, mode) == MX_OK);
    check_state(h);

    while (more(&in) && steps++ < 400u) {
        unsigned ctl = rd(&in), kind = ctl & 3u;
        uint16_t tx_len = 0, use_slot;
        int act;
        if (mx_finished(&h->s)) {
            CHECK(mx_slot(&h->s, slot, tx, &tx_len) == MX_ACT_OFF);
            break;
        }
        if (mx_synced(&h->s)) {
            slot = mx_next_slot(&h->s);
            if (kind == 3)
                slot = (uint16_t)(slot + (ctl >> 2) % 4u); /* missed slots */
        }
        act = mx_slot(&h->s, slot, tx, &tx_len);
        CHECK(act == MX_ACT_OFF || act == MX_ACT_RX || act == MX_ACT_TX);
        if (act == MX_ACT_OFF) {
            CHECK(mx_finished(&h->s));
            break;
        }
        if ((h->cfg.seed >> (slot & 31u)) & 1u) /* the next packet combined in advance (mx_start) */
            CHECK(mx_prepare(&h->s) == MX_OK);
        if (act == MX_ACT_TX) {
            CHECK(mode != MX_ARM_PASSIVE);
            check_tx(h, tx, tx_len, slot);
            CHECK(mx_receive(&h->s, slot, tx, tx_len) == MX_E_STATE);
        } else if (kind != 3) {
            uint16_t plen;
            /* scanning: a packet may carry any slot; synchronised: the current one */
            use_slot = mx_synced(&h->s) ? slot : (uint16_t)(rd(&in) % (h->cfg.round_length + 2u));
            if ((ctl & 0x80u) && mx_synced(&h->s))
                use_slot = (uint16_t)(slot + 1u + ((ctl >> 4) & 3u)); /* wrong slot */
            if (kind == 0) {
                plen = (uint16_t)rd(&in);
                if (plen > MX_MAX_PACKET_LEN + 8u)
                    plen = MX_MAX_PACKET_LEN + 8u;
                for (k = 0; k < plen; ++k)
                    pkt[k] = (uint8_t)rd(&in);
                if ((ctl & 0x40u) && plen >= 2u) { /* mostly-raw: fix the length */
                    plen = (uint16_t)h->plen;
                }
            } else {
                build_packet(h, &in, pkt, kind, use_slot);
                plen = (uint16_t)h->plen;
            }
            {
                int synced_before = mx_synced(&h->s);
                uint16_t rank_before = mx_rank(&h->s);
                r = mx_receive(&h->s, slot, pkt, plen);
                if (r >= 0) {
                    CHECK(mx_packet_check(&h->cfg, pkt, plen) == MX_OK);
                    mirror(h, pkt);
                    CHECK((r == MX_RX_INNOVATIVE) == (mx_rank(&h->s) > rank_before));
                    if (!synced_before)
                        slot = (uint16_t)((unsigned)pkt[0] + 256u * pkt[1]);
                } else {
                    CHECK(mx_rank(&h->s) == rank_before);
                    CHECK(r <= MX_E_PKT_LEN || r == MX_E_STATE);
                }
                if (r >= 0) /* one packet per slot */
                    CHECK(mx_receive(&h->s, slot, pkt, plen) == MX_E_STATE);
            }
        }
        CHECK(mx_slot_end(&h->s, slot) == MX_OK);
        check_state(h);
        if (!mx_synced(&h->s))
            slot = (uint16_t)(slot + 1u);
    }
    check_state(h);
    {
        const mx_counters *st = mx_stats(&h->s);
        CHECK(st->tx + st->rx_ok + st->rx_timeout <= st->slots);
        if (st->slot_full_rank != MX_NO_SLOT)
            CHECK(mx_rank(&h->s) == h->cfg.generation_size);
    }
    return 0;
}

#ifndef MX_FUZZ_LIBFUZZER
#include "fuzz_replay.h"
#endif
