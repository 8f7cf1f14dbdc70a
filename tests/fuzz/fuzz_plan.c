/*
 * fuzz_plan.c - planner invariants on random meshes, shapes, placements,
 * ties and values derived from the input bytes; then the coverage checker
 * and the intersection index against brute force on random chunk lists.
 * Any violated invariant abort()s.  Every input is valid: the bytes only
 * choose parameters (reading past the end gives zeros), so any file works.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "plan.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_plan: %s:%d: invariant failed: %s\n", __FILE__, __LINE__,        \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

struct rd {
    const uint8_t *p;
    size_t n, at;
};

static unsigned rd_byte(struct rd *r)
{
    return r->at < r->n ? r->p[r->at++] : 0;
}

static int blob_size(void *ctx, fc_dtype dtype, const int64_t *sizes, int ndim,
                     uint64_t *nbytes_out)
{
    const unsigned salt = *(const unsigned *)ctx;
    int64_t numel = 0;
    CHECK(fc_shape_numel(sizes, ndim, &numel) == 0);
    *nbytes_out = (uint64_t)numel * fc_dtype_size(dtype) + salt + 64u * (uint64_t)ndim;
    return FC_OK;
}

static void mark_box(unsigned *counts, int ndim, const int64_t *shape, const int64_t *off,
                     const int64_t *size)
{
    int64_t cur[FC_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (size[d] == 0)
            return;
        cur[d] = 0;
    }
    for (;;) {
        int64_t lin = 0;
        for (int d = 0; d < ndim; d++)
            lin = lin * shape[d] + off[d] + cur[d];
        counts[lin]++;
        int d = ndim - 1;
        while (d >= 0 && ++cur[d] == size[d]) {
            cur[d] = 0;
            d--;
        }
        if (d < 0)
            return;
    }
}

static void check_files(const struct fc_plan *p)
{
    size_t next = 0;
    uint64_t total = 0;
    for (size_t r = 0; r < p->nfiles; r++) {
        const struct fc_plan_file *f = &p->files[r];
        char name[FC_PLAN_FILE_NAME_MAX];
        snprintf(name, sizeof(name), "__%zu_0.distcp", r);
        CHECK(strcmp(f->name, name) == 0);
        CHECK(f->first_item == next);
        uint64_t off = 0;
        int seen_tensor = 0;
        size_t last_value = SIZE_MAX, last_chunk = SIZE_MAX;
        for (size_t k = f->first_item; k < f->first_item + f->nitems; k++) {
            const struct fc_plan_item *it = &p->items[k];
            CHECK(it->rank == (int)r && it->offset == off);
            off += it->length;
            if (it->kind == FC_ITEM_BYTES) {
                CHECK(!seen_tensor);
                CHECK(last_value == SIZE_MAX || it->index > last_value);
                last_value = it->index;
                CHECK(it->index < p->nvalues && p->values[it->index].item == k);
            } else {
                seen_tensor = 1;
                CHECK(last_chunk == SIZE_MAX || it->chunk > last_chunk);
                last_chunk = it->chunk;
                CHECK(it->chunk < p->nchunks && p->chunks[it->chunk].item == k);
                CHECK(p->chunks[it->chunk].tensor == it->index);
                CHECK(p->tensors[it->index].alias_of == SIZE_MAX);
                CHECK(fc_plan_chunk_holds(p, it->chunk, it->rank));
            }
        }
        CHECK(f->nbytes == off);
        next += f->nitems;
        total += f->nbytes;
    }
    CHECK(next == p->nitems && total == p->total_bytes);
}

static void check_tensor(const struct fc_plan *p, size_t i)
{
    const struct fc_plan_tensor *t = &p->tensors[i];
    struct fc_box *boxes = calloc(t->nchunks, sizeof(*boxes));
    CHECK(boxes != NULL);
    for (size_t j = 0; j < t->nchunks; j++) {
        const struct fc_plan_chunk *ch = &p->chunks[t->first_chunk + j];
        boxes[j] = ch->box;
        CHECK(ch->tensor == i && ch->item < p->nitems);
        if (t->alias_of != SIZE_MAX) {
            const struct fc_plan_tensor *root = &p->tensors[t->alias_of];
            CHECK(root->alias_of == SIZE_MAX && root->nchunks == t->nchunks);
            CHECK(ch->item == p->chunks[root->first_chunk + j].item);
        }
        if (t->ndim > 0 && ch->box.sizes[0] == 0)
            CHECK(ch->box.offsets[0] == t->shape[0]);
        if (t->ndim > 0 && j > 0) { /* strictly increasing offset tuples */
            const int64_t *prev = p->chunks[t->first_chunk + j - 1].box.offsets;
            int d = 0;
            while (d < t->ndim && prev[d] == ch->box.offsets[d])
                d++;
            CHECK(d < t->ndim && prev[d] < ch->box.offsets[d]);
        }
    }
    CHECK(fc_chunks_check_tiling(t->ndim, t->shape, boxes, t->nchunks, "plan", t->key) == FC_OK);

    int64_t numel = 0;
    CHECK(fc_shape_numel(t->shape, t->ndim, &numel) == 0);
    unsigned *counts = calloc((size_t)numel + 1, sizeof(*counts));
    CHECK(counts != NULL);
    for (size_t j = 0; j < t->nchunks; j++)
        mark_box(counts, t->ndim, t->shape, boxes[j].offsets, boxes[j].sizes);
    for (int64_t e = 0; e < numel; e++)
        CHECK(counts[e] == 1);
    free(counts);
    free(boxes);

    for (int r = 0; r < (int)p->nfiles; r++) {
        int64_t off[FC_MAX_DIMS], size[FC_MAX_DIMS], moff[FC_MAX_DIMS], msize[FC_MAX_DIMS];
        fc_plan_rank_box(p, i, r, off, size);
        CHECK(fc_mesh_box(&p->mesh, t->pl, t->ndim, t->shape, r, moff, msize) == FC_OK);
        for (int d = 0; d < t->ndim; d++)
            CHECK(off[d] == moff[d] && size[d] == msize[d]);
        CHECK(fc_plan_chunk_holds(p, fc_plan_rank_chunk(p, i, r), r));
    }
}

static int same_plan(const struct fc_plan *a, const struct fc_plan *b)
{
    if (a->nitems != b->nitems || a->nchunks != b->nchunks || a->total_bytes != b->total_bytes)
        return 0;
    for (size_t k = 0; k < a->nitems; k++) {
        const struct fc_plan_item *x = &a->items[k], *y = &b->items[k];
        if (x->kind != y->kind || x->index != y->index || x->chunk != y->chunk ||
            x->rank != y->rank || x->offset != y->offset || x->length != y->length)
            return 0;
    }
    for (size_t c = 0; c < a->nchunks; c++) {
        if (a->chunks[c].item != b->chunks[c].item)
            return 0;
    }
    return 1;
}

/* fc_plan_align_items() on q, a twin of p: same items; large tensor items on the boundary,
 * the others right after their predecessor; files end at their last item. */
static void check_aligned(const struct fc_plan *p, struct fc_plan *q, uint64_t min)
{
    CHECK(fc_plan_align_items(q, 64, min) == FC_OK);
    uint64_t total = 0;
    for (size_t f = 0; f < q->nfiles; f++) {
        uint64_t end = 0;
        for (size_t k = q->files[f].first_item; k < q->files[f].first_item + q->files[f].nitems;
             k++) {
            const struct fc_plan_item *x = &p->items[k], *y = &q->items[k];
            CHECK(x->kind == y->kind && x->chunk == y->chunk && x->length == y->length);
            uint64_t bytes = 0;
            if (y->kind == FC_ITEM_TENSOR) {
                int64_t numel = 0;
                const struct fc_plan_tensor *t = &q->tensors[y->index];
                CHECK(fc_shape_numel(q->chunks[y->chunk].box.sizes, t->ndim, &numel) == 0);
                bytes = (uint64_t)numel * fc_dtype_size(t->dtype);
            }
            if (y->kind == FC_ITEM_TENSOR && bytes >= min)
                CHECK(y->offset % 64 == 0 && y->offset >= end && y->offset - end < 64);
            else
                CHECK(y->offset == end);
            end = y->offset + y->length;
        }
        CHECK(q->files[f].nbytes == end);
        total += end;
    }
    CHECK(q->total_bytes == total);
}

static void fuzz_planner(struct rd *r)
{
    struct fc_plan_tensor_in t[12];
    struct fc_plan_value_in v[6];
    char tkeys[12][8], vkeys[6][8];
    struct fc_mesh mesh;
    const int mr = 1 + (int)(rd_byte(r) % 4), ms = 1 + (int)(rd_byte(r) % 16);
    CHECK(fc_mesh_init(&mesh, mr, ms, 1 + (int)(rd_byte(r) % 3)) == FC_OK);
    const size_t nt = rd_byte(r) % 13, nv = rd_byte(r) % 7;
    unsigned salt = rd_byte(r);
    memset(t, 0, sizeof(t));
    for (size_t i = 0; i < nt; i++) {
        snprintf(tkeys[i], sizeof(tkeys[i]), "t%zu", i);
        t[i].key = tkeys[i];
        const unsigned a = rd_byte(r);
        if (i > 0 && a % 5 == 0) { /* a tie to an earlier tensor (maybe itself an alias) */
            const size_t src = (size_t)(a / 5) % i;
            t[i] = t[src];
            t[i].key = tkeys[i];
            t[i].alias_of = (int64_t)src;
            continue;
        }
        t[i].alias_of = -1;
        t[i].dtype = (fc_dtype)(1 + rd_byte(r) % (FC_DTYPE_COUNT - 1));
        t[i].ndim = (int)(rd_byte(r) % 4);
        for (int d = 0; d < t[i].ndim; d++)
            t[i].shape[d] = (int64_t)(rd_byte(r) % (d == 0 ? 41 : 7));
        t[i].placement = t[i].ndim == 0 || (a & 1) ? FC_PLACE_REPLICATE : FC_PLACE_SHARD0;
        t[i].tp_dim = (int)(rd_byte(r) % (unsigned)(t[i].ndim + 1)) - 1;
    }
    for (size_t i = 0; i < nv; i++) {
        snprintf(vkeys[i], sizeof(vkeys[i]), "v%zu", i);
        v[i].key = vkeys[i];
        v[i].blob_size = rd_byte(r) * 3u;
    }

    struct fc_plan *p = NULL, *q = NULL;
    if (fc_plan_build(&p, &mesh, t, nt, v, nv, blob_size, &salt) != FC_OK) {
        /* the one refusal of valid inputs: a _StridedShard torch records wrongly */
        CHECK(strstr(fc_error_last(), "cannot round-trip") != NULL);
        return;
    }
    CHECK(fc_plan_build(&q, &mesh, t, nt, v, nv, blob_size, &salt) == FC_OK);
    CHECK(same_plan(p, q));
    check_aligned(p, q, rd_byte(r) % 64);
    CHECK(p->nfiles == (size_t)fc_mesh_world_size(&mesh));
    check_files(p);
    size_t items = nv;
    for (size_t i = 0; i < nt; i++) {
        check_tensor(p, i);
        if (p->tensors[i].alias_of == SIZE_MAX)
            items += p->tensors[i].nchunks;
    }
    CHECK(items == p->nitems);
    struct fc_buf text = FC_BUF_INIT(1 << 20);
    CHECK(fc_plan_describe(p, &text) == FC_OK);
    fc_buf_release(&text);
    fc_plan_free(p);
    fc_plan_free(q);
}

/* Random chunk lists: coverage and intersections against brute force. */
static void fuzz_lists(struct rd *r)
{
    enum { MAXN = 24 };
    int64_t off[MAXN][3], size[MAXN][3], shape[3];
    struct fc_box b[MAXN];
    const int ndim = (int)(rd_byte(r) % 4);
    for (int d = 0; d < ndim; d++)
        shape[d] = (int64_t)(rd_byte(r) % 7);
    const size_t n = rd_byte(r) % (MAXN + 1);
    for (size_t i = 0; i < n; i++) {
        for (int d = 0; d < ndim; d++) {
            off[i][d] = (int64_t)(rd_byte(r) % 10) - 1;
            size[i][d] = (int64_t)(rd_byte(r) % 9) - 1;
        }
        b[i].offsets = off[i];
        b[i].sizes = size[i];
    }
    const int rc = fc_chunks_check_tiling(ndim, shape, b, n, "fuzz", "t");
    CHECK(rc == FC_OK || rc == FC_ECORRUPT);

    /* Brute force: an exact tiling has every box inside and every element covered once. */
    int64_t numel = 0;
    CHECK(fc_shape_numel(shape, ndim, &numel) == 0);
    unsigned counts[216];
    memset(counts, 0, sizeof(counts));
    int tiles = 1;
    for (size_t i = 0; i < n; i++) {
        for (int d = 0; d < ndim; d++)
            tiles &= off[i][d] >= 0 && size[i][d] >= 0 && off[i][d] + size[i][d] <= shape[d];
        if (tiles)
            mark_box(counts, ndim, shape, off[i], size[i]);
    }
    for (int64_t e = 0; tiles && e < numel; e++)
        tiles = counts[e] == 1;
    CHECK(tiles == (rc == FC_OK));

    /* Intersections: the index wants non-negative boxes; clamp. */
    for (size_t i = 0; i < n; i++) {
        for (int d = 0; d < ndim; d++) {
            off[i][d] = off[i][d] < 0 ? 0 : off[i][d];
            size[i][d] = size[i][d] < 0 ? 0 : size[i][d];
        }
    }
    struct fc_chunk_index *idx = NULL;
    CHECK(fc_chunk_index_new(&idx, ndim, b, n) == FC_OK);
    int64_t to[3], ts[3];
    for (int d = 0; d < ndim; d++) {
        to[d] = (int64_t)(rd_byte(r) % 9);
        ts[d] = (int64_t)(rd_byte(r) % 7);
    }
    struct fc_overlap *ov = NULL;
    size_t nov = 0;
    CHECK(fc_chunk_intersect(idx, to, ts, &ov, &nov) == FC_OK);
    size_t want = 0;
    for (size_t i = 0; i < n; i++) {
        int hit = 1;
        int64_t lo[3], len[3];
        for (int d = 0; d < ndim; d++) {
            lo[d] = off[i][d] > to[d] ? off[i][d] : to[d];
            const int64_t e1 = off[i][d] + size[i][d], e2 = to[d] + ts[d];
            len[d] = (e1 < e2 ? e1 : e2) - lo[d];
            hit &= len[d] > 0;
        }
        if (!hit)
            continue;
        size_t k = 0;
        while (k < nov && ov[k].chunk != i)
            k++;
        CHECK(k < nov);
        for (int d = 0; d < ndim; d++)
            CHECK(ov[k].offsets[d] == lo[d] && ov[k].sizes[d] == len[d]);
        want++;
    }
    CHECK(nov == want);
    fc_free(ov);
    fc_chunk_index_free(idx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rd r = {data, size, 0};
    fuzz_planner(&r);
    fuzz_lists(&r);
    return 0;
}
