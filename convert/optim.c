/*
 * optim.c - full optimizer state dict -> the layout get_state_dict gives an
 * FSDP2 model (input-formats.md C.3-C.5), and the --layout key prefixes.
 */
#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_strmap.h"
#include "xform.h"

#define FC_OPTIM_KEY_CAP ((size_t)1 << 20)

/* A path element as text (list indices as decimal). */
static const char *fc_elem_str(const struct fc_path_elem *e, char *tmp, size_t n)
{
    if (!e->is_index)
        return e->key;
    snprintf(tmp, n, "%lld", (long long)e->index);
    return tmp;
}

/* Append a spec; copies key and the path texts.  Returns its index via *out. */
static int fc_spec_push(struct fc_xform_result *xr, const char *key, const char *const *path,
                        size_t plen, size_t *out)
{
    struct fc_xspec *a = fc_reallocarray(xr->specs, xr->n + 1, sizeof(*a));
    if (a == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    xr->specs = a;
    struct fc_xspec *s = &a[xr->n];
    memset(s, 0, sizeof(*s));
    s->alias_of = -1;
    s->key = fc_strdup(key);
    s->path = fc_calloc(plen + 1, sizeof(*s->path));
    if (s->key == NULL || s->path == NULL) {
        fc_free(s->key);
        fc_free(s->path);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    xr->n++;
    for (size_t i = 0; i < plen; i++) {
        s->path[i].key = fc_strdup(path[i]);
        if (s->path[i].key == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        s->path_len = i + 1;
    }
    *out = xr->n - 1;
    return FC_OK;
}

static struct fc_pv *fc_own(struct fc_xform_result *xr, enum fc_pv_kind kind)
{
    struct fc_pv **o = fc_reallocarray(xr->owned, xr->nowned + 1, sizeof(*o));
    if (o == NULL)
        return NULL;
    xr->owned = o;
    struct fc_pv *v = fc_calloc(1, sizeof(*v));
    if (v == NULL)
        return NULL;
    v->kind = kind;
    o[xr->nowned++] = v;
    return v;
}

/* Prefix every existing (model) spec: key and path. */
static int fc_prefix_model(struct fc_xform_result *xr, size_t nmodel, const char *const *comps,
                           size_t ncomps)
{
    for (size_t i = 0; i < nmodel; i++) {
        struct fc_xspec *s = &xr->specs[i];
        struct fc_buf k = FC_BUF_INIT(FC_OPTIM_KEY_CAP);
        for (size_t c = 0; c < ncomps; c++)
            FC_TRY(fc_buf_printf(&k, "%s.", comps[c]));
        FC_TRY(fc_buf_puts(&k, s->key));
        FC_TRY(fc_buf_putc(&k, '\0'));
        struct fc_path_elem *p = fc_calloc(s->path_len + ncomps, sizeof(*p));
        if (p == NULL) {
            fc_buf_release(&k);
            return fc_error_set(FC_ENOMEM, "out of memory");
        }
        for (size_t c = 0; c < ncomps; c++) {
            p[c].key = fc_strdup(comps[c]);
            if (p[c].key == NULL) {
                for (size_t j = 0; j < c; j++)
                    fc_free((void *)(uintptr_t)p[j].key);
                fc_free(p);
                fc_buf_release(&k);
                return fc_error_set(FC_ENOMEM, "out of memory");
            }
        }
        memcpy(p + ncomps, s->path, s->path_len * sizeof(*p));
        fc_free(s->path);
        s->path = p;
        s->path_len += ncomps;
        fc_free(s->key);
        s->key = (char *)fc_buf_detach(&k, NULL);
    }
    return FC_OK;
}

/* One optimizer parameter group as found in the file. */
struct fc_group {
    const struct fc_entry *params; /* the "params" list */
    const struct fc_entry **hps;   /* every other hyper-parameter */
    size_t nhps;
};

static long fc_find_model(const struct fc_strmap *model_keys, const char *key)
{
    size_t i;
    return fc_strmap_get(model_keys, key, &i) ? (long)i : -1;
}

int fc_xform_add_optimizer(struct fc_xform_result *xr, const struct fc_xform_rules *rules,
                           const struct fc_source *osrc, const char *select, enum fc_layout layout)
{
    const size_t nmodel = xr->n;
    static const char *const titan_model[] = {"model"};
    static const char *const app_model[] = {"app", "model"};
    struct fc_group *groups = NULL;
    size_t ngroups = 0;
    long *param_of_id = NULL; /* int-keyed state: id -> model spec */
    size_t nparams = 0;
    long *order = NULL;
    struct fc_strmap model_keys = FC_STRMAP_INIT, ids = FC_STRMAP_INIT;
    char **idstrs = NULL;
    size_t nidstrs = 0;
    int rc = FC_OK;
    char tmp[32], tmp2[32];

    if (layout == FC_LAYOUT_NONE)
        layout = FC_LAYOUT_TORCHTITAN;
    if (osrc == NULL) /* --layout alone: only the model keys move */
        return layout == FC_LAYOUT_APP ? fc_prefix_model(xr, nmodel, app_model, 2)
                                       : fc_prefix_model(xr, nmodel, titan_model, 1);

    /* Parameter order for integer ids: model tensors, not buffers (--replicate), not ties. */
    order = fc_calloc(nmodel + 1, sizeof(*order));
    if (order == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < nmodel; i++) {
        const struct fc_xspec *s = &xr->specs[i];
        const struct fc_dtype_info *info = fc_dtype_info(s->dtype);
        if (s->kind != FC_ENTRY_TENSOR || s->alias_of >= 0 || s->replicate || info == NULL)
            continue;
        /* Integer and bool tensors are buffers: optimizers only take floating parameters. */
        const struct fc_entry *se = &s->src->entries[s->entry];
        if (!fc_dtype_info(se->t.dtype)->is_floating)
            continue;
        int skip = 0;
        for (size_t k = 0; k < rules->noptim_skips && !skip; k++)
            skip = regexec(&rules->optim_skips[k].re, s->key, 0, NULL, 0) == 0;
        if (!skip)
            order[nparams++] = (long)i;
    }

    /* Split the optimizer's entries into state and param_groups by their paths. */
    const size_t sl = select != NULL ? strlen(select) : 0;
    const struct fc_entry **state = fc_calloc(osrc->nentries + 1, sizeof(*state));
    size_t *state_skip = fc_calloc(osrc->nentries + 1, sizeof(*state_skip));
    size_t nstate = 0, nseen = 0;
    if (state == NULL || state_skip == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < osrc->nentries; i++) {
        const struct fc_entry *e = &osrc->entries[i];
        size_t k = 0;
        if (select != NULL) {
            if (strncmp(e->key, select, sl) != 0 || e->key[sl] != '.')
                continue;
            /* Number of path elements that spell the selected prefix. */
            size_t len = 0;
            while (k < e->path_len && len < sl) {
                len += strlen(fc_elem_str(&e->path[k], tmp, sizeof(tmp))) + (k > 0);
                k++;
            }
            if (len != sl)
                continue;
        }
        nseen++;
        if (e->path_len < k + 3)
            continue;
        const char *top = fc_elem_str(&e->path[k], tmp, sizeof(tmp));
        if (strcmp(top, "state") == 0) {
            state_skip[nstate] = k;
            state[nstate++] = e;
        } else if (strcmp(top, "param_groups") == 0 && e->path[k + 1].is_index) {
            const size_t g = (size_t)e->path[k + 1].index;
            if (g >= ngroups) {
                struct fc_group *ng = fc_reallocarray(groups, g + 1, sizeof(*ng));
                if (ng == NULL) {
                    rc = fc_error_set(FC_ENOMEM, "out of memory");
                    goto done;
                }
                memset(ng + ngroups, 0, (g + 1 - ngroups) * sizeof(*ng));
                groups = ng;
                ngroups = g + 1;
            }
            const char *hp = fc_elem_str(&e->path[k + 2], tmp, sizeof(tmp));
            if (strcmp(hp, "params") == 0) {
                groups[g].params = e;
            } else {
                const struct fc_entry **h =
                    fc_reallocarray(groups[g].hps, groups[g].nhps + 1, sizeof(*h));
                if (h == NULL) {
                    rc = fc_error_set(FC_ENOMEM, "out of memory");
                    goto done;
                }
                groups[g].hps = h;
                h[groups[g].nhps++] = e;
            }
        }
    }
    if (nseen == 0 || ngroups == 0) {
        rc = fc_error_set(FC_EINVAL,
                          "%s: no optimizer state dict%s%s (expected 'state' and "
                          "'param_groups')",
                          osrc->path, select ? " under " : "", select ? select : "");
        goto done;
    }
    /* Map every parameter id or FQN of every group to a model spec. */
    size_t total_ids = 0;
    for (size_t g = 0; g < ngroups; g++) {
        const struct fc_pv *p = groups[g].params != NULL ? groups[g].params->value : NULL;
        if (p == NULL || p->kind != FC_PV_LIST) {
            rc = fc_error_set(FC_EINVAL, "%s: param_groups[%zu] has no 'params' list", osrc->path,
                              g);
            goto done;
        }
        total_ids += p->u.seq.n;
    }
    param_of_id = fc_calloc(total_ids + 1, sizeof(*param_of_id));
    if (param_of_id == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    /* id -> spec: integer ids index the parameter order; FQNs name model keys. */
    int int_keyed = -1;
    for (size_t g = 0, slot = 0; g < ngroups; g++) {
        const struct fc_pv *p = groups[g].params->value;
        for (size_t q = 0; q < p->u.seq.n; q++, slot++) {
            const struct fc_pv *id = p->u.seq.items[q];
            long spec = -1;
            if (id->kind == FC_PV_INT && int_keyed != 0) {
                int_keyed = 1;
                if (id->u.i < 0 || (size_t)id->u.i >= nparams) {
                    rc = fc_error_set(FC_EINVAL,
                                      "%s: parameter id %lld but the model has %zu "
                                      "candidate tensors",
                                      osrc->path, (long long)id->u.i, nparams);
                    goto done;
                }
                spec = order[id->u.i];
            } else if (id->kind == FC_PV_STR && int_keyed != 1) {
                int_keyed = 0;
                char *renamed;
                FC_TRY_GOTO(fc_xform_rename_key(rules, id->u.str.s, &renamed), rc, done);
                if (model_keys.n == 0)
                    for (size_t m = 0; m < nmodel; m++)
                        if (xr->specs[m].kind == FC_ENTRY_TENSOR &&
                            fc_strmap_put(&model_keys, xr->specs[m].key, m, NULL) < 0) {
                            fc_free(renamed);
                            rc = fc_error_set(FC_ENOMEM, "out of memory");
                            goto done;
                        }
                spec = fc_find_model(&model_keys, renamed != NULL ? renamed : id->u.str.s);
                fc_free(renamed);
                if (spec < 0) {
                    rc = fc_error_set(FC_EINVAL,
                                      "%s: the optimizer has state for '%s' but the "
                                      "model has no such tensor",
                                      osrc->path, id->u.str.s);
                    goto done;
                }
            } else {
                rc = fc_error_set(FC_EINVAL, "%s: param_groups[%zu].params mixes ids and names",
                                  osrc->path, g);
                goto done;
            }
            param_of_id[slot] = spec;
        }
    }
    /* State entries name their parameter by id or FQN text: index that text once. */
    idstrs = fc_calloc(total_ids + 1, sizeof(*idstrs));
    if (idstrs == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t g = 0, slot = 0; g < ngroups; g++) {
        const struct fc_pv *p = groups[g].params->value;
        for (size_t q = 0; q < p->u.seq.n; q++, slot++) {
            const struct fc_pv *id = p->u.seq.items[q];
            char ids_buf[32];
            if (id->kind == FC_PV_INT)
                snprintf(ids_buf, sizeof(ids_buf), "%lld", (long long)id->u.i);
            idstrs[nidstrs] = fc_strdup(id->kind == FC_PV_STR ? id->u.str.s : ids_buf);
            if (idstrs[nidstrs] == NULL) {
                rc = fc_error_set(FC_ENOMEM, "out of memory");
                goto done;
            }
            FC_TRY_GOTO(fc_strmap_put(&ids, idstrs[nidstrs], slot, NULL), rc, done);
            nidstrs++;
        }
    }
    /* Now that the model keys are final, prefix them. */
    FC_TRY_GOTO(layout == FC_LAYOUT_APP ? fc_prefix_model(xr, nmodel, app_model, 2)
                                        : fc_prefix_model(xr, nmodel, titan_model, 1),
                rc, done);
    const size_t model_prefix = layout == FC_LAYOUT_APP ? 10 : 6; /* "app.model." / "model." */
    const char *okey = layout == FC_LAYOUT_APP ? "app.optim" : "optimizer";

    /* State: state.<fqn>.<name>, sharded like the parameter. */
    for (size_t i = 0; i < nstate; i++) {
        const struct fc_entry *e = state[i];
        const size_t k = state_skip[i];
        const char *sid = fc_elem_str(&e->path[k + 1], tmp2, sizeof(tmp2));
        long spec = -1;
        size_t slot;
        if (fc_strmap_get(&ids, sid, &slot))
            spec = param_of_id[slot];
        if (spec < 0) {
            rc = fc_error_set(FC_EINVAL, "%s: optimizer state '%s' belongs to no parameter group",
                              osrc->path, e->key);
            goto done;
        }
        const struct fc_xspec pspec = xr->specs[spec];
        const char *fqn = pspec.key + model_prefix;
        struct fc_buf name = FC_BUF_INIT(FC_OPTIM_KEY_CAP), key = FC_BUF_INIT(FC_OPTIM_KEY_CAP);
        for (size_t d = k + 2; d < e->path_len; d++)
            FC_TRY_GOTO(fc_buf_printf(&name, d > k + 2 ? ".%s" : "%s",
                                      fc_elem_str(&e->path[d], tmp, sizeof(tmp))),
                        rc, state_fail);
        FC_TRY_GOTO(fc_buf_putc(&name, '\0'), rc, state_fail);
        FC_TRY_GOTO(fc_buf_printf(&key, "%s.state.%s.%s", okey, fqn, (char *)name.data), rc,
                    state_fail);
        FC_TRY_GOTO(fc_buf_putc(&key, '\0'), rc, state_fail);
        size_t si;
        if (layout == FC_LAYOUT_APP) {
            const char *path[] = {"app", "optim", "state", fqn, (char *)name.data};
            FC_TRY_GOTO(fc_spec_push(xr, (char *)key.data, path, 5, &si), rc, state_fail);
        } else {
            const char *path[] = {"optimizer", (char *)key.data + strlen("optimizer.")};
            FC_TRY_GOTO(fc_spec_push(xr, (char *)key.data, path, 2, &si), rc, state_fail);
        }
        struct fc_xspec *s = &xr->specs[si];
        const struct fc_xspec *ps = &xr->specs[spec];
        s->src = osrc;
        s->entry = (size_t)(e - osrc->entries);
        s->kind = e->kind;
        if (e->kind == FC_ENTRY_TENSOR) {
            s->dtype = e->t.dtype;
            s->ndim = e->t.ndim;
            memcpy(s->shape, e->t.shape, sizeof(s->shape));
            if (e->t.ndim > 0) {
                /* Same shape as the parameter's source tensor: gets its ops and placement. */
                const struct fc_entry *pe = &ps->src->entries[ps->entry];
                if (pe->t.ndim != e->t.ndim ||
                    memcmp(pe->t.shape, e->t.shape, sizeof(int64_t) * (size_t)e->t.ndim) != 0) {
                    rc = fc_error_set(FC_EINVAL,
                                      "%s: optimizer state '%s' does not have the "
                                      "shape of parameter '%s' (wrong parameter order? mark "
                                      "frozen parameters and float buffers with --optim-skip)",
                                      osrc->path, e->key, fqn);
                    goto state_fail;
                }
                s->conv2d = ps->conv2d;
                s->ndim = ps->ndim;
                memcpy(s->shape, ps->shape, sizeof(s->shape));
                s->replicate = ps->replicate;
            }
        }
    state_fail:
        fc_buf_release(&name);
        fc_buf_release(&key);
        if (rc < 0)
            goto done;
    }

    /* Every candidate must be claimed, or the order is off somewhere and keys would be mislabelled.
     */
    if (int_keyed == 1 && total_ids != nparams) {
        rc = fc_error_set(FC_EINVAL,
                          "%s: the optimizer has %zu parameters but the model has %zu "
                          "candidate tensors (the first unclaimed is '%s'); mark frozen parameters "
                          "and float buffers with --optim-skip",
                          osrc->path, total_ids, nparams,
                          total_ids < nparams ? xr->specs[order[total_ids]].key : "?");
        goto done;
    }
    /* param_groups: per group (app) or flattened per parameter (torchtitan). */
    for (size_t g = 0, slot = 0; g < ngroups; g++) {
        const struct fc_pv *p = groups[g].params->value;
        if (layout == FC_LAYOUT_APP) {
            char gs[32];
            snprintf(gs, sizeof(gs), "%zu", g);
            for (size_t h = 0; h <= groups[g].nhps; h++) {
                const struct fc_entry *e = h < groups[g].nhps ? groups[g].hps[h] : groups[g].params;
                const char *hp = fc_elem_str(&e->path[e->path_len - 1], tmp, sizeof(tmp));
                char key[512];
                snprintf(key, sizeof(key), "app.optim.param_groups.%zu.%s", g, hp);
                const char *path[] = {"app", "optim", "param_groups", gs, hp};
                size_t si;
                FC_TRY_GOTO(fc_spec_push(xr, key, path, 5, &si), rc, done);
                struct fc_xspec *s = &xr->specs[si];
                /* The group number is a list index in the nesting, not a dict key. */
                fc_free((void *)(uintptr_t)s->path[3].key);
                s->path[3] = (struct fc_path_elem){1, (int64_t)g, NULL};
                s->kind = FC_ENTRY_VALUE;
                s->src = osrc;
                s->entry = (size_t)(e - osrc->entries);
                if (h == groups[g].nhps) {
                    /* "params": the FQNs of the group, as get_optimizer_state_dict lists them. */
                    struct fc_pv *list = fc_own(xr, FC_PV_LIST);
                    if (list == NULL) {
                        rc = fc_error_set(FC_ENOMEM, "out of memory");
                        goto done;
                    }
                    list->u.seq.items = fc_calloc(p->u.seq.n + 1, sizeof(*list->u.seq.items));
                    if (list->u.seq.items == NULL) {
                        rc = fc_error_set(FC_ENOMEM, "out of memory");
                        goto done;
                    }
                    for (size_t q = 0; q < p->u.seq.n; q++) {
                        struct fc_pv *str = fc_own(xr, FC_PV_STR);
                        const char *fqn = xr->specs[param_of_id[slot + q]].key + model_prefix;
                        if (str == NULL || (str->u.str.s = fc_strdup(fqn)) == NULL) {
                            rc = fc_error_set(FC_ENOMEM, "out of memory");
                            goto done;
                        }
                        str->u.str.len = strlen(fqn);
                        list->u.seq.items[list->u.seq.n++] = str;
                    }
                    xr->specs[si].value = list;
                }
            }
        } else {
            for (size_t q = 0; q < p->u.seq.n; q++) {
                const char *fqn = xr->specs[param_of_id[slot + q]].key + model_prefix;
                for (size_t h = 0; h < groups[g].nhps; h++) {
                    const struct fc_entry *e = groups[g].hps[h];
                    const char *hp = fc_elem_str(&e->path[e->path_len - 1], tmp, sizeof(tmp));
                    struct fc_buf key = FC_BUF_INIT(FC_OPTIM_KEY_CAP);
                    size_t si;
                    rc = fc_buf_printf(&key, "optimizer.param_groups.%s.%s", fqn, hp);
                    if (rc == FC_OK)
                        rc = fc_buf_putc(&key, '\0');
                    if (rc == FC_OK) {
                        const char *path[] = {"optimizer", (char *)key.data + 10};
                        rc = fc_spec_push(xr, (char *)key.data, path, 2, &si);
                    }
                    fc_buf_release(&key);
                    if (rc < 0)
                        goto done;
                    xr->specs[si].kind = FC_ENTRY_VALUE;
                    xr->specs[si].src = osrc;
                    xr->specs[si].entry = (size_t)(e - osrc->entries);
                }
            }
        }
        slot += p->u.seq.n;
    }
    /* Two keys for one name would make DCP refuse the checkpoint; say so now. */
    {
        struct fc_strmap all = FC_STRMAP_INIT;
        for (size_t i = 0; i < xr->n && rc == FC_OK; i++) {
            const int put = fc_strmap_put(&all, xr->specs[i].key, i, NULL);
            if (put < 0)
                rc = put;
            else if (put == 1)
                rc = fc_error_set(FC_EINVAL, "--optim: two entries become '%s'", xr->specs[i].key);
        }
        fc_strmap_release(&all);
    }
done:
    fc_strmap_release(&model_keys);
    fc_strmap_release(&ids);
    for (size_t i = 0; i < nidstrs; i++)
        fc_free(idstrs[i]);
    fc_free(idstrs);
    for (size_t g = 0; g < ngroups; g++)
        fc_free(groups[g].hps);
    fc_free(groups);
    fc_free(param_of_id);
    fc_free(order);
    fc_free(state);
    fc_free(state_skip);
    return rc;
}
