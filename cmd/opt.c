#include "opt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fc_opt_bad(const char *cmd, const char *opt, const char *s, const char *why)
{
    fprintf(stderr, "fsdpconv: %s: invalid value for %s: '%s' (%s)\n", cmd, opt, s, why);
    return -1;
}

int fc_opt_int(const char *cmd, const char *opt, const char *s, long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (s[0] == '\0' || end == NULL || *end != '\0' || errno != 0)
        return fc_opt_bad(cmd, opt, s, "not an integer");
    if (v < min || v > max) {
        char why[96];
        snprintf(why, sizeof(why), "must be between %ld and %ld", min, max);
        if (max == 2147483647L)
            snprintf(why, sizeof(why), "must be >= %ld", min);
        return fc_opt_bad(cmd, opt, s, why);
    }
    *out = v;
    return 0;
}

int fc_opt_size(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    const double v = strtod(s, &end);
    if (s[0] == '\0' || end == s || errno != 0 || !(v >= 0))
        return fc_opt_bad(cmd, opt, s, "expected a size such as 512M or 2GiB");
    double mul = 1;
    switch (*end) {
    case '\0': break;
    case 'k':
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default: return fc_opt_bad(cmd, opt, s, "unknown size suffix");
    }
    if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0 || strcmp(end, "b") == 0)
        end += strlen(end);
    if (*end != '\0')
        return fc_opt_bad(cmd, opt, s, "unknown size suffix");
    const double bytes = v * mul;
    if (bytes > 1.8e19)
        return fc_opt_bad(cmd, opt, s, "too large");
    *out = (uint64_t)bytes;
    return 0;
}

int fc_opt_float_dtype(const char *cmd, const char *opt, const char *s, fc_dtype *out)
{
    const fc_dtype d = fc_dtype_parse_user(s);
    const struct fc_dtype_info *info = fc_dtype_info(d);
    if (info == NULL || !info->is_floating)
        return fc_opt_bad(cmd, opt, s, "expected float32, bfloat16, float16 or float64");
    *out = d;
    return 0;
}

int fc_opt_mesh(const char *cmd, const char *opt, const char *s, int *replicate, int *shard)
{
    long r = -1, sh = -1;
    const char *p = s;
    while (*p != '\0') {
        const char *eq = strchr(p, '=');
        if (eq == NULL)
            return fc_opt_bad(cmd, opt, s, "expected replicate=R,shard=S");
        const char *comma = strchr(eq, ',');
        const size_t vlen = comma != NULL ? (size_t)(comma - eq - 1) : strlen(eq + 1);
        char val[32];
        if (vlen == 0 || vlen >= sizeof(val))
            return fc_opt_bad(cmd, opt, s, "expected replicate=R,shard=S");
        memcpy(val, eq + 1, vlen);
        val[vlen] = '\0';
        char *end = NULL;
        errno = 0;
        const long v = strtol(val, &end, 10);
        if (*end != '\0' || errno != 0 || v < 1 || v > 1000000)
            return fc_opt_bad(cmd, opt, s, "mesh sizes must be integers >= 1");
        if ((size_t)(eq - p) == 9 && strncmp(p, "replicate", 9) == 0)
            r = v;
        else if ((size_t)(eq - p) == 5 && strncmp(p, "shard", 5) == 0)
            sh = v;
        else
            return fc_opt_bad(cmd, opt, s, "unknown mesh dimension; expected replicate and shard");
        p = comma != NULL ? comma + 1 : eq + 1 + vlen;
    }
    if (r < 1 || sh < 1)
        return fc_opt_bad(cmd, opt, s, "expected replicate=R,shard=S");
    *replicate = (int)r;
    *shard = (int)sh;
    return 0;
}

int fc_opt_compress(const char *cmd, const char *opt, const char *s, int *level)
{
    long v = 3;
    if (strncmp(s, "zstd", 4) != 0 || (s[4] != '\0' && s[4] != ':'))
        return fc_opt_bad(cmd, opt, s, "expected zstd or zstd:<level>");
    if (s[4] == ':') {
        char *end = NULL;
        errno = 0;
        v = strtol(s + 5, &end, 10);
        if (s[5] == '\0' || *end != '\0' || errno != 0 || v < 1 || v > 22)
            return fc_opt_bad(cmd, opt, s, "zstd level must be between 1 and 22");
    }
    *level = (int)v;
    return 0;
}

int fc_opt_engine(const char *cmd, const char *opt, const char *s, int *engine)
{
    if (strcmp(s, "auto") == 0)
        *engine = 0;
    else if (strcmp(s, "cpu") == 0)
        *engine = 1;
    else if (strcmp(s, "cuda") == 0)
        *engine = 2;
    else
        return fc_opt_bad(cmd, opt, s, "expected cpu, cuda or auto");
    return 0;
}
