/*
 * fc_regex.c - PCRE2 behind the small API of fc_regex.h.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "fc_regex.h"

#include <pcre2.h>
#include <stdint.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"

/* The longest key a replacement may make: far beyond any real key, yet small enough that
 * rules doubling a key's length stop within a few steps, naming the rule. */
#define FC_REGEX_OUT_CAP ((size_t)64 << 10)

/*
 * Limits, so that no pattern in a rule file or option can hang or exhaust
 * memory (keys are a few hundred bytes; sane patterns stay far below these):
 * the pattern's length, its compiled size, and per match PCRE2's backtracking
 * step count, its backtracking depth and its heap (KiB).
 */
#define FC_REGEX_PATTERN_MAX    ((size_t)8192)
#define FC_REGEX_CODE_MAX       ((size_t)1 << 20)
#define FC_REGEX_MATCH_LIMIT    1000000u
#define FC_REGEX_DEPTH_LIMIT    100000u
#define FC_REGEX_HEAP_LIMIT_KIB 65536u

struct fc_regex {
    pcre2_code *code;
    pcre2_match_context *mctx;
    uint32_t ngroups;
    char *pattern; /* for messages */
    char *where;   /* the rule: "--tp", "rules.txt:3" */
};

static int fc_regex_compile_error(const char *pattern, const char *where, int err, size_t at)
{
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return fc_error_set(FC_EINVAL, "%s: invalid regular expression '%s': %s at offset %zu", where,
                        pattern, (const char *)msg, at);
}

int fc_regex_compile(struct fc_regex **out, const char *pattern, const char *where)
{
    int err;
    PCRE2_SIZE at;
    *out = NULL;
    const size_t len = strlen(pattern);
    if (len > FC_REGEX_PATTERN_MAX)
        return fc_error_set(FC_EINVAL,
                            "%s: regular expression of %zu bytes is longer than the %zu allowed",
                            where, len, FC_REGEX_PATTERN_MAX);
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF, &err, &at, NULL);
    if (code == NULL)
        return fc_regex_compile_error(pattern, where, err, (size_t)at);
    size_t size = 0;
    (void)pcre2_pattern_info(code, PCRE2_INFO_SIZE, &size);
    if (size > FC_REGEX_CODE_MAX) {
        pcre2_code_free(code);
        return fc_error_set(FC_EINVAL,
                            "%s: regular expression '%s' compiles to %zu bytes, over the %zu "
                            "allowed",
                            where, pattern, size, FC_REGEX_CODE_MAX);
    }
    struct fc_regex *re = fc_calloc(1, sizeof(*re));
    if (re == NULL || (re->mctx = pcre2_match_context_create(NULL)) == NULL ||
        (re->pattern = fc_strdup(pattern)) == NULL || (re->where = fc_strdup(where)) == NULL) {
        pcre2_code_free(code);
        fc_regex_free(re);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    re->code = code;
    pcre2_set_match_limit(re->mctx, FC_REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(re->mctx, FC_REGEX_DEPTH_LIMIT);
    pcre2_set_heap_limit(re->mctx, FC_REGEX_HEAP_LIMIT_KIB);
    (void)pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &re->ngroups);
    *out = re;
    return FC_OK;
}

const char *fc_regex_pattern(const struct fc_regex *re)
{
    return re->pattern;
}

const char *fc_regex_where(const struct fc_regex *re)
{
    return re->where;
}

void fc_regex_free(struct fc_regex *re)
{
    if (re == NULL)
        return;
    pcre2_code_free(re->code);
    pcre2_match_context_free(re->mctx);
    fc_free(re->pattern);
    fc_free(re->where);
    fc_free(re);
}

/* Match re in s; on a match *md holds the groups.  1 match, 0 none, < 0 error. */
static int fc_regex_exec(const struct fc_regex *re, const char *s, pcre2_match_data **md)
{
    *md = pcre2_match_data_create_from_pattern(re->code, NULL);
    if (*md == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    const int rc = pcre2_match(re->code, (PCRE2_SPTR)s, strlen(s), 0, 0, *md, re->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc >= 0)
        return 1;
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof(msg));
    const int limit =
        rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT;
    return fc_error_set(FC_EINVAL, "%s: regular expression '%s' on key '%s': %s%s", re->where,
                        re->pattern, s, (const char *)msg,
                        limit ? " (the pattern backtracks too much; simplify it)" : "");
}

int fc_regex_search(const struct fc_regex *re, const char *s)
{
    pcre2_match_data *md;
    const int rc = fc_regex_exec(re, s, &md);
    pcre2_match_data_free(md);
    return rc;
}

/*
 * The group a reference at p names ("\3", "\g<3>", "\g<name>"): its number
 * in *group and the reference's length in *len.  0 when p is no reference.
 */
static int fc_repl_ref(const struct fc_regex *re, const char *p, int *group, size_t *len)
{
    if (p[0] != '\\')
        return 0;
    if (p[1] >= '0' && p[1] <= '9') {
        *group = p[1] - '0';
        *len = 2;
        return 1;
    }
    if (p[1] != 'g' || p[2] != '<')
        return 0;
    const char *end = strchr(p + 3, '>');
    if (end == NULL || end == p + 3)
        return -1;
    char name[128];
    const size_t n = (size_t)(end - (p + 3));
    if (n >= sizeof(name))
        return -1;
    memcpy(name, p + 3, n);
    name[n] = '\0';
    *len = n + 4;
    if (strspn(name, "0123456789") == n) {
        int g = 0;
        for (size_t i = 0; i < n && g <= 99; i++)
            g = g * 10 + (name[i] - '0');
        *group = g;
    } else {
        const int g = pcre2_substring_number_from_name(re->code, (PCRE2_SPTR)name);
        *group = g < 0 ? -1 : g;
    }
    return 1;
}

int fc_regex_check_repl(const struct fc_regex *re, const char *repl, const char *where)
{
    for (const char *p = repl; *p != '\0'; p++) {
        int g = 0;
        size_t len = 0;
        if (p[0] == '\\' && p[1] == '\\') {
            p++;
            continue;
        }
        const int r = fc_repl_ref(re, p, &g, &len);
        if (r < 0 || (r == 1 && (g < 0 || (uint32_t)g > re->ngroups)))
            return fc_error_set(FC_EINVAL,
                                "%s: the replacement '%s' refers to a group the pattern does not "
                                "have",
                                where, repl);
        if (r == 1)
            p += len - 1;
    }
    return FC_OK;
}

int fc_regex_unused_group(const struct fc_regex *re, const char *repl, const char *where,
                          int *group)
{
    uint32_t used = 0; /* bit g: repl names group g (at most 31 groups can be told apart) */
    FC_TRY(fc_regex_check_repl(re, repl, where));
    for (const char *p = repl; *p != '\0'; p++) {
        int g = 0;
        size_t len = 0;
        if (p[0] == '\\' && p[1] == '\\') {
            p++;
        } else if (fc_repl_ref(re, p, &g, &len) == 1) {
            used |= g < 32 ? (uint32_t)1 << g : 0;
            p += len - 1;
        }
    }
    *group = 0;
    for (uint32_t g = 1; g <= re->ngroups && g < 32; g++) {
        if (used & ((uint32_t)1 << g))
            continue;
        if (*group != 0)
            return fc_error_set(FC_EINVAL,
                                "%s: groups %d and %u of '%s' are both left out of '%s'; exactly "
                                "one group (the index) must be",
                                where, *group, g, re->pattern, repl);
        *group = (int)g;
    }
    if (*group == 0)
        return fc_error_set(FC_EINVAL,
                            "%s: '%s' has no group that '%s' leaves out (the index, e.g. "
                            "experts\\.(\\d+)\\.)",
                            where, re->pattern, repl);
    return FC_OK;
}

int fc_regex_group_text(const struct fc_regex *re, const char *s, int group, char **out)
{
    pcre2_match_data *md;
    *out = NULL;
    const int rc = fc_regex_exec(re, s, &md);
    if (rc <= 0) {
        pcre2_match_data_free(md);
        return rc;
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    const uint32_t npairs = pcre2_get_ovector_count(md);
    const int set = group >= 0 && (uint32_t)group < npairs && ov[2 * group] != PCRE2_UNSET;
    *out = set ? fc_strndup(s + ov[2 * group], ov[2 * group + 1] - ov[2 * group]) : fc_strdup("");
    pcre2_match_data_free(md);
    return *out == NULL ? fc_error_set(FC_ENOMEM, "out of memory") : 1;
}

int fc_regex_subst(const struct fc_regex *re, const char *repl, const char *s, char **out)
{
    pcre2_match_data *md;
    struct fc_buf b = FC_BUF_INIT(FC_REGEX_OUT_CAP);
    *out = NULL;
    int rc = fc_regex_exec(re, s, &md);
    if (rc <= 0) {
        pcre2_match_data_free(md);
        return rc;
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    const uint32_t npairs = pcre2_get_ovector_count(md);
    rc = fc_buf_append(&b, s, ov[0]);
    for (const char *p = repl; rc == FC_OK && *p != '\0'; p++) {
        int g = 0;
        size_t len = 0;
        if (p[0] == '\\' && p[1] == '\\') {
            rc = fc_buf_putc(&b, '\\');
            p++;
        } else if (fc_repl_ref(re, p, &g, &len) == 1) {
            /* Unset or unknown groups expand to nothing (checked up front by fc_regex_check_repl).
             */
            if (g >= 0 && (uint32_t)g < npairs && ov[2 * g] != PCRE2_UNSET)
                rc = fc_buf_append(&b, s + ov[2 * g], ov[2 * g + 1] - ov[2 * g]);
            p += len - 1;
        } else {
            rc = fc_buf_putc(&b, (unsigned char)*p);
        }
    }
    if (rc == FC_OK)
        rc = fc_buf_puts(&b, s + ov[1]);
    if (rc == FC_OK)
        rc = fc_buf_putc(&b, '\0');
    pcre2_match_data_free(md);
    if (rc < 0) {
        const int over = rc == FC_ENOMEM; /* only the buffer fails here: its cap */
        fc_buf_release(&b);
        if (over)
            return fc_error_set(FC_EINVAL,
                                "%s: the new name of '%.80s%s' would be longer than %zu bytes",
                                re->where, s, strlen(s) > 80 ? "..." : "", FC_REGEX_OUT_CAP);
        return rc;
    }
    *out = (char *)fc_buf_detach(&b, NULL);
    return 1;
}
