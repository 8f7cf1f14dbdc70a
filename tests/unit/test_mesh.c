/*
 * test_mesh.c - torch.chunk / DTensor box arithmetic and HSDP rank mapping.
 *
 * The chunk table was checked against torch 2.15's
 * torch.distributed.tensor._utils._compute_local_shape_and_global_offset
 * (Shard(0) on a 1-D mesh of n ranks and (Replicate(), Shard(0)) on 2 x 3).
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

static void test_mesh_hsdp_ranks_are_row_major_over_replicate_then_shard(void **state)
{
    (void)state;
    const struct fc_mesh m = {2, 3};
    assert_fc_ok(fc_mesh_validate(&m));
    assert_int_equal(fc_mesh_world_size(&m), 6);
    int rank = 0;
    for (int r = 0; r < 2; r++) {
        for (int s = 0; s < 3; s++, rank++) {
            int rr = -1, ss = -1;
            assert_int_equal(fc_mesh_rank(&m, r, s), rank);
            fc_mesh_coords(&m, rank, &rr, &ss);
            assert_int_equal(rr, r);
            assert_int_equal(ss, s);
        }
    }
    /* (Replicate(), Shard(0)) on 2 x 3 with 5 rows: torch gives rows 0-1, 2-3, 4 twice. */
    const int64_t shape[2] = {5, 7};
    const int64_t want_off[6] = {0, 2, 4, 0, 2, 4}, want_size[6] = {2, 2, 1, 2, 2, 1};
    for (int k = 0; k < 6; k++) {
        int64_t off[2], size[2];
        assert_fc_ok(fc_mesh_box(&m, FC_PLACE_SHARD0, 2, shape, k, off, size));
        assert_int_equal(off[0], want_off[k]);
        assert_int_equal(size[0], want_size[k]);
        assert_int_equal(off[1], 0);
        assert_int_equal(size[1], 7);
    }
}

static void test_mesh_validate_rejects_bad_sizes(void **state)
{
    (void)state;
    const struct fc_mesh zero_shard = {1, 0}, neg_rep = {-1, 4}, huge = {1 << 11, 1 << 11};
    const struct fc_mesh ok = {1, 1}, max = {1, FC_MESH_MAX_WORLD};
    assert_fc_fails(fc_mesh_validate(&zero_shard), FC_EINVAL, "shard size 0");
    assert_fc_fails(fc_mesh_validate(&neg_rep), FC_EINVAL, "replicate size -1");
    assert_fc_fails(fc_mesh_validate(&huge), FC_EINVAL, "exceeds the limit");
    assert_fc_ok(fc_mesh_validate(&ok));
    assert_fc_ok(fc_mesh_validate(&max));
}

static void test_mesh_box_replicates_whole_tensors_and_scalars(void **state)
{
    (void)state;
    const struct fc_mesh m = {1, 4};
    const int64_t shape[3] = {3, 0, 2};
    int64_t off[3], size[3];
    for (int r = 0; r < 4; r++) {
        assert_fc_ok(fc_mesh_box(&m, FC_PLACE_REPLICATE, 3, shape, r, off, size));
        for (int d = 0; d < 3; d++) {
            assert_int_equal(off[d], 0);
            assert_int_equal(size[d], shape[d]);
        }
        assert_fc_ok(fc_mesh_box(&m, FC_PLACE_REPLICATE, 0, NULL, r, off, size));
    }
}

static void test_mesh_box_rejects_shard0_of_a_scalar_and_bad_shapes(void **state)
{
    (void)state;
    const struct fc_mesh m = {1, 2};
    const int64_t neg[1] = {-3};
    int64_t off[1], size[1];
    assert_fc_fails(fc_mesh_box(&m, FC_PLACE_SHARD0, 0, NULL, 0, off, size), FC_EINVAL,
                    "at least 1 dim");
    assert_fc_fails(fc_mesh_box(&m, FC_PLACE_SHARD0, 1, neg, 0, off, size), FC_EINVAL,
                    "negative size");
    assert_fc_fails(fc_mesh_box(&m, FC_PLACE_SHARD0, FC_MAX_DIMS + 1, neg, 0, off, size), FC_EINVAL,
                    "dims is outside");
    assert_fc_fails(fc_mesh_box(&m, (enum fc_placement)7, 1, (const int64_t[]){4}, 0, off, size),
                    FC_EINVAL, "unknown placement");
}

static void test_mesh_placement_names_follow_dtensor(void **state)
{
    (void)state;
    const struct fc_mesh flat = {1, 8}, hsdp = {2, 4};
    assert_string_equal(fc_placement_name(&flat, FC_PLACE_SHARD0), "Shard(0)");
    assert_string_equal(fc_placement_name(&flat, FC_PLACE_REPLICATE), "Replicate()");
    assert_string_equal(fc_placement_name(&hsdp, FC_PLACE_SHARD0), "(Replicate(), Shard(0))");
    assert_string_equal(fc_placement_name(&hsdp, FC_PLACE_REPLICATE), "(Replicate(), Replicate())");
    assert_string_equal(fc_placement_name(&flat, (enum fc_placement)9), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_chunk_matches_the_torch_table),
        cmocka_unit_test(test_mesh_chunk_pieces_tile_every_small_dimension),
        cmocka_unit_test(test_mesh_chunk_does_not_overflow_near_int64_max),
        cmocka_unit_test(test_mesh_hsdp_ranks_are_row_major_over_replicate_then_shard),
        cmocka_unit_test(test_mesh_validate_rejects_bad_sizes),
        cmocka_unit_test(test_mesh_box_replicates_whole_tensors_and_scalars),
        cmocka_unit_test(test_mesh_box_rejects_shard0_of_a_scalar_and_bad_shapes),
        cmocka_unit_test(test_mesh_placement_names_follow_dtensor),
    };
    return cmocka_run_group_tests_name("mesh", tests, NULL, NULL);
}
