/*
 * test_io_pool.c - the descriptor pool behind fc_file_open_read(): more files than
 * RLIMIT_NOFILE allows stay readable (each file's own bytes), descriptors in
 * use stay bounded, and a file replaced after the pool closed it is refused.
 * main() lowers the limit to 64 (soft and hard) before any file is opened:
 * the pool then keeps at most 8 + 64 / 2 = 40 descriptors.
 */
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/resource.h>

#include "fc_test.h"

#define NFILES 150

static char *dir;

static void file_path(char *out, size_t cap, int i)
{
    snprintf(out, cap, "%s/f%03d", dir, i);
}

static void write_file(int i, unsigned char fill)
{
    char p[256];
    unsigned char data[64];
    file_path(p, sizeof(p), i);
    memset(data, fill, sizeof(data));
    assert_fc_ok(fc_write_file_atomic(p, data, sizeof(data)));
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = -1; /* the DIR's own descriptor */
    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 2; /* . and .. */
}

static void test_pool_reads_more_files_than_the_limit(void **state)
{
    (void)state;
    const int baseline = open_fds();
    struct fc_file *f = calloc(NFILES, sizeof(*f));
    assert_non_null(f);
    for (int i = 0; i < NFILES; i++) {
        char p[256];
        write_file(i, (unsigned char)i);
        file_path(p, sizeof(p), i);
        assert_fc_ok(fc_file_open_read(&f[i], p));
    }
    const int before = open_fds();
    assert_true(before >= 0 && before <= 64);
    /* Every file read twice, in an order that defeats any cache of recent files. */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < NFILES; i++) {
            const int k = round == 0 ? i : (i * 37) % NFILES;
            unsigned char got[64];
            assert_fc_ok(fc_file_pread(&f[k], got, sizeof(got), 0));
            for (size_t j = 0; j < sizeof(got); j++)
                assert_int_equal(got[j], (unsigned char)k);
        }
        assert_true(open_fds() <= 64);
    }
    /* File 0 was closed by the pool since its read; replace it: the reopen must refuse it. */
    char p[256];
    unsigned char got[64];
    file_path(p, sizeof(p), 0);
    assert_int_equal(unlink(p), 0);
    write_file(0, 0xee);
    for (int i = NFILES - 1; i > 0; i--)
        assert_fc_ok(fc_file_pread(&f[i], got, 1, 0));
    assert_fc_fails(fc_file_pread(&f[0], got, sizeof(got), 0), FC_ECORRUPT,
                    "replaced or resized while being read");
    for (int i = 0; i < NFILES; i++)
        fc_file_close(&f[i]);
    assert_int_equal(open_fds(), baseline);
    free(f);
}

static void test_pool_closes_what_it_opened(void **state)
{
    (void)state;
    const int before = open_fds();
    struct fc_file f[20];
    for (int i = 0; i < 20; i++) {
        char p[256];
        write_file(i, 1);
        file_path(p, sizeof(p), i);
        assert_fc_ok(fc_file_open_read(&f[i], p));
    }
    assert_int_equal(open_fds(), before + 20);
    for (int i = 0; i < 20; i++)
        fc_file_close(&f[i]);
    assert_int_equal(open_fds(), before);
}

/* A failed open closes nothing: descriptor 0 (stdin here) stays open, and the pool stays usable. */
static void test_failed_open_closes_nothing(void **state)
{
    (void)state;
    int fd0 = fcntl(0, F_GETFD);
    if (fd0 < 0) { /* no stdin: give descriptor 0 a file to lose */
        fd0 = open("/dev/null", O_RDONLY);
        assert_int_equal(fd0, 0);
    }
    char p[256];
    snprintf(p, sizeof(p), "%s/does-not-exist", dir);
    for (int i = 0; i < 3; i++) {
        struct fc_file f;
        assert_int_equal(fc_file_open_read(&f, p), FC_ENOENT);
    }
    assert_true(fcntl(0, F_GETFD) >= 0);
    write_file(0, 7);
    struct fc_file f;
    unsigned char got[64];
    file_path(p, sizeof(p), 0);
    assert_fc_ok(fc_file_open_read(&f, p));
    assert_fc_ok(fc_file_pread(&f, got, sizeof(got), 0));
    assert_int_equal(got[0], 7);
    fc_file_close(&f);
}

static int setup(void **state)
{
    (void)state;
    dir = fc_test_tmpdir();
    return dir == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    fc_test_rmdir(dir);
    return 0;
}

int main(void)
{
    /* Before any file is opened: the pool reads the limit once. */
    const struct rlimit rl = {64, 64};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        perror("setrlimit");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_open_closes_nothing),
        cmocka_unit_test(test_pool_closes_what_it_opened),
        cmocka_unit_test(test_pool_reads_more_files_than_the_limit),
    };
    return cmocka_run_group_tests_name("io_pool", tests, setup, teardown);
}
