/*
 * fc_dtype.h - the one dtype table: torch names, safetensors names, torch.save
 * storage classes, element sizes.
 *
 * Invariants: every enum value below FC_DTYPE_COUNT has a row; `bits` is the
 * size of one element in bits (4 for packed float4 pairs is represented as the
 * 8-bit float4_e2m1fn_x2 container, so every torch dtype here is a whole number
 * of bytes).  Names are the canonical torch spellings (never "float"/"half").
 */
#ifndef FC_DTYPE_H
#define FC_DTYPE_H

#include <stddef.h>

enum fc_dtype {
    FC_DTYPE_INVALID = 0,
    FC_DTYPE_FLOAT64,
    FC_DTYPE_FLOAT32,
    FC_DTYPE_FLOAT16,
    FC_DTYPE_BFLOAT16,
    FC_DTYPE_INT64,
    FC_DTYPE_INT32,
    FC_DTYPE_INT16,
    FC_DTYPE_INT8,
    FC_DTYPE_UINT8,
    FC_DTYPE_BOOL,
    FC_DTYPE_COMPLEX64,
    FC_DTYPE_COMPLEX128,
    FC_DTYPE_COMPLEX32,
    FC_DTYPE_UINT16,
    FC_DTYPE_UINT32,
    FC_DTYPE_UINT64,
    FC_DTYPE_FLOAT8_E5M2,
    FC_DTYPE_FLOAT8_E4M3FN,
    FC_DTYPE_FLOAT8_E5M2FNUZ,
    FC_DTYPE_FLOAT8_E4M3FNUZ,
    FC_DTYPE_FLOAT8_E8M0FNU,
    FC_DTYPE_FLOAT4_E2M1FN_X2,
    FC_DTYPE_COUNT
};
typedef enum fc_dtype fc_dtype;

struct fc_dtype_info {
    const char *torch_name;       /* "bfloat16"; also the GLOBAL name in module torch */
    const char *safetensors_name; /* "BF16", or NULL when safetensors has no spelling */
    const char *storage_class;    /* "BFloat16Storage", or NULL: saved as UntypedStorage + v3 */
    unsigned elem_size;           /* bytes per element */
    int is_floating;              /* a floating type that --dtype may cast (f64/f32/f16/bf16) */
};

/* Row for a dtype; NULL for FC_DTYPE_INVALID or out-of-range values. */
const struct fc_dtype_info *fc_dtype_info(fc_dtype dt);
size_t fc_dtype_size(fc_dtype dt);      /* 0 for invalid */
const char *fc_dtype_name(fc_dtype dt); /* torch name, "invalid" for invalid */

/* Lookups return FC_DTYPE_INVALID when the name is unknown. */
fc_dtype fc_dtype_from_torch_name(const char *name);    /* "float32", also accepts nothing else */
fc_dtype fc_dtype_from_safetensors(const char *name);   /* "F32" */
fc_dtype fc_dtype_from_storage_class(const char *name); /* "FloatStorage" */
/* User-facing spellings for --dtype: torch names plus fp32/fp16/bf16/f32/... */
fc_dtype fc_dtype_parse_user(const char *name);

#endif
