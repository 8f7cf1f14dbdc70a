/*
 * cuda_stub.c - the CUDA half of fc_kernels.h in a CPU-only build (CUDA=0).
 *
 * Why a stub instead of #ifdefs in callers (curl's pattern): convert/ and
 * cmd/ call the same API in every build; here every CUDA entry point fails
 * with FC_ENOTSUP and a message saying how to get CUDA, fc_cuda_available()
 * says 0, and the free functions accept the empty structs callers hold.
 */
#include <stddef.h>

#include "fc_kernels.h"

static int fc_no_cuda(const char *what)
{
    return fc_error_set(FC_ENOTSUP, "%s: CUDA support not built in (rebuild with make CUDA=1)",
                        what);
}

int fc_cuda_available(void)
{
    return 0;
}

int fc_cuda_device_count(int *out)
{
    *out = 0;
    return fc_no_cuda("cuda_device_count");
}

int fc_cuda_set_device(int device)
{
    (void)device;
    return fc_no_cuda("cuda_set_device");
}

int fc_cuda_stream_new(void **out)
{
    *out = NULL;
    return fc_no_cuda("cuda_stream_new");
}

void fc_cuda_stream_free(void *stream)
{
    (void)stream;
}

int fc_cuda_stream_sync(void *stream)
{
    (void)stream;
    return fc_no_cuda("cuda_stream_sync");
}

int fc_dev_buf_alloc(struct fc_dev_buf *buf, size_t nbytes)
{
    (void)nbytes;
    buf->ptr = NULL;
    buf->nbytes = 0;
    return fc_no_cuda("dev_buf_alloc");
}

void fc_dev_buf_free(struct fc_dev_buf *buf)
{
    if (buf != NULL) {
        buf->ptr = NULL;
        buf->nbytes = 0;
    }
}

int fc_dev_buf_upload(struct fc_dev_buf *dst, size_t offset, const void *src, size_t nbytes,
                      void *stream)
{
    (void)dst, (void)offset, (void)src, (void)nbytes, (void)stream;
    return fc_no_cuda("dev_buf_upload");
}

int fc_dev_buf_download(void *dst, const struct fc_dev_buf *src, size_t offset, size_t nbytes,
                        void *stream)
{
    (void)dst, (void)src, (void)offset, (void)nbytes, (void)stream;
    return fc_no_cuda("dev_buf_download");
}

int fc_pinned_buf_alloc(struct fc_pinned_buf *buf, size_t nbytes)
{
    (void)nbytes;
    buf->ptr = NULL;
    buf->nbytes = 0;
    return fc_no_cuda("pinned_buf_alloc");
}

int fc_dev_buf_copy(struct fc_dev_buf *dst, size_t dst_offset, const struct fc_dev_buf *src,
                    size_t src_offset, size_t nbytes, void *stream)
{
    (void)dst;
    (void)dst_offset;
    (void)src;
    (void)src_offset;
    (void)nbytes;
    (void)stream;
    return fc_no_cuda("dev_buf_copy");
}

void fc_pinned_buf_free(struct fc_pinned_buf *buf)
{
    if (buf != NULL) {
        buf->ptr = NULL;
        buf->nbytes = 0;
    }
}

int fc_cuda_cast(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype, const void *src, int64_t n,
                 void *stream)
{
    (void)dst_dtype, (void)dst, (void)src_dtype, (void)src, (void)n, (void)stream;
    return fc_no_cuda("cuda_cast");
}

int fc_cuda_conv2d_to_linear(void *dst, const void *src, size_t elem_size, const int64_t shape[4],
                             int64_t o0, int64_t rows, void *stream)
{
    (void)dst, (void)src, (void)elem_size, (void)shape, (void)o0, (void)rows, (void)stream;
    return fc_no_cuda("cuda_conv2d_to_linear");
}

int fc_cuda_pack_shard(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype, const void *src, int ndim,
                       const int64_t *src_shape, const int64_t *offset, const int64_t *size,
                       void *stream)
{
    (void)dst_dtype, (void)dst, (void)src_dtype, (void)src, (void)ndim, (void)src_shape;
    (void)offset, (void)size, (void)stream;
    return fc_no_cuda("cuda_pack_shard");
}
