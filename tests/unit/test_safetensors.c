/*
 * test_safetensors.c - safetensors header reader and index.json loader.
 *
 * The byte arrays below were written by the real safetensors 0.8.0 library
 * (safetensors.torch.save) and by torch 2.15's HuggingFaceStorageWriter
 * (dcp.save(..., no_dist=True)), with this generator run in the project venv:
 *
 *   tensors: one per torch dtype safetensors supports, shape [1 + i % 3, 2]
 *            ([2, 2] for float4_e2m1fn_x2), bytes (7 * k + i) & 0xff,
 *            metadata {"format": "pt"}                       -> st_all_dtypes
 *   {"scalar": tensor(3.5), "empty_rows": zeros(0, 3, f16),
 *    "empty_cols": zeros(2, 0, i64), "vec": arange(3, i32)}   -> st_scalar_zero
 *   save({})                                                  -> st_empty
 *   save({}, metadata={"format": "pt", "note": "h\u00e9"})    -> st_meta_only
 *   HuggingFaceStorageWriter(fqn_to_index_mapping={"model.embed.weight": 1,
 *     "model.layers.0.w": 2, "lm_head.weight": 1}) on {embed: ones(4, 2),
 *     layers.0.w: zeros(3, bf16), lm_head: ones(2, 2)}        -> hf_index, hf_shard1/2
 *
 * The *_expect tables (name, header dtype, torch dtype, torch shape, absolute
 * offset, bytes) come from the same run: the header's data_offsets plus 8 + N,
 * and torch's own shape (so F4 shows float4_e2m1fn_x2's halved last dim).
 */
#include "fc_test.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_dtype.h"
#include "fc_endian.h"
#include "fc_buf.h"
#include "fc_safetensors.h"

struct expect_tensor {
    const char *name;
    const char *st_dtype;
    fc_dtype dtype;
    int ndim;
    int64_t shape[4];
    uint64_t offset;
    uint64_t nbytes;
};

/* st_all_dtypes: 1660 bytes, header 1424 bytes */
static const unsigned char st_all_dtypes[] = {
    0x90, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x5f, 0x5f, 0x6d, 0x65, 0x74, 0x61,
    0x64, 0x61, 0x74, 0x61, 0x5f, 0x5f, 0x22, 0x3a, 0x7b, 0x22, 0x66, 0x6f, 0x72, 0x6d, 0x61, 0x74,
    0x22, 0x3a, 0x22, 0x70, 0x74, 0x22, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x75, 0x69, 0x6e, 0x74, 0x36,
    0x34, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x55, 0x36, 0x34,
    0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x32, 0x2c, 0x32, 0x5d, 0x2c,
    0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b,
    0x30, 0x2c, 0x33, 0x32, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x69, 0x6e, 0x74, 0x36, 0x34, 0x22,
    0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x49, 0x36, 0x34, 0x22, 0x2c,
    0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x32, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64,
    0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x33, 0x32,
    0x2c, 0x36, 0x34, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x66, 0x6c, 0x6f, 0x61, 0x74, 0x36, 0x34,
    0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x36, 0x34, 0x22,
    0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x31, 0x2c, 0x32, 0x5d, 0x2c, 0x22,
    0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x36,
    0x34, 0x2c, 0x38, 0x30, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x63, 0x6f, 0x6d, 0x70, 0x6c, 0x65,
    0x78, 0x36, 0x34, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x43,
    0x36, 0x34, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x32, 0x2c, 0x32,
    0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22,
    0x3a, 0x5b, 0x38, 0x30, 0x2c, 0x31, 0x31, 0x32, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x66, 0x6c,
    0x6f, 0x61, 0x74, 0x33, 0x32, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a,
    0x22, 0x46, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x32,
    0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74,
    0x73, 0x22, 0x3a, 0x5b, 0x31, 0x31, 0x32, 0x2c, 0x31, 0x32, 0x38, 0x5d, 0x7d, 0x2c, 0x22, 0x74,
    0x5f, 0x75, 0x69, 0x6e, 0x74, 0x33, 0x32, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65,
    0x22, 0x3a, 0x22, 0x55, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a,
    0x5b, 0x31, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73,
    0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31, 0x32, 0x38, 0x2c, 0x31, 0x33, 0x36, 0x5d, 0x7d, 0x2c,
    0x22, 0x74, 0x5f, 0x69, 0x6e, 0x74, 0x33, 0x32, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70,
    0x65, 0x22, 0x3a, 0x22, 0x49, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22,
    0x3a, 0x5b, 0x33, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66,
    0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31, 0x33, 0x36, 0x2c, 0x31, 0x36, 0x30, 0x5d, 0x7d,
    0x2c, 0x22, 0x74, 0x5f, 0x62, 0x66, 0x6c, 0x6f, 0x61, 0x74, 0x31, 0x36, 0x22, 0x3a, 0x7b, 0x22,
    0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x42, 0x46, 0x31, 0x36, 0x22, 0x2c, 0x22, 0x73,
    0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x31, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74,
    0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31, 0x36, 0x30, 0x2c,
    0x31, 0x36, 0x34, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x66, 0x6c, 0x6f, 0x61, 0x74, 0x31, 0x36,
    0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x31, 0x36, 0x22,
    0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x2c, 0x32, 0x5d, 0x2c, 0x22,
    0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31,
    0x36, 0x34, 0x2c, 0x31, 0x37, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x75, 0x69, 0x6e, 0x74,
    0x31, 0x36, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x55, 0x31,
    0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x2c, 0x32, 0x5d,
    0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a,
    0x5b, 0x31, 0x37, 0x36, 0x2c, 0x31, 0x38, 0x38, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x69, 0x6e,
    0x74, 0x31, 0x36, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x49,
    0x31, 0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x31, 0x2c, 0x32,
    0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22,
    0x3a, 0x5b, 0x31, 0x38, 0x38, 0x2c, 0x31, 0x39, 0x32, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x66,
    0x6c, 0x6f, 0x61, 0x74, 0x38, 0x5f, 0x65, 0x35, 0x6d, 0x32, 0x66, 0x6e, 0x75, 0x7a, 0x22, 0x3a,
    0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x38, 0x5f, 0x45, 0x35, 0x4d,
    0x32, 0x46, 0x4e, 0x55, 0x5a, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b,
    0x32, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65,
    0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31, 0x39, 0x32, 0x2c, 0x31, 0x39, 0x36, 0x5d, 0x7d, 0x2c, 0x22,
    0x74, 0x5f, 0x66, 0x6c, 0x6f, 0x61, 0x74, 0x38, 0x5f, 0x65, 0x34, 0x6d, 0x33, 0x66, 0x6e, 0x75,
    0x7a, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x38, 0x5f,
    0x45, 0x34, 0x4d, 0x33, 0x46, 0x4e, 0x55, 0x5a, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65,
    0x22, 0x3a, 0x5b, 0x33, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66,
    0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31, 0x39, 0x36, 0x2c, 0x32, 0x30, 0x32, 0x5d,
    0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x66, 0x6c, 0x6f, 0x61, 0x74, 0x38, 0x5f, 0x65, 0x38, 0x6d, 0x30,
    0x66, 0x6e, 0x75, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46,
    0x38, 0x5f, 0x45, 0x38, 0x4d, 0x30, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a,
    0x5b, 0x31, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73,
    0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x32, 0x30, 0x32, 0x2c, 0x32, 0x30, 0x34, 0x5d, 0x7d, 0x2c,
    0x22, 0x74, 0x5f, 0x66, 0x6c, 0x6f, 0x61, 0x74, 0x38, 0x5f, 0x65, 0x34, 0x6d, 0x33, 0x66, 0x6e,
    0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x38, 0x5f, 0x45,
    0x34, 0x4d, 0x33, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x31, 0x2c,
    0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73,
    0x22, 0x3a, 0x5b, 0x32, 0x30, 0x34, 0x2c, 0x32, 0x30, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f,
    0x66, 0x6c, 0x6f, 0x61, 0x74, 0x38, 0x5f, 0x65, 0x35, 0x6d, 0x32, 0x22, 0x3a, 0x7b, 0x22, 0x64,
    0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x38, 0x5f, 0x45, 0x35, 0x4d, 0x32, 0x22, 0x2c,
    0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64,
    0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x32, 0x30,
    0x36, 0x2c, 0x32, 0x31, 0x32, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x69, 0x6e, 0x74, 0x38, 0x22,
    0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x49, 0x38, 0x22, 0x2c, 0x22,
    0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x32, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61,
    0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x32, 0x31, 0x32,
    0x2c, 0x32, 0x31, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x75, 0x69, 0x6e, 0x74, 0x38, 0x22,
    0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x55, 0x38, 0x22, 0x2c, 0x22,
    0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61,
    0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x32, 0x31, 0x36,
    0x2c, 0x32, 0x32, 0x32, 0x5d, 0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x66, 0x6c, 0x6f, 0x61, 0x74, 0x34,
    0x5f, 0x65, 0x32, 0x6d, 0x31, 0x66, 0x6e, 0x5f, 0x78, 0x32, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74,
    0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x34, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65,
    0x22, 0x3a, 0x5b, 0x32, 0x2c, 0x34, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66,
    0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x32, 0x32, 0x32, 0x2c, 0x32, 0x32, 0x36, 0x5d,
    0x7d, 0x2c, 0x22, 0x74, 0x5f, 0x62, 0x6f, 0x6f, 0x6c, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79,
    0x70, 0x65, 0x22, 0x3a, 0x22, 0x42, 0x4f, 0x4f, 0x4c, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70,
    0x65, 0x22, 0x3a, 0x5b, 0x31, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f,
    0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x32, 0x32, 0x36, 0x2c, 0x32, 0x32, 0x38,
    0x5d, 0x7d, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0d, 0x14, 0x1b, 0x22, 0x29, 0x30, 0x37, 0x3e,
    0x45, 0x4c, 0x53, 0x5a, 0x61, 0x68, 0x6f, 0x76, 0x7d, 0x84, 0x8b, 0x92, 0x99, 0xa0, 0xa7, 0xae,
    0xb5, 0xbc, 0xc3, 0xca, 0xd1, 0xd8, 0xdf, 0xe6, 0x04, 0x0b, 0x12, 0x19, 0x20, 0x27, 0x2e, 0x35,
    0x3c, 0x43, 0x4a, 0x51, 0x58, 0x5f, 0x66, 0x6d, 0x74, 0x7b, 0x82, 0x89, 0x90, 0x97, 0x9e, 0xa5,
    0xac, 0xb3, 0xba, 0xc1, 0xc8, 0xcf, 0xd6, 0xdd, 0x00, 0x07, 0x0e, 0x15, 0x1c, 0x23, 0x2a, 0x31,
    0x38, 0x3f, 0x46, 0x4d, 0x54, 0x5b, 0x62, 0x69, 0x0a, 0x11, 0x18, 0x1f, 0x26, 0x2d, 0x34, 0x3b,
    0x42, 0x49, 0x50, 0x57, 0x5e, 0x65, 0x6c, 0x73, 0x7a, 0x81, 0x88, 0x8f, 0x96, 0x9d, 0xa4, 0xab,
    0xb2, 0xb9, 0xc0, 0xc7, 0xce, 0xd5, 0xdc, 0xe3, 0x01, 0x08, 0x0f, 0x16, 0x1d, 0x24, 0x2b, 0x32,
    0x39, 0x40, 0x47, 0x4e, 0x55, 0x5c, 0x63, 0x6a, 0x0c, 0x13, 0x1a, 0x21, 0x28, 0x2f, 0x36, 0x3d,
    0x05, 0x0c, 0x13, 0x1a, 0x21, 0x28, 0x2f, 0x36, 0x3d, 0x44, 0x4b, 0x52, 0x59, 0x60, 0x67, 0x6e,
    0x75, 0x7c, 0x83, 0x8a, 0x91, 0x98, 0x9f, 0xa6, 0x03, 0x0a, 0x11, 0x18, 0x02, 0x09, 0x10, 0x17,
    0x1e, 0x25, 0x2c, 0x33, 0x3a, 0x41, 0x48, 0x4f, 0x0b, 0x12, 0x19, 0x20, 0x27, 0x2e, 0x35, 0x3c,
    0x43, 0x4a, 0x51, 0x58, 0x06, 0x0d, 0x14, 0x1b, 0x10, 0x17, 0x1e, 0x25, 0x11, 0x18, 0x1f, 0x26,
    0x2d, 0x34, 0x12, 0x19, 0x0f, 0x16, 0x0e, 0x15, 0x1c, 0x23, 0x2a, 0x31, 0x07, 0x0e, 0x15, 0x1c,
    0x08, 0x0f, 0x16, 0x1d, 0x24, 0x2b, 0x13, 0x1a, 0x21, 0x28, 0x09, 0x10,
};
static const struct expect_tensor st_all_dtypes_expect[] = {
    {"t_uint64", "U64", FC_DTYPE_UINT64, 2, {2, 2}, 1432, 32},
    {"t_int64", "I64", FC_DTYPE_INT64, 2, {2, 2}, 1464, 32},
    {"t_float64", "F64", FC_DTYPE_FLOAT64, 2, {1, 2}, 1496, 16},
    {"t_complex64", "C64", FC_DTYPE_COMPLEX64, 2, {2, 2}, 1512, 32},
    {"t_float32", "F32", FC_DTYPE_FLOAT32, 2, {2, 2}, 1544, 16},
    {"t_uint32", "U32", FC_DTYPE_UINT32, 2, {1, 2}, 1560, 8},
    {"t_int32", "I32", FC_DTYPE_INT32, 2, {3, 2}, 1568, 24},
    {"t_bfloat16", "BF16", FC_DTYPE_BFLOAT16, 2, {1, 2}, 1592, 4},
    {"t_float16", "F16", FC_DTYPE_FLOAT16, 2, {3, 2}, 1596, 12},
    {"t_uint16", "U16", FC_DTYPE_UINT16, 2, {3, 2}, 1608, 12},
    {"t_int16", "I16", FC_DTYPE_INT16, 2, {1, 2}, 1620, 4},
    {"t_float8_e5m2fnuz", "F8_E5M2FNUZ", FC_DTYPE_FLOAT8_E5M2FNUZ, 2, {2, 2}, 1624, 4},
    {"t_float8_e4m3fnuz", "F8_E4M3FNUZ", FC_DTYPE_FLOAT8_E4M3FNUZ, 2, {3, 2}, 1628, 6},
    {"t_float8_e8m0fnu", "F8_E8M0", FC_DTYPE_FLOAT8_E8M0FNU, 2, {1, 2}, 1634, 2},
    {"t_float8_e4m3fn", "F8_E4M3", FC_DTYPE_FLOAT8_E4M3FN, 2, {1, 2}, 1636, 2},
    {"t_float8_e5m2", "F8_E5M2", FC_DTYPE_FLOAT8_E5M2, 2, {3, 2}, 1638, 6},
    {"t_int8", "I8", FC_DTYPE_INT8, 2, {2, 2}, 1644, 4},
    {"t_uint8", "U8", FC_DTYPE_UINT8, 2, {3, 2}, 1648, 6},
    {"t_float4_e2m1fn_x2", "F4", FC_DTYPE_FLOAT4_E2M1FN_X2, 2, {2, 2}, 1654, 4},
    {"t_bool", "BOOL", FC_DTYPE_BOOL, 2, {1, 2}, 1658, 2},
};

/* st_scalar_zero: 272 bytes, header 248 bytes */
static const unsigned char st_scalar_zero[] = {
    0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x65, 0x6d, 0x70, 0x74, 0x79, 0x5f,
    0x63, 0x6f, 0x6c, 0x73, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22,
    0x49, 0x36, 0x34, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x32, 0x2c,
    0x30, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73,
    0x22, 0x3a, 0x5b, 0x30, 0x2c, 0x30, 0x5d, 0x7d, 0x2c, 0x22, 0x73, 0x63, 0x61, 0x6c, 0x61, 0x72,
    0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x33, 0x32, 0x22,
    0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74,
    0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x30, 0x2c, 0x34, 0x5d,
    0x7d, 0x2c, 0x22, 0x76, 0x65, 0x63, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22,
    0x3a, 0x22, 0x49, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b,
    0x33, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73,
    0x22, 0x3a, 0x5b, 0x34, 0x2c, 0x31, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x65, 0x6d, 0x70, 0x74, 0x79,
    0x5f, 0x72, 0x6f, 0x77, 0x73, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a,
    0x22, 0x46, 0x31, 0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x30,
    0x2c, 0x33, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74,
    0x73, 0x22, 0x3a, 0x5b, 0x31, 0x36, 0x2c, 0x31, 0x36, 0x5d, 0x7d, 0x7d, 0x20, 0x20, 0x20, 0x20,
    0x00, 0x00, 0x60, 0x40, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
};
static const struct expect_tensor st_scalar_zero_expect[] = {
    {"empty_cols", "I64", FC_DTYPE_INT64, 2, {2, 0}, 256, 0},
    {"scalar", "F32", FC_DTYPE_FLOAT32, 0, {0}, 256, 4},
    {"vec", "I32", FC_DTYPE_INT32, 1, {3}, 260, 12},
    {"empty_rows", "F16", FC_DTYPE_FLOAT16, 2, {0, 3}, 272, 0},
};

/* st_empty: 16 bytes, header 8 bytes */
static const unsigned char st_empty[] = {
    0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
};
/* st_meta_only: 56 bytes, header 48 bytes */
static const unsigned char st_meta_only[] = {
    0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x5f, 0x5f, 0x6d, 0x65,
    0x74, 0x61, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x5f, 0x22, 0x3a, 0x7b, 0x22, 0x66, 0x6f,
    0x72, 0x6d, 0x61, 0x74, 0x22, 0x3a, 0x22, 0x70, 0x74, 0x22, 0x2c, 0x22, 0x6e, 0x6f,
    0x74, 0x65, 0x22, 0x3a, 0x22, 0x68, 0xc3, 0xa9, 0x22, 0x7d, 0x7d, 0x20, 0x20, 0x20,
};
/* torch HuggingFaceStorageWriter: model.safetensors.index.json and its shards */
static const unsigned char hf_index[] = {
    0x7b, 0x0a, 0x20, 0x20, 0x22, 0x6d, 0x65, 0x74, 0x61, 0x64, 0x61, 0x74, 0x61, 0x22, 0x3a, 0x20,
    0x7b, 0x0a, 0x20, 0x20, 0x20, 0x20, 0x22, 0x74, 0x6f, 0x74, 0x61, 0x6c, 0x5f, 0x73, 0x69, 0x7a,
    0x65, 0x22, 0x3a, 0x20, 0x35, 0x34, 0x0a, 0x20, 0x20, 0x7d, 0x2c, 0x0a, 0x20, 0x20, 0x22, 0x77,
    0x65, 0x69, 0x67, 0x68, 0x74, 0x5f, 0x6d, 0x61, 0x70, 0x22, 0x3a, 0x20, 0x7b, 0x0a, 0x20, 0x20,
    0x20, 0x20, 0x22, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e, 0x65, 0x6d, 0x62, 0x65, 0x64, 0x2e, 0x77,
    0x65, 0x69, 0x67, 0x68, 0x74, 0x22, 0x3a, 0x20, 0x22, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2d, 0x30,
    0x30, 0x30, 0x30, 0x31, 0x2d, 0x6f, 0x66, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x32, 0x2e, 0x73, 0x61,
    0x66, 0x65, 0x74, 0x65, 0x6e, 0x73, 0x6f, 0x72, 0x73, 0x22, 0x2c, 0x0a, 0x20, 0x20, 0x20, 0x20,
    0x22, 0x6c, 0x6d, 0x5f, 0x68, 0x65, 0x61, 0x64, 0x2e, 0x77, 0x65, 0x69, 0x67, 0x68, 0x74, 0x22,
    0x3a, 0x20, 0x22, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x31, 0x2d, 0x6f,
    0x66, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x32, 0x2e, 0x73, 0x61, 0x66, 0x65, 0x74, 0x65, 0x6e, 0x73,
    0x6f, 0x72, 0x73, 0x22, 0x2c, 0x0a, 0x20, 0x20, 0x20, 0x20, 0x22, 0x6d, 0x6f, 0x64, 0x65, 0x6c,
    0x2e, 0x6c, 0x61, 0x79, 0x65, 0x72, 0x73, 0x2e, 0x30, 0x2e, 0x77, 0x22, 0x3a, 0x20, 0x22, 0x6d,
    0x6f, 0x64, 0x65, 0x6c, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x32, 0x2d, 0x6f, 0x66, 0x2d, 0x30, 0x30,
    0x30, 0x30, 0x32, 0x2e, 0x73, 0x61, 0x66, 0x65, 0x74, 0x65, 0x6e, 0x73, 0x6f, 0x72, 0x73, 0x22,
    0x0a, 0x20, 0x20, 0x7d, 0x0a, 0x7d,
};
static const unsigned char hf_shard1[] = {
    0x40, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x5f, 0x5f, 0x6d, 0x65, 0x74, 0x61,
    0x64, 0x61, 0x74, 0x61, 0x5f, 0x5f, 0x22, 0x3a, 0x7b, 0x22, 0x44, 0x43, 0x50, 0x5f, 0x56, 0x45,
    0x52, 0x53, 0x49, 0x4f, 0x4e, 0x22, 0x3a, 0x22, 0x31, 0x2e, 0x30, 0x22, 0x2c, 0x22, 0x66, 0x6f,
    0x72, 0x6d, 0x61, 0x74, 0x22, 0x3a, 0x22, 0x70, 0x74, 0x22, 0x2c, 0x22, 0x44, 0x43, 0x50, 0x5f,
    0x53, 0x48, 0x41, 0x52, 0x44, 0x49, 0x4e, 0x47, 0x5f, 0x49, 0x4e, 0x46, 0x4f, 0x22, 0x3a, 0x22,
    0x7b, 0x5c, 0x22, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e, 0x65, 0x6d, 0x62, 0x65, 0x64, 0x2e, 0x77,
    0x65, 0x69, 0x67, 0x68, 0x74, 0x5c, 0x22, 0x3a, 0x20, 0x7b, 0x5c, 0x22, 0x73, 0x61, 0x76, 0x65,
    0x64, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x5c, 0x22, 0x3a, 0x20, 0x5b, 0x30, 0x2c,
    0x20, 0x30, 0x5d, 0x7d, 0x2c, 0x20, 0x5c, 0x22, 0x6c, 0x6d, 0x5f, 0x68, 0x65, 0x61, 0x64, 0x2e,
    0x77, 0x65, 0x69, 0x67, 0x68, 0x74, 0x5c, 0x22, 0x3a, 0x20, 0x7b, 0x5c, 0x22, 0x73, 0x61, 0x76,
    0x65, 0x64, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x5c, 0x22, 0x3a, 0x20, 0x5b, 0x30,
    0x2c, 0x20, 0x30, 0x5d, 0x7d, 0x7d, 0x22, 0x7d, 0x2c, 0x22, 0x6c, 0x6d, 0x5f, 0x68, 0x65, 0x61,
    0x64, 0x2e, 0x77, 0x65, 0x69, 0x67, 0x68, 0x74, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70,
    0x65, 0x22, 0x3a, 0x22, 0x46, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22,
    0x3a, 0x5b, 0x32, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66,
    0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x30, 0x2c, 0x31, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x6d,
    0x6f, 0x64, 0x65, 0x6c, 0x2e, 0x65, 0x6d, 0x62, 0x65, 0x64, 0x2e, 0x77, 0x65, 0x69, 0x67, 0x68,
    0x74, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x33, 0x32,
    0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x34, 0x2c, 0x32, 0x5d, 0x2c,
    0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b,
    0x31, 0x36, 0x2c, 0x34, 0x38, 0x5d, 0x7d, 0x7d, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f,
};
static const unsigned char hf_shard2[] = {
    0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x5f, 0x5f, 0x6d, 0x65, 0x74, 0x61,
    0x64, 0x61, 0x74, 0x61, 0x5f, 0x5f, 0x22, 0x3a, 0x7b, 0x22, 0x44, 0x43, 0x50, 0x5f, 0x53, 0x48,
    0x41, 0x52, 0x44, 0x49, 0x4e, 0x47, 0x5f, 0x49, 0x4e, 0x46, 0x4f, 0x22, 0x3a, 0x22, 0x7b, 0x5c,
    0x22, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e, 0x6c, 0x61, 0x79, 0x65, 0x72, 0x73, 0x2e, 0x30, 0x2e,
    0x77, 0x5c, 0x22, 0x3a, 0x20, 0x7b, 0x5c, 0x22, 0x73, 0x61, 0x76, 0x65, 0x64, 0x5f, 0x6f, 0x66,
    0x66, 0x73, 0x65, 0x74, 0x73, 0x5c, 0x22, 0x3a, 0x20, 0x5b, 0x30, 0x5d, 0x7d, 0x7d, 0x22, 0x2c,
    0x22, 0x66, 0x6f, 0x72, 0x6d, 0x61, 0x74, 0x22, 0x3a, 0x22, 0x70, 0x74, 0x22, 0x2c, 0x22, 0x44,
    0x43, 0x50, 0x5f, 0x56, 0x45, 0x52, 0x53, 0x49, 0x4f, 0x4e, 0x22, 0x3a, 0x22, 0x31, 0x2e, 0x30,
    0x22, 0x7d, 0x2c, 0x22, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e, 0x6c, 0x61, 0x79, 0x65, 0x72, 0x73,
    0x2e, 0x30, 0x2e, 0x77, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22,
    0x42, 0x46, 0x31, 0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33,
    0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22,
    0x3a, 0x5b, 0x30, 0x2c, 0x36, 0x5d, 0x7d, 0x7d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static char g_dir[64];
static char g_path[128];
static struct fc_file g_file = FC_FILE_INIT;
static struct fc_safetensors *g_st;

static int group_setup(void **state)
{
    (void)state;
    const char *d = fc_test_tmpdir();
    if (d == NULL)
        return -1;
    snprintf(g_dir, sizeof(g_dir), "%s", d);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fc_test_rmdir(g_dir);
    return 0;
}

/* Close what the previous open left behind. */
static int test_teardown(void **state)
{
    (void)state;
    fc_safetensors_free(g_st);
    g_st = NULL;
    fc_file_close(&g_file);
    return 0;
}

static const char *write_file(const char *name, const void *data, size_t len)
{
    snprintf(g_path, sizeof(g_path), "%s/%s", g_dir, name);
    FILE *f = fopen(g_path, "wb");
    assert_non_null(f);
    if (len > 0)
        assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    return g_path;
}

/* Write bytes as a file and run fc_safetensors_open on it; g_st/g_file keep the result. */
static int open_bytes(const void *data, size_t len)
{
    fc_safetensors_free(g_st);
    g_st = NULL;
    fc_file_close(&g_file);
    assert_fc_ok(fc_file_open_read(&g_file, write_file("t.safetensors", data, len)));
    fc_error_clear();
    const int rc = fc_safetensors_open(&g_st, &g_file);
    if (rc < 0)
        assert_null(g_st);
    else
        assert_non_null(g_st);
    return rc;
}

/* [le64 N][header][data_len bytes of 0xAB]; N taken from the header unless n_override != -1. */
static int open_header_n(const char *header, size_t hlen, size_t data_len, int64_t n_override)
{
    const size_t len = 8 + hlen + data_len;
    unsigned char *buf = malloc(len);
    assert_non_null(buf);
    fc_write_le64(buf, n_override >= 0 ? (uint64_t)n_override : hlen);
    memcpy(buf + 8, header, hlen);
    memset(buf + 8 + hlen, 0xAB, data_len);
    const int rc = open_bytes(buf, len);
    free(buf);
    return rc;
}

static int open_header(const char *header, size_t data_len)
{
    return open_header_n(header, strlen(header), data_len, -1);
}

static void check_expect(const struct expect_tensor *ex, size_t n)
{
    assert_int_equal(fc_safetensors_count(g_st), n);
    assert_null(fc_safetensors_at(g_st, n));
    for (size_t i = 0; i < n; i++) {
        const struct fc_st_tensor *t = fc_safetensors_at(g_st, i);
        assert_non_null(t);
        assert_string_equal(t->name, ex[i].name);
        assert_string_equal(t->st_dtype, ex[i].st_dtype);
        assert_int_equal(t->dtype, ex[i].dtype);
        assert_int_equal(t->ndim, ex[i].ndim);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            assert_int_equal(t->shape[d], ex[i].shape[d]);
            numel *= t->shape[d];
        }
        assert_int_equal(t->data_offset, ex[i].offset);
        assert_int_equal(t->nbytes, ex[i].nbytes);
        /* The torch view of the bytes: numel * element size, float4 x2 included. */
        assert_int_equal(t->nbytes, (uint64_t)numel * fc_dtype_size(t->dtype));
    }
}

/* ---- files written by the real library ---- */

static void test_safetensors_reads_every_dtype_written_by_the_library(void **state)
{
    (void)state;
    assert_fc_ok(open_bytes(st_all_dtypes, sizeof(st_all_dtypes)));
    check_expect(st_all_dtypes_expect, ARRAY_LEN(st_all_dtypes_expect));
    assert_int_equal(fc_safetensors_data_start(g_st), 8 + 1424);
    assert_string_equal(fc_safetensors_metadata(g_st, "format"), "pt");
    assert_null(fc_safetensors_metadata(g_st, "missing"));
    assert_int_equal(fc_safetensors_metadata_count(g_st), 1);
}

static void test_safetensors_reads_scalar_and_zero_size_tensors(void **state)
{
    (void)state;
    assert_fc_ok(open_bytes(st_scalar_zero, sizeof(st_scalar_zero)));
    check_expect(st_scalar_zero_expect, ARRAY_LEN(st_scalar_zero_expect));
    assert_int_equal(fc_safetensors_metadata_count(g_st), 0);
}

static void test_safetensors_reads_an_empty_header_and_metadata_only(void **state)
{
    const char *k, *v;
    (void)state;
    assert_fc_ok(open_bytes(st_empty, sizeof(st_empty)));
    assert_int_equal(fc_safetensors_count(g_st), 0);
    assert_int_equal(fc_safetensors_data_start(g_st), sizeof(st_empty));

    assert_fc_ok(open_bytes(st_meta_only, sizeof(st_meta_only)));
    assert_int_equal(fc_safetensors_count(g_st), 0);
    assert_int_equal(fc_safetensors_metadata_count(g_st), 2);
    assert_fc_ok(fc_safetensors_metadata_at(g_st, 0, &k, &v));
    assert_string_equal(k, "format");
    assert_string_equal(v, "pt");
    assert_fc_ok(fc_safetensors_metadata_at(g_st, 1, &k, &v));
    assert_string_equal(k, "note");
    assert_string_equal(v, "h\xc3\xa9");
    assert_int_equal(fc_safetensors_metadata_at(g_st, 2, &k, &v), FC_ENOENT);

    assert_fc_ok(open_header("{}", 0));
    assert_fc_ok(open_header("{\"__metadata__\":{}}", 0));
    assert_fc_ok(open_header("{\"__metadata__\":null}", 0));
    assert_int_equal(fc_safetensors_metadata_count(g_st), 0);
}

static void test_safetensors_maps_every_dtype_of_the_dtype_table(void **state)
{
    char hdr[256];
    (void)state;
    for (int d = 1; d < FC_DTYPE_COUNT; d++) {
        const struct fc_dtype_info *info = fc_dtype_info((fc_dtype)d);
        if (info->safetensors_name == NULL)
            continue;
        snprintf(hdr, sizeof(hdr),
                 "{\"x\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%u]}}",
                 info->safetensors_name, 3 * info->elem_size);
        assert_fc_ok(open_header(hdr, 3 * info->elem_size));
        assert_int_equal(fc_safetensors_at(g_st, 0)->dtype, d);
        assert_string_equal(fc_safetensors_at(g_st, 0)->st_dtype, info->safetensors_name);
    }
}

static void test_safetensors_accepts_padding_unknown_fields_and_keeps_json_order(void **state)
{
    (void)state;
    /* Writers pad with spaces; serde also skips other JSON whitespace. */
    assert_fc_ok(open_header("{}        ", 0));
    assert_fc_ok(open_header("{}\n\t\r ", 0));
    assert_fc_ok(
        open_header("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6],\"zz\":[1]},"
                    "\"__metadata__\":{\"k\":\"v\"},"
                    "\"a\":{\"data_offsets\":[0,4],\"shape\":[],\"dtype\":\"F32\"}}   ",
                    6));
    assert_int_equal(fc_safetensors_count(g_st), 2);
    assert_string_equal(fc_safetensors_at(g_st, 0)->name, "b");
    assert_string_equal(fc_safetensors_at(g_st, 1)->name, "a");
    assert_int_equal(fc_safetensors_at(g_st, 1)->ndim, 0);
    assert_string_equal(fc_safetensors_metadata(g_st, "k"), "v");
    /* Zero-size tensors may sit anywhere on the tiling, even at the same offset. */
    assert_fc_ok(open_header("{\"z1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                             "\"z2\":{\"dtype\":\"F32\",\"shape\":[5,0],\"data_offsets\":[0,0]},"
                             "\"\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                             4));
    assert_int_equal(fc_safetensors_count(g_st), 4);
    assert_string_equal(fc_safetensors_at(g_st, 3)->name, "");
    /* Names are UTF-8, 4-byte sequences included. */
    assert_fc_ok(open_header("{\"\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],"
                             "\"data_offsets\":[0,1]}}",
                             1));
}

/* ---- hostile headers ---- */

static void test_safetensors_rejects_every_truncation_and_extension_of_a_valid_file(void **state)
{
    unsigned char *buf = malloc(sizeof(st_scalar_zero) + 1);
    (void)state;
    assert_non_null(buf);
    memcpy(buf, st_scalar_zero, sizeof(st_scalar_zero));
    for (size_t len = 0; len < sizeof(st_scalar_zero); len++) {
        const int rc = open_bytes(buf, len);
        if (rc != FC_ECORRUPT)
            print_error("length %zu: %s %s\n", len, fc_err_name(rc), fc_error_last());
        assert_int_equal(rc, FC_ECORRUPT);
        assert_non_null(strstr(fc_error_last(), g_path));
    }
    buf[sizeof(st_scalar_zero)] = 0;
    assert_fc_fails(open_bytes(buf, sizeof(st_scalar_zero) + 1), FC_ECORRUPT,
                    "1 unexpected bytes after the last tensor at file offset 272");
    assert_fc_fails(open_bytes(buf, sizeof(st_scalar_zero) - 1), FC_ECORRUPT,
                    "tensor 'vec' ends at file offset 272 but the file has only 271 bytes");
    free(buf);
    /* Same for the every-dtype file, at a few lengths. */
    const size_t lens[] = {0, 7, 8, 9, 100, 8 + 1424 - 1, 8 + 1424, sizeof(st_all_dtypes) - 1};
    for (size_t i = 0; i < ARRAY_LEN(lens); i++)
        assert_int_equal(open_bytes(st_all_dtypes, lens[i]), FC_ECORRUPT);
}

static void test_safetensors_rejects_bad_header_lengths(void **state)
{
    (void)state;
    assert_fc_fails(open_bytes("\x02\0\0\0", 4), FC_ECORRUPT, "file is 4 bytes, too small");
    assert_fc_fails(open_header_n("{}", 2, 0, 100000001), FC_ECORRUPT,
                    "header length 100000001 exceeds the limit of 100000000 bytes");
    assert_fc_fails(open_header_n("{}", 2, 0, INT64_MAX), FC_ECORRUPT, "exceeds the limit");
    assert_fc_fails(open_bytes("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10), FC_ECORRUPT,
                    "header length 18446744073709551615 exceeds");
    assert_fc_fails(open_header_n("{}", 2, 0, 3), FC_ECORRUPT,
                    "header length 3 runs past the end of the file (10 bytes)");
    /* A shorter N leaves bytes that look like trailing data to the tiling check. */
    assert_fc_fails(open_header_n("{}  ", 4, 0, 2), FC_ECORRUPT,
                    "2 unexpected bytes after the header at file offset 10");
    assert_fc_fails(open_header_n("", 0, 0, 0), FC_ECORRUPT, "does not start with '{'");
}

static void test_safetensors_rejects_invalid_utf8(void **state)
{
    (void)state;
    assert_fc_fails(open_header("{}\xff", 0), FC_ECORRUPT,
                    "invalid UTF-8 (byte 0xff) at file offset 10");
    assert_fc_fails(open_header("{\"\xc0\xaf\":1}", 0), FC_ECORRUPT, "at file offset 10");
    assert_fc_fails(open_header("{\"\xed\xa0\x80\":1}", 0), FC_ECORRUPT, "invalid UTF-8");
    assert_fc_fails(open_header("{\"\xf4\x90\x80\x80\":1}", 0), FC_ECORRUPT, "invalid UTF-8");
    assert_fc_fails(open_header("{\"\xe0\x80\x80\":1}", 0), FC_ECORRUPT, "invalid UTF-8");
    assert_fc_fails(open_header("{}\xe2\x82", 0), FC_ECORRUPT, "(byte 0xe2) at file offset 10");
    assert_fc_fails(open_header("{}\x80", 0), FC_ECORRUPT, "invalid UTF-8");
}

static void test_safetensors_rejects_headers_that_are_not_json_objects(void **state)
{
    (void)state;
    assert_fc_fails(open_header("[]", 0), FC_ECORRUPT, "does not start with '{'");
    assert_fc_fails(open_header(" {}", 0), FC_ECORRUPT, "does not start with '{'");
    assert_fc_fails(open_header("\xef\xbb\xbf{}", 0), FC_ECORRUPT, "does not start with '{'");
    assert_fc_fails(open_header("{", 0), FC_ECORRUPT, "invalid JSON at file offset");
    assert_fc_fails(open_header("{} x", 0), FC_ECORRUPT, "invalid JSON at file offset 12");
    assert_fc_fails(open_header_n("{}\0", 3, 0, -1), FC_ECORRUPT, "invalid JSON");
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}", 0),
        FC_ECORRUPT, "invalid JSON");
    assert_fc_fails(open_header("{\"a\":1}", 0), FC_ECORRUPT,
                    "tensor 'a': entry is an integer, not an object");
}

static void test_safetensors_rejects_metadata_that_is_not_strings(void **state)
{
    (void)state;
    assert_fc_fails(open_header("{\"__metadata__\":{\"x\":1}}", 0), FC_ECORRUPT,
                    "__metadata__['x'] is an integer, not a string");
    assert_fc_fails(open_header("{\"__metadata__\":{\"x\":{\"y\":\"z\"}}}", 0), FC_ECORRUPT,
                    "__metadata__['x'] is an object");
    assert_fc_fails(open_header("{\"__metadata__\":[\"x\"]}", 0), FC_ECORRUPT,
                    "__metadata__ is an array, not an object of strings");
    assert_fc_fails(open_header("{\"__metadata__\":\"x\"}", 0), FC_ECORRUPT,
                    "__metadata__ is a string");
    /* Valid for serde, but not representable as a C string. */
    assert_fc_fails(open_header("{\"__metadata__\":{\"x\":\"a\\u0000b\"}}", 0), FC_EFORMAT,
                    "\\u0000");
    assert_fc_fails(open_header("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[0],"
                                "\"data_offsets\":[0,0]}}",
                                0),
                    FC_EFORMAT, "NUL byte in object key");
}

#define U8(name, b, e, n)                                                                          \
    "\"" name "\":{\"dtype\":\"U8\",\"shape\":[" #n "],\"data_offsets\":[" #b "," #e "]}"

static void test_safetensors_rejects_overlaps_gaps_and_trailing_bytes(void **state)
{
    (void)state;
    assert_fc_fails(open_header("{" U8("a", 0, 4, 4) "," U8("b", 2, 6, 4) "}", 6), FC_ECORRUPT,
                    "tensor 'b': data_offsets [2, 6) overlap the previous tensor 'a' ending at 4");
    assert_fc_fails(open_header("{" U8("a", 0, 4, 4) "," U8("b", 0, 4, 4) "}", 4), FC_ECORRUPT,
                    "overlap the previous tensor");
    assert_fc_fails(open_header("{" U8("b", 8, 12, 4) "," U8("a", 0, 4, 4) "}", 12), FC_ECORRUPT,
                    "tensor 'b': data_offsets [8, 12) leave a gap of 4 bytes after the previous "
                    "tensor 'a' ending at 4");
    assert_fc_fails(open_header("{" U8("a", 4, 8, 4) "}", 8), FC_ECORRUPT,
                    "tensor 'a': data_offsets [4, 8) leave a gap of 4 bytes at the start of the "
                    "data buffer");
    assert_fc_fails(open_header("{" U8("a", 0, 4, 4) "}", 5), FC_ECORRUPT,
                    "1 unexpected bytes after the last tensor");
    assert_fc_fails(open_header("{}", 3), FC_ECORRUPT, "3 unexpected bytes after the header");
    assert_fc_fails(open_header("{" U8("a", 0, 4, 4) "}", 3), FC_ECORRUPT,
                    "tensor 'a' ends at file offset");
    assert_fc_fails(open_header("{" U8("a", 4, 0, 4) "}", 4), FC_ECORRUPT,
                    "tensor 'a': data_offsets [4, 0) end before they begin");
    assert_fc_fails(open_header("{" U8("a", 0, 1152921504606846976, 1152921504606846976) "}", 4),
                    FC_ECORRUPT, "tensor 'a' ends at file offset");
}

static void test_safetensors_rejects_wrong_byte_sizes_and_overflowing_shapes(void **state)
{
    (void)state;
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4),
        FC_ECORRUPT, "tensor 'a': shape [2] of F32 needs 8 bytes but data_offsets [0, 4) hold 4");
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}", 0),
        FC_ECORRUPT, "needs 4 bytes");
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
                                "\"data_offsets\":[0,4]}}",
                                4),
                    FC_ECORRUPT,
                    "tensor 'a': shape [1099511627776, 1099511627776] of F32 "
                    "overflows 64 bits");
    /* numel fits but numel * 8 bytes does not. */
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
                                "\"data_offsets\":[0,4]}}",
                                4),
                    FC_ECORRUPT, "overflows 64 bits");
    /* The reference multiplies left to right: a trailing 0 does not save an overflow... */
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,"
                                "4611686018427387904,0],\"data_offsets\":[0,0]}}",
                                0),
                    FC_ECORRUPT, "overflows 64 bits");
    /* ...but a leading 0 does; no int64 strides exist for it, so we refuse it. */
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,"
                                "4611686018427387904],\"data_offsets\":[0,0]}}",
                                0),
                    FC_EFORMAT,
                    "shape [0, 4611686018427387904, 4611686018427387904] is too large: its strides "
                    "overflow int64");
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616, 0],"
                                "\"data_offsets\":[0,0]}}",
                                0),
                    FC_ECORRUPT, "too big integer");
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
                                "1,1],\"data_offsets\":[0,1]}}",
                                1),
                    FC_EFORMAT,
                    "shape [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1] has 17 dimensions; "
                    "at most 16 are supported");
    assert_fc_ok(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
                             "\"data_offsets\":[0,1]}}",
                             1));
    assert_int_equal(fc_safetensors_at(g_st, 0)->ndim, 16);
}

static void test_safetensors_rejects_negative_and_non_integer_numbers(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e0],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[true],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[[1]],\"data_offsets\":[0,1]}}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        assert_fc_fails(open_header(bad[i], 1), FC_ECORRUPT,
                        "tensor 'a': shape[0] is not a non-negative integer");
    static const char *const bad_offs[] = {
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,null]}}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad_offs); i++)
        assert_fc_fails(open_header(bad_offs[i], 1), FC_ECORRUPT,
                        "data_offsets are not non-negative integers");
    static const char *const bad_shape_offs[] = {
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{\"0\":1}}}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad_shape_offs); i++)
        assert_fc_fails(open_header(bad_shape_offs[i], 1), FC_ECORRUPT,
                        "data_offsets is not an array of two integers");
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1),
                    FC_ECORRUPT, "tensor 'a': shape is an integer, not an array");
}

static void test_safetensors_rejects_duplicate_keys_and_missing_fields(void **state)
{
    (void)state;
    assert_fc_fails(open_header("{" U8("a", 0, 1, 1) "," U8("a", 0, 1, 1) "}", 1), FC_ECORRUPT,
                    "duplicate object key");
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],"
                                "\"data_offsets\":[0,1]}}",
                                1),
                    FC_ECORRUPT, "duplicate object key");
    assert_fc_fails(open_header("{\"__metadata__\":{},\"__metadata__\":{}}", 0), FC_ECORRUPT,
                    "duplicate object key");
    assert_fc_fails(open_header("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1), FC_ECORRUPT,
                    "tensor 'a': missing field 'dtype'");
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1),
                    FC_ECORRUPT, "tensor 'a': missing field 'shape'");
    assert_fc_fails(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1), FC_ECORRUPT,
                    "tensor 'a': missing field 'data_offsets'");
    assert_fc_fails(open_header("{\"a\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
                    FC_ECORRUPT, "tensor 'a': dtype is null, not a string");
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
        FC_ECORRUPT, "tensor 'a': unknown dtype 'F128'");
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
        FC_ECORRUPT, "unknown dtype 'f32'");
}

static void test_safetensors_maps_f4_to_float4_x2_and_rejects_f6(void **state)
{
    (void)state;
    /* What safetensors writes for a float4_e2m1fn_x2 tensor of torch shape [3, 1]. */
    assert_fc_ok(
        open_header("{\"a\":{\"dtype\":\"F4\",\"shape\":[3,2],\"data_offsets\":[0,3]}}", 3));
    assert_int_equal(fc_safetensors_at(g_st, 0)->dtype, FC_DTYPE_FLOAT4_E2M1FN_X2);
    assert_int_equal(fc_safetensors_at(g_st, 0)->shape[0], 3);
    assert_int_equal(fc_safetensors_at(g_st, 0)->shape[1], 1);
    assert_string_equal(fc_safetensors_at(g_st, 0)->st_dtype, "F4");
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[0,3]}}", 3),
        FC_EFORMAT, "tensor 'a': dtype F4 shape [2, 3] cannot be viewed as torch.float4_e2m1fn_x2");
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
        FC_ECORRUPT, "shape [1] of F4 is 4 bits, not a whole number of bytes");
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F4\",\"shape\":[],\"data_offsets\":[0,1]}}", 1),
        FC_ECORRUPT, "not a whole number of bytes");
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[0,3]}}", 3),
        FC_EFORMAT, "tensor 'a': dtype F6_E2M3 has no torch equivalent");
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F6_E3M2\",\"shape\":[4],\"data_offsets\":[0,3]}}", 3),
        FC_EFORMAT, "F6_E3M2");
    /* A corrupt header is reported as corrupt even when it also holds an F6 tensor. */
    assert_fc_fails(
        open_header("{\"a\":{\"dtype\":\"F6_E3M2\",\"shape\":[4],\"data_offsets\":[0,3]}," U8(
                        "b", 1, 2, 1) "}",
                    3),
        FC_ECORRUPT, "overlap");
}

/* ---- sharded (DCP_SHARDING_INFO) files, as torch's distributed HF writer makes them ---- */

static void test_safetensors_sharded_header_round_trips_offsets_and_alignment(void **state)
{
    struct fc_st_tensor t[3];
    struct fc_buf b = FC_BUF_INIT(1 << 20);
    (void)state;
    memset(t, 0, sizeof(t));
    t[0] = (struct fc_st_tensor){.name = "w", .dtype = FC_DTYPE_FLOAT32, .ndim = 2,
                                 .shape = {2, 3}, .nbytes = 24, .saved_offsets = {4, 0}};
    t[1] = (struct fc_st_tensor){.name = "empty", .dtype = FC_DTYPE_BFLOAT16, .ndim = 1,
                                 .shape = {0}, .nbytes = 0, .saved_offsets = {7}};
    t[2] = (struct fc_st_tensor){.name = "s", .dtype = FC_DTYPE_INT64, .ndim = 0, .nbytes = 8};
    assert_fc_ok(fc_safetensors_write_sharded_header(&b, t, 3, 4096));
    assert_int_equal(b.len, 4096);
    assert_fc_ok(fc_buf_fill(&b, 0x11, 32));
    assert_fc_ok(open_bytes(b.data, b.len));
    assert_true(fc_safetensors_is_sharded(g_st));
    assert_string_equal(fc_safetensors_metadata(g_st, "DCP_VERSION"), "1.0");
    assert_string_equal(fc_safetensors_metadata(g_st, "format"), "pt");
    const struct fc_st_tensor *w = fc_safetensors_at(g_st, 0);
    assert_string_equal(w->name, "w");
    assert_int_equal(w->data_offset, 4096);
    assert_int_equal(w->saved_offsets[0], 4);
    assert_int_equal(w->saved_offsets[1], 0);
    assert_int_equal(fc_safetensors_at(g_st, 1)->saved_offsets[0], 7);
    assert_int_equal(fc_safetensors_at(g_st, 2)->ndim, 0);
    assert_int_equal(fc_safetensors_at(g_st, 2)->data_offset, 4096 + 24);
    fc_buf_release(&b);

    /* A plain file is not sharded and reads offsets of zero. */
    assert_fc_ok(open_bytes(st_all_dtypes, sizeof(st_all_dtypes)));
    assert_false(fc_safetensors_is_sharded(g_st));
    assert_int_equal(fc_safetensors_at(g_st, 0)->saved_offsets[0], 0);
}

#define SHARDED(info)                                                                              \
    "{\"__metadata__\":{\"DCP_SHARDING_INFO\":\"" info "\"}," U8("a", 0, 4, 4) "}"

static void test_safetensors_rejects_bad_sharding_info(void **state)
{
    (void)state;
    assert_fc_ok(open_header(SHARDED("{\\\"a\\\":{\\\"saved_offsets\\\":[3]}}"), 4));
    assert_int_equal(fc_safetensors_at(g_st, 0)->saved_offsets[0], 3);
    assert_fc_fails(open_header(SHARDED("{\\\"b\\\":{\\\"saved_offsets\\\":[3]}}"), 4),
                    FC_ECORRUPT, "no saved_offsets list of 1 integers for tensor 'a'");
    assert_fc_fails(open_header(SHARDED("{\\\"a\\\":{\\\"saved_offsets\\\":[3,0]}}"), 4),
                    FC_ECORRUPT, "for tensor 'a'");
    assert_fc_fails(open_header(SHARDED("{\\\"a\\\":{\\\"saved_offsets\\\":[-1]}}"), 4),
                    FC_ECORRUPT, "saved_offsets[0] is not an integer");
    assert_fc_fails(open_header(SHARDED("[1]"), 4), FC_ECORRUPT, "is not a JSON object");
    assert_fc_fails(open_header(SHARDED("{"), 4), FC_ECORRUPT, "is not a JSON object");
}

static void test_safetensors_survives_every_allocation_failure(void **state)
{
    (void)state;
    int ok = 0;
    write_file("t.safetensors", st_all_dtypes, sizeof(st_all_dtypes));
    assert_fc_ok(fc_file_open_read(&g_file, g_path));
    for (unsigned long n = 1; n < 100 && !ok; n++) {
        struct fc_safetensors *st = NULL;
        fc_alloc_fail_at(n);
        const int rc = fc_safetensors_open(&st, &g_file);
        const int fired = fc_alloc_failed();
        fc_alloc_fail_at(0);
        if (!fired) {
            assert_fc_ok(rc);
            ok = 1;
        } else {
            assert_fc_fails(rc, FC_ENOMEM, "out of memory");
            assert_null(st);
        }
        fc_safetensors_free(st);
    }
    assert_true(ok);
}

/* ---- index.json ---- */

static int load_index_text(struct fc_st_index *idx, const char *json)
{
    memset(idx, 0x5A, sizeof(*idx)); /* load must not read what was there */
    const int rc =
        fc_st_index_load(idx, write_file("model.safetensors.index.json", json, strlen(json)));
    if (rc < 0) {
        assert_null(idx->files);
        assert_null(idx->keys);
        assert_int_equal(idx->nkeys, 0);
    }
    return rc;
}

static void test_index_reads_what_torch_writes_and_matches_its_shards(void **state)
{
    struct fc_st_index idx;
    struct fc_file f = FC_FILE_INIT;
    struct fc_safetensors *st = NULL;
    char name[128];
    (void)state;
    write_file("model-00001-of-00002.safetensors", hf_shard1, sizeof(hf_shard1));
    write_file("model-00002-of-00002.safetensors", hf_shard2, sizeof(hf_shard2));
    assert_fc_ok(fc_st_index_load(
        &idx, write_file("model.safetensors.index.json", hf_index, sizeof(hf_index))));
    assert_int_equal(idx.nfiles, 2);
    assert_string_equal(idx.files[0], "model-00001-of-00002.safetensors");
    assert_string_equal(idx.files[1], "model-00002-of-00002.safetensors");
    assert_int_equal(idx.nkeys, 3);
    assert_string_equal(idx.keys[0], "model.embed.weight");
    assert_string_equal(idx.keys[1], "lm_head.weight");
    assert_string_equal(idx.keys[2], "model.layers.0.w");
    assert_int_equal(idx.key_file[0], 0);
    assert_int_equal(idx.key_file[1], 0);
    assert_int_equal(idx.key_file[2], 1);
    assert_true(idx.has_total_size);
    assert_int_equal(idx.total_size, 54);

    /* Every key is in the shard the index names, and the shards hold nothing else. */
    uint64_t total = 0;
    size_t found = 0;
    for (size_t i = 0; i < idx.nfiles; i++) {
        snprintf(name, sizeof(name), "%s/%s", g_dir, idx.files[i]);
        assert_fc_ok(fc_file_open_read(&f, name));
        assert_fc_ok(fc_safetensors_open(&st, &f));
        assert_string_equal(fc_safetensors_metadata(st, "format"), "pt");
        assert_string_equal(fc_safetensors_metadata(st, "DCP_VERSION"), "1.0");
        for (size_t t = 0; t < fc_safetensors_count(st); t++) {
            const struct fc_st_tensor *ts = fc_safetensors_at(st, t);
            size_t k = 0;
            while (k < idx.nkeys && strcmp(idx.keys[k], ts->name) != 0)
                k++;
            assert_true(k < idx.nkeys);
            assert_int_equal(idx.key_file[k], i);
            total += ts->nbytes;
            found++;
        }
        fc_safetensors_free(st);
        st = NULL;
        fc_file_close(&f);
    }
    assert_int_equal(found, idx.nkeys);
    assert_int_equal(total, idx.total_size);
    fc_st_index_release(&idx);
    assert_null(idx.files);
    fc_st_index_release(&idx); /* twice is harmless */
}

static void test_index_dedups_files_in_first_appearance_order(void **state)
{
    struct fc_st_index idx;
    (void)state;
    assert_fc_ok(load_index_text(&idx, "{\"weight_map\":{\"z\":\"b.safetensors\","
                                       "\"a\":\"a.safetensors\",\"m\":\"b.safetensors\","
                                       "\"c\":\"a..safetensors\"}}"));
    assert_int_equal(idx.nfiles, 3);
    assert_string_equal(idx.files[0], "b.safetensors");
    assert_string_equal(idx.files[1], "a.safetensors");
    assert_string_equal(idx.files[2], "a..safetensors");
    assert_int_equal(idx.nkeys, 4);
    assert_string_equal(idx.keys[2], "m");
    assert_int_equal(idx.key_file[0], 0);
    assert_int_equal(idx.key_file[1], 1);
    assert_int_equal(idx.key_file[2], 0);
    assert_int_equal(idx.key_file[3], 2);
    assert_false(idx.has_total_size);
    fc_st_index_release(&idx);

    assert_fc_ok(load_index_text(&idx, "{\"metadata\":{\"total_size\":\"12\",\"other\":[1]},"
                                       "\"weight_map\":{},\"extra\":1}"));
    assert_int_equal(idx.nfiles, 0);
    assert_int_equal(idx.nkeys, 0);
    assert_false(idx.has_total_size);
    fc_st_index_release(&idx);
    assert_fc_ok(load_index_text(&idx, "{\"metadata\":null,\"weight_map\":{\"a\":\"x\"}}"));
    fc_st_index_release(&idx);
}

static void test_index_rejects_paths_outside_its_directory(void **state)
{
    struct fc_st_index idx;
    static const struct {
        const char *file;
        const char *why;
    } bad[] = {
        {"../model.safetensors", "starts with '.'"},
        {"..", "starts with '.'"},
        {".", "starts with '.'"},
        {".hidden.safetensors", "starts with '.'"},
        {"/etc/passwd", "contains a path separator"},
        {"sub/model.safetensors", "contains a path separator"},
        {"sub\\\\model.safetensors", "contains a path separator"},
        {"", "is empty"},
    };
    char json[256];
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        snprintf(json, sizeof(json), "{\"weight_map\":{\"ok\":\"a.safetensors\",\"w\":\"%s\"}}",
                 bad[i].file);
        assert_fc_fails(load_index_text(&idx, json), FC_ECORRUPT, bad[i].why);
        assert_non_null(strstr(fc_error_last(), "weight_map['w']"));
        fc_st_index_release(&idx);
    }
}

static void test_index_rejects_malformed_json(void **state)
{
    struct fc_st_index idx;
    static const struct {
        const char *json;
        int code;
        const char *needle;
    } bad[] = {
        {"{\"metadata\":{}}", FC_ECORRUPT, "missing 'weight_map'"},
        {"{\"weight_map\":[]}", FC_ECORRUPT, "weight_map is an array, not an object"},
        {"{\"weight_map\":{\"a\":1}}", FC_ECORRUPT, "weight_map['a'] is an integer"},
        {"{\"weight_map\":{\"a\":null}}", FC_ECORRUPT, "weight_map['a'] is null"},
        {"{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}", FC_ECORRUPT, "duplicate object key"},
        {"{\"weight_map\":{},\"weight_map\":{}}", FC_ECORRUPT, "duplicate object key"},
        {"{\"metadata\":1,\"weight_map\":{}}", FC_ECORRUPT, "metadata is an integer"},
        {"[{\"weight_map\":{}}]", FC_ECORRUPT, "index is an array, not a JSON object"},
        {"{\"weight_map\":{}", FC_ECORRUPT, "invalid JSON at file offset"},
        {"", FC_ECORRUPT, "invalid JSON"},
        {"{\"weight_map\":{\"a\":\"x\\u0000y\"}}", FC_EFORMAT, "\\u0000"},
        {"{\"weight_map\":{\"a\":\"\xff\"}}", FC_ECORRUPT, "invalid JSON"},
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        assert_fc_fails(load_index_text(&idx, bad[i].json), bad[i].code, bad[i].needle);
        assert_non_null(strstr(fc_error_last(), "model.safetensors.index.json"));
    }
    memset(&idx, 0x5A, sizeof(idx));
    snprintf(g_path, sizeof(g_path), "%s/absent.json", g_dir);
    assert_fc_fails(fc_st_index_load(&idx, g_path), FC_ENOENT, "absent.json");
    assert_null(idx.files);
    /* Over the 64 MiB cap: a sparse file, never read. */
    const char *p = write_file("huge.json", "{", 1);
    assert_int_equal(truncate(p, ((off_t)64 << 20) + 1), 0);
    assert_fc_fails(fc_st_index_load(&idx, p), FC_ECORRUPT, "more than the limit");
    assert_int_equal(unlink(p), 0);
}

static void test_index_survives_every_allocation_failure(void **state)
{
    int ok = 0;
    (void)state;
    const char *p = write_file("model.safetensors.index.json", hf_index, sizeof(hf_index));
    for (unsigned long n = 1; n < 100 && !ok; n++) {
        struct fc_st_index idx;
        fc_alloc_fail_at(n);
        const int rc = fc_st_index_load(&idx, p);
        const int fired = fc_alloc_failed();
        fc_alloc_fail_at(0);
        if (!fired) {
            assert_fc_ok(rc);
            assert_int_equal(idx.nkeys, 3);
            ok = 1;
        } else {
            assert_int_equal(rc, FC_ENOMEM);
            assert_null(idx.files);
        }
        fc_st_index_release(&idx);
    }
    assert_true(ok);
}

#define T(f) cmocka_unit_test_teardown(f, test_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_safetensors_reads_every_dtype_written_by_the_library),
        T(test_safetensors_reads_scalar_and_zero_size_tensors),
        T(test_safetensors_reads_an_empty_header_and_metadata_only),
        T(test_safetensors_maps_every_dtype_of_the_dtype_table),
        T(test_safetensors_accepts_padding_unknown_fields_and_keeps_json_order),
        T(test_safetensors_rejects_every_truncation_and_extension_of_a_valid_file),
        T(test_safetensors_rejects_bad_header_lengths),
        T(test_safetensors_rejects_invalid_utf8),
        T(test_safetensors_rejects_headers_that_are_not_json_objects),
        T(test_safetensors_rejects_metadata_that_is_not_strings),
        T(test_safetensors_rejects_overlaps_gaps_and_trailing_bytes),
        T(test_safetensors_rejects_wrong_byte_sizes_and_overflowing_shapes),
        T(test_safetensors_rejects_negative_and_non_integer_numbers),
        T(test_safetensors_rejects_duplicate_keys_and_missing_fields),
        T(test_safetensors_maps_f4_to_float4_x2_and_rejects_f6),
        T(test_safetensors_sharded_header_round_trips_offsets_and_alignment),
        T(test_safetensors_rejects_bad_sharding_info),
        T(test_safetensors_survives_every_allocation_failure),
        T(test_index_reads_what_torch_writes_and_matches_its_shards),
        T(test_index_dedups_files_in_first_appearance_order),
        T(test_index_rejects_paths_outside_its_directory),
        T(test_index_rejects_malformed_json),
        T(test_index_survives_every_allocation_failure),
    };
    return cmocka_run_group_tests_name("safetensors", tests, group_setup, group_teardown);
}
