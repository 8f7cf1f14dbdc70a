/*
 * fc_safetensors.h - safetensors files and sharded index.json directories.
 *
 * Reader invariants (the reference implementation's rules, input-formats.md
 * B.2): header length <= 100,000,000 and inside the file; header is UTF-8 JSON
 * starting with '{' (trailing JSON whitespace allowed); __metadata__ maps
 * strings to strings (null is read as absent, as serde does); each other key
 * is {dtype, shape, data_offsets} (unknown fields ignored); sorted by
 * offsets, the tensors tile the byte buffer exactly (first begin 0, each begin
 * the previous end, last end + 8 + N == file size); end - begin == numel *
 * element size with overflow checks (numel computed left to right in 64 bits,
 * as the reference does).  Only the header is read, never the data.
 *
 * Stricter than the reference (safetensors 0.8.0), on purpose: duplicate keys
 * are FC_ECORRUPT (serde keeps the last one); a header starting with
 * whitespace is FC_ECORRUPT (0.8.0 accepts it, no writer produces it); a NUL
 * (\u0000) in a name or string is FC_EFORMAT.
 *
 * Dtypes: every B.3 string with a torch dtype maps through
 * fc_dtype_from_safetensors().  F4 is what safetensors writes for
 * torch.float4_e2m1fn_x2 (two values per byte, header shape = torch shape
 * with the last dim doubled); like safe_open() we report it as
 * FC_DTYPE_FLOAT4_E2M1FN_X2 with the last dim halved, and an F4 tensor whose
 * last dim is odd (or 0-d) is FC_EFORMAT.  F6_E2M3/F6_E3M2 have no torch
 * dtype: FC_EFORMAT.  Also FC_EFORMAT: more than FC_MAX_DIMS dims, and
 * zero-size shapes whose other dims overflow int64 strides.  FC_EFORMAT is
 * reported only for headers that are otherwise valid; corrupt wins.
 */
#ifndef FC_SAFETENSORS_H
#define FC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "fc_io.h"
#include "fc_tensor.h"

struct fc_st_tensor {
    const char *name;
    fc_dtype dtype; /* torch dtype */
    int ndim;
    int64_t shape[FC_MAX_DIMS]; /* torch shape (F4: last dim halved) */
    uint64_t data_offset;       /* absolute file offset */
    uint64_t nbytes;
    const char *st_dtype;               /* the header's spelling ("BF16", "F4"); static storage */
    int64_t saved_offsets[FC_MAX_DIMS]; /* sharded files: where it sits in the global
                                           tensor (DCP_SHARDING_INFO); else zeros */
};

/* __metadata__ key of torch's distributed (sharded) safetensors checkpoints. */
#define FC_ST_SHARDING_KEY "DCP_SHARDING_INFO"

struct fc_safetensors; /* opaque */

/*
 * fc_safetensors_open() - parse and validate the header of f (f must outlive
 * the result).  Tensors are listed in header (JSON) order.  On success *out
 * is owned by the caller (fc_safetensors_free); every string and tensor it
 * returns lives until then.  On failure *out is NULL and fc_error_last()
 * names the file, the tensor and the file offset or data_offsets at fault.
 * Returns FC_OK, FC_ECORRUPT, FC_EFORMAT, FC_EIO, FC_ENOMEM.
 */
int fc_safetensors_open(struct fc_safetensors **out, const struct fc_file *f);
void fc_safetensors_free(struct fc_safetensors *st); /* accepts NULL */
size_t fc_safetensors_count(const struct fc_safetensors *st);
/* Borrowed; NULL when i >= count. */
const struct fc_st_tensor *fc_safetensors_at(const struct fc_safetensors *st, size_t i);
/* __metadata__ value for key, or NULL. */
const char *fc_safetensors_metadata(const struct fc_safetensors *st, const char *key);
/* Number of __metadata__ entries; they are listed in header order. */
size_t fc_safetensors_metadata_count(const struct fc_safetensors *st);
/* Borrowed key and value of entry i.  Returns FC_OK or FC_ENOENT (i >= count, no message). */
int fc_safetensors_metadata_at(const struct fc_safetensors *st, size_t i, const char **key_out,
                               const char **value_out);
/*
 * 1 when __metadata__ holds DCP_SHARDING_INFO (torch's
 * HuggingFaceStorageWriter(save_distributed=True) output, or ours): every
 * tensor is then a chunk at its saved_offsets.  fc_safetensors_open()
 * checks that the JSON gives every tensor ndim non-negative offsets
 * (FC_ECORRUPT otherwise); it does not check offset + shape against the
 * global shape, which is the max of those ends over every file.
 */
int fc_safetensors_is_sharded(const struct fc_safetensors *st);
/* File offset of the byte buffer: 8 + header length. */
uint64_t fc_safetensors_data_start(const struct fc_safetensors *st);

/*
 * model.safetensors.index.json: {"metadata": {...}, "weight_map": {key: file}}.
 * Files are listed once each, in order of first appearance in weight_map.
 * Keys are listed in weight_map (JSON) order.  Checking that each shard holds
 * exactly the keys mapped to it is the caller's job (it needs the shards).
 */
struct fc_st_index {
    char **files; /* shard file names, relative to the index's directory */
    size_t nfiles;
    char **keys;      /* weight_map keys in JSON order */
    size_t *key_file; /* index into files for each key */
    size_t nkeys;
    uint64_t total_size; /* metadata.total_size when has_total_size */
    int has_total_size;  /* metadata.total_size present as a non-negative integer */
    char *strings;       /* owns every string above */
};

/*
 * fc_st_index_load() - parse an index file (at most 64 MiB).  File names must
 * be plain names (non-empty, no '/' or '\\', not starting with '.') so an
 * index cannot point outside its directory.  Keys are unique (duplicates are
 * FC_ECORRUPT); metadata is optional and, apart from total_size, ignored.
 * On success *out is filled and owned by the caller (fc_st_index_release); on
 * failure it is left empty (releasing it is harmless).
 * Returns FC_OK, FC_ECORRUPT, FC_EFORMAT (NUL in a string), FC_ENOENT, FC_EIO,
 * FC_ENOMEM.
 */
int fc_st_index_load(struct fc_st_index *out, const char *index_path);
void fc_st_index_release(struct fc_st_index *idx); /* leaves *idx empty */

/*
 * fc_safetensors_write_header() - append the 8-byte length and the JSON
 * header for tensors t[0..n) laid out back to back in that order (each takes
 * t[i].nbytes; name, dtype, ndim, shape are read), padded with spaces so the
 * data starts at a multiple of `align` bytes from the start of the file (a
 * power of two >= 8; 8 is the reference writer's layout).  meta holds nmeta
 * key/value pairs for __metadata__ (meta[2i], meta[2i+1]).  The data of t[0]
 * starts right after what this appends.
 * Returns FC_OK, FC_EFORMAT (a dtype safetensors cannot spell), FC_EINVAL (a
 * tensor named __metadata__, which the format reserves), FC_ENOMEM.
 */
struct fc_buf;
int fc_safetensors_write_header(struct fc_buf *out, const struct fc_st_tensor *t, size_t n,
                                const char *const *meta, size_t nmeta, size_t align);

/*
 * fc_safetensors_write_sharded_header() - fc_safetensors_write_header() for
 * one file of a sharded checkpoint, with the __metadata__ torch's
 * HuggingFaceStorageReader reads: {"DCP_SHARDING_INFO": JSON {name:
 * {"saved_offsets": t[i].saved_offsets}}, "DCP_VERSION": "1.0", "format":
 * "pt"}.  Returns FC_OK, FC_EFORMAT, FC_EINVAL (a tensor named
 * __metadata__), FC_ENOMEM.
 */
int fc_safetensors_write_sharded_header(struct fc_buf *out, const struct fc_st_tensor *t, size_t n,
                                        size_t align);

/*
 * fc_st_index_write() - append a model.safetensors.index.json ({"metadata":
 * {"total_size": N}, "weight_map": {key: file}}) for n keys.  Returns FC_OK or
 * FC_ENOMEM.
 */
int fc_st_index_write(struct fc_buf *out, uint64_t total_size, const char *const *keys,
                      const char *const *files, size_t n);

#endif
