/* mixer.c: a weak-zero map naming a row that a node holds only inside a coded combination makes
 * the node "decode" the combination's other rows with that row's data mixed in. */
#include <stdio.h>
#include <string.h>
#include "mixer.h"

static mx_state B;

int main(void)
{
    enum { N = 4, G = 3, P = 8 };
    mx_config c;
    uint8_t pkt[MX_MAX_PACKET_LEN], tx[MX_MAX_PACKET_LEN];
    const uint8_t d1[P] = {1, 2, 3, 4, 5, 6, 7, 8}, d2[P] = {0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80};
    uint16_t len, plen, slot;
    const uint8_t *row2;
    int i, r;
    memset(&c, 0, sizeof c);
    c.num_nodes = N; c.initiator = 0; c.generation_size = G; c.payload_size = P; c.round_length = 100;
    c.features = MX_FEAT_DEFAULT; c.termination = MX_TERM_DEADLINE; c.seed = 7;
    plen = mx_packet_len(&c);
    /* node 1 (B) listens; it owns nothing (row 1 is node 2's, row 2 node 3's, row 0 the initiator's) */
    if (mx_init(&B, &c, 1) != MX_OK || mx_arm(&B, MX_ARM_LISTENER) != MX_OK) return 2;
    /* slot 0: from node 2, the combination row1 + row2 (an honest one: node 2 holds both) */
    memset(pkt, 0, sizeof pkt);
    pkt[0] = 0; pkt[1] = 0; pkt[2] = 2; pkt[3] = 0;
    pkt[4] = 0x06; /* coding vector: rows 1 and 2 */
    for (i = 0; i < P; ++i) pkt[4 + 1 + i] = d1[i] ^ d2[i];
    len = 0;
    if (mx_slot(&B, 0, tx, &len) != MX_ACT_RX) return 3;
    r = mx_receive(&B, 0, pkt, plen);
    printf("slot 0: r1+r2 from node 2: %d, rank %u\n", r, mx_rank(&B));
    mx_slot_end(&B, 0);
    /* next RX slot: from node 3, an empty packet whose weak-zero map names row 1 (node 3 wrongly
     * thinks row 1's owner, node 2, is dead: mx_config.absent) */
    for (slot = 1; slot < 50; ++slot) {
        len = 0;
        if (mx_slot(&B, slot, tx, &len) == MX_ACT_RX) break;
        mx_slot_end(&B, slot);
    }
    memset(pkt, 0, sizeof pkt);
    pkt[0] = (uint8_t)slot; pkt[1] = 0; pkt[2] = 3; pkt[3] = MX_INFO_WEAK_ZEROS;
    pkt[4 + 1 + P] = 0x02; /* info: row 1 is a weak zero */
    r = mx_receive(&B, slot, pkt, plen);
    printf("slot %u: weak-zero map {row 1} from node 3: %d, rank %u\n", slot, r, mx_rank(&B));
    mx_slot_end(&B, slot);
    row2 = mx_read(&B, 2, &len);
    printf("row 2 status %d, data %s d2 (first byte %#x, d2 %#x, d1^d2 %#x)\n", mx_row_status(&B, 2),
           row2 && row2 != MX_WEAK_ZERO && memcmp(row2, d2, P) == 0 ? "==" : "!=", row2 ? row2[0] : 0, d2[0], d1[0] ^ d2[0]);
    return row2 && row2 != MX_WEAK_ZERO && memcmp(row2, d2, P) != 0;
}
