/*
 * bench_kernels_cuda.c - GPU kernel throughput as a ratio of a device-to-device
 * copy of the same bytes, measured in the same run (issue target >= 0.8x).
 * Reported, never asserted.  Without a device it says so and exits 0.
 *
 * Usage: bench_kernels_cuda [MiB]   (default 1024 MiB of float32 input)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fc_error.h"
#include "fc_kernels.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        const int rc_ = (expr);                                                                    \
        if (rc_ < 0) {                                                                             \
            fprintf(stderr, "bench_kernels_cuda: %s: %s\n", #expr, fc_error_last());              \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Best of 5 runs of one operation, in seconds. */
#define TIME_BEST(best, stmt)                                                                      \
    do {                                                                                           \
        best = 1e30;                                                                               \
        for (int rep_ = 0; rep_ < 5; rep_++) {                                                     \
            const double t0_ = now();                                                              \
            CHECK(stmt);                                                                           \
            CHECK(fc_cuda_stream_sync(stream));                                                    \
            const double t_ = now() - t0_;                                                         \
            best = t_ < best ? t_ : best;                                                          \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    const long mib = argc > 1 ? strtol(argv[1], NULL, 10) : 1024;
    const int64_t n = (int64_t)mib * 1024 * 1024 / 4; /* float32 elements */
    struct fc_dev_buf a = FC_DEV_BUF_INIT, b = FC_DEV_BUF_INIT, c = FC_DEV_BUF_INIT;
    void *stream = NULL;
    double t_copy, t_cast, t_perm, t_pack;
    if (!fc_cuda_available()) {
        printf("bench_kernels_cuda: SKIPPED (no CUDA device or CUDA not built in)\n");
        return 0;
    }
    CHECK(fc_cuda_stream_new(&stream));
    CHECK(fc_dev_buf_alloc(&a, (size_t)n * 4));
    CHECK(fc_dev_buf_alloc(&b, (size_t)n * 4));
    CHECK(fc_dev_buf_alloc(&c, (size_t)n * 4));
    /* Yardstick: copy the fp32 input (n*4 bytes read + written). */
    TIME_BEST(t_copy, fc_dev_buf_copy(&b, 0, &a, 0, (size_t)n * 4, stream));
    /* fp32 -> bf16: reads n*4, writes n*2. */
    TIME_BEST(t_cast, fc_cuda_cast(FC_DTYPE_BFLOAT16, b.ptr, FC_DTYPE_FLOAT32, a.ptr, n, stream));
    /* conv2d -> linear on a [O, 3, 14, 14] fp32 weight of the same bytes. */
    const int64_t o = n / (3 * 14 * 14);
    const int64_t shape[4] = { o, 3, 14, 14 };
    TIME_BEST(t_perm, fc_cuda_conv2d_to_linear(b.ptr, a.ptr, 4, shape, 0, o, stream));
    /* Cut [rows, 4096] into 8 Shard(0) pieces, fused with fp32 -> bf16. */
    const int64_t cols = 4096, rows = n / cols;
    const int64_t src_shape[2] = { rows, cols };
    void *dst[8];
    for (int r = 0; r < 8; r++)
        dst[r] = (char *)c.ptr + (size_t)r * (size_t)((rows + 7) / 8) * (size_t)cols * 2;
    const struct fc_kern_mesh mesh = { 1, { 8 }, { 0 } };
    TIME_BEST(t_pack, fc_cuda_pack_chunks(FC_DTYPE_BFLOAT16, dst, FC_DTYPE_FLOAT32, a.ptr, 2,
                                          src_shape, &mesh, stream));
    const double gb = (double)n * 4 / 1e9;
    printf("input %.2f GB fp32 (best of 5)\n", gb);
    printf("d2d copy (yardstick)        %8.3f ms  %7.1f GB/s read+write\n", t_copy * 1e3,
           2 * gb / t_copy);
    printf("cast fp32->bf16             %8.3f ms  ratio to copy %.2f (bytes moved 0.75x)\n",
           t_cast * 1e3, t_copy / t_cast);
    printf("conv2d->linear permute      %8.3f ms  ratio to copy %.2f\n", t_perm * 1e3,
           t_copy / t_perm);
    printf("pack 8 shards + cast        %8.3f ms  ratio to copy %.2f (bytes moved 0.75x)\n",
           t_pack * 1e3, t_copy / t_pack);
    fc_dev_buf_free(&a);
    fc_dev_buf_free(&b);
    fc_dev_buf_free(&c);
    fc_cuda_stream_free(stream);
    return 0;
}
