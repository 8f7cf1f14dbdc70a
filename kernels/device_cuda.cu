/*
 * device_cuda.cu - CUDA device, stream and buffer helpers (CUDA=1 builds).
 *
 * Why they exist: convert/ must allocate, copy and synchronise device memory
 * without seeing a CUDA type, so struct fc_dev_buf / fc_pinned_buf and opaque
 * stream handles wrap the runtime here, each failure turned into FC_ECUDA with
 * CUDA's reason at the call that failed.
 */
#include <assert.h>

#include "cuda_check.h"

extern "C" int fc_cuda_available(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: CUDA is just not there */
        return 0;
    }
    return n > 0;
}

extern "C" int fc_cuda_device_count(int *out)
{
    int n = 0;
    const cudaError_t rc = cudaGetDeviceCount(&n);

    *out = 0;
    if (rc == cudaErrorNoDevice) {
        (void)cudaGetLastError();
        return FC_OK;
    }
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return fc_error_set(FC_ECUDA, "no usable CUDA device: %s (%s)", cudaGetErrorString(rc),
                            cudaGetErrorName(rc));
    }
    *out = n;
    return FC_OK;
}

extern "C" int fc_cuda_set_device(int device)
{
    FC_CUDA_TRY(cudaSetDevice(device));
    return FC_OK;
}

extern "C" int fc_cuda_stream_new(void **out)
{
    cudaStream_t s = NULL;

    *out = NULL;
    FC_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = (void *)s;
    return FC_OK;
}

extern "C" void fc_cuda_stream_free(void *stream)
{
    if (stream != NULL && cudaStreamDestroy(fc_cuda_stream(stream)) != cudaSuccess)
        (void)cudaGetLastError(); /* nothing useful to report from a destructor */
}

extern "C" int fc_cuda_stream_sync(void *stream)
{
    FC_CUDA_TRY(cudaStreamSynchronize(fc_cuda_stream(stream)));
    return FC_OK;
}

/*
 * Device (cudaMalloc) and pinned host (cudaMallocHost) buffers are allocated and freed
 * alike: one pair of helpers for both kinds.
 */
static int fc_cuda_buf_alloc(void **ptr, size_t *size, size_t nbytes, int pinned)
{
    void *p = NULL;
    assert(*ptr == NULL);
    *ptr = NULL;
    *size = 0;
    if (nbytes == 0)
        return FC_OK;
    const cudaError_t rc = pinned ? cudaMallocHost(&p, nbytes) : cudaMalloc(&p, nbytes);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return fc_error_set(FC_ECUDA, "%s of %zu bytes failed: %s",
                            pinned ? "cudaMallocHost" : "cudaMalloc", nbytes,
                            cudaGetErrorString(rc));
    }
    *ptr = p;
    *size = nbytes;
    return FC_OK;
}

static void fc_cuda_buf_free(void **ptr, size_t *size, int pinned)
{
    if (*ptr != NULL && (pinned ? cudaFreeHost(*ptr) : cudaFree(*ptr)) != cudaSuccess)
        (void)cudaGetLastError(); /* nothing useful to report from a destructor */
    *ptr = NULL;
    *size = 0;
}

extern "C" int fc_dev_buf_alloc(struct fc_dev_buf *buf, size_t nbytes)
{
    return fc_cuda_buf_alloc(&buf->ptr, &buf->nbytes, nbytes, 0);
}

extern "C" void fc_dev_buf_free(struct fc_dev_buf *buf)
{
    if (buf != NULL)
        fc_cuda_buf_free(&buf->ptr, &buf->nbytes, 0);
}

static int fc_dev_range(const char *what, const struct fc_dev_buf *buf, size_t offset,
                        size_t nbytes)
{
    if (offset > buf->nbytes || nbytes > buf->nbytes - offset)
        return fc_error_set(FC_EINVAL,
                            "%s: bytes [%zu, %zu + %zu) outside a %zu-byte device buffer", what,
                            offset, offset, nbytes, buf->nbytes);
    return FC_OK;
}

extern "C" int fc_dev_buf_upload(struct fc_dev_buf *dst, size_t offset, const void *src,
                                 size_t nbytes, void *stream)
{
    FC_TRY(fc_dev_range("dev_buf_upload", dst, offset, nbytes));
    if (nbytes == 0)
        return FC_OK;
    if (stream == NULL)
        FC_CUDA_TRY(cudaMemcpy((char *)dst->ptr + offset, src, nbytes, cudaMemcpyHostToDevice));
    else
        FC_CUDA_TRY(cudaMemcpyAsync((char *)dst->ptr + offset, src, nbytes, cudaMemcpyHostToDevice,
                                    fc_cuda_stream(stream)));
    return FC_OK;
}

extern "C" int fc_dev_buf_download(void *dst, const struct fc_dev_buf *src, size_t offset,
                                   size_t nbytes, void *stream)
{
    FC_TRY(fc_dev_range("dev_buf_download", src, offset, nbytes));
    if (nbytes == 0)
        return FC_OK;
    if (stream == NULL)
        FC_CUDA_TRY(
            cudaMemcpy(dst, (const char *)src->ptr + offset, nbytes, cudaMemcpyDeviceToHost));
    else
        FC_CUDA_TRY(cudaMemcpyAsync(dst, (const char *)src->ptr + offset, nbytes,
                                    cudaMemcpyDeviceToHost, fc_cuda_stream(stream)));
    return FC_OK;
}

extern "C" int fc_dev_buf_copy(struct fc_dev_buf *dst, size_t dst_offset,
                               const struct fc_dev_buf *src, size_t src_offset, size_t nbytes,
                               void *stream)
{
    FC_TRY(fc_dev_range("dev_buf_copy", dst, dst_offset, nbytes));
    FC_TRY(fc_dev_range("dev_buf_copy", src, src_offset, nbytes));
    if (nbytes == 0)
        return FC_OK;
    FC_CUDA_TRY(cudaMemcpyAsync((char *)dst->ptr + dst_offset, (const char *)src->ptr + src_offset,
                                nbytes, cudaMemcpyDeviceToDevice, fc_cuda_stream(stream)));
    return FC_OK;
}

extern "C" int fc_pinned_buf_alloc(struct fc_pinned_buf *buf, size_t nbytes)
{
    return fc_cuda_buf_alloc(&buf->ptr, &buf->nbytes, nbytes, 1);
}

extern "C" void fc_pinned_buf_free(struct fc_pinned_buf *buf)
{
    if (buf != NULL)
        fc_cuda_buf_free(&buf->ptr, &buf->nbytes, 1);
}
