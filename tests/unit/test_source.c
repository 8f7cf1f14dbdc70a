/*
 * test_source.c - the front of lib/source/: which backend the probe loop picks
 * for each kind of input, the capability flags callers ask instead of format
 * names, and fc_source_is_dcp_dir(), the one place a DCP directory is known;
 * chunks read in parts have their CRC-32 checked without a second read.
 * Linked with -Wl,--wrap=fc_file_pread (Makefile) to count the bytes read.
 */
#include "fc_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fc_io.h"
#include "fc_source.h"

int __real_fc_file_pread(const struct fc_file *f, void *dst, size_t n, uint64_t off);
int __wrap_fc_file_pread(const struct fc_file *f, void *dst, size_t n, uint64_t off);

static uint64_t pread_bytes; /* bytes read through fc_file_pread */

int __wrap_fc_file_pread(const struct fc_file *f, void *dst, size_t n, uint64_t off)
{
    pread_bytes += n;
    return __real_fc_file_pread(f, dst, n, off);
}

/* Open rel (under fixtures/) and check the backend's name and capabilities. */
static void expect_backend(const char *rel, const char *format, unsigned caps)
{
    struct fc_source *src = NULL;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture(rel), 0));
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
    assert_fc_fails(fc_source_open(&src, dir, 0), FC_ECORRUPT, "incomplete checkpoint");
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
    assert_fc_fails(fc_source_open(&src, fc_test_fixture("full"), 0), FC_EFORMAT,
                    "torch.save files; name one");
    char *dir = fc_test_tmpdir();
    assert_non_null(dir);
    assert_fc_fails(fc_source_open(&src, dir, 0), FC_EFORMAT, "no checkpoint found");
    put_file(dir, "empty.bin.x", 0);
    put_file(dir, "junk.x", 64);
    char path[512];
    snprintf(path, sizeof(path), "%s/empty.bin.x", dir);
    assert_fc_fails(fc_source_open(&src, path, 0), FC_ECORRUPT, "empty file");
    snprintf(path, sizeof(path), "%s/junk.x", dir);
    assert_fc_fails(fc_source_open(&src, path, 0), FC_EFORMAT, "not a checkpoint fsdpconv knows");
    assert_null(src);
    fc_test_rmdir(dir);
}

/* Copy fixtures/<rel>/<name> into dir. */
static void copy_fixture(const char *rel, const char *name, const char *dir)
{
    char src[4608], dst[512];
    snprintf(src, sizeof(src), "%s/%s", fc_test_fixture(rel), name);
    snprintf(dst, sizeof(dst), "%s/%s", dir, name);
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

/* Flip one bit of the first storage record's data in path (its zip local header skipped). */
static void flip_first_record_bit(const char *path)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    static unsigned char b[1 << 20];
    const size_t n = fread(b, 1, sizeof(b), f);
    size_t data = 0, h = 0;
    for (size_t i = 0; i + 7 <= n && data == 0; i++)
        data = memcmp(b + i, "/data/0", 7) == 0 ? i : 0;
    for (size_t i = 0; i < data; i++)
        h = memcmp(b + i, "PK\x03\x04", 4) == 0 ? i : h;
    assert_true(data > 0 && h > 0);
    const size_t at = h + 30 + (b[h + 26] | b[h + 27] << 8) + (b[h + 28] | b[h + 29] << 8);
    assert_true(at < n);
    b[at] ^= 0x10;
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Read every tensor of a DCP source whole: FC_OK, or the first error. */
static int read_every_tensor(const char *dir, unsigned flags)
{
    struct fc_source *src = NULL;
    int rc = fc_source_open(&src, dir, flags);
    for (size_t i = 0; rc == FC_OK && i < src->nentries; i++) {
        const struct fc_entry *e = &src->entries[i];
        if (e->kind != FC_ENTRY_TENSOR)
            continue;
        int64_t off[FC_MAX_DIMS] = {0}, n = 1;
        for (int d = 0; d < e->t.ndim; d++)
            n *= e->t.shape[d];
        void *dst = malloc((size_t)n * fc_dtype_size(e->t.dtype) + 1);
        assert_non_null(dst);
        rc = fc_source_read_box(src, e, off, e->t.shape, dst);
        free(dst);
    }
    fc_source_free(src);
    return rc;
}

/* --no-verify is an option of one open, not of the process: sources opened before and after
 * one opened with FC_SOURCE_NO_VERIFY still check every CRC-32. */
static void test_no_verify_is_per_source(void **state)
{
    (void)state;
    char *dir = fc_test_tmpdir();
    assert_non_null(dir);
    copy_fixture("dcp/model_ws2", ".metadata", dir);
    copy_fixture("dcp/model_ws2", "__0_0.distcp", dir);
    copy_fixture("dcp/model_ws2", "__1_0.distcp", dir);
    assert_fc_ok(read_every_tensor(dir, 0));
    char path[512];
    snprintf(path, sizeof(path), "%s/__0_0.distcp", dir);
    flip_first_record_bit(path);
    assert_int_equal(read_every_tensor(dir, 0), FC_ECORRUPT);
    assert_fc_ok(read_every_tensor(dir, FC_SOURCE_NO_VERIFY));
    assert_int_equal(read_every_tensor(dir, 0), FC_ECORRUPT);
    fc_test_rmdir(dir);
}

/* Read rows [r0, r1) of tensor key of src into dst (row-major, whole rows). */
static int read_rows(const struct fc_source *src, const char *key, int64_t r0, int64_t r1,
                     unsigned char *dst)
{
    const long i = fc_source_find(src, key);
    assert_true(i >= 0);
    const struct fc_entry *e = &src->entries[i];
    int64_t off[FC_MAX_DIMS] = {0}, size[FC_MAX_DIMS];
    memcpy(size, e->t.shape, sizeof(size));
    off[0] = r0;
    size[0] = r1 - r0;
    const size_t row = (size_t)e->t.shape[1] * fc_dtype_size(e->t.dtype);
    return fc_source_read_box(src, e, off, size, dst + (size_t)r0 * row);
}

/* Flip a bit of the first copy in path of the n bytes at want. */
static void flip_bytes_of(const char *path, const unsigned char *want, size_t n)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    static unsigned char b[1 << 20];
    const size_t len = fread(b, 1, sizeof(b), f);
    size_t at = len;
    for (size_t i = 0; i + n <= len && at == len; i++)
        at = memcmp(b + i, want, n) == 0 ? i : len;
    assert_true(at < len);
    b[at] ^= 0x10;
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    assert_int_equal(fwrite(b, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/*
 * A chunk read in row slabs is read once: its CRC-32 is folded from the slabs in whatever
 * order they come (issue 25), not computed over the record read a second time.  A
 * mismatch is still found: by the read that completes the chunk, or by
 * fc_source_verify_rest() when reads left part of it unread or read it twice.
 * model.emb.weight of fixtures/dcp/model_ws2 is [5, 3] float32 in chunks of rows
 * [0, 3) and [3, 5), inside torch.save records.
 */
static void test_chunks_read_in_parts_are_read_once(void **state)
{
    (void)state;
    char *dir = fc_test_tmpdir();
    assert_non_null(dir);
    copy_fixture("dcp/model_ws2", ".metadata", dir);
    copy_fixture("dcp/model_ws2", "__0_0.distcp", dir);
    copy_fixture("dcp/model_ws2", "__1_0.distcp", dir);
    const char *key = "model.emb.weight";
    unsigned char whole[60], got[60];
    struct fc_source *src = NULL;
    assert_fc_ok(fc_source_open(&src, dir, 0));
    assert_fc_ok(read_rows(src, key, 0, 5, whole));
    fc_source_free(src);
    /* Row by row, out of order: 60 bytes read for 60 bytes of tensor, and checked. */
    static const int64_t order[5] = {4, 1, 3, 0, 2};
    assert_fc_ok(fc_source_open(&src, dir, 0));
    pread_bytes = 0;
    for (int k = 0; k < 5; k++)
        assert_fc_ok(read_rows(src, key, order[k], order[k] + 1, got));
    assert_int_equal(pread_bytes, 60);
    assert_memory_equal(got, whole, 60);
    pread_bytes = 0;
    assert_fc_ok(fc_source_verify_rest(src));
    assert_int_equal(pread_bytes, 0); /* nothing left to check */
    fc_source_free(src);

    /* Row 2 (the first chunk's last) corrupted. */
    char path[512];
    snprintf(path, sizeof(path), "%s/__0_0.distcp", dir);
    flip_bytes_of(path, whole + 24, 12);
    /* The read that completes the chunk finds it. */
    assert_fc_ok(fc_source_open(&src, dir, 0));
    assert_fc_ok(read_rows(src, key, 0, 1, got));
    assert_fc_ok(read_rows(src, key, 1, 2, got));
    assert_int_equal(read_rows(src, key, 2, 3, got), FC_ECORRUPT);
    fc_source_free(src);
    /* Rows 0 and 1 alone: the check of the rest reads row 2 (12 bytes) and finds it. */
    assert_fc_ok(fc_source_open(&src, dir, 0));
    assert_fc_ok(read_rows(src, key, 0, 2, got));
    pread_bytes = 0;
    assert_int_equal(fc_source_verify_rest(src), FC_ECORRUPT);
    assert_int_equal(pread_bytes, 12);
    fc_source_free(src);
    /* Overlapping reads [0, 2) and [1, 3): the second is not folded, the rest check
     * reads the row it leaves uncovered. */
    assert_fc_ok(fc_source_open(&src, dir, 0));
    assert_fc_ok(read_rows(src, key, 0, 2, got));
    assert_fc_ok(read_rows(src, key, 1, 3, got));
    assert_int_equal(fc_source_verify_rest(src), FC_ECORRUPT);
    fc_source_free(src);
    /* --no-verify: no check, nothing pending. */
    assert_fc_ok(fc_source_open(&src, dir, FC_SOURCE_NO_VERIFY));
    assert_fc_ok(read_rows(src, key, 0, 2, got));
    assert_fc_ok(fc_source_verify_rest(src));
    fc_source_free(src);
    fc_test_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_picks_backend),
        cmocka_unit_test(test_is_dcp_dir),
        cmocka_unit_test(test_unknown_inputs),
        cmocka_unit_test(test_no_verify_is_per_source),
        cmocka_unit_test(test_chunks_read_in_parts_are_read_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
