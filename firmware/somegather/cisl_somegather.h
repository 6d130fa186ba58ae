/* somegather: a pruned allgather over the transport (paper §4.2).
 *
 * At a somegather point every node broadcasts the columns its mask selects (its message) and
 * assembles the *gathered* tensor: its own columns plus the columns it receives, in ascending
 * global order as plan.json fixes. A message that does not arrive leaves its columns at the zero
 * point and marks them invalid, so they contribute nothing downstream (docs/design/decisions.md). */
#ifndef CISL_SOMEGATHER_H
#define CISL_SOMEGATHER_H

#include <stdint.h>

#include "cisl_kernels.h"
#include "cisl_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CISL_MAX_NODES 64u

/* What a node receives from one sender: `cols` columns of `rows` rows, row-major, placed into the
 * gathered tensor by `runs` (src_col = column in the message, dst_col = column in the tensor). */
typedef struct {
    uint8_t from;
    uint16_t cols;
    uint32_t bytes;
    const cisl_col_run *runs;
    uint16_t nruns;
} cisl_sg_recv;

typedef struct {
    int16_t layer;
    const char *point;    /* "x", "h", "y", "z" */
    uint16_t rows;        /* tokens */
    uint16_t own_cols;    /* columns of the node's own tensor */
    uint16_t out_cols;    /* columns of the gathered tensor */
    uint16_t send_cols;   /* columns this node broadcasts (0: sends nothing) */
    const cisl_col_run *pack_runs; /* own tensor -> message */
    uint16_t npack;
    const cisl_col_run *own_runs;  /* own tensor -> gathered tensor */
    uint16_t nown;
    const cisl_sg_recv *recv;
    uint16_t nrecv;
    int8_t fill;          /* zero point of the tensor: the value of a column that is missing */
} cisl_sg_desc;

/* Run one somegather as exchange `exchange` (plan.json "sg"; in an image holding every elastic mode,
 * mode m's exchanges follow the smaller modes'). `send` may be NULL when send_cols is 0; `valid`
 * (out_cols bytes) may be NULL when the consumer does not need to know which columns are present.
 * Prints the "sg" line and adds the time spent to blk->comm_us. */
int cisl_somegather(const cisl_sg_desc *d, uint16_t exchange, uint32_t inference, const int8_t *own, int8_t *send,
                    int8_t *out, uint8_t *valid, cisl_block *blk);

/* Head reduction: a non-sink node sends its int32 partial sums (little-endian) to the sink. */
int cisl_send_partial(uint16_t sg, uint32_t inference, const int32_t *part, uint32_t n, uint8_t dest,
                      cisl_block *blk);

/* Head reduction at the sink. own == NULL: adds (wrapping, order-independent) every expected
 * sender's partial sums into acc, which holds the own partial; missing partials contribute nothing.
 * own != NULL (rescaled models; weights[i] = sender i's columns): acc = own + round(S * E / R),
 * S the wrapped sum of the partials that arrived, E the sum of all weights, R that of the senders
 * heard; the product is int64, rounding half away from zero, the addition wrapping. */
int cisl_reduce_partials(uint16_t sg, uint32_t inference, int32_t *acc, const int32_t *own, uint32_t n,
                         const uint8_t *senders, const uint16_t *weights, uint32_t nsenders, cisl_block *blk);

#ifdef __cplusplus
}
#endif

#endif /* CISL_SOMEGATHER_H */
