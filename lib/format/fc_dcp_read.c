/*
 * fc_dcp_read.c - the .metadata pickle read into a model.
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
#include "fc_dcp_internal.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_pickle.h"
#include "fc_sort.h"
#include "fc_strmap.h"

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
    FC_TRY(fc_dcp_reserve_chunks(e, f->u.seq.n));
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
        FC_TRY(fc_dcp_entry_add_chunk(m, e, off, sz, NULL));
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
    FC_TRY(fc_dcp_add_entry(r->m, k->u.str.s, k->u.str.len, FC_DCP_TENSOR, idx));
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
        return fc_dcp_add_entry(m, k->u.str.s, k->u.str.len, FC_DCP_BYTES, &idx);
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
        FC_TRY(fc_dcp_add_entry(m, k->u.str.s, k->u.str.len, FC_DCP_TENSOR, &idx));
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
        FC_TRY(fc_dcp_set_str(&m->checkpoint_id, x->u.str.s));
    } else if (x != NULL && x->kind == FC_PV_CALL) {
        FC_TRY(path_string(x, &m->checkpoint_id));
        m->checkpoint_id_was_path = m->checkpoint_id != NULL;
    }
    x = dget(st, "save_id");
    if (is_str(x))
        FC_TRY(fc_dcp_set_str(&m->save_id, x->u.str.s));
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
    if (fc_dcp_bad_relative_path(x->u.str.s))
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

void fc_dcp_fmt_dims(char *buf, size_t size, const int64_t *v, int n)
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
                fc_dcp_fmt_dims(dims, sizeof(dims), e->chunks[c].offsets, e->ndim);
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
        FC_TRY_GOTO(fc_dcp_set_str(&r.m->version, x->u.str.s), rc, done);
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
