/*
 * cast_cpu.c - the reference float casts (see fc_kernels.h for the rules).
 *
 * Why the loops look like this: one straight loop per dtype pair, values moved
 * with memcpy (so misaligned mmapped tensors are fine and the compiler still
 * emits plain vector loads), and branch-free conversions from fc_cast_bits.h
 * the vectoriser can turn into selects.  The CUDA twin uses the same header,
 * which is what keeps the two bit-identical.
 */
#include <string.h>

#include "fc_cast_bits.h"
#include "fc_kernels.h"
#include "kernels_internal.h"

/* Index of the four float dtypes in the tables below, or -1. */
static int fc_float_index(fc_dtype dt)
{
    switch (dt) {
    case FC_DTYPE_FLOAT64: return 0;
    case FC_DTYPE_FLOAT32: return 1;
    case FC_DTYPE_FLOAT16: return 2;
    case FC_DTYPE_BFLOAT16: return 3;
    default: return -1;
    }
}

#define FC_CAST_LOOP(name, src_t, to_f32, dst_t, from_f32)                                         \
    static void name(void *restrict dst, const void *restrict src, int64_t n)                      \
    {                                                                                              \
        unsigned char *const d = (unsigned char *)dst;                                             \
        const unsigned char *const s = (const unsigned char *)src;                                 \
        for (int64_t i = 0; i < n; i++) {                                                          \
            src_t x;                                                                               \
            dst_t y;                                                                               \
            memcpy(&x, s + (size_t)i * sizeof(src_t), sizeof(x));                                  \
            y = from_f32(to_f32(x));                                                               \
            memcpy(d + (size_t)i * sizeof(dst_t), &y, sizeof(y));                                  \
        }                                                                                          \
    }

#define FC_ID32 fc_cb_f32_to_f32

FC_CAST_LOOP(fc_cast_f64_f32, uint64_t, fc_cb_f64_to_f32, uint32_t, FC_ID32)
FC_CAST_LOOP(fc_cast_f64_f16, uint64_t, fc_cb_f64_to_f32, uint16_t, fc_cb_f32_to_f16)
FC_CAST_LOOP(fc_cast_f64_bf16, uint64_t, fc_cb_f64_to_f32, uint16_t, fc_cb_f32_to_bf16)
FC_CAST_LOOP(fc_cast_f32_f64, uint32_t, FC_ID32, uint64_t, fc_cb_f32_to_f64)
FC_CAST_LOOP(fc_cast_f32_f16, uint32_t, FC_ID32, uint16_t, fc_cb_f32_to_f16)
FC_CAST_LOOP(fc_cast_f32_bf16, uint32_t, FC_ID32, uint16_t, fc_cb_f32_to_bf16)
FC_CAST_LOOP(fc_cast_f16_f64, uint16_t, fc_cb_f16_to_f32, uint64_t, fc_cb_f32_to_f64)
FC_CAST_LOOP(fc_cast_f16_f32, uint16_t, fc_cb_f16_to_f32, uint32_t, FC_ID32)
FC_CAST_LOOP(fc_cast_f16_bf16, uint16_t, fc_cb_f16_to_f32, uint16_t, fc_cb_f32_to_bf16)
FC_CAST_LOOP(fc_cast_bf16_f64, uint16_t, fc_cb_bf16_to_f32, uint64_t, fc_cb_f32_to_f64)
FC_CAST_LOOP(fc_cast_bf16_f32, uint16_t, fc_cb_bf16_to_f32, uint32_t, FC_ID32)
FC_CAST_LOOP(fc_cast_bf16_f16, uint16_t, fc_cb_bf16_to_f32, uint16_t, fc_cb_f32_to_f16)

/* [src][dst]; the diagonal is a plain copy. */
static const fc_kern__cast_fn fc_cast_table[4][4] = {
    {NULL, fc_cast_f64_f32, fc_cast_f64_f16, fc_cast_f64_bf16},
    {fc_cast_f32_f64, NULL, fc_cast_f32_f16, fc_cast_f32_bf16},
    {fc_cast_f16_f64, fc_cast_f16_f32, NULL, fc_cast_f16_bf16},
    {fc_cast_bf16_f64, fc_cast_bf16_f32, fc_cast_bf16_f16, NULL},
};

fc_kern__cast_fn fc_kern__cast_fn_for(fc_dtype dst_dtype, fc_dtype src_dtype)
{
    const int si = fc_float_index(src_dtype);
    const int di = fc_float_index(dst_dtype);
    if (si < 0 || di < 0)
        return NULL;
    return fc_cast_table[si][di];
}

int fc_kern_cast_supported(fc_dtype dst_dtype, fc_dtype src_dtype)
{
    if (fc_dtype_size(dst_dtype) == 0 || fc_dtype_size(src_dtype) == 0)
        return 0;
    if (dst_dtype == src_dtype)
        return 1;
    return fc_float_index(dst_dtype) >= 0 && fc_float_index(src_dtype) >= 0;
}

int fc_kern__check_cast(const char *what, fc_dtype dst_dtype, fc_dtype src_dtype,
                        size_t *dst_size_out, size_t *src_size_out)
{
    if (!fc_kern_cast_supported(dst_dtype, src_dtype))
        return fc_error_set(FC_EINVAL,
                            "%s: cannot cast %s to %s (only float64, float32, float16 and "
                            "bfloat16 convert)",
                            what, fc_dtype_name(src_dtype), fc_dtype_name(dst_dtype));
    *dst_size_out = fc_dtype_size(dst_dtype);
    *src_size_out = fc_dtype_size(src_dtype);
    return FC_OK;
}

int fc_kern_cast(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype, const void *src, int64_t n)
{
    size_t dsize = 0;
    size_t ssize = 0;
    size_t nbytes;
    fc_kern__cast_fn fn;

    FC_TRY(fc_kern__check_cast("cast", dst_dtype, src_dtype, &dsize, &ssize));
    if (n < 0)
        return fc_error_set(FC_EINVAL, "cast: negative element count %lld", (long long)n);
    if (n == 0)
        return FC_OK;
    if (dst == NULL || src == NULL)
        return fc_error_set(FC_EINVAL, "cast: NULL buffer for %lld elements", (long long)n);
    if (__builtin_mul_overflow((size_t)n, dsize > ssize ? dsize : ssize, &nbytes))
        return fc_error_set(FC_EINVAL, "cast: %lld elements overflow size_t", (long long)n);

    fn = fc_kern__cast_fn_for(dst_dtype, src_dtype);
    if (fn != NULL)
        fn(dst, src, n);
    else if (dst != src)
        memcpy(dst, src, nbytes);
    return FC_OK;
}
