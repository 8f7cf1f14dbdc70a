/*
 * permute_cuda.cu - device twin of permute_cpu.c (conv2d weight -> linear).
 *
 * Why a gather: each thread writes one output element, so writes are
 * coalesced (the output is what goes on to the file) and reads stride by
 * kh*kw inside one row, which stays in cache for the small kernels conv
 * weights have.  Typed instances move whole words; other element sizes fall
 * back to a byte kernel.
 */
#include "cuda_check.h"
#include "kernels_internal.h"

struct fc_u128 {
    uint64_t lo, hi;
};

template <class T>
__global__ void fc_permute_kernel(T *__restrict__ dst, const T *__restrict__ src, int64_t numel,
                                  int64_t c, int64_t khw)
{
    const int64_t row_elems = c * khw;
    const int64_t step = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += step) {
        const int64_t row = i / row_elems;
        const int64_t j = i - row * row_elems; /* (k, ci) in the output row */
        const int64_t k = j / c;
        const int64_t ci = j - k * c;
        dst[i] = src[row * row_elems + ci * khw + k];
    }
}

__global__ void fc_permute_bytes_kernel(unsigned char *__restrict__ dst,
                                        const unsigned char *__restrict__ src, int64_t nbytes,
                                        int64_t es, int64_t c, int64_t khw)
{
    const int64_t row_elems = c * khw;
    const int64_t step = (int64_t)blockDim.x * gridDim.x;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nbytes; b += step) {
        const int64_t i = b / es;
        const int64_t byte = b - i * es;
        const int64_t row = i / row_elems;
        const int64_t j = i - row * row_elems;
        const int64_t k = j / c;
        const int64_t ci = j - k * c;
        dst[b] = src[(row * row_elems + ci * khw + k) * es + byte];
    }
}

template <class T>
static int fc_permute_launch(void *dst, const void *src, int64_t numel, int64_t c, int64_t khw,
                             cudaStream_t stream)
{
    fc_permute_kernel<T><<<fc_cuda_blocks(numel), FC_CUDA_THREADS, 0, stream>>>(
        (T *)dst, (const T *)src, numel, c, khw);
    FC_CUDA_CHECK_LAUNCH("conv2d_to_linear");
    return FC_OK;
}

extern "C" int fc_cuda_conv2d_to_linear(void *dst, const void *src, size_t elem_size,
                                        const int64_t shape[4], int64_t o0, int64_t rows,
                                        void *stream)
{
    int64_t numel;
    int64_t khw;
    const cudaStream_t s = fc_cuda_stream(stream);

    FC_TRY(fc_kern__check_conv("cuda_conv2d_to_linear", elem_size, shape, o0, rows, &numel));
    if (numel == 0)
        return FC_OK;
    if (dst == NULL || src == NULL)
        return fc_error_set(FC_EINVAL, "cuda_conv2d_to_linear: NULL buffer");
    khw = shape[2] * shape[3];
    if (khw == 1 || shape[1] == 1) {
        FC_CUDA_TRY(
            cudaMemcpyAsync(dst, src, (size_t)numel * elem_size, cudaMemcpyDeviceToDevice, s));
        return FC_OK;
    }
    if ((elem_size & (elem_size - 1)) == 0 && elem_size <= 16 &&
        (!fc_cuda_aligned(dst, elem_size) || !fc_cuda_aligned(src, elem_size)))
        return fc_error_set(FC_EINVAL,
                            "cuda_conv2d_to_linear: device pointer not aligned to "
                            "the %zu-byte element size",
                            elem_size);
    switch (elem_size) {
    case 1: return fc_permute_launch<uint8_t>(dst, src, numel, shape[1], khw, s);
    case 2: return fc_permute_launch<uint16_t>(dst, src, numel, shape[1], khw, s);
    case 4: return fc_permute_launch<uint32_t>(dst, src, numel, shape[1], khw, s);
    case 8: return fc_permute_launch<uint64_t>(dst, src, numel, shape[1], khw, s);
    case 16: return fc_permute_launch<fc_u128>(dst, src, numel, shape[1], khw, s);
    default:
        fc_permute_bytes_kernel<<<fc_cuda_blocks(numel * (int64_t)elem_size), FC_CUDA_THREADS, 0,
                                  s>>>((unsigned char *)dst, (const unsigned char *)src,
                                       numel * (int64_t)elem_size, (int64_t)elem_size, shape[1],
                                       khw);
        FC_CUDA_CHECK_LAUNCH("conv2d_to_linear");
        return FC_OK;
    }
}
