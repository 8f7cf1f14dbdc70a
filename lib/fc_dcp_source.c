/*
 * fc_dcp_source.c - a DCP checkpoint directory as a struct fc_source.
 *
 * Entries come from .metadata in its order.  Each stored chunk is a torch.save
 * blob inside a .distcp file; we parse every blob once at open (central
 * directory + data.pkl, a few hundred bytes each) to learn where its storage
 * starts and how the chunk tensor is strided, then read boxes by
 * intersecting the requested box with the chunks that overlap it.  Bytes
 * items are unpickled into values.  Nothing is read from tensor data until a
 * box is asked for.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_source.h"
#include "fc_torchsave.h"

struct fc_dcp_chunk_ref {
    size_t file;                 /* index into src->files */
    uint64_t base;               /* absolute offset of the chunk storage's element 0 */
    struct fc_tensor_desc desc;  /* the chunk tensor as stored (shape == chunk sizes) */
    const int64_t *offsets;      /* global offsets (from the metadata) */
};

struct fc_dcp_source_impl {
    struct fc_dcp_meta *meta;
    struct fc_torchsave **blobs; /* every parsed item, kept for the values' trees */
    size_t nblobs;
    struct fc_dcp_chunk_ref **chunks; /* per entry: its chunks (tensors), NULL for values */
    size_t *nchunks;
    size_t nentries;
};

static void fc_dcp_source_impl_free(void *p)
{
    struct fc_dcp_source_impl *impl = p;
    if (impl == NULL)
        return;
    for (size_t i = 0; i < impl->nblobs; i++)
        fc_torchsave_free(impl->blobs[i]);
    fc_free(impl->blobs);
    for (size_t i = 0; i < impl->nentries; i++)
        fc_free(impl->chunks[i]);
    fc_free(impl->chunks);
    fc_free(impl->nchunks);
    fc_dcp_meta_free(impl->meta);
    fc_free(impl);
}

/* Index of the open file for relative_path, opening it on first use. */
static int fc_dcp_file(struct fc_source *src, const char *dir, const char *rel, size_t *out)
{
    for (size_t i = 0; i < src->nfiles; i++) {
        const char *name = strrchr(src->files[i].path, '/');
        if (strcmp(name != NULL ? name + 1 : src->files[i].path, rel) == 0) {
            *out = i;
            return FC_OK;
        }
    }
    if (strchr(rel, '/') != NULL || strcmp(rel, "..") == 0 || rel[0] == '\0')
        return fc_error_set(FC_ECORRUPT, "%s/.metadata: storage file name '%s' is not a plain "
                            "file name", dir, rel);
    struct fc_file *files = fc_reallocarray(src->files, src->nfiles + 1, sizeof(*files));
    if (files == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    src->files = files;
    char *path = fc_path_join(dir, rel);
    if (path == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    files[src->nfiles] = (struct fc_file)FC_FILE_INIT;
    int rc = fc_file_open_read(&files[src->nfiles], path);
    if (rc == FC_ENOENT)
        rc = fc_error_set(FC_ECORRUPT, "%s: missing: .metadata names it but it is not there",
                          path);
    fc_free(path);
    FC_TRY(rc);
    *out = src->nfiles++;
    return FC_OK;
}

/* Parse the blob of one stored item; *ts_out stays owned by impl. */
static int fc_dcp_parse_item(struct fc_source *src, struct fc_dcp_source_impl *impl,
                             const char *dir, const char *fqn, const struct fc_dcp_storage *st,
                             size_t *file_out, struct fc_torchsave **ts_out)
{
    if (st->ntransforms > 0)
        return fc_error_set(FC_EFORMAT, "%s: item '%s' uses transform '%s', which this build "
                            "cannot read", dir, fqn, st->transforms[0]);
    size_t fi;
    FC_TRY(fc_dcp_file(src, dir, st->relative_path, &fi));
    const struct fc_file *f = &src->files[fi];
    if (st->offset > f->size || st->length > f->size - st->offset)
        return fc_error_set(FC_ECORRUPT, "%s: item '%s' [%" PRIu64 ", +%" PRIu64
                            ") runs past the end of the file (%" PRIu64 " bytes)",
                            f->path, fqn, st->offset, st->length, f->size);
    char what[768];
    snprintf(what, sizeof(what), "%s @ %" PRIu64 " (item '%s')", f->path, st->offset, fqn);
    struct fc_torchsave *ts;
    FC_TRY(fc_torchsave_open(&ts, f, st->offset, st->length, what));
    impl->blobs[impl->nblobs++] = ts;
    *file_out = fi;
    *ts_out = ts;
    return FC_OK;
}

static int fc_dcp_read_box(const struct fc_source *src, const struct fc_entry *e,
                           const int64_t *off, const int64_t *size, void *dst);

int fc_source_open_dcp(struct fc_source **out, const char *dir)
{
    struct fc_source *src = fc_calloc(1, sizeof(*src));
    struct fc_dcp_source_impl *impl = fc_calloc(1, sizeof(*impl));
    char *mpath = fc_path_join(dir, ".metadata");
    int rc = FC_OK;
    *out = NULL;
    if (src == NULL || impl == NULL || mpath == NULL) {
        fc_free(src);
        fc_free(impl);
        fc_free(mpath);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    src->impl = impl;
    src->impl_free = fc_dcp_source_impl_free;
    src->read_box = fc_dcp_read_box;
    src->format = "dcp";
    src->path = fc_strdup(dir);
    rc = fc_dcp_meta_load(&impl->meta, mpath);
    fc_free(mpath);
    if (rc < 0 || src->path == NULL) {
        if (rc == FC_OK)
            rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto fail;
    }
    const struct fc_dcp_meta *m = impl->meta;
    size_t nitems = 0;
    for (size_t i = 0; i < m->nentries; i++)
        nitems += m->entries[i].kind == FC_DCP_TENSOR ? m->entries[i].nchunks : 1;
    impl->blobs = fc_calloc(nitems + 1, sizeof(*impl->blobs));
    impl->chunks = fc_calloc(m->nentries + 1, sizeof(*impl->chunks));
    impl->nchunks = fc_calloc(m->nentries + 1, sizeof(*impl->nchunks));
    src->entries = fc_calloc(m->nentries + 1, sizeof(*src->entries));
    if (impl->blobs == NULL || impl->chunks == NULL || impl->nchunks == NULL ||
        src->entries == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto fail;
    }
    impl->nentries = m->nentries;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct fc_dcp_entry *de = &m->entries[i];
        struct fc_entry *e = &src->entries[i];
        e->key = fc_strdup(de->fqn);
        if (e->key == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto fail;
        }
        src->nentries++;
        /* planner_data gives the nesting; without it the flat key is the path. */
        const size_t plen = de->path != NULL ? de->path_len : 1;
        struct fc_path_elem *p = fc_calloc(plen, sizeof(*p));
        if (p == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto fail;
        }
        e->path = p;
        for (size_t k = 0; k < plen; k++) {
            p[k] = de->path != NULL ? de->path[k] : (struct fc_path_elem){ 0, 0, de->fqn };
            if (!p[k].is_index && (p[k].key = fc_strdup(p[k].key)) == NULL) {
                rc = fc_error_set(FC_ENOMEM, "out of memory");
                goto fail;
            }
            e->path_len = k + 1;
        }
        e->storage = SIZE_MAX;
        if (de->kind == FC_DCP_BYTES) {
            size_t fi;
            struct fc_torchsave *ts;
            FC_TRY_GOTO(fc_dcp_parse_item(src, impl, dir, de->fqn, &de->storage, &fi, &ts), rc,
                        fail);
            e->kind = FC_ENTRY_VALUE;
            e->value = fc_torchsave_root(ts);
            continue;
        }
        e->kind = FC_ENTRY_TENSOR;
        e->t.dtype = de->dtype;
        e->t.ndim = de->ndim;
        memcpy(e->t.shape, de->size, sizeof(e->t.shape));
        fc_tensor_set_contiguous(&e->t);
        impl->chunks[i] = fc_calloc(de->nchunks + 1, sizeof(**impl->chunks));
        if (impl->chunks[i] == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t c = 0; c < de->nchunks; c++) {
            const struct fc_dcp_chunk *dc = &de->chunks[c];
            struct fc_dcp_chunk_ref *ref = &impl->chunks[i][c];
            struct fc_torchsave *ts;
            FC_TRY_GOTO(fc_dcp_parse_item(src, impl, dir, de->fqn, &dc->storage, &ref->file, &ts),
                        rc, fail);
            const struct fc_pv *root = fc_torchsave_root(ts);
            if (root->kind != FC_PV_TENSOR) {
                rc = fc_error_set(FC_ECORRUPT, "%s: item of tensor '%s' (chunk %zu) holds no "
                                  "tensor", dir, de->fqn, c);
                goto fail;
            }
            const struct fc_pv_tensor *t = &root->u.tensor;
            int same = t->desc.ndim == de->ndim;
            for (int d = 0; same && d < de->ndim; d++)
                same = t->desc.shape[d] == dc->sizes[d];
            if (!same) {
                rc = fc_error_set(FC_ECORRUPT, "%s: chunk %zu of '%s': stored tensor shape does "
                                  "not match the chunk sizes in .metadata", dir, c, de->fqn);
                goto fail;
            }
            if (t->desc.dtype != de->dtype) {
                rc = fc_error_set(FC_EFORMAT, "%s: chunk %zu of '%s' is stored as %s but "
                                  ".metadata says %s", dir, c, de->fqn,
                                  fc_dtype_name(t->desc.dtype), fc_dtype_name(de->dtype));
                goto fail;
            }
            const struct fc_ts_storage *st =
                fc_torchsave_storage_at(ts, fc_torchsave_storage_index(ts, t));
            ref->base = st->data_offset;
            ref->desc = t->desc;
            ref->offsets = dc->offsets;
            impl->nchunks[i]++;
        }
    }
    *out = src;
    return FC_OK;
fail:
    fc_source_free(src);
    return rc;
}

/* Copy an n-d block `size` from a dense buffer into dst (dense box of shape dshape) at doff. */
static void fc_scatter(unsigned char *dst, const int64_t *dshape, const int64_t *doff,
                       const unsigned char *srcbuf, const int64_t *size, int ndim, size_t esz)
{
    if (ndim == 0) {
        memcpy(dst, srcbuf, esz);
        return;
    }
    int64_t idx[FC_MAX_DIMS] = { 0 };
    const size_t run = (size_t)size[ndim - 1] * esz;
    for (;;) {
        int64_t lin = 0;
        for (int d = 0; d < ndim; d++)
            lin = lin * dshape[d] + doff[d] + (d < ndim - 1 ? idx[d] : 0);
        memcpy(dst + (size_t)lin * esz, srcbuf, run);
        srcbuf += run;
        int d = ndim - 2;
        while (d >= 0 && ++idx[d] == size[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
}

static int fc_dcp_read_box(const struct fc_source *src, const struct fc_entry *e,
                           const int64_t *off, const int64_t *size, void *dst)
{
    const struct fc_dcp_source_impl *impl = src->impl;
    const size_t ei = (size_t)(e - src->entries);
    const int ndim = e->t.ndim;
    const size_t esz = fc_dtype_size(e->t.dtype);
    int64_t covered = 0, want = 1;
    for (int d = 0; d < ndim; d++) {
        if (off[d] < 0 || size[d] < 0 || off[d] > e->t.shape[d] ||
            size[d] > e->t.shape[d] - off[d])
            return fc_error_set(FC_EINVAL, "%s: '%s': box outside the tensor", src->path, e->key);
        want *= size[d];
    }
    if (want == 0)
        return FC_OK;
    for (size_t c = 0; c < impl->nchunks[ei]; c++) {
        const struct fc_dcp_chunk_ref *ref = &impl->chunks[ei][c];
        int64_t lo[FC_MAX_DIMS], len[FC_MAX_DIMS], doff[FC_MAX_DIMS];
        int64_t n = 1;
        for (int d = 0; d < ndim; d++) {
            const int64_t a = off[d] > ref->offsets[d] ? off[d] : ref->offsets[d];
            const int64_t b1 = off[d] + size[d], b2 = ref->offsets[d] + ref->desc.shape[d];
            const int64_t b = b1 < b2 ? b1 : b2;
            len[d] = b > a ? b - a : 0;
            lo[d] = a - ref->offsets[d];
            doff[d] = a - off[d];
            n *= len[d];
        }
        if (n == 0)
            continue;
        unsigned char *tmp = fc_malloc((size_t)n * esz);
        if (tmp == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory reading '%s'", e->key);
        char what[512];
        snprintf(what, sizeof(what), "%s: '%s' chunk %zu", src->path, e->key, c);
        const int rc = fc_read_strided_box(&src->files[ref->file], ref->base, &ref->desc, lo, len,
                                           tmp, what);
        if (rc == FC_OK)
            fc_scatter(dst, size, doff, tmp, len, ndim, esz);
        fc_free(tmp);
        FC_TRY(rc);
        covered += n;
    }
    if (covered != want)
        return fc_error_set(FC_ECORRUPT, "%s: '%s': the stored chunks cover %" PRId64
                            " of the %" PRId64 " requested elements (gap or overlap)",
                            src->path, e->key, covered, want);
    return FC_OK;
}
