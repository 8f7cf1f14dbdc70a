#include "cli.h"

#include <stdarg.h>

#include "fc_error.h"

int fc_cli_verbosity;

int fc_cli_exit_code(int rc)
{
    switch (rc) {
    case FC_OK: return FC_EXIT_OK;
    case FC_EINVAL: return FC_EXIT_USAGE;
    case FC_ECORRUPT:
    case FC_EFORMAT: return FC_EXIT_INPUT;
    default: return FC_EXIT_FAILURE;
    }
}

int fc_cli_report(int rc)
{
    if (rc < 0) {
        const char *msg = fc_error_last();
        fprintf(stderr, "fsdpconv: %s\n", msg[0] != '\0' ? msg : fc_err_name(rc));
    }
    return fc_cli_exit_code(rc);
}

int fc_cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fsdpconv: %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s", usage);
    return FC_EXIT_USAGE;
}

void fc_cli_note(const char *fmt, ...)
{
    va_list ap;
    if (fc_cli_verbosity < 0)
        return;
    fputs("fsdpconv: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
