/*
 * fc_source_dcp.c - the DCP backend: a checkpoint directory as a struct fc_source.
 *
 * Entries come from .metadata in its order.  Each stored chunk is a torch.save
 * blob inside a .distcp file; we parse every blob once at open (central
 * directory + data.pkl, a few hundred bytes each) to learn where its storage
 * starts and how the chunk tensor is strided, then read boxes by
 * intersecting the requested box with the chunks that overlap it.  Bytes
 * items are unpickled into values.  Nothing is read from tensor data until a
 * box is asked for.
 */
#include <dirent.h>
#include <stdint.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "fc_alloc.h"
#include "fc_chunks.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_source.h"
#include "fc_source_backend.h"
#include "fc_torchsave.h"
#include "fc_zip.h"

/* Check the CRC-32 of every record of an item but `skip` (checked as its bytes are read). */
static int fc_dcp_verify_records(const struct fc_source *src, const struct fc_torchsave *ts,
                                 const struct fc_zip_entry *skip)
{
    const struct fc_zip_reader *zr = fc_torchsave_zip(ts);
    for (size_t k = 0; !src->no_verify && k < fc_zip_count(zr); k++) {
        const struct fc_zip_entry *ze = fc_zip_entry_at(zr, k);
        if (ze != skip)
            FC_TRY(fc_zip_verify_crc(zr, ze));
    }
    return FC_OK;
}

/* Where an item's (decompressed) torch.save blob can be read. */
struct fc_dcp_blob_loc {
    size_t file;
    uint64_t base;
    uint64_t len;
};

struct fc_dcp_source_impl {
    struct fc_dcp_meta *meta;
    int meta_borrowed;               /* fc_source_open_dcp_meta(): the caller's */
    struct fc_box **boxes;           /* per entry: its distinct chunk boxes (tensors; from meta) */
    struct fc_chunk_ref **read_refs; /* per entry with replicas: refs of boxes[] (NULL: chunks) */
    size_t **first_of; /* per entry with replicas: the chunk each chunk replicates (or itself) */
    struct fc_chunk_index **index;     /* per entry: the boxes indexed for box reads */
    struct fc_dcp_blob_loc *value_loc; /* per entry: the bytes item's blob (values only) */
    struct fc_opaque *opaque;          /* per entry: opaque values' descriptions */
    struct fc_strmap file_index;       /* file name -> index in src->files (names borrowed) */
    struct fc_torchsave **value_ts;    /* per entry: the parsed blob of a value (weights-only) */
    char **opaque_why;                 /* per entry: the string an opaque description owns */
    long scratch_file; /* index of the temp file holding decompressed items, or -1 */
    uint64_t scratch_size;
    struct fc_torchsave **blobs; /* every parsed item, kept for the values' trees */
    size_t nblobs;
    struct fc_chunk_ref **chunks; /* per entry: its chunks (tensors), NULL for values */
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
    for (size_t i = 0; i < impl->nentries; i++) {
        /* Up to every chunk of the entry: one that failed after its layout was set counts too. */
        for (size_t c = 0; impl->chunks[i] != NULL && c < impl->meta->entries[i].nchunks; c++)
            fc_free((void *)(uintptr_t)impl->chunks[i][c].layout);
        fc_free(impl->chunks[i]);
    }
    fc_free(impl->chunks);
    fc_free(impl->nchunks);
    for (size_t i = 0; impl->boxes != NULL && i < impl->nentries; i++) {
        fc_chunk_index_free(impl->index[i]);
        fc_free(impl->boxes[i]);
        fc_free(impl->read_refs[i]);
        fc_free(impl->first_of[i]);
    }
    fc_free(impl->boxes);
    fc_free(impl->read_refs);
    fc_free(impl->first_of);
    fc_free(impl->index);
    fc_free(impl->value_loc);
    for (size_t i = 0; impl->opaque_why != NULL && i < impl->nentries; i++)
        fc_free(impl->opaque_why[i]);
    fc_free(impl->opaque_why);
    fc_free(impl->value_ts);
    fc_free(impl->opaque);
    fc_strmap_release(&impl->file_index);
    if (!impl->meta_borrowed)
        fc_dcp_meta_free(impl->meta);
    fc_free(impl);
}

/* Index of the open file for relative_path, opening it on first use. */
static int fc_dcp_file(struct fc_source *src, const char *dir, const char *rel, size_t *out)
{
    struct fc_dcp_source_impl *impl = src->impl;
    /* Hashed: a 1000-rank checkpoint names 1000 files from a million items. */
    if (fc_strmap_get(&impl->file_index, rel, out))
        return FC_OK;
    if (strchr(rel, '/') != NULL || strcmp(rel, "..") == 0 || rel[0] == '\0')
        return fc_error_set(FC_ECORRUPT,
                            "%s/.metadata: storage file name '%s' is not a plain "
                            "file name",
                            dir, rel);
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
        rc = fc_error_set(FC_ECORRUPT, "%s: missing: .metadata names it but it is not there", path);
    fc_free(path);
    FC_TRY(rc);
    *out = src->nfiles++;
    const char *name = strrchr(files[*out].path, '/');
    return fc_strmap_put(&impl->file_index, name != NULL ? name + 1 : files[*out].path, *out, NULL);
}

/* "stream.zstd/1", "stream.zstd/1.2": torch accepts any version whose major is 1. */
static int fc_is_zstd_descriptor(const char *d)
{
    static const char prefix[] = "stream.zstd/1";
    const size_t n = sizeof(prefix) - 1;
    return strncmp(d, prefix, n) == 0 && (d[n] == '\0' || d[n] == '.');
}

/*
 * Decompress a zstd-transformed item into the source's scratch file (a temp
 * file unlinked at creation, so nothing is left behind) and return where the
 * plain blob now lives.  Items are decompressed once, at open.
 */
static int fc_dcp_inflate(struct fc_source *src, struct fc_dcp_source_impl *impl, size_t fi,
                          const struct fc_dcp_storage *st, const char *what,
                          struct fc_dcp_blob_loc *loc)
{
    if (impl->scratch_file < 0) {
        const char *tmpdir = getenv("TMPDIR");
        char tmpl[4096];
        snprintf(tmpl, sizeof(tmpl), "%s/fsdpconv-zstd-XXXXXX",
                 tmpdir != NULL && tmpdir[0] != '\0' ? tmpdir : "/tmp");
        const int fd = mkstemp(tmpl);
        if (fd < 0)
            return fc_error_set(FC_EIO, "%s: cannot create a scratch file: %s", tmpl,
                                strerror(errno));
        unlink(tmpl);
        struct fc_file *files = fc_reallocarray(src->files, src->nfiles + 1, sizeof(*files));
        char *name = fc_strdup("(decompressed items)");
        if (files == NULL || name == NULL) {
            close(fd);
            fc_free(name);
            if (files != NULL)
                src->files = files;
            return fc_error_set(FC_ENOMEM, "out of memory");
        }
        src->files = files;
        files[src->nfiles] = (struct fc_file){fd, 0, name, NULL};
        impl->scratch_file = (long)src->nfiles++;
    }
    struct fc_file *scratch = &src->files[impl->scratch_file];
    const struct fc_file *f = &src->files[fi];
    ZSTD_DStream *ds = ZSTD_createDStream();
    const size_t in_cap = ZSTD_DStreamInSize(), out_cap = ZSTD_DStreamOutSize();
    unsigned char *in = fc_malloc(in_cap), *out = fc_malloc(out_cap);
    int rc = FC_OK;
    uint64_t pos = 0, written = 0;
    size_t last = 0;
    if (ds == NULL || in == NULL || out == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    ZSTD_initDStream(ds);
    /*
     * Feed the item in slices; once it is all in, keep calling with no input
     * while the decoder fills whole output buffers (it may still hold data).
     */
    for (;;) {
        ZSTD_inBuffer ib = {in, 0, 0};
        if (pos < st->length) {
            ib.size = st->length - pos < in_cap ? (size_t)(st->length - pos) : in_cap;
            FC_TRY_GOTO(fc_file_pread(f, in, ib.size, st->offset + pos), rc, done);
            pos += ib.size;
        } else if (last == 0) {
            break;
        }
        size_t produced;
        do {
            ZSTD_outBuffer ob = {out, out_cap, 0};
            last = ZSTD_decompressStream(ds, &ob, &ib);
            if (ZSTD_isError(last)) {
                rc = fc_error_set(FC_ECORRUPT, "%s: zstd: %s", what, ZSTD_getErrorName(last));
                goto done;
            }
            FC_TRY_GOTO(fc_pwrite_full(scratch->fd, out, ob.pos, impl->scratch_size + written,
                                       "(scratch file)"),
                        rc, done);
            written += ob.pos;
            produced = ob.pos;
        } while (ib.pos < ib.size || produced == out_cap);
        if (pos >= st->length && produced < out_cap)
            break; /* all input consumed and the decoder has nothing left to give */
    }
    if (last != 0 || st->length == 0) {
        rc = fc_error_set(FC_ECORRUPT, "%s: zstd stream is truncated", what);
        goto done;
    }
    loc->file = (size_t)impl->scratch_file;
    loc->base = impl->scratch_size;
    loc->len = written;
    impl->scratch_size += written;
    scratch->size = impl->scratch_size;
done:
    ZSTD_freeDStream(ds);
    fc_free(in);
    fc_free(out);
    return rc;
}

/* Where the (decompressed) torch.save blob of one stored item is; what[] names it. */
static int fc_dcp_locate_item(struct fc_source *src, struct fc_dcp_source_impl *impl,
                              const char *dir, const char *fqn, const struct fc_dcp_storage *st,
                              struct fc_dcp_blob_loc *loc, char *what, size_t what_size)
{
    size_t fi = 0;
    FC_TRY(fc_dcp_file(src, dir, st->relative_path, &fi));
    const struct fc_file *f = &src->files[fi];
    if (st->offset > f->size || st->length > f->size - st->offset)
        return fc_error_set(FC_ECORRUPT,
                            "%s: item '%s' [%" PRIu64 ", +%" PRIu64
                            ") runs past the end of the file (%" PRIu64 " bytes)",
                            f->path, fqn, st->offset, st->length, f->size);
    snprintf(what, what_size, "%s @ %" PRIu64 " (item '%s')", f->path, st->offset, fqn);
    *loc = (struct fc_dcp_blob_loc){fi, st->offset, st->length};
    for (size_t t = 0; t < st->ntransforms; t++) {
        if (!fc_is_zstd_descriptor(st->transforms[t]))
            return fc_error_set(FC_EFORMAT, "%s: unknown transform '%s'", what, st->transforms[t]);
        if (t > 0)
            return fc_error_set(FC_EFORMAT, "%s: more than one transform", what);
        FC_TRY(fc_dcp_inflate(src, impl, fi, st, what, loc));
    }
    return FC_OK;
}

/* Parse the blob of one stored item; *ts_out stays owned by impl. */
static int fc_dcp_parse_item(struct fc_source *src, struct fc_dcp_source_impl *impl,
                             const char *dir, const char *fqn, const struct fc_dcp_storage *st,
                             struct fc_dcp_blob_loc *loc, struct fc_torchsave **ts_out)
{
    char what[768];
    struct fc_torchsave *ts;
    FC_TRY(fc_dcp_locate_item(src, impl, dir, fqn, st, loc, what, sizeof(what)));
    FC_TRY(fc_torchsave_open(&ts, &src->files[loc->file], loc->base, loc->len, what));
    impl->blobs[impl->nblobs++] = ts;
    *ts_out = ts;
    return FC_OK;
}

/* What the top level of a symbolically read value builds: its class or callable, or its kind. */
static const char *fc_opaque_type(const struct fc_pv *v, char *buf, size_t size)
{
    if (v->kind == FC_PV_CALL || v->kind == FC_PV_OBJECT) {
        const struct fc_pv *c = v->u.call.callable;
        const struct fc_pv *a = v->u.call.args;
        /* copyreg's and numpy's reconstructors name the real class as their first argument. */
        const int reconstructor =
            c->kind == FC_PV_GLOBAL && (strcmp(c->u.global.module, "copyreg") == 0 ||
                                        strcmp(c->u.global.name, "_reconstruct") == 0);
        if (reconstructor && a != NULL && a->kind == FC_PV_TUPLE && a->u.seq.n > 0 &&
            a->u.seq.items[0]->kind == FC_PV_GLOBAL)
            c = a->u.seq.items[0];
        if (c->kind == FC_PV_GLOBAL) {
            snprintf(buf, size, "%s.%s", c->u.global.module, c->u.global.name);
            return buf;
        }
        return "object";
    }
    return fc_pv_kind_name(v->kind);
}

/*
 * A bytes item: its value, unpickled as torch.load(weights_only=True) would.  When that
 * refuses (FC_EFORMAT: a global outside the allowlist, ...), the item is opaque: read its
 * pickle symbolically for inspect (type and globals; nothing runs), and carry its bytes.
 */
static int fc_dcp_open_value(struct fc_source *src, struct fc_dcp_source_impl *impl,
                             const char *dir, size_t i, struct fc_entry *e)
{
    const struct fc_dcp_entry *de = &impl->meta->entries[i];
    struct fc_dcp_blob_loc *loc = &impl->value_loc[i];
    char what[768];
    struct fc_torchsave *ts = NULL;
    FC_TRY(fc_dcp_locate_item(src, impl, dir, de->fqn, &de->storage, loc, what, sizeof(what)));
    e->kind = FC_ENTRY_VALUE;
    int rc = fc_torchsave_open(&ts, &src->files[loc->file], loc->base, loc->len, what);
    if (rc != FC_EFORMAT) {
        FC_TRY(rc);
        impl->blobs[impl->nblobs++] = ts;
        impl->value_ts[i] = ts;
        e->value = fc_torchsave_root(ts);
        return fc_dcp_verify_records(src, ts, NULL);
    }
    struct fc_opaque *op = &impl->opaque[i];
    char tbuf[512];
    e->opaque = op;
    rc = fc_torchsave_open_symbolic(&ts, &src->files[loc->file], loc->base, loc->len, what);
    if (rc == FC_ENOMEM)
        return rc;
    if (rc < 0) {
        /* Not even a symbolic reading: still copied verbatim, shown as unreadable. */
        op->type = "?";
        op->unreadable = impl->opaque_why[i] = fc_strdup(fc_error_last());
        return op->unreadable != NULL ? FC_OK : fc_error_set(FC_ENOMEM, "out of memory");
    }
    impl->blobs[impl->nblobs++] = ts;
    e->value = fc_torchsave_root(ts);
    op->nglobals = fc_torchsave_globals(ts, &op->globals);
    op->type = impl->opaque_why[i] = fc_strdup(fc_opaque_type(e->value, tbuf, sizeof(tbuf)));
    return op->type != NULL ? FC_OK : fc_error_set(FC_ENOMEM, "out of memory");
}

/*
 * Remember where a chunk's storage record is and what its CRC-32 should be,
 * and check the item's other (small) records now.
 */
static int fc_dcp_chunk_record(const struct fc_source *src, const struct fc_torchsave *ts,
                               const struct fc_ts_storage *st, struct fc_chunk_ref *ref,
                               const struct fc_tensor_desc *desc,
                               const struct fc_dcp_storage *where, const char *fqn)
{
    char *name = fc_malloc(strlen(st->key) + 6);
    if (name == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    memcpy(name, "data/", 5);
    memcpy(name + 5, st->key, strlen(st->key) + 1);
    const struct fc_zip_entry *ze = fc_zip_find(fc_torchsave_zip(ts), name);
    fc_free(name);
    if (ze == NULL) /* fc_torchsave_open found the record under this very name */
        return fc_error_set(FC_ERROR, "%s: item '%s': storage record lost", where->relative_path,
                            fqn);
    int64_t numel = 0;
    (void)fc_shape_numel(desc->shape, desc->ndim, &numel);
    ref->has_crc = ze->crc32 != 0; /* 0: saved without CRCs (set_crc32_options(False)) */
    ref->crc = ze->crc32;
    ref->verified = 0;
    const int dense = fc_tensor_is_contiguous(desc) && desc->storage_offset == 0 &&
                      ze->data_offset == ref->base &&
                      (uint64_t)numel * fc_dtype_size(desc->dtype) == ze->size;
    if (!dense) {
        struct fc_chunk_layout *l = fc_malloc(sizeof(*l));
        if (l == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        *l = (struct fc_chunk_layout){*desc, ze->data_offset, ze->size};
        ref->layout = l;
    }
    return fc_dcp_verify_records(src, ts, ze);
}

/* The error of a chunk whose data's CRC-32 is not its zip entry's: it names file and item. */
static int fc_dcp_crc_mismatch(const struct fc_source *src, const struct fc_entry *e,
                               const struct fc_chunk_ref *ref, uint32_t crc)
{
    const struct fc_dcp_source_impl *impl = src->impl;
    const struct fc_dcp_storage *where =
        &impl->meta->entries[e - src->entries].chunks[ref->item].storage;
    return fc_error_set(FC_ECORRUPT,
                        "%s/%s @ %" PRIu64 ": item '%s': the data's CRC-32 is 0x%08" PRIx32
                        ", the item's zip says 0x%08" PRIx32
                        " (damaged; --no-verify reads it anyway)",
                        src->path, where->relative_path, where->offset, e->key, crc, ref->crc);
}

/*
 * Index an entry's chunk boxes, so a box read finds the chunks it overlaps by binary search
 * instead of scanning every chunk (resharding thousands of chunks).  Replicas (the same box
 * saved by several ranks, rank-local metadata) are read from their first copy only; the
 * distinct boxes must tile the tensor exactly, so every box read fills its whole buffer.
 */
static int fc_dcp_index_chunks(struct fc_dcp_source_impl *impl, size_t i,
                               const struct fc_dcp_entry *de, const char *dir)
{
    const size_t n = de->nchunks;
    size_t *first_of = fc_calloc(n + 1, sizeof(*first_of)), nrep = 0;
    int rc = FC_OK;
    impl->boxes[i] = fc_calloc(n + 1, sizeof(**impl->boxes));
    if (first_of == NULL || impl->boxes[i] == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t c = 0; c < n; c++)
        impl->boxes[i][c] = (struct fc_box){de->chunks[c].offsets, de->chunks[c].sizes};
    FC_TRY_GOTO(fc_chunks_replicas(de->ndim, impl->boxes[i], n, first_of, &nrep), rc, done);
    if (nrep > 0) {
        impl->first_of[i] = first_of;
        first_of = NULL;
        /* The distinct boxes and their chunks' refs, in chunk order, for reads. */
        impl->read_refs[i] = fc_calloc(n + 1, sizeof(**impl->read_refs));
        if (impl->read_refs[i] == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto done;
        }
        size_t k = 0;
        for (size_t c = 0; c < n; c++) {
            if (impl->first_of[i][c] == c) {
                impl->boxes[i][k] = impl->boxes[i][c];
                impl->read_refs[i][k++] = impl->chunks[i][c];
            }
        }
    }
    FC_TRY_GOTO(fc_chunks_check_tiling(de->ndim, de->size, impl->boxes[i], n - nrep, dir, de->fqn),
                rc, done);
    rc = fc_chunk_index_new(&impl->index[i], de->ndim, impl->boxes[i], n - nrep);
done:
    fc_free(first_of);
    return rc;
}

/* The per-entry arrays of impl and src->entries, for impl->meta's entries. */
static int fc_dcp_impl_alloc(struct fc_source *src, struct fc_dcp_source_impl *impl)
{
    const struct fc_dcp_meta *m = impl->meta;
    size_t nitems = 0;
    for (size_t i = 0; i < m->nentries; i++)
        nitems += m->entries[i].kind == FC_DCP_TENSOR ? m->entries[i].nchunks : 1;
    impl->blobs = fc_calloc(nitems + 1, sizeof(*impl->blobs));
    impl->chunks = fc_calloc(m->nentries + 1, sizeof(*impl->chunks));
    impl->nchunks = fc_calloc(m->nentries + 1, sizeof(*impl->nchunks));
    impl->value_loc = fc_calloc(m->nentries + 1, sizeof(*impl->value_loc));
    impl->opaque = fc_calloc(m->nentries + 1, sizeof(*impl->opaque));
    impl->value_ts = fc_calloc(m->nentries + 1, sizeof(*impl->value_ts));
    impl->opaque_why = fc_calloc(m->nentries + 1, sizeof(*impl->opaque_why));
    impl->boxes = fc_calloc(m->nentries + 1, sizeof(*impl->boxes));
    impl->read_refs = fc_calloc(m->nentries + 1, sizeof(*impl->read_refs));
    impl->first_of = fc_calloc(m->nentries + 1, sizeof(*impl->first_of));
    impl->index = fc_calloc(m->nentries + 1, sizeof(*impl->index));
    impl->scratch_file = -1;
    src->entries = fc_calloc(m->nentries + 1, sizeof(*src->entries));
    if (impl->blobs == NULL || impl->chunks == NULL || impl->nchunks == NULL ||
        impl->value_loc == NULL || impl->opaque == NULL || impl->value_ts == NULL ||
        impl->opaque_why == NULL || impl->boxes == NULL || impl->read_refs == NULL ||
        impl->first_of == NULL || impl->index == NULL || src->entries == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    impl->nentries = m->nentries;
    return FC_OK;
}

/* Entry e's key and path (src->nentries counts it as soon as it owns memory). */
static int fc_dcp_entry_key(struct fc_source *src, const struct fc_dcp_entry *de,
                            struct fc_entry *e)
{
    e->key = fc_strdup(de->fqn);
    if (e->key == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    src->nentries++;
    /* planner_data gives the nesting; without it the flat key is the path. */
    const size_t plen = de->path != NULL ? de->path_len : 1;
    struct fc_path_elem *p = fc_calloc(plen, sizeof(*p));
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    e->path = p;
    for (size_t k = 0; k < plen; k++) {
        p[k] = de->path != NULL ? de->path[k] : (struct fc_path_elem){0, 0, de->fqn};
        if (!p[k].is_index && (p[k].key = fc_strdup(p[k].key)) == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        e->path_len = k + 1;
    }
    e->storage = SIZE_MAX;
    return FC_OK;
}

/* Chunk c of tensor entry de: its item parsed, checked against .metadata, and located. */
static int fc_dcp_open_chunk(struct fc_source *src, struct fc_dcp_source_impl *impl,
                             const char *dir, size_t i, size_t c)
{
    const struct fc_dcp_entry *de = &impl->meta->entries[i];
    const struct fc_dcp_chunk *dc = &de->chunks[c];
    struct fc_chunk_ref *ref = &impl->chunks[i][c];
    struct fc_torchsave *ts;
    struct fc_dcp_blob_loc loc;
    FC_TRY(fc_dcp_parse_item(src, impl, dir, de->fqn, &dc->storage, &loc, &ts));
    ref->file = (uint32_t)loc.file;
    const struct fc_pv *root = fc_torchsave_root(ts);
    if (root->kind != FC_PV_TENSOR)
        return fc_error_set(FC_ECORRUPT,
                            "%s: item of tensor '%s' (chunk %zu) holds no "
                            "tensor",
                            dir, de->fqn, c);
    const struct fc_pv_tensor *t = &root->u.tensor;
    int same = t->desc.ndim == de->ndim;
    for (int d = 0; same && d < de->ndim; d++)
        same = t->desc.shape[d] == dc->sizes[d];
    if (!same)
        return fc_error_set(FC_ECORRUPT,
                            "%s: chunk %zu of '%s': stored tensor shape does "
                            "not match the chunk sizes in .metadata",
                            dir, c, de->fqn);
    if (t->desc.dtype != de->dtype)
        return fc_error_set(FC_EFORMAT,
                            "%s: chunk %zu of '%s' is stored as %s but "
                            ".metadata says %s",
                            dir, c, de->fqn, fc_dtype_name(t->desc.dtype),
                            fc_dtype_name(de->dtype));
    const struct fc_ts_storage *st = fc_torchsave_storage_at(ts, fc_torchsave_storage_index(ts, t));
    ref->base = st->data_offset;
    ref->item = (uint32_t)c;
    FC_TRY(fc_dcp_chunk_record(src, ts, st, ref, &t->desc, &dc->storage, de->fqn));
    impl->nchunks[i]++;
    /* A chunk needs only where its bytes are: drop the parsed blob, keeping memory
     * proportional to tensors, not to the items of every rank. */
    fc_torchsave_free(impl->blobs[--impl->nblobs]);
    impl->blobs[impl->nblobs] = NULL;
    return FC_OK;
}

/* Tensor entry i: its chunks located and indexed for box reads. */
static int fc_dcp_open_tensor(struct fc_source *src, struct fc_dcp_source_impl *impl,
                              const char *dir, size_t i, struct fc_entry *e)
{
    const struct fc_dcp_entry *de = &impl->meta->entries[i];
    e->kind = FC_ENTRY_TENSOR;
    e->t.dtype = de->dtype;
    e->t.ndim = de->ndim;
    memcpy(e->t.shape, de->size, sizeof(e->t.shape));
    fc_tensor_set_contiguous(&e->t);
    impl->chunks[i] = fc_calloc(de->nchunks + 1, sizeof(**impl->chunks));
    if (impl->chunks[i] == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t c = 0; c < de->nchunks; c++)
        FC_TRY(fc_dcp_open_chunk(src, impl, dir, i, c));
    return fc_dcp_index_chunks(impl, i, de, dir);
}

int fc_source_open_dcp(struct fc_source **out, const char *dir, unsigned flags)
{
    return fc_source_open_dcp_meta(out, dir, NULL, flags);
}

int fc_source_open_dcp_meta(struct fc_source **out, const char *dir, struct fc_dcp_meta *meta,
                            unsigned flags)
{
    struct fc_source *src = fc_calloc(1, sizeof(*src));
    struct fc_dcp_source_impl *impl = fc_calloc(1, sizeof(*impl));
    char *mpath = fc_strdup(dir);
    struct fc_crc_fold *fold = fc_crc_fold_new();
    int rc = FC_OK;
    *out = NULL;
    if (src == NULL || impl == NULL || mpath == NULL || fold == NULL) {
        fc_free(src);
        fc_free(impl);
        fc_free(mpath);
        fc_crc_fold_free(fold);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    src->impl = impl;
    src->fold = fold;
    src->backend = &fc_source_dcp_backend;
    src->format = fc_source_dcp_backend.name;
    src->no_verify = (flags & FC_SOURCE_NO_VERIFY) != 0;
    src->path = fc_strdup(dir);
    fc_free(mpath);
    impl->meta = meta;
    impl->meta_borrowed = meta != NULL;
    rc = meta != NULL ? FC_OK : fc_dcp_meta_load_dir(&impl->meta, dir);
    if (rc < 0 || src->path == NULL) {
        if (rc == FC_OK)
            rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto fail;
    }
    const struct fc_dcp_meta *m = impl->meta;
    FC_TRY_GOTO(fc_dcp_impl_alloc(src, impl), rc, fail);
    for (size_t i = 0; i < m->nentries; i++) {
        const struct fc_dcp_entry *de = &m->entries[i];
        struct fc_entry *e = &src->entries[i];
        FC_TRY_GOTO(fc_dcp_entry_key(src, de, e), rc, fail);
        if (de->kind == FC_DCP_BYTES) {
            FC_TRY_GOTO(fc_dcp_open_value(src, impl, dir, i, e), rc, fail);
            continue;
        }
        FC_TRY_GOTO(fc_dcp_open_tensor(src, impl, dir, i, e), rc, fail);
    }
    FC_TRY_GOTO(fc_source_index_keys(src), rc, fail);
    *out = src;
    return FC_OK;
fail:
    fc_source_free(src);
    return rc;
}

static int fc_dcp_read_box(const struct fc_source *src, const struct fc_entry *e,
                           const int64_t *off, const int64_t *size, void *dst)
{
    const struct fc_dcp_source_impl *impl = src->impl;
    const size_t ei = (size_t)(e - src->entries);
    struct fc_chunk_ref *refs =
        impl->read_refs[ei] != NULL ? impl->read_refs[ei] : impl->chunks[ei];
    return fc_chunks_read_box(src, e, refs, impl->boxes[ei], impl->index[ei], fc_dcp_crc_mismatch,
                              off, size, dst);
}

static int fc_dcp_value_blob(const struct fc_source *src, const struct fc_entry *e,
                             struct fc_buf *out)
{
    const struct fc_dcp_source_impl *impl = src->impl;
    const struct fc_dcp_blob_loc *loc = &impl->value_loc[e - src->entries];
    FC_TRY(fc_buf_reserve(out, (size_t)loc->len));
    FC_TRY(
        fc_file_pread(&src->files[loc->file], out->data + out->len, (size_t)loc->len, loc->base));
    out->len += (size_t)loc->len;
    return FC_OK;
}

/* Append every chunk/bytes entry of `part` (a rank-local metadata) to `m`. */
static int fc_dcp_merge(struct fc_dcp_meta *m, const struct fc_dcp_meta *part, const char *what)
{
    for (size_t i = 0; i < part->nentries; i++) {
        const struct fc_dcp_entry *pe = &part->entries[i];
        long ei = fc_dcp_meta_find(m, pe->fqn);
        size_t idx;
        if (ei < 0) {
            if (pe->kind == FC_DCP_BYTES)
                FC_TRY(fc_dcp_meta_add_bytes(m, pe->fqn, &idx));
            else
                FC_TRY(fc_dcp_meta_add_tensor(m, pe->fqn, pe->dtype, pe->ndim, pe->size, &idx));
            if (pe->path != NULL)
                FC_TRY(fc_dcp_meta_set_path(m, idx, pe->path, pe->path_len));
            if (pe->kind == FC_DCP_BYTES) {
                FC_TRY(fc_dcp_storage_set(m, &m->entries[idx].storage, pe->storage.relative_path,
                                          pe->storage.offset, pe->storage.length));
                for (size_t t = 0; t < pe->storage.ntransforms; t++)
                    FC_TRY(fc_dcp_storage_add_transform(m, &m->entries[idx].storage,
                                                        pe->storage.transforms[t]));
                continue;
            }
        } else {
            idx = (size_t)ei;
            const struct fc_dcp_entry *me = &m->entries[idx];
            if (me->kind != pe->kind ||
                (pe->kind == FC_DCP_TENSOR &&
                 (me->dtype != pe->dtype || me->ndim != pe->ndim ||
                  memcmp(me->size, pe->size, sizeof(int64_t) * (size_t)pe->ndim) != 0)))
                return fc_error_set(FC_ECORRUPT, "%s: '%s' disagrees with another rank's metadata",
                                    what, pe->fqn);
            if (pe->kind == FC_DCP_BYTES)
                continue; /* replicated value: any rank's copy will do */
        }
        for (size_t c = 0; c < pe->nchunks; c++) {
            const struct fc_dcp_chunk *pc = &pe->chunks[c];
            size_t ci;
            /* A replicated item appears in every rank's file: all copies are kept (inspect
             * --verify compares them), reads use the first (fc_dcp_index_chunks). */
            FC_TRY(fc_dcp_meta_add_chunk(m, idx, pc->offsets, pc->sizes, &ci));
            struct fc_dcp_storage *st = &m->entries[idx].chunks[ci].storage;
            FC_TRY(fc_dcp_storage_set(m, st, pc->storage.relative_path, pc->storage.offset,
                                      pc->storage.length));
            for (size_t t = 0; t < pc->storage.ntransforms; t++)
                FC_TRY(fc_dcp_storage_add_transform(m, st, pc->storage.transforms[t]));
        }
    }
    return FC_OK;
}

static int fc_cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int fc_dcp_meta_load_dir(struct fc_dcp_meta **out, const char *dir)
{
    char *mpath = fc_path_join(dir, ".metadata");
    int rc;
    *out = NULL;
    if (mpath == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    rc = fc_dcp_meta_load(out, mpath);
    fc_free(mpath);
    if (rc != FC_ENOENT)
        return rc;
    /* No .metadata: a save without collectives leaves one __{rank}.metadata per rank. */
    DIR *d = opendir(dir);
    if (d == NULL)
        return fc_error_set(FC_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    const struct dirent *de;
    rc = FC_OK;
    while ((de = readdir(d)) != NULL) {
        const size_t len = strlen(de->d_name);
        if (len < 12 || strncmp(de->d_name, "__", 2) != 0 ||
            strcmp(de->d_name + len - 9, ".metadata") != 0)
            continue;
        char **nn = fc_reallocarray(names, n + 1, sizeof(*nn));
        if (nn == NULL || (nn[n] = fc_strdup(de->d_name)) == NULL) {
            names = nn != NULL ? nn : names;
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            break;
        }
        names = nn;
        n++;
    }
    closedir(d);
    if (rc == FC_OK && n == 0)
        rc = fc_error_set(FC_ECORRUPT,
                          "%s: incomplete checkpoint: no .metadata (the save did not "
                          "finish, or this is not a DCP directory)",
                          dir);
    if (rc == FC_OK) {
        qsort(names, n, sizeof(*names), fc_cmp_cstr);
        rc = fc_dcp_meta_new(out);
    }
    for (size_t i = 0; rc == FC_OK && i < n; i++) {
        struct fc_dcp_meta *part = NULL;
        char *p = fc_path_join(dir, names[i]);
        if (p == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            break;
        }
        rc = fc_dcp_meta_load(&part, p);
        if (rc == FC_OK)
            rc = fc_dcp_merge(*out, part, p);
        fc_dcp_meta_free(part);
        fc_free(p);
    }
    for (size_t i = 0; i < n; i++)
        fc_free(names[i]);
    fc_free(names);
    if (rc < 0) {
        fc_dcp_meta_free(*out);
        *out = NULL;
    }
    return rc;
}

/* Compare chunk c of tensor entry ei with chunk f, the copy reads use, dim-0 slab by slab. */
static int fc_dcp_compare_replica(const struct fc_source *src, size_t ei, size_t c, size_t f)
{
    const struct fc_dcp_source_impl *impl = src->impl;
    const struct fc_chunk_ref *a = &impl->chunks[ei][f], *b = &impl->chunks[ei][c];
    const struct fc_dcp_chunk *ca = &impl->meta->entries[ei].chunks[f];
    const struct fc_dcp_chunk *cb = &impl->meta->entries[ei].chunks[c];
    struct fc_tensor_desc da, db;
    fc_chunk_desc(&src->entries[ei], &(struct fc_box){ca->offsets, ca->sizes}, a, &da);
    fc_chunk_desc(&src->entries[ei], &(struct fc_box){cb->offsets, cb->sizes}, b, &db);
    const struct fc_tensor_desc *d = &da;
    const size_t esz = fc_dtype_size(d->dtype);
    size_t row = esz;
    for (int k = 1; k < d->ndim; k++)
        row *= (size_t)d->shape[k];
    const int64_t rows = d->ndim > 0 ? d->shape[0] : 1;
    const int64_t step = row >= ((size_t)8 << 20) ? 1 : (int64_t)(((size_t)8 << 20) / row);
    unsigned char *x = fc_malloc((size_t)(step < rows ? step : rows) * row + 1);
    unsigned char *y = fc_malloc((size_t)(step < rows ? step : rows) * row + 1);
    const char *key = src->entries[ei].key;
    int rc = FC_OK;
    if (x == NULL || y == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory comparing the replicas of '%s'", key);
        goto done;
    }
    for (int64_t r0 = 0; rc == FC_OK && r0 < rows && row > 0; r0 += step) {
        int64_t off[FC_MAX_DIMS] = {0}, len[FC_MAX_DIMS];
        memcpy(len, d->shape, sizeof(len));
        if (d->ndim > 0) {
            off[0] = r0;
            len[0] = rows - r0 < step ? rows - r0 : step;
        }
        const size_t nb = (size_t)(d->ndim > 0 ? len[0] : 1) * row;
        rc = fc_read_strided_box(&src->files[a->file], a->base, &da, off, len, x, key);
        if (rc == FC_OK)
            rc = fc_read_strided_box(&src->files[b->file], b->base, &db, off, len, y, key);
        if (rc == FC_OK && memcmp(x, y, nb) != 0)
            rc = fc_error_set(FC_ECORRUPT,
                              "%s: replicas of '%s' differ: chunk %zu (%s) and chunk %zu (%s) "
                              "have the same box but other bytes",
                              src->path, key, f, src->files[a->file].path, c,
                              src->files[b->file].path);
    }
done:
    fc_free(x);
    fc_free(y);
    return rc;
}

static int fc_dcp_value_storage(const struct fc_source *src, const struct fc_entry *e,
                                const struct fc_pv_tensor *t, struct fc_storage *out)
{
    const struct fc_dcp_source_impl *impl = src->impl;
    const size_t i = (size_t)(e - src->entries);
    const struct fc_torchsave *ts = impl->value_ts[i];
    const size_t k = ts != NULL ? fc_torchsave_storage_index(ts, t) : SIZE_MAX;
    if (k == SIZE_MAX)
        return fc_error_set(FC_ECORRUPT, "%s: '%s': no storage '%s' for a tensor inside the value",
                            src->path, e->key, t->storage_key);
    const struct fc_ts_storage *st = fc_torchsave_storage_at(ts, k);
    *out = (struct fc_storage){st->key, impl->value_loc[i].file, st->data_offset, st->nbytes, 1};
    return FC_OK;
}

int fc_source_verify_replicas(const struct fc_source *src)
{
    if (src->backend != &fc_source_dcp_backend)
        return FC_OK;
    const struct fc_dcp_source_impl *impl = src->impl;
    for (size_t i = 0; i < impl->nentries; i++) {
        for (size_t c = 0; impl->first_of[i] != NULL && c < impl->nchunks[i]; c++) {
            if (impl->first_of[i][c] != c)
                FC_TRY(fc_dcp_compare_replica(src, i, c, impl->first_of[i][c]));
        }
    }
    return FC_OK;
}

int fc_source_is_compressed(const struct fc_source *src)
{
    if (src->backend != &fc_source_dcp_backend)
        return 0;
    const struct fc_dcp_source_impl *impl = src->impl;
    return impl->scratch_file >= 0;
}

/*
 * A directory holding .metadata, rank-local __{r}.metadata files (a save
 * without collectives), or *.distcp files (then an incomplete save, reported
 * when the metadata is loaded).  inspect asks the same (fc_source_is_dcp_dir).
 */
static int fc_dcp_probe(struct fc_probe *p)
{
    if (!p->is_dir)
        return 0;
    char *meta = fc_path_join(p->path, ".metadata");
    if (meta == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    const int has_meta = access(meta, F_OK) == 0;
    fc_free(meta);
    if (has_meta)
        return 1;
    FC_TRY(fc_probe_names(p));
    for (size_t i = 0; i < p->nnames; i++) {
        const char *n = p->names[i];
        if (fc_ends_with(n, ".distcp") ||
            (strlen(n) > 11 && strncmp(n, "__", 2) == 0 && fc_ends_with(n, ".metadata")))
            return 1;
    }
    return 0;
}

int fc_source_is_dcp_dir(const char *path)
{
    const int dir = fc_path_is_dir(path);
    if (dir != 1)
        return dir == FC_ENOENT ? 0 : dir;
    struct fc_probe p = {.path = path, .is_dir = 1};
    const int rc = fc_dcp_probe(&p);
    fc_probe_release(&p);
    return rc;
}

static int fc_dcp_open(struct fc_source **out, struct fc_probe *p, unsigned flags)
{
    return fc_source_open_dcp(out, p->path, flags);
}

const struct fc_source_backend fc_source_dcp_backend = {
    .name = "dcp",
    .caps = FC_SOURCE_CHUNKS | FC_SOURCE_COMPRESSED | FC_SOURCE_CRCS | FC_SOURCE_VALUES,
    .probe = fc_dcp_probe,
    .open = fc_dcp_open,
    .read_box = fc_dcp_read_box,
    .value_storage = fc_dcp_value_storage,
    .value_blob = fc_dcp_value_blob,
    .free = fc_dcp_source_impl_free,
};
