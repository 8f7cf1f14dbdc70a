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
 * fc_cli_run_convert() - job.c: finish the options of full-to-dcp/reshard
 * (world size or mesh, threads, progress) and run fc_full_to_dcp() as rank
 * 0 of a multi-process job or alone; returns the exit status.  A worker
 * process of the job returns here only when the job is over.
 */
struct fc_full_to_dcp_opts;
int fc_cli_run_convert(const char *cmd, const char *usage, struct fc_full_to_dcp_opts *o,
                       long world, long threads, long nproc);

/* From main.c: run `<name> --help`, or print the command list. */
int fc_main_help_for(const char *name);
void fc_main_print_usage(FILE *f);

#endif
