/*
 * stream.c - row-slab streaming of one output box (see stream.h).
 */
#include "stream.h"

#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"

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

/*
 * The op chain of one slab on the GPU: upload the source rows, permute,
 * cast, download into slabs->out.  Returns the host pointer of the result.
 */
static int fc_slab_ops_cuda(struct fc_slabs *slabs, const struct fc_xspec *spec,
                            const struct fc_entry *e, int64_t n, int64_t nelem,
                            const unsigned char **result)
{
    const size_t in_esz = fc_dtype_size(e->t.dtype), out_esz = fc_dtype_size(spec->dtype);
    const size_t in_bytes = (size_t)nelem * in_esz, out_bytes = (size_t)nelem * out_esz;
    if (slabs->stream == NULL) {
        /* The current device is per thread: set it before the first CUDA call here. */
        FC_TRY(fc_cuda_set_device(slabs->device));
        FC_TRY(fc_cuda_stream_new(&slabs->stream));
    }
    FC_TRY(fc_dev_reserve(&slabs->d_in, in_bytes));
    FC_TRY(fc_dev_buf_upload(&slabs->d_in, 0, slabs->in, in_bytes, slabs->stream));
    struct fc_dev_buf *cur = &slabs->d_in;
    if (spec->conv2d) {
        int64_t shape4[4];
        memcpy(shape4, e->t.shape, sizeof(shape4));
        shape4[0] = n;
        FC_TRY(fc_dev_reserve(&slabs->d_mid, in_bytes));
        FC_TRY(fc_cuda_conv2d_to_linear(slabs->d_mid.ptr, cur->ptr, in_esz, shape4, 0, n,
                                        slabs->stream));
        cur = &slabs->d_mid;
    }
    if (e->t.dtype != spec->dtype) {
        FC_TRY(fc_dev_reserve(&slabs->d_out, out_bytes));
        FC_TRY(fc_cuda_cast(spec->dtype, slabs->d_out.ptr, e->t.dtype, cur->ptr, nelem,
                            slabs->stream));
        cur = &slabs->d_out;
    }
    FC_TRY(fc_slab_reserve(&slabs->out, &slabs->cap_out, out_bytes));
    FC_TRY(fc_dev_buf_download(slabs->out, cur, 0, out_bytes, slabs->stream));
    FC_TRY(fc_cuda_stream_sync(slabs->stream));
    *result = slabs->out;
    return FC_OK;
}

int fc_stream_box(const struct fc_source *src, const struct fc_xspec *spec, const int64_t *off,
                  const int64_t *size, uint64_t budget, struct fc_slabs *slabs,
                  fc_stream_sink_fn sink, void *ctx)
{
    if (spec->src != NULL)
        src = spec->src;
    const struct fc_entry *e = &src->entries[spec->entry];
    const size_t in_esz = fc_dtype_size(e->t.dtype), out_esz = fc_dtype_size(spec->dtype);
    const int ndim = spec->ndim;
    int64_t row_elems = 1;
    for (int d = 1; d < ndim; d++)
        row_elems *= size[d];
    const int64_t rows = ndim == 0 ? 1 : size[0];
    const uint64_t per_row = (uint64_t)row_elems * (in_esz * (spec->conv2d ? 2 : 1) + out_esz);
    int64_t step = per_row == 0 ? rows : (int64_t)(budget / per_row);
    if (step < 1)
        step = 1;
    int64_t src_off[FC_MAX_DIMS], src_size[FC_MAX_DIMS];
    /* Source box: the same rows; other dims as the output box (conv2d: the whole 4-D rows). */
    for (int d = 0; d < e->t.ndim; d++) {
        src_off[d] = 0;
        src_size[d] = e->t.shape[d];
    }
    if (!spec->conv2d)
        for (int d = 1; d < ndim; d++) {
            src_off[d] = off[d];
            src_size[d] = size[d];
        }
    for (int64_t r = 0; r < rows && row_elems > 0; r += step) {
        const int64_t n = rows - r < step ? rows - r : step;
        const int64_t nelem = n * row_elems;
        if (e->t.ndim > 0) {
            src_off[0] = off[0] + r;
            src_size[0] = n;
        }
        FC_TRY(fc_slab_reserve(&slabs->in, &slabs->cap_in, (size_t)nelem * in_esz));
        FC_TRY(fc_source_read_box(src, e, src_off, src_size, slabs->in));
        const unsigned char *cur = slabs->in;
        if (slabs->engine == FC_ENGINE_CUDA && (spec->conv2d || e->t.dtype != spec->dtype)) {
            FC_TRY(fc_slab_ops_cuda(slabs, spec, e, n, nelem, &cur));
            FC_TRY(sink(ctx, cur, (size_t)nelem * out_esz));
            continue;
        }
        if (spec->conv2d) {
            FC_TRY(fc_slab_reserve(&slabs->mid, &slabs->cap_mid, (size_t)nelem * in_esz));
            int64_t shape4[4];
            memcpy(shape4, e->t.shape, sizeof(shape4));
            shape4[0] = n; /* the slab holds rows [0, n) of its own */
            FC_TRY(fc_kern_conv2d_to_linear(slabs->mid, cur, in_esz, shape4, 0, n));
            cur = slabs->mid;
        }
        if (e->t.dtype != spec->dtype) {
            FC_TRY(fc_slab_reserve(&slabs->out, &slabs->cap_out, (size_t)nelem * out_esz));
            FC_TRY(fc_kern_cast(spec->dtype, slabs->out, e->t.dtype, cur, nelem));
            cur = slabs->out;
        }
        FC_TRY(sink(ctx, cur, (size_t)nelem * out_esz));
    }
    return FC_OK;
}
