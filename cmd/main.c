/*
 * main.c - the entry point: global options, signal setup and the command
 * table (git's commands[] shape), whose rows say what each command needs;
 * dispatch makes the row the running command (fc_cli_cmd).
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "fc_error.h"

static const struct fc_cmd commands[] = {
    {"full-to-dcp", cmd_full_to_dcp, FC_CMD_JOB | FC_CMD_RULES | FC_CMD_READS_DCP,
     "split a full checkpoint into a sharded DCP directory"},
    {"reshard", cmd_reshard, FC_CMD_JOB | FC_CMD_RULES | FC_CMD_READS_DCP,
     "re-cut a DCP checkpoint for another world size or mesh"},
    {"dcp-to-full", cmd_dcp_to_full, FC_CMD_RULES | FC_CMD_READS_DCP,
     "export a DCP checkpoint to safetensors or torch.save"},
    {"diff", cmd_diff, FC_CMD_READS_DCP | FC_CMD_EXIT_DIFF, "compare two checkpoints key by key"},
    {"inspect", cmd_inspect, 0, "list tensors, dtypes, shapes, storages and DCP chunks"},
    {"help", cmd_help, 0, "show help for a command"},
};

static const char usage[] = "usage: fsdpconv [-v | -q] [--version] [-h] <command> [<args>]\n"
                            "\n"
                            "Commands:\n";

static void print_usage(FILE *f)
{
    fputs(usage, f);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "   %-12s %s\n", commands[i].name, commands[i].summary);
    fputs("\nSee 'fsdpconv help <command>' or 'man fsdpconv-<command>'.\n", f);
}

/* Used by `fsdpconv help <command>`: run the command with --help. */
int fc_main_help_for(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(commands[i].name, name) == 0) {
            char *argv[] = {(char *)(uintptr_t)commands[i].name, "--help", NULL};
            fc_cli_cmd = &commands[i];
            return commands[i].fn(2, argv);
        }
    }
    fprintf(stderr, "fsdpconv: help: unknown command '%s'\n", name);
    print_usage(stderr);
    return FC_EXIT_USAGE;
}

void fc_main_print_usage(FILE *f)
{
    print_usage(f);
}

static void fc_on_signal(int sig)
{
    (void)sig;
    fc_request_cancel();
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"verbose", no_argument, NULL, 'v'},
        {"quiet", no_argument, NULL, 'q'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    /* A file-size limit (ulimit -f) must fail the write, not kill us before cleanup. */
    signal(SIGXFSZ, SIG_IGN);
    /*
     * Ctrl-C and SIGTERM: before any output byte, exit at once with "nothing was written";
     * while writing, stop at the next slab so that the failure path removes the partial
     * output (convert/cancel.c).
     */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = fc_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* The --io default, for scripts and test suites that run every command one way. */
    const char *io = getenv("FSDPCONV_IO");
    if (io != NULL && fc_cli_io_mode("$FSDPCONV_IO", io) < 0) {
        fprintf(stderr, "fsdpconv: %s\n", fc_error_last());
        return FC_EXIT_USAGE;
    }
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+vqh", longopts, NULL)) != -1) {
        switch (c) {
        case 'v': fc_cli_verbosity++; break;
        case 'q': fc_cli_verbosity = -1; break;
        case 'V': printf("fsdpconv %s\n", FC_VERSION); return FC_EXIT_OK;
        case 'h': print_usage(stdout); return FC_EXIT_OK;
        default:
            fprintf(stderr, "fsdpconv: unknown option '%s'\n", argv[optind - 1]);
            print_usage(stderr);
            return FC_EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        print_usage(stderr);
        return FC_EXIT_USAGE;
    }
    const char *name = argv[optind];
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(commands[i].name, name) == 0) {
            fc_cli_cmd = &commands[i];
            const int rc = commands[i].fn(argc - optind, argv + optind);
            fc_cli_io_report();
            return rc;
        }
    }
    fprintf(stderr, "fsdpconv: '%s' is not a fsdpconv command. See 'fsdpconv --help'.\n", name);
    return FC_EXIT_USAGE;
}
