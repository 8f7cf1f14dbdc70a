/*
 * cli.c - what every command shares for talking to the user: the one map
 * from error codes to exit statuses with the error line, notes and the
 * summary line, the progress bar, and the start and end of multi-process
 * jobs.  Kept apart from the commands so that each prints the same way.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "fc_convert.h"
#include "fc_error.h"
#include "fc_io.h"

int fc_cli_verbosity;
const struct fc_cmd *fc_cli_cmd;

/* "<command>: " for messages, or "" before a command runs. */
static const char *fc_cli_name(void)
{
    return fc_cli_cmd != NULL ? fc_cli_cmd->name : "";
}

static const char *fc_cli_colon(void)
{
    return fc_cli_cmd != NULL ? ": " : "";
}

/* The exit status for a code: FC_OK, a positive "done", an fc_err or FC_CLI_EUSAGE. */
static int fc_cli_exit_code(int rc)
{
    if (rc >= 0)
        return FC_EXIT_OK;
    switch (rc) {
    case FC_CLI_EUSAGE:
    case FC_EINVAL: return FC_EXIT_USAGE;
    case FC_ECORRUPT:
    case FC_EFORMAT: return FC_EXIT_INPUT;
    default:
        if (fc_cli_cmd != NULL && (fc_cli_cmd->flags & FC_CMD_EXIT_DIFF))
            return FC_EXIT_DIFF_FAILURE;
        return FC_EXIT_FAILURE;
    }
}

int fc_cli_report(int rc)
{
    if (rc < 0) {
        const char *msg = fc_error_last();
        fprintf(stderr, "fsdpconv: %s%s%s\n", fc_cli_name(), fc_cli_colon(),
                msg[0] != '\0' ? msg : fc_err_name(rc));
        if (rc == FC_CLI_EUSAGE)
            fprintf(stderr, "see 'fsdpconv help %s'\n", fc_cli_name());
    }
    return fc_cli_exit_code(rc);
}

int fc_cli_usage(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return fc_error_set(FC_CLI_EUSAGE, "%s", msg);
}

void fc_cli_note(const char *fmt, ...)
{
    va_list ap;
    if (fc_cli_verbosity < 0)
        return;
    fprintf(stderr, "fsdpconv: %s%s", fc_cli_name(), fc_cli_colon());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static double fc_cli_elapsed(const struct timespec *a)
{
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) / 1e9;
}

/* bytes as "512 bytes", "24.0 KiB", "1.2 GiB" (IEC units, one decimal). */
static void fc_cli_human_size(char *buf, size_t cap, uint64_t bytes)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t u = 0;
    if (bytes < 1024) {
        snprintf(buf, cap, "%" PRIu64 " bytes", bytes);
        return;
    }
    v /= 1024.0;
    while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, units[u]);
}

void fc_cli_io_report(void)
{
    static const char *const modes[] = {"auto", "buffered", "direct"}; /* enum fc_io_mode */
    struct fc_io_stats st;
    char dr[32], br[32], dw[32], bw[32];
    /* The commands that take --io (FC_CMD_READS_DCP): the ones that move tensor data. */
    if (fc_cli_verbosity < 1 || fc_cli_cmd == NULL || !(fc_cli_cmd->flags & FC_CMD_READS_DCP))
        return;
    fc_io_stats(&st);
    fc_cli_human_size(dr, sizeof(dr), st.direct_read);
    fc_cli_human_size(br, sizeof(br), st.buffered_read);
    fc_cli_human_size(dw, sizeof(dw), st.direct_written);
    fc_cli_human_size(bw, sizeof(bw), st.buffered_written);
    fc_cli_note("io %s: read %s direct, %s buffered; wrote %s direct%s, %s buffered%s%s",
                modes[fc_io_get_mode()], dr, br, dw,
                st.queued_written > 0 ? " (io_uring)"
                : st.uring_refused    ? " (io_uring refused here: one write at a time)"
                                      : "",
                bw, st.refused > 0 ? " (O_DIRECT refused here: buffered instead)" : "",
                st.no_room ? " (direct I/O off: a worker's --max-memory share leaves no room for "
                             "its buffers)"
                           : "");
}

void fc_cli_summary(const char *output, const char *format, size_t ntensors, size_t nvalues,
                    uint64_t bytes, size_t nfiles, const char *files_word,
                    const struct timespec *start)
{
    char size[32], values[48] = "";
    fc_cli_human_size(size, sizeof(size), bytes);
    if (nvalues > 0)
        snprintf(values, sizeof(values), ", %zu value%s", nvalues, nvalues == 1 ? "" : "s");
    fc_cli_note("wrote %s (%s): %zu tensor%s%s, %s in %zu %s%s, %.1f s", output, format, ntensors,
                ntensors == 1 ? "" : "s", values, size, nfiles, files_word, nfiles == 1 ? "" : "s",
                fc_cli_elapsed(start));
}

int fc_cli_progress_start(struct fc_cli_progress *p)
{
    p->active = 0;
    clock_gettime(CLOCK_MONOTONIC, &p->start);
    return fc_cli_verbosity >= 0 && isatty(STDERR_FILENO);
}

void fc_cli_progress_draw(void *ctx, uint64_t done, uint64_t total)
{
    struct fc_cli_progress *p = ctx;
    const double secs = fc_cli_elapsed(&p->start);
    const double rate = secs > 0 ? (double)done / secs : 0;
    const double pct = total > 0 ? 100.0 * (double)done / (double)total : 100.0;
    const double eta = rate > 0 && total > done ? (double)(total - done) / rate : 0;
    char bar[31];
    const int fill = (int)(pct * 30 / 100);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    fprintf(stderr, "\r[%s] %5.1f%%  %.1f/%.1f MiB  %.1f MiB/s  ETA %.0fs ", bar, pct,
            (double)done / 1048576.0, (double)total / 1048576.0, rate / 1048576.0, eta);
    p->active = 1;
    if (done >= total)
        fputc('\n', stderr);
}

int fc_cli_mp_start(long nproc, int engine, struct fc_comm **comm, int *worker_exit)
{
    int rc;
    *comm = NULL;
    *worker_exit = -1;
    if (nproc > 1)
        rc = fc_comm_fork(comm, (int)nproc);
    else if (nproc == 0) /* --nproc 1 runs alone whatever the launcher's variables say */
        rc = fc_comm_env(comm);
    else
        rc = FC_OK;
    if (rc == FC_OK)
        rc = fc_comm_start_nccl(*comm, engine);
    if (rc < 0) {
        if (*comm != NULL && fc_comm_rank(*comm) != 0) {
            fprintf(stderr, "fsdpconv: %s: rank %d: %s\n", fc_cli_name(), fc_comm_rank(*comm),
                    fc_error_last());
            fc_comm_free(*comm);
            *comm = NULL;
            *worker_exit = FC_EXIT_FAILURE;
            return FC_OK;
        }
        fc_comm_done(*comm, 0);
        fc_comm_free(*comm);
        *comm = NULL;
        return rc;
    }
    if (*comm != NULL && fc_comm_rank(*comm) != 0 && fc_comm_uses_nccl(*comm)) {
        /*
         * An NCCL worker: write what rank 0 sends, then leave with the job's outcome.
         * Rank 0 prints the one message of a failed job (a worker's own failure
         * reaches it in the worker's acknowledgement, naming the rank).
         */
        rc = fc_comm_serve(*comm);
        fc_comm_free(*comm);
        *comm = NULL;
        *worker_exit = rc < 0 ? FC_EXIT_FAILURE : FC_EXIT_OK;
    }
    return FC_OK;
}

int fc_cli_flush_stdout(void)
{
    if (fflush(stdout) != 0 || ferror(stdout))
        return fc_error_set(FC_EIO, "writing to stdout failed");
    return FC_OK;
}

int fc_cli_mp_end(struct fc_comm *comm, int status)
{
    if (comm == NULL)
        return status;
    fc_comm_done(comm, status == FC_EXIT_OK);
    const int rc = fc_comm_free(comm);
    if (rc < 0 && status == FC_EXIT_OK)
        return fc_cli_report(rc);
    return status;
}
