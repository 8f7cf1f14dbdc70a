/*
 * ops.h - the per-tensor op list: what happens to the rows of a tensor
 * between reading them from the input and writing them out.
 *
 * An output spec (xform.h) reads rows of one input entry and runs them
 * through ops[0..nops) in order.  Each op records the tensor as it enters
 * (dtype, shape); fc_op_out() gives what leaves it.  Every op is row-local:
 * output row r of an op comes from its input row r, or - for rows past the
 * input's end (resize-rows) - from a fill row.  So any slab of output rows
 * [a, b) needs only input rows [a, min(b, in_rows)) of every earlier stage:
 * the executor streams big tensors in slabs through the whole list, on the
 * CPU or on the GPU (fc_stream_box() in stream.h).
 *
 * Adding an op: a kind, its row in the table of ops.c (shape rule, CPU
 * kernel, CUDA kernel) and the rule in xform.c that appends it.
 */
#ifndef FC_OPS_H
#define FC_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "fc_dtype.h"
#include "fc_tensor.h"

enum fc_op_kind {
    FC_OP_CONV2D_TO_LINEAR, /* [O, C, kh, kw] -> [O, kh*kw*C] (BAGEL's patch embedding) */
    FC_OP_CAST,             /* -> dtype */
    FC_OP_RESIZE_ROWS       /* dim 0 -> rows: truncate, or append fill rows */
};

enum fc_fill { FC_FILL_ZERO, FC_FILL_MEAN };

struct fc_op {
    enum fc_op_kind kind;
    fc_dtype in_dtype; /* the tensor entering the op */
    int in_ndim;
    int64_t in_shape[FC_MAX_DIMS];
    fc_dtype dtype;          /* cast: target dtype */
    int64_t rows;            /* resize: new dim 0 */
    enum fc_fill fill;       /* resize */
    unsigned char *fill_row; /* resize, mean: one full row in in_dtype (fc_stream_fill_means);
                                owned; NULL means zeros */
};

/* The tensor leaving op: dtype, ndim, shape. */
void fc_op_out(const struct fc_op *op, fc_dtype *dtype, int *ndim, int64_t *shape);

/*
 * A slab of rows as every stage sees it: row_elems elements per row (the
 * box's trailing extent, which ops never change), the box's trailing
 * offsets/sizes (ndim - 1 entries, for cutting fill rows) and the box's first
 * row in tensor coordinates.
 */
struct fc_slab_geom {
    int64_t row_elems;
    int trail_ndim;
    const int64_t *trail_off;
    const int64_t *trail_size;
    int64_t first_row;
};

/* Elements of one whole row of the op's input (1 for 0-d and 1-d tensors). */
int64_t fc_op_row_elems(const struct fc_op *op);

/*
 * fc_op_rows_in() - rows of the op's input that a slab of nout output rows
 * starting at tensor row `first` needs (fewer only past a resize's input end).
 */
int64_t fc_op_rows_in(const struct fc_op *op, int64_t first, int64_t nout);

/* Run op on a slab in host memory: nin input rows at src -> nout rows at dst (dst != src). */
int fc_op_run_cpu(const struct fc_op *op, void *dst, const void *src, int64_t nin, int64_t nout,
                  const struct fc_slab_geom *g);

/*
 * The same on device buffers on `stream`; `host` is scratch host memory of
 * at least nout rows in the op's input dtype (resize uploads its fill rows
 * from there).
 */
int fc_op_run_cuda(const struct fc_op *op, void *dst, const void *src, int64_t nin, int64_t nout,
                   const struct fc_slab_geom *g, unsigned char *host, void *stream);

/* Deep copy of an op list (fill rows included).  *out is NULL when n == 0. */
int fc_ops_dup(struct fc_op **out, const struct fc_op *ops, size_t n);
void fc_ops_free(struct fc_op *ops, size_t n);

#endif
