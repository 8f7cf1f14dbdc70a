/*
 * optim.c - full optimizer state dict -> the layout get_state_dict gives an
 * FSDP2 model (input-formats.md C.3-C.5), and the --layout key prefixes.
 *
 * Four phases over one struct fc_optim: collect the optimizer's groups and
 * state entries; map every parameter id (or FQN) to a model spec; make the
 * state specs (copies of a parameter get copies of its state); write
 * param_groups the way the layout wants them.
 *
 * After --stack, --concat, --split or --unstack one model spec is built of
 * several input tensors, or one input tensor goes into several specs.  The
 * saved optimizer knows the input tensors (the leaves): its ids index them in
 * the input's order.  A parameter spec built by those rules reads a virtual
 * tensor; its state reads another one with the same parts, each taken from
 * its leaf's state instead (no copy, cut and streamed as the parameter is).
 * Scalar state (step) is the first leaf's, as a copy's is its parameter's.
 */
#include <stdio.h>
#include <stdlib.h>
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
    /* With layout rules only (o->layout_rule set); param_of_slot then gives a leaf. */
    const char *layout_rule; /* the first one's label */
    struct fc_leaf *leaves;  /* sorted by (srci, entry) */
    size_t nleaves, leaves_cap;
    const struct fc_source **srcs; /* the leaves' sources, in the order first seen */
    size_t nsrcs;
    long *slot_of_spec;     /* per model spec: its first leaf's slot, or -1 (no parameter) */
    long *first_state;      /* per slot: its first state entry (index into state), or -1 */
    long *next_state;       /* per state entry: the next of the same slot, or -1 */
    size_t *nstate_of_slot; /* per slot */
    size_t *group_of_slot;
};

/* One tensor of the model's inputs that a parameter spec is built of. */
struct fc_leaf {
    size_t srci; /* index into fc_optim.srcs */
    size_t entry;
    long slot; /* the optimizer's slot for it, or -1 */
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
static int fc_is_param(const struct fc_optim *o, size_t i)
{
    const struct fc_xspec *s = &o->xr->specs[i];
    if (s->kind != FC_ENTRY_TENSOR || s->alias_of >= 0 || s->copy_of >= 0 || s->replicate ||
        s->optim_skip)
        return 0;
    /* Integer and bool tensors are buffers: optimizers only take floating parameters. */
    const struct fc_dtype_info *info = fc_dtype_info(s->src->entries[s->entry].t.dtype);
    return info != NULL && info->is_floating;
}

/* With layout rules the ids index the leaves (already in the input's order). */
static int fc_param_order(const struct fc_optim *o, long **order, size_t *n)
{
    *n = 0;
    *order = fc_calloc((o->layout_rule ? o->nleaves : o->nmodel) + 1, sizeof(**order));
    if (*order == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    if (o->layout_rule != NULL) {
        for (; *n < o->nleaves; (*n)++)
            (*order)[*n] = (long)*n;
        return FC_OK;
    }
    for (size_t i = 0; i < o->nmodel; i++)
        if (fc_is_param(o, i))
            (*order)[(*n)++] = (long)i;
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
            } else if (id->kind == FC_PV_STR && o->layout_rule != NULL) {
                rc = fc_error_set(FC_EINVAL,
                                  "%s: optimizer state keyed by parameter names ('%s') does not "
                                  "follow %s yet; save it with optimizer.state_dict() (integer "
                                  "ids) or convert the model alone",
                                  o->osrc->path, id->u.str.s, o->layout_rule);
                goto done;
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
 * casts (state keeps its dtype) and with zero fill rows.  Its data is entry
 * tentry of tsrc: e itself, or the virtual tensor of a built parameter's state.
 */
static int fc_state_spec(struct fc_optim *o, const struct fc_entry *e, size_t k, long p,
                         const struct fc_source *tsrc, size_t tentry)
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
    s->src = tsrc;
    s->entry = tentry;
    s->kind = e->kind;
    if (e->kind != FC_ENTRY_TENSOR)
        return FC_OK;
    const struct fc_entry *te = &tsrc->entries[tentry];
    s->dtype = te->t.dtype;
    s->ndim = te->t.ndim;
    memcpy(s->shape, te->t.shape, sizeof(s->shape));
    if (te->t.ndim == 0)
        return FC_OK;
    /* Same shape as the parameter's source tensor: gets its ops and placement. */
    const struct fc_entry *pe = &ps->src->entries[ps->entry];
    if (pe->t.ndim != te->t.ndim ||
        memcmp(pe->t.shape, te->t.shape, sizeof(int64_t) * (size_t)te->t.ndim) != 0)
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
        const size_t ei = (size_t)(e - o->osrc->entries);
        FC_TRY(fc_state_spec(o, e, k, p, o->osrc, ei));
        for (long c = o->first_copy[p]; c >= 0; c = o->next_copy[c])
            FC_TRY(fc_state_spec(o, e, k, c, o->osrc, ei));
    }
    return FC_OK;
}

/* ---- phases 2 and 3 with layout rules: leaves and built state ---- */

/* Called for every leaf (src, entry) of a parameter; nonzero stops the walk. */
typedef int (*fc_leaf_fn)(struct fc_optim *o, const struct fc_source *src, size_t entry, void *ctx);

/* Call fn for each leaf of entry `entry` of src, in part order (depth first). */
static int fc_walk_leaves(struct fc_optim *o, const struct fc_source *src, size_t entry,
                          fc_leaf_fn fn, void *ctx)
{
    if (src != o->xr->virt)
        return fn(o, src, entry, ctx);
    size_t n;
    const struct fc_vpart *v = fc_source_virtual_parts(src, entry, &n);
    for (size_t j = 0; j < n; j++) {
        const int rc = fc_walk_leaves(o, v[j].src, v[j].entry, fn, ctx);
        if (rc != FC_OK)
            return rc;
    }
    return FC_OK;
}

static int fc_cmp_leaf(const void *pa, const void *pb)
{
    const struct fc_leaf *a = pa, *b = pb;
    if (a->srci != b->srci)
        return a->srci < b->srci ? -1 : 1;
    return (a->entry > b->entry) - (a->entry < b->entry);
}

/* The leaf (src, entry), or -1. */
static long fc_leaf_find(const struct fc_optim *o, const struct fc_source *src, size_t entry)
{
    struct fc_leaf key = {0, entry, -1};
    while (key.srci < o->nsrcs && o->srcs[key.srci] != src)
        key.srci++;
    size_t lo = 0, hi = o->nleaves;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const int c = fc_cmp_leaf(&o->leaves[mid], &key);
        if (c == 0)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static int fc_leaf_push(struct fc_optim *o, const struct fc_source *src, size_t entry, void *ctx)
{
    (void)ctx;
    size_t si = 0;
    while (si < o->nsrcs && o->srcs[si] != src)
        si++;
    if (si == o->nsrcs) {
        const struct fc_source **v = fc_reallocarray(o->srcs, o->nsrcs + 1, sizeof(*v));
        if (v == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        o->srcs = v;
        v[o->nsrcs++] = src;
    }
    if (o->nleaves == o->leaves_cap) { /* geometric: MoE models have 1e4-1e5 leaves */
        const size_t cap = o->leaves_cap < 64 ? 64 : o->leaves_cap * 2;
        struct fc_leaf *l = fc_reallocarray(o->leaves, cap, sizeof(*l));
        if (l == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        o->leaves = l;
        o->leaves_cap = cap;
    }
    o->leaves[o->nleaves++] = (struct fc_leaf){si, entry, -1};
    return FC_OK;
}

/*
 * The leaves of every parameter spec, in the input's order (the order of
 * model.parameters() the ids index), each once: a stack's parts are spread
 * over the input, a split's outputs share one.
 */
static int fc_optim_leaves(struct fc_optim *o)
{
    for (size_t i = 0; i < o->nmodel; i++)
        if (fc_is_param(o, i))
            FC_TRY(
                fc_walk_leaves(o, o->xr->specs[i].src, o->xr->specs[i].entry, fc_leaf_push, NULL));
    if (o->nleaves > 1)
        qsort(o->leaves, o->nleaves, sizeof(*o->leaves), fc_cmp_leaf);
    size_t w = 0;
    for (size_t i = 0; i < o->nleaves; i++)
        if (w == 0 || o->leaves[i].srci != o->leaves[w - 1].srci ||
            o->leaves[i].entry != o->leaves[w - 1].entry)
            o->leaves[w++] = o->leaves[i];
    o->nleaves = w;
    return FC_OK;
}

/* What a walk over one parameter spec's leaves checks and finds. */
struct fc_leaf_walk {
    long spec;
    long slot0;                  /* the first leaf's slot (-1 before it) */
    const struct fc_entry *like; /* state entry of the first leaf naming which state, or NULL */
    size_t like_k;
};

static const char *fc_leaf_key(const struct fc_optim *o, long leaf)
{
    return o->srcs[o->leaves[leaf].srci]->entries[o->leaves[leaf].entry].key;
}

/* Every leaf of one parameter: in the first one's group, with as many state entries. */
static int fc_leaf_check(struct fc_optim *o, const struct fc_source *src, size_t entry, void *ctx)
{
    struct fc_leaf_walk *w = ctx;
    const long l = fc_leaf_find(o, src, entry);
    const long slot = l >= 0 ? o->leaves[l].slot : -1;
    if (slot < 0) /* a repeated id left it out */
        return fc_error_set(FC_EINVAL, "%s: no parameter id of the optimizer is '%s'",
                            o->osrc->path, src->entries[entry].key);
    if (w->slot0 < 0) {
        w->slot0 = slot;
        return FC_OK;
    }
    const char *key = o->xr->specs[w->spec].key + o->model_prefix;
    if (o->group_of_slot[slot] != o->group_of_slot[w->slot0])
        return fc_error_set(FC_EINVAL,
                            "%s: %s puts '%s' (param_groups[%zu]) and '%s' (param_groups[%zu]) "
                            "into one parameter '%s'",
                            o->osrc->path, o->layout_rule, src->entries[entry].key,
                            o->group_of_slot[slot], fc_leaf_key(o, o->param_of_slot[w->slot0]),
                            o->group_of_slot[w->slot0], key);
    if (o->nstate_of_slot[slot] != o->nstate_of_slot[w->slot0])
        return fc_error_set(FC_EINVAL,
                            "%s: '%s' has %zu optimizer state entries but '%s' %zu, and %s puts "
                            "them into one parameter '%s' (did one never get a gradient?)",
                            o->osrc->path, src->entries[entry].key, o->nstate_of_slot[slot],
                            fc_leaf_key(o, o->param_of_slot[w->slot0]), o->nstate_of_slot[w->slot0],
                            o->layout_rule, key);
    return FC_OK;
}

/* State entries a (path depth ka) and b name the same state ("exp_avg"). */
static int fc_same_state(const struct fc_entry *a, size_t ka, const struct fc_entry *b, size_t kb)
{
    char ta[32], tb[32];
    if (a->path_len - ka != b->path_len - kb)
        return 0;
    for (size_t d = 2; ka + d < a->path_len; d++)
        if (strcmp(fc_path_elem_text(&a->path[ka + d], ta, sizeof(ta)),
                   fc_path_elem_text(&b->path[kb + d], tb, sizeof(tb))) != 0)
            return 0;
    return 1;
}

/* The state entry of leaf (src, entry) that names w->like's state, of the leaf's shape. */
static int fc_leaf_state(struct fc_optim *o, const struct fc_source *src, size_t entry,
                         const struct fc_leaf_walk *w, size_t *out)
{
    const long slot = o->leaves[fc_leaf_find(o, src, entry)].slot; /* checked by fc_leaf_check */
    long i = o->first_state[slot];
    while (i >= 0 && !fc_same_state(o->state[i], o->state_skip[i], w->like, w->like_k))
        i = o->next_state[i];
    if (i < 0)
        return fc_error_set(FC_EINVAL,
                            "%s: '%s' has no optimizer state like '%s', and %s puts them into "
                            "one parameter '%s'",
                            o->osrc->path, src->entries[entry].key, w->like->key, o->layout_rule,
                            o->xr->specs[w->spec].key + o->model_prefix);
    const struct fc_entry *e = o->state[i], *pe = &src->entries[entry];
    if (e->kind != FC_ENTRY_TENSOR || e->t.ndim != pe->t.ndim ||
        memcmp(e->t.shape, pe->t.shape, sizeof(int64_t) * (size_t)pe->t.ndim) != 0)
        return fc_error_set(FC_EINVAL,
                            "%s: optimizer state '%s' does not have the shape of parameter '%s' "
                            "(wrong parameter order? mark frozen parameters and float buffers with "
                            "--optim-skip)",
                            o->osrc->path, e->key, pe->key);
    *out = (size_t)(e - o->osrc->entries);
    return FC_OK;
}

/*
 * The virtual tensor of w->like's state for virtual parameter tensor
 * `entry`: the same parts, each read from its leaf's state (or from the state
 * tensor of a virtual part, built first).  Built once: copies reuse it.
 */
static int fc_state_virtual(struct fc_optim *o, size_t entry, const struct fc_leaf_walk *w,
                            size_t *out)
{
    struct fc_source *virt = o->xr->virt;
    char tmp[32];
    struct fc_buf key = FC_BUF_INIT(FC_OPTIM_KEY_CAP);
    int rc = fc_buf_printf(&key, "optimizer state");
    for (size_t d = w->like_k + 2; rc == FC_OK && d < w->like->path_len; d++)
        rc = fc_buf_printf(&key, " %s", fc_path_elem_text(&w->like->path[d], tmp, sizeof(tmp)));
    if (rc == FC_OK)
        rc = fc_buf_printf(&key, " of %s%c", virt->entries[entry].key, '\0');
    const long had = rc == FC_OK ? fc_source_find(virt, (char *)key.data) : -1;
    size_t n = 0;
    const struct fc_vpart *pp = fc_source_virtual_parts(virt, entry, &n);
    struct fc_vpart *v = rc == FC_OK && had < 0 ? fc_calloc(n, sizeof(*v)) : NULL;
    if (rc == FC_OK && had < 0 && v == NULL)
        rc = fc_error_set(FC_ENOMEM, "out of memory");
    if (v != NULL)
        memcpy(v, pp, n * sizeof(*v));
    fc_dtype dtype = 0;
    for (size_t j = 0; v != NULL && rc == FC_OK && j < n; j++) {
        if (v[j].src == virt) {
            rc = fc_state_virtual(o, v[j].entry, w, &v[j].entry);
        } else {
            rc = fc_leaf_state(o, v[j].src, v[j].entry, w, &v[j].entry);
            v[j].src = o->osrc;
        }
        const struct fc_entry *pe = rc == FC_OK ? &v[j].src->entries[v[j].entry] : NULL;
        if (pe != NULL && j > 0 && pe->t.dtype != dtype)
            rc = fc_error_set(FC_EINVAL,
                              "%s: optimizer state '%s' is %s but '%s' is %s, and %s puts them "
                              "into one",
                              o->osrc->path, pe->key, fc_dtype_name(pe->t.dtype), w->like->key,
                              fc_dtype_name(dtype), o->layout_rule);
        if (pe != NULL)
            dtype = pe->t.dtype;
    }
    if (rc == FC_OK && had >= 0) {
        *out = (size_t)had;
    } else if (rc == FC_OK) {
        int64_t shape[FC_MAX_DIMS]; /* entries move as the source grows */
        const int ndim = virt->entries[entry].t.ndim;
        memcpy(shape, virt->entries[entry].t.shape, sizeof(shape));
        rc = fc_source_add_virtual(virt, (char *)key.data, dtype, ndim, shape, v, n, out);
    }
    fc_free(v);
    fc_buf_release(&key);
    return rc;
}

/* Per slot, its state entries as a list (first_state / next_state), counted. */
static int fc_optim_state_lists(struct fc_optim *o)
{
    char tmp[32];
    o->first_state = fc_calloc(o->nslots + 1, sizeof(*o->first_state));
    o->next_state = fc_calloc(o->nstate + 1, sizeof(*o->next_state));
    o->nstate_of_slot = fc_calloc(o->nslots + 1, sizeof(*o->nstate_of_slot));
    o->group_of_slot = fc_calloc(o->nslots + 1, sizeof(*o->group_of_slot));
    if (o->first_state == NULL || o->next_state == NULL || o->nstate_of_slot == NULL ||
        o->group_of_slot == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t g = 0, slot = 0; g < o->ngroups; g++)
        for (size_t q = 0; q < o->groups[g].params->value->u.seq.n; q++)
            o->group_of_slot[slot++] = g;
    for (size_t s = 0; s < o->nslots; s++) {
        o->first_state[s] = -1;
        o->leaves[o->param_of_slot[s]].slot = (long)s;
    }
    for (size_t i = o->nstate; i-- > 0;) {
        const struct fc_entry *e = o->state[i];
        size_t slot;
        if (!fc_strmap_get(&o->ids,
                           fc_path_elem_text(&e->path[o->state_skip[i] + 1], tmp, sizeof(tmp)),
                           &slot))
            return fc_error_set(FC_EINVAL, "%s: optimizer state '%s' belongs to no parameter group",
                                o->osrc->path, e->key);
        o->next_state[i] = o->first_state[slot];
        o->first_state[slot] = (long)i;
        o->nstate_of_slot[slot]++;
    }
    return FC_OK;
}

/* The state of parameter spec p (and of its copies), built like p from its leaves' state. */
static int fc_param_state(struct fc_optim *o, long p)
{
    /* Not a pointer to the spec: the state specs pushed below move the specs. */
    const struct fc_source *psrc = o->xr->specs[p].src;
    const size_t pentry = o->xr->specs[p].entry;
    struct fc_leaf_walk w = {p, -1, NULL, 0};
    FC_TRY(fc_walk_leaves(o, psrc, pentry, fc_leaf_check, &w));
    o->slot_of_spec[p] = w.slot0;
    for (long i = o->first_state[w.slot0]; i >= 0; i = o->next_state[i]) {
        const struct fc_entry *e = o->state[i];
        const size_t k = o->state_skip[i];
        size_t tentry = (size_t)(e - o->osrc->entries);
        const struct fc_source *tsrc = o->osrc;
        w.like = e;
        w.like_k = k;
        /* Scalars (step) are the first leaf's; tensors are built as the parameter is. */
        if (psrc == o->xr->virt && e->kind == FC_ENTRY_TENSOR && e->t.ndim > 0) {
            FC_TRY(fc_state_virtual(o, pentry, &w, &tentry));
            tsrc = o->xr->virt;
        }
        FC_TRY(fc_state_spec(o, e, k, p, tsrc, tentry));
        for (long c = o->first_copy[p]; c >= 0; c = o->next_copy[c])
            FC_TRY(fc_state_spec(o, e, k, c, tsrc, tentry));
    }
    return FC_OK;
}

static int fc_optim_state_layout(struct fc_optim *o)
{
    FC_TRY(fc_optim_state_lists(o));
    o->slot_of_spec = fc_calloc(o->nmodel + 1, sizeof(*o->slot_of_spec));
    if (o->slot_of_spec == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < o->nmodel; i++) {
        o->slot_of_spec[i] = -1;
        if (fc_is_param(o, i))
            FC_TRY(fc_param_state(o, (long)i));
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

/*
 * app: per group, "params" as the FQN list get_optimizer_state_dict gives
 * (copies included); the group's parameter specs are params[0, np).
 */
static int fc_groups_per_group(struct fc_optim *o, size_t g, const long *params, size_t np)
{
    char tmp[32], gs[32];
    const struct fc_group *grp = &o->groups[g];
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
        for (size_t q = 0; q < np; q++) {
            n++;
            for (long c = o->first_copy[params[q]]; c >= 0; c = o->next_copy[c])
                n++;
        }
        list->u.seq.items = fc_calloc(n + 1, sizeof(*list->u.seq.items));
        if (list->u.seq.items == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        /* The group's parameters in the file's order, then their copies (DSD maps by name). */
        for (int pass = 0; pass < 2; pass++)
            for (size_t q = 0; q < np; q++) {
                const long param = params[q];
                for (long c = pass == 0 ? param : o->first_copy[param]; c >= 0;
                     c = pass == 0 ? -1 : o->next_copy[c])
                    FC_TRY(fc_list_push_fqn(o, list, c));
            }
        o->xr->specs[si].value = list;
    }
    return FC_OK;
}

/* torchtitan: flattened, one entry per parameter (and per copy) and hyper-parameter. */
static int fc_groups_per_param(struct fc_optim *o, size_t g, const long *params, size_t np)
{
    char tmp[32];
    const struct fc_group *grp = &o->groups[g];
    for (size_t q = 0; q < np; q++) {
        const long param = params[q];
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

/*
 * The parameter specs of group g: its slots' specs, or with layout rules the
 * specs whose leaves are in it (in the model's order), into *params (owned).
 */
static int fc_group_params(const struct fc_optim *o, size_t g, size_t slot, long **params,
                           size_t *np)
{
    *np = 0;
    *params = fc_calloc((o->layout_rule ? o->nmodel : o->nslots) + 1, sizeof(**params));
    if (*params == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    if (o->layout_rule == NULL) {
        for (size_t q = 0; q < o->groups[g].params->value->u.seq.n; q++)
            (*params)[(*np)++] = o->param_of_slot[slot + q];
        return FC_OK;
    }
    for (size_t i = 0; i < o->nmodel; i++)
        if (o->slot_of_spec[i] >= 0 && o->group_of_slot[o->slot_of_spec[i]] == g)
            (*params)[(*np)++] = (long)i;
    return FC_OK;
}

static int fc_optim_param_groups(struct fc_optim *o)
{
    for (size_t g = 0, slot = 0; g < o->ngroups; g++) {
        long *params;
        size_t np;
        FC_TRY(fc_group_params(o, g, slot, &params, &np));
        const int grc = o->lay->per_group ? fc_groups_per_group(o, g, params, np)
                                          : fc_groups_per_param(o, g, params, np);
        fc_free(params);
        FC_TRY(grc);
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
    o.layout_rule = fc_xform_layout_rule(rules);
    FC_TRY_GOTO(fc_optim_collect(&o, select), rc, done);
    if (o.layout_rule != NULL)
        FC_TRY_GOTO(fc_optim_leaves(&o), rc, done);
    FC_TRY_GOTO(fc_optim_map_ids(&o), rc, done);
    FC_TRY_GOTO(fc_optim_copies(&o), rc, done);
    /* Now that the model keys are final, prefix them. */
    FC_TRY_GOTO(fc_prefix_model(xr, o.nmodel, o.lay), rc, done);
    /*
     * Every candidate must be claimed, or the order is off and keys would be
     * mislabelled (checked after the state's shapes without layout rules:
     * their message pins the first wrong id better; a leaf is no spec).
     */
    if (o.unclaimed > 0 && o.layout_rule != NULL) {
        rc = fc_error_set(FC_EINVAL,
                          "%s: the optimizer has %zu parameters but the model's inputs have %zu "
                          "(before %s); mark frozen parameters and float buffers with "
                          "--optim-skip",
                          osrc->path, o.nslots, o.unclaimed, o.layout_rule);
        goto done;
    }
    FC_TRY_GOTO(o.layout_rule != NULL ? fc_optim_state_layout(&o) : fc_optim_state(&o), rc, done);
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
    fc_free(o.leaves);
    fc_free(o.srcs);
    fc_free(o.slot_of_spec);
    fc_free(o.first_state);
    fc_free(o.next_state);
    fc_free(o.nstate_of_slot);
    fc_free(o.group_of_slot);
    return rc;
}
