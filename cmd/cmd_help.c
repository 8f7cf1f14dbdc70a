/*
 * cmd_help.c - `fsdpconv help [<command>]`: the command list, or the
 * command's own --help (main.c runs it), so the two never differ.
 */
#include <stdio.h>

#include "cli.h"
#include "commands.h"

int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        fc_main_print_usage(stdout);
        return FC_EXIT_OK;
    }
    return fc_main_help_for(argv[1]);
}
