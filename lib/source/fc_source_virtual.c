/*
 * fc_source_virtual.c - virtual chunked tensors: tensors whose parts are
 * boxes of other sources' tensors placed at offsets, so that the rules
 * --stack, --concat, --split and --unstack (convert/xform_layout.c) build and
 * cut tensors without copying one into memory.
 *
 * Design.  A chunked source (DCP) assembles any box of a tensor from the
 * stored chunks that overlap it; a virtual tensor does the same with parts
 * that are boxes of other entries (of any source, this one included, so a
 * split of a stack is a part of a part).  The planner cuts a virtual tensor
 * like any other (it sees only the spec's dtype and shape) and the streamer
 * reads each rank's box in row slabs through fc_source_read_box(): each slab
 * reads only the bytes of the inputs it overlaps, straight into place when
 * the overlap spans the slab's trailing dims (stacks, splits on dim 0), else
 * one overlap row at a time through a scratch row (concat or split on a later
 * dim).  Memory stays within the streamer's slab plus one row.
 *
 * A part may differ from its input in one leading dim of size 1 (struct
 * fc_vpart.lead): a stack slice has one more dim than its input tensor, an
 * unstack slice one less.  Dropping or adding a size-1 dim leaves the
 * C-contiguous order of a box's elements as it was, so a part's box reads
 * into place with the input's own box reader.
 *
 * Invariants (the rules that add entries guarantee them; not re-checked):
 * parts lie inside the tensor and tile it exactly; each part's input box lies
 * inside its input tensor, of the tensor's dtype; an entry's parts name only
 * entries added before it, and sources that outlive this one.
 */
#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_source.h"
#include "fc_source_backend.h"

struct fc_virtual_impl {
    struct fc_vpart **parts; /* per entry */
    size_t *nparts;
    size_t cap;
};

static void fc_virtual_impl_free(void *p)
{
    struct fc_virtual_impl *impl = p;
    if (impl == NULL)
        return;
    for (size_t i = 0; i < impl->cap; i++)
        fc_free(impl->parts[i]);
    fc_free(impl->parts);
    fc_free(impl->nparts);
    fc_free(impl);
}

/* The box of part p's input that holds the box (vo, vs) of the virtual tensor (inside p). */
static int fc_vpart_in_box(const struct fc_vpart *p, int ndim, const int64_t *vo, const int64_t *vs,
                           int64_t *io, int64_t *is)
{
    const int in_ndim = ndim - p->lead;
    int k = 0;
    if (p->lead < 0) { /* the input's leading dim is fixed at the part's slice */
        io[0] = p->in_off[0];
        is[0] = 1;
        k = 1;
    }
    for (int d = p->lead > 0 ? 1 : 0; d < ndim; d++, k++) {
        io[k] = p->in_off[k] + vo[d] - p->at[d];
        is[k] = vs[d];
    }
    return in_ndim;
}

/* Read the part of box (off, size) that part p overlaps into dst, a dense box of `size`. */
static int fc_vpart_read(const struct fc_vpart *p, const struct fc_entry *e, const int64_t *off,
                         const int64_t *size, unsigned char *dst)
{
    const int ndim = e->t.ndim;
    const size_t esz = fc_dtype_size(e->t.dtype);
    int64_t vo[FC_MAX_DIMS] = {0}, vs[FC_MAX_DIMS] = {0}, doff[FC_MAX_DIMS] = {0};
    int in_place = 1;
    for (int d = 0; d < ndim; d++) {
        const int64_t lo = off[d] > p->at[d] ? off[d] : p->at[d];
        const int64_t a = off[d] + size[d], b = p->at[d] + p->size[d];
        const int64_t hi = a < b ? a : b;
        if (hi <= lo)
            return FC_OK;
        vo[d] = lo;
        vs[d] = hi - lo;
        doff[d] = lo - off[d];
        in_place &= d == 0 || vs[d] == size[d];
    }
    const struct fc_entry *in = &p->src->entries[p->entry];
    int64_t io[FC_MAX_DIMS], is[FC_MAX_DIMS];
    size_t row = esz;
    for (int d = 1; d < ndim; d++)
        row *= (size_t)size[d];
    if (in_place) {
        (void)fc_vpart_in_box(p, ndim, vo, vs, io, is);
        return fc_source_read_box(p->src, in, io, is, dst + (ndim > 0 ? (size_t)doff[0] * row : 0));
    }
    /* The overlap is narrower than the box past dim 0: one overlap row at a time. */
    size_t orow = esz;
    for (int d = 1; d < ndim; d++)
        orow *= (size_t)vs[d];
    unsigned char *tmp = fc_malloc(orow);
    if (tmp == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory reading '%s'", e->key);
    const int64_t first = vo[0], n = vs[0];
    int rc = FC_OK;
    vs[0] = 1;
    for (int64_t r = 0; rc == FC_OK && r < n; r++) {
        vo[0] = first + r;
        (void)fc_vpart_in_box(p, ndim, vo, vs, io, is);
        rc = fc_source_read_box(p->src, in, io, is, tmp);
        if (rc == FC_OK)
            fc_box_scatter(dst + (size_t)(doff[0] + r) * row, size + 1, doff + 1, tmp, vs + 1,
                           ndim - 1, esz);
    }
    fc_free(tmp);
    return rc;
}

static int fc_virtual_read_box(const struct fc_source *src, const struct fc_entry *e,
                               const int64_t *off, const int64_t *size, void *dst)
{
    const struct fc_virtual_impl *impl = src->impl;
    const size_t i = (size_t)(e - src->entries);
    for (int d = 0; d < e->t.ndim; d++)
        if (off[d] < 0 || size[d] < 0 || off[d] > e->t.shape[d] || size[d] > e->t.shape[d] - off[d])
            return fc_error_set(FC_EINVAL, "%s: '%s': box outside the tensor", src->path, e->key);
    for (size_t k = 0; k < impl->nparts[i]; k++)
        FC_TRY(fc_vpart_read(&impl->parts[i][k], e, off, size, dst));
    return FC_OK;
}

static void fc_virtual_free(void *impl)
{
    fc_virtual_impl_free(impl);
}

static const struct fc_source_backend fc_source_virtual_backend = {
    .name = "virtual",
    .read_box = fc_virtual_read_box,
    .free = fc_virtual_free,
};

int fc_source_new_virtual(struct fc_source **out, const char *name)
{
    return fc_source_new(out, name, &fc_source_virtual_backend,
                         fc_calloc(1, sizeof(struct fc_virtual_impl)));
}

int fc_source_add_virtual(struct fc_source *v, const char *key, fc_dtype dtype, int ndim,
                          const int64_t *shape, const struct fc_vpart *parts, size_t nparts,
                          size_t *entry)
{
    struct fc_virtual_impl *impl = v->impl;
    if (v->nentries == impl->cap) {
        const size_t cap = impl->cap < 16 ? 16 : impl->cap * 2;
        struct fc_vpart **pp = fc_reallocarray(impl->parts, cap, sizeof(*pp));
        if (pp != NULL)
            impl->parts = pp;
        size_t *np = pp != NULL ? fc_reallocarray(impl->nparts, cap, sizeof(*np)) : NULL;
        if (np == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        impl->nparts = np;
        memset(pp + impl->cap, 0, (cap - impl->cap) * sizeof(*pp));
        memset(np + impl->cap, 0, (cap - impl->cap) * sizeof(*np));
        impl->cap = cap;
    }
    struct fc_vpart *copy = fc_calloc(nparts == 0 ? 1 : nparts, sizeof(*copy));
    struct fc_entry e;
    memset(&e, 0, sizeof(e));
    e.key = fc_strdup(key);
    if (copy == NULL || e.key == NULL) {
        fc_free(copy);
        fc_free((void *)(uintptr_t)e.key);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    memcpy(copy, parts, nparts * sizeof(*copy));
    e.kind = FC_ENTRY_TENSOR;
    e.storage = SIZE_MAX; /* no storage of its own: nothing aliases it by storage */
    e.t.dtype = dtype;
    e.t.ndim = ndim;
    memcpy(e.t.shape, shape, sizeof(int64_t) * (size_t)ndim);
    fc_tensor_set_contiguous(&e.t);
    const size_t at = v->nentries;
    impl->parts[at] = copy;
    impl->nparts[at] = nparts;
    const int rc = fc_source_add_entry(v, &e);
    if (rc < 0 && v->nentries == at) { /* not added: the parts are not the source's */
        impl->parts[at] = NULL;
        impl->nparts[at] = 0;
        fc_free(copy);
    }
    FC_TRY(rc);
    *entry = at;
    return FC_OK;
}

const struct fc_vpart *fc_source_virtual_parts(const struct fc_source *v, size_t entry, size_t *n)
{
    const struct fc_virtual_impl *impl = v->impl;
    *n = impl->nparts[entry];
    return impl->parts[entry];
}
