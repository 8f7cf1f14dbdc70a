/*
 * fc_source_safetensors.c - the safetensors backends: one file, a directory of
 * files (one key space), a model.safetensors.index.json with its shards, and
 * a directory of per-rank files whose tensors are chunks of global tensors
 * (torch's distributed HF checkpoints, DCP_SHARDING_INFO).
 */
#include <stdint.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_chunks.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_safetensors.h"
#include "fc_sort.h"
#include "fc_source.h"
#include "fc_source_backend.h"
#include "fc_torchsave.h"

/* One tensor of a sharded safetensors source: its chunks in every file. */
struct fc_st_chunks {
    int ndim;
    int untiled; /* opened with FC_SOURCE_UNTILED_OK although the boxes do not tile */
    struct fc_chunk_ref *refs;
    struct fc_box *boxes; /* offsets/sizes point into the files' parsed headers */
    size_t n, cap;
    struct fc_chunk_index *index;
};

/* The parsed files, kept alive for the source's lifetime. */
struct fc_st_source {
    struct fc_safetensors **st;
    size_t nst;
    struct fc_st_chunks *chunked; /* sharded safetensors: per entry */
    size_t nchunked;
};

static void fc_st_source_free(void *p)
{
    struct fc_st_source *impl = p;
    if (impl == NULL)
        return;
    for (size_t i = 0; i < impl->nst; i++)
        fc_safetensors_free(impl->st[i]);
    fc_free(impl->st);
    for (size_t i = 0; i < impl->nchunked; i++) {
        fc_free(impl->chunked[i].refs);
        fc_free(impl->chunked[i].boxes);
        fc_chunk_index_free(impl->chunked[i].index);
    }
    fc_free(impl->chunked);
    fc_free(impl);
}

/* ---- safetensors ---- */

/* Open one safetensors file into impl->st[impl->nst - 1]; *file_out is its source file. */
static int fc_source_open_st(struct fc_source *src, const char *path, size_t *file_out)
{
    struct fc_st_source *impl = src->impl;
    FC_TRY(fc_source_add_file(src, path, file_out));
    struct fc_safetensors **st = fc_reallocarray(impl->st, impl->nst + 1, sizeof(*st));
    if (st == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    impl->st = st;
    FC_TRY(fc_safetensors_open(&impl->st[impl->nst], &src->files[*file_out]));
    impl->nst++;
    return FC_OK;
}

/* A tensor entry keyed by name, path = [name]; shape and storage left to the caller. */
static int fc_source_add_st_entry(struct fc_source *src, const struct fc_st_tensor *t,
                                  size_t storage)
{
    struct fc_entry e;
    memset(&e, 0, sizeof(e));
    e.kind = FC_ENTRY_TENSOR;
    e.t.dtype = t->dtype;
    e.t.ndim = t->ndim;
    memcpy(e.t.shape, t->shape, sizeof(t->shape));
    fc_tensor_set_contiguous(&e.t);
    e.storage = storage;
    struct fc_path_elem *p = fc_calloc(1, sizeof(*p));
    char *key = fc_strdup(t->name);
    char *pkey = fc_strdup(t->name);
    if (p == NULL || key == NULL || pkey == NULL) {
        fc_free(p);
        fc_free(key);
        fc_free(pkey);
        return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
    }
    p->key = pkey;
    e.key = key;
    e.path = p;
    e.path_len = 1;
    return fc_source_add_entry(src, &e);
}

/* The whole tensors of file `file` (= impl->st[file]) as entries; keys must be new. */
static int fc_source_add_st_tensors(struct fc_source *src, size_t file)
{
    const struct fc_st_source *impl = src->impl;
    const struct fc_safetensors *s = impl->st[file];
    for (size_t i = 0; i < fc_safetensors_count(s); i++) {
        const struct fc_st_tensor *t = fc_safetensors_at(s, i);
        if (fc_source_find(src, t->name) >= 0)
            return fc_error_set(FC_ECORRUPT, "%s: tensor '%s' appears in more than one shard",
                                src->files[file].path, t->name);
        FC_TRY(fc_source_add_storage(src, t->name, file, t->data_offset, t->nbytes));
        FC_TRY(fc_source_add_st_entry(src, t, src->nstorages - 1));
    }
    return FC_OK;
}

static int fc_source_add_safetensors(struct fc_source *src, const char *path)
{
    size_t file;
    FC_TRY(fc_source_open_st(src, path, &file));
    return fc_source_add_st_tensors(src, file);
}

/* ---- sharded safetensors (torch's distributed HF checkpoints) ---- */

static int fc_st_chunked_read_box(const struct fc_source *src, const struct fc_entry *e,
                                  const int64_t *off, const int64_t *size, void *dst)
{
    const struct fc_st_source *impl = src->impl;
    const struct fc_st_chunks *c = &impl->chunked[e - src->entries];
    if (c->untiled)
        return fc_error_set(FC_ECORRUPT, "%s: the chunks of '%s' do not tile it", src->path,
                            e->key);
    /* No CRC-32s to check: safetensors has none. */
    return fc_chunks_read_box(src, e, c->refs, c->boxes, c->index, NULL, off, size, dst);
}

/*
 * 1 when a global shape's element count or byte size overflows int64, zero
 * dims counted as 1: strides and row sizes are products of the other dims.
 */
static int fc_st_extent_overflows(const struct fc_tensor_desc *t)
{
    int64_t n = (int64_t)fc_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        if (fc_mul_i64(n, t->shape[d] > 0 ? t->shape[d] : 1, &n) < 0)
            return 1;
    }
    return 0;
}

/* Chunk t of file `file` joins its tensor's entry (created on first sight). */
static int fc_st_add_chunk(struct fc_source *src, size_t file, const struct fc_st_tensor *t)
{
    struct fc_st_source *impl = src->impl;
    long ei = fc_source_find(src, t->name);
    if (ei < 0) {
        struct fc_st_chunks *cs = fc_reallocarray(impl->chunked, impl->nchunked + 1, sizeof(*cs));
        if (cs == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
        impl->chunked = cs;
        memset(&cs[impl->nchunked++], 0, sizeof(*cs));
        FC_TRY(fc_source_add_st_entry(src, t, SIZE_MAX));
        ei = (long)src->nentries - 1;
    }
    struct fc_entry *e = &src->entries[ei];
    struct fc_st_chunks *c = &impl->chunked[ei];
    if (e->t.dtype != t->dtype || e->t.ndim != t->ndim)
        return fc_error_set(FC_ECORRUPT,
                            "%s: tensor '%s' is %s with %d dims here but %s with %d dims in an "
                            "earlier file",
                            src->files[file].path, t->name, fc_dtype_name(t->dtype), t->ndim,
                            fc_dtype_name(e->t.dtype), e->t.ndim);
    /*
     * The global shape is the furthest chunk end on every dim, as torch's
     * reader infers it.  Every command derives element counts, byte sizes and
     * strides from it unchecked, so its extremes are checked here, as
     * .metadata's are where it is parsed (fc_safetensors_open() already
     * checked that each saved_offsets + size fits int64).
     */
    for (int d = 0; d < t->ndim; d++) {
        const int64_t end = t->saved_offsets[d] + t->shape[d];
        e->t.shape[d] = end > e->t.shape[d] ? end : e->t.shape[d];
    }
    if (fc_st_extent_overflows(&e->t))
        return fc_error_set(FC_ECORRUPT,
                            "%s: tensor '%s': saved_offsets put it in a global tensor whose "
                            "element count or byte size overflows int64",
                            src->files[file].path, t->name);
    if (c->n == c->cap) {
        const size_t cap = c->cap == 0 ? 4 : 2 * c->cap;
        struct fc_chunk_ref *nr = fc_reallocarray(c->refs, cap, sizeof(*nr));
        if (nr != NULL)
            c->refs = nr;
        struct fc_box *nb = nr != NULL ? fc_reallocarray(c->boxes, cap, sizeof(*nb)) : NULL;
        if (nb == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
        c->boxes = nb;
        c->cap = cap;
    }
    struct fc_chunk_ref *r = &c->refs[c->n];
    memset(r, 0, sizeof(*r)); /* dense, no CRC to check: safetensors has none */
    r->file = (uint32_t)file;
    r->base = t->data_offset;
    c->ndim = t->ndim;
    c->boxes[c->n++] = (struct fc_box){t->saved_offsets, t->shape};
    return FC_OK;
}

static int fc_cmp_chunk_offsets(const void *ctx, size_t a, size_t b)
{
    const struct fc_st_chunks *c = ctx;
    for (int d = 0; d < c->ndim; d++) {
        const int64_t x = c->boxes[a].offsets[d], y = c->boxes[b].offsets[d];
        if (x != y)
            return x < y ? -1 : 1;
    }
    /* Same box start: the later file sorts last (file indices follow the listing). */
    return c->refs[a].file < c->refs[b].file ? -1 : c->refs[a].file > c->refs[b].file;
}

/*
 * Sort c's chunks by offsets, keep the last file's of equal offsets, prove that the kept
 * boxes tile tensor e (so every box read fills its whole buffer), and index them.
 */
static int fc_st_chunks_finish(const struct fc_source *src, struct fc_st_chunks *c,
                               const struct fc_entry *e, unsigned flags)
{
    const int ndim = e->t.ndim;
    size_t *order = fc_calloc(c->n + 1, sizeof(*order));
    struct fc_chunk_ref *refs = fc_calloc(c->n + 1, sizeof(*refs));
    struct fc_box *boxes = fc_calloc(c->n + 1, sizeof(*boxes));
    int rc = FC_OK;
    if (order == NULL || refs == NULL || boxes == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t j = 0; j < c->n; j++)
        order[j] = j;
    FC_TRY_GOTO(fc_sort_idx(order, c->n, fc_cmp_chunk_offsets, c), rc, done);
    size_t k = 0;
    for (size_t j = 0; j < c->n; j++) {
        const struct fc_box *b = &c->boxes[order[j]];
        if (k > 0 && memcmp(boxes[k - 1].offsets, b->offsets, (size_t)ndim * sizeof(int64_t)) == 0)
            k--;
        refs[k] = c->refs[order[j]];
        boxes[k++] = *b;
    }
    fc_free(c->refs);
    fc_free(c->boxes);
    c->refs = refs;
    c->boxes = boxes;
    c->n = k;
    refs = NULL;
    boxes = NULL;
    rc = fc_chunks_index_tiled(src, e, ndim, c->boxes, c->n, flags, &c->index, &c->untiled);
done:
    fc_free(order);
    fc_free(refs);
    fc_free(boxes);
    return rc;
}

/*
 * Every tensor of every file is a chunk at its saved_offsets (zeros in files
 * without DCP_SHARDING_INFO, as torch's reader takes them).  Of chunks with
 * the same offsets the one in the last file wins, as in torch's reader.
 */
static int fc_source_finish_chunked(struct fc_source *src, unsigned flags)
{
    struct fc_st_source *impl = src->impl;
    for (size_t f = 0; f < impl->nst; f++) {
        for (size_t i = 0; i < fc_safetensors_count(impl->st[f]); i++)
            FC_TRY(fc_st_add_chunk(src, f, fc_safetensors_at(impl->st[f], i)));
    }
    for (size_t i = 0; i < src->nentries; i++) {
        struct fc_entry *e = &src->entries[i];
        struct fc_st_chunks *c = &impl->chunked[i];
        fc_tensor_set_contiguous(&e->t);
        FC_TRY(fc_st_chunks_finish(src, c, e, flags));
    }
    src->backend = &fc_source_st_sharded_backend;
    src->format = src->backend->name;
    return FC_OK;
}

static int fc_st_sharded_meta(const struct fc_source *src, struct fc_dcp_meta **out)
{
    const struct fc_st_source *impl = src->impl;
    struct fc_dcp_meta *m = NULL;
    int rc;
    *out = NULL;
    FC_TRY(fc_dcp_meta_new(&m));
    /* Entries in the source's order, so entry i of both is the same tensor. */
    for (size_t i = 0; i < src->nentries; i++) {
        const struct fc_entry *e = &src->entries[i];
        FC_TRY_GOTO(fc_dcp_meta_add_tensor(m, e->key, e->t.dtype, e->t.ndim, e->t.shape, NULL), rc,
                    done);
    }
    const char *version =
        impl->nst > 0 ? fc_safetensors_metadata(impl->st[0], "DCP_VERSION") : NULL;
    FC_TRY_GOTO(fc_dcp_meta_set_version(m, version), rc, done);
    for (size_t f = 0; f < impl->nst; f++) {
        const char *slash = strrchr(src->files[f].path, '/');
        const char *name = slash != NULL ? slash + 1 : src->files[f].path;
        for (size_t k = 0; k < fc_safetensors_count(impl->st[f]); k++) {
            const struct fc_st_tensor *t = fc_safetensors_at(impl->st[f], k);
            const size_t ei = (size_t)fc_dcp_meta_find(m, t->name);
            size_t c;
            FC_TRY_GOTO(fc_dcp_meta_add_chunk(m, ei, t->saved_offsets, t->shape, &c), rc, done);
            FC_TRY_GOTO(fc_dcp_storage_set(m, &m->entries[ei].chunks[c].storage, name,
                                           t->data_offset, t->nbytes),
                        rc, done);
        }
    }
    *out = m;
    return FC_OK;
done:
    fc_dcp_meta_free(m);
    return rc;
}

static int fc_source_open_index(struct fc_source *src, const char *index_path)
{
    struct fc_st_index idx;
    memset(&idx, 0, sizeof(idx));
    FC_TRY(fc_st_index_load(&idx, index_path));
    int rc = FC_OK;
    /* Shard names are relative to the index's directory. */
    char *dir = fc_strdup(index_path);
    if (dir == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", index_path);
        goto done;
    }
    char *slash = strrchr(dir, '/');
    if (slash != NULL)
        *slash = '\0';
    for (size_t i = 0; i < idx.nfiles; i++) {
        char *p = slash != NULL ? fc_path_join(dir, idx.files[i]) : fc_strdup(idx.files[i]);
        if (p == NULL) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", index_path);
            goto done;
        }
        rc = fc_source_add_safetensors(src, p);
        if (rc == FC_ENOENT)
            rc = fc_error_set(FC_ECORRUPT, "%s: shard '%s' named by the index is missing",
                              index_path, idx.files[i]);
        fc_free(p);
        if (rc < 0)
            goto done;
    }
    for (size_t k = 0; k < idx.nkeys; k++) {
        const long e = fc_source_find(src, idx.keys[k]);
        /* Shard i was opened as file i of the source. */
        if (e < 0 || src->storages[src->entries[e].storage].file != idx.key_file[k]) {
            rc = fc_error_set(FC_ECORRUPT, "%s: index maps '%s' to %s, which does not hold it",
                              index_path, idx.keys[k], idx.files[idx.key_file[k]]);
            goto done;
        }
    }
done:
    fc_free(dir);
    fc_st_index_release(&idx);
    return rc;
}

/*
 * Every *.safetensors file of a directory (names sorted): one key space of
 * whole tensors, or, when any file carries DCP_SHARDING_INFO, the chunks of
 * a sharded checkpoint (torch's HuggingFaceStorageReader reads it the same way).
 */
static int fc_source_open_st_dir(struct fc_source **out, const char *path, char *const *names,
                                 size_t n, unsigned flags)
{
    FC_TRY(
        fc_source_new(out, path, &fc_source_st_backend, fc_calloc(1, sizeof(struct fc_st_source))));
    struct fc_st_source *impl = (*out)->impl;
    int sharded = 0;
    for (size_t i = 0; i < n; i++) {
        if (!fc_ends_with(names[i], ".safetensors"))
            continue;
        char *p = fc_path_join(path, names[i]);
        if (p == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
        size_t file;
        const int rc = fc_source_open_st(*out, p, &file);
        fc_free(p);
        FC_TRY(rc);
        sharded |= fc_safetensors_is_sharded(impl->st[impl->nst - 1]);
    }
    if (sharded)
        return fc_source_finish_chunked(*out, flags);
    for (size_t f = 0; f < impl->nst; f++)
        FC_TRY(fc_source_add_st_tensors(*out, f));
    return FC_OK;
}

/* ---- the backends ---- */

/* A *.json file, or a directory holding a *.safetensors.index.json (the first by name). */
static int fc_st_index_probe(struct fc_probe *p)
{
    if (!p->is_dir)
        return fc_ends_with(p->path, ".json");
    FC_TRY(fc_probe_names(p));
    for (size_t i = 0; i < p->nnames; i++) {
        if (fc_ends_with(p->names[i], ".safetensors.index.json")) {
            p->pick = p->names[i];
            return 1;
        }
    }
    return 0;
}

static int fc_st_index_open(struct fc_source **out, struct fc_probe *p, unsigned flags)
{
    (void)flags;
    if (!p->is_dir) {
        FC_TRY(fc_source_new(out, p->path, &fc_source_st_index_backend,
                             fc_calloc(1, sizeof(struct fc_st_source))));
        return fc_source_open_index(*out, p->path);
    }
    char *index = fc_path_join(p->path, p->pick);
    if (index == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", p->path);
    int rc = fc_source_new(out, p->path, &fc_source_st_index_backend,
                           fc_calloc(1, sizeof(struct fc_st_source)));
    if (rc == FC_OK)
        rc = fc_source_open_index(*out, index);
    fc_free(index);
    return rc;
}

/*
 * A directory holding *.safetensors files, or a file that is safetensors (a
 * .safetensors name that is not a zip gets the parser's precise header errors).
 */
static int fc_st_probe(struct fc_probe *p)
{
    if (!p->is_dir) {
        FC_TRY(fc_probe_head(p));
        const enum fc_ts_kind kind = fc_torchsave_detect(p->head, p->nhead, p->size);
        return kind == FC_TS_SAFETENSORS ||
               (fc_ends_with(p->path, ".safetensors") && kind != FC_TS_ZIP);
    }
    FC_TRY(fc_probe_names(p));
    for (size_t i = 0; i < p->nnames; i++) {
        if (fc_ends_with(p->names[i], ".safetensors"))
            return 1;
    }
    return 0;
}

static int fc_st_open(struct fc_source **out, struct fc_probe *p, unsigned flags)
{
    if (p->is_dir)
        return fc_source_open_st_dir(out, p->path, p->names, p->nnames, flags);
    FC_TRY(fc_source_new(out, p->path, &fc_source_st_backend,
                         fc_calloc(1, sizeof(struct fc_st_source))));
    return fc_source_add_safetensors(*out, p->path);
}

const struct fc_source_backend fc_source_st_index_backend = {
    .name = "safetensors-index",
    .probe = fc_st_index_probe,
    .open = fc_st_index_open,
    .free = fc_st_source_free,
};

const struct fc_source_backend fc_source_st_backend = {
    .name = "safetensors",
    .probe = fc_st_probe,
    .open = fc_st_open,
    .free = fc_st_source_free,
};

/* Not probed: a safetensors directory turns into it when a file has DCP_SHARDING_INFO. */
const struct fc_source_backend fc_source_st_sharded_backend = {
    .name = "safetensors-sharded",
    .caps = FC_SOURCE_CHUNKS,
    .read_box = fc_st_chunked_read_box,
    .sharded_meta = fc_st_sharded_meta,
    .free = fc_st_source_free,
};
