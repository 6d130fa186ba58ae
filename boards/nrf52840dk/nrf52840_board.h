/* nRF52840-DK board internals shared by board.c and radio.c. */
#ifndef CISL_NRF52840_BOARD_H
#define CISL_NRF52840_BOARD_H

#include <stdint.h>

/* UICR CUSTOMER[0] node label: bits 31..16 (see board.c, check_node_id) */
#define CISL_UICR_NODE_MAGIC 0xC15Au

/* Configure the RADIO (BLE framing, address, CRC, whitening, fast ramp-up), TIMER0 (the slot grid)
 * and the PPI channels; called once at boot, after the HFXO runs. */
void cisl_radio_init(void);

/* Before the first inference: every node waits for the initiator's start beacons (radio.c), so
 * nodes reset at different times start inference 0 together. */
uint32_t cisl_radio_barrier(void);

#endif /* CISL_NRF52840_BOARD_H */
