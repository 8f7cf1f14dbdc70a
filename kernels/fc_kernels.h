/*
 * fc_kernels.h - element kernels behind a plain C ABI: dtype casts, the
 * conv2d -> linear weight permutation, and shard packing; CPU references and
 * their CUDA twins, plus the device helpers the CUDA twins need.
 *
 * Invariants:
 *  - No CUDA type appears here.  CUDA streams are opaque `void *` (NULL is the
 *    legacy default stream); device memory is reached through struct
 *    fc_dev_buf or plain device pointers, never mixed with host memory.
 *  - The same API exists in every build.  With CUDA=0, kernels/cuda_stub.c makes
 *    every fc_cuda_* / fc_dev_buf_* / fc_pinned_buf_* call fail with FC_ENOTSUP
 *    and fc_cuda_available() return 0, so callers need no #ifdef.
 *  - CPU kernels are the reference: the CUDA twins produce the same bytes
 *    (casts included, NaNs included), which tests/gpu/test_kernels_cuda.c checks.
 *  - Element counts, shapes and offsets are int64_t; byte sizes are size_t.
 *  - Host pointers may have any alignment (values are moved with memcpy); device
 *    pointers must be aligned to their element size (FC_EINVAL otherwise).
 *  - Source and destination buffers never overlap (the one exception is a cast
 *    or pack whose dtypes are equal and dst == src, which is a no-op copy).
 *  - Functions are thread-safe; errors are reported per thread (fc_error.h).
 *
 * Cast semantics (the float dtypes float64, float32, float16, bfloat16, any
 * pair): bit-identical to torch's CPU `Tensor.to(dtype)` (checked against
 * torch 2.x by tests/unit/test_kernels_cpu.c), i.e.
 *  - float32 -> bfloat16: round to nearest even; every NaN becomes 0x7fc0
 *    (c10::BFloat16's scalar rule);
 *  - float32 -> float16: round to nearest even, subnormals kept, overflow to
 *    inf; a NaN keeps its sign and top payload bits and gets the quiet bit
 *    (what F16C and torch's vectorised path do);
 *  - float64 -> float16/bfloat16 goes through float32 (two roundings, as torch);
 *  - float16/bfloat16 -> float32 is exact (a float16 NaN gets the quiet bit);
 *  - float16 <-> bfloat16 and the 16-bit types -> float64 go through float32;
 *  - float32 <-> float64 follow IEEE (NaN: sign and payload kept, quiet bit set).
 * torch itself is not consistent for NaNs: its AVX2/AVX512 contiguous
 * float32 -> bfloat16 path writes 0xffff, and some scalar tails differ; only
 * NaN bit patterns are affected, never a number.  A cast between equal dtypes
 * copies the bytes unchanged, for any dtype.
 */
#ifndef FC_KERNELS_H
#define FC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "fc_dtype.h"
#include "fc_error.h"
#include "fc_tensor.h"

/* ---- engine selection (dispatch.c) -------------------------------------- */

enum fc_engine {
    FC_ENGINE_AUTO = 0, /* CUDA when built in and a device is present, else CPU */
    FC_ENGINE_CPU,
    FC_ENGINE_CUDA
};
typedef enum fc_engine fc_engine;

/*
 * fc_engine_resolve() - decide which engine runs the kernels.
 *
 * FC_ENGINE_AUTO never fails: *out is FC_ENGINE_CUDA if CUDA was built in and
 * at least one device is visible, else FC_ENGINE_CPU.  FC_ENGINE_CPU always
 * succeeds.  FC_ENGINE_CUDA is never silently downgraded.
 *
 * Returns FC_OK; FC_ENOTSUP when CUDA is requested but was not built in;
 * FC_ECUDA when it was built in but no usable device (or driver) exists;
 * FC_EINVAL for an unknown value.  *out is set only on success.
 */
int fc_engine_resolve(fc_engine requested, fc_engine *out);

/* "auto", "cpu", "cuda", or "invalid". */
const char *fc_engine_name(fc_engine engine);

/* ---- casts (cast_cpu.c) --------------------------------------------------- */

/*
 * fc_kern_cast_supported() - 1 if fc_kern_cast() can cast src_dtype to
 * dst_dtype: both are float64/float32/float16/bfloat16, or the dtypes are equal
 * and valid (a plain copy).  0 otherwise.
 */
int fc_kern_cast_supported(fc_dtype dst_dtype, fc_dtype src_dtype);

/*
 * fc_kern_cast() - convert n contiguous elements of src into dst (host memory).
 *
 * dst holds n * fc_dtype_size(dst_dtype) bytes.  n == 0 does nothing (the
 * pointers may then be NULL).  Semantics: see the top of this file.
 *
 * Returns FC_OK, or FC_EINVAL (negative n, NULL pointer, invalid dtype, or a
 * pair fc_kern_cast_supported() rejects; the message names both dtypes).
 */
int fc_kern_cast(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype, const void *src, int64_t n);

/* ---- conv2d weight -> linear layout (permute_cpu.c) ----------------------- */

/*
 * fc_kern_conv2d_to_linear() - rows [o0, o0 + rows) of a C-contiguous conv2d
 * weight W of shape[4] = {O, C, kh, kw}, rewritten as the same rows of
 * W.permute(0, 2, 3, 1).reshape(O, kh * kw * C):
 *     out[o, (h * kw + w) * C + c] = in[o, c, h, w].
 *
 * The permutation never crosses rows, so a caller can stream the weight in
 * slabs: src points at element [o0, 0, 0, 0] (the slab's first row) and dst at
 * output row o0; both hold rows * C * kh * kw elements of elem_size bytes (any
 * size: the kernel only moves bytes, so it serves every dtype).
 *
 * Returns FC_OK, or FC_EINVAL (negative dims, o0 + rows > O, zero elem_size,
 * NULL pointer with a non-empty slab, size overflow).
 */
int fc_kern_conv2d_to_linear(void *dst, const void *src, size_t elem_size, const int64_t shape[4],
                             int64_t o0, int64_t rows);

/* ---- shard packing (pack_cpu.c) ------------------------------------------- */

/*
 * fc_kern_pack_shard() - copy the box [offset[d], offset[d] + size[d]) of every
 * dim d out of a C-contiguous tensor of shape src_shape (ndim dims, 0 <= ndim
 * <= FC_MAX_DIMS; ndim 0 is a scalar) into the dense C-contiguous dst, casting
 * to dst_dtype on the way when it differs from src_dtype (see fc_kern_cast()).
 * With equal dtypes the kernel only moves bytes, so any dtype works.
 *
 * dst holds prod(size) * fc_dtype_size(dst_dtype) bytes; an empty box writes
 * nothing.
 *
 * Returns FC_OK, or FC_EINVAL (bad ndim, negative dims, a box outside the
 * tensor, an unsupported cast, NULL pointer, overflow; the message names the dim).
 */
int fc_kern_pack_shard(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype, const void *src, int ndim,
                       const int64_t *src_shape, const int64_t *offset, const int64_t *size);

/* ---- CUDA device management (device_cuda.cu / cuda_stub.c) --------------- */

/* 1 if CUDA was built in and at least one device is usable, else 0.  Never fails. */
int fc_cuda_available(void);

/* Number of visible devices.  FC_OK, FC_ENOTSUP (not built), FC_ECUDA (driver error). */
int fc_cuda_device_count(int *out);

/* Make `device` current for the calling thread.  FC_OK, FC_ENOTSUP, FC_ECUDA. */
int fc_cuda_set_device(int device);

/*
 * Streams: *out is a new non-blocking stream owned by the caller, destroyed
 * with fc_cuda_stream_free() (accepts NULL).  fc_cuda_stream_sync() waits for
 * all work queued on a stream (NULL: the default stream) and reports any
 * asynchronous kernel failure.  FC_OK, FC_ENOTSUP, FC_ECUDA.
 */
int fc_cuda_stream_new(void **out);
void fc_cuda_stream_free(void *stream);
int fc_cuda_stream_sync(void *stream);

/*
 * struct fc_dev_buf - device memory owned by whoever holds the struct.
 * Initialise with FC_DEV_BUF_INIT; fc_dev_buf_free() returns it to that state
 * and accepts an initialised, never-allocated buffer.
 */
struct fc_dev_buf {
    void *ptr; /* a device pointer: never dereference it on the host */
    size_t nbytes;
};
/* clang-format off */
#define FC_DEV_BUF_INIT { NULL, 0 }
/* clang-format on */

/* Allocate nbytes (0 allowed: ptr stays NULL).  buf must be empty.  FC_OK, FC_ENOTSUP, FC_ECUDA. */
int fc_dev_buf_alloc(struct fc_dev_buf *buf, size_t nbytes);
void fc_dev_buf_free(struct fc_dev_buf *buf);

/*
 * Copies between host memory and [offset, offset + nbytes) of a device buffer.
 * With stream NULL the copy is complete on return; otherwise it is queued on
 * the stream and the host memory must stay valid until fc_cuda_stream_sync()
 * (use pinned memory for a truly asynchronous copy).
 * FC_OK, FC_EINVAL (range outside the buffer), FC_ENOTSUP, FC_ECUDA.
 */
int fc_dev_buf_upload(struct fc_dev_buf *dst, size_t offset, const void *src, size_t nbytes,
                      void *stream);
int fc_dev_buf_download(void *dst, const struct fc_dev_buf *src, size_t offset, size_t nbytes,
                        void *stream);

/* Device-to-device copy on a stream (the yardstick of the kernel benchmarks). */
int fc_dev_buf_copy(struct fc_dev_buf *dst, size_t dst_offset, const struct fc_dev_buf *src,
                    size_t src_offset, size_t nbytes, void *stream);

/*
 * struct fc_pinned_buf - page-locked host memory (cudaMallocHost), owned by
 * whoever holds the struct; release only with fc_pinned_buf_free(), never
 * fc_free().  Same INIT/free conventions as struct fc_dev_buf.
 */
struct fc_pinned_buf {
    void *ptr; /* host pointer */
    size_t nbytes;
};
/* clang-format off */
#define FC_PINNED_BUF_INIT { NULL, 0 }
/* clang-format on */

int fc_pinned_buf_alloc(struct fc_pinned_buf *buf, size_t nbytes);
void fc_pinned_buf_free(struct fc_pinned_buf *buf);

/* ---- CUDA kernels (cast_cuda.cu, permute_cuda.cu, pack_cuda.cu) ----------- */

/*
 * The CUDA twins of the CPU kernels above: same arguments and semantics, but
 * every data pointer is a device pointer (aligned to its element size), and the
 * work is queued on `stream` (opaque cudaStream_t, NULL = default stream):
 * call fc_cuda_stream_sync() before reading the result.  Launch failures are
 * reported at once; faults during execution surface at the next sync.
 *
 * Return FC_OK, FC_EINVAL (as the CPU twin, plus misaligned pointers),
 * FC_ECUDA (launch failure), or FC_ENOTSUP when CUDA was not built in.
 */
int fc_cuda_cast(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype, const void *src, int64_t n,
                 void *stream);
int fc_cuda_conv2d_to_linear(void *dst, const void *src, size_t elem_size, const int64_t shape[4],
                             int64_t o0, int64_t rows, void *stream);
int fc_cuda_pack_shard(fc_dtype dst_dtype, void *dst, fc_dtype src_dtype, const void *src, int ndim,
                       const int64_t *src_shape, const int64_t *offset, const int64_t *size,
                       void *stream);

#ifdef __cplusplus
}
#endif

#endif
