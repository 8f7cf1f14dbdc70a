/*
 * fc_dcp_write.c - a DCP .metadata model written as the pickle torch writes
 * (dcp-format.md 6).
 */
#include "fc_dcp.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_chunks.h"
#include "fc_dcp_internal.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_pickle.h"
#include "fc_sort.h"
#include "fc_strmap.h"

/* ------------------------------------------------------------------------ */
/* writer                                                                   */

static int w_str(struct fc_buf *b, const char *s)
{
    return fc_pw_str(b, s, strlen(s));
}

static int w_opt_str(struct fc_buf *b, const char *s)
{
    return s == NULL ? fc_pw_none(b) : w_str(b, s);
}

/* cls.__new__(cls): GLOBAL module name, EMPTY_TUPLE, NEWOBJ. */
static int w_new(struct fc_buf *b, const char *module, const char *name)
{
    FC_TRY(fc_pw_global(b, module, name));
    FC_TRY(fc_pw_empty_tuple(b));
    return fc_pw_newobj(b);
}

/* torch.Size((v...)) */
static int w_size(struct fc_buf *b, const int64_t *v, int n)
{
    FC_TRY(fc_pw_global(b, "torch", "Size"));
    FC_TRY(fc_pw_int_tuple(b, v, n));
    FC_TRY(fc_pw_tuple_n(b, 1));
    return fc_pw_reduce(b);
}

/*
 * Items of a dict or list, batched like Python's pickler: MARK before the
 * first item, SETITEMS/APPENDS + MARK every BATCH items, and the closing
 * opcode in batch_end().  Nothing at all for an empty container.
 */
static int batch_item(struct fc_buf *b, size_t *count, int is_dict)
{
    if (*count > 0 && *count % BATCH == 0)
        FC_TRY(is_dict ? fc_pw_setitems(b) : fc_pw_appends(b));
    if (*count % BATCH == 0)
        FC_TRY(fc_pw_mark(b));
    (*count)++;
    return FC_OK;
}

static int batch_end(struct fc_buf *b, size_t count, int is_dict)
{
    if (count == 0)
        return FC_OK;
    return is_dict ? fc_pw_setitems(b) : fc_pw_appends(b);
}

static int w_properties(struct fc_buf *b, const struct fc_dcp_entry *e)
{
    const struct fc_dtype_info *info = fc_dtype_info(e->dtype);
    if (info == NULL)
        return fc_error_set(FC_EINVAL, "dcp metadata: tensor '%s': invalid dtype", e->fqn);
    FC_TRY(w_new(b, MOD_MD, "TensorProperties"));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_global(b, "torch", info->torch_name));
    FC_TRY(fc_pw_global(b, "torch.serialization", "_get_layout"));
    FC_TRY(w_str(b, "torch.strided"));
    FC_TRY(fc_pw_tuple_n(b, 1));
    FC_TRY(fc_pw_reduce(b));
    FC_TRY(fc_pw_bool(b, e->requires_grad));
    FC_TRY(fc_pw_global(b, MOD_MD, "_MEM_FORMAT_ENCODING"));
    FC_TRY(fc_pw_int(b, (int64_t)e->mem_format));
    FC_TRY(fc_pw_tuple_n(b, 1));
    FC_TRY(fc_pw_reduce(b));
    FC_TRY(fc_pw_bool(b, e->pin_memory));
    FC_TRY(fc_pw_tuple(b));
    return fc_pw_build(b);
}

static int w_tensor_md(struct fc_buf *b, const struct fc_dcp_entry *e)
{
    size_t n = 0;
    FC_TRY(w_new(b, MOD_MD, "TensorStorageMetadata"));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(w_str(b, "properties"));
    FC_TRY(w_properties(b, e));
    FC_TRY(w_str(b, "size"));
    FC_TRY(w_size(b, e->size, e->ndim));
    FC_TRY(w_str(b, "chunks"));
    FC_TRY(fc_pw_empty_list(b));
    for (size_t c = 0; c < e->nchunks; c++) {
        FC_TRY(batch_item(b, &n, 0));
        FC_TRY(w_new(b, MOD_MD, "ChunkStorageMetadata"));
        FC_TRY(fc_pw_empty_dict(b));
        FC_TRY(fc_pw_mark(b));
        FC_TRY(w_str(b, "offsets"));
        FC_TRY(w_size(b, e->chunks[c].offsets, e->ndim));
        FC_TRY(w_str(b, "sizes"));
        FC_TRY(w_size(b, e->chunks[c].sizes, e->ndim));
        FC_TRY(fc_pw_setitems(b));
        FC_TRY(fc_pw_build(b));
    }
    FC_TRY(batch_end(b, n, 0));
    FC_TRY(fc_pw_setitems(b));
    return fc_pw_build(b);
}

static int w_path(struct fc_buf *b, const struct fc_dcp_entry *e)
{
    if (e->path_len > 3)
        FC_TRY(fc_pw_mark(b));
    for (size_t i = 0; i < e->path_len; i++) {
        if (e->path[i].is_index)
            FC_TRY(fc_pw_int(b, e->path[i].index));
        else
            FC_TRY(w_str(b, e->path[i].key));
    }
    return e->path_len > 3 ? fc_pw_tuple(b) : fc_pw_tuple_n(b, (int)e->path_len);
}

static int w_storage_info(struct fc_buf *b, const struct fc_dcp_storage *st, const char *fqn)
{
    if (st->relative_path == NULL)
        return fc_error_set(FC_EINVAL, "dcp metadata: '%s': an item has no storage", fqn);
    if (st->offset > INT64_MAX || st->length > INT64_MAX)
        return fc_error_set(FC_EINVAL, "dcp metadata: '%s': storage offset/length beyond int64",
                            fqn);
    FC_TRY(w_new(b, MOD_FS, "_StorageInfo"));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(w_str(b, "relative_path"));
    FC_TRY(w_str(b, st->relative_path));
    FC_TRY(w_str(b, "offset"));
    FC_TRY(fc_pw_int(b, (int64_t)st->offset));
    FC_TRY(w_str(b, "length"));
    FC_TRY(fc_pw_int(b, (int64_t)st->length));
    if (st->ntransforms > 0) {
        size_t n = 0;
        FC_TRY(w_str(b, "transform_descriptors"));
        FC_TRY(fc_pw_empty_list(b));
        for (size_t i = 0; i < st->ntransforms; i++) {
            FC_TRY(batch_item(b, &n, 0));
            FC_TRY(w_str(b, st->transforms[i]));
        }
        FC_TRY(batch_end(b, n, 0));
    }
    FC_TRY(fc_pw_setitems(b));
    return fc_pw_build(b);
}

/* MetadataIndex: {fqn, index, offset} for chunks, {fqn, index: None} for bytes. */
static int w_metadata_index(struct fc_buf *b, const struct fc_dcp_entry *e, size_t chunk)
{
    FC_TRY(w_new(b, MOD_MD, "MetadataIndex"));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(w_str(b, "fqn"));
    FC_TRY(w_str(b, e->fqn));
    FC_TRY(w_str(b, "index"));
    if (e->kind == FC_DCP_TENSOR) {
        FC_TRY(fc_pw_int(b, (int64_t)chunk));
        FC_TRY(w_str(b, "offset"));
        FC_TRY(w_size(b, e->chunks[chunk].offsets, e->ndim));
    } else {
        FC_TRY(fc_pw_none(b));
    }
    FC_TRY(fc_pw_setitems(b));
    return fc_pw_build(b);
}

static int w_storage_meta(struct fc_buf *b, const struct fc_dcp_meta *m)
{
    size_t n = 0;
    if (!m->has_storage_meta)
        return fc_pw_none(b);
    FC_TRY(w_new(b, MOD_MD, "StorageMeta"));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(w_str(b, "checkpoint_id"));
    FC_TRY(w_opt_str(b, m->checkpoint_id));
    FC_TRY(w_str(b, "save_id"));
    FC_TRY(w_opt_str(b, m->save_id));
    FC_TRY(w_str(b, "load_id"));
    FC_TRY(fc_pw_none(b));
    FC_TRY(w_str(b, "modules"));
    FC_TRY(fc_pw_empty_list(b));
    for (size_t i = 0; i < m->nmodules; i++) {
        FC_TRY(batch_item(b, &n, 0));
        FC_TRY(w_str(b, m->modules[i]));
    }
    FC_TRY(batch_end(b, n, 0));
    FC_TRY(fc_pw_setitems(b));
    return fc_pw_build(b);
}

static int fc_dcp_meta_write_plain(struct fc_buf *out, const struct fc_dcp_meta *m);

int fc_dcp_meta_write(struct fc_buf *out, const struct fc_dcp_meta *m)
{
    /* Written memo-free first, then the repeated class names and strings are memoised. */
    struct fc_buf plain = FC_BUF_INIT(out->cap);
    int rc = fc_dcp_meta_write_plain(&plain, m);
    if (rc == FC_OK)
        rc = fc_pw_memoize(plain.data, plain.len, out);
    fc_buf_release(&plain);
    return rc;
}

static int fc_dcp_meta_write_plain(struct fc_buf *out, const struct fc_dcp_meta *m)
{
    size_t n;

    FC_TRY(fc_pw_proto(out));
    FC_TRY(w_new(out, MOD_MD, "Metadata"));
    FC_TRY(fc_pw_empty_dict(out));
    FC_TRY(fc_pw_mark(out));

    FC_TRY(w_str(out, "state_dict_metadata"));
    FC_TRY(fc_pw_empty_dict(out));
    n = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct fc_dcp_entry *e = &m->entries[i];
        FC_TRY(batch_item(out, &n, 1));
        FC_TRY(w_str(out, e->fqn));
        if (e->kind == FC_DCP_TENSOR)
            FC_TRY(w_tensor_md(out, e));
        else
            FC_TRY(w_new(out, MOD_MD, "BytesStorageMetadata"));
    }
    FC_TRY(batch_end(out, n, 1));

    FC_TRY(w_str(out, "planner_data"));
    if (m->has_planner_data) {
        FC_TRY(fc_pw_empty_dict(out));
        n = 0;
        for (size_t i = 0; i < m->nentries; i++) {
            const struct fc_dcp_entry *e = &m->entries[i];
            if (e->path == NULL)
                continue;
            FC_TRY(batch_item(out, &n, 1));
            FC_TRY(w_str(out, e->fqn));
            FC_TRY(w_path(out, e));
        }
        FC_TRY(batch_end(out, n, 1));
    } else {
        FC_TRY(fc_pw_none(out));
    }

    FC_TRY(w_str(out, "storage_data"));
    FC_TRY(fc_pw_empty_dict(out));
    n = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct fc_dcp_entry *e = &m->entries[i];
        if (e->kind == FC_DCP_BYTES) {
            FC_TRY(batch_item(out, &n, 1));
            FC_TRY(w_metadata_index(out, e, 0));
            FC_TRY(w_storage_info(out, &e->storage, e->fqn));
            continue;
        }
        for (size_t c = 0; c < e->nchunks; c++) {
            FC_TRY(batch_item(out, &n, 1));
            FC_TRY(w_metadata_index(out, e, c));
            FC_TRY(w_storage_info(out, &e->chunks[c].storage, e->fqn));
        }
    }
    FC_TRY(batch_end(out, n, 1));

    FC_TRY(w_str(out, "storage_meta"));
    FC_TRY(w_storage_meta(out, m));
    FC_TRY(w_str(out, "version"));
    FC_TRY(w_opt_str(out, m->version));

    FC_TRY(fc_pw_setitems(out));
    FC_TRY(fc_pw_build(out));
    return fc_pw_stop(out);
}
