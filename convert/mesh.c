#include "mesh.h"

#include <assert.h>
#include <stddef.h>

#include "fc_error.h"

int fc_mesh_validate(const struct fc_mesh *mesh)
{
    assert(mesh != NULL);
    if (mesh->replicate < 1)
        return fc_error_set(FC_EINVAL, "mesh: replicate size %d must be >= 1", mesh->replicate);
    if (mesh->shard < 1)
        return fc_error_set(FC_EINVAL, "mesh: shard size %d must be >= 1", mesh->shard);
    if ((int64_t)mesh->replicate * mesh->shard > FC_MESH_MAX_WORLD)
        return fc_error_set(FC_EINVAL, "mesh: world size %d x %d exceeds the limit of %d ranks",
                            mesh->replicate, mesh->shard, FC_MESH_MAX_WORLD);
    return FC_OK;
}

int fc_mesh_world_size(const struct fc_mesh *mesh)
{
    assert(mesh != NULL && mesh->replicate >= 1 && mesh->shard >= 1);
    return mesh->replicate * mesh->shard;
}

int fc_mesh_rank(const struct fc_mesh *mesh, int replicate_idx, int shard_idx)
{
    assert(mesh != NULL);
    assert(replicate_idx >= 0 && replicate_idx < mesh->replicate);
    assert(shard_idx >= 0 && shard_idx < mesh->shard);
    return replicate_idx * mesh->shard + shard_idx;
}

void fc_mesh_coords(const struct fc_mesh *mesh, int rank, int *replicate_out, int *shard_out)
{
    assert(mesh != NULL && mesh->shard >= 1);
    assert(rank >= 0 && rank < fc_mesh_world_size(mesh));
    if (replicate_out != NULL)
        *replicate_out = rank / mesh->shard;
    if (shard_out != NULL)
        *shard_out = rank % mesh->shard;
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

int fc_mesh_box(const struct fc_mesh *mesh, enum fc_placement placement, int ndim,
                const int64_t *shape, int rank, int64_t *offsets_out, int64_t *sizes_out)
{
    assert(mesh != NULL && offsets_out != NULL && sizes_out != NULL);
    assert(rank >= 0 && rank < fc_mesh_world_size(mesh));
    if (ndim < 0 || ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "mesh box: %d dims is outside [0, %d]", ndim, FC_MAX_DIMS);
    assert(ndim == 0 || shape != NULL);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return fc_error_set(FC_EINVAL, "mesh box: dim %d has negative size %lld", d,
                                (long long)shape[d]);
    }
    if (placement == FC_PLACE_SHARD0 && ndim == 0)
        return fc_error_set(FC_EINVAL, "mesh box: Shard(0) needs a tensor with at least 1 dim");
    if (placement != FC_PLACE_SHARD0 && placement != FC_PLACE_REPLICATE)
        return fc_error_set(FC_EINVAL, "mesh box: unknown placement %d", (int)placement);
    for (int d = 0; d < ndim; d++) {
        offsets_out[d] = 0;
        sizes_out[d] = shape[d];
    }
    if (placement == FC_PLACE_SHARD0)
        fc_mesh_chunk(shape[0], mesh->shard, rank % mesh->shard, &offsets_out[0], &sizes_out[0]);
    return FC_OK;
}

const char *fc_placement_name(const struct fc_mesh *mesh, enum fc_placement placement)
{
    const int hsdp = mesh != NULL && mesh->replicate > 1;
    switch (placement) {
    case FC_PLACE_SHARD0: return hsdp ? "(Replicate(), Shard(0))" : "Shard(0)";
    case FC_PLACE_REPLICATE: return hsdp ? "(Replicate(), Replicate())" : "Replicate()";
    }
    return "?";
}
