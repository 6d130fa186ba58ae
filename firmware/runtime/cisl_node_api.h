/* The library interface every generated node provides (node_NN/cisl_node.c); the generated
 * cisl_node.h documents it for the node's users. A cisl board's main() sets the board up and calls
 * cisl_run() (cisl_runtime.h), which runs the node's inferences until the board has no more inputs. */
#ifndef CISL_NODE_API_H
#define CISL_NODE_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the node's functions return: CISL_OK, or a negative CISL_ERR_* code. */
#define CISL_OK 0
#define CISL_ERR_KERNEL (-1)
#define CISL_ERR_TRANSPORT (-2)
#define CISL_ERR_ARG (-3) /* an argument the node cannot take (a NULL input, a mode it does not hold) */

/* A node's fixed facts, for code that is not generated per node (the runtime, boards). */
typedef struct {
    const char *plan_hash; /* first 16 hex digits of plan.json's SHA-256 */
    uint32_t node;         /* this node: its device index in plan.json */
    uint32_t nodes;        /* nodes in the plan */
    uint32_t sink;         /* the node that outputs the forecast */
    uint32_t input_len;    /* int8 values of one input window */
    uint32_t output_len;   /* int8 values of the forecast */
} cisl_node_info;

extern const cisl_node_info cisl_node;

/* This image's node id (its device index in plan.json), fixed at generation time. */
extern const uint8_t cisl_node_id;

/* Reset the node (the next inference is number 0). Returns 0. */
int cisl_node_init(void);

/* The next `count` inferences are not computed here (a node left behind that rejoins the network at
 * a later inference, cisl_board_resync): the next inference's number grows by `count`. */
void cisl_node_skip(uint32_t count);

/* One inference of input (input_len int8 values); the sink writes output_len int8 values to output.
 * output and crc may be NULL. Returns 0, or a negative CISL_ERR_* code (an `error` line is printed). */
int cisl_node_infer(const int8_t *input, int8_t *output, uint32_t *crc);

/* The node's own input buffer (input_len bytes) in the current mode: passing it as input skips a copy. */
int8_t *cisl_node_input_buffer(void);

/* Elastic modes (docs/design/elastic.md): how many the image holds (1 without modes), the mode the
 * next inference runs (0 = the largest), and setting it: 0, or CISL_ERR_ARG for a mode it lacks. */
uint8_t cisl_node_modes(void);
/* How many modes the selector's table (cisl_mode_table.h, `cisl modes`) has profiled: 0 = none, so
 * `limits` cannot be honoured and is refused. */
uint8_t cisl_node_profiled_modes(void);
uint8_t cisl_node_mode(void);
int cisl_node_set_mode(uint8_t mode);

#ifdef __cplusplus
}
#endif

#endif /* CISL_NODE_API_H */
