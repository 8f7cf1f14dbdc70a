/*
 * fc_source.h - one interface over every input checkpoint format.
 *
 * A source lists entries - flattened key, and either a tensor (dtype, global
 * shape, where its elements live) or a non-tensor value - and reads any box
 * (per-dim offsets + sizes) of a tensor into a caller's C-contiguous buffer,
 * honouring storage offsets and strides.  full-to-dcp, reshard, inspect,
 * dcp-to-full and diff are the same machine over different sources (a DCP
 * directory is one: fc_source_open_dcp).
 *
 * Flattening follows DCP (dcp-format.md 3.6): mappings are descended with
 * str(key); a list is descended with integer indices only when it holds a
 * tensor or a container that is itself descended; tuples are leaves; keys are
 * joined with '.'.  Each entry keeps its path (for DCP planner_data).
 *
 * Invariants: entries appear in the order the input lists them; keys are
 * unique (a duplicate is FC_ECORRUPT); tensors that share bytes share a
 * storage index.  Everything an entry points to is owned by the source and
 * lives until fc_source_free().  Reading is thread-safe (pread only).
 */
#ifndef FC_SOURCE_H
#define FC_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "fc_buf.h"
#include "fc_io.h"
#include "fc_path.h"
#include "fc_pickle.h"
#include "fc_strmap.h"
#include "fc_tensor.h"

enum fc_entry_kind { FC_ENTRY_TENSOR, FC_ENTRY_VALUE };

/* Where a tensor's bytes live: one byte range of one open file. */
struct fc_storage {
    const char *name; /* record key ("0") or tensor name, for messages */
    size_t file;      /* index into the source's files */
    uint64_t offset;  /* absolute file offset of element 0 of the storage */
    uint64_t nbytes;
    unsigned nrefs; /* tensor entries using it; > 1 means shared (tied/view) */
};

/*
 * A value that torch.load reads only with weights_only=False (a DCP bytes item
 * pickling an io.BytesIO, a numpy array, an argparse.Namespace, ...).  It is
 * never unpickled: copies carry its stored bytes verbatim, and what it is comes
 * from reading its pickle symbolically (the globals it names, what its top
 * level builds).
 */
struct fc_opaque {
    const char *type;                   /* "_io.BytesIO", "argparse.Namespace", "tuple", ... */
    const struct fc_pv *const *globals; /* distinct globals the pickle names, first use first */
    size_t nglobals;
    const char *unreadable; /* NULL, or why even a symbolic reading failed (value NULL then) */
};

/*
 * fc_opaque_describe() - append, NUL-terminated, "opaque <type> (torch.load
 * needs weights_only=False; globals a.b, c.d)" or, for an unreadable pickle,
 * "opaque (pickle not readable: <why>)".  Returns FC_OK or FC_ENOMEM.
 */
int fc_opaque_describe(struct fc_buf *b, const struct fc_opaque *op);

struct fc_entry {
    const char *key;
    enum fc_entry_kind kind;
    const struct fc_path_elem *path;
    size_t path_len;
    struct fc_tensor_desc t; /* tensors: dtype, shape, strides, storage_offset */
    size_t storage;          /* tensors: index into the storage table */
    const struct fc_pv
        *value; /* values: the unpickled value (opaque: its symbolic tree, or NULL) */
    const struct fc_opaque *opaque; /* values torch loads only with weights_only=False, or NULL */
};

struct fc_crc_fold;

struct fc_source {
    const char *format; /* its backend's name: "torch.save", "safetensors", "dcp", ... */
    const char *path;   /* what the user named */
    struct fc_entry *entries;
    size_t nentries;
    struct fc_storage *storages;
    size_t nstorages;
    struct fc_file *files;
    size_t nfiles;
    const struct fc_source_backend *backend; /* the row of lib/source/'s backend table */
    int no_verify;            /* opened with FC_SOURCE_NO_VERIFY: stored CRC-32s are not checked */
    struct fc_crc_fold *fold; /* chunks read in parts, their CRC-32 not yet checked */
    void *impl;               /* the backend's state (parsed archives) */
    struct fc_strmap key_index; /* key -> entry index, for fc_source_find() */
};

/*
 * What a source's input can hold or do (its backend's capability flags), so
 * that callers ask these instead of comparing format names.
 */
#define FC_SOURCE_CHUNKS     0x1u  /* tensors are assembled from stored chunks (DCP, sharded) */
#define FC_SOURCE_COMPRESSED 0x2u  /* items may be zstd-compressed (fc_source_is_compressed()) */
#define FC_SOURCE_CRCS       0x4u  /* stored CRC-32s are checked (unless FC_SOURCE_NO_VERIFY) */
#define FC_SOURCE_VALUES     0x8u  /* may hold non-tensor values (FC_ENTRY_VALUE) */
#define FC_SOURCE_PICKLED    0x10u /* one torch.save pickle, not a checkpoint layout */
#define FC_SOURCE_LISTED     0x20u /* a metadata file names every data file (torch_checkpointing) */
unsigned fc_source_caps(const struct fc_source *src);

/*
 * fc_source_open() - detect the format of path (the first backend whose probe
 * claims it) and list its entries.
 * path may be a torch.save file, a safetensors file, a
 * model.safetensors.index.json, or a directory holding exactly one of: an
 * index.json, safetensors files (all are read), one torch.save file.
 * On success *out is owned by the caller (fc_source_free).
 * Returns FC_OK, FC_ENOENT, FC_EFORMAT, FC_ECORRUPT, FC_EIO, FC_ENOMEM.
 * flags (0 for none):
 * FC_SOURCE_UNTILED_OK: a per-rank safetensors directory whose chunks do not
 * tile a tensor opens anyway (every other command refuses it at open);
 * reading that tensor fails.  For inspect, which reports the tiling of every
 * tensor itself.
 * FC_SOURCE_NO_VERIFY (--no-verify): DCP sources do not check the zip CRC-32s
 * they otherwise check, of small records when the source is opened and of
 * each chunk's data as it is read (FC_ECORRUPT naming file and item): a read
 * of the whole chunk checks it at once; a chunk read in parts (row slabs) is
 * checked once its parts cover it, their CRCs folded (fc_crc32_combine), and
 * fc_source_verify_rest() checks what reads left partial.
 */
#define FC_SOURCE_UNTILED_OK 1u
#define FC_SOURCE_NO_VERIFY  2u
int fc_source_open(struct fc_source **out, const char *path, unsigned flags);
void fc_source_free(struct fc_source *src); /* accepts NULL */

/*
 * fc_source_open_dcp() - a DCP checkpoint directory (with .metadata) as a
 * source: entries in .metadata order, values unpickled from their items,
 * boxes assembled from the chunks that overlap them.  fc_source_open() calls
 * it for directories holding .metadata.
 */
int fc_source_open_dcp(struct fc_source **out, const char *dir, unsigned flags);

/*
 * fc_source_open_dcp_meta() - the same over metadata the caller already read
 * (fc_dcp_meta_load_dir(dir)): borrowed, it must outlive the source.  A
 * million-chunk checkpoint is then held once, not twice.
 */
struct fc_dcp_meta;
int fc_source_open_dcp_meta(struct fc_source **out, const char *dir, struct fc_dcp_meta *meta,
                            unsigned flags);

/*
 * fc_source_value_blob() - append a torch.save blob of value entry e to out:
 * the stored item itself (decompressed) when the source has one, so DCP bytes
 * items are carried verbatim, else a fresh pickle of e->value.
 */
int fc_source_value_blob(const struct fc_source *src, const struct fc_entry *e, struct fc_buf *out);

/*
 * fc_source_value_storage() - where the storage of tensor t, found inside the
 * value of entry e (a tuple holding a tensor), lives: *out gets its file,
 * absolute offset and byte length (name = its record key).  Returns FC_OK or
 * FC_ECORRUPT when the value's archive has no such storage.
 */
int fc_source_value_storage(const struct fc_source *src, const struct fc_entry *e,
                            const struct fc_pv_tensor *t, struct fc_storage *out);

/*
 * fc_source_verify_replicas() - DCP sources: every replica chunk (the same box
 * saved by several ranks, as rank-local metadata lists a replicated item) must
 * hold the same bytes as the copy that reads use.  Reads them in slabs of at
 * most 8 MiB.  Returns FC_OK (also for other sources), FC_ECORRUPT naming the
 * tensor, both chunks and their files, FC_EIO, FC_ENOMEM.
 */
int fc_source_verify_replicas(const struct fc_source *src);

/*
 * fc_source_sharded_meta() - the chunks of a per-rank sharded source as DCP
 * metadata (for inspect).  Sharded safetensors: its entries in source order;
 * every tensor of every file is a chunk of it at its saved_offsets, in file
 * order, duplicates included (reads keep the last file's), its storage the
 * file's name and the tensor's data byte range; version is the first file's
 * __metadata__ DCP_VERSION, or NULL.  torch_checkpointing: every non-empty
 * rank shard but replicas (the lowest rank's is kept), its storage the rank
 * file's path relative to the directory and the shard's bytes.  On success
 * *out is owned by the caller (fc_dcp_meta_free).  Returns FC_OK, FC_EINVAL
 * (another source), FC_ENOMEM.
 */
int fc_source_sharded_meta(const struct fc_source *src, struct fc_dcp_meta **out);

/* fc_source_is_compressed() - 1 for a DCP source whose items were zstd-compressed. */
int fc_source_is_compressed(const struct fc_source *src);

/*
 * fc_dcp_meta_load_dir() - the metadata of a DCP directory: .metadata, or,
 * when it is absent, the merge of every rank-local __{rank}.metadata.  No
 * metadata at all is FC_ECORRUPT ("incomplete checkpoint").
 */
int fc_dcp_meta_load_dir(struct fc_dcp_meta **out, const char *dir);

/*
 * fc_source_is_dcp_dir() - 1 when fc_source_open() opens path as a DCP
 * checkpoint (a directory holding .metadata, rank-local __{r}.metadata or
 * *.distcp files), else 0; < 0 when the directory cannot be listed.
 */
int fc_source_is_dcp_dir(const char *path);

/*
 * Virtual tensors (fc_source_virtual.c): tensors assembled from boxes of
 * other sources' tensors, for the rules that stack, concatenate and split.
 *
 * A part is the box of input entry `entry` of `src` that starts at in_off
 * (the input's dims), placed at `at` with extents `size` in the virtual
 * tensor.  lead is 0 when the two have the same dims, +1 when the virtual
 * tensor has a leading dim of size 1 that the input has not (a stack's
 * slice), -1 when the input has a leading dim the virtual tensor has not,
 * fixed at in_off[0] (an unstack's slice).
 */
struct fc_vpart {
    const struct fc_source *src;
    size_t entry;
    int64_t at[FC_MAX_DIMS];
    int64_t size[FC_MAX_DIMS];
    int64_t in_off[FC_MAX_DIMS];
    int lead;
};

/* fc_source_new_virtual() - an empty source of virtual tensors; `name` is its path in messages. */
int fc_source_new_virtual(struct fc_source **out, const char *name);

/*
 * fc_source_add_virtual() - append tensor `key` (dtype, shape) made of
 * parts[0..nparts) (copied), which must tile it; *entry is its index.  Box
 * reads of it read the overlapping parts from their sources.  Returns FC_OK
 * or FC_ENOMEM.
 */
int fc_source_add_virtual(struct fc_source *v, const char *key, fc_dtype dtype, int ndim,
                          const int64_t *shape, const struct fc_vpart *parts, size_t nparts,
                          size_t *entry);

/*
 * fc_source_virtual_parts() - the parts of entry `entry` of virtual source v
 * (borrowed: valid while v lives), their count in *n; optimizer state builds
 * its own virtual tensors from its parameter's parts.
 */
const struct fc_vpart *fc_source_virtual_parts(const struct fc_source *v, size_t entry, size_t *n);

/* Index of the entry with this key, or -1 (O(1)). */
long fc_source_find(const struct fc_source *src, const char *key);

/*
 * fc_source_read_box() - copy the box [off[d], off[d]+size[d]) of tensor
 * entry e into dst as C-contiguous elements of e->t.dtype (little-endian).
 * dst must hold prod(size) * elem_size bytes.  A box covering whole rows of a
 * contiguous tensor is one pread; strided views are gathered.
 * Returns FC_OK, FC_EINVAL (box outside the tensor), FC_ECORRUPT, FC_EIO,
 * FC_ENOMEM.
 */
int fc_source_read_box(const struct fc_source *src, const struct fc_entry *e, const int64_t *off,
                       const int64_t *size, void *dst);

/*
 * fc_source_fit_read_scratch() - size the scratch one fc_source_read_box() call
 * may allocate (gathers, scatters) to about room bytes: at most 16 MiB, at
 * least 128 KiB.  Returns the bytes it may allocate, which callers take out of
 * their --max-memory budget, as the destination slab.  Call while no read is
 * in flight.
 */
uint64_t fc_source_fit_read_scratch(uint64_t room);

/*
 * fc_source_verify_rest() - finish the CRC-32 checks of the chunks that reads
 * covered only in part (a --resize-rows that drops rows, parts read twice):
 * the bytes no read covered are read now.  Call it after the last read of
 * src and before the output is committed.  FC_OK, FC_ECORRUPT, FC_EIO,
 * FC_ENOMEM.  Accepts NULL.
 */
int fc_source_verify_rest(const struct fc_source *src);

#endif
