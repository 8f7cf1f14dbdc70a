/*
 * fc_safetensors.h - safetensors files and sharded index.json directories.
 *
 * Reader invariants (the reference implementation's rules, input-formats.md
 * B.2): header length <= 100,000,000 and inside the file; header is UTF-8 JSON
 * starting with '{'; __metadata__ maps strings to strings; sorted by offsets,
 * the tensors tile the byte buffer exactly (first begin 0, each begin the
 * previous end, last end + 8 + N == file size); end - begin == numel * element
 * size with overflow checks; duplicate keys are rejected (stricter than serde).
 * Dtypes without a torch equivalent (F4, F6_*) are FC_EFORMAT.
 */
#ifndef FC_SAFETENSORS_H
#define FC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "fc_io.h"
#include "fc_tensor.h"

struct fc_st_tensor {
    const char *name;
    fc_dtype dtype;
    int ndim;
    int64_t shape[FC_MAX_DIMS];
    uint64_t data_offset; /* absolute file offset */
    uint64_t nbytes;
};

struct fc_safetensors; /* opaque */

/*
 * fc_safetensors_open() - parse and validate the header of f (f must outlive
 * the result).  Tensors are listed in header (JSON) order.
 * Returns FC_OK, FC_ECORRUPT, FC_EFORMAT, FC_EIO, FC_ENOMEM.
 */
int fc_safetensors_open(struct fc_safetensors **out, const struct fc_file *f);
void fc_safetensors_free(struct fc_safetensors *st); /* accepts NULL */
size_t fc_safetensors_count(const struct fc_safetensors *st);
const struct fc_st_tensor *fc_safetensors_at(const struct fc_safetensors *st, size_t i);
/* __metadata__ value for key, or NULL. */
const char *fc_safetensors_metadata(const struct fc_safetensors *st, const char *key);

/*
 * model.safetensors.index.json: {"metadata": {...}, "weight_map": {key: file}}.
 * Files are listed once each, in order of first appearance in weight_map.
 */
struct fc_st_index {
    char **files;      /* shard file names, relative to the index's directory */
    size_t nfiles;
    char **keys;       /* weight_map keys in file order */
    size_t *key_file;  /* index into files for each key */
    size_t nkeys;
};

/*
 * fc_st_index_load() - parse an index file.  File names must be plain names
 * (no '/', no "..") so an index cannot point outside its directory.
 * Returns FC_OK, FC_ECORRUPT, FC_EIO, FC_ENOMEM.
 */
int fc_st_index_load(struct fc_st_index *out, const char *index_path);
void fc_st_index_release(struct fc_st_index *idx);

#endif
