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

static int fc_plan__check_tensor(const struct fc_plan_tensor_in *all, size_t i)
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
    if (t->alias_of == -1)
        return FC_OK;
    if (t->alias_of < 0 || (uint64_t)t->alias_of >= (uint64_t)i)
        return fc_error_set(FC_EINVAL,
                            "plan: tensor '%s': alias_of %" PRId64 " is not an earlier tensor",
                            t->key, t->alias_of);
    const struct fc_plan_tensor_in *src = &all[t->alias_of];
    int same = src->dtype == t->dtype && src->ndim == t->ndim && src->placement == t->placement;
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

/* Number of distinct boxes of a (root) tensor: invariant 1 of plan.h. */
static size_t fc_plan__distinct_boxes(const struct fc_plan_tensor_in *t, int shard)
{
    if (t->placement == FC_PLACE_REPLICATE)
        return 1;
    const int64_t k = fc_mesh_nonempty_chunks(t->shape[0], shard);
    return (size_t)k + (k < shard ? 1 : 0);
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

/* The least loaded holder of shard coordinates [first, first + count), ties to the lowest rank. */
static int fc_plan__pick(const struct fc_plan__loads *l, const struct fc_mesh *mesh, int first,
                         int count)
{
    if (first == 0 && count == mesh->shard)
        return l->tree[1];
    int best = -1;
    for (int r = 0; r < mesh->replicate; r++) {
        const int lo = r * mesh->shard + first;
        best = fc_plan__better(l, best, fc_plan__best_in(l, lo, lo + count));
    }
    return best;
}

void fc_plan_free(struct fc_plan *plan)
{
    if (plan == NULL)
        return;
    fc_free(plan->tensors);
    fc_free(plan->values);
    fc_free(plan->chunks);
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

/* Allocates the plan's arrays once all counts are known. */
static int fc_plan__alloc(struct fc_plan *p, size_t ndims, size_t nstrings)
{
    p->tensors = fc_calloc(p->ntensors, sizeof(*p->tensors));
    p->values = fc_calloc(p->nvalues, sizeof(*p->values));
    p->chunks = fc_calloc(p->nchunks, sizeof(*p->chunks));
    p->items = fc_calloc(p->nitems, sizeof(*p->items));
    p->files = fc_calloc(p->nfiles, sizeof(*p->files));
    p->dims_ = fc_calloc(ndims, sizeof(*p->dims_));
    p->strings_ = fc_calloc(nstrings, 1);
    if (p->tensors == NULL || p->values == NULL || p->chunks == NULL || p->items == NULL ||
        p->files == NULL || p->dims_ == NULL || p->strings_ == NULL)
        return fc_error_set(FC_ENOMEM, "plan: out of memory for %zu chunks and %zu items",
                            p->nchunks, p->nitems);
    return FC_OK;
}

/* Fills tensors[] and chunks[] (boxes, holders); items are set later. */
static void fc_plan__fill_chunks(struct fc_plan *p, const struct fc_plan_tensor_in *in,
                                 size_t *str_cursor)
{
    const int S = p->mesh.shard;
    size_t c = 0, dim_cursor = 0;
    for (size_t i = 0; i < p->ntensors; i++) {
        struct fc_plan_tensor *t = &p->tensors[i];
        t->key = fc_plan__intern(p->strings_, str_cursor, in[i].key);
        t->dtype = in[i].dtype;
        t->ndim = in[i].ndim;
        memcpy(t->shape, in[i].shape, sizeof(t->shape));
        for (int d = t->ndim; d < FC_MAX_DIMS; d++)
            t->shape[d] = 0;
        t->placement = in[i].placement;
        t->alias_of = FC_PLAN_NONE;
        if (in[i].alias_of >= 0) {
            const size_t src = (size_t)in[i].alias_of;
            t->alias_of = p->tensors[src].alias_of == FC_PLAN_NONE ? src : p->tensors[src].alias_of;
        }
        t->first_chunk = c;
        t->nchunks = fc_plan__distinct_boxes(&in[i], S);
        const int64_t k =
            t->placement == FC_PLACE_SHARD0 ? fc_mesh_nonempty_chunks(t->shape[0], S) : 0;
        for (size_t j = 0; j < t->nchunks; j++, c++) {
            struct fc_plan_chunk *ch = &p->chunks[c];
            int64_t *off = p->dims_ + dim_cursor;
            int64_t *size = off + t->ndim;
            dim_cursor += 2 * (size_t)t->ndim;
            ch->box.offsets = off;
            ch->box.sizes = size;
            ch->tensor = i;
            ch->item = FC_PLAN_NONE;
            for (int d = 0; d < t->ndim; d++) {
                off[d] = 0;
                size[d] = t->shape[d];
            }
            if (t->placement == FC_PLACE_REPLICATE) {
                ch->shard_first = 0;
                ch->shard_count = S;
            } else if ((int64_t)j < k) {
                ch->shard_first = (int)j;
                ch->shard_count = 1;
                fc_mesh_chunk(t->shape[0], S, (int64_t)j, &off[0], &size[0]);
            } else {
                ch->shard_first = (int)k;
                ch->shard_count = S - (int)k;
                fc_mesh_chunk(t->shape[0], S, k, &off[0], &size[0]);
            }
        }
    }
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
    for (size_t v = 0; v < p->nvalues; v++, k++) {
        tmp[k].kind = FC_ITEM_BYTES;
        tmp[k].index = v;
        tmp[k].chunk = FC_PLAN_NONE;
        tmp[k].length = values[v].blob_size;
        tmp[k].rank = fc_plan__pick(loads, &p->mesh, 0, p->mesh.shard);
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
            tmp[k].rank = fc_plan__pick(loads, &p->mesh, ch->shard_first, ch->shard_count);
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

int fc_plan_build(struct fc_plan **out, const struct fc_mesh *mesh,
                  const struct fc_plan_tensor_in *tensors, size_t ntensors,
                  const struct fc_plan_value_in *values, size_t nvalues,
                  fc_plan_blob_size_fn blob_size, void *ctx)
{
    struct fc_plan *p = NULL;
    struct fc_plan_item *tmp = NULL;
    struct fc_plan__loads loads = {NULL, NULL, 0};
    size_t *cursor = NULL;
    int rc = FC_OK;

    assert(out != NULL && mesh != NULL);
    assert(ntensors == 0 || (tensors != NULL && blob_size != NULL));
    assert(nvalues == 0 || values != NULL);
    *out = NULL;
    FC_TRY(fc_mesh_validate(mesh));
    for (size_t i = 0; i < ntensors; i++)
        FC_TRY(fc_plan__check_tensor(tensors, i));
    FC_TRY(fc_plan__check_keys(tensors, ntensors, values, nvalues));

    /* Count everything first, so every array is allocated once. */
    size_t nchunks = 0, ndims = 0, nitems = nvalues, nstrings = 0;
    size_t *counts = fc_calloc(ntensors, sizeof(*counts));
    if (counts == NULL)
        return fc_error_set(FC_ENOMEM, "plan: out of memory for %zu tensors", ntensors);
    int overflow = 0;
    for (size_t i = 0; i < ntensors; i++) {
        const int64_t a = tensors[i].alias_of;
        counts[i] = a >= 0 ? counts[a] : fc_plan__distinct_boxes(&tensors[i], mesh->shard);
        size_t d;
        overflow |= fc_add_size(nchunks, counts[i], &nchunks);
        overflow |= fc_mul_size(counts[i], 2 * (size_t)tensors[i].ndim, &d);
        overflow |= fc_add_size(ndims, d, &ndims);
        if (a < 0)
            overflow |= fc_add_size(nitems, counts[i], &nitems);
        overflow |= fc_add_size(nstrings, strlen(tensors[i].key) + 1, &nstrings);
    }
    for (size_t v = 0; v < nvalues; v++) {
        assert(values[v].key != NULL);
        overflow |= fc_add_size(nstrings, strlen(values[v].key) + 1, &nstrings);
    }
    fc_free(counts);
    if (overflow)
        return fc_error_set(FC_EINVAL, "plan: chunk or item count overflows");

    p = fc_calloc(1, sizeof(*p));
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "plan: out of memory");
    p->mesh = *mesh;
    p->ntensors = ntensors;
    p->nvalues = nvalues;
    p->nchunks = nchunks;
    p->nitems = nitems;
    p->nfiles = (size_t)fc_mesh_world_size(mesh);
    FC_TRY_GOTO(fc_plan__alloc(p, ndims, nstrings), rc, done);

    size_t str_cursor = 0;
    fc_plan__fill_chunks(p, tensors, &str_cursor);
    for (size_t v = 0; v < nvalues; v++) {
        p->values[v].key = fc_plan__intern(p->strings_, &str_cursor, values[v].key);
        p->values[v].item = FC_PLAN_NONE;
    }

    const int world = (int)p->nfiles;
    tmp = fc_calloc(nitems, sizeof(*tmp));
    cursor = fc_calloc((size_t)world, sizeof(*cursor));
    if (tmp == NULL || cursor == NULL) {
        rc =
            fc_error_set(FC_ENOMEM, "plan: out of memory for %zu items on %d ranks", nitems, world);
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

done:
    fc_free(tmp);
    fc_plan__loads_release(&loads);
    fc_free(cursor);
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

/* ------------------------------------------------------------------------ */
/* Queries and --dry-run text                                               */

size_t fc_plan_rank_chunk(const struct fc_plan *plan, size_t tensor, int rank)
{
    assert(plan != NULL && tensor < plan->ntensors);
    assert(rank >= 0 && (size_t)rank < plan->nfiles);
    const struct fc_plan_tensor *t = &plan->tensors[tensor];
    if (t->placement == FC_PLACE_REPLICATE)
        return t->first_chunk;
    const int s = rank % plan->mesh.shard;
    const int64_t k = fc_mesh_nonempty_chunks(t->shape[0], plan->mesh.shard);
    return t->first_chunk + (size_t)(s < k ? s : k);
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

static int fc_plan__put_ranks(struct fc_buf *out, const struct fc_mesh *mesh, int first, int count)
{
    if (first == 0 && count == mesh->shard)
        return fc_buf_puts(out, "all");
    for (int r = 0; r < mesh->replicate; r++) {
        if (r == FC_PLAN_DESCRIBE_MAX_RUNS)
            return fc_buf_printf(out, ", ... (%" PRId64 " ranks)",
                                 (int64_t)mesh->replicate * count);
        const int lo = r * mesh->shard + first, hi = lo + count - 1;
        FC_TRY(fc_buf_printf(out, "%s%d", r > 0 ? "," : "", lo));
        if (hi > lo)
            FC_TRY(fc_buf_printf(out, "-%d", hi));
    }
    return FC_OK;
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
    FC_TRY(fc_buf_printf(out, "  %s", fc_placement_name(&plan->mesh, t->placement)));
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
        FC_TRY(fc_plan__put_ranks(out, &plan->mesh, ch->shard_first, ch->shard_count));
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
    FC_TRY(fc_buf_printf(out,
                         "plan: mesh replicate=%d shard=%d (world %zu); %zu tensors, %zu values; "
                         "%zu items in %zu files, %" PRIu64 " bytes\n",
                         plan->mesh.replicate, plan->mesh.shard, plan->nfiles, plan->ntensors,
                         plan->nvalues, plan->nitems, plan->nfiles, plan->total_bytes));
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
