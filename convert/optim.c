/*
 * optim.c - full optimizer state dict -> the layout get_state_dict gives an
 * FSDP2 model (input-formats.md C.3-C.5), and the --layout key prefixes.
 *
 * Four phases over one struct fc_optim: collect the optimizer's groups and
 * state entries; map every parameter id (or FQN) to a model spec; make the
 * state specs (copies of a parameter get copies of its state); write
 * param_groups the way the layout wants them.
 */
#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_strmap.h"
#include "xform.h"

#define FC_OPTIM_KEY_CAP ((size_t)1 << 20)

/* How a layout names things. */
struct fc_layout_desc {
    const char *model[2]; /* model key prefix components */
    size_t nmodel;
    const char *optim; /* key prefix of the optimizer's entries */
    const char *optim_path[2];
    size_t noptim_path;
    int per_group; /* param_groups per group with FQN lists (app), else per parameter */
};

static const struct fc_layout_desc fc_layouts[] = {
    [FC_LAYOUT_NONE] = {{"model", NULL}, 1, "optimizer", {"optimizer", NULL}, 1, 0},
    [FC_LAYOUT_TORCHTITAN] = {{"model", NULL}, 1, "optimizer", {"optimizer", NULL}, 1, 0},
    [FC_LAYOUT_APP] = {{"app", "model"}, 2, "app.optim", {"app", "optim"}, 2, 1},
};

/* One optimizer parameter group as found in the file. */
struct fc_group {
    const struct fc_entry *params; /* the "params" list */
    const struct fc_entry **hps;   /* every other hyper-parameter */
    size_t nhps;
};

struct fc_optim {
    struct fc_xform_result *xr;
    const struct fc_xform_rules *rules;
    const struct fc_source *osrc;
    const struct fc_layout_desc *lay;
    size_t nmodel;       /* model specs: xr->specs[0 .. nmodel) */
    size_t model_prefix; /* length of the model key prefix ("model.") */
    struct fc_group *groups;
    size_t ngroups;
    const struct fc_entry **state; /* state entries and the path depth of their "state" */
    size_t *state_skip;
    size_t nstate;
    long *param_of_slot; /* (group, position) slot -> model spec */
    size_t nslots;
    struct fc_strmap ids; /* id or FQN text -> slot */
    char **idstrs;
    size_t unclaimed;     /* ids form: the model's candidate count when the optimizer's differs */
    long first_unclaimed; /* its model spec, or -1 */
    long *next_copy;      /* per model spec: the next --copy of the same parameter, or -1 */
    long *first_copy;
};

/* Append a spec with key and path (texts copied); its index in *out. */
static int fc_spec_push(struct fc_xform_result *xr, const char *key, const char *const *path,
                        size_t plen, size_t *out)
{
    FC_TRY(fc_xform_push(xr, out));
    struct fc_xspec *s = &xr->specs[*out];
    s->key = fc_strdup(key);
    s->path = fc_calloc(plen + 1, sizeof(*s->path));
    if (s->key == NULL || s->path == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < plen; i++) {
        s->path[i].key = fc_strdup(path[i]);
        if (s->path[i].key == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        s->path_len = i + 1;
    }
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

/* Prefix every model spec (key and path) with the layout's components. */
static int fc_prefix_model(struct fc_xform_result *xr, size_t nmodel,
                           const struct fc_layout_desc *lay)
{
    const size_t nc = lay->nmodel;
    for (size_t i = 0; i < nmodel; i++) {
        struct fc_xspec *s = &xr->specs[i];
        struct fc_buf k = FC_BUF_INIT(FC_OPTIM_KEY_CAP);
        for (size_t c = 0; c < nc; c++)
            FC_TRY(fc_buf_printf(&k, "%s.", lay->model[c]));
        FC_TRY(fc_buf_puts(&k, s->key));
        FC_TRY(fc_buf_putc(&k, '\0'));
        struct fc_path_elem *p = fc_calloc(s->path_len + nc, sizeof(*p));
        if (p == NULL) {
            fc_buf_release(&k);
            return fc_error_set(FC_ENOMEM, "out of memory");
        }
        for (size_t c = 0; c < nc; c++) {
            p[c].key = fc_strdup(lay->model[c]);
            if (p[c].key == NULL) {
                for (size_t j = 0; j < c; j++)
                    fc_free((void *)(uintptr_t)p[j].key);
                fc_free(p);
                fc_buf_release(&k);
                return fc_error_set(FC_ENOMEM, "out of memory");
            }
        }
        memcpy(p + nc, s->path, s->path_len * sizeof(*p));
        fc_free(s->path);
        s->path = p;
        s->path_len += nc;
        fc_free(s->key);
        s->key = (char *)fc_buf_detach(&k, NULL);
    }
    return FC_OK;
}

/* ---- phase 1: the optimizer's groups and state entries ---- */

static int fc_group_at(struct fc_optim *o, size_t g)
{
    if (g < o->ngroups)
        return FC_OK;
    struct fc_group *ng = fc_reallocarray(o->groups, g + 1, sizeof(*ng));
    if (ng == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    memset(ng + o->ngroups, 0, (g + 1 - o->ngroups) * sizeof(*ng));
    o->groups = ng;
    o->ngroups = g + 1;
    return FC_OK;
}

/* Path elements of e that spell `select` (0 without one); SIZE_MAX when e is not under it. */
static size_t fc_select_depth(const struct fc_entry *e, const char *select)
{
    char tmp[32];
    const size_t sl = select != NULL ? strlen(select) : 0;
    size_t k = 0, len = 0;
    if (select == NULL)
        return 0;
    if (strncmp(e->key, select, sl) != 0 || e->key[sl] != '.')
        return SIZE_MAX;
    while (k < e->path_len && len < sl) {
        len += strlen(fc_path_elem_text(&e->path[k], tmp, sizeof(tmp))) + (k > 0);
        k++;
    }
    return len == sl ? k : SIZE_MAX;
}

/*
 * The first few distinct first path elements of osrc's entries, quoted and
 * comma-separated into buf (", ..." when there are more): what a message
 * offers as --select / --optim-select KEY.
 */
static void fc_top_keys(const struct fc_source *osrc, char *buf, size_t cap)
{
    enum { FC_TOP_SHOWN = 8 };
    char tmp[32], seen[FC_TOP_SHOWN][64];
    size_t nseen = 0, used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < osrc->nentries; i++) {
        const struct fc_entry *e = &osrc->entries[i];
        const char *top =
            e->path_len > 0 ? fc_path_elem_text(&e->path[0], tmp, sizeof(tmp)) : e->key;
        size_t j = 0;
        while (j < nseen && strncmp(seen[j], top, sizeof(seen[j]) - 1) != 0)
            j++;
        if (j < nseen)
            continue;
        if (nseen == FC_TOP_SHOWN) {
            snprintf(buf + used, cap - used, ", ...");
            return;
        }
        snprintf(seen[nseen], sizeof(seen[nseen]), "%s", top);
        const int w =
            snprintf(buf + used, cap - used, "%s'%s'", nseen > 0 ? ", " : "", seen[nseen]);
        nseen++;
        if (w < 0 || (size_t)w >= cap - used)
            return;
        used += (size_t)w;
    }
}

static int fc_optim_collect(struct fc_optim *o, const char *select)
{
    const struct fc_source *osrc = o->osrc;
    size_t nseen = 0;
    char tmp[32];
    o->state = fc_calloc(osrc->nentries + 1, sizeof(*o->state));
    o->state_skip = fc_calloc(osrc->nentries + 1, sizeof(*o->state_skip));
    if (o->state == NULL || o->state_skip == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < osrc->nentries; i++) {
        const struct fc_entry *e = &osrc->entries[i];
        const size_t k = fc_select_depth(e, select);
        if (k == SIZE_MAX)
            continue;
        nseen++;
        if (e->path_len < k + 3)
            continue;
        const char *top = fc_path_elem_text(&e->path[k], tmp, sizeof(tmp));
        if (strcmp(top, "state") == 0) {
            o->state_skip[o->nstate] = k;
            o->state[o->nstate++] = e;
            continue;
        }
        if (strcmp(top, "param_groups") != 0 || !e->path[k + 1].is_index)
            continue;
        const size_t g = (size_t)e->path[k + 1].index;
        FC_TRY(fc_group_at(o, g));
        struct fc_group *grp = &o->groups[g];
        if (strcmp(fc_path_elem_text(&e->path[k + 2], tmp, sizeof(tmp)), "params") == 0) {
            grp->params = e;
            continue;
        }
        const struct fc_entry **h = fc_reallocarray(grp->hps, grp->nhps + 1, sizeof(*h));
        if (h == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        grp->hps = h;
        h[grp->nhps++] = e;
    }
    if (nseen == 0 || o->ngroups == 0) {
        char keys[512];
        fc_top_keys(osrc, keys, sizeof(keys));
        return fc_error_set(FC_EINVAL,
                            "%s: no optimizer state dict %s%s (expected 'state' and "
                            "'param_groups'); its top-level keys are %s: name the optimizer's "
                            "with --optim-select KEY",
                            osrc->path, select ? "under " : "at the top level",
                            select ? select : "", keys);
    }
    /*
     * The optimizer inside the input itself: model keys taken from the same
     * file must not include it (a missing --select would make every optimizer
     * tensor a model parameter, and the id mapping blame frozen parameters).
     */
    for (size_t i = 0; i < o->nmodel; i++) {
        const struct fc_xspec *s = &o->xr->specs[i];
        if (s->src != osrc || fc_select_depth(&osrc->entries[s->entry], select) == SIZE_MAX)
            continue;
        char keys[512];
        fc_top_keys(osrc, keys, sizeof(keys));
        return fc_error_set(FC_EINVAL,
                            "%s: the model keys include the optimizer's own entries (e.g. '%s'); "
                            "take the model's subtree with --select KEY (top-level keys: %s)",
                            osrc->path, osrc->entries[s->entry].key, keys);
    }
    for (size_t g = 0; g < o->ngroups; g++) {
        const struct fc_pv *p = o->groups[g].params != NULL ? o->groups[g].params->value : NULL;
        if (p == NULL || p->kind != FC_PV_LIST)
            return fc_error_set(FC_EINVAL, "%s: param_groups[%zu] has no 'params' list", osrc->path,
                                g);
        o->nslots += p->u.seq.n;
    }
    return FC_OK;
}

/* ---- phase 2: parameter id or FQN -> model spec ---- */

/*
 * Integer ids index model.parameters() order: the model's floating tensors in
 * order, less buffers (--replicate), --optim-skip marks, ties and copies
 * (neither is in the optimizer that was saved).
 */
static int fc_param_order(const struct fc_optim *o, long **order, size_t *n)
{
    *n = 0;
    *order = fc_calloc(o->nmodel + 1, sizeof(**order));
    if (*order == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < o->nmodel; i++) {
        const struct fc_xspec *s = &o->xr->specs[i];
        if (s->kind != FC_ENTRY_TENSOR || s->alias_of >= 0 || s->copy_of >= 0 || s->replicate ||
            s->optim_skip)
            continue;
        /* Integer and bool tensors are buffers: optimizers only take floating parameters. */
        const struct fc_dtype_info *info = fc_dtype_info(s->src->entries[s->entry].t.dtype);
        if (info != NULL && info->is_floating)
            (*order)[(*n)++] = (long)i;
    }
    return FC_OK;
}

static int fc_map_fqn(struct fc_optim *o, struct fc_strmap *model_keys, const char *fqn, long *spec)
{
    char *renamed;
    size_t m;
    if (model_keys->n == 0)
        for (size_t i = 0; i < o->nmodel; i++)
            if (o->xr->specs[i].kind == FC_ENTRY_TENSOR && o->xr->specs[i].copy_of < 0)
                FC_TRY(fc_strmap_put(model_keys, o->xr->specs[i].key, i, NULL));
    FC_TRY(fc_xform_map_key(o->rules, fqn, &renamed));
    const int found = fc_strmap_get(model_keys, renamed != NULL ? renamed : fqn, &m);
    fc_free(renamed);
    if (!found)
        return fc_error_set(FC_EINVAL,
                            "%s: the optimizer has state for '%s' but the model has no such "
                            "tensor",
                            o->osrc->path, fqn);
    *spec = (long)m;
    return FC_OK;
}

static int fc_optim_map_ids(struct fc_optim *o)
{
    long *order = NULL;
    size_t nparams = 0;
    struct fc_strmap model_keys = FC_STRMAP_INIT;
    int int_keyed = -1, rc;
    o->param_of_slot = fc_calloc(o->nslots + 1, sizeof(*o->param_of_slot));
    o->idstrs = fc_calloc(o->nslots + 1, sizeof(*o->idstrs));
    if (o->param_of_slot == NULL || o->idstrs == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    FC_TRY_GOTO(fc_param_order(o, &order, &nparams), rc, done);
    for (size_t g = 0, slot = 0; g < o->ngroups; g++) {
        const struct fc_pv *p = o->groups[g].params->value;
        for (size_t q = 0; q < p->u.seq.n; q++, slot++) {
            const struct fc_pv *id = p->u.seq.items[q];
            char buf[32];
            if (id->kind == FC_PV_INT && int_keyed != 0) {
                int_keyed = 1;
                if (id->u.i < 0 || (size_t)id->u.i >= nparams) {
                    rc = fc_error_set(FC_EINVAL,
                                      "%s: parameter id %lld but the model has %zu candidate "
                                      "tensors",
                                      o->osrc->path, (long long)id->u.i, nparams);
                    goto done;
                }
                o->param_of_slot[slot] = order[id->u.i];
                snprintf(buf, sizeof(buf), "%lld", (long long)id->u.i);
            } else if (id->kind == FC_PV_STR && int_keyed != 1) {
                int_keyed = 0;
                FC_TRY_GOTO(fc_map_fqn(o, &model_keys, id->u.str.s, &o->param_of_slot[slot]), rc,
                            done);
            } else {
                rc = fc_error_set(FC_EINVAL, "%s: param_groups[%zu].params mixes ids and names",
                                  o->osrc->path, g);
                goto done;
            }
            /* State entries name their parameter by the same text: index it once. */
            o->idstrs[slot] = fc_strdup(id->kind == FC_PV_STR ? id->u.str.s : buf);
            if (o->idstrs[slot] == NULL) {
                rc = fc_error_set(FC_ENOMEM, "out of memory");
                goto done;
            }
            FC_TRY_GOTO(fc_strmap_put(&o->ids, o->idstrs[slot], slot, NULL), rc, done);
        }
    }
    rc = FC_OK;
    if (int_keyed == 1 && o->nslots != nparams) {
        /* Checked after the state's shapes, whose message pins the first wrong id better. */
        o->unclaimed = nparams;
        o->first_unclaimed = o->nslots < nparams ? order[o->nslots] : -1;
    }
done:
    fc_strmap_release(&model_keys);
    fc_free(order);
    return rc;
}

/* Per parameter, its --copy specs as a list (first_copy / next_copy), following chains. */
static int fc_optim_copies(struct fc_optim *o)
{
    o->first_copy = fc_calloc(o->nmodel + 1, sizeof(*o->first_copy));
    o->next_copy = fc_calloc(o->nmodel + 1, sizeof(*o->next_copy));
    if (o->first_copy == NULL || o->next_copy == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < o->nmodel; i++)
        o->first_copy[i] = o->next_copy[i] = -1;
    for (size_t i = o->nmodel; i-- > 0;) {
        long root = o->xr->specs[i].copy_of;
        if (root < 0)
            continue;
        while (o->xr->specs[root].copy_of >= 0)
            root = o->xr->specs[root].copy_of;
        o->next_copy[i] = o->first_copy[root];
        o->first_copy[root] = (long)i;
    }
    return FC_OK;
}

/* ---- phase 3: state specs ---- */

/* "<optim>.<what>.<fqn>.<name>" with the layout's path. */
static int fc_push_optim_entry(struct fc_optim *o, const char *what, const char *fqn,
                               const char *name, size_t *si)
{
    const struct fc_layout_desc *lay = o->lay;
    struct fc_buf key = FC_BUF_INIT(FC_OPTIM_KEY_CAP);
    int rc = fc_buf_printf(&key, "%s.%s.%s.%s", lay->optim, what, fqn, name);
    if (rc == FC_OK)
        rc = fc_buf_putc(&key, '\0');
    if (rc == FC_OK && lay->per_group) {
        const char *path[] = {lay->optim_path[0], lay->optim_path[1], what, fqn, name};
        rc = fc_spec_push(o->xr, (char *)key.data, path, 5, si);
    } else if (rc == FC_OK) {
        const char *path[] = {lay->optim_path[0], (char *)key.data + strlen(lay->optim) + 1};
        rc = fc_spec_push(o->xr, (char *)key.data, path, 2, si);
    }
    fc_buf_release(&key);
    return rc;
}

/*
 * One state entry e of parameter spec p: its key, and p's op list without
 * casts (state keeps its dtype) and with zero fill rows.
 */
static int fc_state_spec(struct fc_optim *o, const struct fc_entry *e, size_t k, long p)
{
    char tmp[32];
    struct fc_buf name = FC_BUF_INIT(FC_OPTIM_KEY_CAP);
    size_t si;
    int rc = FC_OK;
    for (size_t d = k + 2; d < e->path_len && rc == FC_OK; d++)
        rc = fc_buf_printf(&name, d > k + 2 ? ".%s" : "%s",
                           fc_path_elem_text(&e->path[d], tmp, sizeof(tmp)));
    if (rc == FC_OK)
        rc = fc_buf_putc(&name, '\0');
    if (rc == FC_OK)
        rc = fc_push_optim_entry(o, "state", o->xr->specs[p].key + o->model_prefix,
                                 (char *)name.data, &si);
    fc_buf_release(&name);
    FC_TRY(rc);
    struct fc_xspec *s = &o->xr->specs[si];
    const struct fc_xspec *ps = &o->xr->specs[p];
    s->src = o->osrc;
    s->entry = (size_t)(e - o->osrc->entries);
    s->kind = e->kind;
    if (e->kind != FC_ENTRY_TENSOR)
        return FC_OK;
    s->dtype = e->t.dtype;
    s->ndim = e->t.ndim;
    memcpy(s->shape, e->t.shape, sizeof(s->shape));
    if (e->t.ndim == 0)
        return FC_OK;
    /* Same shape as the parameter's source tensor: gets its ops and placement. */
    const struct fc_entry *pe = &ps->src->entries[ps->entry];
    if (pe->t.ndim != e->t.ndim ||
        memcmp(pe->t.shape, e->t.shape, sizeof(int64_t) * (size_t)e->t.ndim) != 0)
        return fc_error_set(FC_EINVAL,
                            "%s: optimizer state '%s' does not have the shape of parameter '%s' "
                            "(wrong parameter order? mark frozen parameters and float buffers with "
                            "--optim-skip)",
                            o->osrc->path, e->key, ps->key + o->model_prefix);
    s->replicate = ps->replicate;
    s->param_of = (long)p;
    for (size_t q = 0; q < ps->nops; q++) {
        struct fc_op op = ps->ops[q];
        if (op.kind == FC_OP_CAST)
            continue;
        op.fill = FC_FILL_ZERO;
        FC_TRY(fc_xspec_push_op(&o->xr->specs[si], &op, "--optim"));
    }
    return FC_OK;
}

static int fc_optim_state(struct fc_optim *o)
{
    char tmp[32];
    for (size_t i = 0; i < o->nstate; i++) {
        const struct fc_entry *e = o->state[i];
        const size_t k = o->state_skip[i];
        size_t slot;
        if (!fc_strmap_get(&o->ids, fc_path_elem_text(&e->path[k + 1], tmp, sizeof(tmp)), &slot))
            return fc_error_set(FC_EINVAL, "%s: optimizer state '%s' belongs to no parameter group",
                                o->osrc->path, e->key);
        const long p = o->param_of_slot[slot];
        FC_TRY(fc_state_spec(o, e, k, p));
        for (long c = o->first_copy[p]; c >= 0; c = o->next_copy[c])
            FC_TRY(fc_state_spec(o, e, k, c));
    }
    return FC_OK;
}

/* ---- phase 4: param_groups ---- */

static int fc_list_push_fqn(struct fc_optim *o, struct fc_pv *list, long spec)
{
    struct fc_pv *str = fc_own(o->xr, FC_PV_STR);
    const char *fqn = o->xr->specs[spec].key + o->model_prefix;
    if (str == NULL || (str->u.str.s = fc_strdup(fqn)) == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    str->u.str.len = strlen(fqn);
    list->u.seq.items[list->u.seq.n++] = str;
    return FC_OK;
}

/* app: per group, "params" as the FQN list get_optimizer_state_dict gives (copies included). */
static int fc_groups_per_group(struct fc_optim *o, size_t g, size_t slot)
{
    char tmp[32], gs[32];
    const struct fc_group *grp = &o->groups[g];
    const struct fc_pv *p = grp->params->value;
    snprintf(gs, sizeof(gs), "%zu", g);
    for (size_t h = 0; h <= grp->nhps; h++) {
        const struct fc_entry *e = h < grp->nhps ? grp->hps[h] : grp->params;
        const char *hp = fc_path_elem_text(&e->path[e->path_len - 1], tmp, sizeof(tmp));
        size_t si;
        FC_TRY(fc_push_optim_entry(o, "param_groups", gs, hp, &si));
        struct fc_xspec *s = &o->xr->specs[si];
        /* The group number is a list index in the nesting, not a dict key. */
        fc_free((void *)(uintptr_t)s->path[3].key);
        s->path[3] = (struct fc_path_elem){1, (int64_t)g, NULL};
        s->kind = FC_ENTRY_VALUE;
        s->src = o->osrc;
        s->entry = (size_t)(e - o->osrc->entries);
        if (h < grp->nhps)
            continue;
        struct fc_pv *list = fc_own(o->xr, FC_PV_LIST);
        if (list == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        size_t n = 0;
        for (size_t q = 0; q < p->u.seq.n; q++) {
            n++;
            for (long c = o->first_copy[o->param_of_slot[slot + q]]; c >= 0; c = o->next_copy[c])
                n++;
        }
        list->u.seq.items = fc_calloc(n + 1, sizeof(*list->u.seq.items));
        if (list->u.seq.items == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        /* The group's parameters in the file's order, then their copies (DSD maps by name). */
        for (int pass = 0; pass < 2; pass++)
            for (size_t q = 0; q < p->u.seq.n; q++) {
                const long param = o->param_of_slot[slot + q];
                for (long c = pass == 0 ? param : o->first_copy[param]; c >= 0;
                     c = pass == 0 ? -1 : o->next_copy[c])
                    FC_TRY(fc_list_push_fqn(o, list, c));
            }
        o->xr->specs[si].value = list;
    }
    return FC_OK;
}

/* torchtitan: flattened, one entry per parameter (and per copy) and hyper-parameter. */
static int fc_groups_per_param(struct fc_optim *o, size_t g, size_t slot)
{
    char tmp[32];
    const struct fc_group *grp = &o->groups[g];
    const struct fc_pv *p = grp->params->value;
    for (size_t q = 0; q < p->u.seq.n; q++) {
        const long param = o->param_of_slot[slot + q];
        for (long c = param; c >= 0; c = c == param ? o->first_copy[param] : o->next_copy[c]) {
            for (size_t h = 0; h < grp->nhps; h++) {
                const struct fc_entry *e = grp->hps[h];
                const char *hp = fc_path_elem_text(&e->path[e->path_len - 1], tmp, sizeof(tmp));
                size_t si;
                FC_TRY(fc_push_optim_entry(o, "param_groups", o->xr->specs[c].key + o->model_prefix,
                                           hp, &si));
                o->xr->specs[si].kind = FC_ENTRY_VALUE;
                o->xr->specs[si].src = o->osrc;
                o->xr->specs[si].entry = (size_t)(e - o->osrc->entries);
            }
        }
    }
    return FC_OK;
}

static int fc_optim_param_groups(struct fc_optim *o)
{
    for (size_t g = 0, slot = 0; g < o->ngroups; g++) {
        FC_TRY(o->lay->per_group ? fc_groups_per_group(o, g, slot)
                                 : fc_groups_per_param(o, g, slot));
        slot += o->groups[g].params->value->u.seq.n;
    }
    /* Two keys for one name would make DCP refuse the checkpoint; say so now. */
    struct fc_strmap all = FC_STRMAP_INIT;
    int rc = FC_OK;
    for (size_t i = 0; i < o->xr->n && rc == FC_OK; i++) {
        const int put = fc_strmap_put(&all, o->xr->specs[i].key, i, NULL);
        if (put < 0)
            rc = put;
        else if (put == 1)
            rc = fc_error_set(FC_EINVAL, "--optim: two entries become '%s'", o->xr->specs[i].key);
    }
    fc_strmap_release(&all);
    return rc;
}

int fc_xform_add_optimizer(struct fc_xform_result *xr, const struct fc_xform_rules *rules,
                           const struct fc_source *osrc, const char *select, enum fc_layout layout)
{
    struct fc_optim o;
    int rc;
    memset(&o, 0, sizeof(o));
    o.xr = xr;
    o.rules = rules;
    o.osrc = osrc;
    o.nmodel = xr->n;
    o.lay = &fc_layouts[layout];
    for (size_t c = 0; c < o.lay->nmodel; c++)
        o.model_prefix += strlen(o.lay->model[c]) + 1;
    if (osrc == NULL) /* --layout alone: only the model keys move */
        return fc_prefix_model(xr, o.nmodel, o.lay);
    if (fc_xform_layout_rule(rules) != NULL)
        return fc_error_set(FC_EINVAL,
                            "%s: optimizer state does not follow stacked, concatenated or split "
                            "parameters yet; convert the model alone",
                            fc_xform_layout_rule(rules));
    FC_TRY_GOTO(fc_optim_collect(&o, select), rc, done);
    FC_TRY_GOTO(fc_optim_map_ids(&o), rc, done);
    FC_TRY_GOTO(fc_optim_copies(&o), rc, done);
    /* Now that the model keys are final, prefix them. */
    FC_TRY_GOTO(fc_prefix_model(xr, o.nmodel, o.lay), rc, done);
    FC_TRY_GOTO(fc_optim_state(&o), rc, done);
    /* Every candidate must be claimed, or the order is off and keys would be mislabelled. */
    if (o.unclaimed > 0) {
        rc = fc_error_set(FC_EINVAL,
                          "%s: the optimizer has %zu parameters but the model has %zu "
                          "candidate tensors (the first unclaimed is '%s'); mark frozen parameters "
                          "and float buffers with --optim-skip",
                          osrc->path, o.nslots, o.unclaimed,
                          o.first_unclaimed >= 0 ? xr->specs[o.first_unclaimed].key : "?");
        goto done;
    }
    rc = fc_optim_param_groups(&o);
done:
    fc_strmap_release(&o.ids);
    for (size_t i = 0; o.idstrs != NULL && i < o.nslots; i++)
        fc_free(o.idstrs[i]);
    fc_free(o.idstrs);
    for (size_t g = 0; g < o.ngroups; g++)
        fc_free(o.groups[g].hps);
    fc_free(o.groups);
    fc_free(o.param_of_slot);
    fc_free(o.state);
    fc_free(o.state_skip);
    fc_free(o.first_copy);
    fc_free(o.next_copy);
    return rc;
}
