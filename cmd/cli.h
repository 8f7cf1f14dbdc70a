/*
 * cli.h - exit codes, error/usage output and verbosity for cmd/.
 *
 * Only cmd/ prints or exits.  Results go to stdout; diagnostics to stderr as
 * one line "fsdpconv: <command>: <message>" (the message names the file and
 * the problem).
 */
#ifndef FC_CLI_H
#define FC_CLI_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

enum fc_exit {
    FC_EXIT_OK = 0,      /* success (diff: equal) */
    FC_EXIT_FAILURE = 1, /* I/O error, out of memory, other failure (diff: different) */
    FC_EXIT_USAGE = 2,   /* bad command line, or a rule/option the input cannot satisfy */
    FC_EXIT_INPUT = 3,   /* invalid or unsupported input */
    /* diff only: it keeps 1 for "different", so its other failures (I/O, memory) exit 4 */
    FC_EXIT_DIFF_FAILURE = 4
};

extern int fc_cli_verbosity;       /* -q: -1, default 0, -v: 1, -vv: 2 ... */
extern const char *fc_cli_command; /* the running command's name, for messages; NULL before */

/* Print "fsdpconv: <command>: <fc_error_last()>" and return the exit status for rc. */
int fc_cli_report(int rc);

/*
 * fc_cli_flush_stdout() - flush stdout; FC_EIO "writing to stdout failed" when
 * that or any earlier write to it failed (a full disk, /dev/full, a closed
 * pipe), which stdio only remembers in ferror().  Else FC_OK.
 */
int fc_cli_flush_stdout(void);

/* Print "fsdpconv: <cmd>: <msg>" and "see 'fsdpconv help <cmd>'" to stderr; return 2. */
int fc_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print "fsdpconv: <command>: <msg>" to stderr unless -q. */
void fc_cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * fc_cli_summary() - the one line a successful write prints unless -q, as
 * `cp -v` or git would: "fsdpconv: <command>: wrote <output> (<format>):
 * <n> tensors[, <v> values], <size> in <f> <files_word>, <s> s", on stderr
 * (stdout carries --dry-run plans and --json results).  start is when the
 * command began (CLOCK_MONOTONIC).
 */
void fc_cli_summary(const char *output, const char *format, size_t ntensors, size_t nvalues,
                    uint64_t bytes, size_t nfiles, const char *files_word,
                    const struct timespec *start);

/*
 * Multi-process jobs.  fc_cli_mp_start() forks `--nproc` workers (nproc > 1)
 * or joins a launcher job (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT).  In a
 * worker it serves rank 0 until the job ends and sets *worker_exit to the
 * status the worker must exit with; in rank 0 (or a single process) it sets
 * *comm (NULL when alone) and *worker_exit = -1.  Returns 0, or an exit
 * status when the job could not start.  fc_cli_mp_end() tells the workers
 * the outcome, reaps forked ones and returns the final status.
 */
struct fc_comm;
int fc_cli_mp_start(long nproc, int engine, struct fc_comm **comm, int *worker_exit);
int fc_cli_mp_end(struct fc_comm *comm, int status);

/* Progress bar on stderr (bytes, rate, ETA); start must be set with CLOCK_MONOTONIC. */
struct fc_cli_progress {
    struct timespec start;
    int active;
};
void fc_cli_progress_draw(void *ctx, uint64_t done, uint64_t total);

#endif
