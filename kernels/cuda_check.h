/*
 * cuda_check.h - the CUDA runtime boundary: error conversion and launch
 * sizing.  Included only by the .cu files in kernels/ and by convert/comm_nccl.c
 * (it pulls in cuda_runtime.h).
 *
 * Why these macros (NCCL's CUDACHECK pattern): every runtime call is checked
 * where it is made, the message names the call and CUDA's own reason, and
 * cudaGetLastError() is called so a non-sticky error does not resurface in an
 * unrelated later call.  Kernel launches return nothing, so each is followed by
 * FC_CUDA_CHECK_LAUNCH().
 */
#ifndef FC_CUDA_CHECK_H
#define FC_CUDA_CHECK_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "fc_kernels.h"

#define FC_CUDA_TRY(call)                                                                          \
    do {                                                                                           \
        const cudaError_t fc_cu_rc_ = (call);                                                      \
        if (fc_cu_rc_ != cudaSuccess) {                                                            \
            (void)cudaGetLastError();                                                              \
            return fc_error_set(FC_ECUDA, "%s failed: %s (%s)", #call,                             \
                                cudaGetErrorString(fc_cu_rc_), cudaGetErrorName(fc_cu_rc_));       \
        }                                                                                          \
    } while (0)

#define FC_CUDA_TRY_GOTO(call, rc, label)                                                          \
    do {                                                                                           \
        const cudaError_t fc_cu_rc_ = (call);                                                      \
        if (fc_cu_rc_ != cudaSuccess) {                                                            \
            (void)cudaGetLastError();                                                              \
            (rc) = fc_error_set(FC_ECUDA, "%s failed: %s (%s)", #call,                             \
                                cudaGetErrorString(fc_cu_rc_), cudaGetErrorName(fc_cu_rc_));       \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* After a <<<...>>> launch: report a bad configuration or missing kernel image. */
#define FC_CUDA_CHECK_LAUNCH(kernel_name)                                                          \
    do {                                                                                           \
        const cudaError_t fc_cu_rc_ = cudaGetLastError();                                          \
        if (fc_cu_rc_ != cudaSuccess)                                                              \
            return fc_error_set(FC_ECUDA, "launching the %s kernel failed: %s (%s)",               \
                                (kernel_name), cudaGetErrorString(fc_cu_rc_),                      \
                                cudaGetErrorName(fc_cu_rc_));                                      \
    } while (0)

#define FC_CUDA_THREADS 256

/*
 * Grid for a grid-stride loop over n items: enough blocks to fill any current
 * GPU, capped so the grid size stays far inside the 32-bit limit; the loop
 * (over int64_t) covers the rest.  n must be > 0.
 */
static inline unsigned fc_cuda_blocks(int64_t n)
{
    const int64_t want = (n + FC_CUDA_THREADS - 1) / FC_CUDA_THREADS;
    return (unsigned)(want < 65536 ? want : 65536);
}

static inline cudaStream_t fc_cuda_stream(void *stream)
{
    return (cudaStream_t)stream;
}

/* A device pointer usable for elements of `align` bytes (a power of two). */
static inline int fc_cuda_aligned(const void *p, size_t align)
{
    return ((uintptr_t)p & (align - 1)) == 0;
}

#endif
