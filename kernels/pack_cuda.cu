/*
 * pack_cuda.cu - device twin of pack_cpu.c (box copy with optional cast, and
 * every rank's chunk in one call).
 *
 * Why it reuses the CPU plan: fc_kern__box_plan() validates the box and
 * merges dims exactly as the CPU does, so both accept the same arguments; the
 * kernel then maps each destination element (coalesced writes) back to its
 * source offset through the few remaining dims.  A box that is one contiguous
 * run with no cast is a plain device-to-device memcpy.
 */
#include "cuda_check.h"
#include "fc_cast_bits.h"
#include "kernels_internal.h"

struct fc_u128p {
    uint64_t lo, hi;
};

template <class S, class D> struct fc_cast_op {
    typedef typename S::raw src_t;
    typedef typename D::raw dst_t;
    static __device__ __forceinline__ dst_t apply(src_t x)
    {
        return D::from_f32(S::to_f32(x));
    }
};

template <class T> struct fc_copy_op {
    typedef T src_t;
    typedef T dst_t;
    static __device__ __forceinline__ T apply(T x)
    {
        return x;
    }
};

template <class Op>
__global__ void fc_pack_kernel(typename Op::dst_t *__restrict__ dst,
                               const typename Op::src_t *__restrict__ src,
                               const struct fc_kern__box_plan plan)
{
    const int64_t step = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < plan.numel; i += step) {
        int64_t rem = i;
        int64_t off = plan.src_base;
        for (int d = plan.ndim - 1; d > 0; d--) {
            const int64_t q = rem / plan.size[d];
            off += (rem - q * plan.size[d]) * plan.src_stride[d];
            rem = q;
        }
        off += rem * plan.src_stride[0];
        dst[i] = Op::apply(src[off]);
    }
}

template <class Op>
static int fc_pack_launch(void *dst, const void *src, const struct fc_kern__box_plan *plan,
                          cudaStream_t stream)
{
    fc_pack_kernel<Op><<<fc_cuda_blocks(plan->numel), FC_CUDA_THREADS, 0, stream>>>(
        (typename Op::dst_t *)dst, (const typename Op::src_t *)src, *plan);
    FC_CUDA_CHECK_LAUNCH("pack_shard");
    return FC_OK;
}

template <class S>
static int fc_pack_cast_to(fc_dtype dst_dtype, void *dst, const void *src,
                           const struct fc_kern__box_plan *plan, cudaStream_t s)
{
    switch (dst_dtype) {
    case FC_DTYPE_FLOAT64: return fc_pack_launch<fc_cast_op<S, fc_cb_f64>>(dst, src, plan, s);
    case FC_DTYPE_FLOAT32: return fc_pack_launch<fc_cast_op<S, fc_cb_f32>>(dst, src, plan, s);
    case FC_DTYPE_FLOAT16: return fc_pack_launch<fc_cast_op<S, fc_cb_f16>>(dst, src, plan, s);
    case FC_DTYPE_BFLOAT16: return fc_pack_launch<fc_cast_op<S, fc_cb_bf16>>(dst, src, plan, s);
    default:
        return fc_error_set(FC_EINVAL, "cuda_pack_shard: no kernel for %s",
                            fc_dtype_name(dst_dtype));
    }
}

extern "C" int fc_cuda_pack_shard(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype,
                                  const void *src, int ndim, const int64_t *src_shape,
                                  const int64_t *offset, const int64_t *size, void *stream)
{
    struct fc_kern__box_plan plan;
    size_t dsize;
    size_t ssize;
    size_t nbytes;
    const cudaStream_t s = fc_cuda_stream(stream);

    FC_TRY(fc_kern__check_cast("cuda_pack_shard", dst_dtype, src_dtype, &dsize, &ssize));
    FC_TRY(fc_kern__box_plan("cuda_pack_shard", &plan, ndim, src_shape, offset, size));
    if (plan.numel == 0)
        return FC_OK;
    if (__builtin_mul_overflow((size_t)plan.numel, dsize, &nbytes))
        return fc_error_set(FC_EINVAL, "cuda_pack_shard: destination size overflows");
    if (dst == NULL || src == NULL)
        return fc_error_set(FC_EINVAL, "cuda_pack_shard: NULL buffer");
    if (dst_dtype == src_dtype && plan.ndim == 1) {
        FC_CUDA_TRY(cudaMemcpyAsync(dst, (const char *)src + (size_t)plan.src_base * ssize, nbytes,
                                    cudaMemcpyDeviceToDevice, s));
        return FC_OK;
    }
    if (!fc_cuda_aligned(dst, dsize) || !fc_cuda_aligned(src, ssize))
        return fc_error_set(FC_EINVAL,
                            "cuda_pack_shard: device pointer not aligned to its element size "
                            "(%s -> %s)",
                            fc_dtype_name(src_dtype), fc_dtype_name(dst_dtype));
    if (dst_dtype == src_dtype) {
        switch (dsize) {
        case 1: return fc_pack_launch<fc_copy_op<uint8_t>>(dst, src, &plan, s);
        case 2: return fc_pack_launch<fc_copy_op<uint16_t>>(dst, src, &plan, s);
        case 4: return fc_pack_launch<fc_copy_op<uint32_t>>(dst, src, &plan, s);
        case 8: return fc_pack_launch<fc_copy_op<uint64_t>>(dst, src, &plan, s);
        case 16: return fc_pack_launch<fc_copy_op<fc_u128p>>(dst, src, &plan, s);
        default:
            return fc_error_set(FC_EINVAL, "cuda_pack_shard: no kernel for %zu-byte elements",
                                dsize);
        }
    }
    switch (src_dtype) {
    case FC_DTYPE_FLOAT64: return fc_pack_cast_to<fc_cb_f64>(dst_dtype, dst, src, &plan, s);
    case FC_DTYPE_FLOAT32: return fc_pack_cast_to<fc_cb_f32>(dst_dtype, dst, src, &plan, s);
    case FC_DTYPE_FLOAT16: return fc_pack_cast_to<fc_cb_f16>(dst_dtype, dst, src, &plan, s);
    case FC_DTYPE_BFLOAT16: return fc_pack_cast_to<fc_cb_bf16>(dst_dtype, dst, src, &plan, s);
    default:
        return fc_error_set(FC_EINVAL, "cuda_pack_shard: no kernel for %s",
                            fc_dtype_name(src_dtype));
    }
}
