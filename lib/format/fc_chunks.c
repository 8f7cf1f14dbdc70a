/*
 * fc_chunks.c - boxes, replicas, the exact tiling check and the intersection
 * index of fc_chunks.h.
 */
#include "fc_chunks.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_error.h"
#include "fc_sort.h"

int fc_dims_format(struct fc_buf *out, int ndim, const int64_t *v)
{
    FC_TRY(fc_buf_putc(out, '['));
    for (int d = 0; d < ndim; d++)
        FC_TRY(fc_buf_printf(out, "%s%" PRId64, d > 0 ? ", " : "", v[d]));
    return fc_buf_putc(out, ']');
}

int fc_box_format(struct fc_buf *out, int ndim, const int64_t *offsets, const int64_t *sizes)
{
    FC_TRY(fc_buf_putc(out, '['));
    for (int d = 0; d < ndim; d++) {
        int64_t end;
        if (fc_add_i64(offsets[d], sizes[d], &end) < 0)
            end = INT64_MAX;
        FC_TRY(fc_buf_printf(out, "%s%" PRId64 ":%" PRId64, d > 0 ? ", " : "", offsets[d], end));
    }
    return fc_buf_putc(out, ']');
}

/* ------------------------------------------------------------------------ */
/* Box orders                                                               */

/* What the box comparators sort by: boxes[] of ndim dims, keyed on dim `dim`. */
struct fc_box_order {
    int ndim;
    const struct fc_box *boxes;
    int dim;
};

/* Start on dim `dim`, then index (a total order, so sorts are deterministic). */
static int fc_box__cmp_start(const void *ctxp, size_t a, size_t b)
{
    const struct fc_box_order *o = ctxp;
    const int64_t x = o->boxes[a].offsets[o->dim], y = o->boxes[b].offsets[o->dim];
    if (x != y)
        return x < y ? -1 : 1;
    return (a > b) - (a < b);
}

/* Lexicographic order of offset tuples, then index. */
static int fc_box__cmp_offsets(const void *ctxp, size_t a, size_t b)
{
    const struct fc_box_order *o = ctxp;
    for (int d = 0; d < o->ndim; d++) {
        const int64_t x = o->boxes[a].offsets[d], y = o->boxes[b].offsets[d];
        if (x != y)
            return x < y ? -1 : 1;
    }
    return (a > b) - (a < b);
}

static int fc_same_offsets(int ndim, const struct fc_box *a, const struct fc_box *b)
{
    for (int d = 0; d < ndim; d++) {
        if (a->offsets[d] != b->offsets[d])
            return 0;
    }
    return 1;
}

static int fc_same_box(int ndim, const struct fc_box *a, const struct fc_box *b)
{
    for (int d = 0; d < ndim; d++) {
        if (a->offsets[d] != b->offsets[d] || a->sizes[d] != b->sizes[d])
            return 0;
    }
    return 1;
}

int fc_chunks_replicas(int ndim, const struct fc_box *chunks, size_t n, size_t *first_of,
                       size_t *nreplicas)
{
    size_t *idx = fc_calloc(n + 1, sizeof(*idx));
    int rc = FC_OK;
    *nreplicas = 0;
    if (idx == NULL)
        return fc_error_set(FC_ENOMEM, "chunks: out of memory for %zu chunks", n);
    for (size_t i = 0; i < n; i++)
        idx[i] = first_of[i] = i;
    const struct fc_box_order ord = {ndim, chunks, 0};
    /* Equal offset tuples end up adjacent, lowest index first; compare sizes within a run. */
    FC_TRY_GOTO(fc_sort_idx(idx, n, fc_box__cmp_offsets, &ord), rc, done);
    for (size_t i = 1, run = 0; i < n; i++) {
        if (!fc_same_offsets(ndim, &chunks[idx[run]], &chunks[idx[i]])) {
            run = i;
            continue;
        }
        for (size_t j = run; j < i; j++) {
            if (first_of[idx[j]] == idx[j] && fc_same_box(ndim, &chunks[idx[j]], &chunks[idx[i]])) {
                first_of[idx[i]] = idx[j];
                ++*nreplicas;
                break;
            }
        }
    }
done:
    fc_free(idx);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Exact tiling                                                             */

/* Work bound of fc_chunks_check_tiling(): this many steps per chunk, and at least the floor. */
#define FC_TILING_WORK_PER_CHUNK 64u
#define FC_TILING_WORK_FLOOR     ((uint64_t)1 << 26)

/*
 * State of one fc_chunks_check_tiling() call.  The non-empty boxes are the
 * index array idx[]; a group is a run idx[begin..end) that must tile its
 * region [lo, hi) exactly.  Groups still to check sit on a stack of int64
 * records {begin, end, lo[ndim], hi[ndim]}.
 */
struct fc_tiling {
    struct fc_box_order ord;
    const int64_t *shape;
    size_t *idx;
    int64_t *stack;
    size_t nstack, capstack;
    uint64_t work, budget;
    int over_budget;
    /* The first overlap and the first gap found. */
    int has_overlap, has_gap;
    size_t ov_a, ov_b;                                /* chunk indices */
    int64_t gap_lo[FC_MAX_DIMS], gap_hi[FC_MAX_DIMS]; /* wholly uncovered, or ... */
    uint64_t gap_missing; /* ... > 0: this many elements of [gap_lo, gap_hi) are uncovered */
};

static int64_t fc_box__end(const struct fc_box *b, int d)
{
    return b->offsets[d] + b->sizes[d]; /* boxes are checked in bounds first */
}

/* Spends n steps; 0 once the budget is gone (the check then stops). */
static int fc_tiling__spend(struct fc_tiling *t, uint64_t n)
{
    t->work += n;
    if (t->work > t->budget)
        t->over_budget = 1;
    return !t->over_budget;
}

/* Records the uncovered box: region [lo, hi) with dim k narrowed to [a, b). */
static void fc_tiling__gap(struct fc_tiling *t, const int64_t *lo, const int64_t *hi, int k,
                           int64_t a, int64_t b)
{
    if (t->has_gap)
        return;
    t->has_gap = 1;
    for (int d = 0; d < t->ord.ndim; d++) {
        t->gap_lo[d] = d == k ? a : lo[d];
        t->gap_hi[d] = d == k ? b : hi[d];
    }
}

static int fc_tiling__push(struct fc_tiling *t, size_t begin, size_t end, const int64_t *lo,
                           const int64_t *hi)
{
    const size_t nd = (size_t)t->ord.ndim, rec = 2 + 2 * nd;
    if (t->nstack == t->capstack) {
        const size_t cap = t->capstack == 0 ? 16 : 2 * t->capstack;
        size_t nvals;
        if (fc_mul_size(cap, rec, &nvals) < 0)
            return fc_error_set(FC_ENOMEM, "chunks: too many groups");
        int64_t *s = fc_reallocarray(t->stack, nvals, sizeof(*s));
        if (s == NULL)
            return fc_error_set(FC_ENOMEM, "chunks: out of memory for %zu groups", cap);
        t->stack = s;
        t->capstack = cap;
    }
    int64_t *r = t->stack + t->nstack++ * rec;
    r[0] = (int64_t)begin;
    r[1] = (int64_t)end;
    memcpy(r + 2, lo, nd * sizeof(*lo));
    memcpy(r + 2 + nd, hi, nd * sizeof(*hi));
    return FC_OK;
}

/* A group of one box tiles its region only by being it; else part of the region is a gap. */
static void fc_tiling__single(struct fc_tiling *t, size_t i, const int64_t *lo, const int64_t *hi)
{
    const struct fc_box *b = &t->ord.boxes[i];
    for (int d = 0; d < t->ord.ndim; d++) {
        if (b->offsets[d] > lo[d]) {
            fc_tiling__gap(t, lo, hi, d, lo[d], b->offsets[d]);
            return;
        }
        if (fc_box__end(b, d) < hi[d]) {
            fc_tiling__gap(t, lo, hi, d, fc_box__end(b, d), hi[d]);
            return;
        }
    }
}

/*
 * Every overlapping pair of a group, up to the first: sort by start on dim 0 and
 * test each box against those starting before it ends there.  Quadratic on
 * boxes that share dim-0 ranges; only groups with no guillotine cut get here.
 */
static int fc_tiling__pairs(struct fc_tiling *t, size_t begin, size_t end)
{
    const int nd = t->ord.ndim;
    const struct fc_box *bx = t->ord.boxes;
    size_t *v = t->idx + begin;
    const size_t m = end - begin;
    t->ord.dim = 0;
    if (nd > 0) {
        if (!fc_tiling__spend(t, m))
            return FC_OK;
        FC_TRY(fc_sort_idx(v, m, fc_box__cmp_start, &t->ord));
    }
    for (size_t i = 0; i < m; i++) {
        for (size_t j = i + 1; j < m; j++) {
            if (nd > 0 && bx[v[j]].offsets[0] >= fc_box__end(&bx[v[i]], 0))
                break;
            if (!fc_tiling__spend(t, 1))
                return FC_OK;
            int hit = 1;
            for (int d = 1; hit && d < nd; d++)
                hit = bx[v[i]].offsets[d] < fc_box__end(&bx[v[j]], d) &&
                      bx[v[j]].offsets[d] < fc_box__end(&bx[v[i]], d);
            if (hit) {
                t->has_overlap = 1;
                t->ov_a = v[i] < v[j] ? v[i] : v[j];
                t->ov_b = v[i] < v[j] ? v[j] : v[i];
                return FC_OK;
            }
        }
    }
    return FC_OK;
}

/* A group with no cut and no overlap tiles its region iff its volumes add up to the region's. */
static void fc_tiling__volume(struct fc_tiling *t, size_t begin, size_t end, const int64_t *lo,
                              const int64_t *hi)
{
    const int nd = t->ord.ndim;
    uint64_t want = 1, have = 0;
    for (int d = 0; d < nd; d++)
        want *= (uint64_t)(hi[d] - lo[d]); /* <= the tensor's numel */
    for (size_t j = begin; j < end; j++) {
        int64_t v = 0;
        (void)fc_shape_numel(t->ord.boxes[t->idx[j]].sizes, nd, &v); /* disjoint, inside */
        have += (uint64_t)v;
    }
    if (have < want && !t->has_gap) {
        fc_tiling__gap(t, lo, hi, -1, 0, 0);
        t->gap_missing = want - have;
    }
}

/*
 * Splits group [begin, end) of region [lo, hi) along dim k where no box
 * crosses (a guillotine cut), or finds a slab of the region no box reaches.
 * Returns FC_CUT_SPLIT (the parts are checked or pushed), FC_CUT_GAP,
 * FC_CUT_NONE (dim k has neither), FC_CUT_STOP (out of budget) or <0.
 */
enum { FC_CUT_NONE = 0, FC_CUT_SPLIT = 1, FC_CUT_GAP = 2, FC_CUT_STOP = 3 };

static int fc_tiling__cut(struct fc_tiling *t, size_t begin, size_t end, const int64_t *lo,
                          const int64_t *hi, int k)
{
    const struct fc_box *bx = t->ord.boxes;
    size_t *v = t->idx;
    size_t j = begin;
    /* Every box spanning the region on dim k: nothing to cut, nothing missing. */
    while (j < end && bx[v[j]].offsets[k] == lo[k] && fc_box__end(&bx[v[j]], k) == hi[k])
        j++;
    if (j == end)
        return FC_CUT_NONE;
    if (!fc_tiling__spend(t, end - begin))
        return FC_CUT_STOP;
    t->ord.dim = k;
    FC_TRY(fc_sort_idx(v + begin, end - begin, fc_box__cmp_start, &t->ord));
    int64_t reach = lo[k]; /* furthest end on dim k of the boxes so far */
    size_t first = begin;  /* first box of the current part */
    int cuts = 0;
    for (j = begin; j <= end; j++) {
        const int64_t start = j < end ? bx[v[j]].offsets[k] : hi[k];
        if (start > reach) {
            fc_tiling__gap(t, lo, hi, k, reach, start);
            return FC_CUT_GAP;
        }
        if (j > begin && start == reach && (cuts > 0 || j < end)) {
            /* Boxes [first, j) fill [lo_k, reach) of dim k: one part. */
            int64_t plo[FC_MAX_DIMS], phi[FC_MAX_DIMS];
            memcpy(plo, lo, sizeof(*lo) * (size_t)t->ord.ndim);
            memcpy(phi, hi, sizeof(*hi) * (size_t)t->ord.ndim);
            plo[k] = bx[v[first]].offsets[k];
            phi[k] = reach;
            if (j - first == 1)
                fc_tiling__single(t, v[first], plo, phi);
            else
                FC_TRY(fc_tiling__push(t, first, j, plo, phi));
            first = j;
            cuts++;
        }
        if (j < end && fc_box__end(&bx[v[j]], k) > reach)
            reach = fc_box__end(&bx[v[j]], k);
    }
    return cuts > 0 ? FC_CUT_SPLIT : FC_CUT_NONE;
}

/*
 * One group: cut it on the first dim that has a cut; else, or when a dim shows
 * a gap and no overlap is known yet (the message names both), test its pairs
 * and, with no overlap, its volume.
 */
static int fc_tiling__group(struct fc_tiling *t, size_t begin, size_t end, const int64_t *lo,
                            const int64_t *hi)
{
    if (end - begin == 1) {
        fc_tiling__single(t, t->idx[begin], lo, hi);
        return FC_OK;
    }
    for (int k = 0; k < t->ord.ndim; k++) {
        const int rc = fc_tiling__cut(t, begin, end, lo, hi, k);
        if (rc < 0)
            return rc;
        if (rc == FC_CUT_SPLIT || rc == FC_CUT_STOP || (rc == FC_CUT_GAP && t->has_overlap))
            return FC_OK;
        if (rc == FC_CUT_GAP)
            break;
    }
    FC_TRY(fc_tiling__pairs(t, begin, end));
    if (!t->has_overlap && !t->over_budget)
        fc_tiling__volume(t, begin, end, lo, hi);
    return FC_OK;
}

/* The error message: what overlaps, what is uncovered. */
static int fc_tiling__describe(const struct fc_tiling *t, struct fc_buf *m)
{
    const int nd = t->ord.ndim;
    const struct fc_box *bx = t->ord.boxes;
    if (t->has_overlap) {
        const struct fc_box *a = &bx[t->ov_a], *b = &bx[t->ov_b];
        int64_t off[FC_MAX_DIMS], size[FC_MAX_DIMS];
        for (int d = 0; d < nd; d++) {
            const int64_t ea = fc_box__end(a, d), eb = fc_box__end(b, d);
            off[d] = a->offsets[d] > b->offsets[d] ? a->offsets[d] : b->offsets[d];
            size[d] = (ea < eb ? ea : eb) - off[d];
        }
        FC_TRY(fc_buf_puts(m, " overlap at "));
        FC_TRY(fc_box_format(m, nd, off, size));
        FC_TRY(fc_buf_puts(m, " (chunks "));
        FC_TRY(fc_box_format(m, nd, a->offsets, a->sizes));
        FC_TRY(fc_buf_puts(m, " and "));
        FC_TRY(fc_box_format(m, nd, b->offsets, b->sizes));
        FC_TRY(fc_buf_puts(m, t->has_gap ? ") and" : ")"));
    }
    if (t->has_gap) {
        int64_t size[FC_MAX_DIMS];
        for (int d = 0; d < nd; d++)
            size[d] = t->gap_hi[d] - t->gap_lo[d];
        FC_TRY(fc_buf_puts(m, " leave "));
        if (t->gap_missing > 0)
            FC_TRY(fc_buf_printf(m, "%" PRIu64 " elements of ", t->gap_missing));
        FC_TRY(fc_box_format(m, nd, t->gap_lo, size));
        FC_TRY(fc_buf_puts(m, " uncovered"));
    }
    if (!t->has_overlap && !t->has_gap)
        FC_TRY(fc_buf_printf(m,
                             " are laid out too irregularly to prove that they tile the tensor "
                             "(more than %" PRIu64 " steps)",
                             t->budget));
    return FC_OK;
}

/* "<where>: chunks of '<key>'" then `what`, as the FC_ECORRUPT message. */
static int fc_tiling__fail(const char *where, const char *key, const struct fc_buf *what)
{
    return fc_error_set(FC_ECORRUPT, "%s%schunks of '%s'%.*s", where != NULL ? where : "",
                        where != NULL ? ": " : "", key, (int)what->len, (const char *)what->data);
}

/* Every box inside the shape (checked arithmetic); the non-empty ones into t->idx. */
static int fc_tiling__bounds(struct fc_tiling *t, size_t n, size_t *m, struct fc_buf *msg)
{
    const int nd = t->ord.ndim;
    *m = 0;
    for (size_t i = 0; i < n; i++) {
        const struct fc_box *b = &t->ord.boxes[i];
        int inside = 1, empty = 0;
        for (int d = 0; d < nd; d++) {
            const int64_t off = b->offsets[d], size = b->sizes[d], dim = t->shape[d];
            inside &= off >= 0 && size >= 0 && off <= dim - size;
            empty |= size == 0;
        }
        if (!inside) {
            FC_TRY(fc_buf_puts(msg, ": "));
            FC_TRY(fc_box_format(msg, nd, b->offsets, b->sizes));
            FC_TRY(fc_buf_puts(msg, " lies outside the shape "));
            FC_TRY(fc_dims_format(msg, nd, t->shape));
            return 0;
        }
        if (!empty)
            t->idx[(*m)++] = i;
    }
    return 1;
}

int fc_chunks_check_tiling(int ndim, const int64_t *shape, const struct fc_box *chunks, size_t n,
                           const char *where, const char *key)
{
    assert(n == 0 || chunks != NULL);
    if (ndim < 0 || ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "chunks: %d dims is outside [0, %d]", ndim, FC_MAX_DIMS);
    struct fc_buf msg = FC_BUF_INIT(4096);
    int64_t numel;
    if (fc_shape_numel(shape, ndim, &numel) < 0) {
        int rc = fc_buf_puts(&msg, ": the shape ");
        if (rc == FC_OK)
            rc = fc_dims_format(&msg, ndim, shape);
        if (rc == FC_OK)
            rc = fc_buf_puts(&msg, " has a negative dim or more than 2^63 elements");
        if (rc == FC_OK)
            rc = fc_tiling__fail(where, key, &msg);
        fc_buf_release(&msg);
        return rc;
    }
    struct fc_tiling t;
    memset(&t, 0, sizeof(t));
    t.ord = (struct fc_box_order){ndim, chunks, 0};
    t.shape = shape;
    t.budget = n > UINT64_MAX / FC_TILING_WORK_PER_CHUNK ? UINT64_MAX
                                                         : (uint64_t)n * FC_TILING_WORK_PER_CHUNK;
    if (t.budget < FC_TILING_WORK_FLOOR)
        t.budget = FC_TILING_WORK_FLOOR;
    t.idx = fc_calloc(n + 1, sizeof(*t.idx));
    int rc = FC_OK;
    if (t.idx == NULL) {
        rc = fc_error_set(FC_ENOMEM, "chunks: out of memory for %zu chunks", n);
        goto done;
    }
    size_t m;
    rc = fc_tiling__bounds(&t, n, &m, &msg);
    if (rc <= 0) {
        if (rc == 0)
            rc = fc_tiling__fail(where, key, &msg);
        goto done;
    }
    rc = FC_OK;
    int64_t lo[FC_MAX_DIMS] = {0};
    if (m == 0) {
        if (numel > 0)
            fc_tiling__gap(&t, lo, shape, -1, 0, 0);
    } else {
        FC_TRY_GOTO(fc_tiling__group(&t, 0, m, lo, shape), rc, done);
    }
    const size_t rec = 2 + 2 * (size_t)ndim;
    while (t.nstack > 0 && !t.over_budget && !(t.has_gap && t.has_overlap)) {
        /* The record is copied out: the group may push onto the stack it came from. */
        int64_t r[2 + 2 * FC_MAX_DIMS];
        memcpy(r, t.stack + --t.nstack * rec, rec * sizeof(*r));
        FC_TRY_GOTO(fc_tiling__group(&t, (size_t)r[0], (size_t)r[1], r + 2, r + 2 + ndim), rc,
                    done);
    }
    if (t.has_gap || t.has_overlap || t.over_budget) {
        FC_TRY_GOTO(fc_tiling__describe(&t, &msg), rc, done);
        rc = fc_tiling__fail(where, key, &msg);
    }
done:
    fc_buf_release(&msg);
    fc_free(t.idx);
    fc_free(t.stack);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Intersection index                                                       */

struct fc_chunk_index {
    int ndim;
    const struct fc_box *chunks;
    size_t n;
    size_t *order;   /* chunk indices by (dim-0 start, index) */
    int64_t *maxend; /* maxend[i] = max dim-0 end over order[0..i] */
};

void fc_chunk_index_free(struct fc_chunk_index *idx)
{
    if (idx == NULL)
        return;
    fc_free(idx->order);
    fc_free(idx->maxend);
    fc_free(idx);
}

int fc_chunk_index_new(struct fc_chunk_index **out, int ndim, const struct fc_box *chunks, size_t n)
{
    assert(out != NULL && (n == 0 || chunks != NULL));
    *out = NULL;
    if (ndim < 0 || ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "chunk index: %d dims is outside [0, %d]", ndim,
                            FC_MAX_DIMS);
    for (size_t i = 0; i < n; i++) {
        for (int d = 0; d < ndim; d++) {
            int64_t end;
            if (chunks[i].offsets[d] < 0 || chunks[i].sizes[d] < 0 ||
                fc_add_i64(chunks[i].offsets[d], chunks[i].sizes[d], &end) < 0)
                return fc_error_set(FC_EINVAL,
                                    "chunk index: chunk %zu has an invalid box in dim %d "
                                    "(offset %" PRId64 ", size %" PRId64 ")",
                                    i, d, chunks[i].offsets[d], chunks[i].sizes[d]);
        }
    }
    struct fc_chunk_index *idx = fc_calloc(1, sizeof(*idx));
    if (idx == NULL)
        return fc_error_set(FC_ENOMEM, "chunk index: out of memory");
    idx->ndim = ndim;
    idx->chunks = chunks;
    idx->n = n;
    idx->order = fc_calloc(n, sizeof(*idx->order));
    idx->maxend = fc_calloc(n, sizeof(*idx->maxend));
    if (idx->order == NULL || idx->maxend == NULL) {
        fc_chunk_index_free(idx);
        return fc_error_set(FC_ENOMEM, "chunk index: out of memory for %zu chunks", n);
    }
    for (size_t i = 0; i < n; i++)
        idx->order[i] = i;
    if (ndim > 0) {
        const struct fc_box_order ord = {ndim, chunks, 0};
        const int rc = fc_sort_idx(idx->order, n, fc_box__cmp_start, &ord);
        if (rc < 0) {
            fc_chunk_index_free(idx);
            return rc;
        }
        int64_t m = INT64_MIN;
        for (size_t i = 0; i < n; i++) {
            const struct fc_box *b = &chunks[idx->order[i]];
            const int64_t end = b->offsets[0] + b->sizes[0];
            m = end > m ? end : m;
            idx->maxend[i] = m;
        }
    }
    *out = idx;
    return FC_OK;
}

int fc_chunk_intersect(const struct fc_chunk_index *idx, const int64_t *target_offsets,
                       const int64_t *target_sizes, struct fc_overlap **out, size_t *n_out)
{
    assert(idx != NULL && out != NULL && n_out != NULL);
    *out = NULL;
    *n_out = 0;
    const int ndim = idx->ndim;
    int64_t tend[FC_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (target_offsets[d] < 0 || target_sizes[d] < 0 ||
            fc_add_i64(target_offsets[d], target_sizes[d], &tend[d]) < 0)
            return fc_error_set(FC_EINVAL,
                                "intersect: target box is invalid in dim %d (offset %" PRId64
                                ", size %" PRId64 ")",
                                d, target_offsets[d], target_sizes[d]);
        if (target_sizes[d] == 0)
            return FC_OK;
    }
    /* First position whose running max end passes the target's start. */
    size_t lo = 0;
    if (ndim > 0) {
        size_t hi = idx->n;
        while (lo < hi) {
            const size_t mid = lo + (hi - lo) / 2;
            if (idx->maxend[mid] > target_offsets[0])
                hi = mid;
            else
                lo = mid + 1;
        }
    }
    struct fc_overlap *res = NULL;
    size_t nres = 0, cap = 0;
    for (size_t i = lo; i < idx->n; i++) {
        const size_t c = idx->order[i];
        const struct fc_box *b = &idx->chunks[c];
        if (ndim > 0 && b->offsets[0] >= tend[0])
            break;
        struct fc_overlap o;
        int hit = 1;
        o.chunk = c;
        for (int d = 0; hit && d < ndim; d++) {
            const int64_t s = b->offsets[d] > target_offsets[d] ? b->offsets[d] : target_offsets[d];
            const int64_t be = b->offsets[d] + b->sizes[d];
            const int64_t e = be < tend[d] ? be : tend[d];
            hit = e > s;
            o.offsets[d] = s;
            o.sizes[d] = e - s;
        }
        if (!hit)
            continue;
        if (nres == cap) {
            const size_t ncap = cap == 0 ? 8 : cap * 2;
            struct fc_overlap *p = fc_reallocarray(res, ncap, sizeof(*res));
            if (p == NULL) {
                fc_free(res);
                return fc_error_set(FC_ENOMEM, "intersect: out of memory for %zu overlaps", ncap);
            }
            res = p;
            cap = ncap;
        }
        res[nres++] = o;
    }
    *out = res;
    *n_out = nres;
    return FC_OK;
}
