/* Fuzz harness for whole Mixer rounds: several nodes in one process, driven slot by slot.
 *
 * libFuzzer (clang -fsanitize=fuzzer,address,undefined -DMX_FUZZ_LIBFUZZER): the fuzzer calls
 * LLVMFuzzerTestOneInput. Without -DMX_FUZZ_LIBFUZZER this file builds (gcc or clang) as a replay
 * driver: main() runs every file named on the command line (the tests replay fuzz/corpus_net/).
 *
 * fuzz_mixer.c attacks one node with crafted packets and checks it against a reference decoder
 * (small G and P); this harness runs real rounds at the full size the firmware supports:
 *   n 1..16 nodes, G 1..MX_MAX_G (256) rows, P 1..min(240, the payload MX_MAX_PACKET_LEN leaves),
 *   all MX_FEAT_* combinations (coordinated TX, row requests, weak zeros), both termination
 *   policies, any linger, initiator, listeners, a passive node, round lengths up to 1024, in-round
 *   silence, and a backup initiator that takes a round over (the initiator stepped or silent).
 *
 * Input: a configuration header, then one byte per event (see the comments at the reader calls):
 *   a slot in which every node steps and each receiving node hears one of the transmitters, a slot
 *   with a loss mask (who receives) or a sleep mask (whose driver skips the slot), a slot in which
 *   one receiver gets a corrupted copy (bit flips, truncation, extension, a rewritten header byte),
 *   or a gap of slots in which nobody is stepped.
 *
 * Invariants checked after every slot, for every node: the status codes of the step API; rank never
 * exceeds G and never decreases; what mx_receive reports (innovative iff the rank rose; a packet of
 * the wrong length is always rejected; a rejected packet changes nothing; an intact packet between
 * untainted nodes is accepted); counters consistent with each other; full rank iff slot_full_rank is
 * set; a finished node stays off and its end obeys the termination policy; every transmitted packet
 * passes mx_packet_check, carries the slot and the sender, and, for an untainted sender, its payload
 * is the XOR of the true messages its coding vector names; every row an untainted node decodes
 * equals the true message, every weak row it reports is a true weak zero, and once it has full
 * rank it decodes every row. A node is tainted once it accepts a corrupted packet or a packet from a
 * tainted node (its rows may then be wrong; only the structural invariants apply to it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mixer.h"

#define FZ_MAX_N 16u
#define FZ_MAX_G MX_MAX_G
#define FZ_MAX_P 240u /* codegen/plan/mixer_schedule.py MAX_PAYLOAD */
#define FZ_MAX_EVENTS 512u
#define FZ_MAX_R 1024u
/* Work budget per input, in n * G * (coding vector + payload bytes) per slot: a round at the largest
 * size gets about 20 slots, a small one its whole length; this keeps an execution within a few ms. */
#define FZ_BUDGET 20000000u

#if FZ_MAX_P > MX_MAX_P
#error "the planner's payload limit exceeds MX_MAX_P"
#endif

#include "fuzz_input.h"

typedef struct {
    mx_state s;
    uint8_t tainted;
    uint8_t mode;
    uint8_t full_checked; /* full-rank decode check done */
    uint8_t scan;         /* not synchronised at this slot's mx_slot */
    int32_t off;          /* its slot numbers minus the global slot (a corrupted sync shifts them) */
    int act;
    uint16_t slot;        /* slot passed to mx_slot this slot */
    uint16_t rank;        /* rank after the previous slot */
    uint16_t heard;       /* its slot of the last accepted packet (the quiet end counts from it) */
    uint16_t tx_len;
    uint8_t tx[MX_MAX_PACKET_LEN];
} node;

static struct {
    node nd[FZ_MAX_N];
    mx_config cfg;
    unsigned n, g, p, plen, cvb, shares_mode;
    unsigned sources; /* rows' senders named (mx_row_source): in-round silence is on */
    unsigned takeover; /* a backup initiator is configured (cfg.backup, cfg.takeover_slots) */
    unsigned silent_init; /* the initiator is never stepped: its backup must take the round over */
    int32_t take_off;  /* the backup's slot numbers minus the global slot once it took over */
    unsigned taken;    /* the backup took over */
    uint8_t msg[FZ_MAX_G][FZ_MAX_P];
    uint8_t weak[FZ_MAX_G];  /* true weak zeros */
    uint8_t owner[FZ_MAX_G]; /* node that writes the row, FZ_MAX_N: nobody */
} W;

/* Nodes some node made absent inside the round (in-round silence): their rows may be weak zeros
 * anywhere, and packets contradicting that view may be dropped. */
static uint32_t silenced_any(void)
{
    uint32_t m = 0;
    unsigned i;
    for (i = 0; i < W.n; ++i)
        m |= mx_silent_map(&W.nd[i].s);
    return m;
}

/* The row's sender as named by mx_row_source (FZ_MAX_N: none named). */
static unsigned row_source(unsigned row);

/* The payload of coding vector cv (bytes) must be the XOR of the true messages it names. */
static void check_combination(const uint8_t *cv, const uint8_t *payload)
{
    uint8_t acc[FZ_MAX_P];
    unsigned i, k;
    memset(acc, 0, W.p);
    for (i = 0; i < W.g; ++i)
        if ((cv[i >> 3] >> (i & 7u)) & 1u)
            for (k = 0; k < W.p; ++k)
                acc[k] ^= W.msg[i][k];
    CHECK(memcmp(acc, payload, W.p) == 0);
}

/* One row of node x: status, mx_read and (untainted) agreement with the true messages. */
static void check_row(node *x, unsigned row, int combine)
{
    uint16_t len = 7;
    int st = mx_row_status(&x->s, (uint16_t)row);
    const uint8_t *p = mx_read(&x->s, (uint16_t)row, &len);
    uint8_t cv[MX_CV_BYTES(FZ_MAX_G)], pl[FZ_MAX_P];
    int has = mx_coded_row(&x->s, (uint16_t)row, cv, pl);
    CHECK(has == 0 || has == 1);
    /* a silenced node's row is weak where it was declared silent, whatever its true message */
    const int silenced = !W.weak[row] && row_source(row) < W.n && ((silenced_any() >> row_source(row)) & 1u);
    if (st == MX_ROW_WEAK) {
        CHECK(p == MX_WEAK_ZERO && len == 0);
        CHECK(x->tainted || W.weak[row] || silenced);
    } else if (st == MX_ROW_DECODED) {
        CHECK(p && p != MX_WEAK_ZERO && len == W.p && has == 1);
        CHECK(((cv[row >> 3] >> (row & 7u)) & 1u) && memcmp(p, pl, W.p) == 0);
        if (!x->tainted)
            CHECK(memcmp(p, W.msg[row], W.p) == 0);
    } else {
        CHECK(st == MX_ROW_MISSING && p == NULL && len == 0);
    }
    if (has == 1 && !x->tainted && (combine || st == MX_ROW_DECODED) && !(st == MX_ROW_WEAK && silenced))
        check_combination(cv, pl);
}

static void check_node(node *x, unsigned idx, int full)
{
    const mx_counters *st = mx_stats(&x->s);
    uint16_t rank = mx_rank(&x->s);
    unsigned row;
    CHECK(rank <= W.g && rank >= x->rank);
    CHECK(st->rank == rank);
    CHECK(st->rx_innovative + st->rx_non_innovative <= st->rx_ok);
    CHECK(st->rx_innovative <= rank);
    CHECK(st->tx + st->rx_ok + st->rx_timeout <= st->slots);
    CHECK(st->radio_on_slots <= st->slots);
    CHECK((st->slot_full_rank != MX_NO_SLOT) == (rank == W.g));
    if (x->mode == MX_ARM_PASSIVE)
        CHECK(st->tx == 0);
    if (rank == W.g)
        CHECK((mx_full_rank_map(&x->s) >> idx) & 1u);
    if (mx_finished(&x->s)) {
        uint16_t last = st->slot_done;
        /* a round the backup started ends takeover_slots earlier on its grid */
        const unsigned deadline = W.cfg.round_length - (mx_taken_over(&x->s) ? W.cfg.takeover_slots : 0u);
        if (last != MX_NO_SLOT && last + 1u < deadline) {
            /* ended before the deadline: only MX_TERM_DONE, with full rank, and either knowing all
             * have it — the linger starts once another node is known to know its full rank (or
             * sooner, the acknowledged end) — or by the quiet end: nothing accepted for
             * MX_QUIET_SLOTS since its last reception and its full rank */
            CHECK(W.cfg.termination == MX_TERM_DONE);
            CHECK(rank == W.g);
            if (!(st->slot_all_full != MX_NO_SLOT && st->slot_linger != MX_NO_SLOT &&
                  st->slot_linger >= st->slot_all_full && last <= (unsigned)st->slot_linger + W.cfg.linger_slots))
                CHECK(last >= (unsigned)x->heard + MX_QUIET_SLOTS(W.cfg.num_nodes) &&
                      last >= (unsigned)st->slot_full_rank + MX_QUIET_SLOTS(W.cfg.num_nodes));
        }
        if (last == MX_NO_SLOT)
            CHECK(!mx_synced(&x->s)); /* gave up scanning */
    }
    x->rank = rank;
    if (rank == W.g && !x->full_checked) {
        full = 1;
        x->full_checked = 1;
    }
    if (full) {
        for (row = 0; row < W.g; ++row) {
            check_row(x, row, 0);
            if (rank == W.g && !x->tainted)
                CHECK(mx_row_status(&x->s, (uint16_t)row) != MX_ROW_MISSING);
        }
    } else if ((st->slots + idx) % (1u + W.g / 16u) == 0u) {
        /* one row, rotating, every 1 + G/16 slots (reading runs the back substitution, G^2 work) */
        check_row(x, (unsigned)(st->slots * 7u + idx) % W.g, 1);
    }
}

static void check_tx(node *x, unsigned idx)
{
    const uint8_t *t = x->tx;
    CHECK(x->mode != MX_ARM_PASSIVE);
    CHECK(x->tx_len == W.plen);
    CHECK(mx_packet_check(&W.cfg, t, x->tx_len) == MX_OK);
    CHECK((unsigned)t[0] + 256u * t[1] == x->slot);
    CHECK(t[2] == idx);
    if (t[3] & MX_PKT_FULL_RANK)
        CHECK(mx_rank(&x->s) == W.g);
    if (!x->tainted) {
        unsigned i;
        for (i = 0; i < W.g; ++i)
            if ((t[MX_PKT_HEADER_LEN + (i >> 3)] >> (i & 7u)) & 1u)
                CHECK(!W.weak[i]);
        check_combination(t + MX_PKT_HEADER_LEN, t + MX_PKT_HEADER_LEN + W.cvb);
    }
}

static unsigned T;    /* global slot */
static uint32_t WORK; /* spent of FZ_BUDGET */

/* One slot. rx_mask: nodes that can receive; step_mask: nodes the driver steps. victim < n gets the
 * corrupted copy described by (op, pos, extra). */
static void run_slot(reader *in, uint32_t rx_mask, uint32_t step_mask, unsigned sel, unsigned victim)
{
    unsigned i, ntx = 0, op = 0, pos = 0, xb = 0;
    unsigned txs[FZ_MAX_N];
    if (victim < W.n) {
        op = rd(in);  /* 0-1 bit flips, 2 truncate, 3 extend, 4 header byte */
        pos = rd16(in);
        xb = rd(in);
    }
    for (i = 0; i < W.n; ++i) {
        node *x = &W.nd[i];
        x->act = -1;
        if (!((step_mask >> i) & 1u))
            continue;
        x->slot = (uint16_t)(T + (uint32_t)x->off);
        x->tx_len = 0;
        x->scan = (uint8_t)!mx_synced(&x->s);
        if (mx_finished(&x->s)) {
            uint16_t l = 0;
            CHECK(mx_slot(&x->s, x->slot, x->tx, &l) == MX_ACT_OFF);
            CHECK(mx_receive(&x->s, x->slot, x->tx, (uint16_t)W.plen) == MX_E_STATE);
            CHECK(mx_slot_end(&x->s, x->slot) == MX_OK);
            continue;
        }
        if (mx_synced(&x->s))
            CHECK(mx_next_slot(&x->s) <= x->slot);
        x->act = mx_slot(&x->s, x->slot, x->tx, &x->tx_len);
        CHECK(x->act == MX_ACT_OFF || x->act == MX_ACT_RX || x->act == MX_ACT_TX);
        /* combine the next packet in advance, as mx_start does while listening, in about half of the
         * slots (the seed decides): what goes on the air must stay a true combination either way */
        if (x->act != MX_ACT_OFF && ((W.cfg.seed >> ((i + x->slot) & 31u)) & 1u))
            CHECK(mx_prepare(&x->s) == MX_OK);
        if (x->act == MX_ACT_OFF) {
            CHECK(mx_finished(&x->s));
            CHECK(mx_slot_end(&x->s, x->slot) == MX_OK);
            x->act = -1;
        } else if (x->act == MX_ACT_TX) {
            check_tx(x, i);
            txs[ntx++] = i;
            CHECK(mx_receive(&x->s, x->slot, x->tx, x->tx_len) == MX_E_STATE);
        }
    }
    for (i = 0; i < W.n; ++i) {
        node *x = &W.nd[i];
        if (x->act == MX_ACT_RX && ntx && ((rx_mask >> i) & 1u)) {
            const node *src = &W.nd[txs[(sel + i) % ntx]];
            uint8_t pkt[MX_MAX_PACKET_LEN + 8];
            uint16_t len = src->tx_len, rank0 = mx_rank(&x->s);
            int corrupt = 0, r, synced0 = mx_synced(&x->s);
            memcpy(pkt, src->tx, len);
            if (i == victim) {
                switch (op % 5u) {
                case 0:
                case 1:
                    pkt[(pos >> 3) % len] ^= (uint8_t)(1u << (pos & 7u));
                    if (op % 5u == 1u)
                        pkt[(pos + xb) % len] ^= (uint8_t)(1u << (xb & 7u));
                    break;
                case 2:
                    len = (uint16_t)(pos % len);
                    break;
                case 3:
                    memset(pkt + len, xb, 1u + (pos & 7u));
                    len = (uint16_t)(len + 1u + (pos & 7u));
                    break;
                default:
                    pkt[pos % MX_PKT_HEADER_LEN] = (uint8_t)xb;
                    break;
                }
                corrupt = len != src->tx_len || memcmp(pkt, src->tx, len) != 0;
            }
            r = mx_receive(&x->s, x->slot, pkt, len);
            if (r >= 0) {
                x->heard = (uint16_t)((unsigned)pkt[0] + 256u * pkt[1]);
                CHECK(r == MX_RX_OK || r == MX_RX_INNOVATIVE);
                CHECK(len == W.plen && mx_packet_check(&W.cfg, pkt, len) == MX_OK);
                CHECK((r == MX_RX_INNOVATIVE) == (mx_rank(&x->s) > rank0));
                CHECK(mx_synced(&x->s));
                if (corrupt || src->tainted)
                    x->tainted = 1;
                if (!synced0) { /* a listener adopts the packet's slot */
                    x->slot = (uint16_t)((unsigned)pkt[0] + 256u * pkt[1]);
                    x->off = (int32_t)x->slot - (int32_t)T;
                    CHECK(x->off == 0 || x->tainted || (W.taken && x->off == W.take_off));
                }
                CHECK(mx_receive(&x->s, x->slot, pkt, len) == MX_E_STATE); /* one per slot */
            } else {
                CHECK(r <= MX_E_PKT_LEN);
                CHECK(mx_rank(&x->s) == rank0);
                CHECK(mx_synced(&x->s) == synced0);
                if (len != W.plen)
                    CHECK(r == MX_E_PKT_LEN);
                /* intact, between untainted synchronised nodes: must be accepted, unless in-round
                 * silence gave the two nodes different views of whose rows are weak */
                CHECK(corrupt || src->tainted || x->tainted || !synced0 ||
                      (silenced_any() && (r == MX_E_PKT_CODING || r == MX_E_PKT_INFO || r == MX_E_PKT_FLAGS)) ||
                      /* two grids: the initiator was stepped but its backup heard nothing of it */
                      (W.taken && !W.silent_init &&
                       (r == MX_E_PKT_WRONG_SLOT || r == MX_E_PKT_FLAGS)));
            }
        }
    }
    for (i = 0; i < W.n; ++i) {
        node *x = &W.nd[i];
        if (x->act < 0)
            continue;
        if (!x->scan) /* the wrong slot changes nothing */
            CHECK(mx_slot_end(&x->s, (uint16_t)(x->slot + 1u)) == MX_E_SLOT);
        CHECK(mx_slot_end(&x->s, x->slot) == MX_OK);
        if (x->scan && mx_synced(&x->s) && x->act == MX_ACT_RX && !W.taken && mx_taken_over(&x->s) &&
            i == W.cfg.backup && mx_stats(&x->s)->rx_ok == 0u) {
            /* the backup heard nothing for takeover_slots scan slots: it starts its own grid */
            CHECK(mx_stats(&x->s)->slots == W.cfg.takeover_slots);
            CHECK(mx_next_slot(&x->s) == 0u);
            W.taken = 1;
            W.take_off = -(int32_t)(T + 1u);
            x->off = W.take_off;
        } else if (mx_synced(&x->s)) {
            CHECK(mx_next_slot(&x->s) == (uint16_t)(x->slot + 1u));
        }
    }
    for (i = 0; i < W.n; ++i)
        check_node(&W.nd[i], i, 0);
    T++;
    WORK += W.n * W.g * (W.cvb + W.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned OWN_MODE;

static unsigned row_source(unsigned row)
{
    if (!W.sources)
        return FZ_MAX_N;
    if (W.takeover && row == 0u)
        return W.cfg.initiator; /* the header */
    return OWN_MODE == 0u ? row % W.n : OWN_MODE == 1u ? row * W.n / W.g : W.cfg.initiator;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader in = {data, size, 0};
    unsigned b, scale, i, k, pmax, own_mode, absent, passive, wmask, dead, events = 0;
    uint32_t all;
    int r;

    memset(&W.cfg, 0, sizeof W.cfg);
    /* header: n and a size scale, G (2 bytes), P (2 bytes), features/termination, initiator, R (2), linger (2), seed,
     * row owners, an absent node, a passive node, the weak-zero mask */
    b = rd(&in);
    W.n = 1u + (b & 15u);
    scale = b >> 4; /* G and P are drawn below a power of two: small rounds (fast) are common */
    W.g = 1u + rd16(&in) % (FZ_MAX_G >> (scale & 7u));
    W.cfg.num_nodes = (uint8_t)W.n;
    W.cfg.generation_size = (uint16_t)W.g;
    pmax = MX_MAX_PACKET_LEN - MX_PACKET_LEN(W.n, W.g, 0u);
    if (pmax > FZ_MAX_P)
        pmax = FZ_MAX_P;
    if (scale & 8u && pmax > 16u)
        pmax = 16u;
    W.p = 1u + rd16(&in) % pmax;
    W.cfg.payload_size = (uint16_t)W.p;
    b = rd(&in);
    W.cfg.features = (uint8_t)(b & MX_FEAT_ALL);
    W.cfg.termination = (uint8_t)((b >> 3) & 1u);
    W.shares_mode = (b >> 4) & 3u;
    W.cfg.initiator = (uint8_t)(rd(&in) % W.n);
    W.cfg.round_length = (uint16_t)(1u + rd16(&in) % FZ_MAX_R);
    W.cfg.linger_slots = (uint16_t)(rd16(&in) % W.cfg.round_length);
    W.cfg.seed = (uint32_t)rd(&in) * 0x9E3779B9u + 1u;
    own_mode = rd(&in) % 3u;
    absent = rd(&in);
    passive = rd(&in);
    /* bit 7 of the passive byte: every node names every row's sender, as the transport does */
    W.sources = (passive >> 7) & 1u;
    /* bit 6: a backup initiator (one more byte: its takeover slots and which node); bit 5: the
     * initiator is never stepped (dead), so only the backup can start the round */
    W.takeover = ((passive >> 6) & 1u) && W.n >= 2u && W.cfg.round_length >= 2u;
    W.silent_init = W.takeover && ((passive >> 5) & 1u);
    W.taken = 0;
    W.take_off = 0;
    if (W.takeover) {
        unsigned tk = rd(&in), lim = W.cfg.round_length - 1u < 96u ? W.cfg.round_length - 1u : 96u;
        W.cfg.takeover_slots = (uint16_t)(1u + tk % lim);
        W.cfg.backup = (uint8_t)((W.cfg.initiator + 1u + (tk >> 5) % (W.n - 1u)) % W.n);
    }
    OWN_MODE = own_mode;
    wmask = (W.cfg.features & MX_FEAT_WEAK_ZEROS) ? rd(&in) : 0u;

    CHECK(mx_config_check(&W.cfg) == MX_OK);
    W.plen = mx_packet_len(&W.cfg);
    W.cvb = MX_CV_BYTES(W.g);
    CHECK(W.plen == MX_PACKET_LEN(W.n, W.g, W.p) && W.plen <= MX_MAX_PACKET_LEN);

    /* bit 7 of the absent byte: the others know the absent node is dead (mx_config.absent, its rows
     * weak zeros everywhere, as the transport does after detecting it) and it is never stepped */
    dead = (absent & 0x80u) && absent % 32u < W.n && absent % 32u != W.cfg.initiator &&
                   (!W.takeover || absent % 32u != W.cfg.backup) && (W.cfg.features & MX_FEAT_WEAK_ZEROS)
               ? absent % 32u
               : FZ_MAX_N;
    for (i = 0; i < W.g; ++i) {
        W.owner[i] = (uint8_t)(own_mode == 0u ? i % W.n : own_mode == 1u ? i * W.n / W.g : W.cfg.initiator);
        if (W.owner[i] == absent % 32u)
            W.owner[i] = FZ_MAX_N; /* nobody writes it: full rank is out of reach */
        W.weak[i] = (uint8_t)((wmask >> (i & 7u)) & 1u);
        if (W.takeover && i == 0u) { /* row 0 is the initiator's header, which its backup also holds */
            W.owner[0] = W.cfg.initiator;
            W.weak[0] = 0;
        }
        if (dead < W.n && W.owner[i] == FZ_MAX_N && (own_mode == 0u ? i % W.n : own_mode == 1u ? i * W.n / W.g
                                                                                          : W.cfg.initiator) == dead)
            W.weak[i] = 1; /* the dead node's row: a weak zero at every live node */
        for (k = 0; k < W.p; ++k)
            W.msg[i][k] = W.weak[i] ? 0u : (uint8_t)((i * 167u + k * 13u + W.cfg.seed + (k >> 3)) ^ (i >> 3));
    }
    /* bits 4-5 of the features byte: the weighted first pass (mx_config.slot_shares) — as the
     * transport sets it (every writer's rows but row 0), or arbitrary shares from the seed, which need
     * not match the rows (the schedule only costs time then, never correctness) */
    if (W.shares_mode == 1u) {
        for (i = 1; i < W.g; ++i)
            if (W.owner[i] < W.n && !W.weak[i])
                W.cfg.slot_shares[W.owner[i]]++;
    } else if (W.shares_mode >= 2u) {
        for (i = 0; i < W.n; ++i)
            W.cfg.slot_shares[i] = (uint8_t)((W.cfg.seed >> (2u * (i & 15u))) & (W.shares_mode == 2u ? 3u : 15u));
    }
    CHECK(mx_config_check(&W.cfg) == MX_OK);
    for (i = 0; i < W.n; ++i) {
        node *x = &W.nd[i];
        mx_config c = W.cfg;
        if (dead < W.n) {
            c.absent = 1u << dead;
            CHECK(mx_init(&x->s, &c, (uint8_t)dead) == MX_E_ABSENT); /* never itself */
            if (i == dead)
                c.absent = 0;
        }
        CHECK(mx_init(&x->s, &c, (uint8_t)i) == MX_OK);
        if (W.sources) {
            unsigned row;
            for (row = 0; row < W.g; ++row)
                CHECK(mx_row_source(&x->s, (uint16_t)row, 1, (uint8_t)row_source(row)) == MX_OK);
            CHECK(mx_row_source(&x->s, (uint16_t)W.g, 1, 0) == MX_E_ROW);
            CHECK(mx_row_source(&x->s, 0, 1, (uint8_t)W.n) == MX_E_NODE_ID);
        }
        x->tainted = 0;
        x->full_checked = 0;
        x->rank = 0;
        x->heard = 0;
        x->off = 0;
    }
    for (i = 0; i < W.g; ++i) {
        if (W.owner[i] >= W.n) {
            if (dead < W.n && W.weak[i])
                for (k = 0; k < W.n; ++k)
                    if (k != dead)
                        CHECK(mx_write(&W.nd[k].s, (uint16_t)i, NULL, 0) == MX_OK);
            continue;
        }
        r = mx_write(&W.nd[W.owner[i]].s, (uint16_t)i, W.weak[i] ? NULL : W.msg[i], (uint16_t)W.p);
        CHECK(r == MX_OK);
        CHECK(mx_write(&W.nd[W.owner[i]].s, (uint16_t)i, W.msg[i], 1) == MX_E_DUPLICATE);
    }
    if (W.takeover) { /* the backup holds the initiator's header */
        node *bk = &W.nd[W.cfg.backup];
        CHECK(mx_backup_header(&W.nd[W.cfg.initiator].s, W.msg[0], (uint16_t)W.p) == MX_E_MODE);
        CHECK(mx_backup_header(&bk->s, W.msg[0], (uint16_t)(W.p + 1u)) == MX_E_LEN);
        CHECK(mx_backup_header(&bk->s, W.msg[0], (uint16_t)W.p) == MX_OK);
        CHECK(mx_backup_header(&bk->s, W.msg[0], (uint16_t)W.p) == MX_E_DUPLICATE);
    } else {
        CHECK(mx_backup_header(&W.nd[0].s, W.msg[0], 1) == MX_E_MODE); /* no backup configured */
    }

#ifdef FZ_SELFTEST_WRONG_MESSAGE /* the tests check that the harness notices a wrong row */
    W.msg[0][0] ^= 1u;
    W.weak[0] = 0;
#endif
    for (i = 0; i < W.n; ++i) {
        node *x = &W.nd[i];
        x->mode = i == W.cfg.initiator ? MX_ARM_INITIATOR : i == passive % 32u ? MX_ARM_PASSIVE : MX_ARM_LISTENER;
        if (x->mode != MX_ARM_INITIATOR)
            CHECK(mx_arm(&x->s, MX_ARM_INITIATOR) == MX_E_MODE);
        CHECK(mx_arm(&x->s, x->mode) == MX_OK);
        CHECK(mx_row_source(&x->s, 0, 1, 0) == MX_E_STATE);
        CHECK(mx_arm(&x->s, x->mode) == MX_E_STATE);
        CHECK(mx_write(&x->s, 0, W.msg[0], 1) == MX_E_STATE);
        check_node(x, i, 1);
    }

    all = ((1u << W.n) - 1u) & ~(dead < W.n ? 1u << dead : 0u); /* a dead node is never stepped */
    if (W.silent_init)
        all &= ~(1u << W.cfg.initiator);
    T = 0;
    WORK = 0;
    while (in.i < in.n && events++ < FZ_MAX_EVENTS && T < W.cfg.round_length + 4u && WORK < FZ_BUDGET) {
        unsigned ctl = rd(&in), kind = ctl & 3u, arg = ctl >> 2;
        switch (kind) {
        case 0: /* everybody steps and hears */
            run_slot(&in, all, all, arg, FZ_MAX_N);
            break;
        case 1: { /* a loss mask (arg bit 0 clear) or a sleep mask (set) */
            uint32_t m = rd16(&in) & all;
            if (arg & 1u)
                run_slot(&in, all, m, arg >> 1, FZ_MAX_N);
            else
                run_slot(&in, m, all, arg >> 1, FZ_MAX_N);
            break;
        }
        case 2: /* one receiver gets a corrupted copy */
            run_slot(&in, all, all, arg >> 4, (arg & 15u) % W.n);
            break;
        default: /* nobody is stepped for 1..64 slots, or the rest of the round runs clean */
            if (arg == 63u) {
                while (T < W.cfg.round_length + 1u && WORK < FZ_BUDGET)
                    run_slot(&in, all, all, T, FZ_MAX_N);
            } else {
                T += 1u + arg;
            }
            break;
        }
    }
    for (i = 0; i < W.n; ++i)
        check_node(&W.nd[i], i, 1);
#ifdef FZ_VERBOSE /* -DFZ_VERBOSE: one line per input (what a corpus entry exercises) */
    fprintf(stderr, "n=%u G=%u P=%u feat=%u term=%u R=%u slots=%u ranks", W.n, W.g, W.p, W.cfg.features,
            W.cfg.termination, W.cfg.round_length, T);
    for (i = 0; i < W.n; ++i)
        fprintf(stderr, " %u%s%s", mx_rank(&W.nd[i].s), W.nd[i].tainted ? "t" : "", mx_finished(&W.nd[i].s) ? "f" : "");
    fprintf(stderr, " sources=%u silenced=%x takeover=%u/%u taken=%u\n", W.sources, (unsigned)silenced_any(),
            W.takeover, W.silent_init, W.taken);
#endif
    return 0;
}

#ifndef MX_FUZZ_LIBFUZZER
#include "fuzz_replay.h"
#endif
