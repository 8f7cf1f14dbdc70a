/*
 * fc_source_backend.h - what lib/source/'s files share, not for use outside
 * lib/source/.
 *
 * The front (fc_source.c) probes a path with each row of the backend table
 * and lets the first that claims it open it; then it dispatches box reads and
 * value access to the source's row.  A backend (fc_source_torchsave.c,
 * fc_source_safetensors.c, fc_source_dcp.c, fc_source_tcp.c) is one such row
 * plus its parser.
 * Backends build their source with the functions of fc_source_core.c and
 * read chunked tensors with the box reader of fc_source_box.c; they never
 * call the front.
 *
 * Adding an input format: a backend file defining its row (probe, open, the
 * ops it needs), declared below and listed in fc_source_backends[]
 * (fc_source.c), with its parser in lib/format/.
 */
#ifndef FC_SOURCE_BACKEND_H
#define FC_SOURCE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "fc_source.h"

/* ---- probing (fc_source_core.c) ---- */

/*
 * What backends look at to claim a path.  The directory listing and the
 * file's first bytes are read on first use only, so a probe that decides by
 * name (".json", a .metadata file) reads nothing else.
 */
struct fc_probe {
    const char *path;
    int is_dir;
    /* directories (fc_probe_names): the entry names but dot files, sorted */
    char **names;
    size_t nnames;
    int listed;
    /* files (fc_probe_head): the first bytes and the file size */
    unsigned char head[512];
    size_t nhead;
    uint64_t size;
    int head_read;
    const char *pick; /* set by a probe: the file of the directory it will open */
};

int fc_probe_names(struct fc_probe *p); /* FC_OK, FC_EIO, FC_ENOMEM */
int fc_probe_head(struct fc_probe *p);  /* FC_OK or fc_file_open_read's and pread's codes */
void fc_probe_release(struct fc_probe *p);

/* ---- the backend table row ---- */

struct fc_source_backend {
    const char *name; /* src->format: "torch.save", "safetensors", "dcp", ... */
    unsigned caps;    /* FC_SOURCE_CHUNKS, ... (fc_source.h) */
    /* 1: the path is this backend's, 0: not, < 0: an error that ends the probing. NULL: a
     * backend that another one turns into (sharded safetensors). */
    int (*probe)(struct fc_probe *p);
    /* Open what probe claimed; *out is set as soon as it exists (freed by the caller). */
    int (*open)(struct fc_source **out, struct fc_probe *p, unsigned flags);
    /* fc_source_read_box(); NULL: every tensor is one strided storage (storages[]). */
    int (*read_box)(const struct fc_source *src, const struct fc_entry *e, const int64_t *off,
                    const int64_t *size, void *dst);
    /* fc_source_value_storage() and fc_source_value_blob(); NULL: the source has no values. */
    int (*value_storage)(const struct fc_source *src, const struct fc_entry *e,
                         const struct fc_pv_tensor *t, struct fc_storage *out);
    int (*value_blob)(const struct fc_source *src, const struct fc_entry *e, struct fc_buf *out);
    /* fc_source_sharded_meta(); NULL: the source is not a per-rank sharded one. */
    int (*sharded_meta)(const struct fc_source *src, struct fc_dcp_meta **out);
    void (*free)(void *impl); /* src->impl; accepts NULL */
};

extern const struct fc_source_backend fc_source_dcp_backend;
extern const struct fc_source_backend fc_source_st_index_backend;
extern const struct fc_source_backend fc_source_st_backend;
extern const struct fc_source_backend fc_source_st_sharded_backend;
extern const struct fc_source_backend fc_source_torchsave_backend;
extern const struct fc_source_backend fc_source_tcp_backend;

/* ---- building a source (fc_source_core.c) ---- */

/* A source with no entries for path, of backend b, owning impl (freed by b->free). */
int fc_source_new(struct fc_source **out, const char *path, const struct fc_source_backend *b,
                  void *impl);
int fc_source_add_file(struct fc_source *src, const char *path, size_t *index_out);
int fc_source_add_storage(struct fc_source *src, const char *name, size_t file, uint64_t offset,
                          uint64_t nbytes);
/* Append an entry; takes ownership of key and path (freed on failure too). */
int fc_source_add_entry(struct fc_source *src, struct fc_entry *e);

/*
 * fc_source_index_keys() - (re)build the key index over every entry; sources
 * call it when they are complete.  FC_ECORRUPT on a duplicate key.
 */
int fc_source_index_keys(struct fc_source *src);

/* ---- the box reader (fc_source_box.c) ---- */

/*
 * fc_read_strided_box() - the generic box reader: tensor t's storage starts at
 * byte `base` of f; copy box [off, off+size) to dst C-contiguously.  A box
 * whose rows are contiguous in the file is one pread; otherwise the covering
 * span is read once (when <= 64 MiB) or run by run.  `what` names the tensor
 * in messages.  Returns FC_OK, FC_EINVAL (box outside t), FC_ECORRUPT, FC_EIO,
 * FC_ENOMEM.
 */
int fc_read_strided_box(const struct fc_file *f, uint64_t base, const struct fc_tensor_desc *t,
                        const int64_t *off, const int64_t *size, void *dst, const char *what);

/*
 * fc_box_scatter() - copy an n-d block of extents `size`, dense at srcbuf,
 * into dst (a dense box of shape dshape) at offsets doff.
 */
void fc_box_scatter(unsigned char *dst, const int64_t *dshape, const int64_t *doff,
                    const unsigned char *srcbuf, const int64_t *size, int ndim, size_t esz);

/* fc_source_read_box() of a tensor that is one strided storage (src->storages[e->storage]). */
int fc_storage_read_box(const struct fc_source *src, const struct fc_entry *e, const int64_t *off,
                        const int64_t *size, void *dst);

/*
 * Chunked sources (DCP, sharded safetensors): a tensor is assembled from
 * stored chunks, each a strided tensor in one file holding a box of the
 * global tensor.
 */
/* How a chunk is stored when it is not its box's elements, C-contiguous, from its base. */
struct fc_chunk_layout {
    struct fc_tensor_desc desc; /* the chunk tensor as stored (shape == chunk sizes) */
    uint64_t rec_off, rec_len;  /* DCP: the whole storage record (its CRC-32 covers it) */
};

/*
 * One stored chunk of a chunked tensor (DCP items, sharded safetensors).  A
 * million of them stay in memory for a 1000-rank checkpoint: 32 bytes each,
 * the common dense case needing no layout.
 */
struct fc_chunk_ref {
    uint64_t base;                        /* absolute offset of the chunk storage's element 0 */
    const struct fc_chunk_layout *layout; /* NULL: dense (the record is exactly the chunk) */
    uint32_t file;                        /* index into src->files */
    uint32_t crc;                         /* DCP: the storage record's CRC-32 (has_crc) */
    uint32_t item;    /* DCP: the chunk's index in the .metadata entry (messages) */
    uint8_t has_crc;  /* checked on the first read of the chunk */
    uint8_t verified; /* read and written with __atomic builtins: reads run on many threads */
};

struct fc_box;
struct fc_chunk_index;

/* The stored tensor of chunk ref holding box (its layout, or dense in e's dtype). */
void fc_chunk_desc(const struct fc_entry *e, const struct fc_box *box,
                   const struct fc_chunk_ref *ref, struct fc_tensor_desc *d);

/* The error of a chunk whose data's CRC-32 is crc, not ref->crc: it names the stored item. */
typedef int (*fc_crc_mismatch_fn)(const struct fc_source *src, const struct fc_entry *e,
                                  const struct fc_chunk_ref *ref, uint32_t crc);

/* A source's record of chunks read in parts (fc_source_new() makes it, fc_source_free() frees). */
struct fc_crc_fold *fc_crc_fold_new(void);
void fc_crc_fold_free(struct fc_crc_fold *fold);

/*
 * fc_chunks_read_box() - fc_source_read_box() for tensor entry e stored as
 * chunks refs[i] holding boxes[i], indexed by fc_chunk_index_new(): every
 * overlapping chunk is read into place.  The boxes must have passed
 * fc_chunks_check_tiling() (asserted: every byte of dst is written once).
 * A chunk with has_crc has its CRC-32 checked (when verifying) from the bytes
 * as they are read: at once when a read covers it, else once the parts read
 * cover it (see fc_source_verify_rest()); a part that is not one run of the
 * record (some of its columns) has the record read whole once more.  A
 * mismatch is mismatch()'s error (refs are written only to mark a chunk's
 * CRC-32 checked).
 */
int fc_chunks_read_box(const struct fc_source *src, const struct fc_entry *e,
                       struct fc_chunk_ref *refs, const struct fc_box *boxes,
                       const struct fc_chunk_index *index, fc_crc_mismatch_fn mismatch,
                       const int64_t *off, const int64_t *size, void *dst);

/*
 * fc_source_flatten() - add the leaves of torch.save archive ts as entries of
 * src, flattened as dcp.save flattens a state dict (dcp-format.md 3.6), each
 * key and path under `prefix` when it is not NULL; with values_only, the
 * non-tensor leaves only (another table names the tensors).
 */
struct fc_torchsave;
int fc_source_flatten(struct fc_source *src, const struct fc_torchsave *ts, const char *prefix,
                      int values_only);

/*
 * fc_chunks_index_tiled() - for the per-rank backends (sharded safetensors,
 * torch_checkpointing): prove that boxes[0..n) tile entry e
 * (fc_chunks_check_tiling()) and index them into *index.  Opened with
 * FC_SOURCE_UNTILED_OK, boxes that do not tile set *untiled and no index,
 * and FC_OK: inspect reports the tiling itself, and reads of e then fail.
 */
int fc_chunks_index_tiled(const struct fc_source *src, const struct fc_entry *e, int ndim,
                          const struct fc_box *boxes, size_t n, unsigned flags,
                          struct fc_chunk_index **index, int *untiled);

#endif
