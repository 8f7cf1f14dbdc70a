/*
 * test_tcp.c - torch_checkpointing metadata (lib/format/fc_tcp.c): shard boxes
 * of DTensor placements, and metadata.pkl files the package wrote.
 *
 * The expected boxes are torch 2.15's
 * torch.distributed.tensor._utils._compute_local_shape_and_global_offset for
 * the same global shape, mesh and placements (rank r at coordinate
 * (r / 2, r % 2) of a 2 x 2 mesh).
 */
#include "fc_test.h"

#include "fc_alloc.h"
#include "fc_tcp.h"

struct box_case {
    int64_t shape[2];
    struct fc_tcp_placement place[2];
    int64_t off[4][2], size[4][2];
};

static const struct box_case box_cases[] = {
    /* ColwiseParallel weight under fully_shard: (StridedShard(0, sf=2), Shard(0)), uneven */
    {{7, 10},
     {{FC_TCP_STRIDED_SHARD, 0, 2}, {FC_TCP_SHARD, 0, 0}},
     {{0, 0}, {4, 0}, {2, 0}, {6, 0}},
     {{2, 10}, {2, 10}, {2, 10}, {1, 10}}},
    /* RowwiseParallel weight under fully_shard: (Shard(0), Shard(1)) */
    {{10, 6},
     {{FC_TCP_SHARD, 0, 0}, {FC_TCP_SHARD, 1, 0}},
     {{0, 0}, {0, 3}, {5, 0}, {5, 3}},
     {{5, 3}, {5, 3}, {5, 3}, {5, 3}}},
    /* HSDP: (Replicate(), Shard(0)), uneven */
    {{5, 3},
     {{FC_TCP_REPLICATE, 0, 0}, {FC_TCP_SHARD, 0, 0}},
     {{0, 0}, {3, 0}, {0, 0}, {3, 0}},
     {{3, 3}, {2, 3}, {3, 3}, {2, 3}}},
};

static void test_tcp_boxes_follow_dtensor(void **state)
{
    (void)state;
    int64_t ranks[4] = {0, 1, 2, 3};
    struct fc_tcp_mesh mesh = {NULL, 2, {2, 2}, ranks, 4, ranks, 4, NULL}; /* pos: identity */
    for (size_t c = 0; c < sizeof(box_cases) / sizeof(box_cases[0]); c++) {
        const struct box_case *bc = &box_cases[c];
        struct fc_tcp_group g;
        memset(&g, 0, sizeof(g));
        g.dtype = FC_DTYPE_FLOAT32;
        g.ndim = 2;
        memcpy(g.shape, bc->shape, sizeof(bc->shape));
        g.mesh = &mesh;
        memcpy(g.place, bc->place, sizeof(bc->place));
        for (int r = 0; r < 4; r++) {
            int64_t off[2], size[2];
            assert_fc_ok(fc_tcp_local_box(&g, r, off, size, "test", "t"));
            assert_int_equal(off[0], bc->off[r][0]);
            assert_int_equal(off[1], bc->off[r][1]);
            assert_int_equal(size[0], bc->size[r][0]);
            assert_int_equal(size[1], bc->size[r][1]);
        }
    }
}

/* StridedShard alone (no inner Shard) leaves a rank two pieces: not one box. */
static void test_tcp_refuses_pieces(void **state)
{
    (void)state;
    int64_t ranks[2] = {0, 1};
    struct fc_tcp_mesh mesh = {NULL, 1, {2}, ranks, 2, ranks, 2, NULL}; /* pos: identity */
    struct fc_tcp_group g;
    memset(&g, 0, sizeof(g));
    g.dtype = FC_DTYPE_FLOAT32;
    g.ndim = 1;
    g.shape[0] = 8;
    g.mesh = &mesh;
    g.place[0] = (struct fc_tcp_placement){FC_TCP_STRIDED_SHARD, 0, 2};
    int64_t off[1], size[1];
    assert_int_equal(fc_tcp_local_box(&g, 0, off, size, "test", "t"), FC_EFORMAT);
    assert_non_null(strstr(fc_error_last(), "not contiguous"));
    assert_int_equal(fc_tcp_local_box(&g, 5, off, size, "test", "t"), FC_ECORRUPT);
}

/* metadata.pkl of the package's own dp2 x tp2 save (tests/interop/test_tcp_read.py). */
static void test_tcp_reads_package_metadata(void **state)
{
    (void)state;
    struct fc_file f = FC_FILE_INIT;
    unsigned char *data = NULL;
    struct fc_tcp_meta *m = NULL;
    assert_fc_ok(fc_file_open_read(&f, FC_SOURCE_DIR "/tests/fuzz/corpus/tcp_meta/tp_st.pkl"));
    assert_fc_ok(fc_file_read_alloc(&f, 0, (size_t)f.size, 1 << 20, &data));
    assert_fc_ok(fc_tcp_meta_parse(&m, data, (size_t)f.size, "tp_st.pkl"));
    assert_int_equal(m->world_size, 4);
    assert_int_equal(m->nitems, 1);
    assert_string_equal(m->items[0].name, "model");
    assert_string_equal(m->items[0].files[3].name, "model_3.safetensors");
    assert_int_equal(m->items[0].files[3].safetensors, 1);
    int strided = 0;
    for (size_t p = 0; p < m->items[0].npaths; p++) {
        const struct fc_tcp_path *path = &m->items[0].paths[p];
        assert_true(strncmp(path->key, "model.", 6) == 0);
        for (size_t g = 0; g < path->ngroups; g++)
            strided += path->groups[g].place[0].kind == FC_TCP_STRIDED_SHARD;
    }
    assert_int_equal(strided, 1); /* out.weight */
    fc_tcp_meta_free(m);
    fc_free(data);
    fc_file_close(&f);
}

/*
 * fsdpconv's own metadata.pkl (full-to-dcp --format torch-checkpointing --mesh
 * replicate=2,shard=2 of tiny_vitlm.pt) writes each tensor's mesh dict apart:
 * its 43 tensors still share the 2 meshes they name (each holds a rank index
 * of world_size entries, so one per tensor would cost tensors x world_size).
 */
static void test_tcp_equal_meshes_are_one(void **state)
{
    (void)state;
    struct fc_file f = FC_FILE_INIT;
    unsigned char *data = NULL;
    struct fc_tcp_meta *m = NULL;
    assert_fc_ok(
        fc_file_open_read(&f, FC_SOURCE_DIR "/tests/fuzz/corpus/tcp_meta/fsdpconv_hsdp.pkl"));
    assert_fc_ok(fc_file_read_alloc(&f, 0, (size_t)f.size, 1 << 20, &data));
    assert_fc_ok(fc_tcp_meta_parse(&m, data, (size_t)f.size, "fsdpconv_hsdp.pkl"));
    assert_int_equal(m->items[0].npaths, 43);
    assert_int_equal(m->nmeshes, 2);
    fc_tcp_meta_free(m);
    fc_free(data);
    fc_file_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_boxes_follow_dtensor),
        cmocka_unit_test(test_tcp_refuses_pieces),
        cmocka_unit_test(test_tcp_reads_package_metadata),
        cmocka_unit_test(test_tcp_equal_meshes_are_one),
    };
    return cmocka_run_group_tests_name("tcp", tests, NULL, NULL);
}
