/*
 * fc_error.c - the per-thread error message of fc_error.h, written once where
 * a failure is found, with input-derived bytes escaped so it stays one line.
 */
#include "fc_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char fc_error_msg[1024];

size_t fc_utf8_seq_len(const unsigned char *p, size_t n, int surrogates)
{
    const unsigned c = p[0];
    unsigned lo = 0x80, hi = 0xbf;
    size_t len;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed && !surrogates)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if ((p[k] & 0xc0) != 0x80)
            return 0;
    return len;
}

size_t fc_utf8_invalid_at(const unsigned char *p, size_t n, int surrogates)
{
    size_t i = 0;
    while (i < n) {
        const size_t len = fc_utf8_seq_len(p + i, n - i, surrogates);
        if (len == 0)
            return i;
        i += len;
    }
    return n;
}

/*
 * Copy text into dst (cap bytes, NUL-terminated, cut at a whole character)
 * with control bytes and bytes that are not UTF-8 as \xNN: names from inputs
 * and rules can hold anything, and a message stays one printable line.
 */
static void fc_error_escape(char *dst, size_t cap, const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    const size_t n = strlen(text);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t len = p[i] < 0x20 || p[i] == 0x7f ? 0 : fc_utf8_seq_len(p + i, n - i, 0);
        if (len == 0) {
            if (o + 4 >= cap)
                break;
            snprintf(dst + o, cap - o, "\\x%02x", p[i]);
            o += 4;
            i++;
            continue;
        }
        if (o + len >= cap)
            break;
        memcpy(dst + o, p + i, len);
        o += len;
        i += len;
    }
    dst[o] = '\0';
}

int fc_error_set(int code, const char *fmt, ...)
{
    char text[sizeof(fc_error_msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    fc_error_escape(fc_error_msg, sizeof(fc_error_msg), text);
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
