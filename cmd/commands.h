/*
 * commands.h - the subcommand entry points.  Each takes the argument vector
 * with the subcommand name as argv[0], parses its own options with
 * getopt_long (after resetting optind), calls one convert/ entry point and
 * returns the process exit status.  `--help` prints its usage to stdout.
 */
#ifndef FC_COMMANDS_H
#define FC_COMMANDS_H

#include <stdio.h>

int cmd_full_to_dcp(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_reshard(int argc, char **argv);
int cmd_dcp_to_full(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_help(int argc, char **argv);

/*
 * The options full-to-dcp and reshard share (job.c): their getopt codes, their
 * longopts[] rows, and one parser.  fc_cli_job_option() returns 1 when it took
 * option c, 0 when c is not one of these, -1 after printing a value error.
 */
enum {
    FC_JOB_OPT_WORLD = 400,
    FC_JOB_OPT_MESH,
    FC_JOB_OPT_THREADS,
    FC_JOB_OPT_NPROC,
    FC_JOB_OPT_ENGINE,
    FC_JOB_OPT_MAXMEM,
    FC_JOB_OPT_COMPRESS,
    FC_JOB_OPT_DRY,
    FC_JOB_OPT_FORCE
};

/* clang-format off */
#define FC_JOB_LONGOPTS                                                                            \
    {"output", required_argument, NULL, 'o'},                                                      \
    {"world-size", required_argument, NULL, FC_JOB_OPT_WORLD},                                     \
    {"mesh", required_argument, NULL, FC_JOB_OPT_MESH},                                            \
    {"threads", required_argument, NULL, FC_JOB_OPT_THREADS},                                      \
    {"nproc", required_argument, NULL, FC_JOB_OPT_NPROC},                                          \
    {"engine", required_argument, NULL, FC_JOB_OPT_ENGINE},                                        \
    {"max-memory", required_argument, NULL, FC_JOB_OPT_MAXMEM},                                    \
    {"compress", required_argument, NULL, FC_JOB_OPT_COMPRESS},                                    \
    {"dry-run", no_argument, NULL, FC_JOB_OPT_DRY},                                                \
    {"force", no_argument, NULL, FC_JOB_OPT_FORCE},                                                \
    {"help", no_argument, NULL, 'h'}
/* clang-format on */

struct fc_cli_job_counts {
    long world;   /* --world-size, 0 = not given */
    long threads; /* --threads, 0 = default */
    long nproc;   /* --nproc, default 1 */
};

struct fc_full_to_dcp_opts;
int fc_cli_job_option(const char *cmd, int c, const char *arg, struct fc_full_to_dcp_opts *o,
                      struct fc_cli_job_counts *n);

/*
 * fc_cli_run_convert() - job.c: finish the options of full-to-dcp/reshard
 * (world size or mesh, threads, progress) and run fc_full_to_dcp() as rank
 * 0 of a multi-process job or alone; returns the exit status.  A worker
 * process of the job returns here only when the job is over.
 */
int fc_cli_run_convert(const char *cmd, const char *usage, struct fc_full_to_dcp_opts *o,
                       const struct fc_cli_job_counts *n);

/* From main.c: run `<name> --help`, or print the command list. */
int fc_main_help_for(const char *name);
void fc_main_print_usage(FILE *f);

#endif
