/*
 * stream.c - row-slab streaming of one output box (see stream.h).
 */
#include "stream.h"

#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_kernels.h"

void fc_slabs_release(struct fc_slabs *s)
{
    fc_free(s->in);
    fc_free(s->mid);
    fc_free(s->out);
    memset(s, 0, sizeof(*s));
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
