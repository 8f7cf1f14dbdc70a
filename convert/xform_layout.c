/*
 * xform_layout.c - the rules that build tensors out of others and cut them:
 * --stack, --concat, --split and --unstack (transformers' MergeModulelist,
 * Concatenate, Chunk and SplitModulelist), so that per-expert Hugging Face
 * MoE checkpoints become the stacked experts that transformers 5 and
 * torchtitan models hold, and back.
 *
 * Design.  No rule copies a tensor: each output is a virtual tensor
 * (lib/source/fc_source_virtual.c) whose parts are boxes of the tensors the
 * rule takes - a stack's slices at offsets along a new dim 0, a concat's
 * inputs at offsets along DIM, a split's or unstack's one box of its input.
 * The spec of the output reads from that virtual tensor (xr->virt) like any
 * spec reads from its input, so the planner cuts it, the streamer reads each
 * rank's box in slabs within --max-memory, and later rules (cast, resize,
 * rename, tie) treat it as any tensor.  The specs taken vanish, as a rename's
 * old name does.
 *
 * Every rule is a regex (rule->re) plus templates that are replacements of
 * its match, as --rename's TO is: the keys that make one output are the ones
 * whose templates agree.  A stack's index is the one group of its regex that
 * DST leaves out; an unstack's PATTERN writes the index where it has {}.
 *
 * Casts commute with all four, so parts may carry them (the output carries
 * them too); other ops on a part must come after the rule.  Tied tensors are
 * refused (the tie would keep one half only).  Every check runs before the
 * specs change; a failure fails the whole pipeline, so nothing is written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_sort.h"
#include "fc_strmap.h"
#include "xform.h"
#include "xform_pipe.h"

/* Stacks and splits of more parts than this are refused (a typo in a size list, not a model). */
#define FC_LAYOUT_MAX_PARTS 65536

void fc_layout_args_free(struct fc_layout_args *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->nnames; i++)
        fc_free(a->names[i]);
    fc_free(a->names);
    fc_free(a->sizes);
    fc_free(a);
}

/* ---- parsing ---- */

static int fc_layout_new(struct fc_rule *rule)
{
    rule->layout = fc_calloc(1, sizeof(*rule->layout));
    return rule->layout == NULL ? fc_error_set(FC_ENOMEM, "out of memory") : FC_OK;
}

/* Append the comma-separated templates of s[0, n) to rule->layout->names, each checked. */
static int fc_layout_names(struct fc_rule *rule, const char *s, size_t n)
{
    struct fc_layout_args *a = rule->layout;
    for (size_t i = 0; i <= n;) {
        size_t j = i;
        while (j < n && s[j] != ',')
            j++;
        if (j == i)
            return fc_error_set(FC_EINVAL, "%s: an empty name in '%.*s'", rule->label, (int)n, s);
        if (a->nnames == FC_LAYOUT_MAX_PARTS)
            return fc_error_set(FC_EINVAL, "%s: more than %d names", rule->label,
                                FC_LAYOUT_MAX_PARTS);
        char **v = fc_reallocarray(a->names, a->nnames + 1, sizeof(*v));
        if (v == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        a->names = v;
        v[a->nnames] = fc_strndup(s + i, j - i);
        if (v[a->nnames] == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        FC_TRY(fc_regex_check_repl(rule->re, v[a->nnames++], rule->label));
        i = j + 1;
    }
    return FC_OK;
}

/* A decimal integer in [lo, hi] spanning s[0, n), or FC_EINVAL naming what it is. */
static int fc_layout_int(const struct fc_rule *rule, const char *s, size_t n, long long lo,
                         long long hi, const char *what, long long *out)
{
    char buf[32];
    char *end = NULL;
    if (n == 0 || n >= sizeof(buf))
        goto bad;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!(buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
        goto bad;
    *out = strtoll(buf, &end, 10);
    if (*end != '\0' || *out < lo || *out > hi)
        goto bad;
    return FC_OK;
bad:
    return fc_error_set(FC_EINVAL, "%s: '%.*s' is no %s", rule->label, (int)n, s, what);
}

/* The end of the regex in "REGEX,B,...": the first ',' outside (), [] and {} and not escaped. */
static const char *fc_regex_end(const char *s)
{
    int depth = 0, cls = 0;
    for (const char *p = s; *p != '\0'; p++) {
        if (*p == '\\' && p[1] != '\0')
            p++;
        else if (cls)
            cls = *p != ']';
        else if (*p == '[')
            cls = 1;
        else if (*p == '(' || *p == '{')
            depth++;
        else if ((*p == ')' || *p == '}') && depth > 0)
            depth--;
        else if (*p == ',' && depth == 0)
            return p;
    }
    return NULL;
}

int fc_parse_stack(struct fc_rule *rule)
{
    FC_TRY(fc_layout_new(rule));
    FC_TRY(fc_regex_compile(&rule->re, rule->a, rule->label));
    FC_TRY(fc_layout_names(rule, rule->b, strlen(rule->b)));
    if (rule->layout->nnames != 1)
        return fc_error_set(FC_EINVAL, "%s: needs one DST, not '%s'", rule->label, rule->b);
    return fc_regex_unused_group(rule->re, rule->b, rule->label, &rule->layout->index_group);
}

int fc_parse_unstack(struct fc_rule *rule)
{
    FC_TRY(fc_layout_new(rule));
    FC_TRY(fc_regex_compile(&rule->re, rule->a, rule->label));
    const char *ph = strstr(rule->b, "{}");
    if (ph == NULL || strstr(ph + 2, "{}") != NULL)
        return fc_error_set(FC_EINVAL, "%s: PATTERN '%s' needs one {} (where the index goes)",
                            rule->label, rule->b);
    return fc_layout_names(rule, rule->b, strlen(rule->b));
}

int fc_parse_concat(struct fc_rule *rule)
{
    FC_TRY(fc_layout_new(rule));
    const char *end = fc_regex_end(rule->a);
    const char *colon = strrchr(rule->b, ':');
    if (end == NULL || colon == NULL)
        return fc_error_set(FC_EINVAL, "%s: needs the form REGEX,B[,C...]=DST:DIM", rule->label);
    char *re = fc_strndup(rule->a, (size_t)(end - rule->a));
    if (re == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    const char *rest = end + 1;
    char *partners = fc_strdup(rest);
    fc_free(rule->a);
    rule->a = re;
    if (partners == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    int rc = fc_regex_compile(&rule->re, rule->a, rule->label);
    if (rc == FC_OK)
        rc = fc_layout_names(rule, partners, strlen(partners));
    fc_free(partners);
    FC_TRY(rc);
    const size_t partners_n = rule->layout->nnames;
    FC_TRY(fc_layout_names(rule, rule->b, (size_t)(colon - rule->b)));
    if (rule->layout->nnames != partners_n + 1)
        return fc_error_set(FC_EINVAL, "%s: needs one DST before ':'", rule->label);
    long long dim;
    FC_TRY(fc_layout_int(rule, colon + 1, strlen(colon + 1), -FC_MAX_DIMS, FC_MAX_DIMS - 1, "dim",
                         &dim));
    rule->layout->dim = (int)dim;
    return FC_OK;
}

int fc_parse_split(struct fc_rule *rule)
{
    FC_TRY(fc_layout_new(rule));
    FC_TRY(fc_regex_compile(&rule->re, rule->a, rule->label));
    const char *c1 = strchr(rule->b, ':');
    if (c1 == NULL)
        return fc_error_set(FC_EINVAL, "%s: needs the form REGEX=A,B[,C...]:DIM[:N,N...]",
                            rule->label);
    FC_TRY(fc_layout_names(rule, rule->b, (size_t)(c1 - rule->b)));
    struct fc_layout_args *a = rule->layout;
    if (a->nnames < 2)
        return fc_error_set(FC_EINVAL, "%s: needs two outputs or more", rule->label);
    const char *c2 = strchr(c1 + 1, ':');
    const size_t dl = c2 != NULL ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
    long long v;
    FC_TRY(fc_layout_int(rule, c1 + 1, dl, -FC_MAX_DIMS, FC_MAX_DIMS - 1, "dim", &v));
    a->dim = (int)v;
    if (c2 == NULL)
        return FC_OK;
    a->sizes = fc_calloc(a->nnames, sizeof(*a->sizes));
    if (a->sizes == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    const char *s = c2 + 1;
    for (size_t i = 0; i < a->nnames; i++) {
        const char *e = strchr(s, ',');
        const size_t n = e != NULL ? (size_t)(e - s) : strlen(s);
        FC_TRY(fc_layout_int(rule, s, n, 0, (long long)1 << 48, "size", &v));
        a->sizes[i] = v;
        if ((e == NULL) != (i + 1 == a->nnames))
            return fc_error_set(FC_EINVAL, "%s: %zu outputs but another count of sizes",
                                rule->label, a->nnames);
        s = e != NULL ? e + 1 : s + n;
    }
    return FC_OK;
}

/* ---- checks on the tensors a rule takes ---- */

/* The dtype a spec's bytes have as read (before its casts). */
static fc_dtype fc_read_dtype(const struct fc_xspec *s)
{
    return s->nops > 0 ? s->ops[0].in_dtype : s->dtype;
}

/* A part may carry casts only; it must not be tied. */
static int fc_check_part(const struct fc_pipe *p, const struct fc_rule *rule, long i)
{
    const struct fc_xspec *s = &p->out->specs[i];
    if (s->kind != FC_ENTRY_TENSOR)
        return fc_error_set(FC_EINVAL, "%s: '%s' is not a tensor", rule->label, s->key);
    for (size_t k = 0; k < s->nops; k++)
        if (s->ops[k].kind != FC_OP_CAST)
            return fc_error_set(FC_EINVAL,
                                "%s: '%s' has a --%s pending; put that rule after this "
                                "one",
                                rule->label, s->key, fc_op_def(s->ops[k].kind)->opt.name);
    return fc_check_untied(p->out, rule, i);
}

/* "[a, b, c]" of a shape, for messages. */
static const char *fc_shape_text(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", d > 0 ? ", " : "",
                                 (long long)shape[d]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

/* Spec b may join spec a: the same dtypes (as read and as written) and casts. */
static int fc_check_same_dtype(const struct fc_rule *rule, const struct fc_xspec *a,
                               const struct fc_xspec *b)
{
    int same = a->dtype == b->dtype && fc_read_dtype(a) == fc_read_dtype(b) && a->nops == b->nops;
    for (size_t k = 0; same && k < a->nops; k++)
        same = a->ops[k].dtype == b->ops[k].dtype && a->ops[k].in_dtype == b->ops[k].in_dtype;
    if (same)
        return FC_OK;
    return fc_error_set(FC_EINVAL, "%s: '%s' is %s but '%s' is %s%s", rule->label, a->key,
                        fc_dtype_name(fc_read_dtype(a)), b->key, fc_dtype_name(fc_read_dtype(b)),
                        a->dtype != b->dtype || fc_read_dtype(a) != fc_read_dtype(b)
                            ? ""
                            : " (cast by other rules)");
}

/* A dim argument (negative from the end) of a tensor of ndim dims, or FC_EINVAL. */
static int fc_layout_dim(const struct fc_rule *rule, const struct fc_xspec *s, int *dim)
{
    const int d = rule->layout->dim < 0 ? rule->layout->dim + s->ndim : rule->layout->dim;
    if (d < 0 || d >= s->ndim)
        return fc_error_set(FC_EINVAL, "%s: '%s' has %d dims: no dim %d", rule->label, s->key,
                            s->ndim, rule->layout->dim);
    *dim = d;
    return FC_OK;
}

/* ---- building outputs ---- */

static int fc_virt(struct fc_xform_result *xr)
{
    if (xr->virt != NULL)
        return FC_OK;
    return fc_source_new_virtual(&xr->virt, "(stack, concat, split and unstack rules)");
}

/*
 * Turn spec s (a part, already read into parts) into the output: it reads
 * virtual entry `entry` of dtype/shape (casts kept) and is named key (owned).
 */
static int fc_become(struct fc_pipe *p, const struct fc_rule *rule, struct fc_xspec *s,
                     size_t entry, int ndim, const int64_t *shape, char *key)
{
    s->src = p->out->virt;
    s->entry = entry;
    s->ndim = ndim;
    memcpy(s->shape, shape, sizeof(int64_t) * (size_t)ndim);
    for (size_t k = 0; k < s->nops; k++) { /* casts: the same shape in and out */
        s->ops[k].in_ndim = ndim;
        memcpy(s->ops[k].in_shape, shape, sizeof(int64_t) * (size_t)ndim);
    }
    s->alias_of = -1;
    s->copy_of = -1;
    const int rc = fc_pipe_gone(p, s->key, rule);
    if (rc < 0) {
        fc_free(key);
        return rc;
    }
    return fc_xspec_rekey(s, key);
}

/* Add the virtual tensor `key` of the parts; dtype is what s reads. */
static int fc_add_virtual(struct fc_pipe *p, const struct fc_xspec *s, const char *key, int ndim,
                          const int64_t *shape, const struct fc_vpart *parts, size_t n,
                          size_t *entry)
{
    FC_TRY(fc_virt(p->out));
    return fc_source_add_virtual(p->out->virt, key, fc_read_dtype(s), ndim, shape, parts, n, entry);
}

/* A part that is all of spec s, at `at` (ndim dims of the output). */
static void fc_part_of(struct fc_vpart *v, const struct fc_xspec *s, int lead, const int64_t *at,
                       int ndim)
{
    memset(v, 0, sizeof(*v));
    v->src = s->src;
    v->entry = s->entry;
    v->lead = lead;
    memcpy(v->at, at, sizeof(int64_t) * (size_t)ndim);
    for (int d = 0; d < ndim; d++)
        v->size[d] = d == 0 && lead > 0 ? 1 : s->shape[d - (lead > 0)];
}

/* ---- stack ---- */

struct fc_stack_key {
    long spec;
    long long index;
    size_t group;
};

static int fc_cmp_stack_key(const void *x, const void *y)
{
    const struct fc_stack_key *a = x, *b = y;
    if (a->group != b->group)
        return a->group < b->group ? -1 : 1;
    if (a->index != b->index)
        return a->index < b->index ? -1 : 1;
    return a->spec < b->spec ? -1 : a->spec > b->spec;
}

/* The index of key k (its index group's text): a decimal number, or FC_EINVAL. */
static int fc_stack_index(const struct fc_rule *rule, const char *key, long long *out)
{
    char *text = NULL;
    const int m = fc_regex_group_text(rule->re, key, rule->layout->index_group, &text);
    FC_TRY(m);
    const size_t n = strlen(text);
    int ok = n > 0 && n <= 9 && strspn(text, "0123456789") == n;
    *out = ok ? strtoll(text, NULL, 10) : -1;
    const int rc = ok ? FC_OK
                      : fc_error_set(FC_EINVAL,
                                     "%s: '%s' matches, but its index (group %d) '%s' is no "
                                     "number",
                                     rule->label, key, rule->layout->index_group, text);
    fc_free(text);
    return rc;
}

/* One stack: keys k[0, n) sorted by index must be 0..n-1 and agree in shape and dtype. */
static int fc_stack_check(const struct fc_pipe *p, const struct fc_rule *rule,
                          const struct fc_stack_key *k, size_t n, const char *dst)
{
    const struct fc_xspec *s = p->out->specs;
    const struct fc_xspec *a = &s[k[0].spec];
    for (size_t i = 0; i < n; i++) {
        const struct fc_xspec *b = &s[k[i].spec];
        if (i > 0 && k[i].index == k[i - 1].index)
            return fc_error_set(FC_EINVAL, "%s: '%s' and '%s' both have index %lld in '%s'",
                                rule->label, s[k[i - 1].spec].key, b->key, k[i].index, dst);
        if (k[i].index != (long long)i)
            return fc_error_set(FC_EINVAL,
                                "%s: '%s' has no index %zu (indexes go 0, 1, ...; the next key "
                                "is '%s', index %lld)",
                                rule->label, dst, i, b->key, k[i].index);
        FC_TRY(fc_check_part(p, rule, k[i].spec));
        FC_TRY(fc_check_same_dtype(rule, a, b));
        if (a->ndim != b->ndim ||
            memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) != 0) {
            char sa[128], sb[128];
            return fc_error_set(FC_EINVAL, "%s: '%s' is %s but '%s' is %s", rule->label, a->key,
                                fc_shape_text(sa, sizeof(sa), a->ndim, a->shape), b->key,
                                fc_shape_text(sb, sizeof(sb), b->ndim, b->shape));
        }
    }
    if (a->ndim + 1 > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "%s: '%s' would have more than %d dims", rule->label, dst,
                            FC_MAX_DIMS);
    return FC_OK;
}

/* Build the stack of keys k[0, n) into their lowest spec; the others are marked to go. */
static int fc_stack_build(struct fc_pipe *p, const struct fc_rule *rule,
                          const struct fc_stack_key *k, size_t n, char *dst, unsigned char *keep)
{
    struct fc_xspec *s = p->out->specs;
    long first = k[0].spec;
    struct fc_vpart *parts = fc_calloc(n, sizeof(*parts));
    if (parts == NULL) {
        fc_free(dst);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    const struct fc_xspec *a = &s[k[0].spec];
    const int ndim = a->ndim + 1;
    int64_t shape[FC_MAX_DIMS], at[FC_MAX_DIMS] = {0};
    shape[0] = (int64_t)n;
    memcpy(shape + 1, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    for (size_t i = 0; i < n; i++) {
        at[0] = (int64_t)i;
        fc_part_of(&parts[i], &s[k[i].spec], 1, at, ndim);
        first = k[i].spec < first ? k[i].spec : first;
        keep[k[i].spec] = 0;
    }
    size_t entry;
    int rc = fc_add_virtual(p, a, dst, ndim, shape, parts, n, &entry);
    fc_free(parts);
    if (rc < 0) {
        fc_free(dst);
        return rc;
    }
    /* The output takes the place of the first part in the specs. */
    for (size_t i = 0; rc == FC_OK && i < n; i++)
        if (k[i].spec != first)
            rc = fc_pipe_gone(p, s[k[i].spec].key, rule);
    if (rc < 0) {
        fc_free(dst);
        return rc;
    }
    keep[first] = 1;
    if (first != k[0].spec) { /* the first spec takes the dtype and casts of index 0's */
        fc_ops_free(s[first].ops, s[first].nops);
        s[first].ops = NULL;
        s[first].nops = 0;
        rc = fc_ops_dup(&s[first].ops, a->ops, a->nops);
        if (rc < 0) {
            fc_free(dst);
            return rc;
        }
        s[first].nops = a->nops;
        s[first].dtype = a->dtype;
    }
    return fc_become(p, rule, &s[first], entry, ndim, shape, dst);
}

int fc_step_stack(struct fc_pipe *p, const struct fc_rule *rule)
{
    struct fc_xform_result *out = p->out;
    struct fc_strmap groups = FC_STRMAP_INIT;
    struct fc_stack_key *keys = fc_calloc(out->n + 1, sizeof(*keys));
    char **dsts = fc_calloc(out->n + 1, sizeof(*dsts)); /* per group */
    unsigned char *keep = fc_calloc(out->n + 1, 1);
    size_t nkeys = 0, ngroups = 0;
    int rc = keys == NULL || dsts == NULL || keep == NULL ? fc_error_set(FC_ENOMEM, "out of memory")
                                                          : FC_OK;
    for (size_t i = 0; rc == FC_OK && i < out->n; i++) {
        keep[i] = 1;
        char *dst = NULL;
        if (out->specs[i].kind != FC_ENTRY_TENSOR)
            continue;
        const int m = fc_regex_subst(rule->re, rule->layout->names[0], out->specs[i].key, &dst);
        if (m <= 0) {
            rc = m;
            continue;
        }
        struct fc_stack_key *k = &keys[nkeys++];
        k->spec = (long)i;
        rc = fc_stack_index(rule, out->specs[i].key, &k->index);
        size_t g = ngroups;
        const int put = rc == FC_OK ? fc_strmap_put(&groups, dst, ngroups, &g) : 0;
        if (put < 0)
            rc = put;
        if (rc == FC_OK && put == 0) {
            dsts[ngroups++] = dst;
            dst = NULL;
        }
        k->group = g;
        fc_free(dst);
    }
    if (rc == FC_OK && nkeys == 0)
        rc = fc_error_set(FC_EINVAL, "%s: no key matches '%s'", rule->label, rule->a);
    if (rc == FC_OK)
        qsort(keys, nkeys, sizeof(*keys), fc_cmp_stack_key);
    /* Every check first, then the changes: a failure leaves nothing half built. */
    for (size_t i = 0, j; rc == FC_OK && i < nkeys; i = j) {
        for (j = i; j < nkeys && keys[j].group == keys[i].group;)
            j++;
        rc = fc_stack_check(p, rule, &keys[i], j - i, dsts[keys[i].group]);
    }
    for (size_t i = 0, j; rc == FC_OK && i < nkeys; i = j) {
        for (j = i; j < nkeys && keys[j].group == keys[i].group;)
            j++;
        rc = fc_stack_build(p, rule, &keys[i], j - i, dsts[keys[i].group], keep);
        dsts[keys[i].group] = NULL; /* taken */
    }
    if (rc == FC_OK)
        rc = fc_specs_compact(out, keep);
    for (size_t g = 0; dsts != NULL && g < ngroups; g++)
        fc_free(dsts[g]);
    fc_strmap_release(&groups);
    fc_free(dsts);
    fc_free(keys);
    fc_free(keep);
    FC_TRY(rc);
    return fc_check_unique(out, rule);
}

/* ---- concat ---- */

/* The specs of one concat: parts[0] matched the regex, the rest are its partners. */
static int fc_concat_one(struct fc_pipe *p, const struct fc_rule *rule, const struct fc_strmap *idx,
                         long first, unsigned char *keep, unsigned char *used)
{
    struct fc_xspec *s = p->out->specs;
    const struct fc_layout_args *la = rule->layout;
    const size_t n = la->nnames; /* partners, then DST */
    long *part = fc_calloc(n, sizeof(*part));
    struct fc_vpart *v = fc_calloc(n, sizeof(*v));
    char *dst = NULL;
    if (part == NULL || v == NULL) {
        fc_free(part);
        fc_free(v);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    part[0] = first;
    int rc = FC_OK;
    for (size_t i = 1; rc == FC_OK && i < n; i++) {
        char *name = NULL;
        size_t at = 0;
        rc = fc_regex_subst(rule->re, la->names[i - 1], s[first].key, &name);
        if (rc == 1 && fc_strmap_get(idx, name, &at)) {
            part[i] = (long)at;
            rc = FC_OK;
        } else if (rc == 1) {
            rc = fc_find_tensor(p, rule, name, &part[i]); /* says why it is missing */
        }
        fc_free(name);
    }
    if (rc == FC_OK) {
        const int m = fc_regex_subst(rule->re, la->names[n - 1], s[first].key, &dst);
        rc = m < 0 ? m : FC_OK;
    }
    int dim = 0;
    if (rc == FC_OK)
        rc = fc_layout_dim(rule, &s[first], &dim);
    int64_t shape[FC_MAX_DIMS], at[FC_MAX_DIMS] = {0};
    memcpy(shape, s[first].shape, sizeof(shape));
    shape[dim] = 0;
    for (size_t i = 0; rc == FC_OK && i < n; i++) {
        const struct fc_xspec *b = &s[part[i]];
        if (used[part[i]]++)
            rc = fc_error_set(FC_EINVAL, "%s: '%s' would go into two tensors", rule->label, b->key);
        if (rc == FC_OK)
            rc = fc_check_part(p, rule, part[i]);
        if (rc == FC_OK)
            rc = fc_check_same_dtype(rule, &s[first], b);
        int same = rc == FC_OK && b->ndim == s[first].ndim;
        for (int d = 0; same && d < b->ndim; d++)
            same = d == dim || b->shape[d] == s[first].shape[d];
        if (rc == FC_OK && !same) {
            char sa[128], sb[128];
            rc = fc_error_set(FC_EINVAL, "%s: '%s' is %s but '%s' is %s: they differ past dim %d",
                              rule->label, s[first].key,
                              fc_shape_text(sa, sizeof(sa), s[first].ndim, s[first].shape), b->key,
                              fc_shape_text(sb, sizeof(sb), b->ndim, b->shape), dim);
        }
        if (rc == FC_OK) {
            at[dim] = shape[dim];
            fc_part_of(&v[i], b, 0, at, b->ndim);
            shape[dim] += b->shape[dim];
            keep[part[i]] = (long)part[i] == first;
        }
    }
    for (size_t i = 1; rc == FC_OK && i < n; i++)
        rc = fc_pipe_gone(p, s[part[i]].key, rule);
    size_t entry = 0;
    if (rc == FC_OK)
        rc = fc_add_virtual(p, &s[first], dst, s[first].ndim, shape, v, n, &entry);
    if (rc == FC_OK) {
        rc = fc_become(p, rule, &s[first], entry, s[first].ndim, shape, dst);
        dst = NULL;
    }
    fc_free(dst);
    fc_free(part);
    fc_free(v);
    return rc;
}

int fc_step_concat(struct fc_pipe *p, const struct fc_rule *rule)
{
    struct fc_xform_result *out = p->out;
    struct fc_strmap idx = FC_STRMAP_INIT;
    const size_t n = out->n;
    unsigned char *keep = fc_calloc(n + 1, 1), *used = fc_calloc(n + 1, 1),
                  *hit = fc_calloc(n + 1, 1);
    size_t hits = 0;
    int rc = keep == NULL || used == NULL || hit == NULL ? fc_error_set(FC_ENOMEM, "out of memory")
                                                         : fc_key_index(out, &idx);
    /* The keys the regex matches, before any changes (partners may match it too). */
    for (size_t i = 0; rc == FC_OK && i < n; i++) {
        keep[i] = 1;
        const int m = out->specs[i].kind == FC_ENTRY_TENSOR
                          ? fc_regex_search(rule->re, out->specs[i].key)
                          : 0;
        rc = m < 0 ? m : FC_OK;
        hit[i] = m == 1;
        hits += m == 1;
    }
    for (size_t i = 0; rc == FC_OK && i < n; i++)
        if (hit[i])
            rc = fc_concat_one(p, rule, &idx, (long)i, keep, used);
    if (rc == FC_OK && hits == 0)
        rc = fc_error_set(FC_EINVAL, "%s: no key matches '%s'", rule->label, rule->a);
    if (rc == FC_OK)
        rc = fc_specs_compact(out, keep);
    fc_strmap_release(&idx);
    fc_free(keep);
    fc_free(used);
    fc_free(hit);
    FC_TRY(rc);
    return fc_check_unique(out, rule);
}

/* ---- split and unstack: one input, several outputs ---- */

/*
 * Insert the outputs made of spec i: made[0] replaced it in place; made[1..]
 * were pushed at the end and go right after it, in order.  after[j] is the
 * spec each pushed spec j (>= n0) follows.  Aliases and copies are renumbered.
 */
static int fc_specs_place(struct fc_xform_result *out, size_t n0, const size_t *after)
{
    const size_t n = out->n;
    size_t *order = fc_calloc(n + 1, sizeof(*order));
    long *map = fc_calloc(n + 1, sizeof(*map));
    struct fc_xspec *v = fc_calloc(n + 1, sizeof(*v));
    if (order == NULL || map == NULL || v == NULL) {
        fc_free(order);
        fc_free(map);
        fc_free(v);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    size_t w = 0, j = n0;
    for (size_t i = 0; i < n0; i++) {
        order[w++] = i;
        while (j < n && after[j - n0] == i) /* pushed in the order of the specs they follow */
            order[w++] = j++;
    }
    for (size_t k = 0; k < n; k++)
        map[order[k]] = (long)k;
    for (size_t k = 0; k < n; k++) {
        v[k] = out->specs[order[k]];
        v[k].alias_of = v[k].alias_of >= 0 ? map[v[k].alias_of] : -1;
        v[k].copy_of = v[k].copy_of >= 0 ? map[v[k].copy_of] : -1;
    }
    memcpy(out->specs, v, n * sizeof(*v));
    fc_free(order);
    fc_free(map);
    fc_free(v);
    return FC_OK;
}

/*
 * Cut spec i into nout outputs: output j is the box of its tensor at
 * in_off[j] (the input's dims) of shape shapes[j] (ndim dims; lead as in
 * struct fc_vpart), named names[j] (taken: set to NULL once owned elsewhere).
 * Output 0 replaces spec i; the others are pushed, each recorded in *after.
 */
static int fc_cut(struct fc_pipe *p, const struct fc_rule *rule, size_t i, size_t nout,
                  char **names, int64_t (*in_off)[FC_MAX_DIMS], int64_t (*shapes)[FC_MAX_DIMS],
                  int ndim, int lead, size_t **after, size_t n0)
{
    const struct fc_source *src = p->out->specs[i].src;
    const size_t ent = p->out->specs[i].entry, base = p->out->n;
    /* The copies first, while spec i still reads its input. */
    for (size_t j = 1; j < nout; j++) {
        size_t d;
        FC_TRY(fc_pipe_room(p, rule));
        FC_TRY(fc_xform_push(p->out, &d));
        FC_TRY(fc_xspec_dup(&p->out->specs[d], &p->out->specs[i]));
        size_t *a = fc_reallocarray(*after, d - n0 + 1, sizeof(*a));
        if (a == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        *after = a;
        a[d - n0] = i;
    }
    for (size_t j = 0; j < nout; j++) {
        struct fc_xspec *s = &p->out->specs[j == 0 ? i : base + j - 1];
        struct fc_vpart v;
        memset(&v, 0, sizeof(v));
        v.src = src;
        v.entry = ent;
        v.lead = lead;
        memcpy(v.size, shapes[j], sizeof(v.size));
        memcpy(v.in_off, in_off[j], sizeof(v.in_off));
        size_t entry;
        FC_TRY(fc_add_virtual(p, s, names[j], ndim, shapes[j], &v, 1, &entry));
        char *key = names[j];
        names[j] = NULL;
        FC_TRY(fc_become(p, rule, s, entry, ndim, shapes[j], key));
    }
    return FC_OK;
}

/* The outputs' names: template t of every output, for spec key (index e replaces "{}"). */
static int fc_out_name(const struct fc_rule *rule, const char *t, const char *key, long long e,
                       char **out)
{
    struct fc_buf b = FC_BUF_INIT((size_t)64 << 10);
    int rc = FC_OK;
    *out = NULL;
    /* "\1{}" must stay group 1 then the index: references become \g<N> first. */
    for (const char *q = t; rc == FC_OK && *q != '\0'; q++) {
        if (q[0] == '\\' && q[1] == '\\') {
            rc = fc_buf_append(&b, q, 2);
            q++;
        } else if (q[0] == '\\' && q[1] >= '0' && q[1] <= '9') {
            rc = fc_buf_printf(&b, "\\g<%c>", q[1]);
            q++;
        } else if (e >= 0 && q[0] == '{' && q[1] == '}') {
            rc = fc_buf_printf(&b, "%lld", e);
            q++;
        } else {
            rc = fc_buf_putc(&b, (unsigned char)*q);
        }
    }
    if (rc == FC_OK)
        rc = fc_buf_putc(&b, '\0');
    if (rc == FC_OK) {
        const int m = fc_regex_subst(rule->re, (const char *)b.data, key, out);
        rc = m < 0 ? m : FC_OK;
    }
    fc_buf_release(&b);
    return rc;
}

/* The box of each output of a split of s along dim (equal parts or the rule's sizes). */
static int fc_split_boxes(const struct fc_rule *rule, const struct fc_xspec *s, int dim,
                          int64_t (*in_off)[FC_MAX_DIMS], int64_t (*shapes)[FC_MAX_DIMS])
{
    const struct fc_layout_args *la = rule->layout;
    const int64_t len = s->shape[dim], k = (int64_t)la->nnames;
    int64_t sum = 0;
    for (int64_t j = 0; la->sizes != NULL && j < k; j++)
        sum += la->sizes[j];
    if (la->sizes == NULL && len % k != 0)
        return fc_error_set(FC_EINVAL,
                            "%s: '%s' has %lld along dim %d, which does not split into %lld equal "
                            "parts",
                            rule->label, s->key, (long long)len, dim, (long long)k);
    if (la->sizes != NULL && sum != len)
        return fc_error_set(FC_EINVAL,
                            "%s: '%s' has %lld along dim %d, but the sizes add up to %lld",
                            rule->label, s->key, (long long)len, dim, (long long)sum);
    int64_t at = 0;
    for (int64_t j = 0; j < k; j++) {
        memset(in_off[j], 0, sizeof(in_off[j]));
        memcpy(shapes[j], s->shape, sizeof(shapes[j]));
        shapes[j][dim] = la->sizes != NULL ? la->sizes[j] : len / k;
        in_off[j][dim] = at;
        at += shapes[j][dim];
    }
    return FC_OK;
}

/* Split (unstack 0) or unstack (1) each tensor the regex matches. */
static int fc_step_cut(struct fc_pipe *p, const struct fc_rule *rule, int unstack)
{
    struct fc_xform_result *out = p->out;
    const size_t n0 = out->n;
    size_t *after = NULL, hits = 0;
    int rc = FC_OK;
    for (size_t i = 0; rc == FC_OK && i < n0; i++) {
        const struct fc_xspec *s = &out->specs[i];
        if (s->kind != FC_ENTRY_TENSOR)
            continue;
        const int m = fc_regex_search(rule->re, s->key);
        if (m <= 0) {
            rc = m;
            continue;
        }
        hits++;
        rc = fc_check_part(p, rule, (long)i);
        int dim = 0;
        if (rc == FC_OK && !unstack)
            rc = fc_layout_dim(rule, s, &dim);
        if (rc == FC_OK && unstack && s->ndim == 0)
            rc =
                fc_error_set(FC_EINVAL, "%s: '%s' is 0-d: nothing to unstack", rule->label, s->key);
        if (rc == FC_OK && unstack && s->shape[0] > FC_LAYOUT_MAX_PARTS)
            rc = fc_error_set(FC_EINVAL, "%s: '%s' has %lld slices, more than %d", rule->label,
                              s->key, (long long)s->shape[0], FC_LAYOUT_MAX_PARTS);
        if (rc < 0)
            break;
        const size_t nout = unstack ? (size_t)s->shape[0] : rule->layout->nnames;
        int64_t(*in_off)[FC_MAX_DIMS] = fc_calloc(nout + 1, sizeof(*in_off));
        int64_t(*shapes)[FC_MAX_DIMS] = fc_calloc(nout + 1, sizeof(*shapes));
        char **names = fc_calloc(nout + 1, sizeof(*names));
        if (in_off == NULL || shapes == NULL || names == NULL)
            rc = fc_error_set(FC_ENOMEM, "out of memory");
        for (size_t j = 0; rc == FC_OK && j < nout; j++) {
            if (unstack) {
                in_off[j][0] = (int64_t)j;
                memcpy(shapes[j], s->shape + 1, sizeof(int64_t) * (size_t)(s->ndim - 1));
            }
            rc = fc_out_name(rule, rule->layout->names[unstack ? 0 : j], s->key,
                             unstack ? (long long)j : -1, &names[j]);
        }
        if (rc == FC_OK && !unstack)
            rc = fc_split_boxes(rule, s, dim, in_off, shapes);
        if (rc == FC_OK)
            rc = fc_cut(p, rule, i, nout, names, in_off, shapes,
                        unstack ? out->specs[i].ndim - 1 : out->specs[i].ndim, unstack ? -1 : 0,
                        &after, n0);
        for (size_t j = 0; names != NULL && j < nout; j++)
            fc_free(names[j]);
        fc_free(names);
        fc_free(in_off);
        fc_free(shapes);
    }
    if (rc == FC_OK && hits == 0)
        rc = fc_error_set(FC_EINVAL, "%s: no key matches '%s'", rule->label, rule->a);
    if (rc == FC_OK && out->n > n0)
        rc = fc_specs_place(out, n0, after);
    fc_free(after);
    FC_TRY(rc);
    return fc_check_unique(out, rule);
}

int fc_step_split(struct fc_pipe *p, const struct fc_rule *rule)
{
    return fc_step_cut(p, rule, 0);
}

int fc_step_unstack(struct fc_pipe *p, const struct fc_rule *rule)
{
    return fc_step_cut(p, rule, 1);
}

const char *fc_xform_layout_rule(const struct fc_xform_rules *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].layout != NULL)
            return r->v[i].label;
    return NULL;
}
