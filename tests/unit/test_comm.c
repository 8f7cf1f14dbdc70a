/*
 * test_comm.c - the control connection of multi-process jobs with real
 * forked workers: each share's status to rank 0 (failures with the worker's
 * message, a dead worker seen, not waited for), the outcome back, exit
 * statuses reaped by rank 0; which launcher variables are read.
 */
#include "fc_test.h"

#include <stdlib.h>
#include <unistd.h>

#include "comm.h"

/*
 * Fork nproc - 1 workers.  A worker reports `worker_rc[rank]` (its share's
 * outcome; an exit code 9 means "die without a word"), waits for the job's
 * outcome and exits 0 only when the job succeeded.  Returns rank 0's comm.
 */
static struct fc_comm *start(int nproc, const int *worker_rc)
{
    struct fc_comm *c = NULL;
    assert_fc_ok(fc_comm_fork(&c, nproc));
    if (fc_comm_rank(c) != 0) {
        const int want = worker_rc[fc_comm_rank(c)];
        if (want == 9)
            _exit(9);
        if (want < 0)
            fc_error_set(want, "__%d_0.distcp: disk full", fc_comm_rank(c));
        int rc = fc_comm_report(c, want);
        if (rc == FC_OK)
            rc = fc_comm_await(c);
        fc_comm_free(c);
        _exit(rc == FC_OK && want == FC_OK ? 0 : rc == FC_ERROR ? 1 : 2);
    }
    assert_int_equal(fc_comm_size(c), nproc);
    return c;
}

static void test_comm_every_share_reports_then_rank_0_tells_the_outcome(void **state)
{
    static const int ok[3] = {0, FC_OK, FC_OK};
    (void)state;
    struct fc_comm *c = start(3, ok);
    for (int f = 0; f < 5; f++)
        assert_int_equal(fc_comm_owner(c, f), f % 3);
    assert_fc_ok(fc_comm_gather(c));
    fc_comm_done(c, 1);
    fc_comm_done(c, 0); /* told once: the first outcome stands */
    assert_fc_ok(fc_comm_free(c));
}

static void test_comm_worker_failure_reaches_rank_0_and_every_exit_status(void **state)
{
    static const int rcs[3] = {0, FC_OK, FC_EIO};
    (void)state;
    struct fc_comm *c = start(3, rcs);
    /* The report carries the worker's own message, with its rank. */
    assert_fc_fails(fc_comm_gather(c), FC_EIO, "rank 2: __2_0.distcp: disk full");
    fc_comm_done(c, 0);
    /* rank 1 was fine but the job failed: it exits 1 too */
    assert_fc_fails(fc_comm_free(c), FC_ERROR, "worker rank 1 exited with status 1");
}

static void test_comm_job_failure_on_rank_0_fails_every_worker(void **state)
{
    static const int ok[3] = {0, FC_OK, FC_OK};
    (void)state;
    struct fc_comm *c = start(3, ok);
    assert_fc_ok(fc_comm_gather(c)); /* workers are fine... */
    fc_comm_done(c, 0);              /* ...but the job failed on rank 0 */
    assert_fc_fails(fc_comm_free(c), FC_ERROR, "exited with status 1");
}

static void test_comm_a_worker_gone_is_a_failure_not_a_hang(void **state)
{
    static const int rcs[3] = {0, 9, FC_OK};
    (void)state;
    struct fc_comm *c = start(3, rcs);
    assert_fc_fails(fc_comm_gather(c), FC_EIO, "rank 1: multi-process transport: connection closed");
    fc_comm_done(c, 0);
    assert_fc_fails(fc_comm_free(c), FC_ERROR, "worker rank 1 exited with status 9");
}

/* srun and mpirun name the rank and size their own way; the control connection needs MASTER_PORT. */
static void test_comm_env_reads_each_launchers_variables(void **state)
{
    struct fc_comm *c = (struct fc_comm *)1;
    (void)state;
    unsetenv("WORLD_SIZE");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("MASTER_PORT");
    setenv("SLURM_NTASKS", "1", 1);
    setenv("SLURM_PROCID", "0", 1);
    assert_fc_ok(fc_comm_env(&c)); /* one task: alone */
    assert_null(c);
    setenv("SLURM_NTASKS", "4", 1);
    assert_fc_fails(fc_comm_env(&c), FC_EINVAL, "SLURM_NTASKS=4 ranks but MASTER_PORT is not set");
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_RANK", "5", 1);
    assert_fc_fails(fc_comm_env(&c), FC_EINVAL, "OMPI_COMM_WORLD_RANK='5' is not an integer in [0, 1]");
    setenv("WORLD_SIZE", "1", 1); /* torchrun's names win */
    assert_fc_ok(fc_comm_env(&c));
    assert_null(c);
    unsetenv("WORLD_SIZE");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_PROCID");
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
        cmocka_unit_test(test_comm_every_share_reports_then_rank_0_tells_the_outcome),
        cmocka_unit_test(test_comm_worker_failure_reaches_rank_0_and_every_exit_status),
        cmocka_unit_test(test_comm_job_failure_on_rank_0_fails_every_worker),
        cmocka_unit_test(test_comm_a_worker_gone_is_a_failure_not_a_hang),
        cmocka_unit_test(test_comm_env_reads_each_launchers_variables),
        cmocka_unit_test(test_comm_local_rank_reads_torchrun_or_falls_back),
    };
    return cmocka_run_group_tests_name("comm", tests, NULL, NULL);
}
