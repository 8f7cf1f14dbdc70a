/*
 * kernels_internal.h - argument checking and copy plans shared by the CPU
 * kernels and their CUDA twins (fc_kern__* names: cross-file, not API).
 *
 * Why: the CPU and CUDA versions must accept and reject exactly the same
 * arguments with the same messages, and walk a box in the same order, so the
 * validation and the dim-merging live in one place (the *_cpu.c files) and the
 * .cu host wrappers call them.
 */
#ifndef FC_KERNELS_INTERNAL_H
#define FC_KERNELS_INTERNAL_H

#include "fc_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Check a cast's arguments (`what` prefixes the message, e.g. "cast").
 * *src_size_out and *dst_size_out receive the element sizes.  FC_OK or FC_EINVAL.
 */
int fc_kern__check_cast(const char *what, fc_dtype dst_dtype, fc_dtype src_dtype,
                        size_t *dst_size_out, size_t *src_size_out);

/*
 * A contiguous run cast for one non-identity float pair: n elements, any
 * alignment, no overlap.  NULL when the pair is not a float cast (including
 * equal dtypes, which callers copy with memcpy).
 */
typedef void (*fc_kern__cast_fn)(void *dst, const void *src, int64_t n);
fc_kern__cast_fn fc_kern__cast_fn_for(fc_dtype dst_dtype, fc_dtype src_dtype);

/* Check a conv2d_to_linear call; *numel_out = rows * C * kh * kw.  FC_OK or FC_EINVAL. */
int fc_kern__check_conv(const char *what, size_t elem_size, const int64_t shape[4], int64_t o0,
                        int64_t rows, int64_t *numel_out);

/*
 * A box copy reduced to its simplest form: dims of extent 1 dropped, dims whose
 * box spans the whole source extent merged into their outer neighbour.  The
 * destination is dense in this order; src element of the multi-index i is
 * src_base + sum(i[d] * src_stride[d]).  When numel > 0, ndim >= 1 and the
 * innermost dim has src_stride 1 (a contiguous run).
 */
struct fc_kern__box_plan {
    int ndim;
    int64_t numel;
    int64_t src_base;
    int64_t size[FC_MAX_DIMS + 1];
    int64_t src_stride[FC_MAX_DIMS + 1];
};

/* Validate a box of a C-contiguous tensor and plan its copy.  FC_OK or FC_EINVAL. */
int fc_kern__box_plan(const char *what, struct fc_kern__box_plan *plan, int ndim,
                      const int64_t *src_shape, const int64_t *offset, const int64_t *size);

#ifdef __cplusplus
}
#endif

#endif
