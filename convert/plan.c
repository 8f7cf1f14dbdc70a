/*
 * plan.c - the write planner (see plan.h): coordinate classes of every
 * tensor's placements -> deduplicated chunks and their holders -> items
 * balanced over the holders -> files laid out back to back; relayout for
 * other item encodings, lookups, and the --dry-run text.  Pure: no I/O.
 */
#include "plan.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_error.h"
#include "fc_sort.h"

#define FC_PLAN_NONE SIZE_MAX

/* At most this many runs of ranks are listed per chunk by fc_plan_describe(). */
#define FC_PLAN_DESCRIBE_MAX_RUNS 8

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */

static int fc_plan__cmp_str(const void *a, const void *b)
{
    const char *const *x = a;
    const char *const *y = b;
    return strcmp(*x, *y);
}

/* Appends the key with bytes outside printable ASCII (and '\') as \xNN. */
static int fc_plan__put_key(struct fc_buf *out, const char *key)
{
    for (const unsigned char *p = (const unsigned char *)key; *p != '\0'; p++) {
        if (*p >= 0x20 && *p < 0x7f && *p != '\\')
            FC_TRY(fc_buf_putc(out, *p));
        else
            FC_TRY(fc_buf_printf(out, "\\x%02x", *p));
    }
    return FC_OK;
}

int fc_plan_file_name(int rank, char *buf, size_t bufsize)
{
    const int n = snprintf(buf, bufsize, "__%d_0.distcp", rank);
    if (n < 0 || (size_t)n >= bufsize)
        return fc_error_set(FC_EINVAL, "plan: file name for rank %d does not fit %zu bytes", rank,
                            bufsize);
    return FC_OK;
}

/* ------------------------------------------------------------------------ */
/* Building a plan                                                          */

static int fc_plan__check_tensor(const struct fc_mesh *mesh, const struct fc_plan_tensor_in *all,
                                 size_t i, struct fc_dim_placement *pl)
{
    const struct fc_plan_tensor_in *t = &all[i];
    assert(t->key != NULL);
    if (fc_dtype_info(t->dtype) == NULL)
        return fc_error_set(FC_EINVAL, "plan: tensor '%s': invalid dtype %d", t->key,
                            (int)t->dtype);
    if (t->ndim < 0 || t->ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "plan: tensor '%s': %d dims is outside [0, %d]", t->key,
                            t->ndim, FC_MAX_DIMS);
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return fc_error_set(FC_EINVAL, "plan: tensor '%s': dim %d has negative size %" PRId64,
                                t->key, d, t->shape[d]);
    }
    int64_t numel;
    uint64_t nbytes;
    if (fc_shape_numel(t->shape, t->ndim, &numel) < 0 ||
        fc_mul_u64((uint64_t)numel, fc_dtype_size(t->dtype), &nbytes) < 0)
        return fc_error_set(FC_EINVAL, "plan: tensor '%s': element count overflows", t->key);
    if (t->placement != FC_PLACE_SHARD0 && t->placement != FC_PLACE_REPLICATE)
        return fc_error_set(FC_EINVAL, "plan: tensor '%s': unknown placement %d", t->key,
                            (int)t->placement);
    if (t->placement == FC_PLACE_SHARD0 && t->ndim == 0)
        return fc_error_set(FC_EINVAL, "plan: tensor '%s': 0-d tensor cannot be Shard(0)", t->key);
    int bad_rank;
    if (fc_mesh_placements(mesh, t->placement, t->tp_dim, t->ndim, pl) < 0 ||
        fc_mesh_check_layout(mesh, pl, t->ndim, t->shape, &bad_rank) < 0) {
        char why[512];
        snprintf(why, sizeof(why), "%s", fc_error_last());
        return fc_error_set(FC_EINVAL, "plan: tensor '%s': %s", t->key,
                            strncmp(why, "mesh: ", 6) == 0 ? why + 6 : why);
    }
    if (t->alias_of == -1)
        return FC_OK;
    if (t->alias_of < 0 || (uint64_t)t->alias_of >= (uint64_t)i)
        return fc_error_set(FC_EINVAL,
                            "plan: tensor '%s': alias_of %" PRId64 " is not an earlier tensor",
                            t->key, t->alias_of);
    const struct fc_plan_tensor_in *src = &all[t->alias_of];
    int same = src->dtype == t->dtype && src->ndim == t->ndim && src->placement == t->placement;
    same = same && (fc_mesh_find(mesh, FC_MESH_DIM_TP) < 0 || src->tp_dim == t->tp_dim);
    for (int d = 0; same && d < t->ndim; d++)
        same = src->shape[d] == t->shape[d];
    if (!same)
        return fc_error_set(FC_EINVAL,
                            "plan: tensor '%s' is tied to '%s' but differs in dtype, shape or "
                            "placement",
                            t->key, src->key);
    return FC_OK;
}

static int fc_plan__check_keys(const struct fc_plan_tensor_in *tensors, size_t ntensors,
                               const struct fc_plan_value_in *values, size_t nvalues)
{
    size_t n;
    if (fc_add_size(ntensors, nvalues, &n) < 0)
        return fc_error_set(FC_EINVAL, "plan: too many keys");
    if (n < 2)
        return FC_OK;
    const char **keys = fc_calloc(n, sizeof(*keys));
    if (keys == NULL)
        return fc_error_set(FC_ENOMEM, "plan: out of memory checking %zu keys", n);
    for (size_t i = 0; i < ntensors; i++)
        keys[i] = tensors[i].key;
    for (size_t i = 0; i < nvalues; i++) {
        assert(values[i].key != NULL);
        keys[ntensors + i] = values[i].key;
    }
    qsort(keys, n, sizeof(*keys), fc_plan__cmp_str);
    int rc = FC_OK;
    for (size_t i = 1; i < n; i++) {
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            rc = fc_error_set(FC_EINVAL, "plan: duplicate key '%s'", keys[i]);
            break;
        }
    }
    fc_free(keys);
    return rc;
}

/*
 * Coordinate classes of one mesh dim for one tensor: coordinates 0..k-1 each
 * give their own box; k..n-1 (when k < n) all give the same one, empty on the
 * dim.  A dim that shards a tensor dim some earlier placement already cut is
 * enumerated coordinate by coordinate (k = n).
 */
static int fc_plan__classes(const struct fc_mesh *m, const struct fc_dim_placement *pl,
                            const int64_t *shape, int i, int *k_out)
{
    const int n = m->size[i];
    *k_out = n;
    if (pl[i].kind == FC_DIM_REPLICATE) {
        *k_out = 1;
        return 1;
    }
    for (int j = 0; j < i; j++) {
        if (pl[j].kind != FC_DIM_REPLICATE && pl[j].dim == pl[i].dim)
            return n;
    }
    int64_t len = shape[pl[i].dim];
    if (pl[i].kind == FC_DIM_STRIDED) {
        int64_t off;
        fc_mesh_chunk(len, pl[i].split, 0, &off, &len); /* the largest piece */
    }
    *k_out = (int)fc_mesh_nonempty_chunks(len, n);
    return *k_out + (*k_out < n);
}

/* Number of coordinate-class tuples of a tensor (an upper bound on its chunks). */
static int fc_plan__tuples(const struct fc_mesh *m, const struct fc_dim_placement *pl,
                           const int64_t *shape, size_t *out)
{
    size_t n = 1;
    for (int i = 0; i < m->ndim; i++) {
        int k;
        if (fc_mul_size(n, (size_t)fc_plan__classes(m, pl, shape, i, &k), &n) < 0)
            return fc_error_set(FC_EINVAL, "plan: chunk count overflows");
    }
    *out = n;
    return FC_OK;
}

struct fc_plan__tuple {
    struct fc_plan_holder h;
    int64_t off[FC_MAX_DIMS];
    int64_t size[FC_MAX_DIMS];
};

struct fc_plan__tuple_cmp {
    const struct fc_plan__tuple *t;
    int ndim;
};

static int fc_plan__cmp_tuple(const void *ctx, size_t a, size_t b)
{
    const struct fc_plan__tuple_cmp *c = ctx;
    for (int d = 0; d < c->ndim; d++) {
        const int64_t x = c->t[a].off[d], y = c->t[b].off[d];
        if (x != y)
            return x < y ? -1 : 1;
    }
    return 0;
}

/*
 * Every coordinate-class tuple of tensor t with its box and holder box, sorted
 * by box offsets (stable), into tup[0 .. *n_out) and order[].
 */
static int fc_plan__enumerate(const struct fc_mesh *m, const struct fc_plan_tensor *t,
                              struct fc_plan__tuple *tup, size_t *order, size_t n)
{
    int radix[FC_MESH_MAX_DIMS], k[FC_MESH_MAX_DIMS], digit[FC_MESH_MAX_DIMS] = {0};
    for (int i = 0; i < m->ndim; i++)
        radix[i] = fc_plan__classes(m, t->pl, t->shape, i, &k[i]);
    for (size_t x = 0; x < n; x++) {
        struct fc_plan__tuple *u = &tup[x];
        int coords[FC_MESH_MAX_DIMS];
        for (int i = 0; i < m->ndim; i++) {
            if (t->pl[i].kind == FC_DIM_REPLICATE) {
                u->h.lo[i] = 0;
                u->h.hi[i] = m->size[i];
            } else if (digit[i] < k[i]) {
                u->h.lo[i] = digit[i];
                u->h.hi[i] = digit[i] + 1;
            } else {
                u->h.lo[i] = k[i];
                u->h.hi[i] = m->size[i];
            }
            coords[i] = u->h.lo[i];
        }
        for (int i = m->ndim; i < FC_MESH_MAX_DIMS; i++)
            u->h.lo[i] = u->h.hi[i] = 0;
        FC_TRY(fc_mesh_box(m, t->pl, t->ndim, t->shape, fc_mesh_rank(m, coords), u->off, u->size));
        order[x] = x;
        for (int i = m->ndim - 1; i >= 0; i--) { /* odometer, last dim fastest */
            if (++digit[i] < radix[i])
                break;
            digit[i] = 0;
        }
    }
    const struct fc_plan__tuple_cmp ctx = {tup, t->ndim};
    return fc_sort_idx(order, n, fc_plan__cmp_tuple, &ctx);
}

/*
 * Calls fn(ctx, lo, hi) for each run [lo, hi) of contiguous ranks in holder
 * box h, in increasing rank order; stops at the first negative return.
 */
typedef int (*fc_plan__run_fn)(void *ctx, int lo, int hi);

static int fc_plan__holder_runs(const struct fc_mesh *m, const struct fc_plan_holder *h,
                                fc_plan__run_fn fn, void *ctx)
{
    int q = m->ndim - 1; /* last dim whose range is not full: ranks are contiguous below it */
    while (q >= 0 && h->lo[q] == 0 && h->hi[q] == m->size[q])
        q--;
    if (q < 0)
        return fn(ctx, 0, fc_mesh_world_size(m));
    int inner = 1;
    for (int i = q + 1; i < m->ndim; i++)
        inner *= m->size[i];
    int c[FC_MESH_MAX_DIMS];
    for (int i = 0; i < q; i++)
        c[i] = h->lo[i];
    for (;;) {
        int base = 0;
        for (int i = 0; i < q; i++)
            base = base * m->size[i] + c[i];
        base = base * m->size[q];
        const int rc = fn(ctx, (base + h->lo[q]) * inner, (base + h->hi[q]) * inner);
        if (rc < 0)
            return rc;
        int i = q - 1;
        while (i >= 0 && ++c[i] == h->hi[i]) {
            c[i] = h->lo[i];
            i--;
        }
        if (i < 0)
            return FC_OK;
    }
}

/*
 * Segment tree over ranks keyed by (load, rank): "the least loaded rank in a
 * run of ranks, ties to the lowest" in O(log W) per run, a load increase in
 * O(log W).  Holder sets are R runs (one per replica) of contiguous ranks,
 * so an owner choice costs O(R log W) whatever the shard size.
 */
struct fc_plan__loads {
    uint64_t *load; /* bytes assigned so far per rank */
    int *tree;      /* tree[1..2P): best rank of the node, -1 for padding leaves */
    int size;       /* P: leaves, a power of two >= world */
};

/* The better of two ranks (-1 = none). */
static int fc_plan__better(const struct fc_plan__loads *l, int a, int b)
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    if (l->load[a] != l->load[b])
        return l->load[a] < l->load[b] ? a : b;
    return a < b ? a : b;
}

static int fc_plan__loads_init(struct fc_plan__loads *l, int world)
{
    l->size = 1;
    while (l->size < world)
        l->size *= 2;
    l->load = fc_calloc((size_t)world, sizeof(*l->load));
    l->tree = fc_calloc(2 * (size_t)l->size, sizeof(*l->tree));
    if (l->load == NULL || l->tree == NULL)
        return fc_error_set(FC_ENOMEM, "plan: out of memory for %d ranks", world);
    for (int i = 0; i < l->size; i++)
        l->tree[l->size + i] = i < world ? i : -1;
    for (int i = l->size - 1; i >= 1; i--)
        l->tree[i] = fc_plan__better(l, l->tree[2 * i], l->tree[2 * i + 1]);
    return FC_OK;
}

static void fc_plan__loads_release(struct fc_plan__loads *l)
{
    fc_free(l->load);
    fc_free(l->tree);
}

static int fc_plan__add_load(struct fc_plan__loads *l, int rank, uint64_t nbytes)
{
    if (fc_add_u64(l->load[rank], nbytes, &l->load[rank]) < 0)
        return fc_error_set(FC_EINVAL, "plan: file of rank %d would exceed 2^64 bytes", rank);
    for (int i = (l->size + rank) / 2; i >= 1; i /= 2)
        l->tree[i] = fc_plan__better(l, l->tree[2 * i], l->tree[2 * i + 1]);
    return FC_OK;
}

/* Best rank in [lo, hi). */
static int fc_plan__best_in(const struct fc_plan__loads *l, int lo, int hi)
{
    int best = -1;
    for (lo += l->size, hi += l->size; lo < hi; lo /= 2, hi /= 2) {
        if (lo & 1)
            best = fc_plan__better(l, best, l->tree[lo++]);
        if (hi & 1)
            best = fc_plan__better(l, best, l->tree[--hi]);
    }
    return best;
}

struct fc_plan__pick_ctx {
    const struct fc_plan__loads *l;
    int best;
};

static int fc_plan__pick_run(void *ctxp, int lo, int hi)
{
    struct fc_plan__pick_ctx *c = ctxp;
    c->best = fc_plan__better(c->l, c->best, fc_plan__best_in(c->l, lo, hi));
    return FC_OK;
}

/* The least loaded holder of a chunk, ties to the lowest rank. */
static int fc_plan__pick(const struct fc_plan__loads *l, const struct fc_plan *p,
                         const struct fc_plan_chunk *ch)
{
    struct fc_plan__pick_ctx c = {l, -1};
    for (size_t h = 0; h < ch->nholders; h++)
        (void)fc_plan__holder_runs(&p->mesh, &p->holders[ch->first_holder + h], fc_plan__pick_run,
                                   &c);
    return c.best;
}

void fc_plan_free(struct fc_plan *plan)
{
    if (plan == NULL)
        return;
    fc_free(plan->tensors);
    fc_free(plan->values);
    fc_free(plan->chunks);
    fc_free(plan->holders);
    fc_free(plan->items);
    fc_free(plan->files);
    fc_free(plan->dims_);
    fc_free(plan->strings_);
    fc_free(plan);
}

/* Copies key into the string pool at *cursor. */
static const char *fc_plan__intern(char *pool, size_t *cursor, const char *key)
{
    const size_t len = strlen(key);
    char *dst = pool + *cursor;
    memcpy(dst, key, len + 1);
    *cursor += len + 1;
    return dst;
}

/*
 * Fills tensors[] and chunks[] (boxes, holders) from the coordinate-class
 * tuples of each tensor: tuples with equal box offsets are one chunk (DCP's
 * dedup), whose holders are the tuples' holder boxes.  Items are set later.
 */
static int fc_plan__fill_chunks(struct fc_plan *p, const struct fc_plan_tensor_in *in,
                                const struct fc_dim_placement *pls, const size_t *ntuples,
                                struct fc_plan__tuple *tup, size_t *order, size_t *str_cursor)
{
    size_t c = 0, h = 0, dim_cursor = 0;
    for (size_t i = 0; i < p->ntensors; i++) {
        struct fc_plan_tensor *t = &p->tensors[i];
        t->key = fc_plan__intern(p->strings_, str_cursor, in[i].key);
        t->dtype = in[i].dtype;
        t->ndim = in[i].ndim;
        memcpy(t->shape, in[i].shape, sizeof(t->shape));
        for (int d = t->ndim; d < FC_MAX_DIMS; d++)
            t->shape[d] = 0;
        t->placement = in[i].placement;
        t->tag = in[i].tag;
        t->tp_dim = -1;
        memcpy(t->pl, pls + (size_t)FC_MESH_MAX_DIMS * i, sizeof(t->pl));
        for (int k = 0; k < p->mesh.ndim; k++) {
            if (p->mesh.name[k] == FC_MESH_DIM_TP && t->pl[k].kind == FC_DIM_SHARD)
                t->tp_dim = t->pl[k].dim;
        }
        t->alias_of = FC_PLAN_NONE;
        if (in[i].alias_of >= 0) {
            const size_t src = (size_t)in[i].alias_of;
            t->alias_of = p->tensors[src].alias_of == FC_PLAN_NONE ? src : p->tensors[src].alias_of;
        }
        t->first_chunk = c;
        FC_TRY(fc_plan__enumerate(&p->mesh, t, tup, order, ntuples[i]));
        struct fc_plan_chunk *ch = NULL;
        for (size_t x = 0; x < ntuples[i]; x++) {
            const struct fc_plan__tuple *u = &tup[order[x]];
            const int same = ch != NULL && memcmp(ch->box.offsets, u->off,
                                                  sizeof(int64_t) * (size_t)t->ndim) == 0;
            if (same && memcmp(ch->box.sizes, u->size, sizeof(int64_t) * (size_t)t->ndim) != 0)
                return fc_error_set(FC_EINVAL,
                                    "plan: tensor '%s': two boxes at the same offsets differ "
                                    "in size",
                                    t->key);
            if (!same) {
                ch = &p->chunks[c++];
                int64_t *off = p->dims_ + dim_cursor;
                int64_t *size = off + t->ndim;
                dim_cursor += 2 * (size_t)t->ndim;
                memcpy(off, u->off, sizeof(int64_t) * (size_t)t->ndim);
                memcpy(size, u->size, sizeof(int64_t) * (size_t)t->ndim);
                ch->box.offsets = off;
                ch->box.sizes = size;
                ch->tensor = i;
                ch->item = FC_PLAN_NONE;
                ch->first_holder = h;
                ch->nholders = 0;
            }
            p->holders[h++] = u->h;
            ch->nholders++;
        }
        t->nchunks = c - t->first_chunk;
        if (t->alias_of != FC_PLAN_NONE && t->nchunks != p->tensors[t->alias_of].nchunks)
            return fc_error_set(FC_EINVAL, "plan: tensor '%s' does not shard like its tie", t->key);
    }
    p->nchunks = c;
    p->nholders = h;
    return FC_OK;
}

/*
 * Items in plan order (values, then non-alias tensor chunks) into tmp,
 * lengths from the inputs and the callback, owners by the greedy balancer.
 */
static int fc_plan__assign(struct fc_plan *p, const struct fc_plan_value_in *values,
                           fc_plan_blob_size_fn blob_size, void *ctx, struct fc_plan_item *tmp,
                           struct fc_plan__loads *loads)
{
    size_t k = 0;
    const int world = (int)p->nfiles;
    for (size_t v = 0; v < p->nvalues; v++, k++) {
        tmp[k].kind = FC_ITEM_BYTES;
        tmp[k].index = v;
        tmp[k].chunk = FC_PLAN_NONE;
        tmp[k].length = values[v].blob_size;
        tmp[k].rank = fc_plan__best_in(loads, 0, world);
        FC_TRY(fc_plan__add_load(loads, tmp[k].rank, tmp[k].length));
    }
    for (size_t i = 0; i < p->ntensors; i++) {
        const struct fc_plan_tensor *t = &p->tensors[i];
        if (t->alias_of != FC_PLAN_NONE)
            continue;
        for (size_t j = 0; j < t->nchunks; j++, k++) {
            const struct fc_plan_chunk *ch = &p->chunks[t->first_chunk + j];
            tmp[k].kind = FC_ITEM_TENSOR;
            tmp[k].index = i;
            tmp[k].chunk = t->first_chunk + j;
            FC_TRY(blob_size(ctx, t->dtype, ch->box.sizes, t->ndim, &tmp[k].length));
            tmp[k].rank = fc_plan__pick(loads, p, ch);
            FC_TRY(fc_plan__add_load(loads, tmp[k].rank, tmp[k].length));
        }
    }
    assert(k == p->nitems);
    return FC_OK;
}

/* An alias's chunks store nothing: they point at their root's items. */
static void fc_plan__point_aliases(struct fc_plan *p)
{
    for (size_t i = 0; i < p->ntensors; i++) {
        const struct fc_plan_tensor *t = &p->tensors[i];
        if (t->alias_of == FC_PLAN_NONE)
            continue;
        const struct fc_plan_tensor *root = &p->tensors[t->alias_of];
        for (size_t j = 0; j < t->nchunks; j++)
            p->chunks[t->first_chunk + j].item = p->chunks[root->first_chunk + j].item;
    }
}

/* Groups the plan-order items by file (stable) and lays out offsets. */
static void fc_plan__layout(struct fc_plan *p, const struct fc_plan_item *tmp, size_t *cursor)
{
    for (size_t r = 0; r < p->nfiles; r++) {
        struct fc_plan_file *f = &p->files[r];
        f->rank = (int)r;
        (void)fc_plan_file_name(f->rank, f->name, sizeof(f->name)); /* always fits */
        f->nitems = 0;
    }
    for (size_t k = 0; k < p->nitems; k++)
        p->files[tmp[k].rank].nitems++;
    size_t first = 0;
    for (size_t r = 0; r < p->nfiles; r++) {
        p->files[r].first_item = first;
        cursor[r] = first;
        first += p->files[r].nitems;
    }
    for (size_t k = 0; k < p->nitems; k++) {
        const size_t dst = cursor[tmp[k].rank]++;
        struct fc_plan_file *f = &p->files[tmp[k].rank];
        p->items[dst] = tmp[k];
        p->items[dst].offset = f->nbytes; /* no overflow: bounded by the rank's load */
        f->nbytes += tmp[k].length;
        if (tmp[k].kind == FC_ITEM_BYTES)
            p->values[tmp[k].index].item = dst;
        else
            p->chunks[tmp[k].chunk].item = dst;
    }
    p->total_bytes = 0;
    for (size_t r = 0; r < p->nfiles; r++)
        p->total_bytes += p->files[r].nbytes; /* checked by the caller */
    fc_plan__point_aliases(p);
}

/* Upper bounds (one chunk per coordinate-class tuple), so every array is allocated once. */
struct fc_plan__bounds {
    size_t nbound; /* chunks (and holder boxes) */
    size_t ndims;  /* box offsets and sizes */
    size_t nstrings;
    size_t maxtuples; /* of one tensor */
};

static int fc_plan__count(const struct fc_mesh *mesh, const struct fc_plan_tensor_in *tensors,
                          size_t ntensors, const struct fc_plan_value_in *values, size_t nvalues,
                          const struct fc_dim_placement *pls, size_t *ntuples,
                          struct fc_plan__bounds *b)
{
    int overflow = 0;
    *b = (struct fc_plan__bounds){0, 0, 0, 1};
    for (size_t i = 0; i < ntensors; i++) {
        FC_TRY(fc_plan__tuples(mesh, pls + (size_t)FC_MESH_MAX_DIMS * i, tensors[i].shape,
                               &ntuples[i]));
        size_t d;
        b->maxtuples = ntuples[i] > b->maxtuples ? ntuples[i] : b->maxtuples;
        overflow |= fc_add_size(b->nbound, ntuples[i], &b->nbound);
        overflow |= fc_mul_size(ntuples[i], 2 * (size_t)tensors[i].ndim, &d);
        overflow |= fc_add_size(b->ndims, d, &b->ndims);
        overflow |= fc_add_size(b->nstrings, strlen(tensors[i].key) + 1, &b->nstrings);
    }
    for (size_t v = 0; v < nvalues; v++) {
        assert(values[v].key != NULL);
        overflow |= fc_add_size(b->nstrings, strlen(values[v].key) + 1, &b->nstrings);
    }
    if (overflow)
        return fc_error_set(FC_EINVAL, "plan: chunk or item count overflows");
    return FC_OK;
}

/* A new plan with its arrays allocated to the bounds; *out is set even on failure. */
static int fc_plan__new(const struct fc_mesh *mesh, size_t ntensors, size_t nvalues,
                        const struct fc_plan__bounds *b, struct fc_plan **out)
{
    struct fc_plan *p = fc_calloc(1, sizeof(*p));
    *out = p;
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "plan: out of memory");
    p->mesh = *mesh;
    p->ntensors = ntensors;
    p->nvalues = nvalues;
    p->nfiles = (size_t)fc_mesh_world_size(mesh);
    p->tensors = fc_calloc(ntensors + 1, sizeof(*p->tensors));
    p->values = fc_calloc(nvalues + 1, sizeof(*p->values));
    p->chunks = fc_calloc(b->nbound + 1, sizeof(*p->chunks));
    p->holders = fc_calloc(b->nbound + 1, sizeof(*p->holders));
    p->dims_ = fc_calloc(b->ndims + 1, sizeof(*p->dims_));
    p->strings_ = fc_calloc(b->nstrings + 1, 1);
    if (p->tensors == NULL || p->values == NULL || p->chunks == NULL || p->holders == NULL ||
        p->dims_ == NULL || p->strings_ == NULL)
        return fc_error_set(FC_ENOMEM, "plan: out of memory for %zu chunks", b->nbound);
    return FC_OK;
}

#ifdef FC_DEBUG
/*
 * Debug builds check what plan.h promises of every built plan (invariants
 * 1, 3 and 5: chunks in offset order and tiling counts, items pointing back
 * at what they store, files back to back), as SQLite's pager asserts its
 * state.  O(items + chunks * ndim).
 */
static int fc_plan__offsets_before(const struct fc_box *a, const struct fc_box *b, int ndim)
{
    for (int d = 0; d < ndim; d++)
        if (a->offsets[d] != b->offsets[d])
            return a->offsets[d] < b->offsets[d];
    return 0;
}

static void fc_plan__assert_invariants(const struct fc_plan *p)
{
    uint64_t total = 0;
    for (size_t i = 0; i < p->ntensors; i++) {
        const struct fc_plan_tensor *t = &p->tensors[i];
        assert(t->nchunks >= 1 && t->first_chunk + t->nchunks <= p->nchunks);
        assert(t->alias_of == FC_PLAN_NONE ||
               (t->alias_of < i && p->tensors[t->alias_of].alias_of == FC_PLAN_NONE));
        for (size_t c = t->first_chunk; c < t->first_chunk + t->nchunks; c++) {
            const struct fc_plan_chunk *ch = &p->chunks[c];
            assert(ch->tensor == i && ch->nholders >= 1 && ch->item < p->nitems);
            if (c > t->first_chunk) /* offsets strictly ascending */
                assert(fc_plan__offsets_before(&p->chunks[c - 1].box, &ch->box, t->ndim));
            const struct fc_plan_item *it = &p->items[ch->item];
            assert(it->kind == FC_ITEM_TENSOR &&
                   (t->alias_of != FC_PLAN_NONE || (it->index == i && it->chunk == c)));
            assert(fc_plan_chunk_holds(p, it->chunk, it->rank));
        }
    }
    for (size_t v = 0; v < p->nvalues; v++)
        assert(p->items[p->values[v].item].kind == FC_ITEM_BYTES &&
               p->items[p->values[v].item].index == v);
    for (size_t r = 0; r < p->nfiles; r++) {
        const struct fc_plan_file *f = &p->files[r];
        uint64_t off = 0;
        assert(f->rank == (int)r);
        for (size_t k = f->first_item; k < f->first_item + f->nitems; k++) {
            assert(p->items[k].rank == (int)r && p->items[k].offset == off);
            off += p->items[k].length;
        }
        assert(off == f->nbytes);
        total += f->nbytes;
    }
    assert(total == p->total_bytes);
}
#endif

int fc_plan_build(struct fc_plan **out, const struct fc_mesh *mesh,
                  const struct fc_plan_tensor_in *tensors, size_t ntensors,
                  const struct fc_plan_value_in *values, size_t nvalues,
                  fc_plan_blob_size_fn blob_size, void *ctx)
{
    struct fc_plan *p = NULL;
    struct fc_plan_item *tmp = NULL;
    struct fc_plan__loads loads = {NULL, NULL, 0};
    struct fc_dim_placement *pls = NULL;
    struct fc_plan__tuple *tup = NULL;
    size_t *ntuples = NULL, *order = NULL, *cursor = NULL;
    int rc = FC_OK;

    assert(out != NULL && mesh != NULL);
    assert(ntensors == 0 || (tensors != NULL && blob_size != NULL));
    assert(nvalues == 0 || values != NULL);
    *out = NULL;
    FC_TRY(fc_mesh_validate(mesh));
    pls = fc_calloc(ntensors + 1, sizeof(*pls) * FC_MESH_MAX_DIMS);
    ntuples = fc_calloc(ntensors + 1, sizeof(*ntuples));
    if (pls == NULL || ntuples == NULL) {
        rc = fc_error_set(FC_ENOMEM, "plan: out of memory for %zu tensors", ntensors);
        goto done;
    }
    for (size_t i = 0; i < ntensors; i++)
        FC_TRY_GOTO(fc_plan__check_tensor(mesh, tensors, i, pls + (size_t)FC_MESH_MAX_DIMS * i), rc,
                    done);
    FC_TRY_GOTO(fc_plan__check_keys(tensors, ntensors, values, nvalues), rc, done);

    struct fc_plan__bounds b;
    FC_TRY_GOTO(fc_plan__count(mesh, tensors, ntensors, values, nvalues, pls, ntuples, &b), rc,
                done);
    FC_TRY_GOTO(fc_plan__new(mesh, ntensors, nvalues, &b, &p), rc, done);
    tup = fc_calloc(b.maxtuples, sizeof(*tup));
    order = fc_calloc(b.maxtuples, sizeof(*order));
    if (tup == NULL || order == NULL) {
        rc = fc_error_set(FC_ENOMEM, "plan: out of memory for %zu chunks", b.nbound);
        goto done;
    }

    size_t str_cursor = 0;
    FC_TRY_GOTO(fc_plan__fill_chunks(p, tensors, pls, ntuples, tup, order, &str_cursor), rc, done);
    for (size_t v = 0; v < nvalues; v++) {
        p->values[v].key = fc_plan__intern(p->strings_, &str_cursor, values[v].key);
        p->values[v].item = FC_PLAN_NONE;
    }
    p->nitems = nvalues;
    for (size_t i = 0; i < ntensors; i++) {
        if (p->tensors[i].alias_of == FC_PLAN_NONE)
            p->nitems += p->tensors[i].nchunks; /* <= nbound + nvalues: no overflow */
    }

    const int world = (int)p->nfiles;
    p->items = fc_calloc(p->nitems + 1, sizeof(*p->items));
    p->files = fc_calloc(p->nfiles, sizeof(*p->files));
    tmp = fc_calloc(p->nitems + 1, sizeof(*tmp));
    cursor = fc_calloc((size_t)world, sizeof(*cursor));
    if (p->items == NULL || p->files == NULL || tmp == NULL || cursor == NULL) {
        rc = fc_error_set(FC_ENOMEM, "plan: out of memory for %zu items on %d ranks", p->nitems,
                          world);
        goto done;
    }
    FC_TRY_GOTO(fc_plan__loads_init(&loads, world), rc, done);
    FC_TRY_GOTO(fc_plan__assign(p, values, blob_size, ctx, tmp, &loads), rc, done);
    uint64_t total = 0;
    for (int r = 0; r < world; r++) {
        if (fc_add_u64(total, loads.load[r], &total) < 0) {
            rc = fc_error_set(FC_EINVAL, "plan: total size exceeds 2^64 bytes");
            goto done;
        }
    }
    fc_plan__layout(p, tmp, cursor);
    assert(p->total_bytes == total);
#ifdef FC_DEBUG
    fc_plan__assert_invariants(p);
#endif

done:
    fc_free(tmp);
    fc_plan__loads_release(&loads);
    fc_free(cursor);
    fc_free(pls);
    fc_free(ntuples);
    fc_free(tup);
    fc_free(order);
    if (rc < 0) {
        fc_plan_free(p);
        return rc;
    }
    *out = p;
    return FC_OK;
}

/* ------------------------------------------------------------------------ */
/* Other item encodings                                                     */

static int fc_plan__cmp_elem_size(const void *ctxp, size_t a, size_t b)
{
    const struct fc_plan *p = ctxp;
    const size_t ea = fc_dtype_size(p->tensors[p->items[a].index].dtype);
    const size_t eb = fc_dtype_size(p->tensors[p->items[b].index].dtype);
    return ea > eb ? -1 : ea < eb;
}

static int fc_plan__cmp_offset(const void *ctxp, size_t a, size_t b)
{
    const struct fc_plan *p = ctxp;
    return p->items[a].offset < p->items[b].offset ? -1 : p->items[a].offset > p->items[b].offset;
}

int fc_plan_relayout(struct fc_plan *plan, fc_plan_file_head_fn head, void *ctx)
{
    size_t *order = NULL;
    struct fc_plan_item *tmp = NULL;
    int rc = FC_OK;
    for (size_t i = 0; i < plan->nitems; i++) {
        if (plan->items[i].kind != FC_ITEM_TENSOR)
            return fc_error_set(FC_EINVAL, "plan: value '%s' cannot be relaid out",
                                plan->values[plan->items[i].index].key);
    }
    order = fc_calloc(plan->nitems + 1, sizeof(*order));
    tmp = fc_calloc(plan->nitems + 1, sizeof(*tmp));
    if (order == NULL || tmp == NULL) {
        rc = fc_error_set(FC_ENOMEM, "plan: out of memory for %zu items", plan->nitems);
        goto done;
    }
    plan->total_bytes = 0;
    for (size_t r = 0; r < plan->nfiles; r++) {
        struct fc_plan_file *f = &plan->files[r];
        size_t *v = order + f->first_item;
        for (size_t i = 0; i < f->nitems; i++)
            v[i] = f->first_item + i;
        FC_TRY_GOTO(fc_sort_idx(v, f->nitems, fc_plan__cmp_elem_size, plan), rc, done);
        for (size_t i = 0; i < f->nitems; i++)
            tmp[f->first_item + i] = plan->items[v[i]];
        memcpy(plan->items + f->first_item, tmp + f->first_item, f->nitems * sizeof(*tmp));
        for (size_t i = 0; i < f->nitems; i++)
            plan->chunks[plan->items[f->first_item + i].chunk].item = f->first_item + i;
        uint64_t pos = 0;
        FC_TRY_GOTO(head(ctx, plan, r, f->name, sizeof(f->name), &pos), rc, done);
        for (size_t i = 0; i < f->nitems; i++) {
            struct fc_plan_item *it = &plan->items[f->first_item + i];
            it->offset = pos;
            if (fc_add_u64(pos, it->length, &pos) < 0) {
                rc = fc_error_set(FC_EINVAL, "plan: file %s exceeds 2^64 bytes", f->name);
                goto done;
            }
        }
        f->nbytes = pos;
        if (fc_add_u64(plan->total_bytes, pos, &plan->total_bytes) < 0) {
            rc = fc_error_set(FC_EINVAL, "plan: total size exceeds 2^64 bytes");
            goto done;
        }
    }
    fc_plan__point_aliases(plan); /* their roots' items moved */
done:
    fc_free(order);
    fc_free(tmp);
    return rc;
}

int fc_plan_place(struct fc_plan *plan, fc_plan_place_fn place, void *ctx)
{
    uint64_t *off = fc_calloc(plan->nitems + 1, sizeof(*off));
    size_t *order = fc_calloc(plan->nitems + 1, sizeof(*order));
    int rc = FC_OK;
    if (off == NULL || order == NULL) {
        rc = fc_error_set(FC_ENOMEM, "plan: out of memory for %zu items", plan->nitems);
        goto done;
    }
    plan->total_bytes = 0;
    for (size_t r = 0; r < plan->nfiles && rc == FC_OK; r++) {
        struct fc_plan_file *f = &plan->files[r];
        struct fc_plan_item *its = plan->items + f->first_item;
        uint64_t nbytes = 0;
        for (size_t i = 0; i < f->nitems; i++) {
            if (its[i].kind != FC_ITEM_TENSOR) {
                rc = fc_error_set(FC_EINVAL, "plan: value '%s' cannot be placed",
                                  plan->values[its[i].index].key);
                goto done;
            }
        }
        FC_TRY_GOTO(place(ctx, plan, r, f->name, sizeof(f->name), off, &nbytes), rc, done);
        for (size_t i = 0; i < f->nitems; i++) {
            its[i].offset = off[i];
            order[i] = f->first_item + i;
        }
        /* In offset order, each item must end before the next starts and the file ends. */
        FC_TRY_GOTO(fc_sort_idx(order, f->nitems, fc_plan__cmp_offset, plan), rc, done);
        uint64_t end = 0;
        for (size_t i = 0; i < f->nitems; i++) {
            const struct fc_plan_item *it = &plan->items[order[i]];
            if (it->offset < end || fc_add_u64(it->offset, it->length, &end) < 0 || end > nbytes) {
                rc = fc_error_set(FC_EINVAL,
                                  "plan: %s: item at %" PRIu64 " overlaps or passes "
                                  "the file's end",
                                  f->name, it->offset);
                goto done;
            }
        }
        f->nbytes = nbytes;
        if (fc_add_u64(plan->total_bytes, nbytes, &plan->total_bytes) < 0)
            rc = fc_error_set(FC_EINVAL, "plan: total size exceeds 2^64 bytes");
    }
done:
    fc_free(off);
    fc_free(order);
    return rc;
}

int fc_plan_split_files(struct fc_plan *plan, const int *group, int ngroups)
{
    const size_t world = plan->nfiles, nf = world * (size_t)(ngroups > 0 ? ngroups : 1);
    if (ngroups < 1)
        return fc_error_set(FC_EINVAL, "plan: %d file groups", ngroups);
    for (size_t i = 0; i < plan->nitems; i++)
        if (plan->items[i].kind != FC_ITEM_TENSOR || group[plan->items[i].index] < 0 ||
            group[plan->items[i].index] >= ngroups)
            return fc_error_set(FC_EINVAL, "plan: item %zu has no file group", i);
    struct fc_plan_item *items = fc_calloc(plan->nitems + 1, sizeof(*items));
    struct fc_plan_file *files = fc_calloc(nf + 1, sizeof(*files));
    size_t *moved = fc_calloc(plan->nitems + 1, sizeof(*moved));
    if (items == NULL || files == NULL || moved == NULL) {
        fc_free(items);
        fc_free(files);
        fc_free(moved);
        return fc_error_set(FC_ENOMEM, "plan: out of memory for %zu files", nf);
    }
    size_t k = 0;
    for (int g = 0; g < ngroups; g++) {
        for (size_t r = 0; r < world; r++) {
            const struct fc_plan_file *f = &plan->files[r];
            struct fc_plan_file *out = &files[(size_t)g * world + r];
            *out = *f;
            out->first_item = k;
            for (size_t i = f->first_item; i < f->first_item + f->nitems; i++) {
                if (group[plan->items[i].index] != g)
                    continue;
                moved[i] = k;
                items[k] = plan->items[i];
                items[k++].rank = (int)((size_t)g * world + r);
            }
            out->nitems = k - out->first_item;
        }
    }
    for (size_t c = 0; c < plan->nchunks; c++)
        if (plan->tensors[plan->chunks[c].tensor].alias_of == FC_PLAN_NONE)
            plan->chunks[c].item = moved[plan->chunks[c].item];
    fc_free(plan->items);
    fc_free(plan->files);
    fc_free(moved);
    plan->items = items;
    plan->files = files;
    plan->nfiles = nf;
    fc_plan__point_aliases(plan);
    return FC_OK;
}

/* The bytes of tensor t's chunk c (numel * element size). */
static uint64_t fc_plan__chunk_bytes(const struct fc_plan *p, size_t t, size_t c)
{
    const struct fc_plan_tensor *pt = &p->tensors[t];
    uint64_t n = fc_dtype_size(pt->dtype);
    for (int d = 0; d < pt->ndim; d++)
        n *= (uint64_t)p->chunks[c].box.sizes[d]; /* within the planned file sizes: no overflow */
    return n;
}

int fc_plan_align_items(struct fc_plan *plan, uint64_t align, uint64_t min_bytes)
{
    assert(align > 0 && (align & (align - 1)) == 0);
    plan->total_bytes = 0;
    for (size_t r = 0; r < plan->nfiles; r++) {
        struct fc_plan_file *f = &plan->files[r];
        uint64_t pos = 0;
        for (size_t i = 0; i < f->nitems; i++) {
            struct fc_plan_item *it = &plan->items[f->first_item + i];
            if (it->kind == FC_ITEM_TENSOR &&
                fc_plan__chunk_bytes(plan, it->index, it->chunk) >= min_bytes &&
                fc_add_u64(pos, (align - pos % align) % align, &pos) < 0)
                return fc_error_set(FC_EINVAL, "plan: file %s exceeds 2^64 bytes", f->name);
            it->offset = pos;
            if (fc_add_u64(pos, it->length, &pos) < 0)
                return fc_error_set(FC_EINVAL, "plan: file %s exceeds 2^64 bytes", f->name);
        }
        f->nbytes = pos;
        if (fc_add_u64(plan->total_bytes, pos, &plan->total_bytes) < 0)
            return fc_error_set(FC_EINVAL, "plan: total size exceeds 2^64 bytes");
    }
    return FC_OK;
}

/* One new item: tensor t's chunk c stored (again) in rank r's file. */
static struct fc_plan_item fc_plan__copy_item(const struct fc_plan *p, size_t t, size_t c, int r)
{
    return (struct fc_plan_item){FC_ITEM_TENSOR, t, c, r, 0, fc_plan__chunk_bytes(p, t, c)};
}

/* Does rank r's file already store tensor t's chunk c (its own planned item)? */
static int fc_plan__stored_at(const struct fc_plan *p, size_t t, size_t c, int r)
{
    if (p->tensors[t].alias_of != FC_PLAN_NONE)
        return 0; /* an alias shares its root's item: stored under the root's name only */
    return p->items[p->chunks[c].item].rank == r;
}

int fc_plan_store_at_holders(struct fc_plan *plan)
{
    if (plan->nvalues > 0)
        return fc_error_set(FC_EINVAL, "plan: value '%s' cannot be stored per rank",
                            plan->values[0].key);
    const int world = (int)plan->nfiles;
    size_t extra = 0;
    for (int r = 0; r < world; r++)
        for (size_t t = 0; t < plan->ntensors; t++)
            extra += !fc_plan__stored_at(plan, t, fc_plan_rank_chunk(plan, t, r), r);
    struct fc_plan_item *items = fc_calloc(plan->nitems + extra + 1, sizeof(*items));
    size_t *moved = fc_calloc(plan->nitems + 1, sizeof(*moved));
    if (items == NULL || moved == NULL) {
        fc_free(items);
        fc_free(moved);
        return fc_error_set(FC_ENOMEM, "plan: out of memory for %zu more items", extra);
    }
    size_t k = 0;
    for (int r = 0; r < world; r++) {
        struct fc_plan_file *f = &plan->files[r];
        const size_t first = k;
        for (size_t i = 0; i < f->nitems; i++) {
            moved[f->first_item + i] = k;
            items[k++] = plan->items[f->first_item + i];
        }
        for (size_t t = 0; t < plan->ntensors; t++) {
            const size_t c = fc_plan_rank_chunk(plan, t, r);
            if (!fc_plan__stored_at(plan, t, c, r))
                items[k++] = fc_plan__copy_item(plan, t, c, r);
        }
        f->first_item = first;
        f->nitems = k - first;
    }
    for (size_t c = 0; c < plan->nchunks; c++)
        if (plan->tensors[plan->chunks[c].tensor].alias_of == FC_PLAN_NONE)
            plan->chunks[c].item = moved[plan->chunks[c].item];
    fc_free(plan->items);
    fc_free(moved);
    plan->items = items;
    plan->nitems = k;
    fc_plan__point_aliases(plan);
    return FC_OK;
}

/* ------------------------------------------------------------------------ */
/* Queries and --dry-run text                                               */

size_t fc_plan_rank_chunk(const struct fc_plan *plan, size_t tensor, int rank)
{
    assert(plan != NULL && tensor < plan->ntensors);
    assert(rank >= 0 && (size_t)rank < plan->nfiles);
    const struct fc_plan_tensor *t = &plan->tensors[tensor];
    int64_t off[FC_MAX_DIMS], size[FC_MAX_DIMS];
    const int rc = fc_mesh_box(&plan->mesh, t->pl, t->ndim, t->shape, rank, off, size);
    assert(rc == FC_OK); /* checked when the plan was built */
    (void)rc;
    size_t lo = t->first_chunk, hi = t->first_chunk + t->nchunks; /* chunks sorted by offsets */
    while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        const int64_t *o = plan->chunks[mid].box.offsets;
        int cmp = 0;
        for (int d = 0; d < t->ndim && cmp == 0; d++)
            cmp = (o[d] > off[d]) - (o[d] < off[d]);
        if (cmp > 0)
            hi = mid;
        else
            lo = mid;
    }
    return lo;
}

int fc_plan_chunk_holds(const struct fc_plan *plan, size_t chunk, int rank)
{
    assert(plan != NULL && chunk < plan->nchunks);
    int coords[FC_MESH_MAX_DIMS];
    fc_mesh_coords(&plan->mesh, rank, coords);
    const struct fc_plan_chunk *ch = &plan->chunks[chunk];
    for (size_t h = 0; h < ch->nholders; h++) {
        const struct fc_plan_holder *hb = &plan->holders[ch->first_holder + h];
        int in = 1;
        for (int i = 0; i < plan->mesh.ndim; i++)
            in &= coords[i] >= hb->lo[i] && coords[i] < hb->hi[i];
        if (in)
            return 1;
    }
    return 0;
}

void fc_plan_rank_box(const struct fc_plan *plan, size_t tensor, int rank, int64_t *offsets_out,
                      int64_t *sizes_out)
{
    const struct fc_plan_chunk *ch = &plan->chunks[fc_plan_rank_chunk(plan, tensor, rank)];
    const int ndim = plan->tensors[tensor].ndim;
    for (int d = 0; d < ndim; d++) {
        offsets_out[d] = ch->box.offsets[d];
        sizes_out[d] = ch->box.sizes[d];
    }
}

/* Holder runs of one chunk, gathered for printing. */
struct fc_plan__runs {
    int (*run)[2];
    size_t n, cap;
};

static int fc_plan__collect_run(void *ctxp, int lo, int hi)
{
    struct fc_plan__runs *r = ctxp;
    if (r->n == r->cap) {
        const size_t cap = r->cap ? 2 * r->cap : 16;
        int(*grown)[2] = fc_reallocarray(r->run, cap, sizeof(*r->run));
        if (grown == NULL)
            return fc_error_set(FC_ENOMEM, "plan: out of memory listing holders");
        r->run = grown;
        r->cap = cap;
    }
    r->run[r->n][0] = lo;
    r->run[r->n][1] = hi;
    r->n++;
    return FC_OK;
}

static int fc_plan__cmp_run(const void *a, const void *b)
{
    const int *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

static int fc_plan__put_ranks(struct fc_buf *out, const struct fc_plan *plan,
                              const struct fc_plan_chunk *ch)
{
    struct fc_plan__runs r = {NULL, 0, 0};
    int rc = FC_OK;
    for (size_t h = 0; h < ch->nholders; h++)
        FC_TRY_GOTO(fc_plan__holder_runs(&plan->mesh, &plan->holders[ch->first_holder + h],
                                         fc_plan__collect_run, &r),
                    rc, done);
    qsort(r.run, r.n, sizeof(*r.run), fc_plan__cmp_run);
    size_t m = 0; /* merge touching runs */
    int64_t total = 0;
    for (size_t k = 0; k < r.n; k++) {
        if (m > 0 && r.run[k][0] <= r.run[m - 1][1]) {
            if (r.run[k][1] > r.run[m - 1][1])
                r.run[m - 1][1] = r.run[k][1];
        } else {
            r.run[m][0] = r.run[k][0];
            r.run[m][1] = r.run[k][1];
            m++;
        }
    }
    for (size_t k = 0; k < m; k++)
        total += r.run[k][1] - r.run[k][0];
    if (total == (int64_t)plan->nfiles) {
        rc = fc_buf_puts(out, "all");
        goto done;
    }
    for (size_t k = 0; k < m; k++) {
        if (k == FC_PLAN_DESCRIBE_MAX_RUNS) {
            rc = fc_buf_printf(out, ", ... (%" PRId64 " ranks)", total);
            goto done;
        }
        const int lo = r.run[k][0], hi = r.run[k][1] - 1;
        FC_TRY_GOTO(fc_buf_printf(out, "%s%d", k > 0 ? "," : "", lo), rc, done);
        if (hi > lo)
            FC_TRY_GOTO(fc_buf_printf(out, "-%d", hi), rc, done);
    }
done:
    fc_free(r.run);
    return rc;
}

static int fc_plan__put_item(struct fc_buf *out, const struct fc_plan *plan, size_t item)
{
    const struct fc_plan_item *it = &plan->items[item];
    return fc_buf_printf(out, "  ->  %s  offset %" PRIu64 "  bytes %" PRIu64,
                         plan->files[it->rank].name, it->offset, it->length);
}

static int fc_plan__describe_tensor(const struct fc_plan *plan, size_t i, struct fc_buf *out)
{
    const struct fc_plan_tensor *t = &plan->tensors[i];
    FC_TRY(fc_buf_puts(out, "tensor "));
    FC_TRY(fc_plan__put_key(out, t->key));
    FC_TRY(fc_buf_printf(out, "  %s ", fc_dtype_name(t->dtype)));
    FC_TRY(fc_dims_format(out, t->ndim, t->shape));
    char pname[160];
    FC_TRY(fc_buf_printf(out, "  %s",
                         fc_mesh_placement_name(&plan->mesh, t->pl, pname, sizeof(pname))));
    if (t->alias_of != FC_PLAN_NONE) {
        FC_TRY(fc_buf_puts(out, "  alias of "));
        FC_TRY(fc_plan__put_key(out, plan->tensors[t->alias_of].key));
    }
    FC_TRY(fc_buf_putc(out, '\n'));
    for (size_t j = 0; j < t->nchunks; j++) {
        const struct fc_plan_chunk *ch = &plan->chunks[t->first_chunk + j];
        int empty = 0;
        for (int d = 0; d < t->ndim; d++)
            empty |= ch->box.sizes[d] == 0;
        FC_TRY(fc_buf_puts(out, "  box "));
        FC_TRY(fc_box_format(out, t->ndim, ch->box.offsets, ch->box.sizes));
        FC_TRY(fc_buf_puts(out, "  ranks "));
        FC_TRY(fc_plan__put_ranks(out, plan, ch));
        FC_TRY(fc_plan__put_item(out, plan, ch->item));
        if (empty)
            FC_TRY(fc_buf_puts(out, "  (empty)"));
        if (t->alias_of != FC_PLAN_NONE)
            FC_TRY(fc_buf_puts(out, "  (shared)"));
        FC_TRY(fc_buf_putc(out, '\n'));
    }
    return FC_OK;
}

int fc_plan_describe(const struct fc_plan *plan, struct fc_buf *out)
{
    assert(plan != NULL && out != NULL);
    char mname[96];
    FC_TRY(fc_buf_printf(out,
                         "plan: mesh %s (world %zu); %zu tensors, %zu values; "
                         "%zu items in %zu files, %" PRIu64 " bytes\n",
                         fc_mesh_describe(&plan->mesh, mname, sizeof(mname)), plan->nfiles,
                         plan->ntensors, plan->nvalues, plan->nitems, plan->nfiles,
                         plan->total_bytes));
    for (size_t v = 0; v < plan->nvalues; v++) {
        FC_TRY(fc_buf_puts(out, "value "));
        FC_TRY(fc_plan__put_key(out, plan->values[v].key));
        FC_TRY(fc_plan__put_item(out, plan, plan->values[v].item));
        FC_TRY(fc_buf_putc(out, '\n'));
    }
    for (size_t i = 0; i < plan->ntensors; i++)
        FC_TRY(fc_plan__describe_tensor(plan, i, out));
    for (size_t r = 0; r < plan->nfiles; r++) {
        const struct fc_plan_file *f = &plan->files[r];
        FC_TRY(fc_buf_printf(out, "file %s  %zu items  %" PRIu64 " bytes\n", f->name, f->nitems,
                             f->nbytes));
    }
    return FC_OK;
}
