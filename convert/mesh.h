/*
 * mesh.h - device mesh and placements: which box of a tensor each rank holds.
 *
 * Pure arithmetic, no I/O, no allocation, no format module.  The semantics are
 * those of DTensor / FSDP2 (dcp-format.md 5.1-5.3):
 *
 *   - A mesh is 1-D (FSDP2: replicate = 1, shard = world) or 2-D HSDP
 *     (replicate R, shard S).  world = R * S.  Mesh rank r * S + s has
 *     coordinates (replicate r, shard s), i.e. ranks are numbered row-major
 *     over the mesh as torch's init_device_mesh(("replicate", "shard")) does.
 *   - FC_PLACE_SHARD0 is DTensor's Shard(0) over the shard mesh dimension (and
 *     Replicate() over the replicate dimension for HSDP): the box of rank
 *     (r, s) is torch.chunk-style chunk s of S along dim 0 (fc_mesh_chunk())
 *     and the full extent of every other dim; it does not depend on r, so the
 *     R ranks with the same s are replicas.  Needs ndim >= 1.
 *   - FC_PLACE_REPLICATE: every rank holds the whole tensor (0-d tensors,
 *     buffers the user asked to replicate); stored once.
 *
 * Invariants: every function here is deterministic and total over its
 * documented domain; a violated precondition (NULL pointer, rank out of range,
 * n < 1) is a programming error and is assert()ed, never a runtime error.
 * Tensor lengths are int64_t >= 0 (fc_tensor.h); ranks and mesh sizes are
 * int, bounded by FC_MESH_MAX_WORLD so that world never overflows.
 */
#ifndef FC_MESH_H
#define FC_MESH_H

#include <stdint.h>

#include "fc_tensor.h"

/* Largest world size fc_mesh_validate() accepts (one file per rank is written). */
#define FC_MESH_MAX_WORLD (1 << 20)

enum fc_placement {
    FC_PLACE_SHARD0 = 0, /* Shard(0) over the shard mesh dim; HSDP: (Replicate(), Shard(0)) */
    FC_PLACE_REPLICATE   /* whole tensor on every rank; HSDP: (Replicate(), Replicate()) */
};

struct fc_mesh {
    int replicate; /* size of the replicate mesh dim; 1 for plain FSDP2 */
    int shard;     /* size of the shard mesh dim */
};

/*
 * fc_mesh_validate() - check a mesh given by the user.
 *
 * Returns FC_OK, or FC_EINVAL (with a message naming the bad field) when a
 * size is < 1 or the world size replicate * shard exceeds FC_MESH_MAX_WORLD.
 * All other functions taking a mesh require a mesh that validates.
 */
int fc_mesh_validate(const struct fc_mesh *mesh);

/* fc_mesh_world_size() - replicate * shard (the number of ranks and of files). */
int fc_mesh_world_size(const struct fc_mesh *mesh);

/* fc_mesh_rank() - rank of mesh coordinates (replicate_idx, shard_idx): r * shard + s. */
int fc_mesh_rank(const struct fc_mesh *mesh, int replicate_idx, int shard_idx);

/* fc_mesh_coords() - inverse of fc_mesh_rank(); either out pointer may be NULL. */
void fc_mesh_coords(const struct fc_mesh *mesh, int rank, int *replicate_out, int *shard_out);

/*
 * fc_mesh_chunk() - piece i of n of a dimension of length len, with torch.chunk
 * / DTensor Shard semantics padded to n pieces:
 *
 *     c = ceil(len / n);  off = min(c * i, len);  size = clamp(len - c * i, 0, c)
 *
 * so len = 5, n = 4 gives sizes [2, 2, 1, 0] at offsets [0, 2, 4, 5], and
 * len = 2, n = 4 gives [1, 1, 0, 0] at [0, 1, 2, 2]: an empty piece always sits
 * at offset len (pytorch#150862), and len = 0 gives (0, 0) for every i.
 * Pieces are non-increasing in size, contiguous and in order, and tile
 * [0, len).  No intermediate overflows for any len <= INT64_MAX.
 *
 * Preconditions (asserted): len >= 0, n >= 1, 0 <= i < n, both out pointers
 * non-NULL.
 */
void fc_mesh_chunk(int64_t len, int64_t n, int64_t i, int64_t *off_out, int64_t *size_out);

/*
 * fc_mesh_nonempty_chunks() - how many of the n pieces of fc_mesh_chunk() are
 * non-empty: pieces 0 .. k-1 are, pieces k .. n-1 are (len, 0).  k = 0 for
 * len = 0, else ceil(len / ceil(len / n)) <= n.
 */
int64_t fc_mesh_nonempty_chunks(int64_t len, int64_t n);

/*
 * fc_mesh_box() - the box (per-dim offsets and sizes, ndim entries each) that
 * `rank` holds of a tensor of global `shape` under `placement`.
 *
 * Returns FC_OK, or FC_EINVAL when ndim is out of [0, FC_MAX_DIMS], a dim is
 * negative, or placement is FC_PLACE_SHARD0 with ndim == 0.  `rank` must be in
 * [0, world) (asserted).  Writes nothing on failure.
 */
int fc_mesh_box(const struct fc_mesh *mesh, enum fc_placement placement, int ndim,
                const int64_t *shape, int rank, int64_t *offsets_out, int64_t *sizes_out);

/*
 * fc_placement_name() - DTensor spelling of a placement on `mesh`:
 * "Shard(0)" / "Replicate()" on a 1-D mesh, "(Replicate(), Shard(0))" /
 * "(Replicate(), Replicate())" on an HSDP mesh (replicate > 1).  Static
 * string; "?" for an unknown value.
 */
const char *fc_placement_name(const struct fc_mesh *mesh, enum fc_placement placement);

#endif
