/*
 * xform.c - rule parsing and the plan-time transform steps.
 */
#include "xform.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_strmap.h"

#define FC_XFORM_KEY_CAP  ((size_t)1 << 20)
#define FC_RULES_FILE_CAP ((size_t)1 << 20)

static int fc_regex_rule_init(struct fc_regex_rule *rule, const char *pattern, const char *repl,
                              const char *where)
{
    memset(rule, 0, sizeof(*rule));
    char errbuf[128];
    const int rc = regcomp(&rule->re, pattern, REG_EXTENDED);
    if (rc != 0) {
        regerror(rc, &rule->re, errbuf, sizeof(errbuf));
        return fc_error_set(FC_EINVAL, "%s: invalid regular expression '%s': %s", where, pattern,
                            errbuf);
    }
    rule->pattern = fc_strdup(pattern);
    rule->repl = repl != NULL ? fc_strdup(repl) : NULL;
    if (rule->pattern == NULL || (repl != NULL && rule->repl == NULL)) {
        regfree(&rule->re);
        fc_free(rule->pattern);
        fc_free(rule->repl);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    return FC_OK;
}

static void fc_regex_rules_free(struct fc_regex_rule *rules, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        regfree(&rules[i].re);
        fc_free(rules[i].pattern);
        fc_free(rules[i].repl);
    }
    fc_free(rules);
}

static int fc_push_regex(struct fc_regex_rule **arr, size_t *n, const char *pattern,
                         const char *repl, const char *where)
{
    struct fc_regex_rule *a = fc_reallocarray(*arr, *n + 1, sizeof(**arr));
    if (a == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    *arr = a;
    FC_TRY(fc_regex_rule_init(&a[*n], pattern, repl, where));
    (*n)++;
    return FC_OK;
}

static int fc_set_once(char **slot, const char *arg, const char *op, const char *where)
{
    if (*slot != NULL)
        return fc_error_set(FC_EINVAL, "%s: %s given twice ('%s' and '%s')", where, op, *slot, arg);
    *slot = fc_strdup(arg);
    return *slot == NULL ? fc_error_set(FC_ENOMEM, "out of memory") : FC_OK;
}

/* Split "LEFT=RIGHT" at the last '=' that is not escaped... the first '=' for ties. */
static int fc_split_eq(const char *arg, int last, char **left, char **right, const char *op,
                       const char *where)
{
    const char *eq = last ? strrchr(arg, '=') : strchr(arg, '=');
    if (eq == NULL || eq == arg)
        return fc_error_set(FC_EINVAL, "%s: %s needs the form %s, got '%s'", where, op,
                            last ? "REGEX=REPLACEMENT" : "DST=SRC", arg);
    *left = fc_strndup(arg, (size_t)(eq - arg));
    *right = fc_strdup(eq + 1);
    if (*left == NULL || *right == NULL) {
        fc_free(*left);
        fc_free(*right);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    return FC_OK;
}

int fc_xform_rules_add(struct fc_xform_rules *r, const char *op, const char *arg, const char *where)
{
    if (strcmp(op, "select") == 0)
        return fc_set_once(&r->select, arg, "select", where);
    if (strcmp(op, "strip-prefix") == 0)
        return fc_set_once(&r->strip_prefix, arg, "strip-prefix", where);
    if (strcmp(op, "add-prefix") == 0)
        return fc_set_once(&r->add_prefix, arg, "add-prefix", where);
    if (strcmp(op, "drop") == 0)
        return fc_push_regex(&r->drops, &r->ndrops, arg, NULL, where);
    if (strcmp(op, "replicate") == 0)
        return fc_push_regex(&r->replicas, &r->nreplicas, arg, NULL, where);
    if (strcmp(op, "optim-skip") == 0)
        return fc_push_regex(&r->optim_skips, &r->noptim_skips, arg, NULL, where);
    if (strcmp(op, "rename") == 0) {
        char *pat, *repl;
        /* A replacement rarely contains '=', a key regex never needs one: split at the last. */
        FC_TRY(fc_split_eq(arg, 1, &pat, &repl, "rename", where));
        const int rc = fc_push_regex(&r->renames, &r->nrenames, pat, repl, where);
        fc_free(pat);
        fc_free(repl);
        return rc;
    }
    if (strcmp(op, "conv2d-to-linear") == 0) {
        char **a = fc_reallocarray(r->conv2d, r->nconv2d + 1, sizeof(*a));
        if (a == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        r->conv2d = a;
        a[r->nconv2d] = fc_strdup(arg);
        if (a[r->nconv2d] == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        r->nconv2d++;
        return FC_OK;
    }
    if (strcmp(op, "tie") == 0) {
        struct fc_tie_rule *a = fc_reallocarray(r->ties, r->nties + 1, sizeof(*a));
        if (a == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        r->ties = a;
        FC_TRY(fc_split_eq(arg, 0, &a[r->nties].dst, &a[r->nties].src, "tie", where));
        r->nties++;
        return FC_OK;
    }
    if (strcmp(op, "dtype") == 0) {
        const fc_dtype d = fc_dtype_parse_user(arg);
        const struct fc_dtype_info *info = fc_dtype_info(d);
        if (info == NULL || !info->is_floating)
            return fc_error_set(FC_EINVAL,
                                "%s: invalid dtype '%s' (expected float32, bfloat16, float16 or "
                                "float64)",
                                where, arg);
        r->dtype = d;
        return FC_OK;
    }
    return fc_error_set(FC_EINVAL, "%s: unknown rule '%s'", where, op);
}

int fc_xform_rules_load(struct fc_xform_rules *r, const char *path)
{
    struct fc_file f = FC_FILE_INIT;
    unsigned char *text = NULL;
    int rc;
    FC_TRY(fc_file_open_read(&f, path));
    rc = fc_file_read_alloc(&f, 0, (size_t)f.size, FC_RULES_FILE_CAP, &text);
    fc_file_close(&f);
    FC_TRY(rc);
    char *line = (char *)text;
    unsigned lineno = 0;
    while (line != NULL && *line != '\0') {
        char *next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        lineno++;
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        /* trim */
        while (*line == ' ' || *line == '\t' || *line == '\r')
            line++;
        size_t len = strlen(line);
        while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len > 0) {
            char where[512];
            snprintf(where, sizeof(where), "%s:%u", path, lineno);
            char *sp = line;
            while (*sp != '\0' && *sp != ' ' && *sp != '\t')
                sp++;
            char *arg = sp;
            if (*sp != '\0') {
                *sp = '\0';
                arg = sp + 1;
                while (*arg == ' ' || *arg == '\t')
                    arg++;
            }
            if (*arg == '\0') {
                rc = fc_error_set(FC_EINVAL, "%s: rule '%s' needs an argument", where, line);
                break;
            }
            rc = fc_xform_rules_add(r, line, arg, where);
            if (rc < 0)
                break;
        }
        line = next;
    }
    fc_free(text);
    return rc;
}

void fc_xform_rules_release(struct fc_xform_rules *r)
{
    fc_free(r->select);
    fc_free(r->strip_prefix);
    fc_free(r->add_prefix);
    fc_regex_rules_free(r->renames, r->nrenames);
    fc_regex_rules_free(r->drops, r->ndrops);
    fc_regex_rules_free(r->replicas, r->nreplicas);
    fc_regex_rules_free(r->optim_skips, r->noptim_skips);
    for (size_t i = 0; i < r->nconv2d; i++)
        fc_free(r->conv2d[i]);
    fc_free(r->conv2d);
    for (size_t i = 0; i < r->nties; i++) {
        fc_free(r->ties[i].dst);
        fc_free(r->ties[i].src);
    }
    fc_free(r->ties);
    memset(r, 0, sizeof(*r));
}

/* ---- specs ---- */

static void fc_xspec_clear(struct fc_xspec *s)
{
    fc_free(s->key);
    for (size_t j = 0; j < s->path_len; j++)
        fc_free((void *)(uintptr_t)s->path[j].key);
    fc_free(s->path);
    s->key = NULL;
    s->path = NULL;
    s->path_len = 0;
}

void fc_xform_result_release(struct fc_xform_result *out)
{
    for (size_t i = 0; i < out->n; i++)
        fc_xspec_clear(&out->specs[i]);
    fc_free(out->specs);
    for (size_t i = 0; i < out->nnotes; i++)
        fc_free(out->notes[i]);
    fc_free(out->notes);
    for (size_t i = 0; i < out->nowned; i++) {
        struct fc_pv *v = out->owned[i];
        if (v->kind == FC_PV_STR)
            fc_free((void *)(uintptr_t)v->u.str.s);
        else if (v->kind == FC_PV_LIST)
            fc_free(v->u.seq.items);
        fc_free(v);
    }
    fc_free(out->owned);
    memset(out, 0, sizeof(*out));
}

static int fc_note(struct fc_xform_result *out, const char *msg)
{
    char **a = fc_reallocarray(out->notes, out->nnotes + 1, sizeof(*a));
    if (a == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    out->notes = a;
    a[out->nnotes] = fc_strdup(msg);
    if (a[out->nnotes] == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    out->nnotes++;
    return FC_OK;
}

static int fc_path_copy(struct fc_path_elem **dst, const struct fc_path_elem *src, size_t n)
{
    *dst = fc_calloc(n == 0 ? 1 : n, sizeof(**dst));
    if (*dst == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        (*dst)[i] = src[i];
        if (!src[i].is_index) {
            (*dst)[i].key = fc_strdup(src[i].key);
            if ((*dst)[i].key == NULL) {
                for (size_t j = 0; j < i; j++)
                    fc_free((void *)(uintptr_t)(*dst)[j].key);
                fc_free(*dst);
                *dst = NULL;
                return fc_error_set(FC_ENOMEM, "out of memory");
            }
        }
    }
    return FC_OK;
}

/* Length of path component i rendered as text. */
static int fc_elem_text(const struct fc_path_elem *e, char *tmp, size_t tmplen, const char **s)
{
    if (e->is_index) {
        snprintf(tmp, tmplen, "%lld", (long long)e->index);
        *s = tmp;
    } else {
        *s = e->key;
    }
    return FC_OK;
}

/*
 * Give spec a new key and recompute its planner_data path: leading path
 * components that still prefix the key are kept, the rest of the key becomes
 * one component (an FQN with dots inside, as state dicts have).
 */
static int fc_xspec_rekey(struct fc_xspec *s, char *newkey)
{
    size_t keep = 0, pos = 0;
    char tmp[32];
    while (keep + 1 < s->path_len) {
        const char *t;
        fc_elem_text(&s->path[keep], tmp, sizeof(tmp), &t);
        const size_t tl = strlen(t);
        if (strncmp(newkey + pos, t, tl) != 0 || newkey[pos + tl] != '.')
            break;
        pos += tl + 1;
        keep++;
    }
    struct fc_path_elem *p = fc_calloc(keep + 1, sizeof(*p));
    char *rest = fc_strdup(newkey + pos);
    if (p == NULL || rest == NULL) {
        fc_free(p);
        fc_free(rest);
        fc_free(newkey);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < keep; i++) {
        p[i] = s->path[i];
        s->path[i].key = NULL; /* moved */
    }
    p[keep] = (struct fc_path_elem){0, 0, rest};
    for (size_t j = 0; j < s->path_len; j++)
        fc_free((void *)(uintptr_t)s->path[j].key);
    fc_free(s->path);
    fc_free(s->key);
    s->path = p;
    s->path_len = keep + 1;
    s->key = newkey;
    return FC_OK;
}

static long fc_spec_find(const struct fc_xform_result *out, const char *key)
{
    for (size_t i = 0; i < out->n; i++)
        if (strcmp(out->specs[i].key, key) == 0)
            return (long)i;
    return -1;
}

static int fc_check_unique(const struct fc_xform_result *out, const char *step)
{
    struct fc_strmap seen = FC_STRMAP_INIT;
    int rc = FC_OK;
    for (size_t i = 0; i < out->n && rc == FC_OK; i++) {
        const int put = fc_strmap_put(&seen, out->specs[i].key, i, NULL);
        if (put < 0)
            rc = put;
        else if (put == 1)
            rc = fc_error_set(FC_EINVAL, "%s: two keys become '%s'", step, out->specs[i].key);
    }
    fc_strmap_release(&seen);
    return rc;
}

/*
 * Keep the specs whose keep[] flag is set, in order, in one pass (select and
 * drop can remove most of 100k keys; removing one by one would be quadratic).
 * Runs before any alias exists, so no alias_of needs fixing.
 */
static void fc_specs_compact(struct fc_xform_result *out, const unsigned char *keep)
{
    size_t w = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (keep[i])
            out->specs[w++] = out->specs[i];
        else
            fc_xspec_clear(&out->specs[i]);
    }
    out->n = w;
}

static int fc_step_select(struct fc_xform_result *out, const char *sel)
{
    const size_t sl = strlen(sel);
    size_t kept = 0;
    unsigned char *keep = fc_calloc(out->n + 1, 1);
    if (keep == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < out->n; i++) {
        const char *k = out->specs[i].key;
        if (strncmp(k, sel, sl) != 0 || k[sl] != '.')
            continue;
        char *nk = fc_strdup(k + sl + 1);
        const int rc = nk == NULL ? fc_error_set(FC_ENOMEM, "out of memory")
                                  : fc_xspec_rekey(&out->specs[i], nk);
        if (rc < 0) {
            fc_free(keep);
            return rc;
        }
        keep[i] = 1;
        kept++;
    }
    fc_specs_compact(out, keep);
    fc_free(keep);
    if (kept == 0)
        return fc_error_set(FC_EINVAL, "--select '%s': the input has no subtree of that name", sel);
    return FC_OK;
}

static int fc_step_strip(struct fc_xform_result *out, const char *prefix)
{
    const size_t pl = strlen(prefix);
    size_t hits = 0;
    for (size_t i = 0; i < out->n; i++) {
        const char *k = out->specs[i].key;
        if (strncmp(k, prefix, pl) != 0 || k[pl] == '\0')
            continue;
        char *nk = fc_strdup(k + pl);
        if (nk == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        FC_TRY(fc_xspec_rekey(&out->specs[i], nk));
        hits++;
    }
    if (hits == 0)
        return fc_error_set(FC_EINVAL, "--strip-prefix '%s': no key starts with it", prefix);
    return fc_check_unique(out, "--strip-prefix");
}

/* Replace the first match of rule->re in key, expanding \0..\9. */
static int fc_regex_subst(const struct fc_regex_rule *rule, const char *key, char **out)
{
    regmatch_t m[10];
    *out = NULL;
    if (regexec(&rule->re, key, 10, m, 0) != 0)
        return 0;
    struct fc_buf b = FC_BUF_INIT(FC_XFORM_KEY_CAP);
    int rc = fc_buf_append(&b, key, (size_t)m[0].rm_so);
    for (const char *p = rule->repl; rc == FC_OK && *p != '\0'; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '9') {
            const int g = p[1] - '0';
            if (m[g].rm_so >= 0)
                rc = fc_buf_append(&b, key + m[g].rm_so, (size_t)(m[g].rm_eo - m[g].rm_so));
            p++;
        } else if (p[0] == '\\' && p[1] == '\\') {
            rc = fc_buf_putc(&b, '\\');
            p++;
        } else {
            rc = fc_buf_putc(&b, (unsigned char)*p);
        }
    }
    if (rc == FC_OK)
        rc = fc_buf_puts(&b, key + m[0].rm_eo);
    if (rc == FC_OK)
        rc = fc_buf_putc(&b, '\0');
    if (rc < 0) {
        fc_buf_release(&b);
        return rc;
    }
    *out = (char *)fc_buf_detach(&b, NULL);
    return 1;
}

static int fc_step_rename(struct fc_xform_result *out, const struct fc_regex_rule *rule)
{
    size_t hits = 0;
    for (size_t i = 0; i < out->n; i++) {
        char *nk;
        const int m = fc_regex_subst(rule, out->specs[i].key, &nk);
        FC_TRY(m);
        if (m == 0)
            continue;
        if (nk[0] == '\0') {
            fc_free(nk);
            return fc_error_set(FC_EINVAL, "--rename '%s=%s': turns '%s' into an empty key",
                                rule->pattern, rule->repl, out->specs[i].key);
        }
        FC_TRY(fc_xspec_rekey(&out->specs[i], nk));
        hits++;
    }
    if (hits == 0)
        return fc_error_set(FC_EINVAL, "--rename '%s=%s': no key matches '%s'", rule->pattern,
                            rule->repl, rule->pattern);
    return fc_check_unique(out, "--rename");
}

static int fc_step_drop(struct fc_xform_result *out, const struct fc_regex_rule *rule)
{
    size_t hits = 0;
    unsigned char *keep = fc_calloc(out->n + 1, 1);
    if (keep == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < out->n; i++) {
        keep[i] = regexec(&rule->re, out->specs[i].key, 0, NULL, 0) != 0;
        hits += !keep[i];
    }
    fc_specs_compact(out, keep);
    fc_free(keep);
    if (hits == 0)
        return fc_error_set(FC_EINVAL, "--drop '%s': no key matches", rule->pattern);
    return FC_OK;
}

static int fc_find_tensor(const struct fc_xform_result *out, const char *key, const char *opt,
                          long *idx)
{
    *idx = fc_spec_find(out, key);
    if (*idx < 0)
        return fc_error_set(FC_EINVAL, "%s: the input has no key '%s'", opt, key);
    if (out->specs[*idx].kind != FC_ENTRY_TENSOR)
        return fc_error_set(FC_EINVAL, "%s: '%s' is not a tensor", opt, key);
    return FC_OK;
}

static int fc_step_conv2d(struct fc_xform_result *out, const char *key)
{
    long i;
    FC_TRY(fc_find_tensor(out, key, "--conv2d-to-linear", &i));
    struct fc_xspec *s = &out->specs[i];
    if (s->ndim == 2) {
        char msg[512];
        snprintf(msg, sizeof(msg), "--conv2d-to-linear: '%s' is already 2-D; left alone", key);
        return fc_note(out, msg);
    }
    if (s->ndim != 4)
        return fc_error_set(FC_EINVAL,
                            "--conv2d-to-linear: '%s' has %d dims; expected a 4-D [O, C, kh, kw] "
                            "weight",
                            key, s->ndim);
    if (s->conv2d)
        return FC_OK;
    const int64_t o = s->shape[0], c = s->shape[1], kh = s->shape[2], kw = s->shape[3];
    s->conv2d = 1;
    s->ndim = 2;
    s->shape[0] = o;
    s->shape[1] = c * kh * kw;
    return FC_OK;
}

static int fc_step_tie(struct fc_xform_result *out, const struct fc_tie_rule *t)
{
    long si;
    FC_TRY(fc_find_tensor(out, t->src, "--tie", &si));
    long di = fc_spec_find(out, t->dst);
    if (di == si)
        return fc_error_set(FC_EINVAL, "--tie '%s=%s': a key cannot be tied to itself", t->dst,
                            t->src);
    if (di >= 0 && out->specs[di].kind != FC_ENTRY_TENSOR)
        return fc_error_set(FC_EINVAL, "--tie: '%s' is not a tensor", t->dst);
    if (di < 0) {
        /* DST is new: append a copy of SRC's spec under the new name. */
        struct fc_xspec *a = fc_reallocarray(out->specs, out->n + 1, sizeof(*a));
        if (a == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        out->specs = a;
        struct fc_xspec *d = &out->specs[out->n];
        *d = out->specs[si];
        d->key = NULL;
        d->path = NULL;
        d->path_len = 0;
        FC_TRY(fc_path_copy(&d->path, out->specs[si].path, out->specs[si].path_len));
        d->path_len = out->specs[si].path_len;
        out->n++;
        char *nk = fc_strdup(t->dst);
        if (nk == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        FC_TRY(fc_xspec_rekey(d, nk));
        d->alias_of = si;
        return FC_OK;
    }
    /* DST exists: it takes SRC's data, dtype, shape and ops; keep its name and path. */
    struct fc_xspec *d = &out->specs[di];
    const struct fc_xspec *s = &out->specs[si];
    d->entry = s->entry;
    d->dtype = s->dtype;
    d->ndim = s->ndim;
    memcpy(d->shape, s->shape, sizeof(d->shape));
    d->conv2d = s->conv2d;
    d->replicate = s->replicate;
    /* Aliases point backwards; flip the direction when DST comes first. */
    if (di > si) {
        d->alias_of = s->alias_of >= 0 ? s->alias_of : si;
    } else {
        d->alias_of = -1;
        for (size_t j = 0; j < out->n; j++)
            if ((long)j != di && (out->specs[j].alias_of == si || (long)j == si))
                out->specs[j].alias_of = di;
    }
    return FC_OK;
}

/* Tensors that read the same bytes the same way and end identical share stored bytes. */
static void fc_auto_alias(const struct fc_source *src, struct fc_xform_result *out)
{
    for (size_t i = 0; i < out->n; i++) {
        struct fc_xspec *a = &out->specs[i];
        if (a->kind != FC_ENTRY_TENSOR || a->alias_of >= 0)
            continue;
        const struct fc_entry *ea = &src->entries[a->entry];
        /* Only sources with one storage per tensor (not DCP) can tell sharing. */
        if (ea->storage >= src->nstorages || src->storages[ea->storage].nrefs < 2)
            continue;
        for (size_t j = 0; j < i; j++) {
            const struct fc_xspec *b = &out->specs[j];
            if (b->kind != FC_ENTRY_TENSOR || b->alias_of >= 0)
                continue;
            const struct fc_entry *eb = &src->entries[b->entry];
            if (eb->storage != ea->storage || eb->t.storage_offset != ea->t.storage_offset ||
                eb->t.ndim != ea->t.ndim || eb->t.dtype != ea->t.dtype || a->dtype != b->dtype ||
                a->conv2d != b->conv2d || a->replicate != b->replicate ||
                memcmp(eb->t.shape, ea->t.shape, sizeof(int64_t) * (size_t)ea->t.ndim) != 0 ||
                memcmp(eb->t.stride, ea->t.stride, sizeof(int64_t) * (size_t)ea->t.ndim) != 0)
                continue;
            a->alias_of = (long)j;
            break;
        }
    }
}

int fc_xform_apply(const struct fc_source *src, const struct fc_xform_rules *r,
                   struct fc_xform_result *out)
{
    int rc = FC_OK;
    memset(out, 0, sizeof(*out));
    out->specs = fc_calloc(src->nentries == 0 ? 1 : src->nentries, sizeof(*out->specs));
    if (out->specs == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < src->nentries; i++) {
        const struct fc_entry *e = &src->entries[i];
        struct fc_xspec *s = &out->specs[out->n];
        memset(s, 0, sizeof(*s));
        s->src = src;
        s->alias_of = -1;
        s->kind = e->kind;
        s->entry = i;
        s->key = fc_strdup(e->key);
        if (s->key == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto fail;
        }
        out->n++;
        FC_TRY_GOTO(fc_path_copy(&s->path, e->path, e->path_len), rc, fail);
        s->path_len = e->path_len;
        if (e->kind == FC_ENTRY_TENSOR) {
            s->dtype = e->t.dtype;
            s->ndim = e->t.ndim;
            memcpy(s->shape, e->t.shape, sizeof(s->shape));
        }
    }
    if (r->select != NULL)
        FC_TRY_GOTO(fc_step_select(out, r->select), rc, fail);
    if (r->strip_prefix != NULL)
        FC_TRY_GOTO(fc_step_strip(out, r->strip_prefix), rc, fail);
    for (size_t i = 0; i < r->nrenames; i++)
        FC_TRY_GOTO(fc_step_rename(out, &r->renames[i]), rc, fail);
    for (size_t i = 0; i < r->ndrops; i++)
        FC_TRY_GOTO(fc_step_drop(out, &r->drops[i]), rc, fail);
    /* Buffers the user keeps whole: decided by name before tie copies placements. */
    for (size_t i = 0; i < out->n; i++)
        for (size_t k = 0; k < r->nreplicas; k++)
            if (out->specs[i].kind == FC_ENTRY_TENSOR &&
                regexec(&r->replicas[k].re, out->specs[i].key, 0, NULL, 0) == 0)
                out->specs[i].replicate = 1;
    for (size_t i = 0; i < r->nconv2d; i++)
        FC_TRY_GOTO(fc_step_conv2d(out, r->conv2d[i]), rc, fail);
    for (size_t i = 0; i < r->nties; i++)
        FC_TRY_GOTO(fc_step_tie(out, &r->ties[i]), rc, fail);
    if (r->dtype != FC_DTYPE_INVALID) {
        for (size_t i = 0; i < out->n; i++) {
            struct fc_xspec *s = &out->specs[i];
            const struct fc_dtype_info *info = fc_dtype_info(s->dtype);
            /* Optimizer step counters stay exact: bf16 cannot count past 256. */
            const char *last = strrchr(s->key, '.');
            const int is_step =
                s->ndim == 0 && strcmp(last != NULL ? last + 1 : s->key, "step") == 0;
            if (s->kind == FC_ENTRY_TENSOR && info != NULL && info->is_floating && !is_step)
                s->dtype = r->dtype;
        }
    }
    if (r->add_prefix != NULL) {
        const size_t pl = strlen(r->add_prefix);
        /* "model." becomes a path component of its own, like get_state_dict apps nest. */
        const int as_component =
            pl > 1 && r->add_prefix[pl - 1] == '.' && memchr(r->add_prefix, '.', pl - 1) == NULL;
        for (size_t i = 0; i < out->n; i++) {
            struct fc_xspec *s = &out->specs[i];
            const size_t kl = strlen(s->key);
            char *nk = fc_malloc(pl + kl + 1);
            if (nk == NULL) {
                rc = fc_error_set(FC_ENOMEM, "out of memory");
                goto fail;
            }
            memcpy(nk, r->add_prefix, pl);
            memcpy(nk + pl, s->key, kl + 1);
            if (as_component) {
                struct fc_path_elem *p = fc_calloc(s->path_len + 1, sizeof(*p));
                char *comp = fc_strndup(r->add_prefix, pl - 1);
                if (p == NULL || comp == NULL) {
                    fc_free(p);
                    fc_free(comp);
                    fc_free(nk);
                    rc = fc_error_set(FC_ENOMEM, "out of memory");
                    goto fail;
                }
                p[0] = (struct fc_path_elem){0, 0, comp};
                memcpy(p + 1, s->path, s->path_len * sizeof(*p));
                fc_free(s->path);
                s->path = p;
                s->path_len++;
                fc_free(s->key);
                s->key = nk;
            } else {
                FC_TRY_GOTO(fc_xspec_rekey(s, nk), rc, fail);
            }
        }
    }
    fc_auto_alias(src, out);
    return FC_OK;
fail:
    fc_xform_result_release(out);
    return rc;
}

int fc_xform_rename_key(const struct fc_xform_rules *r, const char *key, char **out)
{
    char *cur = NULL;
    *out = NULL;
    if (r->strip_prefix != NULL) {
        const size_t pl = strlen(r->strip_prefix);
        if (strncmp(key, r->strip_prefix, pl) == 0 && key[pl] != '\0') {
            cur = fc_strdup(key + pl);
            if (cur == NULL)
                return fc_error_set(FC_ENOMEM, "out of memory");
        }
    }
    for (size_t i = 0; i < r->nrenames; i++) {
        char *next;
        const int m = fc_regex_subst(&r->renames[i], cur != NULL ? cur : key, &next);
        if (m < 0) {
            fc_free(cur);
            return m;
        }
        if (m == 1) {
            fc_free(cur);
            cur = next;
        }
    }
    *out = cur;
    return FC_OK;
}
