/*
 * plan.h - the complete DCP write plan, decided before any byte moves.
 *
 * fc_plan_build() turns a mesh, a list of tensors (key, dtype, global shape,
 * placement, tie) and a list of non-tensor values into every chunk (box) of
 * every tensor, the DCP item that stores each distinct chunk, the rank file
 * that item goes to, and its byte offset and length in that file.  It is
 * pure: no I/O, no printing, no format module; the only outside knowledge is
 * the byte length of one tensor item (a torch.save blob), which the caller
 * supplies through a callback.  Textual output (--dry-run) goes into a
 * struct fc_buf via fc_plan_describe().
 *
 * Boxes (struct fc_box), the coverage checker and the intersection index are
 * in lib/format/fc_chunks.h, shared with the DCP reader.
 *
 * Invariants of a built plan (checked by tests/unit/test_plan.c and
 * tests/fuzz/fuzz_plan.c):
 *
 *  1. Chunks.  Each tensor owns chunks[first_chunk .. first_chunk+nchunks),
 *     one per DISTINCT box that some rank holds (fc_mesh_box() under the
 *     tensor's placements pl[]): replicas and identical empty boxes collapse
 *     into one chunk, as DCP's dedup by (fqn, offsets) does.  Chunks are
 *     ordered by their offset tuples (lexicographically), which are pairwise
 *     distinct; their non-empty boxes tile the tensor exactly once.  For
 *     FC_PLACE_SHARD0 on a mesh without tp, with L = shape[0] and S the
 *     dp_shard size: chunks 0..k-1 are the k = fc_mesh_nonempty_chunks(L, S)
 *     pieces with length > 0 along dim 0, followed, when k < S, by ONE chunk
 *     at dim-0 offset L with length 0.  For FC_PLACE_REPLICATE there is one
 *     chunk, offsets 0, sizes = shape (a 0-d tensor: one chunk with ndim 0).
 *     A tensor whose placements torch cannot round-trip
 *     (fc_mesh_check_layout()) is refused.
 *  2. Holders.  The ranks holding chunk c are the union of its holder boxes
 *     holders[c.first_holder .. + c.nholders): each is a product of one
 *     coordinate range per mesh dim (fc_plan_chunk_holds()).
 *  3. Items.  One item per value and one per chunk of a non-alias tensor.
 *     An alias tensor (weight tying) has its own chunks (same boxes as its
 *     root) whose `item` is the root chunk's item: no bytes are stored twice.
 *     Every item's rank is one of the holders of what it stores (values: any
 *     rank).
 *  4. Owners.  Items are assigned in plan order - values in input order, then
 *     non-alias tensors in input order, chunks in chunk order - greedily to
 *     the holder with the fewest item bytes assigned so far, ties to the
 *     lowest rank (DCP's dedup_save_plans; it weighs tensors by raw storage
 *     bytes and values as 1, we weigh every item by its planned length, which
 *     balances the files better).  Chunks with one holder (Shard(0) on a 1-D
 *     mesh) have no choice but still add to their rank's load.  A segment
 *     tree over (load, rank) makes each choice O(runs log W), runs = the
 *     holder boxes' runs of contiguous ranks (R for HSDP, R * S for a
 *     tp-sharded box), so building is O(items * runs log W + chunks * ndim)
 *     time and O(W + chunks * ndim) memory, W = world size.
 *  5. Files.  One file per rank, files[r] named "__{r}_0.distcp", created
 *     even when empty.  items[] is grouped by file in write order:
 *     files[r].first_item .. + nitems; within a file, bytes items first
 *     (value order), then tensor items (tensor order, chunk order), back to
 *     back with no padding: the first item is at offset 0, each next one at
 *     the previous offset + length, and files[r].nbytes is the sum of the
 *     lengths (fc_plan_align_items() may then open gaps before large tensor
 *     items).  total_bytes is the sum over files.  No sum overflows uint64.
 *  6. Determinism.  The plan is a pure function of its inputs (and of the
 *     callback's answers): building twice gives identical plans.
 *  7. Keys.  Tensor and value keys are pairwise distinct across tensors and
 *     values (FC_EINVAL otherwise); the planner gives them no other meaning.
 *
 * Ownership: a struct fc_plan and everything it points to (keys, boxes) is
 * owned by the plan and freed by fc_plan_free(); every pointer the plan gives
 * out is borrowed and lives as long as the plan.  Inputs are copied; the
 * caller may free them after fc_plan_build() returns.  A built plan is
 * read-only and may be shared between threads.
 */
#ifndef FC_PLAN_H
#define FC_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "fc_buf.h"
#include "fc_chunks.h"
#include "fc_dtype.h"
#include "fc_tensor.h"
#include "mesh.h"

/* One tensor to plan.  All fields are read; nothing is kept after the call. */
struct fc_plan_tensor_in {
    const char *key;             /* flattened FQN; non-NULL */
    fc_dtype dtype;              /* must have an fc_dtype_info() row */
    int ndim;                    /* 0 .. FC_MAX_DIMS */
    int64_t shape[FC_MAX_DIMS];  /* global shape; dims >= 0, numel * elem size fits uint64 */
    enum fc_placement placement; /* FC_PLACE_SHARD0 needs ndim >= 1 */
    int tp_dim;                  /* dim sharded over the mesh's tp dim, -1: Replicate() on tp;
                                    ignored on a mesh without tp */
    int64_t alias_of;            /* -1, or index of an EARLIER tensor sharing the same bytes
                                    (same dtype, ndim, shape, placement, tp_dim); chains allowed */
    size_t tag;                  /* the caller's own index of the tensor, kept in the plan */
};

/* One non-tensor value (a DCP bytes item): blob_size = its torch.save blob length. */
struct fc_plan_value_in {
    const char *key;
    uint64_t blob_size;
};

/*
 * Byte length of the stored item of one tensor chunk of `dtype` and chunk
 * shape sizes[0..ndim) (a torch.save blob; the caller derives it from the
 * zip layout).  Called once per non-alias chunk, in plan order, during
 * fc_plan_build(); sizes is borrowed for the call.  Returns FC_OK and sets
 * *nbytes_out, or a negative fc_err (with its message set), which
 * fc_plan_build() returns unchanged.
 */
typedef int (*fc_plan_blob_size_fn)(void *ctx, fc_dtype dtype, const int64_t *sizes, int ndim,
                                    uint64_t *nbytes_out);

enum fc_plan_item_kind {
    FC_ITEM_BYTES = 0, /* a value: index is into values[] */
    FC_ITEM_TENSOR     /* a tensor chunk: index into tensors[], chunk into chunks[] */
};

struct fc_plan_tensor {
    const char *key;
    fc_dtype dtype;
    int ndim;
    int64_t shape[FC_MAX_DIMS];
    enum fc_placement placement;
    int tp_dim;                                   /* -1 when not sharded on tp */
    struct fc_dim_placement pl[FC_MESH_MAX_DIMS]; /* per mesh dim (fc_mesh_placements()) */
    size_t alias_of;    /* SIZE_MAX, or the ROOT (non-alias) tensor whose items it shares */
    size_t first_chunk; /* its chunks are chunks[first_chunk .. first_chunk + nchunks) */
    size_t nchunks;     /* >= 1 */
    size_t tag;         /* the input's tag, untouched (full-to-dcp: its xform spec) */
};

struct fc_plan_chunk {
    struct fc_box box;   /* tensors[tensor].ndim entries each, owned by the plan */
    size_t tensor;       /* the tensor this chunk belongs to */
    size_t item;         /* the item storing its bytes (the root's item for an alias) */
    size_t first_holder; /* holders: see invariant 2 */
    size_t nholders;     /* >= 1 */
};

/* Ranks whose coordinate on every mesh dim i lies in [lo[i], hi[i]). */
struct fc_plan_holder {
    int lo[FC_MESH_MAX_DIMS];
    int hi[FC_MESH_MAX_DIMS];
};

struct fc_plan_value {
    const char *key;
    size_t item;
};

struct fc_plan_item {
    enum fc_plan_item_kind kind;
    size_t index;    /* value index (bytes) or tensor index (tensor; never an alias) */
    size_t chunk;    /* tensor items: index into chunks[]; SIZE_MAX for bytes */
    int rank;        /* owner = the file files[rank] */
    uint64_t offset; /* byte offset in that file */
    uint64_t length; /* byte length */
};

#define FC_PLAN_FILE_NAME_MAX 64

struct fc_plan_file {
    char name[FC_PLAN_FILE_NAME_MAX]; /* "__{rank}_0.distcp" (fc_plan_relayout may rename) */
    int rank;
    uint64_t nbytes;   /* file size */
    size_t first_item; /* its items are items[first_item .. first_item + nitems) */
    size_t nitems;
};

struct fc_plan {
    struct fc_mesh mesh;
    struct fc_plan_tensor *tensors;
    size_t ntensors;
    struct fc_plan_value *values;
    size_t nvalues;
    struct fc_plan_chunk *chunks;
    size_t nchunks;
    struct fc_plan_holder *holders;
    size_t nholders;
    struct fc_plan_item *items; /* grouped by file in write order */
    size_t nitems;
    struct fc_plan_file *files; /* files[r] for r in [0, world) */
    size_t nfiles;
    uint64_t total_bytes;
    /* private: backing storage for boxes and keys */
    int64_t *dims_;
    char *strings_;
};

/*
 * fc_plan_build() - plan a full -> DCP conversion onto `mesh`.
 *
 * tensors/values may be NULL when their count is 0.  blob_size is required
 * when ntensors > 0.  On success *out is a new plan owned by the caller
 * (fc_plan_free()); on failure *out is NULL.
 *
 * Returns FC_OK; FC_EINVAL for an invalid mesh, a tensor with a bad dtype,
 * ndim, shape, placement or tp_dim, a layout torch cannot round-trip
 * (fc_mesh_check_layout()), an alias that is not an earlier tensor or
 * differs in dtype/shape/placement, a duplicate key, or file sizes overflowing
 * uint64 (the message names the key); FC_ENOMEM; or whatever the callback
 * returned.
 */
int fc_plan_build(struct fc_plan **out, const struct fc_mesh *mesh,
                  const struct fc_plan_tensor_in *tensors, size_t ntensors,
                  const struct fc_plan_value_in *values, size_t nvalues,
                  fc_plan_blob_size_fn blob_size, void *ctx);

void fc_plan_free(struct fc_plan *plan); /* accepts NULL */

/*
 * Another item encoding's file layout (fc_plan_relayout()): for file `file`,
 * whose items are already in their final order, write its name into name
 * (namesize bytes) and set *head_bytes to the bytes that precede its first
 * item (a header, which may list the items).  Returns FC_OK or an fc_err.
 */
typedef int (*fc_plan_file_head_fn)(void *ctx, const struct fc_plan *plan, size_t file, char *name,
                                    size_t namesize, uint64_t *head_bytes);

/*
 * fc_plan_relayout() - re-lay a built plan's files for an encoding whose
 * items are the bare tensor bytes (safetensors): the blob_size callback
 * given to fc_plan_build() returned numel * element size, and every
 * chunk's owner stays as planned.  Within each file the items are reordered
 * (stably) by descending element size, so items packed back to back stay
 * aligned to their element size; then head() names the file and sizes its
 * header, and the items follow it back to back.  Invariant 5 then holds
 * with "first item at offset head_bytes" and the element-size order.  The
 * plan must hold no values (FC_EINVAL).  Returns FC_OK, FC_EINVAL, FC_ENOMEM
 * or head()'s error.
 */
int fc_plan_relayout(struct fc_plan *plan, fc_plan_file_head_fn head, void *ctx);

/*
 * An encoding that puts each item where its format says (a torch.save
 * archive of many storages: fc_plan_place()): for file `file`, write its name
 * into name (namesize bytes), set the offset of each of its items
 * (offsets[i] for plan->items[first_item + i], in their current order) and
 * *file_bytes.  Returns FC_OK or an fc_err.
 */
typedef int (*fc_plan_place_fn)(void *ctx, const struct fc_plan *plan, size_t file, char *name,
                                size_t namesize, uint64_t *offsets, uint64_t *file_bytes);

/*
 * fc_plan_place() - re-lay a built plan's files with place(): items keep
 * their order and owners and take the offsets place() gives them, which may
 * leave gaps (the encoding's own bytes, written around the items) but must
 * not overlap or pass the file's end (FC_EINVAL, a bug in place()).  The plan
 * must hold no values.  Returns FC_OK, FC_EINVAL, FC_ENOMEM or place()'s
 * error.
 */
int fc_plan_place(struct fc_plan *plan, fc_plan_place_fn place, void *ctx);

/*
 * fc_plan_split_files() - for encodings that store several items per rank,
 * each in its own file (torch_checkpointing: model_<r>.pt, optimizer_<r>.pt):
 * split every rank file into ngroups files by group[tensor] (0 .. ngroups-1),
 * files[g * world + r] holding rank r's items of group g in their order.
 * Items then name their file (item.rank is the file index, files[].rank the
 * rank).  Call after fc_plan_store_at_holders(), before fc_plan_place().
 * Returns FC_OK, FC_EINVAL (ngroups < 1 or a group out of range), FC_ENOMEM.
 */
int fc_plan_split_files(struct fc_plan *plan, const int *group, int ngroups);

/*
 * fc_plan_align_items() - re-lay a built plan's files in the same item order,
 * each tensor item whose chunk holds at least min_bytes (numel * element
 * size) starting at the next multiple of align (a power of two), every other
 * item right after its predecessor.  Gaps between items hold zeros (the
 * executor writes them, or leaves a hole); invariant 5 then holds with
 * "each next one at or after the previous offset + length" and
 * files[r].nbytes the end of the last item.  Decided before any byte moves,
 * like the rest of the plan.  Returns FC_OK or FC_EINVAL (a file size
 * overflowing uint64).
 */
int fc_plan_align_items(struct fc_plan *plan, uint64_t align, uint64_t min_bytes);

/*
 * fc_plan_store_at_holders() - give every rank an item for every chunk it
 * holds, for encodings whose rank files each hold the rank's whole local
 * state (torch_checkpointing: a rank loads its own file only): items are
 * added, in file r after r's own, for each (tensor, box of rank r) that
 * another rank's item stored, alias tensors included (each key is stored
 * under its own name).  The copies of a chunk hold the same bytes, so the
 * executor reads them once.  Call before fc_plan_relayout() (which lays the
 * files out again); chunks keep pointing at one of their items.  The plan
 * must hold no values.  Returns FC_OK, FC_EINVAL (values), FC_ENOMEM.
 */
int fc_plan_store_at_holders(struct fc_plan *plan);

/*
 * fc_plan_file_name() - "__{rank}_0.distcp" into buf (FC_PLAN_FILE_NAME_MAX
 * bytes suffice for any int rank).  Returns FC_OK, or FC_EINVAL when it does
 * not fit.
 */
int fc_plan_file_name(int rank, char *buf, size_t bufsize);

/*
 * fc_plan_rank_chunk() - index into plan->chunks of the box that `rank`
 * holds of tensor `tensor` (even when that chunk's item is stored in another
 * rank's file); O(ndim log nchunks).  Preconditions (asserted): tensor <
 * ntensors, 0 <= rank < world.
 */
size_t fc_plan_rank_chunk(const struct fc_plan *plan, size_t tensor, int rank);

/* fc_plan_chunk_holds() - 1 when `rank` is one of chunk `chunk`'s holders. */
int fc_plan_chunk_holds(const struct fc_plan *plan, size_t chunk, int rank);

/*
 * fc_plan_rank_box() - copy the box of fc_plan_rank_chunk() into
 * offsets_out/sizes_out (tensors[tensor].ndim entries each).  Equals
 * fc_mesh_box() for the tensor's shape and placements.
 */
void fc_plan_rank_box(const struct fc_plan *plan, size_t tensor, int rank, int64_t *offsets_out,
                      int64_t *sizes_out);

/*
 * fc_plan_describe() - append the --dry-run text of the plan to out.
 *
 * Format (one record per line, fields separated by two spaces; keys are
 * written with bytes outside printable ASCII, and backslash, as \xNN):
 *
 *   plan: mesh <fc_mesh_describe> (world W); T tensors, V values; I items in W files, B bytes
 *   value <key>  ->  <file>  offset <o>  bytes <n>                  (one per value)
 *   tensor <key>  <dtype> [d0, d1]  <placement>[  alias of <key>]   (one per tensor)
 *     box [a:b, c:d]  ranks <set>  ->  <file>  offset <o>  bytes <n>[  (empty)][  (shared)]
 *   file <name>  <n> items  <b> bytes                               (one per file)
 *
 * A box line follows its tensor line, one per chunk.  Boxes are half-open
 * Python slices per dim ("[]" for 0-d).  <set> is "all", or the holder
 * ranks as comma-separated runs "a" / "a-b" in rank order (at most 8 runs,
 * then ", ... (N ranks)").  "(empty)" marks a zero-element box, "(shared)" an
 * alias's chunk whose bytes are the root's item.  <placement> is
 * fc_mesh_placement_name().
 *
 * Returns FC_OK or FC_ENOMEM (out's cap exceeded; out keeps what fit).
 */
int fc_plan_describe(const struct fc_plan *plan, struct fc_buf *out);

#endif
