/*
 * fc_tcp.c - torch_checkpointing's metadata.pkl (fc_tcp.h) and the shard
 * geometry of its DTensor placements.
 */
#include "fc_tcp.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_pickle.h"
#include "fc_strmap.h"

/* ---- reading the tree ---- */

struct tcp_rd {
    const char *what;
    struct fc_tcp_meta *m;
    const struct fc_pv **mesh_nodes; /* meta->meshes[i] was read from mesh_nodes[i] */
};

/* v is a str without NUL inside (Python allows one; no name we use may hold it). */
static int tcp_is_str(const struct fc_pv *v)
{
    return v != NULL && v->kind == FC_PV_STR && strlen(v->u.str.s) == v->u.str.len;
}

static int tcp_is_seq(const struct fc_pv *v)
{
    return v != NULL && (v->kind == FC_PV_LIST || v->kind == FC_PV_TUPLE);
}

/* dict[key] of kind `kind` (FC_PV_LIST also accepts a tuple), or an error naming `where`. */
static int tcp_field(const struct tcp_rd *r, const struct fc_pv *dict, const char *key,
                     enum fc_pv_kind kind, const char *where, const struct fc_pv **out)
{
    const struct fc_pv *v = fc_pv_dict_get(dict, key);
    *out = v;
    if (v == NULL)
        return fc_error_set(FC_ECORRUPT, "%s: %s has no '%s'", r->what, where, key);
    const int ok = kind == FC_PV_LIST  ? tcp_is_seq(v)
                   : kind == FC_PV_STR ? tcp_is_str(v)
                                       : v->kind == kind;
    if (!ok && kind == FC_PV_STR && v->kind == FC_PV_STR)
        return fc_error_set(FC_ECORRUPT, "%s: %s: '%s' holds a NUL character", r->what, where, key);
    if (!ok)
        return fc_error_set(FC_ECORRUPT, "%s: %s: '%s' is a %s, not a %s", r->what, where, key,
                            fc_pv_kind_name(v->kind),
                            kind == FC_PV_LIST ? "list" : fc_pv_kind_name(kind));
    return FC_OK;
}

/* A list/tuple of at most max ints each in [lo, hi] into v[]; *n gets the count. */
static int tcp_ints(const struct tcp_rd *r, const struct fc_pv *seq, int64_t lo, int64_t hi,
                    size_t max, int64_t *v, size_t *n, const char *where, const char *key)
{
    if (!tcp_is_seq(seq))
        return fc_error_set(FC_ECORRUPT, "%s: %s: '%s' is not a list", r->what, where, key);
    if (seq->u.seq.n > max)
        return fc_error_set(FC_ECORRUPT, "%s: %s: '%s' has %zu values, at most %zu allowed",
                            r->what, where, key, seq->u.seq.n, max);
    for (size_t i = 0; i < seq->u.seq.n; i++) {
        const struct fc_pv *x = seq->u.seq.items[i];
        if (x->kind != FC_PV_INT || x->u.i < lo || x->u.i > hi)
            return fc_error_set(FC_ECORRUPT,
                                "%s: %s: '%s'[%zu] is not an int in [%" PRId64 ", %" PRId64 "]",
                                r->what, where, key, i, lo, hi);
        v[i] = x->u.i;
    }
    *n = seq->u.seq.n;
    return FC_OK;
}

/* ---- meshes ---- */

static void tcp_mesh_free(struct fc_tcp_mesh *mesh)
{
    if (mesh == NULL)
        return;
    fc_free(mesh->device_type);
    fc_free(mesh->ranks);
    fc_free(mesh->pos);
    if (mesh->dim_names != NULL)
        for (int d = 0; d < mesh->ndim; d++)
            fc_free(mesh->dim_names[d]);
    fc_free(mesh->dim_names);
    fc_free(mesh);
}

static int tcp_mesh_parse(const struct tcp_rd *r, const struct fc_pv *ms, const char *where,
                          struct fc_tcp_mesh *mesh)
{
    const struct fc_pv *dev, *shape, *data, *names;
    FC_TRY(tcp_field(r, ms, "device_type", FC_PV_STR, where, &dev));
    FC_TRY(tcp_field(r, ms, "mesh_shape", FC_PV_LIST, where, &shape));
    FC_TRY(tcp_field(r, ms, "mesh_data", FC_PV_LIST, where, &data));
    size_t nd;
    FC_TRY(tcp_ints(r, shape, 1, FC_TCP_MAX_WORLD, FC_MAX_DIMS, mesh->shape, &nd, where,
                    "mesh_shape"));
    if (nd == 0)
        return fc_error_set(FC_ECORRUPT, "%s: %s: 'mesh_shape' is empty", r->what, where);
    mesh->ndim = (int)nd;
    int64_t count = 1;
    for (int d = 0; d < mesh->ndim; d++)
        if (fc_mul_i64(count, mesh->shape[d], &count) < 0 || count > r->m->world_size)
            return fc_error_set(FC_ECORRUPT,
                                "%s: %s: mesh_shape holds more ranks than world_size %" PRId64,
                                r->what, where, r->m->world_size);
    if ((int64_t)data->u.seq.n != count)
        return fc_error_set(FC_ECORRUPT,
                            "%s: %s: mesh_data has %zu ranks, mesh_shape needs %" PRId64, r->what,
                            where, data->u.seq.n, count);
    mesh->device_type = fc_strdup(dev->u.str.s);
    mesh->ranks = fc_calloc((size_t)count, sizeof(*mesh->ranks));
    mesh->pos = fc_calloc((size_t)r->m->world_size, sizeof(*mesh->pos));
    int rc = FC_OK;
    if (mesh->device_type == NULL || mesh->ranks == NULL || mesh->pos == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
        goto done;
    }
    for (int64_t k = 0; k < r->m->world_size; k++)
        mesh->pos[k] = -1;
    mesh->nworld = r->m->world_size;
    FC_TRY_GOTO(tcp_ints(r, data, 0, r->m->world_size - 1, (size_t)count, mesh->ranks,
                         &mesh->nranks, where, "mesh_data"),
                rc, done);
    for (size_t i = 0; i < mesh->nranks; i++) {
        if (mesh->pos[mesh->ranks[i]] >= 0) {
            rc = fc_error_set(FC_ECORRUPT, "%s: %s: mesh_data lists rank %" PRId64 " twice",
                              r->what, where, mesh->ranks[i]);
            goto done;
        }
        mesh->pos[mesh->ranks[i]] = (int64_t)i;
    }
    names = fc_pv_dict_get(ms, "mesh_dim_names");
    if (names != NULL && names->kind != FC_PV_NONE) {
        if (!tcp_is_seq(names) || names->u.seq.n != nd) {
            rc = fc_error_set(FC_ECORRUPT, "%s: %s: mesh_dim_names is not %zu names", r->what,
                              where, nd);
            goto done;
        }
        mesh->dim_names = fc_calloc(nd, sizeof(*mesh->dim_names));
        if (mesh->dim_names == NULL) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
            goto done;
        }
        for (size_t d = 0; d < nd; d++) {
            const struct fc_pv *s = names->u.seq.items[d];
            if (!tcp_is_str(s)) {
                rc = fc_error_set(FC_ECORRUPT, "%s: %s: mesh_dim_names[%zu] is not a str", r->what,
                                  where, d);
                goto done;
            }
            mesh->dim_names[d] = fc_strdup(s->u.str.s);
            if (mesh->dim_names[d] == NULL) {
                rc = fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
                goto done;
            }
        }
    }
done:
    return rc;
}

/* Meshes are compared by content with this many of the latest distinct ones. */
#define TCP_MESH_RECENT 8

static int tcp_mesh_equal(const struct fc_tcp_mesh *a, const struct fc_tcp_mesh *b)
{
    if (strcmp(a->device_type, b->device_type) != 0 || a->ndim != b->ndim ||
        a->nranks != b->nranks || (a->dim_names == NULL) != (b->dim_names == NULL) ||
        memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(a->shape[0])) != 0 ||
        memcmp(a->ranks, b->ranks, a->nranks * sizeof(a->ranks[0])) != 0)
        return 0;
    for (int d = 0; a->dim_names != NULL && d < a->ndim; d++)
        if (strcmp(a->dim_names[d], b->dim_names[d]) != 0)
            return 0;
    return 1;
}

/*
 * The mesh of mesh_spec node ms: pickle's memo shares one dict between the
 * DTensors of a mesh (the package's metadata); equal dicts written apart
 * (fsdpconv's, without a memo for dicts) become one mesh too, so that a
 * mesh's rank index (world_size entries) exists once, not once per tensor.
 */
static int tcp_mesh_get(struct tcp_rd *r, const struct fc_pv *ms, const char *where,
                        const struct fc_tcp_mesh **out)
{
    struct fc_tcp_meta *m = r->m;
    for (size_t i = 0; i < m->nmeshes; i++) {
        if (r->mesh_nodes[i] == ms) {
            *out = m->meshes[i];
            return FC_OK;
        }
    }
    if (ms == NULL || ms->kind != FC_PV_DICT)
        return fc_error_set(FC_ECORRUPT, "%s: %s: 'mesh_spec' is not a dict", r->what, where);
    struct fc_tcp_mesh **meshes = fc_reallocarray(m->meshes, m->nmeshes + 1, sizeof(*meshes));
    if (meshes != NULL)
        m->meshes = meshes;
    const struct fc_pv **nodes =
        meshes != NULL ? fc_reallocarray(r->mesh_nodes, m->nmeshes + 1, sizeof(*nodes)) : NULL;
    if (nodes != NULL)
        r->mesh_nodes = nodes;
    struct fc_tcp_mesh *mesh = nodes != NULL ? fc_calloc(1, sizeof(*mesh)) : NULL;
    if (mesh == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
    m->meshes[m->nmeshes] = mesh;
    r->mesh_nodes[m->nmeshes++] = ms;
    FC_TRY(tcp_mesh_parse(r, ms, where, mesh));
    for (size_t i = m->nmeshes - 1, k = 0; i-- > 0 && k < TCP_MESH_RECENT; k++) {
        if (tcp_mesh_equal(m->meshes[i], mesh)) {
            tcp_mesh_free(mesh);
            m->nmeshes--;
            *out = m->meshes[i];
            return FC_OK;
        }
    }
    *out = mesh;
    return FC_OK;
}

/* ---- groups ---- */

static int tcp_placements(const struct tcp_rd *r, const struct fc_pv *pl, struct fc_tcp_group *g,
                          const char *where)
{
    const int nd = g->mesh->ndim;
    if (!tcp_is_seq(pl) || pl->u.seq.n != (size_t)nd)
        return fc_error_set(FC_ECORRUPT,
                            "%s: %s: 'placements' is not %d placements (one per "
                            "mesh dim)",
                            r->what, where, nd);
    for (int d = 0; d < nd; d++) {
        const struct fc_pv *p = pl->u.seq.items[d], *type, *dim, *sf;
        struct fc_tcp_placement *out = &g->place[d];
        if (p->kind != FC_PV_DICT)
            return fc_error_set(FC_ECORRUPT, "%s: %s: placement %d is not a dict", r->what, where,
                                d);
        FC_TRY(tcp_field(r, p, "type", FC_PV_STR, where, &type));
        if (strcmp(type->u.str.s, "Replicate") == 0) {
            out->kind = FC_TCP_REPLICATE;
            continue;
        }
        if (strcmp(type->u.str.s, "Shard") == 0)
            out->kind = FC_TCP_SHARD;
        else if (strcmp(type->u.str.s, "StridedShard") == 0)
            out->kind = FC_TCP_STRIDED_SHARD;
        else
            return fc_error_set(FC_EFORMAT,
                                "%s: %s: placement type '%s' is not supported "
                                "(Shard, StridedShard, Replicate are)",
                                r->what, where, type->u.str.s);
        FC_TRY(tcp_field(r, p, "dim", FC_PV_INT, where, &dim));
        if (dim->u.i < 0 || dim->u.i >= g->ndim)
            return fc_error_set(FC_ECORRUPT,
                                "%s: %s: placement %d shards dim %" PRId64 " of a %d-dim tensor",
                                r->what, where, d, dim->u.i, g->ndim);
        out->dim = (int)dim->u.i;
        if (out->kind == FC_TCP_STRIDED_SHARD) {
            FC_TRY(tcp_field(r, p, "split_factor", FC_PV_INT, where, &sf));
            if (sf->u.i < 1 || sf->u.i > FC_TCP_MAX_WORLD)
                return fc_error_set(FC_ECORRUPT, "%s: %s: split_factor %" PRId64 " is out of range",
                                    r->what, where, sf->u.i);
            out->split_factor = sf->u.i;
        }
    }
    return FC_OK;
}

static int tcp_group(struct tcp_rd *r, const struct fc_pv *gv, struct fc_tcp_group *g,
                     const char *where)
{
    const struct fc_pv *sm, *type, *data, *shape, *dtype, *stride, *ranks;
    if (gv->kind != FC_PV_DICT)
        return fc_error_set(FC_ECORRUPT, "%s: %s: a group is a %s, not a dict", r->what, where,
                            fc_pv_kind_name(gv->kind));
    FC_TRY(tcp_field(r, gv, "sharding_metadata", FC_PV_DICT, where, &sm));
    FC_TRY(tcp_field(r, sm, "type", FC_PV_STR, where, &type));
    if (strcmp(type->u.str.s, "DTensorShardingMetadata") != 0)
        return fc_error_set(FC_EFORMAT,
                            "%s: %s: sharding metadata of type '%s' is not "
                            "supported (DTensorShardingMetadata is)",
                            r->what, where, type->u.str.s);
    FC_TRY(tcp_field(r, sm, "data", FC_PV_DICT, where, &data));
    FC_TRY(tcp_field(r, data, "global_shape", FC_PV_LIST, where, &shape));
    FC_TRY(tcp_field(r, data, "dtype", FC_PV_STR, where, &dtype));
    FC_TRY(tcp_field(r, data, "stride", FC_PV_LIST, where, &stride));
    size_t nd, ns;
    FC_TRY(tcp_ints(r, shape, 0, INT64_MAX, FC_MAX_DIMS, g->shape, &nd, where, "global_shape"));
    g->ndim = (int)nd;
    struct fc_tensor_desc t;
    memset(&t, 0, sizeof(t));
    int64_t st[FC_MAX_DIMS];
    FC_TRY(tcp_ints(r, stride, 0, INT64_MAX, FC_MAX_DIMS, st, &ns, where, "stride"));
    const char *dn = dtype->u.str.s;
    g->dtype = strncmp(dn, "torch.", 6) == 0 ? fc_dtype_from_torch_name(dn + 6) : FC_DTYPE_INVALID;
    if (g->dtype == FC_DTYPE_INVALID)
        return fc_error_set(FC_EFORMAT, "%s: %s: dtype '%s' is not supported", r->what, where, dn);
    /* Shapes feed strides and byte sizes unchecked downstream: bound them here. */
    int64_t bytes = (int64_t)fc_dtype_size(g->dtype);
    for (int d = 0; d < g->ndim; d++)
        if (fc_mul_i64(bytes, g->shape[d] > 0 ? g->shape[d] : 1, &bytes) < 0)
            return fc_error_set(FC_ECORRUPT, "%s: %s: global_shape overflows int64 bytes", r->what,
                                where);
    t.dtype = g->dtype;
    t.ndim = g->ndim;
    memcpy(t.shape, g->shape, sizeof(g->shape));
    fc_tensor_set_contiguous(&t);
    if (ns != nd || (nd > 0 && memcmp(st, t.stride, nd * sizeof(*st)) != 0))
        return fc_error_set(FC_EFORMAT,
                            "%s: %s: stride is not the contiguous stride of "
                            "global_shape",
                            r->what, where);
    FC_TRY(tcp_mesh_get(r, fc_pv_dict_get(data, "mesh_spec"), where, &g->mesh));
    FC_TRY(tcp_placements(r, fc_pv_dict_get(data, "placements"), g, where));
    FC_TRY(tcp_field(r, gv, "ranks", FC_PV_LIST, where, &ranks));
    g->ranks = fc_calloc(ranks->u.seq.n + 1, sizeof(*g->ranks));
    if (g->ranks == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
    FC_TRY(tcp_ints(r, ranks, 0, r->m->world_size - 1, (size_t)r->m->world_size, g->ranks,
                    &g->nranks, where, "ranks"));
    for (size_t i = 0; i < g->nranks; i++) {
        if (g->mesh->pos[g->ranks[i]] < 0) /* ranks are in [0, world_size): checked above */
            return fc_error_set(FC_ECORRUPT, "%s: %s: rank %" PRId64 " is not in the mesh", r->what,
                                where, g->ranks[i]);
    }
    return FC_OK;
}

/* ---- paths ---- */

static int tcp_elem_text(struct fc_path_elem *e, const json_t *j)
{
    if (json_is_string(j)) {
        const size_t n = json_string_length(j);
        if (strlen(json_string_value(j)) != n)
            return FC_ECORRUPT; /* a NUL inside */
        e->key = fc_strndup(json_string_value(j), n);
        return e->key == NULL ? FC_ENOMEM : FC_OK;
    }
    if (json_is_integer(j) && json_integer_value(j) >= 0) {
        e->is_index = 1;
        e->index = json_integer_value(j);
        return FC_OK;
    }
    return FC_ECORRUPT;
}

/* The JSON list of a nested path after the item name: elems and the dotted key. */
static int tcp_path_parse(const struct tcp_rd *r, const char *item, const struct fc_pv *k,
                          struct fc_tcp_path *p)
{
    if (!tcp_is_str(k))
        return fc_error_set(FC_ECORRUPT, "%s: item '%s': a nested path key is not a str", r->what,
                            item);
    json_error_t jerr;
    json_t *j = json_loadb(k->u.str.s, k->u.str.len, 0, &jerr);
    int rc = FC_OK;
    struct fc_buf key = FC_BUF_INIT(1 << 20);
    if (!json_is_array(j) || json_array_size(j) == 0 || json_array_size(j) > 1000) {
        rc = fc_error_set(FC_ECORRUPT,
                          "%s: item '%s': nested path '%s' is not a JSON list of "
                          "keys",
                          r->what, item, k->u.str.s);
        goto done;
    }
    p->nelems = json_array_size(j) + 1;
    p->elems = fc_calloc(p->nelems, sizeof(*p->elems));
    if (p->elems == NULL || (p->elems[0].key = fc_strdup(item)) == NULL ||
        fc_buf_append(&key, item, strlen(item)) < 0) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
        goto done;
    }
    for (size_t i = 0; i + 1 < p->nelems; i++) {
        struct fc_path_elem *e = &p->elems[i + 1];
        rc = tcp_elem_text(e, json_array_get(j, i));
        if (rc == FC_ENOMEM) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
            goto done;
        }
        if (rc < 0) {
            rc = fc_error_set(FC_ECORRUPT,
                              "%s: item '%s': nested path '%s': element %zu is "
                              "not a str or a non-negative int",
                              r->what, item, k->u.str.s, i);
            goto done;
        }
        char num[32];
        const char *s = e->key;
        if (e->is_index) {
            snprintf(num, sizeof(num), "%" PRId64, e->index);
            s = num;
        }
        if (fc_buf_append(&key, ".", 1) < 0 || fc_buf_append(&key, s, strlen(s)) < 0) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
            goto done;
        }
    }
    if (fc_buf_append(&key, "", 1) < 0) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
        goto done;
    }
    p->key = (char *)fc_buf_detach(&key, NULL);
done:
    fc_buf_release(&key);
    json_decref(j);
    return rc;
}

/* ---- layouts ---- */

/* A file path from the metadata that stays inside the checkpoint directory. */
static int tcp_safe_relpath(const char *s)
{
    if (s[0] == '\0' || s[0] == '/')
        return 0;
    for (const char *p = s; *p != '\0';) {
        const char *slash = strchr(p, '/');
        const size_t n = slash != NULL ? (size_t)(slash - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        p += n + (slash != NULL);
        if (slash != NULL && *p == '\0')
            return 0; /* a trailing '/' names a directory */
    }
    return 1;
}

static int tcp_layout(const struct tcp_rd *r, const char *item, int64_t rank, const struct fc_pv *v,
                      struct fc_tcp_file *f)
{
    char where[128];
    snprintf(where, sizeof(where), "item '%.60s' rank %" PRId64 " layout", item, rank);
    char name[64];
    if (v->kind == FC_PV_NONE) { /* default_torch_layout_info */
        snprintf(name, sizeof(name), "_%" PRId64 ".pt", rank);
        const size_t il = strlen(item), nl = strlen(name);
        f->name = fc_calloc(il + nl + 1, 1);
        if (f->name == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
        memcpy(f->name, item, il);
        memcpy(f->name + il, name, nl + 1);
    } else {
        const struct fc_pv *fp, *sf, *type;
        if (v->kind != FC_PV_DICT)
            return fc_error_set(FC_ECORRUPT, "%s: %s is a %s, not a dict or None", r->what, where,
                                fc_pv_kind_name(v->kind));
        FC_TRY(tcp_field(r, v, "file_path", FC_PV_STR, where, &fp));
        FC_TRY(tcp_field(r, v, "serialization_format", FC_PV_DICT, where, &sf));
        FC_TRY(tcp_field(r, sf, "type", FC_PV_STR, where, &type));
        if (strcmp(type->u.str.s, "SafetensorsSerialization") == 0)
            f->safetensors = 1;
        else if (strcmp(type->u.str.s, "TorchSerialization") != 0)
            return fc_error_set(FC_EFORMAT,
                                "%s: %s: serialization '%s' is not supported "
                                "(TorchSerialization, SafetensorsSerialization are)",
                                r->what, where, type->u.str.s);
        f->name = fc_strdup(fp->u.str.s);
        if (f->name == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
    }
    if (!tcp_safe_relpath(f->name))
        return fc_error_set(FC_ECORRUPT, "%s: %s: file_path '%s' leaves the checkpoint directory",
                            r->what, where, f->name);
    return FC_OK;
}

static int tcp_layouts(const struct tcp_rd *r, const char *item, const struct fc_pv *rl,
                       struct fc_tcp_item *it)
{
    const int64_t w = r->m->world_size;
    if (rl->u.dict.n != (size_t)w)
        return fc_error_set(FC_ECORRUPT,
                            "%s: item '%s': rank_to_layout_info has %zu ranks, "
                            "world_size is %" PRId64,
                            r->what, item, rl->u.dict.n, w);
    it->files = fc_calloc((size_t)w, sizeof(*it->files));
    if (it->files == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
    for (size_t i = 0; i < rl->u.dict.n; i++) {
        const struct fc_pv *k = rl->u.dict.keys[i];
        if (k->kind != FC_PV_INT || k->u.i < 0 || k->u.i >= w || it->files[k->u.i].name != NULL)
            return fc_error_set(FC_ECORRUPT,
                                "%s: item '%s': rank_to_layout_info must map each "
                                "rank 0..%" PRId64 " once",
                                r->what, item, w - 1);
        FC_TRY(tcp_layout(r, item, k->u.i, rl->u.dict.vals[i], &it->files[k->u.i]));
    }
    return FC_OK;
}

/* ---- items ---- */

static int tcp_item(struct tcp_rd *r, const struct fc_pv *name, const struct fc_pv *v,
                    struct fc_tcp_item *it)
{
    const struct fc_pv *np, *rl;
    if (!tcp_is_str(name) || name->u.str.len == 0)
        return fc_error_set(FC_ECORRUPT, "%s: an item key is not a non-empty str", r->what);
    it->name = fc_strdup(name->u.str.s);
    if (it->name == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
    char where[128];
    snprintf(where, sizeof(where), "item '%.100s'", it->name);
    if (v->kind != FC_PV_DICT)
        return fc_error_set(FC_ECORRUPT, "%s: %s is a %s, not a dict", r->what, where,
                            fc_pv_kind_name(v->kind));
    FC_TRY(tcp_field(r, v, "nested_path_to_metadata", FC_PV_DICT, where, &np));
    FC_TRY(tcp_field(r, v, "rank_to_layout_info", FC_PV_DICT, where, &rl));
    FC_TRY(tcp_layouts(r, it->name, rl, it));
    it->paths = fc_calloc(np->u.dict.n + 1, sizeof(*it->paths));
    if (it->paths == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
    for (size_t i = 0; i < np->u.dict.n; i++) {
        struct fc_tcp_path *p = &it->paths[it->npaths++];
        FC_TRY(tcp_path_parse(r, it->name, np->u.dict.keys[i], p));
        const struct fc_pv *groups = np->u.dict.vals[i];
        char pwhere[192];
        snprintf(pwhere, sizeof(pwhere), "tensor '%.160s'", p->key);
        if (!tcp_is_seq(groups) || groups->u.seq.n == 0)
            return fc_error_set(FC_ECORRUPT, "%s: %s: its groups are not a non-empty list", r->what,
                                pwhere);
        p->groups = fc_calloc(groups->u.seq.n, sizeof(*p->groups));
        if (p->groups == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
        for (size_t g = 0; g < groups->u.seq.n; g++) {
            p->ngroups++; /* first: a group that fails half-read is freed too */
            FC_TRY(tcp_group(r, groups->u.seq.items[g], &p->groups[g], pwhere));
            if (p->groups[g].dtype != p->groups[0].dtype ||
                p->groups[g].ndim != p->groups[0].ndim ||
                memcmp(p->groups[g].shape, p->groups[0].shape, sizeof(p->groups[0].shape)) != 0)
                return fc_error_set(FC_ECORRUPT,
                                    "%s: %s: its groups disagree on dtype or "
                                    "global_shape",
                                    r->what, pwhere);
        }
    }
    return FC_OK;
}

/* No two (item, rank) pairs may name one file (DistributedMetadata.__post_init__). */
static int tcp_distinct_files(const struct tcp_rd *r)
{
    const struct fc_tcp_meta *m = r->m;
    struct fc_strmap seen = FC_STRMAP_INIT;
    int rc = FC_OK;
    for (size_t i = 0; i < m->nitems && rc == FC_OK; i++) {
        for (int64_t k = 0; k < m->world_size && rc == FC_OK; k++) {
            const char *name = m->items[i].files[k].name;
            size_t existing;
            const int put = fc_strmap_put(&seen, name, 0, &existing);
            if (put < 0)
                rc = fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
            else if (put == 1)
                rc = fc_error_set(FC_ECORRUPT, "%s: file '%s' is named by two items or ranks",
                                  r->what, name);
        }
    }
    fc_strmap_release(&seen);
    return rc;
}

static int tcp_root(struct tcp_rd *r, const struct fc_pv *root)
{
    const struct fc_pv *version, *world, *items;
    if (root->kind != FC_PV_DICT)
        return fc_error_set(FC_ECORRUPT, "%s: the pickle holds a %s, not a dict", r->what,
                            fc_pv_kind_name(root->kind));
    FC_TRY(tcp_field(r, root, "version", FC_PV_STR, "the metadata", &version));
    if (strcmp(version->u.str.s, "2.0") != 0)
        return fc_error_set(FC_EFORMAT, "%s: metadata version '%s' is not supported (2.0 is)",
                            r->what, version->u.str.s);
    FC_TRY(tcp_field(r, root, "world_size", FC_PV_INT, "the metadata", &world));
    if (world->u.i < 1 || world->u.i > FC_TCP_MAX_WORLD)
        return fc_error_set(FC_ECORRUPT,
                            "%s: world_size %" PRId64 " is out of range [1, %" PRId64 "]", r->what,
                            world->u.i, FC_TCP_MAX_WORLD);
    r->m->world_size = world->u.i;
    FC_TRY(tcp_field(r, root, "metadata", FC_PV_DICT, "the metadata", &items));
    r->m->items = fc_calloc(items->u.dict.n + 1, sizeof(*r->m->items));
    if (r->m->items == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", r->what);
    for (size_t i = 0; i < items->u.dict.n; i++) {
        r->m->nitems++;
        FC_TRY(tcp_item(r, items->u.dict.keys[i], items->u.dict.vals[i], &r->m->items[i]));
    }
    return tcp_distinct_files(r);
}

void fc_tcp_meta_free(struct fc_tcp_meta *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nitems; i++) {
        struct fc_tcp_item *it = &m->items[i];
        for (size_t p = 0; p < it->npaths; p++) {
            struct fc_tcp_path *path = &it->paths[p];
            fc_free(path->key);
            for (size_t e = 0; e < path->nelems; e++)
                fc_free((void *)(uintptr_t)path->elems[e].key);
            fc_free(path->elems);
            for (size_t g = 0; g < path->ngroups; g++)
                fc_free(path->groups[g].ranks);
            fc_free(path->groups);
        }
        fc_free(it->paths);
        if (it->files != NULL)
            for (int64_t k = 0; k < m->world_size; k++)
                fc_free(it->files[k].name);
        fc_free(it->files);
        fc_free(it->name);
    }
    fc_free(m->items);
    for (size_t i = 0; i < m->nmeshes; i++)
        tcp_mesh_free(m->meshes[i]);
    fc_free(m->meshes);
    fc_free(m);
}

int fc_tcp_meta_parse(struct fc_tcp_meta **out, const unsigned char *data, size_t len,
                      const char *what)
{
    struct fc_pickle *p = NULL;
    struct tcp_rd r = {what, NULL, NULL};
    int rc;
    *out = NULL;
    r.m = fc_calloc(1, sizeof(*r.m));
    if (r.m == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
    FC_TRY_GOTO(fc_pickle_load(&p, data, len, FC_PICKLE_SYMBOLIC, what), rc, done);
    /* The package pickles builtin values only: a global could only be an attack. */
    const struct fc_pv *const *globals;
    if (fc_pickle_globals(p, &globals) > 0) {
        rc = fc_error_set(FC_EFORMAT,
                          "%s: names the global %s.%s (torch_checkpointing "
                          "metadata names none)",
                          what, globals[0]->u.global.module, globals[0]->u.global.name);
        goto done;
    }
    FC_TRY_GOTO(tcp_root(&r, fc_pickle_root(p)), rc, done);
    *out = r.m;
    r.m = NULL;
done:
    fc_pickle_free(p);
    fc_free(r.mesh_nodes);
    fc_tcp_meta_free(r.m);
    return rc;
}

int fc_tcp_meta_load(struct fc_tcp_meta **out, const char *dir)
{
    *out = NULL;
    char *path = fc_path_join(dir, FC_TCP_METADATA);
    if (path == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", dir);
    struct fc_file f = FC_FILE_INIT;
    unsigned char *data = NULL;
    int rc = fc_file_open_read(&f, path);
    if (rc == FC_OK)
        rc = fc_file_read_alloc(&f, 0, (size_t)f.size, FC_TCP_MAX_METADATA, &data);
    if (rc == FC_OK)
        rc = fc_tcp_meta_parse(out, data, (size_t)f.size, path);
    fc_free(data);
    fc_file_close(&f);
    fc_free(path);
    return rc;
}

int fc_tcp_is_dir(const char *dir)
{
    char *path = fc_path_join(dir, FC_TCP_METADATA);
    if (path == NULL)
        return 0;
    struct stat st;
    const int yes = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    fc_free(path);
    return yes;
}

/* ---- geometry ---- */

/*
 * The global indices a rank holds on one tensor dim, as runs of consecutive
 * indices: Shard keeps a slice of them, StridedShard a slice of each of
 * split_factor pieces.  A run list longer than this is a layout we refuse.
 */
#define TCP_MAX_RUNS 64

struct tcp_runs {
    int64_t start[TCP_MAX_RUNS], len[TCP_MAX_RUNS];
    int n;
    int64_t total;
};

/* Append elements [from, from + n) of in (in index order) to out. */
static int tcp_runs_take(const struct tcp_runs *in, int64_t from, int64_t n, struct tcp_runs *out)
{
    for (int i = 0; i < in->n && n > 0; i++) {
        if (from >= in->len[i]) {
            from -= in->len[i];
            continue;
        }
        const int64_t take = in->len[i] - from < n ? in->len[i] - from : n;
        const int64_t s = in->start[i] + from;
        if (out->n > 0 && out->start[out->n - 1] + out->len[out->n - 1] == s) {
            out->len[out->n - 1] += take;
        } else {
            if (out->n == TCP_MAX_RUNS)
                return -1;
            out->start[out->n] = s;
            out->len[out->n++] = take;
        }
        out->total += take;
        from = 0;
        n -= take;
    }
    return 0;
}

/* torch.chunk's piece c of n over a length L: [*start, *start + *len). */
static void tcp_chunk(int64_t L, int64_t n, int64_t c, int64_t *start, int64_t *len)
{
    const int64_t size = L / n + (L % n != 0);
    int64_t s = size * c;
    if (s > L)
        s = L;
    const int64_t e = s + size < L ? s + size : L;
    *start = s;
    *len = e - s;
}

int fc_tcp_local_box(const struct fc_tcp_group *g, int64_t rank, int64_t *off, int64_t *size,
                     const char *where, const char *key)
{
    const struct fc_tcp_mesh *mesh = g->mesh;
    int64_t pos = rank >= 0 && rank < mesh->nworld ? mesh->pos[rank] : -1;
    if (pos < 0)
        return fc_error_set(FC_ECORRUPT, "%s: '%s': rank %" PRId64 " is not in its mesh", where,
                            key, rank);
    int64_t coord[FC_MAX_DIMS];
    for (int d = mesh->ndim - 1; d >= 0; d--) {
        coord[d] = pos % mesh->shape[d];
        pos /= mesh->shape[d];
    }
    for (int t = 0; t < g->ndim; t++) {
        struct tcp_runs cur = {{0}, {0}, 0, 0}, next;
        if (g->shape[t] > 0)
            tcp_runs_take(&(struct tcp_runs){{0}, {g->shape[t]}, 1, g->shape[t]}, 0, g->shape[t],
                          &cur);
        for (int m = 0; m < mesh->ndim; m++) {
            const struct fc_tcp_placement *p = &g->place[m];
            if (p->kind == FC_TCP_REPLICATE || p->dim != t)
                continue;
            memset(&next, 0, sizeof(next));
            int64_t s, n;
            int bad = 0;
            if (p->kind == FC_TCP_SHARD) {
                tcp_chunk(cur.total, mesh->shape[m], coord[m], &s, &n);
                bad = tcp_runs_take(&cur, s, n, &next);
            } else {
                for (int64_t i = 0; i < p->split_factor && !bad; i++) {
                    int64_t ps, pn;
                    tcp_chunk(cur.total, p->split_factor, i, &ps, &pn);
                    tcp_chunk(pn, mesh->shape[m], coord[m], &s, &n);
                    bad = tcp_runs_take(&cur, ps + s, n, &next);
                }
            }
            if (bad)
                return fc_error_set(FC_EFORMAT,
                                    "%s: '%s': rank %" PRId64 "'s shard of dim %d is in "
                                    "more than %d pieces",
                                    where, key, rank, t, TCP_MAX_RUNS);
            cur = next;
        }
        if (cur.n > 1)
            return fc_error_set(FC_EFORMAT,
                                "%s: '%s': rank %" PRId64 "'s shard of dim %d is not "
                                "contiguous (StridedShard placements leave it in %d pieces)",
                                where, key, rank, t, cur.n);
        off[t] = cur.n == 1 ? cur.start[0] : 0;
        size[t] = cur.total;
    }
    return FC_OK;
}
