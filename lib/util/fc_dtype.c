/*
 * fc_dtype.c - the one dtype table and its lookups by torch, safetensors and
 * storage-class name, plus the user spellings --dtype accepts (bf16, half...).
 */
#include "fc_dtype.h"

#include <string.h>

static const struct fc_dtype_info fc_dtype_table[FC_DTYPE_COUNT] = {
    [FC_DTYPE_FLOAT64] = {"float64", "F64", "DoubleStorage", 8, 1},
    [FC_DTYPE_FLOAT32] = {"float32", "F32", "FloatStorage", 4, 1},
    [FC_DTYPE_FLOAT16] = {"float16", "F16", "HalfStorage", 2, 1},
    [FC_DTYPE_BFLOAT16] = {"bfloat16", "BF16", "BFloat16Storage", 2, 1},
    [FC_DTYPE_INT64] = {"int64", "I64", "LongStorage", 8, 0},
    [FC_DTYPE_INT32] = {"int32", "I32", "IntStorage", 4, 0},
    [FC_DTYPE_INT16] = {"int16", "I16", "ShortStorage", 2, 0},
    [FC_DTYPE_INT8] = {"int8", "I8", "CharStorage", 1, 0},
    [FC_DTYPE_UINT8] = {"uint8", "U8", "ByteStorage", 1, 0},
    [FC_DTYPE_BOOL] = {"bool", "BOOL", "BoolStorage", 1, 0},
    [FC_DTYPE_COMPLEX64] = {"complex64", "C64", "ComplexFloatStorage", 8, 0},
    [FC_DTYPE_COMPLEX128] = {"complex128", NULL, "ComplexDoubleStorage", 16, 0},
    [FC_DTYPE_COMPLEX32] = {"complex32", NULL, NULL, 4, 0},
    [FC_DTYPE_UINT16] = {"uint16", "U16", NULL, 2, 0},
    [FC_DTYPE_UINT32] = {"uint32", "U32", NULL, 4, 0},
    [FC_DTYPE_UINT64] = {"uint64", "U64", NULL, 8, 0},
    [FC_DTYPE_FLOAT8_E5M2] = {"float8_e5m2", "F8_E5M2", NULL, 1, 0},
    [FC_DTYPE_FLOAT8_E4M3FN] = {"float8_e4m3fn", "F8_E4M3", NULL, 1, 0},
    [FC_DTYPE_FLOAT8_E5M2FNUZ] = {"float8_e5m2fnuz", "F8_E5M2FNUZ", NULL, 1, 0},
    [FC_DTYPE_FLOAT8_E4M3FNUZ] = {"float8_e4m3fnuz", "F8_E4M3FNUZ", NULL, 1, 0},
    [FC_DTYPE_FLOAT8_E8M0FNU] = {"float8_e8m0fnu", "F8_E8M0", NULL, 1, 0},
    [FC_DTYPE_FLOAT4_E2M1FN_X2] = {"float4_e2m1fn_x2", NULL, NULL, 1, 0},
};

const struct fc_dtype_info *fc_dtype_info(fc_dtype dt)
{
    if (dt <= FC_DTYPE_INVALID || dt >= FC_DTYPE_COUNT)
        return NULL;
    return &fc_dtype_table[dt];
}

size_t fc_dtype_size(fc_dtype dt)
{
    const struct fc_dtype_info *i = fc_dtype_info(dt);
    return i == NULL ? 0 : i->elem_size;
}

const char *fc_dtype_name(fc_dtype dt)
{
    const struct fc_dtype_info *i = fc_dtype_info(dt);
    return i == NULL ? "invalid" : i->torch_name;
}

fc_dtype fc_dtype_from_torch_name(const char *name)
{
    for (int d = 1; d < FC_DTYPE_COUNT; d++)
        if (strcmp(fc_dtype_table[d].torch_name, name) == 0)
            return (fc_dtype)d;
    return FC_DTYPE_INVALID;
}

fc_dtype fc_dtype_from_safetensors(const char *name)
{
    for (int d = 1; d < FC_DTYPE_COUNT; d++)
        if (fc_dtype_table[d].safetensors_name != NULL &&
            strcmp(fc_dtype_table[d].safetensors_name, name) == 0)
            return (fc_dtype)d;
    return FC_DTYPE_INVALID;
}

fc_dtype fc_dtype_from_storage_class(const char *name)
{
    for (int d = 1; d < FC_DTYPE_COUNT; d++)
        if (fc_dtype_table[d].storage_class != NULL &&
            strcmp(fc_dtype_table[d].storage_class, name) == 0)
            return (fc_dtype)d;
    return FC_DTYPE_INVALID;
}

fc_dtype fc_dtype_parse_user(const char *name)
{
    static const struct {
        const char *alias;
        fc_dtype dt;
    } aliases[] = {
        {"fp64", FC_DTYPE_FLOAT64},  {"f64", FC_DTYPE_FLOAT64}, {"double", FC_DTYPE_FLOAT64},
        {"fp32", FC_DTYPE_FLOAT32},  {"f32", FC_DTYPE_FLOAT32}, {"float", FC_DTYPE_FLOAT32},
        {"fp16", FC_DTYPE_FLOAT16},  {"f16", FC_DTYPE_FLOAT16}, {"half", FC_DTYPE_FLOAT16},
        {"bf16", FC_DTYPE_BFLOAT16},
    };
    const fc_dtype d = fc_dtype_from_torch_name(name);
    if (d != FC_DTYPE_INVALID)
        return d;
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strcmp(aliases[i].alias, name) == 0)
            return aliases[i].dt;
    return FC_DTYPE_INVALID;
}
