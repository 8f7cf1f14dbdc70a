/*
 * dcp_sink.c - the DCP writer's item side (see dcp_sink.h): torch.save
 * framing of every item, zstd frames when compressing, value blobs, and the
 * .metadata that names where each item landed.  The executor (exec.c) only
 * moves bytes; everything DCP-specific about them is here.
 */
#include "dcp_sink.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include <zstd.h>

#include "fc_alloc.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_torchsave.h"

int fc_dcp_sink_init(struct fc_dcp_sink *sink, size_t cap, int compress_level)
{
    memset(sink, 0, sizeof(*sink));
    sink->values = fc_calloc(cap + 1, sizeof(*sink->values));
    if (sink->values == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    sink->cap = cap;
    sink->compress_level = compress_level;
    return FC_OK;
}

void fc_dcp_sink_release(struct fc_dcp_sink *sink)
{
    for (size_t i = 0; sink->values != NULL && i < sink->nvalues; i++)
        fc_buf_release(&sink->values[i]);
    fc_free(sink->values);
    memset(sink, 0, sizeof(*sink));
}

int fc_dcp_sink_add_value(struct fc_dcp_sink *sink, const struct fc_xspec *s, uint64_t *size)
{
    if (sink->nvalues >= sink->cap)
        return fc_error_set(FC_ERROR, "internal error: more values than planned");
    struct fc_buf *b = &sink->values[sink->nvalues++];
    fc_buf_init(b, (size_t)1 << 30);
    /* DCP bytes items are carried verbatim; other sources' values are pickled. */
    if (s->value != NULL)
        FC_TRY(fc_torchsave_value_blob(b, s->value));
    else
        FC_TRY(fc_source_value_blob(s->src, &s->src->entries[s->entry], b));
    *size = b->len;
    return FC_OK;
}

/* Where a chunk's tensor bytes sit in its blob: see FC_DCP_ITEM_ALIGN (0: torch's 64). */
static uint32_t fc_dcp_data_align(const struct fc_dcp_sink *sink, fc_dtype dtype,
                                  const int64_t *sizes, int ndim)
{
    uint64_t n = fc_dtype_size(dtype);
    for (int d = 0; d < ndim; d++)
        n *= (uint64_t)sizes[d]; /* fits: the planner checked the shape's bytes */
    return sink->compress_level == 0 && n >= FC_DCP_ALIGN_MIN ? FC_DCP_ITEM_ALIGN : 0;
}

static int fc_dcp_blob(const struct fc_dcp_sink *sink, fc_dtype dtype, const int64_t *sizes,
                       int ndim, struct fc_tsblob *blob)
{
    return fc_tsblob_init(blob, dtype, sizes, ndim, fc_dcp_data_align(sink, dtype, sizes, ndim));
}

int fc_dcp_sink_item_size(void *ctx, fc_dtype dtype, const int64_t *sizes, int ndim,
                          uint64_t *nbytes_out)
{
    struct fc_tsblob b;
    FC_TRY(fc_dcp_blob(ctx, dtype, sizes, ndim, &b));
    *nbytes_out = b.total_size;
    fc_tsblob_release(&b);
    return FC_OK;
}

int fc_dcp_sink_layout(const struct fc_dcp_sink *sink, struct fc_plan *plan)
{
    if (sink->compress_level > 0)
        return FC_OK;
    return fc_plan_align_items(plan, FC_DCP_ITEM_ALIGN, FC_DCP_ALIGN_MIN);
}

static const struct fc_buf *fc_dcp_value_bytes(const void *ctx, size_t value)
{
    const struct fc_dcp_sink *sink = ctx;
    return &sink->values[value];
}

/* The torch.save blob of a tensor item's chunk. */
static int fc_dcp_item_blob(const struct fc_dcp_sink *sink, const struct fc_plan *plan,
                            const struct fc_plan_item *it, struct fc_tsblob *blob)
{
    const struct fc_plan_tensor *pt = &plan->tensors[it->index];
    return fc_dcp_blob(sink, pt->dtype, plan->chunks[it->chunk].box.sizes, pt->ndim, blob);
}

static int fc_dcp_tensor_head(const void *ctx, const struct fc_plan *plan,
                              const struct fc_plan_item *it, struct fc_buf *hdr, uint64_t *item_len)
{
    struct fc_tsblob blob;
    int rc = fc_dcp_item_blob(ctx, plan, it, &blob);
    if (rc == FC_OK)
        rc = fc_tsblob_head(&blob, hdr);
    *item_len = blob.total_size;
    fc_tsblob_release(&blob);
    return rc;
}

static int fc_dcp_tensor_tail(const void *ctx, const struct fc_plan *plan,
                              const struct fc_plan_item *it, uint32_t data_crc, struct fc_buf *out)
{
    struct fc_tsblob blob;
    int rc = fc_dcp_item_blob(ctx, plan, it, &blob);
    if (rc == FC_OK)
        rc = fc_tsblob_tail(&blob, data_crc, out);
    fc_tsblob_release(&blob);
    return rc;
}

/* Compression: one zstd stream per file, one frame per item (as torch writes them). */
struct fc_dcp_zstream {
    ZSTD_CStream *zs;
    unsigned char *zbuf;
    size_t zcap;
    const char *path;
};

static void fc_dcp_free_stream(void *stream)
{
    struct fc_dcp_zstream *z = stream;
    if (z == NULL)
        return;
    ZSTD_freeCStream(z->zs);
    fc_free(z->zbuf);
    fc_free(z);
}

static int fc_dcp_open_stream(const void *ctx, const char *path, void **stream)
{
    const struct fc_dcp_sink *sink = ctx;
    struct fc_dcp_zstream *z = fc_calloc(1, sizeof(*z));
    *stream = z;
    if (z == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    z->zs = ZSTD_createCStream();
    z->zcap = ZSTD_CStreamOutSize();
    z->zbuf = fc_malloc(z->zcap);
    z->path = path;
    if (z->zs == NULL || z->zbuf == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    ZSTD_CCtx_setParameter(z->zs, ZSTD_c_compressionLevel, sink->compress_level);
    return FC_OK;
}

/* Feed n bytes (or, with `end`, close the frame) and write what zstd gives out. */
static int fc_dcp_compress(struct fc_dcp_zstream *z, struct fc_out *out, const void *p, size_t n,
                           ZSTD_EndDirective end)
{
    ZSTD_inBuffer in = {p, n, 0};
    for (;;) {
        ZSTD_outBuffer o = {z->zbuf, z->zcap, 0};
        const size_t r = ZSTD_compressStream2(z->zs, &o, &in, end);
        if (ZSTD_isError(r))
            return fc_error_set(FC_ERROR, "%s: zstd: %s", z->path, ZSTD_getErrorName(r));
        FC_TRY(fc_out_write(out, z->zbuf, o.pos));
        if (end == ZSTD_e_continue ? in.pos == in.size : r == 0)
            return FC_OK;
    }
}

static int fc_dcp_stream_put(void *stream, struct fc_out *out, const void *p, size_t n)
{
    return n == 0 ? FC_OK : fc_dcp_compress(stream, out, p, n, ZSTD_e_continue);
}

static int fc_dcp_end_item(void *stream, struct fc_out *out)
{
    return fc_dcp_compress(stream, out, NULL, 0, ZSTD_e_end);
}

static const struct fc_sink_ops fc_dcp_plain_ops = {
    .value_bytes = fc_dcp_value_bytes,
    .tensor_head = fc_dcp_tensor_head,
    .tensor_tail = fc_dcp_tensor_tail,
};

static const struct fc_sink_ops fc_dcp_zstd_ops = {
    .value_bytes = fc_dcp_value_bytes,
    .tensor_head = fc_dcp_tensor_head,
    .tensor_tail = fc_dcp_tensor_tail,
    .open_stream = fc_dcp_open_stream,
    .stream_put = fc_dcp_stream_put,
    .end_item = fc_dcp_end_item,
    .free_stream = fc_dcp_free_stream,
};

struct fc_sink fc_dcp_sink_sink(const struct fc_dcp_sink *sink)
{
    return (struct fc_sink){sink->compress_level > 0 ? &fc_dcp_zstd_ops : &fc_dcp_plain_ops, sink};
}

/* Where item `item` is stored, in .metadata's terms. */
static int fc_dcp_set_storage(struct fc_dcp_meta *m, struct fc_dcp_storage *st,
                              const struct fc_plan *plan, size_t item,
                              const struct fc_extent *extents)
{
    const struct fc_plan_item *it = &plan->items[item];
    if (extents == NULL)
        return fc_dcp_storage_set(m, st, plan->files[it->rank].name, it->offset, it->length);
    FC_TRY(fc_dcp_storage_set(m, st, plan->files[it->rank].name, extents[item].offset,
                              extents[item].length));
    return fc_dcp_storage_add_transform(m, st, FC_DCP_TRANSFORM_ZSTD);
}

/*
 * One tensor's entry: its chunks, each where its item is stored; with rank >= 0
 * only the chunk that rank holds, which is all a load at the same mesh reads.
 */
static int fc_dcp_add_tensor(struct fc_dcp_meta *m, const struct fc_plan *plan,
                             const struct fc_plan_tensor *t, const char *key,
                             const struct fc_extent *extents, int rank, size_t *ei)
{
    size_t first = t->first_chunk, n = t->nchunks;
    if (rank >= 0) {
        first = fc_plan_rank_chunk(plan, (size_t)(t - plan->tensors), rank);
        n = 1;
    }
    FC_TRY(fc_dcp_meta_add_tensor(m, key, t->dtype, t->ndim, t->shape, ei));
    for (size_t c = first; c < first + n; c++) {
        const struct fc_plan_chunk *ch = &plan->chunks[c];
        size_t ci;
        FC_TRY(fc_dcp_meta_add_chunk(m, *ei, ch->box.offsets, ch->box.sizes, &ci));
        FC_TRY(fc_dcp_set_storage(m, &m->entries[*ei].chunks[ci].storage, plan, ch->item, extents));
    }
    return FC_OK;
}

/* The metadata model (of rank `rank`, or with every chunk when -1): entries in xr's order. */
static int fc_dcp_build_meta(const struct fc_plan *plan, const struct fc_xform_result *xr,
                             const struct fc_extent *extents, const char *output, int rank,
                             struct fc_dcp_meta *m)
{
    size_t nt = 0, nv = 0; /* the plan holds xr's tensors and values in xr's order */
    for (size_t i = 0; i < xr->n; i++) {
        const struct fc_xspec *s = &xr->specs[i];
        size_t ei;
        if (s->kind == FC_ENTRY_VALUE) {
            assert(nv < plan->nvalues);
            const struct fc_plan_value *v = &plan->values[nv++];
            FC_TRY(fc_dcp_meta_add_bytes(m, s->key, &ei));
            FC_TRY(fc_dcp_set_storage(m, &m->entries[ei].storage, plan, v->item, extents));
        } else {
            assert(nt < plan->ntensors && plan->tensors[nt].tag == i);
            FC_TRY(fc_dcp_add_tensor(m, plan, &plan->tensors[nt++], s->key, extents, rank, &ei));
        }
        if (s->path_len > 0)
            FC_TRY(fc_dcp_meta_set_path(m, ei, s->path, s->path_len));
    }
    return fc_dcp_meta_set_storage_meta(m, output, NULL);
}

/* Build one metadata file (see fc_dcp_build_meta) and write it atomically as dir/name. */
static int fc_dcp_write_meta_file(const struct fc_plan *plan, const struct fc_xform_result *xr,
                                  const struct fc_extent *extents, const char *dir,
                                  const char *output, int rank, const char *name)
{
    struct fc_buf buf = FC_BUF_INIT((size_t)1 << 31);
    struct fc_dcp_meta *m = NULL;
    char *mpath = NULL;
    int rc;
    FC_TRY(fc_dcp_meta_new(&m));
    FC_TRY_GOTO(fc_dcp_build_meta(plan, xr, extents, output, rank, m), rc, done);
    FC_TRY_GOTO(fc_dcp_meta_write(&buf, m), rc, done);
    mpath = fc_path_join(dir, name);
    if (mpath == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    rc = fc_write_file_atomic(mpath, buf.data, buf.len);
done:
    fc_free(mpath);
    fc_dcp_meta_free(m);
    fc_buf_release(&buf);
    return rc;
}

int fc_dcp_sink_write_metadata(const struct fc_dcp_sink *sink, const struct fc_plan *plan,
                               const struct fc_xform_result *xr, const struct fc_extent *extents,
                               const char *dir, const char *output, int rank_local)
{
    /* Only compressed items land elsewhere than planned. */
    assert((extents != NULL) == (sink->compress_level > 0));
    if (!rank_local)
        return fc_dcp_write_meta_file(plan, xr, extents, dir, output, -1, ".metadata");
    /* No .metadata: torch's loader falls back to __{rank}.metadata only when it is absent. */
    for (size_t r = 0; r < plan->nfiles; r++) {
        char name[FC_PLAN_FILE_NAME_MAX];
        const int n = snprintf(name, sizeof(name), "__%zu.metadata", r);
        if (n < 0 || (size_t)n >= sizeof(name))
            return fc_error_set(FC_ERROR, "internal error: rank %zu's metadata name", r);
        FC_TRY(fc_dcp_write_meta_file(plan, xr, extents, dir, output, (int)r, name));
    }
    return FC_OK;
}
