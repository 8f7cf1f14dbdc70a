/*
 * ops.c - the table of per-tensor ops (see ops.h).
 */
#include "ops.h"

#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_kernels.h"

/* ---- shapes ---- */

static void fc_shape_conv2d(const struct fc_op *op, fc_dtype *dtype, int *ndim, int64_t *shape)
{
    (void)dtype;
    *ndim = 2;
    shape[0] = op->in_shape[0];
    shape[1] = op->in_shape[1] * op->in_shape[2] * op->in_shape[3];
}

static void fc_shape_cast(const struct fc_op *op, fc_dtype *dtype, int *ndim, int64_t *shape)
{
    (void)ndim;
    (void)shape;
    *dtype = op->dtype;
}

static void fc_shape_resize(const struct fc_op *op, fc_dtype *dtype, int *ndim, int64_t *shape)
{
    (void)dtype;
    (void)ndim;
    shape[0] = op->rows;
}

/* ---- CPU kernels ---- */

static int fc_cpu_conv2d(const struct fc_op *op, void *dst, const void *src, int64_t nin,
                         int64_t nout, const struct fc_slab_geom *g)
{
    int64_t shape4[4];
    (void)nout;
    (void)g;
    memcpy(shape4, op->in_shape, sizeof(shape4));
    shape4[0] = nin; /* the slab holds rows [0, nin) of its own */
    return fc_kern_conv2d_to_linear(dst, src, fc_dtype_size(op->in_dtype), shape4, 0, nin);
}

static int fc_cpu_cast(const struct fc_op *op, void *dst, const void *src, int64_t nin,
                       int64_t nout, const struct fc_slab_geom *g)
{
    (void)nout;
    return fc_kern_cast(op->dtype, dst, op->in_dtype, src, nin * g->row_elems);
}

/* Copy the box part [off, off + size) of one full row of `shape` (n dims) to dst. */
static unsigned char *fc_row_cut(unsigned char *dst, const unsigned char *row, size_t esz, int n,
                                 const int64_t *shape, const int64_t *off, const int64_t *size)
{
    if (n == 0) {
        memcpy(dst, row, esz);
        return dst + esz;
    }
    size_t inner = esz;
    for (int d = 1; d < n; d++)
        inner *= (size_t)shape[d];
    for (int64_t i = 0; i < size[0]; i++)
        dst = fc_row_cut(dst, row + (size_t)(off[0] + i) * inner, esz, n - 1, shape + 1, off + 1,
                         size + 1);
    return dst;
}

/* Fill rows nin..nout of a slab whose rows are g->row_elems elements of the op's input dtype. */
static void fc_resize_fill(const struct fc_op *op, unsigned char *dst, int64_t nin, int64_t nout,
                           const struct fc_slab_geom *g)
{
    const size_t esz = fc_dtype_size(op->in_dtype), row_bytes = (size_t)g->row_elems * esz;
    unsigned char *p = dst + (size_t)nin * row_bytes;
    if (nout <= nin)
        return;
    if (op->fill_row == NULL) {
        memset(p, 0, (size_t)(nout - nin) * row_bytes);
        return;
    }
    fc_row_cut(p, op->fill_row, esz, g->trail_ndim, op->in_shape + 1, g->trail_off, g->trail_size);
    for (int64_t r = nin + 1; r < nout; r++)
        memcpy(dst + (size_t)r * row_bytes, p, row_bytes);
}

static int fc_cpu_resize(const struct fc_op *op, void *dst, const void *src, int64_t nin,
                         int64_t nout, const struct fc_slab_geom *g)
{
    const size_t row_bytes = (size_t)g->row_elems * fc_dtype_size(op->in_dtype);
    if (nin > 0)
        memcpy(dst, src, (size_t)nin * row_bytes);
    fc_resize_fill(op, dst, nin, nout, g);
    return FC_OK;
}

/* ---- CUDA kernels ---- */

static int fc_cuda_conv2d(const struct fc_op *op, void *dst, const void *src, int64_t nin,
                          int64_t nout, const struct fc_slab_geom *g, unsigned char *host,
                          void *stream)
{
    int64_t shape4[4];
    (void)nout;
    (void)g;
    (void)host;
    memcpy(shape4, op->in_shape, sizeof(shape4));
    shape4[0] = nin;
    return fc_cuda_conv2d_to_linear(dst, src, fc_dtype_size(op->in_dtype), shape4, 0, nin, stream);
}

static int fc_cuda_cast_op(const struct fc_op *op, void *dst, const void *src, int64_t nin,
                           int64_t nout, const struct fc_slab_geom *g, unsigned char *host,
                           void *stream)
{
    (void)nout;
    (void)host;
    return fc_cuda_cast(op->dtype, dst, op->in_dtype, src, nin * g->row_elems, stream);
}

static int fc_cuda_resize(const struct fc_op *op, void *dst, const void *src, int64_t nin,
                          int64_t nout, const struct fc_slab_geom *g, unsigned char *host,
                          void *stream)
{
    const size_t row_bytes = (size_t)g->row_elems * fc_dtype_size(op->in_dtype);
    struct fc_dev_buf d = {dst, (size_t)nout * row_bytes};
    const struct fc_dev_buf s = {(void *)(uintptr_t)src, (size_t)nin * row_bytes};
    if (nin > 0)
        FC_TRY(fc_dev_buf_copy(&d, 0, &s, 0, (size_t)nin * row_bytes, stream));
    if (nout <= nin)
        return FC_OK;
    /* Fill rows are built on the host (one row repeated) and uploaded once. */
    fc_resize_fill(op, host, 0, nout - nin, g);
    return fc_dev_buf_upload(&d, (size_t)nin * row_bytes, host, (size_t)(nout - nin) * row_bytes,
                             stream);
}

/* ---- the table ---- */

struct fc_op_impl {
    const char *name;
    void (*shape)(const struct fc_op *op, fc_dtype *dtype, int *ndim, int64_t *shape);
    int (*cpu)(const struct fc_op *op, void *dst, const void *src, int64_t nin, int64_t nout,
               const struct fc_slab_geom *g);
    int (*cuda)(const struct fc_op *op, void *dst, const void *src, int64_t nin, int64_t nout,
                const struct fc_slab_geom *g, unsigned char *host, void *stream);
};

static const struct fc_op_impl fc_op_table[] = {
    [FC_OP_CONV2D_TO_LINEAR] = {"conv2d-to-linear", fc_shape_conv2d, fc_cpu_conv2d, fc_cuda_conv2d},
    [FC_OP_CAST] = {"cast", fc_shape_cast, fc_cpu_cast, fc_cuda_cast_op},
    [FC_OP_RESIZE_ROWS] = {"resize-rows", fc_shape_resize, fc_cpu_resize, fc_cuda_resize},
};

void fc_op_out(const struct fc_op *op, fc_dtype *dtype, int *ndim, int64_t *shape)
{
    *dtype = op->in_dtype;
    *ndim = op->in_ndim;
    memcpy(shape, op->in_shape, sizeof(op->in_shape));
    fc_op_table[op->kind].shape(op, dtype, ndim, shape);
}

int64_t fc_op_row_elems(const struct fc_op *op)
{
    int64_t n = 1;
    for (int d = 1; d < op->in_ndim; d++)
        n *= op->in_shape[d];
    return n;
}

int64_t fc_op_rows_in(const struct fc_op *op, int64_t first, int64_t nout)
{
    const int64_t end = first + nout < op->in_shape[0] ? first + nout : op->in_shape[0];
    if (op->in_ndim == 0)
        return nout;
    return end > first ? end - first : 0;
}

int fc_op_run_cpu(const struct fc_op *op, void *dst, const void *src, int64_t nin, int64_t nout,
                  const struct fc_slab_geom *g)
{
    return fc_op_table[op->kind].cpu(op, dst, src, nin, nout, g);
}

int fc_op_run_cuda(const struct fc_op *op, void *dst, const void *src, int64_t nin, int64_t nout,
                   const struct fc_slab_geom *g, unsigned char *host, void *stream)
{
    return fc_op_table[op->kind].cuda(op, dst, src, nin, nout, g, host, stream);
}

int fc_ops_dup(struct fc_op **out, const struct fc_op *ops, size_t n)
{
    *out = NULL;
    if (n == 0)
        return FC_OK;
    struct fc_op *a = fc_calloc(n, sizeof(*a));
    if (a == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        a[i] = ops[i];
        a[i].fill_row = NULL;
        if (ops[i].fill_row == NULL)
            continue;
        const size_t bytes = fc_dtype_size(ops[i].in_dtype) * (size_t)fc_op_row_elems(&ops[i]);
        a[i].fill_row = fc_malloc(bytes == 0 ? 1 : bytes);
        if (a[i].fill_row == NULL) {
            fc_ops_free(a, i);
            return fc_error_set(FC_ENOMEM, "out of memory");
        }
        memcpy(a[i].fill_row, ops[i].fill_row, bytes);
    }
    *out = a;
    return FC_OK;
}

void fc_ops_free(struct fc_op *ops, size_t n)
{
    for (size_t i = 0; ops != NULL && i < n; i++)
        fc_free(ops[i].fill_row);
    fc_free(ops);
}
