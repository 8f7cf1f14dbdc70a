/*
 * fc_torchsave.c - torch.save archives: detection, the reader (zip + weights-
 * only pickle + storage table), and the writers of one-tensor and one-value
 * blobs (input-formats.md A.1-A.6, A.10, A.11; dcp-format.md 3.1-3.3).
 *
 * The reader walks the unpickled DAG once per node (a memo can share a
 * subtree many times; walking it as a tree could take exponential time), so a
 * tensor node referenced twice is one reference, and two tensor nodes naming
 * the same storage key are two.
 */
#include "fc_torchsave.h"

#include <inttypes.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_endian.h"
#include "fc_error.h"

/* data.pkl larger than this is refused (a state dict pickle is ~200 bytes per tensor). */
#define TS_PKL_CAP ((size_t)1 << 30)
/* version / byteorder records are a few bytes. */
#define TS_SMALL_CAP 64

/* Open-addressing hash set/map of pointers or strings -> index. */
struct ts_map {
    size_t *slots; /* index + 1, 0 = empty */
    size_t cap;    /* power of two */
    size_t n;
};

struct fc_torchsave {
    struct fc_zip_reader *zr;
    struct fc_pickle *pk;
    char *what;
    struct fc_ts_storage *st;
    size_t nst;
    size_t st_alloc;
    struct ts_map st_map; /* storage key -> index in st */
};

/* ---------------------------------------------------------------------------------------- */
/* Detection                                                                                */

static const unsigned char ts_magic_long1[12] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                                 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
/* The same magic number as protocol 0/1 write it (LONG opcode, decimal text). */
static const char ts_magic_text[] = "L119547037146038801333356L\n";

static int ts_is_legacy_pickle(const unsigned char *h, size_t n)
{
    size_t p = 0;
    if (n >= sizeof(ts_magic_text) - 1 && memcmp(h, ts_magic_text, sizeof(ts_magic_text) - 1) == 0)
        return 1;
    if (n < 2 || h[0] != 0x80 || h[1] < 2 || h[1] > 5)
        return 0;
    p = 2;
    if (n >= p + 9 && h[p] == 0x95) /* FRAME (protocol 4+) */
        p += 9;
    return n >= p + sizeof(ts_magic_long1) &&
           memcmp(h + p, ts_magic_long1, sizeof(ts_magic_long1)) == 0;
}

enum fc_ts_kind fc_torchsave_detect(const unsigned char *head, size_t n, uint64_t file_size)
{
    if (n >= 4 && memcmp(head, "PK\003\004", 4) == 0)
        return FC_TS_ZIP;
    if (n >= 8 && memcmp(head, "PYTORCH1", 8) == 0)
        return FC_TS_PREVIEW;
    if (ts_is_legacy_pickle(head, n))
        return FC_TS_LEGACY_PICKLE;
    if (n >= 262 && memcmp(head + 257, "ustar", 5) == 0)
        return FC_TS_LEGACY_TAR;
    if (n >= 9 && head[8] == '{') {
        const uint64_t hlen = fc_read_le64(head);
        if (hlen >= 2 && file_size >= 8 && hlen <= file_size - 8)
            return FC_TS_SAFETENSORS;
    }
    return FC_TS_UNKNOWN;
}

/* ---------------------------------------------------------------------------------------- */
/* Hash maps                                                                                */

static uint64_t ts_hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint64_t ts_hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static void ts_map_release(struct ts_map *m)
{
    fc_free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

/*
 * Find the slot for an item: returns the slot index; *found says whether it
 * holds a match.  eq(i) compares item index i with the probe.
 */
typedef int (*ts_eq_fn)(const void *ctx, size_t idx, const void *key);

static size_t ts_map_probe(const struct ts_map *m, uint64_t h, ts_eq_fn eq, const void *ctx,
                           const void *key, int *found)
{
    size_t i = (size_t)h & (m->cap - 1);
    for (;;) {
        const size_t v = m->slots[i];
        if (v == 0) {
            *found = 0;
            return i;
        }
        if (eq(ctx, v - 1, key)) {
            *found = 1;
            return i;
        }
        i = (i + 1) & (m->cap - 1);
    }
}

/* Grow so that one more item keeps the load at or below 1/2; rehash with hash_of(idx). */
typedef uint64_t (*ts_hash_idx_fn)(const void *ctx, size_t idx);

static int ts_map_reserve(struct ts_map *m, const void *ctx, ts_hash_idx_fn hash_of)
{
    if (m->cap != 0 && (m->n + 1) * 2 <= m->cap)
        return FC_OK;
    const size_t ncap = m->cap == 0 ? 64 : m->cap * 2;
    size_t *ns = fc_calloc(ncap, sizeof(*ns));
    if (ns == NULL)
        return FC_ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        const size_t v = m->slots[i];
        if (v == 0)
            continue;
        size_t j = (size_t)hash_of(ctx, v - 1) & (ncap - 1);
        while (ns[j] != 0)
            j = (j + 1) & (ncap - 1);
        ns[j] = v;
    }
    fc_free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return FC_OK;
}

/* Storage map: items are ts->st[i], keyed by ->key. */
static int ts_st_eq(const void *ctx, size_t idx, const void *key)
{
    const struct fc_torchsave *ts = ctx;
    return strcmp(ts->st[idx].key, key) == 0;
}

static uint64_t ts_st_hash(const void *ctx, size_t idx)
{
    const struct fc_torchsave *ts = ctx;
    return ts_hash_str(ts->st[idx].key);
}

/* Index of the storage named key, or SIZE_MAX. */
static size_t ts_st_find(const struct fc_torchsave *ts, const char *key)
{
    int found = 0;
    if (ts->st_map.cap == 0)
        return SIZE_MAX;
    const size_t slot = ts_map_probe(&ts->st_map, ts_hash_str(key), ts_st_eq, ts, key, &found);
    return found ? ts->st_map.slots[slot] - 1 : SIZE_MAX;
}

/* Visited set of nodes: items are nodes[i]. */
struct ts_walk {
    const struct fc_pv **nodes; /* every node seen, in first-visit order */
    size_t n;
    size_t alloc;
    struct ts_map seen;
};

static int ts_node_eq(const void *ctx, size_t idx, const void *key)
{
    const struct ts_walk *w = ctx;
    return w->nodes[idx] == key;
}

static uint64_t ts_node_hash(const void *ctx, size_t idx)
{
    const struct ts_walk *w = ctx;
    return ts_hash_ptr(w->nodes[idx]);
}

/* Add v to the visited set; *is_new is 1 the first time. */
static int ts_walk_mark(struct ts_walk *w, const struct fc_pv *v, int *is_new)
{
    int found = 0;
    *is_new = 0;
    if (w->seen.cap != 0) {
        (void)ts_map_probe(&w->seen, ts_hash_ptr(v), ts_node_eq, w, v, &found);
        if (found)
            return FC_OK;
    }
    if (ts_map_reserve(&w->seen, w, ts_node_hash) != FC_OK)
        return FC_ENOMEM;
    if (w->n == w->alloc) {
        const size_t na = w->alloc == 0 ? 64 : w->alloc * 2;
        const struct fc_pv **nn = fc_reallocarray(w->nodes, na, sizeof(*nn));
        if (nn == NULL)
            return FC_ENOMEM;
        w->nodes = nn;
        w->alloc = na;
    }
    w->nodes[w->n] = v;
    const size_t slot = ts_map_probe(&w->seen, ts_hash_ptr(v), ts_node_eq, w, v, &found);
    w->seen.slots[slot] = ++w->n;
    w->seen.n++;
    *is_new = 1;
    return FC_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Reader                                                                                   */

void fc_torchsave_free(struct fc_torchsave *ts)
{
    if (ts == NULL)
        return;
    fc_zip_reader_free(ts->zr);
    fc_pickle_free(ts->pk);
    fc_free(ts->what);
    fc_free(ts->st);
    ts_map_release(&ts->st_map);
    fc_free(ts);
}

const struct fc_pv *fc_torchsave_root(const struct fc_torchsave *ts)
{
    return fc_pickle_root(ts->pk);
}

size_t fc_torchsave_storage_count(const struct fc_torchsave *ts)
{
    return ts->nst;
}

const struct fc_ts_storage *fc_torchsave_storage_at(const struct fc_torchsave *ts, size_t i)
{
    return i < ts->nst ? &ts->st[i] : NULL;
}

size_t fc_torchsave_storage_index(const struct fc_torchsave *ts, const struct fc_pv_tensor *t)
{
    return ts_st_find(ts, t->storage_key);
}

const struct fc_zip_reader *fc_torchsave_zip(const struct fc_torchsave *ts)
{
    return ts->zr;
}

/* Refuse the formats torch.save wrote before 1.6, and anything else we recognise. */
static int ts_check_kind(const struct fc_file *f, uint64_t base, uint64_t len, const char *what)
{
    unsigned char head[512];
    const size_t n = (size_t)(len < sizeof(head) ? len : sizeof(head));
    FC_TRY(fc_file_pread(f, head, n, base));
    switch (fc_torchsave_detect(head, n, len)) {
    case FC_TS_ZIP: return FC_OK;
    case FC_TS_LEGACY_PICKLE:
        return fc_error_set(FC_EFORMAT,
                            "%s: legacy (pre-1.6) torch.save format; re-save it with "
                            "torch.save on torch >= 1.6",
                            what);
    case FC_TS_LEGACY_TAR:
        return fc_error_set(FC_EFORMAT,
                            "%s: legacy tar torch.save format; re-save it with "
                            "torch.save on torch >= 1.6",
                            what);
    case FC_TS_PREVIEW:
        return fc_error_set(FC_EFORMAT,
                            "%s: PYTORCH1 archive from a preview release of torch; "
                            "not supported",
                            what);
    case FC_TS_SAFETENSORS:
        return fc_error_set(FC_EFORMAT, "%s: a safetensors file, not a torch.save archive", what);
    case FC_TS_UNKNOWN:
    default: break;
    }
    return fc_error_set(FC_EFORMAT, "%s: not a torch.save archive (unrecognised first bytes)",
                        what);
}

/* `version` (or `.data/version`) must be a decimal integer in [1, 10]. */
static int ts_check_version(struct fc_torchsave *ts)
{
    const struct fc_zip_entry *e = fc_zip_find(ts->zr, "version");
    unsigned char *v = NULL;
    uint64_t num = 0;
    size_t i = 0;
    int rc = FC_OK;
    if (e == NULL)
        e = fc_zip_find(ts->zr, ".data/version");
    if (e == NULL)
        return fc_error_set(FC_ECORRUPT, "%s: no version record", ts->what);
    FC_TRY(fc_zip_read_record(ts->zr, e, TS_SMALL_CAP, &v));
    const size_t n = (size_t)e->size;
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
        i++;
    const size_t digits = i;
    while (i < n && v[i] >= '0' && v[i] <= '9') {
        if (num <= 10)
            num = num * 10 + (uint64_t)(v[i] - '0'); /* saturates above 10 */
        i++;
    }
    const int have_digits = i > digits;
    while (i < n && (v[i] == '\n' || v[i] == '\r' || v[i] == ' ' || v[i] == '\t'))
        i++;
    if (!have_digits || i != n)
        rc = fc_error_set(FC_ECORRUPT, "%s: record '%s' is not a decimal version number", ts->what,
                          e->record);
    else if (num < 1 || num > 10)
        rc = fc_error_set(FC_EFORMAT,
                          "%s: unsupported archive version %s%" PRIu64 " (torch "
                          "reads 1 to 10)",
                          ts->what, num > 10 ? "above " : "", num > 10 ? (uint64_t)10 : num);
    fc_free(v);
    return rc;
}

static int ts_check_byteorder(struct fc_torchsave *ts)
{
    const struct fc_zip_entry *e = fc_zip_find(ts->zr, "byteorder");
    unsigned char *v = NULL;
    int rc = FC_OK;
    if (e == NULL)
        return FC_OK; /* absent: little-endian (torch >= 2.1 reads it so) */
    FC_TRY(fc_zip_read_record(ts->zr, e, TS_SMALL_CAP, &v));
    if (e->size == 6 && memcmp(v, "little", 6) == 0)
        rc = FC_OK;
    else if (e->size == 3 && memcmp(v, "big", 3) == 0)
        rc = fc_error_set(FC_EFORMAT,
                          "%s: big-endian archive (byteorder 'big') is not "
                          "supported",
                          ts->what);
    else
        rc = fc_error_set(FC_ECORRUPT, "%s: record 'byteorder' is neither 'little' nor 'big'",
                          ts->what);
    fc_free(v);
    return rc;
}

/* Push the children of v on the walk stack (reverse order, so they pop in order). */
static int ts_push(const struct fc_pv ***stack, size_t *n, size_t *alloc, const struct fc_pv *v)
{
    if (v == NULL)
        return FC_OK;
    if (*n == *alloc) {
        const size_t na = *alloc == 0 ? 64 : *alloc * 2;
        const struct fc_pv **ns = fc_reallocarray(*stack, na, sizeof(*ns));
        if (ns == NULL)
            return FC_ENOMEM;
        *stack = ns;
        *alloc = na;
    }
    (*stack)[(*n)++] = v;
    return FC_OK;
}

static int ts_push_children(const struct fc_pv ***stack, size_t *n, size_t *alloc,
                            const struct fc_pv *v)
{
    switch (v->kind) {
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET:
        for (size_t i = v->u.seq.n; i > 0; i--)
            FC_TRY(ts_push(stack, n, alloc, v->u.seq.items[i - 1]));
        return FC_OK;
    case FC_PV_DICT:
        FC_TRY(ts_push(stack, n, alloc, v->u.dict.state));
        for (size_t i = v->u.dict.n; i > 0; i--) {
            FC_TRY(ts_push(stack, n, alloc, v->u.dict.vals[i - 1]));
            FC_TRY(ts_push(stack, n, alloc, v->u.dict.keys[i - 1]));
        }
        return FC_OK;
    case FC_PV_CALL:
    case FC_PV_OBJECT:
        FC_TRY(ts_push(stack, n, alloc, v->u.call.state));
        FC_TRY(ts_push(stack, n, alloc, v->u.call.args));
        return ts_push(stack, n, alloc, v->u.call.callable);
    case FC_PV_NONE:
    case FC_PV_BOOL:
    case FC_PV_INT:
    case FC_PV_BIGINT:
    case FC_PV_FLOAT:
    case FC_PV_STR:
    case FC_PV_BYTES:
    case FC_PV_GLOBAL:
    case FC_PV_TENSOR:
    default: return FC_OK;
    }
}

/* The view's extent must lie inside its storage (torch's set_ check). */
static int ts_check_extent(const struct fc_torchsave *ts, const struct fc_pv *node,
                           const struct fc_ts_storage *s)
{
    const struct fc_pv_tensor *t = &node->u.tensor;
    const struct fc_tensor_desc *d = &t->desc;
    const size_t es = fc_dtype_size(d->dtype);
    int64_t numel = 0, last = d->storage_offset;
    if (d->ndim < 0 || d->ndim > FC_MAX_DIMS || fc_shape_numel(d->shape, d->ndim, &numel) != 0)
        return fc_error_set(FC_ECORRUPT,
                            "%s: data.pkl offset %" PRIu64 ": tensor on storage '%s'"
                            " has a bad shape",
                            ts->what, (uint64_t)node->offset, t->storage_key);
    if (d->storage_offset < 0)
        return fc_error_set(FC_ECORRUPT,
                            "%s: data.pkl offset %" PRIu64 ": tensor on storage '%s'"
                            " has a negative storage offset",
                            ts->what, (uint64_t)node->offset, t->storage_key);
    if (numel == 0)
        return FC_OK;
    for (int i = 0; i < d->ndim; i++) {
        int64_t step = 0;
        if (d->stride[i] < 0)
            return fc_error_set(FC_ECORRUPT,
                                "%s: data.pkl offset %" PRIu64 ": tensor on "
                                "storage '%s' has a negative stride",
                                ts->what, (uint64_t)node->offset, t->storage_key);
        if (fc_mul_i64(d->shape[i] - 1, d->stride[i], &step) != 0 ||
            fc_add_i64(last, step, &last) != 0)
            return fc_error_set(FC_ECORRUPT,
                                "%s: data.pkl offset %" PRIu64 ": tensor on "
                                "storage '%s': extent overflows",
                                ts->what, (uint64_t)node->offset, t->storage_key);
    }
    const uint64_t elems = s->nbytes / es;
    if ((uint64_t)last >= elems)
        return fc_error_set(FC_ECORRUPT,
                            "%s: data.pkl offset %" PRIu64 ": tensor view (offset %" PRId64
                            ", last element %" PRId64 ") lies outside storage '%s' of %" PRIu64
                            " %s elements",
                            ts->what, (uint64_t)node->offset, d->storage_offset, last,
                            t->storage_key, elems, fc_dtype_name(d->dtype));
    return FC_OK;
}

/* Enter one tensor node in the storage table. */
static int ts_add_tensor(struct fc_torchsave *ts, const struct fc_pv *node)
{
    const struct fc_pv_tensor *t = &node->u.tensor;
    const fc_dtype dt = t->desc.dtype;
    const size_t es = fc_dtype_size(dt);
    uint64_t nbytes = t->storage_numel;
    size_t idx;

    if (es == 0)
        return fc_error_set(FC_ECORRUPT,
                            "%s: data.pkl offset %" PRIu64 ": tensor without a "
                            "dtype",
                            ts->what, (uint64_t)node->offset);
    if (!t->untyped_storage) {
        const size_t ses = fc_dtype_size(t->storage_dtype);
        if (t->storage_dtype != dt)
            return fc_error_set(FC_ECORRUPT,
                                "%s: data.pkl offset %" PRIu64 ": %s tensor on a "
                                "%s storage '%s'",
                                ts->what, (uint64_t)node->offset, fc_dtype_name(dt),
                                fc_dtype_name(t->storage_dtype), t->storage_key);
        if (fc_mul_u64(t->storage_numel, ses, &nbytes) != 0)
            return fc_error_set(FC_ECORRUPT,
                                "%s: data.pkl offset %" PRIu64 ": storage '%s' "
                                "size overflows",
                                ts->what, (uint64_t)node->offset, t->storage_key);
    } else if (nbytes % es != 0) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: data.pkl offset %" PRIu64 ": untyped storage '%s' "
                            "of %" PRIu64 " bytes does not hold whole %s elements",
                            ts->what, (uint64_t)node->offset, t->storage_key, nbytes,
                            fc_dtype_name(dt));
    }

    idx = ts_st_find(ts, t->storage_key);
    if (idx != SIZE_MAX) {
        struct fc_ts_storage *s = &ts->st[idx];
        if (s->dtype != dt || s->nbytes != nbytes)
            return fc_error_set(FC_ECORRUPT,
                                "%s: data.pkl offset %" PRIu64 ": storage '%s' is "
                                "used as %s (%" PRIu64 " bytes) and as %s (%" PRIu64 " bytes)",
                                ts->what, (uint64_t)node->offset, t->storage_key,
                                fc_dtype_name(s->dtype), s->nbytes, fc_dtype_name(dt), nbytes);
        s->nrefs++;
        return ts_check_extent(ts, node, s);
    }

    /* A new storage: its record must exist with exactly the declared size. */
    struct fc_buf name = FC_BUF_INIT((size_t)1 << 17); /* "data/" + a key of <= 64 KiB */
    int rc = FC_OK;
    FC_TRY_GOTO(fc_buf_printf(&name, "data/%s", t->storage_key), rc, done);
    const struct fc_zip_entry *e = fc_zip_find(ts->zr, (const char *)name.data);
    if (e == NULL) {
        rc = fc_error_set(FC_ECORRUPT, "%s: storage '%s' has no record '%s'", ts->what,
                          t->storage_key, (const char *)name.data);
        goto done;
    }
    if (e->size != nbytes) {
        rc = fc_error_set(FC_ECORRUPT,
                          "%s: record '%s' is %" PRIu64 " bytes but its storage "
                          "holds %" PRIu64 " (%" PRIu64 " x %s)",
                          ts->what, e->record, e->size, nbytes,
                          t->untyped_storage ? nbytes : t->storage_numel,
                          t->untyped_storage ? "uint8" : fc_dtype_name(dt));
        goto done;
    }
    if (ts->nst == ts->st_alloc) {
        const size_t na = ts->st_alloc == 0 ? 16 : ts->st_alloc * 2;
        struct fc_ts_storage *ns = fc_reallocarray(ts->st, na, sizeof(*ns));
        if (ns == NULL) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", ts->what);
            goto done;
        }
        ts->st = ns;
        ts->st_alloc = na;
    }
    if (ts_map_reserve(&ts->st_map, ts, ts_st_hash) != FC_OK) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", ts->what);
        goto done;
    }
    struct fc_ts_storage *s = &ts->st[ts->nst];
    s->key = t->storage_key;
    s->dtype = dt;
    s->data_offset = e->data_offset;
    s->nbytes = nbytes;
    s->nrefs = 1;
    int found = 0;
    const size_t slot =
        ts_map_probe(&ts->st_map, ts_hash_str(s->key), ts_st_eq, ts, s->key, &found);
    ts->st_map.slots[slot] = ++ts->nst;
    ts->st_map.n++;
    rc = ts_check_extent(ts, node, s);
done:
    fc_buf_release(&name);
    return rc;
}

/* Visit every node once; enter each tensor node in first-visit order. */
static int ts_collect(struct fc_torchsave *ts)
{
    struct ts_walk w;
    const struct fc_pv **stack = NULL;
    size_t sn = 0, salloc = 0;
    int rc = FC_OK;
    memset(&w, 0, sizeof(w));

    if (ts_push(&stack, &sn, &salloc, fc_pickle_root(ts->pk)) != FC_OK)
        goto oom;
    while (sn > 0) {
        const struct fc_pv *v = stack[--sn];
        int is_new = 0;
        if (ts_walk_mark(&w, v, &is_new) != FC_OK)
            goto oom;
        if (!is_new)
            continue;
        if (v->kind == FC_PV_TENSOR) {
            FC_TRY_GOTO(ts_add_tensor(ts, v), rc, done);
            continue;
        }
        if (ts_push_children(&stack, &sn, &salloc, v) != FC_OK)
            goto oom;
    }
    goto done;
oom:
    rc = fc_error_set(FC_ENOMEM, "%s: out of memory walking data.pkl", ts->what);
done:
    fc_free(stack);
    fc_free(w.nodes);
    ts_map_release(&w.seen);
    return rc;
}

static int ts_open(struct fc_torchsave **out, const struct fc_file *f, uint64_t base, uint64_t len,
                   const char *what, enum fc_pickle_profile profile)
{
    struct fc_torchsave *ts = NULL;
    unsigned char *pkl = NULL;
    struct fc_buf pwhat = FC_BUF_INIT(8192);
    int rc = FC_OK;

    *out = NULL;
    if (what == NULL)
        what = f->path != NULL ? f->path : "torch.save archive";
    if (base > f->size || len > f->size - base)
        return fc_error_set(FC_ECORRUPT,
                            "%s: archive window [%" PRIu64 ", +%" PRIu64
                            ") is outside the file (%" PRIu64 " bytes)",
                            what, base, len, f->size);
    FC_TRY(ts_check_kind(f, base, len, what));
    ts = fc_calloc(1, sizeof(*ts));
    if (ts == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
    ts->what = fc_strdup(what);
    if (ts->what == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", what);
        goto done;
    }
    /* TorchScript archives hold deflated code records: look at the names first. */
    FC_TRY_GOTO(fc_zip_reader_open_ex(&ts->zr, f, base, len, what, FC_ZIP_ALLOW_COMPRESSED), rc,
                done);
    if (fc_zip_find(ts->zr, "constants.pkl") != NULL) {
        rc = fc_error_set(FC_EFORMAT,
                          "%s: TorchScript archive; not a state dict (load it with "
                          "torch.jit.load and torch.save its state_dict())",
                          what);
        goto done;
    }
    for (size_t i = 0; i < fc_zip_count(ts->zr); i++) {
        const struct fc_zip_entry *e = fc_zip_entry_at(ts->zr, i);
        if (e->method != 0) {
            rc = fc_error_set(FC_EFORMAT,
                              "%s: compressed entry '%s' (method %u); re-save it with torch.save",
                              what, e->name, (unsigned)e->method);
            goto done;
        }
    }
    const struct fc_zip_entry *pe = fc_zip_find(ts->zr, "data.pkl");
    if (pe == NULL) {
        rc = fc_error_set(FC_EFORMAT,
                          "%s: ZIP archive without a data.pkl record; not a "
                          "torch.save archive",
                          what);
        goto done;
    }
    FC_TRY_GOTO(ts_check_version(ts), rc, done);
    FC_TRY_GOTO(ts_check_byteorder(ts), rc, done);
    FC_TRY_GOTO(fc_zip_read_record(ts->zr, pe, TS_PKL_CAP, &pkl), rc, done);
    FC_TRY_GOTO(fc_buf_printf(&pwhat, "%s: data.pkl", what), rc, done);
    FC_TRY_GOTO(fc_pickle_load(&ts->pk, pkl, (size_t)pe->size, profile, (const char *)pwhat.data),
                rc, done);
    if (profile != FC_PICKLE_SYMBOLIC)
        FC_TRY_GOTO(ts_collect(ts), rc, done);
    *out = ts;
    ts = NULL;
done:
    fc_free(pkl);
    fc_buf_release(&pwhat);
    fc_torchsave_free(ts);
    return rc;
}

int fc_torchsave_open(struct fc_torchsave **out, const struct fc_file *f, uint64_t base,
                      uint64_t len, const char *what)
{
    return ts_open(out, f, base, len, what, FC_PICKLE_WEIGHTS_ONLY);
}

int fc_torchsave_open_dtensor(struct fc_torchsave **out, const struct fc_file *f, uint64_t base,
                              uint64_t len, const char *what)
{
    return ts_open(out, f, base, len, what, FC_PICKLE_WEIGHTS_DTENSOR);
}

int fc_torchsave_open_symbolic(struct fc_torchsave **out, const struct fc_file *f, uint64_t base,
                               uint64_t len, const char *what)
{
    return ts_open(out, f, base, len, what, FC_PICKLE_SYMBOLIC);
}

size_t fc_torchsave_globals(const struct fc_torchsave *ts, const struct fc_pv *const **out)
{
    return fc_pickle_globals(ts->pk, out);
}

/* ---------------------------------------------------------------------------------------- */
/* Writers                                                                                  */

#define TS_BLOB_PREFIX "archive"

/*
 * data.pkl of one dense tensor, opcode for opcode what torch writes (less the
 * BINPUT memo opcodes): _rebuild_tensor_v2 with the legacy storage class, or
 * _rebuild_tensor_v3 with UntypedStorage (numel in bytes) and the dtype.
 */
int fc_torchsave_pw_tensor_view(struct fc_buf *b, const struct fc_tensor_desc *d,
                                uint64_t storage_numel, int requires_grad, const char *storage_key)
{
    const struct fc_dtype_info *info = fc_dtype_info(d->dtype);
    if (info == NULL || d->ndim < 0 || d->ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "torch.save pickle: invalid dtype or ndim");
    const int v3 = info->storage_class == NULL;
    FC_TRY(fc_pw_global(b, "torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2"));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_str(b, "storage", 7));
    if (v3)
        FC_TRY(fc_pw_global(b, "torch.storage", "UntypedStorage"));
    else
        FC_TRY(fc_pw_global(b, "torch", info->storage_class));
    FC_TRY(fc_pw_str(b, storage_key, strlen(storage_key)));
    FC_TRY(fc_pw_str(b, "cpu", 3));
    FC_TRY(fc_pw_int(b, (int64_t)(v3 ? storage_numel * info->elem_size : storage_numel)));
    FC_TRY(fc_pw_tuple(b));
    FC_TRY(fc_pw_binpersid(b));
    FC_TRY(fc_pw_int(b, d->storage_offset));
    FC_TRY(fc_pw_int_tuple(b, d->shape, d->ndim));
    FC_TRY(fc_pw_int_tuple(b, d->stride, d->ndim));
    FC_TRY(fc_pw_bool(b, requires_grad));
    FC_TRY(fc_pw_global(b, "collections", "OrderedDict"));
    FC_TRY(fc_pw_empty_tuple(b));
    FC_TRY(fc_pw_reduce(b));
    if (v3)
        FC_TRY(fc_pw_global(b, "torch", info->torch_name));
    FC_TRY(fc_pw_tuple(b));
    return fc_pw_reduce(b);
}

int fc_torchsave_pw_tensor(struct fc_buf *b, fc_dtype dt, const int64_t *shape, int ndim,
                           uint64_t numel, const char *storage_key)
{
    struct fc_tensor_desc d;
    if (ndim < 0 || ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "torch.save pickle: invalid dtype or ndim");
    memset(&d, 0, sizeof(d));
    d.dtype = dt;
    d.ndim = ndim;
    if (ndim > 0)
        memcpy(d.shape, shape, (size_t)ndim * sizeof(*shape));
    fc_tensor_set_contiguous(&d);
    return fc_torchsave_pw_tensor_view(b, &d, numel, 0, storage_key);
}

/*
 * data.pkl of one dense tensor, opcode for opcode what torch writes (less the
 * BINPUT memo opcodes): _rebuild_tensor_v2 with the legacy storage class, or
 * _rebuild_tensor_v3 with UntypedStorage (numel in bytes) and the dtype.
 */
static int ts_tensor_pickle(struct fc_buf *b, fc_dtype dt, const int64_t *shape, int ndim,
                            uint64_t numel)
{
    FC_TRY(fc_pw_proto(b));
    FC_TRY(fc_torchsave_pw_tensor(b, dt, shape, ndim, numel, "0"));
    return fc_pw_stop(b);
}

static const unsigned char ts_little[] = "little";
static const unsigned char ts_version[] = "3\n";

int fc_tsblob_init(struct fc_tsblob *b, fc_dtype dt, const int64_t *shape, int ndim,
                   uint32_t data_align)
{
    int64_t numel = 0;
    uint64_t nbytes = 0;
    int rc = FC_OK;

    memset(b, 0, sizeof(*b));
    fc_buf_init(&b->pkl, (size_t)1 << 20);
    if (fc_dtype_info(dt) == NULL)
        return fc_error_set(FC_EINVAL, "torch.save blob: invalid dtype %d", (int)dt);
    if (ndim < 0 || ndim > FC_MAX_DIMS || (ndim > 0 && shape == NULL))
        return fc_error_set(FC_EINVAL, "torch.save blob: bad number of dimensions %d", ndim);
    if (fc_shape_numel(shape, ndim, &numel) != 0 ||
        fc_mul_u64((uint64_t)numel, fc_dtype_size(dt), &nbytes) != 0 || nbytes > INT64_MAX)
        return fc_error_set(FC_EINVAL, "torch.save blob: bad or too large %s shape",
                            fc_dtype_name(dt));
    FC_TRY_GOTO(ts_tensor_pickle(&b->pkl, dt, shape, ndim, (uint64_t)numel), rc, fail);

    b->recs[0].record = "data.pkl";
    b->recs[0].size = b->pkl.len;
    b->recs[0].data = b->pkl.data;
    b->recs[1].record = "byteorder";
    b->recs[1].size = sizeof(ts_little) - 1;
    b->recs[1].data = ts_little;
    b->recs[2].record = "data/0";
    b->recs[2].size = nbytes;
    b->recs[2].data = NULL;
    b->recs[3].record = "version";
    b->recs[3].size = sizeof(ts_version) - 1;
    b->recs[3].data = ts_version;
    const uint32_t align[4] = {0, 0, data_align, 0}; /* data/0's */
    FC_TRY_GOTO(fc_zipw_layout_aligned(b->recs, 4, TS_BLOB_PREFIX, align, &b->total_size), rc,
                fail);
    b->data_offset = b->recs[2].data_offset;
    b->data_size = nbytes;
    return FC_OK;
fail:
    fc_tsblob_release(b);
    return rc;
}

void fc_tsblob_release(struct fc_tsblob *b)
{
    fc_buf_release(&b->pkl);
    memset(b->recs, 0, sizeof(b->recs));
    b->total_size = b->data_offset = b->data_size = 0;
}

int fc_tsblob_head(const struct fc_tsblob *b, struct fc_buf *out)
{
    return fc_zipw_emit(b->recs, 4, TS_BLOB_PREFIX, 0, b->data_offset, out);
}

int fc_tsblob_tail(struct fc_tsblob *b, uint32_t data_crc, struct fc_buf *out)
{
    b->recs[2].crc32 = b->data_size == 0 ? 0 : data_crc;
    return fc_zipw_emit(b->recs, 4, TS_BLOB_PREFIX, b->data_offset + b->data_size, b->total_size,
                        out);
}

int fc_torchsave_value_blob(struct fc_buf *out, const struct fc_pv *v)
{
    struct fc_buf pkl = FC_BUF_INIT((size_t)1 << 30);
    struct fc_zipw_record recs[3];
    uint64_t total = 0;
    int rc = FC_OK;

    FC_TRY_GOTO(fc_pw_proto(&pkl), rc, done);
    FC_TRY_GOTO(fc_pw_value(&pkl, v), rc, done);
    FC_TRY_GOTO(fc_pw_stop(&pkl), rc, done);
    memset(recs, 0, sizeof(recs));
    recs[0].record = "data.pkl";
    recs[0].size = pkl.len;
    recs[0].data = pkl.data;
    recs[1].record = "byteorder";
    recs[1].size = sizeof(ts_little) - 1;
    recs[1].data = ts_little;
    recs[2].record = "version";
    recs[2].size = sizeof(ts_version) - 1;
    recs[2].data = ts_version;
    FC_TRY_GOTO(fc_zipw_layout(recs, 3, TS_BLOB_PREFIX, &total), rc, done);
    FC_TRY_GOTO(fc_zipw_emit(recs, 3, TS_BLOB_PREFIX, 0, total, out), rc, done);
done:
    fc_buf_release(&pkl);
    return rc;
}
