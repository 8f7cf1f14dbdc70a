/*
 * mesh.h - the one device-mesh model: which box of a tensor each rank holds.
 *
 * Pure arithmetic, no I/O, no allocation, no format module.  The semantics are
 * those of DTensor / FSDP2 (dcp-format.md 5.1-5.4):
 *
 *   - A mesh has 1 .. FC_MESH_MAX_DIMS dims with sizes >= 1; ranks are
 *     numbered row-major over the dims, as init_device_mesh() does.  The mesh
 *     of a conversion (fc_mesh_init()) has the dims torch gives FSDP2 with
 *     HSDP and tensor parallelism, in torch's order: dp_replicate (only when
 *     its size is > 1), dp_shard (always), tp (only when its size is > 1).
 *     Rank ((r * S) + s) * T + t has coordinates (r, s, t).
 *   - A tensor's placement is one struct fc_dim_placement per mesh dim:
 *     Replicate(), Shard(d) or _StridedShard(d, split_factor).  fc_mesh_box()
 *     is DTensor's compute_local_shape_and_global_offset(): placements apply
 *     left to right; Shard(d) takes piece c of n of the current extent with
 *     torch.chunk sizes (fc_mesh_chunk()); _StridedShard(d, sf) first cuts the
 *     extent into sf pieces, then each piece into n, and keeps the c-th
 *     sub-piece of every piece (sf runs); a later Shard(d) picks a contiguous
 *     range of positions in those runs and the box starts at the first index
 *     it picked.  An empty box sits at offset shape[d] on the dim it is empty
 *     on, other dims keep their offsets.
 *   - fc_mesh_placements() gives the placements FSDP2 (fully_shard) gives a
 *     parameter that tensor parallelism placed Shard(tp_dim) or Replicate()
 *     on the tp dim: dp_replicate Replicate(); dp_shard Shard(0), or
 *     _StridedShard(0, tp) when tp also shards dim 0; tp Shard(tp_dim) or
 *     Replicate().  Whole-tensor placement: Replicate() everywhere.
 *   - What a rank really holds under FSDP2 is the nested torch.chunk: the tp
 *     piece first, then the dp_shard piece of it.  For _StridedShard that is
 *     the one run selected by the tp coordinate, which is not always the
 *     box DTensor records (fc_mesh_check_layout()).
 *
 * Invariants: every function here is deterministic and total over its
 * documented domain; a violated precondition (NULL pointer, rank out of range,
 * n < 1) is a programming error and is assert()ed, never a runtime error.
 * Tensor lengths are int64_t >= 0 (fc_tensor.h); ranks and mesh sizes are
 * int, bounded by FC_MESH_MAX_WORLD so that world never overflows.
 */
#ifndef FC_MESH_H
#define FC_MESH_H

#include <stddef.h>
#include <stdint.h>

#include "fc_tensor.h"

/* Largest world size fc_mesh_validate() accepts (one file per rank is written). */
#define FC_MESH_MAX_WORLD (1 << 20)
#define FC_MESH_MAX_DIMS  4

/* What a mesh dim is for (names as torchtitan's mesh: dp_replicate, dp_shard, tp). */
enum fc_mesh_dim_name {
    FC_MESH_DIM_OTHER = 0, /* a dim of a hand-built mesh (tests) */
    FC_MESH_DIM_REPLICATE, /* HSDP replicas */
    FC_MESH_DIM_SHARD,     /* FSDP2 sharding */
    FC_MESH_DIM_TP         /* tensor parallelism */
};

struct fc_mesh {
    int ndim;                                     /* 1 .. FC_MESH_MAX_DIMS */
    int size[FC_MESH_MAX_DIMS];                   /* >= 1 each */
    enum fc_mesh_dim_name name[FC_MESH_MAX_DIMS]; /* at most one of each named kind */
};

/* A tensor's intent, from which fc_mesh_placements() derives per-dim placements. */
enum fc_placement {
    FC_PLACE_SHARD0 = 0, /* FSDP2-sharded on dim 0 (and on tp as the tensor's tp_dim says) */
    FC_PLACE_REPLICATE   /* whole tensor on every rank (0-d tensors, --replicate buffers) */
};

enum fc_dim_place_kind { FC_DIM_REPLICATE = 0, FC_DIM_SHARD, FC_DIM_STRIDED };

/* The placement on one mesh dim: Replicate(), Shard(dim), _StridedShard(dim, split). */
struct fc_dim_placement {
    enum fc_dim_place_kind kind;
    int dim;   /* tensor dim (Shard, _StridedShard) */
    int split; /* _StridedShard's split_factor (>= 2); 1 otherwise */
};

/*
 * fc_mesh_init() - the conversion mesh of replicate R x shard S x tp T
 * (see above; dims of size 1 other than dp_shard are left out).  Returns
 * FC_OK, or FC_EINVAL (message naming the bad size) when a size is < 1 or the
 * world size exceeds FC_MESH_MAX_WORLD.  *out is set only on success.
 */
int fc_mesh_init(struct fc_mesh *out, int replicate, int shard, int tp);

/*
 * fc_mesh_validate() - check a mesh: FC_OK, or FC_EINVAL when ndim or a size
 * is out of range or the world size exceeds FC_MESH_MAX_WORLD.  All other
 * functions taking a mesh require a mesh that validates.
 */
int fc_mesh_validate(const struct fc_mesh *mesh);

/* fc_mesh_world_size() - product of the sizes (the number of ranks and of files). */
int fc_mesh_world_size(const struct fc_mesh *mesh);

/* fc_mesh_find() - index of the dim named `name`, or -1. */
int fc_mesh_find(const struct fc_mesh *mesh, enum fc_mesh_dim_name name);

/* fc_mesh_dim_size() - size of the dim named `name`, 1 when the mesh has none. */
int fc_mesh_dim_size(const struct fc_mesh *mesh, enum fc_mesh_dim_name name);

/* fc_mesh_coords() - coordinates of `rank` (mesh->ndim entries into coords_out). */
void fc_mesh_coords(const struct fc_mesh *mesh, int rank, int *coords_out);

/* fc_mesh_rank() - inverse of fc_mesh_coords(). */
int fc_mesh_rank(const struct fc_mesh *mesh, const int *coords);

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
 * fc_mesh_placements() - the per-dim placements (mesh->ndim entries into out)
 * FSDP2 gives a tensor of ndim dims with intent `placement` whose tp
 * placement is Shard(tp_dim) (tp_dim >= 0) or Replicate() (tp_dim < 0).
 * tp_dim is ignored on a mesh without a tp dim.  Returns FC_OK, or FC_EINVAL
 * when `placement` is unknown, FC_PLACE_SHARD0 has ndim == 0, or tp_dim >=
 * ndim.  Writes nothing on failure.
 */
int fc_mesh_placements(const struct fc_mesh *mesh, enum fc_placement placement, int tp_dim,
                       int ndim, struct fc_dim_placement *out);

/*
 * fc_mesh_box() - the box (per-dim offsets and sizes, ndim entries each) that
 * DTensor records for `rank` of a tensor of global `shape` under placements
 * pl[0 .. mesh->ndim).  Returns FC_OK, or FC_EINVAL when ndim is out of [0,
 * FC_MAX_DIMS], a dim is negative, a placement names a dim >= ndim, has an
 * unknown kind or a split < 2, or a dim is strided twice or strided after a
 * Shard on it.  `rank` must be in [0, world) (asserted).  Writes nothing on
 * failure.
 */
int fc_mesh_box(const struct fc_mesh *mesh, const struct fc_dim_placement *pl, int ndim,
                const int64_t *shape, int rank, int64_t *offsets_out, int64_t *sizes_out);

/*
 * fc_mesh_check_layout() - can torch round-trip this tensor?  For every
 * _StridedShard(d, sf) in pl followed by a Shard(d) on a mesh dim of size sf,
 * each rank must record exactly the run it holds (see above).  Torch 2.15
 * records a different box exactly when, for some dp_shard coordinate c, the
 * sizes v_j = |piece c of n of (piece j of sf of L)|, j = 0 .. sf-1, are not
 * torch.chunk's split of their sum into sf pieces; this never happens when sf
 * divides L or n <= 2, and happens e.g. for L = 7 or 37 with sf = 2, n = 3.
 * Returns FC_OK, or FC_EINVAL with *rank_out set to the first rank whose
 * recorded box (offsets/sizes_out, when not NULL) is not what it holds, and
 * the message saying which rows that rank records and which it holds.
 * Preconditions as fc_mesh_box(), whose errors it returns too.
 */
int fc_mesh_check_layout(const struct fc_mesh *mesh, const struct fc_dim_placement *pl, int ndim,
                         const int64_t *shape, int *rank_out);

/*
 * fc_mesh_placement_name() - DTensor spelling of placements on `mesh` into
 * buf: "Shard(0)" on a 1-D mesh, "(Replicate(), _StridedShard(0, sf=2),
 * Shard(0))" on a 3-D one.  Truncated to fit (always NUL-terminated when
 * bufsize > 0).  Returns buf.
 */
char *fc_mesh_placement_name(const struct fc_mesh *mesh, const struct fc_dim_placement *pl,
                             char *buf, size_t bufsize);

/* fc_mesh_describe() - "replicate=R shard=S", then " tp=T" when T > 1. */
char *fc_mesh_describe(const struct fc_mesh *mesh, char *buf, size_t bufsize);

#endif
