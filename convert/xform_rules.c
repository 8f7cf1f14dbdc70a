/*
 * xform_rules.c - parsing transform rules from flags and --rules files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_io.h"
#include "xform.h"

#define FC_RULES_FILE_CAP ((size_t)1 << 20)

struct fc_rule_name {
    const char *name;
    enum fc_rule_kind kind;
    const char *form; /* NULL: one plain argument; else split at '=' (the message's form) */
    int split_last;   /* split at the last '=' (a regex never needs one; a key may) */
};

static const struct fc_rule_name fc_rule_names[] = {
    {"select", FC_RULE_SELECT, NULL, 0},
    {"strip-prefix", FC_RULE_STRIP_PREFIX, NULL, 0},
    {"add-prefix", FC_RULE_ADD_PREFIX, NULL, 0},
    {"rename", FC_RULE_RENAME, "FROM=TO", 1},
    {"drop", FC_RULE_DROP, NULL, 0},
    {"copy", FC_RULE_COPY, "FROM=TO", 1},
    {"conv2d-to-linear", FC_RULE_CONV2D, NULL, 0},
    {"tie", FC_RULE_TIE, "DST=SRC", 0},
    {"dtype", FC_RULE_DTYPE, NULL, 0},
    {"resize-rows", FC_RULE_RESIZE, "KEY=N[:zero|mean]", 1},
    {"strip-wrappers", FC_RULE_STRIP_WRAPPERS, NULL, 0},
    {"replicate", FC_RULE_REPLICATE, NULL, 0},
    {"optim-skip", FC_RULE_OPTIM_SKIP, NULL, 0},
};

static void fc_rule_release(struct fc_rule *r)
{
    fc_free(r->label);
    fc_free(r->op);
    fc_free(r->arg);
    fc_free(r->a);
    fc_free(r->b);
    fc_regex_free(r->re);
}

void fc_xform_rules_release(struct fc_xform_rules *r)
{
    for (size_t i = 0; i < r->n; i++)
        fc_rule_release(&r->v[i]);
    fc_free(r->v);
    memset(r, 0, sizeof(*r));
}

/*
 * Split "LEFT=RIGHT": FROM=TO and KEY=N at the last '=' (a replacement or a
 * count never holds one; a lookahead "(?=" may), DST=SRC at the first.
 */
static int fc_rule_split(struct fc_rule *rule, const char *arg, const struct fc_rule_name *nm)
{
    const char *eq = nm->split_last ? strrchr(arg, '=') : strchr(arg, '=');
    if (eq == NULL || eq == arg)
        return fc_error_set(FC_EINVAL, "%s: needs the form %s", rule->label, nm->form);
    rule->a = fc_strndup(arg, (size_t)(eq - arg));
    rule->b = fc_strdup(eq + 1);
    if (rule->a == NULL || rule->b == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    return FC_OK;
}

/* "N[:zero|mean]" of --resize-rows. */
static int fc_rule_rows(struct fc_rule *rule)
{
    char *end = NULL;
    const char *s = rule->b;
    rule->fill = FC_FILL_MEAN;
    if (*s < '0' || *s > '9')
        goto bad;
    const long long n = strtoll(s, &end, 10);
    if (n < 0 || n > ((long long)1 << 48))
        goto bad;
    rule->rows = n;
    if (*end == '\0')
        return FC_OK;
    if (strcmp(end, ":zero") == 0)
        rule->fill = FC_FILL_ZERO;
    else if (strcmp(end, ":mean") != 0)
        goto bad;
    return FC_OK;
bad:
    return fc_error_set(FC_EINVAL, "%s: '%s' is no row count (expected N, N:zero or N:mean)",
                        rule->label, s);
}

static int fc_rule_init(struct fc_rule *rule, const struct fc_rule_name *nm, const char *arg,
                        const char *where)
{
    const size_t n = strlen(where) + strlen(arg) + 8;
    rule->kind = nm->kind;
    rule->label = fc_malloc(n);
    rule->op = fc_strdup(nm->name);
    rule->arg = fc_strdup(arg);
    if (rule->label == NULL || rule->op == NULL || rule->arg == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    /* Flags are told apart by their argument; file rules by their line. */
    if (strncmp(where, "--", 2) == 0 && nm->kind != FC_RULE_STRIP_WRAPPERS)
        snprintf(rule->label, n, "%s '%s'", where, arg);
    else
        snprintf(rule->label, n, "%s", where);
    if (nm->form != NULL) {
        FC_TRY(fc_rule_split(rule, arg, nm));
    } else {
        rule->a = fc_strdup(arg);
        if (rule->a == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
    }
    switch (nm->kind) {
    case FC_RULE_RENAME:
    case FC_RULE_COPY:
        FC_TRY(fc_regex_compile(&rule->re, rule->a, rule->label));
        return fc_regex_check_repl(rule->re, rule->b, rule->label);
    case FC_RULE_DROP:
    case FC_RULE_REPLICATE:
    case FC_RULE_OPTIM_SKIP: return fc_regex_compile(&rule->re, rule->a, rule->label);
    case FC_RULE_DTYPE: {
        rule->dtype = fc_dtype_parse_user(arg);
        const struct fc_dtype_info *info = fc_dtype_info(rule->dtype);
        if (info == NULL || !info->is_floating)
            return fc_error_set(FC_EINVAL,
                                "%s: invalid dtype '%s' (expected float32, bfloat16, float16 or "
                                "float64)",
                                rule->label, arg);
        return FC_OK;
    }
    case FC_RULE_RESIZE: return fc_rule_rows(rule);
    case FC_RULE_SELECT:
    case FC_RULE_STRIP_PREFIX:
    case FC_RULE_ADD_PREFIX:
        if (arg[0] == '\0')
            return fc_error_set(FC_EINVAL, "%s: needs a non-empty prefix", rule->label);
        return FC_OK;
    case FC_RULE_CONV2D:
    case FC_RULE_TIE:
    case FC_RULE_STRIP_WRAPPERS: return FC_OK;
    }
    return FC_OK;
}

int fc_xform_rules_add(struct fc_xform_rules *r, const char *op, const char *arg, const char *where)
{
    const struct fc_rule_name *nm = NULL;
    for (size_t i = 0; i < sizeof(fc_rule_names) / sizeof(fc_rule_names[0]); i++)
        if (strcmp(op, fc_rule_names[i].name) == 0)
            nm = &fc_rule_names[i];
    if (nm == NULL)
        return fc_error_set(FC_EINVAL, "%s: unknown rule '%s'", where, op);
    struct fc_rule *v = fc_reallocarray(r->v, r->n + 1, sizeof(*v));
    if (v == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    r->v = v;
    memset(&v[r->n], 0, sizeof(v[r->n]));
    const int rc = fc_rule_init(&v[r->n], nm, arg != NULL ? arg : "", where);
    if (rc < 0) {
        fc_rule_release(&v[r->n]);
        return rc;
    }
    r->n++;
    return FC_OK;
}

/* One "op arg" line of a rules file (trimmed, comments cut by fc_text_each_line). */
static int fc_xform_rules_line(void *ctx, char *line, const char *where)
{
    char *arg = line + strcspn(line, " \t");
    if (*arg != '\0') {
        *arg++ = '\0';
        arg += strspn(arg, " \t");
    }
    if (*arg == '\0' && strcmp(line, "strip-wrappers") != 0)
        return fc_error_set(FC_EINVAL, "%s: rule '%s' needs an argument", where, line);
    return fc_xform_rules_add(ctx, line, arg, where);
}

int fc_xform_rules_parse(struct fc_xform_rules *r, char *text, size_t size, const char *name)
{
    return fc_text_each_line(text, size, name, fc_xform_rules_line, r);
}

int fc_xform_rules_load(struct fc_xform_rules *r, const char *path)
{
    return fc_file_each_line(path, FC_RULES_FILE_CAP, fc_xform_rules_line, r);
}

int fc_xform_rules_describe(const struct fc_xform_rules *r, struct fc_buf *out)
{
    FC_TRY(fc_buf_printf(out, "pipeline: %zu rule%s, applied in this order\n", r->n,
                         r->n == 1 ? "" : "s"));
    for (size_t i = 0; i < r->n; i++) {
        const struct fc_rule *ru = &r->v[i];
        const char *origin = strncmp(ru->label, "--", 2) == 0 ? "flag" : ru->label;
        if (ru->kind == FC_RULE_STRIP_WRAPPERS)
            FC_TRY(fc_buf_printf(out, "rule %zu  %s  (%s)\n", i + 1, ru->op, origin));
        else
            FC_TRY(fc_buf_printf(out, "rule %zu  %s %s  (%s)\n", i + 1, ru->op, ru->arg, origin));
    }
    return FC_OK;
}

int fc_xform_rules_have(const struct fc_xform_rules *r, enum fc_rule_kind kind)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].kind == kind)
            return 1;
    return 0;
}
