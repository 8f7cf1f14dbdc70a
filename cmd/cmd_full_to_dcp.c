/*
 * cmd_full_to_dcp.c - placeholder entry until the converter lands.
 */
#include <stdio.h>

#include "cli.h"
#include "commands.h"

int cmd_full_to_dcp(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fputs("fsdpconv: full-to-dcp: not built yet\n", stderr);
    return FC_EXIT_FAILURE;
}
