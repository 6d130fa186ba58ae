/* The entry point every generated node provides (node_NN/cisl_node.c). A board's main() sets the
 * board up and calls it; it runs inferences until the board has no more inputs. */
#ifndef CISL_NODE_API_H
#define CISL_NODE_API_H

#include <stdint.h>

/* Returns 0 after a clean run, non-zero if an inference failed. */
int cisl_node_main(void);

/* This image's node id (its device index in plan.json), fixed at generation time. */
extern const uint8_t cisl_node_id;

#endif /* CISL_NODE_API_H */
