#include "fc_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static _Thread_local char fc_error_msg[1024];

int fc_error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fc_error_msg, sizeof(fc_error_msg), fmt, ap);
    va_end(ap);
    return code;
}

const char *fc_error_last(void)
{
    return fc_error_msg;
}

void fc_error_clear(void)
{
    fc_error_msg[0] = '\0';
}

const char *fc_err_name(int code)
{
    switch (code) {
    case FC_OK: return "FC_OK";
    case FC_ERROR: return "FC_ERROR";
    case FC_ENOMEM: return "FC_ENOMEM";
    case FC_EIO: return "FC_EIO";
    case FC_ENOENT: return "FC_ENOENT";
    case FC_EFORMAT: return "FC_EFORMAT";
    case FC_ECORRUPT: return "FC_ECORRUPT";
    case FC_EINVAL: return "FC_EINVAL";
    case FC_ECUDA: return "FC_ECUDA";
    case FC_ENCCL: return "FC_ENCCL";
    case FC_ENOTSUP: return "FC_ENOTSUP";
    default: return "FC_UNKNOWN";
    }
}

int fc_error_trace(int code, const char *file, int line)
{
    /* Read the environment each time: cheap, and only on the error path. */
    const char *env = getenv("FSDPCONV_DEBUG");
    if (env != NULL && env[0] != '\0' && env[0] != '0')
        fprintf(stderr, "fsdpconv: trace: %s:%d -> %s\n", file, line, fc_err_name(code));
    return code;
}
