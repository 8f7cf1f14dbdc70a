/*
 * fc_source.c - format detection, DCP-style flattening and box reads shared by
 * every full-checkpoint input (torch.save, safetensors, index.json).
 */
#include "fc_source.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_checked.h"
#include "fc_chunks.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_safetensors.h"
#include "fc_sort.h"
#include "fc_torchsave.h"

/* Gathering a strided box reads the whole covering span when it is at most this big. */
#define FC_SOURCE_SPAN_CAP  ((uint64_t)64 << 20)
#define FC_SOURCE_KEY_CAP   ((size_t)1 << 20)
#define FC_SOURCE_MAX_DEPTH 256

/* One tensor of a sharded safetensors source: its chunks in every file. */
struct fc_st_chunks {
    int ndim;
    int untiled; /* opened with FC_SOURCE_UNTILED_OK although the boxes do not tile */
    struct fc_chunk_ref *refs;
    struct fc_box *boxes; /* offsets/sizes point into the files' parsed headers */
    size_t n, cap;
    struct fc_chunk_index *index;
};

/* Format-specific state kept alive for the source's lifetime. */
struct fc_source_impl {
    struct fc_torchsave *ts;
    struct fc_safetensors **st;
    size_t nst;
    struct fc_st_chunks *chunked; /* sharded safetensors: per entry */
    size_t nchunked;
};

static void fc_source_impl_free(void *p)
{
    struct fc_source_impl *impl = p;
    if (impl == NULL)
        return;
    fc_torchsave_free(impl->ts);
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

void fc_source_free(struct fc_source *src)
{
    if (src == NULL)
        return;
    for (size_t i = 0; i < src->nentries; i++) {
        fc_free((void *)(uintptr_t)src->entries[i].key);
        for (size_t j = 0; j < src->entries[i].path_len; j++)
            fc_free((void *)(uintptr_t)src->entries[i].path[j].key);
        fc_free((void *)(uintptr_t)src->entries[i].path);
    }
    fc_free(src->entries);
    for (size_t i = 0; i < src->nstorages; i++)
        fc_free((void *)(uintptr_t)src->storages[i].name);
    fc_free(src->storages);
    for (size_t i = 0; i < src->nfiles; i++)
        fc_file_close(&src->files[i]);
    fc_free(src->files);
    fc_strmap_release(&src->key_index);
    if (src->impl_free != NULL)
        src->impl_free(src->impl);
    fc_free((void *)(uintptr_t)src->path);
    fc_free(src);
}

static int fc_source_new(struct fc_source **out, const char *path, const char *format)
{
    struct fc_source *src = fc_calloc(1, sizeof(*src));
    struct fc_source_impl *impl = fc_calloc(1, sizeof(*impl));
    char *p = fc_strdup(path);
    if (src == NULL || impl == NULL || p == NULL) {
        fc_free(src);
        fc_free(impl);
        fc_free(p);
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    }
    src->path = p;
    src->format = format;
    src->impl = impl;
    src->impl_free = fc_source_impl_free;
    *out = src;
    return FC_OK;
}

static int fc_source_add_file(struct fc_source *src, const char *path, size_t *index_out)
{
    struct fc_file *files = fc_reallocarray(src->files, src->nfiles + 1, sizeof(*files));
    if (files == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    src->files = files;
    struct fc_file *f = &src->files[src->nfiles];
    *f = (struct fc_file)FC_FILE_INIT;
    FC_TRY(fc_file_open_read(f, path));
    /* Conversions read each input front to back: ask for aggressive readahead. */
    fc_file_advise_sequential(f, 0, f->size);
    *index_out = src->nfiles++;
    return FC_OK;
}

static int fc_source_add_storage(struct fc_source *src, const char *name, size_t file,
                                 uint64_t offset, uint64_t nbytes)
{
    struct fc_storage *s = fc_reallocarray(src->storages, src->nstorages + 1, sizeof(*s));
    if (s == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
    src->storages = s;
    char *n = fc_strdup(name);
    if (n == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
    src->storages[src->nstorages++] = (struct fc_storage){n, file, offset, nbytes, 0};
    return FC_OK;
}

/* Append an entry; takes ownership of key and path (freed on failure too). */
static int fc_source_add_entry(struct fc_source *src, struct fc_entry *e)
{
    struct fc_entry *es = fc_reallocarray(src->entries, src->nentries + 1, sizeof(*es));
    if (es == NULL) {
        fc_free((void *)(uintptr_t)e->key);
        for (size_t j = 0; j < e->path_len; j++)
            fc_free((void *)(uintptr_t)e->path[j].key);
        fc_free((void *)(uintptr_t)e->path);
        return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
    }
    src->entries = es;
    src->entries[src->nentries++] = *e;
    if (e->kind == FC_ENTRY_TENSOR && e->storage != SIZE_MAX)
        src->storages[e->storage].nrefs++;
    /* Keys must stay findable while the source grows (duplicate checks). */
    const int put = fc_strmap_put(&src->key_index, e->key, src->nentries - 1, NULL);
    return put < 0 ? put : FC_OK;
}

/* ---- flattening (dcp-format.md 3.6) ---- */

struct fc_flatten {
    struct fc_source *src;
    const struct fc_torchsave *ts;
    struct fc_path_elem stack[FC_SOURCE_MAX_DEPTH];
    size_t depth;
};

/* A list is descended when it holds a tensor or a container that is itself descended. */
static int fc_list_is_container(const struct fc_pv *v, int depth)
{
    if (depth > FC_SOURCE_MAX_DEPTH)
        return 0;
    for (size_t i = 0; i < v->u.seq.n; i++) {
        const struct fc_pv *x = v->u.seq.items[i];
        if (x->kind == FC_PV_TENSOR || x->kind == FC_PV_DICT)
            return 1;
        if (x->kind == FC_PV_LIST && fc_list_is_container(x, depth + 1))
            return 1;
    }
    return 0;
}

/* str(key) as Python would print it for the key types state dicts use. */
static int fc_key_string(struct fc_buf *b, const struct fc_pv *k)
{
    switch (k->kind) {
    case FC_PV_STR: return fc_buf_append(b, k->u.str.s, k->u.str.len);
    case FC_PV_INT: return fc_buf_printf(b, "%" PRId64, k->u.i);
    case FC_PV_BOOL: return fc_buf_puts(b, k->u.b ? "True" : "False");
    case FC_PV_NONE: return fc_buf_puts(b, "None");
    default: return fc_pv_repr(b, k, 4096);
    }
}

static int fc_flatten_leaf(struct fc_flatten *fl, const struct fc_pv *v)
{
    struct fc_source *src = fl->src;
    struct fc_buf key = FC_BUF_INIT(FC_SOURCE_KEY_CAP);
    struct fc_entry e;
    int rc = FC_OK;
    memset(&e, 0, sizeof(e));
    for (size_t i = 0; i < fl->depth; i++) {
        if (i > 0)
            FC_TRY_GOTO(fc_buf_putc(&key, '.'), rc, fail);
        if (fl->stack[i].is_index)
            FC_TRY_GOTO(fc_buf_printf(&key, "%" PRId64, fl->stack[i].index), rc, fail);
        else
            FC_TRY_GOTO(fc_buf_puts(&key, fl->stack[i].key), rc, fail);
    }
    FC_TRY_GOTO(fc_buf_putc(&key, '\0'), rc, fail);
    struct fc_path_elem *path = fc_calloc(fl->depth == 0 ? 1 : fl->depth, sizeof(*path));
    if (path == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
        goto fail;
    }
    e.path = path;
    e.path_len = fl->depth;
    for (size_t i = 0; i < fl->depth; i++) {
        path[i] = fl->stack[i];
        if (!path[i].is_index) {
            path[i].key = fc_strdup(fl->stack[i].key);
            if (path[i].key == NULL) {
                e.path_len = i;
                e.key = (const char *)fc_buf_detach(&key, NULL);
                rc = fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
                goto fail_entry;
            }
        }
    }
    e.key = (const char *)fc_buf_detach(&key, NULL);
    if (fc_source_find(src, e.key) >= 0) {
        rc = fc_error_set(FC_ECORRUPT, "%s: duplicated flattened key '%s'", src->path, e.key);
        goto fail_entry;
    }
    if (v->kind == FC_PV_TENSOR) {
        e.kind = FC_ENTRY_TENSOR;
        e.t = v->u.tensor.desc;
        e.storage = fc_torchsave_storage_index(fl->ts, &v->u.tensor);
    } else {
        e.kind = FC_ENTRY_VALUE;
        e.value = v;
    }
    return fc_source_add_entry(src, &e);

fail_entry:
    fc_free((void *)(uintptr_t)e.key);
    for (size_t j = 0; j < e.path_len; j++)
        fc_free((void *)(uintptr_t)e.path[j].key);
    fc_free((void *)(uintptr_t)e.path);
    return rc;
fail:
    fc_buf_release(&key);
    return rc;
}

static int fc_flatten_value(struct fc_flatten *fl, const struct fc_pv *v)
{
    if (fl->depth >= FC_SOURCE_MAX_DEPTH)
        return fc_error_set(FC_EFORMAT, "%s: containers nested deeper than %d levels",
                            fl->src->path, FC_SOURCE_MAX_DEPTH);
    if (v->kind == FC_PV_DICT) {
        for (size_t i = 0; i < v->u.dict.n; i++) {
            struct fc_buf k = FC_BUF_INIT(FC_SOURCE_KEY_CAP);
            int rc = fc_key_string(&k, v->u.dict.keys[i]);
            if (rc == FC_OK)
                rc = fc_buf_putc(&k, '\0');
            if (rc < 0) {
                fc_buf_release(&k);
                return rc;
            }
            fl->stack[fl->depth] = (struct fc_path_elem){0, 0, (const char *)k.data};
            fl->depth++;
            rc = fc_flatten_value(fl, v->u.dict.vals[i]);
            fl->depth--;
            fc_buf_release(&k);
            FC_TRY(rc);
        }
        return FC_OK;
    }
    if (v->kind == FC_PV_LIST && fc_list_is_container(v, 0)) {
        for (size_t i = 0; i < v->u.seq.n; i++) {
            fl->stack[fl->depth] = (struct fc_path_elem){1, (int64_t)i, NULL};
            fl->depth++;
            const int rc = fc_flatten_value(fl, v->u.seq.items[i]);
            fl->depth--;
            FC_TRY(rc);
        }
        return FC_OK;
    }
    return fc_flatten_leaf(fl, v);
}

/* ---- torch.save ---- */

static int fc_source_open_torchsave(struct fc_source *src, const char *path)
{
    struct fc_source_impl *impl = src->impl;
    size_t file;
    FC_TRY(fc_source_add_file(src, path, &file));
    const struct fc_file *f = &src->files[file];
    FC_TRY(fc_torchsave_open(&impl->ts, f, 0, f->size, path));
    const size_t n = fc_torchsave_storage_count(impl->ts);
    for (size_t i = 0; i < n; i++) {
        const struct fc_ts_storage *s = fc_torchsave_storage_at(impl->ts, i);
        FC_TRY(fc_source_add_storage(src, s->key, file, s->data_offset, s->nbytes));
    }
    struct fc_flatten *fl = fc_calloc(1, sizeof(*fl));
    if (fl == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    fl->src = src;
    fl->ts = impl->ts;
    const int rc = fc_flatten_value(fl, fc_torchsave_root(impl->ts));
    fc_free(fl);
    return rc;
}

/* ---- safetensors ---- */

/* Open one safetensors file into impl->st[impl->nst - 1]; *file_out is its source file. */
static int fc_source_open_st(struct fc_source *src, const char *path, size_t *file_out)
{
    struct fc_source_impl *impl = src->impl;
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
    const struct fc_source_impl *impl = src->impl;
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
    const struct fc_source_impl *impl = src->impl;
    const struct fc_st_chunks *c = &impl->chunked[e - src->entries];
    if (c->untiled)
        return fc_error_set(FC_ECORRUPT, "%s: the chunks of '%s' do not tile it", src->path,
                            e->key);
    return fc_chunks_read_box(src, e, c->refs, c->boxes, c->index, off, size, dst);
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
    struct fc_source_impl *impl = src->impl;
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
    rc = fc_chunks_check_tiling(ndim, e->t.shape, c->boxes, c->n, src->path, e->key);
    if (rc == FC_ECORRUPT && (flags & FC_SOURCE_UNTILED_OK)) {
        /* The caller (inspect) reports the tiling itself; reads of this tensor fail. */
        fc_error_clear();
        c->untiled = 1;
        rc = FC_OK;
        goto done;
    }
    if (rc < 0)
        goto done;
    rc = fc_chunk_index_new(&c->index, ndim, c->boxes, c->n);
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
    struct fc_source_impl *impl = src->impl;
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
    src->read_box = fc_st_chunked_read_box;
    src->format = "safetensors-sharded";
    return FC_OK;
}

int fc_source_sharded_meta(const struct fc_source *src, struct fc_dcp_meta **out)
{
    const struct fc_source_impl *impl = src->impl;
    struct fc_dcp_meta *m = NULL;
    int rc;
    *out = NULL;
    if (src->read_box != fc_st_chunked_read_box)
        return fc_error_set(FC_EINVAL, "%s: not a sharded safetensors checkpoint", src->path);
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

static int fc_ends_with(const char *s, const char *suffix)
{
    const size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
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

static int fc_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Every *.safetensors file of a directory (names sorted): one key space of
 * whole tensors, or, when any file carries DCP_SHARDING_INFO, the chunks of
 * a sharded checkpoint (torch's HuggingFaceStorageReader reads it the same way).
 */
static int fc_source_open_st_dir(struct fc_source **out, const char *path, char *const *names,
                                 size_t n, unsigned flags)
{
    FC_TRY(fc_source_new(out, path, "safetensors"));
    struct fc_source_impl *impl = (*out)->impl;
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

/* Pick what a directory holds: an index, safetensors files, or one torch.save file. */
static int fc_source_open_dir(struct fc_source **out, const char *path, unsigned flags)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return fc_error_set(FC_EIO, "%s: cannot open directory: %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    int rc = FC_OK;
    const struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char **nn = fc_reallocarray(names, n + 1, sizeof(*nn));
        if (nn == NULL || (nn[n] = fc_strdup(de->d_name)) == NULL) {
            names = nn != NULL ? nn : names;
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        names = nn;
        n++;
    }
    if (n > 1) /* names is NULL for an empty directory, which qsort does not accept */
        qsort(names, n, sizeof(*names), fc_cmp_str);
    const char *index = NULL;
    size_t nst = 0, nts = 0, ndistcp = 0;
    const char *ts = NULL;
    for (size_t i = 0; i < n; i++) {
        if (fc_ends_with(names[i], ".safetensors.index.json"))
            index = index == NULL ? names[i] : index;
        else if (fc_ends_with(names[i], ".safetensors"))
            nst++;
        else if (fc_ends_with(names[i], ".distcp"))
            ndistcp++;
        else if (fc_ends_with(names[i], ".pt") || fc_ends_with(names[i], ".pth") ||
                 fc_ends_with(names[i], ".bin")) {
            nts++;
            ts = names[i];
        }
    }
    if (ndistcp > 0) {
        /* Rank-local __{r}.metadata files, or an incomplete save (reported there). */
        rc = fc_source_open_dcp(out, path);
    } else if (index != NULL) {
        char *p = fc_path_join(path, index);
        if (p == NULL) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        rc = fc_source_new(out, path, "safetensors-index");
        if (rc == FC_OK)
            rc = fc_source_open_index(*out, p);
        fc_free(p);
    } else if (nst > 0) {
        rc = fc_source_open_st_dir(out, path, names, n, flags);
    } else if (nts == 1) {
        char *p = fc_path_join(path, ts);
        if (p == NULL) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        rc = fc_source_new(out, path, "torch.save");
        if (rc == FC_OK)
            rc = fc_source_open_torchsave(*out, p);
        fc_free(p);
    } else if (nts > 1) {
        rc = fc_error_set(FC_EFORMAT, "%s: directory holds %zu torch.save files; name one", path,
                          nts);
    } else {
        rc = fc_error_set(FC_EFORMAT,
                          "%s: no checkpoint found (no *.safetensors.index.json, *.safetensors, "
                          "*.pt, *.pth or *.bin)",
                          path);
    }
done:
    closedir(d);
    for (size_t i = 0; i < n; i++)
        fc_free(names[i]);
    fc_free(names);
    return rc;
}

int fc_source_open(struct fc_source **out, const char *path)
{
    return fc_source_open_flags(out, path, 0);
}

int fc_source_open_flags(struct fc_source **out, const char *path, unsigned flags)
{
    *out = NULL;
    struct fc_source *src = NULL;
    int rc = fc_path_is_dir(path);
    if (rc == FC_ENOENT)
        return fc_error_set(FC_ENOENT, "%s: no such file or directory", path);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        char *meta = fc_path_join(path, ".metadata");
        if (meta == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        const int is_dcp = access(meta, F_OK) == 0;
        fc_free(meta);
        if (is_dcp)
            return fc_source_open_dcp(out, path);
        rc = fc_source_open_dir(&src, path, flags);
    } else if (fc_ends_with(path, ".json")) {
        FC_TRY(fc_source_new(&src, path, "safetensors-index"));
        rc = fc_source_open_index(src, path);
    } else {
        struct fc_file f = FC_FILE_INIT;
        unsigned char head[512];
        FC_TRY(fc_file_open_read(&f, path));
        const size_t n = f.size < sizeof(head) ? (size_t)f.size : sizeof(head);
        rc = fc_file_pread(&f, head, n, 0);
        const uint64_t size = f.size;
        fc_file_close(&f);
        FC_TRY(rc);
        const enum fc_ts_kind kind = fc_torchsave_detect(head, n, size);
        /* A .safetensors name gets the safetensors parser's precise header errors. */
        if (kind == FC_TS_SAFETENSORS ||
            (fc_ends_with(path, ".safetensors") && kind != FC_TS_ZIP)) {
            FC_TRY(fc_source_new(&src, path, "safetensors"));
            rc = fc_source_add_safetensors(src, path);
        } else if (kind == FC_TS_UNKNOWN && n == 0) {
            return fc_error_set(FC_ECORRUPT, "%s: empty file", path);
        } else if (kind == FC_TS_UNKNOWN) {
            return fc_error_set(FC_EFORMAT,
                                "%s: not a checkpoint fsdpconv knows (torch.save zip, "
                                "safetensors, index.json)",
                                path);
        } else {
            /* fc_torchsave_open explains legacy and preview formats itself. */
            FC_TRY(fc_source_new(&src, path, "torch.save"));
            rc = fc_source_open_torchsave(src, path);
        }
    }
    if (rc < 0) {
        fc_source_free(src);
        return rc;
    }
    *out = src;
    return FC_OK;
}

int fc_source_index_keys(struct fc_source *src)
{
    fc_strmap_release(&src->key_index);
    for (size_t i = 0; i < src->nentries; i++) {
        const int put = fc_strmap_put(&src->key_index, src->entries[i].key, i, NULL);
        FC_TRY(put);
        if (put == 1)
            return fc_error_set(FC_ECORRUPT, "%s: duplicated key '%s'", src->path,
                                src->entries[i].key);
    }
    return FC_OK;
}

long fc_source_find(const struct fc_source *src, const char *key)
{
    size_t i;
    return fc_strmap_get(&src->key_index, key, &i) ? (long)i : -1;
}

/* ---- box reads ---- */

int fc_read_strided_box(const struct fc_file *f, uint64_t base, const struct fc_tensor_desc *t,
                        const int64_t *off, const int64_t *size, void *dst, const char *what)
{
    const size_t esz = fc_dtype_size(t->dtype);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (off[d] < 0 || size[d] < 0 || off[d] > t->shape[d] || size[d] > t->shape[d] - off[d])
            return fc_error_set(FC_EINVAL,
                                "%s: box dim %d [%" PRId64 ", +%" PRId64 ") outside shape %" PRId64,
                                what, d, off[d], size[d], t->shape[d]);
        numel *= size[d];
    }
    if (numel == 0)
        return FC_OK;
    /* Element range (relative to storage start) spanned by the box. */
    int64_t first = t->storage_offset, last = t->storage_offset;
    for (int d = 0; d < t->ndim; d++) {
        first += off[d] * t->stride[d];
        last += (off[d] + (t->stride[d] >= 0 ? size[d] - 1 : 0)) * t->stride[d];
    }
    /* The innermost dims that are contiguous in the source form one run. */
    int inner = t->ndim;
    int64_t run = 1, expect = 1;
    while (inner > 0) {
        const int d = inner - 1;
        if (size[d] != 1 && t->stride[d] != expect)
            break;
        run *= size[d];
        inner--;
        if (size[d] != t->shape[d])
            break;
        expect *= t->shape[d];
    }
    if (inner == 0)
        return fc_file_pread(f, dst, (size_t)run * esz, base + (uint64_t)first * esz);
    const uint64_t span = (uint64_t)(last - first + 1) * esz;
    unsigned char *tmp = NULL;
    if (span <= FC_SOURCE_SPAN_CAP) {
        tmp = fc_malloc((size_t)span);
        if (tmp == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
        const int rc = fc_file_pread(f, tmp, (size_t)span, base + (uint64_t)first * esz);
        if (rc < 0) {
            fc_free(tmp);
            return rc;
        }
    }
    /* Odometer over the outer dims [0, inner); each step copies one run. */
    int64_t idx[FC_MAX_DIMS] = {0};
    unsigned char *out = dst;
    int rc = FC_OK;
    for (;;) {
        int64_t elem = 0;
        for (int d = 0; d < inner; d++)
            elem += (off[d] + idx[d]) * t->stride[d];
        for (int d = inner; d < t->ndim; d++)
            elem += off[d] * t->stride[d];
        elem += t->storage_offset;
        if (tmp != NULL) {
            memcpy(out, tmp + (size_t)(elem - first) * esz, (size_t)run * esz);
        } else {
            rc = fc_file_pread(f, out, (size_t)run * esz, base + (uint64_t)elem * esz);
            if (rc < 0)
                break;
        }
        out += (size_t)run * esz;
        int d = inner - 1;
        while (d >= 0 && ++idx[d] == size[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
    fc_free(tmp);
    return rc;
}

int fc_source_read_box(const struct fc_source *src, const struct fc_entry *e, const int64_t *off,
                       const int64_t *size, void *dst)
{
    if (src->read_box != NULL)
        return src->read_box(src, e, off, size, dst);
    const struct fc_storage *st = &src->storages[e->storage];
    char what[512];
    snprintf(what, sizeof(what), "%s: '%s'", src->path, e->key);
    return fc_read_strided_box(&src->files[st->file], st->offset, &e->t, off, size, dst, what);
}

int fc_source_value_storage(const struct fc_source *src, const struct fc_entry *e,
                            const struct fc_pv_tensor *t, struct fc_storage *out)
{
    if (src->value_storage != NULL)
        return src->value_storage(src, e, t, out);
    /* One archive (torch.save): its storage table holds the values' storages too. */
    for (size_t i = 0; i < src->nstorages; i++) {
        if (strcmp(src->storages[i].name, t->storage_key) == 0) {
            *out = src->storages[i];
            return FC_OK;
        }
    }
    return fc_error_set(FC_ECORRUPT, "%s: '%s': no storage '%s' for a tensor inside the value",
                        src->path, e->key, t->storage_key);
}

int fc_source_value_blob(const struct fc_source *src, const struct fc_entry *e, struct fc_buf *out)
{
    if (src->value_blob != NULL)
        return src->value_blob(src, e, out);
    return fc_torchsave_value_blob(out, e->value);
}

int fc_opaque_describe(struct fc_buf *b, const struct fc_opaque *op)
{
    if (op->unreadable != NULL)
        FC_TRY(fc_buf_printf(b, "opaque (pickle not readable: %s)", op->unreadable));
    else
        FC_TRY(
            fc_buf_printf(b, "opaque %s (torch.load needs weights_only=False; globals", op->type));
    for (size_t i = 0; op->unreadable == NULL && i < op->nglobals; i++)
        FC_TRY(fc_buf_printf(b, "%s %s.%s", i > 0 ? "," : "", op->globals[i]->u.global.module,
                             op->globals[i]->u.global.name));
    if (op->unreadable == NULL)
        FC_TRY(fc_buf_putc(b, ')'));
    return fc_buf_putc(b, '\0');
}
