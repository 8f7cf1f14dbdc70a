/*
 * test_share.c - what identifies a job's inputs for the staging name all
 * shares derive alone (share.h): a file's name, size and mtime (not its
 * path, which differs between nodes), a directory's regular files in name
 * order (not readdir's), and a hash that tells such texts apart.
 */
#include "fc_test.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "share.h"

static void put(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The identity text of path, NUL-terminated, into a buffer the caller releases. */
static void identity(const char *path, struct fc_buf *b)
{
    fc_buf_init(b, 1 << 20);
    assert_fc_ok(fc_share_add_path(b, path));
    assert_fc_ok(fc_buf_putc(b, '\0'));
}

static void test_share_file_identity_is_name_size_mtime_not_path(void **state)
{
    char a[64], b[64], pa[512], pb[512];
    struct fc_buf ia, ib;
    (void)state;
    /* fc_test_tmpdir() returns its one static buffer: copy each name */
    snprintf(a, sizeof(a), "%s", fc_test_tmpdir());
    snprintf(b, sizeof(b), "%s", fc_test_tmpdir());
    assert_string_not_equal(a, b);
    put(a, "model.safetensors", "12345");
    put(b, "model.safetensors", "12345");
    snprintf(pa, sizeof(pa), "%s/model.safetensors", a);
    snprintf(pb, sizeof(pb), "%s/model.safetensors", b);
    /* the same file seen under two mount points, same mtime: the same job */
    const struct timespec t[2] = {{1700000000, 5}, {1700000000, 5}};
    assert_int_equal(utimensat(AT_FDCWD, pa, t, 0), 0);
    assert_int_equal(utimensat(AT_FDCWD, pb, t, 0), 0);
    identity(pa, &ia);
    identity(pb, &ib);
    assert_string_equal((const char *)ia.data, "model.safetensors 5 1700000000.000000005\n");
    assert_string_equal((const char *)ia.data, (const char *)ib.data);
    /* rewritten in place (another mtime): another job */
    const struct timespec t2[2] = {{1700000001, 0}, {1700000001, 0}};
    assert_int_equal(utimensat(AT_FDCWD, pb, t2, 0), 0);
    fc_buf_release(&ib);
    identity(pb, &ib);
    assert_string_not_equal((const char *)ia.data, (const char *)ib.data);
    uint64_t ha = 0, hb = 0;
    assert_int_equal(fc_share_hash(ia.data, ia.len, &ha), FC_OK);
    assert_int_equal(fc_share_hash(ib.data, ib.len, &hb), FC_OK);
    assert_true(ha != hb);
    fc_buf_release(&ia);
    fc_buf_release(&ib);
    fc_test_rmdir(a);
    fc_test_rmdir(b);
}

static void test_share_directory_identity_is_its_files_in_name_order(void **state)
{
    char *d = fc_test_tmpdir();
    char sub[512];
    struct fc_buf id;
    (void)state;
    put(d, "z.safetensors", "zz");
    put(d, "a.json", "{}");
    snprintf(sub, sizeof(sub), "%s/nested", d);
    assert_int_equal(mkdir(sub, 0755), 0);
    identity(d, &id);
    const char *text = (const char *)id.data;
    const char *a = strstr(text, "a.json 2 "), *z = strstr(text, "z.safetensors 2 ");
    assert_non_null(a);
    assert_non_null(z);
    assert_true(a < z);                       /* sorted, whatever readdir says */
    assert_null(strstr(text, "nested"));      /* only regular files */
    assert_int_equal(strchr(text, '/'), NULL); /* names, never the directory's path */
    fc_buf_release(&id);
    rmdir(sub);
    fc_test_rmdir(d);
}

static void test_share_missing_input_is_named(void **state)
{
    struct fc_buf id;
    (void)state;
    fc_buf_init(&id, 1024);
    assert_fc_fails(fc_share_add_path(&id, "/nonexistent/model.pt"), FC_EIO,
                    "/nonexistent/model.pt: No such file or directory");
    fc_buf_release(&id);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_file_identity_is_name_size_mtime_not_path),
        cmocka_unit_test(test_share_directory_identity_is_its_files_in_name_order),
        cmocka_unit_test(test_share_missing_input_is_named),
    };
    return cmocka_run_group_tests_name("share", tests, NULL, NULL);
}
