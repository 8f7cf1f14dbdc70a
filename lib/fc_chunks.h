/*
 * fc_chunks.h - boxes of a chunked tensor, and two helpers on arbitrary chunk
 * lists (the planner's own and those of a DCP checkpoint written by PyTorch):
 * the coverage checker that inspect (through fc_dcp_check()) and the
 * planner's tests use, and the intersection index the DCP source reads
 * boxes through.  Pure: no I/O.
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
/* Coverage of an arbitrary chunk list (inspect, DCP readers).               */

/* Each kind of problem is listed at most this many times in the report. */
#define FC_COVERAGE_REPORT_MAX 8

struct fc_coverage {
    size_t nchunks;
    size_t empty;             /* in-bounds chunks with zero elements */
    size_t out_of_bounds;     /* chunks with an offset or size < 0, or past the shape */
    size_t duplicate_offsets; /* chunks whose offsets equal those of an earlier chunk
                                 (DCP keys storage by (fqn, offsets): one of them is lost) */
    uint64_t overlaps;        /* pairs of non-empty in-bounds chunks that intersect */
    uint64_t gaps;            /* uncovered boxes of the grid cut by all chunk edges */
    uint64_t missing_elems;   /* elements covered by no in-bounds chunk */
    size_t replicas;          /* FC_COVERAGE_REPLICAS: chunks whose box equals an earlier
                                 chunk's (0 without the flag) */
    int exact;                /* 1: every count is exact; 0: a work bound was hit on a
                                 pathological list and overlaps/gaps/missing_elems are
                                 lower bounds */
};

/*
 * Flags of fc_chunks_check_coverage().  FC_COVERAGE_REPLICAS: a chunk whose
 * box (offsets and sizes) equals an earlier chunk's is a replica of it, the
 * same elements saved again (DCP rank-local metadata lists a replicated item
 * once per rank): counted in ->replicas and otherwise ignored, never a
 * duplicate offset or an overlap.  Without it (the planner) identical boxes
 * are problems like any other.
 */
#define FC_COVERAGE_REPLICAS 1u

/*
 * fc_chunks_replicas() - first_of[i] = the lowest index of a chunk with the
 * same box as chunk i (i itself when none), for the n chunks; *nreplicas =
 * how many chunks have first_of[i] != i.  Sorts by offsets: O(n d log n)
 * plus the pairs of chunks with equal offsets.  Returns FC_OK or FC_ENOMEM.
 */
int fc_chunks_replicas(int ndim, const struct fc_box *chunks, size_t n, size_t *first_of,
                       size_t *nreplicas);

/*
 * fc_chunks_check_coverage() - do chunks[0..n) tile a tensor of `shape`
 * exactly once?  Works on any list (PyTorch-written included); empty chunks
 * never count as overlaps; out-of-bounds chunks are counted and otherwise
 * ignored.  A perfect tiling has out_of_bounds, duplicate_offsets, overlaps,
 * gaps and missing_elems all 0 (fc_coverage_ok()).
 *
 * Algorithm and cost (n chunks, d dims):
 *   - bounds and emptiness: O(n d);
 *   - duplicate offsets: sort by offset tuple, O(n d log n);
 *   - overlaps: sweep along the dim with the most distinct chunk edges; each
 *     chunk is tested only against chunks starting before it ends on that
 *     dim: O(n d log n + d K), K = pairs overlapping on the sweep dim.  K = 0
 *     for any valid 1-D sharding (on any dim), about n * (t-1) / 2 for a valid
 *     t-wide 2-D grid; bounded by 2^26 tests, beyond which exact = 0;
 *   - gaps / missing elements: the per-dim sorted edges (incl. 0 and the
 *     shape) cut the tensor into a grid of cells; each chunk marks its cells;
 *     uncovered cells are the gaps.  O(C + covered cells), C = cell count,
 *     which is n for a 1-D sharding and about n for a 2-D grid; when C
 *     exceeds 2^24 only the volume deficit is used (exact if no overlaps,
 *     else a lower bound, exact = 0).  0-d tensors: every pair of 0-d chunks
 *     overlaps, counted arithmetically.
 *
 * If report is not NULL, one line per problem ("out of bounds: ...",
 * "duplicate offsets: ...", "overlap: ...", "gap: ...") is appended, at most
 * FC_COVERAGE_REPORT_MAX per kind, then "... and N more <kind>".
 *
 * Returns FC_OK (whatever the coverage; results in *out), FC_EINVAL when
 * ndim is outside [0, FC_MAX_DIMS], a dim of shape is negative or the shape's
 * element count overflows int64, or FC_ENOMEM.
 */
int fc_chunks_check_coverage(int ndim, const int64_t *shape, const struct fc_box *chunks, size_t n,
                             unsigned flags, struct fc_coverage *out, struct fc_buf *report);

/* fc_coverage_ok() - 1 when the list tiles the tensor exactly once. */
int fc_coverage_ok(const struct fc_coverage *cov);

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
