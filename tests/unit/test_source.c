/*
 * test_source.c - the front of lib/source/: which backend the probe loop picks
 * for each kind of input, the capability flags callers ask instead of format
 * names, and fc_source_is_dcp_dir(), the one place a DCP directory is known.
 */
#include "fc_test.h"

#include <unistd.h>

#include "fc_source.h"

/* Open rel (under fixtures/) and check the backend's name and capabilities. */
static void expect_backend(const char *rel, const char *format, unsigned caps)
{
    struct fc_source *src = NULL;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture(rel)));
    assert_string_equal(src->format, format);
    assert_int_equal(fc_source_caps(src), caps);
    assert_true(src->nentries > 0);
    fc_source_free(src);
}

static void test_probe_picks_backend(void **state)
{
    (void)state;
    expect_backend("full/values.pt", "torch.save", FC_SOURCE_VALUES | FC_SOURCE_PICKLED);
    expect_backend("safetensors/tiny_vitlm.safetensors", "safetensors", 0);
    expect_backend("safetensors/sharded", "safetensors-index", 0);
    expect_backend("safetensors/sharded/model.safetensors.index.json", "safetensors-index", 0);
    const unsigned dcp =
        FC_SOURCE_CHUNKS | FC_SOURCE_COMPRESSED | FC_SOURCE_CRCS | FC_SOURCE_VALUES;
    expect_backend("dcp/model_ws2", "dcp", dcp);
    /* No .metadata: the .distcp files make it a DCP (rank-local metadata merged). */
    expect_backend("dcp/ranklocal_ws1", "dcp", dcp);
}

/* Write an n-byte file dir/name. */
static void put_file(const char *dir, const char *name, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        fputc('x', f);
    fclose(f);
}

static void test_is_dcp_dir(void **state)
{
    (void)state;
    assert_int_equal(fc_source_is_dcp_dir(fc_test_fixture("dcp/model_ws2")), 1);
    assert_int_equal(fc_source_is_dcp_dir(fc_test_fixture("dcp/ranklocal_ws1")), 1);
    assert_int_equal(fc_source_is_dcp_dir(fc_test_fixture("safetensors/sharded")), 0);
    assert_int_equal(fc_source_is_dcp_dir(fc_test_fixture("full/values.pt")), 0);
    assert_int_equal(fc_source_is_dcp_dir(fc_test_fixture("no/such/dir")), 0);
    /* A .distcp file wins over the safetensors beside it: opened as a DCP, as the probe says. */
    char *dir = fc_test_tmpdir();
    assert_non_null(dir);
    put_file(dir, "model.safetensors", 16);
    assert_int_equal(fc_source_is_dcp_dir(dir), 0);
    put_file(dir, "__0_0.distcp", 16);
    assert_int_equal(fc_source_is_dcp_dir(dir), 1);
    struct fc_source *src = NULL;
    assert_fc_fails(fc_source_open(&src, dir), FC_ECORRUPT, "incomplete checkpoint");
    assert_null(src);
    fc_test_rmdir(dir);
    /* Rank-local metadata alone is a DCP too (inspect reports what is missing). */
    dir = fc_test_tmpdir();
    assert_non_null(dir);
    put_file(dir, "x.metadata", 16);
    assert_int_equal(fc_source_is_dcp_dir(dir), 0);
    put_file(dir, "__0.metadata", 16);
    assert_int_equal(fc_source_is_dcp_dir(dir), 1);
    fc_test_rmdir(dir);
}

static void test_unknown_inputs(void **state)
{
    (void)state;
    struct fc_source *src = NULL;
    assert_fc_fails(fc_source_open(&src, fc_test_fixture("full")), FC_EFORMAT,
                    "torch.save files; name one");
    char *dir = fc_test_tmpdir();
    assert_non_null(dir);
    assert_fc_fails(fc_source_open(&src, dir), FC_EFORMAT, "no checkpoint found");
    put_file(dir, "empty.bin.x", 0);
    put_file(dir, "junk.x", 64);
    char path[512];
    snprintf(path, sizeof(path), "%s/empty.bin.x", dir);
    assert_fc_fails(fc_source_open(&src, path), FC_ECORRUPT, "empty file");
    snprintf(path, sizeof(path), "%s/junk.x", dir);
    assert_fc_fails(fc_source_open(&src, path), FC_EFORMAT, "not a checkpoint fsdpconv knows");
    assert_null(src);
    fc_test_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_picks_backend),
        cmocka_unit_test(test_is_dcp_dir),
        cmocka_unit_test(test_unknown_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
