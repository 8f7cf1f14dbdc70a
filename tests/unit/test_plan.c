/*
 * test_plan.c - the sharding planner, the exact tiling check and the
 * intersection index.  No file is touched: every check is on the plan.
 */
#include "fc_test.h"

#include <inttypes.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "plan.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

/* A deterministic stand-in for the torch.save blob size: data + header per dim. */
struct blob_ctx {
    unsigned calls;
    unsigned fail_at; /* 1-based call that fails, 0 never */
};

static int blob_size(void *ctxp, fc_dtype dtype, const int64_t *sizes, int ndim,
                     uint64_t *nbytes_out)
{
    struct blob_ctx *ctx = ctxp;
    if (ctx != NULL && ++ctx->calls == ctx->fail_at)
        return fc_error_set(FC_EIO, "blob size: injected failure");
    int64_t numel = 0;
    assert_int_equal(fc_shape_numel(sizes, ndim, &numel), 0);
    *nbytes_out = (uint64_t)numel * fc_dtype_size(dtype) + 100 + 8 * (uint64_t)ndim;
    return FC_OK;
}

static struct fc_plan_tensor_in tin(const char *key, fc_dtype dt, enum fc_placement pl, int ndim,
                                    int64_t d0, int64_t d1, int64_t d2)
{
    struct fc_plan_tensor_in t;
    memset(&t, 0, sizeof(t));
    t.key = key;
    t.dtype = dt;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.shape[2] = d2;
    t.placement = pl;
    t.tp_dim = -1;
    t.alias_of = -1;
    return t;
}

/* A (replicate, shard, tp) mesh as fc_mesh_init() lays it out, without validating it. */
static struct fc_mesh mesh3(int replicate, int shard, int tp)
{
    struct fc_mesh m;
    memset(&m, 0, sizeof(m));
    if (replicate != 1) {
        m.size[m.ndim] = replicate;
        m.name[m.ndim++] = FC_MESH_DIM_REPLICATE;
    }
    m.size[m.ndim] = shard;
    m.name[m.ndim++] = FC_MESH_DIM_SHARD;
    if (tp != 1) {
        m.size[m.ndim] = tp;
        m.name[m.ndim++] = FC_MESH_DIM_TP;
    }
    return m;
}

static int64_t box_numel(int ndim, const int64_t *sizes)
{
    int64_t n = 0;
    assert_int_equal(fc_shape_numel(sizes, ndim, &n), 0);
    return n;
}

/* Marks every element of a box in counts (row-major over shape). */
static void mark_box(unsigned *counts, int ndim, const int64_t *shape, const int64_t *off,
                     const int64_t *size)
{
    if (box_numel(ndim, size) == 0)
        return;
    int64_t cur[FC_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        cur[d] = 0;
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

/* Every invariant of plan.h that can be checked from the outside. */
static void check_plan(const struct fc_plan *p)
{
    const struct fc_mesh *m = &p->mesh;
    const int world = fc_mesh_world_size(m);
    assert_int_equal(p->nfiles, (size_t)world);

    /* Files: named, contiguous item ranges, cumulative offsets, bytes first. */
    size_t next_item = 0;
    uint64_t total = 0;
    for (int r = 0; r < world; r++) {
        const struct fc_plan_file *f = &p->files[r];
        char name[FC_PLAN_FILE_NAME_MAX];
        snprintf(name, sizeof(name), "__%d_0.distcp", r);
        assert_string_equal(f->name, name);
        assert_int_equal(f->rank, r);
        assert_int_equal(f->first_item, next_item);
        uint64_t off = 0;
        int seen_tensor = 0;
        size_t last_value = SIZE_MAX, last_chunk = SIZE_MAX;
        for (size_t k = f->first_item; k < f->first_item + f->nitems; k++) {
            const struct fc_plan_item *it = &p->items[k];
            assert_int_equal(it->rank, r);
            assert_int_equal(it->offset, off);
            off += it->length;
            if (it->kind == FC_ITEM_BYTES) {
                assert_false(seen_tensor);
                assert_true(last_value == SIZE_MAX || it->index > last_value);
                last_value = it->index;
                assert_int_equal(p->values[it->index].item, k);
                assert_int_equal(it->chunk, SIZE_MAX);
            } else {
                seen_tensor = 1;
                /* tensor order then chunk order == increasing global chunk index */
                assert_true(last_chunk == SIZE_MAX || it->chunk > last_chunk);
                last_chunk = it->chunk;
                assert_int_equal(p->chunks[it->chunk].item, k);
                assert_int_equal(p->chunks[it->chunk].tensor, it->index);
                assert_int_equal(p->tensors[it->index].alias_of, SIZE_MAX);
            }
        }
        assert_int_equal(f->nbytes, off);
        next_item += f->nitems;
        total += f->nbytes;
    }
    assert_int_equal(next_item, p->nitems);
    assert_int_equal(total, p->total_bytes);

    /* Tensors: chunk ranges, tiling, holders, rank boxes. */
    size_t next_chunk = 0, nitems = p->nvalues;
    for (size_t i = 0; i < p->ntensors; i++) {
        const struct fc_plan_tensor *t = &p->tensors[i];
        assert_int_equal(t->first_chunk, next_chunk);
        assert_true(t->nchunks >= 1);
        next_chunk += t->nchunks;
        if (t->alias_of == SIZE_MAX)
            nitems += t->nchunks;
        else
            assert_int_equal(p->tensors[t->alias_of].alias_of, SIZE_MAX);

        struct fc_box boxes[64];
        assert_true(t->nchunks <= 64);
        for (size_t j = 0; j < t->nchunks; j++) {
            const struct fc_plan_chunk *ch = &p->chunks[t->first_chunk + j];
            boxes[j] = ch->box;
            assert_int_equal(ch->tensor, i);
            const struct fc_plan_item *it = &p->items[ch->item];
            assert_int_equal(it->kind, FC_ITEM_TENSOR);
            if (t->alias_of != SIZE_MAX)
                assert_int_equal(ch->item, p->chunks[p->tensors[t->alias_of].first_chunk + j].item);
            /* the owner holds the box */
            assert_true(fc_plan_chunk_holds(p, t->first_chunk + j, it->rank));
            if (t->ndim > 0 && ch->box.sizes[0] == 0)
                assert_int_equal(ch->box.offsets[0], t->shape[0]); /* empty at offset L */
        }
        assert_fc_ok(fc_chunks_check_tiling(t->ndim, t->shape, boxes, t->nchunks, "plan", t->key));

        int64_t numel = 0;
        assert_int_equal(fc_shape_numel(t->shape, t->ndim, &numel), 0);
        unsigned *counts = calloc((size_t)numel + 1, sizeof(*counts));
        for (size_t j = 0; j < t->nchunks; j++)
            mark_box(counts, t->ndim, t->shape, boxes[j].offsets, boxes[j].sizes);
        for (int64_t e = 0; e < numel; e++)
            assert_int_equal(counts[e], 1);
        free(counts);

        for (int r = 0; r < world; r++) {
            int64_t off[FC_MAX_DIMS], size[FC_MAX_DIMS], moff[FC_MAX_DIMS], msize[FC_MAX_DIMS];
            fc_plan_rank_box(p, i, r, off, size);
            assert_fc_ok(fc_mesh_box(m, t->pl, t->ndim, t->shape, r, moff, msize));
            for (int d = 0; d < t->ndim; d++) {
                assert_int_equal(off[d], moff[d]);
                assert_int_equal(size[d], msize[d]);
            }
            /* r holds exactly the chunk of its box */
            const size_t mine = fc_plan_rank_chunk(p, i, r);
            for (size_t j = 0; j < t->nchunks; j++)
                assert_int_equal(fc_plan_chunk_holds(p, t->first_chunk + j, r),
                                 t->first_chunk + j == mine);
        }
    }
    assert_int_equal(next_chunk, p->nchunks);
    assert_int_equal(nitems, p->nitems);
}

static int plans_equal(const struct fc_plan *a, const struct fc_plan *b)
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
        const int nd = a->tensors[a->chunks[c].tensor].ndim;
        if (a->chunks[c].item != b->chunks[c].item ||
            memcmp(a->chunks[c].box.offsets, b->chunks[c].box.offsets, nd * sizeof(int64_t)) ||
            memcmp(a->chunks[c].box.sizes, b->chunks[c].box.sizes, nd * sizeof(int64_t)))
            return 0;
    }
    return 1;
}

/* A toy model: uneven rows, a scalar, a zero-row tensor, a 3-D conv, a tie, buffers. */
#define NTOY 9
static void toy_model(struct fc_plan_tensor_in *t)
{
    t[0] = tin("embed.weight", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 11, 4, 0);
    t[1] = tin("layers.0.bias", FC_DTYPE_BFLOAT16, FC_PLACE_SHARD0, 1, 5, 0, 0);
    t[2] = tin("layers.0.scale", FC_DTYPE_FLOAT32, FC_PLACE_REPLICATE, 0, 0, 0, 0);
    t[3] = tin("layers.0.conv", FC_DTYPE_FLOAT16, FC_PLACE_SHARD0, 3, 3, 2, 2);
    t[4] = tin("empty_rows", FC_DTYPE_INT64, FC_PLACE_SHARD0, 2, 0, 3, 0);
    t[5] = tin("zero_cols", FC_DTYPE_INT8, FC_PLACE_SHARD0, 2, 4, 0, 0);
    t[6] = tin("running_mean", FC_DTYPE_FLOAT32, FC_PLACE_REPLICATE, 1, 6, 0, 0);
    t[7] = tin("lm_head.weight", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 11, 4, 0);
    t[7].alias_of = 0;
    t[8] = tin("one_row", FC_DTYPE_FLOAT64, FC_PLACE_SHARD0, 2, 1, 9, 0);
}

static const struct fc_plan_value_in toy_values[] = {
    {"optim.state.step", 300}, {"optim.param_groups.0.lr", 280}, {"epoch", 250}};

static struct fc_plan *build_toy(int replicate, int shard)
{
    struct fc_plan_tensor_in t[NTOY];
    toy_model(t);
    const struct fc_mesh m = mesh3(replicate, shard, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, t, NTOY, toy_values, 3, blob_size, NULL));
    assert_non_null(p);
    return p;
}

/* ------------------------------------------------------------------------ */
/* Planner                                                                  */

static void test_plan_tiles_every_tensor_on_1d_meshes(void **state)
{
    (void)state;
    static const int sizes[] = {1, 2, 3, 4, 7, 8};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        struct fc_plan *p = build_toy(1, sizes[k]);
        check_plan(p);
        fc_plan_free(p);
    }
}

static void test_plan_tiles_every_tensor_on_hsdp_meshes(void **state)
{
    (void)state;
    static const int rs[][2] = {{2, 2}, {2, 3}, {3, 1}, {4, 2}};
    for (size_t k = 0; k < sizeof(rs) / sizeof(rs[0]); k++) {
        struct fc_plan *p = build_toy(rs[k][0], rs[k][1]);
        check_plan(p);
        /* S distinct boxes per Shard(0) tensor whatever R is (11 rows) */
        const int S = rs[k][1];
        const int64_t want = fc_mesh_nonempty_chunks(11, S) + (fc_mesh_nonempty_chunks(11, S) < S);
        assert_int_equal(p->tensors[0].nchunks, (size_t)want);
        fc_plan_free(p);
    }
}

static void test_plan_tiles_every_tensor_on_tp_meshes(void **state)
{
    (void)state;
    static const int rst[][3] = {{1, 2, 2}, {1, 3, 2}, {2, 2, 2}, {1, 2, 4}, {1, 1, 2}};
    static const int tp_dims[NTOY] = {0, 0, -1, 2, 1, 0, -1, 0, 1};
    for (size_t k = 0; k < sizeof(rst) / sizeof(rst[0]); k++) {
        struct fc_plan_tensor_in t[NTOY];
        toy_model(t);
        for (int i = 0; i < NTOY; i++)
            t[i].tp_dim = tp_dims[i];
        const struct fc_mesh m = mesh3(rst[k][0], rst[k][1], rst[k][2]);
        struct fc_plan *p = NULL;
        assert_fc_ok(fc_plan_build(&p, &m, t, NTOY, toy_values, 3, blob_size, NULL));
        check_plan(p);
        assert_int_equal(p->tensors[3].tp_dim, 2);
        fc_plan_free(p);
    }
}

static void test_plan_stores_tp_replicated_chunks_once(void **state)
{
    (void)state;
    /* dp=2 x tp=2: a tp-replicated [3, 2] has 2 chunks, each held by both tp ranks. */
    struct fc_plan_tensor_in t[2] = {tin("norm", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 3, 2, 0),
                                     tin("wo", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 4, 6, 0)};
    t[1].tp_dim = 1;
    const struct fc_mesh m = mesh3(1, 2, 2);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, t, 2, NULL, 0, blob_size, NULL));
    check_plan(p);
    assert_int_equal(p->tensors[0].nchunks, 2);
    assert_int_equal(p->tensors[1].nchunks, 4);
    for (int r = 0; r < 4; r++)
        assert_int_equal(fc_plan_chunk_holds(p, p->tensors[0].first_chunk, r), r < 2);
    struct fc_buf out = FC_BUF_INIT(1 << 16);
    assert_fc_ok(fc_plan_describe(p, &out));
    assert_fc_ok(fc_buf_putc(&out, '\0'));
    const char *s = (const char *)out.data;
    assert_non_null(strstr(s, "plan: mesh replicate=1 shard=2 tp=2 (world 4)"));
    assert_non_null(strstr(s, "tensor norm  float32 [3, 2]  (Shard(0), Replicate())\n"
                              "  box [0:2, 0:2]  ranks 0-1  ->"));
    assert_non_null(strstr(s, "tensor wo  float32 [4, 6]  (Shard(0), Shard(1))\n"
                              "  box [0:2, 0:3]  ranks 0  ->"));
    fc_buf_release(&out);
    fc_plan_free(p);

    /* Torch records boxes that disagree with the data: refused, naming the key. */
    struct fc_plan_tensor_in v = tin("tok_embeddings.weight", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2,
                                     37, 4, 0);
    v.tp_dim = 0;
    const struct fc_mesh m3 = mesh3(1, 3, 2);
    assert_fc_fails(fc_plan_build(&p, &m3, &v, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "tensor 'tok_embeddings.weight': torch records rows [14, 20) of dim 0 for "
                    "rank 4");
    assert_null(p);
    v.tp_dim = 2;
    assert_fc_fails(fc_plan_build(&p, &m3, &v, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "'tok_embeddings.weight': tp shards dim 2 of a 2-dim tensor");
}

static void test_plan_records_identical_empty_boxes_once_at_offset_len(void **state)
{
    (void)state;
    /* L = 2 over 4 ranks: (0)/1, (1)/1, (2)/0 as DCP's dedup stores it. */
    struct fc_plan_tensor_in t[2] = {tin("w", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 2, 3, 0),
                                     tin("z", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 1, 0, 0, 0)};
    const struct fc_mesh m = mesh3(1, 4, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, t, 2, NULL, 0, blob_size, NULL));
    check_plan(p);
    assert_int_equal(p->tensors[0].nchunks, 3);
    const struct fc_plan_chunk *c = &p->chunks[p->tensors[0].first_chunk];
    assert_int_equal(c[0].box.offsets[0], 0);
    assert_int_equal(c[0].box.sizes[0], 1);
    assert_int_equal(c[1].box.offsets[0], 1);
    assert_int_equal(c[2].box.offsets[0], 2);
    assert_int_equal(c[2].box.sizes[0], 0);
    assert_int_equal(c[2].box.sizes[1], 3);
    for (int r = 0; r < 4; r++)
        assert_int_equal(fc_plan_chunk_holds(p, p->tensors[0].first_chunk + 2, r), r >= 2);
    assert_int_equal(fc_plan_rank_chunk(p, 0, 3), p->tensors[0].first_chunk + 2);
    /* a zero-length tensor: one empty chunk at offset 0 held by everyone */
    assert_int_equal(p->tensors[1].nchunks, 1);
    const struct fc_plan_chunk *z = &p->chunks[p->tensors[1].first_chunk];
    assert_int_equal(z->box.offsets[0], 0);
    assert_int_equal(z->box.sizes[0], 0);
    for (int r = 0; r < 4; r++)
        assert_true(fc_plan_chunk_holds(p, p->tensors[1].first_chunk, r));
    fc_plan_free(p);
}

/* fc_plan_file_head_fn for the relayout test: a 100 + 10 * items byte header. */
static int test_head(void *ctx, const struct fc_plan *plan, size_t file, char *name,
                     size_t namesize, uint64_t *head_bytes)
{
    (void)ctx;
    snprintf(name, namesize, "file-%zu", file);
    *head_bytes = 100 + 10 * plan->files[file].nitems;
    return FC_OK;
}

static int raw_size(void *ctx, fc_dtype dtype, const int64_t *sizes, int ndim, uint64_t *out)
{
    int64_t numel = 0;
    (void)ctx;
    assert_int_equal(fc_shape_numel(sizes, ndim, &numel), 0);
    *out = (uint64_t)numel * fc_dtype_size(dtype);
    return FC_OK;
}

static void test_plan_relayout_orders_by_element_size_after_the_head(void **state)
{
    (void)state;
    struct fc_plan_tensor_in t[3] = {tin("b", FC_DTYPE_UINT8, FC_PLACE_SHARD0, 1, 5, 0, 0),
                                     tin("h", FC_DTYPE_BFLOAT16, FC_PLACE_SHARD0, 1, 6, 0, 0),
                                     tin("d", FC_DTYPE_FLOAT64, FC_PLACE_SHARD0, 2, 3, 2, 0)};
    const struct fc_mesh m = mesh3(1, 2, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, t, 3, NULL, 0, raw_size, NULL));
    const size_t owner0 = p->chunks[p->tensors[0].first_chunk].item;
    assert_fc_ok(fc_plan_relayout(p, test_head, NULL));
    /* rank 0 holds b[0:3] (3 B), h[0:3] (6 B), d[0:2] (32 B): d, h, b after a 130 B head */
    const struct fc_plan_file *f = &p->files[0];
    assert_string_equal(f->name, "file-0");
    assert_int_equal(f->nitems, 3);
    const struct fc_plan_item *it = &p->items[f->first_item];
    assert_int_equal(it[0].index, 2);
    assert_int_equal(it[0].offset, 130);
    assert_int_equal(it[1].index, 1);
    assert_int_equal(it[1].offset, 130 + 32);
    assert_int_equal(it[2].index, 0);
    assert_int_equal(it[2].offset, 130 + 32 + 6);
    assert_int_equal(f->nbytes, 130 + 32 + 6 + 3);
    /* chunks follow their moved items */
    for (size_t c = 0; c < p->nchunks; c++)
        assert_int_equal(p->items[p->chunks[c].item].chunk, c);
    assert_int_not_equal(p->chunks[p->tensors[0].first_chunk].item, owner0);
    assert_int_equal(p->total_bytes, p->files[0].nbytes + p->files[1].nbytes);
    fc_plan_free(p);

    /* values cannot be relaid out */
    struct fc_plan_value_in v = {"step", 10};
    assert_fc_ok(fc_plan_build(&p, &m, t, 1, &v, 1, raw_size, NULL));
    assert_fc_fails(fc_plan_relayout(p, test_head, NULL), FC_EINVAL, "value 'step'");
    fc_plan_free(p);
}

/*
 * fc_plan_align_items() (DCP): on 1 rank, a value (10 B), a small tensor (b: 3 x 5 u8 = 15 B
 * of data, under the 16 B floor) and two large ones (h: 4 x 2 bf16 = 16 B; d: 2 x 3 f64 =
 * 48 B).  The value and the small tensor stay packed; each large one starts at the next
 * multiple of 64, leaving a gap; the file ends where its last item does.
 */
static void test_plan_align_items_starts_large_tensor_items_on_the_boundary(void **state)
{
    (void)state;
    struct fc_plan_tensor_in t[3] = {tin("b", FC_DTYPE_UINT8, FC_PLACE_SHARD0, 2, 3, 5, 0),
                                     tin("h", FC_DTYPE_BFLOAT16, FC_PLACE_SHARD0, 2, 4, 2, 0),
                                     tin("d", FC_DTYPE_FLOAT64, FC_PLACE_SHARD0, 2, 2, 3, 0)};
    struct fc_plan_value_in v = {"step", 10};
    const struct fc_mesh m = mesh3(1, 1, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, t, 3, &v, 1, raw_size, NULL));
    assert_fc_ok(fc_plan_align_items(p, 64, 16));
    const struct fc_plan_item *it = &p->items[p->files[0].first_item];
    assert_int_equal(p->files[0].nitems, 4);
    assert_int_equal(it[0].offset, 0);  /* the value: 10 B */
    assert_int_equal(it[1].offset, 10); /* b: packed, 15 B */
    assert_int_equal(it[2].offset, 64); /* h: 25 -> 64, 16 B */
    assert_int_equal(it[3].offset, 128); /* d: 80 -> 128, 48 B */
    assert_int_equal(p->files[0].nbytes, 176);
    assert_int_equal(p->total_bytes, 176);
    /* Lengths and chunks are untouched; aligning again changes nothing. */
    assert_int_equal(it[3].length, 48);
    assert_fc_ok(fc_plan_align_items(p, 64, 16));
    assert_int_equal(it[3].offset, 128);
    assert_int_equal(p->files[0].nbytes, 176);
    fc_plan_free(p);

    /* On 2 ranks every file starts its own count; a floor above every chunk packs all. */
    const struct fc_mesh m2 = mesh3(1, 2, 1);
    assert_fc_ok(fc_plan_build(&p, &m2, t, 3, NULL, 0, raw_size, NULL));
    assert_fc_ok(fc_plan_align_items(p, 4096, 1));
    for (size_t k = 0; k < p->nitems; k++)
        assert_int_equal(p->items[k].offset % 4096, 0);
    assert_fc_ok(fc_plan_align_items(p, 4096, 1000));
    for (size_t r = 0; r < p->nfiles; r++) {
        uint64_t off = 0;
        for (size_t k = p->files[r].first_item; k < p->files[r].first_item + p->files[r].nitems;
             k++) {
            assert_int_equal(p->items[k].offset, off);
            off += p->items[k].length;
        }
        assert_int_equal(p->files[r].nbytes, off);
    }
    fc_plan_free(p);
}

/*
 * fc_plan_store_at_holders() (torch_checkpointing): on HSDP 2 x 3 every rank's file holds its
 * box of every tensor - replicas and the empty shard included - each copy as long as its box,
 * and chunks still point at one of their items.
 */
static void test_plan_store_at_holders_gives_every_rank_its_boxes(void **state)
{
    (void)state;
    struct fc_plan_tensor_in t[2] = {tin("w", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 2, 3, 0),
                                     tin("s", FC_DTYPE_INT64, FC_PLACE_REPLICATE, 0, 0, 0, 0)};
    const struct fc_mesh m = mesh3(2, 3, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, t, 2, NULL, 0, raw_size, NULL));
    const size_t before = p->nitems;
    assert_fc_ok(fc_plan_store_at_holders(p));
    assert_fc_ok(fc_plan_relayout(p, test_head, NULL));
    assert_int_equal(p->nitems, 6 * 2); /* each rank: its box of w (rows 1, 1, 0) and s */
    assert_true(before < p->nitems);
    for (int r = 0; r < 6; r++) {
        const struct fc_plan_file *f = &p->files[r];
        assert_int_equal(f->nitems, 2);
        int seen[2] = {0, 0};
        for (size_t i = 0; i < f->nitems; i++) {
            const struct fc_plan_item *it = &p->items[f->first_item + i];
            assert_int_equal(it->rank, r);
            assert_int_equal(it->chunk, fc_plan_rank_chunk(p, it->index, r));
            int64_t off[2], size[2];
            fc_plan_rank_box(p, it->index, r, off, size);
            const uint64_t want = it->index == 0 ? (uint64_t)(size[0] * size[1] * 4) : 8;
            assert_int_equal(it->length, want);
            seen[it->index]++;
        }
        assert_int_equal(seen[0], 1);
        assert_int_equal(seen[1], 1);
    }
    for (size_t c = 0; c < p->nchunks; c++)
        assert_int_equal(p->items[p->chunks[c].item].chunk, c);
    fc_plan_free(p);

    struct fc_plan_value_in v = {"step", 10};
    assert_fc_ok(fc_plan_build(&p, &m, t, 1, &v, 1, raw_size, NULL));
    assert_fc_fails(fc_plan_store_at_holders(p), FC_EINVAL, "value 'step'");
    fc_plan_free(p);
}

static void test_plan_gives_a_scalar_one_chunk_with_no_dims(void **state)
{
    (void)state;
    struct fc_plan *p = build_toy(2, 3);
    const struct fc_plan_tensor *t = &p->tensors[2];
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->nchunks, 1);
    const struct fc_plan_item *it = &p->items[p->chunks[t->first_chunk].item];
    assert_int_equal(it->length, 104); /* 4 bytes + 100, no dims */
    fc_plan_free(p);
}

static void test_plan_alias_shares_the_items_of_its_root(void **state)
{
    (void)state;
    struct fc_plan_tensor_in t[4] = {tin("a", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 5, 2, 0),
                                     tin("b", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 5, 2, 0),
                                     tin("c", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 5, 2, 0),
                                     tin("s", FC_DTYPE_INT64, FC_PLACE_REPLICATE, 0, 0, 0, 0)};
    t[1].alias_of = 0;
    t[2].alias_of = 1; /* a chain resolves to the root */
    const struct fc_mesh m = mesh3(1, 4, 1);
    struct fc_plan *p = NULL;
    struct blob_ctx ctx = {0, 0};
    assert_fc_ok(fc_plan_build(&p, &m, t, 4, NULL, 0, blob_size, &ctx));
    check_plan(p);
    assert_int_equal(ctx.calls, 4 + 1); /* only the root's chunks and the scalar */
    assert_int_equal(p->nitems, 5);
    assert_int_equal(p->tensors[1].alias_of, 0);
    assert_int_equal(p->tensors[2].alias_of, 0);
    for (size_t j = 0; j < 4; j++) {
        const size_t item = p->chunks[p->tensors[0].first_chunk + j].item;
        assert_int_equal(p->chunks[p->tensors[1].first_chunk + j].item, item);
        assert_int_equal(p->chunks[p->tensors[2].first_chunk + j].item, item);
        assert_int_equal(p->chunks[p->tensors[2].first_chunk + j].box.offsets[0],
                         p->chunks[p->tensors[0].first_chunk + j].box.offsets[0]);
    }
    fc_plan_free(p);
}

static void test_plan_rejects_bad_aliases(void **state)
{
    (void)state;
    const struct fc_mesh m = mesh3(1, 2, 1);
    static struct fc_plan sentinel;
    struct fc_plan *p = &sentinel; /* must come back NULL */
    struct fc_plan_tensor_in t[2] = {tin("a", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 5, 2, 0),
                                     tin("b", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 5, 2, 0)};
    t[0].alias_of = 1;
    assert_fc_fails(fc_plan_build(&p, &m, t, 2, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "not an earlier tensor");
    assert_null(p);
    t[0].alias_of = 0;
    assert_fc_fails(fc_plan_build(&p, &m, t, 2, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "not an earlier tensor");
    t[0].alias_of = -2;
    assert_fc_fails(fc_plan_build(&p, &m, t, 2, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "not an earlier tensor");
    t[0].alias_of = -1;
    t[1].alias_of = 0;
    t[1].shape[1] = 3;
    assert_fc_fails(fc_plan_build(&p, &m, t, 2, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "'b' is tied to 'a'");
    t[1].shape[1] = 2;
    t[1].dtype = FC_DTYPE_BFLOAT16;
    assert_fc_fails(fc_plan_build(&p, &m, t, 2, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "differs in dtype");
    t[1].dtype = FC_DTYPE_FLOAT32;
    t[1].placement = FC_PLACE_REPLICATE;
    assert_fc_fails(fc_plan_build(&p, &m, t, 2, NULL, 0, blob_size, NULL), FC_EINVAL, "placement");
    assert_null(p);
}

static void test_plan_rejects_duplicate_keys_across_tensors_and_values(void **state)
{
    (void)state;
    const struct fc_mesh m = mesh3(1, 2, 1);
    struct fc_plan *p = NULL;
    struct fc_plan_tensor_in t[2] = {tin("a", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 1, 5, 0, 0),
                                     tin("b", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 1, 5, 0, 0)};
    const struct fc_plan_value_in v[2] = {{"x", 1}, {"b", 2}};
    assert_fc_fails(fc_plan_build(&p, &m, t, 2, v, 2, blob_size, NULL), FC_EINVAL,
                    "duplicate key 'b'");
    t[1].key = "a";
    assert_fc_fails(fc_plan_build(&p, &m, t, 2, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "duplicate key 'a'");
    const struct fc_plan_value_in vv[2] = {{"x", 1}, {"x", 2}};
    assert_fc_fails(fc_plan_build(&p, &m, NULL, 0, vv, 2, NULL, NULL), FC_EINVAL,
                    "duplicate key 'x'");
    assert_null(p);
}

static void test_plan_rejects_invalid_tensors_and_meshes(void **state)
{
    (void)state;
    const struct fc_mesh m = mesh3(1, 2, 1), bad = mesh3(0, 2, 1);
    struct fc_plan *p = NULL;
    struct fc_plan_tensor_in t = tin("w", FC_DTYPE_INVALID, FC_PLACE_SHARD0, 1, 4, 0, 0);
    assert_fc_fails(fc_plan_build(&p, &m, &t, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "'w': invalid dtype");
    t.dtype = FC_DTYPE_COUNT;
    assert_fc_fails(fc_plan_build(&p, &m, &t, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "invalid dtype");
    t.dtype = FC_DTYPE_FLOAT32;
    t.ndim = FC_MAX_DIMS + 1;
    assert_fc_fails(fc_plan_build(&p, &m, &t, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "dims is outside");
    t.ndim = 1;
    t.shape[0] = -1;
    assert_fc_fails(fc_plan_build(&p, &m, &t, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "negative size");
    t.ndim = 3;
    t.shape[0] = t.shape[1] = t.shape[2] = INT64_C(1) << 30;
    assert_fc_fails(fc_plan_build(&p, &m, &t, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "element count overflows");
    t.ndim = 0;
    assert_fc_fails(fc_plan_build(&p, &m, &t, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "0-d tensor cannot be Shard(0)");
    t.ndim = 1;
    t.shape[0] = 3;
    t.placement = (enum fc_placement)5;
    assert_fc_fails(fc_plan_build(&p, &m, &t, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "unknown placement");
    t.placement = FC_PLACE_SHARD0;
    assert_fc_fails(fc_plan_build(&p, &bad, &t, 1, NULL, 0, blob_size, NULL), FC_EINVAL,
                    "dim 0 has size 0");
    assert_null(p);
}

static void test_plan_offsets_and_lengths_add_up_to_file_sizes(void **state)
{
    (void)state;
    struct fc_plan *p = build_toy(1, 3);
    uint64_t sum = 0;
    for (size_t k = 0; k < p->nitems; k++) {
        const struct fc_plan_item *it = &p->items[k];
        assert_true(it->offset + it->length <= p->files[it->rank].nbytes);
        sum += it->length;
    }
    assert_int_equal(sum, p->total_bytes);
    fc_plan_free(p);
}

static void test_plan_writes_bytes_before_tensors_in_each_file(void **state)
{
    (void)state;
    /* 1 rank: everything in one file; values first, in input order. */
    struct fc_plan *p = build_toy(1, 1);
    check_plan(p);
    for (size_t v = 0; v < 3; v++) {
        assert_int_equal(p->items[v].kind, FC_ITEM_BYTES);
        assert_int_equal(p->items[v].index, v);
    }
    assert_int_equal(p->items[0].offset, 0);
    assert_int_equal(p->items[1].offset, 300);
    assert_int_equal(p->items[2].offset, 580);
    assert_int_equal(p->items[3].kind, FC_ITEM_TENSOR);
    assert_int_equal(p->items[3].offset, 830);
    fc_plan_free(p);
}

static void test_plan_is_deterministic(void **state)
{
    (void)state;
    struct fc_plan *a = build_toy(2, 3), *b = build_toy(2, 3);
    assert_true(plans_equal(a, b));
    struct fc_buf ta = FC_BUF_INIT(1 << 20), tb = FC_BUF_INIT(1 << 20);
    assert_fc_ok(fc_plan_describe(a, &ta));
    assert_fc_ok(fc_plan_describe(b, &tb));
    assert_int_equal(ta.len, tb.len);
    assert_memory_equal(ta.data, tb.data, ta.len);
    fc_buf_release(&ta);
    fc_buf_release(&tb);
    fc_plan_free(a);
    fc_plan_free(b);
}

static void test_plan_hsdp_stores_each_shard_box_once_on_one_of_its_replicas(void **state)
{
    (void)state;
    /* 8 equal tensors on (replicate 2, shard 2): each shard box has 2 replicas. */
    struct fc_plan_tensor_in t[8];
    const char *keys[8] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"};
    for (int i = 0; i < 8; i++)
        t[i] = tin(keys[i], FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 8, 4, 0);
    const struct fc_mesh m = mesh3(2, 2, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, t, 8, NULL, 0, blob_size, NULL));
    check_plan(p);
    assert_int_equal(p->nitems, 16); /* 8 tensors x 2 shard boxes, not x 4 ranks */
    /* greedy: t0 -> ranks 0, 1; t1 -> ranks 2, 3; ... every file gets 4 items */
    for (int r = 0; r < 4; r++)
        assert_int_equal(p->files[r].nitems, 4);
    assert_int_equal(p->items[p->chunks[p->tensors[0].first_chunk].item].rank, 0);
    assert_int_equal(p->items[p->chunks[p->tensors[0].first_chunk + 1].item].rank, 1);
    assert_int_equal(p->items[p->chunks[p->tensors[1].first_chunk].item].rank, 2);
    assert_int_equal(p->items[p->chunks[p->tensors[1].first_chunk + 1].item].rank, 3);
    fc_plan_free(p);

    /* 2 x 3 with 5 rows: boxes rows 0-1, 2-3, 4; each stored once on (s or 3 + s). */
    for (int i = 0; i < 6; i++)
        t[i] = tin(keys[i], FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 5, 4, 0);
    const struct fc_mesh m2 = mesh3(2, 3, 1);
    assert_fc_ok(fc_plan_build(&p, &m2, t, 6, NULL, 0, blob_size, NULL));
    check_plan(p);
    assert_int_equal(p->nitems, 18);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int r = 0; r < 6; r++) {
        lo = p->files[r].nbytes < lo ? p->files[r].nbytes : lo;
        hi = p->files[r].nbytes > hi ? p->files[r].nbytes : hi;
    }
    assert_true(hi - lo <= 2 * (32 + 116)); /* balanced within two items */
    fc_plan_free(p);
}

static void test_plan_spreads_bytes_values_and_replicated_tensors(void **state)
{
    (void)state;
    struct fc_plan_value_in v[8];
    char keys[8][8];
    for (int i = 0; i < 8; i++) {
        snprintf(keys[i], sizeof(keys[i]), "v%d", i);
        v[i].key = keys[i];
        v[i].blob_size = 100;
    }
    const struct fc_mesh m = mesh3(1, 4, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, NULL, 0, v, 8, NULL, NULL));
    check_plan(p);
    for (int i = 0; i < 8; i++)
        assert_int_equal(p->items[p->values[i].item].rank, i % 4);
    for (int r = 0; r < 4; r++)
        assert_int_equal(p->files[r].nbytes, 200);
    fc_plan_free(p);

    /* Replicated tensors go to the least loaded rank, after the forced shards. */
    struct fc_plan_tensor_in t[3] = {tin("w", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 1, 3, 0, 0),
                                     tin("b1", FC_DTYPE_FLOAT32, FC_PLACE_REPLICATE, 1, 2, 0, 0),
                                     tin("b2", FC_DTYPE_FLOAT32, FC_PLACE_REPLICATE, 1, 2, 0, 0)};
    assert_fc_ok(fc_plan_build(&p, &m, t, 3, NULL, 0, blob_size, NULL));
    check_plan(p);
    /* w: rows 0, 1, 2 on ranks 0-2 and the empty box on rank 3; b1, b2 -> 3 then 0 */
    assert_int_equal(p->items[p->chunks[p->tensors[1].first_chunk].item].rank, 3);
    assert_int_equal(p->items[p->chunks[p->tensors[2].first_chunk].item].rank, 0);
    fc_plan_free(p);
}

static void test_plan_creates_a_file_for_every_rank_even_when_idle(void **state)
{
    (void)state;
    struct fc_plan_tensor_in t = tin("w", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 1, 2, 0, 0);
    const struct fc_mesh m = mesh3(1, 8, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, &t, 1, NULL, 0, blob_size, NULL));
    check_plan(p);
    assert_int_equal(p->nfiles, 8);
    assert_int_equal(p->files[0].nitems, 1);
    assert_int_equal(p->files[1].nitems, 1);
    assert_int_equal(p->files[2].nitems, 1); /* the one empty box, at offset 2 */
    for (int r = 3; r < 8; r++) {
        assert_int_equal(p->files[r].nitems, 0);
        assert_int_equal(p->files[r].nbytes, 0);
    }
    fc_plan_free(p);

    /* no tensors, no values: still one (empty) file per rank */
    assert_fc_ok(fc_plan_build(&p, &m, NULL, 0, NULL, 0, NULL, NULL));
    assert_int_equal(p->nfiles, 8);
    assert_int_equal(p->nitems, 0);
    assert_int_equal(p->total_bytes, 0);
    fc_plan_free(p);
}

static void test_plan_scales_to_wide_meshes(void **state)
{
    (void)state;
    /* Small tensors on 65536 ranks: the empty boxes have 65000+ holders each. */
    struct fc_plan_tensor_in t[64];
    char keys[64][8];
    for (int i = 0; i < 64; i++) {
        snprintf(keys[i], sizeof(keys[i]), "w%d", i);
        t[i] = tin(keys[i], FC_DTYPE_FLOAT32, i % 4 ? FC_PLACE_SHARD0 : FC_PLACE_REPLICATE, 2,
                   10 + i, 4, 0);
    }
    static const int rs[][2] = {{1, 1 << 16}, {256, 256}};
    for (int k = 0; k < 2; k++) {
        const struct fc_mesh m = mesh3(rs[k][0], rs[k][1], 1);
        struct fc_plan *p = NULL;
        assert_fc_ok(fc_plan_build(&p, &m, t, 64, toy_values, 3, blob_size, NULL));
        assert_int_equal(p->nfiles, 1 << 16);
        for (size_t i = 0; i < 64; i++) {
            int64_t off[2], size[2];
            fc_plan_rank_box(p, i, (1 << 16) - 1, off, size);
            assert_true(size[0] == 0 || t[i].placement == FC_PLACE_REPLICATE);
        }
        fc_plan_free(p);
    }
}

static void test_plan_propagates_blob_size_errors(void **state)
{
    (void)state;
    struct fc_plan_tensor_in t[NTOY];
    toy_model(t);
    const struct fc_mesh m = mesh3(1, 4, 1);
    for (unsigned k = 1; k <= 6; k++) {
        struct blob_ctx ctx = {0, k};
        struct fc_plan *p = NULL;
        assert_fc_fails(fc_plan_build(&p, &m, t, NTOY, toy_values, 3, blob_size, &ctx), FC_EIO,
                        "injected failure");
        assert_null(p);
    }
}

static void test_plan_survives_every_allocation_failure(void **state)
{
    (void)state;
    struct fc_plan_tensor_in t[NTOY];
    toy_model(t);
    const struct fc_mesh m = mesh3(2, 3, 1);
    for (unsigned long n = 1;; n++) {
        struct fc_plan *p = NULL;
        fc_alloc_fail_at(n);
        const int rc = fc_plan_build(&p, &m, t, NTOY, toy_values, 3, blob_size, NULL);
        const int fired = fc_alloc_failed();
        fc_alloc_fail_at(0);
        if (!fired) {
            assert_fc_ok(rc);
            check_plan(p);
            fc_plan_free(p);
            break;
        }
        assert_int_equal(rc, FC_ENOMEM);
        assert_null(p);
        assert_true(n < 100);
    }
}

static void test_plan_describe_renders_the_dry_run_table(void **state)
{
    (void)state;
    struct fc_plan_tensor_in t[3] = {tin("w", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 3, 2, 0),
                                     tin("b", FC_DTYPE_FLOAT32, FC_PLACE_REPLICATE, 0, 0, 0, 0),
                                     tin("tied", FC_DTYPE_FLOAT32, FC_PLACE_SHARD0, 2, 3, 2, 0)};
    t[2].alias_of = 0;
    const struct fc_plan_value_in v = {"step", 10};
    const struct fc_mesh m = mesh3(1, 2, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, t, 3, &v, 1, blob_size, NULL));
    struct fc_buf out = FC_BUF_INIT(1 << 16);
    assert_fc_ok(fc_plan_describe(p, &out));
    assert_fc_ok(fc_buf_putc(&out, '\0'));
    const char *want =
        "plan: mesh replicate=1 shard=2 (world 2); 3 tensors, 1 values; 4 items in 2 files, "
        "370 bytes\n"
        "value step  ->  __0_0.distcp  offset 0  bytes 10\n"
        "tensor w  float32 [3, 2]  Shard(0)\n"
        "  box [0:2, 0:2]  ranks 0  ->  __0_0.distcp  offset 10  bytes 132\n"
        "  box [2:3, 0:2]  ranks 1  ->  __1_0.distcp  offset 0  bytes 124\n"
        "tensor b  float32 []  Replicate()\n"
        "  box []  ranks all  ->  __1_0.distcp  offset 124  bytes 104\n"
        "tensor tied  float32 [3, 2]  Shard(0)  alias of w\n"
        "  box [0:2, 0:2]  ranks 0  ->  __0_0.distcp  offset 10  bytes 132  (shared)\n"
        "  box [2:3, 0:2]  ranks 1  ->  __1_0.distcp  offset 0  bytes 124  (shared)\n"
        "file __0_0.distcp  2 items  142 bytes\n"
        "file __1_0.distcp  2 items  228 bytes\n";
    assert_string_equal((const char *)out.data, want);
    fc_buf_release(&out);
    fc_plan_free(p);
}

static void test_plan_describe_lists_hsdp_holders_and_empty_boxes(void **state)
{
    (void)state;
    struct fc_plan_tensor_in t = tin("x\n\\y", FC_DTYPE_BFLOAT16, FC_PLACE_SHARD0, 1, 1, 0, 0);
    const struct fc_mesh m = mesh3(2, 3, 1);
    struct fc_plan *p = NULL;
    assert_fc_ok(fc_plan_build(&p, &m, &t, 1, NULL, 0, blob_size, NULL));
    struct fc_buf out = FC_BUF_INIT(1 << 16);
    assert_fc_ok(fc_plan_describe(p, &out));
    assert_fc_ok(fc_buf_putc(&out, '\0'));
    const char *s = (const char *)out.data;
    assert_non_null(strstr(s, "tensor x\\x0a\\x5cy  bfloat16 [1]  (Replicate(), Shard(0))\n"));
    assert_non_null(strstr(s, "  box [0:1]  ranks 0,3  ->  __0_0.distcp  offset 0  bytes 110\n"));
    assert_non_null(
        strstr(s, "  box [1:1]  ranks 1-2,4-5  ->  __1_0.distcp  offset 0  bytes 108  (empty)\n"));
    fc_buf_release(&out);
    fc_plan_free(p);

    /* Long holder lists are cut after 8 runs. */
    const struct fc_mesh wide = mesh3(10, 2, 1);
    assert_fc_ok(fc_plan_build(&p, &wide, &t, 1, NULL, 0, blob_size, NULL));
    fc_buf_init(&out, 1 << 16);
    assert_fc_ok(fc_plan_describe(p, &out));
    assert_fc_ok(fc_buf_putc(&out, '\0'));
    assert_non_null(strstr((const char *)out.data, "ranks 0,2,4,6,8,10,12,14, ... (10 ranks)  ->"));
    fc_buf_release(&out);
    fc_plan_free(p);
}

static void test_plan_describe_fails_when_the_buffer_cap_is_exceeded(void **state)
{
    (void)state;
    struct fc_plan *p = build_toy(1, 8);
    struct fc_buf out = FC_BUF_INIT(64);
    assert_fc_fails(fc_plan_describe(p, &out), FC_ENOMEM, "cap");
    assert_true(out.len <= 64);
    fc_buf_release(&out);
    fc_plan_free(p);
}

/* ------------------------------------------------------------------------ */
/* Coverage                                                                 */

struct boxes {
    int64_t off[64][FC_MAX_DIMS];
    int64_t size[64][FC_MAX_DIMS];
    struct fc_box b[64];
    size_t n;
};

static void add_box(struct boxes *bx, int ndim, const int64_t *off, const int64_t *size)
{
    for (int d = 0; d < ndim; d++) {
        bx->off[bx->n][d] = off[d];
        bx->size[bx->n][d] = size[d];
    }
    bx->b[bx->n].offsets = bx->off[bx->n];
    bx->b[bx->n].sizes = bx->size[bx->n];
    bx->n++;
}

static void add1(struct boxes *bx, int64_t off, int64_t size, int64_t cols)
{
    const int64_t o[2] = {off, 0}, s[2] = {size, cols};
    add_box(bx, 2, o, s);
}

/* fc_chunks_check_tiling() on bx: FC_OK, or the message it failed with ("" when OK). */
static const char *tiling(int ndim, const int64_t *shape, const struct boxes *bx)
{
    const int rc = fc_chunks_check_tiling(ndim, shape, bx->b, bx->n, "d", "w");
    if (rc == FC_OK)
        return "";
    assert_int_equal(rc, FC_ECORRUPT);
    return fc_error_last();
}

static void test_tiling_accepts_rows_in_any_order_with_empty_shards(void **state)
{
    (void)state;
    struct boxes bx = {.n = 0};
    const int64_t shape[2] = {5, 3};
    add1(&bx, 4, 1, 3); /* order does not matter */
    add1(&bx, 0, 2, 3);
    add1(&bx, 2, 2, 3);
    add1(&bx, 5, 0, 3); /* FSDP's empty shard at L */
    add1(&bx, 2, 0, 3); /* an empty chunk strictly inside: covers nothing */
    assert_string_equal(tiling(2, shape, &bx), "");
    /* a zero-element tensor needs no chunk, and empty ones are fine */
    const int64_t zero[2] = {0, 3};
    bx.n = 0;
    assert_string_equal(tiling(2, zero, &bx), "");
    add1(&bx, 0, 0, 3);
    assert_string_equal(tiling(2, zero, &bx), "");
}

static void test_tiling_accepts_grids_in_2d_and_3d_and_dim1_sharding(void **state)
{
    (void)state;
    /* TP x FSDP: 4 x 2 grid over [3, 5], torch.chunk pieces, so some rows are empty */
    struct boxes bx = {.n = 0};
    const int64_t shape[2] = {3, 5};
    for (int i = 3; i >= 0; i--) {
        for (int j = 0; j < 2; j++) {
            int64_t o[2], s[2];
            fc_mesh_chunk(3, 4, i, &o[0], &s[0]);
            fc_mesh_chunk(5, 2, j, &o[1], &s[1]);
            add_box(&bx, 2, o, s);
        }
    }
    assert_string_equal(tiling(2, shape, &bx), "");
    /* Shard(1) of [3, 8] over 4 */
    bx.n = 0;
    const int64_t shape2[2] = {3, 8};
    for (int j = 0; j < 4; j++) {
        const int64_t o[2] = {0, 2 * j}, s[2] = {3, 2};
        add_box(&bx, 2, o, s);
    }
    assert_string_equal(tiling(2, shape2, &bx), "");
    /* 3-D: 2 x 3 x 2 grid over [4, 7, 3], uneven pieces */
    bx.n = 0;
    const int64_t shape3[3] = {4, 7, 3};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++) {
                int64_t o[3], s[3];
                fc_mesh_chunk(4, 2, i, &o[0], &s[0]);
                fc_mesh_chunk(7, 3, j, &o[1], &s[1]);
                fc_mesh_chunk(3, 2, k, &o[2], &s[2]);
                add_box(&bx, 3, o, s);
            }
    assert_string_equal(tiling(3, shape3, &bx), "");
    /* dropping one box leaves exactly it uncovered */
    bx.n--;
    assert_string_equal(tiling(3, shape3, &bx), "d: chunks of 'w' leave [2:4, 6:7, 2:3] uncovered");
}

static void test_tiling_refuses_an_overlap_that_cancels_a_gap(void **state)
{
    (void)state;
    /* 1-D: 3 + 3 + 2 elements of 8, counts add up; row 2 twice, row 5 never */
    struct boxes bx = {.n = 0};
    const int64_t shape1[1] = {8};
    const int64_t o[3][1] = {{0}, {2}, {6}}, s[3][1] = {{3}, {3}, {2}};
    for (int i = 0; i < 3; i++)
        add_box(&bx, 1, o[i], s[i]);
    assert_string_equal(tiling(1, shape1, &bx),
                        "d: chunks of 'w' overlap at [2:3] (chunks [0:3] and [2:5]) and leave "
                        "[5:6] uncovered");
    /* 2-D: a column twice, another never (the second rank saved [0:2, 1:3], not [0:2, 2:4]) */
    bx.n = 0;
    const int64_t shape[2] = {4, 4};
    const int64_t o2[3][2] = {{0, 0}, {0, 1}, {2, 0}}, s2[3][2] = {{2, 2}, {2, 2}, {2, 4}};
    for (int i = 0; i < 3; i++)
        add_box(&bx, 2, o2[i], s2[i]);
    assert_string_equal(tiling(2, shape, &bx),
                        "d: chunks of 'w' overlap at [0:2, 1:2] (chunks [0:2, 0:2] and [0:2, 1:3]) "
                        "and leave [0:2, 3:4] uncovered");
    /* the same in the second row band, after a band that tiles */
    bx.n = 0;
    const int64_t o3[4][2] = {{0, 0}, {0, 2}, {2, 0}, {2, 1}};
    const int64_t s3[4][2] = {{2, 2}, {2, 2}, {2, 2}, {2, 2}};
    for (int i = 0; i < 4; i++)
        add_box(&bx, 2, o3[i], s3[i]);
    assert_string_equal(tiling(2, shape, &bx),
                        "d: chunks of 'w' overlap at [2:4, 1:2] (chunks [2:4, 0:2] and [2:4, 1:3]) "
                        "and leave [2:4, 3:4] uncovered");
    /* no guillotine cut at all: a column and a row cross at [0:1, 0:1], [1:2, 1:2] is empty */
    bx.n = 0;
    const int64_t shape4[2] = {2, 2};
    const int64_t o4[2][2] = {{0, 0}, {0, 0}}, s4[2][2] = {{2, 1}, {1, 2}};
    for (int i = 0; i < 2; i++)
        add_box(&bx, 2, o4[i], s4[i]);
    assert_string_equal(
        tiling(2, shape4, &bx),
        "d: chunks of 'w' overlap at [0:1, 0:1] (chunks [0:2, 0:1] and [0:1, 0:2])");
}

static void test_tiling_refuses_boxes_outside_the_shape(void **state)
{
    (void)state;
    const int64_t shape[2] = {4, 2};
    struct {
        int64_t off, size;
        const char *msg;
    } cases[] = {
        {3, 2, "d: chunks of 'w': [3:5, 0:2] lies outside the shape [4, 2]"},
        {-1, 1, "d: chunks of 'w': [-1:0, 0:2] lies outside the shape [4, 2]"},
        {1, -1, "d: chunks of 'w': [1:0, 0:2] lies outside the shape [4, 2]"},
        {5, 0, "d: chunks of 'w': [5:5, 0:2] lies outside the shape [4, 2]"}, /* even empty */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct boxes bx = {.n = 0};
        add1(&bx, 0, 4, 2);
        add1(&bx, cases[i].off, cases[i].size, 2);
        assert_string_equal(tiling(2, shape, &bx), cases[i].msg);
    }
    const int64_t neg[1] = {-1}, big[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
    struct boxes none = {.n = 0};
    assert_string_equal(tiling(1, neg, &none),
                        "d: chunks of 'w': the shape [-1] has a negative dim or more than 2^63 "
                        "elements");
    assert_non_null(strstr(tiling(3, big, &none), "more than 2^63 elements"));
    assert_fc_fails(fc_chunks_check_tiling(-1, neg, NULL, 0, "d", "w"), FC_EINVAL,
                    "dims is outside");
}

static void test_tiling_is_exact_for_offsets_near_2_63(void **state)
{
    (void)state;
    const int64_t shape[1] = {INT64_MAX}, half = INT64_C(1) << 62;
    struct boxes bx = {.n = 0};
    const int64_t o0[1] = {0}, s0[1] = {half}, o1[1] = {half}, s1[1] = {INT64_MAX - half};
    add_box(&bx, 1, o0, s0);
    add_box(&bx, 1, o1, s1);
    assert_string_equal(tiling(1, shape, &bx), "");
    /* one element short of the end: the gap is named, nothing overflows */
    bx.size[1][0]--;
    assert_string_equal(tiling(1, shape, &bx),
                        "d: chunks of 'w' leave [9223372036854775806:9223372036854775807] "
                        "uncovered");
    /* a box whose end would overflow int64 */
    bx.n = 1;
    const int64_t o2[1] = {INT64_MAX - 1}, s2[1] = {2};
    add_box(&bx, 1, o2, s2);
    assert_non_null(strstr(tiling(1, shape, &bx), "lies outside the shape [9223372036854775807]"));
    /* an overlap at the top end */
    bx.n = 0;
    const int64_t all[1] = {INT64_MAX}, o3[1] = {INT64_MAX - 1}, s3[1] = {1};
    add_box(&bx, 1, o0, all);
    add_box(&bx, 1, o3, s3);
    assert_string_equal(tiling(1, shape, &bx),
                        "d: chunks of 'w' overlap at [9223372036854775806:9223372036854775807] "
                        "(chunks [0:9223372036854775807] and "
                        "[9223372036854775806:9223372036854775807])");
}

static void test_tiling_takes_identical_boxes_as_overlaps_until_deduplicated(void **state)
{
    (void)state;
    /* HSDP replicas in a rank-local layout: the same box saved by two ranks */
    struct boxes bx = {.n = 0};
    const int64_t shape[2] = {4, 3};
    add1(&bx, 0, 2, 3);
    add1(&bx, 2, 2, 3);
    add1(&bx, 0, 2, 3);
    assert_string_equal(
        tiling(2, shape, &bx),
        "d: chunks of 'w' overlap at [0:2, 0:3] (chunks [0:2, 0:3] and [0:2, 0:3])");
    size_t first_of[3], nrep = 0;
    assert_fc_ok(fc_chunks_replicas(2, bx.b, bx.n, first_of, &nrep));
    assert_int_equal(nrep, 1);
    assert_int_equal(first_of[2], 0);
    bx.n = 2; /* the distinct boxes */
    assert_string_equal(tiling(2, shape, &bx), "");
    /* replicas do not hide a gap */
    bx.n = 1;
    assert_string_equal(tiling(2, shape, &bx), "d: chunks of 'w' leave [2:4, 0:3] uncovered");
}

static void test_tiling_handles_scalars(void **state)
{
    (void)state;
    struct boxes bx = {.n = 0};
    add_box(&bx, 0, NULL, NULL);
    assert_string_equal(tiling(0, NULL, &bx), "");
    add_box(&bx, 0, NULL, NULL);
    assert_string_equal(tiling(0, NULL, &bx), "d: chunks of 'w' overlap at [] (chunks [] and [])");
    bx.n = 0;
    assert_string_equal(tiling(0, NULL, &bx), "d: chunks of 'w' leave [] uncovered");
}

/* A pinwheel of [3L, 3L]: four arms round a centre, no cut on either dim. */
static void pinwheel(struct boxes *bx, int64_t L, int centre)
{
    const int64_t o[5][2] = {{0, 0}, {0, L}, {L, 2 * L}, {2 * L, 0}, {L, L}};
    const int64_t s[5][2] = {{2 * L, L}, {L, 2 * L}, {2 * L, L}, {L, 2 * L}, {L, L}};
    bx->n = 0;
    for (int i = 0; i < 4 + centre; i++)
        add_box(bx, 2, o[i], s[i]);
}

static void test_tiling_accepts_a_pinwheel_and_finds_its_hole(void **state)
{
    (void)state;
    struct boxes bx;
    const int64_t shape[2] = {3, 3};
    pinwheel(&bx, 1, 1);
    assert_string_equal(tiling(2, shape, &bx), "");
    pinwheel(&bx, 1, 0);
    assert_string_equal(tiling(2, shape, &bx),
                        "d: chunks of 'w' leave 1 elements of [0:3, 0:3] uncovered");
}

/* Exact tiling by brute force: every box inside, every element covered once. */
static int brute_tiles(int ndim, const int64_t *shape, const struct boxes *bx)
{
    int64_t numel = 0;
    assert_int_equal(fc_shape_numel(shape, ndim, &numel), 0);
    unsigned counts[216];
    memset(counts, 0, sizeof(counts));
    for (size_t i = 0; i < bx->n; i++) {
        for (int d = 0; d < ndim; d++) {
            if (bx->off[i][d] < 0 || bx->size[i][d] < 0 ||
                bx->off[i][d] + bx->size[i][d] > shape[d])
                return 0;
        }
        mark_box(counts, ndim, shape, bx->off[i], bx->size[i]);
    }
    for (int64_t e = 0; e < numel; e++) {
        if (counts[e] != 1)
            return 0;
    }
    return 1;
}

/* Tiny xorshift for reproducible random lists. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A random grid tiling of shape (ndim <= 3), then maybe one box shifted or resized. */
static void random_grid(uint64_t *seed, int ndim, const int64_t *shape, struct boxes *bx)
{
    int64_t parts[3];
    for (int d = 0; d < ndim; d++)
        parts[d] = 1 + (int64_t)(rng_next(seed) % 3);
    bx->n = 0;
    const int64_t total =
        ndim == 0 ? 1 : parts[0] * (ndim > 1 ? parts[1] : 1) * (ndim > 2 ? parts[2] : 1);
    for (int64_t c = 0; c < total; c++) {
        int64_t o[3], s[3], rest = c;
        for (int d = ndim - 1; d >= 0; d--) {
            fc_mesh_chunk(shape[d], parts[d], rest % parts[d], &o[d], &s[d]);
            rest /= parts[d];
        }
        add_box(bx, ndim, o, s);
    }
    if (bx->n == 0 || ndim == 0 || rng_next(seed) % 2 == 0)
        return;
    const size_t i = rng_next(seed) % bx->n;
    const int d = (int)(rng_next(seed) % (uint64_t)ndim);
    if (rng_next(seed) % 2 == 0)
        bx->off[i][d] += (int64_t)(rng_next(seed) % 3) - 1; /* same volume, moved */
    else
        bx->size[i][d] += (int64_t)(rng_next(seed) % 3) - 1;
}

static void test_tiling_matches_brute_force_on_random_lists(void **state)
{
    (void)state;
    uint64_t seed = 0x9e3779b97f4a7c15u;
    size_t tiled = 0, refused = 0;
    for (int iter = 0; iter < 3000; iter++) {
        const int ndim = (int)(rng_next(&seed) % 4);
        int64_t shape[3];
        for (int d = 0; d < ndim; d++)
            shape[d] = (int64_t)(rng_next(&seed) % 6);
        struct boxes bx = {.n = 0};
        if (iter % 2 == 0) {
            random_grid(&seed, ndim, shape, &bx);
        } else {
            const size_t n = rng_next(&seed) % 10;
            for (size_t i = 0; i < n; i++) {
                int64_t o[3], s[3];
                for (int d = 0; d < ndim; d++) {
                    o[d] = (int64_t)(rng_next(&seed) % (uint64_t)(shape[d] + 2)) - (iter % 7 == 1);
                    s[d] = (int64_t)(rng_next(&seed) % (uint64_t)(shape[d] + 2));
                }
                add_box(&bx, ndim, o, s);
            }
        }
        const int want = brute_tiles(ndim, shape, &bx);
        const int rc = fc_chunks_check_tiling(ndim, shape, bx.b, bx.n, "d", "w");
        if (want != (rc == FC_OK))
            print_error("iter %d: brute force says %d, check says %s\n", iter, want,
                        rc == FC_OK ? "ok" : fc_error_last());
        assert_int_equal(want, rc == FC_OK);
        if (rc != FC_OK)
            assert_int_equal(rc, FC_ECORRUPT);
        tiled += want;
        refused += !want;
    }
    assert_true(tiled > 500 && refused > 500); /* both sides exercised */
}

/* n boxes with dynamically allocated arrays (the fixed struct boxes holds 64). */
struct many {
    int64_t *off, *size;
    struct fc_box *b;
};

static void many_new(struct many *m, size_t n, int ndim)
{
    m->off = calloc(n * (size_t)ndim, sizeof(*m->off));
    m->size = calloc(n * (size_t)ndim, sizeof(*m->size));
    m->b = calloc(n, sizeof(*m->b));
    assert_non_null(m->off);
    assert_non_null(m->size);
    assert_non_null(m->b);
    for (size_t i = 0; i < n; i++)
        m->b[i] = (struct fc_box){&m->off[i * (size_t)ndim], &m->size[i * (size_t)ndim]};
}

static void many_free(struct many *m)
{
    free(m->off);
    free(m->size);
    free(m->b);
}

static void test_tiling_is_fast_on_rows_columns_and_grids(void **state)
{
    (void)state;
    const size_t n = 200000;
    struct many m;
    many_new(&m, n, 2);
    for (size_t i = 0; i < n; i++) {
        const size_t k = (i * 7919) % n; /* shuffled */
        m.off[2 * i] = (int64_t)k * 3;
        m.size[2 * i] = 3;
        m.size[2 * i + 1] = 16;
    }
    const int64_t rows[2] = {(int64_t)n * 3, 16};
    assert_fc_ok(fc_chunks_check_tiling(2, rows, m.b, n, "d", "w"));
    /* the same boxes over dim 1 (Shard(1)) */
    for (size_t i = 0; i < n; i++) {
        m.off[2 * i + 1] = m.off[2 * i];
        m.off[2 * i] = 0;
        m.size[2 * i] = 16;
        m.size[2 * i + 1] = 3;
    }
    const int64_t cols[2] = {16, (int64_t)n * 3};
    assert_fc_ok(fc_chunks_check_tiling(2, cols, m.b, n, "d", "w"));
    /* a 400 x 500 grid: every row band cut on dim 1 */
    for (size_t i = 0; i < n; i++) {
        const size_t k = (i * 7919) % n;
        m.off[2 * i] = (int64_t)(k / 500) * 2;
        m.off[2 * i + 1] = (int64_t)(k % 500) * 3;
        m.size[2 * i] = 2;
        m.size[2 * i + 1] = 3;
    }
    const int64_t grid[2] = {800, 1500};
    assert_fc_ok(fc_chunks_check_tiling(2, grid, m.b, n, "d", "w"));
    /* one box moved by a row: refused, both problems named */
    m.off[2 * 7]++;
    assert_fc_fails(fc_chunks_check_tiling(2, grid, m.b, n, "d", "w"), FC_ECORRUPT, "uncovered");
    many_free(&m);
}

static void test_tiling_refuses_identical_boxes_at_once(void **state)
{
    (void)state;
    /* 12000 identical full chunks: the first pair overlaps, no quadratic scan */
    const size_t n = 12000;
    const int64_t off[1] = {0}, size[1] = {10};
    struct fc_box *b = calloc(n, sizeof(*b));
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (struct fc_box){off, size};
    assert_fc_fails(fc_chunks_check_tiling(1, size, b, n, "d", "w"), FC_ECORRUPT,
                    "d: chunks of 'w' overlap at [0:10] (chunks [0:10] and [0:10])");
    free(b);
}

static void test_tiling_refuses_what_it_cannot_prove_within_its_work_bound(void **state)
{
    (void)state;
    /*
     * A pinwheel whose two top arms are cut into L strips each: valid, but with
     * no guillotine cut every strip of one arm meets every strip of the other
     * on dim 0, 1.5 L^2 pair tests, past the 2^26 bound: refused, never passed.
     */
    const int64_t L = 8000, shape[2] = {3 * L, 3 * L};
    const size_t n = (size_t)(2 * L + 3);
    struct many m;
    many_new(&m, n, 2);
    size_t k = 0;
    for (int64_t j = 0; j < L; j++, k++) { /* arm [0:2L, 0:L] as columns */
        m.off[2 * k + 1] = j;
        m.size[2 * k] = 2 * L;
        m.size[2 * k + 1] = 1;
    }
    for (int64_t i = 0; i < L; i++, k++) { /* arm [0:L, L:3L] as rows */
        m.off[2 * k] = i;
        m.off[2 * k + 1] = L;
        m.size[2 * k] = 1;
        m.size[2 * k + 1] = 2 * L;
    }
    const int64_t o[3][2] = {{L, 2 * L}, {2 * L, 0}, {L, L}};
    const int64_t s[3][2] = {{2 * L, L}, {L, 2 * L}, {L, L}};
    for (int i = 0; i < 3; i++, k++) {
        memcpy(&m.off[2 * k], o[i], sizeof(o[i]));
        memcpy(&m.size[2 * k], s[i], sizeof(s[i]));
    }
    assert_int_equal(k, n);
    assert_fc_fails(fc_chunks_check_tiling(2, shape, m.b, n, "d", "w"), FC_ECORRUPT,
                    "d: chunks of 'w' are laid out too irregularly to prove that they tile the "
                    "tensor (more than 67108864 steps)");
    /* the same arms uncut: proven */
    struct boxes bx;
    pinwheel(&bx, L, 1);
    assert_fc_ok(fc_chunks_check_tiling(2, shape, bx.b, bx.n, "d", "w"));
    many_free(&m);
}

/* ------------------------------------------------------------------------ */
/* Intersections                                                            */

static void test_intersect_finds_the_source_pieces_of_a_target_box(void **state)
{
    (void)state;
    /* source: 10 rows over 4 ranks (3, 3, 3, 1) x 4 cols; target rows 2..7, cols 1..3 */
    struct boxes bx = {.n = 0};
    for (int i = 0; i < 4; i++) {
        int64_t o, s;
        fc_mesh_chunk(10, 4, i, &o, &s);
        add1(&bx, o, s, 4);
    }
    struct fc_chunk_index *idx = NULL;
    assert_fc_ok(fc_chunk_index_new(&idx, 2, bx.b, bx.n));
    const int64_t toff[2] = {2, 1}, tsize[2] = {5, 2};
    struct fc_overlap *ov = NULL;
    size_t n = 0;
    assert_fc_ok(fc_chunk_intersect(idx, toff, tsize, &ov, &n));
    assert_int_equal(n, 3);
    assert_int_equal(ov[0].chunk, 0);
    assert_int_equal(ov[0].offsets[0], 2);
    assert_int_equal(ov[0].sizes[0], 1);
    assert_int_equal(ov[1].chunk, 1);
    assert_int_equal(ov[1].offsets[0], 3);
    assert_int_equal(ov[1].sizes[0], 3);
    assert_int_equal(ov[2].chunk, 2);
    assert_int_equal(ov[2].offsets[0], 6);
    assert_int_equal(ov[2].sizes[0], 1);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(ov[k].offsets[1], 1);
        assert_int_equal(ov[k].sizes[1], 2);
    }
    fc_free(ov);
    /* empty target and a target past the end: nothing */
    const int64_t t2off[2] = {10, 0}, t2size[2] = {0, 4}, t3off[2] = {20, 0}, t3size[2] = {1, 4};
    assert_fc_ok(fc_chunk_intersect(idx, t2off, t2size, &ov, &n));
    assert_int_equal(n, 0);
    assert_null(ov);
    assert_fc_ok(fc_chunk_intersect(idx, t3off, t3size, &ov, &n));
    assert_int_equal(n, 0);
    fc_chunk_index_free(idx);

    /* 0-d: every chunk overlaps */
    struct fc_box sb[2] = {{NULL, NULL}, {NULL, NULL}};
    assert_fc_ok(fc_chunk_index_new(&idx, 0, sb, 2));
    assert_fc_ok(fc_chunk_intersect(idx, NULL, NULL, &ov, &n));
    assert_int_equal(n, 2);
    fc_free(ov);
    fc_chunk_index_free(idx);
}

static void test_intersect_matches_brute_force(void **state)
{
    (void)state;
    uint64_t seed = 12345;
    for (int iter = 0; iter < 300; iter++) {
        const int ndim = 1 + (int)(rng_next(&seed) % 3);
        struct boxes bx = {.n = 0};
        const size_t n = rng_next(&seed) % 20;
        for (size_t i = 0; i < n; i++) {
            int64_t o[3], s[3];
            for (int d = 0; d < ndim; d++) {
                o[d] = (int64_t)(rng_next(&seed) % 12);
                s[d] = (int64_t)(rng_next(&seed) % 6);
            }
            add_box(&bx, ndim, o, s);
        }
        struct fc_chunk_index *idx = NULL;
        assert_fc_ok(fc_chunk_index_new(&idx, ndim, bx.b, bx.n));
        int64_t to[3], ts[3];
        for (int d = 0; d < ndim; d++) {
            to[d] = (int64_t)(rng_next(&seed) % 12);
            ts[d] = (int64_t)(rng_next(&seed) % 8);
        }
        struct fc_overlap *ov = NULL;
        size_t nov = 0;
        assert_fc_ok(fc_chunk_intersect(idx, to, ts, &ov, &nov));
        size_t want = 0;
        for (size_t i = 0; i < bx.n; i++) {
            int hit = 1;
            int64_t lo[3], len[3];
            for (int d = 0; d < ndim; d++) {
                lo[d] = bx.off[i][d] > to[d] ? bx.off[i][d] : to[d];
                const int64_t e1 = bx.off[i][d] + bx.size[i][d], e2 = to[d] + ts[d];
                len[d] = (e1 < e2 ? e1 : e2) - lo[d];
                hit &= len[d] > 0;
            }
            if (!hit)
                continue;
            size_t k = 0;
            while (k < nov && ov[k].chunk != i)
                k++;
            assert_true(k < nov);
            for (int d = 0; d < ndim; d++) {
                assert_int_equal(ov[k].offsets[d], lo[d]);
                assert_int_equal(ov[k].sizes[d], len[d]);
            }
            want++;
        }
        assert_int_equal(nov, want);
        for (size_t k = 1; k < nov; k++) /* (dim-0 start, index) order */
            assert_true(bx.off[ov[k - 1].chunk][0] < bx.off[ov[k].chunk][0] ||
                        (bx.off[ov[k - 1].chunk][0] == bx.off[ov[k].chunk][0] &&
                         ov[k - 1].chunk < ov[k].chunk));
        fc_free(ov);
        fc_chunk_index_free(idx);
    }
}

static void test_intersect_rejects_invalid_boxes(void **state)
{
    (void)state;
    struct boxes bx = {.n = 0};
    struct fc_chunk_index *valid = NULL, *idx = NULL;
    add1(&bx, INT64_MAX, 1, 2);
    assert_fc_ok(fc_chunk_index_new(&valid, 2, bx.b, 0));
    idx = valid; /* must come back NULL */
    assert_fc_fails(fc_chunk_index_new(&idx, 2, bx.b, bx.n), FC_EINVAL, "chunk 0");
    assert_null(idx);
    fc_chunk_index_free(valid);
    assert_fc_fails(fc_chunk_index_new(&idx, 17, bx.b, 0), FC_EINVAL, "dims is outside");
    bx.n = 0;
    add1(&bx, 0, 2, 2);
    assert_fc_ok(fc_chunk_index_new(&idx, 2, bx.b, bx.n));
    const int64_t off[2] = {-1, 0}, size[2] = {1, 1};
    struct fc_overlap *ov = NULL;
    size_t n = 0;
    assert_fc_fails(fc_chunk_intersect(idx, off, size, &ov, &n), FC_EINVAL, "target box");
    fc_chunk_index_free(idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_tiles_every_tensor_on_1d_meshes),
        cmocka_unit_test(test_plan_tiles_every_tensor_on_hsdp_meshes),
        cmocka_unit_test(test_plan_tiles_every_tensor_on_tp_meshes),
        cmocka_unit_test(test_plan_stores_tp_replicated_chunks_once),
        cmocka_unit_test(test_plan_records_identical_empty_boxes_once_at_offset_len),
        cmocka_unit_test(test_plan_relayout_orders_by_element_size_after_the_head),
        cmocka_unit_test(test_plan_align_items_starts_large_tensor_items_on_the_boundary),
        cmocka_unit_test(test_plan_store_at_holders_gives_every_rank_its_boxes),
        cmocka_unit_test(test_plan_gives_a_scalar_one_chunk_with_no_dims),
        cmocka_unit_test(test_plan_alias_shares_the_items_of_its_root),
        cmocka_unit_test(test_plan_rejects_bad_aliases),
        cmocka_unit_test(test_plan_rejects_duplicate_keys_across_tensors_and_values),
        cmocka_unit_test(test_plan_rejects_invalid_tensors_and_meshes),
        cmocka_unit_test(test_plan_offsets_and_lengths_add_up_to_file_sizes),
        cmocka_unit_test(test_plan_writes_bytes_before_tensors_in_each_file),
        cmocka_unit_test(test_plan_is_deterministic),
        cmocka_unit_test(test_plan_hsdp_stores_each_shard_box_once_on_one_of_its_replicas),
        cmocka_unit_test(test_plan_spreads_bytes_values_and_replicated_tensors),
        cmocka_unit_test(test_plan_creates_a_file_for_every_rank_even_when_idle),
        cmocka_unit_test(test_plan_scales_to_wide_meshes),
        cmocka_unit_test(test_plan_propagates_blob_size_errors),
        cmocka_unit_test(test_plan_survives_every_allocation_failure),
        cmocka_unit_test(test_plan_describe_renders_the_dry_run_table),
        cmocka_unit_test(test_plan_describe_lists_hsdp_holders_and_empty_boxes),
        cmocka_unit_test(test_plan_describe_fails_when_the_buffer_cap_is_exceeded),
        cmocka_unit_test(test_tiling_accepts_rows_in_any_order_with_empty_shards),
        cmocka_unit_test(test_tiling_accepts_grids_in_2d_and_3d_and_dim1_sharding),
        cmocka_unit_test(test_tiling_refuses_an_overlap_that_cancels_a_gap),
        cmocka_unit_test(test_tiling_refuses_boxes_outside_the_shape),
        cmocka_unit_test(test_tiling_is_exact_for_offsets_near_2_63),
        cmocka_unit_test(test_tiling_takes_identical_boxes_as_overlaps_until_deduplicated),
        cmocka_unit_test(test_tiling_handles_scalars),
        cmocka_unit_test(test_tiling_accepts_a_pinwheel_and_finds_its_hole),
        cmocka_unit_test(test_tiling_matches_brute_force_on_random_lists),
        cmocka_unit_test(test_tiling_is_fast_on_rows_columns_and_grids),
        cmocka_unit_test(test_tiling_refuses_identical_boxes_at_once),
        cmocka_unit_test(test_tiling_refuses_what_it_cannot_prove_within_its_work_bound),
        cmocka_unit_test(test_intersect_finds_the_source_pieces_of_a_target_box),
        cmocka_unit_test(test_intersect_matches_brute_force),
        cmocka_unit_test(test_intersect_rejects_invalid_boxes),
    };
    return cmocka_run_group_tests_name("plan", tests, NULL, NULL);
}
