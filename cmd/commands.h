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

/* From main.c: run `<name> --help`, or print the command list. */
int fc_main_help_for(const char *name);
void fc_main_print_usage(FILE *f);

#endif
