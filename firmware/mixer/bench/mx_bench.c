/* Mixer processing-budget harness (not firmware): one Mixer node inside an nRF52840 image, driven
 * slot by slot from the host by codegen/timing/mixer_budget.py on the cycle model
 * (codegen/timing/engine.py). The other nodes of the round run on the host (codegen/radio/mixer_sim
 * library, the same mixer.c); packets cross through bench_pdu, as through the board's radio_pdu.
 *
 * Each bench_* entry point does exactly the CPU work boards/nrf52840dk/radio.c + mx_start do between
 * two packets, so the cycle model counts what competes with the radio's deadlines:
 *   bench_slot     mx_slot (TX decision, packet build) and, for TX, hal_transmit's copy to the PDU;
 *   bench_receive  hal_receive's copy out of the PDU, mx_receive (checks, GF(2) elimination), mx_slot_end;
 *   bench_slot_end mx_slot_end alone (TX slots and RX slots without a packet);
 *   bench_prepare  mx_prepare: the next slot's combination, which mx_start runs while this slot's
 *                  packet is on the air (the HAL's listen / tx_done), not in the gap.
 * bench_verify checks after the round that every decoded row equals what its owner wrote (the
 * payload pattern is bench_byte(row, k), the same on the host). bench_features reports mixer.h's
 * MX_FEAT_DEFAULT, what deployed rounds run (firmware/somegather/cisl_mixer_transport.c), so the host
 * configures the measured round from the header itself. No main: the host calls functions. */
#include <stdint.h>
#include <string.h>

#include "mixer.h"

#define BENCH_WEAK 0xFEu  /* bench_owner[row]: a weak zero, written by the initiator */

/* Host-visible objects are word-aligned: codegen.timing.engine.Image clears bit 0 of every symbol
 * (the Thumb bit of functions), so an object at an odd address would be found one byte early. */
#define BENCH_HOST __attribute__((aligned(4)))
BENCH_HOST mx_config bench_cfg;                       /* written by the host before bench_setup */
BENCH_HOST uint8_t bench_owner[MX_MAX_G];             /* writer of each row (node id or BENCH_WEAK) */
BENCH_HOST uint8_t bench_pdu[2u + MX_MAX_PACKET_LEN]; /* S0, LENGTH, packet: the board's radio_pdu */
BENCH_HOST uint16_t bench_tx_len;
static mx_state bench_state;

uint8_t bench_byte(uint32_t row, uint32_t k);
int bench_setup(uint32_t node_id, uint32_t mode);
int bench_slot(void);
int bench_receive(uint32_t len);
int bench_slot_end(void);
uint32_t bench_verify(void);
uint32_t bench_synced(void);
uint32_t bench_next_slot(void);
uint32_t bench_rank(void);
uint32_t bench_features(void);

uint8_t bench_byte(uint32_t row, uint32_t k) { return (uint8_t)(row * 131u + k * 7u + (row ^ k) + 1u); }

int bench_setup(uint32_t node_id, uint32_t mode)
{
    uint8_t row_data[MX_MAX_P];
    unsigned row, k;
    int r = mx_init(&bench_state, &bench_cfg, (uint8_t)node_id);
    if (r != MX_OK)
        return r;
    for (row = 0; row < bench_cfg.generation_size; ++row) {
        if (bench_owner[row] == BENCH_WEAK && node_id == bench_cfg.initiator) {
            r = mx_write(&bench_state, (uint16_t)row, NULL, 0);
        } else if (bench_owner[row] == node_id) {
            for (k = 0; k < bench_cfg.payload_size; ++k)
                row_data[k] = bench_byte(row, k);
            r = mx_write(&bench_state, (uint16_t)row, row_data, bench_cfg.payload_size);
        }
        if (r != MX_OK)
            return r;
    }
    bench_tx_len = 0;
    return mx_arm(&bench_state, (uint8_t)mode);
}

/* mx_start's loop head: the slot it steps (after wait_slot), mx_slot, hal_transmit's copy */
int bench_slot(void)
{
    uint8_t buf[MX_MAX_PACKET_LEN];
    uint16_t slot = mx_synced(&bench_state) ? mx_next_slot(&bench_state) : 0u, len = 0;
    int act = mx_slot(&bench_state, slot, buf, &len);
    if (act == MX_ACT_TX) {
        bench_pdu[0] = 0u;
        bench_pdu[1] = (uint8_t)len;
        memcpy(bench_pdu + 2, buf, len);
        bench_tx_len = len;
    }
    return act;
}

/* a packet with good CRC in bench_pdu: hal_receive's copy, mx_receive, (sync,) mx_slot_end */
int bench_receive(uint32_t len)
{
    uint8_t buf[MX_MAX_PACKET_LEN];
    uint16_t slot = mx_synced(&bench_state) ? mx_next_slot(&bench_state) : 0u;
    int r;
    if (len > sizeof buf)
        return MX_E_PKT_LEN;
    memcpy(buf, bench_pdu + 2, len);
    /* mx_start passes the slot it stepped; mx_receive ignores it while scanning */
    if (mx_synced(&bench_state))
        slot = bench_state.h.cur_slot;
    r = mx_receive(&bench_state, slot, buf, (uint16_t)len);
    (void)mx_slot_end(&bench_state, bench_state.h.cur_slot);
    return r;
}

int bench_slot_end(void) { return mx_slot_end(&bench_state, bench_state.h.cur_slot); }

int bench_prepare(void) { return mx_prepare(&bench_state); }

uint32_t bench_synced(void) { return (uint32_t)mx_synced(&bench_state); }
uint32_t bench_next_slot(void) { return mx_next_slot(&bench_state); }
uint32_t bench_rank(void) { return mx_rank(&bench_state); }
uint32_t bench_features(void) { return MX_FEAT_DEFAULT; }

/* (rows not decodable) << 16 | (rows decoded with a wrong payload or wrong weak status) */
uint32_t bench_verify(void)
{
    uint32_t missing = 0, wrong = 0;
    unsigned row, k;
    for (row = 0; row < bench_cfg.generation_size; ++row) {
        uint16_t len = 0;
        const uint8_t *d = mx_read(&bench_state, (uint16_t)row, &len);
        if (d == NULL) {
            missing++;
        } else if (d == MX_WEAK_ZERO) {
            wrong += bench_owner[row] != BENCH_WEAK;
        } else if (bench_owner[row] == BENCH_WEAK || len != bench_cfg.payload_size) {
            wrong++;
        } else {
            for (k = 0; k < len; ++k)
                if (d[k] != bench_byte(row, k)) {
                    wrong++;
                    break;
                }
        }
    }
    return (missing << 16) | (wrong & 0xFFFFu);
}

/* The image's start: the vector table's first word is the initial stack pointer the emulator
 * starts every call with; nothing runs from reset (the host calls the bench_* functions). */
extern uint32_t __cisl_stack_top[];
void cisl_reset(void);
typedef void (*bench_vector)(void);
void cisl_reset(void)
{
    for (;;) {
    }
}
__attribute__((used, section(".vectors"))) const bench_vector bench_vectors[2] = {
    (bench_vector)(uintptr_t)__cisl_stack_top, cisl_reset};
