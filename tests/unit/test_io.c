/*
 * test_io.c - output creation and staging (lib/util/fc_io.c): nothing planted at
 * an output's name is followed, staging names cannot be guessed, and a
 * --force commit settles (new output in place, old one gone) even when the
 * final directory fsync fails; error messages stay one printable line; and
 * direct I/O (fc_dio.c) writes and reads the same bytes as buffered I/O.
 */
#include "fc_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef FC_HAVE_LIBURING
#include <liburing.h>
#endif

#include "fc_alloc.h"
#include "fc_io.h"

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

/* A pseudo-random byte string (xorshift), the same for a seed. */
static void fill_bytes(unsigned char *b, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        b[i] = (unsigned char)seed;
    }
}

/*
 * Runs of an output file written through two fc_dio_writers (two workers) in a
 * scrambled order, each in puts of odd sizes: runs shorter than a block, runs
 * that start and end mid-block next to each other, runs over several buffers.
 * The file must hold exactly the bytes, and fc_file_pread() must read any range
 * back, in every --io mode.
 */
static void test_direct_io_writes_and_reads_the_same_bytes(void **state)
{
    (void)state;
    const size_t total = ((size_t)19 << 20) + 12345;
    unsigned char *want = fc_malloc(total), *got = fc_malloc(total);
    assert_non_null(want);
    assert_non_null(got);
    fill_bytes(want, total, 7);
    /* Run boundaries: small and large, mostly unaligned. */
    static const size_t cuts[] = {0,       1,        100,      4095,     4096,     4097,
                                  9000,    12288,    70000,    300001,   (size_t)9 << 20,
                                  9437187, 9437190,  (size_t)18 << 20,   19932160};
    const size_t ncuts = sizeof(cuts) / sizeof(cuts[0]);
    static const int order[] = {7, 0, 12, 3, 9, 1, 14, 5, 11, 2, 8, 13, 4, 10, 6};
    static const enum fc_io_mode modes[] = {FC_IO_DIRECT, FC_IO_AUTO, FC_IO_BUFFERED};
    for (size_t m = 0; m < 3; m++) {
        fc_io_set_mode(modes[m]);
        char path[64];
        snprintf(path, sizeof(path), "dio_%zu.bin", m);
        int fd;
        assert_fc_ok(fc_file_create(path, &fd));
        const int dfd = fc_dio_open(fd, path);
        assert_true(modes[m] != FC_IO_BUFFERED || dfd == -1);
        struct fc_dio_writer w[2] = {FC_DIO_WRITER_INIT, FC_DIO_WRITER_INIT};
        for (size_t k = 0; k < ncuts; k++) {
            const size_t r = (size_t)order[k];
            const size_t from = cuts[r], to = r + 1 < ncuts ? cuts[r + 1] : total;
            struct fc_dio_writer *wk = &w[k % 2];
            for (size_t at = from, step = 1; at < to; step = step * 7 + 3) {
                const size_t n = step % ((size_t)3 << 20) + 1 < to - at
                                     ? step % ((size_t)3 << 20) + 1
                                     : to - at;
                if (dfd >= 0)
                    assert_fc_ok(fc_dio_put(wk, fd, dfd, path, at, want + at, n));
                else
                    assert_fc_ok(fc_pwrite_full(fd, want + at, n, at, path));
                at += n;
            }
        }
        assert_fc_ok(fc_dio_flush(&w[0]));
        assert_fc_ok(fc_dio_flush(&w[1]));
        fc_dio_release(&w[0]);
        fc_dio_release(&w[1]);
        if (dfd >= 0)
            close(dfd);
        assert_int_equal(fsync(fd), 0);
        assert_int_equal(close(fd), 0);
        struct fc_file f = FC_FILE_INIT;
        assert_fc_ok(fc_file_open_read(&f, path));
        assert_int_equal(f.size, total);
        memset(got, 0, total);
        assert_fc_ok(fc_file_pread(&f, got, total, 0));
        assert_memory_equal(got, want, total);
        /* Unaligned ranges, up to the last byte; past it is "truncated". */
        static const size_t offs[] = {0, 1, 4095, 4096, 5000, (size_t)8 << 20, 19932161};
        for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
            const size_t off = offs[i], n = total - off < 300000 ? total - off : 300000;
            memset(got, 0, n);
            assert_fc_ok(fc_file_pread(&f, got, n, off));
            assert_memory_equal(got, want + off, n);
            assert_fc_ok(fc_file_pread(&f, got, total - off, off));
            assert_memory_equal(got, want + off, total - off);
        }
        assert_int_equal(fc_file_pread(&f, got, 2, total - 1), FC_ECORRUPT);
        fc_file_close(&f);
    }
    fc_io_set_mode(FC_IO_AUTO);
    fc_free(want);
    fc_free(got);
}

/* Can this process set up an io_uring (built with liburing, and the kernel lets it)? */
static int uring_usable(void)
{
#ifdef FC_HAVE_LIBURING
    struct io_uring ring;
    if (io_uring_queue_init(FC_DIO_DEPTH, &ring, 0) != 0)
        return 0;
    io_uring_queue_exit(&ring);
    return 1;
#else
    return 0;
#endif
}

/* Write want[0, n) at file offset at of a new file at path through one writer in odd puts. */
static int write_through_writer(const char *path, int dfd_flags, const unsigned char *want,
                                size_t n, uint64_t at, int *put_failed)
{
    int fd;
    assert_fc_ok(fc_file_create(path, &fd));
    const int dfd = dfd_flags == 0 ? fc_dio_open(fd, path) : open(path, dfd_flags);
    assert_true(dfd >= 0);
    struct fc_dio_writer w = FC_DIO_WRITER_INIT;
    int rc = FC_OK;
    *put_failed = 0;
    for (size_t done = 0, step = 5; done < n && rc == FC_OK; step = step * 3 + 1) {
        const size_t k = step % ((size_t)3 << 20) + 1 < n - done ? step % ((size_t)3 << 20) + 1
                                                                  : n - done;
        rc = fc_dio_put(&w, fd, dfd, path, at + done, want + done, k);
        done += k;
    }
    *put_failed = rc != FC_OK;
    const int frc = fc_dio_flush(&w);
    fc_dio_release(&w);
    close(dfd);
    close(fd);
    return rc != FC_OK ? rc : frc;
}

/*
 * The write queue (io_uring, FC_DIO_DEPTH writes in flight) writes the bytes
 * it is given, unaligned start and end included, with up to FC_DIO_DEPTH writes
 * in flight and never more; one write at a time (the same bytes) where the
 * build or the kernel has no io_uring.
 */
static void test_direct_write_queue_writes_the_bytes_given(void **state)
{
    (void)state;
    const size_t n = ((size_t)24 << 20) + 777;
    const uint64_t at = 100;
    unsigned char *want = fc_malloc(n), *got = fc_malloc(n);
    assert_non_null(want);
    assert_non_null(got);
    fill_bytes(want, n, 11);
    fc_io_set_mode(FC_IO_DIRECT);
    /* Requests of 1 MiB: 6 buffers with a queue (2 of 3 MiB without), all of the room. */
    assert_int_equal(fc_dio_fit((uint64_t)6 << 20), (uint64_t)6 << 20);
    struct fc_io_stats before, after;
    fc_io_stats(&before);
    int put_failed;
    assert_fc_ok(write_through_writer("queue.bin", 0, want, n, at, &put_failed));
    fc_io_stats(&after);
    struct fc_file f = FC_FILE_INIT;
    assert_fc_ok(fc_file_open_read(&f, "queue.bin"));
    assert_int_equal(f.size, at + n);
    assert_fc_ok(fc_file_pread(&f, got, n, at));
    assert_memory_equal(got, want, n);
    fc_file_close(&f);
    const uint64_t queued = after.queued_written - before.queued_written;
    const uint64_t direct = after.direct_written - before.direct_written;
    if (uring_usable()) {
        assert_true(direct >= n - 2 * FC_DIO_ALIGN);
        assert_int_equal(queued, direct);
        assert_int_equal(fc_dio_inflight_peak(), FC_DIO_DEPTH);
    } else {
        assert_int_equal(queued, 0);
        assert_int_equal(fc_dio_inflight_peak(), 0);
    }
    (void)fc_dio_fit((uint64_t)1 << 30);
    fc_io_set_mode(FC_IO_AUTO);
    fc_free(want);
    fc_free(got);
}

/*
 * A direct write that fails in flight fails the writer: the put or the flush
 * returns FC_EIO naming the file and the system's reason, never success with a
 * hole.  Writes refused by the descriptor (opened read-only), and writes past
 * the file size limit (EFBIG, as ENOSPC: a limit the test can set).
 */
static void test_direct_write_queue_reports_failures(void **state)
{
    (void)state;
    const size_t n = (size_t)12 << 20;
    unsigned char *want = fc_malloc(n);
    assert_non_null(want);
    fill_bytes(want, n, 3);
    fc_io_set_mode(FC_IO_DIRECT);
    (void)fc_dio_fit((uint64_t)6 << 20);
    int put_failed;
    assert_int_equal(write_through_writer("ro.bin", O_RDONLY | O_CLOEXEC, want, n, 0, &put_failed),
                     FC_EIO);
    assert_non_null(strstr(fc_error_last(), "ro.bin: write at offset "));
    assert_non_null(strstr(fc_error_last(), strerror(EBADF)));

    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)5 << 20;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    const int rc = write_through_writer("big.bin", 0, want, n, 0, &put_failed);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, was);
    assert_int_equal(rc, FC_EIO);
    assert_non_null(strstr(fc_error_last(), "big.bin: write at offset "));
    assert_non_null(strstr(fc_error_last(), strerror(EFBIG)));
    (void)fc_dio_fit((uint64_t)1 << 30);
    fc_io_set_mode(FC_IO_AUTO);
    fc_free(want);
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
        cmocka_unit_test_setup_teardown(test_direct_write_queue_writes_the_bytes_given, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_direct_write_queue_reports_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_direct_io_writes_and_reads_the_same_bytes, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
