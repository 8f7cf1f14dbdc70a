/*
 * ops.h - the per-tensor ops: what happens to the rows of a tensor between
 * reading them from the input and writing them out, and the one table
 * (ops.c) that says everything about each op.
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
 * Adding an op: one row of the table in ops.c (struct fc_op_def: its rule's
 * name, form and parser, which tensors it takes, the shape/dtype step, the
 * CPU and CUDA steps, the equality the executor uses to write equal items
 * once, and the command-line option) plus its tests.  Nothing else names it:
 * the rules parser, the pipeline (xform.c), the executor and the CLI all go
 * through the table.  An op with a new kernel also adds the kernel pair
 * (kernels/<name>_cpu.c, <name>_cuda.cu), its declarations in fc_kernels.h
 * and its CPU-only stub in cuda_stub.c; an op whose parameters do not fit
 * struct fc_op adds a field here.
 */
#ifndef FC_OPS_H
#define FC_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "fc_convert.h"
#include "fc_dtype.h"
#include "fc_tensor.h"

/*
 * The ops other modules name (the optimizer drops casts, the streamer
 * computes mean rows): rows of the table in this order.  A new op needs no
 * name here: its kind is its row.
 */
enum fc_op_kind {
    FC_OP_CONV2D_TO_LINEAR, /* [O, C, kh, kw] -> [O, kh*kw*C] (BAGEL's patch embedding) */
    FC_OP_RESIZE_ROWS,      /* dim 0 -> rows: truncate, or append fill rows */
    FC_OP_CAST              /* -> dtype */
};

enum fc_fill { FC_FILL_ZERO, FC_FILL_MEAN };

struct fc_op {
    int kind;          /* row of the op table (enum fc_op_kind for the named ones) */
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

/* 1 when a and b are the same op on the same input with the same parameters (fill rows too). */
int fc_op_same(const struct fc_op *a, const struct fc_op *b);

/* Deep copy of an op list (fill rows included).  *out is NULL when n == 0. */
int fc_ops_dup(struct fc_op **out, const struct fc_op *ops, size_t n);
void fc_ops_free(struct fc_op *ops, size_t n);

/* ---- the table ---- */

struct fc_xspec; /* xform.h */

/* Which tensors an op's rule takes. */
enum fc_op_target {
    FC_OP_ONE_KEY,     /* the key its argument names (left of '=' when it has a form) */
    FC_OP_EVERY_TENSOR /* every tensor admit() accepts */
};

typedef void (*fc_op_shape_fn)(const struct fc_op *op, fc_dtype *dtype, int *ndim, int64_t *shape);
typedef int (*fc_op_cpu_fn)(const struct fc_op *op, void *dst, const void *src, int64_t nin,
                            int64_t nout, const struct fc_slab_geom *g);
typedef int (*fc_op_cuda_fn)(const struct fc_op *op, void *dst, const void *src, int64_t nin,
                             int64_t nout, const struct fc_slab_geom *g, unsigned char *host,
                             void *stream);

/* One row of the op table: an op from its rule's text to its kernels. */
struct fc_op_def {
    /*
     * The rule: opt.name is the rules-file op and the option ("dtype").
     * form NULL: one argument; else "KEY=N[:zero|mean]", split at the last '='.
     */
    struct fc_rule_option opt;
    const char *form;
    enum fc_op_target target;
    /* Parameters of *op from the argument (right of '=' with a form); FC_EINVAL names label. */
    int (*parse)(struct fc_op *op, const char *value, const char *label);
    /*
     * Whether the rule appends op to spec s: 1 yes, 0 leave s alone (with a
     * line for the user in note when there is something to say), or
     * FC_EINVAL naming label and the key.
     */
    int (*admit)(const struct fc_op *op, const struct fc_xspec *s, const char *label, char *note,
                 size_t note_size);
    fc_op_shape_fn shape; /* dtype/shape leaving the op (entering it on input) */
    /* 1 when the op changes dims past the first: the streamer then reads whole input rows. */
    int whole_rows;
    fc_op_cpu_fn cpu;
    fc_op_cuda_fn cuda;
    /* Parameters equal (kinds and inputs already are): the same bytes come out. */
    int (*same)(const struct fc_op *a, const struct fc_op *b);
};

/* The op whose rule is named `rule` ("dtype"), or NULL; *kind is its row. */
const struct fc_op_def *fc_op_def_find(const char *rule, int *kind);

/* Row `kind` of the table. */
const struct fc_op_def *fc_op_def(int kind);

#endif
