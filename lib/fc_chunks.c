/*
 * fc_chunks.c - boxes, the coverage checker and the intersection index of
 * fc_chunks.h.
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

/* Work bounds of the coverage checker (documented in fc_chunks.h). */
#define FC_COVERAGE_MAX_PAIR_TESTS ((uint64_t)1 << 26)
#define FC_COVERAGE_MAX_CELLS      ((uint64_t)1 << 24)
#define FC_COVERAGE_MAX_MARKS      ((uint64_t)1 << 26)

static int fc_cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

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
/* Coverage checker                                                         */

enum { FC_CHUNK_FULL = 0, FC_CHUNK_EMPTY = 1, FC_CHUNK_OOB = 2 };

struct fc_cov_ctx {
    int ndim;
    const int64_t *shape;
    const struct fc_box *chunks;
    int dim; /* sweep dim */
    struct fc_buf *report;
    const size_t *first_of; /* FC_COVERAGE_REPLICAS: fc_chunks_replicas(), else NULL */
};

/* 1 when chunk i is a replica of an earlier chunk (and replicas were asked for). */
static int fc_cov__is_replica(const struct fc_cov_ctx *ctx, size_t i)
{
    return ctx->first_of != NULL && ctx->first_of[i] != i;
}

/* Lexicographic order of offset tuples, then index (stable and total). */
static int fc_cov__cmp_offsets(const void *ctxp, size_t a, size_t b)
{
    const struct fc_cov_ctx *ctx = ctxp;
    for (int d = 0; d < ctx->ndim; d++) {
        const int64_t x = ctx->chunks[a].offsets[d], y = ctx->chunks[b].offsets[d];
        if (x != y)
            return x < y ? -1 : 1;
    }
    return (a > b) - (a < b);
}

static int fc_cov__cmp_start(const void *ctxp, size_t a, size_t b)
{
    const struct fc_cov_ctx *ctx = ctxp;
    const int64_t x = ctx->chunks[a].offsets[ctx->dim], y = ctx->chunks[b].offsets[ctx->dim];
    if (x != y)
        return x < y ? -1 : 1;
    return (a > b) - (a < b);
}

static int fc_cov__classify(const struct fc_cov_ctx *ctx, size_t i)
{
    const struct fc_box *b = &ctx->chunks[i];
    int empty = 0;
    for (int d = 0; d < ctx->ndim; d++) {
        const int64_t off = b->offsets[d], size = b->sizes[d], dim = ctx->shape[d];
        if (off < 0 || size < 0 || size > dim || off > dim - size)
            return FC_CHUNK_OOB;
        empty |= size == 0;
    }
    return empty ? FC_CHUNK_EMPTY : FC_CHUNK_FULL;
}

static int fc_cov__more(struct fc_buf *report, uint64_t n, const char *what)
{
    if (report == NULL || n <= FC_COVERAGE_REPORT_MAX)
        return FC_OK;
    return fc_buf_printf(report, "... and %" PRIu64 " more %s\n", n - FC_COVERAGE_REPORT_MAX, what);
}

static int fc_cov__report_overlap(const struct fc_cov_ctx *ctx, uint64_t nth, size_t a, size_t b)
{
    if (ctx->report == NULL || nth > FC_COVERAGE_REPORT_MAX)
        return FC_OK;
    if (a > b) {
        const size_t t = a;
        a = b;
        b = t;
    }
    FC_TRY(fc_buf_printf(ctx->report, "overlap: chunk %zu ", a));
    FC_TRY(fc_box_format(ctx->report, ctx->ndim, ctx->chunks[a].offsets, ctx->chunks[a].sizes));
    FC_TRY(fc_buf_printf(ctx->report, " and chunk %zu ", b));
    FC_TRY(fc_box_format(ctx->report, ctx->ndim, ctx->chunks[b].offsets, ctx->chunks[b].sizes));
    return fc_buf_putc(ctx->report, '\n');
}

/* Pairwise overlaps of the non-empty in-bounds chunks full[0..m): the sweep of plan.h. */
static int fc_cov__overlaps(struct fc_cov_ctx *ctx, size_t *full, size_t m, struct fc_coverage *cov)
{
    FC_TRY(fc_sort_idx(full, m, fc_cov__cmp_start, ctx));
    uint64_t tests = 0;
    const int sd = ctx->dim;
    for (size_t i = 0; i < m; i++) {
        const struct fc_box *a = &ctx->chunks[full[i]];
        const int64_t end = a->offsets[sd] + a->sizes[sd];
        for (size_t j = i + 1; j < m; j++) {
            const struct fc_box *b = &ctx->chunks[full[j]];
            if (b->offsets[sd] >= end)
                break;
            if (++tests > FC_COVERAGE_MAX_PAIR_TESTS) {
                cov->exact = 0;
                return FC_OK;
            }
            int hit = 1;
            for (int d = 0; hit && d < ctx->ndim; d++)
                hit = a->offsets[d] < b->offsets[d] + b->sizes[d] &&
                      b->offsets[d] < a->offsets[d] + a->sizes[d];
            if (hit) {
                cov->overlaps++;
                FC_TRY(fc_cov__report_overlap(ctx, cov->overlaps, full[i], full[j]));
            }
        }
    }
    return FC_OK;
}

/* Index of v in the sorted unique array e[0..n) (v is known to be there). */
static size_t fc_cov__find(const int64_t *e, size_t n, int64_t v)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (e[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * Per-dim sorted unique chunk edges (plus 0 and the shape) into
 * edges[d * stride ..], counts into nedges[d].
 */
static void fc_cov__edges(const struct fc_cov_ctx *ctx, const size_t *full, size_t m,
                          int64_t *edges, size_t stride, size_t *nedges)
{
    for (int d = 0; d < ctx->ndim; d++) {
        int64_t *e = edges + (size_t)d * stride;
        size_t k = 0;
        e[k++] = 0;
        e[k++] = ctx->shape[d];
        for (size_t i = 0; i < m; i++) {
            const struct fc_box *b = &ctx->chunks[full[i]];
            e[k++] = b->offsets[d];
            e[k++] = b->offsets[d] + b->sizes[d];
        }
        qsort(e, k, sizeof(*e), fc_cmp_i64);
        size_t u = 0;
        for (size_t i = 0; i < k; i++) {
            if (u == 0 || e[i] != e[u - 1])
                e[u++] = e[i];
        }
        nedges[d] = u;
    }
}

struct fc_cov_grid {
    const int64_t *edges;
    size_t stride;
    const size_t *nedges;
    size_t cstride[FC_MAX_DIMS]; /* row-major strides over cells */
    unsigned char *mark;         /* 0 uncovered, 1 covered, 2 covered more than once */
    uint64_t ncells;
};

/* Marks the cells of every full chunk; returns 0 when the work bound is hit. */
static int fc_cov__mark(const struct fc_cov_ctx *ctx, struct fc_cov_grid *g, const size_t *full,
                        size_t m)
{
    uint64_t work = 0;
    for (size_t i = 0; i < m; i++) {
        const struct fc_box *b = &ctx->chunks[full[i]];
        size_t lo[FC_MAX_DIMS], hi[FC_MAX_DIMS], cur[FC_MAX_DIMS];
        for (int d = 0; d < ctx->ndim; d++) {
            const int64_t *e = g->edges + (size_t)d * g->stride;
            lo[d] = fc_cov__find(e, g->nedges[d], b->offsets[d]);
            hi[d] = fc_cov__find(e, g->nedges[d], b->offsets[d] + b->sizes[d]);
            cur[d] = lo[d];
        }
        for (;;) {
            if (++work > FC_COVERAGE_MAX_MARKS)
                return 0;
            size_t cell = 0;
            for (int d = 0; d < ctx->ndim; d++)
                cell += cur[d] * g->cstride[d];
            if (g->mark[cell] < 2)
                g->mark[cell]++;
            int d = ctx->ndim - 1;
            while (d >= 0 && ++cur[d] == hi[d]) {
                cur[d] = lo[d];
                d--;
            }
            if (d < 0)
                break;
        }
    }
    return 1;
}

/* Counts uncovered cells and their elements; reports the first few. */
static int fc_cov__scan(const struct fc_cov_ctx *ctx, const struct fc_cov_grid *g,
                        struct fc_coverage *cov)
{
    for (uint64_t cell = 0; cell < g->ncells; cell++) {
        if (g->mark[cell] != 0)
            continue;
        int64_t off[FC_MAX_DIMS], size[FC_MAX_DIMS];
        uint64_t rest = cell, vol = 1;
        for (int d = ctx->ndim - 1; d >= 0; d--) {
            const size_t ncell = g->nedges[d] - 1;
            const size_t c = (size_t)(rest % ncell);
            const int64_t *e = g->edges + (size_t)d * g->stride;
            rest /= ncell;
            off[d] = e[c];
            size[d] = e[c + 1] - e[c];
            vol *= (uint64_t)size[d]; /* <= the tensor's numel */
        }
        cov->gaps++;
        cov->missing_elems += vol;
        if (ctx->report != NULL && cov->gaps <= FC_COVERAGE_REPORT_MAX) {
            FC_TRY(fc_buf_puts(ctx->report, "gap: "));
            FC_TRY(fc_box_format(ctx->report, ctx->ndim, off, size));
            FC_TRY(fc_buf_printf(ctx->report, " (%" PRIu64 " elements) is covered by no chunk\n",
                                 vol));
        }
    }
    return fc_cov__more(ctx->report, cov->gaps, "gaps");
}

/* Gaps and missing elements of the full chunks (ndim >= 1). */
static int fc_cov__gaps(struct fc_cov_ctx *ctx, const size_t *full, size_t m, int64_t *edges,
                        size_t stride, const size_t *nedges, int64_t numel, struct fc_coverage *cov)
{
    struct fc_cov_grid g;
    memset(&g, 0, sizeof(g));
    g.edges = edges;
    g.stride = stride;
    g.nedges = nedges;
    g.ncells = 1;
    int fits = 1;
    for (int d = ctx->ndim - 1; d >= 0; d--) {
        g.cstride[d] = (size_t)g.ncells;
        if (fits && fc_mul_u64(g.ncells, nedges[d] - 1, &g.ncells) < 0)
            fits = 0;
        if (g.ncells > FC_COVERAGE_MAX_CELLS)
            fits = 0;
    }
    int rc = FC_OK;
    if (fits && g.ncells > 0) {
        g.mark = fc_calloc((size_t)g.ncells, 1);
        if (g.mark == NULL)
            return fc_error_set(FC_ENOMEM, "coverage: out of memory for %" PRIu64 " cells",
                                g.ncells);
        if (fc_cov__mark(ctx, &g, full, m))
            rc = fc_cov__scan(ctx, &g, cov);
        else
            fits = 0;
        fc_free(g.mark);
        if (fits || rc < 0)
            return rc;
    } else if (fits) {
        return FC_OK; /* zero cells: the tensor has no elements */
    }
    /* Too many cells: fall back on the volume deficit. */
    uint64_t sum = 0;
    for (size_t i = 0; i < m; i++) {
        int64_t v = 0;
        (void)fc_shape_numel(ctx->chunks[full[i]].sizes, ctx->ndim, &v); /* <= numel */
        if (fc_add_u64(sum, (uint64_t)v, &sum) < 0)
            sum = UINT64_MAX;
    }
    cov->missing_elems = sum < (uint64_t)numel ? (uint64_t)numel - sum : 0;
    cov->gaps = cov->missing_elems > 0;
    if (cov->missing_elems > 0 || cov->overlaps > 0)
        cov->exact = 0;
    if (ctx->report != NULL && cov->missing_elems > 0)
        FC_TRY(fc_buf_printf(ctx->report,
                             "gap: at least %" PRIu64 " elements are covered by no chunk "
                             "(too many chunk edges to list the gaps)\n",
                             cov->missing_elems));
    return FC_OK;
}

static int fc_cov__same_offsets(const struct fc_cov_ctx *ctx, size_t a, size_t b)
{
    for (int d = 0; d < ctx->ndim; d++) {
        if (ctx->chunks[a].offsets[d] != ctx->chunks[b].offsets[d])
            return 0;
    }
    return 1;
}

/* Chunks whose offset tuple equals an earlier chunk's. */
static int fc_cov__duplicates(struct fc_cov_ctx *ctx, size_t n, struct fc_coverage *cov)
{
    if (n < 2)
        return FC_OK;
    size_t *idx = fc_calloc(n, sizeof(*idx));
    if (idx == NULL)
        return fc_error_set(FC_ENOMEM, "coverage: out of memory for %zu chunks", n);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    /* Equal tuples end up adjacent, the lowest chunk index first. */
    int rc = fc_sort_idx(idx, n, fc_cov__cmp_offsets, ctx);
    size_t first = 0; /* position of the first chunk of the current run */
    for (size_t i = 1; rc == FC_OK && i < n; i++) {
        if (!fc_cov__same_offsets(ctx, idx[first], idx[i])) {
            first = i;
            continue;
        }
        if (fc_cov__is_replica(ctx, idx[i]))
            continue;
        cov->duplicate_offsets++;
        if (ctx->report != NULL && cov->duplicate_offsets <= FC_COVERAGE_REPORT_MAX) {
            rc = fc_buf_printf(ctx->report,
                               "duplicate offsets: chunk %zu has the offsets of chunk %zu ", idx[i],
                               idx[first]);
            if (rc == FC_OK)
                rc = fc_dims_format(ctx->report, ctx->ndim, ctx->chunks[idx[i]].offsets);
            if (rc == FC_OK)
                rc = fc_buf_putc(ctx->report, '\n');
        }
    }
    if (rc == FC_OK)
        rc = fc_cov__more(ctx->report, cov->duplicate_offsets, "duplicate offsets");
    fc_free(idx);
    return rc;
}

/* 0-d tensors: every 0-d chunk covers the one element, so every pair overlaps. */
static int fc_cov__scalar(struct fc_cov_ctx *ctx, size_t n, struct fc_coverage *cov)
{
    n -= cov->replicas; /* every 0-d chunk has the same (empty) box: one of them counts */
    cov->overlaps = n < 2 ? 0 : (uint64_t)n * (uint64_t)(n - 1) / 2;
    cov->missing_elems = n == 0;
    cov->gaps = n == 0;
    if (ctx->report == NULL)
        return FC_OK;
    uint64_t listed = 0;
    for (size_t b = 1; b < n && listed < FC_COVERAGE_REPORT_MAX; b++) {
        for (size_t a = 0; a < b && listed < FC_COVERAGE_REPORT_MAX; a++)
            FC_TRY(fc_cov__report_overlap(ctx, ++listed, a, b));
    }
    FC_TRY(fc_cov__more(ctx->report, cov->overlaps, "overlaps"));
    if (n == 0)
        FC_TRY(fc_buf_puts(ctx->report, "gap: [] (1 elements) is covered by no chunk\n"));
    return FC_OK;
}

/* Same box: offsets (already known equal when called from a sorted run) and sizes. */
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
        return fc_error_set(FC_ENOMEM, "coverage: out of memory for %zu chunks", n);
    for (size_t i = 0; i < n; i++)
        idx[i] = first_of[i] = i;
    const struct fc_cov_ctx ctx = {ndim, NULL, chunks, 0, NULL, NULL};
    /* Equal offset tuples end up adjacent, lowest index first; compare sizes within a run. */
    FC_TRY_GOTO(fc_sort_idx(idx, n, fc_cov__cmp_offsets, &ctx), rc, done);
    for (size_t i = 1, run = 0; i < n; i++) {
        if (!fc_cov__same_offsets(&ctx, idx[run], idx[i])) {
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

int fc_chunks_check_coverage(int ndim, const int64_t *shape, const struct fc_box *chunks, size_t n,
                             unsigned flags, struct fc_coverage *out, struct fc_buf *report)
{
    assert(out != NULL && (n == 0 || chunks != NULL));
    memset(out, 0, sizeof(*out));
    out->nchunks = n;
    out->exact = 1;
    if (ndim < 0 || ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "coverage: %d dims is outside [0, %d]", ndim, FC_MAX_DIMS);
    int64_t numel;
    if (fc_shape_numel(shape, ndim, &numel) < 0)
        return fc_error_set(FC_EINVAL, "coverage: shape has a negative dim or too many elements");

    struct fc_cov_ctx ctx = {ndim, shape, chunks, 0, report, NULL};
    int rc = FC_OK;
    size_t *full = NULL, *nedges = NULL, *first_of = NULL;
    int64_t *edges = NULL;
    size_t m = 0;
    if (flags & FC_COVERAGE_REPLICAS) {
        first_of = fc_calloc(n + 1, sizeof(*first_of));
        if (first_of == NULL)
            return fc_error_set(FC_ENOMEM, "coverage: out of memory for %zu chunks", n);
        FC_TRY_GOTO(fc_chunks_replicas(ndim, chunks, n, first_of, &out->replicas), rc, done);
        ctx.first_of = first_of;
    }
    if (ndim == 0) {
        FC_TRY_GOTO(fc_cov__duplicates(&ctx, n, out), rc, done);
        rc = fc_cov__scalar(&ctx, n, out);
        goto done;
    }
    full = fc_calloc(n + 1, sizeof(*full));
    if (full == NULL) {
        rc = fc_error_set(FC_ENOMEM, "coverage: out of memory for %zu chunks", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const int kind = fc_cov__classify(&ctx, i);
        if (kind == FC_CHUNK_FULL) {
            if (!fc_cov__is_replica(&ctx, i))
                full[m++] = i;
        } else if (kind == FC_CHUNK_EMPTY) {
            out->empty++;
        } else {
            out->out_of_bounds++;
            if (report != NULL && out->out_of_bounds <= FC_COVERAGE_REPORT_MAX) {
                FC_TRY_GOTO(fc_buf_printf(report, "out of bounds: chunk %zu offsets ", i), rc,
                            done);
                FC_TRY_GOTO(fc_dims_format(report, ndim, chunks[i].offsets), rc, done);
                FC_TRY_GOTO(fc_buf_puts(report, " sizes "), rc, done);
                FC_TRY_GOTO(fc_dims_format(report, ndim, chunks[i].sizes), rc, done);
                FC_TRY_GOTO(fc_buf_puts(report, " do not fit shape "), rc, done);
                FC_TRY_GOTO(fc_dims_format(report, ndim, shape), rc, done);
                FC_TRY_GOTO(fc_buf_putc(report, '\n'), rc, done);
            }
        }
    }
    FC_TRY_GOTO(fc_cov__more(report, out->out_of_bounds, "out of bounds"), rc, done);
    FC_TRY_GOTO(fc_cov__duplicates(&ctx, n, out), rc, done);

    /* Edges: 2 per full chunk plus 0 and the shape, per dim. */
    size_t stride, nall;
    if (fc_mul_size(m, 2, &stride) < 0 || fc_add_size(stride, 2, &stride) < 0 ||
        fc_mul_size(stride, (size_t)ndim, &nall) < 0) {
        rc = fc_error_set(FC_ENOMEM, "coverage: too many chunks (%zu)", n);
        goto done;
    }
    edges = fc_calloc(nall, sizeof(*edges));
    nedges = fc_calloc((size_t)ndim, sizeof(*nedges));
    if (edges == NULL || nedges == NULL) {
        rc = fc_error_set(FC_ENOMEM, "coverage: out of memory for %zu chunk edges", nall);
        goto done;
    }
    fc_cov__edges(&ctx, full, m, edges, stride, nedges);
    /* Sweep along the dim with the most distinct edges: fewest candidate pairs. */
    for (int d = 1; d < ndim; d++) {
        if (nedges[d] > nedges[ctx.dim])
            ctx.dim = d;
    }
    FC_TRY_GOTO(fc_cov__overlaps(&ctx, full, m, out), rc, done);
    FC_TRY_GOTO(fc_cov__more(report, out->overlaps, "overlaps"), rc, done);
    FC_TRY_GOTO(fc_cov__gaps(&ctx, full, m, edges, stride, nedges, numel, out), rc, done);

done:
    fc_free(first_of);
    fc_free(full);
    fc_free(edges);
    fc_free(nedges);
    return rc;
}

int fc_coverage_ok(const struct fc_coverage *cov)
{
    return cov->out_of_bounds == 0 && cov->duplicate_offsets == 0 && cov->overlaps == 0 &&
           cov->gaps == 0 && cov->missing_elems == 0;
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
        struct fc_cov_ctx ctx = {ndim, NULL, chunks, 0, NULL, NULL};
        const int rc = fc_sort_idx(idx->order, n, fc_cov__cmp_start, &ctx);
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
