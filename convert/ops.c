/*
 * ops.c - the table of per-tensor ops (ops.h): for each op, its rule's
 * parser and admission checks, its shape/dtype step, CPU and CUDA steps, its
 * equality and its command-line option, so that an op is one row here.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_kernels.h"
#include "xform.h"

/* ---- rules: parameters from the argument, and which tensors take the op ---- */

static int fc_parse_none(struct fc_op *op, const char *value, const char *label)
{
    (void)op;
    (void)value;
    (void)label;
    return FC_OK;
}

/* NULL when s names a floating dtype (float32/fp32/bf16/...), else what it should be. */
static const char *fc_check_float_dtype(const char *s)
{
    const struct fc_dtype_info *info = fc_dtype_info(fc_dtype_parse_user(s));
    if (info == NULL || !info->is_floating)
        return "expected float32, bfloat16, float16 or float64";
    return NULL;
}

static int fc_parse_cast(struct fc_op *op, const char *value, const char *label)
{
    if (fc_check_float_dtype(value) != NULL)
        return fc_error_set(FC_EINVAL,
                            "%s: invalid dtype '%s' (expected float32, bfloat16, float16 or "
                            "float64)",
                            label, value);
    op->dtype = fc_dtype_parse_user(value);
    return FC_OK;
}

/* "N[:zero|mean]" of --resize-rows. */
static int fc_parse_resize(struct fc_op *op, const char *s, const char *label)
{
    char *end = NULL;
    op->fill = FC_FILL_MEAN;
    if (*s < '0' || *s > '9')
        goto bad;
    const long long n = strtoll(s, &end, 10);
    if (n < 0 || n > ((long long)1 << 48))
        goto bad;
    op->rows = n;
    if (*end == '\0')
        return FC_OK;
    if (strcmp(end, ":zero") == 0)
        op->fill = FC_FILL_ZERO;
    else if (strcmp(end, ":mean") != 0)
        goto bad;
    return FC_OK;
bad:
    return fc_error_set(FC_EINVAL, "%s: '%s' is no row count (expected N, N:zero or N:mean)", label,
                        s);
}

static int fc_admit_conv2d(const struct fc_op *op, const struct fc_xspec *s, const char *label,
                           char *note, size_t note_size)
{
    (void)op;
    if (s->ndim == 2) {
        snprintf(note, note_size, "--conv2d-to-linear: '%s' is already 2-D; left alone", s->key);
        return 0;
    }
    if (s->ndim != 4)
        return fc_error_set(FC_EINVAL, "%s: '%s' has %d dims; expected a 4-D [O, C, kh, kw] weight",
                            label, s->key, s->ndim);
    return 1;
}

/* Every floating tensor not already of the dtype, but optimizer step counters. */
static int fc_admit_cast(const struct fc_op *op, const struct fc_xspec *s, const char *label,
                         char *note, size_t note_size)
{
    const struct fc_dtype_info *info = fc_dtype_info(s->dtype);
    (void)label;
    (void)note;
    (void)note_size;
    /* Optimizer step counters stay exact: bf16 cannot count past 256. */
    const char *last = strrchr(s->key, '.');
    const int is_step = s->ndim == 0 && strcmp(last != NULL ? last + 1 : s->key, "step") == 0;
    return info != NULL && info->is_floating && !is_step && s->dtype != op->dtype;
}

static int fc_admit_resize(const struct fc_op *op, const struct fc_xspec *s, const char *label,
                           char *note, size_t note_size)
{
    const struct fc_dtype_info *info = fc_dtype_info(s->dtype);
    (void)note;
    (void)note_size;
    if (s->ndim == 0)
        return fc_error_set(FC_EINVAL, "%s: '%s' is 0-d: it has no rows", label, s->key);
    if (op->fill == FC_FILL_MEAN && op->rows > s->shape[0] &&
        (info == NULL || !info->is_floating || s->shape[0] == 0))
        return fc_error_set(FC_EINVAL, "%s: '%s' (%s, %lld rows) has no mean row; use :zero", label,
                            s->key, fc_dtype_name(s->dtype), (long long)s->shape[0]);
    for (size_t k = 0; k < s->nops; k++)
        if (s->ops[k].kind == FC_OP_RESIZE_ROWS)
            return fc_error_set(FC_EINVAL, "%s: '%s' is resized twice", label, s->key);
    return op->rows != s->shape[0];
}

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

/* ---- equality: the same parameters make the same bytes ---- */

static int fc_same_always(const struct fc_op *a, const struct fc_op *b)
{
    (void)a;
    (void)b;
    return 1;
}

static int fc_same_cast(const struct fc_op *a, const struct fc_op *b)
{
    return a->dtype == b->dtype;
}

static int fc_same_resize(const struct fc_op *a, const struct fc_op *b)
{
    if (a->rows != b->rows || a->fill != b->fill || (a->fill_row == NULL) != (b->fill_row == NULL))
        return 0;
    return a->fill_row == NULL ||
           memcmp(a->fill_row, b->fill_row,
                  (size_t)fc_op_row_elems(a) * fc_dtype_size(a->in_dtype)) == 0;
}

/* ---- the table ---- */

/* clang-format off */
static const struct fc_op_def fc_op_table[] = {
    [FC_OP_CONV2D_TO_LINEAR] = {
        {"conv2d-to-linear", "<key>",
         "reshape a [O,C,kh,kw] conv weight to [O, kh*kw*C] (BAGEL)",
         FC_RULE_SCOPE_IMPORT, NULL},
        NULL, FC_OP_ONE_KEY, fc_parse_none, fc_admit_conv2d,
        fc_shape_conv2d, 1, fc_cpu_conv2d, fc_cuda_conv2d, fc_same_always},
    [FC_OP_RESIZE_ROWS] = {
        {"resize-rows", "<key>=<n>[:zero|mean]",
         "dim 0 of <key> becomes <n>: truncate, or new rows of zeros\n"
         "or (default) the mean row, summed in float64",
         FC_RULE_SCOPE_PIPELINE, NULL},
        "KEY=N[:zero|mean]", FC_OP_ONE_KEY, fc_parse_resize, fc_admit_resize,
        fc_shape_resize, 0, fc_cpu_resize, fc_cuda_resize, fc_same_resize},
    [FC_OP_CAST] = {
        {"dtype", "<dtype>",
         "cast floating tensors: float32 (fp32, f32, float), bfloat16\n"
         "(bf16), float16 (fp16, f16, half), float64 (fp64, f64, double)",
         FC_RULE_SCOPE_PIPELINE, fc_check_float_dtype},
        NULL, FC_OP_EVERY_TENSOR, fc_parse_cast, fc_admit_cast,
        fc_shape_cast, 0, fc_cpu_cast, fc_cuda_cast_op, fc_same_cast},
};
/* clang-format on */

#define FC_OP_NKINDS (sizeof(fc_op_table) / sizeof(fc_op_table[0]))

const struct fc_op_def *fc_op_def(int kind)
{
    return &fc_op_table[kind];
}

const struct fc_op_def *fc_op_def_find(const char *rule, int *kind)
{
    for (size_t i = 0; i < FC_OP_NKINDS; i++)
        if (strcmp(rule, fc_op_table[i].opt.name) == 0) {
            *kind = (int)i;
            return &fc_op_table[i];
        }
    return NULL;
}

const struct fc_rule_option *fc_op_rule_option(size_t i)
{
    return i < FC_OP_NKINDS ? &fc_op_table[i].opt : NULL;
}

int fc_op_same(const struct fc_op *a, const struct fc_op *b)
{
    return a->kind == b->kind && a->in_dtype == b->in_dtype && a->in_ndim == b->in_ndim &&
           memcmp(a->in_shape, b->in_shape, sizeof(a->in_shape)) == 0 &&
           fc_op_table[a->kind].same(a, b);
}

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
