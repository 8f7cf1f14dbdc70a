/*
 * fc_dcp.c - DCP .metadata model, pickle writer and reader, coverage check (the
 * geometry through fc_chunks_check_tiling()).
 *
 * The reader walks the symbolic tree that fc_pickle_load(FC_PICKLE_SYMBOLIC)
 * builds and only ever looks at fixed, known positions of it; it never
 * recurses into values generically, so shared or cyclic nodes (the memo can
 * make both) cannot make it loop.
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
#include "fc_error.h"
#include "fc_io.h"
#include "fc_pickle.h"
#include "fc_sort.h"
#include "fc_strmap.h"

#define MOD_MD     "torch.distributed.checkpoint.metadata"
#define MOD_FS     "torch.distributed.checkpoint.filesystem"
#define MOD_LEGACY "torch.distributed._shard.sharded_tensor.metadata"

/* Python's pickler batches SETITEMS/APPENDS by 1000; do the same. */
#define BATCH 1000

/* At most this many report lines from fc_dcp_check(). */
#define CHECK_MAX_LINES 100

/* ------------------------------------------------------------------------ */
/* model: memory                                                            */

/* A block of the dims store: chunk offsets and sizes, appended and never moved. */
struct fc_dcp_dims {
    struct fc_dcp_dims *next;
    size_t used, cap;
    int64_t v[];
};

#define DIMS_BLOCK ((size_t)1 << 16) /* int64 values per block (512 KiB) */

static void entry_release(struct fc_dcp_entry *e)
{
    fc_free(e->fqn);
    fc_free(e->path);
    fc_free(e->chunks);
}

void fc_dcp_meta_free(struct fc_dcp_meta *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nentries; i++)
        entry_release(&m->entries[i]);
    fc_free(m->entries);
    fc_free(m->checkpoint_id);
    fc_free(m->save_id);
    for (size_t i = 0; i < m->nmodules; i++)
        fc_free(m->modules[i]);
    fc_free(m->modules);
    fc_free(m->version);
    fc_strmap_release(&m->index);
    fc_strmap_release(&m->interned);
    for (size_t i = 0; i < m->nstrings; i++) {
        fc_free(m->strings[i]);
        fc_free(m->xform_lists[i]);
    }
    fc_free(m->strings);
    fc_free(m->xform_lists);
    while (m->dims != NULL) {
        struct fc_dcp_dims *next = m->dims->next;
        fc_free(m->dims);
        m->dims = next;
    }
    fc_free(m);
}

/* The model's copy of s (one per distinct string): *index_out its index in m->strings. */
static int intern(struct fc_dcp_meta *m, const char *s, size_t *index_out)
{
    if (fc_strmap_get(&m->interned, s, index_out))
        return FC_OK;
    if (m->nstrings == m->strings_alloc) {
        const size_t n = m->strings_alloc == 0 ? 8 : m->strings_alloc * 2;
        char **ps = fc_reallocarray(m->strings, n, sizeof(*ps));
        if (ps != NULL)
            m->strings = ps;
        const char ***pl = ps != NULL ? fc_reallocarray(m->xform_lists, n, sizeof(*pl)) : NULL;
        if (pl == NULL)
            return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
        m->xform_lists = pl;
        m->strings_alloc = n;
    }
    char *copy = fc_strdup(s);
    if (copy == NULL)
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
    m->strings[m->nstrings] = copy;
    m->xform_lists[m->nstrings] = NULL;
    const int rc = fc_strmap_put(&m->interned, copy, m->nstrings, NULL);
    if (rc < 0) {
        fc_free(copy);
        return rc;
    }
    *index_out = m->nstrings++;
    return FC_OK;
}

/* Room for n int64 values in the dims store. */
static int64_t *dims_alloc(struct fc_dcp_meta *m, size_t n)
{
    struct fc_dcp_dims *b = m->dims;
    if (b == NULL || b->cap - b->used < n) {
        const size_t cap = n > DIMS_BLOCK ? n : DIMS_BLOCK;
        b = fc_malloc(sizeof(*b) + cap * sizeof(int64_t));
        if (b == NULL)
            return NULL;
        b->next = m->dims;
        b->used = 0;
        b->cap = cap;
        m->dims = b;
    }
    int64_t *r = b->v + b->used;
    b->used += n;
    return r;
}

int fc_dcp_meta_new(struct fc_dcp_meta **out)
{
    struct fc_dcp_meta *m = fc_calloc(1, sizeof(*m));
    *out = NULL;
    if (m == NULL)
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
    m->version = fc_strdup(FC_DCP_VERSION);
    if (m->version == NULL) {
        fc_free(m);
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
    }
    m->has_planner_data = 1;
    *out = m;
    return FC_OK;
}

long fc_dcp_meta_find(const struct fc_dcp_meta *m, const char *fqn)
{
    size_t e;
    return fc_strmap_get(&m->index, fqn, &e) ? (long)e : -1;
}

static int add_entry(struct fc_dcp_meta *m, const char *fqn, size_t fqn_len, enum fc_dcp_kind kind,
                     size_t *index_out)
{
    if (m->nentries == m->entries_alloc) {
        const size_t n = m->entries_alloc == 0 ? 16 : m->entries_alloc * 2;
        struct fc_dcp_entry *p = fc_reallocarray(m->entries, n, sizeof(*p));
        if (p == NULL)
            return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory for %zu entries", n);
        m->entries = p;
        m->entries_alloc = n;
    }
    char *name = fc_strndup(fqn, fqn_len);
    if (name == NULL)
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
    const int put = fc_strmap_put(&m->index, name, m->nentries, NULL);
    if (put != 0) {
        fc_free(name);
        return put < 0 ? put : fc_error_set(FC_EINVAL, "dcp metadata: duplicate entry '%s'", fqn);
    }
    struct fc_dcp_entry *e = &m->entries[m->nentries];
    memset(e, 0, sizeof(*e));
    e->fqn = name;
    e->kind = kind;
    e->mem_format = FC_DCP_CONTIGUOUS_FORMAT;
    if (index_out != NULL)
        *index_out = m->nentries;
    m->nentries++;
    return FC_OK;
}

static int check_new_fqn(const struct fc_dcp_meta *m, const char *fqn)
{
    if (fqn == NULL)
        return fc_error_set(FC_EINVAL, "dcp metadata: entry without a name");
    if (fc_dcp_meta_find(m, fqn) >= 0)
        return fc_error_set(FC_EINVAL, "dcp metadata: duplicate entry '%s'", fqn);
    return FC_OK;
}

int fc_dcp_meta_add_tensor(struct fc_dcp_meta *m, const char *fqn, fc_dtype dtype, int ndim,
                           const int64_t *size, size_t *index_out)
{
    size_t idx;
    FC_TRY(check_new_fqn(m, fqn));
    if (fc_dtype_info(dtype) == NULL)
        return fc_error_set(FC_EINVAL, "dcp metadata: tensor '%s': invalid dtype %d", fqn,
                            (int)dtype);
    if (ndim < 0 || ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "dcp metadata: tensor '%s': %d dims (at most %d)", fqn, ndim,
                            FC_MAX_DIMS);
    for (int d = 0; d < ndim; d++)
        if (size[d] < 0)
            return fc_error_set(FC_EINVAL,
                                "dcp metadata: tensor '%s': negative size %" PRId64 " in dim %d",
                                fqn, size[d], d);
    FC_TRY(add_entry(m, fqn, strlen(fqn), FC_DCP_TENSOR, &idx));
    struct fc_dcp_entry *e = &m->entries[idx];
    e->dtype = dtype;
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        e->size[d] = size[d];
    if (index_out != NULL)
        *index_out = idx;
    return FC_OK;
}

int fc_dcp_meta_add_bytes(struct fc_dcp_meta *m, const char *fqn, size_t *index_out)
{
    FC_TRY(check_new_fqn(m, fqn));
    return add_entry(m, fqn, strlen(fqn), FC_DCP_BYTES, index_out);
}

/* Room for n chunks in e (the reader knows each tensor's count: no doubling slack). */
static int reserve_chunks(struct fc_dcp_entry *e, size_t n)
{
    if (n <= e->chunks_alloc)
        return FC_OK;
    struct fc_dcp_chunk *p = fc_reallocarray(e->chunks, n, sizeof(*p));
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "dcp metadata: tensor '%s': out of memory for %zu chunks",
                            e->fqn, n);
    e->chunks = p;
    e->chunks_alloc = n;
    return FC_OK;
}

/* fc_dcp_meta_add_chunk() on an entry e of m (or one being read, not yet in m). */
static int entry_add_chunk(struct fc_dcp_meta *m, struct fc_dcp_entry *e, const int64_t *offsets,
                           const int64_t *sizes, size_t *chunk_out)
{
    for (int d = 0; d < e->ndim; d++)
        if (offsets[d] < 0 || sizes[d] < 0)
            return fc_error_set(FC_EINVAL,
                                "dcp metadata: tensor '%s': negative chunk offset "
                                "or size in dim %d",
                                e->fqn, d);
    if (e->nchunks == e->chunks_alloc)
        FC_TRY(reserve_chunks(e, e->chunks_alloc == 0 ? 4 : e->chunks_alloc * 2));
    struct fc_dcp_chunk *c = &e->chunks[e->nchunks];
    memset(c, 0, sizeof(*c));
    if (e->ndim > 0) {
        int64_t *v = dims_alloc(m, (size_t)e->ndim * 2);
        if (v == NULL)
            return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
        memcpy(v, offsets, (size_t)e->ndim * sizeof(int64_t));
        memcpy(v + e->ndim, sizes, (size_t)e->ndim * sizeof(int64_t));
        c->offsets = v;
        c->sizes = v + e->ndim;
    }
    if (chunk_out != NULL)
        *chunk_out = e->nchunks;
    e->nchunks++;
    return FC_OK;
}

int fc_dcp_meta_add_chunk(struct fc_dcp_meta *m, size_t entry, const int64_t *offsets,
                          const int64_t *sizes, size_t *chunk_out)
{
    if (entry >= m->nentries || m->entries[entry].kind != FC_DCP_TENSOR)
        return fc_error_set(FC_EINVAL, "dcp metadata: entry %zu is not a tensor", entry);
    return entry_add_chunk(m, &m->entries[entry], offsets, sizes, chunk_out);
}

/* A relative_path must name a file inside the checkpoint directory. */
static int bad_relative_path(const char *p)
{
    return p[0] == '\0' || strchr(p, '/') != NULL || strcmp(p, ".") == 0 || strcmp(p, "..") == 0;
}

int fc_dcp_storage_set(struct fc_dcp_meta *m, struct fc_dcp_storage *st, const char *relative_path,
                       uint64_t offset, uint64_t length)
{
    size_t k;
    if (relative_path == NULL || bad_relative_path(relative_path))
        return fc_error_set(FC_EINVAL, "dcp metadata: invalid storage file name '%s'",
                            relative_path == NULL ? "(null)" : relative_path);
    if (offset > INT64_MAX || length > INT64_MAX)
        return fc_error_set(FC_EINVAL, "dcp metadata: storage offset/length beyond int64");
    FC_TRY(intern(m, relative_path, &k));
    *st = (struct fc_dcp_storage){m->strings[k], NULL, 0, offset, length};
    return FC_OK;
}

int fc_dcp_storage_add_transform(struct fc_dcp_meta *m, struct fc_dcp_storage *st,
                                 const char *descriptor)
{
    if (descriptor == NULL || descriptor[0] == '\0')
        return fc_error_set(FC_EINVAL, "dcp metadata: empty transform descriptor");
    if (strchr(descriptor, '\n') != NULL)
        return fc_error_set(FC_EINVAL, "dcp metadata: transform descriptor with a newline");
    /* The list is interned under its descriptors joined by newlines (they hold none). */
    struct fc_buf key = FC_BUF_INIT((size_t)1 << 20);
    size_t k;
    int rc = FC_OK;
    for (size_t i = 0; rc == FC_OK && i < st->ntransforms; i++) {
        rc = fc_buf_puts(&key, st->transforms[i]);
        if (rc == FC_OK)
            rc = fc_buf_puts(&key, "\n");
    }
    if (rc == FC_OK)
        rc = fc_buf_puts(&key, descriptor);
    if (rc == FC_OK)
        rc = fc_buf_putc(&key, '\0');
    if (rc == FC_OK)
        rc = intern(m, (const char *)key.data, &k);
    fc_buf_release(&key);
    FC_TRY(rc);
    if (m->xform_lists[k] == NULL) {
        const char **list = fc_calloc(st->ntransforms + 1, sizeof(*list));
        size_t d;
        if (list == NULL)
            return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
        for (size_t i = 0; i < st->ntransforms; i++)
            list[i] = st->transforms[i];
        rc = intern(m, descriptor, &d);
        if (rc < 0) {
            fc_free(list);
            return rc;
        }
        list[st->ntransforms] = m->strings[d];
        m->xform_lists[k] = list;
    }
    st->transforms = m->xform_lists[k];
    st->ntransforms++;
    return FC_OK;
}

int fc_dcp_meta_set_path(struct fc_dcp_meta *m, size_t entry, const struct fc_path_elem *path,
                         size_t n)
{
    size_t total, strbytes = 0;
    if (entry >= m->nentries)
        return fc_error_set(FC_EINVAL, "dcp metadata: no entry %zu", entry);
    if (n == 0)
        return fc_error_set(FC_EINVAL, "dcp metadata: '%s': empty planner path",
                            m->entries[entry].fqn);
    for (size_t i = 0; i < n; i++) {
        if (path[i].is_index)
            continue;
        if (path[i].key == NULL)
            return fc_error_set(FC_EINVAL,
                                "dcp metadata: '%s': planner path element %zu has "
                                "no key",
                                m->entries[entry].fqn, i);
        if (fc_add_size(strbytes, strlen(path[i].key) + 1, &strbytes) < 0)
            return fc_error_set(FC_EINVAL, "dcp metadata: planner path too long");
    }
    if (fc_mul_size(n, sizeof(struct fc_path_elem), &total) < 0 ||
        fc_add_size(total, strbytes, &total) < 0)
        return fc_error_set(FC_EINVAL, "dcp metadata: planner path too long");
    /* One allocation: the element array, then the key strings. */
    struct fc_path_elem *copy = fc_malloc(total);
    if (copy == NULL)
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
    char *s = (char *)(copy + n);
    for (size_t i = 0; i < n; i++) {
        copy[i].is_index = path[i].is_index ? 1 : 0;
        copy[i].index = path[i].is_index ? path[i].index : 0;
        copy[i].key = NULL;
        if (!path[i].is_index) {
            const size_t len = strlen(path[i].key) + 1;
            memcpy(s, path[i].key, len);
            copy[i].key = s;
            s += len;
        }
    }
    struct fc_dcp_entry *e = &m->entries[entry];
    fc_free(e->path);
    e->path = copy;
    e->path_len = n;
    return FC_OK;
}

/* Replace *dst by a copy of src (NULL allowed). */
static int set_str(char **dst, const char *src)
{
    char *p = NULL;
    if (src != NULL) {
        p = fc_strdup(src);
        if (p == NULL)
            return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
    }
    fc_free(*dst);
    *dst = p;
    return FC_OK;
}

int fc_dcp_meta_set_storage_meta(struct fc_dcp_meta *m, const char *checkpoint_id,
                                 const char *save_id)
{
    char *cid = NULL;
    FC_TRY(set_str(&cid, checkpoint_id));
    const int rc = set_str(&m->save_id, save_id);
    if (rc < 0) {
        fc_free(cid);
        return rc;
    }
    fc_free(m->checkpoint_id);
    m->checkpoint_id = cid;
    m->checkpoint_id_was_path = 0;
    for (size_t i = 0; i < m->nmodules; i++)
        fc_free(m->modules[i]);
    fc_free(m->modules);
    m->modules = NULL;
    m->nmodules = 0;
    m->has_storage_meta = 1;
    return FC_OK;
}

int fc_dcp_meta_add_module(struct fc_dcp_meta *m, const char *module)
{
    if (module == NULL)
        return fc_error_set(FC_EINVAL, "dcp metadata: NULL module name");
    char **p = fc_reallocarray(m->modules, m->nmodules + 1, sizeof(*p));
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
    m->modules = p;
    p[m->nmodules] = fc_strdup(module);
    if (p[m->nmodules] == NULL)
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
    m->nmodules++;
    return FC_OK;
}

int fc_dcp_meta_set_version(struct fc_dcp_meta *m, const char *version)
{
    return set_str(&m->version, version);
}

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

/* ------------------------------------------------------------------------ */
/* reader                                                                   */

struct rd {
    const char *what;
    struct fc_dcp_meta *m;
    size_t **sorted; /* per entry: chunk indices sorted by offsets, built on a hint miss */
    size_t nsorted;
    /*
     * Streaming (rd_dict_item): the items of state_dict_metadata and
     * storage_data are read as the pickle builds them and never held as a
     * tree.  The dicts they went to must turn out to be those two fields;
     * anything unusual (a duplicate key, which Python would merge) sets
     * restart, and the file is read again without streaming.
     */
    const struct fc_pv *sdm_dict, *sd_dict;
    size_t sdm_items, sd_items;
    int restart;
    const struct fc_pickle_hooks *input; /* its window() supplies the pickle, or NULL */
    /*
     * Tensors read when BUILD completed their TensorStorageMetadata (rd_built),
     * before their key is known: Python adds dict items 1000 at a time, and
     * 1000 tensors of 1000 chunks must not wait as a tree.  Oldest first.
     */
    struct rd_pending {
        const struct fc_pv *obj; /* the object, stateless now */
        struct fc_dcp_entry e;   /* everything but fqn and kind */
    } * pending;
    size_t npending, pending_first, pending_alloc;
};

static int rd_window(void *ctx, size_t from, size_t to, size_t *ready)
{
    const struct rd *r = ctx;
    return r->input->window(r->input->ctx, from, to, ready);
}

static int rd_err(const struct rd *r, int code, const struct fc_pv *v, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int rd_err(const struct rd *r, int code, const struct fc_pv *v, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (v != NULL)
        return fc_error_set(code, "%s: offset %" PRIu64 ": %s", r->what, (uint64_t)v->offset, msg);
    return fc_error_set(code, "%s: %s", r->what, msg);
}

static const char *kind_name(const struct fc_pv *v)
{
    if (v == NULL)
        return "nothing";
    switch (v->kind) {
    case FC_PV_NONE: return "None";
    case FC_PV_BOOL: return "a bool";
    case FC_PV_INT: return "an int";
    case FC_PV_BIGINT: return "a big int";
    case FC_PV_FLOAT: return "a float";
    case FC_PV_STR:
        /* is_str() refuses these: say why, not "a str, not a str" */
        return strlen(v->u.str.s) != v->u.str.len ? "a str with a NUL byte" : "a str";
    case FC_PV_BYTES: return "bytes";
    case FC_PV_LIST: return "a list";
    case FC_PV_TUPLE: return "a tuple";
    case FC_PV_SET: return "a set";
    case FC_PV_DICT: return "a dict";
    case FC_PV_GLOBAL: return "a global";
    case FC_PV_CALL: return "a call";
    case FC_PV_OBJECT: return "an object";
    case FC_PV_TENSOR: return "a tensor";
    }
    return "an unknown value";
}

static int is_str(const struct fc_pv *v)
{
    return v != NULL && v->kind == FC_PV_STR && strlen(v->u.str.s) == v->u.str.len;
}

static int str_eq(const struct fc_pv *v, const char *s)
{
    return v != NULL && v->kind == FC_PV_STR && v->u.str.len == strlen(s) &&
           memcmp(v->u.str.s, s, v->u.str.len) == 0;
}

static int is_seq(const struct fc_pv *v)
{
    return v != NULL && (v->kind == FC_PV_TUPLE || v->kind == FC_PV_LIST);
}

static int is_global(const struct fc_pv *v, const char *module, const char *name)
{
    return v != NULL && v->kind == FC_PV_GLOBAL && strcmp(v->u.global.module, module) == 0 &&
           strcmp(v->u.global.name, name) == 0;
}

/* Value of key in a dict with str keys; the last one wins, as in Python. */
static const struct fc_pv *dget(const struct fc_pv *dict, const char *key)
{
    const struct fc_pv *found = NULL;
    for (size_t i = 0; i < dict->u.dict.n; i++)
        if (str_eq(dict->u.dict.keys[i], key))
            found = dict->u.dict.vals[i];
    return found;
}

/*
 * The class of an instance made by NEWOBJ (or by REDUCE of the class itself,
 * tolerated), or NULL when v is not such an instance.
 */
static const struct fc_pv *class_of(const struct fc_pv *v)
{
    if (v == NULL || (v->kind != FC_PV_OBJECT && v->kind != FC_PV_CALL))
        return NULL;
    const struct fc_pv *cls = v->u.call.callable;
    return cls != NULL && cls->kind == FC_PV_GLOBAL ? cls : NULL;
}

static int is_instance(const struct fc_pv *v, const char *module, const char *name)
{
    const struct fc_pv *cls = class_of(v);
    return cls != NULL && is_global(cls, module, name);
}

/* The BUILD state of an instance of module.name that must be a dict. */
static int obj_dict_state(const struct rd *r, const struct fc_pv *v, const char *module,
                          const char *name, const char *where, const struct fc_pv **out)
{
    if (!is_instance(v, module, name)) {
        const struct fc_pv *cls = class_of(v);
        if (cls != NULL)
            return rd_err(r, FC_EFORMAT, v, "%s: expected %s.%s, found %s.%s", where, module, name,
                          cls->u.global.module, cls->u.global.name);
        return rd_err(r, FC_EFORMAT, v, "%s: expected %s.%s, found %s", where, module, name,
                      kind_name(v));
    }
    const struct fc_pv *st = v->u.call.state;
    if (st == NULL || st->kind != FC_PV_DICT)
        return rd_err(r, FC_ECORRUPT, v, "%s: %s state is %s, not a dict", where, name,
                      kind_name(st));
    *out = st;
    return FC_OK;
}

static int need_field(const struct rd *r, const struct fc_pv *dict, const char *key,
                      const char *where, const struct fc_pv **out)
{
    *out = dget(dict, key);
    if (*out == NULL)
        return rd_err(r, FC_ECORRUPT, dict, "%s: missing field '%s'", where, key);
    return FC_OK;
}

static int get_i64(const struct rd *r, const struct fc_pv *v, const char *where, int64_t *out)
{
    if (v != NULL && v->kind == FC_PV_INT) {
        *out = v->u.i;
        return FC_OK;
    }
    if (v != NULL && v->kind == FC_PV_BIGINT)
        return rd_err(r, FC_ECORRUPT, v, "%s: integer out of the int64 range", where);
    return rd_err(r, FC_ECORRUPT, v, "%s: expected an int, found %s", where, kind_name(v));
}

static int get_nonneg(const struct rd *r, const struct fc_pv *v, const char *where, int64_t *out)
{
    FC_TRY(get_i64(r, v, where, out));
    if (*out < 0)
        return rd_err(r, FC_ECORRUPT, v, "%s: negative value %" PRId64, where, *out);
    return FC_OK;
}

static int get_flag(const struct rd *r, const struct fc_pv *v, const char *where, int *out)
{
    if (v != NULL && v->kind == FC_PV_BOOL) {
        *out = v->u.b != 0;
        return FC_OK;
    }
    if (v != NULL && v->kind == FC_PV_INT) {
        *out = v->u.i != 0;
        return FC_OK;
    }
    return rd_err(r, FC_ECORRUPT, v, "%s: expected a bool, found %s", where, kind_name(v));
}

/*
 * torch.Size((a, b, ...)) -> dims.  A plain tuple/list of ints is accepted
 * too.  Values must be >= 0 (sizes and offsets both).
 */
static int get_size(const struct rd *r, const struct fc_pv *v, const char *where, int64_t *dims,
                    int *ndim_out)
{
    const struct fc_pv *seq = v;
    if (v != NULL && v->kind == FC_PV_CALL) {
        const struct fc_pv *a = v->u.call.args;
        if (!is_global(v->u.call.callable, "torch", "Size"))
            return rd_err(r, FC_EFORMAT, v, "%s: expected torch.Size, found a call of %s", where,
                          kind_name(v->u.call.callable));
        if (a == NULL || a->kind != FC_PV_TUPLE || a->u.seq.n > 1)
            return rd_err(r, FC_ECORRUPT, v, "%s: torch.Size takes one tuple", where);
        if (a->u.seq.n == 0) {
            *ndim_out = 0;
            return FC_OK;
        }
        seq = a->u.seq.items[0];
    }
    if (!is_seq(seq))
        return rd_err(r, FC_ECORRUPT, v, "%s: expected torch.Size, found %s", where,
                      kind_name(seq));
    if (seq->u.seq.n > FC_MAX_DIMS)
        return rd_err(r, FC_EFORMAT, v, "%s: %zu dims (at most %d supported)", where, seq->u.seq.n,
                      FC_MAX_DIMS);
    for (size_t i = 0; i < seq->u.seq.n; i++)
        FC_TRY(get_nonneg(r, seq->u.seq.items[i], where, &dims[i]));
    *ndim_out = (int)seq->u.seq.n;
    return FC_OK;
}

/* _MEM_FORMAT_ENCODING member: Enum(value) or builtins.getattr(Enum, name). */
static int is_mem_enum(const struct fc_pv *v)
{
    return is_global(v, MOD_MD, "_MEM_FORMAT_ENCODING") ||
           is_global(v, MOD_LEGACY, "MEM_FORMAT_ENCODING");
}

static int get_mem_format(const struct rd *r, const struct fc_pv *v, const char *where,
                          enum fc_dcp_mem_format *out)
{
    static const char *const names[] = {"TORCH_CONTIGUOUS_FORMAT", "TORCH_CHANNELS_LAST",
                                        "TORCH_PRESERVE_FORMAT"};
    if (v != NULL && v->kind == FC_PV_CALL && v->u.call.args != NULL &&
        v->u.call.args->kind == FC_PV_TUPLE) {
        const struct fc_pv *a = v->u.call.args;
        if (is_mem_enum(v->u.call.callable) && a->u.seq.n == 1) {
            int64_t x;
            FC_TRY(get_i64(r, a->u.seq.items[0], where, &x));
            if (x < 0 || x > 2)
                return rd_err(r, FC_ECORRUPT, v, "%s: invalid memory format encoding %" PRId64,
                              where, x);
            *out = (enum fc_dcp_mem_format)x;
            return FC_OK;
        }
        if (is_global(v->u.call.callable, "builtins", "getattr") && a->u.seq.n == 2 &&
            is_mem_enum(a->u.seq.items[0])) {
            for (int i = 0; i < 3; i++) {
                if (str_eq(a->u.seq.items[1], names[i])) {
                    *out = (enum fc_dcp_mem_format)i;
                    return FC_OK;
                }
            }
            return rd_err(r, FC_ECORRUPT, v, "%s: unknown memory format enum member", where);
        }
    }
    return rd_err(r, FC_EFORMAT, v, "%s: expected a _MEM_FORMAT_ENCODING member, found %s", where,
                  kind_name(v));
}

static int read_properties(const struct rd *r, const struct fc_pv *v, const char *fqn,
                           struct fc_dcp_entry *e)
{
    char where[320];
    snprintf(where, sizeof(where), "'%s': properties", fqn);
    if (!is_instance(v, MOD_MD, "TensorProperties") &&
        !is_instance(v, MOD_LEGACY, "TensorProperties"))
        return rd_err(r, FC_EFORMAT, v, "%s: expected TensorProperties, found %s", where,
                      kind_name(v));
    const struct fc_pv *st = v->u.call.state;
    if (st == NULL || st->kind != FC_PV_TUPLE || (st->u.seq.n != 5 && st->u.seq.n != 6))
        return rd_err(r, FC_ECORRUPT, v, "%s: state is %s, not a 5- or 6-tuple", where,
                      kind_name(st));
    const struct fc_pv *const *it = (const struct fc_pv *const *)st->u.seq.items;

    const struct fc_pv *dt = it[0];
    if (dt == NULL || dt->kind != FC_PV_GLOBAL || strcmp(dt->u.global.module, "torch") != 0)
        return rd_err(r, FC_ECORRUPT, dt, "%s: dtype is %s, not a torch dtype", where,
                      kind_name(dt));
    e->dtype = fc_dtype_from_torch_name(dt->u.global.name);
    if (e->dtype == FC_DTYPE_INVALID)
        return rd_err(r, FC_EFORMAT, dt, "%s: unsupported dtype torch.%s", where,
                      dt->u.global.name);

    const struct fc_pv *lay = it[1];
    if (!(lay != NULL && lay->kind == FC_PV_CALL &&
          is_global(lay->u.call.callable, "torch.serialization", "_get_layout") &&
          lay->u.call.args != NULL && lay->u.call.args->kind == FC_PV_TUPLE &&
          lay->u.call.args->u.seq.n == 1 &&
          str_eq(lay->u.call.args->u.seq.items[0], "torch.strided")))
        return rd_err(r, FC_EFORMAT, lay, "%s: unsupported layout (only torch.strided)", where);

    FC_TRY(get_flag(r, it[2], where, &e->requires_grad));
    FC_TRY(get_mem_format(r, it[3], where, &e->mem_format));
    FC_TRY(get_flag(r, it[4], where, &e->pin_memory));
    if (st->u.seq.n == 6 && it[5] != NULL && it[5]->kind != FC_PV_NONE) {
        int n;
        const struct fc_pv *s = it[5];
        if (!is_seq(s))
            return rd_err(r, FC_ECORRUPT, s, "%s: strides is %s", where, kind_name(s));
        if (s->u.seq.n > FC_MAX_DIMS)
            return rd_err(r, FC_EFORMAT, s, "%s: %zu strides", where, s->u.seq.n);
        n = (int)s->u.seq.n;
        for (int d = 0; d < n; d++)
            FC_TRY(get_i64(r, s->u.seq.items[d], where, &e->strides[d]));
        /* Strides are informational: keep them only when they fit the tensor. */
        e->has_strides = (n == e->ndim);
    }
    return FC_OK;
}

/*
 * Every size later derived from a shape (element counts, byte sizes, strides,
 * offsets) is computed in int64 by every command; checking the extremes once
 * here, as the metadata is parsed, is what lets the rest compute unchecked.
 */
static int check_extent(const struct rd *r, const struct fc_pv *v, const char *where,
                        const char *what, const int64_t *dims, int ndim, fc_dtype dtype)
{
    int64_t numel, nbytes;
    if (fc_shape_numel(dims, ndim, &numel) < 0 ||
        fc_mul_i64(numel, (int64_t)fc_dtype_size(dtype), &nbytes) < 0)
        return rd_err(r, FC_ECORRUPT, v, "%s: the %s's element count or byte size overflows int64",
                      where, what);
    return FC_OK;
}

/* TensorStorageMetadata v into e (fqn names it in messages). */
static int read_tensor(struct rd *r, const struct fc_pv *v, const char *fqn, struct fc_dcp_entry *e)
{
    struct fc_dcp_meta *m = r->m;
    const struct fc_pv *st, *f;
    char where[320];
    int64_t size[FC_MAX_DIMS];
    int ndim;

    snprintf(where, sizeof(where), "state_dict_metadata['%s']", fqn);
    FC_TRY(obj_dict_state(r, v, MOD_MD, "TensorStorageMetadata", where, &st));
    FC_TRY(need_field(r, st, "size", where, &f));
    FC_TRY(get_size(r, f, where, size, &ndim));
    e->ndim = ndim;
    memcpy(e->size, size, (size_t)ndim * sizeof(int64_t));
    FC_TRY(need_field(r, st, "properties", where, &f));
    FC_TRY(read_properties(r, f, fqn, e));
    FC_TRY(check_extent(r, v, where, "shape", size, ndim, e->dtype));
    FC_TRY(need_field(r, st, "chunks", where, &f));
    if (!is_seq(f))
        return rd_err(r, FC_ECORRUPT, f, "%s: chunks is %s, not a list", where, kind_name(f));
    FC_TRY(reserve_chunks(e, f->u.seq.n));
    for (size_t c = 0; c < f->u.seq.n; c++) {
        const struct fc_pv *cv = f->u.seq.items[c], *cst, *x;
        int64_t off[FC_MAX_DIMS], sz[FC_MAX_DIMS];
        int n1, n2;
        char cwhere[360];
        snprintf(cwhere, sizeof(cwhere), "%s: chunk %zu", where, c);
        FC_TRY(obj_dict_state(r, cv, MOD_MD, "ChunkStorageMetadata", cwhere, &cst));
        FC_TRY(need_field(r, cst, "offsets", cwhere, &x));
        FC_TRY(get_size(r, x, cwhere, off, &n1));
        FC_TRY(need_field(r, cst, "sizes", cwhere, &x));
        FC_TRY(get_size(r, x, cwhere, sz, &n2));
        if (n1 != ndim || n2 != ndim)
            return rd_err(r, FC_ECORRUPT, cv,
                          "%s: offsets/sizes have %d/%d dims, the tensor "
                          "has %d",
                          cwhere, n1, n2, ndim);
        FC_TRY(check_extent(r, cv, cwhere, "sizes", sz, ndim, e->dtype));
        for (int d = 0; d < ndim; d++) {
            int64_t end;
            if (fc_add_i64(off[d], sz[d], &end) < 0)
                return rd_err(r, FC_ECORRUPT, cv, "%s: offset + size overflows int64 in dim %d",
                              cwhere, d);
        }
        FC_TRY(entry_add_chunk(m, e, off, sz, NULL));
    }
    return FC_OK;
}

static int cmp_offsets(const int64_t *a, const int64_t *b, int ndim)
{
    for (int d = 0; d < ndim; d++)
        if (a[d] != b[d])
            return a[d] < b[d] ? -1 : 1;
    return 0;
}

/* Offset tuples in lexicographic order (fc_sort_idx is stable: ties keep chunk order). */
static int cmp_chunk_idx(const void *ctx, size_t a, size_t b)
{
    const struct fc_dcp_entry *e = ctx;
    return cmp_offsets(e->chunks[a].offsets, e->chunks[b].offsets, e->ndim);
}

/* Chunk indices of e sorted by offsets into *out (caller frees). */
static int sort_chunks(const struct fc_dcp_entry *e, size_t **out)
{
    size_t *idx = fc_calloc(e->nchunks, sizeof(*idx));
    if (idx == NULL)
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory sorting %zu chunks of '%s'",
                            e->nchunks, e->fqn);
    for (size_t i = 0; i < e->nchunks; i++)
        idx[i] = i;
    const int rc = fc_sort_idx(idx, e->nchunks, cmp_chunk_idx, e);
    if (rc < 0) {
        fc_free(idx);
        return rc;
    }
    *out = idx;
    return FC_OK;
}

/* Chunks with the same offsets: DCP keys storage by (fqn, offsets), so one would be lost. */
static int check_distinct_offsets(const struct rd *r, const struct fc_dcp_entry *e)
{
    size_t *sorted = NULL;
    if (e->kind != FC_DCP_TENSOR || e->nchunks < 2)
        return FC_OK;
    FC_TRY(sort_chunks(e, &sorted));
    int rc = FC_OK;
    for (size_t j = 1; rc == FC_OK && j < e->nchunks; j++) {
        const struct fc_dcp_chunk *a = &e->chunks[sorted[j - 1]];
        const struct fc_dcp_chunk *b = &e->chunks[sorted[j]];
        if (cmp_offsets(a->offsets, b->offsets, e->ndim) == 0)
            rc = rd_err(r, FC_ECORRUPT, NULL, "'%s': chunks %zu and %zu have the same offsets",
                        e->fqn, sorted[j - 1], sorted[j]);
    }
    fc_free(sorted);
    return rc;
}

/* rd_built() for a TensorStorageMetadata: read it now, unless it is unusual (then the tree). */
static int rd_built(void *ctx, const struct fc_pv *obj)
{
    struct rd *r = ctx;
    if (!is_instance(obj, MOD_MD, "TensorStorageMetadata"))
        return 0;
    if (r->npending == r->pending_alloc) {
        const size_t n = r->pending_alloc == 0 ? 64 : r->pending_alloc * 2;
        struct rd_pending *p = fc_reallocarray(r->pending, n, sizeof(*p));
        if (p == NULL)
            return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
        r->pending = p;
        r->pending_alloc = n;
    }
    struct rd_pending *p = &r->pending[r->npending];
    memset(p, 0, sizeof(*p));
    p->obj = obj;
    p->e.kind = FC_DCP_TENSOR;
    const int rc = read_tensor(r, obj, "?", &p->e);
    if (rc == FC_ENOMEM) {
        fc_free(p->e.chunks);
        return rc;
    }
    if (rc < 0) { /* read again from the tree with its key: the message names it */
        fc_free(p->e.chunks);
        return 0;
    }
    r->npending++;
    return 1;
}

/* The entry read early for v, moved into m as fqn: 1 when there was one. */
static int take_pending(struct rd *r, const struct fc_pv *k, const struct fc_pv *v, size_t *idx)
{
    if (r->pending_first == r->npending || r->pending[r->pending_first].obj != v)
        return 0;
    struct rd_pending *p = &r->pending[r->pending_first];
    FC_TRY(add_entry(r->m, k->u.str.s, k->u.str.len, FC_DCP_TENSOR, idx));
    r->pending_first++;
    struct fc_dcp_entry *e = &r->m->entries[*idx];
    char *fqn = e->fqn;
    *e = p->e;
    e->fqn = fqn;
    memset(&p->e, 0, sizeof(p->e));
    if (r->pending_first == r->npending)
        r->pending_first = r->npending = 0;
    return 1;
}

/* Item i of state_dict_metadata: k -> v. */
static int read_sdm_item(struct rd *r, size_t i, const struct fc_pv *k, const struct fc_pv *v)
{
    struct fc_dcp_meta *m = r->m;
    size_t idx;
    if (!is_str(k))
        return rd_err(r, FC_ECORRUPT, k, "state_dict_metadata key %zu is %s, not a NUL-free str", i,
                      kind_name(k));
    if (fc_dcp_meta_find(m, k->u.str.s) >= 0)
        return rd_err(r, FC_ECORRUPT, k, "duplicate state_dict_metadata key '%s'", k->u.str.s);
    if (is_instance(v, MOD_MD, "BytesStorageMetadata"))
        return add_entry(m, k->u.str.s, k->u.str.len, FC_DCP_BYTES, &idx);
    if (!is_instance(v, MOD_MD, "TensorStorageMetadata")) {
        const struct fc_pv *cls = class_of(v);
        if (cls != NULL)
            return rd_err(r, FC_EFORMAT, v, "state_dict_metadata['%s']: unsupported class %s.%s",
                          k->u.str.s, cls->u.global.module, cls->u.global.name);
        return rd_err(r, FC_EFORMAT, v, "state_dict_metadata['%s'] is %s, not storage metadata",
                      k->u.str.s, kind_name(v));
    }
    const int early = take_pending(r, k, v, &idx);
    FC_TRY(early);
    if (!early && v->u.call.state == NULL && r->npending > 0) {
        r->restart = 1; /* read early, but its item comes out of order */
        return fc_error_set(FC_ERROR, "%s: read again without streaming", r->what);
    }
    if (!early) {
        FC_TRY(add_entry(m, k->u.str.s, k->u.str.len, FC_DCP_TENSOR, &idx));
        FC_TRY(read_tensor(r, v, m->entries[idx].fqn, &m->entries[idx]));
    }
    return check_distinct_offsets(r, &m->entries[idx]);
}

static int read_state_dict_metadata(struct rd *r, const struct fc_pv *sdm)
{
    if (sdm->kind != FC_PV_DICT)
        return rd_err(r, FC_ECORRUPT, sdm, "state_dict_metadata is %s, not a dict", kind_name(sdm));
    for (size_t i = 0; i < sdm->u.dict.n; i++)
        FC_TRY(read_sdm_item(r, r->sdm_items + i, sdm->u.dict.keys[i], sdm->u.dict.vals[i]));
    return FC_OK;
}

/* Flatten a pathlib object's parts into one string (informational); NULL if not one. */
static int path_string(const struct fc_pv *v, char **out)
{
    static const char *const names[] = {"PosixPath", "WindowsPath", "PurePosixPath",
                                        "PureWindowsPath", "Path"};
    const struct fc_pv *cls = v->u.call.callable, *a = v->u.call.args;
    struct fc_buf b = FC_BUF_INIT(1 << 20);
    int known = 0, rc = FC_OK;
    *out = NULL;
    if (cls == NULL || cls->kind != FC_PV_GLOBAL || a == NULL || a->kind != FC_PV_TUPLE)
        return FC_OK;
    if (strcmp(cls->u.global.module, "pathlib") != 0 &&
        strcmp(cls->u.global.module, "pathlib._local") != 0)
        return FC_OK;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        known |= strcmp(cls->u.global.name, names[i]) == 0;
    if (!known)
        return FC_OK;
    for (size_t i = 0; i < a->u.seq.n; i++) {
        const struct fc_pv *p = a->u.seq.items[i];
        if (!is_str(p))
            goto done; /* not a path we understand: no string */
        if (b.len > 0 && b.data[b.len - 1] != '/' && b.data[b.len - 1] != '\\')
            FC_TRY_GOTO(fc_buf_putc(&b, '/'), rc, done);
        FC_TRY_GOTO(fc_buf_append(&b, p->u.str.s, p->u.str.len), rc, done);
    }
    FC_TRY_GOTO(fc_buf_putc(&b, '\0'), rc, done);
    *out = (char *)fc_buf_detach(&b, NULL);
done:
    fc_buf_release(&b);
    return rc;
}

/* StorageMeta is informational: shapes we do not know are ignored, not rejected. */
static int read_storage_meta(struct rd *r, const struct fc_pv *v)
{
    struct fc_dcp_meta *m = r->m;
    const struct fc_pv *st, *x;
    if (!is_instance(v, MOD_MD, "StorageMeta"))
        return FC_OK;
    st = v->u.call.state;
    m->has_storage_meta = 1;
    if (st == NULL || st->kind != FC_PV_DICT)
        return FC_OK;
    x = dget(st, "checkpoint_id");
    if (is_str(x)) {
        FC_TRY(set_str(&m->checkpoint_id, x->u.str.s));
    } else if (x != NULL && x->kind == FC_PV_CALL) {
        FC_TRY(path_string(x, &m->checkpoint_id));
        m->checkpoint_id_was_path = m->checkpoint_id != NULL;
    }
    x = dget(st, "save_id");
    if (is_str(x))
        FC_TRY(set_str(&m->save_id, x->u.str.s));
    x = dget(st, "modules");
    if (is_seq(x)) {
        for (size_t i = 0; i < x->u.seq.n; i++)
            if (is_str(x->u.seq.items[i]))
                FC_TRY(fc_dcp_meta_add_module(m, x->u.seq.items[i]->u.str.s));
    }
    return FC_OK;
}

/* A planner path: a non-empty tuple of str keys and int indices. */
static int valid_path(const struct fc_pv *v)
{
    if (v == NULL || v->kind != FC_PV_TUPLE || v->u.seq.n == 0)
        return 0;
    for (size_t i = 0; i < v->u.seq.n; i++) {
        const struct fc_pv *p = v->u.seq.items[i];
        if (!is_str(p) && !(p != NULL && p->kind == FC_PV_INT))
            return 0;
    }
    return 1;
}

static int read_planner_data(struct rd *r, const struct fc_pv *pd)
{
    struct fc_dcp_meta *m = r->m;
    struct fc_path_elem elems[64];
    m->has_planner_data = 0;
    if (pd == NULL || pd->kind == FC_PV_NONE)
        return FC_OK;
    /* Only the default planner's shape is interpreted; anything else is kept out. */
    if (pd->kind != FC_PV_DICT) {
        m->planner_data_ignored = 1;
        return FC_OK;
    }
    for (size_t i = 0; i < pd->u.dict.n; i++) {
        if (!is_str(pd->u.dict.keys[i]) || !valid_path(pd->u.dict.vals[i])) {
            m->planner_data_ignored = 1;
            return FC_OK;
        }
    }
    m->has_planner_data = 1;
    for (size_t i = 0; i < pd->u.dict.n; i++) {
        const struct fc_pv *k = pd->u.dict.keys[i], *v = pd->u.dict.vals[i];
        struct fc_path_elem *pe = elems;
        const long e = fc_dcp_meta_find(m, k->u.str.s);
        int rc;
        if (e < 0) {
            m->planner_data_dropped++;
            continue;
        }
        if (m->entries[e].path != NULL)
            return rd_err(r, FC_ECORRUPT, k, "duplicate planner_data key '%s'", k->u.str.s);
        if (v->u.seq.n > sizeof(elems) / sizeof(elems[0])) {
            pe = fc_calloc(v->u.seq.n, sizeof(*pe));
            if (pe == NULL)
                return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
        }
        for (size_t j = 0; j < v->u.seq.n; j++) {
            const struct fc_pv *p = v->u.seq.items[j];
            pe[j].is_index = p->kind == FC_PV_INT;
            pe[j].index = p->kind == FC_PV_INT ? p->u.i : 0;
            pe[j].key = p->kind == FC_PV_INT ? NULL : p->u.str.s;
        }
        rc = fc_dcp_meta_set_path(m, (size_t)e, pe, v->u.seq.n);
        if (pe != elems)
            fc_free(pe);
        FC_TRY(rc);
    }
    return FC_OK;
}

static int read_storage_info(const struct rd *r, const struct fc_pv *v, const char *where,
                             struct fc_dcp_storage *out)
{
    const struct fc_pv *st, *x;
    int64_t off, len;
    FC_TRY(obj_dict_state(r, v, MOD_FS, "_StorageInfo", where, &st));
    FC_TRY(need_field(r, st, "relative_path", where, &x));
    if (!is_str(x))
        return rd_err(r, FC_ECORRUPT, x, "%s: relative_path is %s, not a str", where, kind_name(x));
    if (bad_relative_path(x->u.str.s))
        return rd_err(r, FC_ECORRUPT, x,
                      "%s: relative_path '%s' is not a file name inside the "
                      "checkpoint directory",
                      where, x->u.str.s);
    const struct fc_pv *path = x;
    FC_TRY(need_field(r, st, "offset", where, &x));
    FC_TRY(get_nonneg(r, x, where, &off));
    FC_TRY(need_field(r, st, "length", where, &x));
    FC_TRY(get_nonneg(r, x, where, &len));
    FC_TRY(fc_dcp_storage_set(r->m, out, path->u.str.s, (uint64_t)off, (uint64_t)len));
    x = dget(st, "transform_descriptors");
    if (x != NULL && x->kind != FC_PV_NONE) {
        if (!is_seq(x))
            return rd_err(r, FC_ECORRUPT, x, "%s: transform_descriptors is %s", where,
                          kind_name(x));
        for (size_t i = 0; i < x->u.seq.n; i++) {
            const struct fc_pv *d = x->u.seq.items[i];
            if (!is_str(d) || d->u.str.len == 0 || strchr(d->u.str.s, '\n') != NULL)
                return rd_err(r, FC_ECORRUPT, d, "%s: transform descriptor %zu is %s", where, i,
                              !is_str(d)          ? kind_name(d)
                              : d->u.str.len == 0 ? "empty"
                                                  : "invalid");
            FC_TRY(fc_dcp_storage_add_transform(r->m, out, d->u.str.s));
        }
    }
    return FC_OK;
}

/* The chunk of tensor entry e whose offsets equal off: the index hint first, then search. */
static int find_chunk(struct rd *r, size_t ei, const int64_t *off, int64_t hint, long *out)
{
    const struct fc_dcp_entry *e = &r->m->entries[ei];
    size_t lo = 0, hi = e->nchunks;
    *out = -1;
    if (hint >= 0 && (uint64_t)hint < e->nchunks &&
        cmp_offsets(e->chunks[hint].offsets, off, e->ndim) == 0) {
        *out = (long)hint;
        return FC_OK;
    }
    if (r->nsorted < r->m->nentries) {
        size_t **p = fc_reallocarray(r->sorted, r->m->nentries, sizeof(*p));
        if (p == NULL)
            return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory");
        memset(p + r->nsorted, 0, (r->m->nentries - r->nsorted) * sizeof(*p));
        r->sorted = p;
        r->nsorted = r->m->nentries;
    }
    if (r->sorted[ei] == NULL && e->nchunks > 0)
        FC_TRY(sort_chunks(e, &r->sorted[ei]));
    const size_t *s = r->sorted[ei];
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const int c = cmp_offsets(e->chunks[s[mid]].offsets, off, e->ndim);
        if (c == 0) {
            *out = (long)s[mid];
            return FC_OK;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return FC_OK;
}

/*
 * Item i of storage_data: k -> v.  *taken (may be NULL) = 0 when k names no
 * entry yet (streaming: left in the dict for the walk after the load).
 */
static int read_storage_item(struct rd *r, size_t i, const struct fc_pv *k, const struct fc_pv *v,
                             int *taken)
{
    struct fc_dcp_meta *m = r->m;
    const struct fc_pv *kst, *x;
    int64_t off[FC_MAX_DIMS], hint = -1;
    int ndim = -1;
    char where[320];
    snprintf(where, sizeof(where), "storage_data item %zu", i);
    FC_TRY(obj_dict_state(r, k, MOD_MD, "MetadataIndex", where, &kst));
    FC_TRY(need_field(r, kst, "fqn", where, &x));
    if (!is_str(x))
        return rd_err(r, FC_ECORRUPT, x, "%s: fqn is %s, not a str", where, kind_name(x));
    const char *fqn = x->u.str.s;
    snprintf(where, sizeof(where), "storage_data['%s']", fqn);
    x = dget(kst, "offset");
    if (x != NULL && x->kind != FC_PV_NONE)
        FC_TRY(get_size(r, x, where, off, &ndim));
    x = dget(kst, "index");
    if (x != NULL && x->kind == FC_PV_INT)
        hint = x->u.i;

    const long ei = fc_dcp_meta_find(m, fqn);
    if (taken != NULL) {
        *taken = ei >= 0;
        if (ei < 0)
            return FC_OK;
    }
    struct fc_dcp_storage *dst = NULL;
    if (ei >= 0 && m->entries[ei].kind == FC_DCP_BYTES && ndim < 0) {
        dst = &m->entries[ei].storage;
    } else if (ei >= 0 && m->entries[ei].kind == FC_DCP_TENSOR && ndim == m->entries[ei].ndim) {
        long c;
        FC_TRY(find_chunk(r, (size_t)ei, off, hint, &c));
        if (c >= 0)
            dst = &m->entries[ei].chunks[c].storage;
    }
    if (dst == NULL) {
        m->orphan_storage++; /* torch never looks it up either */
        return FC_OK;
    }
    if (dst->relative_path != NULL)
        return rd_err(r, FC_ECORRUPT, k, "%s: duplicate storage_data key", where);
    return read_storage_info(r, v, where, dst);
}

static int read_storage_data(struct rd *r, const struct fc_pv *sd)
{
    if (sd == NULL || sd->kind == FC_PV_NONE)
        return FC_OK; /* every item then lacks storage: reported by the caller */
    if (sd->kind != FC_PV_DICT)
        return rd_err(r, FC_EFORMAT, sd, "storage_data is %s, not the filesystem layout's dict",
                      kind_name(sd));
    for (size_t i = 0; i < sd->u.dict.n; i++)
        FC_TRY(read_storage_item(r, r->sd_items + i, sd->u.dict.keys[i], sd->u.dict.vals[i], NULL));
    return FC_OK;
}

/*
 * The loader's dict_item hook: take the items of state_dict_metadata (str ->
 * Tensor/BytesStorageMetadata) and of storage_data (MetadataIndex ->
 * _StorageInfo) as they are built, so the tree never holds a million chunks.
 */
static int rd_dict_item(void *ctx, const struct fc_pv *dict, const struct fc_pv *k,
                        const struct fc_pv *v)
{
    struct rd *r = ctx;
    if (is_str(k) && (is_instance(v, MOD_MD, "TensorStorageMetadata") ||
                      is_instance(v, MOD_MD, "BytesStorageMetadata"))) {
        if (r->sdm_dict == NULL)
            r->sdm_dict = dict;
        if (dict != r->sdm_dict || fc_dcp_meta_find(r->m, k->u.str.s) >= 0) {
            r->restart = 1; /* Python merges duplicate keys: the tree reading does too */
            return fc_error_set(FC_ERROR, "%s: read again without streaming", r->what);
        }
        FC_TRY(read_sdm_item(r, r->sdm_items++, k, v));
        return 1;
    }
    if (is_instance(k, MOD_MD, "MetadataIndex") && is_instance(v, MOD_FS, "_StorageInfo")) {
        int taken = 0;
        if (r->sd_dict == NULL)
            r->sd_dict = dict;
        if (dict != r->sd_dict) {
            r->restart = 1;
            return fc_error_set(FC_ERROR, "%s: read again without streaming", r->what);
        }
        FC_TRY(read_storage_item(r, r->sd_items, k, v, &taken));
        r->sd_items += (size_t)taken;
        return taken;
    }
    return 0;
}

static void fmt_dims(char *buf, size_t size, const int64_t *v, int n)
{
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < n && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, d ? ", " : "", v[d]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

static int require_storage(const struct rd *r)
{
    const struct fc_dcp_meta *m = r->m;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct fc_dcp_entry *e = &m->entries[i];
        if (e->kind == FC_DCP_BYTES) {
            if (e->storage.relative_path == NULL)
                return rd_err(r, FC_ECORRUPT, NULL, "bytes entry '%s' has no storage_data item",
                              e->fqn);
            continue;
        }
        for (size_t c = 0; c < e->nchunks; c++) {
            if (e->chunks[c].storage.relative_path == NULL) {
                char dims[256];
                fmt_dims(dims, sizeof(dims), e->chunks[c].offsets, e->ndim);
                return rd_err(r, FC_ECORRUPT, NULL,
                              "tensor '%s': chunk %zu (offsets %s) has no "
                              "storage_data item",
                              e->fqn, c, dims);
            }
        }
    }
    return FC_OK;
}

/* Read the pickle (streaming the big dicts when stream is set) into *out. */
static int meta_read(struct fc_dcp_meta **out, const unsigned char *data, size_t len,
                     const char *what, const struct fc_pickle_hooks *input, int stream)
{
    struct fc_pickle *p = NULL;
    struct rd r;
    const struct fc_pv *root, *st, *x;
    int rc;

    memset(&r, 0, sizeof(r));
    r.what = what != NULL ? what : ".metadata";
    r.input = input;
    const struct fc_pickle_hooks hooks = {stream ? rd_dict_item : NULL, stream ? rd_built : NULL,
                                          input != NULL ? rd_window : NULL, &r};
    *out = NULL;
    FC_TRY_GOTO(fc_dcp_meta_new(&r.m), rc, done);
    fc_free(r.m->version);
    r.m->version = NULL;
    FC_TRY_GOTO(fc_pickle_load_hooked(&p, data, len, FC_PICKLE_SYMBOLIC, r.what, &hooks), rc, done);

    root = fc_pickle_root(p);
    FC_TRY_GOTO(obj_dict_state(&r, root, MOD_MD, "Metadata", "root", &st), rc, done);
    FC_TRY_GOTO(need_field(&r, st, "state_dict_metadata", "Metadata", &x), rc, done);
    if ((r.sdm_dict != NULL && x != r.sdm_dict) ||
        (r.sd_dict != NULL && dget(st, "storage_data") != r.sd_dict)) {
        r.restart = 1; /* items were taken from dicts that are not those fields */
        rc = fc_error_set(FC_ERROR, "%s: read again without streaming", r.what);
        goto done;
    }
    FC_TRY_GOTO(read_state_dict_metadata(&r, x), rc, done);
    FC_TRY_GOTO(read_planner_data(&r, dget(st, "planner_data")), rc, done);
    FC_TRY_GOTO(read_storage_data(&r, dget(st, "storage_data")), rc, done);
    FC_TRY_GOTO(require_storage(&r), rc, done);
    x = dget(st, "storage_meta");
    if (x != NULL)
        FC_TRY_GOTO(read_storage_meta(&r, x), rc, done);
    x = dget(st, "version");
    if (is_str(x))
        FC_TRY_GOTO(set_str(&r.m->version, x->u.str.s), rc, done);
    *out = r.m;
    r.m = NULL;
    rc = FC_OK;
done:
    for (size_t i = 0; i < r.nsorted; i++)
        fc_free(r.sorted[i]);
    fc_free(r.sorted);
    for (size_t i = r.pending_first; i < r.npending; i++)
        fc_free(r.pending[i].e.chunks);
    fc_free(r.pending);
    fc_dcp_meta_free(r.m);
    fc_pickle_free(p);
    if (rc < 0 && r.restart)
        return meta_read(out, data, len, what, input, 0);
    return rc;
}

int fc_dcp_meta_read(struct fc_dcp_meta **out, const unsigned char *data, size_t len,
                     const char *what)
{
    return meta_read(out, data, len, what, NULL, 1);
}

/*
 * The .metadata of a million chunks is over 100 MiB: read it in pieces into
 * an anonymous mapping of its size, keeping only the window the loader works
 * on resident (pages behind it are given back with MADV_DONTNEED).  pread,
 * not a file mapping, so a file truncated meanwhile is an error, not SIGBUS.
 */
struct meta_input {
    const struct fc_file *f;
    unsigned char *base;
    size_t len;
    size_t lo, hi; /* data[lo, hi) is read and resident */
    size_t page;
};

#define META_READ_AHEAD ((size_t)4 << 20)

static int meta_window(void *ctx, size_t from, size_t to, size_t *ready)
{
    struct meta_input *in = ctx;
    const size_t page = in->page;
    if (from < in->lo || from > in->hi) { /* a new pass: start over at from */
        if (in->hi > in->lo)
            madvise(in->base + in->lo, in->hi - in->lo, MADV_DONTNEED);
        in->lo = in->hi = from / page * page;
    }
    if (from / page * page >= in->lo + META_READ_AHEAD) {
        const size_t drop = from / page * page;
        madvise(in->base + in->lo, drop - in->lo, MADV_DONTNEED);
        in->lo = drop;
    }
    if (to > in->hi) {
        size_t end = to - in->hi < META_READ_AHEAD ? in->hi + META_READ_AHEAD : to;
        if (end > in->len)
            end = in->len;
        FC_TRY(fc_file_pread(in->f, in->base + in->hi, end - in->hi, in->hi));
        in->hi = end;
    }
    *ready = in->hi;
    return FC_OK;
}

int fc_dcp_meta_load(struct fc_dcp_meta **out, const char *path)
{
    struct fc_file f = FC_FILE_INIT;
    struct meta_input in = {&f, NULL, 0, 0, 0, (size_t)sysconf(_SC_PAGESIZE)};
    const struct fc_pickle_hooks hooks = {NULL, NULL, meta_window, &in};
    int rc;
    *out = NULL;
    FC_TRY_GOTO(fc_file_open_read(&f, path), rc, done);
    if (f.size > FC_DCP_META_MAX_BYTES) {
        rc = fc_error_set(FC_EFORMAT,
                          "%s: %" PRIu64 " bytes, larger than the %zu-byte limit "
                          "for DCP metadata",
                          path, f.size, FC_DCP_META_MAX_BYTES);
        goto done;
    }
    in.len = (size_t)f.size;
    in.base = mmap(NULL, in.len + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (in.base == MAP_FAILED) {
        in.base = NULL;
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory for %zu bytes", path, in.len);
        goto done;
    }
    FC_TRY_GOTO(meta_read(out, in.base, in.len, path, &hooks, 1), rc, done);
done:
    if (in.base != NULL)
        munmap(in.base, in.len + 1);
    fc_file_close(&f);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* coverage check                                                           */

struct ck {
    struct fc_buf *report;
    size_t replicas;
    size_t nproblems;
    size_t lines;
    size_t dropped; /* report lines past CHECK_MAX_LINES */
    char first[768];
    int oom;
};

static void ck_line(struct ck *k, const char *line)
{
    if (k->first[0] == '\0')
        snprintf(k->first, sizeof(k->first), "%s", line);
    if (k->report != NULL && k->lines < CHECK_MAX_LINES && !k->oom) {
        if (fc_buf_printf(k->report, "%s\n", line) < 0)
            k->oom = 1;
        k->lines++;
    } else {
        k->dropped++;
    }
}

static void ck_problem(struct ck *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void ck_problem(struct ck *k, const char *fmt, ...)
{
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    ck_line(k, line);
    k->nproblems++;
}

/*
 * The geometry of one tensor's chunks: replicas (rank-local metadata lists a
 * replicated item once per rank) counted and set aside, the distinct boxes
 * proven to tile the tensor by fc_chunks_check_tiling().
 */
static int check_tensor(struct ck *k, const struct fc_dcp_entry *e)
{
    for (size_t c = 0; c < e->nchunks; c++) {
        if (e->chunks[c].storage.relative_path == NULL) {
            char dims[256];
            fmt_dims(dims, sizeof(dims), e->chunks[c].offsets, e->ndim);
            ck_problem(k, "tensor '%s': chunk %zu (offsets %s) has no storage", e->fqn, c, dims);
        }
    }
    struct fc_box *boxes = fc_calloc(e->nchunks + 1, sizeof(*boxes));
    size_t *first_of = fc_calloc(e->nchunks + 1, sizeof(*first_of));
    size_t nrep = 0, m = 0;
    int rc = FC_OK;
    if (boxes == NULL || first_of == NULL) {
        rc = fc_error_set(FC_ENOMEM, "dcp metadata: out of memory checking '%s'", e->fqn);
        goto done;
    }
    for (size_t c = 0; c < e->nchunks; c++)
        boxes[c] = (struct fc_box){e->chunks[c].offsets, e->chunks[c].sizes};
    FC_TRY_GOTO(fc_chunks_replicas(e->ndim, boxes, e->nchunks, first_of, &nrep), rc, done);
    k->replicas += nrep;
    for (size_t c = 0; c < e->nchunks; c++) {
        if (first_of[c] == c)
            boxes[m++] = boxes[c];
    }
    rc = fc_chunks_check_tiling(e->ndim, e->size, boxes, m, NULL, e->fqn);
    if (rc == FC_ECORRUPT) {
        ck_problem(k, "%s", fc_error_last());
        rc = FC_OK;
    }
done:
    fc_free(first_of);
    fc_free(boxes);
    return rc;
}

int fc_dcp_check(const struct fc_dcp_meta *m, struct fc_buf *report, size_t *replicas)
{
    struct ck k;
    memset(&k, 0, sizeof(k));
    k.report = report;
    if (replicas != NULL)
        *replicas = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct fc_dcp_entry *e = &m->entries[i];
        if (e->kind == FC_DCP_BYTES) {
            if (e->storage.relative_path == NULL)
                ck_problem(&k, "bytes entry '%s' has no storage", e->fqn);
            continue;
        }
        FC_TRY(check_tensor(&k, e));
    }
    if (k.report != NULL && k.dropped > 0 && !k.oom) {
        if (fc_buf_printf(k.report, "... and %zu more lines\n", k.dropped) < 0)
            k.oom = 1;
    }
    if (replicas != NULL)
        *replicas = k.replicas;
    if (k.oom)
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory writing the check report");
    if (k.nproblems > 0)
        return fc_error_set(FC_ECORRUPT, "dcp metadata: %zu coverage problem%s; first: %s",
                            k.nproblems, k.nproblems == 1 ? "" : "s", k.first);
    return FC_OK;
}
