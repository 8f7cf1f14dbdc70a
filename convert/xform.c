/*
 * xform.c - the transform pipeline: each rule, in order, over the specs
 * (renames, selects, drops, copies, ties, marks, and the generic step of the
 * rules that append an op from ops.c's table), then the automatic aliases of
 * tied storage; debug builds check the result's invariants (xform.h).
 */
#include "xform.h"
#include "xform_pipe.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_strmap.h"

#define FC_XFORM_KEY_CAP ((size_t)1 << 20)

/* ---- specs ---- */

void fc_xspec_clear(struct fc_xspec *s)
{
    fc_free(s->key);
    for (size_t j = 0; j < s->path_len; j++)
        fc_free((void *)(uintptr_t)s->path[j].key);
    fc_free(s->path);
    fc_ops_free(s->ops, s->nops);
    s->key = NULL;
    s->path = NULL;
    s->path_len = 0;
    s->ops = NULL;
    s->nops = 0;
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
    fc_source_free(out->virt); /* after the specs that read from it */
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

int fc_xform_push(struct fc_xform_result *xr, size_t *out)
{
    if (xr->n == xr->cap) {
        /* Doubling: one spec at a time would copy the array once per key. */
        const size_t cap = xr->cap < 64 ? 64 : xr->cap * 2;
        struct fc_xspec *a = fc_reallocarray(xr->specs, cap, sizeof(*a));
        if (a == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        xr->specs = a;
        xr->cap = cap;
    }
    struct fc_xspec *a = xr->specs;
    memset(&a[xr->n], 0, sizeof(a[xr->n]));
    a[xr->n].alias_of = -1;
    a[xr->n].copy_of = -1;
    a[xr->n].param_of = -1;
    *out = xr->n++;
    return FC_OK;
}

int fc_xspec_dup(struct fc_xspec *dst, const struct fc_xspec *src)
{
    *dst = *src;
    dst->key = fc_strdup(src->key);
    dst->path = NULL;
    dst->path_len = 0;
    dst->ops = NULL;
    dst->nops = 0;
    if (dst->key == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    FC_TRY(fc_path_copy(&dst->path, src->path, src->path_len));
    dst->path_len = src->path_len;
    FC_TRY(fc_ops_dup(&dst->ops, src->ops, src->nops));
    dst->nops = src->nops;
    return FC_OK;
}

int fc_xspec_push_op(struct fc_xspec *s, const struct fc_op *op, const char *label)
{
    if (s->nops == FC_XFORM_MAX_OPS)
        return fc_error_set(FC_EINVAL, "%s: '%s' already has %d ops", label, s->key,
                            FC_XFORM_MAX_OPS);
    struct fc_op *a = fc_reallocarray(s->ops, s->nops + 1, sizeof(*a));
    if (a == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    s->ops = a;
    struct fc_op *o = &a[s->nops++];
    *o = *op;
    o->fill_row = NULL;
    o->in_dtype = s->dtype;
    o->in_ndim = s->ndim;
    memcpy(o->in_shape, s->shape, sizeof(o->in_shape));
    fc_op_out(o, &s->dtype, &s->ndim, s->shape);
    return FC_OK;
}

const char *fc_path_elem_text(const struct fc_path_elem *e, char *tmp, size_t tmplen)
{
    if (!e->is_index)
        return e->key;
    snprintf(tmp, tmplen, "%lld", (long long)e->index);
    return tmp;
}

/*
 * Give spec a new key (taking ownership of newkey) and recompute its
 * planner_data path: leading path components that still prefix the key are
 * kept, the rest of the key becomes one component (an FQN with dots inside,
 * as state dicts have).
 */
int fc_xspec_rekey(struct fc_xspec *s, char *newkey)
{
    size_t keep = 0, pos = 0;
    char tmp[32];
    while (keep + 1 < s->path_len) {
        const char *t = fc_path_elem_text(&s->path[keep], tmp, sizeof(tmp));
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

/* ---- the pipeline's state: specs plus where renamed keys went ---- */

/*
 * The most keys the rules may make: FC_XFORM_KEYS_PER_INPUT_KEY times the
 * inputs' keys, at least FC_XFORM_MIN_KEY_CAP.  Real pipelines (EMA and MoT
 * copies, ties) multiply keys by 2-4; doubling --copy rules grow
 * exponentially and would take minutes and gigabytes before failing.
 */
static size_t fc_xform_key_cap(size_t input_keys)
{
    if (input_keys > SIZE_MAX / FC_XFORM_KEYS_PER_INPUT_KEY)
        return SIZE_MAX;
    const size_t cap = input_keys * FC_XFORM_KEYS_PER_INPUT_KEY;
    return cap < FC_XFORM_MIN_KEY_CAP ? FC_XFORM_MIN_KEY_CAP : cap;
}

/* FC_EINVAL naming the rule when one more key would pass the cap. */
int fc_pipe_room(const struct fc_pipe *p, const struct fc_rule *rule)
{
    if (p->out->n < p->max_keys)
        return FC_OK;
    return fc_error_set(FC_EINVAL,
                        "%s: the rules would make more than %zu keys (at most %d times the "
                        "input's keys, or %d)",
                        rule->label, p->max_keys, FC_XFORM_KEYS_PER_INPUT_KEY,
                        FC_XFORM_MIN_KEY_CAP);
}

int fc_pipe_gone(struct fc_pipe *p, const char *key, const struct fc_rule *rule)
{
    struct fc_gone *g = fc_reallocarray(p->gone, p->ngone + 1, sizeof(*g));
    if (g == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    p->gone = g;
    g[p->ngone].key = fc_strdup(key);
    g[p->ngone].by = rule->label;
    if (g[p->ngone].key == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    p->ngone++;
    return FC_OK;
}

/* "<rule>: no key 'K'", with the rule that renamed K away when one did. */
static int fc_pipe_missing(const struct fc_pipe *p, const struct fc_rule *rule, const char *key)
{
    for (size_t i = p->ngone; i-- > 0;)
        if (strcmp(p->gone[i].key, key) == 0)
            return fc_error_set(FC_EINVAL, "%s: no key '%s' (an earlier rule, %s, renamed it)",
                                rule->label, key, p->gone[i].by);
    return fc_error_set(FC_EINVAL, "%s: the input has no key '%s'", rule->label, key);
}

int fc_key_index(const struct fc_xform_result *out, struct fc_strmap *m)
{
    for (size_t i = 0; i < out->n; i++)
        FC_TRY(fc_strmap_put(m, out->specs[i].key, i, NULL));
    return FC_OK;
}

static long fc_spec_find(const struct fc_xform_result *out, const char *key)
{
    for (size_t i = 0; i < out->n; i++)
        if (strcmp(out->specs[i].key, key) == 0)
            return (long)i;
    return -1;
}

int fc_find_tensor(const struct fc_pipe *p, const struct fc_rule *rule, const char *key, long *idx)
{
    *idx = fc_spec_find(p->out, key);
    if (*idx < 0)
        return fc_pipe_missing(p, rule, key);
    if (p->out->specs[*idx].kind != FC_ENTRY_TENSOR)
        return fc_error_set(FC_EINVAL, "%s: '%s' is not a tensor", rule->label, key);
    return FC_OK;
}

int fc_check_unique(const struct fc_xform_result *out, const struct fc_rule *rule)
{
    struct fc_strmap seen = FC_STRMAP_INIT;
    int rc = FC_OK;
    for (size_t i = 0; i < out->n && rc == FC_OK; i++) {
        const int put = fc_strmap_put(&seen, out->specs[i].key, i, NULL);
        if (put < 0)
            rc = put;
        else if (put == 1)
            rc =
                fc_error_set(FC_EINVAL, "%s: two keys become '%s'", rule->label, out->specs[i].key);
    }
    fc_strmap_release(&seen);
    return rc;
}

/*
 * Keep the specs whose keep[] flag is set, in order, in one pass (select and
 * drop can remove most of 100k keys).  Aliases and copies are renumbered; an
 * alias whose root is dropped makes the first surviving alias the new root.
 */
int fc_specs_compact(struct fc_xform_result *out, const unsigned char *keep)
{
    long *map = fc_calloc(out->n + 1, sizeof(*map));
    if (map == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    size_t w = 0;
    for (size_t i = 0; i < out->n; i++)
        map[i] = keep[i] ? (long)w++ : -1;
    for (size_t i = 0; i < out->n; i++) {
        struct fc_xspec *s = &out->specs[i];
        if (!keep[i] || s->alias_of < 0 || keep[s->alias_of])
            continue;
        /* The root is gone: the first alias left takes its place. */
        const long root = s->alias_of;
        s->alias_of = -1;
        for (size_t j = i + 1; j < out->n; j++)
            if (out->specs[j].alias_of == root)
                out->specs[j].alias_of = (long)i;
    }
    w = 0;
    for (size_t i = 0; i < out->n; i++) {
        struct fc_xspec *s = &out->specs[i];
        if (!keep[i]) {
            fc_xspec_clear(s);
            continue;
        }
        s->alias_of = s->alias_of >= 0 ? map[s->alias_of] : -1;
        s->copy_of = s->copy_of >= 0 ? map[s->copy_of] : -1;
        out->specs[w++] = *s;
    }
    out->n = w;
    fc_free(map);
    return FC_OK;
}

/* ---- renaming rules: each maps one key to a new one (1), or leaves it (0) ---- */

static const char *const fc_wrappers[] = {"_fsdp_wrapped_module.", "_checkpoint_wrapped_module.",
                                          "_orig_mod."};

static int fc_strip_wrappers(const char *key, char **out)
{
    struct fc_buf b = FC_BUF_INIT(FC_XFORM_KEY_CAP);
    int changed = 0, rc = FC_OK;
    const char *p = key;
    *out = NULL;
    if (strncmp(p, "module.", 7) == 0) {
        p += 7;
        changed = 1;
    }
    while (*p != '\0' && rc == FC_OK) {
        size_t skip = 0;
        /* Only whole components: at the key's start or after a dot. */
        for (size_t w = 0; w < 3 && (p == key || p[-1] == '.'); w++)
            if (strncmp(p, fc_wrappers[w], strlen(fc_wrappers[w])) == 0)
                skip = strlen(fc_wrappers[w]);
        if (skip > 0) {
            p += skip;
            changed = 1;
        } else {
            rc = fc_buf_putc(&b, (unsigned char)*p++);
        }
    }
    if (rc == FC_OK)
        rc = fc_buf_putc(&b, '\0');
    if (rc < 0 || !changed) {
        fc_buf_release(&b);
        return rc < 0 ? rc : 0;
    }
    *out = (char *)fc_buf_detach(&b, NULL);
    return 1;
}

static int fc_map_one(const struct fc_rule *rule, const char *key, char **out)
{
    *out = NULL;
    switch (rule->kind) {
    case FC_RULE_STRIP_PREFIX: {
        const size_t pl = strlen(rule->a);
        if (strncmp(key, rule->a, pl) != 0 || key[pl] == '\0')
            return 0;
        *out = fc_strdup(key + pl);
        return *out == NULL ? fc_error_set(FC_ENOMEM, "out of memory") : 1;
    }
    case FC_RULE_RENAME: return fc_regex_subst(rule->re, rule->b, key, out);
    case FC_RULE_STRIP_WRAPPERS: return fc_strip_wrappers(key, out);
    default: return 0;
    }
}

int fc_step_rekey(struct fc_pipe *p, const struct fc_rule *rule)
{
    struct fc_xform_result *out = p->out;
    size_t hits = 0;
    for (size_t i = 0; i < out->n; i++) {
        char *nk;
        const int m = fc_map_one(rule, out->specs[i].key, &nk);
        FC_TRY(m);
        if (m == 0)
            continue;
        if (nk[0] == '\0') {
            fc_free(nk);
            return fc_error_set(FC_EINVAL, "%s: turns '%s' into an empty key", rule->label,
                                out->specs[i].key);
        }
        FC_TRY(fc_pipe_gone(p, out->specs[i].key, rule));
        FC_TRY(fc_xspec_rekey(&out->specs[i], nk));
        hits++;
    }
    /* Wrapper names are a clean-up: a model without any is fine. */
    if (hits == 0 && rule->kind == FC_RULE_RENAME)
        return fc_error_set(FC_EINVAL, "%s: no key matches '%s'", rule->label, rule->a);
    if (hits == 0 && rule->kind == FC_RULE_STRIP_PREFIX)
        return fc_error_set(FC_EINVAL, "%s: no key starts with '%s'", rule->label, rule->a);
    return fc_check_unique(out, rule);
}

int fc_step_select(struct fc_pipe *p, const struct fc_rule *rule)
{
    struct fc_xform_result *out = p->out;
    const size_t sl = strlen(rule->a);
    size_t kept = 0;
    int rc = FC_OK;
    unsigned char *keep = fc_calloc(out->n + 1, 1);
    if (keep == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < out->n && rc == FC_OK; i++) {
        const char *k = out->specs[i].key;
        if (strncmp(k, rule->a, sl) != 0 || k[sl] != '.')
            continue;
        char *nk = fc_strdup(k + sl + 1);
        rc = nk == NULL ? fc_error_set(FC_ENOMEM, "out of memory")
                        : fc_xspec_rekey(&out->specs[i], nk);
        keep[i] = 1;
        kept++;
    }
    if (rc == FC_OK)
        rc = fc_specs_compact(out, keep);
    fc_free(keep);
    if (rc == FC_OK && kept == 0)
        rc = fc_error_set(FC_EINVAL, "%s: the input has no subtree of that name", rule->label);
    return rc;
}

int fc_step_add_prefix(struct fc_pipe *p, const struct fc_rule *rule)
{
    struct fc_xform_result *out = p->out;
    const char *prefix = rule->a;
    const size_t pl = strlen(prefix);
    /* "model." becomes a path component of its own, like get_state_dict apps nest. */
    const int as_component = pl > 1 && prefix[pl - 1] == '.' && memchr(prefix, '.', pl - 1) == NULL;
    for (size_t i = 0; i < out->n; i++) {
        struct fc_xspec *s = &out->specs[i];
        const size_t kl = strlen(s->key);
        char *nk = fc_malloc(pl + kl + 1);
        if (nk == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        memcpy(nk, prefix, pl);
        memcpy(nk + pl, s->key, kl + 1);
        if (!as_component) {
            FC_TRY(fc_xspec_rekey(s, nk));
            continue;
        }
        struct fc_path_elem *path = fc_calloc(s->path_len + 1, sizeof(*path));
        char *comp = fc_strndup(prefix, pl - 1);
        if (path == NULL || comp == NULL) {
            fc_free(path);
            fc_free(comp);
            fc_free(nk);
            return fc_error_set(FC_ENOMEM, "out of memory");
        }
        path[0] = (struct fc_path_elem){0, 0, comp};
        memcpy(path + 1, s->path, s->path_len * sizeof(*path));
        fc_free(s->path);
        s->path = path;
        s->path_len++;
        fc_free(s->key);
        s->key = nk;
    }
    return FC_OK;
}

int fc_step_drop(struct fc_pipe *p, const struct fc_rule *rule)
{
    struct fc_xform_result *out = p->out;
    size_t hits = 0;
    int rc = FC_OK;
    unsigned char *keep = fc_calloc(out->n + 1, 1);
    if (keep == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < out->n && rc == FC_OK; i++) {
        const int m = fc_regex_search(rule->re, out->specs[i].key);
        rc = m < 0 ? m : FC_OK;
        keep[i] = m == 0;
        hits += m == 1;
    }
    if (rc == FC_OK)
        rc = fc_specs_compact(out, keep);
    fc_free(keep);
    if (rc == FC_OK && hits == 0)
        rc = fc_error_set(FC_EINVAL, "%s: no key matches", rule->label);
    return rc;
}

/* Regex marks: --replicate and --optim-skip set a flag on the tensors they match now. */
int fc_step_mark(struct fc_pipe *p, const struct fc_rule *rule)
{
    struct fc_xform_result *out = p->out;
    for (size_t i = 0; i < out->n; i++) {
        struct fc_xspec *s = &out->specs[i];
        if (s->kind != FC_ENTRY_TENSOR)
            continue;
        const int m = fc_regex_search(rule->re, s->key);
        FC_TRY(m);
        if (m == 1 && rule->kind == FC_RULE_REPLICATE)
            s->replicate = 1;
        else if (m == 1)
            s->optim_skip = 1;
    }
    return FC_OK;
}

/* ---- rules that make new tensors: copy and tie ---- */

int fc_step_copy(struct fc_pipe *p, const struct fc_rule *rule)
{
    struct fc_xform_result *out = p->out;
    struct fc_strmap keys = FC_STRMAP_INIT;
    const size_t n = out->n; /* copies of copies made by this same rule: none */
    size_t hits = 0;
    int rc = fc_key_index(out, &keys);
    for (size_t i = 0; i < n && rc == FC_OK; i++) {
        char *nk;
        const int m = fc_regex_subst(rule->re, rule->b, out->specs[i].key, &nk);
        if (m <= 0) {
            rc = m;
            continue;
        }
        size_t at;
        if (fc_strmap_get(&keys, nk, &at)) {
            rc = fc_error_set(FC_EINVAL,
                              "%s: the copy of '%s' would be '%s', which exists (drop "
                              "it first)",
                              rule->label, out->specs[i].key, nk);
            fc_free(nk);
            continue;
        }
        size_t d;
        rc = fc_pipe_room(p, rule);
        if (rc < 0) {
            fc_free(nk);
            continue;
        }
        rc = fc_xform_push(out, &d);
        if (rc == FC_OK)
            rc = fc_xspec_dup(&out->specs[d], &out->specs[i]);
        if (rc == FC_OK) {
            struct fc_xspec *c = &out->specs[d];
            /* An independent tensor: its own items even when the source is tied. */
            c->alias_of = -1;
            c->copy_of = (long)i;
            rc = fc_xspec_rekey(c, nk);
        } else {
            fc_free(nk);
        }
        if (rc == FC_OK)
            rc = fc_strmap_put(&keys, out->specs[d].key, d, NULL) < 0 ? FC_ENOMEM : FC_OK;
        hits++;
    }
    fc_strmap_release(&keys);
    FC_TRY(rc);
    if (hits == 0)
        return fc_error_set(FC_EINVAL, "%s: no key matches '%s'", rule->label, rule->a);
    return fc_check_unique(out, rule);
}

static int fc_same_ops(const struct fc_xspec *a, const struct fc_xspec *b)
{
    if (a->nops != b->nops)
        return 0;
    for (size_t k = 0; k < a->nops; k++)
        if (!fc_op_same(&a->ops[k], &b->ops[k]))
            return 0;
    return 1;
}

int fc_step_tie(struct fc_pipe *p, const struct fc_rule *rule)
{
    struct fc_xform_result *out = p->out;
    long si;
    FC_TRY(fc_find_tensor(p, rule, rule->b, &si));
    const long di = fc_spec_find(out, rule->a);
    if (di == si)
        return fc_error_set(FC_EINVAL, "%s: a key cannot be tied to itself", rule->label);
    if (di < 0) {
        /* DST is new: a copy of SRC's spec under the new name, storing SRC's bytes. */
        size_t d;
        FC_TRY(fc_xform_push(out, &d));
        FC_TRY(fc_xspec_dup(&out->specs[d], &out->specs[si]));
        char *nk = fc_strdup(rule->a);
        if (nk == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        FC_TRY(fc_xspec_rekey(&out->specs[d], nk));
        out->specs[d].copy_of = -1;
        out->specs[d].alias_of = out->specs[si].alias_of >= 0 ? out->specs[si].alias_of : si;
        return FC_OK;
    }
    struct fc_xspec *d = &out->specs[di];
    const struct fc_xspec *s = &out->specs[si];
    /* An existing DST may only be a tensor of SRC's dtype and shape (HF's tied lm_head). */
    if (d->kind != FC_ENTRY_TENSOR || d->dtype != s->dtype || d->ndim != s->ndim ||
        memcmp(d->shape, s->shape, sizeof(int64_t) * (size_t)s->ndim) != 0)
        return fc_error_set(FC_EINVAL,
                            "%s: '%s' already exists with another dtype or shape than '%s' (drop "
                            "it first)",
                            rule->label, rule->a, rule->b);
    /* DST takes SRC's data and ops; it keeps its name and path. */
    fc_ops_free(d->ops, d->nops);
    d->ops = NULL;
    d->nops = 0;
    FC_TRY(fc_ops_dup(&d->ops, s->ops, s->nops));
    d->nops = s->nops;
    d->src = s->src;
    d->input = s->input;
    d->entry = s->entry;
    d->replicate = s->replicate;
    d->copy_of = -1;
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

/* ---- rules that add ops ---- */

/* A tied pair must stay identical: an op on one member only is refused. */
int fc_check_untied(const struct fc_xform_result *out, const struct fc_rule *rule, long i)
{
    const struct fc_xspec *s = &out->specs[i];
    for (size_t j = 0; j < out->n; j++)
        if ((long)j != i && (out->specs[j].alias_of == i ||
                             (s->alias_of >= 0 &&
                              (out->specs[j].alias_of == s->alias_of || (long)j == s->alias_of))))
            return fc_error_set(FC_EINVAL,
                                "%s: '%s' is tied to '%s'; the rule would change one of them "
                                "only (--copy makes an independent tensor)",
                                rule->label, s->key, out->specs[j].key);
    return FC_OK;
}

/* A rule of the op table: the op on the key it names, or on every tensor the op admits. */
int fc_step_op(struct fc_pipe *p, const struct fc_rule *rule)
{
    const struct fc_op_def *def = fc_op_def(rule->append.kind);
    char note[512] = "";
    if (def->target == FC_OP_EVERY_TENSOR) {
        for (size_t i = 0; i < p->out->n; i++) {
            struct fc_xspec *s = &p->out->specs[i];
            if (s->kind != FC_ENTRY_TENSOR)
                continue;
            const int m = def->admit(&rule->append, s, rule->label, note, sizeof(note));
            FC_TRY(m);
            if (m == 1)
                FC_TRY(fc_xspec_push_op(s, &rule->append, rule->label));
        }
        return FC_OK;
    }
    long i;
    FC_TRY(fc_find_tensor(p, rule, rule->a, &i));
    const int m = def->admit(&rule->append, &p->out->specs[i], rule->label, note, sizeof(note));
    FC_TRY(m);
    if (note[0] != '\0')
        FC_TRY(fc_note(p->out, note));
    if (m == 0)
        return FC_OK;
    FC_TRY(fc_check_untied(p->out, rule, i));
    return fc_xspec_push_op(&p->out->specs[i], &rule->append, rule->label);
}

/* Tensors of one input that read the same bytes the same way share stored bytes. */
static void fc_auto_alias(struct fc_xform_result *out)
{
    for (size_t i = 0; i < out->n; i++) {
        struct fc_xspec *a = &out->specs[i];
        if (a->kind != FC_ENTRY_TENSOR || a->alias_of >= 0 || a->copy_of >= 0)
            continue;
        const struct fc_source *src = a->src;
        const struct fc_entry *ea = &src->entries[a->entry];
        /* Only sources with one storage per tensor (not DCP) can tell sharing. */
        if (ea->storage >= src->nstorages || src->storages[ea->storage].nrefs < 2)
            continue;
        for (size_t j = 0; j < i; j++) {
            const struct fc_xspec *b = &out->specs[j];
            if (b->kind != FC_ENTRY_TENSOR || b->alias_of >= 0 || b->copy_of >= 0 || b->src != src)
                continue;
            const struct fc_entry *eb = &src->entries[b->entry];
            if (eb->storage != ea->storage || eb->t.storage_offset != ea->t.storage_offset ||
                eb->t.ndim != ea->t.ndim || eb->t.dtype != ea->t.dtype || a->dtype != b->dtype ||
                a->replicate != b->replicate || !fc_same_ops(a, b) ||
                memcmp(eb->t.shape, ea->t.shape, sizeof(int64_t) * (size_t)ea->t.ndim) != 0 ||
                memcmp(eb->t.stride, ea->t.stride, sizeof(int64_t) * (size_t)ea->t.ndim) != 0)
                continue;
            a->alias_of = (long)j;
            break;
        }
    }
}

/* The specs of one input, keys prefixed; `owner` maps each key to its input for collisions. */
static int fc_add_input(struct fc_xform_result *out, const struct fc_xform_input *in, size_t input,
                        struct fc_strmap *owner, const struct fc_xform_input *all)
{
    const struct fc_source *src = in->src;
    const size_t pl = in->prefix != NULL ? strlen(in->prefix) : 0;
    for (size_t i = 0; i < src->nentries; i++) {
        const struct fc_entry *e = &src->entries[i];
        size_t si;
        FC_TRY(fc_xform_push(out, &si));
        struct fc_xspec *s = &out->specs[si];
        s->src = src;
        s->input = input;
        s->kind = e->kind;
        s->entry = i;
        s->key = fc_strdup(e->key);
        if (s->key == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        FC_TRY(fc_path_copy(&s->path, e->path, e->path_len));
        s->path_len = e->path_len;
        if (e->kind == FC_ENTRY_TENSOR) {
            s->dtype = e->t.dtype;
            s->ndim = e->t.ndim;
            memcpy(s->shape, e->t.shape, sizeof(s->shape));
        }
        if (pl > 0) {
            char *nk = fc_malloc(pl + strlen(e->key) + 1);
            if (nk == NULL)
                return fc_error_set(FC_ENOMEM, "out of memory");
            memcpy(nk, in->prefix, pl);
            strcpy(nk + pl, e->key);
            FC_TRY(fc_xspec_rekey(s, nk));
        }
        size_t prev;
        const int put = fc_strmap_put(owner, s->key, input, &prev);
        FC_TRY(put);
        if (put == 1)
            return fc_error_set(FC_EINVAL, "key '%s' is in two inputs: %s and %s", s->key,
                                all[prev].src->path, src->path);
    }
    return FC_OK;
}

#ifdef FC_DEBUG
/* Alias a reads target t's bytes: the same entry, or one sharing its torch.save storage. */
static int fc_same_source_bytes(const struct fc_xspec *a, const struct fc_xspec *t)
{
    if (a->src != t->src)
        return 0;
    if (a->entry == t->entry)
        return 1;
    const struct fc_entry *ea = &a->src->entries[a->entry], *et = &t->src->entries[t->entry];
    return ea->storage < a->src->nstorages && ea->storage == et->storage;
}

/* The first invariant spec i breaks (keys are checked by the caller), or NULL. */
static const char *fc_xspec_broken(const struct fc_xform_result *xr, size_t i)
{
    const struct fc_xspec *s = &xr->specs[i];
    if (s->key == NULL || s->nops > FC_XFORM_MAX_OPS || (s->nops > 0) != (s->ops != NULL))
        return "a spec without its key or op list";
    if (s->copy_of >= 0 && s->alias_of >= 0)
        return "a copy is an alias";
    if (s->copy_of >= (long)xr->n)
        return "copy_of past the specs";
    if (s->alias_of < 0)
        return NULL;
    if (s->alias_of >= (long)i)
        return "alias_of is not an earlier spec";
    const struct fc_xspec *t = &xr->specs[s->alias_of];
    if (s->dtype != t->dtype || s->ndim != t->ndim ||
        memcmp(s->shape, t->shape, sizeof(int64_t) * (size_t)s->ndim) != 0)
        return "an alias has another dtype or shape than its target";
    if (!fc_same_ops(s, t))
        return "an alias has another op list than its target";
    if (!fc_same_source_bytes(s, t))
        return "an alias reads other bytes than its target";
    return NULL;
}

const char *fc_xform_broken(const struct fc_xform_result *xr, size_t *at)
{
    struct fc_strmap seen = FC_STRMAP_INIT;
    const char *why = NULL;
    for (size_t i = 0; i < xr->n && why == NULL; i++) {
        *at = i;
        why = fc_xspec_broken(xr, i);
        if (why == NULL && fc_strmap_put(&seen, xr->specs[i].key, i, NULL) != 0)
            why = "a key twice"; /* or out of memory, which a debug check may call broken */
    }
    fc_strmap_release(&seen);
    return why;
}

void fc_xform_assert_valid(const struct fc_xform_result *xr)
{
    size_t at = 0;
    const char *why = fc_xform_broken(xr, &at);
    if (why != NULL)
        fprintf(stderr, "fsdpconv: xform invariant broken at spec %zu '%s': %s\n", at,
                xr->specs[at].key != NULL ? xr->specs[at].key : "(null)", why);
    assert(why == NULL);
}
#endif

int fc_xform_apply_inputs(const struct fc_xform_input *in, size_t nin,
                          const struct fc_xform_rules *r, struct fc_xform_result *out)
{
    struct fc_strmap owner = FC_STRMAP_INIT;
    struct fc_pipe p = {out, NULL, 0, 0};
    int rc = FC_OK;
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < nin && rc == FC_OK; i++)
        rc = fc_add_input(out, &in[i], i, &owner, in);
    fc_strmap_release(&owner); /* keys change from here on */
    p.max_keys = fc_xform_key_cap(out->n);
    for (size_t i = 0; i < r->n && rc == FC_OK; i++) {
        rc = r->v[i].step(&p, &r->v[i]);
        if (rc == FC_OK && out->n > p.max_keys)
            rc = fc_pipe_room(&p, &r->v[i]);
    }
    if (rc == FC_OK) {
        fc_auto_alias(out);
        fc_xform_assert_valid(out);
    }
    for (size_t i = 0; i < p.ngone; i++)
        fc_free(p.gone[i].key);
    fc_free(p.gone);
    if (rc < 0)
        fc_xform_result_release(out);
    return rc;
}

int fc_xform_apply(const struct fc_source *src, const struct fc_xform_rules *r,
                   struct fc_xform_result *out)
{
    const struct fc_xform_input in = {src, NULL};
    return fc_xform_apply_inputs(&in, 1, r, out);
}

int fc_xform_map_key(const struct fc_xform_rules *r, const char *key, char **out)
{
    char *cur = NULL;
    *out = NULL;
    for (size_t i = 0; i < r->n; i++) {
        char *next;
        const int m = fc_map_one(&r->v[i], cur != NULL ? cur : key, &next);
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
