/*
 * tcp_sink.c - the torch_checkpointing sink (see tcp_sink.h): the plan
 * stored at every holder and re-laid as one safetensors file per rank,
 * their headers and metadata.pkl; the executor drives the safetensors sink's
 * operations over those headers (a header before each file's items, items
 * as bare bytes).
 */
#include "tcp_sink.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_pickle.h"
#include "fc_safetensors.h"
#include "fc_strmap.h"
#include "fc_tcp.h"
#include "mesh.h"
#include "st_sink.h"

/* Readers (safetensors, and so the package's) refuse larger headers. */
#define FC_TCP_SINK_HEADER_MAX 100000000u
#define FC_TCP_SINK_META_CAP   ((size_t)1 << 31)

/* The key of plan tensor t inside item "model". */
static const char *fc_tcp_sink_key(const struct fc_tcp_sink *sink, const struct fc_plan_tensor *t)
{
    return t->key + sink->strip;
}

void fc_tcp_global_desc(const struct fc_plan_tensor *t, struct fc_tensor_desc *d)
{
    memset(d, 0, sizeof(*d));
    d->dtype = t->dtype;
    d->ndim = t->ndim;
    memcpy(d->shape, t->shape, sizeof(d->shape));
    fc_tensor_set_contiguous(d);
}

static const char fc_tcp_optim_prefix[] = "optimizer.";
static const char fc_tcp_state_prefix[] = "optimizer.state.";

int fc_tcp_sink_path(const struct fc_tcp_sink *sink, const struct fc_plan *plan, size_t t,
                     const char **elems, size_t *lens)
{
    const char *key = plan->tensors[t].key;
    if (sink->item_of == NULL || sink->item_of[t] == FC_TCP_ITEM_MODEL) {
        elems[0] = key + sink->strip;
        lens[0] = strlen(elems[0]);
        return 1;
    }
    if (!sink->optim_nested) {
        elems[0] = key + sizeof(fc_tcp_optim_prefix) - 1; /* "state.<fqn>.<name>" */
        lens[0] = strlen(elems[0]);
        return 1;
    }
    /* optimizer.state.<fqn>.<name>: checked by fc_tcp_sink_items() */
    const char *fqn = key + sizeof(fc_tcp_state_prefix) - 1, *dot = strrchr(fqn, '.');
    elems[0] = "state";
    lens[0] = 5;
    elems[1] = fqn;
    lens[1] = (size_t)(dot - fqn);
    elems[2] = dot + 1;
    lens[2] = strlen(dot + 1);
    return 3;
}

int fc_tcp_sink_add_group_value(struct fc_tcp_sink *sink, const struct fc_xspec *s)
{
    const struct fc_xspec **g = fc_reallocarray(sink->groups, sink->ngroups_values + 1, sizeof(*g));
    if (g == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    sink->groups = g;
    g[sink->ngroups_values++] = s;
    return FC_OK;
}

/* Each optimizer tensor's parameter (its FQN) numbered by first appearance in the plan. */
static int fc_tcp_sink_fqn_order(struct fc_tcp_sink *sink, const struct fc_plan *plan)
{
    struct fc_strmap seen = FC_STRMAP_INIT; /* borrows its keys: fqns[] */
    size_t next = 0;
    int rc = FC_OK;
    char **fqns = fc_calloc(plan->ntensors + 1, sizeof(*fqns));
    sink->fqn_order = fc_calloc(plan->ntensors + 1, sizeof(*sink->fqn_order));
    if (sink->fqn_order == NULL || fqns == NULL) {
        fc_free(fqns);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < plan->ntensors && rc == FC_OK; i++) {
        if (sink->item_of[i] != FC_TCP_ITEM_OPTIMIZER)
            continue;
        const char *fqn = plan->tensors[i].key + sizeof(fc_tcp_state_prefix) - 1;
        size_t at = next;
        fqns[i] = fc_strndup(fqn, (size_t)(strrchr(fqn, '.') - fqn));
        if (fqns[i] == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            break;
        }
        if (!fc_strmap_get(&seen, fqns[i], &at))
            rc = fc_strmap_put(&seen, fqns[i], next++, NULL);
        sink->fqn_order[i] = at;
    }
    fc_strmap_release(&seen);
    for (size_t i = 0; i < plan->ntensors; i++)
        fc_free(fqns[i]);
    fc_free(fqns);
    return rc < 0 ? rc : FC_OK;
}

/*
 * Which item each tensor is in: "optimizer.state.<fqn>.<name>" keys make item
 * "optimizer" (the optimizer's state dict as the package's
 * optimizer_transform_pre() leaves it), the others item "model".
 */
static int fc_tcp_sink_items(struct fc_tcp_sink *sink, const struct fc_plan *plan)
{
    const size_t np = sizeof(fc_tcp_optim_prefix) - 1, ns = sizeof(fc_tcp_state_prefix) - 1;
    sink->item_of = fc_calloc(plan->ntensors + 1, sizeof(*sink->item_of));
    if (sink->item_of == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    sink->nitems = 1;
    int prefixed = 1, nmodel = 0;
    for (size_t i = 0; i < plan->ntensors; i++) {
        const char *key = plan->tensors[i].key;
        if (strncmp(key, fc_tcp_optim_prefix, np) != 0) {
            prefixed &= strncmp(key, "model.", 6) == 0 && key[6] != '\0';
            nmodel++;
            continue;
        }
        const char *dot = strrchr(key, '.');
        if (strncmp(key, fc_tcp_state_prefix, ns) != 0 || dot <= key + ns || dot[1] == '\0')
            return fc_error_set(FC_EINVAL,
                                "'%s': optimizer tensors must be optimizer.state.<fqn>.<name>, "
                                "as get_state_dict names them; use --format dcp",
                                key);
        sink->item_of[i] = FC_TCP_ITEM_OPTIMIZER;
        sink->nitems = 2;
    }
    if (sink->nitems > 1)
        FC_TRY(fc_tcp_sink_fqn_order(sink, plan));
    sink->strip = prefixed && nmodel > 0 ? 6 : 0;
    /* get_state_dict's nested optimizer dict numbers its param_groups; the flat one
     * (flatten_optimizer_state_dict=True, torchtitan's) keys them by parameter */
    sink->optim_nested = sink->ngroups_values > 0;
    for (size_t i = 0; i < sink->ngroups_values; i++) {
        const char *g = sink->groups[i]->key + sizeof("optimizer.param_groups.") - 1;
        sink->optim_nested &= *g >= '0' && *g <= '9';
        while (*g >= '0' && *g <= '9')
            g++;
        sink->optim_nested &= *g == '.';
    }
    if (sink->ngroups_values > 0 && sink->nitems < 2)
        return fc_error_set(FC_EINVAL, "optimizer param_groups without optimizer state tensors; "
                                       "use --format dcp");
    if (sink->nitems > 1 && sink->layout == FC_TCP_LAYOUT_SAFETENSORS)
        return fc_error_set(FC_EINVAL, "optimizer state: its param_groups are non-tensor values, "
                                       "which the safetensors layout cannot hold; use "
                                       "--tcp-layout pt");
    return FC_OK;
}

/* fc_plan_file_head_fn: model_<rank>.safetensors, its tensors' local shards in file order. */
static int fc_tcp_sink_head(void *ctx, const struct fc_plan *plan, size_t file, char *name,
                            size_t namesize, uint64_t *head_bytes)
{
    struct fc_tcp_sink *sink = ctx;
    const struct fc_plan_file *f = &plan->files[file];
    struct fc_st_tensor *t = fc_calloc(f->nitems + 1, sizeof(*t));
    int rc = FC_OK;
    if (t == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    const int n = snprintf(name, namesize, "model_%d.safetensors", f->rank);
    if (n < 0 || (size_t)n >= namesize) {
        rc = fc_error_set(FC_EINVAL, "rank %d: file name does not fit", f->rank);
        goto done;
    }
    for (size_t i = 0; i < f->nitems; i++) {
        const struct fc_plan_item *it = &plan->items[f->first_item + i];
        const struct fc_plan_tensor *pt = &plan->tensors[it->index];
        const struct fc_plan_chunk *ch = &plan->chunks[it->chunk];
        t[i].name = fc_tcp_sink_key(sink, pt);
        t[i].dtype = pt->dtype;
        t[i].ndim = pt->ndim;
        t[i].nbytes = it->length;
        memcpy(t[i].shape, ch->box.sizes, (size_t)pt->ndim * sizeof(int64_t));
    }
    struct fc_buf *h = &sink->st.heads[file];
    fc_buf_init(h, (size_t)2 * FC_TCP_SINK_HEADER_MAX);
    /* 8: the reference writer's alignment, as safetensors.torch.save lays files out */
    FC_TRY_GOTO(fc_safetensors_write_header(h, t, f->nitems, NULL, 0, 8), rc, done);
    if (h->len - 8 > FC_TCP_SINK_HEADER_MAX) {
        rc = fc_error_set(FC_EINVAL,
                          "%s: a %zu-byte header exceeds safetensors' limit of %u bytes; use "
                          "--format dcp",
                          name, h->len - 8, FC_TCP_SINK_HEADER_MAX);
        goto done;
    }
    *head_bytes = h->len;
done:
    fc_free(t);
    return rc;
}

/* --mesh-dim-names "a,b,c" (one per mesh dim), or torchtitan's names of the mesh's dims. */
static int fc_tcp_sink_names(struct fc_tcp_sink *sink, const struct fc_mesh *mesh,
                             const char *names)
{
    static const char *const titan[] = {[FC_MESH_DIM_OTHER] = "dim",
                                        [FC_MESH_DIM_REPLICATE] = "dp_replicate",
                                        [FC_MESH_DIM_SHARD] = "dp_shard",
                                        [FC_MESH_DIM_TP] = "tp"};
    const char *p = names;
    for (int d = 0; d < mesh->ndim; d++) {
        const char *name = titan[mesh->name[d]];
        size_t len = strlen(name);
        if (names != NULL) {
            const char *comma = strchr(p, ',');
            len = comma != NULL ? (size_t)(comma - p) : strlen(p);
            name = p;
            p += len + (comma != NULL);
            if (len == 0 || (comma == NULL && d + 1 < mesh->ndim))
                return fc_error_set(FC_EINVAL,
                                    "--mesh-dim-names: '%s' does not name the mesh's %d "
                                    "dims (comma-separated, none empty)",
                                    names, mesh->ndim);
        }
        sink->names[d] = fc_strndup(name, len);
        if (sink->names[d] == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
    }
    if (names != NULL && (*p != '\0' || p[-1] == ','))
        return fc_error_set(FC_EINVAL, "--mesh-dim-names: '%s' names more than the mesh's %d dims",
                            names, mesh->ndim);
    return FC_OK;
}

int fc_tcp_sink_layout(struct fc_tcp_sink *sink, struct fc_plan *plan, const int *tp_ruled,
                       const char *device, const char *dim_names, const char *layout,
                       const char *torch_version)
{
    if (layout == NULL || strcmp(layout, "pt") == 0)
        sink->layout = FC_TCP_LAYOUT_PT;
    else if (strcmp(layout, "safetensors") == 0)
        sink->layout = FC_TCP_LAYOUT_SAFETENSORS;
    else
        return fc_error_set(FC_EINVAL, "--tcp-layout: '%s' is not pt or safetensors", layout);
    if (torch_version != NULL && sink->layout != FC_TCP_LAYOUT_PT)
        return fc_error_set(FC_EINVAL, "--torch-version: only the pt layout pickles torch's "
                                       "classes; --tcp-layout safetensors needs none");
    FC_TRY(fc_tcp_parse_torch_version(torch_version, &sink->mesh_form));
    sink->tp_ruled = tp_ruled;
    sink->device = device != NULL ? device : "cuda";
    if (sink->device[0] == '\0')
        return fc_error_set(FC_EINVAL, "--mesh-device: empty device type");
    FC_TRY(fc_tcp_sink_names(sink, &plan->mesh, dim_names));
    for (size_t i = 0; i < plan->ntensors; i++) {
        const struct fc_plan_tensor *t = &plan->tensors[i];
        if (sink->layout == FC_TCP_LAYOUT_SAFETENSORS)
            FC_TRY(fc_st_sink_check_dtype(t->key, t->dtype));
    }
    FC_TRY(fc_tcp_sink_items(sink, plan));
    sink->world = plan->nfiles;
    FC_TRY(fc_plan_store_at_holders(plan));
    if (sink->nitems > 1)
        FC_TRY(fc_plan_split_files(plan, sink->item_of, sink->nitems));
    if (sink->layout == FC_TCP_LAYOUT_PT)
        return fc_tcp_pt_layout(sink, plan);
    sink->st.heads = fc_calloc(plan->nfiles + 1, sizeof(*sink->st.heads));
    if (sink->st.heads == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    sink->st.nfiles = plan->nfiles;
    return fc_plan_relayout(plan, fc_tcp_sink_head, sink);
}

void fc_tcp_sink_release(struct fc_tcp_sink *sink)
{
    fc_st_sink_release(&sink->st);
    fc_tcp_pt_release(&sink->pt);
    fc_free(sink->item_of);
    fc_free(sink->groups);
    fc_free(sink->fqn_order);
    fc_buf_release(&sink->groups_pkl);
    for (int d = 0; d < FC_MESH_MAX_DIMS; d++)
        fc_free(sink->names[d]);
    memset(sink, 0, sizeof(*sink));
}

/* ---- metadata.pkl ---- */

static int fc_pw_cstr(struct fc_buf *b, const char *s)
{
    return fc_pw_str(b, s, strlen(s));
}

/* The nested path key json.dumps(list(path), separators=(",", ":")) gives (json.loads reads it). */
static int fc_tcp_path_json(struct fc_buf *b, const char *const *elems, const size_t *lens, int n)
{
    FC_TRY(fc_buf_putc(b, '['));
    for (int i = 0; i < n; i++) {
        FC_TRY(fc_buf_puts(b, i > 0 ? ",\"" : "\""));
        const unsigned char *p = (const unsigned char *)elems[i];
        for (size_t k = 0; k < lens[i]; k++) {
            if (p[k] == '"' || p[k] == '\\')
                FC_TRY(fc_buf_putc(b, '\\'));
            if (p[k] < 0x20)
                FC_TRY(fc_buf_printf(b, "\\u%04x", p[k]));
            else
                FC_TRY(fc_buf_putc(b, p[k]));
        }
        FC_TRY(fc_buf_putc(b, '"'));
    }
    return fc_buf_putc(b, ']');
}

/* One mesh: its dims dims[0..n) of the plan mesh, ranks in row-major order. */
struct fc_tcp_mesh_view {
    int dims[FC_MESH_MAX_DIMS];
    int n;
    const int64_t *ranks;
    size_t nranks;
    int named; /* 0: mesh_dim_names None (the package's world mesh of plain tensors) */
};

static int fc_tcp_pw_mesh(struct fc_buf *b, const struct fc_tcp_sink *sink,
                          const struct fc_plan *plan, const struct fc_tcp_mesh_view *v)
{
    int64_t shape[FC_MESH_MAX_DIMS];
    for (int i = 0; i < v->n; i++)
        shape[i] = v->dims[i] < 0 ? (int64_t)sink->world : plan->mesh.size[v->dims[i]];
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "device_type"));
    FC_TRY(fc_pw_cstr(b, sink->device));
    FC_TRY(fc_pw_cstr(b, "mesh_shape"));
    FC_TRY(fc_pw_int_tuple(b, shape, v->n));
    FC_TRY(fc_pw_cstr(b, "mesh_data"));
    FC_TRY(fc_pw_int_tuple(b, v->ranks, (int)v->nranks));
    FC_TRY(fc_pw_cstr(b, "mesh_dim_names"));
    if (!v->named) {
        FC_TRY(fc_pw_none(b));
    } else {
        if (v->n > 3)
            FC_TRY(fc_pw_mark(b));
        for (int i = 0; i < v->n; i++)
            FC_TRY(fc_pw_cstr(b, sink->names[v->dims[i]]));
        FC_TRY(v->n > 3 ? fc_pw_tuple(b) : fc_pw_tuple_n(b, v->n));
    }
    return fc_pw_setitems(b);
}

static int fc_tcp_pw_placement(struct fc_buf *b, const struct fc_dim_placement *p)
{
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "type"));
    if (p->kind == FC_DIM_REPLICATE) {
        FC_TRY(fc_pw_cstr(b, "Replicate"));
        return fc_pw_setitems(b);
    }
    FC_TRY(fc_pw_cstr(b, p->kind == FC_DIM_STRIDED ? "StridedShard" : "Shard"));
    FC_TRY(fc_pw_cstr(b, "dim"));
    FC_TRY(fc_pw_int(b, p->dim));
    if (p->kind == FC_DIM_STRIDED) {
        FC_TRY(fc_pw_cstr(b, "split_factor"));
        FC_TRY(fc_pw_int(b, p->split));
    }
    return fc_pw_setitems(b);
}

static int fc_tcp_pw_ints_list(struct fc_buf *b, const int64_t *v, int n)
{
    FC_TRY(fc_pw_empty_list(b));
    if (n == 0)
        return FC_OK;
    FC_TRY(fc_pw_mark(b));
    for (int i = 0; i < n; i++)
        FC_TRY(fc_pw_int(b, v[i]));
    return fc_pw_appends(b);
}

/* One group: {"sharding_metadata": {"type": ..., "data": {...}}, "ranks": (...)}. */
static int fc_tcp_pw_group(struct fc_buf *b, const struct fc_tcp_sink *sink,
                           const struct fc_plan *plan, const struct fc_plan_tensor *t,
                           const struct fc_tcp_mesh_view *v, const struct fc_dim_placement *pl,
                           const int64_t *sorted)
{
    struct fc_tensor_desc d;
    fc_tcp_global_desc(t, &d);
    char dtype[64];
    snprintf(dtype, sizeof(dtype), "torch.%s", fc_dtype_name(t->dtype));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "sharding_metadata"));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "type"));
    FC_TRY(fc_pw_cstr(b, "DTensorShardingMetadata"));
    FC_TRY(fc_pw_cstr(b, "data"));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "global_shape"));
    FC_TRY(fc_tcp_pw_ints_list(b, t->shape, t->ndim));
    FC_TRY(fc_pw_cstr(b, "dtype"));
    FC_TRY(fc_pw_cstr(b, dtype));
    FC_TRY(fc_pw_cstr(b, "stride"));
    FC_TRY(fc_tcp_pw_ints_list(b, d.stride, t->ndim));
    FC_TRY(fc_pw_cstr(b, "mesh_spec"));
    FC_TRY(fc_tcp_pw_mesh(b, sink, plan, v));
    FC_TRY(fc_pw_cstr(b, "placements"));
    FC_TRY(fc_pw_empty_list(b));
    FC_TRY(fc_pw_mark(b));
    for (int i = 0; i < v->n; i++)
        FC_TRY(fc_tcp_pw_placement(b, &pl[i]));
    FC_TRY(fc_pw_appends(b));
    FC_TRY(fc_pw_setitems(b)); /* data */
    FC_TRY(fc_pw_setitems(b)); /* sharding_metadata */
    FC_TRY(fc_pw_cstr(b, "ranks"));
    FC_TRY(fc_pw_int_tuple(b, sorted, (int)v->nranks));
    return fc_pw_setitems(b);
}

static int fc_cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * The groups of tensor t as torch records them: a tensor stored whole is a
 * plain tensor (world mesh, no names); one no tp rule placed lives on the dp
 * submesh of each tp coordinate (fully_shard's mesh); any other on the whole
 * mesh.
 */
static int fc_tcp_pw_groups(struct fc_buf *b, const struct fc_tcp_sink *sink,
                            const struct fc_plan *plan, const struct fc_plan_tensor *t,
                            int64_t *ranks, int64_t *sorted)
{
    const struct fc_mesh *mesh = &plan->mesh;
    const int world = (int)sink->world, tp = fc_mesh_find(mesh, FC_MESH_DIM_TP);
    struct fc_tcp_mesh_view v = {{0}, 0, ranks, 0, 1};
    struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
    FC_TRY(fc_pw_empty_list(b));
    FC_TRY(fc_pw_mark(b));
    if (t->placement == FC_PLACE_REPLICATE) {
        v = (struct fc_tcp_mesh_view){{-1}, 1, ranks, (size_t)world, 0};
        pl[0] = (struct fc_dim_placement){FC_DIM_REPLICATE, 0, 1};
        for (int r = 0; r < world; r++)
            ranks[r] = sorted[r] = r;
        FC_TRY(fc_tcp_pw_group(b, sink, plan, t, &v, pl, sorted));
        return fc_pw_appends(b);
    }
    const int sub = tp >= 0 && t->pl[tp].kind == FC_DIM_REPLICATE &&
                    (sink->tp_ruled == NULL || !sink->tp_ruled[t->tag]);
    const int ngroups = sub ? mesh->size[tp] : 1;
    for (int g = 0; g < ngroups; g++) {
        v.n = 0;
        for (int d = 0; d < mesh->ndim; d++) {
            if (sub && d == tp)
                continue;
            pl[v.n] = t->pl[d];
            v.dims[v.n++] = d;
        }
        v.nranks = 0;
        for (int r = 0; r < world; r++) {
            int c[FC_MESH_MAX_DIMS];
            fc_mesh_coords(mesh, r, c);
            if (!sub || c[tp] == g)
                ranks[v.nranks++] = r; /* row-major over the kept dims */
        }
        memcpy(sorted, ranks, v.nranks * sizeof(*ranks));
        qsort(sorted, v.nranks, sizeof(*sorted), fc_cmp_i64);
        FC_TRY(fc_tcp_pw_group(b, sink, plan, t, &v, pl, sorted));
    }
    return fc_pw_appends(b);
}

/* Item `item`'s DistributedItemMetadata: every tensor's groups, every rank's layout. */
static int fc_tcp_pw_item(struct fc_buf *b, const struct fc_tcp_sink *sink,
                          const struct fc_plan *plan, int item, int64_t *ranks, int64_t *sorted,
                          struct fc_buf *path)
{
    static const char *const names[] = {"model", "optimizer"};
    const char *elems[3];
    size_t lens[3];
    int any = 0;
    FC_TRY(fc_pw_cstr(b, names[item]));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "nested_path_to_metadata"));
    FC_TRY(fc_pw_empty_dict(b));
    for (size_t i = 0; i < plan->ntensors; i++) {
        if (sink->item_of != NULL && sink->item_of[i] != item)
            continue;
        if (!any++)
            FC_TRY(fc_pw_mark(b));
        const int n = fc_tcp_sink_path(sink, plan, i, elems, lens);
        fc_buf_clear(path);
        FC_TRY(fc_tcp_path_json(path, elems, lens, n));
        FC_TRY(fc_pw_str(b, (const char *)path->data, path->len));
        FC_TRY(fc_tcp_pw_groups(b, sink, plan, &plan->tensors[i], ranks, sorted));
    }
    if (any)
        FC_TRY(fc_pw_setitems(b));
    FC_TRY(fc_pw_cstr(b, "rank_to_layout_info"));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    for (size_t r = 0; r < sink->world; r++) {
        FC_TRY(fc_pw_int(b, (int64_t)r));
        if (sink->layout == FC_TCP_LAYOUT_PT) {
            FC_TRY(fc_pw_none(b)); /* the default: <item>_<rank>.pt, torch.save */
            continue;
        }
        FC_TRY(fc_pw_empty_dict(b));
        FC_TRY(fc_pw_mark(b));
        FC_TRY(fc_pw_cstr(b, "file_path"));
        FC_TRY(fc_pw_cstr(b, plan->files[(size_t)item * sink->world + r].name));
        FC_TRY(fc_pw_cstr(b, "serialization_format"));
        FC_TRY(fc_pw_empty_dict(b));
        FC_TRY(fc_pw_cstr(b, "type"));
        FC_TRY(fc_pw_cstr(b, "SafetensorsSerialization"));
        FC_TRY(fc_pw_setitem(b));
        FC_TRY(fc_pw_setitems(b));
    }
    FC_TRY(fc_pw_setitems(b)); /* rank_to_layout_info */
    return fc_pw_setitems(b);  /* the item */
}

static int fc_tcp_pw_metadata(struct fc_buf *b, const struct fc_tcp_sink *sink,
                              const struct fc_plan *plan, int64_t *ranks, int64_t *sorted)
{
    struct fc_buf path = FC_BUF_INIT(1 << 20);
    int rc = FC_OK;
    FC_TRY(fc_pw_proto(b));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "metadata"));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    for (int item = 0; item < sink->nitems; item++)
        FC_TRY_GOTO(fc_tcp_pw_item(b, sink, plan, item, ranks, sorted, &path), rc, done);
    FC_TRY_GOTO(fc_pw_setitems(b), rc, done); /* metadata */
    FC_TRY_GOTO(fc_pw_cstr(b, "world_size"), rc, done);
    FC_TRY_GOTO(fc_pw_int(b, (int64_t)sink->world), rc, done);
    FC_TRY_GOTO(fc_pw_cstr(b, "version"), rc, done);
    FC_TRY_GOTO(fc_pw_cstr(b, "2.0"), rc, done);
    FC_TRY_GOTO(fc_pw_setitems(b), rc, done);
    rc = fc_pw_stop(b);
done:
    fc_buf_release(&path);
    return rc;
}

int fc_tcp_sink_write_metadata(const struct fc_tcp_sink *sink, const struct fc_plan *plan,
                               const char *dir)
{
    struct fc_buf plain = FC_BUF_INIT(FC_TCP_SINK_META_CAP),
                  out = FC_BUF_INIT(FC_TCP_SINK_META_CAP);
    int64_t *ranks = fc_calloc(sink->world + 1, sizeof(*ranks));
    int64_t *sorted = fc_calloc(sink->world + 1, sizeof(*sorted));
    char *path = fc_path_join(dir, FC_TCP_METADATA);
    int rc = FC_OK;
    if (ranks == NULL || sorted == NULL || path == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    FC_TRY_GOTO(fc_tcp_pw_metadata(&plain, sink, plan, ranks, sorted), rc, done);
    /* Memo references for the strings every group repeats, as pickle's own memo does. */
    FC_TRY_GOTO(fc_pw_memoize(plain.data, plain.len, &out), rc, done);
    rc = fc_write_file_atomic(path, out.data, out.len);
done:
    fc_free(path);
    fc_free(ranks);
    fc_free(sorted);
    fc_buf_release(&plain);
    fc_buf_release(&out);
    return rc;
}

struct fc_sink fc_tcp_sink_sink(const struct fc_tcp_sink *sink)
{
    if (sink->layout == FC_TCP_LAYOUT_PT)
        return fc_tcp_pt_sink(sink);
    /* Per-file headers, items of bare bytes: the safetensors sink's operations. */
    return fc_st_sink_sink(&sink->st);
}
