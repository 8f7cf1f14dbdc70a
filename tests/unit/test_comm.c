/*
 * test_comm.c - the multi-process transport with real forked workers:
 * files written on their owner, acks carrying worker failures back to rank
 * 0, and exit statuses reaped by rank 0.
 */
#include "fc_test.h"

#include <fcntl.h>
#include <unistd.h>

#include "comm.h"

/* Fork nproc - 1 workers; in a worker, serve and leave.  Returns rank 0's comm. */
static struct fc_comm *start(int nproc)
{
    struct fc_comm *c = NULL;
    assert_fc_ok(fc_comm_fork(&c, nproc));
    if (fc_comm_rank(c) != 0) {
        const int rc = fc_comm_serve(c);
        fc_comm_free(c);
        _exit(rc == FC_OK ? 0 : 1);
    }
    assert_int_equal(fc_comm_size(c), nproc);
    return c;
}

static void test_comm_workers_write_the_files_they_own(void **state)
{
    char *dir = fc_test_tmpdir();
    char path[3][256];
    (void)state;
    assert_non_null(dir);
    struct fc_comm *c = start(3);
    for (int f = 0; f < 5; f++)
        assert_int_equal(fc_comm_owner(c, f), f % 3);
    for (uint32_t f = 1; f < 3; f++) {
        snprintf(path[f], sizeof(path[f]), "%s/__%u_0.distcp", dir, f);
        assert_fc_ok(fc_comm_open(c, (int)f, f, path[f]));
        /* Out of order on purpose: workers pwrite at the given offsets. */
        assert_fc_ok(fc_comm_write(c, (int)f, f, 5, "world", 5));
        assert_fc_ok(fc_comm_write(c, (int)f, f, 0, "hello", 5));
        assert_fc_ok(fc_comm_close(c, (int)f, f));
    }
    assert_fc_ok(fc_comm_finish(c));
    fc_comm_done(c, 1);
    assert_fc_ok(fc_comm_free(c));
    for (int f = 1; f < 3; f++) {
        char got[16] = {0};
        const int fd = open(path[f], O_RDONLY);
        assert_true(fd >= 0);
        assert_int_equal(read(fd, got, sizeof(got)), 10);
        close(fd);
        assert_string_equal(got, "helloworld");
    }
    fc_test_rmdir(dir);
}

static void test_comm_worker_failure_reaches_rank_0_and_every_exit_status(void **state)
{
    (void)state;
    struct fc_comm *c = start(2);
    assert_fc_ok(fc_comm_open(c, 1, 7, "/nonexistent-dir/__1_0.distcp"));
    assert_fc_ok(fc_comm_write(c, 1, 7, 0, "x", 1));
    /* The ack of CLOSE carries the worker's first error, with its file. */
    assert_fc_fails(fc_comm_close(c, 1, 7), FC_EIO, "/nonexistent-dir/__1_0.distcp: cannot create");
    fc_comm_done(c, 0);
    assert_fc_fails(fc_comm_free(c), FC_ERROR, "worker rank 1 exited with status 1");
}

static void test_comm_job_failure_on_rank_0_fails_every_worker(void **state)
{
    (void)state;
    struct fc_comm *c = start(3);
    assert_fc_ok(fc_comm_finish(c)); /* workers are fine... */
    fc_comm_done(c, 0);              /* ...but the job failed on rank 0 */
    assert_fc_fails(fc_comm_free(c), FC_ERROR, "exited with status 1");
}

/* One LOCAL_RANK parser for the executor's GPU and NCCL's: what torchrun sets, else the fallback.
 */
static void test_comm_local_rank_reads_torchrun_or_falls_back(void **state)
{
    static const struct {
        const char *value; /* NULL: unset */
        int want;
    } cases[] = {{NULL, 7}, {"3", 3},  {"0", 0},    {"1023", 1023}, {"", 7},
                 {"2x", 7}, {"-1", 7}, {"1024", 7}, {" 4", 4},      {"0x2", 7}};
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].value == NULL)
            unsetenv("LOCAL_RANK");
        else
            setenv("LOCAL_RANK", cases[i].value, 1);
        assert_int_equal(fc_local_rank(7), cases[i].want);
    }
    unsetenv("LOCAL_RANK");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comm_workers_write_the_files_they_own),
        cmocka_unit_test(test_comm_worker_failure_reaches_rank_0_and_every_exit_status),
        cmocka_unit_test(test_comm_job_failure_on_rank_0_fails_every_worker),
        cmocka_unit_test(test_comm_local_rank_reads_torchrun_or_falls_back),
    };
    return cmocka_run_group_tests_name("comm", tests, NULL, NULL);
}
