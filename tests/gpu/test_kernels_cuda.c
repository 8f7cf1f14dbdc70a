/*
 * test_kernels_cuda.c - every CUDA kernel against its CPU twin, bit for bit.
 *
 * Why against the CPU and not torch: the CPU kernels are the reference and are
 * themselves checked against torch (tests/unit/test_kernels_cpu.c); here any
 * difference, NaN patterns included, is a device bug.  Shapes are odd on
 * purpose (ragged tails, empty boxes, element offsets into buffers), and the
 * cast inputs cover all 65536 16-bit patterns plus random and special 32/64-bit
 * ones.  Every test skip()s without a device, so the binary builds and passes on
 * any CUDA=1 machine and means something where a GPU exists.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fc_test.h"

#include "fc_kernels.h"
#include "mesh.h"

static const fc_dtype fc_g_float[4] = { FC_DTYPE_FLOAT64, FC_DTYPE_FLOAT32, FC_DTYPE_FLOAT16,
                                        FC_DTYPE_BFLOAT16 };

static uint64_t fc_g_rng = 0x853c49e6748fea9bu;

static uint64_t fc_g_next(void)
{
    uint64_t z = (fc_g_rng += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static int64_t fc_g_rand(int64_t bound)
{
    return bound <= 0 ? 0 : (int64_t)(fc_g_next() % (uint64_t)bound);
}

static void fc_g_fill_random(void *buf, size_t nbytes)
{
    unsigned char *const p = buf;
    for (size_t i = 0; i < nbytes; i++)
        p[i] = (unsigned char)fc_g_next();
}

/* Values that exercise every rounding/NaN branch of the casts. */
static void fc_g_fill_cast_inputs(fc_dtype dt, void *buf, int64_t n)
{
    static const uint32_t f32_special[] = {
        0x0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xff812345,
        0x00000001, 0x807fffff, 0x7f7fffff, 0x3f808000, 0x3f818000, 0x7f7f8000, 0x477fe000,
        0x477ff000, 0x387fe000, 0x33000000, 0x33000001, 0x33c00000, 0x3f801000,
    };
    static const uint64_t f64_special[] = {
        0x0, 0x8000000000000000u, 0x7ff0000000000000u, 0x7ff0000000000001u,
        0xfff4000000000000u, 0x3ff0100000001000u, 0x3ff0020000001000u, 0x47effffff0000000u,
        0x36a0000000000000u, 0x3690000000000000u, 0x3690000000000001u, 0x0000000000000001u,
    };
    unsigned char *const p = buf;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t r = fc_g_next();
        if (dt == FC_DTYPE_FLOAT16 || dt == FC_DTYPE_BFLOAT16) {
            const uint16_t v = (uint16_t)i; /* every pattern once n >= 65536 */
            memcpy(p + 2 * i, &v, 2);
        } else if (dt == FC_DTYPE_FLOAT32) {
            uint32_t v = (uint32_t)r;
            if ((r >> 60) == 0)
                v = f32_special[(r >> 32) % (sizeof(f32_special) / sizeof(f32_special[0]))];
            else if ((r >> 60) < 4)
                v = (v & 0x807fffffu) | ((uint32_t)(100 + (r >> 40) % 48) << 23);
            memcpy(p + 4 * i, &v, 4);
        } else {
            uint64_t v = fc_g_next();
            if ((r >> 60) == 0)
                v = f64_special[(r >> 32) % (sizeof(f64_special) / sizeof(f64_special[0]))];
            else if ((r >> 60) < 8)
                v = (v & UINT64_C(0x800fffffffffffff)) | ((uint64_t)(870 + (r >> 40) % 290) << 52);
            memcpy(p + 8 * i, &v, 8);
        }
    }
}

/* Device scratch: upload `nbytes` of host at element offset, run, download. */
struct fc_g_dev {
    struct fc_dev_buf src;
    struct fc_dev_buf dst;
};

static void fc_g_dev_release(struct fc_g_dev *d)
{
    fc_dev_buf_free(&d->src);
    fc_dev_buf_free(&d->dst);
}

static int fc_g_setup(void **state)
{
    (void)state;
    if (fc_cuda_available())
        assert_fc_ok(fc_cuda_set_device(0));
    return 0;
}

static void test_cuda_cast_matches_cpu_for_every_dtype_pair(void **state)
{
    static const int64_t counts[] = { 1, 7, 255, 65536, 1000003 };
    void *stream = NULL;
    (void)state;
    if (!fc_cuda_available())
        skip();
    assert_fc_ok(fc_cuda_stream_new(&stream));
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        const int64_t n = counts[c];
        for (int si = 0; si < 4; si++) {
            const size_t ses = fc_dtype_size(fc_g_float[si]);
            unsigned char *const in = malloc((size_t)n * ses);
            assert_non_null(in);
            fc_g_fill_cast_inputs(fc_g_float[si], in, n);
            for (int di = 0; di < 4; di++) {
                const size_t des = fc_dtype_size(fc_g_float[di]);
                /* One element of offset into each buffer: not 256-byte aligned. */
                struct fc_g_dev d = { FC_DEV_BUF_INIT, FC_DEV_BUF_INIT };
                unsigned char *const want = malloc((size_t)n * des);
                unsigned char *const got = malloc((size_t)n * des);
                assert_non_null(want);
                assert_non_null(got);
                assert_fc_ok(fc_kern_cast(fc_g_float[di], want, fc_g_float[si], in, n));
                assert_fc_ok(fc_dev_buf_alloc(&d.src, (size_t)(n + 1) * ses));
                assert_fc_ok(fc_dev_buf_alloc(&d.dst, (size_t)(n + 1) * des));
                assert_fc_ok(fc_dev_buf_upload(&d.src, ses, in, (size_t)n * ses, stream));
                assert_fc_ok(fc_cuda_cast(fc_g_float[di], (char *)d.dst.ptr + des,
                                          fc_g_float[si], (char *)d.src.ptr + ses, n, stream));
                assert_fc_ok(fc_dev_buf_download(got, &d.dst, des, (size_t)n * des, stream));
                assert_fc_ok(fc_cuda_stream_sync(stream));
                for (int64_t i = 0; i < n; i++) {
                    if (memcmp(got + (size_t)i * des, want + (size_t)i * des, des) != 0) {
                        uint64_t a = 0;
                        uint64_t b = 0;
                        uint64_t x = 0;
                        memcpy(&a, got + (size_t)i * des, des);
                        memcpy(&b, want + (size_t)i * des, des);
                        memcpy(&x, in + (size_t)i * ses, ses);
                        print_error("%s -> %s: input 0x%" PRIx64 ": device 0x%" PRIx64
                                    ", cpu 0x%" PRIx64 "\n", fc_dtype_name(fc_g_float[si]),
                                    fc_dtype_name(fc_g_float[di]), x, a, b);
                        fail();
                    }
                }
                fc_g_dev_release(&d);
                free(want);
                free(got);
            }
            free(in);
        }
    }
    fc_cuda_stream_free(stream);
}

static void fc_g_check_conv(const int64_t s[4], size_t es, int64_t slab)
{
    const size_t row = (size_t)(s[1] * s[2] * s[3]) * es;
    const size_t nbytes = (size_t)s[0] * row;
    unsigned char *const in = malloc(nbytes + 1);
    unsigned char *const want = malloc(nbytes + 1);
    unsigned char *const got = malloc(nbytes + 1);
    struct fc_g_dev d = { FC_DEV_BUF_INIT, FC_DEV_BUF_INIT };

    assert_non_null(in);
    assert_non_null(want);
    assert_non_null(got);
    fc_g_fill_random(in, nbytes);
    assert_fc_ok(fc_kern_conv2d_to_linear(want, in, es, s, 0, s[0]));
    assert_fc_ok(fc_dev_buf_alloc(&d.src, nbytes));
    assert_fc_ok(fc_dev_buf_alloc(&d.dst, nbytes));
    assert_fc_ok(fc_dev_buf_upload(&d.src, 0, in, nbytes, NULL));
    for (int64_t o0 = 0; o0 < s[0]; o0 += slab) {
        const int64_t rows = o0 + slab > s[0] ? s[0] - o0 : slab;
        assert_fc_ok(fc_cuda_conv2d_to_linear((char *)d.dst.ptr + (size_t)o0 * row,
                                              (char *)d.src.ptr + (size_t)o0 * row, es, s, o0,
                                              rows, NULL));
    }
    assert_fc_ok(fc_cuda_stream_sync(NULL));
    assert_fc_ok(fc_dev_buf_download(got, &d.dst, 0, nbytes, NULL));
    assert_memory_equal(got, want, nbytes);
    fc_g_dev_release(&d);
    free(in);
    free(want);
    free(got);
}

static void test_cuda_conv2d_to_linear_matches_cpu(void **state)
{
    static const int64_t shapes[][4] = {
        { 3, 5, 3, 3 }, { 1, 1, 1, 1 }, { 4, 3, 1, 1 }, { 2, 1, 5, 2 }, { 7, 6, 2, 5 },
        { 5, 17, 3, 1 }, { 0, 4, 3, 3 }, { 3, 0, 3, 3 }, { 64, 128, 3, 3 }, { 9, 3, 7, 7 },
    };
    static const size_t sizes[] = { 1, 2, 3, 4, 8, 16 };
    (void)state;
    if (!fc_cuda_available())
        skip();
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
            fc_g_check_conv(shapes[k], sizes[z], shapes[k][0] > 0 ? shapes[k][0] : 1);
            fc_g_check_conv(shapes[k], sizes[z], 2);
        }
}

static int64_t fc_g_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* A random box of a random shape: device pack vs CPU pack. */
static void fc_g_check_box(fc_dtype ddt, fc_dtype sdt)
{
    int64_t shape[FC_MAX_DIMS];
    int64_t off[FC_MAX_DIMS];
    int64_t size[FC_MAX_DIMS];
    const int ndim = (int)fc_g_rand(6);
    const size_t des = fc_dtype_size(ddt);
    const size_t ses = fc_dtype_size(sdt);
    int64_t snumel;
    int64_t bnumel;
    unsigned char *src;
    unsigned char *want;
    unsigned char *got;
    struct fc_g_dev d = { FC_DEV_BUF_INIT, FC_DEV_BUF_INIT };

    for (int dd = 0; dd < ndim; dd++) {
        shape[dd] = fc_g_rand(8) == 0 ? 0 : 1 + fc_g_rand(9);
        switch (fc_g_rand(3)) {
        case 0: off[dd] = 0, size[dd] = shape[dd]; break;
        case 1:
            size[dd] = shape[dd] > 0 ? 1 : 0;
            off[dd] = fc_g_rand(shape[dd] - size[dd] + 1);
            break;
        default:
            size[dd] = fc_g_rand(shape[dd] + 1);
            off[dd] = fc_g_rand(shape[dd] - size[dd] + 1);
            break;
        }
    }
    snumel = fc_g_numel(ndim, shape);
    bnumel = fc_g_numel(ndim, size);
    src = malloc((size_t)snumel * ses + 1);
    want = malloc((size_t)bnumel * des + 1);
    got = malloc((size_t)bnumel * des + 1);
    assert_non_null(src);
    assert_non_null(want);
    assert_non_null(got);
    fc_g_fill_random(src, (size_t)snumel * ses);
    assert_fc_ok(fc_kern_pack_shard(ddt, want, sdt, src, ndim, shape, off, size));
    assert_fc_ok(fc_dev_buf_alloc(&d.src, (size_t)snumel * ses + ses));
    assert_fc_ok(fc_dev_buf_alloc(&d.dst, (size_t)bnumel * des + des));
    assert_fc_ok(fc_dev_buf_upload(&d.src, ses, src, (size_t)snumel * ses, NULL));
    assert_fc_ok(fc_cuda_pack_shard(ddt, (char *)d.dst.ptr + des, sdt, (char *)d.src.ptr + ses,
                                    ndim, shape, off, size, NULL));
    assert_fc_ok(fc_cuda_stream_sync(NULL));
    assert_fc_ok(fc_dev_buf_download(got, &d.dst, des, (size_t)bnumel * des, NULL));
    assert_memory_equal(got, want, (size_t)bnumel * des);
    fc_g_dev_release(&d);
    free(src);
    free(want);
    free(got);
}

static void test_cuda_pack_shard_matches_cpu_without_cast(void **state)
{
    (void)state;
    if (!fc_cuda_available())
        skip();
    for (int dt = 1; dt < FC_DTYPE_COUNT; dt++)
        for (int k = 0; k < 40; k++)
            fc_g_check_box((fc_dtype)dt, (fc_dtype)dt);
}

static void test_cuda_pack_shard_matches_cpu_with_every_cast(void **state)
{
    (void)state;
    if (!fc_cuda_available())
        skip();
    for (int si = 0; si < 4; si++)
        for (int di = 0; di < 4; di++)
            for (int k = 0; k < 40; k++)
                fc_g_check_box(fc_g_float[di], fc_g_float[si]);
}

/*
 * Every rank's box of a hand-built mesh (fc_mesh_box, Shard(dims[i]) or
 * Replicate() for -1 on mesh dim i) packed on the device equals the CPU pack.
 */
static void fc_g_check_mesh_boxes(fc_dtype ddt, fc_dtype sdt, int ndim, const int64_t *shape,
                                  int mdim, const int64_t *msize, const int *dims)
{
    struct fc_mesh mesh;
    struct fc_dim_placement pl[FC_MESH_MAX_DIMS];
    const size_t des = fc_dtype_size(ddt);
    const size_t ses = fc_dtype_size(sdt);
    const int64_t snumel = fc_g_numel(ndim, shape);
    unsigned char *const src = malloc((size_t)snumel * ses + 1);
    struct fc_dev_buf dsrc = FC_DEV_BUF_INIT;

    memset(&mesh, 0, sizeof(mesh));
    mesh.ndim = mdim;
    for (int i = 0; i < mdim; i++) {
        mesh.size[i] = (int)msize[i];
        pl[i].kind = dims[i] < 0 ? FC_DIM_REPLICATE : FC_DIM_SHARD;
        pl[i].dim = dims[i] < 0 ? 0 : dims[i];
        pl[i].split = 1;
    }
    assert_non_null(src);
    fc_g_fill_random(src, (size_t)snumel * ses);
    assert_fc_ok(fc_dev_buf_alloc(&dsrc, (size_t)snumel * ses + 16));
    assert_fc_ok(fc_dev_buf_upload(&dsrc, 0, src, (size_t)snumel * ses, NULL));
    for (int r = 0; r < fc_mesh_world_size(&mesh); r++) {
        int64_t off[FC_MAX_DIMS];
        int64_t size[FC_MAX_DIMS];
        struct fc_dev_buf ddst = FC_DEV_BUF_INIT;
        assert_fc_ok(fc_mesh_box(&mesh, pl, ndim, shape, r, off, size));
        const size_t nbytes = (size_t)fc_g_numel(ndim, size) * des;
        unsigned char *const want = malloc(nbytes + 1);
        unsigned char *const got = malloc(nbytes + 1);
        assert_true(want != NULL && got != NULL);
        assert_fc_ok(fc_dev_buf_alloc(&ddst, nbytes + 16));
        assert_fc_ok(fc_kern_pack_shard(ddt, want, sdt, src, ndim, shape, off, size));
        assert_fc_ok(fc_cuda_pack_shard(ddt, ddst.ptr, sdt, dsrc.ptr, ndim, shape, off, size, NULL));
        assert_fc_ok(fc_cuda_stream_sync(NULL));
        assert_fc_ok(fc_dev_buf_download(got, &ddst, 0, nbytes, NULL));
        assert_memory_equal(got, want, nbytes);
        free(want);
        free(got);
        fc_dev_buf_free(&ddst);
    }
    fc_dev_buf_free(&dsrc);
    free(src);
}

static void test_cuda_pack_matches_cpu_on_1d_and_2d_mesh_boxes(void **state)
{
    static const int64_t shape3[3] = { 7, 5, 6 };
    static const int64_t meshes[][2] = { { 2, 2 }, { 2, 3 }, { 3, 3 }, { 2, 4 } };
    (void)state;
    if (!fc_cuda_available())
        skip();
    for (int d = 0; d < 3; d++)
        for (int64_t n = 1; n <= 9; n++) {
            fc_g_check_mesh_boxes(FC_DTYPE_FLOAT32, FC_DTYPE_FLOAT32, 3, shape3, 1, &n, &d);
            fc_g_check_mesh_boxes(FC_DTYPE_BFLOAT16, FC_DTYPE_FLOAT32, 3, shape3, 1, &n, &d);
        }
    for (size_t k = 0; k < sizeof(meshes) / sizeof(meshes[0]); k++)
        for (int a = -1; a < 3; a++)
            for (int b = -1; b < 3; b++) {
                const int dims[2] = { a, b };
                fc_g_check_mesh_boxes(FC_DTYPE_FLOAT16, FC_DTYPE_FLOAT64, 3, shape3, 2,
                                      meshes[k], dims);
                fc_g_check_mesh_boxes(FC_DTYPE_INT64, FC_DTYPE_INT64, 3, shape3, 2, meshes[k],
                                      dims);
            }
}

static void test_cuda_rejects_misaligned_pointers_and_bad_ranges(void **state)
{
    struct fc_dev_buf b = FC_DEV_BUF_INIT;
    const int64_t shape[1] = { 4 };
    const int64_t off[1] = { 1 };
    const int64_t size[1] = { 2 };
    char host[64] = { 0 };
    (void)state;
    if (!fc_cuda_available())
        skip();
    assert_fc_ok(fc_dev_buf_alloc(&b, 64));
    assert_fc_fails(fc_cuda_cast(FC_DTYPE_FLOAT16, b.ptr, FC_DTYPE_FLOAT32, (char *)b.ptr + 2, 4,
                                 NULL), FC_EINVAL, "not aligned");
    assert_fc_fails(fc_cuda_pack_shard(FC_DTYPE_FLOAT32, (char *)b.ptr + 1, FC_DTYPE_FLOAT64,
                                       b.ptr, 1, shape, off, size, NULL), FC_EINVAL,
                    "not aligned");
    assert_fc_fails(fc_cuda_cast(FC_DTYPE_INT32, b.ptr, FC_DTYPE_FLOAT32, b.ptr, 4, NULL),
                    FC_EINVAL, "cannot cast float32 to int32");
    assert_fc_fails(fc_dev_buf_upload(&b, 60, host, 8, NULL), FC_EINVAL, "outside a 64-byte");
    assert_fc_fails(fc_dev_buf_download(host, &b, 65, 0, NULL), FC_EINVAL, "outside");
    fc_dev_buf_free(&b);
    assert_null(b.ptr);
    assert_fc_ok(fc_dev_buf_alloc(&b, 0));
    assert_null(b.ptr);
    fc_dev_buf_free(&b);
}

static void test_cuda_pinned_buffers_round_trip(void **state)
{
    struct fc_pinned_buf p = FC_PINNED_BUF_INIT;
    struct fc_dev_buf b = FC_DEV_BUF_INIT;
    void *stream = NULL;
    (void)state;
    if (!fc_cuda_available())
        skip();
    assert_fc_ok(fc_pinned_buf_alloc(&p, 4096));
    assert_fc_ok(fc_dev_buf_alloc(&b, 4096));
    assert_fc_ok(fc_cuda_stream_new(&stream));
    memset(p.ptr, 0x5a, 4096);
    assert_fc_ok(fc_dev_buf_upload(&b, 0, p.ptr, 4096, stream));
    memset(p.ptr, 0, 2048);
    assert_fc_ok(fc_cuda_stream_sync(stream));
    assert_fc_ok(fc_dev_buf_download(p.ptr, &b, 0, 4096, stream));
    assert_fc_ok(fc_cuda_stream_sync(stream));
    for (size_t i = 0; i < 4096; i++)
        assert_int_equal(((unsigned char *)p.ptr)[i], 0x5a);
    fc_cuda_stream_free(stream);
    fc_dev_buf_free(&b);
    fc_pinned_buf_free(&p);
    assert_null(p.ptr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_cast_matches_cpu_for_every_dtype_pair),
        cmocka_unit_test(test_cuda_conv2d_to_linear_matches_cpu),
        cmocka_unit_test(test_cuda_pack_shard_matches_cpu_without_cast),
        cmocka_unit_test(test_cuda_pack_shard_matches_cpu_with_every_cast),
        cmocka_unit_test(test_cuda_pack_matches_cpu_on_1d_and_2d_mesh_boxes),
        cmocka_unit_test(test_cuda_rejects_misaligned_pointers_and_bad_ranges),
        cmocka_unit_test(test_cuda_pinned_buffers_round_trip),
    };
    return cmocka_run_group_tests_name("kernels_cuda", tests, fc_g_setup, NULL);
}
