/*
 * fc_tensor.h - shape/stride/offset descriptors.
 *
 * Invariants: shapes, strides and element counts are int64_t; strides and the
 * storage offset count elements of `dtype` (as torch does); 0 <= ndim <=
 * FC_MAX_DIMS; a 0-d tensor has ndim 0 and one element.
 */
#ifndef FC_TENSOR_H
#define FC_TENSOR_H

#include <stdint.h>

#include "fc_dtype.h"

#define FC_MAX_DIMS 16

struct fc_tensor_desc {
    fc_dtype dtype;
    int ndim;
    int64_t shape[FC_MAX_DIMS];
    int64_t stride[FC_MAX_DIMS];
    int64_t storage_offset;
};

/*
 * fc_shape_numel() - product of the dims into *out.  Returns 0, or -1 on a
 * negative dim or int64 overflow.
 */
static inline int fc_shape_numel(const int64_t *shape, int ndim, int64_t *out)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n))
            return -1;
    }
    *out = n;
    return 0;
}

/*
 * fc_shape_nbytes() - bytes of a tensor's logical elements (numel * element
 * size), or 0 when the shape is invalid (inputs are validated where parsed).
 */
static inline uint64_t fc_shape_nbytes(const int64_t *shape, int ndim, fc_dtype dtype)
{
    int64_t n = 0;
    if (fc_shape_numel(shape, ndim, &n) < 0)
        return 0;
    return (uint64_t)n * fc_dtype_size(dtype);
}

/*
 * fc_tensor_set_contiguous() - fill row-major strides for desc->shape.  Shapes
 * from input files are checked with fc_shape_numel() where they are parsed; a
 * product that would overflow anyway saturates instead of being undefined.
 */
static inline void fc_tensor_set_contiguous(struct fc_tensor_desc *desc)
{
    int64_t s = 1;
    for (int i = desc->ndim - 1; i >= 0; i--) {
        desc->stride[i] = s;
        if (__builtin_mul_overflow(s, desc->shape[i] > 0 ? desc->shape[i] : 1, &s))
            s = INT64_MAX;
    }
}

/* fc_tensor_is_contiguous() - row-major contiguous (size-1 dims ignored). */
static inline int fc_tensor_is_contiguous(const struct fc_tensor_desc *desc)
{
    int64_t s = 1;
    for (int i = desc->ndim - 1; i >= 0; i--) {
        if (desc->shape[i] == 0)
            return 1;
        if (desc->shape[i] != 1 && desc->stride[i] != s)
            return 0;
        if (__builtin_mul_overflow(s, desc->shape[i], &s))
            return 0;
    }
    return 1;
}

#endif
