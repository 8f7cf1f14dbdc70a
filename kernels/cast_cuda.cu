/*
 * cast_cuda.cu - device twin of cast_cpu.c.
 *
 * Why not __float2bfloat16 / __float2half: those round the same way for
 * numbers but write their own NaN patterns, and the output must equal the CPU
 * reference bit for bit.  The conversions come from fc_cast_bits.h, the same
 * integer code the CPU runs, instantiated once per dtype pair.
 */
#include "cuda_check.h"
#include "fc_cast_bits.h"
#include "kernels_internal.h"

template <class S, class D>
__global__ void fc_cast_kernel(typename D::raw *__restrict__ dst,
                               const typename S::raw *__restrict__ src, int64_t n)
{
    const int64_t step = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        dst[i] = D::from_f32(S::to_f32(src[i]));
}

template <class S, class D>
static int fc_cast_launch(void *dst, const void *src, int64_t n, cudaStream_t stream)
{
    fc_cast_kernel<S, D><<<fc_cuda_blocks(n), FC_CUDA_THREADS, 0, stream>>>(
        (typename D::raw *)dst, (const typename S::raw *)src, n);
    FC_CUDA_CHECK_LAUNCH("cast");
    return FC_OK;
}

template <class S>
static int fc_cast_launch_to(fc_dtype dst_dtype, void *dst, const void *src, int64_t n,
                             cudaStream_t stream)
{
    switch (dst_dtype) {
    case FC_DTYPE_FLOAT64: return fc_cast_launch<S, fc_cb_f64>(dst, src, n, stream);
    case FC_DTYPE_FLOAT32: return fc_cast_launch<S, fc_cb_f32>(dst, src, n, stream);
    case FC_DTYPE_FLOAT16: return fc_cast_launch<S, fc_cb_f16>(dst, src, n, stream);
    case FC_DTYPE_BFLOAT16: return fc_cast_launch<S, fc_cb_bf16>(dst, src, n, stream);
    default:
        return fc_error_set(FC_EINVAL, "cuda_cast: no kernel for %s", fc_dtype_name(dst_dtype));
    }
}

extern "C" int fc_cuda_cast(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype, const void *src,
                            int64_t n, void *stream)
{
    size_t dsize;
    size_t ssize;
    size_t nbytes;
    const cudaStream_t s = fc_cuda_stream(stream);

    FC_TRY(fc_kern__check_cast("cuda_cast", dst_dtype, src_dtype, &dsize, &ssize));
    if (n < 0)
        return fc_error_set(FC_EINVAL, "cuda_cast: negative element count %lld", (long long)n);
    if (n == 0)
        return FC_OK;
    if (dst == NULL || src == NULL)
        return fc_error_set(FC_EINVAL, "cuda_cast: NULL buffer for %lld elements", (long long)n);
    if (__builtin_mul_overflow((size_t)n, dsize > ssize ? dsize : ssize, &nbytes))
        return fc_error_set(FC_EINVAL, "cuda_cast: %lld elements overflow size_t", (long long)n);
    if (dst_dtype == src_dtype) {
        if (dst != src)
            FC_CUDA_TRY(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s));
        return FC_OK;
    }
    if (!fc_cuda_aligned(dst, dsize) || !fc_cuda_aligned(src, ssize))
        return fc_error_set(FC_EINVAL,
                            "cuda_cast: device pointer not aligned to its element size (%s -> %s)",
                            fc_dtype_name(src_dtype), fc_dtype_name(dst_dtype));
    switch (src_dtype) {
    case FC_DTYPE_FLOAT64: return fc_cast_launch_to<fc_cb_f64>(dst_dtype, dst, src, n, s);
    case FC_DTYPE_FLOAT32: return fc_cast_launch_to<fc_cb_f32>(dst_dtype, dst, src, n, s);
    case FC_DTYPE_FLOAT16: return fc_cast_launch_to<fc_cb_f16>(dst_dtype, dst, src, n, s);
    case FC_DTYPE_BFLOAT16: return fc_cast_launch_to<fc_cb_bf16>(dst_dtype, dst, src, n, s);
    default:
        return fc_error_set(FC_EINVAL, "cuda_cast: no kernel for %s", fc_dtype_name(src_dtype));
    }
}
