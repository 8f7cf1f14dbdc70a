/*
 * fc_dcp.h - the metadata of a PyTorch Distributed Checkpoint (.metadata),
 * as a plain C model, and its pickle reader and writer (dcp-format.md 2).
 *
 * A checkpoint is a list of entries keyed by flattened FQN.  A tensor entry
 * has a dtype, a global size and chunks (boxes: per-dim offsets and sizes),
 * each stored as one item of a .distcp file; a bytes entry is one stored item
 * (a torch.save blob of a non-tensor value).  planner_data (the original
 * nesting of each key) is kept on the entry as a path.
 *
 * Invariants of a model built by the functions below or by fc_dcp_meta_read():
 *   - FQNs are unique, NUL-free strings; entries keep their insertion (file)
 *     order; fc_dcp_meta_find() looks them up in O(1).
 *   - 0 <= ndim <= FC_MAX_DIMS; every chunk of a tensor has the tensor's ndim;
 *     sizes and offsets are >= 0.  A 0-d tensor has one chunk with ndim 0.
 *   - a storage with relative_path == NULL is "not set" (a model being built).
 *     fc_dcp_meta_read() never returns a chunk or bytes entry without storage.
 *   - Coverage (chunks in bounds, no overlap, volume == numel) is NOT an
 *     invariant: fc_dcp_check() tests it.
 *
 * Ownership: every string, array and path hangs off the struct fc_dcp_meta
 * and is freed by fc_dcp_meta_free().  Functions that add entries or chunks
 * may move the arrays, so keep indices, not pointers, across such calls.
 * A model is not thread-safe to modify; concurrent reads are fine.
 */
#ifndef FC_DCP_H
#define FC_DCP_H

#include <stddef.h>
#include <stdint.h>

#include "fc_buf.h"
#include "fc_dtype.h"
#include "fc_path.h"
#include "fc_strmap.h"
#include "fc_tensor.h"

/* Metadata.version written by torch >= ~2.5 (CURRENT_DCP_VERSION). */
#define FC_DCP_VERSION "1.0.0"

/* Transform descriptor of torch's ZStandard stream extension (dcp-format.md 3.5). */
#define FC_DCP_TRANSFORM_ZSTD "stream.zstd/1"

enum fc_dcp_kind { FC_DCP_TENSOR, FC_DCP_BYTES };

/* _MEM_FORMAT_ENCODING values (both spellings of the enum map here). */
enum fc_dcp_mem_format {
    FC_DCP_CONTIGUOUS_FORMAT = 0,
    FC_DCP_CHANNELS_LAST = 1,
    FC_DCP_PRESERVE_FORMAT = 2
};

/*
 * _StorageInfo: where one item's bytes live.  File names and transform lists
 * are interned by the model (a million chunks name a thousand files): the
 * pointers are the model's and compare equal for equal contents.
 */
struct fc_dcp_storage {
    const char *relative_path;     /* file name inside the checkpoint dir; NULL = not set */
    const char *const *transforms; /* transform_descriptors ("stream.zstd/1"), in file order */
    size_t ntransforms;            /* 0: none (the field is absent from the pickle) */
    uint64_t offset;               /* byte offset of the item in that file */
    uint64_t length;               /* exact byte length of the item (after transforms) */
};

/*
 * ChunkStorageMetadata + its storage_data entry.  offsets and sizes point
 * into the model's dims store (never moved or freed before the model).
 */
struct fc_dcp_chunk {
    const int64_t *offsets; /* ndim values (NULL when ndim == 0) */
    const int64_t *sizes;   /* ndim values, stored right after offsets */
    struct fc_dcp_storage storage;
};

struct fc_dcp_entry {
    char *fqn;
    enum fc_dcp_kind kind;

    /* planner_data[fqn]: the original nesting; path == NULL when absent. */
    struct fc_path_elem *path; /* keys point into the same allocation */
    size_t path_len;

    /* FC_DCP_TENSOR: TensorStorageMetadata */
    fc_dtype dtype;
    int ndim;
    int64_t size[FC_MAX_DIMS]; /* global shape */
    int requires_grad;         /* TensorProperties flags (deprecated in torch) */
    int pin_memory;
    enum fc_dcp_mem_format mem_format;
    int has_strides;              /* 6-tuple state of newer torch (2.15 writes it); */
    int64_t strides[FC_MAX_DIMS]; /* informational, never written (we emit 5-tuples) */
    struct fc_dcp_chunk *chunks;
    size_t nchunks;
    size_t chunks_alloc;

    /* FC_DCP_BYTES: the one stored item */
    struct fc_dcp_storage storage;
};

struct fc_dcp_meta {
    struct fc_dcp_entry *entries;
    size_t nentries;
    size_t entries_alloc;

    /*
     * planner_data: 1 when it is a dict (the default planner), 0 when None
     * (flatten_state_dict=False) or a shape we do not interpret
     * (planner_data_ignored = 1 then; custom planners).  Keys of that dict
     * that name no entry are dropped (counted in planner_data_dropped).
     */
    int has_planner_data;
    int planner_data_ignored;
    size_t planner_data_dropped;

    /* storage_data items whose key matches no chunk/bytes entry (torch ignores them). */
    size_t orphan_storage;

    /* StorageMeta; has_storage_meta = 0 means None. */
    int has_storage_meta;
    char *checkpoint_id;        /* str, or a Path object flattened to a string; may be NULL */
    int checkpoint_id_was_path; /* read from a pathlib object (informational) */
    char *save_id;              /* may be NULL */
    char **modules;
    size_t nmodules;

    char *version; /* Metadata.version; NULL when absent/None */

    /* private: FQN -> entry index (keys borrowed from entries[].fqn) */
    struct fc_strmap index;
    /* private: interned file names and transform lists, and the chunks' dims store */
    struct fc_strmap interned; /* name (or descriptors joined by '\n') -> index in strings */
    char **strings;
    const char ***xform_lists; /* per interned string: its transform list, when it is one */
    size_t nstrings, strings_alloc;
    struct fc_dcp_dims *dims; /* blocks of int64, newest first */
};

/*
 * fc_dcp_meta_new() - an empty model: no entries, version FC_DCP_VERSION,
 * has_planner_data 1, no storage_meta.  *out is owned by the caller
 * (fc_dcp_meta_free); NULL on failure.  Returns FC_OK or FC_ENOMEM.
 */
int fc_dcp_meta_new(struct fc_dcp_meta **out);
void fc_dcp_meta_free(struct fc_dcp_meta *m); /* accepts NULL */

/* Index of the entry named fqn, or -1. */
long fc_dcp_meta_find(const struct fc_dcp_meta *m, const char *fqn);

/*
 * fc_dcp_meta_add_tensor() - append a tensor entry (no chunks yet) with
 * properties dtype, contiguous, requires_grad/pin_memory false.  size holds
 * ndim dims (may be NULL when ndim == 0).  *index_out (may be NULL) receives
 * the entry index.  Returns FC_OK, FC_EINVAL (duplicate or NUL-containing
 * fqn, invalid dtype, ndim out of range, negative dim), FC_ENOMEM.
 */
int fc_dcp_meta_add_tensor(struct fc_dcp_meta *m, const char *fqn, fc_dtype dtype, int ndim,
                           const int64_t *size, size_t *index_out);

/* fc_dcp_meta_add_bytes() - append a bytes entry; as above otherwise. */
int fc_dcp_meta_add_bytes(struct fc_dcp_meta *m, const char *fqn, size_t *index_out);

/*
 * fc_dcp_meta_add_chunk() - append a chunk (offsets/sizes of the tensor's
 * ndim, NULL allowed for 0-d) to tensor entry `entry`; its storage is unset.
 * *chunk_out (may be NULL) receives the chunk index.  Bounds are not checked
 * here, nor duplicate offsets (fc_dcp_check does both).  Returns FC_OK,
 * FC_EINVAL (not a tensor, negative value), FC_ENOMEM.
 */
int fc_dcp_meta_add_chunk(struct fc_dcp_meta *m, size_t entry, const int64_t *offsets,
                          const int64_t *sizes, size_t *chunk_out);

/*
 * fc_dcp_storage_set() - set relative_path/offset/length of a storage of m
 * (m->entries[e].chunks[c].storage or m->entries[e].storage), replacing a
 * previous value and dropping its transforms.  relative_path must be a plain
 * file name (not empty, no '/', not "." or "..").  Returns FC_OK, FC_EINVAL
 * (bad name, offset or length above INT64_MAX), FC_ENOMEM.
 */
int fc_dcp_storage_set(struct fc_dcp_meta *m, struct fc_dcp_storage *st, const char *relative_path,
                       uint64_t offset, uint64_t length);

/* fc_dcp_storage_add_transform() - append a transform descriptor ("stream.zstd/1"). */
int fc_dcp_storage_add_transform(struct fc_dcp_meta *m, struct fc_dcp_storage *st,
                                 const char *descriptor);

/*
 * fc_dcp_meta_set_path() - set planner_data for entry `entry` (a deep copy
 * of path[0..n)).  Returns FC_OK, FC_EINVAL (n == 0, a NULL key), FC_ENOMEM.
 */
int fc_dcp_meta_set_path(struct fc_dcp_meta *m, size_t entry, const struct fc_path_elem *path,
                         size_t n);

/*
 * fc_dcp_meta_set_storage_meta() - set StorageMeta (has_storage_meta = 1)
 * with copies of checkpoint_id and save_id (either may be NULL = None) and no
 * modules.  Returns FC_OK or FC_ENOMEM.
 */
int fc_dcp_meta_set_storage_meta(struct fc_dcp_meta *m, const char *checkpoint_id,
                                 const char *save_id);
int fc_dcp_meta_add_module(struct fc_dcp_meta *m, const char *module);

/* fc_dcp_meta_set_version() - a copy of version, or NULL for None. */
int fc_dcp_meta_set_version(struct fc_dcp_meta *m, const char *version);

/*
 * fc_dcp_meta_write() - append the pickle of m to out in the maximally
 * compatible form of dcp-format.md 6: protocol 2 (repeated names memoised, fc_pw_memoize), GLOBAL
 * opcodes, the DCP class spellings, TensorProperties as a 5-tuple with the _MEM_FORMAT_ENCODING
 * value form, MetadataIndex {fqn, index, offset} for chunks and {fqn, index: None} for bytes,
 * _StorageInfo {relative_path, offset, length} (+ transform_descriptors when present), StorageMeta
 * with a str checkpoint_id, planner_data for the entries that have a path.  The same model always
 * gives the same bytes.  On failure out may hold a partial pickle.  Returns FC_OK, FC_EINVAL (a
 * chunk or bytes entry without storage, a tensor with an invalid dtype), FC_ENOMEM.
 */
int fc_dcp_meta_write(struct fc_buf *out, const struct fc_dcp_meta *m);

/*
 * fc_dcp_meta_read() - parse a .metadata pickle (dcp-format.md 2.4) with
 * fc_pickle_load(FC_PICKLE_SYMBOLIC); only allowlisted symbols are
 * interpreted and nothing executes.  `what` names the input in messages
 * ("ckpt/.metadata").  On success *out is owned by the caller; on failure it
 * is NULL and fc_error_last() says what is wrong and where.
 *
 * Returns FC_OK, FC_ECORRUPT (truncated or malformed pickle, a chunk without
 * storage_data, chunk ndim != tensor ndim, negative sizes, duplicate keys),
 * FC_EFORMAT (not a DCP Metadata, unknown dtype, unsupported layout, more
 * than FC_MAX_DIMS dims, a disallowed pickle construct), FC_ENOMEM.
 */
int fc_dcp_meta_read(struct fc_dcp_meta **out, const unsigned char *data, size_t len,
                     const char *what);

/*
 * fc_dcp_meta_load() - read the file at path (at most FC_DCP_META_MAX_BYTES)
 * and fc_dcp_meta_read() it.  Returns those codes plus FC_ENOENT and FC_EIO.
 */
#define FC_DCP_META_MAX_BYTES ((size_t)1 << 30)
int fc_dcp_meta_load(struct fc_dcp_meta **out, const char *path);

/*
 * fc_dcp_check() - verify coverage (dcp-format.md 4.3): every chunk and
 * bytes entry has storage, and each tensor's chunks tile it exactly once
 * (fc_chunks_check_tiling(): in bounds, no overlap, no gap).  One report line
 * per problem (a tensor's first overlap and gap, or storage missing) is
 * appended to report (may be NULL; at most 100 lines, then "... and N more
 * lines").  Chunks with identical boxes are replicas (rank-local metadata
 * lists a replicated item once per rank; fc_chunks_replicas()), not
 * problems: *replicas (may be NULL) receives their count.  Returns FC_OK when
 * everything holds, FC_ECORRUPT (message names the first problem and the
 * total), FC_ENOMEM.
 */
int fc_dcp_check(const struct fc_dcp_meta *m, struct fc_buf *report, size_t *replicas);

#endif
