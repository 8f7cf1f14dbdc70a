/*
 * cli.h - the command table row, exit codes, error/usage output and
 * verbosity for cmd/.
 *
 * Only cmd/ prints or exits.  Results go to stdout; diagnostics to stderr as
 * one line "fsdpconv: <command>: <message>" (the message names the file and
 * the problem).
 *
 * One error convention, as git's usage.c has one: below a command's top level
 * every function (option callbacks, value parsers, the option parser) returns
 * FC_OK or a negative code with the message set by fc_error_set() or
 * fc_cli_usage(), and prints nothing.  Only the top level (cmd_<name>(), and
 * fc_cli_run_convert() for the conversion jobs) turns a code into output and
 * an exit status, through fc_cli_report().
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

/*
 * What a command needs, on its row of main.c's command table (as git's
 * RUN_SETUP and friends): the option parser joins the shared option tables
 * the flags name, and fc_cli_report() reads the exit-status convention.
 */
enum fc_cmd_flags {
    FC_CMD_JOB = 1u << 0,       /* runs a conversion job: the job options of job.c */
    FC_CMD_RULES = 1u << 1,     /* takes the transform rules (fc_cli_pipeline_opts) */
    FC_CMD_READS_DCP = 1u << 2, /* may read DCP items: --no-verify, --io */
    FC_CMD_EXIT_DIFF = 1u << 3  /* exit 1 means "different": its other failures exit 4 */
};

struct fc_cmd {
    const char *name;
    int (*fn)(int argc, char **argv); /* returns the exit status */
    unsigned flags;                   /* enum fc_cmd_flags */
    const char *summary;
};

extern int fc_cli_verbosity;            /* -q: -1, default 0, -v: 1, -vv: 2 ... */
extern const struct fc_cmd *fc_cli_cmd; /* the running command's row; NULL before */

/*
 * cmd/'s one code beside enum fc_err: a bad command line.  It exits 2 like
 * FC_EINVAL, and its message is followed by "see 'fsdpconv help <command>'".
 */
#define FC_CLI_EUSAGE (-64)

/*
 * fc_cli_usage() - set the message of a usage error, "<msg>", and return
 * FC_CLI_EUSAGE; prints nothing (fc_cli_report() does).
 */
int fc_cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * fc_cli_report() - the one place a code becomes an exit status.  For a
 * negative rc it prints "fsdpconv: <command>: <fc_error_last()>" (and the
 * help hint after a usage error).  FC_OK and positive values (FC_OPT_HELP:
 * done) exit 0.
 */
int fc_cli_report(int rc);

/*
 * fc_cli_flush_stdout() - flush stdout; FC_EIO "writing to stdout failed" when
 * that or any earlier write to it failed (a full disk, /dev/full, a closed
 * pipe), which stdio only remembers in ferror().  Else FC_OK.
 */
int fc_cli_flush_stdout(void);

/* Print "fsdpconv: <command>: <msg>" to stderr unless -q. */
void fc_cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* -v: one line saying which I/O path moved the data (fc_io_stats()), if any moved. */
void fc_cli_io_report(void);

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
 * Multi-process jobs.  fc_cli_mp_start() forks `--nproc` workers (nproc > 1),
 * runs alone (nproc 1), or, nproc 0 (not given), joins a launcher job
 * (fc_comm_env()).  With NCCL, a worker serves rank 0 until the job ends and
 * *worker_exit is the status it must exit with; otherwise every rank gets
 * *comm (NULL when alone) and runs its share of the job, and *worker_exit = -1.  Returns FC_OK, or
 * a negative code when the job could not start (for rank 0 to report; a worker reports its own
 * failure and gets FC_EXIT_FAILURE in *worker_exit, as the worker's life is its own top level).
 * fc_cli_mp_end() tells the workers the outcome, reaps forked ones and returns the final exit
 * status.
 */
struct fc_comm;
int fc_cli_mp_start(long nproc, int engine, struct fc_comm **comm, int *worker_exit);
int fc_cli_mp_end(struct fc_comm *comm, int status);

/* Progress bar on stderr (bytes, rate, ETA). */
struct fc_cli_progress {
    struct timespec start; /* CLOCK_MONOTONIC, when the command began */
    int active;
};
/*
 * fc_cli_progress_start() - set p's start; returns 1 when the bar may be
 * drawn (not -q, and stderr is a terminal), else 0.
 */
int fc_cli_progress_start(struct fc_cli_progress *p);
void fc_cli_progress_draw(void *ctx, uint64_t done, uint64_t total);

#endif
