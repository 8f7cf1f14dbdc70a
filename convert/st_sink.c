/*
 * st_sink.c - the safetensors sink (see st_sink.h): the plan re-laid as one
 * safetensors file per rank, each file's header, and the sink operations the
 * executor drives (a header before each file's items, items as bare bytes).
 * The DCP sink (dcp_sink.c) is the other implementation of the interface.
 */
#include "st_sink.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_error.h"
#include "fc_safetensors.h"

int fc_st_sink_check_dtype(const char *key, fc_dtype dtype)
{
    const struct fc_dtype_info *info = fc_dtype_info(dtype);
    /* F8_E8M0 has a safetensors spelling but safetensors.torch (0.8) has no torch dtype for it. */
    if (info != NULL && info->safetensors_name != NULL && dtype != FC_DTYPE_FLOAT8_E8M0FNU)
        return FC_OK;
    return fc_error_set(FC_EFORMAT,
                        "tensor '%s': %s cannot be stored in a safetensors checkpoint that "
                        "torch's HuggingFaceStorageReader loads; use --format dcp or cast it "
                        "with --dtype",
                        key, fc_dtype_name(dtype));
}

int fc_st_sink_item_size(void *ctx, fc_dtype dtype, const int64_t *sizes, int ndim,
                         uint64_t *nbytes_out)
{
    uint64_t n = fc_dtype_size(dtype);
    (void)ctx;
    for (int d = 0; d < ndim; d++) {
        if (fc_mul_u64(n, (uint64_t)sizes[d], &n) < 0)
            return fc_error_set(FC_EINVAL, "chunk of %s exceeds 2^64 bytes", fc_dtype_name(dtype));
    }
    *nbytes_out = n;
    return FC_OK;
}

/* Readers (safetensors, and so torch's) refuse larger headers. */
#define FC_ST_SINK_HEADER_MAX 100000000u

/* fc_plan_file_head_fn: torch's file name, and the header of the file's chunks in order. */
static int fc_st_sink_head(void *ctx, const struct fc_plan *plan, size_t file, char *name,
                           size_t namesize, uint64_t *head_bytes)
{
    struct fc_st_sink *sink = ctx;
    const struct fc_plan_file *f = &plan->files[file];
    struct fc_st_tensor *t = fc_calloc(f->nitems + 1, sizeof(*t));
    int rc = FC_OK;
    if (t == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    const int n =
        snprintf(name, namesize, "shard-%05d-model-00001-of-00001.safetensors", f->rank + 1);
    if (n < 0 || (size_t)n >= namesize) {
        rc = fc_error_set(FC_EINVAL, "rank %d: file name does not fit", f->rank);
        goto done;
    }
    for (size_t i = 0; i < f->nitems; i++) {
        const struct fc_plan_item *it = &plan->items[f->first_item + i];
        const struct fc_plan_tensor *pt = &plan->tensors[it->index];
        const struct fc_plan_chunk *ch = &plan->chunks[it->chunk];
        t[i].name = pt->key;
        t[i].dtype = pt->dtype;
        t[i].ndim = pt->ndim;
        t[i].nbytes = it->length;
        memcpy(t[i].shape, ch->box.sizes, (size_t)pt->ndim * sizeof(int64_t));
        memcpy(t[i].saved_offsets, ch->box.offsets, (size_t)pt->ndim * sizeof(int64_t));
    }
    struct fc_buf *h = &sink->heads[file];
    fc_buf_init(h, (size_t)2 * FC_ST_SINK_HEADER_MAX);
    FC_TRY_GOTO(fc_safetensors_write_sharded_header(h, t, f->nitems, FC_ST_SINK_ALIGN), rc, done);
    if (h->len - 8 > FC_ST_SINK_HEADER_MAX) {
        rc = fc_error_set(FC_EINVAL,
                          "%s: a %zu-byte header exceeds safetensors' limit of %u bytes (%zu "
                          "chunks); use --format dcp",
                          name, h->len - 8, FC_ST_SINK_HEADER_MAX, f->nitems);
        goto done;
    }
    *head_bytes = h->len;
done:
    fc_free(t);
    return rc;
}

int fc_st_sink_layout(struct fc_st_sink *sink, struct fc_plan *plan)
{
    /* Safetensors keys a file's tensors by name: a rank may store one chunk per tensor. */
    size_t *last = fc_calloc(plan->nfiles + 1, sizeof(*last));
    int rc = FC_OK;
    if (last == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t r = 0; r < plan->nfiles; r++)
        last[r] = SIZE_MAX;
    for (size_t i = 0; i < plan->ntensors; i++) {
        const struct fc_plan_tensor *t = &plan->tensors[i];
        FC_TRY_GOTO(fc_st_sink_check_dtype(t->key, t->dtype), rc, done);
        for (size_t c = 0; c < t->nchunks; c++) {
            const int r = plan->items[plan->chunks[t->first_chunk + c].item].rank;
            if (last[r] == i) {
                rc = fc_error_set(FC_EINVAL,
                                  "tensor '%s': rank %d would store two of its chunks, which "
                                  "one safetensors file cannot hold; use --format dcp",
                                  t->key, r);
                goto done;
            }
            last[r] = i;
        }
    }
    sink->heads = fc_calloc(plan->nfiles + 1, sizeof(*sink->heads));
    if (sink->heads == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    sink->nfiles = plan->nfiles;
    rc = fc_plan_relayout(plan, fc_st_sink_head, sink);
done:
    fc_free(last);
    return rc;
}

void fc_st_sink_release(struct fc_st_sink *sink)
{
    for (size_t i = 0; sink->heads != NULL && i < sink->nfiles; i++)
        fc_buf_release(&sink->heads[i]);
    fc_free(sink->heads);
    memset(sink, 0, sizeof(*sink));
}

static const struct fc_buf *fc_st_sink_file_head(const void *ctx, size_t file)
{
    const struct fc_st_sink *sink = ctx;
    return &sink->heads[file];
}

int fc_sink_bare_item(const void *ctx, const struct fc_plan *plan, const struct fc_plan_item *it,
                      struct fc_buf *hdr, uint64_t *item_len)
{
    (void)ctx;
    (void)plan;
    (void)hdr;
    *item_len = it->length;
    return FC_OK;
}

/* No value_bytes: fc_st_sink_layout refuses plans with values. */
static const struct fc_sink_ops fc_st_sink_ops = {
    .file_head = fc_st_sink_file_head,
    .tensor_head = fc_sink_bare_item,
};

struct fc_sink fc_st_sink_sink(const struct fc_st_sink *sink)
{
    return (struct fc_sink){&fc_st_sink_ops, sink};
}
