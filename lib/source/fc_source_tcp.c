/*
 * fc_source_tcp.c - the torch_checkpointing backend: a directory with a
 * metadata.pkl (docs/torch-checkpointing.md).  Every tensor path of every item
 * the metadata describes is an entry keyed "<item>.<nested path>"; each rank's
 * unpadded local shard, found in that rank's file of the item (safetensors,
 * or a torch.save of DTensors), is a chunk at the box its placements give it
 * (fc_tcp_local_box()).  Replicas (HSDP, Replicate) are read from the lowest
 * rank holding them.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_chunks.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_safetensors.h"
#include "fc_source.h"
#include "fc_source_backend.h"
#include "fc_strmap.h"
#include "fc_tcp.h"
#include "fc_torchsave.h"

/* One tensor: its chunks (replicas removed), their boxes' numbers, and the read index. */
struct tcp_chunks {
    struct fc_chunk_ref *refs;
    struct fc_box *boxes;
    int64_t *dims;                  /* per chunk: ndim offsets then ndim sizes */
    struct fc_chunk_layout *layout; /* per chunk (torch.save views) */
    size_t n;
    struct fc_chunk_index *index;
    int untiled;
};

/* One opened (item, rank) file: its tensors by flattened name. */
struct tcp_file {
    size_t file; /* index into src->files */
    struct fc_safetensors *st;
    struct fc_torchsave *ts;
    struct fc_strmap names; /* name -> index (st tensors) or node list position (ts) */
    const struct fc_pv **ts_tensors;
    char **ts_names; /* their flattened names (the keys of names) */
    size_t nts;
};

struct tcp_source {
    struct fc_tcp_meta *m;
    struct tcp_chunks *chunked; /* per entry */
    struct tcp_file *files;
    size_t nfiles;
};

static void tcp_source_free(void *p)
{
    struct tcp_source *impl = p;
    if (impl == NULL)
        return;
    for (size_t i = 0; i < impl->nfiles; i++) {
        fc_safetensors_free(impl->files[i].st);
        fc_torchsave_free(impl->files[i].ts);
        fc_strmap_release(&impl->files[i].names);
        fc_free(impl->files[i].ts_tensors);
        for (size_t k = 0; k < impl->files[i].nts; k++)
            fc_free(impl->files[i].ts_names[k]);
        fc_free(impl->files[i].ts_names);
    }
    fc_free(impl->files);
    if (impl->chunked != NULL && impl->m != NULL) {
        size_t n = 0;
        for (size_t i = 0; i < impl->m->nitems; i++)
            n += impl->m->items[i].npaths;
        for (size_t i = 0; i < n; i++) {
            fc_free(impl->chunked[i].refs);
            fc_free(impl->chunked[i].boxes);
            fc_free(impl->chunked[i].dims);
            fc_free(impl->chunked[i].layout);
            fc_chunk_index_free(impl->chunked[i].index);
        }
    }
    fc_free(impl->chunked);
    fc_tcp_meta_free(impl->m);
    fc_free(impl);
}

/* ---- the rank files ---- */

/*
 * The tensors of a torch.save item file: a dict (the state dict) whose
 * leaves are tensors, flattened with '.' as the package's safetensors layout
 * and its nested paths flatten them.
 */
static int tcp_ts_walk(struct tcp_file *tf, const struct fc_pv *v, struct fc_buf *name,
                       const char *what)
{
    if (v->kind == FC_PV_TENSOR) {
        const struct fc_pv **t = fc_reallocarray(tf->ts_tensors, tf->nts + 1, sizeof(*t));
        if (t != NULL)
            tf->ts_tensors = t;
        char **n = t != NULL ? fc_reallocarray(tf->ts_names, tf->nts + 1, sizeof(*n)) : NULL;
        if (n != NULL)
            tf->ts_names = n;
        char *copy = n != NULL ? fc_strndup((const char *)name->data, name->len) : NULL;
        if (copy == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
        t[tf->nts] = v;
        n[tf->nts] = copy; /* the map borrows it */
        size_t existing;
        const int put = fc_strmap_put(&tf->names, copy, tf->nts++, &existing);
        if (put < 0)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
        if (put == 1)
            return fc_error_set(FC_ECORRUPT, "%s: two tensors flatten to '%s'", what, copy);
        return FC_OK;
    }
    if (v->kind != FC_PV_DICT && v->kind != FC_PV_LIST && v->kind != FC_PV_TUPLE)
        return FC_OK; /* a non-tensor leaf: the package keeps it for the load, not a chunk */
    const size_t n = v->kind == FC_PV_DICT ? v->u.dict.n : v->u.seq.n;
    const size_t base = name->len;
    for (size_t i = 0; i < n; i++) {
        name->len = base;
        if (base > 0)
            FC_TRY(fc_buf_putc(name, '.'));
        if (v->kind == FC_PV_DICT) {
            const struct fc_pv *k = v->u.dict.keys[i];
            if (k->kind == FC_PV_STR)
                FC_TRY(fc_buf_append(name, k->u.str.s, k->u.str.len));
            else if (k->kind == FC_PV_INT)
                FC_TRY(fc_buf_printf(name, "%" PRId64, k->u.i));
            else
                continue; /* not a key a nested path can name */
            FC_TRY(tcp_ts_walk(tf, v->u.dict.vals[i], name, what));
        } else {
            FC_TRY(fc_buf_printf(name, "%zu", i));
            FC_TRY(tcp_ts_walk(tf, v->u.seq.items[i], name, what));
        }
    }
    name->len = base;
    return FC_OK;
}

static int tcp_open_file(struct fc_source *src, const char *dir, const struct fc_tcp_file *f,
                         struct tcp_file *tf)
{
    char *path = fc_path_join(dir, f->name);
    if (path == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", dir);
    int rc = fc_source_add_file(src, path, &tf->file);
    if (rc == FC_ENOENT)
        rc = fc_error_set(FC_ECORRUPT, "%s: file '%s' named by %s is missing", dir, f->name,
                          FC_TCP_METADATA);
    if (rc < 0)
        goto done;
    const struct fc_file *file = &src->files[tf->file];
    if (f->safetensors) {
        FC_TRY_GOTO(fc_safetensors_open(&tf->st, file), rc, done);
        for (size_t i = 0; i < fc_safetensors_count(tf->st); i++) {
            size_t existing;
            const int put =
                fc_strmap_put(&tf->names, fc_safetensors_at(tf->st, i)->name, i, &existing);
            if (put < 0) {
                rc = fc_error_set(FC_ENOMEM, "%s: out of memory", path);
                goto done;
            }
        }
    } else {
        struct fc_buf name = FC_BUF_INIT(1 << 20);
        FC_TRY_GOTO(fc_torchsave_open_dtensor(&tf->ts, file, 0, file->size, path), rc, done);
        rc = tcp_ts_walk(tf, fc_torchsave_root(tf->ts), &name, path);
        fc_buf_release(&name);
    }
done:
    fc_free(path);
    return rc;
}

/*
 * Rank `rank`'s stored local tensor `name` (the nested path) in tf as a chunk
 * of entry e at box off/size: dtype and shape must be the box's.
 */
static int tcp_chunk_from(const struct fc_source *src, const struct tcp_file *tf,
                          const struct fc_entry *e, const char *name, const int64_t *size,
                          struct fc_chunk_ref *ref, struct fc_chunk_layout *layout)
{
    const char *path = src->files[tf->file].path;
    size_t i;
    if (fc_strmap_get(&tf->names, name, &i) != 1)
        return fc_error_set(FC_ECORRUPT,
                            "%s: has no tensor '%s' (metadata.pkl says this rank "
                            "holds a shard of '%s')",
                            path, name, e->key);
    struct fc_tensor_desc d;
    memset(&d, 0, sizeof(d));
    uint64_t base;
    if (tf->st != NULL) {
        const struct fc_st_tensor *t = fc_safetensors_at(tf->st, i);
        d.dtype = t->dtype;
        d.ndim = t->ndim;
        memcpy(d.shape, t->shape, sizeof(d.shape));
        fc_tensor_set_contiguous(&d);
        base = t->data_offset;
    } else {
        const struct fc_pv_tensor *t = &tf->ts_tensors[i]->u.tensor;
        d = t->desc;
        base = fc_torchsave_storage_at(tf->ts, fc_torchsave_storage_index(tf->ts, t))->data_offset;
    }
    int same = d.dtype == e->t.dtype && d.ndim == e->t.ndim;
    for (int k = 0; same && k < d.ndim; k++)
        same = d.shape[k] == size[k];
    if (!same) {
        struct fc_buf want = FC_BUF_INIT(4096), got = FC_BUF_INIT(4096);
        int rc = fc_dims_format(&want, e->t.ndim, size);
        if (rc == FC_OK)
            rc = fc_dims_format(&got, d.ndim, d.shape);
        if (rc == FC_OK)
            rc = fc_error_set(FC_ECORRUPT,
                              "%s: tensor '%s' is %s %.*s, but its placements give "
                              "this rank a %s %.*s shard of '%s'",
                              path, name, fc_dtype_name(d.dtype), (int)got.len, got.data,
                              fc_dtype_name(e->t.dtype), (int)want.len, want.data, e->key);
        fc_buf_release(&want);
        fc_buf_release(&got);
        return rc;
    }
    memset(ref, 0, sizeof(*ref));
    ref->file = (uint32_t)tf->file;
    ref->base = base;
    struct fc_tensor_desc dense = d;
    fc_tensor_set_contiguous(&dense);
    dense.storage_offset = 0;
    if (memcmp(&dense, &d, sizeof(d)) != 0) {
        layout->desc = d;
        ref->layout = layout;
    }
    return FC_OK;
}

/* ---- entries and chunks ---- */

static int tcp_add_entry(struct fc_source *src, const struct fc_tcp_path *p)
{
    const struct fc_tcp_group *g = &p->groups[0];
    struct fc_entry e;
    memset(&e, 0, sizeof(e));
    e.kind = FC_ENTRY_TENSOR;
    e.t.dtype = g->dtype;
    e.t.ndim = g->ndim;
    memcpy(e.t.shape, g->shape, sizeof(g->shape));
    fc_tensor_set_contiguous(&e.t);
    e.storage = SIZE_MAX;
    struct fc_path_elem *elems = fc_calloc(p->nelems, sizeof(*elems));
    char *key = fc_strdup(p->key);
    int ok = elems != NULL && key != NULL;
    for (size_t i = 0; ok && i < p->nelems; i++) {
        elems[i] = p->elems[i];
        if (!elems[i].is_index)
            ok = (elems[i].key = fc_strdup(p->elems[i].key)) != NULL;
    }
    if (!ok) {
        for (size_t i = 0; elems != NULL && i < p->nelems; i++)
            fc_free((void *)(uintptr_t)elems[i].key);
        fc_free(elems);
        fc_free(key);
        return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
    }
    e.key = key;
    e.path = elems;
    e.path_len = p->nelems;
    return fc_source_add_entry(src, &e);
}

/* The nested path of p as the rank files name it: its elements after the item, '.'-joined. */
static const char *tcp_local_name(const struct fc_tcp_path *p)
{
    return p->key + strlen(p->elems[0].key) + 1;
}

static int tcp_grow(struct tcp_chunks *c, size_t cap, int ndim)
{
    struct fc_chunk_ref *r = fc_reallocarray(c->refs, cap, sizeof(*r));
    if (r != NULL)
        c->refs = r;
    int64_t *d = r != NULL
                     ? fc_reallocarray(c->dims, cap, 2 * (size_t)(ndim > 0 ? ndim : 1) * sizeof(*d))
                     : NULL;
    if (d != NULL)
        c->dims = d;
    struct fc_chunk_layout *l = d != NULL ? fc_reallocarray(c->layout, cap, sizeof(*l)) : NULL;
    if (l != NULL)
        c->layout = l;
    return l != NULL ? FC_OK : FC_ENOMEM;
}

/* Every non-empty shard of path p (item it) as a chunk of entry ei. */
static int tcp_path_chunks(struct fc_source *src, const char *dir, struct tcp_file **files,
                           const struct fc_tcp_item *it, const struct fc_tcp_path *p, size_t ei,
                           unsigned flags)
{
    struct tcp_source *impl = src->impl;
    struct tcp_chunks *c = &impl->chunked[ei];
    const struct fc_entry *e = &src->entries[ei];
    const int nd = e->t.ndim, w = nd > 0 ? nd : 1;
    size_t cap = 0;
    for (size_t g = 0; g < p->ngroups; g++) {
        const struct fc_tcp_group *grp = &p->groups[g];
        for (size_t k = 0; k < grp->nranks; k++) {
            const int64_t rank = grp->ranks[k];
            int64_t off[FC_MAX_DIMS], size[FC_MAX_DIMS];
            FC_TRY(fc_tcp_local_box(grp, rank, off, size, src->path, e->key));
            int empty = 0;
            for (int d = 0; d < nd; d++)
                empty |= size[d] == 0;
            if (empty)
                continue; /* an uneven split's empty shard: nothing stored, nothing to cover */
            if (files[rank] == NULL) {
                struct tcp_file *tf = &impl->files[impl->nfiles];
                memset(tf, 0, sizeof(*tf));
                impl->nfiles++;
                FC_TRY(tcp_open_file(src, dir, &it->files[rank], tf));
                files[rank] = tf;
            }
            if (c->n == cap) {
                cap = cap == 0 ? 4 : 2 * cap;
                if (tcp_grow(c, cap, nd) < 0)
                    return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
            }
            int64_t *dims = &c->dims[c->n * 2 * (size_t)w];
            memcpy(dims, off, (size_t)nd * sizeof(*off));
            memcpy(dims + w, size, (size_t)nd * sizeof(*size));
            FC_TRY(tcp_chunk_from(src, files[rank], e, tcp_local_name(p), size, &c->refs[c->n],
                                  &c->layout[c->n]));
            c->n++;
        }
    }
    /* Boxes point into dims and refs into layout only now that neither moves again. */
    c->boxes = fc_calloc(c->n + 1, sizeof(*c->boxes));
    size_t *first = fc_calloc(c->n + 1, sizeof(*first));
    int rc = FC_OK;
    if (c->boxes == NULL || first == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
        goto done;
    }
    for (size_t i = 0; i < c->n; i++) {
        c->boxes[i] =
            (struct fc_box){&c->dims[i * 2 * (size_t)w], &c->dims[i * 2 * (size_t)w + (size_t)w]};
        if (c->refs[i].layout != NULL)
            c->refs[i].layout = &c->layout[i];
    }
    size_t nrep;
    FC_TRY_GOTO(fc_chunks_replicas(nd, c->boxes, c->n, first, &nrep), rc, done);
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (first[i] != i)
            continue; /* a replica: the first rank's copy is read */
        c->refs[k] = c->refs[i];
        c->boxes[k] = c->boxes[i];
        k++;
    }
    c->n = k;
    rc = fc_chunks_index_tiled(src, e, nd, c->boxes, c->n, flags, &c->index, &c->untiled);
done:
    fc_free(first);
    return rc;
}

static int tcp_read_box(const struct fc_source *src, const struct fc_entry *e, const int64_t *off,
                        const int64_t *size, void *dst)
{
    const struct tcp_source *impl = src->impl;
    const struct tcp_chunks *c = &impl->chunked[e - src->entries];
    if (c->untiled)
        return fc_error_set(FC_ECORRUPT, "%s: the shards of '%s' do not tile it", src->path,
                            e->key);
    /* No CRC-32s: neither safetensors nor the torch.save records carry one we check. */
    return fc_chunks_read_box(src, e, c->refs, c->boxes, c->index, NULL, off, size, dst);
}

static int tcp_open(struct fc_source **out, struct fc_probe *p, unsigned flags)
{
    struct tcp_source *impl = fc_calloc(1, sizeof(*impl));
    FC_TRY(fc_source_new(out, p->path, &fc_source_tcp_backend, impl));
    struct fc_source *src = *out;
    FC_TRY(fc_tcp_meta_load(&impl->m, p->path));
    const struct fc_tcp_meta *m = impl->m;
    size_t npaths = 0;
    for (size_t i = 0; i < m->nitems; i++)
        npaths += m->items[i].npaths;
    impl->chunked = fc_calloc(npaths + 1, sizeof(*impl->chunked));
    impl->files = fc_calloc(m->nitems * (size_t)m->world_size + 1, sizeof(*impl->files));
    struct tcp_file **files = fc_calloc((size_t)m->world_size, sizeof(*files));
    struct tcp_file **rank0 = fc_calloc(m->nitems + 1, sizeof(*rank0));
    int rc = FC_OK;
    if (impl->chunked == NULL || impl->files == NULL || files == NULL || rank0 == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", p->path);
        goto done;
    }
    for (size_t i = 0; i < m->nitems; i++)
        for (size_t k = 0; k < m->items[i].npaths; k++)
            FC_TRY_GOTO(tcp_add_entry(src, &m->items[i].paths[k]), rc, done);
    /* Then the values the items' torch.save files hold (rank 0's), after every tensor. */
    for (size_t i = 0; i < m->nitems; i++) {
        if (m->items[i].files[0].safetensors)
            continue;
        struct tcp_file *tf = &impl->files[impl->nfiles++];
        rank0[i] = tf;
        FC_TRY_GOTO(tcp_open_file(src, p->path, &m->items[i].files[0], tf), rc, done);
        /* the package writes every rank's the same: an optimizer's param_groups, ... */
        FC_TRY_GOTO(fc_source_flatten(src, tf->ts, m->items[i].name, 1), rc, done);
    }
    FC_TRY_GOTO(fc_source_index_keys(src), rc, done);
    size_t ei = 0;
    for (size_t i = 0; i < m->nitems; i++) {
        memset(files, 0, (size_t)m->world_size * sizeof(*files));
        files[0] = rank0[i];
        for (size_t k = 0; k < m->items[i].npaths; k++, ei++)
            FC_TRY_GOTO(tcp_path_chunks(src, p->path, files, &m->items[i], &m->items[i].paths[k],
                                        ei, flags),
                        rc, done);
    }
done:
    fc_free(files);
    fc_free(rank0);
    return rc;
}

/* Its chunks as DCP metadata, so that inspect shows and checks them as a DCP's. */
static int tcp_sharded_meta(const struct fc_source *src, struct fc_dcp_meta **out)
{
    const struct tcp_source *impl = src->impl;
    struct fc_dcp_meta *m = NULL;
    int rc;
    *out = NULL;
    FC_TRY(fc_dcp_meta_new(&m));
    FC_TRY_GOTO(fc_dcp_meta_set_version(m, "2.0"), rc, done); /* the metadata.pkl version read */
    for (size_t i = 0; i < src->nentries; i++) {
        const struct fc_entry *e = &src->entries[i];
        const struct tcp_chunks *c = &impl->chunked[i];
        if (e->kind != FC_ENTRY_TENSOR)
            break; /* the values come after every tensor */
        FC_TRY_GOTO(fc_dcp_meta_add_tensor(m, e->key, e->t.dtype, e->t.ndim, e->t.shape, NULL), rc,
                    done);
        for (size_t k = 0; k < c->n; k++) {
            const char *path = src->files[c->refs[k].file].path;
            const char *rel = path + strlen(src->path);
            while (*rel == '/')
                rel++;
            int64_t numel = 1;
            for (int d = 0; d < e->t.ndim; d++)
                numel *= c->boxes[k].sizes[d];
            size_t ci;
            FC_TRY_GOTO(fc_dcp_meta_add_chunk(m, i, c->boxes[k].offsets, c->boxes[k].sizes, &ci),
                        rc, done);
            FC_TRY_GOTO(fc_dcp_storage_set(m, &m->entries[i].chunks[ci].storage, rel,
                                           c->refs[k].base,
                                           (uint64_t)numel * fc_dtype_size(e->t.dtype)),
                        rc, done);
        }
    }
    *out = m;
    return FC_OK;
done:
    fc_dcp_meta_free(m);
    return rc;
}

/* A value's blob is a fresh pickle of it: the rank files hold no item of its own. */
static int tcp_value_blob(const struct fc_source *src, const struct fc_entry *e, struct fc_buf *out)
{
    (void)src;
    return fc_torchsave_value_blob(out, e->value);
}

/* A directory holding metadata.pkl. */
static int tcp_probe(struct fc_probe *p)
{
    return p->is_dir && fc_tcp_is_dir(p->path);
}

const struct fc_source_backend fc_source_tcp_backend = {
    .name = "torch-checkpointing",
    .caps = FC_SOURCE_CHUNKS | FC_SOURCE_LISTED | FC_SOURCE_VALUES,
    .probe = tcp_probe,
    .open = tcp_open,
    .read_box = tcp_read_box,
    .value_blob = tcp_value_blob,
    .sharded_meta = tcp_sharded_meta,
    .free = tcp_source_free,
};
