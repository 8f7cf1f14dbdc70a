/*
 * stream.c - row-slab streaming of one output box through its op list (see
 * stream.h), so that a tensor bigger than the memory budget is read, run
 * through the ops' CPU or CUDA steps (ops.c) and written in bounded slabs.
 */
#include "stream.h"

#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_io.h"

void fc_slabs_release(struct fc_slabs *s)
{
    const fc_engine engine = s->engine;
    const int device = s->device;
    fc_free(s->in);
    fc_free(s->mid);
    fc_free(s->out);
    fc_dev_buf_free(&s->d_in);
    fc_dev_buf_free(&s->d_mid);
    fc_dev_buf_free(&s->d_out);
    if (s->stream != NULL)
        fc_cuda_stream_free(s->stream);
    memset(s, 0, sizeof(*s));
    s->engine = engine;
    s->device = device;
}

uint64_t fc_slab_budget(uint64_t share)
{
    /* Half of the half to each: at full size the two take the same. */
    const uint64_t dio = fc_dio_fit(share / 4);
    const uint64_t fixed = dio + fc_source_fit_read_scratch(share / 2 - dio);
    return share > fixed + 4096 ? share - fixed : 4096;
}

static int fc_slab_reserve(unsigned char **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return FC_OK;
    unsigned char *q = fc_reallocarray(*p, need, 1);
    if (q == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory allocating a %zu-byte slab", need);
    *p = q;
    *cap = need;
    return FC_OK;
}

static int fc_dev_reserve(struct fc_dev_buf *b, size_t need)
{
    if (need <= b->nbytes)
        return FC_OK;
    fc_dev_buf_free(b);
    return fc_dev_buf_alloc(b, need);
}

/* Bytes per element of what leaves op k (k == nops: the output). */
static size_t fc_stage_esz(const struct fc_op *ops, size_t nops, size_t k, fc_dtype out_dtype)
{
    return fc_dtype_size(k < nops ? ops[k].in_dtype : out_dtype);
}

/*
 * The op list of one slab on the GPU: upload the source rows, run every op
 * there (ping-pong between two device buffers), download into slabs->out.
 * nrows[k] is the row count entering op k, nrows[nops] the slab's.
 */
static int fc_slab_ops_cuda(struct fc_slabs *slabs, const struct fc_op *ops, size_t nops,
                            fc_dtype out_dtype, const int64_t *nrows, const struct fc_slab_geom *g,
                            const unsigned char **result)
{
    const size_t in_bytes = (size_t)(nrows[0] * g->row_elems) * fc_stage_esz(ops, nops, 0, 0);
    if (slabs->stream == NULL) {
        /* The current device is per thread: set it before the first CUDA call here. */
        FC_TRY(fc_cuda_set_device(slabs->device));
        FC_TRY(fc_cuda_stream_new(&slabs->stream));
    }
    FC_TRY(fc_dev_reserve(&slabs->d_in, in_bytes == 0 ? 1 : in_bytes));
    FC_TRY(fc_dev_buf_upload(&slabs->d_in, 0, slabs->in, in_bytes, slabs->stream));
    struct fc_dev_buf *cur = &slabs->d_in;
    for (size_t k = 0; k < nops; k++) {
        const size_t out_bytes =
            (size_t)(nrows[k + 1] * g->row_elems) * fc_stage_esz(ops, nops, k + 1, out_dtype);
        struct fc_dev_buf *dst = cur == &slabs->d_mid ? &slabs->d_out : &slabs->d_mid;
        FC_TRY(fc_dev_reserve(dst, out_bytes == 0 ? 1 : out_bytes));
        /* Host scratch for fill rows, in the op's input dtype. */
        FC_TRY(fc_slab_reserve(&slabs->mid, &slabs->cap_mid,
                               (size_t)(nrows[k + 1] * g->row_elems) *
                                   fc_stage_esz(ops, nops, k, out_dtype)));
        FC_TRY(fc_op_run_cuda(&ops[k], dst->ptr, cur->ptr, nrows[k], nrows[k + 1], g, slabs->mid,
                              slabs->stream));
        cur = dst;
    }
    const size_t out_bytes = (size_t)(nrows[nops] * g->row_elems) * fc_dtype_size(out_dtype);
    FC_TRY(fc_slab_reserve(&slabs->out, &slabs->cap_out, out_bytes));
    FC_TRY(fc_dev_buf_download(slabs->out, cur, 0, out_bytes, slabs->stream));
    FC_TRY(fc_cuda_stream_sync(slabs->stream));
    *result = slabs->out;
    return FC_OK;
}

/* The same on the host, ping-pong between slabs->mid and slabs->out. */
static int fc_slab_ops_cpu(struct fc_slabs *slabs, const struct fc_op *ops, size_t nops,
                           fc_dtype out_dtype, const int64_t *nrows, const struct fc_slab_geom *g,
                           const unsigned char **result)
{
    const unsigned char *cur = slabs->in;
    for (size_t k = 0; k < nops; k++) {
        const size_t out_bytes =
            (size_t)(nrows[k + 1] * g->row_elems) * fc_stage_esz(ops, nops, k + 1, out_dtype);
        unsigned char **dst = cur == slabs->mid ? &slabs->out : &slabs->mid;
        size_t *cap = cur == slabs->mid ? &slabs->cap_out : &slabs->cap_mid;
        FC_TRY(fc_slab_reserve(dst, cap, out_bytes));
        FC_TRY(fc_op_run_cpu(&ops[k], *dst, cur, nrows[k], nrows[k + 1], g));
        cur = *dst;
    }
    *result = cur;
    return FC_OK;
}

/*
 * Stream the box (off, size; ndim dims) of the tensor that entry e becomes
 * after ops[0..nops) (ending in out_dtype) to sink, in row slabs.
 */
static int fc_stream_ops(const struct fc_source *src, const struct fc_entry *e,
                         const struct fc_op *ops, size_t nops, fc_dtype out_dtype, int ndim,
                         const int64_t *off, const int64_t *size, uint64_t budget,
                         struct fc_slabs *slabs, fc_stream_sink_fn sink, void *ctx)
{
    int whole_rows = 0; /* an op that changes trailing dims (conv2d) fixes the trailing box */
    size_t max_esz = fc_dtype_size(e->t.dtype);
    for (size_t k = 0; k < nops; k++) {
        whole_rows |= fc_op_def(ops[k].kind)->whole_rows;
        const size_t esz = fc_stage_esz(ops, nops, k + 1, out_dtype);
        max_esz = esz > max_esz ? esz : max_esz;
    }
    int64_t row_elems = 1;
    for (int d = 1; d < ndim; d++)
        row_elems *= size[d];
    const int64_t rows = ndim == 0 ? 1 : size[0];
    const size_t in_esz = fc_dtype_size(e->t.dtype);
    const uint64_t per_row = (uint64_t)row_elems * (in_esz + (nops > 0 ? 2 * max_esz : 0));
    int64_t step = per_row == 0 ? rows : (int64_t)(budget / per_row);
    if (step < 1)
        step = 1;
    const struct fc_slab_geom g = {row_elems, ndim - 1, whole_rows || ndim < 1 ? NULL : off + 1,
                                   whole_rows || ndim < 1 ? NULL : size + 1, 0};
    int64_t src_off[FC_MAX_DIMS], src_size[FC_MAX_DIMS];
    /* Source box: the same rows; other dims as the output box (conv2d: the whole 4-D rows). */
    for (int d = 0; d < e->t.ndim; d++) {
        src_off[d] = 0;
        src_size[d] = e->t.shape[d];
    }
    if (!whole_rows)
        for (int d = 1; d < ndim; d++) {
            src_off[d] = off[d];
            src_size[d] = size[d];
        }
    int64_t nrows[FC_XFORM_MAX_OPS + 1];
    if (nops > FC_XFORM_MAX_OPS)
        return fc_error_set(FC_ERROR, "internal error: %zu ops on one tensor", nops);
    for (int64_t r = 0; r < rows && row_elems > 0; r += step) {
        const int64_t n = rows - r < step ? rows - r : step;
        const int64_t first = ndim == 0 ? 0 : off[0] + r;
        /* Rows entering each op: fewer than n only past a resize's input end. */
        nrows[nops] = n;
        for (size_t k = nops; k-- > 0;)
            nrows[k] = fc_op_rows_in(&ops[k], first, nrows[k + 1]);
        if (e->t.ndim > 0) {
            src_off[0] = first;
            src_size[0] = nrows[0];
        }
        FC_TRY(fc_slab_reserve(&slabs->in, &slabs->cap_in,
                               (size_t)(nrows[0] * row_elems) * in_esz + 1));
        if (nrows[0] > 0)
            FC_TRY(fc_source_read_box(src, e, src_off, src_size, slabs->in));
        const unsigned char *cur = slabs->in;
        if (nops > 0 && slabs->engine == FC_ENGINE_CUDA)
            FC_TRY(fc_slab_ops_cuda(slabs, ops, nops, out_dtype, nrows, &g, &cur));
        else if (nops > 0)
            FC_TRY(fc_slab_ops_cpu(slabs, ops, nops, out_dtype, nrows, &g, &cur));
        FC_TRY(sink(ctx, cur, (size_t)(n * row_elems) * fc_dtype_size(out_dtype)));
    }
    return FC_OK;
}

/*
 * The dim to cut a box along when one of its rows exceeds the budget, or -1
 * (rows fit, or the ops are not all elementwise).  Only casts are: with them
 * (or no op) any sub-box streams alone, so a stacked expert bigger than
 * --max-memory goes out in runs of a later dim, single indices on the dims
 * before it, C order kept.  *run is how many indices of that dim fit.
 */
static int fc_stream_cut_dim(const struct fc_xspec *spec, const int64_t *size, uint64_t budget,
                             int64_t *run)
{
    const int n = spec->ndim;
    uint64_t row[FC_MAX_DIMS]; /* bytes of one index of dim d, every stage's buffer counted */
    if (n < 2)
        return -1;
    row[n - 1] = fc_dtype_size(spec->nops > 0 ? spec->ops[0].in_dtype : spec->dtype);
    for (size_t k = 0; k < spec->nops; k++) {
        if (spec->ops[k].kind != FC_OP_CAST)
            return -1;
        row[n - 1] += 2 * fc_dtype_size(spec->ops[k].dtype);
    }
    for (int d = n - 2; d >= 0; d--)
        row[d] = row[d + 1] * (uint64_t)size[d + 1];
    if (row[0] <= budget)
        return -1;
    int d = 1;
    while (d < n - 1 && row[d] > budget)
        d++;
    const uint64_t fit = row[d] <= budget ? budget / row[d] : 1;
    *run = fit < (uint64_t)size[d] ? (int64_t)fit : size[d];
    return d;
}

int fc_stream_box(const struct fc_source *src, const struct fc_xspec *spec, const int64_t *off,
                  const int64_t *size, uint64_t budget, struct fc_slabs *slabs,
                  fc_stream_sink_fn sink, void *ctx)
{
    if (spec->src != NULL)
        src = spec->src;
    const struct fc_entry *e = &src->entries[spec->entry];
    int64_t run = 0;
    const int cut = fc_stream_cut_dim(spec, size, budget, &run);
    if (cut < 0)
        return fc_stream_ops(src, e, spec->ops, spec->nops, spec->dtype, spec->ndim, off, size,
                             budget, slabs, sink, ctx);
    /* Sub-boxes: an odometer over dims [0, cut), runs along cut, whole dims after it. */
    int64_t o[FC_MAX_DIMS], z[FC_MAX_DIMS], idx[FC_MAX_DIMS] = {0};
    for (int d = 0; d < spec->ndim; d++) {
        o[d] = off[d];
        z[d] = d < cut ? 1 : size[d];
        if (size[d] == 0)
            return FC_OK;
    }
    for (;;) {
        for (int64_t j = 0; j < size[cut]; j += run) {
            o[cut] = off[cut] + j;
            z[cut] = size[cut] - j < run ? size[cut] - j : run;
            FC_TRY(fc_stream_ops(src, e, spec->ops, spec->nops, spec->dtype, spec->ndim, o, z,
                                 budget, slabs, sink, ctx));
        }
        int d = cut - 1;
        while (d >= 0 && ++idx[d] == size[d])
            idx[d--] = 0;
        if (d < 0)
            return FC_OK;
        for (int k = 0; k < cut; k++)
            o[k] = off[k] + idx[k];
    }
}

/* Column sums in float64 of the rows a mean pass streams. */
struct fc_mean_acc {
    double *sum;
    double *tmp;
    size_t cap;
    int64_t row_elems;
    int64_t col; /* column of the next element */
    fc_dtype dtype;
};

static int fc_mean_put(void *ctx, const void *p, size_t n)
{
    struct fc_mean_acc *m = ctx;
    const int64_t nelem = (int64_t)(n / fc_dtype_size(m->dtype));
    if ((size_t)nelem > m->cap) {
        double *t = fc_reallocarray(m->tmp, (size_t)nelem, sizeof(*t));
        if (t == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        m->tmp = t;
        m->cap = (size_t)nelem;
    }
    FC_TRY(fc_kern_cast(FC_DTYPE_FLOAT64, m->tmp, m->dtype, p, nelem));
    for (int64_t i = 0; i < nelem; i++) {
        m->sum[m->col] += m->tmp[i];
        if (++m->col == m->row_elems)
            m->col = 0;
    }
    return FC_OK;
}

/* The mean row of what enters ops[k]: a pass over all its rows, rounded once to its dtype. */
static int fc_mean_row(const struct fc_source *src, const struct fc_entry *e,
                       const struct fc_op *ops, size_t k, uint64_t budget, struct fc_slabs *slabs,
                       unsigned char **out)
{
    const struct fc_op *op = &ops[k];
    const int64_t row_elems = fc_op_row_elems(op);
    const int64_t zero[FC_MAX_DIMS] = {0};
    struct fc_mean_acc m = {NULL, NULL, 0, row_elems, 0, op->in_dtype};
    int rc = FC_OK;
    *out = fc_malloc((size_t)row_elems * fc_dtype_size(op->in_dtype) + 1);
    m.sum = fc_calloc((size_t)row_elems + 1, sizeof(*m.sum));
    if (*out == NULL || m.sum == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    FC_TRY_GOTO(fc_stream_ops(src, e, ops, k, op->in_dtype, op->in_ndim, zero, op->in_shape, budget,
                              slabs, fc_mean_put, &m),
                rc, done);
    for (int64_t i = 0; i < row_elems; i++)
        m.sum[i] /= (double)op->in_shape[0];
    rc = fc_kern_cast(op->in_dtype, *out, FC_DTYPE_FLOAT64, m.sum, row_elems);
done:
    if (rc < 0) {
        fc_free(*out);
        *out = NULL;
    }
    fc_free(m.sum);
    fc_free(m.tmp);
    return rc;
}

/* Do specs a and b run the same ops on the same rows up to (not including) op k? */
static int fc_same_prefix(const struct fc_xspec *a, const struct fc_xspec *b, size_t k)
{
    if (a->src != b->src || a->entry != b->entry || b->nops <= k)
        return 0;
    for (size_t q = 0; q <= k; q++) {
        const struct fc_op *x = &a->ops[q], *y = &b->ops[q];
        if (x->kind != y->kind || x->dtype != y->dtype || x->rows != y->rows ||
            x->fill != y->fill || x->in_dtype != y->in_dtype)
            return 0;
    }
    return 1;
}

int fc_stream_fill_means(struct fc_xform_result *xr, uint64_t budget, struct fc_slabs *slabs)
{
    for (size_t i = 0; i < xr->n; i++) {
        struct fc_xspec *s = &xr->specs[i];
        for (size_t k = 0; k < s->nops; k++) {
            struct fc_op *op = &s->ops[k];
            if (op->kind != FC_OP_RESIZE_ROWS || op->fill != FC_FILL_MEAN || op->fill_row != NULL ||
                op->rows <= op->in_shape[0])
                continue;
            /* A --copy of a resized tensor has the same mean: one pass serves both. */
            const struct fc_op *done = NULL;
            for (size_t j = 0; j < i && done == NULL; j++)
                if (fc_same_prefix(&xr->specs[j], s, k) && xr->specs[j].ops[k].fill_row != NULL)
                    done = &xr->specs[j].ops[k];
            if (done != NULL) {
                const size_t bytes = (size_t)fc_op_row_elems(op) * fc_dtype_size(op->in_dtype);
                op->fill_row = fc_malloc(bytes + 1);
                if (op->fill_row == NULL)
                    return fc_error_set(FC_ENOMEM, "out of memory");
                memcpy(op->fill_row, done->fill_row, bytes);
                continue;
            }
            FC_TRY(fc_mean_row(s->src, &s->src->entries[s->entry], s->ops, k, budget, slabs,
                               &op->fill_row));
        }
    }
    return FC_OK;
}
