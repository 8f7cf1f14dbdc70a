/*
 * mesh.c - the device-mesh arithmetic of mesh.h: each rank's box of a tensor
 * under FSDP2 Shard(0), HSDP and TP x FSDP placements (torch.chunk sizes,
 * _StridedShard), computed exactly as DTensor does so the planner never asks
 * torch.
 */
#include "mesh.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fc_error.h"

int fc_mesh_init(struct fc_mesh *out, int replicate, int shard, int tp)
{
    assert(out != NULL);
    if (replicate < 1)
        return fc_error_set(FC_EINVAL, "mesh: replicate size %d must be >= 1", replicate);
    if (shard < 1)
        return fc_error_set(FC_EINVAL, "mesh: shard size %d must be >= 1", shard);
    if (tp < 1)
        return fc_error_set(FC_EINVAL, "mesh: tp size %d must be >= 1", tp);
    if ((int64_t)replicate * shard * tp > FC_MESH_MAX_WORLD)
        return fc_error_set(FC_EINVAL,
                            "mesh: world size %d x %d x %d exceeds the limit of %d ranks",
                            replicate, shard, tp, FC_MESH_MAX_WORLD);
    struct fc_mesh m;
    memset(&m, 0, sizeof(m));
    if (replicate > 1) {
        m.size[m.ndim] = replicate;
        m.name[m.ndim++] = FC_MESH_DIM_REPLICATE;
    }
    m.size[m.ndim] = shard;
    m.name[m.ndim++] = FC_MESH_DIM_SHARD;
    if (tp > 1) {
        m.size[m.ndim] = tp;
        m.name[m.ndim++] = FC_MESH_DIM_TP;
    }
    *out = m;
    return FC_OK;
}

int fc_mesh_validate(const struct fc_mesh *mesh)
{
    assert(mesh != NULL);
    if (mesh->ndim < 1 || mesh->ndim > FC_MESH_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "mesh: %d dims is outside [1, %d]", mesh->ndim,
                            FC_MESH_MAX_DIMS);
    int64_t world = 1;
    for (int i = 0; i < mesh->ndim; i++) {
        if (mesh->size[i] < 1)
            return fc_error_set(FC_EINVAL, "mesh: dim %d has size %d (must be >= 1)", i,
                                mesh->size[i]);
        world *= mesh->size[i];
        if (world > FC_MESH_MAX_WORLD)
            return fc_error_set(FC_EINVAL, "mesh: world size exceeds the limit of %d ranks",
                                FC_MESH_MAX_WORLD);
        for (int j = 0; j < i; j++) {
            if (mesh->name[i] != FC_MESH_DIM_OTHER && mesh->name[j] == mesh->name[i])
                return fc_error_set(FC_EINVAL, "mesh: dims %d and %d have the same name", j, i);
        }
    }
    return FC_OK;
}

int fc_mesh_world_size(const struct fc_mesh *mesh)
{
    assert(mesh != NULL && mesh->ndim >= 1 && mesh->ndim <= FC_MESH_MAX_DIMS);
    int world = 1;
    for (int i = 0; i < mesh->ndim; i++)
        world *= mesh->size[i];
    return world;
}

int fc_mesh_find(const struct fc_mesh *mesh, enum fc_mesh_dim_name name)
{
    assert(mesh != NULL);
    for (int i = 0; i < mesh->ndim; i++) {
        if (mesh->name[i] == name)
            return i;
    }
    return -1;
}

int fc_mesh_dim_size(const struct fc_mesh *mesh, enum fc_mesh_dim_name name)
{
    const int i = fc_mesh_find(mesh, name);
    return i < 0 ? 1 : mesh->size[i];
}

void fc_mesh_coords(const struct fc_mesh *mesh, int rank, int *coords_out)
{
    assert(mesh != NULL && coords_out != NULL);
    assert(rank >= 0 && rank < fc_mesh_world_size(mesh));
    for (int i = mesh->ndim - 1; i >= 0; i--) {
        coords_out[i] = rank % mesh->size[i];
        rank /= mesh->size[i];
    }
}

int fc_mesh_rank(const struct fc_mesh *mesh, const int *coords)
{
    assert(mesh != NULL && coords != NULL);
    int rank = 0;
    for (int i = 0; i < mesh->ndim; i++) {
        assert(coords[i] >= 0 && coords[i] < mesh->size[i]);
        rank = rank * mesh->size[i] + coords[i];
    }
    return rank;
}

/* ceil(len / n) without forming len + n - 1, which may overflow. */
static int64_t fc_mesh__ceil_div(int64_t len, int64_t n)
{
    return len / n + (len % n != 0);
}

void fc_mesh_chunk(int64_t len, int64_t n, int64_t i, int64_t *off_out, int64_t *size_out)
{
    assert(len >= 0 && n >= 1 && i >= 0 && i < n);
    assert(off_out != NULL && size_out != NULL);
    const int64_t c = fc_mesh__ceil_div(len, n);
    /* c * i > len  <=>  i > len / c (c >= 1); checked first so c * i cannot overflow. */
    if (c == 0 || i > len / c) {
        *off_out = len;
        *size_out = 0;
        return;
    }
    const int64_t start = c * i; /* <= len */
    const int64_t rest = len - start;
    *off_out = start;
    *size_out = rest < c ? rest : c;
}

int64_t fc_mesh_nonempty_chunks(int64_t len, int64_t n)
{
    assert(len >= 0 && n >= 1);
    if (len == 0)
        return 0;
    return fc_mesh__ceil_div(len, fc_mesh__ceil_div(len, n));
}

int fc_mesh_placements(const struct fc_mesh *mesh, enum fc_placement placement, int tp_dim,
                       int ndim, struct fc_dim_placement *out)
{
    assert(mesh != NULL && out != NULL);
    if (placement != FC_PLACE_SHARD0 && placement != FC_PLACE_REPLICATE)
        return fc_error_set(FC_EINVAL, "mesh: unknown placement %d", (int)placement);
    if (placement == FC_PLACE_SHARD0 && ndim == 0)
        return fc_error_set(FC_EINVAL, "mesh: Shard(0) needs a tensor with at least 1 dim");
    const int tp = fc_mesh_dim_size(mesh, FC_MESH_DIM_TP);
    if (placement == FC_PLACE_REPLICATE || tp == 1)
        tp_dim = -1;
    if (tp_dim >= ndim)
        return fc_error_set(FC_EINVAL, "mesh: tp shards dim %d of a %d-dim tensor", tp_dim, ndim);
    for (int i = 0; i < mesh->ndim; i++) {
        struct fc_dim_placement p = {FC_DIM_REPLICATE, 0, 1};
        if (placement == FC_PLACE_SHARD0 && mesh->name[i] == FC_MESH_DIM_SHARD)
            p = (struct fc_dim_placement){tp_dim == 0 ? FC_DIM_STRIDED : FC_DIM_SHARD, 0,
                                          tp_dim == 0 ? tp : 1};
        else if (mesh->name[i] == FC_MESH_DIM_TP && tp_dim >= 0)
            p = (struct fc_dim_placement){FC_DIM_SHARD, tp_dim, 1};
        out[i] = p;
    }
    return FC_OK;
}

/*
 * The index set a rank holds of one tensor dim while placements are applied:
 * positions [pos, pos + len) of either the contiguous range starting at base
 * (split == 0) or the `split` runs a _StridedShard left (run j = sub-piece
 * `coord` of `n` of piece j of `split` of [base, base + extent)).
 */
struct fc_mesh__dim_state {
    int64_t base, extent;
    int64_t split, n, coord;
    int64_t pos, len;
    int sharded; /* a placement touched this dim */
};

/* Run j of a strided state: its first index and length. */
static void fc_mesh__run(const struct fc_mesh__dim_state *s, int64_t j, int64_t *start_out,
                         int64_t *len_out)
{
    int64_t poff, plen, soff;
    fc_mesh_chunk(s->extent, s->split, j, &poff, &plen);
    fc_mesh_chunk(plen, s->n, s->coord, &soff, len_out);
    *start_out = s->base + poff + soff;
}

/* The index at position `pos` of the state's index list (pos < its length). */
static int64_t fc_mesh__index_at(const struct fc_mesh__dim_state *s, int64_t pos)
{
    if (s->split == 0)
        return s->base + pos;
    for (int64_t j = 0; j < s->split; j++) {
        int64_t start, len;
        fc_mesh__run(s, j, &start, &len);
        if (pos < len)
            return start + pos;
        pos -= len;
    }
    assert(0 && "position past the strided runs");
    return -1;
}

/* Checks placements and shape; fills the per-dim states of `rank`. */
static int fc_mesh__apply(const struct fc_mesh *mesh, const struct fc_dim_placement *pl, int ndim,
                          const int64_t *shape, int rank, struct fc_mesh__dim_state *st)
{
    assert(mesh != NULL && (mesh->ndim == 0 || pl != NULL));
    assert(rank >= 0 && rank < fc_mesh_world_size(mesh));
    if (ndim < 0 || ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "mesh box: %d dims is outside [0, %d]", ndim, FC_MAX_DIMS);
    assert(ndim == 0 || shape != NULL);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return fc_error_set(FC_EINVAL, "mesh box: dim %d has negative size %" PRId64, d,
                                shape[d]);
        st[d] = (struct fc_mesh__dim_state){0, shape[d], 0, 1, 0, 0, shape[d], 0};
    }
    int coords[FC_MESH_MAX_DIMS];
    fc_mesh_coords(mesh, rank, coords);
    for (int i = 0; i < mesh->ndim; i++) {
        const struct fc_dim_placement *p = &pl[i];
        if (p->kind == FC_DIM_REPLICATE)
            continue;
        if (p->kind != FC_DIM_SHARD && p->kind != FC_DIM_STRIDED)
            return fc_error_set(FC_EINVAL, "mesh box: unknown placement kind %d", (int)p->kind);
        if (p->dim < 0 || p->dim >= ndim)
            return fc_error_set(FC_EINVAL, "mesh box: mesh dim %d shards dim %d of a %d-dim tensor",
                                i, p->dim, ndim);
        struct fc_mesh__dim_state *s = &st[p->dim];
        const int64_t n = mesh->size[i], c = coords[i];
        if (p->kind == FC_DIM_STRIDED) {
            if (p->split < 2)
                return fc_error_set(FC_EINVAL, "mesh box: _StridedShard split %d must be >= 2",
                                    p->split);
            if (s->sharded)
                return fc_error_set(FC_EINVAL,
                                    "mesh box: _StridedShard on dim %d after another placement "
                                    "on it",
                                    p->dim);
            s->split = p->split;
            s->n = n;
            s->coord = c;
            s->pos = 0;
            s->len = 0;
            for (int64_t j = 0; j < s->split; j++) {
                int64_t start, len;
                fc_mesh__run(s, j, &start, &len);
                s->len += len;
            }
        } else {
            int64_t off, len;
            fc_mesh_chunk(s->len, n, c, &off, &len);
            s->pos += off;
            s->len = len;
        }
        s->sharded = 1;
    }
    return FC_OK;
}

int fc_mesh_box(const struct fc_mesh *mesh, const struct fc_dim_placement *pl, int ndim,
                const int64_t *shape, int rank, int64_t *offsets_out, int64_t *sizes_out)
{
    struct fc_mesh__dim_state st[FC_MAX_DIMS];
    assert(offsets_out != NULL && sizes_out != NULL);
    FC_TRY(fc_mesh__apply(mesh, pl, ndim, shape, rank, st));
    for (int d = 0; d < ndim; d++) {
        const struct fc_mesh__dim_state *s = &st[d];
        sizes_out[d] = s->len;
        /* DTensor: an empty shard's offset is the global size of that dim. */
        offsets_out[d] = s->len == 0 && s->sharded ? shape[d] : fc_mesh__index_at(s, s->pos);
        if (!s->sharded)
            offsets_out[d] = 0;
    }
    return FC_OK;
}

int fc_mesh_check_layout(const struct fc_mesh *mesh, const struct fc_dim_placement *pl, int ndim,
                         const int64_t *shape, int *rank_out)
{
    struct fc_mesh__dim_state st[FC_MAX_DIMS];
    assert(rank_out != NULL);
    *rank_out = -1;
    int strided = 0;
    for (int i = 0; i < mesh->ndim; i++)
        strided |= pl[i].kind == FC_DIM_STRIDED;
    /* Without a _StridedShard every box is the nested chunk: only validate. */
    const int world = strided ? fc_mesh_world_size(mesh) : 1;
    for (int r = 0; r < world; r++) {
        FC_TRY(fc_mesh__apply(mesh, pl, ndim, shape, r, st));
        if (!strided)
            continue;
        int coords[FC_MESH_MAX_DIMS];
        fc_mesh_coords(mesh, r, coords);
        for (int i = 0; i < mesh->ndim; i++) {
            if (pl[i].kind != FC_DIM_STRIDED)
                continue;
            const struct fc_mesh__dim_state *s = &st[pl[i].dim];
            /* The run FSDP2 really gives this rank: the one its tp coordinate selects. */
            int sel = -1;
            for (int k = i + 1; k < mesh->ndim; k++) {
                if (pl[k].kind == FC_DIM_SHARD && pl[k].dim == pl[i].dim &&
                    mesh->size[k] == pl[i].split)
                    sel = coords[k];
            }
            if (sel < 0)
                continue;
            int64_t run_start, run_len, pos = 0;
            for (int64_t j = 0; j < sel; j++) {
                fc_mesh__run(s, j, &run_start, &run_len);
                pos += run_len;
            }
            fc_mesh__run(s, sel, &run_start, &run_len);
            if (s->len == run_len && (run_len == 0 || s->pos == pos))
                continue;
            *rank_out = r;
            const int64_t rec = s->len == 0 ? shape[pl[i].dim] : fc_mesh__index_at(s, s->pos);
            return fc_error_set(FC_EINVAL,
                                "torch records rows [%" PRId64 ", %" PRId64
                                ") of dim %d for rank %d, which holds rows [%" PRId64 ", %" PRId64
                                ") (_StridedShard of %" PRId64
                                " rows over tp=%d and dp=%d cannot round-trip)",
                                rec, rec + s->len, pl[i].dim, r, run_start, run_start + run_len,
                                shape[pl[i].dim], pl[i].split, mesh->size[i]);
        }
    }
    return FC_OK;
}

static void fc_mesh__append(char *buf, size_t bufsize, size_t *len, const char *s)
{
    const int n = snprintf(buf + *len, bufsize - *len, "%s", s);
    if (n > 0)
        *len += (size_t)n < bufsize - *len ? (size_t)n : bufsize - *len - 1;
}

char *fc_mesh_placement_name(const struct fc_mesh *mesh, const struct fc_dim_placement *pl,
                             char *buf, size_t bufsize)
{
    assert(mesh != NULL && pl != NULL && buf != NULL);
    if (bufsize == 0)
        return buf;
    size_t len = 0;
    buf[0] = '\0';
    if (mesh->ndim > 1)
        fc_mesh__append(buf, bufsize, &len, "(");
    for (int i = 0; i < mesh->ndim; i++) {
        char one[64];
        switch (pl[i].kind) {
        case FC_DIM_REPLICATE: snprintf(one, sizeof(one), "Replicate()"); break;
        case FC_DIM_SHARD: snprintf(one, sizeof(one), "Shard(%d)", pl[i].dim); break;
        case FC_DIM_STRIDED:
            snprintf(one, sizeof(one), "_StridedShard(%d, sf=%d)", pl[i].dim, pl[i].split);
            break;
        default: snprintf(one, sizeof(one), "?"); break;
        }
        if (i > 0)
            fc_mesh__append(buf, bufsize, &len, ", ");
        fc_mesh__append(buf, bufsize, &len, one);
    }
    if (mesh->ndim > 1)
        fc_mesh__append(buf, bufsize, &len, ")");
    return buf;
}

char *fc_mesh_describe(const struct fc_mesh *mesh, char *buf, size_t bufsize)
{
    const int tp = fc_mesh_dim_size(mesh, FC_MESH_DIM_TP);
    int n = snprintf(buf, bufsize, "replicate=%d shard=%d",
                     fc_mesh_dim_size(mesh, FC_MESH_DIM_REPLICATE),
                     fc_mesh_dim_size(mesh, FC_MESH_DIM_SHARD));
    if (tp > 1 && n > 0 && (size_t)n < bufsize)
        snprintf(buf + n, bufsize - (size_t)n, " tp=%d", tp);
    return buf;
}
