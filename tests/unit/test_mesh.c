/*
 * test_mesh.c - torch.chunk / DTensor box arithmetic and HSDP rank mapping.
 *
 * The chunk table and the tp cases were checked against torch 2.15's
 * torch.distributed.tensor._utils._compute_local_shape_and_global_offset
 * (Shard(0) on a 1-D mesh of n ranks, (Replicate(), Shard(0)) on 2 x 3, and
 * the placements fully_shard gives tp-sharded parameters on dp x tp).
 */
#include "fc_test.h"

#include "mesh.h"

struct chunk_case {
    int64_t len, n;
    int64_t off[8], size[8];
};

/* (len, n) -> per-rank (offset, size) as DTensor computes them. */
static const struct chunk_case chunk_table[] = {
    {5, 4, {0, 2, 4, 5}, {2, 2, 1, 0}},
    {2, 4, {0, 1, 2, 2}, {1, 1, 0, 0}},
    {0, 4, {0, 0, 0, 0}, {0, 0, 0, 0}},
    {8, 4, {0, 2, 4, 6}, {2, 2, 2, 2}},
    {9, 4, {0, 3, 6, 9}, {3, 3, 3, 0}},
    {7, 7, {0, 1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1, 1}},
    {3, 7, {0, 1, 2, 3, 3, 3, 3}, {1, 1, 1, 0, 0, 0, 0}},
    {20, 7, {0, 3, 6, 9, 12, 15, 18}, {3, 3, 3, 3, 3, 3, 2}},
    {15, 7, {0, 3, 6, 9, 12, 15, 15}, {3, 3, 3, 3, 3, 0, 0}},
    {3, 1, {0}, {3}},
    {0, 1, {0}, {0}},
    {10, 3, {0, 4, 8}, {4, 4, 2}},
    {1, 8, {0, 1, 1, 1, 1, 1, 1, 1}, {1, 0, 0, 0, 0, 0, 0, 0}},
};

static void test_mesh_chunk_matches_the_torch_table(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(chunk_table) / sizeof(chunk_table[0]); c++) {
        const struct chunk_case *t = &chunk_table[c];
        for (int64_t i = 0; i < t->n; i++) {
            int64_t off = -1, size = -1;
            fc_mesh_chunk(t->len, t->n, i, &off, &size);
            if (off != t->off[i] || size != t->size[i])
                print_error("len %lld n %lld i %lld: got (%lld, %lld)\n", (long long)t->len,
                            (long long)t->n, (long long)i, (long long)off, (long long)size);
            assert_int_equal(off, t->off[i]);
            assert_int_equal(size, t->size[i]);
        }
    }
}

static void test_mesh_chunk_pieces_tile_every_small_dimension(void **state)
{
    (void)state;
    for (int64_t len = 0; len <= 40; len++) {
        for (int64_t n = 1; n <= 12; n++) {
            int64_t next = 0, prev_size = INT64_MAX, nonempty = 0;
            for (int64_t i = 0; i < n; i++) {
                int64_t off, size;
                fc_mesh_chunk(len, n, i, &off, &size);
                assert_true(size >= 0 && size <= prev_size);
                if (size > 0) {
                    assert_int_equal(off, next); /* contiguous, in order */
                    next += size;
                    nonempty++;
                } else {
                    assert_int_equal(off, len); /* empty pieces sit at len */
                }
                prev_size = size;
            }
            assert_int_equal(next, len);
            assert_int_equal(fc_mesh_nonempty_chunks(len, n), nonempty);
        }
    }
}

static void test_mesh_chunk_does_not_overflow_near_int64_max(void **state)
{
    (void)state;
    const int64_t big = INT64_MAX;
    int64_t off, size, total = 0;
    for (int64_t i = 0; i < 3; i++) {
        fc_mesh_chunk(big, 3, i, &off, &size);
        assert_true(off >= 0 && size >= 0);
        total += size;
    }
    assert_int_equal(total, big);
    fc_mesh_chunk(big, 2, 1, &off, &size);
    assert_int_equal(off, big / 2 + 1);
    assert_int_equal(size, big / 2);
    fc_mesh_chunk(big - 1, INT64_MAX, INT64_MAX - 1, &off, &size);
    assert_int_equal(off, big - 1);
    assert_int_equal(size, 0);
    assert_int_equal(fc_mesh_nonempty_chunks(big, 4), 4);
    assert_int_equal(fc_mesh_nonempty_chunks(0, 4), 0);
}

/* fc_mesh_init() then fc_mesh_placements(), asserting both succeed. */
static struct fc_mesh mesh_ok(int replicate, int shard, int tp)
{
    struct fc_mesh m;
    assert_fc_ok(fc_mesh_init(&m, replicate, shard, tp));
    assert_fc_ok(fc_mesh_validate(&m));
    return m;
}

static void place_ok(const struct fc_mesh *m, enum fc_placement p, int tp_dim, int ndim,
                     struct fc_dim_placement *pl)
{
    assert_fc_ok(fc_mesh_placements(m, p, tp_dim, ndim, pl));
}

static void test_mesh_ranks_are_row_major_over_replicate_shard_tp(void **state)
{
    (void)state;
    const struct fc_mesh m = mesh_ok(2, 3, 2);
    assert_int_equal(m.ndim, 3);
    assert_int_equal(fc_mesh_world_size(&m), 12);
    int rank = 0;
    for (int r = 0; r < 2; r++) {
        for (int s = 0; s < 3; s++) {
            for (int t = 0; t < 2; t++, rank++) {
                const int want[3] = {r, s, t};
                int got[3] = {-1, -1, -1};
                assert_int_equal(((r * 3) + s) * 2 + t, rank);
                assert_int_equal(fc_mesh_rank(&m, want), rank);
                fc_mesh_coords(&m, rank, got);
                assert_memory_equal(got, want, sizeof(want));
            }
        }
    }
    /* Size-1 dims other than dp_shard are left out, as torch leaves them out. */
    const struct fc_mesh flat = mesh_ok(1, 8, 1), hsdp = mesh_ok(2, 4, 1), tp = mesh_ok(1, 2, 4);
    assert_int_equal(flat.ndim, 1);
    assert_int_equal(hsdp.ndim, 2);
    assert_int_equal(tp.ndim, 2);
    assert_int_equal(fc_mesh_dim_size(&flat, FC_MESH_DIM_TP), 1);
    assert_int_equal(fc_mesh_dim_size(&tp, FC_MESH_DIM_TP), 4);
    assert_int_equal(fc_mesh_find(&tp, FC_MESH_DIM_REPLICATE), -1);
}

static void test_mesh_hsdp_boxes_repeat_over_replicas(void **state)
{
    (void)state;
    /* (Replicate(), Shard(0)) on 2 x 3 with 5 rows: torch gives rows 0-1, 2-3, 4 twice. */
    const struct fc_mesh m = mesh_ok(2, 3, 1);
    struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
    place_ok(&m, FC_PLACE_SHARD0, -1, 2, pl);
    const int64_t shape[2] = {5, 7};
    const int64_t want_off[6] = {0, 2, 4, 0, 2, 4}, want_size[6] = {2, 2, 1, 2, 2, 1};
    for (int k = 0; k < 6; k++) {
        int64_t off[2], size[2];
        assert_fc_ok(fc_mesh_box(&m, pl, 2, shape, k, off, size));
        assert_int_equal(off[0], want_off[k]);
        assert_int_equal(size[0], want_size[k]);
        assert_int_equal(off[1], 0);
        assert_int_equal(size[1], 7);
    }
}

/*
 * dp=2 x tp=2, torch 2.15 (compute_local_shape_and_global_offset on the
 * placements fully_shard gives a parallelize_module'd model), per rank
 * (dp, tp) in rank order: offsets then sizes.
 */
struct tp_case {
    int dp, tp, tp_dim;
    int64_t shape[2];
    int64_t off[6][2], size[6][2];
};

static const struct tp_case tp_cases[] = {
    /* colwise weight [8, 3]: _StridedShard(0, sf=2), Shard(0) -> rows 0-1, 4-5, 2-3, 6-7 */
    {2, 2, 0, {8, 3}, {{0, 0}, {4, 0}, {2, 0}, {6, 0}}, {{2, 3}, {2, 3}, {2, 3}, {2, 3}}},
    /* 7 rows: tp pieces 4 + 3, dp pieces 2 + 2 and 2 + 1 */
    {2, 2, 0, {7, 3}, {{0, 0}, {4, 0}, {2, 0}, {6, 0}}, {{2, 3}, {2, 3}, {2, 3}, {1, 3}}},
    /* rowwise weight [5, 6]: Shard(0), Shard(1) -> 2-D boxes, uneven rows */
    {2, 2, 1, {5, 6}, {{0, 0}, {0, 3}, {3, 0}, {3, 3}}, {{3, 3}, {3, 3}, {2, 3}, {2, 3}}},
    /* rowwise [1, 5] on dp=3: empty dp pieces keep the tp offset on dim 1 */
    {3, 2, 1, {1, 5}, {{0, 0}, {0, 3}, {1, 0}, {1, 3}, {1, 0}, {1, 3}},
     {{1, 3}, {1, 2}, {0, 3}, {0, 2}, {0, 3}, {0, 2}}},
    /* tp-replicated [3, 2] on dp=2: Shard(0), Replicate() */
    {2, 2, -1, {3, 2}, {{0, 0}, {0, 0}, {2, 0}, {2, 0}}, {{2, 2}, {2, 2}, {1, 2}, {1, 2}}},
    /* colwise [2, 4] on dp=3 x tp=2: 1 row per tp piece, dp pieces 1, 0, 0 */
    {3, 2, 0, {2, 4}, {{0, 0}, {1, 0}, {2, 0}, {2, 0}, {2, 0}, {2, 0}},
     {{1, 4}, {1, 4}, {0, 4}, {0, 4}, {0, 4}, {0, 4}}},
};

static void test_mesh_tp_boxes_match_torch(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(tp_cases) / sizeof(tp_cases[0]); c++) {
        const struct tp_case *k = &tp_cases[c];
        const struct fc_mesh m = mesh_ok(1, k->dp, k->tp);
        struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
        int bad = 0;
        place_ok(&m, FC_PLACE_SHARD0, k->tp_dim, 2, pl);
        assert_fc_ok(fc_mesh_check_layout(&m, pl, 2, k->shape, &bad));
        for (int r = 0; r < k->dp * k->tp; r++) {
            int64_t off[2], size[2];
            assert_fc_ok(fc_mesh_box(&m, pl, 2, k->shape, r, off, size));
            if (off[0] != k->off[r][0] || off[1] != k->off[r][1] || size[0] != k->size[r][0] ||
                size[1] != k->size[r][1])
                print_error("case %zu rank %d: got (%lld, %lld)/(%lld, %lld)\n", c, r,
                            (long long)off[0], (long long)off[1], (long long)size[0],
                            (long long)size[1]);
            assert_memory_equal(off, k->off[r], sizeof(off));
            assert_memory_equal(size, k->size[r], sizeof(size));
        }
    }
}

/*
 * The analytic condition of mesh.h for _StridedShard, checked against the
 * rank-by-rank comparison for every small case: it fails only when tp does
 * not divide L and dp > 2, and both 7 and 37 rows on dp=3 x tp=2 fail.
 */
static void test_mesh_strided_layouts_torch_cannot_round_trip(void **state)
{
    (void)state;
    int failures = 0;
    for (int dp = 1; dp <= 6; dp++) {
        for (int tp = 2; tp <= 4; tp++) {
            const struct fc_mesh m = mesh_ok(1, dp, tp);
            struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
            place_ok(&m, FC_PLACE_SHARD0, 0, 1, pl);
            for (int64_t len = 0; len <= 40; len++) {
                int rank = -2;
                const int rc = fc_mesh_check_layout(&m, pl, 1, &len, &rank);
                /* the condition of mesh.h, computed independently */
                int want_ok = 1;
                for (int c = 0; c < dp; c++) {
                    int64_t v[4], sum = 0;
                    for (int j = 0; j < tp; j++) {
                        int64_t po, pz, so;
                        fc_mesh_chunk(len, tp, j, &po, &pz);
                        fc_mesh_chunk(pz, dp, c, &so, &v[j]);
                        sum += v[j];
                    }
                    for (int j = 0; j < tp; j++) {
                        int64_t o, z;
                        fc_mesh_chunk(sum, tp, j, &o, &z);
                        want_ok &= z == v[j];
                    }
                }
                assert_int_equal(rc == FC_OK, want_ok);
                assert_true(rc == FC_OK ? rank == -1 : rank >= 0);
                if (len % tp == 0 || dp <= 2)
                    assert_int_equal(rc, FC_OK);
                failures += rc != FC_OK;
            }
        }
    }
    assert_true(failures > 0);
    const struct fc_mesh m = mesh_ok(1, 3, 2);
    struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
    place_ok(&m, FC_PLACE_SHARD0, 0, 1, pl);
    const int64_t seven = 7, vocab = 37;
    int rank;
    assert_fc_fails(fc_mesh_check_layout(&m, pl, 1, &seven, &rank), FC_EINVAL,
                    "torch records rows [6, 7) of dim 0 for rank 4, which holds rows [4, 4)");
    assert_fc_fails(fc_mesh_check_layout(&m, pl, 1, &vocab, &rank), FC_EINVAL, "cannot round-trip");
}

static void test_mesh_validate_rejects_bad_sizes(void **state)
{
    (void)state;
    struct fc_mesh m;
    assert_fc_fails(fc_mesh_init(&m, 1, 0, 1), FC_EINVAL, "shard size 0");
    assert_fc_fails(fc_mesh_init(&m, -1, 4, 1), FC_EINVAL, "replicate size -1");
    assert_fc_fails(fc_mesh_init(&m, 1, 4, 0), FC_EINVAL, "tp size 0");
    assert_fc_fails(fc_mesh_init(&m, 1 << 11, 1 << 11, 1), FC_EINVAL, "exceeds the limit");
    assert_fc_fails(fc_mesh_init(&m, 1 << 8, 1 << 8, 1 << 8), FC_EINVAL, "exceeds the limit");
    assert_fc_ok(fc_mesh_init(&m, 1, 1, 1));
    assert_fc_ok(fc_mesh_init(&m, 1, FC_MESH_MAX_WORLD, 1));
    m = mesh_ok(2, 2, 2);
    m.size[1] = 0;
    assert_fc_fails(fc_mesh_validate(&m), FC_EINVAL, "dim 1 has size 0");
    m = mesh_ok(2, 2, 2);
    m.name[2] = FC_MESH_DIM_SHARD;
    assert_fc_fails(fc_mesh_validate(&m), FC_EINVAL, "same name");
    m.ndim = 0;
    assert_fc_fails(fc_mesh_validate(&m), FC_EINVAL, "0 dims");
}

static void test_mesh_box_replicates_whole_tensors_and_scalars(void **state)
{
    (void)state;
    const struct fc_mesh m = mesh_ok(1, 4, 2);
    struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
    place_ok(&m, FC_PLACE_REPLICATE, 0, 3, pl); /* tp_dim ignored when replicated */
    const int64_t shape[3] = {3, 0, 2};
    int64_t off[3], size[3];
    for (int r = 0; r < 8; r++) {
        assert_fc_ok(fc_mesh_box(&m, pl, 3, shape, r, off, size));
        for (int d = 0; d < 3; d++) {
            assert_int_equal(off[d], 0);
            assert_int_equal(size[d], shape[d]);
        }
        assert_fc_ok(fc_mesh_box(&m, pl, 0, NULL, r, off, size));
    }
}

static void test_mesh_rejects_bad_placements_and_shapes(void **state)
{
    (void)state;
    const struct fc_mesh m = mesh_ok(1, 2, 2);
    struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
    const int64_t neg[1] = {-3};
    int64_t off[2], size[2];
    assert_fc_fails(fc_mesh_placements(&m, FC_PLACE_SHARD0, -1, 0, pl), FC_EINVAL,
                    "at least 1 dim");
    assert_fc_fails(fc_mesh_placements(&m, FC_PLACE_SHARD0, 2, 2, pl), FC_EINVAL,
                    "tp shards dim 2 of a 2-dim tensor");
    assert_fc_fails(fc_mesh_placements(&m, (enum fc_placement)7, -1, 1, pl), FC_EINVAL,
                    "unknown placement");
    place_ok(&m, FC_PLACE_SHARD0, -1, 1, pl);
    assert_fc_fails(fc_mesh_box(&m, pl, 1, neg, 0, off, size), FC_EINVAL, "negative size");
    assert_fc_fails(fc_mesh_box(&m, pl, FC_MAX_DIMS + 1, neg, 0, off, size), FC_EINVAL,
                    "dims is outside");
    pl[1] = (struct fc_dim_placement){FC_DIM_STRIDED, 0, 2};
    assert_fc_fails(fc_mesh_box(&m, pl, 2, (const int64_t[]){4, 4}, 0, off, size), FC_EINVAL,
                    "after another placement");
    pl[0] = (struct fc_dim_placement){FC_DIM_STRIDED, 0, 1};
    assert_fc_fails(fc_mesh_box(&m, pl, 2, (const int64_t[]){4, 4}, 0, off, size), FC_EINVAL,
                    "split 1 must be >= 2");
    pl[0] = (struct fc_dim_placement){(enum fc_dim_place_kind)9, 0, 1};
    assert_fc_fails(fc_mesh_box(&m, pl, 2, (const int64_t[]){4, 4}, 0, off, size), FC_EINVAL,
                    "unknown placement kind");
}

static void test_mesh_placement_names_follow_dtensor(void **state)
{
    (void)state;
    const struct fc_mesh flat = mesh_ok(1, 8, 1), hsdp = mesh_ok(2, 4, 1), tp3 = mesh_ok(2, 2, 2);
    struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
    char buf[128];
    place_ok(&flat, FC_PLACE_SHARD0, -1, 1, pl);
    assert_string_equal(fc_mesh_placement_name(&flat, pl, buf, sizeof(buf)), "Shard(0)");
    place_ok(&flat, FC_PLACE_REPLICATE, -1, 1, pl);
    assert_string_equal(fc_mesh_placement_name(&flat, pl, buf, sizeof(buf)), "Replicate()");
    place_ok(&hsdp, FC_PLACE_SHARD0, -1, 1, pl);
    assert_string_equal(fc_mesh_placement_name(&hsdp, pl, buf, sizeof(buf)),
                        "(Replicate(), Shard(0))");
    place_ok(&hsdp, FC_PLACE_REPLICATE, -1, 1, pl);
    assert_string_equal(fc_mesh_placement_name(&hsdp, pl, buf, sizeof(buf)),
                        "(Replicate(), Replicate())");
    place_ok(&tp3, FC_PLACE_SHARD0, 0, 2, pl);
    assert_string_equal(fc_mesh_placement_name(&tp3, pl, buf, sizeof(buf)),
                        "(Replicate(), _StridedShard(0, sf=2), Shard(0))");
    place_ok(&tp3, FC_PLACE_SHARD0, 1, 2, pl);
    assert_string_equal(fc_mesh_placement_name(&tp3, pl, buf, sizeof(buf)),
                        "(Replicate(), Shard(0), Shard(1))");
    assert_string_equal(fc_mesh_placement_name(&tp3, pl, buf, 8), "(Replic");
    assert_string_equal(fc_mesh_describe(&tp3, buf, sizeof(buf)), "replicate=2 shard=2 tp=2");
    assert_string_equal(fc_mesh_describe(&flat, buf, sizeof(buf)), "replicate=1 shard=8");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_chunk_matches_the_torch_table),
        cmocka_unit_test(test_mesh_chunk_pieces_tile_every_small_dimension),
        cmocka_unit_test(test_mesh_chunk_does_not_overflow_near_int64_max),
        cmocka_unit_test(test_mesh_ranks_are_row_major_over_replicate_shard_tp),
        cmocka_unit_test(test_mesh_hsdp_boxes_repeat_over_replicas),
        cmocka_unit_test(test_mesh_tp_boxes_match_torch),
        cmocka_unit_test(test_mesh_strided_layouts_torch_cannot_round_trip),
        cmocka_unit_test(test_mesh_validate_rejects_bad_sizes),
        cmocka_unit_test(test_mesh_box_replicates_whole_tensors_and_scalars),
        cmocka_unit_test(test_mesh_rejects_bad_placements_and_shapes),
        cmocka_unit_test(test_mesh_placement_names_follow_dtensor),
    };
    return cmocka_run_group_tests_name("mesh", tests, NULL, NULL);
}
