/*
 * tcp_pt.c - the torch_checkpointing package's default layout (tcp_sink.h):
 * one torch.save archive per rank, model_<rank>.pt, holding that rank's
 * state dict as the package saves a fully_shard / parallelize_module
 * model's state_dict(): DTensors whose local tensors view FSDP2's padded
 * storage, plain tensors for what is stored whole
 * (docs/torch-checkpointing.md, "The default layout's rank files").
 *
 * Everything is decided at plan time: each file's pickle (data.pkl), its
 * storage records at their padded sizes and so, through fc_zipw_layout(),
 * where each item's bytes go.  The executor writes the items' bare bytes at
 * their records' data offsets and reports each item's CRC-32; once a file's
 * items are written, fc_tcp_pt_finish() writes everything else (headers,
 * the small records, descriptors with the CRCs, the central directory).
 * The padding past a rank's rows is never written: the file's holes read
 * as the zeros FSDP2's padding holds, and the record CRC covers them.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_pickle.h"
#include "fc_sort.h"
#include "fc_torchsave.h"
#include "fc_zip.h"
#include "xform.h"
#include "mesh.h"
#include "tcp_sink.h"

#define FC_TCP_PT_PREFIX  "archive" /* what CheckpointManager.save's torch.save names it */
#define FC_TCP_PT_PKL_CAP ((size_t)1 << 31)
#define FC_TCP_PT_NAME    32 /* bytes of a record name: "data/" and any size_t */

/* The records before the storages and after them, as torch.save writes them. */
enum { FC_TCP_PT_HEAD_RECS = 4, FC_TCP_PT_TAIL_RECS = 2 };
static const unsigned char fc_tcp_pt_format_version[] = "1";
static const unsigned char fc_tcp_pt_alignment[] = "64";
static const unsigned char fc_tcp_pt_little[] = "little";
static const unsigned char fc_tcp_pt_version[] = "3\n";

/*
 * The meshes a DTensor can name.  Without tp, the mesh init_device_mesh()
 * made.  With tp, fully_shard(mesh=mesh["dp_shard"]) and parallelize_module
 * leave meshes sliced from that root (so their _root_mesh is the root): the
 * dp submesh, or all of the root's dims.
 */
enum fc_tcp_pt_mesh_kind { FC_TCP_PT_ROOT = 0, FC_TCP_PT_DP_SUB, FC_TCP_PT_SLICED_ALL };

/* One file's pickle as it is written: storage keys and memo ids in order of appearance. */
struct fc_tcp_pt_pickler {
    struct fc_buf *b;
    const struct fc_tcp_sink *sink;
    const struct fc_plan *plan;
    int rank;
    size_t file;
    size_t *storage_item;    /* per storage key: the file's item it holds */
    uint64_t *storage_bytes; /* per storage key: the record's size */
    size_t nstorages;
    long rank_map;     /* storage key of the mesh's rank map, -1 before the first DTensor */
    long memo_tensor;  /* memo id of the rank map tensor, -1 until written */
    long memo_mesh[3]; /* memo ids per enum fc_tcp_pt_mesh_kind */
    uint32_t next_memo;
};

/* --torch-version "X.Y": the newest release known is the default. */
int fc_tcp_parse_torch_version(const char *s, enum fc_tcp_mesh_form *form)
{
    char *end = NULL;
    if (s == NULL) {
        *form = FC_TCP_MESH_2_15;
        return FC_OK;
    }
    const long major = strtol(s, &end, 10);
    long minor = -1;
    if (end != s && *end == '.')
        minor = strtol(end + 1, &end, 10);
    if (minor < 0 || *end != '\0' || major != 2 || minor < FC_TCP_TORCH_MIN_MINOR)
        return fc_error_set(FC_EINVAL,
                            "--torch-version: '%s' is not a torch release the package supports "
                            "(2.%d or newer, as 2.15)",
                            s, FC_TCP_TORCH_MIN_MINOR);
    *form = minor >= 15 ? FC_TCP_MESH_2_15 : minor >= 13 ? FC_TCP_MESH_2_13 : FC_TCP_MESH_2_11;
    return FC_OK;
}

static int fc_pw_cstr(struct fc_buf *b, const char *s)
{
    return fc_pw_str(b, s, strlen(s));
}

/* A tuple of n ints or strings of any length (TUPLE1..3 or MARK ... TUPLE). */
static int fc_tcp_pt_tuple_end(struct fc_buf *b, int n)
{
    return n >= 1 && n <= 3 ? fc_pw_tuple_n(b, n) : fc_pw_tuple(b);
}
static int fc_tcp_pt_tuple_start(struct fc_buf *b, int n)
{
    return n >= 1 && n <= 3 ? FC_OK : fc_pw_mark(b);
}

/* Python's hash of nothing in particular: torch caches one per mesh, and no loader uses it. */
static int64_t fc_tcp_pt_mesh_hash(const struct fc_tcp_sink *sink, const int *dims, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        for (const char *p = sink->names[dims[i]]; *p != '\0'; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
        h = (h ^ (uint64_t)dims[i]) * 1099511628211ull;
    }
    return (int64_t)(h >> 2);
}

/* The next storage: its key (data/<key>) and its record's size. */
static int fc_tcp_pt_storage(struct fc_tcp_pt_pickler *p, uint64_t nbytes, char *key, size_t keysz)
{
    p->storage_bytes[p->nstorages] = nbytes;
    snprintf(key, keysz, "%zu", p->nstorages++);
    return FC_OK;
}

/* The mesh's int32 rank map tensor, written once, then fetched from the memo. */
static int fc_tcp_pt_rank_map(struct fc_tcp_pt_pickler *p)
{
    if (p->memo_tensor >= 0)
        return fc_pw_get(p->b, (uint32_t)p->memo_tensor);
    const int64_t world = (int64_t)p->sink->world;
    char key[32];
    snprintf(key, sizeof(key), "%ld", p->rank_map);
    FC_TRY(fc_torchsave_pw_tensor(p->b, FC_DTYPE_INT32, &world, 1, (uint64_t)world, key));
    p->memo_tensor = p->next_memo++;
    return fc_pw_put(p->b, (uint32_t)p->memo_tensor);
}

/*
 * A DeviceMesh of kind `kind`, as DeviceMesh.__getstate__ leaves its
 * __dict__ in the target torch; each written once per file, then fetched
 * from the memo.
 */
static int fc_tcp_pt_mesh(struct fc_tcp_pt_pickler *p, enum fc_tcp_pt_mesh_kind kind)
{
    struct fc_buf *b = p->b;
    const struct fc_mesh *mesh = &p->plan->mesh;
    const int tp = fc_mesh_find(mesh, FC_MESH_DIM_TP);
    const int sub = kind == FC_TCP_PT_DP_SUB;
    if (p->memo_mesh[kind] >= 0)
        return fc_pw_get(b, (uint32_t)p->memo_mesh[kind]);
    int dims[FC_MESH_MAX_DIMS], n = 0, coords[FC_MESH_MAX_DIMS];
    int64_t shape[FC_MESH_MAX_DIMS], stride[FC_MESH_MAX_DIMS], coord[FC_MESH_MAX_DIMS];
    fc_mesh_coords(mesh, p->rank, coords);
    for (int d = 0; d < mesh->ndim; d++) {
        if (sub && d == tp)
            continue;
        int64_t s = 1;
        for (int e = d + 1; e < mesh->ndim; e++)
            s *= mesh->size[e];
        dims[n] = d;
        shape[n] = mesh->size[d];
        stride[n] = s;
        coord[n++] = coords[d];
    }
    FC_TRY(fc_pw_global(b, "torch.distributed.device_mesh", "DeviceMesh"));
    FC_TRY(fc_pw_empty_tuple(b));
    FC_TRY(fc_pw_newobj(b));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "_device_type"));
    FC_TRY(fc_pw_cstr(b, p->sink->device));
    FC_TRY(fc_pw_cstr(b, "_layout"));
    FC_TRY(fc_pw_global(b, "torch.distributed._mesh_layout", "_MeshLayout"));
    FC_TRY(fc_pw_empty_tuple(b));
    FC_TRY(fc_pw_newobj(b));
    FC_TRY(fc_pw_empty_dict(b));
    if (p->sink->mesh_form != FC_TCP_MESH_2_11) {
        /* torch >= 2.13: one _FlatLayout(shape=(s,), stride=(t,)) per dim */
        FC_TRY(fc_pw_cstr(b, "axes"));
        FC_TRY(fc_tcp_pt_tuple_start(b, n));
        for (int i = 0; i < n; i++) {
            FC_TRY(fc_pw_global(b, "torch.distributed._mesh_layout", "_FlatLayout"));
            FC_TRY(fc_pw_empty_tuple(b));
            FC_TRY(fc_pw_newobj(b));
            FC_TRY(fc_pw_empty_dict(b));
            FC_TRY(fc_pw_mark(b));
            FC_TRY(fc_pw_cstr(b, "shape"));
            FC_TRY(fc_pw_int_tuple(b, &shape[i], 1));
            FC_TRY(fc_pw_cstr(b, "stride"));
            FC_TRY(fc_pw_int_tuple(b, &stride[i], 1));
            FC_TRY(fc_pw_setitems(b));
            FC_TRY(fc_pw_build(b));
        }
        FC_TRY(fc_tcp_pt_tuple_end(b, n));
        FC_TRY(fc_pw_setitem(b));
    } else {
        FC_TRY(fc_pw_mark(b));
        FC_TRY(fc_pw_cstr(b, "shape"));
        FC_TRY(fc_pw_int_tuple(b, shape, n));
        FC_TRY(fc_pw_cstr(b, "stride"));
        FC_TRY(fc_pw_int_tuple(b, stride, n));
        FC_TRY(fc_pw_setitems(b));
    }
    FC_TRY(fc_pw_build(b));
    FC_TRY(fc_pw_cstr(b, "_rank_map"));
    FC_TRY(fc_tcp_pt_rank_map(p));
    FC_TRY(fc_pw_cstr(b, "_mesh_dim_names"));
    FC_TRY(fc_tcp_pt_tuple_start(b, n));
    for (int i = 0; i < n; i++)
        FC_TRY(fc_pw_cstr(b, p->sink->names[dims[i]]));
    FC_TRY(fc_tcp_pt_tuple_end(b, n));
    FC_TRY(fc_pw_cstr(b, "_root_mesh"));
    if (kind != FC_TCP_PT_ROOT)
        FC_TRY(fc_tcp_pt_mesh(p, FC_TCP_PT_ROOT));
    else
        FC_TRY(fc_pw_none(b));
    if (p->sink->mesh_form == FC_TCP_MESH_2_15) {
        FC_TRY(fc_pw_cstr(b, "_preserve_rank_order"));
        FC_TRY(fc_pw_bool(b, 0));
    }
    FC_TRY(fc_pw_cstr(b, "_flatten_rank_map"));
    FC_TRY(fc_pw_mark(b));
    for (size_t r = 0; r < p->sink->world; r++)
        FC_TRY(fc_pw_int(b, (int64_t)r));
    FC_TRY(fc_pw_tuple(b));
    FC_TRY(fc_pw_cstr(b, "_thread_id"));
    FC_TRY(fc_pw_none(b));
    FC_TRY(fc_pw_cstr(b, "_flatten_mapping"));
    FC_TRY(fc_pw_empty_dict(b));
    /* The saving run's process-group names: made up (no loader resolves them) */
    FC_TRY(fc_pw_cstr(b, "_dim_group_names"));
    FC_TRY(fc_pw_empty_list(b));
    FC_TRY(fc_pw_mark(b));
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "fsdpconv_%d", dims[i]);
        FC_TRY(fc_pw_cstr(b, name));
    }
    FC_TRY(fc_pw_appends(b));
    FC_TRY(fc_pw_cstr(b, "_rank"));
    FC_TRY(fc_pw_int(b, p->rank));
    FC_TRY(fc_pw_cstr(b, "_coordinate_on_dim"));
    FC_TRY(fc_pw_int_tuple(b, coord, n));
    FC_TRY(fc_pw_cstr(b, "_hash"));
    if (kind == FC_TCP_PT_ROOT && tp >= 0)
        FC_TRY(fc_pw_none(b)); /* a root only sliced from is never hashed */
    else
        FC_TRY(fc_pw_int(b, fc_tcp_pt_mesh_hash(p->sink, dims, n)));
    FC_TRY(fc_pw_setitems(b));
    FC_TRY(fc_pw_build(b));
    p->memo_mesh[kind] = p->next_memo++;
    return fc_pw_put(b, (uint32_t)p->memo_mesh[kind]);
}

static int fc_tcp_pt_placement(struct fc_buf *b, const struct fc_dim_placement *pl)
{
    static const char *const cls[] = {[FC_DIM_REPLICATE] = "Replicate",
                                      [FC_DIM_SHARD] = "Shard",
                                      [FC_DIM_STRIDED] = "_StridedShard"};
    FC_TRY(fc_pw_global(b, "torch.distributed.tensor.placement_types", cls[pl->kind]));
    FC_TRY(fc_pw_empty_tuple(b));
    FC_TRY(fc_pw_newobj(b));
    FC_TRY(fc_pw_empty_dict(b));
    if (pl->kind != FC_DIM_REPLICATE) {
        FC_TRY(fc_pw_mark(b));
        FC_TRY(fc_pw_cstr(b, "dim"));
        FC_TRY(fc_pw_int(b, pl->dim));
        if (pl->kind == FC_DIM_STRIDED) {
            FC_TRY(fc_pw_cstr(b, "split_factor"));
            FC_TRY(fc_pw_int(b, pl->split));
        }
        FC_TRY(fc_pw_setitems(b));
    }
    return fc_pw_build(b);
}

static int fc_tcp_pt_size(struct fc_buf *b, const int64_t *shape, int ndim)
{
    FC_TRY(fc_pw_global(b, "torch", "Size"));
    FC_TRY(fc_pw_int_tuple(b, shape, ndim));
    FC_TRY(fc_pw_tuple_n(b, 1));
    return fc_pw_reduce(b);
}

/*
 * DTensorSpec: shard_order lists, by tensor dim, the mesh dims sharding it
 * (DTensorSpec.compute_default_shard_order); with a _StridedShard it is None
 * and use_strided_shard_as_shard_order is set.
 */
static int fc_tcp_pt_spec(struct fc_tcp_pt_pickler *p, const struct fc_plan_tensor *t,
                          const struct fc_dim_placement *pl, int n, enum fc_tcp_pt_mesh_kind kind)
{
    struct fc_buf *b = p->b;
    struct fc_tensor_desc d;
    fc_tcp_global_desc(t, &d);
    int strided = 0;
    for (int i = 0; i < n; i++)
        strided |= pl[i].kind == FC_DIM_STRIDED;
    FC_TRY(fc_pw_global(b, "torch.distributed.tensor._dtensor_spec", "DTensorSpec"));
    FC_TRY(fc_pw_empty_tuple(b));
    FC_TRY(fc_pw_newobj(b));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "mesh"));
    FC_TRY(fc_tcp_pt_mesh(p, kind));
    FC_TRY(fc_pw_cstr(b, "placements"));
    FC_TRY(fc_tcp_pt_tuple_start(b, n));
    for (int i = 0; i < n; i++)
        FC_TRY(fc_tcp_pt_placement(b, &pl[i]));
    FC_TRY(fc_tcp_pt_tuple_end(b, n));
    FC_TRY(fc_pw_cstr(b, "tensor_meta"));
    FC_TRY(fc_pw_global(b, "torch.distributed.tensor._dtensor_spec", "TensorMeta"));
    FC_TRY(fc_tcp_pt_size(b, t->shape, t->ndim));
    FC_TRY(fc_pw_int_tuple(b, d.stride, t->ndim));
    FC_TRY(fc_pw_global(b, "torch", fc_dtype_name(t->dtype)));
    FC_TRY(fc_pw_tuple_n(b, 3));
    FC_TRY(fc_pw_newobj(b));
    FC_TRY(fc_pw_cstr(b, "shard_order"));
    if (strided) {
        FC_TRY(fc_pw_none(b));
    } else {
        FC_TRY(fc_pw_mark(b));
        for (int td = 0; td < t->ndim; td++) {
            int64_t mdims[FC_MESH_MAX_DIMS];
            int nm = 0;
            for (int i = 0; i < n; i++)
                if (pl[i].kind == FC_DIM_SHARD && pl[i].dim == td)
                    mdims[nm++] = i;
            if (nm == 0)
                continue;
            FC_TRY(fc_pw_global(b, "torch.distributed.tensor._dtensor_spec", "ShardOrderEntry"));
            FC_TRY(fc_pw_int(b, td));
            FC_TRY(fc_pw_int_tuple(b, mdims, nm));
            FC_TRY(fc_pw_tuple_n(b, 2));
            FC_TRY(fc_pw_newobj(b));
        }
        FC_TRY(fc_pw_tuple(b));
    }
    FC_TRY(fc_pw_cstr(b, "use_strided_shard_as_shard_order"));
    FC_TRY(fc_pw_bool(b, strided));
    FC_TRY(fc_pw_cstr(b, "_hash"));
    FC_TRY(fc_pw_none(b)); /* not computed yet: DTensorSpec computes it on first use */
    FC_TRY(fc_pw_setitems(b));
    return fc_pw_build(b);
}

/*
 * The bytes of the storage FSDP2 keeps for tensor t on `rank`: dim 0 of the
 * local extent left after the other mesh dims, padded to ceil(extent / S)
 * rows for dp_shard size S (every rank's storage has as many rows, an empty
 * shard's too); the exact box for a tensor dp_shard does not split on dim 0.
 */
static int fc_tcp_pt_padded(const struct fc_plan *plan, const struct fc_plan_tensor *t, int rank,
                            const int64_t *box_sizes, uint64_t *nbytes)
{
    const struct fc_mesh *mesh = &plan->mesh;
    const int s = fc_mesh_find(mesh, FC_MESH_DIM_SHARD);
    int64_t sizes[FC_MAX_DIMS], offs[FC_MAX_DIMS];
    memcpy(sizes, box_sizes, (size_t)t->ndim * sizeof(*sizes));
    if (s >= 0 && t->ndim > 0 && t->pl[s].kind != FC_DIM_REPLICATE && t->pl[s].dim == 0) {
        struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
        memcpy(pl, t->pl, sizeof(pl));
        pl[s] = (struct fc_dim_placement){FC_DIM_REPLICATE, 0, 1};
        FC_TRY(fc_mesh_box(mesh, pl, t->ndim, t->shape, rank, offs, sizes));
        const int64_t n = mesh->size[s];
        sizes[0] = sizes[0] / n + (sizes[0] % n != 0);
    }
    uint64_t v = fc_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
        v *= (uint64_t)sizes[d]; /* at most the whole tensor's bytes: planned, no overflow */
    *nbytes = v;
    return FC_OK;
}

/* One state-dict value: a plain tensor (stored whole) or a DTensor over its mesh. */
static int fc_tcp_pt_value(struct fc_tcp_pt_pickler *p, const struct fc_plan_item *it)
{
    struct fc_buf *b = p->b;
    const struct fc_plan *plan = p->plan;
    const struct fc_plan_tensor *t = &plan->tensors[it->index];
    const struct fc_plan_chunk *ch = &plan->chunks[it->chunk];
    const size_t esize = fc_dtype_size(t->dtype);
    char key[32];
    if (t->placement == FC_PLACE_REPLICATE) {
        FC_TRY(fc_tcp_pt_storage(p, it->length, key, sizeof(key)));
        return fc_torchsave_pw_tensor(b, t->dtype, t->shape, t->ndim, it->length / esize, key);
    }
    /* FSDP2's parameters view its padded shards; optimizer state is zeros_like(the view) */
    uint64_t padded = it->length;
    if (p->file < p->sink->world)
        FC_TRY(fc_tcp_pt_padded(plan, t, p->rank, ch->box.sizes, &padded));
    FC_TRY(fc_tcp_pt_storage(p, padded, key, sizeof(key)));
    if (p->rank_map < 0)
        p->rank_map = (long)p->nstorages++; /* right after the first DTensor's own storage */
    p->storage_bytes[p->rank_map] = 4 * (uint64_t)p->sink->world;

    /* The placements on its mesh: all dims, or fully_shard's dp submesh (tcp_sink.h) */
    const int tp = fc_mesh_find(&plan->mesh, FC_MESH_DIM_TP);
    const int sub = tp >= 0 && t->pl[tp].kind == FC_DIM_REPLICATE &&
                    (p->sink->tp_ruled == NULL || !p->sink->tp_ruled[t->tag]);
    struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < plan->mesh.ndim; d++)
        if (!(sub && d == tp))
            pl[n++] = t->pl[d];

    struct fc_tensor_desc local, global;
    fc_tcp_global_desc(t, &global);
    local = global;
    memcpy(local.shape, ch->box.sizes, (size_t)t->ndim * sizeof(int64_t));
    fc_tensor_set_contiguous(&local);

    /* _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, (...), (None, state)) */
    FC_TRY(fc_pw_global(b, "torch._tensor", "_rebuild_from_type_v2"));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_global(b, "torch._utils", "_rebuild_wrapper_subclass"));
    FC_TRY(fc_pw_global(b, "torch.distributed.tensor", "DTensor"));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_global(b, "torch.distributed.tensor", "DTensor"));
    FC_TRY(fc_pw_global(b, "torch", fc_dtype_name(t->dtype)));
    FC_TRY(fc_pw_int_tuple(b, global.shape, t->ndim));
    FC_TRY(fc_pw_int_tuple(b, global.stride, t->ndim));
    FC_TRY(fc_pw_int(b, 0));
    FC_TRY(fc_pw_global(b, "torch.serialization", "_get_layout"));
    FC_TRY(fc_pw_cstr(b, "torch.strided"));
    FC_TRY(fc_pw_tuple_n(b, 1));
    FC_TRY(fc_pw_reduce(b));
    /* The wrapper lives where its local tensor is: on the CPU, as every storage here */
    FC_TRY(fc_pw_global(b, "torch", "device"));
    FC_TRY(fc_pw_cstr(b, "cpu"));
    FC_TRY(fc_pw_tuple_n(b, 1));
    FC_TRY(fc_pw_reduce(b));
    FC_TRY(fc_pw_bool(b, 0));
    FC_TRY(fc_pw_tuple(b));
    FC_TRY(fc_pw_none(b));
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    FC_TRY(fc_pw_cstr(b, "_local_tensor"));
    FC_TRY(fc_torchsave_pw_tensor_view(b, &local, padded / esize, 0, key));
    FC_TRY(fc_pw_cstr(b, "_spec"));
    FC_TRY(fc_tcp_pt_spec(p, t, pl, n,
                          tp < 0 ? FC_TCP_PT_ROOT
                          : sub  ? FC_TCP_PT_DP_SUB
                                 : FC_TCP_PT_SLICED_ALL));
    FC_TRY(fc_pw_setitems(b));
    FC_TRY(fc_pw_tuple_n(b, 2));
    FC_TRY(fc_pw_tuple(b));
    return fc_pw_reduce(b);
}

/* Items in state-dict order: the plan's tensor order, an optimizer's state grouped by FQN. */
static int fc_tcp_pt_cmp_tensor(const void *ctx, size_t a, size_t b)
{
    const struct fc_tcp_sink *sink = ctx;
    const struct fc_plan *plan = sink->pt.plan;
    const size_t x = plan->items[a].index, y = plan->items[b].index;
    const size_t fx = sink->fqn_order != NULL ? sink->fqn_order[x] : 0;
    const size_t fy = sink->fqn_order != NULL ? sink->fqn_order[y] : 0;
    if (fx != fy)
        return fx < fy ? -1 : 1;
    return x < y ? -1 : x > y;
}

/*
 * The optimizer item: the dict the DCP's "optimizer" subtree was saved from,
 * its items in order[0..n).  get_state_dict's nested form, {"state": {fqn:
 * {name: tensor}}, "param_groups": [{..., "params": [fqn, ...]}]}, or the
 * flat one (flatten_optimizer_state_dict=True, torchtitan's
 * TorchCheckpointingManager): {"state.<fqn>.<name>": tensor, ...,
 * "param_groups.<fqn>.<name>": value, ...}.
 */
static int fc_tcp_pt_optimizer(struct fc_tcp_pt_pickler *p, const size_t *order, size_t n)
{
    struct fc_buf *b = p->b;
    const struct fc_plan *plan = p->plan;
    const int nested = p->sink->optim_nested;
    const char *elems[3];
    size_t lens[3];
    FC_TRY(fc_pw_empty_dict(b));
    FC_TRY(fc_pw_mark(b));
    if (nested) {
        FC_TRY(fc_pw_cstr(b, "state"));
        FC_TRY(fc_pw_empty_dict(b));
    }
    const char *open_fqn = NULL;
    size_t open_len = 0;
    for (size_t i = 0; i < n; i++) {
        const struct fc_plan_item *it = &plan->items[order[i]];
        const int ne = fc_tcp_sink_path(p->sink, plan, it->index, elems, lens);
        if (nested && (open_fqn == NULL || lens[1] != open_len ||
                       memcmp(elems[1], open_fqn, open_len) != 0)) {
            if (open_fqn != NULL) {
                FC_TRY(fc_pw_setitems(b)); /* the previous parameter's state */
                FC_TRY(fc_pw_setitem(b));
            }
            open_fqn = elems[1];
            open_len = lens[1];
            FC_TRY(fc_pw_str(b, open_fqn, open_len));
            FC_TRY(fc_pw_empty_dict(b));
            FC_TRY(fc_pw_mark(b));
        }
        FC_TRY(fc_pw_str(b, elems[ne - 1], lens[ne - 1]));
        p->storage_item[p->nstorages] = order[i] - plan->files[p->file].first_item;
        FC_TRY(fc_tcp_pt_value(p, it));
    }
    if (open_fqn != NULL) {
        FC_TRY(fc_pw_setitems(b));
        FC_TRY(fc_pw_setitem(b));
    }
    if (nested)
        FC_TRY(fc_pw_cstr(b, "param_groups"));
    FC_TRY(fc_buf_append(b, p->sink->groups_pkl.data, p->sink->groups_pkl.len));
    return fc_pw_setitems(b);
}

void fc_tcp_pt_release(struct fc_tcp_pt *pt)
{
    for (size_t f = 0; pt->files != NULL && f < pt->nfiles; f++) {
        fc_free(pt->files[f].recs);
        fc_free(pt->files[f].names);
        fc_free(pt->files[f].item_rec);
    }
    fc_free(pt->files);
    fc_free(pt->rank_map);
    memset(pt, 0, sizeof(*pt));
}

/*
 * File `file`'s data.pkl into p->b, its storages into p->storage_bytes and
 * p->storage_item (f->nitems + 1 entries each).  Deterministic: built once to
 * lay the archive out, again when the file is finished (fc_tcp_pt_finish()),
 * so that only one file's pickle is in memory at a time.
 */
static int fc_tcp_pt_pickle(struct fc_tcp_pt_pickler *p)
{
    const struct fc_plan *plan = p->plan;
    const struct fc_plan_file *f = &plan->files[p->file];
    struct fc_buf *b = p->b;
    size_t *order = fc_calloc(f->nitems + 1, sizeof(*order));
    int rc = FC_OK;
    if (order == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    /* The state dict in the model's (the plan's) tensor order, as state_dict() lists it */
    for (size_t i = 0; i < f->nitems; i++)
        order[i] = f->first_item + i;
    FC_TRY_GOTO(fc_sort_idx(order, f->nitems, fc_tcp_pt_cmp_tensor, p->sink), rc, done);
    FC_TRY_GOTO(fc_pw_proto(b), rc, done);
    if (p->file / p->sink->world == FC_TCP_ITEM_OPTIMIZER) {
        FC_TRY_GOTO(fc_tcp_pt_optimizer(p, order, f->nitems), rc, done);
        rc = fc_pw_stop(b);
        goto done;
    }
    FC_TRY_GOTO(fc_pw_global(b, "collections", "OrderedDict"), rc, done);
    FC_TRY_GOTO(fc_pw_empty_tuple(b), rc, done);
    FC_TRY_GOTO(fc_pw_reduce(b), rc, done);
    if (f->nitems > 0)
        FC_TRY_GOTO(fc_pw_mark(b), rc, done);
    for (size_t i = 0; i < f->nitems; i++) {
        const struct fc_plan_item *it = &plan->items[order[i]];
        const char *elems[3];
        size_t lens[3];
        fc_tcp_sink_path(p->sink, plan, it->index, elems, lens);
        FC_TRY_GOTO(fc_pw_str(b, elems[0], lens[0]), rc, done);
        p->storage_item[p->nstorages] = order[i] - f->first_item;
        FC_TRY_GOTO(fc_tcp_pt_value(p, it), rc, done);
    }
    if (f->nitems > 0)
        FC_TRY_GOTO(fc_pw_setitems(b), rc, done);
    rc = fc_pw_stop(b);
done:
    fc_free(order);
    return rc;
}

/* A pickler of file `file` into b, with room for its storages (released by the caller). */
static int fc_tcp_pt_pickler_init(struct fc_tcp_pt_pickler *p, const struct fc_tcp_sink *sink,
                                  const struct fc_plan *plan, size_t file, struct fc_buf *b)
{
    const size_t nst = plan->files[file].nitems + 1; /* each item's storage and the rank map */
    *p = (struct fc_tcp_pt_pickler){b, sink, plan, plan->files[file].rank, file, NULL, NULL,
                                    0, -1,   -1,   {-1, -1, -1},           0};
    p->storage_bytes = fc_calloc(nst, sizeof(*p->storage_bytes));
    p->storage_item = fc_calloc(nst, sizeof(*p->storage_item));
    fc_buf_init(b, FC_TCP_PT_PKL_CAP);
    if (p->storage_bytes == NULL || p->storage_item == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    return FC_OK;
}

static void fc_tcp_pt_pickler_release(struct fc_tcp_pt_pickler *p)
{
    fc_free(p->storage_bytes);
    fc_free(p->storage_item);
    fc_buf_release(p->b);
}

/* fc_plan_place_fn: <item>_<rank>.pt, its items at their storages' data offsets. */
static int fc_tcp_pt_place(void *ctx, const struct fc_plan *plan, size_t file, char *name,
                           size_t namesize, uint64_t *offsets, uint64_t *file_bytes)
{
    struct fc_tcp_sink *sink = ctx;
    struct fc_tcp_pt *pt = &sink->pt;
    struct fc_tcp_pt_file *pf = &pt->files[file];
    const struct fc_plan_file *f = &plan->files[file];
    const size_t nst = f->nitems + 1;
    const int item = (int)(file / sink->world);
    struct fc_buf pkl;
    struct fc_tcp_pt_pickler p;
    int rc = fc_tcp_pt_pickler_init(&p, sink, plan, file, &pkl);
    pf->item_rec = fc_calloc(f->nitems + 1, sizeof(*pf->item_rec));
    pf->recs = fc_calloc(nst + FC_TCP_PT_HEAD_RECS + FC_TCP_PT_TAIL_RECS, sizeof(*pf->recs));
    pf->names = fc_calloc(nst, FC_TCP_PT_NAME);
    if (rc == FC_OK && (pf->item_rec == NULL || pf->recs == NULL || pf->names == NULL))
        rc = fc_error_set(FC_ENOMEM, "out of memory");
    if (rc < 0)
        goto done;
    const int n = snprintf(name, namesize, "%s_%d.pt",
                           item == FC_TCP_ITEM_OPTIMIZER ? "optimizer" : "model", f->rank);
    if (n < 0 || (size_t)n >= namesize) {
        rc = fc_error_set(FC_EINVAL, "rank %d: file name does not fit", f->rank);
        goto done;
    }
    FC_TRY_GOTO(fc_tcp_pt_pickle(&p), rc, done);

    /* The records, in torch.save's order; storages in order of first appearance */
    struct fc_zipw_record *r = pf->recs;
    size_t k = 0;
    r[k++] = (struct fc_zipw_record){"data.pkl", pkl.len, pkl.data, 0, 0, 0};
    r[k++] = (struct fc_zipw_record){".format_version", 1, fc_tcp_pt_format_version, 0, 0, 0};
    r[k++] = (struct fc_zipw_record){".storage_alignment", 2, fc_tcp_pt_alignment, 0, 0, 0};
    r[k++] = (struct fc_zipw_record){"byteorder", 6, fc_tcp_pt_little, 0, 0, 0};
    for (size_t s = 0; s < p.nstorages; s++) {
        char *rn = pf->names + FC_TCP_PT_NAME * s;
        snprintf(rn, FC_TCP_PT_NAME, "data/%zu", s);
        const int is_map = (long)s == p.rank_map;
        r[k] =
            (struct fc_zipw_record){rn, p.storage_bytes[s], is_map ? pt->rank_map : NULL, 0, 0, 0};
        if (!is_map)
            pf->item_rec[p.storage_item[s]] = k;
        k++;
    }
    r[k++] = (struct fc_zipw_record){"version", 2, fc_tcp_pt_version, 0, 0, 0};
    /* torch writes a per-save random id; this one is the file's own, the same every run */
    snprintf(pf->serial, sizeof(pf->serial), "%020zu%020d", file, f->rank);
    r[k++] = (struct fc_zipw_record){
        ".data/serialization_id", 40, (const unsigned char *)pf->serial, 0, 0, 0};
    pf->nrecs = k;
    FC_TRY_GOTO(fc_zipw_layout(r, k, FC_TCP_PT_PREFIX, file_bytes), rc, done);
    for (size_t i = 0; i < f->nitems; i++)
        offsets[i] = r[pf->item_rec[i]].data_offset;
done:
    if (pf->recs != NULL)
        pf->recs[0].data = NULL; /* rebuilt by fc_tcp_pt_finish(); its size and CRC are kept */
    fc_tcp_pt_pickler_release(&p);
    return rc;
}

/* The value of a param_groups entry: a DCP bytes item's unpickled tree, or a transform's. */
static const struct fc_pv *fc_tcp_pt_group_value(const struct fc_xspec *s)
{
    const struct fc_pv *v = s->value != NULL ? s->value : s->src->entries[s->entry].value;
    if (v == NULL)
        fc_error_set(FC_EINVAL,
                     "'%s': a value torch loads only with weights_only=False; use "
                     "--format dcp",
                     s->key);
    return v;
}

/* Do numbered param_groups entries a and b belong to different groups (their order)? */
static int fc_tcp_pt_cmp_group_number(const struct fc_tcp_sink *sink, size_t a, size_t b)
{
    const unsigned long long gx =
        strtoull(sink->groups[a]->key + sizeof("optimizer.param_groups.") - 1, NULL, 10);
    const unsigned long long gy =
        strtoull(sink->groups[b]->key + sizeof("optimizer.param_groups.") - 1, NULL, 10);
    return gx < gy ? -1 : gx > gy;
}

/* Numbered param_groups entries in group order, each group's entries by name. */
static int fc_tcp_pt_cmp_group(const void *ctx, size_t a, size_t b)
{
    const struct fc_tcp_sink *sink = ctx;
    const int c = fc_tcp_pt_cmp_group_number(sink, a, b);
    if (c != 0)
        return c;
    return strcmp(strchr(sink->groups[a]->key + sizeof("optimizer.param_groups.") - 1, '.'),
                  strchr(sink->groups[b]->key + sizeof("optimizer.param_groups.") - 1, '.'));
}

/*
 * The optimizer's param_groups, pickled once for every rank file: the flat
 * form's "param_groups.<fqn>.<name>": value pairs in input order, or the
 * nested form's list of groups (optimizer.param_groups.<i>.<name> entries,
 * "params" the FQNs).
 */
static int fc_tcp_pw_param_groups(struct fc_buf *out, const struct fc_tcp_sink *sink)
{
    const size_t n = sink->ngroups_values;
    size_t *ord = fc_calloc(n + 1, sizeof(*ord));
    int rc = FC_OK;
    fc_buf_init(out, (size_t)1 << 30);
    if (ord == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        ord[i] = i;
    if (!sink->optim_nested) {
        for (size_t i = 0; i < n && rc == FC_OK; i++) {
            const struct fc_pv *v = fc_tcp_pt_group_value(sink->groups[i]);
            rc = v == NULL ? FC_EINVAL : fc_pw_cstr(out, sink->groups[i]->key + 10);
            if (rc == FC_OK)
                rc = fc_pw_value(out, v);
        }
        goto done;
    }
    FC_TRY_GOTO(fc_sort_idx(ord, n, fc_tcp_pt_cmp_group, sink), rc, done);
    FC_TRY_GOTO(fc_pw_empty_list(out), rc, done);
    FC_TRY_GOTO(fc_pw_mark(out), rc, done);
    for (size_t i = 0; i < n; i++) {
        const char *key = sink->groups[ord[i]]->key + sizeof("optimizer.param_groups.") - 1;
        const char *name = strchr(key, '.') + 1; /* numbered: checked by tcp_sink.c */
        const struct fc_pv *v = fc_tcp_pt_group_value(sink->groups[ord[i]]);
        const int first = i == 0 || fc_tcp_pt_cmp_group_number(sink, ord[i - 1], ord[i]) != 0;
        if (v == NULL) {
            rc = FC_EINVAL;
            goto done;
        }
        if (first && i > 0)
            FC_TRY_GOTO(fc_pw_setitems(out), rc, done);
        if (first) {
            FC_TRY_GOTO(fc_pw_empty_dict(out), rc, done);
            FC_TRY_GOTO(fc_pw_mark(out), rc, done);
        }
        FC_TRY_GOTO(fc_pw_cstr(out, name), rc, done);
        FC_TRY_GOTO(fc_pw_value(out, v), rc, done);
    }
    if (n > 0)
        FC_TRY_GOTO(fc_pw_setitems(out), rc, done);
    rc = fc_pw_appends(out);
done:
    fc_free(ord);
    return rc;
}

int fc_tcp_pt_layout(struct fc_tcp_sink *sink, struct fc_plan *plan)
{
    struct fc_tcp_pt *pt = &sink->pt;
    if (sink->nitems > 1)
        FC_TRY(fc_tcp_pw_param_groups(&sink->groups_pkl, sink));
    pt->plan = plan;
    pt->nfiles = plan->nfiles;
    pt->files = fc_calloc(plan->nfiles + 1, sizeof(*pt->files));
    pt->rank_map = fc_calloc(sink->world + 1, 4);
    if (pt->files == NULL || pt->rank_map == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t r = 0; r < sink->world; r++) {
        const uint32_t v = (uint32_t)r; /* int32, little-endian, as torch.save stores it */
        for (int i = 0; i < 4; i++)
            pt->rank_map[4 * r + (size_t)i] = (unsigned char)(v >> (8 * i));
    }
    return fc_plan_place(plan, fc_tcp_pt_place, sink);
}

/* The CRC-32 of n zero bytes following crc: the padding rows no item writes. */
static uint32_t fc_tcp_pt_crc_zeros(uint32_t crc, uint64_t n)
{
    static const unsigned char zeros[1 << 16];
    while (n > 0) {
        const size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        crc = fc_crc32(crc, zeros, k);
        n -= k;
    }
    return crc;
}

static void fc_tcp_pt_item_crc(const void *ctx, size_t item, uint32_t data_crc)
{
    const struct fc_tcp_sink *sink = ctx;
    const struct fc_tcp_pt *pt = &sink->pt;
    const struct fc_plan_item *it = &pt->plan->items[item];
    const struct fc_plan_file *f = &pt->plan->files[it->rank];
    struct fc_tcp_pt_file *pf = &pt->files[it->rank];
    struct fc_zipw_record *r = &pf->recs[pf->item_rec[item - f->first_item]];
    r->crc32 = fc_tcp_pt_crc_zeros(data_crc, r->size - it->length);
}

static int fc_tcp_pt_finish(const void *ctx, const struct fc_plan *plan, size_t file,
                            struct fc_out *out)
{
    const struct fc_tcp_sink *sink = ctx;
    struct fc_tcp_pt_file *pf = &sink->pt.files[file];
    struct fc_buf bytes = FC_BUF_INIT((size_t)1 << 31), pkl;
    struct fc_tcp_pt_pickler p;
    uint64_t from = 0;
    int rc = fc_tcp_pt_pickler_init(&p, sink, plan, file, &pkl);
    if (rc == FC_OK)
        rc = fc_tcp_pt_pickle(&p);
    if (rc == FC_OK &&
        (pkl.len != pf->recs[0].size || fc_crc32(0, pkl.data, pkl.len) != pf->recs[0].crc32))
        rc = fc_error_set(FC_ERROR, "%s: internal error: data.pkl differs from the planned one",
                          out->path);
    pf->recs[0].data = pkl.data;
    /* Every range between the streamed storages, the last one up to the archive's end */
    for (size_t k = 0; k <= pf->nrecs && rc == FC_OK; k++) {
        const int last = k == pf->nrecs;
        if (!last && pf->recs[k].data != NULL)
            continue;
        const uint64_t to = last ? plan->files[file].nbytes : pf->recs[k].data_offset;
        fc_buf_clear(&bytes);
        rc = fc_zipw_emit(pf->recs, pf->nrecs, FC_TCP_PT_PREFIX, from, to, &bytes);
        if (rc == FC_OK) {
            out->pos = from;
            rc = fc_out_write(out, bytes.data, bytes.len);
        }
        if (!last)
            from = pf->recs[k].data_offset + pf->recs[k].size;
    }
    pf->recs[0].data = NULL;
    fc_tcp_pt_pickler_release(&p);
    fc_buf_release(&bytes);
    return rc;
}

/* An item is its bare bytes at its storage's data offset. */
static const struct fc_sink_ops fc_tcp_pt_ops = {
    .tensor_head = fc_sink_bare_item,
    .item_crc = fc_tcp_pt_item_crc,
    .finish_file = fc_tcp_pt_finish,
};

struct fc_sink fc_tcp_pt_sink(const struct fc_tcp_sink *sink)
{
    return (struct fc_sink){&fc_tcp_pt_ops, sink};
}
