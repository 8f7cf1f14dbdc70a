/*
 * pack_cpu.c - copy a box out of a C-contiguous tensor into a dense buffer,
 * optionally casting, and cut a full tensor into every rank's DTensor piece.
 *
 * Why the plan: a shard box is usually a few long contiguous runs (Shard(0)
 * is a single run), so dims that the box spans completely are merged first and
 * the copy becomes memcpy/cast over the longest possible runs; only the outer
 * dims are walked element by element.  The CUDA twin walks the same plan.
 */
#include <string.h>

#include "fc_kernels.h"
#include "kernels_internal.h"

int fc_kern__box_plan(const char *what, struct fc_kern__box_plan *plan, int ndim,
                      const int64_t *src_shape, const int64_t *offset, const int64_t *size)
{
    int64_t numel;
    int64_t stride[FC_MAX_DIMS];
    int64_t s = 1;
    int n = 0;

    memset(plan, 0, sizeof(*plan));
    if (ndim < 0 || ndim > FC_MAX_DIMS)
        return fc_error_set(FC_EINVAL, "%s: %d dims (at most %d)", what, ndim, FC_MAX_DIMS);
    if (ndim > 0 && (src_shape == NULL || offset == NULL || size == NULL))
        return fc_error_set(FC_EINVAL, "%s: NULL shape or box", what);
    for (int d = 0; d < ndim; d++) {
        if (src_shape[d] < 0 || offset[d] < 0 || size[d] < 0 || offset[d] > src_shape[d] - size[d])
            return fc_error_set(FC_EINVAL,
                                "%s: dim %d: box [%lld, %lld + %lld) is outside [0, %lld)", what, d,
                                (long long)offset[d], (long long)offset[d], (long long)size[d],
                                (long long)src_shape[d]);
    }
    if (fc_shape_numel(src_shape, ndim, &numel) < 0)
        return fc_error_set(FC_EINVAL, "%s: source element count overflows", what);
    /* Cannot fail once the source count does: each size[d] <= src_shape[d]. */
    (void)fc_shape_numel(size, ndim, &plan->numel);
    if (plan->numel == 0)
        return FC_OK;

    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= src_shape[d];
    }
    for (int d = 0; d < ndim; d++) {
        plan->src_base += offset[d] * stride[d];
        if (size[d] == 1)
            continue; /* its offset is in src_base; it adds no loop */
        if (n > 0 && plan->src_stride[n - 1] == size[d] * stride[d]) {
            /* The previous kept dim steps over exactly this dim's whole box:
             * the two walk one contiguous range together. */
            plan->size[n - 1] *= size[d];
            plan->src_stride[n - 1] = stride[d];
            continue;
        }
        plan->size[n] = size[d];
        plan->src_stride[n] = stride[d];
        n++;
    }
    if (n == 0 || plan->src_stride[n - 1] != 1) {
        /* Give the copy loop a contiguous innermost run, even of length 1. */
        plan->size[n] = 1;
        plan->src_stride[n] = 1;
        n++;
    }
    plan->ndim = n;
    return FC_OK;
}

/* Walks the plan's outer dims; each innermost run is copied or cast whole. */
static void fc_pack_run_plan(const struct fc_kern__box_plan *plan, unsigned char *dst, size_t dsize,
                             const unsigned char *src, size_t ssize, fc_kern__cast_fn cast)
{
    const int outer = plan->ndim - 1;
    const int64_t run = plan->size[outer];
    const int64_t nruns = plan->numel / run;
    int64_t idx[FC_MAX_DIMS + 1] = {0};
    int64_t soff = plan->src_base;

    for (int64_t r = 0; r < nruns; r++) {
        const unsigned char *const s = src + (size_t)soff * ssize;
        if (cast != NULL)
            cast(dst, s, run);
        else
            memcpy(dst, s, (size_t)run * ssize);
        dst += (size_t)run * dsize;
        /* Odometer over the outer dims, innermost first. */
        for (int d = outer - 1; d >= 0; d--) {
            soff += plan->src_stride[d];
            if (++idx[d] < plan->size[d])
                break;
            soff -= idx[d] * plan->src_stride[d];
            idx[d] = 0;
        }
    }
}

int fc_kern_pack_shard(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype, const void *src, int ndim,
                       const int64_t *src_shape, const int64_t *offset, const int64_t *size)
{
    struct fc_kern__box_plan plan;
    size_t dsize;
    size_t ssize;
    size_t nbytes;

    FC_TRY(fc_kern__check_cast("pack_shard", dst_dtype, src_dtype, &dsize, &ssize));
    FC_TRY(fc_kern__box_plan("pack_shard", &plan, ndim, src_shape, offset, size));
    if (plan.numel == 0)
        return FC_OK;
    if (__builtin_mul_overflow((size_t)plan.numel, dsize, &nbytes))
        return fc_error_set(FC_EINVAL, "pack_shard: destination size overflows");
    if (dst == NULL || src == NULL)
        return fc_error_set(FC_EINVAL, "pack_shard: NULL buffer");
    fc_pack_run_plan(&plan, dst, dsize, src, ssize, fc_kern__cast_fn_for(dst_dtype, src_dtype));
    return FC_OK;
}
