/*
 * tp.c - the tensor-parallel plan (--tp, --tp-plan): rules parsed from the
 * command line or a plan file, matched with the one regex engine of every key
 * option (fc_regex, PCRE2 under its limits), so "\d+" and "(?:...)" mean what
 * they mean in Python's re.
 */
#include "tp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_regex.h"

#define FC_TP_FILE_CAP ((size_t)1 << 20)

/* "replicate" -> -1, "0".."63" -> the dim; FC_EINVAL otherwise. */
static int fc_tp__parse_dim(const char *s, const char *where, const char *pattern, int *out)
{
    if (strcmp(s, "replicate") == 0) {
        *out = -1;
        return FC_OK;
    }
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v > 63)
        return fc_error_set(FC_EINVAL,
                            "%s: tp rule '%s': dim '%s' is neither a tensor dim nor 'replicate'",
                            where, pattern, s);
    *out = (int)v;
    return FC_OK;
}

/* Adds a rule from its parts (pattern and dim text are copied). */
static int fc_tp__add(struct fc_tp_plan *p, const char *pattern, size_t plen, const char *dim,
                      const char *where)
{
    int d = -1;
    char *pat = fc_malloc(plen + 1);
    if (pat == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    memcpy(pat, pattern, plen);
    pat[plen] = '\0';
    int rc = FC_OK;
    if (plen == 0) {
        rc = fc_error_set(FC_EINVAL, "%s: tp rule needs a regex before the dim", where);
        goto done;
    }
    FC_TRY_GOTO(fc_tp__parse_dim(dim, where, pat, &d), rc, done);
    struct fc_tp_rule *a = fc_reallocarray(p->rules, p->n + 1, sizeof(*a));
    if (a == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    p->rules = a;
    struct fc_tp_rule *r = &a[p->n];
    memset(r, 0, sizeof(*r));
    FC_TRY_GOTO(fc_regex_compile(&r->re, pat, where), rc, done);
    r->dim = d;
    p->n++;
done: /* the regex keeps its own copy of the pattern */
    fc_free(pat);
    return rc;
}

int fc_tp_plan_add(struct fc_tp_plan *p, const char *spec, const char *where)
{
    const char *eq = strrchr(spec, '=');
    if (eq == NULL)
        return fc_error_set(FC_EINVAL, "%s: tp rule '%s': expected REGEX=DIM", where, spec);
    return fc_tp__add(p, spec, (size_t)(eq - spec), eq + 1, where);
}

/* One "REGEX DIM" line of a plan file: split at the last run of blanks. */
static int fc_tp__plan_line(void *ctx, char *line, const char *where)
{
    char *sp = line + strlen(line);
    while (sp > line && sp[-1] != ' ' && sp[-1] != '\t')
        sp--;
    char *end = sp;
    while (end > line && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (end == line)
        return fc_error_set(FC_EINVAL, "%s: tp plan line '%s': expected REGEX DIM", where, line);
    return fc_tp__add(ctx, line, (size_t)(end - line), sp, where);
}

int fc_tp_plan_load(struct fc_tp_plan *p, const char *path)
{
    return fc_file_each_line(path, FC_TP_FILE_CAP, fc_tp__plan_line, p);
}

int fc_tp_plan_parse(struct fc_tp_plan *p, char *text, size_t size, const char *name)
{
    return fc_text_each_line(text, size, name, fc_tp__plan_line, p);
}

void fc_tp_plan_release(struct fc_tp_plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        fc_regex_free(p->rules[i].re);
    }
    fc_free(p->rules);
    p->rules = NULL;
    p->n = 0;
}

int fc_tp_plan_dim(struct fc_tp_plan *p, const char *key, int ndim, int *dim_out)
{
    const struct fc_tp_rule *first = NULL;
    for (size_t i = 0; i < p->n; i++) {
        struct fc_tp_rule *r = &p->rules[i];
        const int m = fc_regex_search(r->re, key);
        FC_TRY(m);
        if (m == 0)
            continue;
        r->hits++;
        if (r->dim >= ndim)
            return fc_error_set(FC_EINVAL,
                                "%s: tp rule '%s' shards dim %d of '%s', which has %d dims",
                                fc_regex_where(r->re), fc_regex_pattern(r->re), r->dim, key, ndim);
        if (first != NULL && first->dim != r->dim) {
            char a[16], b[16];
            snprintf(a, sizeof(a), r->dim < 0 ? "replicate" : "dim %d", r->dim);
            snprintf(b, sizeof(b), first->dim < 0 ? "replicate" : "dim %d", first->dim);
            return fc_error_set(FC_EINVAL,
                                "%s: tp rule '%s' (%s) disagrees with %s: '%s' (%s) on '%s'",
                                fc_regex_where(r->re), fc_regex_pattern(r->re), a,
                                fc_regex_where(first->re), fc_regex_pattern(first->re), b, key);
        }
        first = first != NULL ? first : r;
    }
    *dim_out = first != NULL ? first->dim : -1;
    return first != NULL;
}

int fc_tp_plan_check_used(const struct fc_tp_plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->rules[i].hits == 0)
            return fc_error_set(FC_EINVAL, "%s: tp rule '%s' matches no key",
                                fc_regex_where(p->rules[i].re), fc_regex_pattern(p->rules[i].re));
    return FC_OK;
}
