/*
 * xform_rules.c - transform rules from flags and --rules files: the table of
 * rule kinds (name, argument form, parser, step in xform.c), the file reader and the
 * pipeline's description.  Rules that append an op come from the op table
 * (ops.c), so a new op needs nothing here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_io.h"
#include "xform.h"

#define FC_RULES_FILE_CAP ((size_t)1 << 20)

/* SELECT, STRIP_PREFIX, ADD_PREFIX: a prefix of at least one character. */
static int fc_parse_prefix(struct fc_rule *rule)
{
    if (rule->a[0] == '\0')
        return fc_error_set(FC_EINVAL, "%s: needs a non-empty prefix", rule->label);
    return FC_OK;
}

/* RENAME, COPY: a regex and a replacement whose groups it has. */
static int fc_parse_subst(struct fc_rule *rule)
{
    FC_TRY(fc_regex_compile(&rule->re, rule->a, rule->label));
    return fc_regex_check_repl(rule->re, rule->b, rule->label);
}

/* DROP, REPLICATE, OPTIM_SKIP: a regex. */
static int fc_parse_regex(struct fc_rule *rule)
{
    return fc_regex_compile(&rule->re, rule->a, rule->label);
}

/* TIE, STRIP_WRAPPERS: nothing beyond the split. */
static int fc_parse_plain(struct fc_rule *rule)
{
    (void)rule;
    return FC_OK;
}

/* OP: the op's own parser, on the argument or its right of '='. */
static int fc_parse_op(struct fc_rule *rule)
{
    const struct fc_op_def *def = fc_op_def(rule->append.kind);
    return def->parse(&rule->append, def->form != NULL ? rule->b : rule->a, rule->label);
}

struct fc_rule_name {
    const char *name;
    enum fc_rule_kind kind;
    const char *form; /* NULL: one plain argument; else split at '=' (the message's form) */
    int split_last;   /* split at the last '=' (a regex never needs one; a key may) */
    int (*parse)(struct fc_rule *rule);
    fc_rule_step_fn step;
};

static const struct fc_rule_name fc_rule_names[] = {
    {"select", FC_RULE_SELECT, NULL, 0, fc_parse_prefix, fc_step_select},
    {"strip-prefix", FC_RULE_STRIP_PREFIX, NULL, 0, fc_parse_prefix, fc_step_rekey},
    {"add-prefix", FC_RULE_ADD_PREFIX, NULL, 0, fc_parse_prefix, fc_step_add_prefix},
    {"rename", FC_RULE_RENAME, "FROM=TO", 1, fc_parse_subst, fc_step_rekey},
    {"drop", FC_RULE_DROP, NULL, 0, fc_parse_regex, fc_step_drop},
    {"copy", FC_RULE_COPY, "FROM=TO", 1, fc_parse_subst, fc_step_copy},
    {"tie", FC_RULE_TIE, "DST=SRC", 0, fc_parse_plain, fc_step_tie},
    {"strip-wrappers", FC_RULE_STRIP_WRAPPERS, NULL, 0, fc_parse_plain, fc_step_rekey},
    {"replicate", FC_RULE_REPLICATE, NULL, 0, fc_parse_regex, fc_step_mark},
    {"optim-skip", FC_RULE_OPTIM_SKIP, NULL, 0, fc_parse_regex, fc_step_mark},
    {"stack", FC_RULE_STACK, "REGEX=DST", 1, fc_parse_stack, fc_step_stack},
    {"concat", FC_RULE_CONCAT, "REGEX,B[,C...]=DST:DIM", 1, fc_parse_concat, fc_step_concat},
    {"split", FC_RULE_SPLIT, "REGEX=A,B[,C...]:DIM[:N,N...]", 1, fc_parse_split, fc_step_split},
    {"unstack", FC_RULE_UNSTACK, "REGEX=PATTERN", 1, fc_parse_unstack, fc_step_unstack},
};

static void fc_rule_release(struct fc_rule *r)
{
    fc_free(r->label);
    fc_free(r->op);
    fc_free(r->arg);
    fc_free(r->a);
    fc_free(r->b);
    fc_regex_free(r->re);
    fc_layout_args_free(r->layout);
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

static int fc_rule_init(struct fc_rule *rule, const struct fc_rule_name *nm, const char *arg,
                        const char *where)
{
    const size_t n = strlen(where) + strlen(arg) + 8;
    rule->kind = nm->kind;
    rule->step = nm->step;
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
    return nm->parse(rule);
}

/* The rule kind named op, or the rule of the op table's row named op (in *scratch); NULL if none.
 */
static const struct fc_rule_name *fc_rule_lookup(const char *op, struct fc_rule_name *scratch,
                                                 int *op_kind)
{
    for (size_t i = 0; i < sizeof(fc_rule_names) / sizeof(fc_rule_names[0]); i++)
        if (strcmp(op, fc_rule_names[i].name) == 0)
            return &fc_rule_names[i];
    const struct fc_op_def *def = fc_op_def_find(op, op_kind);
    if (def == NULL)
        return NULL;
    /* An op's key may hold '=', its parameters never do. */
    *scratch =
        (struct fc_rule_name){def->opt.name, FC_RULE_OP, def->form, 1, fc_parse_op, fc_step_op};
    return scratch;
}

int fc_xform_rules_add(struct fc_xform_rules *r, const char *op, const char *arg, const char *where)
{
    struct fc_rule_name scratch;
    int op_kind = 0;
    const struct fc_rule_name *nm = fc_rule_lookup(op, &scratch, &op_kind);
    if (nm == NULL)
        return fc_error_set(FC_EINVAL, "%s: unknown rule '%s'", where, op);
    struct fc_rule *v = fc_reallocarray(r->v, r->n + 1, sizeof(*v));
    if (v == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    r->v = v;
    memset(&v[r->n], 0, sizeof(v[r->n]));
    v[r->n].append.kind = op_kind;
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
