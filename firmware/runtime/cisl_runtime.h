/* cisl node runtime: block timing and the per-inference reports of the serial contract. */
#ifndef CISL_RUNTIME_H
#define CISL_RUNTIME_H

#include <stdint.h>

#include "cisl_log.h"
#include "cisl_node_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CISL_OK and the CISL_ERR_* codes: cisl_node_api.h */

/* Time spent in one block (embedding, attention, MLP, head) of one inference. Communication
 * inside the block is accumulated separately so compute and communication can be told apart. */
typedef struct {
    uint32_t t0_us;
    uint32_t c0_cycles;
    uint32_t comm_us;
    uint32_t comm_cycles; /* cycles spent communicating, taken out of the block's cycles too */
    cisl_log_clock log0;  /* printing is taken out as well (cisl_log_spent) */
} cisl_block;

void cisl_block_begin(cisl_block *b);
/* Print "block inf= layer= block= us= comm_us= [cycles=]"; us and cycles are compute only. */
void cisl_block_end(cisl_block *b, uint32_t inference, int32_t layer, const char *name);

/* The node's run on a cisl board: "boot", then until cisl_board_next_input has no more inputs
 * cisl_node_infer (cisl_node_api.h) and "infer" per window, then "end". Returns 0 after a clean run,
 * 1 if an inference failed (its "error" line is printed, then "end"). Every board's main() calls it. */
int cisl_run(void);

/* cisl_run's last pass before this one (µs of cisl_board_time_us): the inference, its printing and
 * the board's resynchronisation before it; 0 before the second. A board that waits for the other
 * nodes between inferences sizes its wait with it (nrf52840dk, cisl_board_resync). */
uint32_t cisl_run_pass_us(void);

/* "boot fw= plan= board= node= nodes= [clock=] [cmsis_nn=]"; cmsis_nn (the first 12 hex digits of
 * the CMSIS-NN checkout's commit) in builds against upstream CMSIS-NN (-DCISL_CMSIS_NN_COMMIT) */
void cisl_report_boot(const char *plan_hash, uint32_t node, uint32_t nodes);
/* "infer inf= us= crc=" */
void cisl_report_infer(uint32_t inference, uint32_t us, uint32_t crc);
/* "output inf= crc= off= q=" in chunks of at most 64 values per line */
void cisl_report_output(uint32_t inference, const int8_t *q, uint32_t n);
/* "error inf= where= code=" */
void cisl_report_error(uint32_t inference, const char *where, int32_t code);
/* "end inferences=" */
void cisl_report_end(uint32_t inferences);

/* Boards that keep a model clock (the virtual testbed, CISL_BOARD_OP_HOOK) learn of every finished
 * op: it advances their clock by the op's cycles from the cycle model (boards/sim/hal_sim.c). */
#ifdef CISL_BOARD_OP_HOOK
void cisl_board_op_end(uint32_t index);
#define CISL_OP_HOOK(i) cisl_board_op_end(i)
#else
#define CISL_OP_HOOK(i) ((void)0)
#endif

/* Per-op profiling (benchmarks only): built with -DCISL_PROFILE_OPS, the generated schedule prints
 * "op inf= i= cycles=" after every op, i being the op's index in plan.json; a model clock advances
 * first, so the line prints the model's cycles there. Otherwise only the hook. */
#ifdef CISL_PROFILE_OPS
#include "cisl_board.h"
void cisl_report_op(uint32_t inference, uint32_t index, uint32_t cycles);
#define CISL_OP_DECL uint32_t cisl_op_c0_ = 0u
#define CISL_OP_BEGIN() (cisl_op_c0_ = cisl_board_cycles())
#define CISL_OP_END(i) (CISL_OP_HOOK(i), cisl_report_op(inference, (i), cisl_board_cycles() - cisl_op_c0_))
#else
#define CISL_OP_DECL ((void)0)
#define CISL_OP_BEGIN() ((void)0)
#define CISL_OP_END(i) CISL_OP_HOOK(i)
#endif

#define CISL_FW_VERSION "0.1.0"

#ifdef __cplusplus
}
#endif

#endif /* CISL_RUNTIME_H */
