/*
 * fc_chunks.h - boxes of a chunked tensor, and helpers on arbitrary chunk
 * lists (the planner's own and those of checkpoints written by PyTorch):
 * replicas, the exact tiling check every chunked source runs when it opens,
 * and the intersection index the chunked sources read boxes through.
 * Pure: no I/O.
 */
#ifndef FC_CHUNKS_H
#define FC_CHUNKS_H

#include <stddef.h>
#include <stdint.h>

#include "fc_buf.h"
#include "fc_tensor.h"

/*
 * A box: per-dim start offsets and extents, `ndim` entries each, where ndim
 * is known from context (the tensor).  The arrays are borrowed.
 */
struct fc_box {
    const int64_t *offsets;
    const int64_t *sizes;
};

/* fc_dims_format() - append "[a, b, c]" (ndim values).  Returns FC_OK or FC_ENOMEM. */
int fc_dims_format(struct fc_buf *out, int ndim, const int64_t *v);

/*
 * fc_box_format() - append "[a:b, c:d]" for a box of ndim dims to out.
 * Returns FC_OK or FC_ENOMEM.
 */
int fc_box_format(struct fc_buf *out, int ndim, const int64_t *offsets, const int64_t *sizes);

/* ------------------------------------------------------------------------ */
/* Replicas and exact tiling of an arbitrary chunk list (every chunked source) */

/*
 * fc_chunks_replicas() - first_of[i] = the lowest index of a chunk with the
 * same box as chunk i (i itself when none), for the n chunks; *nreplicas =
 * how many chunks have first_of[i] != i.  Rank-local DCP metadata lists a
 * replicated item once per rank, the same elements saved again: callers read
 * the first copy and give only the distinct boxes to fc_chunks_check_tiling(),
 * where identical non-empty boxes would be an overlap.  Sorts by offsets:
 * O(n d log n) plus the pairs of chunks with equal offsets.  Returns FC_OK or
 * FC_ENOMEM.
 */
int fc_chunks_replicas(int ndim, const struct fc_box *chunks, size_t n, size_t *first_of,
                       size_t *nreplicas);

/*
 * fc_chunks_check_tiling() - prove that chunks[0..n) tile a tensor of `shape`
 * exactly: every element in exactly one chunk.  The one coverage check of
 * every chunked source (DCP, rank-local DCP, sharded safetensors), of inspect
 * (fc_dcp_check()) and of the planner's tests; a source that passes it can
 * fill any box of the tensor from its chunks, every byte written once.
 *
 * Exact, never a count: element counts that add up (an overlap in one place
 * cancelling a gap in another) do not pass.
 *   1. Every chunk lies inside the shape: offsets and sizes >= 0 and
 *      offset <= dim - size (no overflow near 2^63).  Chunks with a zero
 *      size cover nothing and take no further part.
 *   2. Guillotine cuts: the chunks must tile the region (first the tensor).
 *      On the first dim where sorting by start shows a coordinate no chunk
 *      crosses, the region splits there into parts, each holding the chunks
 *      on its side; a slab of the region that no chunk reaches is a gap; a
 *      part with one chunk tiles it iff the chunk is the part.  FSDP
 *      Shard(0) rows split into single chunks on dim 0; TP x FSDP grids on
 *      dim 0, then each row on dim 1; any DTensor layout is such a grid.
 *      Cost O(d n log n) for them, n chunks, d dims.
 *   3. A region with no cut on any dim (an overlap, or a pinwheel that torch
 *      never writes): every pair of its chunks whose dim-0 ranges intersect
 *      is tested; with no overlap, it is tiled iff the volumes add up.
 * Work (sorted elements plus pair tests) is bounded by max(64 n, 2^26):
 * past it the chunks are refused as too irregular to prove, never passed.
 *
 * Identical boxes overlap: deduplicate replicas first (fc_chunks_replicas()).
 *
 * Returns FC_OK when they tile; FC_ECORRUPT with one line "<where>: chunks
 * of '<key>' overlap at [..] (chunks [..] and [..]) and leave [..]
 * uncovered" (the parts that apply: the first overlap and the first gap
 * found; a box outside the shape; a shape with too many elements), where
 * `where` (a file or directory; may be NULL) and `key` only name things in
 * it; FC_EINVAL when ndim is outside [0, FC_MAX_DIMS]; FC_ENOMEM.
 */
int fc_chunks_check_tiling(int ndim, const int64_t *shape, const struct fc_box *chunks, size_t n,
                           const char *where, const char *key);

/* ------------------------------------------------------------------------ */
/* Intersections with a target box (reshard).                               */

struct fc_chunk_index; /* opaque */

/*
 * fc_chunk_index_new() - index chunks[0..n) of an ndim-dim tensor for
 * fc_chunk_intersect(): chunks sorted by dim-0 start plus a running maximum
 * of dim-0 ends, O(n log n) to build, O(n) memory.
 *
 * The index BORROWS chunks[] and the arrays it points to: they must outlive
 * it.  Chunks with a zero size are kept but never reported.  On success *out
 * is owned by the caller (fc_chunk_index_free()); NULL on failure.
 *
 * Returns FC_OK, FC_EINVAL (ndim out of range, a negative offset or size, or
 * offset + size overflowing int64; the message names the chunk), FC_ENOMEM.
 */
int fc_chunk_index_new(struct fc_chunk_index **out, int ndim, const struct fc_box *chunks,
                       size_t n);
void fc_chunk_index_free(struct fc_chunk_index *idx); /* accepts NULL */

/* One (source chunk, overlap) pair, in global tensor coordinates. */
struct fc_overlap {
    size_t chunk; /* index into the chunks[] given to fc_chunk_index_new() */
    int64_t offsets[FC_MAX_DIMS];
    int64_t sizes[FC_MAX_DIMS]; /* all > 0 */
};

/*
 * fc_chunk_intersect() - every non-empty intersection of an indexed chunk with
 * the target box (target_offsets/target_sizes, ndim entries each).
 *
 * Binary search on the running maximum of dim-0 ends skips every chunk
 * ending before the target starts; the scan stops at the first chunk
 * starting after the target ends: O(log n + m) for chunks disjoint along dim
 * 0, m = chunks overlapping the target's dim-0 range.  Results come in
 * (dim-0 start, chunk index) order.  The caller derives, per dim, the offset
 * inside the source chunk (overlap - chunk offset) and inside the target
 * (overlap - target offset).
 *
 * On success *out is an array of *n_out entries owned by the caller
 * (fc_free()), or NULL when there is none.  Returns FC_OK, FC_EINVAL (a
 * negative target offset or size), FC_ENOMEM.
 */
int fc_chunk_intersect(const struct fc_chunk_index *idx, const int64_t *target_offsets,
                       const int64_t *target_sizes, struct fc_overlap **out, size_t *n_out);

#endif
