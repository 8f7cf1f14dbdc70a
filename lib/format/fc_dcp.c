/*
 * fc_dcp.c - the DCP .metadata model: its memory (interned names, the dims
 * store) and the functions that build it.  The writer, reader and coverage
 * check are fc_dcp_write.c, fc_dcp_read.c and fc_dcp_check.c.
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
/* model: memory                                                            */

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

int fc_dcp_add_entry(struct fc_dcp_meta *m, const char *fqn, size_t fqn_len, enum fc_dcp_kind kind,
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
    FC_TRY(fc_dcp_add_entry(m, fqn, strlen(fqn), FC_DCP_TENSOR, &idx));
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
    return fc_dcp_add_entry(m, fqn, strlen(fqn), FC_DCP_BYTES, index_out);
}

/* Room for n chunks in e (the reader knows each tensor's count: no doubling slack). */
int fc_dcp_reserve_chunks(struct fc_dcp_entry *e, size_t n)
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
int fc_dcp_entry_add_chunk(struct fc_dcp_meta *m, struct fc_dcp_entry *e, const int64_t *offsets,
                           const int64_t *sizes, size_t *chunk_out)
{
    for (int d = 0; d < e->ndim; d++)
        if (offsets[d] < 0 || sizes[d] < 0)
            return fc_error_set(FC_EINVAL,
                                "dcp metadata: tensor '%s': negative chunk offset "
                                "or size in dim %d",
                                e->fqn, d);
    if (e->nchunks == e->chunks_alloc)
        FC_TRY(fc_dcp_reserve_chunks(e, e->chunks_alloc == 0 ? 4 : e->chunks_alloc * 2));
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
    return fc_dcp_entry_add_chunk(m, &m->entries[entry], offsets, sizes, chunk_out);
}

/* A relative_path must name a file inside the checkpoint directory. */
int fc_dcp_bad_relative_path(const char *p)
{
    return p[0] == '\0' || strchr(p, '/') != NULL || strcmp(p, ".") == 0 || strcmp(p, "..") == 0;
}

int fc_dcp_storage_set(struct fc_dcp_meta *m, struct fc_dcp_storage *st, const char *relative_path,
                       uint64_t offset, uint64_t length)
{
    size_t k;
    if (relative_path == NULL || fc_dcp_bad_relative_path(relative_path))
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
int fc_dcp_set_str(char **dst, const char *src)
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
    FC_TRY(fc_dcp_set_str(&cid, checkpoint_id));
    const int rc = fc_dcp_set_str(&m->save_id, save_id);
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
    return fc_dcp_set_str(&m->version, version);
}
