/*
 * test_io.c - output creation and staging (lib/util/fc_io.c): nothing planted at
 * an output's name is followed, staging names cannot be guessed, and a
 * --force commit settles (new output in place, old one gone) even when the
 * final directory fsync fails; and error messages stay one printable line.
 */
#include "fc_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fc_alloc.h"

static char *g_dir;
static char g_victim[4096];

static int setup(void **state)
{
    (void)state;
    g_dir = fc_test_tmpdir();
    if (g_dir == NULL || chdir(g_dir) != 0)
        return -1;
    snprintf(g_victim, sizeof(g_victim), "%s/victim", g_dir);
    FILE *f = fopen(g_victim, "w");
    if (f == NULL)
        return -1;
    fputs("precious\n", f);
    return fclose(f);
}

static int teardown(void **state)
{
    (void)state;
    if (chdir("/") != 0)
        return -1;
    fc_test_rmdir(g_dir);
    return 0;
}

static void assert_victim_intact(void)
{
    char buf[64] = {0};
    FILE *f = fopen(g_victim, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "precious\n");
}

static void write_text(int fd, const char *text)
{
    assert_fc_ok(fc_pwrite_full(fd, text, strlen(text), 0, "test"));
    assert_int_equal(close(fd), 0);
}

static void test_file_create_refuses_what_exists(void **state)
{
    (void)state;
    int fd = 7;
    /* A symlink to a file, one to nothing, and a plain file: none is opened. */
    assert_int_equal(symlink(g_victim, "link"), 0);
    assert_fc_fails(fc_file_create("link", &fd), FC_EIO, "link: cannot create: File exists");
    assert_int_equal(fd, -1);
    assert_int_equal(symlink("nowhere", "dangling"), 0);
    assert_fc_fails(fc_file_create("dangling", &fd), FC_EIO, "File exists");
    assert_int_equal(access("nowhere", F_OK), -1);
    assert_fc_fails(fc_file_create("victim", &fd), FC_EIO, "File exists");
    assert_victim_intact();
    assert_fc_ok(fc_file_create("new", &fd));
    write_text(fd, "x");
    struct stat st;
    assert_int_equal(lstat("new", &st), 0);
    assert_true(S_ISREG(st.st_mode));
}

/* .metadata and index.json go through "<path>.tmp": a link planted there stays, unfollowed. */
static void test_write_file_atomic_refuses_planted_tmp(void **state)
{
    (void)state;
    assert_int_equal(symlink(g_victim, "meta.tmp"), 0);
    assert_fc_fails(fc_write_file_atomic("meta", "new", 3), FC_EIO, "meta.tmp: cannot create");
    assert_victim_intact();
    struct stat st;
    assert_int_equal(lstat("meta.tmp", &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(access("meta", F_OK), -1);
}

/* "out.partial-<pid>-" then 16 hex digits and nothing else. */
static void assert_random_stage_name(const char *path, const char *target)
{
    char want[64];
    snprintf(want, sizeof(want), "%s.partial-%ld-", target, (long)getpid());
    assert_int_equal(strncmp(path, want, strlen(want)), 0);
    const char *r = path + strlen(want);
    assert_int_equal(strlen(r), 16);
    assert_int_equal(strspn(r, "0123456789abcdef"), 16);
}

static void test_stage_names_cannot_be_planted(void **state)
{
    (void)state;
    /* Links at every name the old "<target>.partial-<pid>-<time>" scheme could use now. */
    const long now = (long)time(NULL);
    char name[128];
    for (long t = now - 2; t <= now + 5; t++) {
        snprintf(name, sizeof(name), "out.partial-%ld-%ld", (long)getpid(), t);
        assert_int_equal(symlink(g_victim, name), 0);
    }
    struct fc_stage a, b;
    assert_fc_ok(fc_stage_begin(&a, "out", 1, 0, NULL));
    assert_fc_ok(fc_stage_begin(&b, "out", 1, 0, NULL));
    assert_random_stage_name(a.path, "out");
    assert_random_stage_name(b.path, "out");
    assert_string_not_equal(a.path, b.path);
    struct stat st;
    assert_int_equal(lstat(a.path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    fc_stage_release(&b);
    fc_stage_release(&a);

    /* A file output: the caller creates the staged name with fc_file_create(). */
    int fd;
    assert_fc_ok(fc_stage_begin(&a, "out.pt", 0, 0, NULL));
    assert_random_stage_name(a.path, "out.pt");
    assert_fc_ok(fc_file_create(a.path, &fd));
    write_text(fd, "new");
    assert_fc_ok(fc_stage_commit(&a));
    fc_stage_release(&a);
    assert_int_equal(lstat("out.pt", &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_victim_intact();
}

/* Entries of the current directory whose names start with prefix. */
static int count_prefixed(const char *prefix)
{
    int n = 0;
    DIR *d = opendir(".");
    assert_non_null(d);
    const struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static void replace_with_failing_dir_fsync(int two_renames)
{
    struct fc_stage st;
    int fd;
    assert_int_equal(mkdir("ckpt", 0755), 0);
    assert_fc_ok(fc_file_create("ckpt/old", &fd));
    write_text(fd, "old");
    if (two_renames)
        setenv("FSDPCONV_TEST_PAUSE_MID_REPLACE", "0", 1);
    assert_fc_ok(fc_stage_begin(&st, "ckpt", 1, 1, NULL));
    char *p = fc_path_join(st.path, "new");
    assert_fc_ok(fc_file_create(p, &fd));
    fc_free(p);
    write_text(fd, "new");
    setenv("FSDPCONV_TEST_FAIL_DIR_FSYNC", "1", 1);
    assert_fc_fails(fc_stage_commit(&st), FC_EIO,
                    "ckpt: the new output is in place and the old one removed, but syncing its "
                    "directory . failed (Input/output error)");
    unsetenv("FSDPCONV_TEST_FAIL_DIR_FSYNC");
    unsetenv("FSDPCONV_TEST_PAUSE_MID_REPLACE");
    fc_stage_release(&st);
    assert_int_equal(access("ckpt/new", F_OK), 0);
    assert_int_equal(access("ckpt/old", F_OK), -1);
    assert_int_equal(count_prefixed("ckpt"), 1); /* no ckpt.partial-* or ckpt.old-* left */
    assert_fc_ok(fc_remove_tree("ckpt"));
}

static void test_force_settles_when_dir_fsync_fails(void **state)
{
    (void)state;
    replace_with_failing_dir_fsync(0); /* RENAME_EXCHANGE */
    replace_with_failing_dir_fsync(1); /* old output renamed aside first */
}

/* Messages name files and keys from inputs: control and non-UTF-8 bytes become \\xNN. */
static void test_error_message_is_one_line(void **state)
{
    (void)state;
    fc_error_set(FC_EIO, "%s: shard '%s' is missing", "é/index.json",
                 "a\nb\xff\xed\xa0\x80"
                 "c");
    assert_string_equal(fc_error_last(),
                        "é/index.json: shard 'a\\x0ab\\xff\\xed\\xa0\\x80c' is missing");
    assert_int_equal(fc_utf8_invalid_at((const unsigned char *)"ok\xed\xa0\x80", 5, 1), 5);
    assert_int_equal(fc_utf8_invalid_at((const unsigned char *)"ok\xed\xa0\x80", 5, 0), 2);
    assert_int_equal(fc_utf8_invalid_at((const unsigned char *)"\xc3", 1, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_file_create_refuses_what_exists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_file_atomic_refuses_planted_tmp, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stage_names_cannot_be_planted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_force_settles_when_dir_fsync_fails, setup, teardown),
        cmocka_unit_test(test_error_message_is_one_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
