/*
 * permute_cpu.c - conv2d weight [O, C, kh, kw] -> linear layout
 * [O, kh * kw * C] (W.permute(0, 2, 3, 1).reshape(O, -1)), the reference.
 *
 * Why per row: each output row depends only on its own input row, so callers
 * can stream a huge weight slab by slab with bounded memory.  Within a row it
 * is a [C, kh*kw] -> [kh*kw, C] transpose; writes are kept sequential (the
 * destination is the file-bound side) and the common element sizes get typed
 * loops so the compiler moves whole words instead of calling memcpy.
 */
#include <string.h>

#include "fc_kernels.h"
#include "kernels_internal.h"

int fc_kern__check_conv(const char *what, size_t elem_size, const int64_t shape[4], int64_t o0,
                        int64_t rows, int64_t *numel_out)
{
    int64_t row_elems;
    int64_t numel;
    size_t nbytes;

    if (elem_size == 0)
        return fc_error_set(FC_EINVAL, "%s: element size is 0", what);
    for (int d = 0; d < 4; d++)
        if (shape[d] < 0)
            return fc_error_set(FC_EINVAL, "%s: negative dim %d (%lld) in conv2d weight shape",
                                what, d, (long long)shape[d]);
    if (o0 < 0 || rows < 0 || o0 > shape[0] - rows)
        return fc_error_set(FC_EINVAL,
                            "%s: rows [%lld, %lld + %lld) outside the %lld output channels", what,
                            (long long)o0, (long long)o0, (long long)rows, (long long)shape[0]);
    if (fc_shape_numel(shape + 1, 3, &row_elems) < 0 ||
        __builtin_mul_overflow(row_elems, rows, &numel) ||
        __builtin_mul_overflow((size_t)numel, elem_size, &nbytes))
        return fc_error_set(FC_EINVAL, "%s: conv2d slab of %lld rows overflows", what,
                            (long long)rows);
    *numel_out = numel;
    return FC_OK;
}

#define FC_PERMUTE_ROWS(name, type)                                                                \
    static void name(void *restrict dst, const void *restrict src, int64_t rows, int64_t c,        \
                     int64_t khw)                                                                  \
    {                                                                                              \
        unsigned char *d = (unsigned char *)dst;                                                   \
        const unsigned char *s = (const unsigned char *)src;                                       \
        for (int64_t o = 0; o < rows; o++) {                                                       \
            for (int64_t k = 0; k < khw; k++) {                                                    \
                for (int64_t ci = 0; ci < c; ci++) {                                               \
                    type v;                                                                        \
                    memcpy(&v, s + (size_t)(ci * khw + k) * sizeof(type), sizeof(type));           \
                    memcpy(d + (size_t)ci * sizeof(type), &v, sizeof(type));                       \
                }                                                                                  \
                d += (size_t)c * sizeof(type);                                                     \
            }                                                                                      \
            s += (size_t)(c * khw) * sizeof(type);                                                 \
        }                                                                                          \
    }

FC_PERMUTE_ROWS(fc_permute_1, uint8_t)
FC_PERMUTE_ROWS(fc_permute_2, uint16_t)
FC_PERMUTE_ROWS(fc_permute_4, uint32_t)
FC_PERMUTE_ROWS(fc_permute_8, uint64_t)

static void fc_permute_any(unsigned char *d, const unsigned char *s, size_t es, int64_t rows,
                           int64_t c, int64_t khw)
{
    for (int64_t o = 0; o < rows; o++) {
        for (int64_t k = 0; k < khw; k++)
            for (int64_t ci = 0; ci < c; ci++, d += es)
                memcpy(d, s + (size_t)(ci * khw + k) * es, es);
        s += (size_t)(c * khw) * es;
    }
}

int fc_kern_conv2d_to_linear(void *dst, const void *src, size_t elem_size, const int64_t shape[4],
                             int64_t o0, int64_t rows)
{
    int64_t numel;
    int64_t khw;

    FC_TRY(fc_kern__check_conv("conv2d_to_linear", elem_size, shape, o0, rows, &numel));
    if (numel == 0)
        return FC_OK;
    if (dst == NULL || src == NULL)
        return fc_error_set(FC_EINVAL, "conv2d_to_linear: NULL buffer");
    khw = shape[2] * shape[3];
    if (khw == 1 || shape[1] == 1) {
        /* 1x1 kernels and single-channel weights are already in linear order. */
        memcpy(dst, src, (size_t)numel * elem_size);
        return FC_OK;
    }
    switch (elem_size) {
    case 1: fc_permute_1(dst, src, rows, shape[1], khw); break;
    case 2: fc_permute_2(dst, src, rows, shape[1], khw); break;
    case 4: fc_permute_4(dst, src, rows, shape[1], khw); break;
    case 8: fc_permute_8(dst, src, rows, shape[1], khw); break;
    default: fc_permute_any(dst, src, elem_size, rows, shape[1], khw); break;
    }
    return FC_OK;
}
